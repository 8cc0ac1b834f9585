//! `writers.state`: where each writer thread publishes the bucket cell it is updating. It is
//! a mapped file, so a publication outlives a killed process (the page cache keeps it), and
//! the next open repairs the few cells named there instead of scanning every period file.
//! The same words tell this process's readers whether a live writer holds a cell's
//! update-in-flight bit (see [`super::mapped_cell`]).
//!
//! Byte layout (little-endian):
//! ```text
//! header, 4096 bytes (the frame of record_file.rs):
//!   0..8     magic "TIERDBWS"
//!   8..12    format version (2)
//!   12..16   record size (1152)
//!   16..20   CRC-32 of bytes 0..16
//!   20..4096 zero
//! record 0, the control record, from 4096 (1152 bytes):
//!   0..8     fingerprint of the tiers layout the publications' tier indexes refer to
//!   8..16    1 once the fingerprint is written, else 0
//!   16..1152 zero
//! records 1.., 1152 bytes each, one per writer thread of the process that has the directory
//! open:
//!   0..8     period start << 16 | (tier index + 1); 0 while the writer updates no cell
//!   8..16    chunk << 32 | index of the cell among the period file's records
//!   16..24   words of the histogram image below (0: none held)
//!   24..40   the name (as words 0..16) of the cell whose histogram the image holds
//!   40..128  zero (the words above span two cache lines, so writers publishing side by
//!            side share none)
//!   128..1152 the image: a distribution cell's histogram words as they were before the
//!            update of that cell, written before the update sets the cell's
//!            update-in-flight bit, so the repair puts them back (IMAGE_WORDS words at most)
//! ```
//! Version 1 (128-byte records without the image) is replaced at open like a file that is
//! not whole: the repair then scans every period file.
//! The file grows by [`GROWTH`] records when more writer threads start than it has records.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::disk;
use super::format::RECORD_SIZE;
use super::mmap::MappedCells;
use super::record_file::{Frame, HEADER_SIZE};
use crate::error::Error;
use crate::error::Result;
use crate::time::Timestamp;

/// Bytes per record: two cache lines.
const RECORD_BYTES: usize = 1152;
/// Where a record's histogram image starts, in words.
const IMAGE_AT: usize = 16;
/// The largest histogram cell an image holds, in words: the period files' largest cell.
pub(crate) const IMAGE_WORDS: usize = (RECORD_BYTES / 8) - IMAGE_AT;
/// 8-byte words per record.
const WORDS: usize = RECORD_BYTES / 8;
/// 32-byte mapped cells per record.
const CELLS: usize = RECORD_BYTES / RECORD_SIZE;
/// Records added at a time (the control record included in the first step): 4 KiB.
pub(crate) const GROWTH: usize = 32;

const FRAME: Frame = Frame {
    magic: b"TIERDBWS",
    version: 2,
    record_size: RECORD_BYTES as u32,
    what: "writer state file",
};

/// Which cell a writer is updating, as the two words it stores: enough to find the cell
/// again in another process (tier index, period start, chunk, record index in the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Publication {
    /// Period start << 16 | (tier index + 1); never 0 for a real cell.
    pub file: u64,
    /// Chunk << 32 | record index.
    pub cell: u64,
}

impl Publication {
    /// The name of record `index` of the file of tier `tier`, period `period_start`, chunk
    /// `chunk`. A tier index past 65534 (never configured in practice) is published as tier
    /// "unknown", which recovery treats as unusable and answers with a full scan.
    pub fn new(tier: Option<usize>, period_start: Timestamp, chunk: u32, index: u32) -> Self {
        let tier = tier.filter(|&t| t < 0xffff).map_or(0, |t| t as u64 + 1);
        Publication {
            file: (period_start as u64) << 16 | tier,
            cell: u64::from(chunk) << 32 | u64::from(index),
        }
    }

