//! The tier directories and their mapped period files: which files exist, creating them whole,
//! opening and checking them, flushing them.
//!
//! Layout of a data directory:
//! ```text
//! <data>/LOCK                         the writer's lock (pid inside)
//! <data>/OPEN                         present while a writer has the directory open
//! <data>/series.log                   the series registry
//! <data>/writers.state                the cell each writer thread is updating (see writer_state.rs)
//! <data>/tiers/<tier>/<start>-c<chunk>.tdb   a hot period: one chunk of series, mapped
//! <data>/tiers/<tier>/<start>-c<chunk>.tdc   a compacted period: immutable, read with pread
//! <data>/tiers/<tier>/<name>.tmp      a file being created (removed at open if left over)
//! <data>/sets/<set>/<tier>/...        a `[[set]]`'s tiers, their files named as above
//! ```
//!
//! A period's life: created ahead (hot) → written → closed → compacted → dropped. One
//! (tier, period, chunk) has one form at a time; a crash between writing a compacted file and
//! deleting the hot one (or back, for a late sample) leaves both, and then the hot one wins:
//! it holds everything the other does.

pub(crate) mod cells;
pub(crate) mod compact;
pub(crate) mod counter_journal;
pub(crate) mod counter_state;
pub(crate) mod create;
pub(crate) mod disk;
pub(crate) mod format;
pub(crate) mod histogram_cell;
pub(crate) mod journal;
pub(crate) mod lock;
pub(crate) mod mapped_cell;
mod mmap;
pub(crate) mod parallel;
#[cfg(test)]
mod pause;
pub(crate) mod period_file;
pub(crate) mod raw;
pub(crate) mod readers;
pub(crate) mod record_file;
pub(crate) mod recovery;
pub(crate) mod stored_tiers;
pub(crate) mod undo_entry;
pub(crate) mod writer_state;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::config::{TierSpec, TiersConfig};
use crate::error::Error;
use crate::error::Result;
use crate::time::Timestamp;
use compact::{CompactFile, CompactReader, COMPACT_SUFFIX};
use format::{CellLayout, PeriodMeta, FILE_SUFFIX};
use mapped_cell::{WriterSlot, Writers};
use period_file::{PeriodFile, WritableFile};

/// Directory under the data directory that holds one directory per tier of the default set.
pub(crate) const TIERS_DIR: &str = "tiers";
/// Directory under the data directory that holds one directory per `[[set]]`, each with one
/// directory per tier of the set.
pub(crate) const SETS_DIR: &str = "sets";

/// Marks a data directory as open for writing, with the writer's pid inside. Found at open, it
/// means the last process died without closing, so bucket cells may carry a stale
/// update-in-flight bit to clear; found by a read-only process's read, naming a live pid, it
/// means a writer may be mid-update on a cell (see [`mapped_cell::BucketCell`]).
pub(crate) const OPEN_MARKER: &str = "OPEN";

/// All tiers' files.
pub(crate) struct Storage {
    root: PathBuf,
    tiers: Vec<TierStore>,
    slots: u32,
    writable: bool,
    /// Who may update the cells while this process reads them; every file holds a clone.
    writers: Arc<Writers>,
    /// Tier directories on disk that the configuration no longer has: (name, set, path).
    orphaned_tiers: Vec<(String, usize, PathBuf)>,
    /// Each tier's set, by storage index.
    set_of_tier: Vec<usize>,
    /// Held shared by every batch from the moment it picks its files until its writers are
    /// done, and exclusively by a compaction while it swaps a hot file for its compacted
    /// form: so no store lands in a file after the compaction read it.
    batch_gate: RwLock<()>,
    /// Bumped whenever a hot file is retired, so writers look for retired files in their
    /// caches only when there may be one.
    retirements: AtomicU64,
    /// Compacted files kept open between reads.
    readers: readers::Readers,
    /// Right after [`Storage::compact`]'s swap: the test of a late write landing there.
    #[cfg(test)]
    after_swap: pause::PausePoint,
    /// In [`Storage::drop_before`], after the expired periods left the map, before their
    /// files are unlinked: the test of a creation landing there.
    #[cfg(test)]
    after_forget: pause::PausePoint,
}

/// One (tier, period, chunk) as the storage holds it.
#[derive(Clone)]
pub(crate) enum StoredPeriod {
    /// Preallocated and mapped: the form that is written.
    Hot(Arc<PeriodFile>),
    /// Closed and compacted: immutable, read with pread, not mapped.
    Compacted(Arc<CompactFile>),
}

