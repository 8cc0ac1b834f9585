//! The data directory lock: one writing process per directory.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::Error;
use crate::error::Result;

/// Holds an exclusive lock on `<data dir>/LOCK` for as long as it lives; the file records the
/// holder's pid so a refused process can say who holds it. The OS drops the lock when the
/// process dies, so a crash never leaves the directory locked.
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    /// Lock file name inside the data directory.
    pub(crate) const FILE_NAME: &'static str = "LOCK";

    /// Takes the lock without waiting.
    ///
    /// # Errors
    /// [`Error::Locked`] naming the holder when another process (or another engine in this
    /// process) holds it; [`Error::Io`] when the file cannot be opened.
    pub(crate) fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join(Self::FILE_NAME);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(Error::Locked {
                    path,
                    holder: if holder.is_empty() {
                        "unknown holder".to_string()
                    } else {
                        holder.to_string()
                    },
                });
            }
            Err(TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        }
        // The holder's pid is for the refusal message of the next process only: a full disk
        // that keeps it from being written must not stop an engine that holds the lock.
        let me = format!("pid {}", std::process::id());
        if let Err(e) = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(me.as_bytes()))
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot record this process as the lock holder");
        }
        Ok(DirLock { _file: file })
    }
}
