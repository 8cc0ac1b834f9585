//! The writers: each owns the series [`writer_of`] gives it (by page of a block), so every
//! bucket has exactly one writer and the hot path takes no lock. A large batch is split among
//! the writer threads over bounded crossbeam channels and acknowledged once its samples are in
//! the mapped files. A small one is written by its caller, holding each writer's state in turn:
//! handing a few hundred samples to a thread and waiting for its answer cost more than storing
//! them (a cluster owner applies groups of a few hundred samples, hundreds of times a second).
//! So is every batch of an engine with one writer: its thread then only lets go of idle files.

use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use super::Shared;
use crate::bucket::Last;
use crate::error::Error;
use crate::error::Result;
use crate::fault::Hook;
use crate::registry::{SeriesId, SetPlace};
use crate::sample::{ObservedSample, RawCounts, Sample};
use crate::storage::format::SLOTS_PER_PAGE;
use crate::storage::mapped_cell::WriterSlot;
use crate::storage::period_file::{Latest, WritableFile};
use crate::storage::raw::{SegmentRef, SEGMENT_POINTS};
use crate::time::{place, Timestamp};

/// Jobs queued per writer before a caller waits; each job is a whole batch.
const QUEUE_DEPTH: usize = 64;

/// Batches of at most this many samples are written by their caller rather than handed to
/// the writer threads ([`WriterPool::run`]).
const WRITE_IN_CALLER: usize = 4096;

/// How many samples ahead the writer prefetches bucket cells: enough to cover a cache miss
/// with the work of the samples in between.
const PREFETCH_DISTANCE: usize = 8;

/// An idle writer lets go of files that left the window after this long, so dropped files
/// are unmapped and their disk space freed even when no batch arrives.
const IDLE_EVICTION: std::time::Duration = std::time::Duration::from_secs(1);

/// A sample as a writer stores it: the value its buckets fold in (a counter's increase), and
/// the value its buckets keep as their latest sample's, when known (a counter's raw value;
/// unknown for a delta counter, whose running total no write carries).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Stored {
    /// The sample, its value the one the buckets fold in.
    pub(crate) sample: Sample,
    /// The latest-sample value it leaves in its buckets; `None` leaves it unknown.
    pub(crate) last: Option<f64>,
    /// Where its series' cells are: its tier set, and its place there.
    pub(crate) place: SetPlace,
}

impl Stored {
    /// A sample stored as it comes, which its buckets keep as their latest too.
    pub(crate) fn gauge(sample: Sample, place: SetPlace) -> Stored {
        Stored {
            sample,
            last: Some(sample.value),
            place,
        }
    }
}

/// What a writer thread is asked to do.
pub(crate) enum Job {
    /// Apply `samples` (all owned by this writer), honouring each tier's window start.
    Write {
        samples: Vec<Stored>,
        windows: Arc<[Timestamp]>,
        /// The first second the raw tier holds.
        raw_window: Timestamp,
        reply: Sender<Reply>,
    },
    /// Finish and exit.
    Close,
}

/// A writer's acknowledgement; hands the batch buffer back for reuse. A writer cannot fail
/// a batch (the caller created every file it needs), so there is nothing else to report.
pub(crate) struct Reply {
    writer: usize,
    samples: Vec<Stored>,
    /// What the raw tier did with the batch.
    raw: RawCounts,
}

/// The writers, their threads and their queues.
pub(crate) struct WriterPool {
    queues: Vec<Sender<Job>>,
    /// Each writer's state: its thread holds it for a job, a caller for a batch it writes
    /// itself. One holder at a time keeps each bucket to one writer.
    writers: Vec<Arc<Mutex<Writer>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Emptied per-writer buffers from earlier batches, so batches do not allocate.
    spare: Mutex<Vec<Vec<Vec<Stored>>>>,
}