/// A chunk of a period as [`Storage::hot_chunks`] finds it.
pub(crate) struct HotChunk {
    pub(crate) chunk: u32,
    /// Whether the chunk has a hot file (else it has none, or only a compacted one).
    pub(crate) hot: bool,
    /// The hot file to store into: `None` without one, when it is retired (compacted
    /// meanwhile) or when this storage is read-only.
    pub(crate) file: Option<WritableFile>,
}

/// One (tier, period, chunk) as a read holds it: the mapping, or the compacted file opened
/// (so an unlink by a late write or an expiry during the read does not take it away).
pub(crate) enum HeldPeriod {
    /// Mapped: buckets are loaded from the cells.
    Hot(Arc<PeriodFile>),
    /// Compacted: a slot is read and decoded whole.
    Compacted(Arc<CompactReader>),
}

impl HeldPeriod {
    /// The end of the file, which starts at `period_start`: its own period after it (a file
    /// cut before a period change has the earlier period).
    pub(crate) fn end(&self, period_start: Timestamp) -> Timestamp {
        let period = match self {
            HeldPeriod::Hot(file) => file.meta().period,
            HeldPeriod::Compacted(reader) => reader.file().meta().period,
        };
        period_start.saturating_add(period.secs() as i64)
    }
}

impl StoredPeriod {
    /// Where the file lives.
    pub(crate) fn path(&self) -> &Path {
        match self {
            StoredPeriod::Hot(file) => file.path(),
            StoredPeriod::Compacted(file) => file.path(),
        }
    }

    /// The mapped file, when the period is hot.
    pub(crate) fn hot(&self) -> Option<&Arc<PeriodFile>> {
        match self {
            StoredPeriod::Hot(file) => Some(file),
            StoredPeriod::Compacted(_) => None,
        }
    }
}

/// One tier's files, keyed by (period start, chunk). Tiers of every set are held one after
/// another, the default set's first ([`TiersConfig::all_tiers`]'s order).
struct TierStore {
    spec: TierSpec,
    dir: PathBuf,
    files: RwLock<BTreeMap<(Timestamp, u32), StoredPeriod>>,
    /// Serialises creation so two writers needing the same new file create it once, and
    /// against an expiry's unlinks; readers and writers of existing files never wait on it.
    create_lock: Mutex<()>,
    /// The lists of files created in groups and not synced yet ([`create`]), removed by the
    /// flush that syncs them.
    unsynced_lists: Mutex<Vec<PathBuf>>,
    created_ahead: AtomicU64,
    created_on_demand: AtomicU64,
    dropped: AtomicU64,
    compacted: AtomicU64,
    rehydrated: AtomicU64,
}

/// Why a file is being created, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Creation {
    /// Ahead of need, by maintenance (or at open, or when series growth needs a new chunk).
    Ahead,
    /// By the write path, because a sample needed a file that did not exist (a backfill, a
    /// gap after downtime, or maintenance running late).
    OnDemand,
}

/// What one tier holds on disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TierFiles {
    /// Period files on disk.
    pub files: usize,
    /// Bytes they take (all reserved at creation).
    pub bytes: u64,
    /// Start of the oldest period held.
    pub oldest_period: Option<Timestamp>,
    /// Start of the newest period held.
    pub newest_period: Option<Timestamp>,
    /// Periods held that start after the current one.
    pub periods_ahead: usize,
    /// Files this process created ahead of need.
    pub created_ahead: u64,
    /// Files this process created because a sample needed them.
    pub on_demand_creations: u64,
    /// Files this process dropped because they left the retention window.
    pub dropped: u64,
    /// Periods held compacted.
    pub compacted_files: usize,
    /// Hot files this process compacted.
    pub compactions: u64,
    /// Compacted periods this process made hot again for a late sample.
    pub rehydrations: u64,
}

impl TierFiles {
    /// Adds another engine's files of the same tier (see [`crate::EngineStats::absorb`]).
    pub fn absorb(&mut self, other: &TierFiles) {
        self.files += other.files;
        self.bytes += other.bytes;
        self.oldest_period = match (self.oldest_period, other.oldest_period) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.newest_period = self.newest_period.max(other.newest_period);
        self.periods_ahead = self.periods_ahead.max(other.periods_ahead);
        self.created_ahead += other.created_ahead;
        self.on_demand_creations += other.on_demand_creations;
        self.dropped += other.dropped;
        self.compacted_files += other.compacted_files;
        self.compactions += other.compactions;
        self.rehydrations += other.rehydrations;
    }
}

