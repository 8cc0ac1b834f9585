//! The period file's byte layout: header encoding, validation, record placement and file names.
//! Mirrored in `docs/file-format.md`.
//!
//! ```text
//! header (HEADER_LEN = 4096 bytes, little-endian; the rest of the 4096 is zero)
//!   MAGIC_OFFSET          0  [u8; 8]  b"TIERDBPF"
//!   VERSION_OFFSET        8  u32      FORMAT_VERSION
//!   HEADER_LEN_OFFSET    12  u32      4096
//!   RECORD_SIZE_OFFSET   16  u32      RECORD_SIZE (32)
//!   BLOCK_OFFSET         20  u32      BUCKET_BLOCK (buckets per series run)
//!   RESOLUTION_OFFSET    24  u64      bucket width, seconds
//!   PERIOD_OFFSET        32  u64      time one file covers, seconds
//!   PERIOD_START_OFFSET  40  i64      unix seconds, a period start of the tier's layout
//!   BUCKETS_OFFSET       48  u32      buckets per period (period / resolution)
//!   CHUNK_SLOTS_OFFSET   52  u32      series slots in this file (series_per_chunk)
//!   CHUNK_OFFSET         56  u32      chunk number: slots hold series ids chunk*slots ..
//!   TIER_NAME_LEN_OFFSET 60  u32      length of the tier name
//!   TIER_NAME_OFFSET     64  [u8; 32] tier name, zero padded
//!   CHECKSUM_OFFSET      96  u32      crc32 of bytes 0..96 and 100..104
//!   HISTOGRAM_CELL_OFFSET 100 u32     bytes of one histogram cell (version 2)
//! records (from byte 4096): blocks of BUCKET_BLOCK buckets; inside a block, one run of
//!   BUCKET_BLOCK consecutive buckets per series slot. Record i of (bucket, slot) is
//!   (bucket / BLOCK) * slots * BLOCK + slot * BLOCK + bucket % BLOCK, 32 bytes each:
//!   count u64 (top bit: update in flight), total f64, min f64, max f64.
//! latest (version 3; from the first page boundary at or after the records): one 16-byte
//!   entry per record, in the records' order (LATEST_SIZE): last f64 (the value of the
//!   bucket's latest sample), last_at u64 (LAST_KNOWN | seconds from the bucket's start to
//!   that sample; 0: unknown). Stored and read under the record's seqlock. Versions 1 and 2
//!   have no latest area (every latest sample unknown).
//! histograms (from the first page boundary at or after the records' end, or the latest
//!   area's in version 3, to the end of the
//!   file): one cell per record, in the records' order, histogram_cell_len() bytes each
//!   (the header's; a new file takes 192 below an hour's resolution, 1024 from an hour up;
//!   version 1 files hold 256 and 1024 by the same rule). Version 2 interleaves the 16
//!   cells of a run word by word (word j of the run's b-th cell is the run's word 16 j + b);
//!   in version 1 each cell is whole. A cell's words in order: u16 length, then that many
//!   bytes of crate::histogram's encoding; all zero for a bucket without one. Sparse: only
//!   distribution series write there. A file that ends with its records (one an older build
//!   made) is extended by a writable open, any other shorter one refused as truncated; an
//!   older build reads the records and ignores the rest.
//! ```
//! The blocked layout keeps both sides local: a one-series read of a day walks 90 runs of 512
//! contiguous bytes, while the writes of one instant across all series stay within one block.

use std::path::Path;

use chrono::{DateTime, NaiveDateTime};

use crate::config::TIER_NAME_MAX;
use crate::error::Error;
use crate::error::Result;
use crate::time::{Span, Timestamp};

/// Size of one bucket record: four little-endian 8-byte words (count, total, min, max), so
/// a run of 16 is 512 bytes and a page holds 8 slots' runs.
pub const RECORD_SIZE: usize = 32;
/// Size of one entry of a version 3 file's latest area: a record's latest sample (value and
/// time). Apart from the records, so a record stays 32 bytes (two to a cache line, 8 runs to
/// a page), and the 16 bytes are paid only where a page of them is written.
pub const LATEST_SIZE: usize = 16;
/// The unit a histogram cell's length is a multiple of: the record, as areas map in 32-byte
/// units.
pub(crate) const HISTOGRAM_UNIT: usize = RECORD_SIZE;

