//! One raw segment file: a 4096-byte header, then [`SEGMENTS_PER_FILE`] segments of 4096
//! bytes, each holding up to [`SEGMENT_POINTS`] exact points of one series (the seed's
//! "value segments", page-sized so a segment's header and points share one page).
//!
//! File layout (little-endian; mirrored in docs/file-format.md):
//! ```text
//! header   0..20    the record-file frame: magic "TIERDBRW", version, record size 4096, crc32
//!         24..32    PERIOD        u64 seconds one period covers
//!         32..40    PERIOD_START  i64 unix seconds, a multiple of the period
//!         40..44    SEGMENTS      u32 segments in the file (SEGMENTS_PER_FILE)
//!         44..48    NUMBER        u32 the file's number within its period (name "-s<N>")
//!         48..52    CRC           crc32 of bytes 24..48
//! segment k at 4096 + 4096 k, as 512 u64 words:
//!   word 0        OWNER       series id + 1; 0 = never claimed
//!   word 1        LEN         points published, 0..=252
//!   word 2        PREV_END    i64: last time of the series' previous segment, i64::MIN if none
//!   word 3        NEXT_START  i64: first time of its next segment, i64::MAX until there is one
//!   words 4..8    zero
//!   words 8..260  TIMES       i64 unix seconds, ascending
//!   words 260..512 VALUES     f64 bits
//! ```
//!
//! A point becomes visible only through `LEN`: the writer stores its time and value, then
//! `LEN + 1` with Release; a reader loads `LEN` (Relaxed, then an Acquire fence: the one
//! atomic access a read-only mapping allows) and reads only the points below it, which are
//! never written again (but for a cluster partition's roll-back at open, before anything
//! reads: [`Segment::truncate`]). So a crash mid-append leaves the point unpublished, never
//! torn.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};

use super::super::mmap::MappedCells;
use super::super::record_file::{Frame, HEADER_SIZE};
use crate::error::Error;
use crate::error::Result;
use crate::time::{Span, Timestamp};

/// Bytes per segment: one page.
pub(crate) const SEGMENT_SIZE: usize = 4096;
/// Words of a segment's header.
const HEADER_WORDS: usize = 8;
/// Points one segment holds: (4096 - 64) / 16.
pub const SEGMENT_POINTS: usize = (SEGMENT_SIZE / 8 - HEADER_WORDS) / 2;
/// Segments per file: 1 MiB of segments, so a file is preallocated in one step and a period
/// that needs more gets more files rather than a grown one.
pub(crate) const SEGMENTS_PER_FILE: u32 = 256;

const OWNER: usize = 0;
const LEN: usize = 1;
const PREV_END: usize = 2;
const NEXT_START: usize = 3;
const TIMES: usize = HEADER_WORDS;
const VALUES: usize = TIMES + SEGMENT_POINTS;
const WORDS: usize = SEGMENT_SIZE / 8;
const _: () = assert!(VALUES + SEGMENT_POINTS == WORDS);

/// The header fields after the frame's 20 bytes.
const PERIOD_OFFSET: usize = 24;
const PERIOD_START_OFFSET: usize = PERIOD_OFFSET + 8;
const SEGMENTS_OFFSET: usize = PERIOD_START_OFFSET + 8;
const NUMBER_OFFSET: usize = SEGMENTS_OFFSET + 4;
const CRC_OFFSET: usize = NUMBER_OFFSET + 4;

/// The frame raw files share with the other mapped files.
const FRAME: Frame = Frame {
    magic: b"TIERDBRW",
    version: 1,
    record_size: SEGMENT_SIZE as u32,
    what: "raw segment file",
};

/// Raw files end in this.
pub(crate) const RAW_SUFFIX: &str = ".tdr";

/// Bytes of one raw file: header and segments.
pub(crate) const FILE_LEN: u64 = HEADER_SIZE + SEGMENTS_PER_FILE as u64 * SEGMENT_SIZE as u64;

/// `20261121T000000Z-s00000.tdr`: the period start in UTC and the file's number.
pub fn file_name(period_start: Timestamp, number: u32) -> String {
    let stem = crate::storage::format::file_name(period_start, number);
    let time = stem.split_once("-c").map_or(stem.as_str(), |(t, _)| t);
    format!("{time}-s{number:05}{RAW_SUFFIX}")
}