impl WriterPool {
    /// Starts `n` named writer threads.
    pub(crate) fn start(shared: &Arc<Shared>, n: usize) -> Result<WriterPool> {
        let mut queues = Vec::with_capacity(n);
        let mut writers = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for index in 0..n {
            let (tx, rx) = crossbeam_channel::bounded(QUEUE_DEPTH);
            let published = shared
                .storage
                .writer_slot()?
                .ok_or_else(|| Error::ReadOnly(shared.dir.clone()))?;
            let writer = Arc::new(Mutex::new(Writer::new(Arc::clone(shared), published, n)));
            let served = Arc::clone(&writer);
            let handle = std::thread::Builder::new()
                .name(format!("tierdb-writer-{index}"))
                .spawn(move || serve(&served, &rx, index))
                .map_err(|e| Error::io(&shared.dir, e))?;
            queues.push(tx);
            writers.push(writer);
            threads.push(handle);
        }
        Ok(WriterPool {
            queues,
            writers,
            threads: Mutex::new(threads),
            spare: Mutex::new(Vec::new()),
        })
    }

    /// One empty buffer per writer.
    pub(crate) fn take_buffers(&self) -> Vec<Vec<Stored>> {
        let spare = self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop();
        spare.unwrap_or_else(|| vec![Vec::new(); self.queues.len()])
    }

    /// Has each non-empty buffer applied by its writer, in the caller's thread for a small
    /// batch ([`WRITE_IN_CALLER`]) or when there is one writer (handing the batch to its
    /// thread would only add a wait), else by the writer threads, and waits until all have
    /// applied them; returns what the raw tier did with them.
    pub(crate) fn run(
        &self,
        parts: Vec<Vec<Stored>>,
        windows: &Arc<[Timestamp]>,
        raw_window: Timestamp,
    ) -> Result<RawCounts> {
        if self.queues.len() == 1 || parts.iter().map(Vec::len).sum::<usize>() <= WRITE_IN_CALLER {
            return Ok(self.write_here(parts, windows, raw_window));
        }
        let mut raw = RawCounts::default();
        let (reply_tx, reply_rx) = crossbeam_channel::bounded(parts.len());
        let mut returned: Vec<Vec<Stored>> = Vec::with_capacity(parts.len());
        let mut sent = 0;
        let mut first_error = None;
        for (writer, samples) in parts.into_iter().enumerate() {
            if samples.is_empty() {
                returned.push(samples);
                continue;
            }
            returned.push(Vec::new());
            let job = Job::Write {
                samples,
                windows: Arc::clone(windows),
                raw_window,
                reply: reply_tx.clone(),
            };
            if self.queues[writer].send(job).is_err() {
                first_error.get_or_insert(Error::Poisoned(format!(
                    "writer thread {writer} has stopped"
                )));
            } else {
                sent += 1;
            }
        }
        drop(reply_tx);
        for _ in 0..sent {
            match reply_rx.recv() {
                Ok(reply) => {
                    raw.add(&reply.raw);
                    returned[reply.writer] = reply.samples;
                }
                Err(_) => {
                    first_error.get_or_insert(Error::Poisoned(
                        "a writer thread died mid-batch".to_string(),
                    ));
                    break;
                }
            }
        }
        self.give_back(returned);
        first_error.map_or(Ok(raw), Err)
    }

    /// Writes `parts` in this thread, holding each writer's state in turn.
    fn write_here(
        &self,
        mut parts: Vec<Vec<Stored>>,
        windows: &[Timestamp],
        raw_window: Timestamp,
    ) -> RawCounts {
        let mut raw = RawCounts::default();
        for (writer, samples) in self.writers.iter().zip(&mut parts) {
            if samples.is_empty() {
                continue;
            }
            raw.add(&hold(writer).write(samples, windows, raw_window));
            samples.clear();
        }
        self.give_back(parts);
        raw
    }

    /// Writes samples of distribution series in this thread, holding each sample's writer's
    /// state in turn (so each cell keeps one writer); returns what the raw tier did with
    /// them. StatsD timers and histograms come at a pace a caller's thread keeps up with.
    pub(crate) fn write_distributions(
        &self,
        samples: &[(Sample, SetPlace)],
        windows: &[Timestamp],
        raw_window: Timestamp,
    ) -> RawCounts {
        let n = self.writers.len();
        let mut parts: Vec<Vec<Stored>> = vec![Vec::new(); n];
        for &(sample, place) in samples {
            parts[writer_of(sample.series, n)].push(Stored::gauge(sample, place));
        }
        let mut raw = RawCounts::default();
        for (writer, part) in self.writers.iter().zip(&parts) {
            if !part.is_empty() {
                raw.add(&hold(writer).write_distributions(part, windows, raw_window));
            }
        }
        raw
    }