impl Storage {
    /// Opens (and, when `writable`, creates) the tier directories under `root`, every set's,
    /// and maps every period file found. Leftover `*.tmp` files from a creation cut short by
    /// a crash are removed with a log line. Directories of tiers no longer configured are
    /// left alone and reported by [`Storage::orphaned_tiers`].
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the first file whose header is damaged, foreign, of
    /// another format version, or does not match the tier's configuration; [`Error::Io`].
    pub(crate) fn open(root: &Path, config: &TiersConfig, writable: bool) -> Result<Storage> {
        let slots = config.engine.series_per_chunk;
        let writers = Arc::new(if writable {
            let names = config.all_tiers().map(|(_, t)| t.name.clone()).collect();
            Writers::open_in_process(root, names)?
        } else {
            Writers::OtherProcess {
                marker: root.join(OPEN_MARKER),
            }
        });
        let mut stores = Vec::with_capacity(config.tier_count());
        let mut orphaned_tiers = Vec::new();
        for set in 0..config.set_count() {
            let set_root = set_dir(root, config, set);
            if writable {
                std::fs::create_dir_all(&set_root).map_err(|e| Error::io(&set_root, e))?;
            }
            let tiers = config.set_tiers(set);
            for spec in tiers {
                let dir = set_root.join(&spec.name);
                if writable {
                    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
                }
                let store = TierStore {
                    spec: spec.clone(),
                    dir,
                    files: RwLock::new(BTreeMap::new()),
                    create_lock: Mutex::new(()),
                    unsynced_lists: Mutex::new(Vec::new()),
                    created_ahead: AtomicU64::new(0),
                    created_on_demand: AtomicU64::new(0),
                    dropped: AtomicU64::new(0),
                    compacted: AtomicU64::new(0),
                    rehydrated: AtomicU64::new(0),
                };
                store.load_existing(slots, &writers)?;
                stores.push(store);
            }
            for name in list_dirs(&set_root)? {
                if !tiers.iter().any(|t| t.name == name) {
                    let shown = match set {
                        0 => name.clone(),
                        _ => format!("{}/{name}", config.set_name(set)),
                    };
                    orphaned_tiers.push((shown, set, set_root.join(&name)));
                }
            }
        }
        for (name, _, _) in &orphaned_tiers {
            tracing::warn!(tier = %name, "files of a tier no longer in the configuration are left in place");
        }
        Ok(Storage {
            tiers: stores,
            set_of_tier: config.all_tiers().map(|(set, _)| set).collect(),
            slots,
            root: root.to_path_buf(),
            writable,
            writers,
            orphaned_tiers,
            batch_gate: RwLock::new(()),
            retirements: AtomicU64::new(0),
            readers: readers::Readers::new(),
            #[cfg(test)]
            after_swap: pause::PausePoint::default(),
            #[cfg(test)]
            after_forget: pause::PausePoint::default(),
        })
    }

