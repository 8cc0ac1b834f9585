//! Exactly-once apply of a numbered log into an engine: [`Engine::apply`].
//!
//! A caller with a log (a cluster node, per partition it applies: the messages of that
//! partition's JetStream subject in stream order) feeds an engine its messages in order.
//! Each message has a sequence number (increasing, with gaps allowed: other partitions'
//! messages sit there) and carries a [`SampleBatch`]. Bucket adds are not idempotent
//! (`count += 1`, `total += v`), and a counter keeps its last raw value, so a crash between
//! applying a message and recording its sequence must neither lose nor double-count anything.
//! The engine keeps an **undo chain of absolute pre-images beside the applied sequence**, and
//! makes the applied sequence durable at **checkpoints** ([`Checkpoints`]: every two minutes
//! or 4,194,304 samples by default), not after every group:
//!
//! 1. **Pre-images.** For a group of messages (sequences s1 < ... < sk, all above the applied
//!    one), the engine registers the group's series (idempotent: by canonical key) and lists
//!    every cell the group may change: for each sample with a finite value, its bucket in
//!    every tier of its series' tier set, at the series' place in that set (`[[set]]`s:
//!    [`crate::registry::SetPlace`]; whatever the tier's window: a window can only hold more if the clock goes
//!    back between this step and the write, and restoring a cell the group did not change
//!    puts back what it holds), and the counter state record (declared kind, last time, last
//!    raw value) of every series the group names. Of those, it reads the ones the undo chain
//!    does not hold (the cells and states earlier groups since the last checkpoint took,
//!    but for a cell a series comes back to from far past it, taken again: [`ChainCells`]),
//!    through the storage, whichever form the period is in: hot (the mapping), compacted
//!    (its reader), or no file (empty); but not the cells [`KnownEmpty`] knows are empty
//!    (of series registered since open, past their groups' cells). A distribution series'
//!    cell (stored as one, or declared one in the group) that is not empty is read with its
//!    histogram, which the record keeps beside it. A group that makes a distribution of a
//!    gauge the chain holds (its first declaration) is preceded by a checkpoint: the chain
//!    took that series' cells without histograms. With a raw tier, it also keeps the
//!    time of each such series' last raw point: raw appends are not adds, and cutting a
//!    series back to that point undoes them exactly (a group appends only after a series'
//!    last point).
//! 2. **Undo record.** The group's last sequence, the tiers layout fingerprint and those new
//!    pre-images, with a CRC, are appended whole to the chain in `apply.undo` and fsynced
//!    (a group that touches nothing new appends nothing and syncs nothing).
//! 3. **Apply.** The messages go through the engine's own write path, as a server's writes
//!    do: each one's series registered by key and the kinds it declares declared (a refusal
//!    of the declaration refuses that series' samples as `kind_mismatch`), and the samples of
//!    consecutive messages stored by one `Engine::record_batch` (a message that declares a
//!    kind starts a new one, so each declaration meets the series as the messages before it
//!    left it): the arithmetic is the single-node arithmetic, in order.
//! 4. **Checkpoint.** When one is due: `Engine::flush` (registry fsync, msync of the changed
//!    period files and of the counter state), then `apply.state` records `applied = sk`
//!    (one of two checksummed slots, fsynced), then the chain is emptied. The record ends
//!    the chain's force: a record is in force only while its sequence is above the applied
//!    one. Between checkpoints, [`Engine::applied`] is the last group applied in
//!    memory, which reads see; what is durable is the last checkpoint's.
//! 5. **Recovery at open.** Records in force mean the process stopped between a group's
//!    step 2 and the next checkpoint: every pre-image of the chain is put back, histograms
//!    with their cells (absolute values, so a crash during the recovery just repeats it; a
//!    cell in several records gets the first record's, the value before the chain), a
//!    period compacted since is made hot again first, the counter states and the kinds they
//!    imply are restored, each raw series is cut back to its recorded last point, everything
//!    is flushed, and then the chain is emptied. The caller re-delivers from `applied + 1`,
//!    the last checkpoint, and the re-apply gives bit-identical buckets and raw points. Any
//!    writable open of the directory does this in its one recovery pass
//!    ([`super::recover`]), after the counter batch a crash left and before the deletions
//!    and retypes, before any batch or maintenance pass; the chain is emptied once
//!    everything the pass put back is flushed.
//!
//! A torn undo record (its CRC fails) was cut short before anything of its group was stored;
//! the chain ends before it. A torn `apply.state` slot leaves the other slot's older
//! sequence, under which the chain is in force again: its groups are rolled back and
//! re-applied. A deletion ([`Engine::apply_delete`]), a copy of the files
//! ([`Engine::with_files_still`]) and a close each make a checkpoint first.
//! Messages at or below the applied sequence are skipped (a redelivery). Refusals inside a
//! batch (too old, too far in the future, counter out of order, kind mismatch, invalid series,
//! a sample naming no series of its batch) are decided by the data, the tiers and the clock,
//! and are counted in the [`ApplyReport`], never an error. The clock is the one thing the
//! replay does not repeat: a sample that was inside a tier's window at the first attempt may
//! have left it at the re-apply, as it would for any late delivery.
//!
//! An engine fed this way has [`Engine::apply`] as its only writer: a sample stored another
//! way would be in no undo record, and a roll-back would keep or erase it by chance. Reads go
//! on beside it at any time. The engine's maintenance runs beside it: a compaction swaps a
//! hot file only while no batch or restore holds the storage's batch gate, and a write into
//! a compacted period makes it hot again.
//!
//! `apply.state` and `apply.undo` are made by the first apply: a directory never fed this
//! way has neither.

mod applied;
mod batch;
mod rewind;
mod undo_chain;

/// The file that marks an engine directory as a cluster partition's: made by its first
/// apply. `tierdb retype` refuses such a directory.
pub(crate) const APPLIED_FILE: &str = applied::AppliedFile::FILE_NAME;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

#[cfg(feature = "cluster")]
use super::copy::StillFiles;
use super::{accepted_times, check_value_and_time, Engine};
use crate::bucket::Bucket;
use crate::config::TiersConfig;
use crate::counter::SeriesKind;
use crate::error::Error;
use crate::error::RejectReason;
use crate::error::Result;
use crate::fault::{self, Hook};
use crate::histogram::Histogram;
use crate::registry::{Selector, SeriesId, SetPlace};
use crate::sample::{BatchReport, ObservedSample, Sample};
use crate::storage::cells::{same_bits, CellAt, Image};
use crate::storage::undo_entry::Undo;
use crate::time::{checked_place, Placement, Timestamp};
use applied::AppliedFile;
pub use batch::{BatchObserved, BatchSample, BatchSeries, KeyIndex, SampleBatch};
use undo_chain::{HistogramImage, RawTail, UndoFile, UndoRecord};

/// What an engine keeps to apply a log exactly once: its settings, the applied sequence,
/// and, once a first apply made them (or the open found them), the files and the chain.
pub(super) struct ApplyLog {
    /// The engine's tiers layout, as each undo record names it (computed once: it formats
    /// the whole configuration).
    layout: u64,
    checkpoints: Checkpoints,
    fault: Option<Fault>,
    /// The last sequence applied, for lock-free reads of [`Engine::applied`].
    applied: AtomicU64,
    /// `None` until the directory holds `apply.state`.
    inner: Mutex<Option<Inner>>,
}

