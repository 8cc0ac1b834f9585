//! The engine: opens a data directory, owns the registry, the storage and the writer threads,
//! and offers the write path (`record`, `record_batch`, `sync`, `flush`). Reads go through
//! [`Engine::reader`] ([`crate::read::reader`], [`crate::read::query`], [`crate::read::aggregate`]).

mod admission;
mod apply;
#[cfg(feature = "cluster")]
mod copy;
mod creator;
mod delete;
mod import_cells;
mod intent;
mod maintenance;
mod open;
mod recover;
mod retype;
mod stats;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::clock::Clock;
use crate::config::TiersConfig;
use crate::counter::{CounterTable, SeriesKind};
use crate::error::Error;
use crate::error::RejectReason;
use crate::error::Result;
use crate::read::aggregate::{AggregateQuery, AggregateResult};
use crate::read::query::{Query, QueryResult};
use crate::read::reader::Reader;
use crate::read::write_log::WriteLog;
use crate::registry::{Registry, SeriesId, SetPlace};
use crate::sample::{BatchReport, ObservedSample, RawCounts, Sample};
use crate::storage::cells::CellAt;
use crate::storage::lock::DirLock;
use crate::storage::period_file::LatestPages;
use crate::storage::raw::RawStore;
use crate::storage::recovery::Recovery;
use crate::storage::undo_entry::Undo;
use crate::storage::{Storage, OPEN_MARKER};
use crate::time::Timestamp;
pub(crate) use admission::accepted_times;
pub(crate) use admission::check_value_and_time;
use admission::{BatchPlaces, Bounds, FilesNeeded, SampleLimits};
use apply::ApplyLog;
pub use apply::{
    ApplyReport, BatchObserved, BatchSample, BatchSeries, Checkpoints, KeyIndex, SampleBatch,
};
#[cfg(feature = "cluster")]
pub(crate) use copy::{CopiedFile, StillFiles};
use creator::ChunkCreator;
pub use delete::Deleted;
pub(crate) use intent::pending as intent_pending;
#[cfg(feature = "fault-injection")]
pub(crate) use intent::to_older_files as intent_to_older_files;
pub use maintenance::MaintenanceReport;
use maintenance::{Horizon, MaintenanceHealth, MaintenanceThread};
pub use open::EngineBuilder;
pub use retype::{RetypeOutcome, Retyped};
pub use stats::{EngineStats, TierStats};
use writer::WriterPool;

/// Single records are buffered and written in batches of this many.
const RECORD_BUFFER: usize = 4096;

/// State the engine, its writer threads and its readers share.
pub(crate) struct Shared {
    pub(crate) dir: PathBuf,
    pub(crate) config: TiersConfig,
    /// Each `[[set]]`'s tiers as a configuration of their own (set `i + 1` at `i`): what a
    /// read of that set's series sees ([`Reader::for_set`]).
    set_views: Vec<TiersConfig>,
    pub(crate) storage: Storage,
    /// The raw tier's segments, when one is configured.
    pub(crate) raw: Option<RawStore>,
    pub(crate) registry: Registry,
    pub(crate) clock: Arc<dyn Clock>,
    /// Samples accepted and refused since open.
    pub(crate) tally: IngestTally,
    /// Series kinds and counters' last values.
    pub(crate) counter_table: CounterTable,
    /// Every completed write by generation, for readers that cache answers.
    pub(crate) write_log: WriteLog,
    /// Per tier set, chunks created for the current and ahead periods of its tiers so far.
    chunks_ready: Vec<AtomicU32>,
    /// Failed maintenance passes, and the last failure.
    maintenance: MaintenanceHealth,
    /// Set when the engine closes: a maintenance or chunk creator pass in progress stops at
    /// its next file instead of finishing, so a close never waits on a whole pass of a
    /// thread at the lowest CPU and I/O priority (under load, that took longer than a
    /// service manager's stop timeout).
    stopping: std::sync::atomic::AtomicBool,
    /// Held for a whole maintenance pass, so the background thread's, [`Engine::maintain`]'s
    /// and the open's never run at once: two compactions of one file would write the same
    /// temporary file, and two passes would pace creation twice.
    pass_lock: Mutex<()>,
    /// Bucket blocks maintenance has prefaulted: (tier, period start, block) -> chunk files
    /// done.
    prefaulted: Mutex<std::collections::HashMap<(usize, Timestamp, u32), usize>>,
    poison: OnceLock<String>,
    /// Ids of deleted series, which batches refuse (see `engine/delete.rs`); replaced whole
    /// by a deletion, read once per batch under the batch gate.
    deleted: std::sync::RwLock<Arc<std::collections::BTreeSet<u32>>>,
    /// The directory lock; `None` for a read-only engine, which takes none.
    lock: Option<DirLock>,
}

