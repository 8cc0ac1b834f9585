//! One period file: created whole under a temporary name, renamed into place, then mapped; or
//! opened and checked against what the tier expects. [`PeriodFile`] is the read side (every
//! mapping); [`WritableFile`], which only a writable mapping yields, is the only way to store
//! into one.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::compact::CompactFile;
use super::disk;
use super::format::{
    cell_index, CellLayout, PeriodMeta, HEADER_LEN, LATEST_SIZE, PAGE_LEN, RECORD_SIZE,
};
use super::histogram_cell::{self, CellBuffer};
use super::mapped_cell::{BucketCell, LastWords, Record, Stuck, Writers};
use super::mmap::MappedCells;
use super::writer_state::{Publication, Publisher, WriterSlot};
use crate::bucket::{Bucket, Last};
use crate::error::Error;
use crate::error::Result;
use crate::histogram::{Histogram, Observed};

/// A mapped period file of one tier and one chunk of series, as readers see it: loads only.
pub(crate) struct PeriodFile {
    path: PathBuf,
    meta: PeriodMeta,
    cells: MappedCells,
    /// Who may be updating the cells: this process's writer threads (the mapping is then
    /// writable) or another process. Asked when a read finds an update-in-flight bit.
    writers: Arc<Writers>,
    /// Set by writers when they store into the file, cleared by `flush`; limits msync to files
    /// that changed.
    dirty: AtomicBool,
    /// Batches that stored into the file, counted after their stores: compaction reads the
    /// cells between two equal readings, so a store it might have missed changes it.
    generation: AtomicU64,
    /// The generation maintenance saw at its last look (`u64::MAX` before the first), so a
    /// closed period is compacted only once a whole pass went by without writes.
    seen_generation: AtomicU64,
    /// Set when the period was compacted and this file is no longer the one to store into:
    /// writers drop it from their caches at their next batch.
    retired: AtomicBool,
    /// Set once a read of this file met an update-in-flight bit no live writer holds, so
    /// that is logged once per file, not per read.
    stale_logged: AtomicBool,
    /// The name of the file's first cell as writers publish it (`writers.state`): a cell's
    /// name is this with its record index added.
    name: Publication,
    /// One bit per page of the record area, set once its disk space is known reserved (see
    /// [`PeriodFile::reserve`]). The record area is sparse: a page gets its space when a
    /// slot of it is first written, so a file takes disk for the series and times it holds.
    /// At open, the pages the filesystem reports as data are set (so a restart prefaults the
    /// blocks being written as before); reserving a page that has its space again is a no-op.
    reserved: Box<[AtomicU64]>,
    /// The histogram area (see [`super::format`]), one cell per record; `None` in a file an
    /// older build made, opened read-only (a writable open extends the file first).
    histograms: Option<MappedCells>,
    /// One bit per page of the histogram area, as `reserved` for the records: only
    /// distribution series' pages get disk. At open, the pages the filesystem reports as
    /// data are set too: a page written before (a restart, a period made hot again) is then
    /// never written with zeros again, and compaction skips the cells of the others.
    histograms_reserved: Box<[AtomicU64]>,
    /// Where the latest area starts in the mapping (bytes), `None` in a file without one:
    /// worked out once, not at every store.
    latest_from: Option<usize>,
    /// Set for a file created in a group and not synced since ([`super::create`]): its
    /// header and length may not be on disk yet, so its next flush syncs the whole file,
    /// not only the mapped records.
    unsynced: AtomicBool,
}

/// A period file mapped writable: the one way to store into cells (`add`, and `repair` at
/// open). Only [`super::Storage`] makes one, and only of a file it mapped writable, so a
/// read-only engine has no value of this type to call them on; the writers cache it, so
/// their hot path checks nothing per sample.
///
/// What the types allow, checked by the compiler: a [`PeriodFile`] is read with
/// [`PeriodFile::load`] and hands out no cell to store into, and a `WritableFile` cannot be
/// made outside `storage` (its field and constructor are private to it). Outside the crate
/// nothing of `storage` is reachable at all.
#[derive(Clone)]
pub(crate) struct WritableFile(Arc<PeriodFile>);

/// What a distribution update adds to its bucket: values, or observations that arrived
/// bucketed.
#[derive(Clone, Copy)]
enum Addition<'a> {
    /// Values, in arrival order.
    Values(&'a [f64]),
    Observed(&'a Observed),
}

/// Added to a refusal for a changed period: the default periods changed (issue #13), and a
/// directory created with the old defaults, before directories stored their tiers, meets
/// exactly this. Directories created since keep their tiers in `tiers.toml` and never do.
const OLD_DEFAULT_PERIODS_HINT: &str = "; the default periods changed from 1d/7d/30d/365d to \
     6h/1d/10d/73d: a directory created with the old defaults, before directories stored \
     their tiers, needs them given once with --tiers (period = \"1d\", \"7d\", \"30d\", \
     \"365d\" for the tiers 1m, 5m, 1h, 1d); that open stores them in the directory's \
     tiers.toml, and later opens need no --tiers";

/// When a new file's contents reach the disk: synced before it is renamed into place, or
/// at its first flush (a file created in a group, [`super::create`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SyncAt {
    Creation,
    FirstFlush,
}

/// Whether a read takes each bucket's latest sample. A sum over many series does not, and
/// so never fetches the latest area, another cache line a bucket apart from the records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Latest {
    /// The latest sample as kept (unknown where the file keeps none).
    Read,
    /// Left unread: the bucket reads with its latest sample unknown.
    Skip,
}

/// Whether a reservation of record pages takes the pages of the latest area holding their
/// entries too. Only a store of a known latest sample needs them (see `LastWords::store`):
/// a distribution's samples and a delta counter's keep none, so the pages of runs only they
/// write stay holes, 16 bytes a bucket less.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LatestPages {
    /// The latest area's pages too: the stores keep a latest sample (a gauge's, a
    /// counter's, a restored bucket's that has one).
    Reserve,
    /// The records' pages only: the stores keep no latest sample (a distribution's, a delta
    /// counter's).
    Leave,
}

impl PeriodFile {
    /// Creates the file for `meta` in `dir`: header written, the record area sparse (its pages
    /// get disk space as they are first written, [`PeriodFile::reserve`]), synced, then
    /// renamed into place, so a crash leaves either no file or a complete one (plus a `.tmp`
    /// that the next open removes). On a filesystem without `fallocate` the whole length is
    /// written out instead, so no store can meet a hole; on tmpfs too, where even a read of
    /// a hole through the mapping takes a page, and raises SIGBUS when the filesystem is full.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when any step fails (ENOSPC included).
    pub(super) fn create(
        dir: &Path,
        meta: &PeriodMeta,
        writers: &Arc<Writers>,
    ) -> Result<PeriodFile> {
        Self::create_filled(dir, meta, writers, None)
    }

    /// [`PeriodFile::create`], with the cells of `source` (a compacted form of the same
    /// period) written into the file before it is renamed into place: a compacted period
    /// made hot again for a late sample. The file appears whole, holding every bucket the
    /// compacted one held, or not at all. Its cells are [`CellLayout::made_hot_again`],
    /// which hold every histogram a hot file held.
    ///
    /// # Errors
    /// As [`PeriodFile::create`], and the errors of reading `source`.
    pub(super) fn create_from(
        dir: &Path,
        meta: &PeriodMeta,
        writers: &Arc<Writers>,
        source: &CompactFile,
    ) -> Result<PeriodFile> {
        let meta = meta.with_cells(CellLayout::made_hot_again(meta.resolution));
        Self::create_filled(dir, &meta, writers, Some(source))
    }

    fn create_filled(
        dir: &Path,
        meta: &PeriodMeta,
        writers: &Arc<Writers>,
        source: Option<&CompactFile>,
    ) -> Result<PeriodFile> {
        let path = Self::write_temp(dir, meta, source, SyncAt::Creation)
            .and_then(|temp| Self::rename_into_place(dir, meta, &temp))?;
        disk::sync_dir(dir)?;
        Self::open(&path, meta, writers)
    }