    /// Writes observations that arrived bucketed into their distribution series' buckets,
    /// in this thread, as [`WriterPool::write_distributions`] does values. The raw tier keeps
    /// no point for them: they carry no single value.
    pub(crate) fn write_observed(
        &self,
        samples: &[(&ObservedSample, SetPlace)],
        windows: &[Timestamp],
    ) {
        let n = self.writers.len();
        let mut parts: Vec<Vec<(&ObservedSample, SetPlace)>> = vec![Vec::new(); n];
        for &(sample, place) in samples {
            parts[writer_of(sample.series, n)].push((sample, place));
        }
        for (writer, part) in self.writers.iter().zip(&parts) {
            if !part.is_empty() {
                hold(writer).write_observed(part, windows);
            }
        }
    }

    /// Keeps a batch's emptied buffers for the next batch, when every writer's came back.
    fn give_back(&self, buffers: Vec<Vec<Stored>>) {
        if buffers.iter().all(Vec::is_empty) && buffers.len() == self.queues.len() {
            self.spare
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(buffers);
        }
    }

    /// Asks every writer to finish and waits for it.
    pub(crate) fn stop(&self) -> Result<()> {
        for queue in &self.queues {
            let _ = queue.send(Job::Close);
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        let mut result = Ok(());
        for handle in threads {
            if handle.join().is_err() {
                result = Err(Error::Poisoned("a writer thread panicked".to_string()));
            }
        }
        result
    }
}

/// A writer's state, held for one batch or one idle eviction. Dropped, it clears the writer's
/// published cell, and poisons the engine if the write unwound (in a writer thread or in a
/// caller writing its own batch), so callers stop trusting its files: a dead write holds no
/// cell, so readers do not wait on an update-in-flight bit it left.
struct Held<'a>(MutexGuard<'a, Writer>);

/// Takes `writer`'s state (a write that unwound poisoned the engine, so its lock's poison
/// adds nothing).
fn hold(writer: &Mutex<Writer>) -> Held<'_> {
    Held(writer.lock().unwrap_or_else(|e| e.into_inner()))
}

impl std::ops::Deref for Held<'_> {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.0
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.0
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.published.clear();
        if std::thread::panicking() {
            self.0
                .shared
                .poison("a write panicked halfway through a batch".to_string());
        }
    }
}

/// Files a writer has at hand for one tier: per period it has touched, the chunk files by
/// chunk number.
#[derive(Default)]
struct TierCache {
    periods: Vec<CachedPeriod>,
}

/// One period's files in a writer's cache.
struct CachedPeriod {
    start: Timestamp,
    files: Vec<Option<WritableFile>>,
    /// Written in the current job: its files are marked dirty when the job ends.
    touched: bool,
}

impl TierCache {
    fn period_index(&mut self, period_start: Timestamp) -> usize {
        match self.periods.iter().position(|p| p.start == period_start) {
            Some(i) => i,
            None => {
                self.periods.push(CachedPeriod {
                    start: period_start,
                    files: Vec::new(),
                    touched: false,
                });
                self.periods.len() - 1
            }
        }
    }
}

