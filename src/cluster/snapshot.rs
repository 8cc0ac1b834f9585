//! A copy of one partition's engine directory, taken from a live replica to rebuild another
//! (a node back with an empty disk, or one away for longer than the log keeps messages).
//! With it, the log's retention need only cover a rebuild, not the tiers' retention: the new
//! replica starts from the copy's applied sequence and reads only the log's tail.
//!
//! The holder takes the copy between two groups of messages ([`Engine::with_files_still`]:
//! no apply, no maintenance pass, no batch runs meanwhile), so the files agree with the
//! applied sequence in `apply.state`, which travels with them. The copy is written to a local
//! file first, so the holder's apply pauses only for a local copy, then sent over HTTP. The
//! receiver writes it into a fresh directory, checks every file's CRC and the end marker,
//! syncs it, and only then puts it in place of the partition's directory.
//!
//! Stream layout (little-endian):
//! ```text
//! "TDBSNAP1"   8 bytes magic
//! partition    u32
//! applied      u64    the stream sequence the files hold
//! crc          u32    CRC-32 of the 20 bytes above
//! entries, each:
//!   b'F'       u8
//!   path len   u16    1..=1024
//!   path       UTF-8, relative, '/'-separated; components of [A-Za-z0-9._-], not "." or ".."
//!   length     u64    file length in bytes
//!   bytes
//!   crc        u32    CRC-32 of path len, path, length and bytes
//! end:
//!   b'E'       u8
//!   files      u32    entries before it
//!   bytes      u64    their lengths added up
//! ```
//! The directory's lock file is not copied: the receiver takes its own; nor is a file being
//! created (`*.tmp`: the engine's chunk creator runs during the copy, and may rename it
//! before it is read; an open removes such files anyway). The open marker is copied,
//! so the receiver's open checks the files as after a crash, which the copy is, in effect.
//!
//! [`Engine::with_files_still`]: crate::engine::Engine::with_files_still

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use crate::engine::{CopiedFile, Engine, StillFiles};
use crate::error::Error;
use crate::error::Result;
use crate::storage::disk;

const MAGIC: &[u8; 8] = b"TDBSNAP1";
const FILE_TAG: u8 = b'F';
const END_TAG: u8 = b'E';
const MAX_PATH: usize = 1024;
/// The lock file every open engine holds: never copied.
const LOCK_FILE: &str = "LOCK";

/// What a snapshot held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SnapshotInfo {
    /// The partition it is of.
    pub(crate) partition: u32,
    /// The log sequence its files hold.
    pub(crate) applied: u64,
    /// Files copied.
    pub(crate) files: u32,
    /// Their bytes, added up.
    pub(crate) bytes: u64,
}

/// Puts the snapshot in `source` in place of the partition directory `dir`: read into
/// `<dir>.incoming` beside it ([`read`]), then, while holding `dir`'s lock, `dir` renamed
/// aside to `<dir>.replaced`, the copy renamed into its place, and the old one removed. An
/// engine that still has `dir` open (in this process: a read or a copy for a peer held the
/// partition's store past its stop) refuses it: it would go on compacting, creating and
/// unlinking files by name in the copy, and take the copy's open marker at its close. A
/// crash leaves a whole directory at `dir` or at `<dir>.replaced`, never one half removed
/// ([`tidy_unfinished`] puts it back). What was read into `<dir>.incoming` is removed on
/// any failure.
///
/// # Errors
/// [`Error::Locked`] while an engine holds `dir`; as [`read`]; [`Error::Io`].
pub(crate) fn place(source: &Path, partition: u32, dir: &Path) -> Result<SnapshotInfo> {
    let (incoming, aside) = (dir.with_extension(INCOMING), dir.with_extension(ASIDE));
    let placed = remove_dir_if_any(&incoming)
        .and_then(|()| read(source, partition, &incoming))
        .and_then(|info| swap_in(&incoming, &aside, dir).map(|()| info));
    if placed.is_err() {
        let _ = std::fs::remove_dir_all(&incoming);
    }
    let info = placed?;
    // The copy is in place: the old files are only tidied away (the next start removes
    // them if this fails).
    if let Err(e) = remove_dir_if_any(&aside) {
        tracing::warn!(error = %e, "could not remove a partition's replaced directory");
    }
    Ok(info)
}

/// [`place`]'s swap, under `dir`'s lock: `dir` (if any) renamed to `aside`, `incoming` to
/// `dir`; a failure of the second rename puts `dir` back.
fn swap_in(incoming: &Path, aside: &Path, dir: &Path) -> Result<()> {
    let held = Engine::lock_if_present(dir)?;
    remove_dir_if_any(aside)?;
    if held.is_some() {
        std::fs::rename(dir, aside).map_err(|e| Error::io(dir, e))?;
    }
    if let Err(e) = std::fs::rename(incoming, dir) {
        if held.is_some() {
            // Back in place, or the next start puts it back.
            let _ = std::fs::rename(aside, dir);
        }
        return Err(Error::io(dir, e));
    }
    match dir.parent() {
        Some(parent) => disk::sync_dir(parent),
        None => Ok(()),
    }
}

