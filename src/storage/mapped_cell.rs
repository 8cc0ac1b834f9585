//! The shared cell in a mapped file that a writer updates in place ([`BucketCell`]), with the
//! seqlock that keeps reads torn-free, and `Writers`: who may hold a cell's update-in-flight
//! bit while this process reads it, so a bit no live writer holds (a crash's leftover) never
//! stalls a read. A writer names the cell it updates in `writers.state` (see
//! [`super::writer_state`]): readers of this process ask those words, and the next open after
//! a crash repairs the cells they name. The value a reader gets out of a cell is [`crate::bucket::Bucket`].
//!
//! Everything that stores into a cell (`add`, `clear`, `repair`) is private to `storage` and
//! reached only through [`super::period_file::WritableFile`], which only a writable mapping
//! yields; reads go through [`super::period_file::PeriodFile::load`] and use `Relaxed` loads
//! plus fences only, the one kind of atomic access the std docs allow on read-only memory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use super::format::{LATEST_SIZE, RECORD_SIZE};
pub(crate) use super::writer_state::WriterSlot;
use super::writer_state::{Publication, Publisher, WriterStateFile};
use crate::bucket::{Bucket, Last};
use crate::error::Result;
use crate::time::Timestamp;

// The file format is little-endian and the cells are native-endian atomics.
#[cfg(not(target_endian = "little"))]
compile_error!("tierdb's file format is little-endian; big-endian targets are not supported");

/// How long a reader waits on an update in flight, held by a live writer, before it calls the
/// bucket damaged.
pub const STALE_AFTER: Duration = Duration::from_secs(2);

/// Set in `count` while the single writer of a cell is between its first and last store.
const BUSY: u64 = 1 << 63;

/// Spins a reader makes on a busy cell before it yields and asks `Writers` about the bit.
const SPINS: u32 = 64;

/// A bucket record inside a mapped file: `count` (u64), `total`, `min`, `max` (f64 bits), in
/// that order, 32 bytes, accessed only through atomics because other threads (and read-only
/// processes) look at the same memory while the writer changes it. A version 3 file keeps
/// the bucket's latest sample apart, in its latest area ([`LastWords`]).
///
/// `count` doubles as the seqlock sequence: it only ever grows, and its top bit (`BUSY`) is
/// set while an update is in flight, so a reader that saw the same `count` before and after
/// reading the other fields, with `BUSY` clear, read one consistent bucket.
#[repr(C, align(32))]
pub(crate) struct BucketCell {
    count: AtomicU64,
    total: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<BucketCell>() == RECORD_SIZE);

/// A version 3 file's entry of the latest area for one record: the bucket's latest sample,
/// under the record's seqlock (stored while `BUSY` is set, read between the two loads of
/// `count`).
#[repr(C)]
pub(crate) struct LastWords {
    /// The latest sample's value (f64 bits; a counter's raw value).
    value: AtomicU64,
    /// [`LAST_KNOWN`] | seconds from the bucket's start to the sample; 0 when unknown.
    at: AtomicU64,
}

/// Set in [`LastWords::at`] when the latest sample is known: all-zero words (a new file, a
/// cleared record) read as unknown, never as a sample of 0 at the bucket's start.
const LAST_KNOWN: u64 = 1 << 63;

const _: () = assert!(std::mem::size_of::<LastWords>() == LATEST_SIZE);

impl LastWords {
    /// The latest sample of a bucket starting at `start`, as stored.
    #[inline(always)]
    fn load(&self, start: Timestamp) -> Option<Last> {
        let at = self.at.load(Ordering::Relaxed);
        let value = self.value.load(Ordering::Relaxed);
        (at & LAST_KNOWN != 0).then(|| {
            Last::new(
                f64::from_bits(value),
                start + (at & !LAST_KNOWN) as Timestamp,
            )
        })
    }

