//! The journal: the one framing of every record tierdb writes before a change it must undo
//! or finish after a crash. A journal file holds a chain of records, each whole and
//! checksummed, appended with `pwrite` and made durable with `fdatasync` before the change
//! it covers begins, and cut back to an empty chain once that change is durable. What a
//! record's entries mean is its user's: the record's kind says which user wrote it, and a
//! reader refuses, by name, a record of a kind that has no place in its file.
//!
//! Its users, by file and record kind ([`Kind`]). A writable open reads all three files in
//! one recovery pass (`engine/recover.rs`), before any batch: it undoes the counter batch,
//! then the apply groups in force, then finishes the deletions and retypes in order,
//! flushes once, and only then empties each file.
//! - `counters.journal` ([`Kind::CounterBatch`]): the pre-images of the batch of counter
//!   samples being stored (`storage/counter_journal.rs`), appended and ended in the page
//!   cache only ([`Durability::Cached`]: a process crash keeps them), made durable with the
//!   counters' state at the engine's flush;
//! - `engine.journal` ([`Kind::Delete`], [`Kind::Retype`]): the ids a deletion is clearing,
//!   the buckets and kinds a retype is setting (`engine/intent.rs`), each appended synced
//!   and emptied once its change is flushed;
//! - `apply.undo` ([`Kind::ApplyGroup`]): the pre-images of each group of a numbered log
//!   applied since the last checkpoint (`engine/apply/undo_chain.rs`), appended synced,
//!   in force while their sequences are above the applied one in `apply.state`, emptied at
//!   each checkpoint.
//!
//! The three stay three files: their records end on three clocks (a counter batch's at the
//! end of each batch, in the page cache; an apply group's at a checkpoint; an intent's when
//! its change is flushed, while batches go on beside it), and a chain ends at its first
//! empty control entry, so one file would have to end a record in its middle.
//! `docs/file-format.md` says more.
//!
//! Byte layout (little-endian):
//! ```text
//! header, 4096 bytes: the record_file.rs frame (each file its own magic), record size 64
//! then records one after another, each:
//!   a control entry:
//!     0..8     sequence number, above the previous record's (0: the chain ends)
//!     8..16    entries n that follow
//!     16..24   fingerprint of the tiers layout the entries' tier indexes refer to
//!     24..28   CRC-32 of bytes 0..24 then of the n entries, continued from the value of
//!              the kind (bytes 28..32): for kind 0, the plain CRC-32 of those bytes
//!     28..32   the record's kind
//!     32..64   zero
//!   n entries of 64 bytes (eight words), as the kind's user encodes them
//! then a zero control entry, written with the last record
//! ```
//! The chain ends at the first control entry that is all zero, runs past the file, fails its
//! CRC (a record torn while being appended: its change had not begun, since it waits for
//! the fsync), or whose sequence is not above its predecessor's or whose layout is not its
//! predecessor's. A kind this build does not know, in a record whose CRC holds, is refused
//! by name, never skipped.
//!
//! Kind 0 with its CRC computed so is the format `apply.undo` had before the journal had
//! kinds: a file written then reads the same.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::record_file::{Frame, HEADER_SIZE};
use super::undo_entry::{ENTRY_SIZE, WORDS};
use crate::error::Error;
use crate::error::Result;

/// One entry: eight words.
pub(crate) type Entry = [u64; WORDS];

/// Which user wrote a record, and so how its entries read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A group of a numbered log applied since the last checkpoint: its pre-images.
    ApplyGroup = 0,
    /// A deletion's series ids.
    Delete = 1,
    /// A retype's new buckets and kinds.
    Retype = 2,
    /// A batch of counter samples being stored: its pre-images, with the adds of each cell.
    CounterBatch = 3,
}

impl Kind {
    fn from_u32(kind: u32) -> Option<Kind> {
        match kind {
            0 => Some(Kind::ApplyGroup),
            1 => Some(Kind::Delete),
            2 => Some(Kind::Retype),
            3 => Some(Kind::CounterBatch),
            _ => None,
        }
    }
}

/// Whether an append or an end waits for the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Durability {
    /// `fdatasync` before returning: a power loss keeps it.
    Synced,
    /// In the page cache only, which a process crash (`kill -9`) keeps: made durable by
    /// [`Journal::sync`] (the counters' journal, once per batch, at the engine's flush).
    Cached,
}