    /// The shared side of the batch gate (see the field): a batch holds it from choosing its
    /// files until its writers finish.
    pub(crate) fn batch_gate(&self) -> RwLockReadGuard<'_, ()> {
        self.batch_gate.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The exclusive side of the batch gate: no batch stores anything, and no compaction
    /// swaps a file, while it is held.
    pub(crate) fn hold_batches(&self) -> RwLockWriteGuard<'_, ()> {
        self.batch_gate.write().unwrap_or_else(|e| e.into_inner())
    }

    /// How many hot files have been retired so far (see the field).
    pub(crate) fn retirements(&self) -> u64 {
        self.retirements.load(Ordering::Acquire)
    }

    /// Number of configured tiers.
    pub(crate) fn tier_count(&self) -> usize {
        self.tiers.len()
    }

    /// Series slots per chunk file.
    pub(crate) fn slots(&self) -> u32 {
        self.slots
    }

    /// Names of tier directories on disk that the configuration no longer has (`set/tier`
    /// for a `[[set]]`'s).
    pub(crate) fn orphaned_tiers(&self) -> Vec<String> {
        (self.orphaned_tiers.iter())
            .map(|(name, _, _)| name.clone())
            .collect()
    }

    /// The set of the tier at storage index `tier`.
    pub(crate) fn set_of_tier(&self, tier: usize) -> usize {
        self.set_of_tier[tier]
    }

    /// Repairs (see [`WritableFile::repair`]) every period file in the directories of tiers the
    /// configuration no longer names, so a tier left out at an unclean open and brought back
    /// later does not keep a crash's leftovers. Files that cannot be opened are skipped with
    /// a warning: they are not in use. `known_series` gives how many places each set has
    /// handed out. Returns (interrupted updates, cleared cells).
    pub(crate) fn repair_orphans(&self, known_series: &[usize]) -> (usize, usize) {
        let mut total = (0, 0);
        for (_, set, dir) in &self.orphaned_tiers {
            let known_series = known_series.get(*set).copied().unwrap_or(0);
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().and_then(|e| e.to_str()) != Some(&FILE_SUFFIX[1..]) {
                    continue;
                }
                match PeriodFile::open_as_found(&path, &self.writers) {
                    Ok(Some(file)) => {
                        let (interrupted, cleared) = file.repair(known_series);
                        total = (total.0 + interrupted, total.1 + cleared);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "not repairing an orphaned file"),
                }
            }
        }
        total
    }

    /// The hot file of `tier` for the period starting at `period_start` and chunk `chunk`, if
    /// the period is held hot.
    #[inline]
    pub(crate) fn file(
        &self,
        tier: usize,
        period_start: Timestamp,
        chunk: u32,
    ) -> Option<Arc<PeriodFile>> {
        self.stored(tier, period_start, chunk)
            .and_then(|p| p.hot().cloned())
    }

    /// The period of `tier` starting at `period_start` for chunk `chunk`, in whichever form
    /// it is held.
    pub(crate) fn stored(
        &self,
        tier: usize,
        period_start: Timestamp,
        chunk: u32,
    ) -> Option<StoredPeriod> {
        let files = self.tiers[tier]
            .files
            .read()
            .unwrap_or_else(|e| e.into_inner());
        files.get(&(period_start, chunk)).cloned()
    }

    /// The hot file, created whole first when missing, or made hot again from its compacted
    /// form (a late sample for a closed period). The flag says whether this call created it.
    ///
    /// # Errors
    /// [`Error::Io`] when creation fails (a full disk among others); read-only storage refuses;
    /// [`Error::CorruptFile`] when the compacted form cannot be read.
    pub(crate) fn get_or_create(
        &self,
        tier: usize,
        period_start: Timestamp,
        chunk: u32,
        why: Creation,
    ) -> Result<(Arc<PeriodFile>, bool)> {
        if let Some(file) = self.file(tier, period_start, chunk) {
            return Ok((file, false));
        }
        let store = &self.tiers[tier];
        if !self.writable {
            return Err(Error::io(
                &store.dir,
                std::io::Error::new(std::io::ErrorKind::PermissionDenied, "opened read-only"),
            ));
        }
        let _creating = store.create_lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(file) = self.file(tier, period_start, chunk) {
            return Ok((file, false));
        }
        let meta = store.meta(period_start, chunk, self.slots);
        let compacted = match self.stored(tier, period_start, chunk) {
            Some(StoredPeriod::Compacted(compacted)) => Some(compacted),
            _ => None,
        };
        let file = Arc::new(match &compacted {
            Some(source) => PeriodFile::create_from(&store.dir, &meta, &self.writers, source)?,
            None => PeriodFile::create(&store.dir, &meta, &self.writers)?,
        });
        {
            let mut files = store.files.write().unwrap_or_else(|e| e.into_inner());
            files.insert((period_start, chunk), StoredPeriod::Hot(Arc::clone(&file)));
            if let Some(source) = &compacted {
                // The hot file holds all the compacted one did; a crash before this unlink
                // leaves both, and the open keeps the hot one. Unlinked under the map's
                // lock: a compaction of the new hot file, which writes a file of the
                // compacted one's name, starts only once the map shows it, and so after.
                remove_file_logged(source.path());
            }
        }
        if let Some(source) = compacted {
            store.rehydrated.fetch_add(1, Ordering::Relaxed);
            self.readers.forget(&source);
            tracing::debug!(path = %file.path().display(), "made a compacted period hot for a late write");
        } else {
            match why {
                Creation::Ahead => &store.created_ahead,
                Creation::OnDemand => &store.created_on_demand,
            }
            .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(path = %file.path().display(), ?why, "created period file");
        }
        Ok((file, true))
    }

    /// The hot files of `tier` whose period ended at or before `ended_by` and that had no
    /// write since the previous call looked at them: the ones to compact; and how many such
    /// closed files were written since (to look at again soon).
    pub(crate) fn quiet_closed_files(
        &self,
        tier: usize,
        ended_by: Timestamp,
    ) -> (Vec<Arc<PeriodFile>>, usize) {
        let store = &self.tiers[tier];
        let files = store.files.read().unwrap_or_else(|e| e.into_inner());
        let (quiet, written): (Vec<_>, Vec<_>) = files
            .iter()
            .take_while(|((start, _), _)| store.spec.period_end(*start) <= ended_by)
            .filter_map(|(_, stored)| stored.hot())
            .partition(|file| file.quiet_since_last_look());
        (quiet.into_iter().cloned().collect(), written.len())
    }

    /// Replaces the hot `file` of `tier` by its compacted form, histograms included: written
    /// whole beside it, then, under the batch gate and if no batch stored into the file
    /// meanwhile, swapped in and the hot file deleted. Returns false (and leaves the hot
    /// file) when a write came in between; a later pass tries again.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file that could not be written.
    pub(crate) fn compact(&self, tier: usize, file: &Arc<PeriodFile>) -> Result<bool> {
        let store = &self.tiers[tier];
        let meta = file.meta().clone();
        let before = file.generation();
        let compacted = CompactFile::create(&store.dir, &meta, &|bucket, slot| {
            file.load_closed(bucket, slot)
        })?;
        die_if_armed("after_write");
        let key = (meta.period_start, meta.chunk);
        let swapped = {
            let _no_batch = self.hold_batches();
            let mut files = store.files.write().unwrap_or_else(|e| e.into_inner());
            let still_this_file =
                matches!(files.get(&key), Some(StoredPeriod::Hot(f)) if Arc::ptr_eq(f, file));
            if still_this_file && file.generation() == before {
                files.insert(key, StoredPeriod::Compacted(Arc::new(compacted)));
                file.retire();
                self.retirements.fetch_add(1, Ordering::AcqRel);
                // Before the map is seen compacted: a late write then makes the period hot
                // again in a new file of this name, which an unlink after the lock would
                // take with all it holds.
                remove_file_logged(file.path());
                true
            } else {
                remove_file_logged(compacted.path());
                false
            }
        };
        #[cfg(test)]
        self.after_swap.pass();
        if swapped {
            die_if_armed("after_swap");
            store.compacted.fetch_add(1, Ordering::Relaxed);
            disk::sync_dir(&store.dir)?;
        }
        Ok(swapped)
    }

    /// The file of `tier` for the period starting at `period_start` and chunk `chunk`, to
    /// store into: `None` when it does not exist or this storage is read-only.
    pub(crate) fn writable_file(
        &self,
        tier: usize,
        period_start: Timestamp,
        chunk: u32,
    ) -> Option<WritableFile> {
        self.file(tier, period_start, chunk)
            .filter(|file| !file.is_retired())
            .and_then(WritableFile::new)
    }

    /// A slot for a new writer thread to publish the cell it updates in (see
    /// [`mapped_cell::BucketCell`]); `Ok(None)` when read-only.
    ///
    /// # Errors
    /// [`Error::Io`] naming `writers.state` when it cannot grow.
    pub(crate) fn writer_slot(&self) -> Result<Option<WriterSlot>> {
        self.writers.register()
    }

    /// Every file, to store into; empty when read-only.
    #[cfg(test)]
    pub(crate) fn writable_files(&self) -> Vec<WritableFile> {
        self.all_files()
            .into_iter()
            .filter_map(WritableFile::new)
            .collect()
    }

    /// Every hot file of `tier` this storage may write.
    pub(crate) fn hot_files_of(&self, tier: usize) -> Vec<WritableFile> {
        let files = self.tiers[tier]
            .files
            .read()
            .unwrap_or_else(|e| e.into_inner());
        (files.values())
            .filter_map(|f| f.hot().cloned())
            .filter_map(WritableFile::new)
            .collect()
    }

    /// Every hot file, for flushing.
    pub(crate) fn all_files(&self) -> Vec<Arc<PeriodFile>> {
        self.tiers
            .iter()
            .flat_map(|t| {
                t.files
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .filter_map(StoredPeriod::hot)
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// msync of every file written since its last flush, [`FLUSH_THREADS`] at a time: an
    /// msync mostly waits on the disk, so several overlap their waits.
    ///
    /// When more files changed than there are flush threads, one thread first starts the
    /// writeback of every one of them, so the disk gets the whole flush as one stream and
    /// the msyncs then mostly wait. An import of 100k new series closes with about 1,600
    /// changed files (250 MB of dirty pages): 0.11-0.19 s to start their writeback and
    /// 0.02-0.04 s of msyncs after it, against 0.32-0.53 s of msyncs alone, where 8 threads
    /// each writing and waiting contend.
    ///
    /// # Errors
    /// The first msync failure in file order, naming the file; the other files are still
    /// synced.
    pub(crate) fn flush(&self) -> Result<()> {
        let lists = self.take_unsynced_lists();
        let mut files = self.all_files();
        files.retain(|file| file.is_dirty() || file.is_unsynced());
        if files.len() > FLUSH_THREADS {
            for file in &files {
                // Only a head start: the msync below writes and reports what this did not.
                if let Err(e) = file.start_writeback() {
                    tracing::debug!(error = %e, "starting writeback failed");
                }
            }
        }
        let flushed: Result<()> = parallel::in_parallel(&files, FLUSH_THREADS, |file| file.flush())
            .into_iter()
            .collect();
        if let Err(e) = flushed {
            for (tier, lists) in lists {
                self.put_back_lists(tier, lists);
            }
            return Err(e);
        }
        self.finish_unsynced_lists(lists)
    }

    /// What `tier` holds on disk, with periods after the one holding `now` counted as ahead.
    pub(crate) fn tier_files(&self, tier: usize, now: Timestamp) -> TierFiles {
        let store = &self.tiers[tier];
        let current = store.spec.period_start(now);
        let (files, hot_bytes, compacted, mut periods) = {
            let files = store.files.read().unwrap_or_else(|e| e.into_inner());
            let mut hot_bytes = 0;
            let mut compacted = Vec::new();
            for stored in files.values() {
                match stored {
                    StoredPeriod::Hot(file) => hot_bytes += file.disk_bytes(),
                    StoredPeriod::Compacted(file) => compacted.push(Arc::clone(file)),
                }
            }
            let periods: Vec<Timestamp> = files.keys().map(|k| k.0).collect();
            (files.len(), hot_bytes, compacted, periods)
        };
        periods.dedup();
        // A compacted file's size takes a stat the first time (files found at open): outside
        // the map's lock, so creation and compaction never wait on it.
        let compacted_bytes: u64 = compacted
            .iter()
            .map(|file| file.disk_bytes().unwrap_or(0))
            .sum();
        TierFiles {
            files,
            bytes: hot_bytes + compacted_bytes,
            compacted_files: compacted.len(),
            compactions: store.compacted.load(Ordering::Relaxed),
            rehydrations: store.rehydrated.load(Ordering::Relaxed),
            oldest_period: periods.first().copied(),
            newest_period: periods.last().copied(),
            periods_ahead: periods.iter().filter(|&&p| p > current).count(),
            created_ahead: store.created_ahead.load(Ordering::Relaxed),
            on_demand_creations: store.created_on_demand.load(Ordering::Relaxed),
            dropped: store.dropped.load(Ordering::Relaxed),
        }
    }

    /// The chunks among `chunks` (a bitset: bit `c` set for chunk `c`) of the period of
    /// `tier` starting at `period_start`, in ascending order, each with whether it has a hot
    /// file and that file to store into ([`Storage::writable_file`]). One read lock for the
    /// lot: a batch asks once per period it writes into, not once per chunk and block.
    pub(crate) fn hot_chunks(
        &self,
        tier: usize,
        period_start: Timestamp,
        chunks: &[u64],
    ) -> Vec<HotChunk> {
        let files = self.tiers[tier]
            .files
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let mut held = Vec::new();
        for (word_index, &word) in chunks.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let chunk = (word_index * 64) as u32 + bits.trailing_zeros();
                bits &= bits - 1;
                let hot = match files.get(&(period_start, chunk)) {
                    Some(StoredPeriod::Hot(file)) => Some(file),
                    _ => None,
                };
                held.push(HotChunk {
                    chunk,
                    hot: hot.is_some(),
                    file: hot
                        .filter(|file| !file.is_retired())
                        .and_then(|file| WritableFile::new(Arc::clone(file))),
                });
            }
        }
        held
    }

    /// Removes every file of `tier` whose period starts before `window_start` (so its end is
    /// older than now minus the retention): forgotten first, then unlinked, all under the
    /// tier's creation lock, so that a late write making the period's file anew (a batch
    /// whose windows were taken before this pass's clock) makes it after the unlink, not
    /// before it to lose it. Reads and stores of existing files do not wait on that lock.
    /// A query in flight keeps its `Arc` and so its mapping, which stays valid after the
    /// unlink; nothing reopens a file by path. Returns how many files went.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file that could not be unlinked (it is forgotten all the
    /// same and removed by the next open's maintenance).
    pub(crate) fn drop_before(&self, tier: usize, window_start: Timestamp) -> Result<usize> {
        let store = &self.tiers[tier];
        let no_creation = store.create_lock.lock().unwrap_or_else(|e| e.into_inner());
        let expired: Vec<StoredPeriod> = {
            let mut files = store.files.write().unwrap_or_else(|e| e.into_inner());
            let keep = files.split_off(&(window_start, 0));
            std::mem::replace(&mut *files, keep).into_values().collect()
        };
        if expired.is_empty() {
            return Ok(0);
        }
        #[cfg(test)]
        self.after_forget.pass();
        let mut first_error = None;
        for file in &expired {
            if let StoredPeriod::Compacted(compacted) = file {
                self.readers.forget(compacted);
            }
            match std::fs::remove_file(file.path()) {
                Ok(()) => {
                    tracing::debug!(path = %file.path().display(), "dropped expired period file");
                }
                Err(e) => {
                    first_error.get_or_insert(Error::io(file.path(), e));
                }
            }
        }
        drop(no_creation);
        store
            .dropped
            .fetch_add(expired.len() as u64, Ordering::Relaxed);
        disk::sync_dir(&store.dir)?;
        first_error.map_or(Ok(expired.len()), Err)
    }

    /// The periods of `chunk` in `tier` that overlap `[from, to)`, oldest first, held for a
    /// read: compacted ones opened and their index checked while the map's read lock keeps
    /// them from being unlinked. One lookup per period between the oldest and newest held,
    /// so the walk is bounded by the files held, not by the width of the range or the
    /// number of chunks.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] or [`Error::Io`] naming a compacted file that cannot be read.
    pub(crate) fn files_of_chunk(
        &self,
        tier: usize,
        chunk: u32,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<(Timestamp, HeldPeriod)>> {
        let store = &self.tiers[tier];
        let files = store.files.read().unwrap_or_else(|e| e.into_inner());
        let (Some(&(oldest, _)), Some(&(newest, _))) =
            (files.keys().next(), files.keys().next_back())
        else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        let mut start = store.spec.period_start(from.max(oldest));
        while start < to && start <= newest {
            match files.get(&(start, chunk)) {
                Some(StoredPeriod::Hot(file)) => {
                    found.push((start, HeldPeriod::Hot(Arc::clone(file))))
                }
                Some(StoredPeriod::Compacted(file)) => match self.readers.get(file) {
                    Ok(reader) => found.push((start, HeldPeriod::Compacted(reader))),
                    // Beside a writing process, which made the period hot again for a late
                    // sample, or dropped it, since this storage listed it.
                    Err(Error::Io { source, .. })
                        if !self.writable && source.kind() == std::io::ErrorKind::NotFound =>
                    {
                        if let Some(hot) = self.hot_again(store, start, chunk)? {
                            found.push((start, HeldPeriod::Hot(hot)));
                        }
                    }
                    Err(e) => return Err(e),
                },
                None => {}
            }
            start = store.spec.period_end(start);
        }
        Ok(found)
    }

    /// The hot file a writing process made of a period this read-only storage listed as
    /// compacted, mapped read-only for one read; `None` when that process dropped the period.
    ///
    /// # Errors
    /// As [`PeriodFile::open`], but for a missing file.
    fn hot_again(
        &self,
        store: &TierStore,
        period_start: Timestamp,
        chunk: u32,
    ) -> Result<Option<Arc<PeriodFile>>> {
        let meta = store.meta(period_start, chunk, self.slots);
        match PeriodFile::open(&store.dir.join(meta.file_name()), &meta, &self.writers) {
            Ok(file) => Ok(Some(Arc::new(file))),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The hot chunk files of `tier`'s period starting at `period_start`, in chunk order.
    pub(crate) fn period_files(
        &self,
        tier: usize,
        period_start: Timestamp,
    ) -> Vec<Arc<PeriodFile>> {
        let files = self.tiers[tier]
            .files
            .read()
            .unwrap_or_else(|e| e.into_inner());
        files
            .range((period_start, 0)..=(period_start, u32::MAX))
            .filter_map(|(_, stored)| stored.hot().cloned())
            .collect()
    }
}

impl TierStore {
    fn meta(&self, period_start: Timestamp, chunk: u32, slots: u32) -> PeriodMeta {
        PeriodMeta {
            tier: self.spec.name.clone(),
            resolution: self.spec.resolution,
            period: self.spec.period_at(period_start),
            period_start,
            slots,
            chunk,
            histogram_cells: CellLayout::new_file(self.spec.resolution),
        }
    }

    fn load_existing(&self, slots: u32, writers: &Arc<Writers>) -> Result<()> {
        let writable = writers.in_process();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !writable => return Ok(()),
            Err(e) => return Err(Error::io(&self.dir, e)),
        };
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        let mut compacted = Vec::new();
        let mut hot = Vec::new();
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, e))?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                tracing::warn!(path = %path.display(), "ignoring a file whose name is not UTF-8");
                continue;
            };
            names.push(name);
        }
        let unfinished = create::unfinished(&self.dir, &names)?;
        for name in names {
            let path = self.dir.join(&name);
            if name.ends_with(create::LIST_SUFFIX) {
                continue;
            }
            if disk::is_temp(&name) {
                if writable {
                    tracing::warn!(path = %path.display(), "removing a period file whose creation was cut short");
                    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                }
                continue;
            }
            if let Some(stem) = name.strip_suffix(COMPACT_SUFFIX) {
                let Some((period_start, chunk)) =
                    format::parse_file_name(&format!("{stem}{FILE_SUFFIX}"))
                else {
                    return Err(Error::corrupt(
                        &path,
                        "file name is not <start>-c<chunk>.tdc",
                    ));
                };
                compacted.push((period_start, chunk, path));
                continue;
            }
            let Some((period_start, chunk)) = format::parse_file_name(&name) else {
                if name.ends_with(FILE_SUFFIX) {
                    return Err(Error::corrupt(
                        &path,
                        "file name is not <start>-c<chunk>.tdb",
                    ));
                }
                tracing::warn!(path = %path.display(), "ignoring a file tierdb did not write");
                continue;
            };
            hot.push((period_start, chunk, path));
        }
        let opened = parallel::in_parallel(&hot, OPEN_THREADS, |(start, chunk, path)| {
            PeriodFile::open(path, &self.meta(*start, *chunk, slots), writers)
        });
        for ((start, chunk, path), opened) in hot.iter().zip(opened) {
            let listed = (path.file_name().and_then(|n| n.to_str()))
                .is_some_and(|name| unfinished.names.contains(name));
            match opened {
                Ok(file) => {
                    if listed {
                        // Whole in the page cache (a process crash), perhaps not on disk.
                        file.set_unsynced();
                    }
                    files.insert((*start, *chunk), StoredPeriod::Hot(Arc::new(file)));
                }
                // Created in a group whose flush a power loss forestalled: nothing stored
                // into it was durable, and a write that needs it creates it again.
                Err(Error::CorruptFile { .. }) if listed => {
                    if writable {
                        tracing::warn!(path = %path.display(), "removing a period file created just before a power loss, never synced");
                        std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
                    }
                }
                // A reader beside a running writer may see a file listed and then dropped.
                Err(Error::Io { source, .. })
                    if !writable && source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        // Compacted files are only listed: checked when first read, so an open does not
        // grow with the data held. Where a hot file exists too, a crash came between the
        // two steps of a compaction or of a late write's rehydration, and the hot file holds
        // everything the compacted one does.
        for (period_start, chunk, path) in compacted {
            if files.contains_key(&(period_start, chunk)) {
                if writable {
                    tracing::warn!(path = %path.display(), "removing a compacted file its hot file supersedes (a crash mid-compaction)");
                    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                }
                continue;
            }
            let meta = self.meta(period_start, chunk, slots);
            files.insert(
                (period_start, chunk),
                StoredPeriod::Compacted(Arc::new(CompactFile::new(path, meta))),
            );
        }
        if writable {
            // Kept until the next flush has synced the files they name.
            (self
                .unsynced_lists
                .lock()
                .unwrap_or_else(|e| e.into_inner()))
            .extend(unfinished.lists);
        }
        Ok(())
    }
}