    /// The first step of a creation: the file for `meta` written whole under its temporary
    /// name in `dir`, and synced unless `sync` leaves that to its first flush (see
    /// [`PeriodFile::create`], and [`super::create`] for files created in a group). Returns
    /// the temporary path; on failure nothing is left behind.
    ///
    /// # Errors
    /// As [`PeriodFile::create`].
    pub(super) fn write_temp(
        dir: &Path,
        meta: &PeriodMeta,
        source: Option<&CompactFile>,
        sync: SyncAt,
    ) -> Result<PathBuf> {
        let temp = disk::temp_path(&dir.join(meta.file_name()));
        if let Err(e) = Self::write_new(&temp, meta, source, sync) {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        Ok(temp)
    }

    /// The second step: a synced temporary file renamed to its real name. The entry is
    /// durable only once the caller has synced `dir`, which it must do before mapping the
    /// file for writes. Returns the real path; on failure the temporary file is removed.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(super) fn rename_into_place(dir: &Path, meta: &PeriodMeta, temp: &Path) -> Result<PathBuf> {
        let path = dir.join(meta.file_name());
        if let Err(e) = std::fs::rename(temp, &path) {
            let _ = std::fs::remove_file(temp);
            return Err(Error::io(&path, e));
        }
        Ok(path)
    }

