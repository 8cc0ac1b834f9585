//! `counters.state`: per series id, the kind a write declared and a counter's last raw value
//! and time, updated in place through a shared mapping so they survive a process crash with
//! the buckets they belong to (and power loss after a flush).
//!
//! Byte layout (little-endian):
//! ```text
//! header, 4096 bytes:
//!   0..8     magic "TIERDBCS"
//!   8..12    format version (1)
//!   12..16   record size (32)
//!   16..20   CRC-32 of bytes 0..16
//!   20..4096 zero
//! records from 4096, one per series id, 32 bytes each:
//!   0..8     flags: bit 0 declared counter, bit 1 declared gauge, bit 2 has a last value,
//!            bit 3 (with bit 0) declared delta counter, bits 4..7 the kind the [counters]
//!            rules gave the series when it was created,
//!            once recorded (0 not recorded, 1 gauge, 2 counter, others reserved)
//!   8..16    last sample's timestamp (i64)
//!   16..24   last sample's raw value (f64 bits)
//!   24..32   zero
//! ```
//! The file grows in steps of [`GROWTH`] records as ids appear (records of ids never touched
//! are zero); it is the one file tierdb resizes, and only while it holds the table's lock.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::disk;
use super::format::RECORD_SIZE;
use super::mmap::MappedCells;
use super::record_file::{Frame, HEADER_SIZE};
use crate::error::Error;
use crate::error::Result;

const FRAME: Frame = Frame {
    magic: b"TIERDBCS",
    version: 1,
    record_size: RECORD_SIZE as u32,
    what: "counter state file",
};
/// Records added at a time when an id falls past the end (128 KiB).
pub(crate) const GROWTH: usize = 4096;

/// Flag bits of a record.
pub(crate) const DECLARED_COUNTER: u64 = 1;
/// Flag bits of a record.
pub(crate) const DECLARED_GAUGE: u64 = 2;
const HAS_LAST: u64 = 4;
/// Flag bits of a record, beside [`DECLARED_COUNTER`]: the counter's writes are increases
/// already ([`crate::counter::SeriesKind::DeltaCounter`]).
pub(crate) const DECLARED_DELTA: u64 = 8;
/// Flag bits of a record: the series is a distribution (a StatsD timer, a histogram): its
/// buckets keep a histogram beside count, total, min and max. Only a write declares it.
pub(crate) const DECLARED_DISTRIBUTION: u64 = 1 << 8;
/// Where the recorded kind by rule sits in the flags (see [`RULED_GAUGE`]).
pub(crate) const RULED_MASK: u64 = 0b111 << 4;
/// Recorded kind by rule: the rules in force when the series was created made it a gauge.
/// Recorded only when a later rule would say otherwise; 0 in these bits means "what the
/// stored rules say". Three bits leave room for kinds to come (a distribution).
pub(crate) const RULED_GAUGE: u64 = 1 << 4;
/// Recorded kind by rule: a counter (see [`RULED_GAUGE`]).
pub(crate) const RULED_COUNTER: u64 = 2 << 4;

/// The mapped state file.
pub(crate) struct CounterStateFile {
    path: PathBuf,
    file: Option<File>,
    map: Option<MappedCells>,
    records: usize,
}

impl CounterStateFile {
    /// File name inside the data dir.
    pub(crate) const FILE_NAME: &'static str = "counters.state";

