//! Opening a data directory: [`EngineBuilder`] settles the tiers against the stored ones,
//! takes the directory's lock, opens (or creates) the registry, the storage and the raw
//! tier, repairs what an unclean stop left, and starts the writers and maintenance.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::creator::ChunkCreator;
use super::maintenance::{maintenance_interval, MaintenanceThread, Prefault};
use super::writer::WriterPool;
use super::{ApplyLog, Checkpoints, Engine, Pending, Shared};
use crate::clock::{Clock, SystemClock};
use crate::config::TiersConfig;
use crate::counter::CounterTable;
use crate::error::Error;
use crate::error::Result;
use crate::registry::Registry;
use crate::storage::lock::DirLock;
use crate::storage::raw::RawStore;
use crate::storage::{Storage, OPEN_MARKER};

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

/// How to open an [`Engine`]: `Engine::builder(dir).tiers(cfg).open()?`.
pub struct EngineBuilder {
    dir: PathBuf,
    tiers: TiersConfig,
    /// Whether [`EngineBuilder::tiers`] was called: without it, the configuration stored in
    /// the directory is used when there is one.
    tiers_given: bool,
    /// The `[counters]` rules the directory stores, once settled: the rules its series
    /// without a recorded kind were created under (`None` when it stores no tiers).
    stored_counters: Option<crate::config::SeriesRules>,
    clock: Arc<dyn Clock>,
    writer_threads: usize,
    background_maintenance: bool,
    maintenance_every: Option<std::time::Duration>,
    read_only: bool,
    checkpoints: Checkpoints,
    /// The apply's fault hook, set by the tests in place of the environment's.
    #[cfg(test)]
    apply_fault: Option<super::apply::Fault>,
}

impl EngineBuilder {
    /// The builder [`Engine::builder`] hands out: the default tiers, the system clock, a
    /// writer thread per core, background maintenance on.
    pub(super) fn new(dir: &Path) -> EngineBuilder {
        EngineBuilder {
            dir: dir.to_path_buf(),
            tiers: TiersConfig::default(),
            tiers_given: false,
            stored_counters: None,
            clock: Arc::new(SystemClock),
            writer_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            background_maintenance: true,
            maintenance_every: None,
            read_only: false,
            checkpoints: Checkpoints::default(),
            #[cfg(test)]
            apply_fault: None,
        }
    }