/// One writer thread's state.
struct Writer {
    shared: Arc<Shared>,
    /// Where this writer publishes the cell it is updating, for readers that find an
    /// update-in-flight bit.
    published: WriterSlot,
    tiers: Vec<TierCache>,
    /// Per tier, where the last timestamp seen lands: (index into `TierCache::periods`,
    /// bucket), or `None` when outside the tier's window. Consecutive samples of one instant,
    /// the common case for an agent's flush, skip the lookup arithmetic.
    placements: Vec<Option<(usize, u32)>>,
    /// Per tier set, the storage indexes of its tiers: the tiers a sample of the set goes to.
    set_tiers: Vec<std::ops::Range<usize>>,
    slot_bits: u32,
    /// The storage's retirement count when this writer last dropped retired (compacted)
    /// files from its cache.
    retirements_seen: u64,
    /// The series whose first update kills the process ([`Hook::KillMidUpdate`], read once
    /// per writer thread; the hot loop never looks at it).
    fault: Option<u32>,
    /// The raw tier's state of this writer's series, indexed by [`index_in_writer`].
    raw_tails: Vec<Option<RawTail>>,
    /// Writer threads: this writer owns the ids [`writer_of`] gives its index.
    writers: usize,
    /// The series whose raw append kills the process, and how many of its points to store
    /// first ([`Hook::KillMidRawAppend`]).
    raw_fault: Option<(u32, u64)>,
    /// The raw tier's window start at the last sweep of `raw_tails` ([`Writer::evict_expired_raw`]).
    raw_window_seen: Timestamp,
}

/// The writer, of `writers`, that stores `series`: series go by page of a block
/// ([`SLOTS_PER_PAGE`] of them share one), so each cell and each page has one writer. Split
/// by id parity instead, both writers faulted on and locked every page of a new file.
pub(crate) fn writer_of(series: SeriesId, writers: usize) -> usize {
    (series.0 / SLOTS_PER_PAGE) as usize % writers
}

/// `series`' place among the series of its writer ([`writer_of`]), dense from 0.
fn index_in_writer(series: u32, writers: usize) -> usize {
    let page = (series / SLOTS_PER_PAGE) as usize;
    (page / writers) * SLOTS_PER_PAGE as usize + (series % SLOTS_PER_PAGE) as usize
}

/// Where a series' next raw point goes, and the last one stored: what the ordering and
/// dedupe checks compare with. Loaded from the store's chain the first time the writer meets
/// the series, then kept here, so an append takes no lock.
struct RawTail {
    /// The series' last segment, `None` before its first point (or once its period expired
    /// and nothing came since).
    segment: Option<SegmentRef>,
    /// Points published in it.
    len: usize,
    /// End of the period its segment belongs to: a later point starts a new segment.
    period_end: Timestamp,
    /// Time and value bits of the last point stored.
    last: Option<(Timestamp, u64)>,
}

impl Writer {
    fn new(shared: Arc<Shared>, published: WriterSlot, writers: usize) -> Writer {
        let tiers = shared.config.tier_count();
        let slot_bits = shared.config.engine.series_per_chunk.trailing_zeros();
        let set_tiers = (0..shared.config.set_count())
            .map(|set| shared.config.tier_range(set))
            .collect();
        Writer {
            shared,
            published,
            tiers: (0..tiers).map(|_| TierCache::default()).collect(),
            placements: vec![None; tiers],
            set_tiers,
            slot_bits,
            retirements_seen: 0,
            fault: Hook::KillMidUpdate.armed().and_then(|v| v.parse().ok()),
            raw_tails: Vec::new(),
            raw_window_seen: Timestamp::MIN,
            writers,
            raw_fault: Hook::KillMidRawAppend.armed().and_then(|v| {
                let (series, after) = v.split_once(':')?;
                Some((series.parse().ok()?, after.parse().ok()?))
            }),
        }
    }

    /// Stores a batch of this writer's samples: the rollups, then the raw tier; returns what
    /// the raw tier did with them.
    fn write(
        &mut self,
        samples: &[Stored],
        windows: &[Timestamp],
        raw_window: Timestamp,
    ) -> RawCounts {
        self.apply::<false>(samples, windows);
        self.store_raw(samples, raw_window)
    }

    /// [`Writer::write`] for samples of distribution series: each goes into its buckets'
    /// records and histograms.
    fn write_distributions(
        &mut self,
        samples: &[Stored],
        windows: &[Timestamp],
        raw_window: Timestamp,
    ) -> RawCounts {
        self.apply::<true>(samples, windows);
        self.store_raw(samples, raw_window)
    }

