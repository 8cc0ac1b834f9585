//! The series log: the append-only file that makes the key <-> id map survive restarts.
//!
//! Byte layout, little-endian throughout. Offsets are derived one from another in the
//! constants below; this table mirrors them.
//!
//! File header (16 bytes):
//!
//! | offset | size | field                                   |
//! |--------|------|-----------------------------------------|
//! | 0      | 8    | magic, `TIERDBSR`                       |
//! | 8      | 4    | format version, u32, currently 1        |
//! | 12     | 4    | reserved, u32, must be 0                |
//!
//! Then records, back to back from offset 16 to the end of the file. Record `n` holds
//! series id `n`, so ids are dense and the file is their only source:
//!
//! | offset | size        | field                                        |
//! |--------|-------------|----------------------------------------------|
//! | 0      | 4           | `payload_len`, u32, 4..=[`MAX_PAYLOAD`]      |
//! | 4      | 4           | CRC-32 (IEEE) of the payload                 |
//! | 8      | payload_len | payload: u32 series id, then the canonical   |
//! |        |             | key text in UTF-8 (`payload_len - 4` bytes)  |
//!
//! A record is written with one `write` call. A crash can therefore leave at most one
//! incomplete record, at the end; [`load`] drops it. Anything else that fails to decode
//! is refused, because silently skipping a record would hand its id to another series.
//!
//! Version 2 is version 1 plus holes: a record with no key text holds the id of a deleted
//! series, which is never handed out again (its slot stays empty). A log gets version 2 only
//! when a deletion rewrites it whole ([`rewrite`]: a new file, fsynced, renamed over the old
//! one), so a directory without deletions stays readable by a build that reads version 1,
//! and one with deletions is refused there by its version, not misread.
//!
//! Version 3 is version 2 plus tier sets: every record's payload holds one more byte after
//! the id, the index of the series' tier set (0 for the default one; see
//! `crate::config::TierSet`), and then the key text, if any. A log is written as version 3
//! once a configuration has `[[set]]`s ([`rewrite`] converts an older log whole, each of its
//! series in the default set); older builds refuse it by its version.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;

use crate::error::Error;
use crate::error::Result;
use crate::registry::SeriesId;

/// Identifies a series log among the files in a data directory.
pub(super) const MAGIC: [u8; 8] = *b"TIERDBSR";
/// The layout of a log without holes: what a new log is written as.
pub(super) const FORMAT_VERSION: u32 = 1;
/// The layout of a log with holes (deleted series); written only by [`rewrite`].
pub(super) const FORMAT_VERSION_WITH_HOLES: u32 = 2;
/// The layout of a log that records each series' tier set (and may hold holes).
pub(super) const FORMAT_VERSION_WITH_SETS: u32 = 3;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
const RESERVED_OFFSET: usize = VERSION_OFFSET + size_of::<u32>();
/// Bytes before the first record.
pub(super) const HEADER_LEN: usize = RESERVED_OFFSET + size_of::<u32>();

const LEN_OFFSET: usize = 0;
const CRC_OFFSET: usize = LEN_OFFSET + size_of::<u32>();
const PAYLOAD_OFFSET: usize = CRC_OFFSET + size_of::<u32>();
/// Bytes before a record's payload.
pub(super) const RECORD_HEADER_LEN: usize = PAYLOAD_OFFSET;

const ID_OFFSET: usize = 0;
const TEXT_OFFSET: usize = ID_OFFSET + size_of::<u32>();
/// Version 3: the tier set's byte, where the text starts in older versions.
const SET_OFFSET: usize = TEXT_OFFSET;
/// Version 3: where the text starts.
const TEXT_OFFSET_WITH_SETS: usize = SET_OFFSET + size_of::<u8>();

/// Largest payload a record may claim. Keys are much shorter (see `SeriesKey::MAX_LEN`);
/// the cap exists so that a garbage length reads as damage instead of a huge allocation,
/// and so that a torn tail is at most one record long.
pub(super) const MAX_PAYLOAD: usize = 64 * 1024;

/// The header every new series log starts with.
pub(super) fn header() -> [u8; HEADER_LEN] {
    header_of(FORMAT_VERSION)
}

/// The header of a log of format `version`.
fn header_of(version: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&MAGIC);
    h[VERSION_OFFSET..RESERVED_OFFSET].copy_from_slice(&version.to_le_bytes());
    // Reserved stays zero.
    h
}

