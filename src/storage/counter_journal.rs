//! `counters.journal`: the undo record of the counter samples one batch is applying, so that
//! a crash between storing a counter's increases and advancing its state (or in the middle
//! of either) is rolled back whole at the next open: the counter's state and the increases
//! its buckets hold always agree, and the unacknowledged batch can be sent again.
//!
//! Before the writers run, the batch's caller records the bucket cells its counter samples
//! will change (each with its content before the batch and how many samples the batch adds
//! to it) and the counter state records it will change: one [journal](super::journal)
//! record of kind [`Kind::CounterBatch`], written into the page cache (a process crash keeps
//! it; the engine's flush makes it durable). After the writers and the state updates, it
//! ends the record. The open's recovery pass (`engine/recover.rs`) reads a record it finds
//! ([`left`]) and rolls it back (`CounterTable::roll_back`: every recorded cell that holds
//! the batch's adds or fewer, and every recorded state), then empties the journal.
//!
//! Byte layout (little-endian): the journal framing, with the header magic "TIERDBCJ",
//! format version 2, record size 64; at most one record, of kind 3, its sequence the batch's
//! number since open, its layout the tiers layout the cell entries' tier indexes refer to,
//! its entries cells and states as `undo_entry.rs` encodes them.
//!
//! Format version 1 (older versions) had its own control entry instead of the journal's:
//! ```text
//! entry 0, from 4096: 1 while a batch is being applied, else 0; entries n of that batch;
//!                     the tiers layout fingerprint
//! entries 1..=n:      cells and states as `undo_entry.rs` encodes them
//! ```
//! The recovery pass rolls back the batch a version 1 file holds active, as it would a
//! record, then replaces the file with an empty version 2 one.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::journal::{Durability, Entry, Journal, Kind};
use super::record_file::{Frame, HEADER_SIZE};
use super::undo_entry::{Undo, ENTRY_SIZE, WORDS};
use crate::error::Error;
use crate::error::Result;

const FRAME: Frame = Frame {
    magic: b"TIERDBCJ",
    version: 2,
    record_size: ENTRY_SIZE as u32,
    what: "counter journal",
};

/// The frame older versions wrote the file in: see the module doc.
const FRAME_V1: Frame = Frame {
    version: 1,
    ..FRAME
};

/// The open journal.
pub(crate) struct CounterJournal {
    journal: Journal,
    /// Batches recorded since open: each record's sequence.
    batches: u64,
    /// Reused between batches.
    entries: Vec<Entry>,
}

/// A batch a stopped process left unfinished: the layout fingerprint it was recorded under
/// and its pre-images.
pub(crate) type Unfinished = (u64, Vec<Undo>);

impl CounterJournal {
    /// File name inside the data dir.
    pub(crate) const FILE_NAME: &'static str = "counters.journal";

    /// Opens `dir/counters.journal` for writing, creating it whole (temporary name, fsync,
    /// rename, directory fsync) when missing: after the open's recovery pass ended what a
    /// stopped process left in it ([`Left::end`]).
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file when it is not this format's; [`Error::Io`].
    pub(crate) fn open(dir: &Path) -> Result<CounterJournal> {
        let journal = Journal::open(dir.join(Self::FILE_NAME), &FRAME)?;
        Ok(CounterJournal {
            journal,
            batches: 0,
            entries: Vec::new(),
        })
    }

    /// Records what a batch is about to change: from here until [`CounterJournal::end`], an
    /// open rolls the batch back. `layout` fingerprints the tiers the entries' tier indexes
    /// refer to.
    ///
    /// # Errors
    /// [`Error::Io`] when the record cannot be written; the journal is then left empty.
    /// [`Error::Poisoned`] when the previous batch is still recorded as unfinished (its
    /// writers failed): overwriting its undo would leave its half-stored increases behind.
    pub(crate) fn begin(&mut self, undo: &[Undo], layout: u64) -> Result<()> {
        if !self.journal.is_empty() {
            return Err(Error::Poisoned(format!(
                "{}: the last batch of counter samples did not finish; reopen to roll it back",
                self.journal.path().display()
            )));
        }
        let mut entries = std::mem::take(&mut self.entries);
        entries.clear();
        entries.extend(undo.iter().map(Undo::encode));
        self.batches += 1;
        let written = self.journal.append_with(
            Kind::CounterBatch,
            self.batches,
            layout,
            &entries,
            Durability::Cached,
        );
        self.entries = entries;
        written
    }

