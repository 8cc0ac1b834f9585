//! Admission of a batch: the bounds every sample is checked against (finite, within the
//! tiers' windows and the future bound), shared with a cluster node's edge, and the period
//! files a batch needs, created by the calling thread before the writers see it.

use std::sync::Arc;

use super::Shared;
use crate::config::TiersConfig;
use crate::error::RejectReason;
use crate::sample::Sample;
use crate::storage::format::{BUCKET_BLOCK, SLOTS_PER_PAGE};
use crate::time::Timestamp;

/// The period files a batch needs, and the pages of them it stores into, gathered before it
/// is partitioned, so that missing files (a backfill, a gap after downtime) are created and
/// the space of pages written for the first time is reserved by the calling thread before
/// the writers see the batch. Writers never create files or reserve space, so live writes
/// never wait behind either, and a full disk refuses the samples it concerns instead of
/// faulting a writer. Only the (tier, period, chunk) files and the pages some sample
/// actually lands in are created and reserved.
pub(super) struct FilesNeeded<'a> {
    pub(super) shared: &'a Shared,
    /// Distinct (tier, block of buckets) pairs the batch touches, each with the page groups
    /// landing there.
    pub(super) blocks: Vec<BlockNeed>,
    /// Per tier, the entry of `blocks` the last timestamp seen lands in.
    pub(super) current: Vec<Option<usize>>,
    pub(super) last_ts: Option<Timestamp>,
    /// Files or pages that could not be created or reserved: (tier, the span of time they
    /// hold, the series ids whose slots they hold).
    pub(super) failed: Vec<(usize, std::ops::Range<Timestamp>, std::ops::Range<u32>)>,
}

/// One block of buckets (see `storage::format`) of one tier a batch writes into.
pub(super) struct BlockNeed {
    tier: usize,
    /// The start of the period holding the block.
    period_start: Timestamp,
    /// The seconds the block covers.
    span: std::ops::Range<Timestamp>,
    /// The block's first bucket in its period.
    bucket: u32,
    /// Bit `g` set when a sample of a series whose id / `SLOTS_PER_PAGE` is `g` lands in the
    /// block: those series' runs share one page of it.
    groups: Bits,
}

/// A set of small integers, stored from the lowest word used: a batch's ids are often a
/// narrow range far from zero.
#[derive(Default)]
pub(super) struct Bits {
    base: usize,
    words: Vec<u64>,
}

impl Bits {
    #[inline]
    fn insert(&mut self, i: usize) {
        let word = i / 64;
        if self.words.is_empty() {
            self.base = word;
        } else if word < self.base {
            let below = self.base - word;
            self.words.splice(0..0, std::iter::repeat_n(0, below));
            self.base = word;
        }
        let at = word - self.base;
        if at >= self.words.len() {
            self.words.resize(at + 1, 0);
        }
        self.words[at] |= 1 << (i % 64);
    }

    /// The members in ascending order.
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(move |(at, &word)| {
            let base = (self.base + at) * 64;
            std::iter::successors((word != 0).then_some(word), |w| {
                let rest = w & (w - 1);
                (rest != 0).then_some(rest)
            })
            .map(move |w| base + w.trailing_zeros() as usize)
        })
    }
}

impl<'a> FilesNeeded<'a> {
    pub(super) fn new(shared: &'a Shared) -> Self {
        FilesNeeded {
            shared,
            blocks: Vec::new(),
            current: vec![None; shared.config.tiers.len()],
            last_ts: None,
            failed: Vec::new(),
        }
    }

    #[inline]
    pub(super) fn note(&mut self, sample: &Sample, windows: &[Timestamp]) {
        if self.last_ts != Some(sample.ts) {
            self.last_ts = Some(sample.ts);
            for (tier, spec) in self.shared.config.tiers.iter().enumerate() {
                // A batch grouped by series (a cluster message) changes timestamp at every
                // sample but seldom leaves the block of the one before.
                let same_block =
                    self.current[tier].is_some_and(|i| self.blocks[i].span.contains(&sample.ts));
                if same_block && sample.ts >= windows[tier] {
                    continue;
                }
                self.current[tier] = (sample.ts >= windows[tier]).then(|| {
                    let placed = crate::time::place(tier, spec, sample.ts);
                    let bucket = placed.bucket - placed.bucket % BUCKET_BLOCK;
                    let resolution = spec.resolution.secs() as i64;
                    let from = placed.period_start + i64::from(bucket) * resolution;
                    let until = (from + i64::from(BUCKET_BLOCK) * resolution)
                        .min(placed.period_start + spec.period.secs() as i64);
                    match self
                        .blocks
                        .iter()
                        .position(|b| b.tier == tier && b.span.start == from)
                    {
                        Some(i) => i,
                        None => {
                            self.blocks.push(BlockNeed {
                                tier,
                                period_start: placed.period_start,
                                span: from..until,
                                bucket,
                                groups: Bits::default(),
                            });
                            self.blocks.len() - 1
                        }
                    }
                });
            }
        }
        let group = (sample.series.0 / SLOTS_PER_PAGE) as usize;
        for block in self.current.iter().flatten() {
            self.blocks[*block].groups.insert(group);
        }
    }