    fn write_new(
        temp: &Path,
        meta: &PeriodMeta,
        source: Option<&CompactFile>,
        sync: SyncAt,
    ) -> Result<()> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(temp)
            .map_err(|e| Error::io(temp, e))?;
        file.write_all(&meta.encode())
            .map_err(|e| Error::io(temp, e))?;
        // The header's page answers whether the filesystem can reserve pages later.
        if disk::reserve_range(&file, temp, 0, HEADER_LEN as u64)? && !disk::is_tmpfs(&file) {
            file.set_len(meta.file_len_with_histograms())
                .map_err(|e| Error::io(temp, e))?;
        } else {
            // The histogram area stays a hole even here: its pages are written with zeros
            // before their first store instead (`reserve_histograms`), since only
            // distribution series use it.
            disk::reserve_space(&mut file, temp, meta.file_len())?;
            file.set_len(meta.file_len_with_histograms())
                .map_err(|e| Error::io(temp, e))?;
        }
        if let Some(source) = source {
            Self::write_cells(&file, temp, meta, source)?;
        }
        match sync {
            SyncAt::Creation => file.sync_all().map_err(|e| Error::io(temp, e)),
            SyncAt::FirstFlush => Ok(()),
        }
    }

    /// Writes every non-empty bucket of `source` into `file` at its record's place (its
    /// latest sample into the latest area), and every histogram into its cell, one 16-bucket
    /// run per write (a run's records are contiguous, and so are its latest entries and its
    /// cells, whole or interleaved).
    fn write_cells(
        file: &File,
        temp: &Path,
        meta: &PeriodMeta,
        source: &CompactFile,
    ) -> Result<()> {
        let block = super::format::BUCKET_BLOCK as usize;
        debug_assert!(meta.keeps_last());
        let mut run = vec![0u8; block * RECORD_SIZE];
        let mut latest_run = vec![0u8; block * LATEST_SIZE];
        let cell_len = meta.histogram_cell_len();
        let cell_words = cell_len / 8;
        let mut hist_run = vec![0u8; block * cell_len];
        let mut words = vec![0u64; cell_words];
        let mut failed = None;
        source.for_each_slot(&mut |slot, buckets, histograms| {
            if failed.is_some() {
                return;
            }
            for (first, chunk) in histograms.chunks(block).enumerate() {
                if chunk.iter().all(Option::is_none) {
                    continue;
                }
                hist_run.fill(0);
                for (b, histogram) in chunk.iter().enumerate() {
                    let Some(histogram) = histogram else {
                        continue;
                    };
                    // Its cells hold every histogram a hot file held, so it fits as it is.
                    if histogram_cell::encode(&mut histogram.clone(), &mut words).is_none() {
                        tracing::error!(path = %temp.display(), slot,
                            "a compacted histogram does not fit its cell; its bucket is \
                             made hot again without it");
                        continue;
                    }
                    for (j, word) in words.iter().enumerate() {
                        let at = match meta.histogram_cells.interleaved {
                            true => j * block + b,
                            false => b * cell_words + j,
                        };
                        hist_run[at * 8..at * 8 + 8].copy_from_slice(&word.to_le_bytes());
                    }
                }
                // The whole run: rows are whole blocks, so every run is in the area.
                let cell = cell_index((first * block) as u32, slot, meta.slots);
                let at = meta.histogram_offset() + (cell * cell_len) as u64;
                if let Err(e) = file.write_all_at(&hist_run, at) {
                    failed = Some(Error::io(temp, e));
                    return;
                }
            }
            for (first, chunk) in buckets.chunks(block).enumerate() {
                run.fill(0);
                latest_run.fill(0);
                let records = run.chunks_exact_mut(RECORD_SIZE);
                let entries = latest_run.chunks_exact_mut(LATEST_SIZE);
                for (b, ((record, entry), bucket)) in records.zip(entries).zip(chunk).enumerate() {
                    let start = meta.bucket_start((first * block + b) as u32);
                    let words = BucketCell::words_of(bucket);
                    let last = LastWords::words_of(bucket.last, start);
                    let bytes = record.chunks_exact_mut(8).chain(entry.chunks_exact_mut(8));
                    for (word, bytes) in words.iter().chain(&last).zip(bytes) {
                        bytes.copy_from_slice(&word.to_le_bytes());
                    }
                }
                let cell = cell_index((first * block) as u32, slot, meta.slots);
                let at = (HEADER_LEN + cell * RECORD_SIZE) as u64;
                let latest_at = meta.latest_offset(cell);
                // A run none of whose latest samples is known (a distribution's) writes no
                // entry: the area stays a hole there, as the batches that wrote it left it.
                let entries = &latest_run[..chunk.len() * LATEST_SIZE];
                let written = file
                    .write_all_at(&run[..chunk.len() * RECORD_SIZE], at)
                    .and_then(|()| match entries.iter().all(|&b| b == 0) {
                        true => Ok(()),
                        false => file.write_all_at(entries, latest_at),
                    });
                if let Err(e) = written {
                    failed = Some(Error::io(temp, e));
                    return;
                }
            }
        })?;
        failed.map_or(Ok(()), Err)
    }

    /// Opens an existing file and checks that its header matches `expected` exactly. It is
    /// mapped writable when `writers` are this process's writer threads.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file when its header is damaged, of another format
    /// version, truncated, or describes another tier, period or layout.
    pub(super) fn open(
        path: &Path,
        expected: &PeriodMeta,
        writers: &Arc<Writers>,
    ) -> Result<PeriodFile> {
        let writable = writers.in_process();
        let mut file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        let mut header = vec![0u8; HEADER_LEN];
        let mut read = 0;
        while read < HEADER_LEN {
            match file.read(&mut header[read..]) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(path, e)),
            }
        }
        let meta = PeriodMeta::decode(&header[..read], path)?;
        if !meta.same_place(expected) {
            return Err(Error::corrupt(
                path,
                format!(
                    "holds tier {:?} resolution {} period {} start {} chunk {} with {} slots; \
                     this data directory's configuration expects tier {:?} resolution {} period {} \
                     start {} chunk {} with {} slots (resolution, period and series_per_chunk \
                     cannot change for an existing tier){}",
                    meta.tier,
                    meta.resolution,
                    meta.period,
                    meta.period_start,
                    meta.chunk,
                    meta.slots,
                    expected.tier,
                    expected.resolution,
                    expected.period,
                    expected.period_start,
                    expected.chunk,
                    expected.slots,
                    if meta.period == expected.period {
                        ""
                    } else {
                        OLD_DEFAULT_PERIODS_HINT
                    }
                ),
            ));
        }
        if u32::try_from(meta.cells()).is_err() {
            return Err(Error::corrupt(
                path,
                format!("{} records is more than a file may hold", meta.cells()),
            ));
        }
        let cells = MappedCells::map(
            &file,
            path,
            HEADER_LEN as u64,
            (meta.file_len() as usize - HEADER_LEN) / RECORD_SIZE,
            writable,
        )?;
        let name = Publication::new(
            writers.tier_index(&meta.tier),
            meta.period_start,
            meta.chunk,
            0,
        );
        let reserved: Box<[AtomicU64]> = (0..meta.pages().div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        if writable {
            note_written_pages(&file, &reserved, HEADER_LEN as u64, meta.pages());
        }
        let histograms = Self::map_histograms(&file, path, &meta, writable)?;
        let histograms_reserved: Box<[AtomicU64]> = (0..meta.histogram_pages().div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        if writable {
            let (at, pages) = (meta.histogram_offset(), meta.histogram_pages());
            note_written_pages(&file, &histograms_reserved, at, pages);
        }
        let latest_from = (meta.keeps_last()).then(|| meta.latest_offset(0) as usize - HEADER_LEN);
        Ok(PeriodFile {
            path: path.to_path_buf(),
            meta,
            cells,
            writers: Arc::clone(writers),
            dirty: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            seen_generation: AtomicU64::new(u64::MAX),
            retired: AtomicBool::new(false),
            stale_logged: AtomicBool::new(false),
            name,
            reserved,
            histograms,
            histograms_reserved,
            latest_from,
            unsynced: AtomicBool::new(false),
        })
    }

    /// Maps the histogram area; a writable open first extends a file an older build made
    /// (the area is a hole until written, so this costs no disk). `None` for such a file
    /// opened read-only: it holds no histogram. A length that is neither is damage.
    fn map_histograms(
        file: &File,
        path: &Path,
        meta: &PeriodMeta,
        writable: bool,
    ) -> Result<Option<MappedCells>> {
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let want = meta.file_len_with_histograms();
        if len < want && len != meta.file_len() {
            return Err(Error::corrupt(
                path,
                format!(
                    "truncated: {len} bytes, expected {want} (or {}, records only, as an older \
                     build wrote it)",
                    meta.file_len()
                ),
            ));
        }
        if len < want {
            if !writable {
                return Ok(None);
            }
            file.set_len(want).map_err(|e| Error::io(path, e))?;
        }
        let cells = meta.cells() * meta.histogram_cell_len() / super::format::HISTOGRAM_UNIT;
        MappedCells::map(file, path, meta.histogram_offset(), cells, writable).map(Some)
    }

    /// Opens a file taking its header's word for the layout (only the header's own checks
    /// apply), writable: for repairing files of tiers the configuration no longer names.
    /// `None` when `writers` are another process's (the file is then not ours to repair).
    ///
    /// # Errors
    /// As [`PeriodFile::open`].
    pub(super) fn open_as_found(
        path: &Path,
        writers: &Arc<Writers>,
    ) -> Result<Option<WritableFile>> {
        let mut header = Vec::with_capacity(HEADER_LEN);
        File::open(path)
            .and_then(|f| f.take(HEADER_LEN as u64).read_to_end(&mut header))
            .map_err(|e| Error::io(path, e))?;
        let meta = PeriodMeta::decode(&header, path)?;
        let file = Self::open(path, &meta, writers)?;
        Ok(WritableFile::new(Arc::new(file)))
    }

    /// Where the file lives.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// What the header says.
    pub(crate) fn meta(&self) -> &PeriodMeta {
        &self.meta
    }

    /// The cell of `bucket` for series slot `slot`.
    ///
    /// # Panics
    /// When `bucket` or `slot` is outside the file (a caller bug: placements come from the
    /// lookup function and chunking, which never produce them).
    #[inline]
    fn cell(&self, bucket: u32, slot: u32) -> Record<'_> {
        self.cell_taking(bucket, slot, Latest::Read)
    }

    /// [`PeriodFile::cell`], with its latest entry only when `latest` reads it: a read that
    /// skips it does not even work out where it lies.
    #[inline(always)]
    fn cell_taking(&self, bucket: u32, slot: u32, latest: Latest) -> Record<'_> {
        debug_assert!(bucket < self.meta.buckets() && slot < self.meta.slots);
        let index = cell_index(bucket, slot, self.meta.slots);
        match latest {
            Latest::Read => self.record(index, bucket),
            Latest::Skip => self.cells.cells()[index].record(None, self.meta.bucket_start(bucket)),
        }
    }

    /// The record at `index`, which holds bucket `bucket` of its slot.
    #[inline(always)]
    fn record(&self, index: usize, bucket: u32) -> Record<'_> {
        let last = (self.latest_from).map(|from| &self.cells.latest_from(from)[index]);
        self.cells.cells()[index].record(last, self.meta.bucket_start(bucket))
    }

    /// The name writers publish for the cell at record `index` (below `u32::MAX`, checked at
    /// open).
    #[inline(always)]
    fn name(&self, index: usize) -> Publication {
        Publication {
            file: self.name.file,
            cell: self.name.cell | index as u64,
        }
    }

    /// The bucket `bucket` of series slot `slot`: a torn-free snapshot (the seqlock read of
    /// [`Record`]), returned at once when an update-in-flight bit is a crash's leftover.
    ///
    /// # Panics
    /// When `bucket` or `slot` is outside the file (a caller bug: placements come from the
    /// lookup function and chunking, which never produce them).
    #[inline]
    pub(crate) fn load(&self, bucket: u32, slot: u32) -> Bucket {
        self.load_taking(bucket, slot, Latest::Read)
    }

    /// [`PeriodFile::load`], taking the bucket's latest sample or not (then unknown).
    ///
    /// # Panics
    /// As [`PeriodFile::load`].
    #[inline(always)]
    pub(crate) fn load_taking(&self, bucket: u32, slot: u32, latest: Latest) -> Bucket {
        let cell = self.cell_taking(bucket, slot, latest);
        // The rare path returns the bucket, or `None` once the writer it waited on finished
        // its update, and then the cell is read again: like any seqlock read, this goes round
        // only while a live writer keeps updating this very cell.
        loop {
            if let Some(found) = cell.try_load() {
                return found;
            }
            if let Some(found) = self.load_waiting(bucket, slot) {
                return match latest {
                    Latest::Read => found,
                    Latest::Skip => Bucket {
                        last: None,
                        ..found
                    },
                };
            }
        }
    }

    /// The histogram cell at record `index`; `None` when the file has no histogram area.
    #[inline]
    fn histogram_cell(&self, index: usize) -> Option<histogram_cell::Cell<'_>> {
        let words = self.meta.histogram_cell_len() / 8;
        let area = self.histograms.as_ref()?.words();
        Some(if self.meta.histogram_cells.interleaved {
            let run = super::format::BUCKET_BLOCK as usize;
            let first = index - index % run;
            let run_words = &area[first * words..(first + run) * words];
            histogram_cell::Cell::interleaved(run_words, index % run, run)
        } else {
            histogram_cell::Cell::whole(&area[index * words..(index + 1) * words])
        })
    }

    /// The bucket `bucket` of series slot `slot` with its histogram, read as one snapshot:
    /// `f` gets the bucket and the histogram's encoding, for a caller that adds it straight
    /// into an [`crate::histogram::Accumulator`]. The encoding is `None` when the bucket
    /// has none (not a distribution series, or a file without the area), or when the cell is
    /// damaged (logged): the answer then says the histogram is missing rather than guess.
    #[inline]
    pub(crate) fn load_distribution_with<R>(
        &self,
        bucket: u32,
        slot: u32,
        f: impl FnOnce(Bucket, Option<&[u8]>) -> R,
    ) -> R {
        let mut buffer = CellBuffer::default();
        self.load_with_histogram(bucket, slot, &mut buffer, true, f)
    }

    /// [`PeriodFile::load_distribution_with`] for a read of a distribution series, copying
    /// the cell through `buffer` (a read of many cells passes the same one). Its bucket's
    /// latest sample reads as unknown, as a distribution's always is, so the read does not
    /// fetch it (see [`PeriodFile::prefetch_distribution`]).
    #[inline]
    pub(crate) fn load_distribution_into<R>(
        &self,
        bucket: u32,
        slot: u32,
        buffer: &mut CellBuffer,
        f: impl FnOnce(Bucket, Option<&[u8]>) -> R,
    ) -> R {
        self.load_with_histogram(bucket, slot, buffer, false, f)
    }

    /// The bucket with its histogram as one snapshot, its latest sample read when
    /// `with_last`.
    #[inline]
    fn load_with_histogram<R>(
        &self,
        bucket: u32,
        slot: u32,
        buffer: &mut CellBuffer,
        with_last: bool,
        f: impl FnOnce(Bucket, Option<&[u8]>) -> R,
    ) -> R {
        let index = cell_index(bucket, slot, self.meta.slots);
        let Some(hist) = self.histogram_cell(index) else {
            return f(self.load(bucket, slot), None);
        };
        let words = &mut buffer.words;
        let cell = match with_last {
            true => self.cell_taking(bucket, slot, Latest::Read),
            false => self.cell_taking(bucket, slot, Latest::Skip),
        };
        let mut used = 0;
        let mut read = || cell.read_with(|| used = hist.load_used(words));
        // A pause only after a failed try: it takes up to ~140 cycles on recent x86, as long
        // as the rest of a small cell's read.
        let found = match (0..64).find_map(|_| {
            let found = read();
            if found.is_none() {
                std::hint::spin_loop();
            }
            found
        }) {
            Some(found) => found,
            // The rare path: `load` waits out a live writer, or returns at once for a
            // crash's leftover, whose histogram is then taken as it stands.
            None => {
                let waited = self.load(bucket, slot);
                match read() {
                    Some(found) => found,
                    None => {
                        used = hist.load_used(words);
                        waited
                    }
                }
            }
        };
        match histogram_cell::body(&buffer.words[..used], &mut buffer.bytes) {
            Ok(body) => f(found, body),
            Err(e) => {
                tracing::error!(path = %self.path.display(), bucket, slot, error = %e,
                    "a histogram cell does not decode; its bucket is read without it");
                f(found, None)
            }
        }
    }

    /// The bucket `bucket` of series slot `slot` with its histogram, as
    /// [`PeriodFile::load_distribution_with`] reads them (one snapshot), for compaction: the
    /// histogram cell is read only where its page has disk (see `histograms_reserved`), so a
    /// file of gauges is compacted without touching its histogram area, which on tmpfs a read
    /// would allocate. A cell that does not decode is logged and left out, as a read leaves
    /// it out: its bucket then answers no quantile, hot or compacted.
    pub(crate) fn load_closed(&self, bucket: u32, slot: u32) -> (Bucket, Option<Histogram>) {
        let index = cell_index(bucket, slot, self.meta.slots);
        if self.writers.in_process() && !self.histogram_cell_reserved(index) {
            return (self.load(bucket, slot), None);
        }
        self.load_distribution_with(bucket, slot, |found, body| {
            let histogram = body.and_then(|body| match Histogram::decode(body) {
                Ok((histogram, used)) if used == body.len() => Some(histogram),
                Ok((_, used)) => {
                    tracing::error!(path = %self.path.display(), bucket, slot,
                        "a histogram cell holds {} bytes after its histogram; its bucket is \
                         compacted without it", body.len() - used);
                    None
                }
                Err(e) => {
                    tracing::error!(path = %self.path.display(), bucket, slot, error = %e,
                        "a histogram cell does not decode; its bucket is compacted without it");
                    None
                }
            });
            (found, histogram)
        })
    }

    /// Whether the histogram cell of record `index` may hold one: whether the page its run
    /// starts in has its disk space, as far as this process knows. A cell is stored only
    /// once every page of its run is reserved (`reserve_histograms`; a run may cross a
    /// page's end).
    fn histogram_cell_reserved(&self, index: usize) -> bool {
        let run_start = index - index % super::format::BUCKET_BLOCK as usize;
        self.histogram_page_reserved(run_start * self.meta.histogram_cell_len() / PAGE_LEN)
    }

    /// Whether page `page` of the histogram area has its disk space, as far as this process
    /// knows.
    fn histogram_page_reserved(&self, page: usize) -> bool {
        self.histograms_reserved
            .get(page / 64)
            .is_some_and(|word| word.load(Ordering::Acquire) & (1 << (page % 64)) != 0)
    }

    /// The rare path of [`PeriodFile::load`]: the cell stayed mid-update past the spins.
    /// `None` once the update finished (read it again).
    #[cold]
    #[inline(never)]
    fn load_waiting(&self, bucket: u32, slot: u32) -> Option<Bucket> {
        let index = cell_index(bucket, slot, self.meta.slots);
        self.record(index, bucket)
            .load_waiting(&self.writers, self.name(index), &|stuck| {
                self.note_stuck(stuck, bucket, slot)
            })
    }

    /// Logs a read that met an update-in-flight bit past its spins: once per file when no
    /// live writer held it, every time when one seemed to hold it for `STALE_AFTER`.
    #[cold]
    fn note_stuck(&self, stuck: Stuck, bucket: u32, slot: u32) {
        match stuck {
            Stuck::Stale => {
                if !self.stale_logged.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        path = %self.path.display(),
                        bucket,
                        slot,
                        "bucket left mid-update by a writer that is gone (a crash?); read \
                         without waiting, and healed by its next write (logged once per file)"
                    );
                }
            }
            Stuck::Damaged => tracing::error!(
                path = %self.path.display(),
                bucket,
                slot,
                "bucket stuck mid-update (damaged file?); reading it as it stands"
            ),
        }
    }

    /// Starts loading the cell of `bucket` for `slot`, and its latest entry when `latest`
    /// says it will be read, into the cache (a CPU prefetch hint).
    #[inline]
    pub(crate) fn prefetch(&self, bucket: u32, slot: u32, latest: Latest) {
        self.cell_taking(bucket, slot, latest).prefetch();
    }

    /// [`PeriodFile::prefetch`] for a distribution read: the record (for an even bucket: two
    /// records share a cache line; not its latest entry, which the read leaves unread) and
    /// the start of its histogram cell, which lies in another part of the file (about a page
    /// per slot and block: a TLB miss as well as a cache miss). Interleaved cells (see [`CellLayout`]) keep the first two words of 8
    /// buckets' cells in two cache lines, fetched once for the 8; a whole cell's start is
    /// a line of its own.
    #[inline]
    pub(crate) fn prefetch_distribution(&self, bucket: u32, slot: u32) {
        if bucket.is_multiple_of(2) {
            self.cell_taking(bucket, slot, Latest::Skip).prefetch();
        }
        let Some(hist) = self.histogram_cell(cell_index(bucket, slot, self.meta.slots)) else {
            return;
        };
        if !self.meta.histogram_cells.interleaved {
            super::mmap::prefetch(hist.word(0));
        } else if bucket.is_multiple_of(8) {
            super::mmap::prefetch(hist.word(0));
            super::mmap::prefetch(hist.word(1));
        }
    }

    /// Faults in the pages of the block of buckets holding `bucket` that the writers will
    /// touch next: those of the slots with a reserved page in the block of `like` holding
    /// `like_bucket` (the block being written now, in this file or the previous period's of
    /// the same chunk; `self` and `bucket` themselves for the current block). Their space is
    /// reserved first, so the slots written now have their next block's disk before it
    /// starts, and the pages of slots never written stay holes (see [`super::format`] for
    /// the layout).
    ///
    /// # Errors
    /// As [`PeriodFile::reserve`]; nothing is faulted in then.
    pub(crate) fn prefault_block(
        &self,
        bucket: u32,
        like: &PeriodFile,
        like_bucket: u32,
    ) -> Result<()> {
        if !self.writers.in_process()
            || bucket >= self.meta.buckets()
            || like_bucket >= like.meta.buckets()
            || like.meta.slots != self.meta.slots
        {
            return Ok(());
        }
        let per_block = self.meta.pages_per_block();
        let block = (bucket / super::format::BUCKET_BLOCK) as usize * per_block;
        let like_block = (like_bucket / super::format::BUCKET_BLOCK) as usize * per_block;
        let like_runs = |first: usize, like_first: usize, n: usize| {
            page_runs((0..n).filter(|k| like.is_reserved(like_first + k)))
                .into_iter()
                .map(move |(k, m)| (first + k, m))
        };
        let mut runs: Vec<(usize, usize)> = like_runs(block, like_block, per_block).collect();
        // Its pages of the latest area where `like`'s are reserved: a page of records that
        // only distributions wrote has none beside it, and its next block gets none either.
        // From a file without the area (version 1 or 2), beside every record page reserved.
        let latest = self.meta.latest_pages_of(block, per_block);
        match (latest, like.meta.latest_pages_of(like_block, per_block)) {
            (Some((first, n)), Some((like_first, _))) => {
                runs.extend(like_runs(first, like_first, n));
            }
            (Some(_), None) => {
                let records = runs.clone();
                runs.extend(self.latest_runs(&records, LatestPages::Reserve));
            }
            (None, _) => {}
        }
        self.reserve_pages(&runs)?;
        for &(first, n) in &runs {
            // In the mapping's 32-byte cells.
            let per_page = PAGE_LEN / RECORD_SIZE;
            self.cells.populate(first * per_page, n * per_page);
        }
        Ok(())
    }

    /// Whether page `page` of the record area has its disk space reserved, as far as this
    /// process knows.
    #[inline]
    pub(crate) fn is_reserved(&self, page: usize) -> bool {
        self.reserved
            .get(page / 64)
            .is_some_and(|word| word.load(Ordering::Acquire) & (1 << (page % 64)) != 0)
    }

    /// Reserves disk for the pages `first..first + n` of the records, and with
    /// [`LatestPages::Reserve`] the pages of the latest area holding their entries, that are
    /// not known reserved yet (`fallocate`), before anything is stored into them through the
    /// mapping: a store into a hole on a full disk would raise SIGBUS, where this returns
    /// ENOSPC and the samples bound for those pages are refused. Two callers may reserve one
    /// page at once; the second call is a no-op.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file (ENOSPC included); the pages stay unreserved, and a later
    /// call tries again.
    pub(crate) fn reserve(&self, first: usize, n: usize, latest: LatestPages) -> Result<()> {
        self.reserve_runs(&[(first, n)], latest).map(|_| ())
    }

    /// Whether every page of `first..first + n` is reserved ([`PeriodFile::is_reserved`]),
    /// a word of the bitset at a time: what a batch finds for all but the first stores into
    /// a block.
    fn all_reserved(&self, first: usize, n: usize) -> bool {
        let end = first + n;
        let mut page = first;
        while page < end {
            let (word, low) = (page / 64, page % 64);
            let high = (end - word * 64).min(64);
            let mask = (u64::MAX >> (64 - (high - low))) << low;
            match self.reserved.get(word) {
                Some(bits) if bits.load(Ordering::Acquire) & mask == mask => {}
                _ => return false,
            }
            page = (word + 1) * 64;
        }
        true
    }

    /// The pages of the latest area holding the entries of the records of the runs of
    /// record pages `(first, n)`, when `latest` asks for them (none in a file without the
    /// area).
    fn latest_runs<'a>(
        &'a self,
        runs: &'a [(usize, usize)],
        latest: LatestPages,
    ) -> impl Iterator<Item = (usize, usize)> + 'a {
        (runs.iter())
            .filter(move |_| latest == LatestPages::Reserve)
            .filter_map(|&(first, n)| self.meta.latest_pages_of(first, n))
    }

    /// Whether every page of the runs `(first, n)` is reserved, and with
    /// [`LatestPages::Reserve`] the pages of the latest area holding their entries.
    fn runs_reserved(&self, runs: &[(usize, usize)], latest: LatestPages) -> bool {
        (runs.iter().copied())
            .chain(self.latest_runs(runs, latest))
            .all(|(first, n)| self.all_reserved(first, n))
    }

    /// [`PeriodFile::reserve`] of several runs of record pages `(first, n)`. Returns whether
    /// some page was not known reserved before.
    fn reserve_runs(&self, runs: &[(usize, usize)], latest: LatestPages) -> Result<bool> {
        if self.runs_reserved(runs, latest) {
            return Ok(false);
        }
        let pages: Vec<(usize, usize)> = (runs.iter().copied())
            .chain(self.latest_runs(runs, latest))
            .collect();
        self.reserve_pages(&pages)
    }

    /// Reserves the runs of pages `(first, n)`, counted from the header's end (records and
    /// latest area alike), that are not known reserved yet. Returns whether some was not.
    fn reserve_pages(&self, runs: &[(usize, usize)]) -> Result<bool> {
        let missing: Vec<(usize, usize)> = (runs.iter().copied())
            .flat_map(|(first, n)| page_runs((first..first + n).filter(|&p| !self.is_reserved(p))))
            .collect();
        if missing.is_empty() {
            return Ok(false);
        }
        let pages = self.meta.pages();
        if missing.iter().any(|&(first, n)| first + n > pages) {
            return Err(Error::io(
                &self.path,
                std::io::Error::other("page outside the file"),
            ));
        }
        let file = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(|e| Error::io(&self.path, e))?;
        for (first, n) in missing {
            let at = (HEADER_LEN + first * PAGE_LEN) as u64;
            if !disk::reserve_range(&file, &self.path, at, (n * PAGE_LEN) as u64)? {
                return self.reserved_whole(&file).map(|()| true);
            }
            for page in first..first + n {
                self.reserved[page / 64].fetch_or(1 << (page % 64), Ordering::AcqRel);
            }
            // Faulted in writable now, in one call: a writer's first touch of a fresh page
            // is a load (the record's sequence word), then a store, so left to the writers
            // each such page took two faults, a read and a write (at 100k new series they
            // spent more than half their time in them).
            let per_page = PAGE_LEN / RECORD_SIZE;
            self.cells.populate(first * per_page, n * per_page);
        }
        Ok(true)
    }

    /// Starts writing back the pages of the blocks before the one holding `bucket`, their
    /// records and their latest entries, without waiting (see
    /// [`super::mmap::start_writeback_range`]). A batch that reserves a block's pages for the
    /// first time and writes nothing before that block calls it: an import of history, or of
    /// new series, has finished the blocks before, so their pages go to the disk while the
    /// import goes on, not all at its close (a page stored into again is written again). The
    /// flush still makes them durable.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when it cannot be opened or the call fails.
    pub(crate) fn start_writeback_before(&self, bucket: u32) -> Result<()> {
        let block = bucket / super::format::BUCKET_BLOCK * super::format::BUCKET_BLOCK;
        let pages = self.meta.page_of(cell_index(block, 0, self.meta.slots));
        if pages == 0 {
            return Ok(());
        }
        let file = File::open(&self.path).map_err(|e| Error::io(&self.path, e))?;
        for (first, n) in std::iter::once((0, pages)).chain(self.meta.latest_pages_of(0, pages)) {
            let at = (HEADER_LEN + first * PAGE_LEN) as u64;
            super::mmap::start_writeback_range(&file, at, (n * PAGE_LEN) as u64)
                .map_err(|e| Error::io(&self.path, e))?;
        }
        Ok(())
    }

    /// On a filesystem without `fallocate`: the file was written out whole at creation (an
    /// older build preallocated it whole too), so every page has its space; a sparse file
    /// there is refused, since a store into its holes could fault.
    #[cold]
    fn reserved_whole(&self, file: &File) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let allocated = file
            .metadata()
            .map_err(|e| Error::io(&self.path, e))?
            .blocks()
            * 512;
        if allocated < self.meta.file_len() {
            return Err(Error::io(
                &self.path,
                std::io::Error::other(
                    "the filesystem cannot reserve space (no fallocate) and the file is sparse",
                ),
            ));
        }
        for word in self.reserved.iter() {
            word.store(u64::MAX, Ordering::Release);
        }
        Ok(())
    }

    /// Marks the file as not synced since its creation ([`PeriodFile::is_unsynced`]).
    pub(super) fn set_unsynced(&self) {
        self.unsynced.store(true, Ordering::Release);
    }

    /// True for a file created in a group that no flush has synced yet.
    pub(crate) fn is_unsynced(&self) -> bool {
        self.unsynced.load(Ordering::Acquire)
    }

    /// msync when stores happened since the last flush; an fsync of the whole file (header,
    /// length and every page, the mapped ones with them) when it was not synced since its
    /// creation.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when msync or fsync fails.
    pub(crate) fn flush(&self) -> Result<()> {
        if self.unsynced.load(Ordering::Acquire) {
            self.dirty.store(false, Ordering::Release);
            let synced = File::open(&self.path).and_then(|file| file.sync_all());
            if let Err(e) = synced {
                self.dirty.store(true, Ordering::Relaxed);
                return Err(Error::io(&self.path, e));
            }
            self.unsynced.store(false, Ordering::Release);
            return Ok(());
        }
        if self.dirty.swap(false, Ordering::AcqRel) {
            // The histograms too, once any page of them has disk (a distribution's cells are
            // written in both areas); a file of gauges costs no second msync.
            let histograms = self.histograms.as_ref().filter(|_| {
                self.histograms_reserved
                    .iter()
                    .any(|w| w.load(Ordering::Acquire) != 0)
            });
            let flushed = self
                .cells
                .flush()
                .and_then(|()| histograms.map_or(Ok(()), MappedCells::flush));
            if let Err(e) = flushed {
                self.dirty.store(true, Ordering::Relaxed);
                return Err(Error::io(&self.path, e));
            }
        }
        Ok(())
    }

    /// Starts writing the file's changed pages back without waiting (see
    /// [`super::mmap::start_writeback`]); the msync of [`PeriodFile::flush`] still makes
    /// them durable.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when it cannot be opened or the call fails.
    pub(crate) fn start_writeback(&self) -> Result<()> {
        File::open(&self.path)
            .and_then(|file| super::mmap::start_writeback(&file))
            .map_err(|e| Error::io(&self.path, e))
    }

    /// True when stores happened since the last flush.
    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Bytes the file takes on disk: its allocated blocks (the record area is sparse), or
    /// its length when they cannot be read.
    pub(crate) fn disk_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.path).map_or(self.meta.file_len(), |m| m.blocks() * 512)
    }

    /// Batches that stored into the file so far (see the field).
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// True when no batch stored into the file since the previous call (false on the first):
    /// maintenance's test that a closed period has gone quiet.
    pub(super) fn quiet_since_last_look(&self) -> bool {
        let now = self.generation();
        self.seen_generation.swap(now, Ordering::Relaxed) == now
    }

    /// Marks the file as replaced by its compacted form (see the field).
    pub(super) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// True once the file was replaced by its compacted form: stores into it would be lost.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
}