    /// [`Writer::write_distributions`] for observations that arrived bucketed.
    fn write_observed(&mut self, samples: &[(&ObservedSample, SetPlace)], windows: &[Timestamp]) {
        self.evict_expired(windows);
        self.evict_retired();
        let mut last_ts = None;
        let slot_mask = (1u32 << self.slot_bits) - 1;
        let published = self.published.clone();
        for &(sample, place) in samples {
            if last_ts != Some(sample.ts) {
                self.locate(sample.ts, windows);
                last_ts = Some(sample.ts);
            }
            let chunk = (place.position >> self.slot_bits) as usize;
            let slot = place.position & slot_mask;
            for tier in self.set_tiers[place.set()].clone() {
                let Some((period, bucket)) = self.placements[tier] else {
                    continue;
                };
                let cached = &mut self.tiers[tier].periods[period];
                if let Some(file) =
                    fetch(&self.shared, tier, cached.start, chunk, &mut cached.files)
                {
                    file.add_observed(bucket, slot, &sample.observed, &published);
                }
            }
        }
        self.finish_stores();
    }

    /// What an idle writer does once a second: lets go of files that left the window.
    fn evict_idle(&mut self) {
        let now = self.shared.clock.now();
        let windows = self.shared.window_starts(now);
        self.evict_expired(&windows);
        if let Some(raw) = &self.shared.config.raw {
            self.evict_expired_raw(raw.window_start(now));
        }
    }

    /// Folds every sample into every tier whose window holds it, then finishes the batch
    /// ([`Writer::finish_stores`]).
    fn apply<const DISTRIBUTION: bool>(&mut self, samples: &[Stored], windows: &[Timestamp]) {
        self.evict_expired(windows);
        self.evict_retired();
        let mut rest = samples;
        if let Some(victim) = self.fault {
            if let Some(at) = samples.iter().position(|s| s.sample.series.0 == victim) {
                self.store::<DISTRIBUTION>(&samples[..at], windows);
                self.die_updating::<DISTRIBUTION>(&samples[at], windows);
                rest = &samples[at..];
            }
        }
        self.store::<DISTRIBUTION>(rest, windows);
        self.finish_stores();
    }

    /// The end of a batch's stores: the published cell cleared, the files written marked
    /// dirty for the next flush (after the stores, so a flush that clears the mark either
    /// sees them or leaves the mark set for the next one).
    fn finish_stores(&mut self) {
        // Release: the batch's last cell is finished for a reader that sees the slot empty.
        self.published.clear();
        for cache in &mut self.tiers {
            for period in cache.periods.iter_mut().filter(|p| p.touched) {
                period.touched = false;
                for file in period.files.iter().flatten() {
                    file.mark_dirty();
                }
            }
        }
    }

    /// The fault hook: kills the process halfway through `sample`'s update of the first tier
    /// whose window holds it (returns when none does).
    #[cold]
    fn die_updating<const DISTRIBUTION: bool>(&mut self, stored: &Stored, windows: &[Timestamp]) {
        let sample = &stored.sample;
        self.locate(sample.ts, windows);
        let chunk = (stored.place.position >> self.slot_bits) as usize;
        let slot = stored.place.position & ((1u32 << self.slot_bits) - 1);
        for tier in self.set_tiers[stored.place.set()].clone() {
            let Some((period, bucket)) = self.placements[tier] else {
                continue;
            };
            let cached = &mut self.tiers[tier].periods[period];
            if let Some(file) = fetch(&self.shared, tier, cached.start, chunk, &mut cached.files) {
                if DISTRIBUTION {
                    file.add_distribution_and_die(bucket, slot, sample.value, &self.published);
                }
                file.add_and_die(bucket, slot, sample.value, self.published.publisher());
            }
        }
    }