/// File magic: "tierdb period file".
pub(crate) const MAGIC: [u8; 8] = *b"TIERDBPF";
/// Bumped on any incompatible change; files of another version are refused, but for
/// [`OLDEST_READ_VERSION`] on.
pub(crate) const FORMAT_VERSION: u32 = 3;
/// The newest version without the latest area; a file of it is still written in its own
/// layout, its latest samples unknown.
pub(crate) const NO_LATEST_VERSION: u32 = 2;
/// The oldest version read: version 1 has no cell length in its header; its cells are
/// [`CellLayout::version_1`]'s.
const OLDEST_READ_VERSION: u32 = 1;
/// Header size: one page, so the records start page-aligned.
pub const HEADER_LEN: usize = 4096;
/// Buckets per contiguous per-series run.
pub(crate) const BUCKET_BLOCK: u32 = 16;
/// Series slots a batch gives to one writer thread together (`engine::writer::writer_of`):
/// those whose runs share one 4 KiB page of a block (8: a run is 512 bytes), so every page
/// of records has one writer. A page of the latest area holds two such groups' runs, each
/// in its own half (cache lines are never shared).
pub(crate) const SLOTS_PER_PAGE: u32 = PAGE_LEN as u32 / (BUCKET_BLOCK * RECORD_SIZE as u32);
/// The unit disk space is reserved in: a hot file's record area is sparse, and a page is
/// reserved (`fallocate`) before the first store into it (see `PeriodFile::reserve`).
pub(crate) const PAGE_LEN: usize = 4096;
/// The largest histogram cell a header may name (`histogram_cell::MAX_WORDS` words).
pub(crate) const MAX_HISTOGRAM_CELL: usize = 1024;
const _: () = assert!(PAGE_LEN.is_multiple_of(BUCKET_BLOCK as usize * RECORD_SIZE));
const _: () = assert!(PAGE_LEN.is_multiple_of(BUCKET_BLOCK as usize * LATEST_SIZE));

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const HEADER_LEN_OFFSET: usize = VERSION_OFFSET + 4;
const RECORD_SIZE_OFFSET: usize = HEADER_LEN_OFFSET + 4;
const BLOCK_OFFSET: usize = RECORD_SIZE_OFFSET + 4;
const RESOLUTION_OFFSET: usize = BLOCK_OFFSET + 4;
const PERIOD_OFFSET: usize = RESOLUTION_OFFSET + 8;
const PERIOD_START_OFFSET: usize = PERIOD_OFFSET + 8;
const BUCKETS_OFFSET: usize = PERIOD_START_OFFSET + 8;
const CHUNK_SLOTS_OFFSET: usize = BUCKETS_OFFSET + 4;
const CHUNK_OFFSET: usize = CHUNK_SLOTS_OFFSET + 4;
const TIER_NAME_LEN_OFFSET: usize = CHUNK_OFFSET + 4;
const TIER_NAME_OFFSET: usize = TIER_NAME_LEN_OFFSET + 4;
const CHECKSUM_OFFSET: usize = TIER_NAME_OFFSET + TIER_NAME_MAX;
const CHECKED_LEN: usize = CHECKSUM_OFFSET;
const HISTOGRAM_CELL_OFFSET: usize = CHECKSUM_OFFSET + 4;

/// The header's checksum: of the bytes before it, and from version 2 of the cell length
/// after it.
fn header_checksum(h: &[u8], version: u32) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&h[..CHECKED_LEN]);
    if version >= 2 {
        hasher.update(&h[HISTOGRAM_CELL_OFFSET..HISTOGRAM_CELL_OFFSET + 4]);
    }
    hasher.finalize()
}

