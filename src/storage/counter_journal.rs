//! `counters.journal`: the undo record of the counter samples one batch is applying, so that
//! a crash between storing a counter's increases and advancing its state (or in the middle
//! of either) is rolled back whole at the next open: the counter's state and the increases
//! its buckets hold always agree, and the unacknowledged batch can be sent again.
//!
//! Before the writers run, the batch's caller records the bucket cells its counter samples
//! will change (each with its content before the batch and how many samples the batch adds
//! to it) and the counter state records it will change, then marks the journal active.
//! After the writers and the state updates, it marks the journal idle. An open that finds it
//! active restores every recorded cell that holds the batch's adds or fewer, and every
//! recorded state, then marks it idle.
//!
//! Byte layout (little-endian):
//! ```text
//! header, 4096 bytes:
//!   0..8     magic "TIERDBCJ"
//!   8..12    format version (1)
//!   12..16   entry size (64)
//!   16..20   CRC-32 of bytes 0..16
//!   20..4096 zero
//! entry 0, the control word, from 4096:
//!   0..8     1 while a batch is being applied, else 0
//!   8..16    entries of that batch (after this one)
//!   16..24   fingerprint of the tiers layout the entries' tier indexes refer to
//! entries 1.., 64 bytes each: cells and states as `undo_entry.rs` encodes them
//! ```
//! The file grows in steps of [`GROWTH`] entries when a batch needs more.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::disk;
use super::mmap::MappedCells;
use super::record_file::{Frame, HEADER_SIZE};
use super::undo_entry::{Undo, ENTRY_SIZE, WORDS};
use crate::error::Error;
use crate::error::Result;

/// Entries added at a time when a batch needs more (256 KiB).
pub(crate) const GROWTH: usize = 4096;

const FRAME: Frame = Frame {
    magic: b"TIERDBCJ",
    version: 1,
    record_size: ENTRY_SIZE as u32,
    what: "counter journal",
};

/// The mapped journal.
pub(crate) struct CounterJournal {
    path: PathBuf,
    file: File,
    map: MappedCells,
    /// Entries the file holds, the control entry included.
    entries: usize,
}

impl CounterJournal {
    /// File name inside the data dir.
    pub(crate) const FILE_NAME: &'static str = "counters.journal";

    /// Opens `dir/counters.journal` for writing, creating it whole (temporary name, fsync,
    /// rename, directory fsync) when missing.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file when it is not this format's; [`Error::Io`].
    pub(crate) fn open(dir: &Path) -> Result<CounterJournal> {
        let path = dir.join(Self::FILE_NAME);
        let (file, len) = FRAME.open_writable(&path, HEADER_SIZE + (GROWTH * ENTRY_SIZE) as u64)?;
        if len < HEADER_SIZE + ENTRY_SIZE as u64 {
            return Err(Error::corrupt(&path, "no room for its control entry"));
        }
        let entries = ((len - HEADER_SIZE) / ENTRY_SIZE as u64) as usize;
        let map = MappedCells::map(&file, &path, HEADER_SIZE, entries * 2, true)?;
        Ok(CounterJournal {
            path,
            file,
            map,
            entries,
        })
    }

    fn words(&self, entry: usize) -> &[AtomicU64] {
        &self.map.words()[entry * WORDS..(entry + 1) * WORDS]
    }

    /// Records what a batch is about to change and marks the journal active: from here
    /// until [`CounterJournal::end`], an open rolls the batch back. `layout` fingerprints the
    /// tiers the entries' tier indexes refer to.
    ///
    /// # Errors
    /// [`Error::Io`] when the file must grow and cannot; the journal is then left idle.
    /// [`Error::Poisoned`] when the previous batch is still recorded as unfinished (its
    /// writers failed): overwriting its undo would leave its half-stored increases behind.
    pub(crate) fn begin(&mut self, undo: &[Undo], layout: u64) -> Result<()> {
        if self.is_active() {
            return Err(Error::Poisoned(format!(
                "{}: the last batch of counter samples did not finish; reopen to roll it back",
                self.path.display()
            )));
        }
        if undo.len() + 1 > self.entries {
            self.grow(undo.len() + 1)?;
        }
        for (i, entry) in undo.iter().enumerate() {
            for (word, value) in self.words(i + 1).iter().zip(entry.encode()) {
                word.store(value, Ordering::Relaxed);
            }
        }
        let control = self.words(0);
        control[1].store(undo.len() as u64, Ordering::Relaxed);
        control[2].store(layout, Ordering::Relaxed);
        // The entries are in place before the journal says it is active.
        control[0].store(1, Ordering::Release);
        Ok(())
    }

    /// Marks the journal idle: the batch is applied whole.
    pub(crate) fn end(&self) {
        self.words(0)[0].store(0, Ordering::Release);
    }

    /// True while a batch is recorded as being applied.
    pub(crate) fn is_active(&self) -> bool {
        self.words(0)[0].load(Ordering::Acquire) != 0
    }