/// One complete record, ready for a single write call: with the series' tier set `set` in
/// a log of version 3, without in older ones.
pub(super) fn encode_record(id: SeriesId, set: Option<u8>, text: &str) -> Vec<u8> {
    let payload_len = TEXT_OFFSET + usize::from(set.is_some()) + text.len();
    let mut rec = Vec::with_capacity(RECORD_HEADER_LEN + payload_len);
    // Keys are capped far below MAX_PAYLOAD, so the length fits a u32.
    rec.extend_from_slice(&(payload_len as u32).to_le_bytes());
    rec.extend_from_slice(&[0; 4]);
    rec.extend_from_slice(&id.0.to_le_bytes());
    rec.extend(set);
    rec.extend_from_slice(text.as_bytes());
    let crc = crc32fast::hash(&rec[PAYLOAD_OFFSET..]);
    rec[CRC_OFFSET..PAYLOAD_OFFSET].copy_from_slice(&crc.to_le_bytes());
    rec
}

/// The log file opened for appending, with what it holds.
pub(super) struct Loaded {
    /// Opened read + append, positioned so that writes land at the end; `None` when loaded
    /// read-only.
    pub file: Option<File>,
    /// Key text of every record, back to back in id order (not yet checked to be
    /// canonical).
    pub texts: String,
    /// End of each record's text in `texts`, in id order.
    pub ends: Vec<u64>,
    /// Each record's tier set, in id order, for a log of version 3; `None` for older logs
    /// (every series in the default set).
    pub sets: Option<Vec<u8>>,
    /// File length after loading (any torn tail already cut off).
    pub len: u64,
}

/// Reads the log without changing it, for a reader beside a running writer: a missing file
/// or a header still being written reads as no series, and an incomplete last record (an
/// append in flight, or torn) is left out, not cut off.
fn load_read_only(path: &Path) -> Result<Loaded> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io(path, e)),
    };
    let empty = Loaded {
        file: None,
        texts: String::new(),
        ends: Vec::new(),
        sets: None,
        len: 0,
    };
    if bytes.len() < HEADER_LEN {
        if header().starts_with(&bytes) {
            return Ok(empty);
        }
        return Err(Error::corrupt(
            path,
            "not a tierdb series log (shorter than its header)",
        ));
    }
    let version = check_header(path, &bytes[..HEADER_LEN])?;
    // A torn tail here is most likely an append in flight: left out, not cut off.
    let records = records(path, bytes, version)?;
    Ok(Loaded {
        len: records.end as u64,
        texts: records.texts,
        ends: records.ends,
        sets: records.sets,
        ..empty
    })
}

/// Opens or creates the log at `path` and reads every record.
///
/// # Errors
///
/// [`Error::Io`] when the file cannot be opened, read, created or truncated;
/// [`Error::CorruptFile`] for a foreign header or a damaged record that is not a torn tail.
pub(super) fn load(path: &Path, writable: bool) -> Result<Loaded> {
    let io = |e| Error::io(path, e);
    if !writable {
        return load_read_only(path);
    }
    // A rewrite a crash cut short before its rename: the log itself is whole.
    let _ = std::fs::remove_file(path.with_extension("log.rewrite"));
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(io)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io)?;

    if bytes.len() < HEADER_LEN {
        let header = header();
        if !header.starts_with(&bytes) {
            return Err(Error::corrupt(
                path,
                format!(
                    "not a tierdb series log ({} bytes, shorter than its header)",
                    bytes.len()
                ),
            ));
        }
        // A new file, or one whose creation was cut short: (re)write the header.
        if !bytes.is_empty() {
            tracing::warn!(
                path = %path.display(),
                len = bytes.len(),
                "series log header was incomplete; rewriting it"
            );
        }
        file.set_len(0).map_err(io)?;
        file.write_all(&header).map_err(io)?;
        file.sync_all().map_err(io)?;
        // The new file's directory entry must survive power loss, or the whole log could
        // vanish after ids were handed out.
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        crate::storage::disk::sync_dir(dir.unwrap_or(Path::new(".")))?;
        return Ok(Loaded {
            file: Some(file),
            texts: String::new(),
            ends: Vec::new(),
            sets: None,
            len: HEADER_LEN as u64,
        });
    }

    let version = check_header(path, &bytes[..HEADER_LEN])?;
    let file_len = bytes.len();
    let Records {
        texts,
        ends,
        sets,
        end: pos,
        torn,
    } = records(path, bytes, version)?;
    if let Some(reason) = torn {
        tracing::warn!(
            path = %path.display(),
            offset = pos,
            dropped_bytes = file_len - pos,
            reason,
            "dropping a torn last record of the series log (an append was cut short)"
        );
        file.set_len(pos as u64).map_err(io)?;
        file.sync_all().map_err(io)?;
    }
    Ok(Loaded {
        file: Some(file),
        texts,
        ends,
        sets,
        len: pos as u64,
    })
}