/// What a period file holds; everything its header records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeriodMeta {
    /// Name of the tier the file belongs to.
    pub tier: String,
    /// Bucket width.
    pub resolution: Span,
    /// Time the file covers.
    pub period: Span,
    /// First second the file covers.
    pub period_start: Timestamp,
    /// Series slots in the file.
    pub slots: u32,
    /// Which run of series ids the slots hold.
    pub chunk: u32,
    /// Its histogram cells: [`CellLayout::new_file`] for a new file, the header's for an
    /// existing one.
    pub histogram_cells: CellLayout,
}

/// How a period file's records and histogram cells lie (see the layout above): what its
/// format version decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellLayout {
    /// Whether the file has the latest area, each bucket's latest sample (version 3 on).
    pub latest: bool,
    /// Bytes of one histogram cell: a multiple of [`HISTOGRAM_UNIT`], the unit the area
    /// maps in.
    pub bytes: u32,
    /// Whether the 16 cells of a run (one slot's buckets of a block) are interleaved word
    /// by word, word `j` of the run's `b`-th cell being the run's word `16 j + b`
    /// (version 2), or each whole in one place (version 1). Interleaved, the first words of
    /// a run's cells (each one's length and the start of its histogram) share two cache
    /// lines, and a read of small histograms touches a few lines a run instead of one a
    /// bucket.
    pub interleaved: bool,
}

impl CellLayout {
    /// A new file's: 192-byte cells for tiers finer than an hour, so a bucket and its
    /// histogram take 224 bytes (a minute of a timer's samples populates a few dozen of the
    /// histogram's buckets, some 60 bytes packed, and a cell holds about 180 buckets of one
    /// sample each), 1024 from an hour up (few buckets per period, each of many samples);
    /// interleaved.
    pub fn new_file(resolution: Span) -> CellLayout {
        CellLayout {
            latest: true,
            bytes: if resolution.secs() < 3600 { 192 } else { 1024 },
            interleaved: true,
        }
    }

    /// A version 1 file's, which its header does not record: 256 bytes below an hour, 1024
    /// from an hour up, each cell whole.
    pub fn version_1(resolution: Span) -> CellLayout {
        CellLayout {
            latest: false,
            bytes: if resolution.secs() < 3600 { 256 } else { 1024 },
            interleaved: false,
        }
    }

    /// A compacted period's made hot again: version 1's cell sizes, which hold every
    /// histogram a hot file of any version held, interleaved, in the records of a new file.
    pub fn made_hot_again(resolution: Span) -> CellLayout {
        CellLayout {
            latest: true,
            interleaved: true,
            ..CellLayout::version_1(resolution)
        }
    }

    /// A version 2 file's: a new file's cells without the latest area (only tests make
    /// one, as the build before version 3 did).
    pub fn version_2(resolution: Span) -> CellLayout {
        CellLayout {
            latest: false,
            ..CellLayout::new_file(resolution)
        }
    }

    /// The format version a file of this layout carries.
    fn version(&self) -> u32 {
        match (self.interleaved, self.latest) {
            (false, _) => 1,
            (true, false) => NO_LATEST_VERSION,
            (true, true) => FORMAT_VERSION,
        }
    }
}

impl PeriodMeta {
    /// Buckets in the period.
    pub fn buckets(&self) -> u32 {
        (self.period.secs() / self.resolution.secs()) as u32
    }

    /// Records in the file: buckets rounded up to whole blocks, times slots.
    pub fn cells(&self) -> usize {
        let blocks = self.buckets().div_ceil(BUCKET_BLOCK) as usize;
        blocks * BUCKET_BLOCK as usize * self.slots as usize
    }

    /// Whether the file keeps each bucket's latest sample (its latest area).
    pub fn keeps_last(&self) -> bool {
        self.histogram_cells.latest
    }

    /// Pages of the records.
    pub(crate) fn record_pages(&self) -> usize {
        (self.cells() * RECORD_SIZE).div_ceil(PAGE_LEN)
    }

    /// Pages of the latest area (none in a version 1 or 2 file).
    pub(crate) fn latest_pages(&self) -> usize {
        match self.keeps_last() {
            true => (self.cells() * LATEST_SIZE).div_ceil(PAGE_LEN),
            false => 0,
        }
    }