    /// Stores `last` for a bucket starting at `start`: unknown for `None`, or for a time
    /// before the start (never written: a sample lands in the bucket that holds its time).
    ///
    /// Unknown over an entry that is all zeros already stores nothing: a distribution's
    /// entries stay zero, and their page may be a hole nobody reserved (a batch reserves a
    /// page of the latest area only for samples that keep a latest sample), where a store
    /// would take disk the batch did not reserve, or fault on a full disk. An entry that is
    /// not zero was stored into, so its page has its disk.
    #[inline(always)]
    fn store(&self, last: Option<Last>, start: Timestamp) {
        let (value, at) = match last {
            Some(last) if last.ts() >= start => (
                last.value.to_bits(),
                LAST_KNOWN | (last.ts() - start) as u64,
            ),
            _ if self.is_pristine() => return,
            _ => (0, 0),
        };
        self.value.store(value, Ordering::Relaxed);
        self.at.store(at, Ordering::Relaxed);
    }

    /// True when both words are zero.
    fn is_pristine(&self) -> bool {
        self.value.load(Ordering::Relaxed) == 0 && self.at.load(Ordering::Relaxed) == 0
    }
}

impl LastWords {
    /// The words an entry of a bucket starting at `start` holds for `last`, as the seqlock
    /// stores them, for a file written with plain I/O before it is mapped.
    pub(super) fn words_of(last: Option<Last>, start: Timestamp) -> [u64; LATEST_SIZE / 8] {
        let words = LastWords {
            value: AtomicU64::new(0),
            at: AtomicU64::new(0),
        };
        words.store(last, start);
        [words.value.into_inner(), words.at.into_inner()]
    }
}

impl BucketCell {
    /// The words a record holds for `bucket`, for a file written with plain I/O.
    pub(super) fn words_of(bucket: &Bucket) -> [u64; RECORD_SIZE / 8] {
        [
            bucket.count,
            bucket.total.to_bits(),
            bucket.min.to_bits(),
            bucket.max.to_bits(),
        ]
    }

    /// The record as the seqlock code sees it, with the entry `last` of the latest area of
    /// a version 3 file (`None`: a version 1 or 2 file's, which keeps no latest sample), for
    /// a bucket starting at `start`.
    #[inline(always)]
    pub(super) fn record<'a>(
        &'a self,
        last: Option<&'a LastWords>,
        start: Timestamp,
    ) -> Record<'a> {
        Record {
            cell: self,
            last,
            start,
        }
    }
}

/// One bucket record: its cell, its latest-sample words when the file keeps them, and the
/// bucket's start, which their offset counts from. Every store and load of a record goes
/// through here, so files with and without the latest area share one seqlock.
#[derive(Clone, Copy)]
pub(crate) struct Record<'a> {
    cell: &'a BucketCell,
    last: Option<&'a LastWords>,
    start: Timestamp,
}

/// How a read that found the update-in-flight bit set past its spins ended, for the caller to
/// log with the file and cell it knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stuck {
    /// No live writer holds the bit (a crash left it): the read returned the fields at once,
    /// as the repair at an unclean open would leave them.
    Stale,
    /// A live writer (or, for a read-only process, a live writing process) seemed to hold it
    /// for [`STALE_AFTER`]: the read gave up and returned the fields as they stand.
    Damaged,
}

