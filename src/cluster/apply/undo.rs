//! `apply.undo`: the undo record of the group of messages being applied: the group's last
//! stream sequence and the absolute value, before the group, of everything the group may
//! change that is not idempotent (bucket cells, counter state records). Written whole and
//! fsynced before the group's first store; it is in force while its sequence is above the
//! applied one in `apply.state`.
//!
//! Byte layout (little-endian):
//! ```text
//! header, 4096 bytes: the record_file.rs frame, magic "TIERDBAU", version 1, record size 64
//! record 0, the control record:
//!   0..8     the group's last stream sequence (0: no record)
//!   8..16    entries n that follow
//!   16..24   fingerprint of the tiers layout the cell entries' tier indexes refer to
//!   24..28   CRC-32 of bytes 0..24 and of the n entries
//!   28..64   zero
//! records 1..=n: entries in the counters.journal encoding (storage/counter_journal.rs),
//! then the raw tails (with a raw tier only):
//!   cell:  w0 = 1 | tier << 8 (adds unused: 0), w1 = period start, w2 = chunk << 32 | bucket,
//!          w3 = slot, w4..w8 = count, total, min, max before the group (f64 bits)
//!   state: w0 = 2, w1 = series id, w2..w5 = flags, last time, last raw value before the group
//!   raw:   w0 = 3, w1 = series id, w2 = 1 when the series had a raw point before the group
//!          (else 0), w3 = that point's time (i64), w4..w8 = 0
//! ```
//! Raw appends are not undone by a pre-image: a group only appends after each series' last
//! raw point, so putting the series back to the points up to the time its raw entry keeps
//! ([`crate::storage::raw::RawStore::truncate_after`]) takes away exactly what the group
//! appended. A binary older than the raw entries refuses the record by name, as an entry of
//! no known kind; it also refused a raw tier in cluster mode, so it never meets one.
//! Records past n are left over from a larger group and mean nothing. A record whose CRC
//! fails was torn while being written, before anything of its group was stored (the group's
//! stores wait for the fsync): it is ignored.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::error::Result;
use crate::storage::counter_journal::{Undo, ENTRY_SIZE, WORDS};
use crate::storage::record_file::{Frame, HEADER_SIZE};
use crate::time::Timestamp;

/// The kind word of a raw tail entry (the counters journal's kinds are 1 and 2).
const KIND_RAW_TAIL: u64 = 3;

const FRAME: Frame = Frame {
    magic: b"TIERDBAU",
    version: 1,
    record_size: ENTRY_SIZE as u32,
    what: "partition undo record",
};

/// A group's undo record as read back.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct UndoRecord {
    /// The group's last stream sequence.
    pub(super) seq: u64,
    /// The tiers layout fingerprint the cell entries were taken under.
    pub(super) layout: u64,
    /// The pre-images.
    pub(super) entries: Vec<Undo>,
    /// The raw tails before the group, of every series it names (with a raw tier).
    pub(super) raw_tails: Vec<RawTail>,
}

/// A series' raw tier before a group: the time of its last raw point, `None` when it had
/// none. Rolling the group back keeps the points up to it and takes the rest away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RawTail {
    /// Series id.
    pub(super) id: u32,
    /// Its last raw point's time.
    pub(super) last: Option<Timestamp>,
}

impl RawTail {
    fn encode(&self) -> [u64; WORDS] {
        let mut w = [0u64; WORDS];
        w[0] = KIND_RAW_TAIL;
        w[1] = u64::from(self.id);
        if let Some(last) = self.last {
            w[2] = 1;
            w[3] = last as u64;
        }
        w
    }

    /// `None` when `w` is no raw tail entry, or not one this format writes.
    fn decode(w: &[u64; WORDS]) -> Option<RawTail> {
        let well_formed = w[0] == KIND_RAW_TAIL
            && w[2] <= 1
            && (w[2] == 1 || w[3] == 0)
            && w[4..].iter().all(|&x| x == 0);
        if !well_formed {
            return None;
        }
        Some(RawTail {
            id: u32::try_from(w[1]).ok()?,
            last: (w[2] == 1).then_some(w[3] as Timestamp),
        })
    }
}

/// The open undo file.
pub(super) struct UndoFile {
    path: PathBuf,
    file: File,
    /// Reused between groups.
    buffer: Vec<u8>,
}

impl UndoFile {
    /// File name inside the partition's engine directory.
    pub(super) const FILE_NAME: &'static str = "apply.undo";

    /// Opens `dir/apply.undo`, creating it whole (no record) when missing.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file when it is not this format's; [`Error::Io`].
    pub(super) fn open(dir: &Path) -> Result<UndoFile> {
        let path = dir.join(Self::FILE_NAME);
        let (file, _) = FRAME.open_writable(&path, HEADER_SIZE + ENTRY_SIZE as u64)?;
        Ok(UndoFile {
            path,
            file,
            buffer: Vec::new(),
        })
    }