impl WritableFile {
    /// `file` as a writable file, when its mapping is writable.
    pub(super) fn new(file: Arc<PeriodFile>) -> Option<WritableFile> {
        file.writers.in_process().then_some(WritableFile(file))
    }

    /// The file, for reads.
    pub(crate) fn file(&self) -> &Arc<PeriodFile> {
        &self.0
    }

    /// Folds `value` into the bucket `bucket` of series slot `slot`, as the writer thread
    /// publishing through `writer` (the only writer of that slot); `last` is the sample as
    /// the bucket's latest sample would keep it (its time within the bucket, and its value,
    /// a counter's raw one), kept when the file keeps it and it is the latest.
    ///
    /// # Panics
    /// As [`PeriodFile::load`]: when `bucket` or `slot` is outside the file.
    #[inline]
    pub(crate) fn add(
        &self,
        bucket: u32,
        slot: u32,
        value: f64,
        last: Option<Last>,
        writer: Publisher<'_>,
    ) {
        let file = &*self.0;
        debug_assert!(bucket < file.meta.buckets() && slot < file.meta.slots);
        let index = cell_index(bucket, slot, file.meta.slots);
        // An unknown latest sample is not stored over a pristine entry (`LastWords::store`):
        // only a known one needs the latest area's page (see `LatestPages`).
        debug_assert!(
            file.is_reserved(file.meta.page_of(index))
                && (file.meta.latest_pages_of(file.meta.page_of(index), 1))
                    .is_none_or(|(page, _)| last.is_none() || file.is_reserved(page)),
            "a store into a page whose space was not reserved: {}",
            file.path.display()
        );
        debug_assert!(
            last.is_none_or(
                |last| (0..file.meta.resolution.secs() as crate::time::Timestamp)
                    .contains(&(last.ts() - file.meta.bucket_start(bucket)))
            ),
            "a sample's time outside its bucket"
        );
        file.record(index, bucket)
            .add(value, last, writer, file.name(index));
    }

