//! What the write path takes (a [`Sample`]) and what it says back (a [`BatchReport`] with the
//! samples it refused, counted by [`RejectReason`]).

use crate::registry::SeriesId;
use crate::time::Timestamp;

/// One measurement of one series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// The series, as resolved by [`crate::Engine::series`].
    pub series: SeriesId,
    /// Unix seconds.
    pub ts: Timestamp,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// A sample of `series` at `ts`.
    pub fn new(series: SeriesId, ts: Timestamp, value: f64) -> Sample {
        Sample { series, ts, value }
    }
}

/// Why a sample was refused. Every refusal is counted under its reason, never dropped silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RejectReason {
    /// The value is NaN or infinite.
    NotFinite,
    /// The timestamp is further past now than the configured `future_bound`.
    TooFarInFuture,
    /// The timestamp is older than every tier's retention window.
    TooOld,
    /// The series id was never handed out by this engine's registry.
    UnknownSeries,
    /// The series name or tags could not be parsed.
    InvalidSeries,
    /// A period file the sample needs could not be created (a full disk, say); the sample
    /// landed in no tier.
    StorageUnavailable,
    /// A counter sample not newer than the counter's last sample: its increase cannot be
    /// known without rewriting what was stored (see [`crate::counter`]).
    CounterOutOfOrder,
    /// The write declared a kind (gauge or counter) other than the one an earlier write
    /// fixed for the series.
    KindMismatch,
}

impl RejectReason {
    /// Every reason, in a fixed order (the index of a reason's counter).
    pub const ALL: [RejectReason; 8] = [
        RejectReason::NotFinite,
        RejectReason::TooFarInFuture,
        RejectReason::TooOld,
        RejectReason::UnknownSeries,
        RejectReason::InvalidSeries,
        RejectReason::StorageUnavailable,
        RejectReason::CounterOutOfOrder,
        RejectReason::KindMismatch,
    ];

    /// The reason's stable snake_case name, as reported in stats and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::NotFinite => "not_finite",
            RejectReason::TooFarInFuture => "too_far_in_future",
            RejectReason::TooOld => "too_old",
            RejectReason::UnknownSeries => "unknown_series",
            RejectReason::InvalidSeries => "invalid_series",
            RejectReason::StorageUnavailable => "storage_unavailable",
            RejectReason::CounterOutOfOrder => "counter_out_of_order",
            RejectReason::KindMismatch => "kind_mismatch",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one batch: how many samples landed, and how many were refused and why.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BatchReport {
    /// Samples now in the mapped files (of at least one tier).
    pub accepted: u64,
    /// Refused samples per reason, indexed like [`RejectReason::ALL`].
    pub rejected: [u64; RejectReason::ALL.len()],
    /// The first refusals (at most [`BatchReport::FIRST_REJECTIONS`]): position in the
    /// batch and reason, so a caller can point at the offending input.
    pub first_rejections: Vec<(usize, RejectReason)>,
}

impl BatchReport {
    /// How many refusals [`BatchReport::first_rejections`] keeps.
    pub const FIRST_REJECTIONS: usize = 16;

    /// Refused samples of every reason.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }

    /// Refused samples of one reason.
    pub fn rejected(&self, reason: RejectReason) -> u64 {
        self.rejected[reason.index()]
    }

    pub(crate) fn reject(&mut self, position: usize, reason: RejectReason) {
        self.rejected[reason.index()] += 1;
        if self.first_rejections.len() < Self::FIRST_REJECTIONS {
            self.first_rejections.push((position, reason));
        }
    }

    /// Adds the report of a batch that followed `offset` samples to this one: counts add,
    /// and its first refusals' positions move by `offset`.
    pub fn absorb(&mut self, other: &BatchReport, offset: usize) {
        self.accepted += other.accepted;
        for (a, b) in self.rejected.iter_mut().zip(other.rejected) {
            *a += b;
        }
        let room = Self::FIRST_REJECTIONS.saturating_sub(self.first_rejections.len());
        self.first_rejections.extend(
            (other.first_rejections.iter().take(room)).map(|&(at, why)| (at + offset, why)),
        );
    }
}
