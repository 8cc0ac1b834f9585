//! Admission of a batch: the bounds every sample is checked against (finite, within the
//! tiers' windows and the future bound), shared with a cluster node's edge, and the period
//! files a batch needs, created by the calling thread before the writers see it.

use std::sync::Arc;

use super::Shared;
use crate::config::TiersConfig;
use crate::error::RejectReason;
use crate::registry::SetPlace;
use crate::sample::Sample;
use crate::storage::format::{BUCKET_BLOCK, SLOTS_PER_PAGE};
use crate::storage::period_file::{LatestPages, WritableFile};
use crate::storage::{parallel, HotChunk};
use crate::time::Timestamp;

/// Threads that reserve a batch's new pages (`fallocate`, and the faults that map them
/// writable), and start the writeback of the blocks it has left: on the 2-core machine the
/// figures in docs/performance.md come from, the writers' own two.
const RESERVE_THREADS: usize = 2;

/// Runs of new pages from which a batch reserves them on [`RESERVE_THREADS`]: fewer (a few
/// new series on a live server) cost less than starting the threads.
const RESERVE_IN_PARALLEL: usize = 16;

/// The period files a batch needs, and the pages of them it stores into, gathered before it
/// is partitioned, so that missing files (a backfill, a gap after downtime) are created and
/// the space of pages written for the first time is reserved by the calling thread before
/// the writers see the batch. Writers never create files or reserve space, so live writes
/// never wait behind either, and a full disk refuses the samples it concerns instead of
/// faulting a writer. Only the (tier, period, chunk) files and the pages some sample
/// actually lands in are created and reserved.
pub(super) struct FilesNeeded<'a> {
    pub(super) shared: &'a Shared,
    /// Distinct (tier, block of buckets) pairs the batch touches.
    blocks: Vec<BlockNeed>,
    /// Distinct sets of blocks the batch's timestamps land in (a block per tier whose
    /// window holds the time), each with the page groups of the samples at those times: a
    /// sample is noted once, not once per tier.
    placements: Vec<Placement>,
    /// Per tier, the entry of `blocks` the last timestamp seen lands in.
    current: Vec<Option<usize>>,
    /// The entry of `placements` whose blocks are `current`.
    placement: usize,
    last_ts: Option<Timestamp>,
    /// The set and page group last noted in `placement`, and whether for a sample that keeps
    /// a latest sample: consecutive ids share a group, so most samples of a batch note
    /// nothing.
    last_group: (u8, usize, bool),
    /// Files or pages that could not be created or reserved: (tier, the span of time they
    /// hold, the places in the tier's set whose slots they hold).
    pub(super) failed: Vec<(usize, std::ops::Range<Timestamp>, std::ops::Range<u32>)>,
}

/// One block of buckets (see `storage::format`) of one tier a batch writes into.
struct BlockNeed {
    tier: usize,
    /// The start of the period holding the block.
    period_start: Timestamp,
    /// The seconds the block covers.
    span: std::ops::Range<Timestamp>,
    /// The block's first bucket in its period.
    bucket: u32,
}

/// Blocks some of a batch's timestamps land in, and the page groups stored into there.
struct Placement {
    /// Per tier, the entry of `FilesNeeded::blocks` (`None` where the tier's window does
    /// not hold the time).
    blocks: Vec<Option<usize>>,
    /// Per tier set, bit `g` set when a sample of a series of the set whose place /
    /// `SLOTS_PER_PAGE` is `g` lands in these blocks and keeps a latest sample (not a
    /// distribution's): those series' runs share one page of each of the set's tiers, and
    /// their entries a page of the latest area.
    groups: Vec<Bits>,
    /// As `groups`, for the samples that keep no latest sample (distributions'): their
    /// records' pages only.
    bare: Vec<Bits>,
}

/// A set of small integers, stored from the lowest word used: a batch's ids are often a
/// narrow range far from zero.
#[derive(Default)]
struct Bits {
    base: usize,
    words: Vec<u64>,
}

