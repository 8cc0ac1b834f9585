//! The tier directories and their mapped period files: which files exist, creating them whole,
//! opening and checking them, flushing them.
//!
//! Layout of a data directory:
//! ```text
//! <data>/LOCK                         the writer's lock (pid inside)
//! <data>/OPEN                         present while a writer has the directory open
//! <data>/series.log                   the series registry
//! <data>/writers.state                the cell each writer thread is updating (see writer_state.rs)
//! <data>/tiers/<tier>/<start>-c<chunk>.tdb   one file per tier, period and chunk of series
//! <data>/tiers/<tier>/<name>.tdb.tmp  a file being created (removed at open if left over)
//! ```

pub mod bucket;
pub mod counter_journal;
pub mod counter_state;
pub mod disk;
pub mod format;
pub mod lock;
mod mmap;
pub mod period_file;
pub mod record_file;
pub mod recovery;
pub mod writer_state;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::config::TierSpec;
use crate::time::Timestamp;
use crate::{Error, Result};
use bucket::{WriterSlot, Writers};
use format::{PeriodMeta, FILE_SUFFIX, TEMP_SUFFIX};
use period_file::{PeriodFile, WritableFile};

/// Directory under the data directory that holds one directory per tier.
pub const TIERS_DIR: &str = "tiers";

/// Marks a data directory as open for writing, with the writer's pid inside. Found at open, it
/// means the last process died without closing, so bucket cells may carry a stale
/// update-in-flight bit to clear; found by a read-only process's read, naming a live pid, it
/// means a writer may be mid-update on a cell (see [`bucket::BucketCell`]).
pub const OPEN_MARKER: &str = "OPEN";

/// All tiers' files.
pub struct Storage {
    root: PathBuf,
    tiers: Vec<TierStore>,
    slots: u32,
    writable: bool,
    /// Who may update the cells while this process reads them; every file holds a clone.
    writers: Arc<Writers>,
    orphaned_tiers: Vec<String>,
}

/// One tier's files, keyed by (period start, chunk).
struct TierStore {
    spec: TierSpec,
    dir: PathBuf,
    files: RwLock<BTreeMap<(Timestamp, u32), Arc<PeriodFile>>>,
    /// Serialises creation so two writers needing the same new file create it once; readers
    /// and writers of existing files never wait on it.
    create_lock: Mutex<()>,
    created_ahead: AtomicU64,
    created_on_demand: AtomicU64,
    dropped: AtomicU64,
}

/// Why a file is being created, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Creation {
    /// Ahead of need, by maintenance (or at open, or when series growth needs a new chunk).
    Ahead,
    /// By the write path, because a sample needed a file that did not exist (a backfill, a
    /// gap after downtime, or maintenance running late).
    OnDemand,
}

/// What one tier holds on disk.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
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
}

impl Storage {
    /// Opens (and, when `writable`, creates) the tier directories under `root` and maps every
    /// period file found. Leftover `*.tmp` files from a creation cut short by a crash are
    /// removed with a log line. Directories of tiers no longer configured are left alone and
    /// reported by [`Storage::orphaned_tiers`].
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the first file whose header is damaged, foreign, of
    /// another format version, or does not match the tier's configuration; [`Error::Io`].
    pub fn open(root: &Path, tiers: &[TierSpec], slots: u32, writable: bool) -> Result<Storage> {
        let tiers_root = root.join(TIERS_DIR);
        let writers = Arc::new(if writable {
            Writers::open_in_process(root, tiers.iter().map(|t| t.name.clone()).collect())?
        } else {
            Writers::OtherProcess {
                marker: root.join(OPEN_MARKER),
            }
        });
        if writable {
            std::fs::create_dir_all(&tiers_root).map_err(|e| Error::io(&tiers_root, e))?;
        }
        let mut stores = Vec::with_capacity(tiers.len());
        for spec in tiers {
            let dir = tiers_root.join(&spec.name);
            if writable {
                std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            }
            let store = TierStore {
                spec: spec.clone(),
                dir,
                files: RwLock::new(BTreeMap::new()),
                create_lock: Mutex::new(()),
                created_ahead: AtomicU64::new(0),
                created_on_demand: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
            };
            store.load_existing(slots, &writers)?;
            stores.push(store);
        }
        let orphaned_tiers = list_dirs(&tiers_root)?
            .into_iter()
            .filter(|name| !tiers.iter().any(|t| &t.name == name))
            .collect::<Vec<_>>();
        for name in &orphaned_tiers {
            tracing::warn!(tier = %name, "files of a tier no longer in the configuration are left in place");
        }
        Ok(Storage {
            root: root.to_path_buf(),
            tiers: stores,
            slots,
            writable,
            writers,
            orphaned_tiers,
        })
    }