    /// Pages of the records and the latest area, counted from the header's end: the unit
    /// space is reserved in. The latest area's pages follow the records'.
    pub(crate) fn pages(&self) -> usize {
        self.record_pages() + self.latest_pages()
    }

    /// The page holding record `index`.
    pub(crate) fn page_of(&self, index: usize) -> usize {
        index * RECORD_SIZE / PAGE_LEN
    }

    /// The pages of the latest area that hold the entries of the records of pages
    /// `first..first + n` (`(first, n)` as well; none in a file without the area): a page
    /// of entries holds two pages' records.
    pub(crate) fn latest_pages_of(&self, first: usize, n: usize) -> Option<(usize, usize)> {
        const PER: usize = RECORD_SIZE / LATEST_SIZE;
        (self.keeps_last() && n > 0).then(|| {
            let (from, to) = (first / PER, (first + n - 1) / PER);
            (self.record_pages() + from, to + 1 - from)
        })
    }

    /// Pages one block of buckets spans in the records: one per page's worth of slots'
    /// runs.
    pub(crate) fn pages_per_block(&self) -> usize {
        self.slots.div_ceil(SLOTS_PER_PAGE) as usize
    }

    /// Where the latest area's entry of record `index` lies in the file (version 3).
    pub fn latest_offset(&self, index: usize) -> u64 {
        (HEADER_LEN + self.record_pages() * PAGE_LEN + index * LATEST_SIZE) as u64
    }

    /// The first second of bucket `bucket`.
    #[inline(always)]
    pub fn bucket_start(&self, bucket: u32) -> Timestamp {
        self.period_start + i64::from(bucket) * self.resolution.secs() as Timestamp
    }

    /// The bucket record `index` holds (see [`cell_index`]).
    pub(crate) fn bucket_of(&self, index: usize) -> u32 {
        let block = BUCKET_BLOCK as usize;
        ((index / (self.slots as usize * block)) * block + index % block) as u32
    }

    /// Whole file length without the histogram area: the records, then (version 3) the
    /// latest area from the next page boundary.
    pub fn file_len(&self) -> u64 {
        match self.keeps_last() {
            true => self.latest_offset(self.cells()),
            false => (HEADER_LEN + self.cells() * RECORD_SIZE) as u64,
        }
    }

    /// Bytes of one histogram cell.
    pub fn histogram_cell_len(&self) -> usize {
        self.histogram_cells.bytes as usize
    }

    /// The same file's place (tier, period, chunk and slots) with `cells`.
    pub(crate) fn with_cells(&self, cells: CellLayout) -> PeriodMeta {
        PeriodMeta {
            histogram_cells: cells,
            ..self.clone()
        }
    }

    /// Whether `other` describes the same file, whatever either's cells: the configuration
    /// names a file by tier, period and chunk, and its header says its cells.
    pub(crate) fn same_place(&self, other: &PeriodMeta) -> bool {
        *self == other.with_cells(self.histogram_cells)
    }

    /// Where the histogram area starts: the first page boundary at or after the records
    /// (version 3: the latest area).
    pub fn histogram_offset(&self) -> u64 {
        self.file_len().next_multiple_of(PAGE_LEN as u64)
    }

    /// Pages of the histogram area.
    pub(crate) fn histogram_pages(&self) -> usize {
        (self.cells() * self.histogram_cell_len()).div_ceil(PAGE_LEN)
    }

    /// Whole file length with the histogram area.
    pub(crate) fn file_len_with_histograms(&self) -> u64 {
        self.histogram_offset() + (self.histogram_pages() * PAGE_LEN) as u64
    }