/// Threads that open a directory's hot files: opening is mostly waiting on the disk (a
/// header read and a mapping per file, thousands of files at a million series), so more
/// threads than cores shorten a cold restart.
const OPEN_THREADS: usize = 8;

/// Threads that msync the written files at a flush: like an open, mostly waiting on the disk.
const FLUSH_THREADS: usize = 8;

/// Unlinks a file whose removal is tidying, not correctness (a superseded form of a period):
/// a failure is logged, and the next open removes it.
/// Kills the process when [`crate::fault::Hook::KillMidCompaction`] names `stage` (the crash tests').
fn die_if_armed(stage: &str) {
    if crate::fault::Hook::KillMidCompaction.armed().as_deref() == Some(stage) {
        crate::fault::kill_self();
    }
}

fn remove_file_logged(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        tracing::warn!(path = %path.display(), error = %e, "could not remove a superseded period file");
    }
}

/// The start of the newest period file, hot or compacted, of tier `tier` of set `set` in the
/// data directory `root`, from the file names alone; `None` when it has none. What a period
/// change's boundary must come after.
///
/// # Errors
/// [`Error::Io`] naming the tier's directory.
pub(crate) fn newest_period_start(
    root: &Path,
    config: &TiersConfig,
    set: usize,
    tier: &str,
) -> Result<Option<Timestamp>> {
    let dir = set_dir(root, config, set).join(tier);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut newest = None;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let hot = match name.strip_suffix(COMPACT_SUFFIX) {
            Some(stem) => format!("{stem}{FILE_SUFFIX}"),
            None => name,
        };
        if let Some((start, _)) = format::parse_file_name(&hot) {
            newest = newest.max(Some(start));
        }
    }
    Ok(newest)
}

/// The directory holding set `set`'s tier directories: `tiers/` for the default set,
/// `sets/<name>/` for a `[[set]]`.
fn set_dir(root: &Path, config: &TiersConfig, set: usize) -> PathBuf {
    match set {
        0 => root.join(TIERS_DIR),
        _ => root.join(SETS_DIR).join(config.set_name(set)),
    }
}

fn list_dirs(dir: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests;
