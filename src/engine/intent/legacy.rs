//! The intent files older builds wrote, one text file per change (`DELETING`, `RETYPING`),
//! before the engine journal held them: a crash there left one behind, and the open's
//! recovery pass finishes it as it does a journal record ([`super::LeftIntents`]), then
//! removes it. A file that does not read is refused by name, never ignored.
//!
//! ```text
//! DELETING:  "tierdb delete intent v1", then one series id per line
//! RETYPING:  "tierdb retype intent v1", "layout N", "kind gauge|counter", then per series
//!            "series ID TS BITS" (its latest sample; "- -" for none) and per cell it sets
//!            "cell TIER PERIOD_START CHUNK BUCKET SLOT COUNT TOTAL MIN MAX TS BITS" (floats
//!            as their bits in decimal; the latest sample or "- -"), then "end"
//! ```
//! Each was written as `<name>.tmp` and renamed into place: a `.tmp` left over means the
//! change had not begun, and is removed.

use std::path::{Path, PathBuf};

use super::{check_layout, Converted, Intent};
use crate::bucket::{Bucket, Last};

use crate::error::{Error, Result};
use crate::registry::SeriesId;
use crate::storage::cells::CellAt;
use crate::time::Timestamp;

/// A deletion's intent file, as older builds named it.
pub(crate) const DELETING: &str = "DELETING";

/// A retype's intent file, as older builds named it.
pub(crate) const RETYPING: &str = "RETYPING";

const DELETE_HEADER: &str = "tierdb delete intent v1";
const RETYPE_HEADER: &str = "tierdb retype intent v1";

/// The intents of the files `dir` holds, deletion first (older builds finished them in that
/// order), each with its file's path; a retype's refused when written under another tiers
/// layout than `layout`.
///
/// # Errors
/// [`Error::CorruptFile`] naming a file that does not read; [`Error::Io`].
pub(super) fn read(dir: &Path, layout: u64) -> Result<Vec<(PathBuf, Intent)>> {
    let mut intents = Vec::new();
    if let Some((path, text)) = text(dir, DELETING)? {
        intents.push((path.clone(), Intent::Delete(parse_delete(&path, &text)?)));
    }
    if let Some((path, text)) = text(dir, RETYPING)? {
        let (recorded, kind, group) = parse_retype(&path, &text)?;
        check_layout(&path, recorded, layout)?;
        intents.push((path, Intent::Retype { kind, group }));
    }
    Ok(intents)
}

/// Removes the files, and their `.tmp` leftovers, durably.
///
/// # Errors
/// [`Error::Io`] naming a file that cannot be removed.
pub(super) fn remove(dir: &Path) -> Result<()> {
    for name in [DELETING, RETYPING] {
        let path = dir.join(name);
        let _ = std::fs::remove_file(crate::storage::disk::temp_path(&path));
        crate::storage::disk::remove_durably(&path)?;
    }
    Ok(())
}

/// The file `name` in `dir` and its text, when there is one.
fn text(dir: &Path, name: &str) -> Result<Option<(PathBuf, String)>> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some((path, text))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// The ids of a deletion's intent file.
fn parse_delete(path: &Path, text: &str) -> Result<Vec<SeriesId>> {
    let mut lines = text.lines();
    if lines.next() != Some(DELETE_HEADER) {
        return Err(Error::corrupt(
            path,
            format!("not a tierdb delete intent (first line is not '{DELETE_HEADER}')"),
        ));
    }
    lines
        .enumerate()
        .map(|(n, line)| {
            line.parse().map(SeriesId).map_err(|_| {
                Error::corrupt(path, format!("line {}: {line:?} is not a series id", n + 2))
            })
        })
        .collect()
}

