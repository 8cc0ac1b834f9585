//! The shared cell in a mapped file that a writer updates in place ([`BucketCell`]), with the
//! seqlock that keeps reads torn-free. The value a reader gets out of it is
//! [`crate::bucket::Bucket`].
//!
//! Everything that stores into a cell (`add`, `clear`, `repair`) is private to `storage` and
//! reached only through [`super::period_file::WritableFile`], which only a writable mapping
//! yields; reads go through [`super::period_file::PeriodFile::load`] and use `Relaxed` loads
//! plus fences only, the one kind of atomic access the std docs allow on read-only memory.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::bucket::Bucket;

// The file format is little-endian and the cells are native-endian atomics.
#[cfg(not(target_endian = "little"))]
compile_error!("tierdb's file format is little-endian; big-endian targets are not supported");

/// Size of one bucket record on disk: four little-endian 8-byte fields.
pub const RECORD_SIZE: usize = 32;

/// How long a reader waits on an update in flight before it calls the bucket damaged.
pub const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Set in `count` while the single writer of a cell is between its first and last store.
const BUSY: u64 = 1 << 63;

/// A bucket record inside a mapped file: `count` (u64), `total`, `min`, `max` (f64 bits), in
/// that order, 32 bytes, accessed only through atomics because other threads (and read-only
/// processes) look at the same memory while the writer changes it.
///
/// `count` doubles as the seqlock sequence: it only ever grows, and its top bit (`BUSY`) is
/// set while an update is in flight, so a reader that saw the same `count` before and after
/// reading the other fields, with `BUSY` clear, read one consistent bucket.
#[repr(C, align(32))]
pub struct BucketCell {
    count: AtomicU64,
    total: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<BucketCell>() == RECORD_SIZE);

impl BucketCell {
    /// Folds `value` into the cell.
    ///
    /// Each cell has exactly one writer (the write path partitions series across writer
    /// threads). A second concurrent writer would not cause undefined behaviour, only lost
    /// updates, so this is a logic invariant rather than a safety one.
    #[inline]
    pub(super) fn add(&self, value: f64) {
        let count = self.count.load(Ordering::Relaxed);
        self.count.store(count | BUSY, Ordering::Relaxed);
        // Orders the BUSY store before the field stores for any reader that sees a new field.
        fence(Ordering::Release);
        let mut bucket = Bucket {
            count,
            total: f64::from_bits(self.total.load(Ordering::Relaxed)),
            min: f64::from_bits(self.min.load(Ordering::Relaxed)),
            max: f64::from_bits(self.max.load(Ordering::Relaxed)),
        };
        bucket.add(value);
        self.total.store(bucket.total.to_bits(), Ordering::Relaxed);
        self.min.store(bucket.min.to_bits(), Ordering::Relaxed);
        self.max.store(bucket.max.to_bits(), Ordering::Relaxed);
        self.count.store(bucket.count, Ordering::Release);
    }

    /// Reads a consistent snapshot, retrying while the writer is mid-update.
    ///
    /// Only `Relaxed` loads and `Acquire` fences touch the cell, so this is sound on a
    /// read-only mapping. A writer is between its first and last store for nanoseconds, or for a scheduler
    /// slice when preempted. An update-in-flight bit that stays set for [`STALE_AFTER`] can
    /// only be damage (the repair at an unclean open clears a crash's leftovers), so the read
    /// then returns the fields as they stand and logs the cell instead of hanging.
    #[inline]
    pub(super) fn load(&self) -> Bucket {
        let mut spins = 0u32;
        let mut waiting_since = None;
        loop {
            let before = self.count.load(Ordering::Relaxed);
            // With the Relaxed load above, the seqlock reader's load-acquire: the fields read
            // next are at least as new as the update whose final count was read.
            fence(Ordering::Acquire);
            if before & BUSY == 0 {
                let total = self.total.load(Ordering::Relaxed);
                let min = self.min.load(Ordering::Relaxed);
                let max = self.max.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if self.count.load(Ordering::Relaxed) == before {
                    return Bucket {
                        count: before,
                        total: f64::from_bits(total),
                        min: f64::from_bits(min),
                        max: f64::from_bits(max),
                    };
                }
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else if let Some(bucket) = self.wait(spins, &mut waiting_since) {
                return bucket;
            }
        }
    }

    /// The rare path of [`BucketCell::load`]: the writer is slow to finish (on a loaded
    /// machine it may be descheduled mid-update), so yield the core it needs; give up on a
    /// bit that stays set for [`STALE_AFTER`] and return the fields as they stand.
    #[cold]
    #[inline(never)]
    fn wait(&self, spins: u32, since: &mut Option<std::time::Instant>) -> Option<Bucket> {
        std::thread::yield_now();
        if !spins.is_multiple_of(1024) {
            return None;
        }
        if since.get_or_insert_with(std::time::Instant::now).elapsed() < STALE_AFTER {
            return None;
        }
        tracing::error!(
            cell = ?(self as *const BucketCell),
            "bucket stuck mid-update (damaged file?); reading it as it stands"
        );
        Some(Bucket {
            count: self.count.load(Ordering::Relaxed) & !BUSY,
            total: f64::from_bits(self.total.load(Ordering::Relaxed)),
            min: f64::from_bits(self.min.load(Ordering::Relaxed)),
            max: f64::from_bits(self.max.load(Ordering::Relaxed)),
        })
    }

    /// Resets the cell to empty. Only valid while no writer runs (repair at open).
    pub(super) fn clear(&self) {
        self.total.store(0, Ordering::Relaxed);
        self.min.store(0, Ordering::Relaxed);
        self.max.store(0, Ordering::Relaxed);
        self.count.store(0, Ordering::Release);
    }

    /// True when every field is zero, as in a freshly created file.
    pub(super) fn is_pristine(&self) -> bool {
        self.count.load(Ordering::Relaxed) == 0
            && self.total.load(Ordering::Relaxed) == 0
            && self.min.load(Ordering::Relaxed) == 0
            && self.max.load(Ordering::Relaxed) == 0
    }

    /// Clears a `BUSY` bit left behind by a process that died mid-update and reports whether
    /// it found one. Only valid while no writer runs (at open, under the directory lock); the
    /// half-applied sample is then counted as not having arrived while its fields may hold it.
    pub(super) fn repair(&self) -> bool {
        let count = self.count.load(Ordering::Relaxed);
        if count & BUSY == 0 {
            return false;
        }
        self.count.store(count & !BUSY, Ordering::Release);
        true
    }
}