    /// The data directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Number of configured tiers.
    pub fn tier_count(&self) -> usize {
        self.tiers.len()
    }

    /// Series slots per chunk file.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Names of tier directories on disk that the configuration no longer has.
    pub fn orphaned_tiers(&self) -> &[String] {
        &self.orphaned_tiers
    }

    /// Repairs (see [`WritableFile::repair`]) every period file in the directories of tiers the
    /// configuration no longer names, so a tier left out at an unclean open and brought back
    /// later does not keep a crash's leftovers. Files that cannot be opened are skipped with
    /// a warning: they are not in use. Returns (interrupted updates, cleared cells).
    pub fn repair_orphans(&self, known_series: usize) -> (usize, usize) {
        let mut total = (0, 0);
        for tier in &self.orphaned_tiers {
            let dir = self.root.join(TIERS_DIR).join(tier);
            let Ok(entries) = std::fs::read_dir(&dir) else {
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

    /// The file of `tier` for the period starting at `period_start` and chunk `chunk`, if it
    /// exists.
    #[inline]
    pub fn file(
        &self,
        tier: usize,
        period_start: Timestamp,
        chunk: u32,
    ) -> Option<Arc<PeriodFile>> {
        let files = self.tiers[tier]
            .files
            .read()
            .unwrap_or_else(|e| e.into_inner());
        files.get(&(period_start, chunk)).cloned()
    }

    /// The file, created whole first when missing. The flag says whether this call created it.
    ///
    /// # Errors
    /// [`Error::Io`] when creation fails (a full disk among others); read-only storage refuses.
    pub fn get_or_create(
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
        let file = Arc::new(PeriodFile::create(&store.dir, &meta, &self.writers)?);
        store
            .files
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((period_start, chunk), Arc::clone(&file));
        match why {
            Creation::Ahead => &store.created_ahead,
            Creation::OnDemand => &store.created_on_demand,
        }
        .fetch_add(1, Ordering::Relaxed);
        tracing::debug!(path = %file.path().display(), ?why, "created period file");
        Ok((file, true))
    }

    /// The file of `tier` for the period starting at `period_start` and chunk `chunk`, to
    /// store into: `None` when it does not exist or this storage is read-only.
    pub fn writable_file(
        &self,
        tier: usize,
        period_start: Timestamp,
        chunk: u32,
    ) -> Option<WritableFile> {
        self.file(tier, period_start, chunk)
            .and_then(WritableFile::new)
    }

    /// Every file, to store into (the repair at an unclean open); empty when read-only.
    pub fn writable_files(&self) -> Vec<WritableFile> {
        self.all_files()
            .into_iter()
            .filter_map(WritableFile::new)
            .collect()
    }

    /// A slot for a new writer thread to publish the cell it updates in (see
    /// [`bucket::BucketCell`]); `Ok(None)` when read-only.
    ///
    /// # Errors
    /// [`Error::Io`] naming `writers.state` when it cannot grow.
    pub fn writer_slot(&self) -> Result<Option<WriterSlot>> {
        self.writers.register()
    }

    /// Every file, for flushing.
    pub fn all_files(&self) -> Vec<Arc<PeriodFile>> {
        self.tiers
            .iter()
            .flat_map(|t| {
                t.files
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// msync of every file written since its last flush.
    ///
    /// # Errors
    /// The first msync failure, naming the file.
    pub fn flush(&self) -> Result<()> {
        for file in self.all_files() {
            file.flush()?;
        }
        Ok(())
    }

    /// What `tier` holds on disk, with periods after the one holding `now` counted as ahead.
    pub fn tier_files(&self, tier: usize, now: Timestamp) -> TierFiles {
        let store = &self.tiers[tier];
        let current = crate::time::align_down(now, store.spec.period);
        let files = store.files.read().unwrap_or_else(|e| e.into_inner());
        let mut periods: Vec<Timestamp> = files.keys().map(|k| k.0).collect();
        periods.dedup();
        TierFiles {
            files: files.len(),
            bytes: files.values().map(|f| f.disk_bytes()).sum(),
            oldest_period: periods.first().copied(),
            newest_period: periods.last().copied(),
            periods_ahead: periods.iter().filter(|&&p| p > current).count(),
            created_ahead: store.created_ahead.load(Ordering::Relaxed),
            on_demand_creations: store.created_on_demand.load(Ordering::Relaxed),
            dropped: store.dropped.load(Ordering::Relaxed),
        }
    }

    /// The chunks among `chunks` (a bitset: bit `c` set for chunk `c`) that have no file for
    /// the period of `tier` starting at `period_start`. One read lock for the lot.
    pub fn missing_chunks(&self, tier: usize, period_start: Timestamp, chunks: &[u64]) -> Vec<u32> {
        let files = self.tiers[tier]
            .files
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let mut missing = Vec::new();
        for (word_index, &word) in chunks.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let chunk = (word_index * 64) as u32 + bits.trailing_zeros();
                bits &= bits - 1;
                if !files.contains_key(&(period_start, chunk)) {
                    missing.push(chunk);
                }
            }
        }
        missing
    }

    /// Removes every file of `tier` whose period starts before `window_start` (so its end is
    /// older than now minus the retention): forgotten first, then unlinked. A query in flight
    /// keeps its `Arc` and so its mapping, which stays valid after the unlink; nothing
    /// reopens a file by path. Returns how many files went.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file that could not be unlinked (it is forgotten all the
    /// same and removed by the next open's maintenance).
    pub fn drop_before(&self, tier: usize, window_start: Timestamp) -> Result<usize> {
        let store = &self.tiers[tier];
        let expired: Vec<Arc<PeriodFile>> = {
            let mut files = store.files.write().unwrap_or_else(|e| e.into_inner());
            let keep = files.split_off(&(window_start, 0));
            std::mem::replace(&mut *files, keep).into_values().collect()
        };
        if expired.is_empty() {
            return Ok(0);
        }
        let mut first_error = None;
        for file in &expired {
            match std::fs::remove_file(file.path()) {
                Ok(()) => {
                    tracing::debug!(path = %file.path().display(), "dropped expired period file");
                }
                Err(e) => {
                    first_error.get_or_insert(Error::io(file.path(), e));
                }
            }
        }
        store
            .dropped
            .fetch_add(expired.len() as u64, Ordering::Relaxed);
        disk::sync_dir(&store.dir)?;
        first_error.map_or(Ok(expired.len()), Err)
    }

    /// The files of `chunk` in `tier` whose period overlaps `[from, to)`, oldest first. One
    /// lookup per period between the oldest and newest held, so the walk is bounded by the
    /// files held, not by the width of the range or the number of chunks.
    pub fn files_of_chunk(
        &self,
        tier: usize,
        chunk: u32,
        from: Timestamp,
        to: Timestamp,
    ) -> Vec<(Timestamp, Arc<PeriodFile>)> {
        let store = &self.tiers[tier];
        let period = store.spec.period.secs() as i64;
        let files = store.files.read().unwrap_or_else(|e| e.into_inner());
        let (Some(&(oldest, _)), Some(&(newest, _))) =
            (files.keys().next(), files.keys().next_back())
        else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut start = crate::time::align_down(from, store.spec.period).max(oldest);
        while start < to && start <= newest {
            if let Some(file) = files.get(&(start, chunk)) {
                found.push((start, Arc::clone(file)));
            }
            start += period;
        }
        found
    }

    /// The chunk files of `tier`'s period starting at `period_start`, in chunk order.
    pub fn period_files(&self, tier: usize, period_start: Timestamp) -> Vec<Arc<PeriodFile>> {
        let files = self.tiers[tier]
            .files
            .read()
            .unwrap_or_else(|e| e.into_inner());
        files
            .range((period_start, 0)..=(period_start, u32::MAX))
            .map(|(_, f)| Arc::clone(f))
            .collect()
    }
}

impl TierStore {
    fn meta(&self, period_start: Timestamp, chunk: u32, slots: u32) -> PeriodMeta {
        PeriodMeta {
            tier: self.spec.name.clone(),
            resolution: self.spec.resolution,
            period: self.spec.period,
            period_start,
            slots,
            chunk,
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
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, e))?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                tracing::warn!(path = %path.display(), "ignoring a file whose name is not UTF-8");
                continue;
            };
            if name.ends_with(TEMP_SUFFIX) {
                if writable {
                    tracing::warn!(path = %path.display(), "removing a period file whose creation was cut short");
                    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                }
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
            let expected = self.meta(period_start, chunk, slots);
            match PeriodFile::open(&path, &expected, writers) {
                Ok(file) => {
                    files.insert((period_start, chunk), Arc::new(file));
                }
                // A reader beside a running writer may see a file listed and then dropped.
                Err(Error::Io { source, .. })
                    if !writable && source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
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
