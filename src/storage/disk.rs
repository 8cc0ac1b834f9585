//! The file-system steps the durable files of a data directory take: reserving space before
//! anything is mapped, making a directory entry survive power loss, and replacing a small
//! file atomically.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::Error;
use crate::error::Result;

/// Reserves disk for `file` up to `len` bytes, so a full disk fails here (at creation or
/// growth) instead of raising SIGBUS on a later store into the mapping. Filesystems without
/// `fallocate` get the bytes from the current end to `len` written as zeros: a sparse
/// extension would only move the failure to that later store. Leaves the file offset at 0.
///
/// # Errors
/// [`Error::Io`] naming `path` (ENOSPC included).
pub(crate) fn reserve_space(file: &mut File, path: &Path, len: u64) -> Result<()> {
    use rustix::fs::{fallocate, FallocateFlags};
    let io = |e| Error::io(path, e);
    match fallocate(&*file, FallocateFlags::empty(), 0, len) {
        Ok(()) => {}
        Err(rustix::io::Errno::OPNOTSUPP) => {
            let zeros = vec![0u8; 1 << 20];
            let mut at = file.seek(SeekFrom::End(0)).map_err(io)?;
            while at < len {
                let n = (len - at).min(zeros.len() as u64) as usize;
                file.write_all(&zeros[..n]).map_err(io)?;
                at += n as u64;
            }
        }
        Err(e) => return Err(io(e.into())),
    }
    file.rewind().map_err(io)
}

/// Reserves disk for bytes `offset..offset + len` of `file` without changing its length: a
/// page of a sparse hot file, before the first store into it through the mapping (a store
/// into a hole on a full disk would raise SIGBUS instead of returning an error). `Ok(false)`
/// where the filesystem has no `fallocate`.
///
/// # Errors
/// [`Error::Io`] naming `path` (ENOSPC included).
pub(crate) fn reserve_range(file: &File, path: &Path, offset: u64, len: u64) -> Result<bool> {
    use rustix::fs::{fallocate, FallocateFlags};
    match fallocate(file, FallocateFlags::KEEP_SIZE, offset, len) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::OPNOTSUPP) => Ok(false),
        Err(e) => Err(Error::io(path, e.into())),
    }
}

/// Whether `file` lives on tmpfs (memory): there a read through a shared mapping of a hole
/// allocates a page like a write does, and raises SIGBUS when the filesystem is full, so
/// period files there are not made sparse.
pub(crate) fn is_tmpfs(file: &File) -> bool {
    /// `TMPFS_MAGIC` of `statfs(2)`.
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(fs) = rustix::fs::fstatfs(file) else {
        return false;
    };
    // `f_type`'s type differs between targets (i64, u32, i32).
    #[allow(clippy::unnecessary_cast)]
    let kind = fs.f_type as i64;
    kind == TMPFS_MAGIC
}

/// fsync of a directory, so a file created, renamed or unlinked in it survives power loss.
///
/// # Errors
/// [`Error::Io`] naming `dir`.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// `path`'s name while it is being created (`<path>.tmp`, [`super::format::TEMP_SUFFIX`]):
/// what an open removes when a crash left it behind.
pub(crate) fn temp_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(super::format::TEMP_SUFFIX);
    std::path::PathBuf::from(name)
}

/// Whether the file name `name` is one [`temp_path`] gives: a file still being created.
pub(crate) fn is_temp(name: impl AsRef<std::ffi::OsStr>) -> bool {
    (name.as_ref().as_encoded_bytes()).ends_with(super::format::TEMP_SUFFIX.as_bytes())
}

/// Replaces `path` with `bytes` so a crash leaves the old content or the new one, never a
/// mix: written under `<path>.tmp`, synced, renamed over `path`, the directory synced.
///
/// # Errors
/// [`Error::Io`] naming the file or directory whose step failed; the temporary file is
/// removed.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let temp = temp_path(path);
    let written = File::create(&temp)
        .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_all()))
        .map_err(|e| Error::io(&temp, e))
        .and_then(|()| std::fs::rename(&temp, path).map_err(|e| Error::io(path, e)));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written?;
    sync_dir(
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
}

/// Removes `path`, and makes that durable (its directory synced); a missing file is not an
/// error. What an older version's intent file (a deletion's, a retype's) comes to once the
/// open finished its work.
///
/// # Errors
/// [`Error::Io`] naming the file or its directory.
pub(crate) fn remove_durably(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(
            path.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new(".")),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Whether `file` holds data (not a hole) anywhere in `from..to`. A filesystem that cannot
/// tell holes from data (no `SEEK_DATA`) answers true for a range inside the file.
#[cfg(feature = "cluster")]
pub(crate) fn holds_data(file: &File, from: u64, to: u64) -> bool {
    use rustix::fs::{seek, SeekFrom};
    match seek(file, SeekFrom::Data(from)) {
        Ok(data) => data < to,
        Err(rustix::io::Errno::NXIO) => false,
        Err(_) => from < to,
    }
}
