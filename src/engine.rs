//! The engine: opens a data directory, owns the registry, the storage and the writer threads,
//! and offers the write path (`record`, `record_batch`, `sync`, `flush`). Reads go through
//! [`Engine::reader`] ([`crate::reader`], [`crate::query`], [`crate::aggregate`]).

mod creator;
mod maintenance;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::aggregate::{AggregateQuery, AggregateResult};
use crate::bucket::Bucket;
use crate::clock::{Clock, SystemClock};
use crate::config::{RawTierSpec, TierSpec, TiersConfig};
use crate::counter::{CounterTable, SeriesKind};
use crate::query::{Query, QueryResult};
use crate::reader::Reader;
use crate::registry::{Registry, SeriesId};
use crate::sample::{BatchReport, RawCounts, RejectReason, Sample};
use crate::storage::cells::CellAt;
use crate::storage::counter_journal::Undo;
use crate::storage::lock::DirLock;
use crate::storage::raw::RawStore;
use crate::storage::recovery::Recovery;
use crate::storage::{Storage, TierFiles, OPEN_MARKER};
use crate::time::{align_down, Span, Timestamp};
use crate::{Error, Result};
use creator::ChunkCreator;
pub use maintenance::{maintenance_interval, MaintenanceReport, AHEAD_FILES_PER_PASS};
use maintenance::{Horizon, MaintenanceHealth, MaintenanceThread, Prefault};
use writer::WriterPool;

/// Creates the OPEN marker and makes it durable. Its existence is what matters, and an empty
/// file needs no data block, so a full disk does not keep the engine from opening; the pid
/// written into it is best effort.
fn write_open_marker(marker: &Path) -> Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(marker).map_err(|e| Error::io(marker, e))?;
    if let Err(e) = file.write_all(std::process::id().to_string().as_bytes()) {
        tracing::warn!(path = %marker.display(), error = %e, "cannot write this process's pid into the OPEN marker");
    }
    file.sync_all().map_err(|e| Error::io(marker, e))
}

/// How long each phase of an open took, for the log line that says where a slow start went.
struct OpenPhases {
    last: std::time::Instant,
    laps: Vec<(&'static str, std::time::Duration)>,
}

impl Default for OpenPhases {
    fn default() -> Self {
        OpenPhases {
            last: std::time::Instant::now(),
            laps: Vec::new(),
        }
    }
}

impl OpenPhases {
    fn lap(&mut self, phase: &'static str) {
        let now = std::time::Instant::now();
        self.laps.push((phase, now - self.last));
        self.last = now;
    }
}

impl std::fmt::Display for OpenPhases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (phase, took)) in self.laps.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{phase} {} ms", took.as_millis())?;
        }
        Ok(())
    }
}

/// Single records are buffered and written in batches of this many.
const RECORD_BUFFER: usize = 4096;

/// How to open an [`Engine`]: `Engine::builder(dir).tiers(cfg).open()?`.
pub struct EngineBuilder {
    dir: PathBuf,
    tiers: TiersConfig,
    /// Whether [`EngineBuilder::tiers`] was called: without it, the configuration stored in
    /// the directory is used when there is one.
    tiers_given: bool,
    clock: Arc<dyn Clock>,
    writer_threads: usize,
    background_maintenance: bool,
    maintenance_every: Option<std::time::Duration>,
    read_only: bool,
}

impl EngineBuilder {
    /// Opens with `tiers`. Without this call, the open uses the configuration stored in the
    /// directory (`<dir>/tiers.toml`, written when the directory was created), or
    /// [`TiersConfig::default`] for a directory that has none. Given tiers that differ from
    /// the stored ones where the files depend on it are refused ([`Error::TiersConflict`]);
    /// other differences (retention, create_ahead, tiers added, removed or reordered, counter
    /// rules) are logged at warn, accepted, and stored by a writable open.
    pub fn tiers(mut self, tiers: TiersConfig) -> Self {
        self.tiers = tiers;
        self.tiers_given = true;
        self
    }

