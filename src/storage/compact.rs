//! The compacted period file: a closed period of one chunk, immutable and losslessly
//! compressed, read with `pread` and never mapped. Mirrored in `docs/file-format.md`.
//!
//! ```text
//! header (HEADER_LEN = 104 bytes, little-endian)
//!   MAGIC_OFFSET          0  [u8; 8]  b"TIERDBPC"
//!   VERSION_OFFSET        8  u32      FORMAT_VERSION
//!   CODEC_OFFSET         12  u32      CODEC_PCO: the slot columns are pco data (see below)
//!   RESOLUTION_OFFSET    16  u64      bucket width, seconds
//!   PERIOD_OFFSET        24  u64      time one file covers, seconds
//!   PERIOD_START_OFFSET  32  i64      unix seconds, a period start of the tier's layout
//!   BUCKETS_OFFSET       40  u32      buckets per period (period / resolution)
//!   SLOTS_OFFSET         44  u32      series slots, so index entries
//!   CHUNK_OFFSET         48  u32      chunk number: slots hold series ids chunk*slots ..
//!   TIER_NAME_LEN_OFFSET 52  u32      length of the tier name
//!   TIER_NAME_OFFSET     56  [u8; 32] tier name, zero padded
//!   DATA_LEN_OFFSET      88  u64      bytes of slot data after the index
//!   INDEX_CRC_OFFSET     96  u32      crc32 of the index
//!   CHECKSUM_OFFSET     100  u32      crc32 of bytes 0..100
//! index (from HEADER_LEN): one ENTRY_LEN = 16 byte entry per slot, in slot order
//!   ENTRY_DATA_OFFSET     0  u64      file offset of the slot's data
//!   ENTRY_DATA_LEN        8  u32      its length; 0 for a slot whose buckets are all empty
//!   ENTRY_CRC            12  u32      crc32 of those bytes
//! data (from HEADER_LEN + slots * ENTRY_LEN): the slots' data back to back, in slot order
//! slot data (format version 5; versions 1 to 4 below). A column is stored without its
//! length, which the reader knows from what came before; nothing for a column of none, else
//! a form byte: COLUMN_CONSTANT (0) every value is the same, and its bits follow as one LEB128
//! varint (an i64 zigzagged, an f64's bits as they are); COLUMN_PCO (1) a chunk of pco's
//! wrapped format follows, its metadata then one page (no wrapped header: every chunk is
//! read as of format 4.1, columns::PCO_WRAPPED_HEADER)
//!   ghosts   varint    kept buckets whose count is 0 (see below), then their bucket
//!                      indices, ascending: the first, then each one's gap from the one
//!                      before less one, varints
//!   then                exceptions, buckets of count 1 that are not plain singles (see
//!                      below), listed the same way
//!   count column       u64, one per bucket of the period
//!   values section     form u8: VALUES_ONE_CHUNK (0) one pco chunk, its first page the k
//!                      totals of the kept buckets in bucket order, then the mins of the w
//!                      kept buckets that are not plain singles, then their maxes;
//!                      VALUES_TWO_CHUNKS (1) a chunk of the totals (one page), then a chunk
//!                      whose first page holds the mins and maxes. Whichever the encoder found
//!                      smaller. When latest values are stored (below), the last chunk holds
//!                      them too, as its second page: its bins are shared, and the page comes
//!                      after the latest section's head, so a read that skips the latest
//!                      samples stops before it
//!   latest section     form u8 and bitmap as version 4's; then, but for LATEST_NONE, the
//!                      values byte as version 4's, the offset column (u64, one per known
//!                      bucket), and the page of latest values, as many as the values byte
//!                      does not imply (none: no page)
//!   histogram section  as version 4's, but for the seven columns, which are columns as
//!                      above, each as long as those before it say: m, m, m, 2m, one per
//!                      non-empty list, one per later bucket, one per bucket
//! slot data of version 4 (still read, no longer written)
//!   0  u32      ghosts: kept buckets whose count is 0
//!   4  [u32]    their bucket indices, ascending
//!   then                     u32      exceptions: buckets of count 1 that are not plain
//!                          [u32]    singles (see below), their bucket indices, ascending
//!   then two columns, each a u32 length and that many bytes of pco standalone data:
//!     count  u64, one per bucket of the period
//!     values f64: the kept buckets' totals, in bucket order; then the mins of the kept
//!            buckets that are not plain singles, in bucket order; then their maxes. In
//!            one pco chunk, or in two (the totals; the mins and maxes), whichever the
//!            encoder found smaller: the reader takes any number of chunks.
//!   then the latest section, each kept bucket's latest sample where it is known:
//!     form   u8: LATEST_NONE (0) none is known, and the section ends here; LATEST_EVERY (1)
//!            every kept bucket's is; LATEST_MARKED (2) a bitmap follows
//!     bitmap (form 2 only) ceil(kept / 8) bytes: bit k % 8 of byte k / 8 is set when the
//!            k-th kept bucket's is known; bits past the last kept bucket are zero, and one
//!            bit at least is set
//!     values u8: SINGLES_IMPLIED (0) a known bucket of count 1 has its total as its latest
//!            value, which the value column below leaves out; SINGLES_STORED (1) the column
//!            holds every known bucket's (a counter's latest value is its raw value, not
//!            the increase its total holds)
//!     then two columns, each a u32 length and pco standalone data (a length of 0 and no
//!            data for an empty one): offset (u64, one per known bucket: seconds from the
//!            bucket's start to its latest sample, below the resolution); value (f64, the
//!            latest values the values byte does not imply, in bucket order)
//!   then the histogram section, only when a kept bucket has a histogram (nothing at all,
//!   not even a length, when none has):
//!     form   u8: HISTOGRAMS_EVERY (0) every kept bucket has one; HISTOGRAMS_MARKED (1) a
//!            bitmap follows
//!     bitmap (form 1 only) ceil(kept / 8) bytes: bit k % 8 of byte k / 8 is set when the
//!            k-th kept bucket, in bucket order, has a histogram; bits past the last kept
//!            bucket are zero
//!     then seven columns over the m histograms of those buckets, in bucket order, each a
//!            u32 length and pco standalone data: scale (i64, m), zero threshold (f64, m;
//!            0 for none), zero count (u64, m), list lengths (u64, 2m: every positive
//!            list's, then every negative list's), first index of each non-empty list
//!            (i64), each later index's gap from the one before less one (u64), every
//!            bucket's count (u64, above 0); the last three in histogram order, positive
//!            list before negative; nothing follows them
//! slot data of version 3 (still read, no longer written): as version 4 without the latest
//! section, every latest sample unknown. Version 2: as version 3 without the histogram
//! section. Version 1: the ghosts as above, then four columns: count (u64, one
//! per bucket), then total, min and max (f64, one per kept bucket).
//! ```
//! A bucket is kept when it is not all zero bits: its count is non-zero, or (a ghost) its
//! count is zero but a field is not +0.0, which a hot file can hold after a repaired
//! interrupted update. Leaving empty buckets out of the float columns keeps a gauge's walk
//! contiguous for the codec; listing ghosts keeps even those bits exact. A plain single is
//! a bucket of count 1 whose min and max are its total bit for bit, as one sample leaves
//! them: only its total is stored, and a series sampled once a bucket costs one float a
//! bucket instead of three. A count-1 bucket whose min or max differs (a cell overwritten
//! with other bits, say) is listed as an exception and stored whole.
//!
//! A distribution's histograms ride in the same slot data: the index entry's CRC covers
//! them, and a bucket and its histogram come from one snapshot of the hot cell. A histogram
//! beside a record of all zero bits counts no sample and is not kept.

mod columns;
#[cfg(test)]
mod tests;

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::format::{get_u32, get_u64, put_u32, put_u64, PeriodMeta, FILE_SUFFIX};
use super::period_file::Latest;
use crate::bucket::{Bucket, Last};
use crate::config::TIER_NAME_MAX;
use crate::error::Error;
use crate::error::Result;
use crate::histogram::Histogram;