impl ApplyLog {
    /// Nothing applied, nothing opened yet: the open's recovery pass takes the files a
    /// directory holds.
    pub(super) fn new(config: &TiersConfig, checkpoints: Checkpoints) -> ApplyLog {
        ApplyLog {
            layout: config.layout_fingerprint(),
            checkpoints,
            fault: Fault::from_env(),
            applied: AtomicU64::new(0),
            inner: Mutex::new(None),
        }
    }

    /// The same with the fault hook `fault` in place of the environment's.
    #[cfg(test)]
    pub(super) fn with_fault(self, fault: Option<Fault>) -> ApplyLog {
        ApplyLog { fault, ..self }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Inner>> {
        // An apply that panicked poisoned nothing on disk that the undo does not cover; the
        // next apply sees `poisoned` only if it had got past its undo record.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one apply at a time holds.
struct Inner {
    state: AppliedFile,
    undo: UndoFile,
    /// Set when an apply failed after its undo record was written: the engine may hold part
    /// of a group, which only the recovery at the next open rolls back.
    poisoned: Option<String>,
    /// Groups this engine applied (or began to) since open: what the fault hook counts.
    groups: u64,
    /// The fault hook, the log's unless a test armed another.
    fault: Option<Fault>,
    /// The groups applied since the last checkpoint, and what their undo chain holds.
    since_checkpoint: SinceCheckpoint,
    /// The cells whose pre-images need no read: empty, as the engine knows.
    known_empty: KnownEmpty,
}

impl Inner {
    /// The error an apply meets when a failed group awaits its roll-back.
    fn check_poison(&self) -> Result<()> {
        match &self.poisoned {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }
}

/// When an engine makes its applied sequence durable: at a checkpoint, once `interval` has
/// passed since the first group after the last one, or `groups` groups or `samples` samples
/// were applied since, or the undo chain holds `MAX_UNDO_ENTRIES`, whichever comes first;
/// and before a deletion, a snapshot or a close. Until then a crash rolls every group since
/// the last checkpoint back, and the log delivers them again.
#[derive(Clone, Copy, Debug)]
pub struct Checkpoints {
    /// Longest time between the first group after a checkpoint and the next checkpoint.
    pub interval: std::time::Duration,
    /// Most groups between two checkpoints.
    pub groups: u64,
    /// Samples between two checkpoints, at most, plus the group that reaches the count: it
    /// bounds what a crash makes an engine apply again whatever the interval.
    pub samples: usize,
}

/// [`Checkpoints::default`]'s interval.
const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(120);

/// [`Checkpoints::default`]'s bound on samples.
const CHECKPOINT_SAMPLES: usize = 1 << 22;

impl Default for Checkpoints {
    /// Every two minutes or 4,194,304 samples, whichever comes first: what a crash may have
    /// to apply again is at most that much of the log, and the group that reached the count
    /// (under a second at `benches/apply.rs`'s rate per partition, whatever the traffic). A
    /// chain takes a pre-image of each cell and series state the first time it meets it, and
    /// a checkpoint writes back every page changed since the one before; live series sending
    /// every 10 s meet their current buckets again only in a chain longer than 10 s. With
    /// 100,000 such series for four minutes, the cluster spent 5.0-5.8 µs of CPU per sample
    /// with a checkpoint every thirty seconds and 3.3-4.2 µs with one every two minutes
    /// (`SERIES=100000 LIVE_SECONDS=240 benches/cluster.sh`, alternating). The count costs a
    /// partition that applies without pause a flush per 4,194,304 samples: `cargo bench
    /// --bench apply` gives 3-9% less than with no checkpoint in its run.
    fn default() -> Checkpoints {
        Checkpoints {
            interval: CHECKPOINT_INTERVAL,
            groups: u64::MAX,
            samples: CHECKPOINT_SAMPLES,
        }
    }
}

/// Entries one undo chain holds at most, counted as written (64 bytes each on disk; up to
/// 256 empty cells share one, a histogram image takes several: `undo_chain.rs`), so the
/// chain stays under 16 MiB whatever its groups hold: past it, a checkpoint.
const MAX_UNDO_ENTRIES: usize = 1 << 18;

/// What was applied since the last checkpoint.
struct SinceCheckpoint {
    /// When the first group after the checkpoint was applied; `None`: no group since.
    first: Option<std::time::Instant>,
    groups: u64,
    /// The cells and series whose pre-images the undo chain holds: a later group of the
    /// same chain needs none of them again.
    cells: ChainCells,
    /// At a series' id: whether the chain holds its counter state.
    series: Vec<bool>,
    /// Entries in the chain.
    entries: usize,
    /// Samples in the groups since the checkpoint.
    samples: usize,
}

impl SinceCheckpoint {
    /// Nothing applied yet, for an engine of `config`'s layout.
    fn new(config: &TiersConfig) -> SinceCheckpoint {
        SinceCheckpoint {
            first: None,
            groups: 0,
            cells: ChainCells::new(config),
            series: Vec::new(),
            entries: 0,
            samples: 0,
        }
    }
}

/// Which bucket cells a group may skip taking pre-images of, because the undo chain holds
/// them: per series and tier, the latest bucket noted and which of the 64 buckets before it
/// were; and the cells noted further behind, in a set. A series' samples come in time
/// order, or nearly (writes taken at once may reach the log out of order), so a group's
/// cells are mostly its series' latest, past it, or a few buckets behind: none of those
/// touches the set, which a set of every cell the chain holds would (an insertion per
/// cell, in a table as large as the chain). A cell that falls more than 64 buckets behind
/// its series' latest and is met again is taken a second time, and then kept in the set:
/// the recovery puts the first pre-image back ([`roll_back`]).
struct ChainCells {
    /// At `series × tiers + tier` (the storage index of a tier of any set): that series'
    /// cells in that tier, `None` before any.
    noted: Vec<Option<NotedCells>>,
    /// `(series × tiers + tier, bucket start)` of the cells noted more than
    /// [`NOTED_BEHIND`] buckets behind their series' latest.
    behind: rustc_hash::FxHashSet<(usize, Timestamp)>,
    /// Each tier's resolution in seconds, by storage index (every set's tiers).
    resolutions: Vec<i64>,
}

/// How many buckets behind its latest a series' noted cells are kept in [`NotedCells`].
const NOTED_BEHIND: i64 = 64;

/// One series' cells in one tier that a chain holds, by their buckets' start (which names a
/// cell within its tier).
#[derive(Clone, Copy)]
struct NotedCells {
    latest: Timestamp,
    /// Bit `i`: the bucket `i + 1` resolutions before `latest` is held.
    before: u64,
}

impl ChainCells {
    fn new(config: &TiersConfig) -> ChainCells {
        ChainCells {
            noted: Vec::new(),
            behind: rustc_hash::FxHashSet::default(),
            resolutions: (config.all_tiers())
                .map(|(_, tier)| tier.resolution.secs() as i64)
                .collect(),
        }
    }

    /// Notes the cell of `series` in `tier` whose bucket starts at `cell`; true when its
    /// pre-image is to be taken.
    fn note(&mut self, series: SeriesId, tier: usize, cell: Timestamp) -> bool {
        let at = series.index() * self.resolutions.len() + tier;
        if at >= self.noted.len() {
            self.noted.resize(at + 1, None);
        }
        let Some(noted) = &mut self.noted[at] else {
            self.noted[at] = Some(NotedCells {
                latest: cell,
                before: 0,
            });
            return true;
        };
        let resolution = self.resolutions[tier];
        // Buckets from one to the other, or none when too far to tell apart (an i64 apart).
        let buckets = |from: Timestamp, to: Timestamp| to.checked_sub(from).map(|d| d / resolution);
        if cell > noted.latest {
            noted.before = match buckets(noted.latest, cell) {
                Some(ahead) if ahead <= NOTED_BEHIND => {
                    (noted.before.checked_shl(ahead as u32).unwrap_or(0)) | 1 << (ahead - 1)
                }
                _ => 0,
            };
            noted.latest = cell;
            return true;
        }
        match buckets(cell, noted.latest) {
            Some(0) => false,
            Some(back) if back <= NOTED_BEHIND => {
                let bit = 1 << (back - 1);
                let held = noted.before & bit != 0;
                noted.before |= bit;
                !held
            }
            _ => self.behind.insert((at, cell)),
        }
    }

    /// Forgets every cell: a group's pre-images could not be taken, so the cells it noted
    /// are not in the chain.
    fn forget(&mut self) {
        self.noted.clear();
        self.behind.clear();
    }
}

/// Which bucket cells hold nothing, known without reading them: those of the series
/// registered since the engine opened, in the buckets after every one its groups may have
/// changed. Series ids are handed out in order and never reused, and [`Engine::apply`] is the
/// engine's only writer, so a series registered since open had no cell when it was; from
/// then on, only the groups change its cells, and each group moves the series' mark past
/// the cells it may change before it stores. A roll-back or a deletion only empties
/// cells, and a sample that lands in fewer tiers than listed leaves more of them empty:
/// the marks stay true. The series the engine opened with are not known: their pre-images
/// are read. In a bulk load of new series, or under live traffic after the first minutes,
/// nearly every pre-image is then of a known empty cell.
struct KnownEmpty {
    /// The registry's length when the apply's files were opened: the first id registered
    /// since.
    first_new: usize,
    /// At `(series - first_new) × tiers + tier`: the start of the first bucket from which on
    /// every cell of that series in that tier is empty (`Timestamp::MIN` beyond the vector:
    /// a series none of whose cells a group listed yet).
    empty_from: Vec<Timestamp>,
    /// Tiers per series in `empty_from`: every set's (storage indexes).
    tiers: usize,
}

impl KnownEmpty {
    /// Nothing known yet, for an engine of `config`'s tiers whose registry held `registered`
    /// series at open.
    fn new(config: &TiersConfig, registered: usize) -> KnownEmpty {
        KnownEmpty {
            first_new: registered,
            empty_from: Vec::new(),
            tiers: config.tier_count(),
        }
    }

    /// Whether the cell of `series` in `tier` whose bucket starts at `start` (and lasts
    /// `resolution`) is known to be empty before a group that may change it; notes that it
    /// may no longer be.
    fn take(&mut self, series: SeriesId, tier: usize, start: Timestamp, resolution: i64) -> bool {
        let Some(new) = series.index().checked_sub(self.first_new) else {
            return false;
        };
        let at = new * self.tiers + tier;
        if at >= self.empty_from.len() {
            self.empty_from.resize(at + 1, Timestamp::MIN);
        }
        let empty = start >= self.empty_from[at];
        self.empty_from[at] = self.empty_from[at].max(start.saturating_add(resolution));
        empty
    }
}

/// What [`Engine::apply`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Messages applied by this call.
    pub applied: usize,
    /// Messages skipped because their sequence was at or below the applied one (redelivered).
    pub skipped: usize,
    /// The applied messages' samples, accepted and refused by reason; positions count the
    /// samples of the applied messages one after another, in order.
    pub samples: BatchReport,
    /// Entries the group's undo record took in the chain, as written: a bucket cell, a
    /// counter state or a raw tail takes one, up to 256 empty cells share one, and a
    /// histogram takes one plus one per 64 bytes of its encoding past the first 24.
    pub undo_entries: usize,
}

impl Engine {
    /// Applies `group`, messages of a log in order, exactly once (see the module docs):
    /// messages at or below the applied sequence are skipped; the rest are applied as one
    /// group (one undo record) and the applied sequence becomes the last one's. It is durable
    /// at the next checkpoint ([`Checkpoints`]), which this call makes when one is due. The
    /// first apply to a directory makes its `apply.state` and `apply.undo`.
    ///
    /// # Errors
    /// [`Error::ReadOnly`]; [`Error::InvalidQuery`] when the sequences above the applied one
    /// do not increase (nothing is applied then). [`Error::Io`] when registering a series or
    /// writing the undo record fails; [`Error::Poisoned`] or [`Error::Io`] from the engine.
    /// An error once the undo record is written poisons the apply: every later call returns
    /// [`Error::Poisoned`], and reopening rolls the group back.
    pub fn apply(&self, group: &[(u64, SampleBatch)]) -> Result<ApplyReport> {
        let mut guard = self.apply_log.lock();
        let inner = self.opened(&mut guard)?;
        inner.check_poison()?;
        Applier { engine: self }.apply(inner, group)
    }

    /// The last sequence applied by [`Engine::apply`] or [`Engine::apply_delete`] (in
    /// memory; what is durable is the last checkpoint's); 0 when none.
    pub fn applied(&self) -> u64 {
        self.apply_log.applied.load(Ordering::Acquire)
    }

    /// The applied sequence recorded in the engine directory `dir`, without opening it: 0
    /// when nothing was ever applied there (no directory, or no `apply.state`).
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming `apply.state` when it is not this format's;
    /// [`Error::Io`].
    pub fn applied_in(dir: &Path) -> Result<u64> {
        if !dir.join(AppliedFile::FILE_NAME).exists() {
            return Ok(0);
        }
        Ok(AppliedFile::open(dir)?.applied())
    }

    /// Makes every group applied so far durable now: the engine flushed, the applied
    /// sequence recorded, the undo chain emptied. Nothing to do when no group came since
    /// the last checkpoint.
    ///
    /// # Errors
    /// [`Error::Poisoned`] when a failed group awaits its roll-back; as [`Engine::flush`];
    /// [`Error::Io`]. An error poisons the apply (reopening rolls back to the last
    /// checkpoint).
    pub fn checkpoint(&self) -> Result<()> {
        let mut guard = self.apply_log.lock();
        let Some(inner) = guard.as_mut() else {
            return Ok(());
        };
        inner.check_poison()?;
        Applier { engine: self }.checkpoint(inner)
    }

    /// Applies the deletion at sequence `seq`: the series `selector` selects now are deleted
    /// ([`Engine::delete_series`], durable and crash-safe on its own), then `seq` is recorded
    /// as applied. A deletion at or below the applied sequence is skipped (a redelivery); one
    /// applied again after a crash between the deletion and the record finds nothing more to
    /// delete, since the messages after it are not applied yet. Returns how many series were
    /// deleted.
    ///
    /// # Errors
    /// As [`Engine::delete_series`], and [`Error::Io`] when the applied sequence cannot be
    /// recorded; the apply is poisoned then, and reopening finishes the deletion.
    pub fn apply_delete(&self, seq: u64, selector: &Selector) -> Result<usize> {
        let mut guard = self.apply_log.lock();
        let inner = self.opened(&mut guard)?;
        inner.check_poison()?;
        if seq <= self.applied() {
            return Ok(0);
        }
        // The deletion is durable on its own: the groups before it must be too, or a
        // rollback after it would put their pre-images back over it.
        Applier { engine: self }.checkpoint(inner)?;
        let ids: Vec<SeriesId> = (self.select_series(selector).into_iter())
            .map(|(id, _)| id)
            .collect();
        let outcome = self
            .delete_series(&ids)
            .and_then(|deleted| inner.state.record(seq).map(|()| deleted.series.len()));
        match outcome {
            Ok(deleted) => {
                self.apply_log.applied.store(seq, Ordering::Release);
                Ok(deleted)
            }
            Err(e) => {
                inner.poisoned = Some(format!(
                    "the deletion at sequence {seq} failed ({e}); reopen to finish it"
                ));
                Err(e)
            }
        }
    }

    /// Runs `copy` on the engine's directory and what it applied up to, after a checkpoint, while no group is applied, no maintenance pass runs and no batch stores
    /// anything, so no file is swapped, dropped or written meanwhile (the chunk creator may
    /// still make an empty file for new series: whole, under a temporary name first, so a
    /// copy that leaves out `*.tmp` files sees it whole or not at all). A cluster partition
    /// is copied for a peer this way ([`crate::cluster::snapshot`]).
    ///
    /// # Errors
    /// [`Error::Poisoned`] when a failed group awaits its roll-back; as
    /// [`Engine::checkpoint`].
    #[cfg(feature = "cluster")]
    pub(crate) fn with_files_still<R>(&self, copy: impl FnOnce(&StillFiles<'_>) -> R) -> Result<R> {
        let mut guard = self.apply_log.lock();
        if let Some(inner) = guard.as_mut() {
            inner.check_poison()?;
            Applier { engine: self }.checkpoint(inner)?;
        }
        let applied = self.applied();
        Ok(self
            .rewind()
            .with_files_still(|dir| copy(&StillFiles { dir, applied })))
    }

    /// A checkpoint before a close, unless a failed group awaits its roll-back (the next
    /// open does that).
    ///
    /// # Errors
    /// As [`Engine::checkpoint`].
    pub(super) fn checkpoint_before_close(&self) -> Result<()> {
        match self.apply_log.lock().as_mut() {
            Some(inner) if inner.poisoned.is_none() => Applier { engine: self }.checkpoint(inner),
            _ => Ok(()),
        }
    }

    /// The apply's files and chain, opened (made when missing) on first need: when the open
    /// found none ([`ApplyLog::left`]), this engine is the first to apply to the directory.
    fn opened<'g>(&self, guard: &'g mut Option<Inner>) -> Result<&'g mut Inner> {
        if guard.is_none() {
            self.check_writable()?;
            let left = self.apply_log.open_files(&self.shared)?;
            if !left.in_force().is_empty() {
                left.roll_back(&self.shared, &self.apply_log)?;
                self.flush()?;
            }
            *guard = Some(self.apply_log.inner(&self.shared, left)?);
        }
        Ok(guard.as_mut().expect("just opened"))
    }
}

/// An apply's files as a writable open found them, with the undo chain a stopped process
/// left: what the open's recovery pass (`engine/recover.rs`) rolls back.
pub(super) struct LeftChain {
    state: AppliedFile,
    undo: UndoFile,
    chain: Vec<UndoRecord>,
}

impl LeftChain {
    /// The records in force, first first: their sequences are above the applied one.
    fn in_force(&self) -> Vec<&UndoRecord> {
        (self.chain.iter())
            .filter(|record| record.seq > self.state.applied())
            .collect()
    }

    /// How many groups the chain holds in force: what a roll-back undoes.
    pub(super) fn groups_in_force(&self) -> usize {
        self.in_force().len()
    }

    /// Step 5 of the module docs: puts back every pre-image of the records in force, into
    /// `shared`, whose apply log is `log`; durable with the next flush. Absolute values, so
    /// a roll-back a crash interrupts is repeated whole.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming `apply.undo` when a record was written under another
    /// tiers layout or holds a cell outside the files; [`Error::Io`].
    pub(super) fn roll_back(&self, shared: &super::Shared, log: &ApplyLog) -> Result<()> {
        let in_force = self.in_force();
        if in_force.is_empty() {
            return Ok(());
        }
        roll_back(shared, log.layout, &in_force, self.undo.path(), log.fault)
    }
}

impl ApplyLog {
    /// At a writable open: when `shared`'s directory holds an apply's files, opens them and
    /// reads the chain a stopped process left there.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming `apply.state` or `apply.undo` when they are not this
    /// format's; [`Error::Io`].
    pub(super) fn left(&self, shared: &super::Shared) -> Result<Option<LeftChain>> {
        let present = |name: &str| shared.dir.join(name).exists();
        if !present(AppliedFile::FILE_NAME) && !present(UndoFile::FILE_NAME) {
            return Ok(None);
        }
        self.open_files(shared).map(Some)
    }

    /// The apply's files in `shared`'s directory, made when missing, and their chain.
    fn open_files(&self, shared: &super::Shared) -> Result<LeftChain> {
        let state = AppliedFile::open(&shared.dir)?;
        let undo = UndoFile::open(&shared.dir)?;
        let chain = undo.read()?;
        Ok(LeftChain { state, undo, chain })
    }

    /// Once `left`'s roll-back is durable: empties its chain, and keeps its files for the
    /// applies to come.
    ///
    /// # Errors
    /// [`Error::Io`] naming `apply.undo` when it cannot be emptied.
    pub(super) fn take(&self, shared: &super::Shared, left: LeftChain) -> Result<()> {
        let inner = self.inner(shared, left)?;
        *self.lock() = Some(inner);
        Ok(())
    }

    /// What one apply at a time holds, from `left`'s files once its roll-back is durable.
    fn inner(&self, shared: &super::Shared, left: LeftChain) -> Result<Inner> {
        let LeftChain {
            state,
            mut undo,
            chain,
        } = left;
        if !chain.is_empty() {
            undo.clear()?;
        }
        self.applied.store(state.applied(), Ordering::Release);
        Ok(Inner {
            state,
            undo,
            poisoned: None,
            groups: 0,
            fault: self.fault,
            since_checkpoint: SinceCheckpoint::new(&shared.config),
            known_empty: KnownEmpty::new(&shared.config, shared.registry.len()),
        })
    }
}

/// The apply of one group or checkpoint, under the engine's apply lock.
struct Applier<'a> {
    engine: &'a Engine,
}

impl Applier<'_> {
    /// [`Engine::apply`], its lock held.
    fn apply(&self, inner: &mut Inner, group: &[(u64, SampleBatch)]) -> Result<ApplyReport> {
        let log = &self.engine.apply_log;
        let applied = self.engine.applied();
        let mut report = ApplyReport::default();
        let mut todo: Vec<&(u64, SampleBatch)> = Vec::with_capacity(group.len());
        let mut last = applied;
        for message in group {
            if message.0 <= applied {
                report.skipped += 1;
            } else if message.0 <= last {
                return Err(Error::InvalidQuery(format!(
                    "{}: sequence {} comes after {last}; messages are applied in their log's \
                     order",
                    self.engine.dir().display(),
                    message.0
                )));
            } else {
                todo.push(message);
                last = message.0;
            }
        }
        if todo.is_empty() {
            return Ok(report);
        }
        let resolved = todo
            .iter()
            .map(|(_, batch)| self.resolve(batch))
            .collect::<Result<Vec<_>>>()?;
        if self.makes_distributions_of_chain_series(&todo, &resolved, &inner.since_checkpoint) {
            self.checkpoint(inner)?;
        }
        inner.groups += 1;
        let group_number = inner.groups;
        let PreImages {
            entries,
            raw_tails,
            histograms,
        } = {
            let Inner {
                since_checkpoint,
                known_empty,
                ..
            } = &mut *inner;
            self.pre_images(&todo, &resolved, since_checkpoint, known_empty)?
        };
        let prepared = Prepared {
            number: group_number,
            last,
            messages: &todo,
            series: &resolved,
            entries: &entries,
            raw_tails: &raw_tails,
            histograms: &histograms,
        };
        let outcome = self.apply_group(inner, &prepared, &mut report);
        if let Err(e) = &outcome {
            inner.poisoned = Some(format!(
                "applying the group ending at sequence {last} failed ({e}); reopen to roll it \
                 back"
            ));
        }
        outcome?;
        log.applied.store(last, Ordering::Release);
        report.applied = todo.len();
        let checkpoints = log.checkpoints;
        let since = &mut inner.since_checkpoint;
        since.first.get_or_insert_with(std::time::Instant::now);
        since.groups += 1;
        since.entries += report.undo_entries;
        since.samples += todo.iter().map(|(_, batch)| batch.len()).sum::<usize>();
        let due = since.groups >= checkpoints.groups
            || since.entries >= MAX_UNDO_ENTRIES
            || since.samples >= checkpoints.samples
            || (since.first).is_some_and(|first| first.elapsed() >= checkpoints.interval);
        if due {
            self.checkpoint(inner)?;
        }
        Ok(report)
    }