/// The records of a log, decoded.
struct Records {
    /// Their texts, back to back (see [`Loaded::texts`]).
    texts: String,
    /// End of each text in `texts`.
    ends: Vec<u64>,
    /// Each record's tier set (version 3 only).
    sets: Option<Vec<u8>>,
    /// Where the intact part of the file ends.
    end: usize,
    /// Why the rest was not read, when a torn last record (an append cut short) follows.
    torn: Option<String>,
}

/// Decodes the records after the header. Their texts are moved to the front of `bytes`,
/// which becomes the arena of texts with no second copy of the file in memory. A damaged
/// record other than a torn last one is refused: skipping a record would hand its id to
/// another series. Only a log of version 2 may hold holes (records without text).
fn records(path: &Path, mut bytes: Vec<u8>, version: u32) -> Result<Records> {
    let mut ends = Vec::new();
    let with_sets = version >= FORMAT_VERSION_WITH_SETS;
    let mut sets = Vec::new();
    // Bytes of text kept at the front; always behind `pos`, since every record's header
    // and id are dropped.
    let mut kept = 0;
    let mut pos = HEADER_LEN;
    let mut torn = None;
    while pos < bytes.len() {
        let count = ends.len();
        let at = |reason: &str| {
            Error::corrupt(path, format!("record {count} at offset {pos}: {reason}"))
        };
        let (payload, next) = match frame_at(&bytes, pos) {
            Ok(frame) => frame,
            Err(reason) if is_torn_tail(&bytes, pos) => {
                torn = Some(reason);
                break;
            }
            Err(reason) => return Err(at(&reason)),
        };
        // The checksum holds, so this is what was written: a bad payload is not a torn
        // append and is refused wherever it is.
        let (set, text) =
            decode_payload(payload, count, with_sets).map_err(|reason| at(&reason))?;
        let len = text.len();
        sets.extend(set);
        if len == 0 && version < FORMAT_VERSION_WITH_HOLES {
            return Err(at(&format!(
                "no key text (a deleted series' hole) in a log of version {version}"
            )));
        }
        bytes.copy_within(next - len..next, kept);
        kept += len;
        ends.push(kept as u64);
        pos = next;
    }
    bytes.truncate(kept);
    bytes.shrink_to_fit();
    ends.shrink_to_fit();
    // Each text was checked to be UTF-8 on its own, so their concatenation is.
    let texts = String::from_utf8(bytes)
        .map_err(|e| Error::corrupt(path, format!("key text is not UTF-8: {e}")))?;
    Ok(Records {
        texts,
        ends,
        sets: with_sets.then(|| {
            sets.shrink_to_fit();
            sets
        }),
        end: pos,
        torn,
    })
}

/// Checks the header and returns the log's format version.
fn check_header(path: &Path, h: &[u8]) -> Result<u32> {
    if h[MAGIC_OFFSET..VERSION_OFFSET] != MAGIC {
        return Err(Error::corrupt(path, "not a tierdb series log (bad magic)"));
    }
    let version = read_u32(h, VERSION_OFFSET);
    if !(FORMAT_VERSION..=FORMAT_VERSION_WITH_SETS).contains(&version) {
        return Err(Error::corrupt(
            path,
            format!(
                "series log format version {version}; this build reads versions \
                 {FORMAT_VERSION} to {FORMAT_VERSION_WITH_SETS}"
            ),
        ));
    }
    let reserved = read_u32(h, RESERVED_OFFSET);
    if reserved != 0 {
        return Err(Error::corrupt(
            path,
            format!("reserved header field is {reserved:#x}, expected 0"),
        ));
    }
    Ok(version)
}