/// Compacted period files end in this (hot period files end in [`FILE_SUFFIX`]).
pub(crate) const COMPACT_SUFFIX: &str = ".tdc";
/// File magic: "tierdb period, compacted".
pub(crate) const MAGIC: [u8; 8] = *b"TIERDBPC";
/// The version this build writes; bumped on any incompatible change. Version 2 stores a
/// slot's floats in one column and leaves out the min and max of plain singles; version 3
/// adds the histogram section of distribution series; version 4 the latest section (each
/// bucket's latest sample), before the histogram section; version 5 stores a constant
/// column as one value, pco chunks in its wrapped format without lengths, the latest values
/// as a page of the values' last chunk, and varint lists: about half a slot's fixed cost.
pub(crate) const FORMAT_VERSION: u32 = 5;
/// The first version whose slots carry the latest section (each bucket's latest sample).
const LATEST_VERSION: u32 = 4;
/// The first version whose columns are [`columns`]' (a constant as one value, pco's wrapped
/// chunks, no lengths) and whose lists are varints.
const COLUMNS_VERSION: u32 = 5;
/// The oldest version this build still reads: version 1 files (four columns a slot),
/// version 2 files (no histograms), version 3 files (no latest samples: read as unknown)
/// and version 4 files (standalone pco columns) stay readable as they are, and are replaced
/// by version 5 only if a late write recompacts their period. Files of other versions are
/// refused.
pub(crate) const OLDEST_VERSION: u32 = 1;
/// The only codec so far: the slot's columns are pco data (standalone up to version 4, wrapped
/// chunks from version 5). Stored so another codec can come without a new layout.
pub(crate) const CODEC_PCO: u32 = 1;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const CODEC_OFFSET: usize = VERSION_OFFSET + 4;
const RESOLUTION_OFFSET: usize = CODEC_OFFSET + 4;
const PERIOD_OFFSET: usize = RESOLUTION_OFFSET + 8;
const PERIOD_START_OFFSET: usize = PERIOD_OFFSET + 8;
const BUCKETS_OFFSET: usize = PERIOD_START_OFFSET + 8;
const SLOTS_OFFSET: usize = BUCKETS_OFFSET + 4;
const CHUNK_OFFSET: usize = SLOTS_OFFSET + 4;
const TIER_NAME_LEN_OFFSET: usize = CHUNK_OFFSET + 4;
const TIER_NAME_OFFSET: usize = TIER_NAME_LEN_OFFSET + 4;
const DATA_LEN_OFFSET: usize = TIER_NAME_OFFSET + TIER_NAME_MAX;
const INDEX_CRC_OFFSET: usize = DATA_LEN_OFFSET + 8;
const CHECKSUM_OFFSET: usize = INDEX_CRC_OFFSET + 4;
/// Header size; the index follows at once.
pub const HEADER_LEN: usize = CHECKSUM_OFFSET + 4;

const ENTRY_DATA_OFFSET: usize = 0;
const ENTRY_DATA_LEN: usize = ENTRY_DATA_OFFSET + 8;
const ENTRY_CRC: usize = ENTRY_DATA_LEN + 4;
/// Size of one index entry.
pub const ENTRY_LEN: usize = ENTRY_CRC + 4;

/// Latest section form: no kept bucket's latest sample is known.
const LATEST_NONE: u8 = 0;
/// Latest section form: every kept bucket's is known.
const LATEST_EVERY: u8 = 1;
/// Latest section form: a bitmap says whose is known.
const LATEST_MARKED: u8 = 2;
/// Latest values: a known bucket of count 1 has its total as its latest value.
const SINGLES_IMPLIED: u8 = 0;
/// Latest values: every known bucket's is in the column.
const SINGLES_STORED: u8 = 1;
/// Values section form (version 5): one pco chunk.
const VALUES_ONE_CHUNK: u8 = 0;
/// Values section form (version 5): two chunks, the totals; the mins and maxes.
const VALUES_TWO_CHUNKS: u8 = 1;
/// Histogram section form: every kept bucket has a histogram (a distribution's usual slot).
const HISTOGRAMS_EVERY: u8 = 0;
/// Histogram section form: a bitmap over the kept buckets says which have one.
const HISTOGRAMS_MARKED: u8 = 1;
/// The most populated buckets one histogram of a slot holds: what the largest hot cell
/// (1 KiB, at least 2 bytes a bucket) can hold. A bound on a slot's data, not a limit the
/// writer checks (its histograms come from those cells).
const MAX_CELL_BUCKETS: usize = super::histogram_cell::MAX_WORDS * 8 / 2;

/// A bucket and its histogram, if it has one: what compaction reads of a hot cell (one
/// snapshot, [`super::period_file::PeriodFile::load_closed`]) and what
/// [`CompactReader::read_slot_distributions`] gives back.
pub type Loaded = (Bucket, Option<Histogram>);

/// What [`CompactFile::for_each_slot`] calls: `(slot, all its buckets, their histograms)`.
pub(crate) type SlotVisitor<'a> = dyn FnMut(u32, &[Bucket], &[Option<Histogram>]) + 'a;

/// A compacted period file: a handle that does no I/O until read, so a data directory with
/// hundreds of thousands of them opens by listing names only; nothing stays open or mapped.
#[derive(Clone, Debug)]
pub struct CompactFile {
    path: PathBuf,
    /// What the caller expects from the name and the tier's configuration; every read checks
    /// the header against it, so a file renamed or moved is refused rather than misread.
    meta: PeriodMeta,
    /// Bytes allocated, once asked: the file never changes, and stats ask on every scrape.
    disk_bytes: std::sync::OnceLock<u64>,
    /// Names this file for the cache of open readers: unlike the path, it is never reused,
    /// so a period compacted again (same name, new file) is never read through the old one.
    id: u64,
}

/// A compacted file opened for one read: its header and index read and checked once, so
/// each slot then costs one pread. Holding the descriptor keeps the file readable even if a
/// late write or an expiry unlinks it meanwhile.
pub struct CompactReader {
    compact: CompactFile,
    file: File,
    /// Header and index, checked.
    head: Vec<u8>,
    /// Bytes of slot data, as the header records.
    data_len: u64,
    /// The file's format version, which says how its slots are laid out.
    version: u32,
}

/// One slot's index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    offset: u64,
    len: u32,
    crc: u32,
}