/// Running totals of samples accepted and refused (by reason) since open: what `info` and
/// `/metrics` report. Not to be confused with counter series ([`CounterTable`]).
#[derive(Default)]
pub(crate) struct IngestTally {
    pub(crate) accepted: AtomicU64,
    pub(crate) rejected: [AtomicU64; RejectReason::ALL.len()],
    /// What the raw tier did with accepted samples since open.
    pub(crate) raw: Mutex<RawCounts>,
}

impl Shared {
    /// Makes what was written durable: the registry fsynced, then the counters' state, the
    /// changed period files and the raw tier flushed. `Engine::flush`'s work, and an open's
    /// once it has finished a deletion or a retype a crash interrupted.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file that failed.
    fn flush_files(&self) -> Result<()> {
        self.registry
            .sync()
            .and_then(|()| self.counter_table.flush())
            .and_then(|()| self.storage.flush())
            .and_then(|()| self.raw.as_ref().map_or(Ok(()), RawStore::flush))
    }

    fn new(
        dir: PathBuf,
        config: TiersConfig,
        storage: Storage,
        registry: Registry,
        counter_table: CounterTable,
        clock: Arc<dyn Clock>,
        lock: Option<DirLock>,
    ) -> Shared {
        let deleted = registry.deleted().into_iter().map(|id| id.0).collect();
        let chunks_ready = (0..config.set_count()).map(|_| AtomicU32::new(0)).collect();
        let set_views = (1..config.set_count())
            .map(|set| config.set_view(set))
            .collect();
        Shared {
            set_views,
            deleted: std::sync::RwLock::new(Arc::new(deleted)),
            dir,
            config,
            storage,
            raw: None,
            registry,
            clock,
            tally: IngestTally::default(),
            counter_table,
            write_log: WriteLog::default(),
            chunks_ready,
            stopping: std::sync::atomic::AtomicBool::new(false),
            maintenance: MaintenanceHealth::default(),
            pass_lock: Mutex::new(()),
            prefaulted: Mutex::new(std::collections::HashMap::new()),
            poison: OnceLock::new(),
            lock,
        }
    }

    /// Whether the engine is closing: background passes stop at their next file.
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// The first second each tier, every set's, still holds at `now`: the start of the
    /// period that holds `now - retention` (files whose period ended before that are outside
    /// retention). By storage index.
    pub(crate) fn window_starts(&self, now: Timestamp) -> Vec<Timestamp> {
        (self.config.all_tiers())
            .map(|(_, t)| t.window_start(now))
            .collect()
    }

