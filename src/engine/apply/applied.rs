//! `apply.state`: the last log sequence an engine fed by `Engine::apply` holds, rewritten
//! at each checkpoint. Two slots, written in turn, so a write torn by a crash leaves the
//! other slot, and with it the sequence before, intact.
//!
//! Byte layout (little-endian):
//! ```text
//! header, 4096 bytes: the record_file.rs frame, magic "TIERDBAS", version 1, record size 32
//! slot 0 and slot 1, 32 bytes each:
//!   0..8     applied stream sequence
//!   8..16    write number: 1, 2, 3, ...; write n goes to slot n % 2
//!   16..20   CRC-32 of bytes 0..16
//!   20..32   zero
//! ```
//! A slot of all zeros was never written. At open the slot with a good CRC and the highest
//! write number wins; a slot whose CRC fails was torn mid-write and is ignored.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::error::Result;
use crate::storage::record_file::{Frame, HEADER_SIZE};

const SLOT_SIZE: usize = 32;
const SLOTS: usize = 2;

const FRAME: Frame = Frame {
    magic: b"TIERDBAS",
    version: 1,
    record_size: SLOT_SIZE as u32,
    what: "partition apply state",
};

/// The open state file and the sequence it holds.
pub(super) struct AppliedFile {
    path: PathBuf,
    file: File,
    applied: u64,
    /// The write number of the slot `applied` came from.
    writes: u64,
}

impl AppliedFile {
    /// File name inside the engine directory.
    pub(super) const FILE_NAME: &'static str = "apply.state";

    /// Opens `dir/apply.state`, creating it whole (nothing applied) when missing.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file when it is not this format's, or when neither
    /// slot is whole; [`Error::Io`].
    pub(super) fn open(dir: &Path) -> Result<AppliedFile> {
        let path = dir.join(Self::FILE_NAME);
        let (file, len) = FRAME.open_writable(&path, HEADER_SIZE + (SLOTS * SLOT_SIZE) as u64)?;
        if len < HEADER_SIZE + (SLOTS * SLOT_SIZE) as u64 {
            return Err(Error::corrupt(&path, "no room for its two slots"));
        }
        let mut bytes = [0u8; SLOTS * SLOT_SIZE];
        file.read_exact_at(&mut bytes, HEADER_SIZE)
            .map_err(|e| Error::io(&path, e))?;
        let mut best: Option<(u64, u64)> = None;
        let mut torn = 0;
        for slot in bytes.chunks_exact(SLOT_SIZE) {
            if slot.iter().all(|&b| b == 0) {
                continue;
            }
            match decode(slot) {
                Some((applied, writes)) => {
                    if best.is_none_or(|(_, w)| writes > w) {
                        best = Some((applied, writes));
                    }
                }
                None => torn += 1,
            }
        }
        if torn > 0 {
            if best.is_none() {
                return Err(Error::corrupt(
                    &path,
                    "no slot holds a whole applied sequence (both fail their checksum)",
                ));
            }
            tracing::warn!(path = %path.display(), "a write of the applied sequence was cut short; keeping the one before it");
        }
        let (applied, writes) = best.unwrap_or((0, 0));
        Ok(AppliedFile {
            path,
            file,
            applied,
            writes,
        })
    }

    /// The last sequence recorded; 0 when none.
    pub(super) fn applied(&self) -> u64 {
        self.applied
    }

    /// Records `applied` durably: written to the older slot, then fsynced.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file; what it held before then still holds (the other slot).
    pub(super) fn record(&mut self, applied: u64) -> Result<()> {
        let writes = self.writes + 1;
        let at = HEADER_SIZE + (writes % SLOTS as u64) * SLOT_SIZE as u64;
        self.file
            .write_all_at(&encode(applied, writes), at)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| Error::io(&self.path, e))?;
        self.applied = applied;
        self.writes = writes;
        Ok(())
    }
}

fn encode(applied: u64, writes: u64) -> [u8; SLOT_SIZE] {
    let mut slot = [0u8; SLOT_SIZE];
    slot[0..8].copy_from_slice(&applied.to_le_bytes());
    slot[8..16].copy_from_slice(&writes.to_le_bytes());
    let crc = crc32fast::hash(&slot[0..16]);
    slot[16..20].copy_from_slice(&crc.to_le_bytes());
    slot
}

/// (applied, write number) of a slot whose checksum holds.
fn decode(slot: &[u8]) -> Option<(u64, u64)> {
    let word = |at: usize| u64::from_le_bytes(slot[at..at + 8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(slot[16..20].try_into().expect("4 bytes"));
    (crc == crc32fast::hash(&slot[0..16]) && slot[20..].iter().all(|&b| b == 0))
        .then(|| (word(0), word(8)))
}