    /// Step 4 of the module docs, when a group came since the last checkpoint.
    fn checkpoint(&self, inner: &mut Inner) -> Result<()> {
        if inner.since_checkpoint.first.is_none() {
            return Ok(());
        }
        let applied = self.engine.applied();
        let outcome = self
            .engine
            .flush()
            .and_then(|()| inner.fault_at(Step::Flushed, inner.groups))
            .and_then(|()| inner.state.record(applied))
            .and_then(|()| inner.undo.clear());
        match outcome {
            Ok(()) => {
                inner.since_checkpoint = SinceCheckpoint::new(self.engine.config());
                Ok(())
            }
            Err(e) => {
                inner.poisoned = Some(format!(
                    "the checkpoint at sequence {applied} failed ({e}); reopen to roll back \
                     to the last one"
                ));
                Err(e)
            }
        }
    }

    /// Steps 2 and 3 of the module docs; any error leaves the undo chain in force.
    fn apply_group(
        &self,
        inner: &mut Inner,
        group: &Prepared<'_>,
        report: &mut ApplyReport,
    ) -> Result<()> {
        if !group.entries.is_empty() || !group.raw_tails.is_empty() {
            report.undo_entries = inner.undo.append(
                group.last,
                self.engine.apply_log.layout,
                group.entries,
                group.raw_tails,
                group.histograms,
            )?;
        }
        inner.fault_at(Step::UndoWritten, group.number)?;
        // The fault hook's mid-apply step needs a store between two messages.
        let first_alone = inner.fault_armed(Step::MidApply, group.number);
        let mut run = Run::default();
        let mut offset = 0;
        for (i, ((_, batch), series)) in group.messages.iter().zip(group.series).enumerate() {
            self.add_message(batch, series, offset, &mut run, &mut report.samples)?;
            offset += batch.len();
            if i == 0 && first_alone {
                self.store_run(&mut run, &mut report.samples)?;
                inner.fault_at(Step::MidApply, group.number)?;
            }
        }
        self.store_run(&mut run, &mut report.samples)?;
        (report.samples.first_rejections).sort_by_key(|&(position, _)| position);
        inner.fault_at(Step::Applied, group.number)
    }