    pub(crate) fn check_poison(&self) -> Result<()> {
        match self.poison.get() {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    pub(crate) fn poison(&self, why: String) {
        tracing::error!(%why, "engine poisoned; refusing further writes");
        let _ = self.poison.set(why);
    }

    /// Chunks of set `set` needed so every series so far, plus a quarter chunk of
    /// headroom, has a slot: the next chunk is created ahead of the series that will need
    /// it. A `[[set]]` without series needs none; the default set always has its first.
    fn chunks_needed(&self, set: usize) -> u32 {
        let series = self.registry.set_len(set);
        if set > 0 && series == 0 {
            return 0;
        }
        let slots = self.config.engine.series_per_chunk as usize;
        ((series + slots / 4) / slots + 1) as u32
    }

    /// Whether some set needs a chunk not created yet.
    fn chunks_missing(&self) -> bool {
        (self.chunks_ready.iter().enumerate())
            .any(|(set, ready)| self.chunks_needed(set) > ready.load(Ordering::Acquire))
    }
}

/// Samples [`Engine::record`] buffered, and the report of the buffers written since the last
/// [`Engine::sync`], which that `sync` returns.
#[derive(Default)]
struct Pending {
    samples: Vec<Sample>,
    written: BatchReport,
    /// Samples `written` covers: the offset of the next buffer's positions.
    written_samples: usize,
}

/// An open data directory. Cheap to share by reference across threads (`&Engine` is `Sync`);
/// dropping it stops the writers, flushes and unlocks the directory.
pub struct Engine {
    pub(crate) shared: Arc<Shared>,
    writers: WriterPool,
    maintenance: Option<MaintenanceThread>,
    /// Creates the files of new chunks off the threads that register series; `None` without
    /// background work (see [`EngineBuilder::background_maintenance`]).
    creator: Option<ChunkCreator>,
    pending: Mutex<Pending>,
    closed: bool,
    /// What the repair at open did, when the last process had not closed the directory.
    recovery: Option<Recovery>,
    /// The applied sequence and undo chain of a log fed through [`Engine::apply`].
    apply_log: ApplyLog,
}

impl Engine {
    /// A builder for the data directory `dir` with the default tiers and the system clock.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tierdb::{Engine, ManualClock, TiersConfig};
    ///
    /// # fn main() -> tierdb::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let tiers = TiersConfig::from_toml_str(
    ///     "[[tier]]\nname = \"10s\"\nresolution = \"10s\"\nperiod = \"1h\"\nretention = \"6h\"\n",
    ///     "inline",
    /// )?;
    /// let engine = Engine::builder(dir.path())
    ///     .tiers(tiers)
    ///     .clock(Arc::new(ManualClock::new(1_763_726_400)))
    ///     .open()?;
    /// assert_eq!(engine.config().tiers[0].name, "10s");
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(dir: impl AsRef<Path>) -> EngineBuilder {
        EngineBuilder::new(dir.as_ref())
    }

    /// Opens `dir` with its stored tiers, or the default ones for a directory without them;
    /// see [`EngineBuilder::open`].
    ///
    /// # Errors
    /// As [`EngineBuilder::open`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Engine> {
        Self::builder(dir).open()
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The tiers in use.
    pub fn config(&self) -> &TiersConfig {
        &self.shared.config
    }

    /// The id of a series given in its text form (`cpu.load` or `cpu.load{host=a}`),
    /// registering it when new. New series get room in the files ahead of need.
    ///
    /// # Errors
    /// [`Error::InvalidSeries`] for an unparsable name, [`Error::Io`] when the registry
    /// cannot be written. (A new chunk's files that cannot be created ahead do not fail the
    /// call: the samples that need them are refused as `storage_unavailable`.)
    pub fn series(&self, text: &str) -> Result<SeriesId> {
        if let Some(id) = self.shared.registry.get(text) {
            return Ok(id);
        }
        let id = self.shared.registry.resolve(text)?;
        self.after_new_series();
        Ok(id)
    }

    /// The id of a series given as a key; see [`Engine::series`].
    ///
    /// # Errors
    /// As [`Engine::series`].
    pub fn series_key(&self, key: &crate::registry::SeriesKey) -> Result<SeriesId> {
        let (id, created) = self.shared.registry.get_or_create(key)?;
        if created {
            self.after_new_series();
        }
        Ok(id)
    }

    /// [`Engine::series`] of every name in `texts`, the new ones registered together
    /// ([`crate::registry::Registry::get_or_create_all`]): one write to the registry's log
    /// for the lot. Returns each name's id, or [`Error::InvalidSeries`] for an unparsable
    /// one, in the order of `texts`.
    ///
    /// # Errors
    /// The registry's error when it cannot be written; no new name is registered then.
    #[cfg(feature = "cli")]
    pub(crate) fn series_each<'a>(
        &self,
        texts: impl IntoIterator<Item = &'a str>,
    ) -> Result<Vec<Result<SeriesId>>> {
        let registry = &self.shared.registry;
        let mut keys = Vec::new();
        // Per name: its id, or the place of its key in `keys` (new, or not canonical).
        let found: Vec<Result<std::result::Result<SeriesId, usize>>> = (texts.into_iter())
            .map(|text| match registry.get(text) {
                Some(id) => Ok(Ok(id)),
                None => crate::registry::SeriesKey::parse(text).map(|key| {
                    keys.push(key);
                    Err(keys.len() - 1)
                }),
            })
            .collect();
        let ids = registry.get_or_create_all(&keys)?;
        if ids.iter().any(|&(_, created)| created) {
            self.after_new_series();
        }
        Ok((found.into_iter())
            .map(|r| r.map(|id| id.unwrap_or_else(|at| ids[at].0)))
            .collect())
    }

    /// Creates the files of a new chunk ahead of the series that will need them: on the
    /// chunk creator's thread when background work runs (the caller, an import's parser or
    /// a connection, goes on at once; a batch that needs a file not made yet creates it
    /// itself), else here. A failure (a full disk) does not refuse the series, whose id is
    /// already handed out: its samples are refused as `storage_unavailable` until their
    /// files can be created, and maintenance tries again.
    fn after_new_series(&self) {
        if self.shared.chunks_missing() {
            match &self.creator {
                Some(creator) => creator.wake(),
                None => {
                    if let Err(e) = self
                        .shared
                        .prepare_ahead_at(self.shared.clock.now(), Horizon::Due)
                    {
                        tracing::error!(error = %e, "cannot create files ahead for new series");
                    }
                }
            }
        }
    }

    /// How series `id` stores its samples: as they come (gauge) or as increases since the
    /// previous sample (counter).
    pub fn series_kind(&self, id: SeriesId) -> SeriesKind {
        self.reader().series_kind(id)
    }

    /// What the repair at open did, when the last process had not closed the data
    /// directory cleanly (see `crate::storage::recovery`); `None` after a clean close and
    /// for a read-only engine.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.recovery.as_ref()
    }