    /// The hot loop of [`Writer::apply`]: folds each sample into every tier whose window
    /// holds it; with `DISTRIBUTION`, into the buckets' histograms too.
    fn store<const DISTRIBUTION: bool>(&mut self, samples: &[Stored], windows: &[Timestamp]) {
        if DISTRIBUTION {
            return self.store_distributions(samples, windows);
        }
        let mut last_ts = None;
        let slot_mask = (1u32 << self.slot_bits) - 1;
        // A local handle: the hot loop publishes through a pointer held in a register instead
        // of reaching the record through `self` (the stores to cells make the compiler reload
        // what it reaches through `self`).
        let published = self.published.clone();
        let publisher = published.publisher();
        for (i, stored) in samples.iter().enumerate() {
            let sample = &stored.sample;
            if let Some(ahead) = samples.get(i + PREFETCH_DISTANCE) {
                if last_ts == Some(ahead.sample.ts) {
                    self.prefetch(ahead);
                }
            }
            if last_ts != Some(sample.ts) {
                self.locate(sample.ts, windows);
                last_ts = Some(sample.ts);
            }
            let chunk = (stored.place.position >> self.slot_bits) as usize;
            let slot = stored.place.position & slot_mask;
            for tier in self.set_tiers[stored.place.set()].clone() {
                let Some((period, bucket)) = self.placements[tier] else {
                    continue;
                };
                let cached = &mut self.tiers[tier].periods[period];
                let file = match cached.files.get(chunk).and_then(Option::as_ref) {
                    Some(file) => file,
                    None => match fetch(&self.shared, tier, cached.start, chunk, &mut cached.files)
                    {
                        Some(file) => file,
                        None => continue,
                    },
                };
                let last = stored.last.map(|value| Last::new(value, sample.ts));
                file.add(bucket, slot, sample.value, last, publisher);
            }
        }
    }

    /// [`Writer::store`] for distribution samples: each series' samples that land in the
    /// same bucket of every tier are one update of it (its histogram decoded and encoded
    /// once), in arrival order.
    fn store_distributions(&mut self, samples: &[Stored], windows: &[Timestamp]) {
        let shared = Arc::clone(&self.shared);
        // Whether two times land in the same bucket of every tier, by period start rather
        // than by the period's place in the cache, which a later period's arrival may move.
        let same_buckets = |a: Timestamp, b: Timestamp| {
            (shared.config.all_tiers().enumerate()).all(|(tier, (_, spec))| {
                let (held_a, held_b) = (a >= windows[tier], b >= windows[tier]);
                let (pa, pb) = (place(tier, spec, a), place(tier, spec, b));
                held_a == held_b
                    && (!held_a || (pa.period_start, pa.bucket) == (pb.period_start, pb.bucket))
            })
        };
        let mut order: Vec<usize> = (0..samples.len()).collect();
        order.sort_by_key(|&i| samples[i].sample.series.0);
        let slot_mask = (1u32 << self.slot_bits) - 1;
        let published = self.published.clone();
        let mut values = Vec::new();
        let mut at = 0;
        while at < order.len() {
            let first = samples[order[at]].sample;
            let place = samples[order[at]].place;
            let mut end = at + 1;
            while end < order.len()
                && samples[order[end]].sample.series == first.series
                && same_buckets(first.ts, samples[order[end]].sample.ts)
            {
                end += 1;
            }
            values.clear();
            values.extend(order[at..end].iter().map(|&i| samples[i].sample.value));
            at = end;
            self.locate(first.ts, windows);
            let chunk = (place.position >> self.slot_bits) as usize;
            let slot = place.position & slot_mask;
            for tier in self.set_tiers[place.set()].clone() {
                let Some((period, bucket)) = self.placements[tier] else {
                    continue;
                };
                let cached = &mut self.tiers[tier].periods[period];
                if let Some(file) =
                    fetch(&self.shared, tier, cached.start, chunk, &mut cached.files)
                {
                    file.add_distribution(bucket, slot, &values, &published);
                }
            }
        }
    }