impl Bits {
    #[inline]
    fn insert(&mut self, i: usize) {
        self.insert_word(i / 64, 1 << (i % 64));
    }

    /// Adds `bits` to word `word` (the members `word * 64..word * 64 + 64`).
    fn insert_word(&mut self, word: usize, bits: u64) {
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
        self.words[at] |= bits;
    }

    /// The members that are not members of `other`.
    fn difference(&self, other: &Bits) -> Bits {
        let mut out = Bits::default();
        for (at, &bits) in self.words.iter().enumerate() {
            let word = self.base + at;
            let theirs = (word.checked_sub(other.base))
                .and_then(|i| other.words.get(i))
                .copied()
                .unwrap_or(0);
            if bits & !theirs != 0 {
                out.insert_word(word, bits & !theirs);
            }
        }
        out
    }

    /// Adds every member of `other`.
    fn union(&mut self, other: &Bits) {
        for (at, &bits) in other.words.iter().enumerate() {
            if bits != 0 {
                self.insert_word(other.base + at, bits);
            }
        }
    }

    /// The members as runs of consecutive integers, (first, count) in ascending order, read
    /// a word at a time: a batch's ids mostly come in long runs.
    fn runs(&self) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (at, &word) in self.words.iter().enumerate() {
            let mut next = (self.base + at) * 64;
            let mut rest = word;
            while rest != 0 {
                let zeros = rest.trailing_zeros();
                rest >>= zeros;
                let ones = rest.trailing_ones();
                let first = next + zeros as usize;
                match runs.last_mut() {
                    Some((start, n)) if *start + *n == first => *n += ones as usize,
                    _ => runs.push((first, ones as usize)),
                }
                next = first + ones as usize;
                rest = rest.checked_shr(ones).unwrap_or(0);
            }
        }
        runs
    }
}

/// `runs` of page groups ([`Bits::runs`]) cut at chunk boundaries: (chunk, first group in
/// it, groups), for chunks of `per_chunk` groups.
fn chunk_runs(runs: &[(usize, usize)], per_chunk: usize) -> Vec<(u32, usize, usize)> {
    let mut out = Vec::with_capacity(runs.len());
    for &(mut first, mut n) in runs {
        while n > 0 {
            let at = first % per_chunk;
            let here = n.min(per_chunk - at);
            out.push(((first / per_chunk) as u32, at, here));
            first += here;
            n -= here;
        }
    }
    out
}

impl<'a> FilesNeeded<'a> {
    pub(super) fn new(shared: &'a Shared) -> Self {
        FilesNeeded {
            shared,
            blocks: Vec::new(),
            placements: Vec::new(),
            current: vec![None; shared.config.tier_count()],
            placement: 0,
            last_ts: None,
            last_group: (u8::MAX, usize::MAX, false),
            failed: Vec::new(),
        }
    }

    /// Notes the page `sample`, at `place` in its set, stores into in each tier of its set
    /// whose window holds it, with the page of the latest area holding its entry when
    /// `latest` says the sample keeps a latest sample: a comparison or two per sample; the
    /// blocks are looked up only when the time changes.
    #[inline]
    pub(super) fn note(
        &mut self,
        sample: &Sample,
        place: SetPlace,
        windows: &[Timestamp],
        latest: LatestPages,
    ) {
        if self.last_ts != Some(sample.ts) {
            self.last_ts = Some(sample.ts);
            self.place(sample.ts, windows);
        }
        let keeps = latest == LatestPages::Reserve;
        let group = (place.set, (place.position / SLOTS_PER_PAGE) as usize, keeps);
        if group != self.last_group {
            self.last_group = group;
            let placement = &mut self.placements[self.placement];
            let groups = match keeps {
                true => &mut placement.groups,
                false => &mut placement.bare,
            };
            if groups.len() <= place.set() {
                groups.resize_with(place.set() + 1, Bits::default);
            }
            groups[place.set()].insert(group.1);
        }
    }

