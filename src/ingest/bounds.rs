//! The time bounds every ingest path checks a sample against before its name is resolved:
//! a server's [`super::Sink`] (over this process's engine or a cluster node's log) and
//! `tierdb import`. The rule is the engine's ([`accepted_times`], [`check_value_and_time`]),
//! so a sample is refused for the same reason (`not_finite`, `too_old`,
//! `too_far_in_future`) on every path; what is kept here is when the bounds are taken.

use crate::config::TiersConfig;
use crate::engine::{accepted_times, check_value_and_time};
use crate::error::RejectReason;
use crate::time::Timestamp;

/// The first and last second a sample may have, taken at the first sample after the last
/// flush ([`TimeBounds::retake`]), so a long-lived connection or socket, whose samples were
/// all refused or not, never judges new samples by a "now" from hours ago. Until taken, they
/// hold no second at all, so the first sample takes the slow path that takes them.
pub(crate) struct TimeBounds {
    oldest: Timestamp,
    newest: Timestamp,
}

impl Default for TimeBounds {
    /// Not taken yet.
    fn default() -> TimeBounds {
        TimeBounds {
            oldest: Timestamp::MAX,
            newest: Timestamp::MIN,
        }
    }
}

impl TimeBounds {
    /// Why a sample of `value` at `ts` is refused: [`check_value_and_time`] against the
    /// bounds of `tiers` at the clock's `now`, asked for only when the bounds are taken.
    ///
    /// # Errors
    /// `not_finite`, `too_far_in_future` or `too_old`.
    #[inline]
    pub(crate) fn check<'a>(
        &mut self,
        value: f64,
        ts: Timestamp,
        tiers_now: impl FnOnce() -> (&'a TiersConfig, Timestamp),
    ) -> std::result::Result<(), RejectReason> {
        if value.is_finite() && ts >= self.oldest && ts <= self.newest {
            return Ok(());
        }
        self.take_or_refuse(value, ts, tiers_now)
    }

    /// Takes the bounds when they are not taken yet, then says why the sample is refused,
    /// if it is.
    #[cold]
    #[inline(never)]
    fn take_or_refuse<'a>(
        &mut self,
        value: f64,
        ts: Timestamp,
        tiers_now: impl FnOnce() -> (&'a TiersConfig, Timestamp),
    ) -> std::result::Result<(), RejectReason> {
        if self.oldest > self.newest {
            let (tiers, now) = tiers_now();
            (self.oldest, self.newest) = accepted_times(tiers, now);
        }
        check_value_and_time(value, ts, (self.oldest, self.newest))
    }

    /// Takes the bounds afresh at the next sample: at every flush, with or without samples
    /// queued.
    pub(crate) fn retake(&mut self) {
        *self = TimeBounds::default();
    }
}