    /// Opens with `tiers`. Without this call, the open uses the configuration stored in the
    /// directory (`<dir>/tiers.toml`, written when the directory was created), or
    /// [`TiersConfig::default`] for a directory that has none. Given tiers that differ from
    /// the stored ones where the files depend on it are refused ([`Error::TiersConflict`]);
    /// a rollup tier's changed period is taken, the old one recorded for the files before a
    /// boundary (docs/file-format.md, "Period changes"; refused by a read-only open until a
    /// writable one recorded it); other differences (retention, create_ahead, tiers added,
    /// removed or reordered, counter rules) are logged at warn, accepted, and stored by a
    /// writable open. Changed counter
    /// rules apply to series created from then on; existing series keep their kind.
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
        self.stored_counters = Some(stored.counters.clone());
        if !self.tiers_given {
            self.tiers = stored;
            return Ok(false);
        }
        let stored_path = crate::storage::stored_tiers::stored_path(&self.dir);
        let dir = self.dir.clone();
        let future_bound = stored
            .engine
            .future_bound
            .max(self.tiers.engine.future_bound);
        let latest = (self.clock.now()).saturating_add(future_bound.secs() as i64);
        let recorded =
            crate::config::record_period_changes(&stored, &mut self.tiers, &mut |set, old| {
                let newest = crate::storage::newest_period_start(&dir, &stored, set, &old.name)?;
                Ok(crate::config::period_change_boundary(old, newest, latest))
            })?;
        if self.read_only && !recorded.is_empty() {
            // A writer beside it may still be cutting files with the stored period: the
            // boundary is the writable open's to choose and record.
            let changes: Vec<String> = (recorded.iter())
                .map(|r| {
                    format!(
                        "set {:?} tier {:?} period: {} in the directory, {} given",
                        r.set, r.tier, r.change.period, r.period
                    )
                })
                .collect();
            return Err(Error::TiersConflict {
                path: stored_path,
                given: "the given configuration".to_owned(),
                differences: format!(
                    "{} (a period change is recorded by the first writable open; open the \
                     directory for writing once with these tiers, or read it without them)",
                    changes.join("; ")
                ),
            });
        }
        crate::config::check_given(&stored_path, &stored, &self.tiers)?;
        for r in &recorded {
            tracing::warn!(
                dir = %self.dir.display(),
                set = %r.set,
                tier = %r.tier,
                old_period = %r.change.period,
                new_period = %r.period,
                boundary = %crate::time::format_ts(r.change.until),
                "a tier's period changes: files before the boundary keep the old period, files from it on have the new one"
            );
        }
        // Said at warn: a removed tier's files stay on disk unread. Changed counter rules
        // apply to new series; the counter table says which existing ones they leave alone.
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
        registry.use_sets(self.set_rules())?;
        let apply_log = self.apply_log();
        let shared = self.into_shared(storage, registry, None)?;
        Ok(Engine {
            writers: WriterPool::start(&shared, 0)?,
            shared,
            maintenance: None,
            creator: None,
            pending: Mutex::new(Pending::default()),
            closed: false,
            recovery: None,
            apply_log,
        })
    }

    /// Runs background maintenance every `interval` instead of the interval derived from the
    /// tiers (`maintenance_interval`); for simulations that run time faster than the wall
    /// clock.
    pub fn maintenance_every(mut self, interval: std::time::Duration) -> Self {
        self.maintenance_every = Some(interval);
        self
    }

    /// Maps the period files of every configured tier (writable or not).
    /// When [`Engine::apply`] makes what it applied durable; [`Checkpoints::default`]
    /// without this call.
    pub fn checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = checkpoints;
        self
    }

    /// Arms the apply's fault hook in place of the environment's.
    #[cfg(test)]
    pub(super) fn apply_fault(mut self, fault: super::apply::Fault) -> Self {
        self.apply_fault = Some(fault);
        self
    }

    /// The apply state for the settled tiers: nothing applied until the recovery pass
    /// (`engine/recover.rs`) takes the files a directory holds.
    fn apply_log(&self) -> ApplyLog {
        let log = ApplyLog::new(&self.tiers, self.checkpoints);
        #[cfg(test)]
        let log = log.with_fault(self.apply_fault);
        log
    }

    /// The `[[set]]`s' rules, in order, for the registry to place new series by.
    fn set_rules(&self) -> Vec<crate::config::SeriesRules> {
        (self.tiers.sets.iter())
            .map(|set| set.series.clone())
            .collect()
    }

    fn open_storage(&self, writable: bool) -> Result<Storage> {
        Storage::open(&self.dir, &self.tiers, writable)
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
            self.stored_counters.clone(),
            &registry,
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
    /// ahead periods, but not the gap), starts the writers and the maintenance thread, and
    /// rolls back the groups [`Engine::apply`] left between their undo record and a
    /// checkpoint. A pass that fails (a full disk) does not fail the open: see
    /// [`super::EngineStats::maintenance_error`].
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration, [`Error::CorruptFile`] naming a damaged
    /// stored tiers file or a refused period file, [`Error::TiersConflict`] for given tiers the
    /// directory's files cannot take, [`Error::Locked`] when another process holds the
    /// directory (or another engine of this process: refused after a second, the lock being
    /// shared for an instant with each child this process starts), [`Error::Io`].
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
        registry.use_sets(self.set_rules())?;
        phases.lap("registry");
        let marker = self.dir.join(OPEN_MARKER);
        let started = std::time::Instant::now();
        let known: Vec<usize> = (0..self.tiers.set_count())
            .map(|set| registry.set_len(set))
            .collect();
        let recovery = storage.recover(marker.exists(), self.tiers.layout_fingerprint(), &known)?;
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
        let apply_log = self.apply_log();
        let shared = self.into_shared(storage, registry, Some(lock))?;
        phases.lap("counters");
        // Before the tiers are stored: a journal written under other tiers refuses the open,
        // and the stored rules are replaced only once the kinds they gave are recorded.
        let recovered = super::recover::run(&shared, &apply_log)?;
        phases.lap("journals");
        // Only now, with the period, raw and counter files checked against the
        // configuration: a directory from before tiers were stored gets the tiers its files
        // were made with, never ones they refuse.
        if store_tiers {
            crate::storage::stored_tiers::write_stored(&shared.dir, &shared.config)?;
        }
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
        tracing::info!(dir = %shared.dir.display(), phases = %phases, ?recovered, "opened");
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
            apply_log,
        })
    }
}