/// One record as read back.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Record {
    /// Its user.
    pub(crate) kind: Kind,
    /// Its sequence number: a log's sequence for an apply group, a count for the others.
    pub(crate) seq: u64,
    /// The tiers layout fingerprint its entries were written under.
    pub(crate) layout: u64,
    /// Its entries.
    pub(crate) entries: Vec<Entry>,
    /// Its byte offset in the file, for messages.
    pub(crate) offset: u64,
}

/// An open journal file.
pub(crate) struct Journal {
    path: PathBuf,
    file: File,
    /// Reused between appends.
    buffer: Vec<u8>,
    /// Where the next record goes: the end of the chain.
    end: u64,
    /// The chain's last sequence and layout (0 and 0 when it is empty).
    last: (u64, u64),
}

impl Journal {
    /// Opens the journal at `path`, creating it whole (no record) when missing.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file when it is not of `frame`, or a whole record
    /// in it is of no kind this build knows; [`Error::Io`].
    pub(crate) fn open(path: PathBuf, frame: &Frame) -> Result<Journal> {
        let (file, _) = frame.open_writable(&path, HEADER_SIZE + ENTRY_SIZE as u64)?;
        let mut journal = Journal {
            path,
            file,
            buffer: Vec::new(),
            end: HEADER_SIZE,
            last: (0, 0),
        };
        let chain = journal.read()?;
        if let Some(last) = chain.last() {
            journal.end = last.offset + (last.entries.len() as u64 + 1) * ENTRY_SIZE as u64;
            journal.last = (last.seq, last.layout);
        }
        Ok(journal)
    }

    /// The path, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// True when the chain holds no record.
    pub(crate) fn is_empty(&self) -> bool {
        self.end == HEADER_SIZE
    }

    /// The sequence of the chain's last record; 0 when it holds none.
    pub(crate) fn last_seq(&self) -> u64 {
        self.last.0
    }

    /// The chain, first record first; empty when it holds none (never written, cleared, or
    /// its first record torn while being appended).
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file for a whole record (its CRC holds) of a kind
    /// this build does not know; [`Error::Io`].
    pub(crate) fn read(&self) -> Result<Vec<Record>> {
        let len = (self.file.metadata())
            .map_err(|e| Error::io(&self.path, e))?
            .len();
        let mut chain: Vec<Record> = Vec::new();
        let mut at = HEADER_SIZE;
        while let Some(record) = self.record_at(at, len, chain.last())? {
            at += (record.entries.len() as u64 + 1) * ENTRY_SIZE as u64;
            chain.push(record);
        }
        Ok(chain)
    }

    /// The record at byte `at` of a file of `len` bytes, when one follows `previous` there.
    fn record_at(&self, at: u64, len: u64, previous: Option<&Record>) -> Result<Option<Record>> {
        let mut control = [0u8; ENTRY_SIZE];
        if len < at + ENTRY_SIZE as u64 {
            return Ok(None);
        }
        self.file
            .read_exact_at(&mut control, at)
            .map_err(|e| Error::io(&self.path, e))?;
        if control.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let word = |at: usize| u64::from_le_bytes(control[at..at + 8].try_into().expect("8"));
        let (seq, n, layout) = (word(0), word(8), word(16));
        let crc = u32::from_le_bytes(control[24..28].try_into().expect("4"));
        let kind = u32::from_le_bytes(control[28..32].try_into().expect("4"));
        let room = (len - at) / ENTRY_SIZE as u64 - 1;
        if n > room {
            tracing::warn!(path = %self.path.display(), n, room, "ignoring a journal record cut short while being written (the change it covers had not begun)");
            return Ok(None);
        }
        let mut bytes = vec![0u8; n as usize * ENTRY_SIZE];
        self.file
            .read_exact_at(&mut bytes, at + ENTRY_SIZE as u64)
            .map_err(|e| Error::io(&self.path, e))?;
        if crc != checksum(kind, &control[..24], &bytes) || control[32..].iter().any(|&b| b != 0) {
            tracing::warn!(path = %self.path.display(), "ignoring a journal record torn while being written (the change it covers had not begun)");
            return Ok(None);
        }
        if seq == 0 || previous.is_some_and(|p| p.seq >= seq || p.layout != layout) {
            return Ok(None);
        }
        let Some(kind) = Kind::from_u32(kind) else {
            return Err(Error::corrupt(
                &self.path,
                format!(
                    "the record at byte {at} is of kind {kind}, which this build does not know: \
                     open the directory with the build that wrote it to finish or undo it"
                ),
            ));
        };
        let entries = bytes
            .chunks_exact(ENTRY_SIZE)
            .map(|bytes| {
                let mut w = [0u64; WORDS];
                for (word, b) in w.iter_mut().zip(bytes.chunks_exact(8)) {
                    *word = u64::from_le_bytes(b.try_into().expect("8"));
                }
                w
            })
            .collect();
        Ok(Some(Record {
            kind,
            seq,
            layout,
            entries,
            offset: at,
        }))
    }