/// The (period start, number) a raw file name stands for.
pub(crate) fn parse_file_name(name: &str) -> Option<(Timestamp, u32)> {
    let stem = name.strip_suffix(RAW_SUFFIX)?;
    let (time, number) = stem.split_once("-s")?;
    let as_period = format!("{time}-c{number}{}", crate::storage::format::FILE_SUFFIX);
    crate::storage::format::parse_file_name(&as_period)
}

fn header(period: Span, period_start: Timestamp, number: u32) -> Vec<u8> {
    let mut head = FRAME.header();
    head[PERIOD_OFFSET..PERIOD_OFFSET + 8].copy_from_slice(&period.secs().to_le_bytes());
    head[PERIOD_START_OFFSET..PERIOD_START_OFFSET + 8].copy_from_slice(&period_start.to_le_bytes());
    head[SEGMENTS_OFFSET..SEGMENTS_OFFSET + 4].copy_from_slice(&SEGMENTS_PER_FILE.to_le_bytes());
    head[NUMBER_OFFSET..NUMBER_OFFSET + 4].copy_from_slice(&number.to_le_bytes());
    let crc = crc32fast::hash(&head[PERIOD_OFFSET..CRC_OFFSET]);
    head[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    head
}

/// One mapped raw file.
pub(crate) struct RawFile {
    path: PathBuf,
    period_start: Timestamp,
    number: u32,
    map: MappedCells,
}

impl RawFile {
    /// Creates `dir/<name>` whole (temporary name, space reserved, synced, renamed, directory
    /// synced) and maps it.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file (ENOSPC included).
    pub(crate) fn create(
        dir: &Path,
        period: Span,
        period_start: Timestamp,
        number: u32,
    ) -> Result<RawFile> {
        let path = dir.join(file_name(period_start, number));
        FRAME.create_with(&path, FILE_LEN, &header(period, period_start, number))?;
        RawFile::open(&path, period, true)
    }

    /// Opens and maps an existing raw file, checking its header against its name and
    /// `period`.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file when its name, frame, header or length is not
    /// what this build writes for `period`; [`Error::Io`].
    pub(crate) fn open(path: &Path, period: Span, writable: bool) -> Result<RawFile> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let (period_start, number) = parse_file_name(name)
            .ok_or_else(|| Error::corrupt(path, "file name is not <start>-s<number>.tdr"))?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        let len = FRAME.check(&file, path)?;
        let mut head = [0u8; CRC_OFFSET + 4];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::corrupt(path, format!("truncated header ({e})")))?;
        if head[..] != header(period, period_start, number)[..CRC_OFFSET + 4] {
            return Err(Error::corrupt(
                path,
                format!(
                    "header does not describe a raw file of period {period} starting at \
                     {period_start}, number {number} with {SEGMENTS_PER_FILE} segments \
                     (the raw tier's period cannot change while files exist)"
                ),
            ));
        }
        if len != FILE_LEN {
            return Err(Error::corrupt(
                path,
                format!("{len} bytes, a raw file is {FILE_LEN}"),
            ));
        }
        let cells = SEGMENTS_PER_FILE as usize * SEGMENT_SIZE / 32;
        let map = MappedCells::map(&file, path, HEADER_SIZE, cells, writable)?;
        Ok(RawFile {
            path: path.to_path_buf(),
            period_start,
            number,
            map,
        })
    }

    /// Where the file is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The period it belongs to.
    pub(crate) fn period_start(&self) -> Timestamp {
        self.period_start
    }

    /// Its number within the period.
    pub(crate) fn number(&self) -> u32 {
        self.number
    }

    /// Segment `index` (< [`SEGMENTS_PER_FILE`]).
    #[inline]
    pub(crate) fn segment(&self, index: u32) -> Segment<'_> {
        let at = index as usize * WORDS;
        Segment(&self.map.words()[at..at + WORDS])
    }

    /// msync.
    pub(crate) fn flush(&self) -> std::io::Result<()> {
        self.map.flush()
    }
}

/// One segment's words.
#[derive(Clone, Copy)]
pub(crate) struct Segment<'a>(&'a [AtomicU64]);