    /// Appends each sample at or after `window` to its series' raw segments: the raw tier's
    /// half of a batch, after the rollups. A point not newer than the series' last raw
    /// point is refused here only, and under `dedupe_unchanged` one whose value equals the
    /// last one bit for bit is skipped. No allocation but a new segment's chain entry (once
    /// per [`SEGMENT_POINTS`] points) and the tail table's growth with new series.
    fn store_raw(&mut self, samples: &[Stored], window: Timestamp) -> RawCounts {
        let mut counts = RawCounts::default();
        if self.shared.raw.is_none() {
            return counts;
        }
        if window > self.raw_window_seen {
            self.evict_expired_raw(window);
        }
        let Some(raw) = self.shared.raw.as_ref() else {
            return counts;
        };
        let dedupe = raw.spec().dedupe_unchanged;
        let period = raw.spec().period;
        for sample in samples.iter().map(|s| &s.sample) {
            if sample.ts < window {
                counts.too_old += 1;
                continue;
            }
            let series = sample.series.0;
            let local = index_in_writer(series, self.writers);
            if local >= self.raw_tails.len() {
                self.raw_tails.resize_with(local + 1, || None);
            }
            let tail = self.raw_tails[local].get_or_insert_with(|| load_tail(raw, series));
            let bits = sample.value.to_bits();
            if let Some((ts, value)) = tail.last {
                if sample.ts <= ts {
                    counts.out_of_order += 1;
                    continue;
                }
                if dedupe && bits == value {
                    counts.unchanged += 1;
                    continue;
                }
            }
            let die = match &mut self.raw_fault {
                Some((victim, left)) if *victim == series => {
                    let now = *left == 0;
                    *left = left.saturating_sub(1);
                    now
                }
                _ => false,
            };
            match &tail.segment {
                Some(seg) if tail.len < SEGMENT_POINTS && sample.ts < tail.period_end => {
                    if die {
                        seg.segment()
                            .append_and_die(tail.len, sample.ts, sample.value);
                    }
                    seg.segment().append(tail.len, sample.ts, sample.value);
                    tail.len += 1;
                }
                _ => match raw.claim(series, sample.ts, tail.last.map(|(ts, _)| ts)) {
                    Ok((file, index)) => {
                        if die {
                            file.segment(index)
                                .append_and_die(0, sample.ts, sample.value);
                        }
                        file.segment(index).append(0, sample.ts, sample.value);
                        let seg = SegmentRef {
                            file,
                            index,
                            first: sample.ts,
                        };
                        raw.link(series, seg.clone());
                        tail.period_end =
                            seg.file.period_start().saturating_add(period.secs() as i64);
                        tail.segment = Some(seg);
                        tail.len = 1;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "no raw segment to be had; the point lands in the rollups only");
                        counts.unavailable += 1;
                        continue;
                    }
                },
            }
            tail.last = Some((sample.ts, bits));
            counts.stored += 1;
        }
        counts
    }

    /// Starts loading the cells `sample` will update, when they land where the current
    /// placements say and their files are at hand.
    #[inline]
    fn prefetch(&self, stored: &Stored) {
        let chunk = (stored.place.position >> self.slot_bits) as usize;
        let slot = stored.place.position & ((1u32 << self.slot_bits) - 1);
        for tier in self.set_tiers[stored.place.set()].clone() {
            if let Some((period, bucket)) = self.placements[tier] {
                if let Some(Some(file)) = self.tiers[tier].periods[period].files.get(chunk) {
                    file.file().prefetch(bucket, slot, Latest::Read);
                }
            }
        }
    }

    fn locate(&mut self, ts: Timestamp, windows: &[Timestamp]) {
        for (tier, (_, spec)) in self.shared.config.all_tiers().enumerate() {
            self.placements[tier] = if ts < windows[tier] {
                None
            } else {
                let p = place(tier, spec, ts);
                let index = self.tiers[tier].period_index(p.period_start);
                self.tiers[tier].periods[index].touched = true;
                Some((index, p.bucket))
            };
        }
    }

    /// Forgets files that were compacted since the last look: their period lives in another
    /// file now, and a late sample for it gets a new hot file from the batch's caller. A
    /// compaction swaps files only while no batch runs, so this check at the start of a
    /// batch is enough.
    fn evict_retired(&mut self) {
        let retirements = self.shared.storage.retirements();
        if retirements == self.retirements_seen {
            return;
        }
        self.retirements_seen = retirements;
        for cache in &mut self.tiers {
            for period in &mut cache.periods {
                for file in &mut period.files {
                    if file.as_ref().is_some_and(|f| f.file().is_retired()) {
                        *file = None;
                    }
                }
            }
        }
    }

    /// Lets go of the raw tails whose segment is in a period before `window`: a series that
    /// went quiet would otherwise keep its last segment's file mapped after expiry unlinked
    /// it, and its disk space would not be freed until a restart. The window moves once per
    /// period, so a writer sweeps its tails once per period (and when idle).
    fn evict_expired_raw(&mut self, window: Timestamp) {
        self.raw_window_seen = window;
        for tail in &mut self.raw_tails {
            let expired = tail.as_ref().is_some_and(|t| {
                t.segment
                    .as_ref()
                    .is_some_and(|seg| seg.file.period_start() < window)
            });
            if expired {
                *tail = None;
            }
        }
    }

    /// Forgets files of periods that left the window, so dropped files are unmapped.
    fn evict_expired(&mut self, windows: &[Timestamp]) {
        let specs = self.shared.config.all_tiers().map(|(_, spec)| spec);
        for ((tier, cache), spec) in self.tiers.iter_mut().enumerate().zip(specs) {
            cache
                .periods
                .retain(|p| spec.period_end(p.start) > windows[tier]);
        }
    }
}