    /// Ends the batch's record: the batch is applied whole.
    ///
    /// # Errors
    /// [`Error::Io`] when the record cannot be ended; it then stays, and the next batch is
    /// refused until a reopen rolls it back.
    pub(crate) fn end(&mut self) -> Result<()> {
        self.journal.end_cached()
    }

    /// fdatasync: makes the journal durable against power loss.
    ///
    /// # Errors
    /// [`Error::Io`] when the kernel reports a write-back failure.
    pub(crate) fn flush(&self) -> Result<()> {
        self.journal.sync()
    }
}

/// What a stopped process left in `counters.journal`, read by the open's recovery pass: the
/// batch it left unfinished, if any, and how to empty the file once its roll-back is
/// durable.
pub(crate) struct Left {
    path: PathBuf,
    /// The batch to roll back.
    pub(crate) unfinished: Option<Unfinished>,
    file: LeftFile,
}

/// The file a [`Left`] was read from.
enum LeftFile {
    /// None: nothing to end.
    Missing,
    /// A version 1 file, replaced by an empty version 2 one at the end.
    Version1,
    /// The journal, emptied at the end when it holds a record.
    Journal(Journal),
}

impl Left {
    /// The file's path, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Once the roll-back of [`Left::unfinished`] is durable: empties the journal (durably),
    /// or removes a version 1 file, which [`CounterJournal::open`] then makes again in this
    /// version.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(crate) fn end(self) -> Result<()> {
        match self.file {
            LeftFile::Missing => Ok(()),
            LeftFile::Version1 => crate::storage::disk::remove_durably(&self.path),
            LeftFile::Journal(mut journal) if !journal.is_empty() => journal.clear(),
            LeftFile::Journal(_) => Ok(()),
        }
    }
}

/// Reads what a stopped process left in `dir/counters.journal` (either version), without
/// changing it.
///
/// # Errors
/// [`Error::CorruptFile`] naming the file when it is of neither version or its record does
/// not decode; [`Error::Io`].
pub(crate) fn left(dir: &Path) -> Result<Left> {
    let path = dir.join(CounterJournal::FILE_NAME);
    if let Some(unfinished) = version_1(&path)? {
        return Ok(Left {
            path,
            unfinished,
            file: LeftFile::Version1,
        });
    }
    if !path.exists() {
        return Ok(Left {
            path,
            unfinished: None,
            file: LeftFile::Missing,
        });
    }
    let journal = Journal::open(path.clone(), &FRAME)?;
    let unfinished = match journal.read()?.pop() {
        Some(record) => {
            let entries = (record.entries.iter().enumerate())
                .map(|(i, w)| {
                    Undo::decode(*w).ok_or_else(|| {
                        Error::corrupt(&path, format!("entry {} is of no known kind", i + 1))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Some((record.layout, entries))
        }
        None => None,
    };
    Ok(Left {
        path,
        unfinished,
        file: LeftFile::Journal(journal),
    })
}

/// When `path` is a version 1 file: the batch it holds active, if any.
///
/// # Errors
/// [`Error::CorruptFile`] naming the file when its control entry or an entry is not one
/// that version wrote; [`Error::Io`].
fn version_1(path: &Path) -> Result<Option<Option<Unfinished>>> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut head = [0u8; 20];
    if file.read_exact_at(&mut head, 0).is_err() || head != FRAME_V1.header()[..20] {
        return Ok(None);
    }
    FRAME_V1.check(&file, path)?;
    let word = |entry: u64, i: u64| -> Result<u64> {
        let mut bytes = [0u8; 8];
        file.read_exact_at(&mut bytes, HEADER_SIZE + entry * ENTRY_SIZE as u64 + i * 8)
            .map_err(|e| Error::corrupt(path, format!("entry {entry} cannot be read ({e})")))?;
        Ok(u64::from_le_bytes(bytes))
    };
    match word(0, 0)? {
        0 => return Ok(Some(None)),
        1 => {}
        other => {
            return Err(Error::corrupt(
                path,
                format!("control word {other} is neither idle (0) nor active (1)"),
            ))
        }
    }
    let (n, layout) = (word(0, 1)?, word(0, 2)?);
    let undo = (1..=n)
        .map(|i| {
            let mut w = [0u64; WORDS];
            for (j, slot) in w.iter_mut().enumerate() {
                *slot = word(i, j as u64)?;
            }
            Undo::decode(w)
                .ok_or_else(|| Error::corrupt(path, format!("entry {i} is of no known kind")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Some((layout, undo))))
}

#[cfg(test)]
mod tests;