impl CompactFile {
    /// The handle for the compacted file at `path`, expected to hold `meta` (derived by the
    /// caller from the file name and the tier's configuration). No I/O.
    pub fn new(path: PathBuf, meta: PeriodMeta) -> CompactFile {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        CompactFile {
            path,
            meta,
            disk_bytes: std::sync::OnceLock::new(),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// This file's identity for caches (see the field).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the file is expected to hold.
    pub fn meta(&self) -> &PeriodMeta {
        &self.meta
    }

    /// The file name for `meta`: the hot file's stem (`20261121T000000Z-c00000`) and
    /// [`COMPACT_SUFFIX`], so both forms of a period sort together in a listing.
    pub fn file_name(meta: &PeriodMeta) -> String {
        let hot = meta.file_name();
        let stem = hot.strip_suffix(FILE_SUFFIX).unwrap_or(&hot);
        format!("{stem}{COMPACT_SUFFIX}")
    }

    /// Writes the compacted form of a period into `dir`, whole ([`super::disk::write_atomic`]:
    /// under `<name>.tmp`, which the storage open removes when a crash left it, fsynced,
    /// renamed into place, the directory fsynced). `load(bucket, slot)`
    /// gives every bucket with its histogram, if any (slot < meta.slots, bucket <
    /// meta.buckets()); it is called on this thread, slot after slot. Slots whose buckets
    /// are all empty (count 0 and all fields zero) take no space beyond their index entry.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file (`ENOSPC` included). The temporary file is removed on
    /// failure when it can be; nothing else is left.
    pub fn create(
        dir: &Path,
        meta: &PeriodMeta,
        load: &dyn Fn(u32, u32) -> Loaded,
    ) -> Result<CompactFile> {
        let path = dir.join(Self::file_name(meta));
        let bytes = encode_file(meta, load, &path)?;
        super::disk::write_atomic(&path, &bytes)?;
        let file = CompactFile::new(path, meta.clone());
        // Known now, so stats never stat a file this process wrote.
        file.disk_bytes()?;
        Ok(file)
    }

    /// Opens the file for reading and checks its header and index (one open, one pread).
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file for a bad magic, another format version or
    /// codec, a header or index CRC mismatch, truncation, or a header that disagrees with
    /// the expected [`PeriodMeta`]; [`Error::Io`] naming it.
    pub fn open_reader(&self) -> Result<CompactReader> {
        let file = File::open(&self.path).map_err(|e| Error::io(&self.path, e))?;
        let mut head = vec![0u8; self.head_len()];
        self.read_at(&file, &mut head, 0)?;
        let (data_len, version) = self.check_head(&head)?;
        Ok(CompactReader {
            compact: self.clone(),
            file,
            head,
            data_len,
            version,
        })
    }

    /// Every slot with any non-empty bucket, in slot order: `f(slot, all its buckets, their
    /// histograms)` (one entry a bucket, `None` for a bucket without one). For turning a
    /// compacted period back into a hot file when a late sample arrives. Reads the
    /// file once, sequentially, and checks all of it before the first call of `f`, so a
    /// damaged file calls `f` for nothing.
    ///
    /// # Errors
    /// As [`CompactFile::open_reader`] and [`CompactReader::read_slot`], for any slot; also a file longer or shorter than its
    /// header says, or an index whose entries do not tile the data.
    pub fn for_each_slot(&self, f: &mut SlotVisitor<'_>) -> Result<()> {
        let bytes = std::fs::read(&self.path).map_err(|e| Error::io(&self.path, e))?;
        let head_len = self.head_len();
        if bytes.len() < head_len {
            return Err(self.truncated(bytes.len() as u64, head_len as u64));
        }
        let (data_len, version) = self.check_head(&bytes[..head_len])?;
        let expected = head_len as u64 + data_len;
        if bytes.len() as u64 != expected {
            return Err(if (bytes.len() as u64) < expected {
                self.truncated(bytes.len() as u64, expected)
            } else {
                self.corrupt(format!(
                    "{} bytes, the header promises {expected}",
                    bytes.len()
                ))
            });
        }
        let mut slots = Vec::new();
        let mut next = head_len as u64;
        for slot in 0..self.meta.slots {
            let entry = entry(&bytes, slot);
            if entry.offset != next {
                return Err(self.corrupt(format!(
                    "index entry of slot {slot} starts at {}, expected {next}",
                    entry.offset
                )));
            }
            next += u64::from(entry.len);
            if next > expected {
                return Err(self.corrupt(format!("index entry of slot {slot} ends past the data")));
            }
            if entry.len > 0 {
                let data = &bytes[entry.offset as usize..next as usize];
                slots.push((
                    slot,
                    self.decode_slot(slot, entry, data, version, Latest::Read, true)?,
                ));
            }
        }
        if next != expected {
            return Err(self.corrupt("index entries do not cover the data"));
        }
        for (slot, decoded) in &slots {
            f(*slot, &decoded.buckets, &decoded.histograms);
        }
        Ok(())
    }

    /// Bytes the file really takes on disk (`st_blocks` × 512), for the disk figures.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub fn disk_bytes(&self) -> Result<u64> {
        if let Some(&bytes) = self.disk_bytes.get() {
            return Ok(bytes);
        }
        let meta = std::fs::metadata(&self.path).map_err(|e| Error::io(&self.path, e))?;
        Ok(*self.disk_bytes.get_or_init(|| meta.blocks() * 512))
    }

    /// Header and index length.
    fn head_len(&self) -> usize {
        HEADER_LEN + self.meta.slots as usize * ENTRY_LEN
    }

    /// Checks the header and index in `head` (exactly `head_len` bytes) against the expected
    /// meta; returns the data length the header records and the format version.
    fn check_head(&self, head: &[u8]) -> Result<(u64, u32)> {
        if head[MAGIC_OFFSET..MAGIC_OFFSET + 8] != MAGIC {
            return Err(self.corrupt("not a tierdb compacted period file (bad magic)"));
        }
        let version = get_u32(head, VERSION_OFFSET);
        if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(self.corrupt(format!(
                "compacted format version {version}, this build reads versions \
                 {OLDEST_VERSION} to {FORMAT_VERSION}"
            )));
        }
        let stored = get_u32(head, CHECKSUM_OFFSET);
        let computed = crc32fast::hash(&head[..CHECKSUM_OFFSET]);
        if stored != computed {
            return Err(self.corrupt(format!(
                "header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            )));
        }
        let codec = get_u32(head, CODEC_OFFSET);
        if codec != CODEC_PCO {
            return Err(self.corrupt(format!("codec {codec}, this build reads codec {CODEC_PCO}")));
        }
        let found = decode_meta(head).ok_or_else(|| self.corrupt("tier name out of range"))?;
        if !found.same_place(&self.meta) || get_u32(head, BUCKETS_OFFSET) != self.meta.buckets() {
            return Err(self.corrupt(format!(
                "header holds {}, expected {}",
                describe(&found, get_u32(head, BUCKETS_OFFSET)),
                describe(&self.meta, self.meta.buckets())
            )));
        }
        let stored = get_u32(head, INDEX_CRC_OFFSET);
        let computed = crc32fast::hash(&head[HEADER_LEN..]);
        if stored != computed {
            return Err(self.corrupt(format!(
                "index checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            )));
        }
        Ok((get_u64(head, DATA_LEN_OFFSET), version))
    }

    /// The whole period of `slot` from its checked-out `data`, with its histograms when
    /// `histograms` is set.
    fn decode_slot(
        &self,
        slot: u32,
        entry: Entry,
        data: &[u8],
        version: u32,
        latest: Latest,
        histograms: bool,
    ) -> Result<Slot> {
        let computed = crc32fast::hash(data);
        if computed != entry.crc {
            return Err(self.corrupt(format!(
                "data checksum mismatch in slot {slot} (stored {:#010x}, computed {computed:#010x})",
                entry.crc
            )));
        }
        decode_slot(
            data,
            self.meta.buckets(),
            BucketTimes::of(&self.meta),
            version,
            latest,
            histograms,
        )
        .map_err(|reason| self.corrupt(format!("slot {slot}: {reason}")))
    }

    fn read_at(&self, file: &File, buf: &mut [u8], offset: u64) -> Result<()> {
        file.read_exact_at(buf, offset).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                self.corrupt(format!(
                    "truncated: {} bytes at {offset} cannot be read",
                    buf.len()
                ))
            } else {
                Error::io(&self.path, e)
            }
        })
    }

    fn truncated(&self, len: u64, expected: u64) -> Error {
        self.corrupt(format!(
            "truncated: {len} bytes, the header promises {expected}"
        ))
    }

    fn corrupt(&self, reason: impl Into<String>) -> Error {
        Error::corrupt(&self.path, reason)
    }
}

/// The whole file's bytes: header, index, then every non-empty slot's data.
fn encode_file(
    meta: &PeriodMeta,
    load: &dyn Fn(u32, u32) -> Loaded,
    path: &Path,
) -> Result<Vec<u8>> {
    // On the calling thread, one slot after another: compaction is background work, done by
    // the maintenance thread at the lowest CPU priority, and must not spread over the pool
    // that queries use at normal priority.
    let slots: Vec<Vec<u8>> = (0..meta.slots)
        .map(|slot| {
            let (buckets, histograms): (Vec<Bucket>, Vec<Option<Histogram>>) =
                (0..meta.buckets()).map(|b| load(b, slot)).unzip();
            encode_slot(&buckets, &histograms, BucketTimes::of(meta))
                .map_err(|e| Error::io(path, std::io::Error::other(e)))
        })
        .collect::<Result<_>>()?;
    let head_len = HEADER_LEN + slots.len() * ENTRY_LEN;
    let data_len: usize = slots.iter().map(Vec::len).sum();
    let mut bytes = vec![0u8; head_len];
    bytes.reserve(data_len);
    for (slot, data) in slots.iter().enumerate() {
        let at = HEADER_LEN + slot * ENTRY_LEN;
        debug_assert!(data.len() as u64 <= max_slot_len(meta.buckets()));
        let len = u32::try_from(data.len())
            .map_err(|_| Error::io(path, std::io::Error::other("a slot's data exceeds 4 GiB")))?;
        let offset = bytes.len() as u64;
        put_u64(&mut bytes, at + ENTRY_DATA_OFFSET, offset);
        put_u32(&mut bytes, at + ENTRY_DATA_LEN, len);
        put_u32(&mut bytes, at + ENTRY_CRC, crc32fast::hash(data));
        bytes.extend_from_slice(data);
    }
    bytes[MAGIC_OFFSET..MAGIC_OFFSET + 8].copy_from_slice(&MAGIC);
    put_u32(&mut bytes, VERSION_OFFSET, FORMAT_VERSION);
    put_u32(&mut bytes, CODEC_OFFSET, CODEC_PCO);
    put_u64(&mut bytes, RESOLUTION_OFFSET, meta.resolution.secs());
    put_u64(&mut bytes, PERIOD_OFFSET, meta.period.secs());
    put_u64(&mut bytes, PERIOD_START_OFFSET, meta.period_start as u64);
    put_u32(&mut bytes, BUCKETS_OFFSET, meta.buckets());
    put_u32(&mut bytes, SLOTS_OFFSET, meta.slots);
    put_u32(&mut bytes, CHUNK_OFFSET, meta.chunk);
    let name = meta.tier.as_bytes();
    let name_len = name.len().min(TIER_NAME_MAX);
    put_u32(&mut bytes, TIER_NAME_LEN_OFFSET, name_len as u32);
    bytes[TIER_NAME_OFFSET..TIER_NAME_OFFSET + name_len].copy_from_slice(&name[..name_len]);
    put_u64(&mut bytes, DATA_LEN_OFFSET, data_len as u64);
    let index_crc = crc32fast::hash(&bytes[HEADER_LEN..head_len]);
    put_u32(&mut bytes, INDEX_CRC_OFFSET, index_crc);
    let crc = crc32fast::hash(&bytes[..CHECKSUM_OFFSET]);
    put_u32(&mut bytes, CHECKSUM_OFFSET, crc);
    Ok(bytes)
}

/// When a period's buckets start: what a latest sample's offset counts from.
#[derive(Clone, Copy, Debug)]
pub(super) struct BucketTimes {
    /// The period's first second.
    start: crate::time::Timestamp,
    /// Bucket width, seconds.
    width: i64,
}

impl BucketTimes {
    /// The buckets of the file `meta` describes.
    pub(super) fn of(meta: &PeriodMeta) -> BucketTimes {
        BucketTimes {
            start: meta.period_start,
            width: meta.resolution.secs() as i64,
        }
    }

    /// The first second of bucket `i`.
    fn start(&self, i: usize) -> crate::time::Timestamp {
        self.start + i as i64 * self.width
    }

    /// The offset of `last` in bucket `i`, when it lies in it.
    fn offset(&self, i: usize, last: &Last) -> Option<u64> {
        let offset = last.ts() - self.start(i);
        (0..self.width).contains(&offset).then_some(offset as u64)
    }
}

/// A slot's data in the current format (see the layout above) from its buckets and their
/// histograms (one entry a bucket), the buckets starting at `times`; empty when every
/// bucket is all zero bits.
fn encode_slot(
    buckets: &[Bucket],
    histograms: &[Option<Histogram>],
    times: BucketTimes,
) -> pco::errors::PcoResult<Vec<u8>> {
    debug_assert_eq!(buckets.len(), histograms.len());
    let kept: Vec<usize> = (0..buckets.len())
        .filter(|&i| !is_zero(&buckets[i]))
        .collect();
    if kept.is_empty() {
        return Ok(Vec::new());
    }
    let listed = |keep: fn(&Bucket) -> bool| -> Vec<u32> {
        kept.iter()
            .filter(|&&i| keep(&buckets[i]))
            .map(|&i| i as u32)
            .collect()
    };
    let ghosts = listed(|b| b.count == 0);
    let exceptions = listed(|b| b.count == 1 && !is_plain_single(b));
    // The kept buckets whose min and max are stored.
    let whole: Vec<usize> = kept
        .iter()
        .copied()
        .filter(|&i| !is_plain_single(&buckets[i]))
        .collect();
    let mut out = Vec::with_capacity(16 + 8 * kept.len());
    columns::push_list(&mut out, &ghosts);
    columns::push_list(&mut out, &exceptions);
    let counts: Vec<u64> = buckets.iter().map(|b| b.count).collect();
    columns::push_column(&mut out, &counts)?;
    let mut values: Vec<f64> = Vec::with_capacity(kept.len() + 2 * whole.len());
    values.extend(kept.iter().map(|&i| buckets[i].total));
    values.extend(whole.iter().map(|&i| buckets[i].min));
    values.extend(whole.iter().map(|&i| buckets[i].max));
    let latest = LatestSection::of(&kept, buckets, times);
    let (section, latest_page) = values_section(&values, kept.len(), &latest.values)?;
    out.extend_from_slice(&section);
    latest.push(&mut out)?;
    out.extend_from_slice(&latest_page);
    push_histograms(&mut out, &kept, histograms)?;
    Ok(out)
}

/// The values section of a slot whose floats are `values` (the totals of its kept buckets,
/// the first `totals`, then the mins and the maxes it stores), and apart, the page of the
/// latest values `latest` that its last chunk ends with (empty when there are none). One
/// chunk decodes fastest; two (the totals; the mins and maxes) are up to a tenth smaller for
/// some walks and larger for others, so both are tried and the smaller kept (`cargo bench
/// --bench compact` prints the sizes).
fn values_section(
    values: &[f64],
    totals: usize,
    latest: &[f64],
) -> pco::errors::PcoResult<(Vec<u8>, Vec<u8>)> {
    let encode = |form: u8| -> pco::errors::PcoResult<(Vec<u8>, Vec<u8>)> {
        let mut section = vec![form];
        let mut last = values;
        if form == VALUES_TWO_CHUNKS {
            columns::push_chunk(&mut section, &values[..totals], &[totals])?;
            last = &values[totals..];
        }
        let mut page = Vec::new();
        if latest.is_empty() {
            columns::push_chunk(&mut section, last, &[last.len()])?;
        } else {
            let both: Vec<f64> = last.iter().chain(latest).copied().collect();
            let mut chunk = columns::push_chunk(&mut section, &both, &[last.len(), latest.len()])?;
            columns::push_page(&mut page, &mut chunk, 1)?;
        }
        Ok((section, page))
    };
    let one = encode(VALUES_ONE_CHUNK)?;
    if values.len() == totals {
        return Ok(one);
    }
    let two = encode(VALUES_TWO_CHUNKS)?;
    let len = |(section, page): &(Vec<u8>, Vec<u8>)| section.len() + page.len();
    Ok(if len(&two) < len(&one) { two } else { one })
}

/// What the latest section of a slot holds (see the layout above), gathered before its
/// values section, whose last chunk takes the latest values.
struct LatestSection {
    /// The number of kept buckets.
    kept: usize,
    /// Per kept bucket whose latest sample is known: its place among the kept, and the
    /// sample's offset in the bucket.
    known: Vec<(usize, u64)>,
    /// Whether a known bucket of count 1 has its total as its latest value.
    singles_implied: bool,
    /// The latest values that are not implied, in bucket order.
    values: Vec<f64>,
}

impl LatestSection {
    fn of(kept: &[usize], buckets: &[Bucket], times: BucketTimes) -> LatestSection {
        let known: Vec<(usize, u64, f64)> = kept
            .iter()
            .enumerate()
            .filter_map(|(k, &i)| {
                let last = buckets[i].last?;
                Some((k, times.offset(i, &last)?, last.value))
            })
            .collect();
        let implied = |k: usize, value: f64| {
            let b = &buckets[kept[k]];
            b.count == 1 && b.total.to_bits() == value.to_bits()
        };
        let singles_implied = known
            .iter()
            .all(|&(k, _, value)| buckets[kept[k]].count != 1 || implied(k, value));
        let values = known
            .iter()
            .filter(|&&(k, _, value)| !(singles_implied && implied(k, value)))
            .map(|&(_, _, value)| value)
            .collect();
        LatestSection {
            kept: kept.len(),
            known: known.iter().map(|&(k, offset, _)| (k, offset)).collect(),
            singles_implied,
            values,
        }
    }

    /// Appends the section up to its offset column; the page of values follows it.
    fn push(&self, out: &mut Vec<u8>) -> pco::errors::PcoResult<()> {
        if self.known.is_empty() {
            out.push(LATEST_NONE);
            return Ok(());
        }
        if self.known.len() == self.kept {
            out.push(LATEST_EVERY);
        } else {
            out.push(LATEST_MARKED);
            let mut bitmap = vec![0u8; self.kept.div_ceil(8)];
            for &(k, _) in &self.known {
                bitmap[k / 8] |= 1 << (k % 8);
            }
            out.extend_from_slice(&bitmap);
        }
        out.push(if self.singles_implied {
            SINGLES_IMPLIED
        } else {
            SINGLES_STORED
        });
        let offsets: Vec<u64> = self.known.iter().map(|&(_, offset)| offset).collect();
        columns::push_column(out, &offsets)
    }
}

/// The histogram section of the kept buckets `kept` (see the layout above); nothing when
/// none of them has a histogram.
fn push_histograms(
    out: &mut Vec<u8>,
    kept: &[usize],
    histograms: &[Option<Histogram>],
) -> pco::errors::PcoResult<()> {
    let marked: Vec<&Histogram> = kept
        .iter()
        .filter_map(|&i| histograms[i].as_ref())
        .collect();
    if marked.is_empty() {
        return Ok(());
    }
    if marked.len() == kept.len() {
        out.push(HISTOGRAMS_EVERY);
    } else {
        out.push(HISTOGRAMS_MARKED);
        let mut bitmap = vec![0u8; kept.len().div_ceil(8)];
        for (k, &i) in kept.iter().enumerate() {
            if histograms[i].is_some() {
                bitmap[k / 8] |= 1 << (k % 8);
            }
        }
        out.extend_from_slice(&bitmap);
    }
    let c = HistogramColumns::of(&marked);
    columns::push_column(out, &c.scales)?;
    columns::push_column(out, &c.thresholds)?;
    columns::push_column(out, &c.zero_counts)?;
    columns::push_column(out, &c.lengths)?;
    columns::push_column(out, &c.firsts)?;
    columns::push_column(out, &c.gaps)?;
    columns::push_column(out, &c.counts)
}

/// The histograms of a slot's section as columns (see the layout above): a histogram's
/// fields apart, each column holding one kind of number for pco to bin, so a bucket of a
/// timer costs well under the 2 bytes (gap and count) of the histogram's own encoding.
#[derive(Debug, Default, PartialEq)]
struct HistogramColumns {
    /// Per histogram: its scale.
    scales: Vec<i64>,
    /// Per histogram: its zero threshold (0 for none).
    thresholds: Vec<f64>,
    /// Per histogram: its zero count.
    zero_counts: Vec<u64>,
    /// The positive lists' lengths, one per histogram, then the negative lists'.
    lengths: Vec<u64>,
    /// The first index of each non-empty list, in histogram order, positive before negative.
    firsts: Vec<i64>,
    /// In the same order, each later index's gap from the one before, less one.
    gaps: Vec<u64>,
    /// Every bucket's count, in the same order, first indexes included.
    counts: Vec<u64>,
}

impl HistogramColumns {
    fn of(histograms: &[&Histogram]) -> HistogramColumns {
        let mut c = HistogramColumns::default();
        for h in histograms {
            c.scales.push(i64::from(h.scale()));
            c.thresholds.push(h.zero_threshold());
            c.zero_counts.push(h.zero_count());
        }
        c.lengths
            .extend(histograms.iter().map(|h| h.positive().len() as u64));
        c.lengths
            .extend(histograms.iter().map(|h| h.negative().len() as u64));
        for h in histograms {
            for list in [h.positive(), h.negative()] {
                let mut previous = None;
                for &(index, count) in list {
                    match previous {
                        None => c.firsts.push(i64::from(index)),
                        Some(p) => c.gaps.push((i64::from(index) - i64::from(p) - 1) as u64),
                    }
                    c.counts.push(count);
                    previous = Some(index);
                }
            }
        }
        c
    }

    /// Version 5's columns of `m` histograms at the start of `rest`, each as long as those
    /// before it say.
    fn take(rest: &mut &[u8], m: usize) -> std::result::Result<HistogramColumns, String> {
        let scales = columns::take_column(rest, m, "histogram scale")?;
        let thresholds = columns::take_column(rest, m, "histogram zero threshold")?;
        let zero_counts = columns::take_column(rest, m, "histogram zero count")?;
        let lengths: Vec<u64> = columns::take_column(rest, 2 * m, "histogram length")?;
        let lists = lengths.iter().filter(|&&len| len > 0).count();
        let entries = lengths
            .iter()
            .try_fold(0u64, |sum, &len| sum.checked_add(len))
            .filter(|&sum| sum <= (m * MAX_CELL_BUCKETS) as u64)
            .ok_or("histogram lengths past what the histograms can hold")?
            as usize;
        Ok(HistogramColumns {
            scales,
            thresholds,
            zero_counts,
            lengths,
            firsts: columns::take_column(rest, lists, "histogram first index")?,
            gaps: columns::take_column(rest, entries - lists, "histogram gap")?,
            counts: columns::take_column(rest, entries, "histogram count")?,
        })
    }

    /// The `m` histograms the columns hold, in order; `Err` naming what does not fit
    /// (`bucket_of(k)` names the bucket of the `k`-th, for the message).
    fn histograms(
        &self,
        m: usize,
        bucket_of: impl Fn(usize) -> usize,
    ) -> std::result::Result<Vec<Histogram>, String> {
        let heads = [
            self.scales.len(),
            self.thresholds.len(),
            self.zero_counts.len(),
        ];
        if heads != [m; 3] || self.lengths.len() != 2 * m {
            return Err(format!(
                "histogram columns hold {heads:?} heads and {} lengths for {m} histograms",
                self.lengths.len()
            ));
        }
        let (mut firsts, mut gaps, mut counts) =
            (self.firsts.iter(), self.gaps.iter(), self.counts.iter());
        let mut out = Vec::with_capacity(m);
        for k in 0..m {
            let bucket = bucket_of(k);
            let bad = |what: String| format!("histogram of bucket {bucket}: {what}");
            let scale = i8::try_from(self.scales[k])
                .ok()
                .filter(|s| (crate::histogram::MIN_SCALE..=crate::histogram::MAX_SCALE).contains(s))
                .ok_or_else(|| bad(format!("scale {} outside -4..=8", self.scales[k])))?;
            let threshold = self.thresholds[k];
            if threshold.to_bits() != 0 && !(threshold.is_finite() && threshold > 0.0) {
                return Err(bad(format!("zero threshold {threshold}")));
            }
            let mut lists = [Vec::new(), Vec::new()];
            for (list, len) in lists.iter_mut().zip([self.lengths[k], self.lengths[m + k]]) {
                let mut previous: Option<i64> = None;
                for _ in 0..len {
                    let index = match previous {
                        None => *firsts
                            .next()
                            .ok_or_else(|| bad("the first indexes run out".into()))?,
                        Some(p) => {
                            let gap = *gaps.next().ok_or_else(|| bad("the gaps run out".into()))?;
                            i64::try_from(gap)
                                .ok()
                                .and_then(|g| p.checked_add(1)?.checked_add(g))
                                .ok_or_else(|| bad(format!("gap {gap} overflows")))?
                        }
                    };
                    let index = i32::try_from(index)
                        .map_err(|_| bad(format!("index {index} out of range")))?;
                    let count = *counts
                        .next()
                        .ok_or_else(|| bad("the counts run out".into()))?;
                    if count == 0 {
                        return Err(bad(format!("a count of 0 at index {index}")));
                    }
                    list.push((index, count));
                    previous = Some(i64::from(index));
                }
            }
            let [positive, negative] = lists;
            let histogram =
                Histogram::from_parts(scale, threshold, self.zero_counts[k], positive, negative)
                    .ok_or_else(|| bad("not a histogram".into()))?;
            out.push(histogram);
        }
        if firsts.next().is_some() || gaps.next().is_some() || counts.next().is_some() {
            return Err("histogram columns hold values past the last histogram".into());
        }
        Ok(out)
    }
}

/// The most a slot's data can take in any version this build reads, from pco's own
/// guarantee on its output size: a bound, so a damaged index cannot make a read allocate
/// gigabytes.
fn max_slot_len(buckets: u32) -> u64 {
    use pco::standalone::guarantee::file_size;
    let n = buckets as usize;
    let paging = pco::ChunkConfig::default().paging_spec;
    let column = file_size::<u64>(n, &paging).unwrap_or(usize::MAX / 8);
    let values =
        file_size::<u64>(3 * n, &pco::PagingSpec::Exact(vec![n, 2 * n])).unwrap_or(usize::MAX / 8);
    // Two lists of at most n entries, then version 1's four columns or version 2's two,
    // then version 4's latest section, then version 3's histogram section.
    let lists = 2 * (4 + 4 * n);
    let bound = |values: usize| 4 + file_size::<u64>(values, &paging).unwrap_or(usize::MAX / 16);
    let histograms =
        1 + n.div_ceil(8) + 3 * bound(n) + 2 * bound(2 * n) + 2 * bound(n * MAX_CELL_BUCKETS);
    let latest = 2 + n.div_ceil(8) + 2 * bound(n);
    let before = lists + (4 * (4 + column)).max(4 + column + 4 + values) + latest + histograms;
    // Version 5: two lists of varints (at most 5 bytes each), the count column, the values
    // section (at most two chunks of at most 4n values: totals, mins, maxes, latest
    // values), the latest section's head and offsets, the histogram section.
    let chunk = |values: usize| 1 + columns::chunk_bound(values);
    let lists = 2 * 5 * (1 + n);
    let histograms =
        1 + n.div_ceil(8) + 3 * chunk(n) + chunk(2 * n) + 3 * chunk(n * MAX_CELL_BUCKETS);
    let now = lists + chunk(n) + 2 * chunk(4 * n) + 2 + n.div_ceil(8) + chunk(n) + histograms;
    before.max(now) as u64
}

/// True when every bit of the bucket is zero: the buckets a slot's data leaves out.
fn is_zero(b: &Bucket) -> bool {
    b.count == 0 && b.total.to_bits() == 0 && b.min.to_bits() == 0 && b.max.to_bits() == 0
}

/// True for a bucket of count 1 whose min and max are its total, bit for bit: only its
/// total is stored.
fn is_plain_single(b: &Bucket) -> bool {
    let total = b.total.to_bits();
    b.count == 1 && b.min.to_bits() == total && b.max.to_bits() == total
}

/// A slot's decoded data: every bucket of its period, and, when asked for, every bucket's
/// histogram (else empty).
struct Slot {
    buckets: Vec<Bucket>,
    histograms: Vec<Option<Histogram>>,
}

/// Decodes a slot's data, laid out as format `version` has it, into all `buckets` of its
/// period, with their histograms when `histograms` is set (a read of the buckets alone
/// leaves the histogram section unparsed: the slot's CRC covers it), or says why it cannot.
fn decode_slot(
    data: &[u8],
    buckets: u32,
    times: BucketTimes,
    version: u32,
    take: Latest,
    histograms: bool,
) -> std::result::Result<Slot, String> {
    let mut rest = data;
    let columns = version >= COLUMNS_VERSION;
    let (ghost_list, exception_list) = if columns {
        (
            columns::take_list(&mut rest, buckets, "ghost")?,
            columns::take_list(&mut rest, buckets, "exception")?,
        )
    } else if version == 1 {
        (take_list(&mut rest, buckets, "ghost")?, Vec::new())
    } else {
        (
            take_list(&mut rest, buckets, "ghost")?,
            take_list(&mut rest, buckets, "exception")?,
        )
    };
    let counts: Vec<u64> = if columns {
        columns::take_column(&mut rest, buckets as usize, "count")?
    } else {
        take_column(&mut rest, "count")?
    };
    if counts.len() != buckets as usize {
        return Err(format!("{} counts for {buckets} buckets", counts.len()));
    }
    // The kept buckets, and which of them have their min and max stored.
    let mut kept = Vec::new();
    let mut whole = Vec::new();
    let mut ghosts = ghost_list.iter().peekable();
    let mut exceptions = exception_list.iter().peekable();
    for (i, &count) in counts.iter().enumerate() {
        let ghost = ghosts.next_if(|&&g| g as usize == i).is_some();
        let exception = exceptions.next_if(|&&e| e as usize == i).is_some();
        if count != 0 && ghost {
            return Err(format!("ghost bucket {i} has a count"));
        }
        if exception && count != 1 {
            return Err(format!(
                "exception bucket {i} has a count of {count}, not 1"
            ));
        }
        if count != 0 || ghost {
            kept.push(i);
            if count != 1 || exception || version == 1 {
                whole.push(i);
            }
        }
    }
    if ghosts.next().is_some() {
        return Err("ghost list is not ascending within the period".into());
    }
    if exceptions.next().is_some() {
        return Err("exception list is not ascending within the period".into());
    }
    let mut out = vec![Bucket::EMPTY; buckets as usize];
    // Version 5's last chunk of values, whose last page holds the latest values.
    let mut last_chunk = None;
    let (totals, mins, maxes) = if columns {
        let (mut values, chunk) = take_values(&mut rest, kept.len(), 2 * whole.len())?;
        last_chunk = Some(chunk);
        let maxes = values.split_off(kept.len() + whole.len());
        let mins = values.split_off(kept.len());
        (values, mins, maxes)
    } else if version == 1 {
        let totals: Vec<f64> = take_column(&mut rest, "total")?;
        let mins: Vec<f64> = take_column(&mut rest, "min")?;
        let maxes: Vec<f64> = take_column(&mut rest, "max")?;
        for (what, column) in [("total", &totals), ("min", &mins), ("max", &maxes)] {
            if column.len() != kept.len() {
                return Err(format!(
                    "{} {what} values for {} kept buckets",
                    column.len(),
                    kept.len()
                ));
            }
        }
        (totals, mins, maxes)
    } else {
        let mut values: Vec<f64> = take_column(&mut rest, "value")?;
        let expected = kept.len() + 2 * whole.len();
        if values.len() != expected {
            return Err(format!(
                "{} values for {} kept buckets, {} of them with a min and a max",
                values.len(),
                kept.len(),
                whole.len()
            ));
        }
        let maxes = values.split_off(kept.len() + whole.len());
        let mins = values.split_off(kept.len());
        (values, mins, maxes)
    };
    // The latest section is decoded when asked for, or when the histograms after it are: a
    // sum over many series skips it.
    let latest = if version >= LATEST_VERSION && (take == Latest::Read || histograms) {
        let latest = take_latest(&mut rest, &kept, &counts, &totals, last_chunk)?;
        if let Some(k) =
            (0..kept.len()).find(|&k| latest[k].is_some_and(|(o, _)| o >= times.width as u64))
        {
            return Err(format!(
                "latest sample of bucket {} lies past the bucket's end",
                kept[k]
            ));
        }
        match take {
            Latest::Read => latest,
            Latest::Skip => vec![None; kept.len()],
        }
    } else {
        vec![None; kept.len()]
    };
    let mut hists = Vec::new();
    if version < 3 {
        if !rest.is_empty() {
            return Err(format!("{} bytes after the last column", rest.len()));
        }
        if histograms {
            hists = vec![None; buckets as usize];
        }
    } else if histograms {
        hists = take_histograms(rest, &kept, buckets as usize, version)?;
    }
    for (k, &i) in kept.iter().enumerate() {
        out[i] = Bucket {
            count: counts[i],
            total: totals[k],
            min: totals[k],
            max: totals[k],
            last: latest[k].map(|(offset, value)| Last::new(value, times.start(i) + offset as i64)),
        };
    }
    for (w, &i) in whole.iter().enumerate() {
        out[i].min = mins[w];
        out[i].max = maxes[w];
    }
    Ok(Slot {
        buckets: out,
        histograms: hists,
    })
}

/// A version 5 values section at the start of `rest` (see the layout above), of `kept`
/// totals and `stored` mins and maxes: the values in that order, and the last chunk, whose
/// next page (the latest values, if any) follows the latest section's head.
fn take_values(
    rest: &mut &[u8],
    kept: usize,
    stored: usize,
) -> std::result::Result<(Vec<f64>, pco::wrapped::ChunkDecompressor<f64>), String> {
    match columns::take_byte(rest, "values section")? {
        VALUES_ONE_CHUNK => {
            let mut chunk = columns::take_chunk(rest, "value")?;
            let values = columns::take_page(&mut chunk, rest, kept + stored, "value")?;
            Ok((values, chunk))
        }
        VALUES_TWO_CHUNKS if stored > 0 => {
            let mut totals = columns::take_chunk(rest, "total")?;
            let mut values = columns::take_page(&mut totals, rest, kept, "total")?;
            let mut chunk = columns::take_chunk(rest, "min and max")?;
            values.extend(columns::take_page(&mut chunk, rest, stored, "min and max")?);
            Ok((values, chunk))
        }
        other => Err(format!("values section of unknown form {other}")),
    }
}

/// The histogram section `rest` (all that follows the value column) of a slot whose kept
/// buckets are `kept`: one entry per bucket of the period, `None` for a bucket without a
/// histogram.
fn take_histograms(
    rest: &[u8],
    kept: &[usize],
    buckets: usize,
    version: u32,
) -> std::result::Result<Vec<Option<Histogram>>, String> {
    let mut out = vec![None; buckets];
    let Some((&form, mut rest)) = rest.split_first() else {
        return Ok(out);
    };
    let marked: Vec<usize> = match form {
        HISTOGRAMS_EVERY => kept.to_vec(),
        HISTOGRAMS_MARKED => {
            let len = kept.len().div_ceil(8);
            if rest.len() < len {
                return Err("histogram bitmap cut short".into());
            }
            let (bitmap, tail) = rest.split_at(len);
            rest = tail;
            let bit = |k: usize| bitmap[k / 8] & (1 << (k % 8)) != 0;
            if (kept.len()..len * 8).any(bit) {
                return Err("histogram bitmap marks a bucket past the kept ones".into());
            }
            let marked: Vec<usize> = (0..kept.len())
                .filter(|&k| bit(k))
                .map(|k| kept[k])
                .collect();
            if marked.is_empty() {
                return Err("histogram bitmap marks no bucket".into());
            }
            marked
        }
        other => return Err(format!("histogram section of unknown form {other}")),
    };
    let columns = if version >= COLUMNS_VERSION {
        HistogramColumns::take(&mut rest, marked.len())?
    } else {
        HistogramColumns {
            scales: take_column(&mut rest, "histogram scale")?,
            thresholds: take_column(&mut rest, "histogram zero threshold")?,
            zero_counts: take_column(&mut rest, "histogram zero count")?,
            lengths: take_column(&mut rest, "histogram length")?,
            firsts: take_column(&mut rest, "histogram first index")?,
            gaps: take_column(&mut rest, "histogram gap")?,
            counts: take_column(&mut rest, "histogram count")?,
        }
    };
    if !rest.is_empty() {
        return Err(format!("{} bytes after the histogram columns", rest.len()));
    }
    let histograms = columns.histograms(marked.len(), |k| marked[k])?;
    for (i, histogram) in marked.into_iter().zip(histograms) {
        out[i] = Some(histogram);
    }
    Ok(out)
}

/// The latest section at the start of `rest` (see the layout above) of a slot whose kept
/// buckets are `kept`, with its counts and totals: per kept bucket, its latest sample's
/// offset and value, when known.
fn take_latest(
    rest: &mut &[u8],
    kept: &[usize],
    counts: &[u64],
    totals: &[f64],
    last_chunk: Option<pco::wrapped::ChunkDecompressor<f64>>,
) -> std::result::Result<Vec<Option<(u64, f64)>>, String> {
    let mut out = vec![None; kept.len()];
    let Some((&form, tail)) = rest.split_first() else {
        return Err("latest section cut short".into());
    };
    *rest = tail;
    let known: Vec<usize> = match form {
        LATEST_NONE => return Ok(out),
        LATEST_EVERY => (0..kept.len()).collect(),
        LATEST_MARKED => {
            let len = kept.len().div_ceil(8);
            if rest.len() < len {
                return Err("latest bitmap cut short".into());
            }
            let (bitmap, tail) = rest.split_at(len);
            *rest = tail;
            let bit = |k: usize| bitmap[k / 8] & (1 << (k % 8)) != 0;
            if (kept.len()..len * 8).any(bit) {
                return Err("latest bitmap marks a bucket past the kept ones".into());
            }
            let known: Vec<usize> = (0..kept.len()).filter(|&k| bit(k)).collect();
            if known.is_empty() {
                return Err("latest bitmap marks no bucket".into());
            }
            known
        }
        other => return Err(format!("latest section of unknown form {other}")),
    };
    let Some((&values_form, tail)) = rest.split_first() else {
        return Err("latest section cut short".into());
    };
    *rest = tail;
    let singles_implied = match values_form {
        SINGLES_IMPLIED => true,
        SINGLES_STORED => false,
        other => return Err(format!("latest values of unknown form {other}")),
    };
    let (offsets, values): (Vec<u64>, Vec<f64>) = match last_chunk {
        None => (
            take_column(rest, "latest offset")?,
            take_optional_column(rest, "latest value")?,
        ),
        Some(mut chunk) => {
            let offsets = columns::take_column(rest, known.len(), "latest offset")?;
            let stored = known
                .iter()
                .filter(|&&k| !(singles_implied && counts[kept[k]] == 1))
                .count();
            let values = if stored == 0 {
                Vec::new()
            } else {
                columns::take_page(&mut chunk, rest, stored, "latest value")?
            };
            (offsets, values)
        }
    };
    if offsets.len() != known.len() {
        return Err(format!(
            "{} latest offsets for {} known latest samples",
            offsets.len(),
            known.len()
        ));
    }
    let mut values = values.into_iter();
    for (&k, offset) in known.iter().zip(offsets) {
        let value = if singles_implied && counts[kept[k]] == 1 {
            totals[k]
        } else {
            values
                .next()
                .ok_or("latest value column holds too few values")?
        };
        out[k] = Some((offset, value));
    }
    if values.next().is_some() {
        return Err("latest value column holds values past the last".into());
    }
    Ok(out)
}

/// [`take_column`], a length of 0 with no data reading as an empty column.
fn take_optional_column<T: pco::data_types::Number>(
    rest: &mut &[u8],
    what: &str,
) -> std::result::Result<Vec<T>, String> {
    if rest.get(..4) == Some(&[0, 0, 0, 0]) {
        *rest = &rest[4..];
        return Ok(Vec::new());
    }
    take_column(rest, what)
}

/// A list of bucket indices: a `u32` length, at most `buckets`, then that many `u32`s.
fn take_list(rest: &mut &[u8], buckets: u32, what: &str) -> std::result::Result<Vec<u32>, String> {
    let len = take_u32(rest, what)? as usize;
    if len > buckets as usize {
        return Err(format!("{len} {what} buckets in {buckets}"));
    }
    if rest.len() < 4 * len {
        return Err(format!("{what} list cut short"));
    }
    let (list, tail) = rest.split_at(4 * len);
    *rest = tail;
    Ok((0..len).map(|k| get_u32(list, 4 * k)).collect())
}

fn take_u32(rest: &mut &[u8], what: &str) -> std::result::Result<u32, String> {
    if rest.len() < 4 {
        return Err(format!("{what} cut short"));
    }
    let v = get_u32(rest, 0);
    *rest = &rest[4..];
    Ok(v)
}

fn take_column<T: pco::data_types::Number>(
    rest: &mut &[u8],
    what: &str,
) -> std::result::Result<Vec<T>, String> {
    let len = take_u32(rest, what)? as usize;
    if rest.len() < len {
        return Err(format!("{what} column cut short"));
    }
    let (column, tail) = rest.split_at(len);
    *rest = tail;
    pco::standalone::simple_decompress(column).map_err(|e| format!("{what} column: {e}"))
}

/// The meta a header records, or `None` for a tier name that is too long or not UTF-8.
fn decode_meta(head: &[u8]) -> Option<PeriodMeta> {
    let name_len = get_u32(head, TIER_NAME_LEN_OFFSET) as usize;
    if name_len > TIER_NAME_MAX {
        return None;
    }
    let tier = std::str::from_utf8(&head[TIER_NAME_OFFSET..TIER_NAME_OFFSET + name_len]).ok()?;
    let resolution = crate::time::Span::from_secs(get_u64(head, RESOLUTION_OFFSET));
    Some(PeriodMeta {
        tier: tier.to_string(),
        resolution,
        period: crate::time::Span::from_secs(get_u64(head, PERIOD_OFFSET)),
        period_start: get_u64(head, PERIOD_START_OFFSET) as i64,
        slots: get_u32(head, SLOTS_OFFSET),
        chunk: get_u32(head, CHUNK_OFFSET),
        // A compacted file has no cells; made hot again, it takes these.
        histogram_cells: super::format::CellLayout::made_hot_again(resolution),
    })
}

/// One line naming a meta's fields, for the mismatch message.
fn describe(meta: &PeriodMeta, buckets: u32) -> String {
    format!(
        "tier {:?}, resolution {}s, period {}s, start {}, {buckets} buckets, {} slots, chunk {}",
        meta.tier,
        meta.resolution.secs(),
        meta.period.secs(),
        meta.period_start,
        meta.slots,
        meta.chunk
    )
}

/// Slot `slot`'s index entry in `head` (header and index).
impl CompactReader {
    /// The file read.
    pub fn file(&self) -> &CompactFile {
        &self.compact
    }

    /// Reads buckets `buckets` (a range within `0..meta.buckets()`) of `slot` into `out`,
    /// empty buckets as [`Bucket::EMPTY`]: one pread of the slot's data (none for a slot
    /// with no data), which is checked and decoded whole.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file for an index entry outside the data, a data
    /// CRC mismatch, truncation, or slot data that does not decode; [`Error::Io`] naming it.
    ///
    /// # Panics
    /// When `slot` or `buckets` lie outside the period, or `out.len() != buckets.len()`.
    pub fn read_slot(&self, slot: u32, buckets: Range<u32>, out: &mut [Bucket]) -> Result<()> {
        self.read_slot_taking(slot, buckets, Latest::Read, out)
    }

    /// [`CompactReader::read_slot`], taking the buckets' latest samples or not (then
    /// unknown, and their section not decoded).
    ///
    /// # Errors
    /// As [`CompactReader::read_slot`].
    ///
    /// # Panics
    /// As [`CompactReader::read_slot`].
    pub(crate) fn read_slot_taking(
        &self,
        slot: u32,
        buckets: Range<u32>,
        latest: Latest,
        out: &mut [Bucket],
    ) -> Result<()> {
        assert_eq!(out.len(), buckets.len(), "output length");
        match self.read_decoded(slot, &buckets, latest, false)? {
            None => out.fill(Bucket::EMPTY),
            Some(all) => {
                out.copy_from_slice(&all.buckets[buckets.start as usize..buckets.end as usize])
            }
        }
        Ok(())
    }

    /// Buckets `buckets` of `slot`, as [`CompactReader::read_slot`] reads them, each with its
    /// histogram (`None` for a bucket without one, and for every bucket of a file of format
    /// version 1 or 2): a distribution series' read. The histogram section is checked whole.
    ///
    /// # Errors
    /// As [`CompactReader::read_slot`], and a histogram section that does not decode.
    ///
    /// # Panics
    /// When `slot` or `buckets` lie outside the period.
    pub fn read_slot_distributions(&self, slot: u32, buckets: Range<u32>) -> Result<Vec<Loaded>> {
        let range = buckets.start as usize..buckets.end as usize;
        Ok(
            match self.read_decoded(slot, &buckets, Latest::Read, true)? {
                None => vec![(Bucket::EMPTY, None); range.len()],
                Some(mut all) => all.buckets[range.clone()]
                    .iter()
                    .copied()
                    .zip(all.histograms.drain(range))
                    .collect(),
            },
        )
    }

    /// The whole of `slot`, read with one pread and decoded (with its histograms when
    /// `histograms` is set); `None` for a slot with no data.
    fn read_decoded(
        &self,
        slot: u32,
        buckets: &Range<u32>,
        latest: Latest,
        histograms: bool,
    ) -> Result<Option<Slot>> {
        let compact = &self.compact;
        assert!(slot < compact.meta.slots, "slot {slot} out of range");
        assert!(
            buckets.start <= buckets.end && buckets.end <= compact.meta.buckets(),
            "buckets {buckets:?} out of range"
        );
        let entry = entry(&self.head, slot);
        if entry.len == 0 {
            return Ok(None);
        }
        let data_start = compact.head_len() as u64;
        let end = entry.offset.checked_add(u64::from(entry.len));
        if entry.offset < data_start
            || end.is_none_or(|end| end > data_start + self.data_len)
            || u64::from(entry.len) > max_slot_len(compact.meta.buckets())
        {
            return Err(compact.corrupt(format!(
                "index entry of slot {slot} points outside the data ({} + {})",
                entry.offset, entry.len
            )));
        }
        let mut data = vec![0u8; entry.len as usize];
        compact.read_at(&self.file, &mut data, entry.offset)?;
        compact
            .decode_slot(slot, entry, &data, self.version, latest, histograms)
            .map(Some)
    }
}

fn entry(head: &[u8], slot: u32) -> Entry {
    let at = HEADER_LEN + slot as usize * ENTRY_LEN;
    Entry {
        offset: get_u64(head, at + ENTRY_DATA_OFFSET),
        len: get_u32(head, at + ENTRY_DATA_LEN),
        crc: get_u32(head, at + ENTRY_CRC),
    }
}