impl Record<'_> {
    /// The latest sample as stored; unknown in a record without it.
    #[inline(always)]
    fn load_last(&self) -> Option<Last> {
        self.last.and_then(|words| words.load(self.start))
    }

    /// Stores `last`, in a record that keeps it.
    #[inline(always)]
    fn store_last(&self, last: Option<Last>) {
        if let Some(words) = self.last {
            words.store(last, self.start);
        }
    }

    /// The head's fields and the latest sample as they stand, with `count`.
    #[inline(always)]
    fn fields(&self, count: u64) -> Bucket {
        Bucket {
            count,
            total: f64::from_bits(self.cell.total.load(Ordering::Relaxed)),
            min: f64::from_bits(self.cell.min.load(Ordering::Relaxed)),
            max: f64::from_bits(self.cell.max.load(Ordering::Relaxed)),
            last: self.load_last(),
        }
    }

    /// Starts loading the record and its latest entry into the cache: they lie in different
    /// parts of the file, and a store or read misses on each.
    #[inline(always)]
    pub(super) fn prefetch(&self) {
        super::mmap::prefetch(self.cell);
        if let Some(last) = self.last {
            super::mmap::prefetch(last);
        }
    }

    /// Folds `value` into the cell named `name`, as the writer thread that publishes through
    /// `writer`.
    ///
    /// Each cell has exactly one writer (the write path partitions series across writer
    /// threads). A second concurrent writer would not cause undefined behaviour, only lost
    /// updates, so this is a logic invariant rather than a safety one. A `BUSY` bit found set
    /// is a crash's leftover (the one writer is this call) and is healed: the count resumes
    /// from its value before the interrupted update, as the repair at an unclean open does.
    /// `last` is the sample's latest-sample value and time; `None` leaves the latest
    /// sample unknown.
    #[inline]
    pub(super) fn add(
        &self,
        value: f64,
        last: Option<Last>,
        writer: Publisher<'_>,
        name: Publication,
    ) {
        let fold = |bucket: &mut Bucket| match last {
            Some(last) => bucket.add_at(value, last),
            None => bucket.add(value),
        };
        self.update(fold, writer, name, || {});
    }

    /// Folds a distribution's update into the cell with `fold`, as [`BucketCell::add`] does
    /// a value, running `between` while the update-in-flight bit is set, before the fields
    /// are stored: a distribution cell stores its histogram there, so a reader that sees the
    /// new count sees the new histogram, and the repair after a crash finds the bit set
    /// whenever the histogram may be half stored.
    #[inline]
    pub(super) fn update_with(
        &self,
        fold: impl FnOnce(&mut Bucket),
        writer: Publisher<'_>,
        name: Publication,
        between: impl FnOnce(),
    ) {
        self.update(fold, writer, name, between);
    }

    /// One update: publish, set the update-in-flight bit, run `between`, fold with `fold`,
    /// store the fields and clear the bit.
    #[inline(always)]
    fn update(
        &self,
        fold: impl FnOnce(&mut Bucket),
        writer: Publisher<'_>,
        name: Publication,
        between: impl FnOnce(),
    ) {
        // Release: a reader that sees this publication (or a later one) also sees the
        // writer's previous cell finished. The BUSY store below is Release so that a reader
        // that sees BUSY also sees this publication; program order alone puts it in the page
        // cache before BUSY for the open after a kill.
        writer.publish(name);
        let found = self.cell.count.load(Ordering::Relaxed);
        let count = found & !BUSY;
        self.cell.count.store(count | BUSY, Ordering::Release);
        // Orders the BUSY store before the field stores for any reader that sees a new field.
        fence(Ordering::Release);
        between();
        let mut bucket = self.fields(count);
        if found & BUSY != 0 {
            // An interrupted update's leftover: its latest sample may be the one counted as
            // not arrived.
            bucket.last = None;
        }
        fold(&mut bucket);
        self.store_fields(&bucket);
    }

    /// Stores `bucket`'s fields and latest sample, then its count with `Release`: the end of
    /// an update, or a restore's whole store.
    #[inline(always)]
    fn store_fields(&self, bucket: &Bucket) {
        self.cell
            .total
            .store(bucket.total.to_bits(), Ordering::Relaxed);
        self.cell.min.store(bucket.min.to_bits(), Ordering::Relaxed);
        self.cell.max.store(bucket.max.to_bits(), Ordering::Relaxed);
        self.store_last(bucket.last);
        self.cell.count.store(bucket.count, Ordering::Release);
    }

    /// The crash tests' fault hook: what [`BucketCell::add`] does up to the middle of the
    /// update (published, `BUSY` set, the new total stored), then the process kills itself
    /// with SIGKILL, as `kill -9` would, leaving the cell torn for the next open to repair.
    #[cold]
    pub(super) fn add_and_die(&self, value: f64, writer: Publisher<'_>, name: Publication) -> ! {
        self.die_mid_update(value, writer, name, || {}, true)
    }

    /// [`BucketCell::add_and_die`] of a distribution's update, running `between` once the
    /// update-in-flight bit is set (as [`BucketCell::update_with`] does), before the kill.
    /// The latest entry is left alone, as a distribution's update leaves it (it keeps none).
    #[cold]
    pub(super) fn add_with_and_die(
        &self,
        value: f64,
        writer: Publisher<'_>,
        name: Publication,
        between: impl FnOnce(),
    ) -> ! {
        self.die_mid_update(value, writer, name, between, false)
    }

    /// The update up to its middle, then the kill; with `torn_last`, the latest sample torn
    /// too (its value stored, its time not).
    #[cold]
    fn die_mid_update(
        &self,
        value: f64,
        writer: Publisher<'_>,
        name: Publication,
        between: impl FnOnce(),
        torn_last: bool,
    ) -> ! {
        writer.publish(name);
        let count = self.cell.count.load(Ordering::Relaxed) & !BUSY;
        self.cell.count.store(count | BUSY, Ordering::Release);
        fence(Ordering::Release);
        between();
        let total = f64::from_bits(self.cell.total.load(Ordering::Relaxed)) + value;
        self.cell.total.store(total.to_bits(), Ordering::Relaxed);
        if let Some(words) = self.last.filter(|_| torn_last) {
            words.value.store(value.to_bits(), Ordering::Relaxed);
        }
        crate::fault::kill_self()
    }

    /// One attempt at a consistent snapshot: `None` while an update is in flight or when the
    /// cell changed under the read.
    ///
    /// Only `Relaxed` loads and `Acquire` fences touch the cell, so this is sound on a
    /// read-only mapping.
    #[inline(always)]
    fn read(&self) -> Option<Bucket> {
        self.read_with(|| {})
    }

    /// [`BucketCell::read`], running `between` after the first load of `count` and before the
    /// second: what it reads of memory the writer stores between the same two (a
    /// distribution cell's histogram, see [`BucketCell::update_with`]) belongs to the snapshot
    /// when this returns `Some`.
    #[inline(always)]
    pub(super) fn read_with(&self, between: impl FnOnce()) -> Option<Bucket> {
        let before = self.cell.count.load(Ordering::Relaxed);
        // With the Relaxed load above, the seqlock reader's load-acquire: the fields read next
        // are at least as new as the update whose final count was read.
        fence(Ordering::Acquire);
        if before & BUSY != 0 {
            return None;
        }
        let bucket = self.fields(before);
        between();
        fence(Ordering::Acquire);
        (self.cell.count.load(Ordering::Relaxed) == before).then_some(bucket)
    }

    /// Reads a consistent snapshot, spinning while the writer is mid-update (it is, for
    /// nanoseconds); `None` when the update-in-flight bit stays set past the spins, and then
    /// the caller goes on with [`BucketCell::load_waiting`]. Kept apart from it so the loop
    /// of a read over many cells carries nothing for the rare case.
    #[inline]
    pub(super) fn try_load(&self) -> Option<Bucket> {
        for _ in 0..SPINS {
            if let Some(bucket) = self.read() {
                return Some(bucket);
            }
            std::hint::spin_loop();
        }
        None
    }

    /// The rare path of a read, after [`BucketCell::try_load`] gave up: ask `writers` whether
    /// a live writer may hold the bit. If none does, the bit is a crash's leftover: return the
    /// fields at once with it masked off, reporting [`Stuck::Stale`] to `stuck`. Otherwise
    /// yield the core the writer may need (on a loaded machine it may be descheduled
    /// mid-update) until the bit clears, then return `None` for the caller to read again;
    /// asking again every 1024 rounds, and giving up on a bit that stays set for
    /// [`STALE_AFTER`]: the fields as they stand ([`Stuck::Damaged`]) instead of hanging.
    #[cold]
    #[inline(never)]
    pub(super) fn load_waiting(
        &self,
        writers: &Writers,
        name: Publication,
        stuck: &dyn Fn(Stuck),
    ) -> Option<Bucket> {
        let since = Instant::now();
        let mut rounds = 0u32;
        loop {
            if rounds.is_multiple_of(1024) {
                if let Some(bucket) = self.read_unheld(writers, name) {
                    stuck(Stuck::Stale);
                    return Some(bucket);
                }
                if since.elapsed() >= STALE_AFTER {
                    stuck(Stuck::Damaged);
                    let count = self.cell.count.load(Ordering::Relaxed) & !BUSY;
                    return Some(Bucket {
                        last: None,
                        ..self.fields(count)
                    });
                }
            }
            std::thread::yield_now();
            if self.cell.count.load(Ordering::Relaxed) & BUSY == 0 {
                return None;
            }
            rounds = rounds.wrapping_add(1);
        }
    }

    /// The fields with `BUSY` masked off, when `BUSY` is set and no live writer holds it; `None`
    /// when a writer may hold it or the cell changed meanwhile. `name` is the cell's name, as
    /// its writer publishes it.
    ///
    /// Why a snapshot taken this way is never torn: the fields are read before the writers
    /// are asked. If any field load saw a store of an update in flight, the fence after the
    /// loads pairs with the writer's Release fence, so the writer's publication of this cell
    /// (stored before its BUSY store) is visible to `writers.may_hold`: either both words of
    /// the cell's name are still published (held: no snapshot), or a store of a later
    /// publication or of the writer's clearing is seen in one of them (all Release, read with
    /// Acquire), and then the writer's final `count` store is visible and the re-check of
    /// `count` fails. A mix of old and new words that still reads as this cell only makes the
    /// reader wait. A live writer that starts
    /// healing the cell stores the same `count | BUSY` value, which is why the re-check alone
    /// would not do.
    fn read_unheld(&self, writers: &Writers, name: Publication) -> Option<Bucket> {
        let before = self.cell.count.load(Ordering::Relaxed);
        if before & BUSY == 0 {
            return None;
        }
        let bucket = self.fields(before & !BUSY);
        fence(Ordering::Acquire);
        if writers.may_hold(name) {
            return None;
        }
        fence(Ordering::Acquire);
        if self.cell.count.load(Ordering::Relaxed) != before {
            return None;
        }
        // The interrupted update may have stored its sample as the latest.
        Some(Bucket {
            last: None,
            ..bucket
        })
    }

    /// Resets the cell to empty. Only valid while no writer runs (repair at open).
    pub(super) fn clear(&self) {
        self.restore(&Bucket::EMPTY);
    }

    /// Puts back what the cell held before a batch that did not finish (the counter
    /// journal's undo), its latest sample as `before` has it (unknown when the image did
    /// not keep it). Only valid while no writer runs (at open).
    pub(super) fn restore(&self, before: &Bucket) {
        self.store_fields(before);
    }

    /// True when every field is zero, as in a freshly created file.
    pub(super) fn is_pristine(&self) -> bool {
        self.cell.count.load(Ordering::Relaxed) == 0
            && self.cell.total.load(Ordering::Relaxed) == 0
            && self.cell.min.load(Ordering::Relaxed) == 0
            && self.cell.max.load(Ordering::Relaxed) == 0
            && self.last.is_none_or(LastWords::is_pristine)
    }

    /// Clears a `BUSY` bit left behind by a process that died mid-update and reports whether
    /// it found one. Only valid while no writer runs (at open, under the directory lock); the
    /// half-applied sample is then counted as not having arrived while its fields may hold it,
    /// and the latest sample, which it may have stored, becomes unknown.
    pub(super) fn repair(&self) -> bool {
        let count = self.cell.count.load(Ordering::Relaxed);
        if count & BUSY == 0 {
            return false;
        }
        self.store_last(None);
        self.cell.count.store(count & !BUSY, Ordering::Release);
        true
    }
}

