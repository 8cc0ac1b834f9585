//! Admission of a batch: the bounds every sample is checked against (finite, within the
//! tiers' windows and the future bound), shared with a cluster node's edge, and the period
//! files a batch needs, created by the calling thread before the writers see it.

use std::sync::Arc;

use super::Shared;
use crate::config::TiersConfig;
use crate::error::RejectReason;
use crate::sample::Sample;
use crate::time::{align_down, Timestamp};

/// The period files a batch needs, gathered before it is partitioned, so that missing ones
/// (a backfill, a gap after downtime) are created by the calling thread before the writers
/// see the batch. Writers never create files, so live writes never wait behind a creation.
/// Only the (tier, period, chunk) files some sample actually lands in are created.
pub(super) struct FilesNeeded<'a> {
    pub(super) shared: &'a Shared,
    /// Distinct (tier, period) pairs the batch touches, each with the chunks landing there.
    pub(super) periods: Vec<PeriodNeed>,
    /// Per tier, the entry of `periods` the last timestamp seen lands in.
    pub(super) current: Vec<Option<usize>>,
    pub(super) last_ts: Option<Timestamp>,
    pub(super) slot_bits: u32,
    /// Files that could not be created: (tier, period start, chunk).
    pub(super) failed: Vec<(usize, Timestamp, u32)>,
}

/// One period of one tier a batch writes into.
pub(super) struct PeriodNeed {
    tier: usize,
    start: Timestamp,
    /// Bitset: bit `c` set when a sample of chunk `c` lands in this period.
    chunks: Vec<u64>,
}

impl<'a> FilesNeeded<'a> {
    pub(super) fn new(shared: &'a Shared) -> Self {
        FilesNeeded {
            shared,
            periods: Vec::new(),
            current: vec![None; shared.config.tiers.len()],
            last_ts: None,
            slot_bits: shared.config.engine.series_per_chunk.trailing_zeros(),
            failed: Vec::new(),
        }
    }

    #[inline]
    pub(super) fn note(&mut self, sample: &Sample, windows: &[Timestamp]) {
        if self.last_ts != Some(sample.ts) {
            self.last_ts = Some(sample.ts);
            for (tier, spec) in self.shared.config.tiers.iter().enumerate() {
                // A batch grouped by series (a cluster message) changes timestamp at every
                // sample but seldom leaves the period of the one before.
                let same_period = self.current[tier].is_some_and(|i| {
                    let start = self.periods[i].start;
                    sample.ts >= start && sample.ts - start < spec.period.secs() as i64
                });
                if same_period && sample.ts >= windows[tier] {
                    continue;
                }
                self.current[tier] = (sample.ts >= windows[tier]).then(|| {
                    let start = align_down(sample.ts, spec.period);
                    match self
                        .periods
                        .iter()
                        .position(|p| p.tier == tier && p.start == start)
                    {
                        Some(i) => i,
                        None => {
                            self.periods.push(PeriodNeed {
                                tier,
                                start,
                                chunks: Vec::new(),
                            });
                            self.periods.len() - 1
                        }
                    }
                });
            }
        }
        let chunk = (sample.series.0 >> self.slot_bits) as usize;
        let (word, bit) = (chunk / 64, 1u64 << (chunk % 64));
        for period in self.current.iter().flatten() {
            let chunks = &mut self.periods[*period].chunks;
            if word >= chunks.len() {
                chunks.resize(word + 1, 0);
            }
            chunks[word] |= bit;
        }
    }

    /// Creates every needed file that does not exist, counted as on-demand creations. A file
    /// that cannot be created (a full disk) is remembered, so the samples that need it are
    /// refused whole instead of landing in some tiers only.
    pub(super) fn create_missing(&mut self) {
        let storage = &self.shared.storage;
        for need in &self.periods {
            let missing = storage.missing_chunks(need.tier, need.start, &need.chunks);
            if missing.is_empty() {
                continue;
            }
            let created = storage.create_files(
                need.tier,
                need.start,
                &missing,
                crate::storage::Creation::OnDemand,
            );
            for (chunk, e) in created.failed {
                tracing::error!(error = %e, "cannot create a period file; refusing the samples that need it");
                self.failed.push((need.tier, need.start, chunk));
            }
        }
    }