    /// [`WritableFile::add`] after reserving the cell's page, as a batch would, of a sample
    /// whose time is not given (the latest sample stays unknown): for tests that store into
    /// a file directly.
    #[cfg(test)]
    pub(crate) fn reserve_and_add(
        &self,
        bucket: u32,
        slot: u32,
        value: f64,
        writer: Publisher<'_>,
    ) {
        self.reserve_slots(bucket, slot, 1, LatestPages::Reserve)
            .unwrap();
        self.add(bucket, slot, value, None, writer);
    }

    /// As [`WritableFile::add`], but the process is killed (SIGKILL, as `kill -9`) halfway
    /// through the update: the crash tests' fault hook (see the writer's
    /// `crate::fault::Hook::KillMidUpdate`).
    #[cold]
    pub(crate) fn add_and_die(
        &self,
        bucket: u32,
        slot: u32,
        value: f64,
        writer: Publisher<'_>,
    ) -> ! {
        let file = &*self.0;
        let index = cell_index(bucket, slot, file.meta.slots);
        file.record(index, bucket)
            .add_and_die(value, writer, file.name(index))
    }

    /// Sets a cell to `before`, its page's space reserved first: the counter journal's undo,
    /// the cluster's rewind, imported rollups and a deletion. A cell set to all zero bits
    /// (no sample) loses its histogram too, first, so a crash between the two leaves the
    /// record to be emptied again. Only valid while no writer stores into it.
    ///
    /// # Errors
    /// As [`PeriodFile::reserve`]; the cell is left as it was.
    pub(crate) fn restore(&self, bucket: u32, slot: u32, before: &Bucket) -> Result<()> {
        let index = cell_index(bucket, slot, self.0.meta.slots);
        // Only a known latest sample is stored into an entry that holds none (see
        // `LastWords::store`): a distribution's cell, restored, takes no page of the area.
        let latest = match before.last {
            Some(_) => LatestPages::Reserve,
            None => LatestPages::Leave,
        };
        self.0.reserve(self.0.meta.page_of(index), 1, latest)?;
        if super::cells::same_bits(before, &Bucket::EMPTY) && self.0.histogram_cell_reserved(index)
        {
            self.clear_histograms(index);
        }
        self.0.cell(bucket, slot).restore(before);
        Ok(())
    }