/// Who may hold a cell's update-in-flight bit while this process reads it.
pub(super) enum Writers {
    /// This process writes the files (it holds the data directory's lock): its writer
    /// threads, each publishing the cell it updates in `writers.state`. A bit on a cell none
    /// of them publishes is a crash's leftover.
    InProcess {
        /// The writer threads' records.
        slots: RwLock<Vec<WriterSlot>>,
        /// `writers.state`, which hands them out (and, at open, what the last process left).
        state: Mutex<WriterStateFile>,
        /// The configured tiers' names, in order: a publication names a tier by index.
        tiers: Vec<String>,
    },
    /// Another process may write them (a read-only engine beside a server): the one the data
    /// directory's `OPEN` marker names, when that process is alive.
    OtherProcess {
        /// `<data>/OPEN`.
        marker: PathBuf,
    },
}

impl Writers {
    /// The writers of a process that writes the data directory `dir` (it holds its lock),
    /// with `tiers` the configured tiers' names: `writers.state` opened as the last process
    /// left it.
    ///
    /// # Errors
    /// As [`WriterStateFile::open`].
    pub(super) fn open_in_process(dir: &Path, tiers: Vec<String>) -> Result<Writers> {
        Ok(Writers::InProcess {
            slots: RwLock::new(Vec::new()),
            state: Mutex::new(WriterStateFile::open(dir)?),
            tiers,
        })
    }

