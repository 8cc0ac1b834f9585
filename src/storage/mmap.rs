//! The only module with `unsafe`: mapping period files, the prefetch hint the write path
//! gives the CPU, and starting a file's writeback (`sync_file_range`, which no safe crate
//! wraps).
//!
//! Why this is sound:
//! - Bucket memory is never handed out as `&[u8]`/`&mut [u8]`. The mapping is held as a raw
//!   pointer ([`memmap2::MmapRaw`]) and exposed only as `&[BucketCell]` or `&[LastWords]`
//!   (a version 3 file's latest area), whose fields are
//!   `AtomicU64`: concurrent changes by our writer threads, or by the one writing process while
//!   a read-only process looks, are the kind of shared mutation atomics permit.
//! - A read-only mapping (a read-only engine beside the writing process) is only ever read
//!   with `Relaxed` loads (8 bytes, a register's width) and fences: the std docs ("Atomic
//!   accesses to read-only memory") define no other atomic access to read-only memory, since
//!   other operations may be implemented with a write on some targets. The stores
//!   (`BucketCell::add`, `clear`, `repair`) are private to `storage` and reached only through
//!   `WritableFile`, which only a writable mapping yields.
//! - The header is read and written with ordinary file I/O, never through the mapping.
//! - The mapped length is checked against the file's length before mapping, and files are
//!   never truncated or resized by tierdb while mapped (they are created whole and dropped
//!   whole; an unlinked file stays mapped until the last `Arc` goes). The data directory lock
//!   keeps other tierdb processes from writing. A foreign process truncating a file underneath
//!   us would raise SIGBUS, as with every mmap-based store; that is outside what we can defend.
//! - The header is 4096 bytes and mappings are page-aligned, so every 32-byte record and
//!   16-byte latest entry is aligned for its type (checked at run time, not assumed).

#![allow(unsafe_code)]

use std::fs::File;
use std::path::Path;

use memmap2::{Advice, MmapOptions, MmapRaw};

use super::format::RECORD_SIZE as CELL_LEN;
use super::mapped_cell::{BucketCell, LastWords};
use crate::error::Error;
use crate::error::Result;

/// A file's bucket records, mapped shared so stores reach the page cache at once. Its length
/// counts 32-byte cells (a version 3 file's latest area after the records, two entries a
/// cell).
pub(crate) struct MappedCells {
    map: MmapRaw,
    cells: usize,
}

impl MappedCells {
    /// Maps `cells` records starting at byte `offset` of `file`.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] when the file is shorter than `offset + cells * 32` or the
    /// mapping would be misaligned; [`Error::Io`] when mapping fails.
    pub(crate) fn map(
        file: &File,
        path: &Path,
        offset: u64,
        cells: usize,
        writable: bool,
    ) -> Result<MappedCells> {
        let len = cells
            .checked_mul(CELL_LEN)
            .ok_or_else(|| Error::corrupt(path, "record area size overflows"))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if file_len < offset + len as u64 {
            return Err(Error::corrupt(
                path,
                format!(
                    "truncated: {file_len} bytes, the header promises {}",
                    offset + len as u64
                ),
            ));
        }
        if len == 0 {
            return Err(Error::corrupt(path, "the header describes no records"));
        }
        let mut options = MmapOptions::new();
        options.offset(offset).len(len);
        let map = if writable {
            options.map_raw(file)
        } else {
            options.map_raw_read_only(file)
        }
        .map_err(|e| Error::io(path, e))?;
        // Bucket writes and reads touch a few pages of a file at a time; the kernel's
        // read-around (8 MiB on some disks) would zero megabytes per first touch instead.
        map.advise(Advice::Random).map_err(|e| Error::io(path, e))?;
        if !(map.as_ptr() as usize).is_multiple_of(std::mem::align_of::<BucketCell>()) {
            return Err(Error::corrupt(path, "record area is not 8-byte aligned"));
        }
        Ok(MappedCells { map, cells })
    }

    /// The records as shared atomic cells.
    #[inline]
    pub(crate) fn cells(&self) -> &[BucketCell] {
        // SAFETY: the mapping is `cells * 32` bytes long (checked in `map` against the file
        // length), aligned for `BucketCell` (checked in `map`), lives as long as `self`, and is
        // only ever accessed through `BucketCell`'s atomics, so shared references to it may
        // coexist with concurrent stores. `BucketCell` is `repr(C)` of four `AtomicU64`, for
        // which every bit pattern is valid. A read-only mapping is only loaded `Relaxed`
        // through them (stores need a `WritableFile`, made only of writable mappings).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr() as *const BucketCell, self.cells) }
    }

