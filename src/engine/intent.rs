//! `engine.journal`: the engine's changes that must finish once begun, a deletion's
//! clearing ([`super::delete`]) and a retype's conversion ([`super::retype`]), as records of
//! the [journal](crate::storage::journal), and the open's pass that finishes them.
//!
//! Each change appends its record (fsynced) before it begins, and cuts the journal back to
//! an empty chain once its result is flushed. The open's one recovery pass
//! ([`super::recover`]) reads the chain ([`LeftIntents`]) and hands each record to its
//! change's `finish` (the intent files older builds wrote, `DELETING` and `RETYPING`,
//! first: [`legacy`]), flushes, then empties the journal. Every finish sets absolute
//! values, so a crash during the pass repeats it.
//!
//! Records (little-endian words, each entry eight):
//! ```text
//! header, 4096 bytes: the record_file.rs frame, magic "TIERDBEJ", version 1, record size 64
//! a deletion, kind 1: entries of up to 7 ids each
//!   ids:    w0 = 16 | count << 8, w1..=count = series ids, the rest 0
//! a retype, kind 2, under the tiers layout its cells' tier indexes refer to: per series
//!   series: w0 = 17 | kind << 8 (1 gauge, 2 counter) | has latest << 16, w1 = series id,
//!           w2 = its latest sample's time (i64), w3 = its value (f64 bits), w4.. = 0
//!   then each cell it sets, in `storage/undo_entry.rs`'s cell encoding (the new bucket,
//!   adds 0), followed, when the new bucket keeps a latest sample, by
//!   latest: w0 = 18, w1 = the sample's time (i64), w2 = its value (f64 bits), w3.. = 0
//! ```

use std::path::Path;

use super::Shared;
use crate::bucket::{Bucket, Last};
use crate::counter::SeriesKind;
use crate::error::{Error, Result};
use crate::registry::SeriesId;
use crate::storage::cells::CellAt;
use crate::storage::journal::{Entry, Journal, Kind, Record};
use crate::storage::record_file::Frame;
use crate::storage::undo_entry::{Undo, ENTRY_SIZE, WORDS};
use crate::time::Timestamp;

pub(crate) mod legacy;

/// The file in the data directory.
pub(crate) const FILE_NAME: &str = "engine.journal";

const FRAME: Frame = Frame {
    magic: b"TIERDBEJ",
    version: 1,
    record_size: ENTRY_SIZE as u32,
    what: "engine journal",
};

const KIND_IDS: u64 = 16;
const KIND_SERIES: u64 = 17;
const KIND_LATEST: u64 = 18;
const KIND_CELL: u64 = 1;

/// Ids one entry of a deletion's record holds.
const IDS_PER_ENTRY: usize = WORDS - 1;

/// One series' conversion, planned: what a retype's journal record holds of it.
#[derive(Debug)]
pub(super) struct Converted {
    /// The series.
    pub(super) id: SeriesId,
    /// Its new buckets.
    pub(super) cells: Vec<(CellAt, Bucket)>,
    /// Its latest sample: a counter's last value.
    pub(super) latest: Option<(Timestamp, f64)>,
}

/// A change that must finish once begun, as its record says.
#[derive(Debug)]
pub(super) enum Intent {
    /// Clear these series' slots.
    Delete(Vec<SeriesId>),
    /// Set these conversions, and record the series as of `kind`.
    Retype {
        /// The new kind.
        kind: SeriesKind,
        /// The series' new buckets and latest samples.
        group: Vec<Converted>,
    },
}

/// A change whose record is durable: [`Begun::finish`] once its result is flushed.
pub(super) struct Begun {
    journal: Journal,
}

impl Begun {
    /// Empties the journal: the change is durable and needs no finishing.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(super) fn finish(mut self) -> Result<()> {
        self.journal.clear()
    }
}

/// Appends `dir`'s journal a record of a deletion of `ids`, durably: the change may begin.
///
/// # Errors
/// [`Error::Io`] or [`Error::CorruptFile`] naming the journal; nothing was recorded then.
pub(super) fn begin_delete(dir: &Path, layout: u64, ids: &[SeriesId]) -> Result<Begun> {
    let entries: Vec<Entry> = ids
        .chunks(IDS_PER_ENTRY)
        .map(|chunk| {
            let mut w = [0u64; WORDS];
            w[0] = KIND_IDS | (chunk.len() as u64) << 8;
            for (word, id) in w[1..].iter_mut().zip(chunk) {
                *word = u64::from(id.0);
            }
            w
        })
        .collect();
    begin(dir, Kind::Delete, layout, &entries)
}