    /// A new writer thread's slot; `Ok(None)` when another process writes the files.
    ///
    /// # Errors
    /// [`crate::Error::Io`] naming `writers.state` when it cannot grow.
    pub(super) fn register(&self) -> Result<Option<WriterSlot>> {
        match self {
            Writers::InProcess { slots, state, .. } => {
                let slot = state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .next_slot()?;
                slots
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(slot.clone());
                Ok(Some(slot))
            }
            Writers::OtherProcess { .. } => Ok(None),
        }
    }

    /// `writers.state`, for the recovery at open; `None` when another process writes.
    pub(super) fn state(&self) -> Option<std::sync::MutexGuard<'_, WriterStateFile>> {
        match self {
            Writers::InProcess { state, .. } => {
                Some(state.lock().unwrap_or_else(|e| e.into_inner()))
            }
            Writers::OtherProcess { .. } => None,
        }
    }

    /// The index of the tier named `name` in this process's configuration, as publications
    /// name it; `None` for a tier it does not configure, or when another process writes.
    pub(super) fn tier_index(&self, name: &str) -> Option<usize> {
        match self {
            Writers::InProcess { tiers, .. } => tiers.iter().position(|t| t == name),
            Writers::OtherProcess { .. } => None,
        }
    }

    /// True when this process's mappings are writable (its writer threads write them).
    pub(super) fn in_process(&self) -> bool {
        matches!(self, Writers::InProcess { .. })
    }

    /// Whether a live writer may hold the update-in-flight bit of the cell named `name`.
    fn may_hold(&self, name: Publication) -> bool {
        match self {
            Writers::InProcess { slots, .. } => slots
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|slot| slot.names(name)),
            Writers::OtherProcess { marker } => marker_names_a_live_process(marker),
        }
    }
}

/// True when `marker` (a data directory's `OPEN`) exists and names a live process, or cannot
/// be read or understood (then the reader waits, as it would for a live writer). A missing
/// marker means no process has the directory open for writing: one writes it, with its pid,
/// before its first store. No lock is taken: a server starting at that instant must not be
/// refused.
fn marker_names_a_live_process(marker: &std::path::Path) -> bool {
    let text = match std::fs::read_to_string(marker) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        Err(_) => return true,
    };
    let Some(pid) = text
        .trim()
        .parse::<i32>()
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return true;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

#[cfg(test)]
mod tests;