    /// Settles the configuration against the one stored in the directory (see
    /// [`EngineBuilder::tiers`]). Returns whether a writable open must (re)write the stored
    /// file once the files have accepted the configuration: none stored yet, or accepted
    /// changes.
    fn settle_tiers(&mut self) -> Result<bool> {
        let Some(stored) = crate::storage::stored_tiers::read_stored(&self.dir)? else {
            return Ok(true);
        };
        if !self.tiers_given {
            self.tiers = stored;
            return Ok(false);
        }
        crate::config::check_given(
            &crate::storage::stored_tiers::stored_path(&self.dir),
            &stored,
            &self.tiers,
        )?;
        // Said at warn: a removed tier's files stay on disk unread, and changed counter rules
        // change what existing series' samples mean from now on.
        for change in crate::config::differences(&stored, &self.tiers) {
            tracing::warn!(dir = %self.dir.display(), %change, "the given tiers change the stored ones");
        }
        // Any difference is stored, a reordering too (no field differs, but the layout
        // fingerprint the journals record follows the order).
        Ok(stored != self.tiers)
    }

    /// Uses `clock` instead of the system clock (tests roll time with a
    /// [`crate::ManualClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Number of writer threads (default: the number of cores, at least 1).
    pub fn writer_threads(mut self, n: usize) -> Self {
        self.writer_threads = n.max(1);
        self
    }

    /// Whether background threads run maintenance and create the files of new chunks of
    /// series (default: yes). Tests that drive a [`crate::ManualClock`] turn it off and call
    /// [`Engine::maintain`] themselves; new chunks' files are then created by the call that
    /// registers the series.
    pub fn background_maintenance(mut self, on: bool) -> Self {
        self.background_maintenance = on;
        self
    }

    /// Opens the directory for reading only, beside a server that may be writing it: no
    /// lock, no files created, changed or removed, no writer or maintenance threads. It sees
    /// the series and period files that existed at open, with their contents live (the
    /// mappings are shared, reads stay torn-free). Writes fail with [`Error::ReadOnly`].
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    fn open_read_only(mut self) -> Result<Engine> {
        if !self.dir.is_dir() {
            return Err(Error::io(
                &self.dir,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no data directory here"),
            ));
        }
        self.settle_tiers()?;
        let storage = self.open_storage(false)?;
        let registry = Registry::open_read_only(&self.dir)?;
        let shared = self.into_shared(storage, registry, None)?;
        Ok(Engine {
            writers: WriterPool::start(&shared, 0)?,
            shared,
            maintenance: None,
            creator: None,
            pending: Mutex::new(Pending::default()),
            closed: false,
            recovery: None,
        })
    }

    /// Runs background maintenance every `interval` instead of the interval derived from the
    /// tiers ([`maintenance_interval`]); for simulations that run time faster than the wall
    /// clock.
    pub fn maintenance_every(mut self, interval: std::time::Duration) -> Self {
        self.maintenance_every = Some(interval);
        self
    }

    /// Maps the period files of every configured tier (writable or not).
    fn open_storage(&self, writable: bool) -> Result<Storage> {
        Storage::open(
            &self.dir,
            &self.tiers.tiers,
            self.tiers.engine.series_per_chunk,
            writable,
        )
    }

    /// The state engine, writers and readers share, with the counter table opened beside
    /// the registry; writable when `lock` is held.
    fn into_shared(
        self,
        storage: Storage,
        registry: Registry,
        lock: Option<DirLock>,
    ) -> Result<Arc<Shared>> {
        let counter_table = CounterTable::open(
            &self.dir,
            self.tiers.counters.clone(),
            &registry,
            &storage,
            self.tiers.layout_fingerprint(),
            lock.is_some(),
        )?;
        let raw = self
            .tiers
            .raw
            .as_ref()
            .map(|spec| RawStore::open(&self.dir, spec, lock.is_some(), registry.len()))
            .transpose()?;
        let mut shared = Shared::new(
            self.dir,
            self.tiers,
            storage,
            registry,
            counter_table,
            self.clock,
            lock,
        );
        shared.raw = raw;
        Ok(Arc::new(shared))
    }