    /// The path, for messages.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The record the file holds; `None` when it holds none (never written, cleared, or torn
    /// while being written).
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file for a whole record (its CRC holds) with an
    /// entry of no known kind; [`Error::Io`].
    pub(super) fn read(&self) -> Result<Option<UndoRecord>> {
        let len = self
            .file
            .metadata()
            .map_err(|e| Error::io(&self.path, e))?
            .len();
        let mut control = [0u8; ENTRY_SIZE];
        if len < HEADER_SIZE + ENTRY_SIZE as u64 {
            return Ok(None);
        }
        self.file
            .read_exact_at(&mut control, HEADER_SIZE)
            .map_err(|e| Error::io(&self.path, e))?;
        if control.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let word = |at: usize| u64::from_le_bytes(control[at..at + 8].try_into().expect("8"));
        let (seq, n, layout) = (word(0), word(8), word(16));
        let room = (len - HEADER_SIZE) / ENTRY_SIZE as u64 - 1;
        if n > room {
            tracing::warn!(path = %self.path.display(), n, room, "ignoring an undo record cut short while being written (nothing of its group was stored)");
            return Ok(None);
        }
        let mut entries = vec![0u8; n as usize * ENTRY_SIZE];
        self.file
            .read_exact_at(&mut entries, HEADER_SIZE + ENTRY_SIZE as u64)
            .map_err(|e| Error::io(&self.path, e))?;
        let crc = u32::from_le_bytes(control[24..28].try_into().expect("4"));
        if crc != checksum(&control[..24], &entries) || control[28..].iter().any(|&b| b != 0) {
            tracing::warn!(path = %self.path.display(), "ignoring an undo record torn while being written (nothing of its group was stored)");
            return Ok(None);
        }
        if seq == 0 {
            return Ok(None);
        }
        let mut record = UndoRecord {
            seq,
            layout,
            entries: Vec::new(),
            raw_tails: Vec::new(),
        };
        for (i, bytes) in entries.chunks_exact(ENTRY_SIZE).enumerate() {
            let mut w = [0u64; WORDS];
            for (word, b) in w.iter_mut().zip(bytes.chunks_exact(8)) {
                *word = u64::from_le_bytes(b.try_into().expect("8"));
            }
            let unknown =
                || Error::corrupt(&self.path, format!("entry {} is of no known kind", i + 1));
            if w[0] & 0xff == KIND_RAW_TAIL {
                record
                    .raw_tails
                    .push(RawTail::decode(&w).ok_or_else(unknown)?);
            } else {
                record.entries.push(Undo::decode(w).ok_or_else(unknown)?);
            }
        }
        Ok(Some(record))
    }

    /// Writes the record of the group ending at `seq` whole and fsyncs it: once this returns,
    /// the group may store.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file. The file may then hold a torn record (ignored at
    /// open) or a whole one whose pre-images are what the files hold (restoring it changes
    /// nothing).
    pub(super) fn write(
        &mut self,
        seq: u64,
        layout: u64,
        entries: &[Undo],
        raw_tails: &[RawTail],
    ) -> Result<()> {
        let mut buffer = std::mem::take(&mut self.buffer);
        let n = entries.len() + raw_tails.len();
        buffer.clear();
        buffer.resize((n + 1) * ENTRY_SIZE, 0);
        buffer[0..8].copy_from_slice(&seq.to_le_bytes());
        buffer[8..16].copy_from_slice(&(n as u64).to_le_bytes());
        buffer[16..24].copy_from_slice(&layout.to_le_bytes());
        let words = (entries.iter().map(Undo::encode)).chain(raw_tails.iter().map(RawTail::encode));
        for (words, bytes) in words.zip(buffer[ENTRY_SIZE..].chunks_exact_mut(ENTRY_SIZE)) {
            for (word, b) in words.iter().zip(bytes.chunks_exact_mut(8)) {
                b.copy_from_slice(&word.to_le_bytes());
            }
        }
        let crc = checksum(&buffer[..24], &buffer[ENTRY_SIZE..]);
        buffer[24..28].copy_from_slice(&crc.to_le_bytes());
        let written = self
            .file
            .write_all_at(&buffer, HEADER_SIZE)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| Error::io(&self.path, e));
        self.buffer = buffer;
        written
    }

    /// Replaces the record by none, durably: after a rollback, so it is not rolled back again.
    ///
    /// # Errors
    /// As [`UndoFile::write`].
    pub(super) fn clear(&mut self) -> Result<()> {
        self.write(0, 0, &[], &[])
    }
}

/// The control record's CRC: over its first 24 bytes, then the entries.
fn checksum(control: &[u8], entries: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(control);
    hasher.update(entries);
    hasher.finalize()
}