/// Appends `dir`'s journal a record of a retype of `group` to `kind`, durably: the change
/// may begin.
///
/// # Errors
/// As [`begin_delete`].
pub(super) fn begin_retype(
    dir: &Path,
    layout: u64,
    kind: SeriesKind,
    group: &[Converted],
) -> Result<Begun> {
    let code = match kind {
        SeriesKind::Gauge => 1,
        _ => 2,
    };
    let mut entries = Vec::new();
    for converted in group {
        let (has, (ts, value)) = match converted.latest {
            Some(latest) => (1, latest),
            None => (0, (0, 0.0)),
        };
        entries.push([
            KIND_SERIES | code << 8 | has << 16,
            u64::from(converted.id.0),
            ts as u64,
            value.to_bits(),
            0,
            0,
            0,
            0,
        ]);
        for &(at, bucket) in &converted.cells {
            let before = Bucket {
                last: None,
                ..bucket
            };
            entries.push(
                Undo::Cell {
                    at,
                    adds: 0,
                    before,
                }
                .encode(),
            );
            if let Some(last) = bucket.last {
                let ts = last.ts() as u64;
                entries.push([KIND_LATEST, ts, last.value.to_bits(), 0, 0, 0, 0, 0]);
            }
        }
    }
    begin(dir, Kind::Retype, layout, &entries)
}

fn begin(dir: &Path, kind: Kind, layout: u64, entries: &[Entry]) -> Result<Begun> {
    let mut journal = Journal::open(dir.join(FILE_NAME), &FRAME)?;
    let seq = journal.last_seq() + 1;
    journal.append(kind, seq, layout, entries)?;
    Ok(Begun { journal })
}

/// The intent a record holds.
///
/// # Errors
/// [`Error::CorruptFile`] naming `path` for a record that is not a whole intent of this
/// format, or of a kind that has no place in this journal.
fn decode(path: &Path, record: &Record) -> Result<Intent> {
    let bad = |i: usize, what: &str| {
        Error::corrupt(
            path,
            format!(
                "entry {} of the record at byte {}: {what}",
                i + 1,
                record.offset
            ),
        )
    };
    match record.kind {
        Kind::Delete => {
            let mut ids = Vec::new();
            for (i, w) in record.entries.iter().enumerate() {
                let count = (w[0] >> 8) as usize;
                if w[0] & 0xff != KIND_IDS || !(1..=IDS_PER_ENTRY).contains(&count) {
                    return Err(bad(i, "not a deletion's ids"));
                }
                for &id in &w[1..=count] {
                    let id = u32::try_from(id).map_err(|_| bad(i, "an id past u32"))?;
                    ids.push(SeriesId(id));
                }
            }
            Ok(Intent::Delete(ids))
        }
        Kind::Retype => {
            let mut kind = None;
            let mut group: Vec<Converted> = Vec::new();
            for (i, w) in record.entries.iter().enumerate() {
                match w[0] & 0xff {
                    KIND_SERIES => {
                        let this = match (w[0] >> 8) & 0xff {
                            1 => SeriesKind::Gauge,
                            2 => SeriesKind::Counter,
                            _ => return Err(bad(i, "a series of no kind a retype makes")),
                        };
                        if kind.is_some_and(|k| k != this) {
                            return Err(bad(i, "series of two kinds in one retype"));
                        }
                        kind = Some(this);
                        let id = u32::try_from(w[1]).map_err(|_| bad(i, "an id past u32"))?;
                        let latest = (w[0] >> 16 & 1 == 1)
                            .then(|| (w[2] as Timestamp, f64::from_bits(w[3])));
                        group.push(Converted {
                            id: SeriesId(id),
                            cells: Vec::new(),
                            latest,
                        });
                    }
                    KIND_CELL => {
                        let Some(Undo::Cell { at, before, .. }) = Undo::decode(*w) else {
                            return Err(bad(i, "not a cell"));
                        };
                        let Some(converted) = group.last_mut() else {
                            return Err(bad(i, "a cell before its series"));
                        };
                        converted.cells.push((at, before));
                    }
                    KIND_LATEST => {
                        let cell = group.last_mut().and_then(|c| c.cells.last_mut());
                        match cell {
                            Some((_, bucket)) if bucket.last.is_none() => {
                                bucket.last = Some(Last::new(f64::from_bits(w[2]), w[1] as i64));
                            }
                            _ => return Err(bad(i, "a latest sample after no cell")),
                        }
                    }
                    _ => return Err(bad(i, "of no known kind")),
                }
            }
            let kind = kind.unwrap_or(SeriesKind::Gauge);
            Ok(Intent::Retype { kind, group })
        }
        other @ (Kind::ApplyGroup | Kind::CounterBatch) => Err(Error::corrupt(
            path,
            format!(
                "the record at byte {} is of kind {other:?}, which has no place here",
                record.offset
            ),
        )),
    }
}