/// The layout fingerprint, kind and conversions of a retype's intent file.
fn parse_retype(
    path: &Path,
    text: &str,
) -> Result<(u64, crate::counter::SeriesKind, Vec<Converted>)> {
    let bad = |line: usize, what: &str| {
        Error::corrupt(
            path,
            format!("line {line}: {what} (not a whole retype intent)"),
        )
    };
    let mut lines = text.lines().enumerate().map(|(n, line)| (n + 1, line));
    if lines.next().map(|(_, l)| l) != Some(RETYPE_HEADER) {
        return Err(Error::corrupt(
            path,
            format!("not a tierdb retype intent (first line is not '{RETYPE_HEADER}')"),
        ));
    }
    let mut layout = None;
    let mut kind = None;
    let mut group: Vec<Converted> = Vec::new();
    let mut ended = false;
    for (n, line) in lines {
        let words: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> Result<i64> {
            let word = words.get(i).copied().unwrap_or("");
            word.parse::<i64>()
                .or_else(|_| word.parse::<u64>().map(|v| v as i64))
                .map_err(|_| bad(n, &format!("{word:?} is not a number")))
        };
        let pair = |i: usize| -> Result<Option<(Timestamp, u64)>> {
            match words.get(i).copied() {
                Some("-") => Ok(None),
                _ => Ok(Some((num(i)?, num(i + 1)? as u64))),
            }
        };
        match words[0] {
            "layout" => layout = Some(num(1)? as u64),
            "kind" => kind = Some(words.get(1).copied().unwrap_or("").parse()?),
            "series" => group.push(Converted {
                id: SeriesId(num(1)? as u32),
                cells: Vec::new(),
                latest: pair(2)?.map(|(ts, bits)| (ts, f64::from_bits(bits))),
            }),
            "cell" => {
                let Some(converted) = group.last_mut() else {
                    return Err(bad(n, "a cell before its series"));
                };
                let at = CellAt {
                    tier: num(1)? as usize,
                    period_start: num(2)?,
                    chunk: num(3)? as u32,
                    bucket: num(4)? as u32,
                    slot: num(5)? as u32,
                };
                let float = |i: usize| num(i).map(|bits| f64::from_bits(bits as u64));
                let bucket = Bucket {
                    count: num(6)? as u64,
                    total: float(7)?,
                    min: float(8)?,
                    max: float(9)?,
                    last: pair(10)?.map(|(ts, bits)| Last::new(f64::from_bits(bits), ts)),
                };
                converted.cells.push((at, bucket));
            }
            "end" => ended = true,
            other => return Err(bad(n, &format!("unknown line {other:?}"))),
        }
    }
    match (layout, kind, ended) {
        (Some(layout), Some(kind), true) => Ok((layout, kind, group)),
        _ => Err(Error::corrupt(
            path,
            "not a whole retype intent (no end line)",
        )),
    }
}

/// Writes `intent` as the file an older build wrote for it, for the tests that make a
/// directory as an older build's crash left it.
#[cfg(any(test, feature = "fault-injection"))]
pub(crate) fn write(dir: &Path, layout: u64, intent: &Intent) -> Result<()> {
    let pair = |last: Option<(Timestamp, u64)>| match last {
        Some((ts, bits)) => format!("{ts} {bits}"),
        None => "- -".to_owned(),
    };
    let (name, text) = match intent {
        Intent::Delete(ids) => {
            let lines: String = ids.iter().map(|id| format!("{id}\n")).collect();
            (DELETING, format!("{DELETE_HEADER}\n{lines}"))
        }
        Intent::Retype { kind, group } => {
            let mut text = format!("{RETYPE_HEADER}\nlayout {layout}\nkind {}\n", kind.as_str());
            for converted in group {
                let latest = converted.latest.map(|(ts, v)| (ts, v.to_bits()));
                text.push_str(&format!("series {} {}\n", converted.id.0, pair(latest)));
                for (at, b) in &converted.cells {
                    let last = b.last.map(|l| (l.ts(), l.value.to_bits()));
                    text.push_str(&format!(
                        "cell {} {} {} {} {} {} {} {} {} {}\n",
                        at.tier,
                        at.period_start,
                        at.chunk,
                        at.bucket,
                        at.slot,
                        b.count,
                        b.total.to_bits(),
                        b.min.to_bits(),
                        b.max.to_bits(),
                        pair(last)
                    ));
                }
            }
            text.push_str("end\n");
            (RETYPING, text)
        }
    };
    crate::storage::disk::write_atomic(&dir.join(name), text.as_bytes())
}