    /// Opens `dir/counters.state`, creating it (header only) when missing and `writable`:
    /// written under a temporary name, synced, renamed into place and the directory synced,
    /// so a crash leaves no file or a whole one, never a torn header. A read-only open of a
    /// directory without one sees every record as zero.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file when its header is not this format's;
    /// [`Error::Io`].
    pub(crate) fn open(dir: &Path, writable: bool) -> Result<CounterStateFile> {
        let path = dir.join(Self::FILE_NAME);
        let file = if writable {
            FRAME.open_writable(&path, HEADER_SIZE)?.0
        } else {
            let file = match File::open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(CounterStateFile {
                        path,
                        file: None,
                        map: None,
                        records: 0,
                    })
                }
                Err(e) => return Err(Error::io(&path, e)),
            };
            FRAME.check(&file, &path)?;
            file
        };
        let mut state = CounterStateFile {
            path,
            file: Some(file),
            map: None,
            records: 0,
        };
        state.remap(writable)?;
        Ok(state)
    }

    /// Zeroes the records of ids from `known` on: ids the registry has not handed out. After
    /// an unclean stop that lost the registry's last records (power loss before its fsync),
    /// those ids are handed out again, and must not inherit a declared kind or a counter's
    /// last value from the series that had them. Returns how many records held anything.
    /// Only valid while no writer runs (at open).
    pub(crate) fn clear_from(&self, known: usize) -> usize {
        let Some(map) = &self.map else {
            return 0;
        };
        let mut cleared = 0;
        for record in map.words().chunks_exact(4).skip(known) {
            if record.iter().any(|w| w.load(Ordering::Relaxed) != 0) {
                record.iter().for_each(|w| w.store(0, Ordering::Relaxed));
                cleared += 1;
            }
        }
        cleared
    }

    /// Maps every record the file holds now.
    fn remap(&mut self, writable: bool) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let len = file.metadata().map_err(|e| Error::io(&self.path, e))?.len();
        let records = ((len - HEADER_SIZE) / RECORD_SIZE as u64) as usize;
        self.map = if records == 0 {
            None
        } else {
            Some(MappedCells::map(
                file,
                &self.path,
                HEADER_SIZE,
                records,
                writable,
            )?)
        };
        self.records = records;
        Ok(())
    }

    /// The path, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Word `word` (0..4) of record `id`; zero past the end.
    fn word(&self, id: usize, word: usize) -> u64 {
        match &self.map {
            Some(map) if id < self.records => map.words()[id * 4 + word].load(Ordering::Relaxed),
            _ => 0,
        }
    }

    /// The flags of `id` (see [`DECLARED_COUNTER`], [`DECLARED_GAUGE`]).
    pub(crate) fn flags(&self, id: usize) -> u64 {
        self.word(id, 0)
    }

    /// The last (timestamp, raw value) recorded for `id`, if any.
    pub(crate) fn last(&self, id: usize) -> Option<(i64, f64)> {
        (self.flags(id) & HAS_LAST != 0)
            .then(|| (self.word(id, 1) as i64, f64::from_bits(self.word(id, 2))))
    }

    /// `id`'s record as it stands: flags, last time, last raw value (bits); zeros past the end.
    pub(crate) fn record(&self, id: usize) -> [u64; 3] {
        [self.word(id, 0), self.word(id, 1), self.word(id, 2)]
    }

    /// Puts `id`'s record back to `words` (the counter journal's undo). Only valid while no
    /// writer runs (at open); ids past the end hold zeros already.
    pub(crate) fn restore(&self, id: usize, words: [u64; 3]) {
        if let Some(map) = &self.map {
            if id < self.records {
                let record = &map.words()[id * 4..id * 4 + 3];
                for (word, value) in record.iter().zip(words) {
                    word.store(value, Ordering::Relaxed);
                }
            }
        }
    }

    /// Replaces `id`'s record with a declared kind and, for a counter, its last sample
    /// (`counter` false: a declared gauge, no last sample): what a retype records. Only
    /// valid while no writer runs.
    ///
    /// # Errors
    /// [`Error::Io`] when the file must grow and cannot.
    pub(crate) fn declare(
        &mut self,
        id: usize,
        counter: bool,
        last: Option<(i64, f64)>,
    ) -> Result<()> {
        self.reserve(id)?;
        let (flags, ts, raw) = match (counter, last) {
            (false, _) => (DECLARED_GAUGE, 0, 0),
            (true, None) => (DECLARED_COUNTER, 0, 0),
            (true, Some((ts, raw))) => (DECLARED_COUNTER | HAS_LAST, ts as u64, raw.to_bits()),
        };
        let words = self.words(id);
        words[1].store(ts, Ordering::Relaxed);
        words[2].store(raw, Ordering::Relaxed);
        words[0].store(flags, Ordering::Release);
        Ok(())
    }

    /// Adds `flags` to `id`'s record.
    ///
    /// # Errors
    /// [`Error::Io`] when the file must grow and cannot.
    pub(crate) fn add_flags(&mut self, id: usize, flags: u64) -> Result<()> {
        self.reserve(id)?;
        self.words(id)[0].fetch_or(flags, Ordering::Relaxed);
        Ok(())
    }

    /// Records `(ts, raw)` as `id`'s last sample.
    ///
    /// # Errors
    /// [`Error::Io`] when the file must grow and cannot.
    pub(crate) fn set_last(&mut self, id: usize, ts: i64, raw: f64) -> Result<()> {
        self.reserve(id)?;
        let words = self.words(id);
        // Value before flag: a crash between the stores leaves no flag over a stale value.
        words[1].store(ts as u64, Ordering::Relaxed);
        words[2].store(raw.to_bits(), Ordering::Relaxed);
        words[0].fetch_or(HAS_LAST, Ordering::Release);
        Ok(())
    }

    fn words(&self, id: usize) -> &[std::sync::atomic::AtomicU64] {
        let map = self.map.as_ref().expect("reserve mapped the record");
        &map.words()[id * 4..id * 4 + 4]
    }

    /// Grows the file so record `id` exists.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot grow; [`Error::ReadOnly`].
    pub(crate) fn reserve(&mut self, id: usize) -> Result<()> {
        if id < self.records {
            return Ok(());
        }
        let Some(file) = self.file.as_mut() else {
            return Err(Error::ReadOnly(self.path.clone()));
        };
        let records = (id + 1).div_ceil(GROWTH) * GROWTH;
        let len = HEADER_SIZE + (records * RECORD_SIZE) as u64;
        disk::reserve_space(file, &self.path, len)?;
        self.remap(true)
    }

    /// msync: makes the records durable against power loss.
    ///
    /// # Errors
    /// [`Error::Io`] when the kernel reports a write-back failure.
    pub(crate) fn flush(&self) -> Result<()> {
        match &self.map {
            Some(map) => map.flush().map_err(|e| Error::io(&self.path, e)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_a_reopen_and_grow_on_demand() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = CounterStateFile::open(dir.path(), true).unwrap();
        assert_eq!(state.last(7), None);
        state.set_last(7, 1_700_000_000, 12.5).unwrap();
        state.add_flags(GROWTH + 3, DECLARED_COUNTER).unwrap();
        state.flush().unwrap();
        drop(state);
        let len = std::fs::metadata(dir.path().join(CounterStateFile::FILE_NAME))
            .unwrap()
            .len();
        assert_eq!(len, HEADER_SIZE + (2 * GROWTH * RECORD_SIZE) as u64);
        let state = CounterStateFile::open(dir.path(), false).unwrap();
        assert_eq!(state.last(7), Some((1_700_000_000, 12.5)));
        assert_eq!(state.flags(GROWTH + 3), DECLARED_COUNTER);
        assert_eq!(state.flags(1_000_000), 0);
    }

    #[test]
    fn foreign_and_torn_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CounterStateFile::FILE_NAME);
        std::fs::write(&path, b"hello, this is not a counter state file").unwrap();
        let err = CounterStateFile::open(dir.path(), true)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("counters.state"), "{err}");
        let mut good = FRAME.header();
        good.extend([0u8; 17]);
        std::fs::write(&path, &good).unwrap();
        let err = CounterStateFile::open(dir.path(), false)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("whole 32-byte records"), "{err}");
    }

    #[test]
    fn a_read_only_open_without_a_file_sees_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let state = CounterStateFile::open(dir.path(), false).unwrap();
        assert_eq!(state.flags(0), 0);
        assert!(!dir.path().join(CounterStateFile::FILE_NAME).exists());
    }
}