    /// Registers the series of `batch` by key, as a single node registers a series: only
    /// when a sample of it can land. The keys registered already are found under one read
    /// lock of the registry. A series none of whose samples in this message is
    /// finite and within the windows at the engine's clock (a replay of data every tier has
    /// let go) is neither registered nor declared, its samples refused each for its own
    /// reason. The rule reads the message alone, never what the registry holds, so a group
    /// rolled back after registering a series is applied again as it was the first time. A
    /// key that is not a valid series is refused as `invalid_series`. With `[[set]]`s the
    /// windows are those of every set's tiers ([`accepted_times`]): a series whose samples
    /// only another set's tiers still hold is registered (its set decided by the rules, as
    /// every replica decides it) and its samples refused `too_old` by the write path, which
    /// checks each against its own set's tiers.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Poisoned`] from the registry.
    fn resolve(&self, batch: &SampleBatch) -> Result<Vec<Resolved>> {
        let bounds = accepted_times(self.engine.config(), self.engine.now());
        let mut lands = vec![false; batch.series.len()];
        for (series, ts, value) in batch.points() {
            if let Some(lands) = lands.get_mut(series as usize) {
                *lands |= check_value_and_time(value, ts, bounds).is_ok();
            }
        }
        let known = (self.engine.registry()).get_each(batch.series.iter().map(|s| s.key.as_str()));
        (batch.series.iter().zip(lands).zip(known))
            .map(|((series, lands), known)| {
                if !lands {
                    return Ok(Resolved::Refused(bounds));
                }
                if let Some(id) = known {
                    return Ok(Resolved::Id(id));
                }
                match self.engine.series(&series.key) {
                    Ok(id) => Ok(Resolved::Id(id)),
                    Err(Error::InvalidSeries { .. }) => Ok(Resolved::Invalid),
                    Err(e) => Err(e),
                }
            })
            .collect()
    }