/// The changes a stopped process began and did not finish, as a writable open found them in
/// the journal and in the intent files of older builds: what the open's recovery pass
/// (`engine/recover.rs`) finishes.
pub(super) struct LeftIntents {
    journal: Journal,
    /// Each intent with the file it came from, oldest first.
    intents: Vec<(std::path::PathBuf, Intent)>,
}

impl LeftIntents {
    /// Reads `shared`'s journal (made when missing) and the intent files of older builds.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the journal or an intent file that does not read, or a
    /// retype's written under another tiers layout; [`Error::Io`].
    pub(super) fn read(shared: &Shared) -> Result<LeftIntents> {
        let layout = shared.config.layout_fingerprint();
        let journal = Journal::open(shared.dir.join(FILE_NAME), &FRAME)?;
        let mut intents = legacy::read(&shared.dir, layout)?;
        for record in journal.read()? {
            if record.kind == Kind::Retype {
                check_layout(journal.path(), record.layout, layout)?;
            }
            let intent = decode(journal.path(), &record)?;
            intents.push((journal.path().to_path_buf(), intent));
        }
        Ok(LeftIntents { journal, intents })
    }

    /// How many changes are left to finish.
    pub(super) fn len(&self) -> usize {
        self.intents.len()
    }

    /// Finishes every change, oldest first, in `shared`; durable with the next flush. Every
    /// finish sets absolute values, so a pass a crash interrupts is repeated whole.
    ///
    /// # Errors
    /// As the finishes ([`Shared::finish_delete`], [`Shared::finish_retype`]).
    pub(super) fn finish(&self, shared: &Shared) -> Result<()> {
        for (path, intent) in &self.intents {
            match intent {
                Intent::Delete(ids) => shared.finish_delete(ids)?,
                Intent::Retype { kind, group } => shared.finish_retype(*kind, group)?,
            }
            tracing::warn!(path = %path.display(), "finished a change the last process began and did not finish");
        }
        Ok(())
    }

    /// Once the finishes are durable: empties the journal and removes the older builds'
    /// intent files from `dir`.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(super) fn end(mut self, dir: &Path) -> Result<()> {
        if !self.journal.is_empty() {
            self.journal.clear()?;
        }
        legacy::remove(dir)
    }
}

/// Refuses a retype recorded under tiers layout `recorded` when this engine's is `current`.
///
/// # Errors
/// [`Error::CorruptFile`] naming `path`.
fn check_layout(path: &Path, recorded: u64, current: u64) -> Result<()> {
    if recorded == current {
        return Ok(());
    }
    Err(Error::corrupt(
        path,
        "holds an unfinished retype written under another tiers configuration: open with \
         the tiers.toml of the process that stopped to finish it (removing the file leaves \
         its series half converted)",
    ))
}

/// The kinds of the changes `dir`'s journal records as begun and not finished (`delete`,
/// `retype`), read without opening an engine; none when it has no journal.
///
/// # Errors
/// As [`Journal::open`].
pub(crate) fn pending(dir: &Path) -> Result<Vec<&'static str>> {
    if !dir.join(FILE_NAME).exists() {
        return Ok(Vec::new());
    }
    let journal = Journal::open(dir.join(FILE_NAME), &FRAME)?;
    Ok((journal.read()?.iter())
        .map(|record| match record.kind {
            Kind::Delete => "delete",
            Kind::Retype => "retype",
            Kind::ApplyGroup => "apply group",
            Kind::CounterBatch => "counter batch",
        })
        .collect())
}

/// Rewrites the changes `dir`'s journal records as the intent files an older build wrote
/// for them, and removes the journal: a directory as an older build's crash left it.
///
/// # Errors
/// As [`Journal::open`]; [`Error::Io`].
#[cfg(feature = "fault-injection")]
pub(crate) fn to_older_files(dir: &Path) -> Result<()> {
    let journal = Journal::open(dir.join(FILE_NAME), &FRAME)?;
    for record in journal.read()? {
        let intent = decode(journal.path(), &record)?;
        legacy::write(dir, record.layout, &intent)?;
    }
    crate::storage::disk::remove_durably(journal.path())
}

#[cfg(test)]
mod tests;