    /// (tier index, period start, chunk, record index); `None` when no cell is named, or
    /// the tier was unknown.
    pub fn decode(self) -> Option<(usize, Timestamp, u32, u32)> {
        let tier = (self.file & 0xffff) as usize;
        (tier != 0).then(|| {
            (
                tier - 1,
                (self.file as i64) >> 16,
                (self.cell >> 32) as u32,
                self.cell as u32,
            )
        })
    }
}

/// One writer thread's record, for it to publish into. Cloning it keeps the mapping alive.
#[derive(Clone)]
pub struct WriterSlot {
    map: Arc<MappedCells>,
    /// First word of the record.
    at: usize,
}

/// A writer's record borrowed for the length of a batch: what the hot loop publishes
/// through, two words at a place fixed for the batch, so a publication is two stores and
/// nothing else.
#[derive(Clone, Copy)]
pub struct Publisher<'a>(&'a [AtomicU64; 2]);

impl Publisher<'_> {
    /// Says that the writer is about to update the cell `name`. Both stores are Release, so a
    /// reader that sees either of them also sees the writer's earlier cell finished (see
    /// `BucketCell::read_unheld`); on x86 they are plain stores.
    #[inline(always)]
    pub(super) fn publish(self, name: Publication) {
        self.0[1].store(name.cell, Ordering::Release);
        self.0[0].store(name.file, Ordering::Release);
    }
}

impl WriterSlot {
    /// The record's two words.
    #[inline]
    fn words(&self) -> &[AtomicU64; 2] {
        self.map.words()[self.at..self.at + 2]
            .try_into()
            .expect("a record holds two words")
    }

    /// The handle a batch publishes through.
    #[inline]
    pub fn publisher(&self) -> Publisher<'_> {
        Publisher(self.words())
    }

    /// Says the writer updates no cell: at the end of a batch, and when its thread ends (a
    /// writer that died counts as not live).
    pub fn clear(&self) {
        self.words()[0].store(0, Ordering::Release);
    }

    /// Whether the record names `name` now.
    /// Keeps `words`, the histogram of the cell named `name` as it is before this writer
    /// updates it: called before the update sets the cell's update-in-flight bit, so a crash
    /// after that finds the image for the repair (see the layout above). The image's length
    /// is stored last, so a crash while it is written leaves the previous image's name.
    #[inline]
    pub(super) fn hold_image(&self, name: Publication, words: &[u64]) {
        debug_assert!(words.len() <= IMAGE_WORDS);
        let record = &self.map.words()[self.at..self.at + WORDS];
        record[2].store(0, Ordering::Relaxed);
        for (slot, &word) in record[IMAGE_AT..].iter().zip(words) {
            slot.store(word, Ordering::Relaxed);
        }
        record[3].store(name.file, Ordering::Relaxed);
        record[4].store(name.cell, Ordering::Relaxed);
        record[2].store(words.len() as u64, Ordering::Release);
    }

    pub(super) fn names(&self, name: Publication) -> bool {
        let words = self.words();
        words[0].load(Ordering::Acquire) == name.file
            && words[1].load(Ordering::Acquire) == name.cell
    }
}

/// The mapped `writers.state` of a writable data directory.
pub struct WriterStateFile {
    path: PathBuf,
    file: File,
    map: Arc<MappedCells>,
    /// Records the file holds, the control record included.
    records: usize,
    /// Writer records handed out since open.
    handed_out: usize,
    /// Whether the file was found whole at open (a new or replaced one names no cells, and
    /// an unclean open cannot rely on it).
    found: bool,
}

impl WriterStateFile {
    /// File name inside the data dir.
    pub const FILE_NAME: &'static str = "writers.state";

