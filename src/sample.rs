//! What the write path takes (a [`Sample`]) and what it says back (a [`BatchReport`] with the
//! samples it refused, counted by [`RejectReason`]).

use crate::error::RejectReason;
use crate::histogram::Observed;
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

/// Observations of one distribution series that arrived bucketed (a Prometheus native
/// histogram's increase, an OTLP histogram point), stored as one update of each bucket
/// that holds `ts`.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedSample {
    /// The series, a distribution ([`crate::SeriesKind::Distribution`]).
    pub series: SeriesId,
    /// Unix seconds.
    pub ts: Timestamp,
    /// The observations.
    pub observed: Observed,
}

impl ObservedSample {
    /// The sample's scalar face, what the checks of a [`Sample`] read: its time and its sum.
    pub(crate) fn as_sample(&self) -> Sample {
        Sample::new(self.series, self.ts, self.observed.sum)
    }
}

/// What the raw tier did with a batch's accepted samples (each also landed in the rollups).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RawCounts {
    /// Points appended to the raw tier.
    pub stored: u64,
    /// Points not newer than the series' last raw point: refused by the raw tier only
    /// (`raw_out_of_order`).
    pub out_of_order: u64,
    /// Points whose value equals the series' last raw value, not stored under
    /// `dedupe_unchanged` (`raw_unchanged`).
    pub unchanged: u64,
    /// Points older than the raw tier's window (`raw_too_old`).
    pub too_old: u64,
    /// Points for which no segment could be had, a file creation having failed
    /// (`raw_storage_unavailable`).
    pub unavailable: u64,
}

impl RawCounts {
    /// Adds `other` to these.
    pub fn add(&mut self, other: &RawCounts) {
        self.stored += other.stored;
        self.out_of_order += other.out_of_order;
        self.unchanged += other.unchanged;
        self.too_old += other.too_old;
        self.unavailable += other.unavailable;
    }

    /// True when the raw tier saw nothing (no raw tier, or no sample).
    pub fn is_empty(&self) -> bool {
        *self == RawCounts::default()
    }

    /// The points not stored, by reason, under their stable names.
    pub fn not_stored(&self) -> [(&'static str, u64); 4] {
        [
            ("raw_out_of_order", self.out_of_order),
            ("raw_unchanged", self.unchanged),
            ("raw_too_old", self.too_old),
            ("raw_storage_unavailable", self.unavailable),
        ]
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
    /// What the raw tier did with the accepted samples (all zero without a raw tier).
    #[serde(skip_serializing_if = "RawCounts::is_empty")]
    pub raw: RawCounts,
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
        self.raw.add(&other.raw);
        for (a, b) in self.rejected.iter_mut().zip(other.rejected) {
            *a += b;
        }
        let room = Self::FIRST_REJECTIONS.saturating_sub(self.first_rejections.len());
        self.first_rejections.extend(
            (other.first_rejections.iter().take(room)).map(|&(at, why)| (at + offset, why)),
        );
    }
}