    /// Step 1: the pre-images of every cell and counter state the messages may change, and
    /// with a raw tier the raw tail of every series they name; but none the undo chain
    /// already holds (`since`): those are the values before the chain's first group. Cells
    /// `known_empty` knows are empty are not read.
    ///
    /// # Errors
    /// As [`Engine::load_cells`].
    fn pre_images(
        &self,
        todo: &[&(u64, SampleBatch)],
        resolved: &[Vec<Resolved>],
        since: &mut SinceCheckpoint,
        known_empty: &mut KnownEmpty,
    ) -> Result<PreImages> {
        let config = self.engine.config();
        let places = self.places(resolved);
        // Noted in `since` as they are found: a group whose pre-images cannot be taken is
        // taken back out below; one that fails later poisons the apply, `since` with it.
        let Touched { cells, empty } = cells_touched(
            config,
            todo,
            (resolved, &places),
            &mut since.cells,
            known_empty,
        );
        let (before, histograms) = match self.load_pre_images(todo, (resolved, &places), &cells) {
            Ok(loaded) => loaded,
            Err(e) => {
                since.cells.forget();
                return Err(e);
            }
        };
        let mut ids: Vec<SeriesId> = Vec::new();
        for id in resolved.iter().flatten().filter_map(|r| match r {
            Resolved::Id(id) => Some(*id),
            Resolved::Invalid | Resolved::Refused(_) => None,
        }) {
            if id.index() >= since.series.len() {
                since.series.resize(id.index() + 1, false);
            }
            if !std::mem::replace(&mut since.series[id.index()], true) {
                ids.push(id);
            }
        }
        let mut entries = Vec::with_capacity(empty.len() + cells.len() + ids.len());
        let empties = empty.iter().map(|cell| (cell, Bucket::EMPTY));
        entries.extend(
            empties
                .chain(cells.iter().zip(before))
                .map(|(&at, before)| Undo::Cell {
                    at,
                    adds: 0,
                    before,
                }),
        );
        entries.extend(ids.iter().map(|&id| Undo::State {
            id: id.index(),
            before: self.engine.rewind().counter_state(id),
        }));
        let raw_tails = if config.raw.is_some() {
            ids.iter()
                .map(|&id| RawTail {
                    id: id.0,
                    last: self.engine.rewind().raw_last_time(id),
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(PreImages {
            entries,
            raw_tails,
            histograms,
        })
    }

    /// Per message, the place of each of its registered series in its tier set (the
    /// default set's at its id for the others, which no cell is taken of), under one
    /// registry lock per message; without `[[set]]`s nothing is looked up.
    fn places(&self, resolved: &[Vec<Resolved>]) -> Vec<Vec<SetPlace>> {
        let registry = self.engine.registry();
        (resolved.iter())
            .map(|series| {
                registry.placements(series.iter().map(|resolved| match *resolved {
                    Resolved::Id(id) => id,
                    Resolved::Invalid | Resolved::Refused(_) => SeriesId(0),
                }))
            })
            .collect()
    }

    /// True when the group makes a distribution of a series that the undo chain holds
    /// pre-images of (its declaration changes the series' kind, see
    /// [`crate::counter::CounterTable::any_becomes_distribution`]). Its buckets' pre-images
    /// were taken without histograms (a gauge writes none), so the chain spares them, yet
    /// this group writes histograms into them: a roll-back would put the buckets back and
    /// leave the histograms, and the re-apply would add them twice. A checkpoint first starts
    /// a new chain, which takes them whole. A series becomes a distribution once or never, so
    /// this costs a checkpoint at most once per series.
    fn makes_distributions_of_chain_series(
        &self,
        todo: &[&(u64, SampleBatch)],
        resolved: &[Vec<Resolved>],
        since: &SinceCheckpoint,
    ) -> bool {
        let held = |id: SeriesId| since.series.get(id.index()).copied().unwrap_or(false);
        let declared: Vec<SeriesId> = (todo.iter().zip(resolved))
            .flat_map(|((_, batch), series)| batch.series.iter().zip(series))
            .filter_map(|(declared, resolved)| match (*resolved, declared.kind) {
                (Resolved::Id(id), Some(SeriesKind::Distribution)) if held(id) => Some(id),
                _ => None,
            })
            .collect();
        let shared = &self.engine.shared;
        !declared.is_empty()
            && (shared.counter_table).any_becomes_distribution(&declared, &shared.registry)
    }

    /// The buckets of `cells` as they stand, and the histograms of those of distribution
    /// series (stored as one, or declared one by a message of the group) that are not empty:
    /// a cell emptied by a roll-back loses its histogram with its record, but one put back to
    /// a bucket with data needs the histogram it had.
    ///
    /// # Errors
    /// As [`Engine::load_cells`].
    fn load_pre_images(
        &self,
        todo: &[&(u64, SampleBatch)],
        (resolved, places): (&[Vec<Resolved>], &[Vec<SetPlace>]),
        cells: &[CellAt],
    ) -> Result<(Vec<Bucket>, Vec<HistogramImage>)> {
        let rewind = self.engine.rewind();
        // The distribution series' places, as (set, position): what a cell names.
        let mut distributions = rustc_hash::FxHashSet::default();
        // The kinds stored, read under one lock of the counter table.
        let mut undeclared = Vec::new();
        for (((_, batch), series), places) in todo.iter().zip(resolved).zip(places) {
            for ((declared, resolved), place) in batch.series.iter().zip(series).zip(places) {
                let Resolved::Id(id) = *resolved else {
                    continue;
                };
                match declared.kind {
                    Some(SeriesKind::Distribution) => {
                        distributions.insert((place.set(), place.position));
                    }
                    _ => undeclared.push((id, *place)),
                }
            }
        }
        let ids: Vec<SeriesId> = undeclared.iter().map(|&(id, _)| id).collect();
        let kinds = self.engine.reader().series_kinds(&ids);
        for (&(_, place), kind) in undeclared.iter().zip(kinds) {
            if kind == SeriesKind::Distribution {
                distributions.insert((place.set(), place.position));
            }
        }
        if distributions.is_empty() {
            return Ok((rewind.load_cells(cells)?, Vec::new()));
        }
        let slots = self.engine.config().engine.series_per_chunk;
        let storage = &self.engine.shared.storage;
        let (of_distributions, others): (Vec<usize>, Vec<usize>) =
            (0..cells.len()).partition(|&i| {
                let (cell, set) = (cells[i], storage.set_of_tier(cells[i].tier));
                distributions.contains(&(set, cell.chunk * slots + cell.slot))
            });
        let mut before = vec![Bucket::EMPTY; cells.len()];
        let pick = |at: &[usize]| at.iter().map(|&i| cells[i]).collect::<Vec<CellAt>>();
        for (&i, bucket) in others.iter().zip(rewind.load_cells(&pick(&others))?) {
            before[i] = bucket;
        }
        let mut histograms = Vec::new();
        let loaded = rewind.load_distributions(&pick(&of_distributions))?;
        for (&i, (bucket, histogram)) in of_distributions.iter().zip(loaded) {
            before[i] = bucket;
            if !same_bits(&bucket, &Bucket::EMPTY) {
                histograms.push(HistogramImage {
                    at: cells[i],
                    histogram,
                });
            }
        }
        Ok((before, histograms))
    }

    /// Adds one message to `run`, as a server takes one write: its kinds declared, then its
    /// samples queued. A message that declares a kind stores the run before it first, so
    /// every declaration meets the series as the messages before it left them. Refusals are
    /// counted in `report`, positions moved by `offset`.
    ///
    /// # Errors
    /// A declaration or store that fails for another reason than the data (I/O, poison).
    fn add_message(
        &self,
        batch: &SampleBatch,
        series: &[Resolved],
        offset: usize,
        run: &mut Run,
        report: &mut BatchReport,
    ) -> Result<()> {
        if batch.series.iter().any(|s| s.kind.is_some()) {
            self.store_run(run, report)?;
        }
        // Per series of the batch: its id, or the reason its samples are refused.
        let mut ids: Vec<std::result::Result<SeriesId, RejectReason>> =
            Vec::with_capacity(series.len());
        for (declared, resolved) in batch.series.iter().zip(series) {
            ids.push(match (*resolved, declared.kind) {
                (Resolved::Invalid, _) => Err(RejectReason::InvalidSeries),
                // Each sample's own reason is given below; this one stands for the series.
                (Resolved::Refused(_), _) => Err(RejectReason::TooOld),
                (Resolved::Id(id), None) => Ok(id),
                (Resolved::Id(id), Some(kind)) => match self.engine.declare_kind(id, kind) {
                    Ok(()) => Ok(id),
                    Err(Error::Rejected(reason)) => Err(reason),
                    Err(e) => return Err(e),
                },
            });
        }
        // A sample's series, or why it is refused.
        let series_of = |index: u32, ts: Timestamp, value: f64| {
            let reason = match ids.get(index as usize).copied() {
                Some(Ok(id)) => return Ok(id),
                Some(Err(reason)) => reason,
                None => RejectReason::UnknownSeries,
            };
            Err(match series.get(index as usize) {
                Some(Resolved::Refused(bounds)) => check_value_and_time(value, ts, *bounds)
                    .err()
                    .unwrap_or(reason),
                _ => reason,
            })
        };
        run.samples.reserve(batch.samples.len());
        run.positions.reserve(batch.samples.len());
        for (position, sample) in batch.samples.iter().enumerate() {
            match series_of(sample.series, sample.ts, sample.value) {
                Ok(id) => {
                    run.samples.push(Sample::new(id, sample.ts, sample.value));
                    run.positions.push(offset + position);
                }
                Err(reason) => report.reject(offset + position, reason),
            }
        }
        let offset = offset + batch.samples.len();
        for (position, o) in batch.observed.iter().enumerate() {
            match series_of(o.series, o.ts, o.observed.sum) {
                Ok(id) => {
                    run.observed.push(ObservedSample {
                        series: id,
                        ts: o.ts,
                        observed: o.observed.clone(),
                    });
                    run.observed_positions.push(offset + position);
                }
                Err(reason) => report.reject(offset + position, reason),
            }
        }
        Ok(())
    }

    /// Stores the samples queued in `run` in one [`Engine::record_batch`] (one hand-over to
    /// the writers for many messages), counting its refusals in `report`; empties it.
    ///
    /// # Errors
    /// As [`Engine::record_batch`].
    fn store_run(&self, run: &mut Run, report: &mut BatchReport) -> Result<()> {
        if !run.samples.is_empty() {
            let written = self.engine.record_batch(&run.samples)?;
            absorb_at(report, written, &run.positions);
            run.samples.clear();
            run.positions.clear();
        }
        if !run.observed.is_empty() {
            let written = self.engine.record_observed(&run.observed)?;
            absorb_at(report, written, &run.observed_positions);
            run.observed.clear();
            run.observed_positions.clear();
        }
        Ok(())
    }
}

/// Counts `written`'s refusals in `report`, each at its place in the group (`positions`,
/// by its place in the store that wrote it).
fn absorb_at(report: &mut BatchReport, mut written: BatchReport, positions: &[usize]) {
    for rejection in &mut written.first_rejections {
        rejection.0 = positions[rejection.0];
    }
    report.absorb(&written, 0);
}

/// A group past step 1: its messages with their series registered, and its pre-images.
struct Prepared<'a> {
    /// The group's number since open, for the fault hook.
    number: u64,
    /// Its last sequence.
    last: u64,
    messages: &'a [&'a (u64, SampleBatch)],
    /// Per message, its series registered.
    series: &'a [Vec<Resolved>],
    entries: &'a [Undo],
    raw_tails: &'a [RawTail],
    histograms: &'a [HistogramImage],
}

/// What [`Applier::pre_images`] took for a group: the undo entries.
struct PreImages {
    entries: Vec<Undo>,
    raw_tails: Vec<RawTail>,
    /// The histograms of the distribution series' cells among `entries` that were not
    /// empty.
    histograms: Vec<HistogramImage>,
}

/// Samples of consecutive messages of a group, stored together: the samples first, then the
/// bucketed observations.
#[derive(Default)]
struct Run {
    samples: Vec<Sample>,
    /// Each sample's position in the group, for its refusal.
    positions: Vec<usize>,
    observed: Vec<ObservedSample>,
    /// Each observation's position in the group.
    observed_positions: Vec<usize>,
}

/// A series of a batch, registered, or why not.
#[derive(Clone, Copy, Debug)]
enum Resolved {
    Id(SeriesId),
    /// Not a valid series key.
    Invalid,
    /// No sample of it in the message is within these bounds ([`accepted_times`]): not
    /// registered, not declared.
    Refused((Timestamp, Timestamp)),
}

/// The cells [`cells_touched`] lists, by whether their pre-image is to be read.
struct Touched {
    /// To be read.
    cells: Vec<CellAt>,
    /// Known to be empty ([`KnownEmpty`]).
    empty: Vec<CellAt>,
}

/// Every bucket cell the samples of `todo` may change whose pre-image `chain` does not spare
/// ([`ChainCells::note`]), in the order met: per sample with a finite value (observation with
/// a finite sum) and a registered series, its bucket in every tier of its series' set, at the
/// chunk and slot of its place in that set (`places`, beside `resolved`; see the module docs
/// on why windows are not consulted).
/// A sample whose period start would not fit in a timestamp lands nowhere (every window
/// refuses it) and changes nothing. A cell comes twice only when its series came back to it
/// from more than 64 buckets past it within the group; the pre-image is the same both times.
/// The cells `known` knows are empty are listed apart.
fn cells_touched(
    config: &TiersConfig,
    todo: &[&(u64, SampleBatch)],
    (resolved, places): (&[Vec<Resolved>], &[Vec<SetPlace>]),
    chain: &mut ChainCells,
    known: &mut KnownEmpty,
) -> Touched {
    let slots = config.engine.series_per_chunk;
    let mut touched = Touched {
        cells: Vec::new(),
        empty: Vec::new(),
    };
    // Per tier (storage index), where the last sample fell, with its bucket's start. A
    // message's samples are grouped by series, in time order, or hold one instant of many
    // series: either way most samples fall in the buckets of the one before and skip the
    // lookup.
    let mut placed: Vec<Option<(Placement, Timestamp)>> = vec![None; config.tier_count()];
    for (((_, batch), series), places) in todo.iter().zip(resolved).zip(places) {
        // A sample's or an observation's series (its place in the batch), time and value.
        let mut touch = |index: u32, ts: Timestamp, value: f64| {
            let Some(Resolved::Id(id)) = series.get(index as usize) else {
                return;
            };
            if !value.is_finite() {
                return;
            }
            let set_place = places[index as usize];
            let (chunk, slot) = set_place.chunk_and_slot(slots);
            for (tier, spec) in config.indexed_set_tiers(set_place.set()) {
                let place = &mut placed[tier];
                let resolution = spec.resolution.secs() as i64;
                // A period is a whole number of buckets: inside the bucket is inside its
                // period too.
                let inside =
                    |&(_, start): &(Placement, Timestamp)| ts >= start && ts - start < resolution;
                if !place.as_ref().is_some_and(inside) {
                    *place = checked_place(tier, spec, ts)
                        .map(|p| (p, p.period_start + i64::from(p.bucket) * resolution));
                }
                let Some((
                    Placement {
                        period_start,
                        bucket,
                        ..
                    },
                    bucket_start,
                )) = *place
                else {
                    continue;
                };
                if chain.note(*id, tier, bucket_start) {
                    let cell = CellAt {
                        tier,
                        period_start,
                        chunk,
                        bucket,
                        slot,
                    };
                    if known.take(*id, tier, bucket_start, resolution) {
                        touched.empty.push(cell);
                    } else {
                        touched.cells.push(cell);
                    }
                }
            }
        };
        for sample in &batch.samples {
            touch(sample.series, sample.ts, sample.value);
        }
        for o in &batch.observed {
            touch(o.series, o.ts, o.observed.sum);
        }
    }
    touched
}

/// Step 5: puts back every pre-image of `chain`, the records in force (see the module
/// docs). A cell in several records (one a series came back to from more than 64 buckets
/// past it, or after a group whose pre-images could not be read) gets the first record's:
/// the value before the chain.
///
/// # Errors
/// [`Error::CorruptFile`] naming the undo file when a record was taken under another tiers
/// layout or holds an entry outside the files; as [`Engine::restore_cells`].
fn roll_back(
    shared: &super::Shared,
    layout: u64,
    chain: &[&UndoRecord],
    path: &Path,
    fault: Option<Fault>,
) -> Result<()> {
    if chain.iter().any(|record| record.layout != layout) {
        return Err(Error::corrupt(
            path,
            "holds the undo of an unfinished group written under another tiers \
             configuration: open with the tiers.toml of the process that stopped to roll it \
             back",
        ));
    }
    // Each cell with the record it comes from.
    let mut cells = Vec::new();
    let mut states = Vec::new();
    for (record, entry) in (chain.iter().enumerate())
        .flat_map(|(i, record)| record.entries.iter().map(move |entry| (i, entry)))
    {
        match *entry {
            Undo::Cell { at, before, .. } => cells.push((at, before, record)),
            Undo::State { id, before } => {
                let id = u32::try_from(id).map_err(|_| {
                    Error::corrupt(path, format!("series id {id} is beyond any registry"))
                })?;
                states.push((SeriesId(id), before));
            }
        }
    }
    // A stable sort keeps each cell's entries in chain order: the first stays. (A series'
    // state is taken once per chain.)
    cells.sort_by_key(|&(cell, _, _)| cell);
    cells.dedup_by_key(|&mut (cell, _, _)| cell);
    // A distribution cell's histogram goes back with its bucket, from the same record.
    let histograms: rustc_hash::FxHashMap<(usize, CellAt), &Option<Histogram>> =
        (chain.iter().enumerate())
            .flat_map(|(i, record)| record.histograms.iter().map(move |image| (i, image)))
            .map(|(i, image)| ((i, image.at), &image.histogram))
            .collect();
    let mut distributions: Vec<Image> = Vec::new();
    let cells: Vec<(CellAt, Bucket)> = (cells.into_iter())
        .filter_map(
            |(cell, bucket, record)| match histograms.get(&(record, cell)) {
                Some(&histogram) => {
                    distributions.push((cell, (bucket, histogram.clone())));
                    None
                }
                None => Some((cell, bucket)),
            },
        )
        .collect();
    let in_file = |e: Error| match e {
        Error::InvalidQuery(why) => Error::corrupt(path, why),
        e => e,
    };
    let half = cells.len() / 2;
    let mut changed = shared
        .rewind()
        .restore_cells(&cells[..half])
        .map_err(in_file)?;
    if let Some(fault) = fault {
        if fault.step == Step::MidRestore {
            fault.fire(Step::MidRestore)?;
        }
    }
    changed += shared
        .rewind()
        .restore_cells(&cells[half..])
        .map_err(in_file)?;
    changed += shared
        .rewind()
        .restore_distributions(&distributions)
        .map_err(in_file)?;
    for (id, before) in states {
        shared.rewind().restore_counter_state(id, before)?;
    }
    let mut raw_points = 0;
    for tail in chain.iter().rev().flat_map(|record| &record.raw_tails) {
        raw_points += shared
            .rewind()
            .truncate_raw_after(SeriesId(tail.id), tail.last)?;
    }
    tracing::warn!(
        dir = %shared.dir.display(),
        from_seq = chain.first().map_or(0, |record| record.seq),
        to_seq = chain.last().map_or(0, |record| record.seq),
        groups = chain.len(),
        cells = cells.len() + distributions.len(),
        changed,
        raw_points,
        "the last process stopped between two checkpoints; rolled the groups applied since \
         back, to be applied again"
    );
    Ok(())
}

/// A step of the apply where the fault hook can stop it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    UndoWritten,
    MidApply,
    Applied,
    Flushed,
    MidRestore,
}