    /// Whether the pages that slots `first_slot..first_slot + slots` use in the block holding
    /// `bucket` are reserved, as far as this process knows ([`WritableFile::reserve_slots`]
    /// would do nothing).
    pub(crate) fn slots_reserved(
        &self,
        bucket: u32,
        first_slot: u32,
        slots: u32,
        latest: LatestPages,
    ) -> bool {
        let file = &*self.0;
        let page = |slot| file.meta.page_of(cell_index(bucket, slot, file.meta.slots));
        let first = page(first_slot);
        file.runs_reserved(&[(first, page(first_slot + slots - 1) + 1 - first)], latest)
    }

    /// Reserves the disk of the pages that slots `first_slot..first_slot + slots` use in the
    /// block holding `bucket`, their records' and, with [`LatestPages::Reserve`], the latest
    /// area's (see [`PeriodFile::reserve`]): what a batch does before its writers store into
    /// them. Returns whether some of them was not reserved before.
    ///
    /// # Errors
    /// As [`PeriodFile::reserve`].
    pub(crate) fn reserve_slots(
        &self,
        bucket: u32,
        first_slot: u32,
        slots: u32,
        latest: LatestPages,
    ) -> Result<bool> {
        let file = &*self.0;
        let page = |slot| file.meta.page_of(cell_index(bucket, slot, file.meta.slots));
        let first = page(first_slot);
        file.reserve_runs(&[(first, page(first_slot + slots - 1) + 1 - first)], latest)
    }

