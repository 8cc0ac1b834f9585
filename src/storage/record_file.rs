//! The frame the small files beside the period files share (`counters.state`,
//! `writers.state`, the journals): a 4096-byte header (magic, format version, record size, CRC-32 of
//! those), created whole under a temporary name, and checked at open.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::disk;
use crate::error::Error;
use crate::error::Result;

/// Bytes of the header; records start here, on a page, so they map aligned.
pub(crate) const HEADER_SIZE: u64 = 4096;

/// What a file of this frame says about itself.
pub(crate) struct Frame {
    /// Eight bytes naming the kind of file.
    pub magic: &'static [u8; 8],
    /// Its format version.
    pub version: u32,
    /// Bytes per record.
    pub record_size: u32,
    /// What the file is, for messages ("counter state file").
    pub what: &'static str,
}

impl Frame {
    /// The header: magic, version, record size (little-endian), CRC-32 of those 16 bytes,
    /// then zeros to 4096.
    pub(crate) fn header(&self) -> Vec<u8> {
        let mut head = vec![0u8; HEADER_SIZE as usize];
        head[0..8].copy_from_slice(self.magic);
        head[8..12].copy_from_slice(&self.version.to_le_bytes());
        head[12..16].copy_from_slice(&self.record_size.to_le_bytes());
        let crc = crc32fast::hash(&head[0..16]);
        head[16..20].copy_from_slice(&crc.to_le_bytes());
        head
    }

    /// Creates `path` whole with room for `len` bytes (the header included): written under
    /// a temporary name, space reserved, synced, renamed into place, the directory synced, so
    /// a crash leaves no file or a whole one.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when any step fails (ENOSPC included).
    pub(crate) fn create(&self, path: &Path, len: u64) -> Result<()> {
        self.create_with(path, len, &self.header())
    }

    /// [`Frame::create`] with `head` as the header: [`Frame::header`] with more fields of
    /// the file's own after its first 20 bytes (the raw segment files).
    ///
    /// # Errors
    /// As [`Frame::create`].
    pub(crate) fn create_with(&self, path: &Path, len: u64, head: &[u8]) -> Result<()> {
        let temp = disk::temp_path(path);
        let written = File::create(&temp)
            .map_err(|e| Error::io(&temp, e))
            .and_then(|mut file| {
                disk::reserve_space(&mut file, &temp, len.max(HEADER_SIZE))?;
                file.write_all(head)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| Error::io(&temp, e))
            })
            .and_then(|()| std::fs::rename(&temp, path).map_err(|e| Error::io(path, e)));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written?;
        disk::sync_dir(path.parent().unwrap_or(Path::new(".")))
    }

    /// Opens `path` for reading and writing: a leftover temporary file removed, the file
    /// created whole with room for `len` bytes when missing, then checked. Returns the file
    /// and its length.
    ///
    /// # Errors
    /// As [`Frame::create`] and [`Frame::check`] (a file not of this frame is
    /// [`Error::CorruptFile`] naming it).
    pub(crate) fn open_writable(&self, path: &Path, len: u64) -> Result<(File, u64)> {
        self.remove_leftover(path);
        if !path.exists() {
            self.create(path, len)?;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        let len = self.check(&file, path)?;
        Ok((file, len))
    }

    /// Removes what a creation cut short before its rename left behind.
    pub(crate) fn remove_leftover(&self, path: &Path) {
        let _ = std::fs::remove_file(disk::temp_path(path));
    }

    /// Checks that `file` (at `path`) has this frame's header and whole records after it;
    /// returns its length.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file otherwise; [`Error::Io`].
    pub(crate) fn check(&self, file: &File, path: &Path) -> Result<u64> {
        let mut head = [0u8; 20];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::corrupt(path, format!("shorter than its header ({e})")))?;
        if head != self.header()[..20] {
            return Err(Error::corrupt(
                path,
                format!(
                    "not a tierdb {} of format version {} (bad magic, version or checksum)",
                    self.what, self.version
                ),
            ));
        }
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let size = u64::from(self.record_size);
        if len < HEADER_SIZE || !(len - HEADER_SIZE).is_multiple_of(size) {
            return Err(Error::corrupt(
                path,
                format!("{len} bytes is not a 4096-byte header plus whole {size}-byte records"),
            ));
        }
        Ok(len)
    }
}