    /// Appends a record of `kind` with sequence `seq` (above the chain's last), written
    /// under tiers layout `layout`, holding `entries`, whole, and fsyncs it: once this
    /// returns, the change it covers may begin.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file; the chain is then as it was.
    pub(crate) fn append(
        &mut self,
        kind: Kind,
        seq: u64,
        layout: u64,
        entries: &[Entry],
    ) -> Result<()> {
        self.append_with(kind, seq, layout, entries, Durability::Synced)
    }

    /// [`Journal::append`], synced or not as `durability` says.
    ///
    /// # Errors
    /// As [`Journal::append`].
    pub(crate) fn append_with(
        &mut self,
        kind: Kind,
        seq: u64,
        layout: u64,
        entries: &[Entry],
        durability: Durability,
    ) -> Result<()> {
        debug_assert!(seq > self.last.0, "journal sequences increase");
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.clear();
        buffer.resize(ENTRY_SIZE, 0);
        buffer.extend(entries.iter().flatten().flat_map(|word| word.to_le_bytes()));
        buffer[0..8].copy_from_slice(&seq.to_le_bytes());
        buffer[8..16].copy_from_slice(&(entries.len() as u64).to_le_bytes());
        buffer[16..24].copy_from_slice(&layout.to_le_bytes());
        let crc = checksum(kind as u32, &buffer[..24], &buffer[ENTRY_SIZE..]);
        buffer[24..28].copy_from_slice(&crc.to_le_bytes());
        buffer[28..32].copy_from_slice(&(kind as u32).to_le_bytes());
        // A zero control entry after the record, in the same write, ends the chain there,
        // whatever a failed earlier write left beyond it.
        buffer.resize(buffer.len() + ENTRY_SIZE, 0);
        let written = self
            .file
            .write_all_at(&buffer, self.end)
            .and_then(|()| match durability {
                Durability::Synced => self.file.sync_data(),
                Durability::Cached => Ok(()),
            })
            .map_err(|e| Error::io(&self.path, e));
        if written.is_ok() {
            self.end += (buffer.len() - ENTRY_SIZE) as u64;
            self.last = (seq, layout);
        }
        self.buffer = buffer;
        written
    }

    /// Empties the chain, durably: once the changes it covers are durable, or undone, so
    /// they are not finished or undone again. The file is cut back to one zero control
    /// entry.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(crate) fn clear(&mut self) -> Result<()> {
        self.file
            .set_len(HEADER_SIZE)
            .and_then(|()| self.file.write_all_at(&[0u8; ENTRY_SIZE], HEADER_SIZE))
            .and_then(|()| self.file.sync_data())
            .map_err(|e| Error::io(&self.path, e))?;
        self.end = HEADER_SIZE;
        self.last = (0, 0);
        Ok(())
    }

    /// Empties the chain in the page cache: one zero control entry written over the first
    /// record's, the file's length and the rest left as they are (a later record is written
    /// over them). A process crash keeps it; [`Journal::sync`] makes it durable.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(crate) fn end_cached(&mut self) -> Result<()> {
        self.file
            .write_all_at(&[0u8; ENTRY_SIZE], HEADER_SIZE)
            .map_err(|e| Error::io(&self.path, e))?;
        self.end = HEADER_SIZE;
        self.last = (0, 0);
        Ok(())
    }

    /// `fdatasync`: makes what was written [`Durability::Cached`] durable.
    ///
    /// # Errors
    /// [`Error::Io`] when the kernel reports a write-back failure.
    pub(crate) fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io(&self.path, e))
    }
}

/// A control entry's CRC: over its first 24 bytes, then the entries, continued from `kind`.
fn checksum(kind: u32, control: &[u8], entries: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(kind);
    hasher.update(control);
    hasher.update(entries);
    hasher.finalize()
}

#[cfg(test)]
mod tests;