    /// Opens the data directory (creating it when missing), locks it, settles the tiers
    /// against the stored ones (see [`EngineBuilder::tiers`]), maps every period file, loads
    /// the registry, opens the counter and raw files, stores the tiers once all of them have
    /// accepted them (when the directory had none, or they changed), runs one maintenance
    /// pass (drops what expired while the directory was closed, creates the current and
    /// ahead periods, but not the gap), and starts the writers and the maintenance thread.
    /// A pass that fails (a full disk) does not fail the open: see
    /// [`EngineStats::maintenance_error`].
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration, [`Error::CorruptFile`] naming a damaged
    /// stored tiers file or a refused period file, [`Error::TiersConflict`] for given tiers the
    /// directory's files cannot take, [`Error::Locked`] when another process holds the
    /// directory, [`Error::Io`].
    pub fn open(mut self) -> Result<Engine> {
        self.tiers.validate()?;
        if self.read_only {
            return self.open_read_only();
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        let mut phases = OpenPhases::default();
        let lock = DirLock::acquire(&self.dir)?;
        let store_tiers = self.settle_tiers()?;
        let storage = self.open_storage(true)?;
        phases.lap("storage");
        let registry = Registry::open(&self.dir)?;
        phases.lap("registry");
        let marker = self.dir.join(OPEN_MARKER);
        let started = std::time::Instant::now();
        let recovery = storage.recover(
            marker.exists(),
            self.tiers.layout_fingerprint(),
            registry.len(),
        )?;
        if let Some(r) = &recovery {
            tracing::warn!(
                dir = %self.dir.display(),
                interrupted = r.interrupted,
                cleared = r.cleared,
                published = r.published,
                files_scanned = r.files_scanned,
                cells_scanned = r.cells_scanned,
                full_scan = r.full_scan.as_deref().unwrap_or("no"),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "the last process did not close this data directory cleanly; repaired interrupted bucket updates and slots of unregistered series"
            );
        }
        write_open_marker(&marker)?;
        crate::storage::disk::sync_dir(&self.dir)?;
        phases.lap("recovery");
        let writer_threads = self.writer_threads;
        let background_maintenance = self.background_maintenance;
        let maintenance_every = self.maintenance_every;
        let shared = self.into_shared(storage, registry, Some(lock))?;
        // Only now, with the period, raw and counter files checked against the
        // configuration: a directory from before tiers were stored gets the tiers its files
        // were made with, never ones they refuse.
        if store_tiers {
            crate::storage::stored_tiers::write_stored(&shared.dir, &shared.config)?;
        }
        phases.lap("counters");
        // A failed pass (a full disk, say) does not stop the open: queries are served, writes
        // that need a missing file are refused as storage_unavailable, and the background
        // thread retries; `stats()` and `/metrics` report it.
        let prefault = if background_maintenance {
            Prefault::Later
        } else {
            Prefault::Yes
        };
        if let Err(e) = shared.maintain_with(prefault) {
            tracing::error!(error = %e, "maintenance at open failed; serving anyway, retrying every interval");
        }
        phases.lap("maintenance");
        tracing::info!(dir = %shared.dir.display(), phases = %phases, "opened");
        let writers = WriterPool::start(&shared, writer_threads)?;
        let (maintenance, creator) = if background_maintenance {
            let interval =
                maintenance_every.unwrap_or_else(|| maintenance_interval(&shared.config));
            (
                Some(MaintenanceThread::start(&shared, interval)?),
                Some(ChunkCreator::start(&shared)?),
            )
        } else {
            (None, None)
        };
        Ok(Engine {
            shared,
            writers,
            maintenance,
            creator,
            pending: Mutex::new(Pending::default()),
            closed: false,
            recovery,
        })
    }
}

/// State the engine, its writer threads and its readers share.
pub(crate) struct Shared {
    pub(crate) dir: PathBuf,
    pub(crate) config: TiersConfig,
    pub(crate) storage: Storage,
    /// The raw tier's segments, when one is configured.
    pub(crate) raw: Option<RawStore>,
    pub(crate) registry: Registry,
    pub(crate) clock: Arc<dyn Clock>,
    /// Samples accepted and refused since open.
    pub(crate) tally: IngestTally,
    /// Series kinds and counters' last values.
    pub(crate) counter_table: CounterTable,
    /// Chunks created for the current and ahead periods of every tier so far.
    chunks_ready: AtomicU32,
    /// Failed maintenance passes, and the last failure.
    maintenance: MaintenanceHealth,
    /// Held for a whole maintenance pass, so the background thread's, [`Engine::maintain`]'s
    /// and the open's never run at once: two compactions of one file would write the same
    /// temporary file, and two passes would pace creation twice.
    pass_lock: Mutex<()>,
    /// Bucket blocks maintenance has prefaulted: (tier, period start, block) -> chunk files
    /// done.
    prefaulted: Mutex<std::collections::HashMap<(usize, Timestamp, u32), usize>>,
    poison: OnceLock<String>,
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
    fn new(
        dir: PathBuf,
        config: TiersConfig,
        storage: Storage,
        registry: Registry,
        counter_table: CounterTable,
        clock: Arc<dyn Clock>,
        lock: Option<DirLock>,
    ) -> Shared {
        Shared {
            dir,
            config,
            storage,
            raw: None,
            registry,
            clock,
            tally: IngestTally::default(),
            counter_table,
            chunks_ready: AtomicU32::new(0),
            maintenance: MaintenanceHealth::default(),
            pass_lock: Mutex::new(()),
            prefaulted: Mutex::new(std::collections::HashMap::new()),
            poison: OnceLock::new(),
            lock,
        }
    }