    /// Points `current` and `placement` at the blocks `ts` lands in, adding those the batch
    /// has not met yet. Out of line, so that [`FilesNeeded::note`] inlines into its loop.
    #[inline(never)]
    fn place(&mut self, ts: Timestamp, windows: &[Timestamp]) {
        let mut moved = self.placements.is_empty();
        for (tier, (_, spec)) in self.shared.config.all_tiers().enumerate() {
            // A batch grouped by series (a cluster message) changes timestamp at every
            // sample but seldom leaves the block of the one before.
            let same_block = self.current[tier].is_some_and(|i| self.blocks[i].span.contains(&ts));
            if same_block && ts >= windows[tier] {
                continue;
            }
            let block = (ts >= windows[tier]).then(|| {
                let placed = crate::time::place(tier, spec, ts);
                let bucket = placed.bucket - placed.bucket % BUCKET_BLOCK;
                let resolution = spec.resolution.secs() as i64;
                let from = placed.period_start + i64::from(bucket) * resolution;
                let until = (from + i64::from(BUCKET_BLOCK) * resolution)
                    .min(spec.period_end(placed.period_start));
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
                        });
                        self.blocks.len() - 1
                    }
                }
            });
            moved |= block != self.current[tier];
            self.current[tier] = block;
        }
        if !moved {
            return;
        }
        self.last_group = (u8::MAX, usize::MAX, false);
        self.placement = match self
            .placements
            .iter()
            .position(|p| p.blocks == self.current)
        {
            Some(i) => i,
            None => {
                self.placements.push(Placement {
                    blocks: self.current.clone(),
                    groups: Vec::new(),
                    bare: Vec::new(),
                });
                self.placements.len() - 1
            }
        };
    }

    /// Per entry of `blocks`, the page groups stored into it as runs by chunk: (chunk,
    /// first group in it, groups, whether the latest area's pages are needed too), those
    /// with a sample that keeps a latest sample first, then those only distributions' samples
    /// store into.
    fn block_runs(&self, groups_per_chunk: usize) -> Vec<Vec<(u32, usize, usize, LatestPages)>> {
        let storage = &self.shared.storage;
        let empty = || self.blocks.iter().map(|_| Bits::default()).collect();
        let (mut groups, mut bare): (Vec<Bits>, Vec<Bits>) = (empty(), empty());
        for placement in &self.placements {
            for &block in placement.blocks.iter().flatten() {
                let set = storage.set_of_tier(self.blocks[block].tier);
                if let Some(noted) = placement.groups.get(set) {
                    groups[block].union(noted);
                }
                if let Some(noted) = placement.bare.get(set) {
                    bare[block].union(noted);
                }
            }
        }
        let runs = |bits: &Bits, latest| {
            (chunk_runs(&bits.runs(), groups_per_chunk).into_iter())
                .map(move |(chunk, first, n)| (chunk, first, n, latest))
        };
        (groups.iter().zip(&bare))
            .map(|(g, b)| {
                (runs(g, LatestPages::Reserve))
                    .chain(runs(&b.difference(g), LatestPages::Leave))
                    .collect()
            })
            .collect()
    }

    /// Creates every needed file that does not exist, counted as on-demand creations, then
    /// reserves the space of the pages the batch stores into. A file that cannot be created
    /// or a page that cannot get its space (a full disk) is remembered, so the samples that
    /// need it are refused whole instead of landing in some tiers only.
    pub(super) fn create_missing(&mut self) {
        let storage = &self.shared.storage;
        let slots = self.shared.config.engine.series_per_chunk;
        let groups_per_chunk = (slots / SLOTS_PER_PAGE) as usize;
        let runs = self.block_runs(groups_per_chunk);
        let mut periods: Vec<(usize, Timestamp, Vec<u64>)> = Vec::new();
        // Per entry of `blocks`, its entry of `periods`.
        let mut period_of: Vec<usize> = Vec::with_capacity(self.blocks.len());
        for (need, runs) in self.blocks.iter().zip(&runs) {
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
            period_of.push(at);
            let chunks = &mut periods[at].2;
            for &(chunk, _, _, _) in runs {
                let chunk = chunk as usize;
                if chunk / 64 >= chunks.len() {
                    chunks.resize(chunk / 64 + 1, 0);
                }
                chunks[chunk / 64] |= 1 << (chunk % 64);
            }
        }
        // Per entry of `periods`, its chunks with their files, created first where missing.
        let mut held: Vec<Vec<HotChunk>> = Vec::with_capacity(periods.len());
        for (tier, start, chunks) in &periods {
            let (tier, start) = (*tier, *start);
            let found = storage.hot_chunks(tier, start, chunks);
            let missing: Vec<u32> = (found.iter()).filter(|c| !c.hot).map(|c| c.chunk).collect();
            if missing.is_empty() {
                held.push(found);
                continue;
            }
            let created =
                storage.create_files(tier, start, &missing, crate::storage::Creation::OnDemand);
            let end = self.shared.config.tier_at(tier).1.period_end(start);
            for (chunk, e) in created.failed {
                tracing::error!(error = %e, "cannot create a period file; refusing the samples that need it");
                self.failed.push((
                    tier,
                    start..end,
                    chunk * slots..(chunk * slots).saturating_add(slots),
                ));
            }
            held.push(storage.hot_chunks(tier, start, chunks));
        }
        // The runs of pages not reserved yet, by (block, file, chunk, first group, groups):
        // for a batch of series written before, none.
        let mut fresh = Vec::new();
        for (((block, need), runs), at) in self.blocks.iter().enumerate().zip(runs).zip(period_of) {
            let files = &held[at];
            for (chunk, first, n, latest) in runs {
                // None: the period was dropped meanwhile, or its file could not be created
                // (its samples are refused already); the writers skip it too.
                let Some(file) = (files.binary_search_by_key(&chunk, |c| c.chunk).ok())
                    .and_then(|i| files[i].file.as_ref())
                else {
                    continue;
                };
                let (first_slot, n_slots) =
                    (first as u32 * SLOTS_PER_PAGE, n as u32 * SLOTS_PER_PAGE);
                if !file.slots_reserved(need.bucket, first_slot, n_slots, latest) {
                    fresh.push((block, file, chunk, first_slot, n_slots, latest));
                }
            }
        }
        if fresh.is_empty() {
            return;
        }
        // Each run's `fallocate` and the faults of its pages (most of the kernel's work for
        // a new series) on a few threads: the writers wait for the batch meanwhile.
        let threads = match fresh.len() >= RESERVE_IN_PARALLEL {
            true => RESERVE_THREADS,
            false => 1,
        };
        let reserved =
            parallel::in_parallel(&fresh, threads, |&(block, file, _, slot, n, latest)| {
                file.reserve_slots(self.blocks[block].bucket, slot, n, latest)
            });
        let mut written_before = Vec::new();
        for (&(block, file, chunk, first_slot, n_slots, latest), result) in
            fresh.iter().zip(reserved)
        {
            let need = &self.blocks[block];
            if result.is_ok() {
                // The batch wrote nothing before this block of the file: the blocks before
                // are done with, for an import of history or of new series.
                let earliest = (self.blocks.iter())
                    .filter(|b| b.tier == need.tier && b.period_start == need.period_start)
                    .all(|b| b.bucket / BUCKET_BLOCK >= need.bucket / BUCKET_BLOCK);
                if earliest
                    && !written_before
                        .iter()
                        .any(|w: &(&WritableFile, u32)| Arc::ptr_eq(w.0.file(), file.file()))
                {
                    written_before.push((file, need.bucket));
                }
                continue;
            }
            // Some page of the run cannot get its space: find which, so the samples of the
            // others still land.
            for slot in (first_slot..first_slot + n_slots).step_by(SLOTS_PER_PAGE as usize) {
                if let Err(e) = file.reserve_slots(need.bucket, slot, SLOTS_PER_PAGE, latest) {
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
        // Only a head start for the close's flush, which makes them durable.
        for result in parallel::in_parallel(&written_before, threads, |&(file, bucket)| {
            file.file().start_writeback_before(bucket)
        }) {
            if let Err(e) = result {
                tracing::debug!(error = %e, "starting writeback failed");
            }
        }
    }

    /// True when `sample`, at `place` in its set, needs a file or page that could not be
    /// created or reserved.
    pub(super) fn blocked(&self, sample: &Sample, place: SetPlace, windows: &[Timestamp]) -> bool {
        let storage = &self.shared.storage;
        self.failed.iter().any(|(tier, span, places)| {
            places.contains(&place.position)
                && storage.set_of_tier(*tier) == place.set()
                && sample.ts >= windows[*tier]
                && span.contains(&sample.ts)
        })
    }
}

/// The places of a batch's series in their tier sets, looked up under one registry lock, and
/// the earliest second each set's tiers hold. Without `[[set]]`s nothing is looked up: every
/// series is at its id in the default set.
pub(crate) struct BatchPlaces {
    /// By the sample's index in the batch; `None` without sets.
    places: Option<Vec<SetPlace>>,
    /// Per set, the earliest second one of its tiers holds; empty without sets (the batch's
    /// own bound is the default set's).
    oldest: Vec<Timestamp>,
}

impl BatchPlaces {
    /// The places of `series`, a batch's series in order, with `windows` (by storage index)
    /// giving each set's earliest second.
    pub(crate) fn of(
        shared: &Shared,
        series: impl IntoIterator<Item = crate::registry::SeriesId>,
        windows: &[Timestamp],
    ) -> BatchPlaces {
        if !shared.registry.has_sets() {
            return BatchPlaces {
                places: None,
                oldest: Vec::new(),
            };
        }
        let config = &shared.config;
        let oldest = (0..config.set_count())
            .map(|set| {
                let range = config.tier_range(set);
                windows[range]
                    .iter()
                    .copied()
                    .min()
                    .unwrap_or(Timestamp::MAX)
            })
            .collect();
        BatchPlaces {
            places: Some(shared.registry.placements(series)),
            oldest,
        }
    }

    /// The place of the batch's sample `index`, of series `series`.
    #[inline]
    pub(crate) fn get(&self, index: usize, series: crate::registry::SeriesId) -> SetPlace {
        match &self.places {
            None => SetPlace::of_id(series),
            Some(places) => places[index],
        }
    }

    /// Whether a sample at `ts` of a series at `place` is older than every tier of its set
    /// holds (where another set's tiers still hold its time, so the batch's bounds let it in).
    #[inline]
    pub(crate) fn too_old(&self, place: SetPlace, ts: Timestamp) -> bool {
        self.oldest
            .get(place.set())
            .is_some_and(|&oldest| ts < oldest)
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
/// any tier of any set holds, and now + `future_bound` (a series' own set may hold less:
/// [`BatchPlaces::too_old`]). Every ingest path checks the same bounds before it queues a
/// sample (src/ingest/bounds.rs), a cluster node's before it publishes, so a sample is refused
/// for the same reason either way.
pub(crate) fn accepted_times(config: &TiersConfig, now: Timestamp) -> (Timestamp, Timestamp) {
    let oldest = (config.all_tiers())
        .map(|(_, t)| t.window_start(now))
        .min()
        .unwrap_or(Timestamp::MIN);
    (
        oldest,
        now.saturating_add(config.engine.future_bound.secs() as i64),
    )
}

/// Why a sample of `value` at `ts` is refused before any series' history is looked at:
/// not finite, or outside `bounds` ([`accepted_times`]). One check for the engine and for
/// every ingest path (src/ingest/bounds.rs), a cluster node's included.
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

#[cfg(test)]
mod tests;
