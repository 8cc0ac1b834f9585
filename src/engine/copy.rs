//! What a copy of an engine directory takes: every file but the lock and files being
//! created, each with the bytes that carry its content. A cluster node copies a partition's
//! directory this way for a peer that rebuilds it ([`Engine::with_files_still`] holds the
//! files still meanwhile); nothing else does, so it comes with the `cluster` feature.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::Engine;
use crate::error::Error;
use crate::error::Result;
use crate::storage::disk;
use crate::storage::format;
use crate::storage::lock::DirLock;

/// The files of an engine directory held still, and what the engine applied up to.
pub(crate) struct StillFiles<'a> {
    /// The directory.
    pub(crate) dir: &'a Path,
    /// [`Engine::applied`] when the files were held.
    pub(crate) applied: u64,
}

/// One file a copy takes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct CopiedFile {
    /// Below the directory.
    pub(crate) relative: PathBuf,
    /// The bytes a copy carries ([`carried_len`]).
    pub(crate) len: u64,
}

impl StillFiles<'_> {
    /// Every file below the directory, the lock file and files being created (`*.tmp`: the
    /// chunk creator runs during a copy, and may rename one before it is read; an open
    /// removes such files anyway) left out, in path order, each with the bytes a copy
    /// carries.
    ///
    /// # Errors
    /// [`Error::Io`] naming what could not be listed or read.
    pub(crate) fn files(&self) -> Result<Vec<CopiedFile>> {
        let mut relative = Vec::new();
        list_files(self.dir, Path::new(""), &mut relative)?;
        relative.sort();
        (relative.into_iter())
            .map(|relative| {
                let path = self.dir.join(&relative);
                let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
                let len = carried_len(&file, &path)?;
                Ok(CopiedFile { relative, len })
            })
            .collect()
    }
}

impl Engine {
    /// Holds the lock of the engine directory `dir`, when there is one: refused
    /// ([`Error::Locked`]) while an engine of this process still has it open. Held, no
    /// engine opens the directory, so it can be replaced whole.
    ///
    /// # Errors
    /// [`Error::Locked`] naming the holder; [`Error::Io`].
    pub(crate) fn lock_if_present(dir: &Path) -> Result<Option<DirectoryHeld>> {
        match dir.is_dir() {
            true => DirLock::acquire(dir).map(|lock| Some(DirectoryHeld { _lock: lock })),
            false => Ok(None),
        }
    }
}

/// An engine directory's lock, held by [`Engine::lock_if_present`] until dropped.
pub(crate) struct DirectoryHeld {
    _lock: DirLock,
}

/// The bytes of `file` a copy carries: all of them, but for a period file whose histogram
/// area holds no data (no distribution series wrote to it) only its header and records: the
/// area would only carry its holes as zeros (8 to 32 times the records). The receiver's open
/// extends the file again, as it does a file an older build made.
///
/// # Errors
/// [`Error::Io`]; a period file whose header does not decode is carried whole (the
/// receiver's open refuses it by name).
fn carried_len(file: &File, path: &Path) -> Result<u64> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let is_period_file = path
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.ends_with(format::FILE_SUFFIX));
    if !is_period_file || len < format::HEADER_LEN as u64 {
        return Ok(len);
    }
    let mut head = vec![0u8; format::HEADER_LEN];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| Error::io(path, e))?;
    let Ok(meta) = format::PeriodMeta::decode(&head, path) else {
        return Ok(len);
    };
    let records = len.min(meta.file_len());
    Ok(match disk::holds_data(file, meta.histogram_offset(), len) {
        true => len,
        false => records,
    })
}

/// Every file below `dir` (relative to the walk's root, in `prefix`), the lock file and files
/// being created left out.
fn list_files(dir: &Path, prefix: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let here = dir.join(prefix);
    for entry in std::fs::read_dir(&here).map_err(|e| Error::io(&here, e))? {
        let entry = entry.map_err(|e| Error::io(&here, e))?;
        let relative = prefix.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
        if kind.is_dir() {
            list_files(dir, &relative, out)?;
        } else if kind.is_file()
            && relative != Path::new(DirLock::FILE_NAME)
            && !disk::is_temp(entry.file_name())
        {
            out.push(relative);
        }
    }
    Ok(())
}