    /// Reserves the disk of the histogram cells of slots `first_slot..first_slot + slots` in
    /// the block holding `bucket`: what a batch does before its writers store a distribution
    /// sample there (see [`PeriodFile::reserve`]). Where the filesystem cannot reserve
    /// (`fallocate`), the pages are written with zeros instead, which allocates them.
    ///
    /// # Errors
    /// As [`PeriodFile::reserve`]; [`Error::Io`] when the file has no histogram area.
    pub(crate) fn reserve_histograms(
        &self,
        bucket: u32,
        first_slot: u32,
        slots: u32,
    ) -> Result<()> {
        let file = &*self.0;
        if file.histograms.is_none() {
            return Err(Error::io(
                &file.path,
                std::io::Error::other("no histogram area"),
            ));
        }
        // Whole runs: an interleaved cell's words lie all over its run's bytes.
        let cell = file.meta.histogram_cell_len();
        let run_start = bucket - bucket % super::format::BUCKET_BLOCK;
        let first = cell_index(run_start, first_slot, file.meta.slots) * cell / PAGE_LEN;
        let last = cell_index(run_start, first_slot + slots - 1, file.meta.slots)
            + super::format::BUCKET_BLOCK as usize;
        let last = last * cell;
        let pages: Vec<usize> = (first..last.div_ceil(PAGE_LEN))
            .filter(|&p| !file.histogram_page_reserved(p))
            .collect();
        if pages.is_empty() {
            return Ok(());
        }
        let handle = OpenOptions::new()
            .write(true)
            .open(&file.path)
            .map_err(|e| Error::io(&file.path, e))?;
        for (first, n) in page_runs(pages.into_iter()) {
            let at = file.meta.histogram_offset() + (first * PAGE_LEN) as u64;
            let len = (n * PAGE_LEN) as u64;
            if !disk::reserve_range(&handle, &file.path, at, len)? {
                handle
                    .write_all_at(&vec![0u8; len as usize], at)
                    .map_err(|e| Error::io(&file.path, e))?;
            }
            for page in first..first + n {
                file.histograms_reserved[page / 64].fetch_or(1 << (page % 64), Ordering::AcqRel);
            }
        }
        Ok(())
    }

    /// Records `values` (in arrival order) in the distribution bucket `bucket` of slot
    /// `slot`: its record as [`WritableFile::add`] does each and its histogram, as one
    /// update under the record's
    /// update-in-flight bit, with the histogram as it was held in `writer`'s image first, so
    /// the repair after a crash mid-update puts it back. Returns false, storing nothing,
    /// when the histogram cannot hold the value even at the coarsest scale, or the file has
    /// no histogram area.
    pub(crate) fn add_distribution(
        &self,
        bucket: u32,
        slot: u32,
        values: &[f64],
        writer: &WriterSlot,
    ) -> bool {
        self.distribution_update(bucket, slot, Addition::Values(values), writer, false)
    }

    /// As [`WritableFile::add_distribution`] for observations that arrived bucketed: the
    /// record takes their count, sum and extremes ([`Observed::extremes`]), the histogram
    /// merges theirs.
    pub(crate) fn add_observed(
        &self,
        bucket: u32,
        slot: u32,
        observed: &Observed,
        writer: &WriterSlot,
    ) -> bool {
        self.distribution_update(bucket, slot, Addition::Observed(observed), writer, false)
    }

    /// As [`WritableFile::add_distribution`], but the process is killed (SIGKILL) halfway
    /// through storing the new histogram: the crash tests' fault hook.
    #[cold]
    pub(crate) fn add_distribution_and_die(
        &self,
        bucket: u32,
        slot: u32,
        value: f64,
        writer: &WriterSlot,
    ) {
        let values = [value];
        self.distribution_update(bucket, slot, Addition::Values(&values), writer, true);
    }

    fn distribution_update(
        &self,
        bucket: u32,
        slot: u32,
        addition: Addition<'_>,
        writer: &WriterSlot,
        die: bool,
    ) -> bool {
        let file = &*self.0;
        let index = cell_index(bucket, slot, file.meta.slots);
        // Its page of records; the latest area's page is not needed (see
        // `LatestPages::Leave`).
        debug_assert!(
            file.is_reserved(file.meta.page_of(index)),
            "a store into a page whose space was not reserved: {}",
            file.path.display()
        );
        let Some(hist) = file.histogram_cell(index) else {
            return false;
        };
        // Only the words in use are read, held as the image and stored: the rest of a cell
        // is zeros, and an interleaved cell's every word is a cache line of its own.
        let mut before = [0u64; histogram_cell::MAX_WORDS];
        let before = &mut before[..hist.len()];
        let used_before = hist.load_used(before);
        let mut histogram = match histogram_cell::decode(before) {
            Ok(found) => found.unwrap_or_default(),
            Err(e) => {
                tracing::error!(path = %file.path.display(), bucket, slot, error = %e,
                    "a histogram cell does not decode; the sample is not stored");
                return false;
            }
        };
        let (count, delta) = match addition {
            Addition::Values(values) => {
                values.iter().for_each(|&v| histogram.record(v));
                (values.len() as u64, None)
            }
            Addition::Observed(observed) => {
                histogram.merge(&observed.histogram);
                histogram.limit(crate::histogram::MAX_POPULATED);
                let (min, max) = observed.extremes().unwrap_or((0.0, 0.0));
                let count = observed.histogram.count();
                let total = observed.sum;
                (
                    count,
                    Some(Bucket {
                        count,
                        total,
                        min,
                        max,
                        last: None,
                    }),
                )
            }
        };
        if count == 0 {
            return true;
        }
        let mut after = [0u64; histogram_cell::MAX_WORDS];
        let after = &mut after[..hist.len()];
        if histogram_cell::encode(&mut histogram, after).is_none() {
            tracing::error!(path = %file.path.display(), bucket, slot, count,
                "a histogram cell cannot hold the observations even at the coarsest scale; \
                 they are not stored");
            return false;
        }
        let used_after = histogram_cell::used_words(after);
        let name = file.name(index);
        writer.hold_image(name, &before[..used_before]);
        let cell = file.record(index, bucket);
        if die {
            let half = after.len() / 2;
            let first = match addition {
                Addition::Values(values) => values[0],
                Addition::Observed(observed) => observed.sum,
            };
            cell.add_with_and_die(first, writer.publisher(), name, || {
                hist.store(&after[..half])
            });
        }
        // Values add one by one, in arrival order, as a gauge's do: the same total.
        let fold = |bucket: &mut Bucket| match addition {
            Addition::Values(values) => values.iter().for_each(|&v| bucket.add(v)),
            Addition::Observed(_) => delta.iter().for_each(|delta| bucket.merge(delta)),
        };
        cell.update_with(fold, writer.publisher(), name, || {
            hist.store(&after[..used_after.max(used_before)])
        });
        true
    }