/// A series' raw tail as the store's chain has it.
fn load_tail(raw: &crate::storage::raw::RawStore, series: u32) -> RawTail {
    match raw.tail(series) {
        Some(seg) => {
            let len = seg.segment().len();
            let last = seg.segment().point(len - 1);
            RawTail {
                period_end: seg
                    .file
                    .period_start()
                    .saturating_add(raw.spec().period.secs() as i64),
                segment: Some(seg),
                len,
                last: Some((last.0, last.1.to_bits())),
            }
        }
        None => RawTail {
            segment: None,
            len: 0,
            period_end: Timestamp::MIN,
            last: None,
        },
    }
}

/// The slow path: the file is not in the writer's cache yet. The batch's caller made sure
/// it exists; it is missing only if maintenance dropped it in between (the clock moved past
/// its retention while the batch was in flight), and then the sample is outside the window
/// for that tier anyway.
fn fetch<'a>(
    shared: &Shared,
    tier: usize,
    period_start: Timestamp,
    chunk: usize,
    files: &'a mut Vec<Option<WritableFile>>,
) -> Option<&'a WritableFile> {
    let Some(file) = shared
        .storage
        .writable_file(tier, period_start, chunk as u32)
    else {
        tracing::debug!(
            tier,
            period_start,
            chunk,
            "period file gone before the write; skipped"
        );
        return None;
    };
    if files.len() <= chunk {
        files.resize(chunk + 1, None);
    }
    Some(files[chunk].insert(file))
}

/// A writer thread: applies the jobs of its queue, holding its writer's state for each, and
/// evicts expired files when idle.
fn serve(writer: &Mutex<Writer>, jobs: &Receiver<Job>, index: usize) {
    loop {
        match jobs.recv_timeout(IDLE_EVICTION) {
            Ok(Job::Write {
                mut samples,
                windows,
                raw_window,
                reply,
            }) => {
                let raw = hold(writer).write(&samples, &windows, raw_window);
                samples.clear();
                let _ = reply.send(Reply {
                    writer: index,
                    samples,
                    raw,
                });
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => hold(writer).evict_idle(),
            Ok(Job::Close) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each writer's series get distinct indexes, and together they fill 0..n without gaps
    /// (the raw tails are a vector indexed by them).
    #[test]
    fn each_writer_indexes_its_series_densely() {
        for writers in 1..=5 {
            let mut seen = vec![Vec::new(); writers];
            for id in 0..10_000u32 {
                seen[writer_of(SeriesId(id), writers)].push(index_in_writer(id, writers));
            }
            for (writer, indexes) in seen.iter_mut().enumerate() {
                indexes.sort_unstable();
                let dense: Vec<usize> = (0..indexes.len()).collect();
                assert_eq!(*indexes, dense, "writer {writer} of {writers}");
            }
        }
    }
}