    /// The first second each tier still holds at `now`: the start of the period that holds
    /// `now - retention` (files whose period ended before that are outside retention).
    pub(crate) fn window_starts(&self, now: Timestamp) -> Vec<Timestamp> {
        self.config
            .tiers
            .iter()
            .map(|t| t.window_start(now))
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

    /// Chunks needed so every series so far, plus a quarter chunk of headroom, has a slot:
    /// the next chunk is created ahead of the series that will need it.
    fn chunks_needed(&self) -> u32 {
        let slots = self.config.engine.series_per_chunk as usize;
        ((self.registry.len() + slots / 4) / slots + 1) as u32
    }
}

/// The period files a batch needs, gathered before it is partitioned, so that missing ones
/// (a backfill, a gap after downtime) are created by the calling thread before the writers
/// see the batch. Writers never create files, so live writes never wait behind a creation.
/// Only the (tier, period, chunk) files some sample actually lands in are created.
struct FilesNeeded<'a> {
    shared: &'a Shared,
    /// Distinct (tier, period) pairs the batch touches, each with the chunks landing there.
    periods: Vec<PeriodNeed>,
    /// Per tier, the entry of `periods` the last timestamp seen lands in.
    current: Vec<Option<usize>>,
    last_ts: Option<Timestamp>,
    slot_bits: u32,
    /// Files that could not be created: (tier, period start, chunk).
    failed: Vec<(usize, Timestamp, u32)>,
}

/// One period of one tier a batch writes into.
struct PeriodNeed {
    tier: usize,
    start: Timestamp,
    /// Bitset: bit `c` set when a sample of chunk `c` lands in this period.
    chunks: Vec<u64>,
}

impl<'a> FilesNeeded<'a> {
    fn new(shared: &'a Shared) -> Self {
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
    fn note(&mut self, sample: &Sample, windows: &[Timestamp]) {
        if self.last_ts != Some(sample.ts) {
            self.last_ts = Some(sample.ts);
            for (tier, spec) in self.shared.config.tiers.iter().enumerate() {
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
    fn create_missing(&mut self) {
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
    fn blocked(&self, sample: &Sample, windows: &[Timestamp]) -> bool {
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
struct Bounds {
    /// Per tier, the first second it holds.
    windows: Arc<[Timestamp]>,
    /// The first second the raw tier holds (`Timestamp::MAX` without one).
    raw_window: Timestamp,
    limits: SampleLimits,
}

/// The limits each sample is checked against.
struct SampleLimits {
    /// The earliest second any tier holds.
    oldest: Timestamp,
    /// The latest second accepted (now + future_bound).
    newest: Timestamp,
    /// Ids below this were handed out by the registry.
    known_series: usize,
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

impl SampleLimits {
    #[inline]
    fn check(&self, sample: &Sample) -> std::result::Result<(), RejectReason> {
        check_value_and_time(sample.value, sample.ts, (self.oldest, self.newest))?;
        if sample.series.index() >= self.known_series {
            Err(RejectReason::UnknownSeries)
        } else {
            Ok(())
        }
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
}

impl Engine {
    /// A builder for the data directory `dir` with the default tiers and the system clock.
    pub fn builder(dir: impl AsRef<Path>) -> EngineBuilder {
        EngineBuilder {
            dir: dir.as_ref().to_path_buf(),
            tiers: TiersConfig::default(),
            tiers_given: false,
            clock: Arc::new(SystemClock),
            writer_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            background_maintenance: true,
            maintenance_every: None,
            read_only: false,
        }
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

    /// Creates the files of a new chunk ahead of the series that will need them: on the
    /// chunk creator's thread when background work runs (the caller, an import's parser or
    /// a connection, goes on at once; a batch that needs a file not made yet creates it
    /// itself), else here. A failure (a full disk) does not refuse the series, whose id is
    /// already handed out: its samples are refused as `storage_unavailable` until their
    /// files can be created, and maintenance tries again.
    fn after_new_series(&self) {
        if self.shared.chunks_needed() > self.shared.chunks_ready.load(Ordering::Acquire) {
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
    /// directory cleanly (see [`crate::storage::recovery`]); `None` after a clean close and
    /// for a read-only engine.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.recovery.as_ref()
    }

    /// The read side: queries, aggregates and raw bucket reads.
    pub fn reader(&self) -> Reader<'_> {
        let shared = &*self.shared;
        Reader::new(
            &shared.config,
            &shared.storage,
            shared.raw.as_ref(),
            &shared.registry,
            &shared.counter_table,
            &*shared.clock,
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
        self.shared
            .counter_table
            .declare(id, kind, &self.shared.registry)
    }

    /// The buckets of `cells` as they stand, whichever form their periods are in (see
    /// [`Storage::load_cells`]): the pre-images an undo keeps before a change.
    ///
    /// # Errors
    /// As [`Storage::load_cells`].
    pub fn load_cells(&self, cells: &[CellAt]) -> Result<Vec<Bucket>> {
        self.shared.storage.load_cells(cells)
    }

    /// Puts absolute buckets back into `cells` (see [`Storage::overwrite_cells`]); durable
    /// with the next [`Engine::flush`]. Returns how many cells changed. Only valid while no
    /// batch runs and no read of these cells does: an undo at open, before the engine is
    /// handed out.
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::Poisoned`], and as [`Storage::overwrite_cells`].
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn restore_cells(&self, cells: &[(CellAt, Bucket)]) -> Result<usize> {
        self.check_writable()?;
        self.shared.check_poison()?;
        self.shared.storage.overwrite_cells(cells)
    }

    /// Sets `cells` to absolute buckets, creating the period files they need: what an import
    /// of another tool's rollups writes, so that importing the same data again changes
    /// nothing. Durable with the next [`Engine::flush`] or [`Engine::close`]. Only valid while
    /// no batch and no read of these cells runs (an import holding the directory alone).
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::Poisoned`], and as [`Storage::import_cells`].
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub(crate) fn import_cells(&self, cells: &[(CellAt, Bucket)]) -> Result<usize> {
        self.check_writable()?;
        self.shared.check_poison()?;
        self.shared.storage.import_cells(cells)
    }

    /// Series `id`'s counter state record (flags with the declared kind, a counter's last
    /// time and raw value as bits; zeros when never written), for an undo to put back.
    pub fn counter_state(&self, id: SeriesId) -> [u64; 3] {
        self.shared.counter_table.snapshot(id)
    }

    /// Puts series `id`'s counter state record back to `record`, its kind evaluated again
    /// from it; durable with the next [`Engine::flush`]. Only valid while no batch runs.
    ///
    /// # Errors
    /// [`Error::ReadOnly`].
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn restore_counter_state(&self, id: SeriesId, record: [u64; 3]) -> Result<()> {
        self.check_writable()?;
        self.shared
            .counter_table
            .restore(id, record, &self.shared.registry);
        Ok(())
    }

    /// The time of series `id`'s last raw point: `None` without a raw tier or without a
    /// point. What an undo keeps of the raw tier ([`Engine::truncate_raw_after`]).
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn raw_last_time(&self, id: SeriesId) -> Option<Timestamp> {
        self.shared.raw.as_ref()?.last_time(id.0)
    }

    /// Takes series `id`'s raw points after `last` away (all for `None`; see
    /// [`RawStore::truncate_after`]); durable with the next [`Engine::flush`]. Returns the
    /// points taken away. Only valid at open, before any batch: the writers keep the raw
    /// tails they met.
    ///
    /// # Errors
    /// [`Error::ReadOnly`].
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn truncate_raw_after(
        &self,
        id: SeriesId,
        last: Option<Timestamp>,
    ) -> Result<usize> {
        self.check_writable()?;
        Ok(self
            .shared
            .raw
            .as_ref()
            .map_or(0, |raw| raw.truncate_after(id.0, last)))
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
    /// [`Engine::sync`], or when the buffer fills.
    ///
    /// # Errors
    /// [`Error::Rejected`] with the reason when the sample is refused (also counted),
    /// [`Error::InvalidSeries`], [`Error::Poisoned`], [`Error::Io`].
    pub fn record(&self, series: &str, ts: Timestamp, value: f64) -> Result<()> {
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
        if let Err(reason) = self.limits(self.shared.clock.now()).check(&sample) {
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
        let mut files = FilesNeeded::new(&self.shared);
        for sample in samples {
            if bounds.limits.check(sample).is_ok() {
                files.note(sample, &bounds.windows);
            }
        }
        files.create_missing();
        let mut report = BatchReport::default();
        let mut parts = self.writers.take_buffers();
        let n = parts.len();
        let mut counter_step = self.shared.counter_table.for_batch(&self.shared.registry);
        for (position, sample) in samples.iter().enumerate() {
            match bounds.limits.check(sample) {
                Ok(()) if !files.failed.is_empty() && files.blocked(sample, &bounds.windows) => {
                    report.reject(position, RejectReason::StorageUnavailable);
                }
                Ok(()) => {
                    let mut stored = *sample;
                    if let Some(counters) = &mut counter_step {
                        match counters.apply(sample) {
                            Ok(Some(value)) => stored.value = value,
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
        let tally = &self.shared.tally;
        tally.accepted.fetch_add(report.accepted, Ordering::Relaxed);
        for (counter, count) in tally.rejected.iter().zip(report.rejected) {
            if count > 0 {
                counter.fetch_add(count, Ordering::Relaxed);
            }
        }
        report.raw = self
            .writers
            .run(parts, &bounds.windows, bounds.raw_window)?;
        if !report.raw.is_empty() {
            tally
                .raw
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .add(&report.raw);
        }
        if let Some(counters) = counter_step {
            counters.commit();
        }
        Ok(report)
    }

    /// The bucket cells `samples` (counter samples about to be stored) change, each as it is
    /// now and with how many of them it gets: the undo a crash before
    /// [`crate::counter::BatchCounters::commit`] is rolled back with.
    fn counter_undo(&self, samples: &[Sample], windows: &[Timestamp]) -> Vec<Undo> {
        let shared = &self.shared;
        let tiers = &shared.config.tiers;
        let slots = shared.storage.slots();
        let mut undo = Vec::new();
        // Per series and tier, the bucket start of its last cell and that cell's undo entry: a
        // counter's samples in a batch are in time order (older ones are refused), so its
        // cells in each tier come one after another.
        let mut last: rustc_hash::FxHashMap<u32, Vec<(Timestamp, usize)>> =
            rustc_hash::FxHashMap::default();
        for sample in samples {
            let (chunk, slot) = (sample.series.0 / slots, sample.series.0 % slots);
            let cells = last
                .entry(sample.series.0)
                .or_insert_with(|| vec![(Timestamp::MIN, 0); tiers.len()]);
            for (tier, spec) in tiers.iter().enumerate() {
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
                        tier,
                        period_start: p.period_start,
                        chunk,
                        bucket: p.bucket,
                        slot,
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
        let result = self
            .shared
            .registry
            .sync()
            .and_then(|()| self.shared.counter_table.flush())
            .and_then(|()| self.shared.storage.flush())
            .and_then(|()| self.shared.raw.as_ref().map_or(Ok(()), RawStore::flush));
        if let Err(e) = &result {
            self.shared.poison(e.to_string());
        }
        result
    }

    /// Runs `copy` on the engine's directory while no maintenance pass runs and no batch
    /// stores anything, so no file is created, swapped, dropped or written meanwhile. The
    /// caller stops its own writes first: a cluster partition's store copies its files
    /// this way between two groups of messages ([`crate::cluster::snapshot`]).
    #[cfg(feature = "server")]
    pub(crate) fn with_files_still<R>(&self, copy: impl FnOnce(&Path) -> R) -> R {
        // The order a maintenance pass takes them in: its lock, then the batch gate.
        let _no_pass = self
            .shared
            .pass_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let _no_batch = self.shared.storage.hold_batches();
        copy(self.dir())
    }

    /// Counters and what each tier holds on disk.
    pub fn stats(&self) -> EngineStats {
        let shared = &self.shared;
        let now = shared.clock.now();
        let mut tiers: Vec<TierStats> = shared
            .config
            .tiers
            .iter()
            .enumerate()
            .map(|(i, t)| TierStats::new(t, now, shared.storage.tier_files(i, now)))
            .collect();
        if let Some(raw) = &shared.raw {
            tiers.push(TierStats::raw(raw.spec(), now, raw.files(now)));
        }
        EngineStats {
            now,
            series: shared.registry.len(),
            counters: shared.counter_table.count(&shared.registry),
            accepted: shared.tally.accepted.load(Ordering::Relaxed),
            rejected: RejectReason::ALL
                .iter()
                .map(|r| {
                    (
                        r.as_str(),
                        shared.tally.rejected[r.index()].load(Ordering::Relaxed),
                    )
                })
                .collect(),
            on_demand_creations: tiers.iter().map(|t| t.disk.on_demand_creations).sum(),
            maintenance_failures: shared.maintenance.failures(),
            maintenance_error: shared.maintenance.last_error(),
            raw: *shared.tally.raw.lock().unwrap_or_else(|e| e.into_inner()),
            tiers,
            orphaned_tiers: shared.storage.orphaned_tiers().to_vec(),
        }
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

    /// Stops the writers, flushes and unlocks, reporting any failure (dropping the engine does
    /// the same but can only log failures).
    ///
    /// # Errors
    /// As [`Engine::flush`], or a writer thread's failure.
    pub fn close(mut self) -> Result<()> {
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

/// A picture of the engine for `info` and `/metrics`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EngineStats {
    /// The clock's reading when the stats were taken.
    pub now: Timestamp,
    /// Series registered.
    pub series: usize,
    /// Of those, counters (stored as increases).
    pub counters: usize,
    /// Samples accepted since open.
    pub accepted: u64,
    /// Samples refused since open, per reason.
    pub rejected: Vec<(&'static str, u64)>,
    /// Period files created by the write path because a sample needed one that did not exist
    /// (a backfill, a gap after downtime, or a new chunk's file the chunk creator had not
    /// made yet when its first samples came).
    pub on_demand_creations: u64,
    /// Maintenance passes that failed since open (at open included).
    pub maintenance_failures: u64,
    /// The last maintenance pass's error, while the last pass failed.
    pub maintenance_error: Option<String>,
    /// What the raw tier did with accepted samples since open (zero without one).
    pub raw: RawCounts,
    /// Per tier: configuration, window and files; the raw tier, when configured, last.
    pub tiers: Vec<TierStats>,
    /// Tier directories on disk that the configuration no longer names.
    pub orphaned_tiers: Vec<String>,
}

impl EngineStats {
    /// The stats of an engine holding nothing, with `tiers` at `now`: where a cluster node
    /// that applies no partition starts (see [`EngineStats::absorb`]).
    pub fn empty(tiers: &TiersConfig, now: Timestamp) -> EngineStats {
        EngineStats {
            now,
            series: 0,
            counters: 0,
            accepted: 0,
            rejected: Vec::new(),
            on_demand_creations: 0,
            maintenance_failures: 0,
            maintenance_error: None,
            raw: RawCounts::default(),
            tiers: tiers
                .tiers
                .iter()
                .map(|t| TierStats::new(t, now, TierFiles::default()))
                .chain((tiers.raw.iter()).map(|r| TierStats::raw(r, now, TierFiles::default())))
                .collect(),
            orphaned_tiers: Vec::new(),
        }
    }

    /// Adds `other`'s counts to these: what a cluster node reports for the partitions it
    /// applies, each an engine of its own with the same tiers. Files, bytes, series and
    /// counters add up; a tier's oldest period is the oldest of both, its newest the newest.
    pub fn absorb(&mut self, other: &EngineStats) {
        self.series += other.series;
        self.counters += other.counters;
        self.accepted += other.accepted;
        self.raw.add(&other.raw);
        for &(reason, n) in &other.rejected {
            match self.rejected.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, total)) => *total += n,
                None => self.rejected.push((reason, n)),
            }
        }
        self.maintenance_failures += other.maintenance_failures;
        if self.maintenance_error.is_none() {
            self.maintenance_error.clone_from(&other.maintenance_error);
        }
        for theirs in &other.tiers {
            let Some(ours) = self.tiers.iter_mut().find(|t| t.name == theirs.name) else {
                self.tiers.push(theirs.clone());
                continue;
            };
            ours.disk.absorb(&theirs.disk);
        }
        self.on_demand_creations = self.tiers.iter().map(|t| t.disk.on_demand_creations).sum();
        for orphan in &other.orphaned_tiers {
            if !self.orphaned_tiers.contains(orphan) {
                self.orphaned_tiers.push(orphan.clone());
            }
        }
    }
}

/// One tier in [`EngineStats`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct TierStats {
    /// Tier name.
    pub name: String,
    /// `rollup`, or `raw` for the tier of exact points.
    pub kind: &'static str,
    /// Bucket width; 0s for the raw tier, which has none.
    pub resolution: Span,
    /// Time per file.
    pub period: Span,
    /// How long files are kept.
    pub retention: Span,
    /// First second the tier holds now.
    pub window_start: Timestamp,
    /// Files on disk.
    pub disk: TierFiles,
}

impl TierStats {
    /// Tier `spec` at `now`, holding `disk`.
    fn new(spec: &TierSpec, now: Timestamp, disk: TierFiles) -> TierStats {
        TierStats {
            name: spec.name.clone(),
            kind: "rollup",
            resolution: spec.resolution,
            period: spec.period,
            retention: spec.retention,
            window_start: spec.window_start(now),
            disk,
        }
    }

    /// The raw tier `spec` at `now`, holding `disk`.
    fn raw(spec: &RawTierSpec, now: Timestamp, disk: TierFiles) -> TierStats {
        TierStats {
            name: spec.name.clone(),
            kind: "raw",
            resolution: Span::from_secs(0),
            period: spec.period,
            retention: spec.retention,
            window_start: spec.window_start(now),
            disk,
        }
    }
}