    /// The header bytes for this file: version 3, or the older version its layout is (as
    /// an older build wrote it: version 1 has no cell length; only tests make such files).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let version = self.histogram_cells.version();
        let mut h = [0u8; HEADER_LEN];
        h[MAGIC_OFFSET..MAGIC_OFFSET + 8].copy_from_slice(&MAGIC);
        put_u32(&mut h, VERSION_OFFSET, version);
        put_u32(&mut h, HEADER_LEN_OFFSET, HEADER_LEN as u32);
        put_u32(&mut h, RECORD_SIZE_OFFSET, RECORD_SIZE as u32);
        put_u32(&mut h, BLOCK_OFFSET, BUCKET_BLOCK);
        put_u64(&mut h, RESOLUTION_OFFSET, self.resolution.secs());
        put_u64(&mut h, PERIOD_OFFSET, self.period.secs());
        put_u64(&mut h, PERIOD_START_OFFSET, self.period_start as u64);
        put_u32(&mut h, BUCKETS_OFFSET, self.buckets());
        put_u32(&mut h, CHUNK_SLOTS_OFFSET, self.slots);
        put_u32(&mut h, CHUNK_OFFSET, self.chunk);
        let name = self.tier.as_bytes();
        let name_len = name.len().min(TIER_NAME_MAX);
        put_u32(&mut h, TIER_NAME_LEN_OFFSET, name_len as u32);
        h[TIER_NAME_OFFSET..TIER_NAME_OFFSET + name_len].copy_from_slice(&name[..name_len]);
        if version >= 2 {
            put_u32(&mut h, HISTOGRAM_CELL_OFFSET, self.histogram_cells.bytes);
        }
        let crc = header_checksum(&h, version);
        put_u32(&mut h, CHECKSUM_OFFSET, crc);
        h
    }

    /// Decodes and checks a header read from `path`.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming `path` for a short header, a foreign magic, a format
    /// version this build does not read, a checksum mismatch or an impossible layout.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<PeriodMeta> {
        if bytes.len() < HEADER_LEN {
            return Err(Error::corrupt(
                path,
                format!(
                    "truncated header: {} bytes, expected {HEADER_LEN}",
                    bytes.len()
                ),
            ));
        }
        if bytes[MAGIC_OFFSET..MAGIC_OFFSET + 8] != MAGIC {
            return Err(Error::corrupt(path, "not a tierdb period file (bad magic)"));
        }
        let version = get_u32(bytes, VERSION_OFFSET);
        if !(OLDEST_READ_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Error::corrupt(
                path,
                format!(
                    "format version {version}, this build reads versions \
                     {OLDEST_READ_VERSION} to {FORMAT_VERSION}"
                ),
            ));
        }
        let stored = get_u32(bytes, CHECKSUM_OFFSET);
        let computed = header_checksum(bytes, version);
        if stored != computed {
            return Err(Error::corrupt(
                path,
                format!(
                    "header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
                ),
            ));
        }
        let fixed = [
            (HEADER_LEN_OFFSET, HEADER_LEN as u32, "header length"),
            (RECORD_SIZE_OFFSET, RECORD_SIZE as u32, "record size"),
            (BLOCK_OFFSET, BUCKET_BLOCK, "bucket block"),
        ];
        for (offset, expected, what) in fixed {
            let found = get_u32(bytes, offset);
            if found != expected {
                return Err(Error::corrupt(
                    path,
                    format!("{what} {found}, expected {expected}"),
                ));
            }
        }
        let name_len = get_u32(bytes, TIER_NAME_LEN_OFFSET) as usize;
        if name_len > TIER_NAME_MAX {
            return Err(Error::corrupt(path, "tier name length out of range"));
        }
        let tier = std::str::from_utf8(&bytes[TIER_NAME_OFFSET..TIER_NAME_OFFSET + name_len])
            .map_err(|_| Error::corrupt(path, "tier name is not UTF-8"))?
            .to_string();
        let resolution = Span::from_secs(get_u64(bytes, RESOLUTION_OFFSET));
        let meta = PeriodMeta {
            tier,
            resolution,
            period: Span::from_secs(get_u64(bytes, PERIOD_OFFSET)),
            period_start: get_u64(bytes, PERIOD_START_OFFSET) as i64,
            slots: get_u32(bytes, CHUNK_SLOTS_OFFSET),
            chunk: get_u32(bytes, CHUNK_OFFSET),
            histogram_cells: match version {
                1 => CellLayout::version_1(resolution),
                _ => CellLayout {
                    latest: version >= FORMAT_VERSION,
                    bytes: get_u32(bytes, HISTOGRAM_CELL_OFFSET),
                    interleaved: true,
                },
            },
        };
        let cell = meta.histogram_cell_len();
        if cell == 0 || !cell.is_multiple_of(HISTOGRAM_UNIT) || cell > MAX_HISTOGRAM_CELL {
            return Err(Error::corrupt(
                path,
                format!(
                    "histogram cell of {cell} bytes: not a multiple of {HISTOGRAM_UNIT} from \
                     {HISTOGRAM_UNIT} to {MAX_HISTOGRAM_CELL}"
                ),
            ));
        }
        let (res, period) = (meta.resolution.secs(), meta.period.secs());
        if res == 0 || period == 0 || period % res != 0 || meta.slots == 0 {
            return Err(Error::corrupt(
                path,
                format!(
                    "impossible layout: resolution {res}s, period {period}s, {} slots",
                    meta.slots
                ),
            ));
        }
        if meta.buckets() != get_u32(bytes, BUCKETS_OFFSET) {
            return Err(Error::corrupt(
                path,
                "bucket count disagrees with period/resolution",
            ));
        }
        // On the resolution's grid, not necessarily the period's: files after a period change
        // start on a grid anchored at its boundary (docs/file-format.md, "Period changes").
        // The open compares the start with the one the tier's layout expects.
        if meta.period_start.rem_euclid(res as i64) != 0 {
            return Err(Error::corrupt(
                path,
                "period start is not aligned to the resolution",
            ));
        }
        Ok(meta)
    }

    /// The file name: period start in UTC and chunk, so a directory listing reads as a calendar.
    pub fn file_name(&self) -> String {
        file_name(self.period_start, self.chunk)
    }
}