    /// The read side: queries, aggregates and raw bucket reads.
    pub fn reader(&self) -> Reader<'_> {
        let shared = &*self.shared;
        Reader::new(
            (&shared.config, &shared.set_views),
            &shared.storage,
            shared.raw.as_ref(),
            &shared.registry,
            &shared.counter_table,
            &*shared.clock,
            &shared.write_log,
        )
    }

    /// Answers `query`; see [`Reader::query`].
    ///
    /// # Errors
    /// As [`Reader::query`].
    pub fn query(&self, query: &Query) -> Result<QueryResult> {
        self.reader().query(query)
    }

    /// Answers `query` across series; see [`Reader::aggregate`].
    ///
    /// ```
    /// use tierdb::{AggregateQuery, Aggregation, Display, Engine, Selector};
    ///
    /// # fn main() -> tierdb::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let engine = Engine::open(dir.path())?;
    /// let now = chrono::Utc::now().timestamp();
    /// let hour = now - now % 3600 - 3600; // the last whole hour
    /// for (host, value) in [("a", 1.0), ("b", 2.0), ("c", 4.0)] {
    ///     engine.record(&format!("load{{host={host},dc=eu}}"), hour + 60, value)?;
    /// }
    /// engine.sync()?;
    /// let query = AggregateQuery::new(Selector::parse("load{dc=eu}")?, Aggregation::Sum, hour, hour + 3600)
    ///     .tier("1h")
    ///     .display(Display::Total)
    ///     .group_by(["dc"]);
    /// let answer = engine.aggregate(&query)?;
    /// assert_eq!(answer.groups[0].series, 3);
    /// assert_eq!(answer.groups[0].points, vec![(hour, Some(7.0))]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Reader::aggregate`].
    pub fn aggregate(&self, query: &AggregateQuery) -> Result<AggregateResult> {
        self.reader().aggregate(query)
    }

    /// Fixes series `id`'s kind, as a write that says what its series is does (JSON
    /// `"kind"`, Influx `?kind=`). The first declaration wins over `[counters]` rules and
    /// holds from the next sample on; declaring the kind already fixed is a no-op.
    ///
    /// # Errors
    /// [`Error::Rejected`] with [`RejectReason::KindMismatch`] when an earlier write
    /// declared the other kind (not counted in [`Engine::stats`]: the caller decides what
    /// the refusal covers); [`Error::ReadOnly`]; [`Error::Io`] when the state file cannot
    /// record it.
    pub fn declare_kind(&self, id: SeriesId, kind: SeriesKind) -> Result<()> {
        self.check_writable()?;
        let declared = (self.shared.counter_table).declare(id, kind, &self.shared.registry);
        // A series' kind decides how every one of its buckets reads.
        self.shared.write_log.note(Timestamp::MIN);
        declared
    }

    /// The engine clock's current time.
    pub fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// The series registry (names, tags, ids).
    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    /// Records one sample. It is buffered: it reaches the mapped files with the next
    /// [`Engine::sync`], or when the buffer fills. A sample refused for its value or time is
    /// refused before its name is looked up, so it does not register a new series.
    ///
    /// # Errors
    /// [`Error::Rejected`] with the reason when the sample is refused (also counted),
    /// [`Error::InvalidSeries`], [`Error::Poisoned`], [`Error::Io`].
    pub fn record(&self, series: &str, ts: Timestamp, value: f64) -> Result<()> {
        let now = self.shared.clock.now();
        // Before the name is looked up: a refused sample must not register its series.
        if let Err(reason) =
            check_value_and_time(value, ts, accepted_times(&self.shared.config, now))
        {
            self.shared.tally.rejected[reason.index()].fetch_add(1, Ordering::Relaxed);
            return Err(Error::Rejected(reason));
        }
        let id = match self.series(series) {
            Ok(id) => id,
            Err(e @ Error::InvalidSeries { .. }) => {
                self.shared.tally.rejected[RejectReason::InvalidSeries.index()]
                    .fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let sample = Sample::new(id, ts, value);
        if let Err(reason) = self.limits(now).check(&sample) {
            self.shared.tally.rejected[reason.index()].fetch_add(1, Ordering::Relaxed);
            return Err(Error::Rejected(reason));
        }
        if self.lock_pending().samples.len() >= RECORD_BUFFER {
            // Writing a full buffer failed: retry it before taking more, so the buffer stays
            // bounded; if it fails again, this sample is refused with the error.
            self.write_buffered()?;
        }
        let full = {
            let mut pending = self.lock_pending();
            pending.samples.push(sample);
            pending.samples.len() >= RECORD_BUFFER
        };
        if full {
            // Every buffered sample, this one included, stays buffered if the write fails: the
            // next `record` or `sync` retries it and reports the error.
            if let Err(e) = self.write_buffered() {
                tracing::warn!(error = %e, "writing the record buffer failed; it is kept for the next sync");
            }
        }
        Ok(())
    }

    /// Writes every sample that [`Engine::record`] buffered; returns once they are in the
    /// mapped files, so a process crash after it returns loses none of them. (A buffer that
    /// filled up is written by the `record` call that filled it, before that call returns;
    /// with several threads recording, `sync` covers what was buffered when it was called.)
    ///
    /// The report covers every buffered sample written since the previous `sync`, the
    /// buffers `record` wrote when they filled included, so refusals reach the caller that
    /// syncs; positions count samples in the order their buffers were written.
    ///
    /// # Errors
    /// As [`Engine::record_batch`]. The samples that failed stay buffered for the next
    /// `sync` (a failed batch landed nothing, or the engine is poisoned and lands nothing
    /// again).
    pub fn sync(&self) -> Result<BatchReport> {
        self.write_buffered()?;
        let mut pending = self.lock_pending();
        pending.written_samples = 0;
        Ok(std::mem::take(&mut pending.written))
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the record buffer, adding its report to what the next `sync` returns; on
    /// failure puts the samples back in front of any recorded meanwhile.
    fn write_buffered(&self) -> Result<()> {
        let batch = std::mem::take(&mut self.lock_pending().samples);
        let result = self.record_batch(&batch);
        let mut pending = self.lock_pending();
        match result {
            Ok(report) => {
                let offset = pending.written_samples;
                pending.written.absorb(&report, offset);
                pending.written_samples += batch.len();
                Ok(())
            }
            Err(e) => {
                let mut batch = batch;
                batch.append(&mut pending.samples);
                pending.samples = batch;
                Err(e)
            }
        }
    }

    /// Writes a batch; returns once every accepted sample is in the mapped files (a process
    /// crash after it returns loses nothing; [`Engine::flush`] adds power-loss durability).
    /// Refused samples are counted by reason in the report and in [`Engine::stats`]; the rest
    /// land. Late and out-of-order samples update every tier that still holds their time.
    ///
    /// A sample whose period file cannot be created (a full disk) is refused whole, as
    /// `storage_unavailable`, and the rest of the batch lands: no sample ever lands in only
    /// some of its tiers.
    ///
    /// # Errors
    /// [`Error::Poisoned`] after an earlier durability failure or a dead writer thread.
    pub fn record_batch(&self, samples: &[Sample]) -> Result<BatchReport> {
        self.check_writable()?;
        self.shared.check_poison()?;
        // From choosing files until the writers are done: no compaction swaps a file this
        // batch stores into.
        let _gate = self.shared.storage.batch_gate();
        let bounds = self.bounds(self.shared.clock.now());
        let deleted = self.shared.deleted_ids();
        let places = BatchPlaces::of(
            &self.shared,
            samples.iter().map(|s| s.series),
            &bounds.windows,
        );
        // Taken before the pages are noted: a distribution's or a delta counter's sample keeps
        // no latest sample, so its pages of the latest area are not reserved (see
        // `LatestPages`).
        let mut counter_step = self.shared.counter_table.for_batch(&self.shared.registry);
        let mut files = FilesNeeded::new(&self.shared);
        for (index, sample) in samples.iter().enumerate() {
            if bounds.limits.check(sample).is_ok() {
                let latest = match &counter_step {
                    Some(counters) if counters.keeps_no_latest(sample.series) => LatestPages::Leave,
                    _ => LatestPages::Reserve,
                };
                let place = places.get(index, sample.series);
                files.note(sample, place, &bounds.windows, latest);
            }
        }
        files.create_missing();
        let mut report = BatchReport::default();
        let mut parts = self.writers.take_buffers();
        let n = parts.len();
        // The earliest time handed to the writers, for the write log.
        let mut earliest: Option<Timestamp> = None;
        // Samples of distribution series, with their positions: their histograms' pages are
        // reserved below before they are counted.
        let mut distributions: Vec<(usize, Sample)> = Vec::new();
        for (position, sample) in samples.iter().enumerate() {
            let place = places.get(position, sample.series);
            match bounds.limits.check(sample) {
                // An id resolved before its series was deleted.
                Ok(()) if !deleted.is_empty() && deleted.contains(&sample.series.0) => {
                    report.reject(position, RejectReason::UnknownSeries);
                }
                Ok(()) if places.too_old(place, sample.ts) => {
                    report.reject(position, RejectReason::TooOld);
                }
                Ok(())
                    if !files.failed.is_empty()
                        && files.blocked(sample, place, &bounds.windows) =>
                {
                    report.reject(position, RejectReason::StorageUnavailable);
                }
                Ok(()) => {
                    let mut stored = writer::Stored::gauge(*sample, place);
                    if let Some(counters) = &mut counter_step {
                        if counters.is_distribution(sample.series) {
                            distributions.push((position, *sample));
                            continue;
                        }
                        match counters.apply(sample) {
                            Ok(Some((value, last))) => {
                                stored.sample.value = value;
                                stored.last = last;
                            }
                            // A counter's first sample: its baseline, nothing to store.
                            Ok(None) => {
                                report.accepted += 1;
                                continue;
                            }
                            Err(reason) => {
                                report.reject(position, reason);
                                continue;
                            }
                        }
                    }
                    parts[writer::writer_of(sample.series, n)].push(stored);
                    earliest = Some(earliest.map_or(sample.ts, |e| e.min(sample.ts)));
                    report.accepted += 1;
                }
                Err(reason) => report.reject(position, reason),
            }
        }
        // Counters: what the batch changes is journaled before the writers store it, and
        // the counters' states advance only after, all under the counter lock, so a crash
        // anywhere in between is rolled back whole at the next open. A batch with no counter
        // sample lets go of the lock here, so batches of gauges never wait for each other.
        if counter_step.as_ref().is_some_and(|c| !c.changes_counters()) {
            counter_step = None;
        }
        if let Some(counters) = &mut counter_step {
            let undo = self.counter_undo(counters.stored(), &bounds.windows);
            counters.begin(undo)?;
        }
        let distributions: Vec<(Sample, SetPlace)> = self
            .reserve_histograms(&distributions, &places, &bounds.windows, &mut report)
            .into_iter()
            .map(|(position, sample)| (sample, places.get(position, sample.series)))
            .collect();
        if let Some(first) = distributions.iter().map(|(s, _)| s.ts).min() {
            earliest = Some(earliest.map_or(first, |e| e.min(first)));
        }
        let tally = &self.shared.tally;
        tally.accepted.fetch_add(report.accepted, Ordering::Relaxed);
        for (counter, count) in tally.rejected.iter().zip(report.rejected) {
            if count > 0 {
                counter.fetch_add(count, Ordering::Relaxed);
            }
        }
        let ran = self
            .writers
            .run(parts, &bounds.windows, bounds.raw_window)
            .map(|mut raw| {
                if !distributions.is_empty() {
                    raw.add(&self.writers.write_distributions(
                        &distributions,
                        &bounds.windows,
                        bounds.raw_window,
                    ));
                }
                raw
            });
        if let Some(earliest) = earliest {
            // Noted once stored (or once a writer failed, whatever it stored): a read begun
            // after this sees the batch.
            self.shared.write_log.note(earliest);
        }
        report.raw = ran?;
        if !report.raw.is_empty() {
            tally
                .raw
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .add(&report.raw);
        }
        if let Some(counters) = counter_step {
            if let Err(e) = counters.commit() {
                // The batch stays recorded, so the next open rolls it back: it is not
                // acknowledged, and nothing is stored on top of it meanwhile.
                self.shared
                    .poison(format!("ending a counter batch's journal record: {e}"));
                return Err(e);
            }
        }
        Ok(report)
    }

    /// Writes observations that arrived bucketed (Prometheus native histograms, OTLP
    /// histogram points) into their distribution series: each bucket that holds a sample's
    /// time takes its count, sum and extremes into its record and merges its histogram.
    /// Histograms keep their own scale, or a coarser one where a bucket's merge needs it
    /// (a coarser input, or more than [`crate::histogram::MAX_POPULATED`] buckets, or
    /// more than its cell holds). The raw tier keeps no point for them.
    ///
    /// A sample is refused, counted by reason, when its series is not a distribution
    /// (`kind_mismatch`; declare it with [`Engine::declare_kind`] first), when its sum or
    /// extremes are not finite (`not_finite`), or as [`Engine::record_batch`] refuses one
    /// for its time; the rest land.
    ///
    /// # Errors
    /// [`Error::Poisoned`] after an earlier durability failure or a dead writer thread.
    pub fn record_observed(&self, samples: &[ObservedSample]) -> Result<BatchReport> {
        self.check_writable()?;
        self.shared.check_poison()?;
        let _gate = self.shared.storage.batch_gate();
        let bounds = self.bounds(self.shared.clock.now());
        let deleted = self.shared.deleted_ids();
        let places = BatchPlaces::of(
            &self.shared,
            samples.iter().map(|s| s.series),
            &bounds.windows,
        );
        let mut report = BatchReport::default();
        let mut files = FilesNeeded::new(&self.shared);
        let mut admitted = Vec::with_capacity(samples.len());
        for (position, observed) in samples.iter().enumerate() {
            let sample = observed.as_sample();
            let place = places.get(position, sample.series);
            let checked = bounds.limits.check(&sample).and_then(|()| {
                if !observed.observed.is_finite() {
                    Err(RejectReason::NotFinite)
                } else if deleted.contains(&sample.series.0) {
                    Err(RejectReason::UnknownSeries)
                } else if places.too_old(place, sample.ts) {
                    Err(RejectReason::TooOld)
                } else if self.series_kind(sample.series) != SeriesKind::Distribution {
                    Err(RejectReason::KindMismatch)
                } else {
                    Ok(())
                }
            });
            match checked {
                Ok(()) => {
                    files.note(&sample, place, &bounds.windows, LatestPages::Leave);
                    admitted.push((position, sample));
                }
                Err(reason) => report.reject(position, reason),
            }
        }
        files.create_missing();
        admitted.retain(|(position, sample)| {
            let place = places.get(*position, sample.series);
            let blocked = !files.failed.is_empty() && files.blocked(sample, place, &bounds.windows);
            if blocked {
                report.reject(*position, RejectReason::StorageUnavailable);
            }
            !blocked
        });
        let ready = self.reserve_histograms(&admitted, &places, &bounds.windows, &mut report);
        let tally = &self.shared.tally;
        tally.accepted.fetch_add(report.accepted, Ordering::Relaxed);
        for (counter, count) in tally.rejected.iter().zip(report.rejected) {
            if count > 0 {
                counter.fetch_add(count, Ordering::Relaxed);
            }
        }
        let ready: Vec<(&ObservedSample, SetPlace)> = (ready.iter())
            .map(|&(at, sample)| (&samples[at], places.get(at, sample.series)))
            .collect();
        self.writers.write_observed(&ready, &bounds.windows);
        if let Some(earliest) = ready.iter().map(|(s, _)| s.ts).min() {
            self.shared.write_log.note(earliest);
        }
        Ok(report)
    }

    /// Reserves the histogram pages the distribution samples `distributions` store into,
    /// in every tier whose window holds them; returns the samples whose pages all have
    /// their space, with their positions, counted accepted, and refuses the others whole as `storage_unavailable`
    /// (a full disk), as the batch does for record pages.
    fn reserve_histograms(
        &self,
        distributions: &[(usize, Sample)],
        places: &BatchPlaces,
        windows: &[Timestamp],
        report: &mut BatchReport,
    ) -> Vec<(usize, Sample)> {
        let shared = &self.shared;
        let slots = shared.storage.slots();
        let mut ready = Vec::with_capacity(distributions.len());
        'samples: for &(position, sample) in distributions {
            let place = places.get(position, sample.series);
            let (chunk, slot) = place.chunk_and_slot(slots);
            for (tier, spec) in shared.config.indexed_set_tiers(place.set()) {
                if sample.ts < windows[tier] {
                    continue;
                }
                let p = crate::time::place(tier, spec, sample.ts);
                // The writers skip a file that is not there (its period was dropped).
                let Some(file) = shared.storage.writable_file(tier, p.period_start, chunk) else {
                    continue;
                };
                if let Err(e) = file.reserve_histograms(p.bucket, slot, 1) {
                    tracing::error!(error = %e, "cannot reserve disk for a histogram's page; refusing the sample");
                    report.reject(position, RejectReason::StorageUnavailable);
                    continue 'samples;
                }
            }
            report.accepted += 1;
            ready.push((position, sample));
        }
        ready
    }

    /// The bucket cells `samples` (counter samples about to be stored) change, each as it is
    /// now and with how many of them it gets: the undo a crash before
    /// [`crate::counter::BatchCounters::commit`] is rolled back with.
    fn counter_undo(&self, samples: &[Sample], windows: &[Timestamp]) -> Vec<Undo> {
        let shared = &self.shared;
        let config = &shared.config;
        let slots = shared.storage.slots();
        let places = shared.registry.placements(samples.iter().map(|s| s.series));
        let mut undo = Vec::new();
        // Per series and tier, the bucket start of its last cell and that cell's undo entry: a
        // counter's samples in a batch are in time order (older ones are refused), so its
        // cells in each tier come one after another.
        let mut last: rustc_hash::FxHashMap<u32, Vec<(Timestamp, usize)>> =
            rustc_hash::FxHashMap::default();
        for (sample, place) in samples.iter().zip(places) {
            let (chunk, slot) = place.chunk_and_slot(slots);
            let cells = last
                .entry(sample.series.0)
                .or_insert_with(|| vec![(Timestamp::MIN, 0); config.tier_count()]);
            for (tier, spec) in config.indexed_set_tiers(place.set()) {
                if sample.ts < windows[tier] {
                    continue;
                }
                let p = crate::time::place(tier, spec, sample.ts);
                let start = p.period_start + i64::from(p.bucket) * spec.resolution.secs() as i64;
                if cells[tier].0 == start {
                    if let Undo::Cell { adds, .. } = &mut undo[cells[tier].1] {
                        *adds += 1;
                    }
                    continue;
                }
                // The writers skip a file that is not there; so does the undo.
                if let Some(file) = shared.storage.file(tier, p.period_start, chunk) {
                    cells[tier] = (start, undo.len());
                    undo.push(Undo::Cell {
                        at: CellAt {
                            tier,
                            period_start: p.period_start,
                            chunk,
                            bucket: p.bucket,
                            slot,
                        },
                        adds: 1,
                        before: file.load(p.bucket, slot),
                    });
                }
            }
        }
        undo
    }

    fn check_writable(&self) -> Result<()> {
        if self.shared.lock.is_none() {
            return Err(Error::ReadOnly(self.shared.dir.clone()));
        }
        Ok(())
    }

    /// True when opened with [`EngineBuilder::read_only`].
    pub fn is_read_only(&self) -> bool {
        self.shared.lock.is_none()
    }

    /// What a sample must satisfy at `now`, computed once per batch.
    fn bounds(&self, now: Timestamp) -> Bounds {
        let windows: Arc<[Timestamp]> = self.shared.window_starts(now).into();
        Bounds {
            limits: self.limits(now),
            windows,
            raw_window: self
                .shared
                .config
                .raw
                .as_ref()
                .map_or(Timestamp::MAX, |raw| raw.window_start(now)),
        }
    }

    /// The per-sample limits at `now`, without allocating (the single-record path).
    fn limits(&self, now: Timestamp) -> SampleLimits {
        let (oldest, newest) = accepted_times(&self.shared.config, now);
        SampleLimits {
            oldest,
            newest,
            known_series: self.shared.registry.len(),
        }
    }

    /// Makes everything written so far durable against power loss: buffered records are
    /// written, the registry is fsynced, then every changed period file is msynced.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file that failed; the engine is then poisoned.
    pub fn flush(&self) -> Result<()> {
        self.check_writable()?;
        self.sync()?;
        let result = self.shared.flush_files();
        if let Err(e) = &result {
            self.shared.poison(e.to_string());
        }
        result
    }

    /// Runs a maintenance pass now: creates the current and ahead periods, drops what left
    /// the retention window, prefaults the blocks about to be written. The background
    /// thread does this on its own; tests driving a [`crate::ManualClock`] call it after
    /// moving the clock.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be created or unlinked.
    pub fn maintain(&self) -> Result<MaintenanceReport> {
        self.check_writable()?;
        self.shared.maintain()
    }

    /// Makes what [`Engine::apply`] applied durable ([`Engine::checkpoint`]), stops the
    /// writers, flushes and unlocks, reporting any failure (dropping the engine does the same
    /// but for the checkpoint, and can only log failures).
    ///
    /// # Errors
    /// As [`Engine::checkpoint`] and [`Engine::flush`], or a writer thread's failure.
    pub fn close(mut self) -> Result<()> {
        if !self.is_read_only() {
            self.checkpoint_before_close()?;
        }
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        if self.is_read_only() {
            return Ok(());
        }
        // A pass in progress stops at its next file; what it left undone the next open does.
        self.shared.stopping.store(true, Ordering::Release);
        drop(self.maintenance.take());
        drop(self.creator.take());
        let flushed = self.flush();
        let stopped = self.writers.stop();
        flushed?;
        stopped?;
        self.shared.check_poison()?;
        let marker = self.shared.dir.join(OPEN_MARKER);
        std::fs::remove_file(&marker).map_err(|e| Error::io(&marker, e))
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "closing the engine failed");
        }
    }
}