    /// Opens `dir/writers.state` as the last process left it, creating it when missing. A
    /// file that is not this format (damaged, foreign, of another version) is replaced with
    /// a warning naming it: what it held only spares the recovery a full scan.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when it cannot be created, opened or mapped.
    pub fn open(dir: &Path) -> Result<WriterStateFile> {
        let path = dir.join(Self::FILE_NAME);
        let mut found = path.exists();
        let (mut file, _) = match FRAME.open_writable(&path, Self::len_for(GROWTH)) {
            Ok(opened) => opened,
            Err(Error::CorruptFile { .. }) => {
                tracing::warn!(path = %path.display(), "replacing a writer state file that is not whole; an unclean open falls back to scanning every period file");
                found = false;
                std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                FRAME.open_writable(&path, Self::len_for(GROWTH))?
            }
            Err(e) => return Err(e),
        };
        if file.metadata().map_err(|e| Error::io(&path, e))?.len() < Self::len_for(2) {
            disk::reserve_space(&mut file, &path, Self::len_for(GROWTH))?;
        }
        let (map, records) = Self::map(&file, &path)?;
        Ok(WriterStateFile {
            path,
            file,
            map,
            records,
            handed_out: 0,
            found,
        })
    }

    fn len_for(records: usize) -> u64 {
        HEADER_SIZE + (records * RECORD_BYTES) as u64
    }

    fn map(file: &File, path: &Path) -> Result<(Arc<MappedCells>, usize)> {
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let records = ((len - HEADER_SIZE) / RECORD_BYTES as u64) as usize;
        let map = MappedCells::map(file, path, HEADER_SIZE, records * CELLS, true)?;
        Ok((Arc::new(map), records))
    }

    /// Where the file lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fingerprint of the tiers layout the last process published under; `None` when
    /// the file was missing or replaced at open, or never got one.
    pub fn fingerprint(&self) -> Option<u64> {
        let words = self.map.words();
        (self.found && words[1].load(Ordering::Relaxed) == 1)
            .then(|| words[0].load(Ordering::Relaxed))
    }

    /// The cells the writers of the last process had published and not cleared: at most one
    /// per writer thread, the one it may have left mid-update, each with the histogram image
    /// its writer held for that very cell, if any.
    pub fn publications(&self) -> Vec<(Publication, Option<Vec<u64>>)> {
        let words = self.map.words();
        (1..self.records)
            .filter_map(|r| {
                let record = &words[r * WORDS..(r + 1) * WORDS];
                let name = Publication {
                    file: record[0].load(Ordering::Relaxed),
                    cell: record[1].load(Ordering::Relaxed),
                };
                if name.file == 0 {
                    return None;
                }
                let len = (record[2].load(Ordering::Acquire) as usize).min(IMAGE_WORDS);
                let imaged = Publication {
                    file: record[3].load(Ordering::Relaxed),
                    cell: record[4].load(Ordering::Relaxed),
                };
                let image = (len > 0 && imaged == name).then(|| {
                    record[IMAGE_AT..IMAGE_AT + len]
                        .iter()
                        .map(|w| w.load(Ordering::Relaxed))
                        .collect()
                });
                Some((name, image))
            })
            .collect()
    }

    /// Forgets every publication and records `fingerprint` as the layout this process
    /// publishes under, then makes that durable. Only valid before any writer starts, and
    /// after the cells the publications named are repaired.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when msync fails.
    pub fn reset(&mut self, fingerprint: u64) -> Result<()> {
        let words = self.map.words();
        for word in &words[WORDS..] {
            word.store(0, Ordering::Relaxed);
        }
        words[0].store(fingerprint, Ordering::Relaxed);
        words[1].store(1, Ordering::Release);
        self.found = true;
        self.map.flush().map_err(|e| Error::io(&self.path, e))
    }

    /// The record of the next writer thread, the file grown when it has none left.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when it cannot grow.
    pub fn next_slot(&mut self) -> Result<WriterSlot> {
        let record = self.handed_out + 1;
        if record >= self.records {
            let records = (record + 1).div_ceil(GROWTH) * GROWTH;
            disk::reserve_space(&mut self.file, &self.path, Self::len_for(records))?;
            (self.map, self.records) = Self::map(&self.file, &self.path)?;
        }
        self.handed_out = record;
        Ok(WriterSlot {
            map: Arc::clone(&self.map),
            at: record * WORDS,
        })
    }
}

#[cfg(test)]
mod tests;