    /// Creates every needed file that does not exist, counted as on-demand creations, then
    /// reserves the space of the pages the batch stores into. A file that cannot be created
    /// or a page that cannot get its space (a full disk) is remembered, so the samples that
    /// need it are refused whole instead of landing in some tiers only.
    pub(super) fn create_missing(&mut self) {
        let storage = &self.shared.storage;
        let slots = self.shared.config.engine.series_per_chunk;
        let groups_per_chunk = (slots / SLOTS_PER_PAGE) as usize;
        let mut periods: Vec<(usize, Timestamp, Vec<u64>)> = Vec::new();
        for need in &self.blocks {
            let at = match periods
                .iter()
                .position(|(tier, start, _)| *tier == need.tier && *start == need.period_start)
            {
                Some(at) => at,
                None => {
                    periods.push((need.tier, need.period_start, Vec::new()));
                    periods.len() - 1
                }
            };
            let chunks = &mut periods[at].2;
            for group in need.groups.iter() {
                let chunk = group / groups_per_chunk;
                if chunk / 64 >= chunks.len() {
                    chunks.resize(chunk / 64 + 1, 0);
                }
                chunks[chunk / 64] |= 1 << (chunk % 64);
            }
        }
        for (tier, start, chunks) in periods {
            let missing = storage.missing_chunks(tier, start, &chunks);
            if missing.is_empty() {
                continue;
            }
            let created =
                storage.create_files(tier, start, &missing, crate::storage::Creation::OnDemand);
            let period = self.shared.config.tiers[tier].period.secs() as i64;
            for (chunk, e) in created.failed {
                tracing::error!(error = %e, "cannot create a period file; refusing the samples that need it");
                self.failed.push((
                    tier,
                    start..start.saturating_add(period),
                    chunk * slots..(chunk * slots).saturating_add(slots),
                ));
            }
        }
        for need in &self.blocks {
            // Runs of page groups of one chunk: (chunk, first group in it, groups).
            let mut runs: Vec<(u32, usize, usize)> = Vec::new();
            for group in need.groups.iter() {
                let (chunk, at) = ((group / groups_per_chunk) as u32, group % groups_per_chunk);
                match runs.last_mut() {
                    Some((c, first, n)) if *c == chunk && *first + *n == at => *n += 1,
                    _ => runs.push((chunk, at, 1)),
                }
            }
            for (chunk, first, n) in runs {
                // None: the period was dropped meanwhile, or its file could not be created
                // (its samples are refused already); the writers skip it too.
                let Some(file) = storage.writable_file(need.tier, need.period_start, chunk) else {
                    continue;
                };
                let first_slot = (first as u32) * SLOTS_PER_PAGE;
                if file
                    .reserve_slots(need.bucket, first_slot, n as u32 * SLOTS_PER_PAGE)
                    .is_ok()
                {
                    continue;
                }
                // Some page of the run cannot get its space: find which, so the samples of
                // the others still land.
                for page in 0..n as u32 {
                    let slot = first_slot + page * SLOTS_PER_PAGE;
                    if let Err(e) = file.reserve_slots(need.bucket, slot, SLOTS_PER_PAGE) {
                        tracing::error!(error = %e, "cannot reserve disk for a period file's page; refusing the samples that need it");
                        let id = chunk * slots + slot;
                        self.failed.push((
                            need.tier,
                            need.span.clone(),
                            id..id.saturating_add(SLOTS_PER_PAGE),
                        ));
                    }
                }
            }
        }
    }

    /// True when `sample` needs a file or page that could not be created or reserved.
    pub(super) fn blocked(&self, sample: &Sample, windows: &[Timestamp]) -> bool {
        self.failed.iter().any(|(tier, span, ids)| {
            ids.contains(&sample.series.0)
                && sample.ts >= windows[*tier]
                && span.contains(&sample.ts)
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
