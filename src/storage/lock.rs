//! The data directory lock: one writing process per directory.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

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

    /// How long a lock this process holds by its own record is waited for: longer than a
    /// child started on a loaded machine takes from its fork to its exec.
    const CHILD_WAIT: Duration = Duration::from_secs(1);

    /// Takes the lock without waiting, except on this process itself: a lock the file says
    /// this process holds is retried for up to [`DirLock::CHILD_WAIT`], since a child this
    /// process is starting shares the lock from its fork until its exec (an engine closed
    /// and opened again while another thread spawns a process). Another engine of this
    /// process that holds the directory is refused once that wait is over.
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
        let me = format!("pid {}", std::process::id());
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    let holder = holder(&mut file);
                    if holder == me && started.elapsed() < Self::CHILD_WAIT {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(50));
                        continue;
                    }
                    return Err(Error::Locked { path, holder });
                }
                Err(TryLockError::Error(e)) => return Err(Error::io(&path, e)),
            }
        }
        // The holder's pid names it in the next opener's refusal, and tells an opener in this
        // process that the lock is its own: best effort, since a full disk that keeps it from
        // being written must not stop an engine that holds the lock.
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

/// What the lock file says of its holder, read from its start.
fn holder(file: &mut File) -> String {
    let mut holder = String::new();
    let _ = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut holder));
    match holder.trim() {
        "" => "unknown holder".to_string(),
        holder => holder.to_string(),
    }
}