/// What a rebuild that stopped part way left in `partitions` (a node's directory of
/// partition directories): a downloaded copy (`<p>.snapshot`) and a copy being read
/// (`<p>.incoming/`) are removed; a directory renamed aside (`<p>.replaced/`, a name no
/// one gives by hand) is removed when `<p>` is in place, and put back when the crash came
/// before the copy took its place.
///
/// # Errors
/// [`Error::Io`] naming what could not be listed, removed or renamed.
pub(crate) fn tidy_unfinished(partitions: &Path) -> Result<()> {
    for entry in std::fs::read_dir(partitions).map_err(|e| Error::io(partitions, e))? {
        let path = entry.map_err(|e| Error::io(partitions, e))?.path();
        match path.extension().and_then(|e| e.to_str()) {
            Some(DOWNLOAD) => std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?,
            Some(INCOMING) => remove_dir_if_any(&path)?,
            Some(ASIDE) => {
                let dir = path.with_extension("");
                if dir.exists() {
                    remove_dir_if_any(&path)?;
                } else {
                    tracing::warn!(
                        dir = %dir.display(),
                        "a rebuild stopped before its copy took the partition's place; the \
                         partition's own directory is put back"
                    );
                    std::fs::rename(&path, &dir).map_err(|e| Error::io(&dir, e))?;
                    disk::sync_dir(partitions)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The extension of a downloaded copy beside the partition directories.
pub(crate) const DOWNLOAD: &str = "snapshot";
/// The extension of a copy being read beside its partition directory.
const INCOMING: &str = "incoming";
/// The extension of a partition directory renamed aside while a copy takes its place.
const ASIDE: &str = "replaced";

/// Removes `dir` and what it holds, if it exists.
fn remove_dir_if_any(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(dir, e)),
        _ => Ok(()),
    }
}

/// Writes the snapshot of the engine directory `still` holds (the files a copy takes:
/// [`StillFiles::files`]), partition `partition` up to what it applied, to `out`.
///
/// # Errors
/// [`Error::Io`] naming the file that could not be read or written.
pub(crate) fn write(
    still: &StillFiles<'_>,
    partition: u32,
    out: &mut impl Write,
    out_path: &Path,
) -> Result<SnapshotInfo> {
    let (dir, applied) = (still.dir, still.applied);
    let fail = |e: std::io::Error| Error::io(out_path, e);
    out.write_all(&header(partition, applied)).map_err(fail)?;
    let mut info = SnapshotInfo {
        partition,
        applied,
        files: 0,
        bytes: 0,
    };
    let mut buffer = vec![0u8; 1 << 16];
    for CopiedFile { relative, len } in still.files()? {
        let path = dir.join(&relative);
        let text = relative_text(&relative)
            .ok_or_else(|| Error::corrupt(&path, "a file name a snapshot cannot carry"))?;
        let mut file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        let mut crc = crc32fast::Hasher::new();
        out.write_all(&[FILE_TAG]).map_err(fail)?;
        for part in [
            &(text.len() as u16).to_le_bytes()[..],
            text.as_bytes(),
            &len.to_le_bytes(),
        ] {
            out.write_all(part).map_err(fail)?;
            crc.update(part);
        }
        let mut left = len;
        while left > 0 {
            let n = buffer.len().min(left as usize);
            file.read_exact(&mut buffer[..n])
                .map_err(|e| Error::io(&path, e))?;
            crc.update(&buffer[..n]);
            out.write_all(&buffer[..n]).map_err(fail)?;
            left -= n as u64;
        }
        out.write_all(&crc.finalize().to_le_bytes()).map_err(fail)?;
        info.files += 1;
        info.bytes += len;
    }
    out.write_all(&[END_TAG]).map_err(fail)?;
    out.write_all(&info.files.to_le_bytes()).map_err(fail)?;
    out.write_all(&info.bytes.to_le_bytes()).map_err(fail)?;
    out.flush().map_err(fail)?;
    Ok(info)
}

/// The stream's first 24 bytes.
fn header(partition: u32, applied: u64) -> [u8; 24] {
    let mut bytes = [0u8; 24];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..12].copy_from_slice(&partition.to_le_bytes());
    bytes[12..20].copy_from_slice(&applied.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..20]);
    bytes[20..].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// `relative` as the stream writes it, when every component is one a snapshot may carry.
fn relative_text(relative: &Path) -> Option<String> {
    let parts: Option<Vec<&str>> = relative.iter().map(|c| c.to_str()).collect();
    let text = parts?.join("/");
    valid_path(&text).then_some(text)
}

/// A relative path of plain components: nothing that climbs out of the directory or names
/// something odd.
fn valid_path(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_PATH
        && text.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        })
}