    /// Puts back the histogram image `words` of the cell at record `index`, its words in use
    /// (the rest of the cell was zeros): the repair of an update a crash interrupted (its
    /// record's bit was set). Only valid before any writer starts.
    pub(crate) fn restore_histogram(&self, index: u32, words: &[u64]) {
        if let Some(hist) = self.0.histogram_cell(index as usize) {
            if words.len() <= hist.len() {
                hist.store(words);
                hist.store_zeros_from(words.len());
            }
        }
    }

    /// Sets the histogram of bucket `bucket` of slot `slot` to `histogram` (`None`: none),
    /// encoded as a writer encodes it: an undo's put-back of a distribution cell, beside
    /// [`WritableFile::restore`] of its record. Only valid while no writer stores into it.
    ///
    /// # Errors
    /// As [`WritableFile::reserve_histograms`]; [`Error::InvalidQuery`] when the histogram
    /// does not fit the cell at the coarsest scale (it came from a cell of this size, so it
    /// fits unless the file is not the one it came from). The cell is left as it was.
    pub(crate) fn restore_histogram_of(
        &self,
        bucket: u32,
        slot: u32,
        histogram: Option<&Histogram>,
    ) -> Result<()> {
        let index = cell_index(bucket, slot, self.0.meta.slots);
        let Some(histogram) = histogram else {
            if self.0.histogram_cell_reserved(index) {
                self.clear_histograms(index);
            }
            return Ok(());
        };
        self.reserve_histograms(bucket, slot, 1)?;
        let Some(cell) = self.0.histogram_cell(index) else {
            return Ok(());
        };
        let mut words = vec![0u64; cell.len()];
        if histogram_cell::encode(&mut histogram.clone(), &mut words).is_none() {
            return Err(Error::InvalidQuery(format!(
                "{}: a histogram of {} observations does not fit the cell of bucket {bucket} \
                 of slot {slot}",
                self.0.path.display(),
                histogram.count()
            )));
        }
        cell.store(&words);
        Ok(())
    }

    /// Zeroes the histogram cell of record `index` when any word is set; returns whether one
    /// was. Only valid before any writer starts.
    fn clear_histograms(&self, index: usize) -> bool {
        let Some(hist) = self.0.histogram_cell(index) else {
            return false;
        };
        if (0..hist.len()).all(|j| hist.word(j).load(Ordering::Relaxed) == 0) {
            return false;
        }
        hist.store(&vec![0u64; hist.len()]);
        true
    }

    /// Notes that stores happened. Writers call it after their stores, once per batch.
    pub(crate) fn mark_dirty(&self) {
        self.0.dirty.store(true, Ordering::Release);
        self.0.generation.fetch_add(1, Ordering::Release);
    }

    /// Repairs the cell at record `index` if a crash left it mid-update (see
    /// [`Record`]); `None` when the file has no such record. Only valid before any
    /// writer starts.
    pub(crate) fn repair_cell(&self, index: u32) -> Option<bool> {
        let index = index as usize;
        (index < self.0.meta.cells())
            .then(|| self.0.record(index, self.0.meta.bucket_of(index)).repair())
    }

    /// Clears the cells of slots whose series id is `known_series` or past it (see
    /// [`WritableFile::repair`]), reading only those slots' runs; returns (cells cleared,
    /// cells read). Only valid before any writer starts.
    pub(crate) fn clear_unknown(&self, known_series: usize) -> (usize, usize) {
        let first_unknown = self.first_unknown(known_series);
        let slots = self.0.meta.slots as usize;
        let block = super::format::BUCKET_BLOCK as usize;
        let (mut cleared, mut read) = (0, 0);
        // Per block of buckets, the runs of the unknown slots are one contiguous range.
        for b in 0..self.0.meta.cells() / (slots * block) {
            for index in b * slots * block + first_unknown * block..(b + 1) * slots * block {
                let cell = self.0.record(index, self.0.meta.bucket_of(index));
                read += 1;
                if !cell.is_pristine() {
                    cell.clear();
                    cleared += 1;
                }
                // A histogram of an unknown slot goes too (its pages are holes but for a
                // distribution series' id, so reading them costs no disk).
                self.clear_histograms(index);
            }
        }
        (cleared, read)
    }

    /// The first slot of this file whose series id is not below `known_series`.
    fn first_unknown(&self, known_series: usize) -> usize {
        let slots = self.0.meta.slots as usize;
        let first_slot = self.0.meta.chunk as usize * slots;
        known_series.saturating_sub(first_slot).min(slots)
    }

    /// msync of the repairs, so they reach the disk before the publications naming them are
    /// forgotten.
    ///
    /// # Errors
    /// As [`PeriodFile::flush`].
    pub(crate) fn flush_repairs(&self) -> Result<()> {
        self.mark_dirty();
        self.0.flush()
    }

    /// Repairs what a crash can leave behind, reading every cell (the fallback when
    /// `writers.state` cannot say which cells were being written); returns (cells with an
    /// interrupted update, cells cleared because their series id is unknown). Only valid
    /// before any writer starts.
    ///
    /// After a power loss the kernel may have written a mapped page whose series was never
    /// fsynced into the registry; such a slot would otherwise greet the next series given
    /// that id with somebody else's data. `known_series` is the registry's length.
    pub(crate) fn repair(&self, known_series: usize) -> (usize, usize) {
        let first_unknown = self.first_unknown(known_series) as u32;
        let (mut interrupted, mut cleared) = (0, 0);
        for bucket in 0..self.0.meta.buckets() {
            for slot in 0..self.0.meta.slots {
                let cell = self.0.cell(bucket, slot);
                if cell.repair() {
                    interrupted += 1;
                }
                if slot >= first_unknown {
                    self.clear_histograms(cell_index(bucket, slot, self.0.meta.slots));
                    if !cell.is_pristine() {
                        cell.clear();
                        cleared += 1;
                    }
                }
            }
        }
        (interrupted, cleared)
    }
}

/// Runs of consecutive page numbers in `pages` (ascending), as (first, count).
fn page_runs(pages: impl Iterator<Item = usize>) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for page in pages {
        match runs.last_mut() {
            Some((first, n)) if *first + *n == page => *n += 1,
            _ => runs.push((page, 1)),
        }
    }
    runs
}

/// Sets the bits of `reserved` for the pages of the record area that `file` holds as data
/// (`SEEK_DATA`/`SEEK_HOLE`): their blocks exist, so stores into them need no reservation,
/// and maintenance prefaults them after a restart. Best effort: a page not reported (a hole,
/// an extent reserved but never written, a filesystem without the seeks) is reserved again
/// before its first store, which is a no-op where it has its blocks.
fn note_written_pages(file: &File, reserved: &[AtomicU64], start: u64, pages: usize) {
    use rustix::fs::{seek, SeekFrom};
    let end = start + (pages * PAGE_LEN) as u64;
    let mut at = start;
    while at < end {
        let Ok(data) = seek(file, SeekFrom::Data(at)) else {
            return;
        };
        let hole = seek(file, SeekFrom::Hole(data)).unwrap_or(end).min(end);
        if data >= end || hole <= data {
            return;
        }
        // Pages wholly inside the data.
        let first = (data - start).div_ceil(PAGE_LEN as u64) as usize;
        let last = ((hole - start) / PAGE_LEN as u64) as usize;
        for page in first..last {
            reserved[page / 64].fetch_or(1 << (page % 64), Ordering::Relaxed);
        }
        at = hole;
    }
}