impl Step {
    const ALL: [(Step, &'static str); 5] = [
        (Step::UndoWritten, "undo-written"),
        (Step::MidApply, "mid-apply"),
        (Step::Applied, "applied"),
        (Step::Flushed, "flushed"),
        (Step::MidRestore, "mid-restore"),
    ];

    fn name(self) -> &'static str {
        Step::ALL
            .iter()
            .find(|(step, _)| *step == self)
            .map_or("?", |(_, name)| name)
    }
}

/// The fault hook ([`Hook::KillMidApply`]): `<step>` or `<step>:<n>`; `mid-restore` kills
/// the process halfway through the recovery at open. Steps: `undo-written`, `mid-apply`
/// (after the group's first message), `applied` (every message stored, nothing flushed),
/// `flushed` (durable, the applied sequence not yet recorded), `mid-restore`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fault {
    step: Step,
    /// The group (1-based, counted since open) it fires in.
    group: u64,
    action: FaultAction,
}

/// What the fault hook does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultAction {
    /// SIGKILL, as `kill -9`: the kill tests.
    Kill,
    /// Return an error, leaving the files as a kill would (the page cache survives a kill):
    /// the in-process tests, which then drop the engine and reopen.
    #[cfg(test)]
    Stop,
}

impl Fault {
    /// The hook [`Hook::KillMidApply`] arms, if set; a value that names no step is logged
    /// and ignored.
    fn from_env() -> Option<Fault> {
        let value = Hook::KillMidApply.armed()?;
        let (name, group) = match value.split_once(':') {
            Some((name, n)) => (name, n.parse().ok()),
            None => (value.as_str(), Some(1)),
        };
        let step = Step::ALL.iter().find(|(_, n)| *n == name).map(|(s, _)| *s);
        match (step, group) {
            (Some(step), Some(group)) => Some(Fault {
                step,
                group,
                action: FaultAction::Kill,
            }),
            _ => {
                tracing::error!(value, "the apply's fault hook names no step (undo-written, mid-apply, applied, flushed, mid-restore, with an optional :<group>); ignored");
                None
            }
        }
    }