    /// The batch to roll back, with the layout fingerprint it was recorded under, when a
    /// process stopped while the journal was active.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file when the control entry or an entry is not one
    /// this format writes.
    pub(crate) fn unfinished(&self) -> Result<Option<(u64, Vec<Undo>)>> {
        let control = self.words(0);
        match control[0].load(Ordering::Acquire) {
            0 => return Ok(None),
            1 => {}
            other => {
                return Err(Error::corrupt(
                    &self.path,
                    format!("control word {other} is neither idle (0) nor active (1)"),
                ))
            }
        }
        let n = control[1].load(Ordering::Relaxed);
        if n >= self.entries as u64 {
            return Err(Error::corrupt(
                &self.path,
                format!("{n} entries recorded, room for {}", self.entries - 1),
            ));
        }
        let layout = control[2].load(Ordering::Relaxed);
        let undo = (1..=n as usize)
            .map(|i| {
                let mut w = [0u64; WORDS];
                for (slot, word) in w.iter_mut().zip(self.words(i)) {
                    *slot = word.load(Ordering::Relaxed);
                }
                Undo::decode(w).ok_or_else(|| {
                    Error::corrupt(&self.path, format!("entry {i} is of no known kind"))
                })
            })
            .collect::<Result<_>>()?;
        Ok(Some((layout, undo)))
    }

    /// The path, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Grows the file to hold at least `needed` entries.
    fn grow(&mut self, needed: usize) -> Result<()> {
        let entries = needed.div_ceil(GROWTH) * GROWTH;
        let len = HEADER_SIZE + (entries * ENTRY_SIZE) as u64;
        disk::reserve_space(&mut self.file, &self.path, len)?;
        self.map = MappedCells::map(&self.file, &self.path, HEADER_SIZE, entries * 2, true)?;
        self.entries = entries;
        Ok(())
    }

    /// msync: makes the journal durable against power loss.
    ///
    /// # Errors
    /// [`Error::Io`] when the kernel reports a write-back failure.
    pub(crate) fn flush(&self) -> Result<()> {
        self.map.flush().map_err(|e| Error::io(&self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::Bucket;

    #[test]
    fn a_batch_left_active_is_read_back_and_an_ended_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = CounterJournal::open(dir.path()).unwrap();
        assert_eq!(journal.unfinished().unwrap(), None);
        let undo: Vec<Undo> = (0..GROWTH as u32 + 10)
            .map(|i| Undo::Cell {
                at: crate::storage::cells::CellAt {
                    tier: 3,
                    period_start: -86_400,
                    chunk: i,
                    bucket: 1439,
                    slot: 255,
                },
                adds: 6,
                before: Bucket {
                    count: 2,
                    total: 1.5,
                    min: -0.5,
                    max: 2.0,
                    last: None,
                },
            })
            .chain([Undo::State {
                id: 7,
                before: [4, 1_700_000_000, 12.5f64.to_bits()],
            }])
            .collect();
        journal.begin(&undo, 42).unwrap();
        // An unfinished batch is never overwritten.
        assert!(matches!(journal.begin(&[], 42), Err(Error::Poisoned(_))));
        drop(journal);
        let journal = CounterJournal::open(dir.path()).unwrap();
        assert_eq!(journal.unfinished().unwrap(), Some((42, undo)));
        journal.end();
        drop(journal);
        assert_eq!(
            CounterJournal::open(dir.path())
                .unwrap()
                .unfinished()
                .unwrap(),
            None
        );
    }

    #[test]
    fn foreign_and_torn_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CounterJournal::FILE_NAME);
        std::fs::write(
            &path,
            b"not a journal at all, but long enough to read a header",
        )
        .unwrap();
        let err = CounterJournal::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("counters.journal"), "{err}");
        let mut torn = FRAME.header();
        torn.extend([0u8; 65]);
        std::fs::write(&path, &torn).unwrap();
        let err = CounterJournal::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("whole 64-byte records"), "{err}");
    }

    #[test]
    fn damaged_entries_are_refused_by_name_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = CounterJournal::open(dir.path()).unwrap();
        let state = Undo::State {
            id: 1,
            before: [0, 0, 0],
        };
        journal.begin(&[state, state], 7).unwrap();
        journal.words(2)[0].store(99, Ordering::Relaxed);
        let err = journal.unfinished().unwrap_err().to_string();
        assert!(
            err.contains("counters.journal") && err.contains("entry 2"),
            "{err}"
        );
        journal.words(0)[1].store(u64::MAX, Ordering::Relaxed);
        let err = journal.unfinished().unwrap_err().to_string();
        assert!(err.contains("entries recorded"), "{err}");
        journal.words(0)[0].store(5, Ordering::Relaxed);
        let err = journal.unfinished().unwrap_err().to_string();
        assert!(err.contains("control word 5"), "{err}");
    }
}