/// Checks a framed payload's id against the one its position gives and returns its tier set
/// (`with_sets`: a log of version 3) and its text.
fn decode_payload(
    payload: &[u8],
    expected_id: usize,
    with_sets: bool,
) -> std::result::Result<(Option<u8>, &str), String> {
    let id = read_u32(payload, ID_OFFSET);
    if id as usize != expected_id {
        return Err(format!("holds id {id} where id {expected_id} was expected"));
    }
    let (set, text) = if with_sets {
        let Some(&set) = payload.get(SET_OFFSET) else {
            return Err("no tier set byte in a log of version 3".to_owned());
        };
        (Some(set), &payload[TEXT_OFFSET_WITH_SETS..])
    } else {
        (None, &payload[TEXT_OFFSET..])
    };
    let text = std::str::from_utf8(text).map_err(|e| format!("key text is not UTF-8: {e}"))?;
    Ok((set, text))
}

/// Checks the framing (length and checksum) of the record at `pos` and returns its
/// payload and end.
fn frame_at(bytes: &[u8], pos: usize) -> std::result::Result<(&[u8], usize), String> {
    let rest = &bytes[pos..];
    if rest.len() < RECORD_HEADER_LEN {
        return Err(format!(
            "{} bytes left, fewer than a record header",
            rest.len()
        ));
    }
    let len = read_u32(rest, LEN_OFFSET) as usize;
    if !(TEXT_OFFSET..=MAX_PAYLOAD).contains(&len) {
        return Err(format!(
            "impossible payload length {len} (allowed {TEXT_OFFSET}..={MAX_PAYLOAD})"
        ));
    }
    let Some(payload) = rest.get(PAYLOAD_OFFSET..PAYLOAD_OFFSET + len) else {
        return Err(format!(
            "payload of {len} bytes runs past the end of the file"
        ));
    };
    let expected = read_u32(rest, CRC_OFFSET);
    let actual = crc32fast::hash(payload);
    if expected != actual {
        return Err(format!(
            "checksum mismatch (stored {expected:#010x}, computed {actual:#010x})"
        ));
    }
    Ok((payload, pos + PAYLOAD_OFFSET + len))
}

/// Whether the damaged record at `pos` can be the one append a crash cut short: what is
/// left fits in one record, and no intact record starts anywhere inside it. A later intact
/// record means the damage is in the middle of the log, which a crash cannot cause.
fn is_torn_tail(bytes: &[u8], pos: usize) -> bool {
    let rest = bytes.len() - pos;
    if rest > RECORD_HEADER_LEN + MAX_PAYLOAD {
        return false;
    }
    // Almost every offset fails the length check at once (key text has no NUL bytes, so
    // a plausible length needs the zero bytes of a real record header); only a real
    // record passes its checksum.
    (pos + 1..bytes.len()).all(|q| frame_at(bytes, q).is_err())
}

/// Replaces the log at `path` whole with one of version 2 holding `texts` in id order (an
/// empty text is a hole), or of version 3 when `sets` gives each series' tier set, crash-safely: the new log is written beside it and fsynced, then
/// renamed over it and the directory fsynced, so a crash leaves the old log or the new one,
/// never a mix. Returns the new log opened for appending, and its length.
///
/// # Errors
/// [`Rewrite::NotDone`] when the new log could not be written, synced or renamed (the old
/// log is in place); [`Rewrite::Done`] when the rename was done and only syncing the
/// directory or reopening the new log failed (the new log is the one on disk).
pub(super) fn rewrite<'a>(
    path: &Path,
    texts: impl Iterator<Item = &'a str>,
    sets: Option<&[u8]>,
) -> std::result::Result<(File, u64), Rewrite> {
    let temp = path.with_extension("log.rewrite");
    let version = match sets {
        Some(_) => FORMAT_VERSION_WITH_SETS,
        None => FORMAT_VERSION_WITH_HOLES,
    };
    let mut bytes = header_of(version).to_vec();
    for (id, text) in texts.enumerate() {
        let set = sets.map(|sets| sets[id]);
        bytes.extend_from_slice(&encode_record(SeriesId(id as u32), set, text));
    }
    let written = (|| {
        let mut file = File::create(&temp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(Rewrite::NotDone(Error::io(&temp, e)));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    crate::storage::disk::sync_dir(dir.unwrap_or(Path::new("."))).map_err(Rewrite::Done)?;
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .open(path)
        .map_err(|e| Rewrite::Done(Error::io(path, e)))?;
    Ok((file, bytes.len() as u64))
}

/// Why [`rewrite`] failed, and whether the new log replaced the old one.
pub(super) enum Rewrite {
    /// The old log is in place, unchanged.
    NotDone(Error),
    /// The new log replaced the old one, but it could not be made durable or reopened.
    Done(Error),
}

fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(b)
}