    /// A hook that stops group `group` (counted since open) once its messages are stored,
    /// before any checkpoint: its undo record stays in force, as a kill leaves it.
    #[cfg(test)]
    pub(super) fn stop_once_applied(group: u64) -> Fault {
        Fault {
            step: Step::Applied,
            group,
            action: FaultAction::Stop,
        }
    }

    /// Stops here.
    ///
    /// # Errors
    /// Always, for [`FaultAction::Stop`] (a kill does not return).
    fn fire(self, step: Step) -> Result<()> {
        match self.action {
            FaultAction::Kill => {
                tracing::error!("fault hook: killing this process at {}", step.name());
                fault::kill_self()
            }
            #[cfg(test)]
            FaultAction::Stop => Err(Error::Poisoned(format!(
                "fault hook: stopped at {}",
                step.name()
            ))),
        }
    }
}

impl Inner {
    /// True when the fault hook is armed for `step` of group `group`.
    fn fault_armed(&self, step: Step, group: u64) -> bool {
        self.fault
            .is_some_and(|fault| fault.step == step && fault.group == group)
    }

    /// Fires the fault hook when it is armed for `step` of group `group`.
    fn fault_at(&self, step: Step, group: u64) -> Result<()> {
        match self.fault {
            Some(fault) if fault.step == step && fault.group == group => fault.fire(step),
            _ => Ok(()),
        }
    }
}