impl Segment<'_> {
    /// The owning series id, `None` when never claimed.
    pub(crate) fn owner(&self) -> Option<u32> {
        let word = self.0[OWNER].load(Ordering::Relaxed);
        word.checked_sub(1).and_then(|id| u32::try_from(id).ok())
    }

    /// The raw owner word, for the open's checks.
    pub(crate) fn owner_word(&self) -> u64 {
        self.0[OWNER].load(Ordering::Relaxed)
    }

    /// Points published; everything below is readable and never changes again.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        let len = self.0[LEN].load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        len.min(SEGMENT_POINTS as u64) as usize
    }

    /// The `LEN` word as stored, for the open's checks.
    pub(crate) fn len_word(&self) -> u64 {
        self.0[LEN].load(Ordering::Relaxed)
    }

    /// True when no point is published.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The last time of the series' previous segment, `None` for its first segment.
    pub(crate) fn prev_end(&self) -> Option<Timestamp> {
        let t = self.0[PREV_END].load(Ordering::Relaxed) as i64;
        (t != i64::MIN).then_some(t)
    }

    /// The first time of the series' next segment, `None` while there is none.
    pub(crate) fn next_start(&self) -> Option<Timestamp> {
        let t = self.0[NEXT_START].load(Ordering::Relaxed) as i64;
        (t != i64::MAX).then_some(t)
    }

    /// Point `i` (below [`Segment::len`]).
    #[inline]
    pub(crate) fn point(&self, i: usize) -> (Timestamp, f64) {
        (
            self.0[TIMES + i].load(Ordering::Relaxed) as i64,
            f64::from_bits(self.0[VALUES + i].load(Ordering::Relaxed)),
        )
    }

    /// Time of point `i` (below [`Segment::len`]).
    #[inline]
    pub(crate) fn time(&self, i: usize) -> Timestamp {
        self.0[TIMES + i].load(Ordering::Relaxed) as i64
    }

    /// The first of the `len` published points at or after `ts`.
    pub(crate) fn first_at_or_after(&self, ts: Timestamp, len: usize) -> usize {
        let (mut lo, mut hi) = (0, len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.time(mid) < ts {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Claims the segment for `series`, after its previous segment ended at `prev_end`:
    /// the header is written before the owner, so the open never takes a half-claimed
    /// segment for a series' (its `LEN` is 0 either way). Writable mappings only.
    pub(crate) fn claim(&self, series: u32, prev_end: Option<Timestamp>) {
        self.0[LEN].store(0, Ordering::Relaxed);
        self.0[PREV_END].store(prev_end.unwrap_or(i64::MIN) as u64, Ordering::Relaxed);
        self.0[NEXT_START].store(i64::MAX as u64, Ordering::Relaxed);
        self.0[OWNER].store(u64::from(series) + 1, Ordering::Release);
    }

    /// Writes point `at` (the current `LEN`), then publishes it. Writable mappings only.
    #[inline]
    pub(crate) fn append(&self, at: usize, ts: Timestamp, value: f64) {
        self.0[TIMES + at].store(ts as u64, Ordering::Relaxed);
        self.0[VALUES + at].store(value.to_bits(), Ordering::Relaxed);
        self.0[LEN].store(at as u64 + 1, Ordering::Release);
    }

    /// The crash tests' fault hook: stores the point's time and value, then kills the
    /// process (SIGKILL, as `kill -9`) before `LEN` publishes it.
    pub(crate) fn append_and_die(&self, at: usize, ts: Timestamp, value: f64) -> ! {
        self.0[TIMES + at].store(ts as u64, Ordering::Relaxed);
        self.0[VALUES + at].store(value.to_bits(), Ordering::Relaxed);
        crate::fault::kill_self()
    }

    /// Gives up a segment whose owner the registry no longer knows (a registration lost in
    /// a crash), so the id, handed out again, does not inherit its points: `LEN` and then
    /// `OWNER` zeroed. Writable mappings only, before any writer starts.
    pub(crate) fn disown(&self) {
        self.0[LEN].store(0, Ordering::Relaxed);
        self.0[OWNER].store(0, Ordering::Release);
    }

    /// Takes the segment back to its first `len` points, the last of its series: `LEN`
    /// lowered, then `NEXT_START` unset. A cluster partition's roll-back of an unfinished
    /// group ([`super::RawStore::truncate_after`]). Writable mappings only, before any
    /// writer starts.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn truncate(&self, len: usize) {
        if (len as u64) < self.len_word() {
            self.0[LEN].store(len as u64, Ordering::Release);
        }
        self.0[NEXT_START].store(i64::MAX as u64, Ordering::Release);
    }

    /// Links the series' next segment. Writable mappings only.
    pub(crate) fn set_next_start(&self, ts: Timestamp) {
        self.0[NEXT_START].store(ts as u64, Ordering::Release);
    }
}