    /// The latest area's entries from byte `from` of the mapping (a page boundary past the
    /// records) to its end.
    ///
    /// # Panics
    /// When `from` is past the mapping or not a multiple of 32 (a caller bug: the offset
    /// comes from the file's validated layout).
    #[inline]
    pub(crate) fn latest_from(&self, from: usize) -> &[LastWords] {
        assert!(from.is_multiple_of(CELL_LEN) && from <= self.cells * CELL_LEN);
        let entries = (self.cells * CELL_LEN - from) / std::mem::size_of::<LastWords>();
        // SAFETY: the mapping is `cells * 32` bytes long (checked in `map` against the file
        // length) and `from` lies within it, so `entries` whole 16-byte entries follow it;
        // the address is aligned for `LastWords` (the mapping is, checked in `map`, and
        // `from` is a multiple of 32); it lives as long as `self` and is only ever accessed
        // through `LastWords`' atomics, as in `cells`. `LastWords` is `repr(C)` of two
        // `AtomicU64`, for which every bit pattern is valid.
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(from) as *const LastWords, entries)
        }
    }

    /// The records as plain shared words, four per 32-byte record, for files whose records
    /// are not buckets (the counter state and journal, `writers.state`).
    #[inline]
    pub(crate) fn words(&self) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: as in `cells`: the mapping is `cells * 32` bytes, 8-byte aligned (checked
        // in `map`, 32 is a multiple of 8), lives as long as `self` and is only accessed
        // through atomics, for which every bit pattern is valid.
        unsafe {
            std::slice::from_raw_parts(
                self.map.as_ptr() as *const std::sync::atomic::AtomicU64,
                self.cells * (CELL_LEN / 8),
            )
        }
    }

    /// Faults `cells` records from index `first` into the page tables, writable, so the
    /// writer's first store to them does not take a page fault (the maintenance task calls
    /// it for the blocks about to be written). Best effort: an old kernel without
    /// `MADV_POPULATE_WRITE` just leaves the faults to the writer.
    ///
    /// The range is first asked for with `MADV_WILLNEED`, which reads what is not in the
    /// page cache as one large read: with `MADV_RANDOM` on the mapping, the populate alone
    /// would read it a page at a time (a cold start's prefault of every file's current
    /// block took 19 s at 100k series that way).
    pub(crate) fn populate(&self, first: usize, cells: usize) {
        let first = first.min(self.cells);
        let cells = cells.min(self.cells - first);
        if let Err(e) = self
            .map
            .advise_range(Advice::WillNeed, first * CELL_LEN, cells * CELL_LEN)
        {
            tracing::debug!(error = %e, "asking for bucket pages ahead failed");
        }
        if let Err(e) =
            self.map
                .advise_range(Advice::PopulateWrite, first * CELL_LEN, cells * CELL_LEN)
        {
            tracing::debug!(error = %e, "prefaulting bucket pages failed");
        }
    }

    /// msync: makes the stores so far durable against power loss.
    pub(crate) fn flush(&self) -> std::io::Result<()> {
        self.map.flush()
    }
}

/// Starts writing `file`'s dirty pages back to the disk without waiting for them: a flush
/// does it for every changed file before its msyncs wait, so the disk is handed the whole
/// flush at once (see [`super::Storage::flush`]). Durability still takes the msync.
///
/// # Errors
/// The system call's error; a no-op returning `Ok` where the call does not exist.
pub(crate) fn start_writeback(file: &File) -> std::io::Result<()> {
    start_writeback_range(file, 0, 0)
}

/// [`start_writeback`] of the `len` bytes from `offset` only (`len` 0: to the file's end).
///
/// # Errors
/// As [`start_writeback`].
pub(crate) fn start_writeback_range(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
        };
        // SAFETY: a system call on a descriptor `file` keeps open for its duration, with
        // plain integer arguments; it touches no memory of this process.
        let rc = unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
    Ok(())
}

/// Asks the CPU to start loading `cell`'s cache line (a record's, or a histogram cell's
/// word). The write path calls it a few samples ahead, so the cache and TLB misses of
/// scattered buckets overlap instead of queueing.
#[inline(always)]
pub(crate) fn prefetch<T>(cell: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing architecturally; SSE, which the
    // instruction needs, is part of the x86_64 baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(cell as *const T as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = cell;
}