    /// True when `sample` needs a file that could not be created.
    pub(super) fn blocked(&self, sample: &Sample, windows: &[Timestamp]) -> bool {
        let chunk = sample.series.0 >> self.slot_bits;
        self.failed.iter().any(|&(tier, start, c)| {
            let period = self.shared.config.tiers[tier].period.secs() as i64;
            c == chunk
                && sample.ts >= windows[tier]
                && (start..start.saturating_add(period)).contains(&sample.ts)
        })
    }
}

/// What a batch is checked and applied against.
pub(super) struct Bounds {
    /// Per tier, the first second it holds.
    pub(super) windows: Arc<[Timestamp]>,
    /// The first second the raw tier holds (`Timestamp::MAX` without one).
    pub(super) raw_window: Timestamp,
    pub(super) limits: SampleLimits,
}

/// The limits each sample is checked against.
pub(super) struct SampleLimits {
    /// The earliest second any tier holds.
    pub(super) oldest: Timestamp,
    /// The latest second accepted (now + future_bound).
    pub(super) newest: Timestamp,
    /// Ids below this were handed out by the registry.
    pub(super) known_series: usize,
}

/// The first and last second a sample may have at `now` with `config`: the earliest second
/// any tier holds, and now + `future_bound`. A cluster node checks the same bounds before it
/// publishes (src/cluster/edge.rs), so a sample is refused for the same reason either way.
pub(crate) fn accepted_times(config: &TiersConfig, now: Timestamp) -> (Timestamp, Timestamp) {
    let oldest = config
        .tiers
        .iter()
        .map(|t| t.window_start(now))
        .min()
        .unwrap_or(Timestamp::MIN);
    (
        oldest,
        now.saturating_add(config.engine.future_bound.secs() as i64),
    )
}

/// Why a sample of `value` at `ts` is refused before any series' history is looked at:
/// not finite, or outside `bounds` ([`accepted_times`]). One check for the engine and for a
/// cluster node's edge (src/cluster/edge.rs).
#[inline]
pub(crate) fn check_value_and_time(
    value: f64,
    ts: Timestamp,
    (oldest, newest): (Timestamp, Timestamp),
) -> std::result::Result<(), RejectReason> {
    if !value.is_finite() {
        Err(RejectReason::NotFinite)
    } else if ts > newest {
        Err(RejectReason::TooFarInFuture)
    } else if ts < oldest {
        Err(RejectReason::TooOld)
    } else {
        Ok(())
    }
}

/// The bounds a sink checks its samples against, taken at its first sample and again after
/// each flush, so a long-lived sink (a UDP socket's) never keeps a "now" from hours ago. A
/// server connection's sink and a cluster node's edge share it.
#[cfg(feature = "server")]
#[derive(Default)]
pub(crate) struct SinkBounds(Option<(Timestamp, Timestamp)>);

#[cfg(feature = "server")]
impl SinkBounds {
    /// [`check_value_and_time`] against the bounds of `tiers` at `now()`, taken once.
    #[inline]
    pub(crate) fn check(
        &mut self,
        tiers: &TiersConfig,
        now: impl FnOnce() -> Timestamp,
        value: f64,
        ts: Timestamp,
    ) -> std::result::Result<(), RejectReason> {
        let bounds = *self.0.get_or_insert_with(|| accepted_times(tiers, now()));
        check_value_and_time(value, ts, bounds)
    }

    /// Takes the bounds afresh at the next sample.
    pub(crate) fn reset(&mut self) {
        self.0 = None;
    }
}

impl SampleLimits {
    #[inline]
    pub(super) fn check(&self, sample: &Sample) -> std::result::Result<(), RejectReason> {
        check_value_and_time(sample.value, sample.ts, (self.oldest, self.newest))?;
        if sample.series.index() >= self.known_series {
            Err(RejectReason::UnknownSeries)
        } else {
            Ok(())
        }
    }
}