/// Index of the record for `bucket` of slot `slot` (see the layout above).
#[inline]
pub fn cell_index(bucket: u32, slot: u32, slots: u32) -> usize {
    let block = (bucket / BUCKET_BLOCK) as usize;
    block * (slots as usize * BUCKET_BLOCK as usize)
        + slot as usize * BUCKET_BLOCK as usize
        + (bucket % BUCKET_BLOCK) as usize
}

const NAME_TIME_FORMAT: &str = "%Y%m%dT%H%M%SZ";
/// Period files end in this.
pub(crate) const FILE_SUFFIX: &str = ".tdb";
/// A file being created carries this suffix until it is complete and renamed.
pub(crate) const TEMP_SUFFIX: &str = ".tmp";

/// `20261121T000000Z-c00000.tdb` for the period starting 2026-11-21 00:00 UTC, chunk 0.
pub fn file_name(period_start: Timestamp, chunk: u32) -> String {
    let time = DateTime::from_timestamp(period_start, 0)
        .map(|t| t.format(NAME_TIME_FORMAT).to_string())
        .unwrap_or_else(|| format!("{period_start}"));
    format!("{time}-c{chunk:05}{FILE_SUFFIX}")
}

/// The (period start, chunk) a file name stands for, or `None` for names tierdb did not write.
pub fn parse_file_name(name: &str) -> Option<(Timestamp, u32)> {
    let stem = name.strip_suffix(FILE_SUFFIX)?;
    let (time, chunk) = stem.split_once("-c")?;
    let chunk = chunk.parse().ok()?;
    let time = NaiveDateTime::parse_from_str(time, NAME_TIME_FORMAT).ok()?;
    Some((time.and_utc().timestamp(), chunk))
}

pub(super) fn put_u32(h: &mut [u8], offset: usize, v: u32) {
    h[offset..offset + 4].copy_from_slice(&v.to_le_bytes());
}

pub(super) fn put_u64(h: &mut [u8], offset: usize, v: u64) {
    h[offset..offset + 8].copy_from_slice(&v.to_le_bytes());
}

pub(super) fn get_u32(h: &[u8], offset: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&h[offset..offset + 4]);
    u32::from_le_bytes(b)
}

pub(super) fn get_u64(h: &[u8], offset: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[offset..offset + 8]);
    u64::from_le_bytes(b)
}