/// Reads the snapshot in the file `source` into the directory `dest`, which must not exist
/// yet, and syncs every file and directory it wrote. `partition` is the partition asked for.
///
/// # Errors
/// [`Error::CorruptFile`] naming `source` when it is not a snapshot, is of another partition,
/// is cut short, or a file's CRC or a path is wrong (whatever was written to `dest` stays
/// for the caller to remove); [`Error::Io`].
pub(crate) fn read(source: &Path, partition: u32, dest: &Path) -> Result<SnapshotInfo> {
    let file = File::open(source).map_err(|e| Error::io(source, e))?;
    let mut input = BufReader::with_capacity(1 << 16, file);
    let corrupt = |why: String| Error::corrupt(source, &why);
    let io = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::corrupt(source, "cut short: no end marker")
        } else {
            Error::io(source, e)
        }
    };
    let head: [u8; 24] = read_array(&mut input).map_err(io)?;
    if &head[..8] != MAGIC {
        return Err(corrupt("not a tierdb partition snapshot".into()));
    }
    let theirs = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    let applied = u64::from_le_bytes(head[12..20].try_into().expect("8 bytes"));
    if header(theirs, applied) != head {
        return Err(corrupt("its header's CRC does not match".into()));
    }
    if theirs != partition {
        return Err(corrupt(format!(
            "a snapshot of partition {theirs}, not {partition}"
        )));
    }
    std::fs::create_dir(dest).map_err(|e| Error::io(dest, e))?;
    let mut info = SnapshotInfo {
        partition,
        applied,
        files: 0,
        bytes: 0,
    };
    let mut dirs = vec![dest.to_path_buf()];
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let [tag] = read_array(&mut input).map_err(io)?;
        match tag {
            FILE_TAG => {}
            END_TAG => {
                let files = u32::from_le_bytes(read_array(&mut input).map_err(io)?);
                let bytes = u64::from_le_bytes(read_array(&mut input).map_err(io)?);
                if (files, bytes) != (info.files, info.bytes) {
                    return Err(corrupt(format!(
                        "its end marker counts {files} files of {bytes} bytes, it held {} of {}",
                        info.files, info.bytes
                    )));
                }
                if input.read(&mut [0u8]).map_err(io)? != 0 {
                    return Err(corrupt("bytes after its end marker".into()));
                }
                break;
            }
            other => return Err(corrupt(format!("unknown entry tag {other:#04x}"))),
        }
        let mut crc = crc32fast::Hasher::new();
        let path_len_bytes: [u8; 2] = read_array(&mut input).map_err(io)?;
        crc.update(&path_len_bytes);
        let path_len = u16::from_le_bytes(path_len_bytes) as usize;
        if path_len == 0 || path_len > MAX_PATH {
            return Err(corrupt(format!("a path of {path_len} bytes")));
        }
        let mut path = vec![0u8; path_len];
        input.read_exact(&mut path).map_err(io)?;
        crc.update(&path);
        let path = String::from_utf8(path)
            .ok()
            .filter(|p| valid_path(p) && p != LOCK_FILE)
            .ok_or_else(|| corrupt("a path a snapshot may not carry".into()))?;
        let len_bytes: [u8; 8] = read_array(&mut input).map_err(io)?;
        crc.update(&len_bytes);
        let len = u64::from_le_bytes(len_bytes);
        let target = dest.join(&path);
        if let Some(parent) = target.parent() {
            if !parent.exists() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
                dirs.push(parent.to_path_buf());
            }
        }
        let mut out = BufWriter::with_capacity(1 << 16, {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target)
                .map_err(|e| Error::io(&target, e))?;
            file
        });
        let mut left = len;
        while left > 0 {
            let n = buffer
                .len()
                .min(usize::try_from(left).unwrap_or(usize::MAX));
            input.read_exact(&mut buffer[..n]).map_err(io)?;
            crc.update(&buffer[..n]);
            out.write_all(&buffer[..n])
                .map_err(|e| Error::io(&target, e))?;
            left -= n as u64;
        }
        let stored = u32::from_le_bytes(read_array(&mut input).map_err(io)?);
        if stored != crc.finalize() {
            return Err(corrupt(format!("the CRC of {path} does not match")));
        }
        let file = out
            .into_inner()
            .map_err(|e| Error::io(&target, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(&target, e))?;
        info.files += 1;
        info.bytes += len;
    }
    // Deepest first, so each directory's entry is synced after what it holds.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for dir in &dirs {
        disk::sync_dir(dir)?;
    }
    Ok(info)
}

fn read_array<const N: usize>(input: &mut impl Read) -> std::io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    input.read_exact(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests;
