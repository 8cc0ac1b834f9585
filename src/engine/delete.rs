//! Deleting series: the name leaves the registry and the slot's buckets are cleared in every
//! tier, with the raw tier's points and the counter state, durably and crash-safely.
//!
//! The registry's rewrite is the commit point ([`crate::registry::Registry::delete`]): before
//! it every deleted series is whole, after it every one is gone from every read, and its id
//! is a hole never handed out again, so a later sample of that name starts a new series in a
//! new slot. Clearing the old slot comes after it, and an intent file makes that clearing
//! survive a crash:
//!
//! 1. the ids are written to `DELETING` (a temporary file fsynced, then renamed);
//! 2. the registry rewrites its log without their keys (the commit);
//! 3. batches stop storing into the ids (they are refused as `unknown_series` from now on),
//!    and the batches already past that check are waited for;
//! 4. every bucket of the slots in every period file of every tier is emptied (a compacted
//!    period is made hot again to do so, as a late sample does, and compacted again by
//!    maintenance), the raw tier's points are given up, the counter states zeroed;
//! 5. everything is flushed, then `DELETING` is removed.
//!
//! An open that finds `DELETING` finishes step 4 for its ids that are holes, and drops the
//! file: a crash before step 2 leaves the series whole, one after it leaves them gone.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use super::{Engine, Shared};
use crate::bucket::Bucket;
use crate::error::Error;
use crate::error::Result;
use crate::fault::{self, Hook};
use crate::registry::{Selector, SeriesId, SeriesKey};
use crate::storage::cells::CellAt;
use crate::time::Timestamp;

/// The intent file in the data directory: the ids a deletion is clearing.
pub const DELETE_INTENT: &str = "DELETING";

/// The first line of the intent file.
const INTENT_HEADER: &str = "tierdb delete intent v1";

/// What a deletion did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// The series deleted, in id order.
    pub series: Vec<SeriesKey>,
    /// Bucket cells that held data and were emptied.
    pub cells_cleared: usize,
    /// Raw-tier points given up.
    pub raw_points: usize,
}

impl Engine {
    /// The ids and keys of the series `selector` selects, in id order: what a deletion by
    /// selector takes (and a dry run lists).
    pub fn select_series(&self, selector: &Selector) -> Vec<(SeriesId, String)> {
        self.shared
            .registry
            .select(|id, key| selector.matches(key).then(|| (id, key.as_str().to_owned())))
    }

    /// Deletes the series `ids` (ids already deleted, or never handed out, are passed over):
    /// see the module doc for the steps and what a crash leaves. Samples of these ids that
    /// arrive while it runs, or later through an id resolved before, are refused as
    /// `unknown_series`; a sample that names the series again registers a new one.
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::Poisoned`]; [`Error::Io`] when the intent or the
    /// registry cannot be written (nothing is deleted then), or when clearing or flushing
    /// fails after the commit (the series are gone; the next open finishes the clearing).
    pub fn delete_series(&self, ids: &[SeriesId]) -> Result<Deleted> {
        self.check_writable()?;
        self.shared.check_poison()?;
        let shared = &self.shared;
        // One deletion at a time, and no maintenance pass (compaction, drops) meanwhile.
        let _pass = shared.pass_lock.lock().unwrap_or_else(|e| e.into_inner());
        let wanted: Vec<SeriesId> = ids
            .iter()
            .copied()
            .filter(|&id| id.index() < shared.registry.len() && !shared.registry.is_deleted(id))
            .collect();
        if wanted.is_empty() {
            return Ok(Deleted::default());
        }
        write_intent(&shared.dir, &wanted)?;
        fault_point("before_commit");
        let gone = match shared.registry.delete(&wanted) {
            Ok(gone) => gone,
            Err(e) => {
                // Nothing was deleted unless the rename was done (then the registry says so
                // and is poisoned, and the intent is left for the next open to finish).
                if !wanted.iter().any(|&id| shared.registry.is_deleted(id)) {
                    let _ = remove_intent(&shared.dir);
                }
                return Err(e);
            }
        };
        let gone_ids: Vec<SeriesId> = gone.iter().map(|(id, _)| *id).collect();
        shared.refuse_deleted(&gone_ids);
        let (cells_cleared, raw_points) = shared.clear_slots(&gone_ids, true)?;
        // Every bucket of the deleted series changed: answers kept from before (the render
        // cache) are read again.
        shared.write_log.note(crate::time::Timestamp::MIN);
        self.flush()?;
        remove_intent(&shared.dir)?;
        Ok(Deleted {
            series: gone.into_iter().map(|(_, key)| key).collect(),
            cells_cleared,
            raw_points,
        })
    }
}

impl Shared {
    /// The ids of deleted series that batches refuse, as of now: read once per batch.
    pub(crate) fn deleted_ids(&self) -> Arc<BTreeSet<u32>> {
        Arc::clone(&self.deleted.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Makes batches refuse `ids`, then waits for every batch that may have checked before:
    /// once it returns, nothing stores into their slots.
    fn refuse_deleted(&self, ids: &[SeriesId]) {
        {
            let mut deleted = self.deleted.write().unwrap_or_else(|e| e.into_inner());
            let mut next = BTreeSet::clone(&deleted);
            next.extend(ids.iter().map(|id| id.0));
            *deleted = Arc::new(next);
        }
        // A batch takes the gate before it reads the set, and holds it until stored.
        drop(self.storage.hold_batches());
    }

    /// Empties the slots of `ids` in every period file of every tier, gives up their raw
    /// points and zeroes their counter states; durable with the next flush. Returns (cells
    /// that held data, raw points). `fault` arms [`Hook::KillMidDelete`]'s `after_commit`.
    ///
    /// # Errors
    /// As [`crate::storage::Storage::overwrite_cells`].
    fn clear_slots(&self, ids: &[SeriesId], fault: bool) -> Result<(usize, usize)> {
        let slots = self.storage.slots();
        // Chunk by chunk, so the cells listed at once are one chunk's (at most a file's worth
        // of slots), not every deleted series' in every period.
        let mut by_chunk: std::collections::BTreeMap<(usize, u32), Vec<u32>> = Default::default();
        for place in self.registry.placements(ids.iter().copied()) {
            let (chunk, slot) = place.chunk_and_slot(slots);
            by_chunk.entry((place.set(), chunk)).or_default().push(slot);
        }
        let mut cleared = 0;
        for (tier, (set, spec)) in self.config.all_tiers().enumerate() {
            let buckets = (spec.period.secs() / spec.resolution.secs()) as u32;
            for (&(_, chunk), chunk_slots) in by_chunk.range((set, 0)..=(set, u32::MAX)) {
                let held =
                    self.storage
                        .files_of_chunk(tier, chunk, Timestamp::MIN, Timestamp::MAX)?;
                let mut cells =
                    Vec::with_capacity(held.len() * chunk_slots.len() * buckets as usize);
                for (period_start, _) in held {
                    for &slot in chunk_slots {
                        cells.extend((0..buckets).map(|bucket| {
                            let at = CellAt {
                                tier,
                                period_start,
                                chunk,
                                bucket,
                                slot,
                            };
                            (at, Bucket::EMPTY)
                        }));
                    }
                }
                cleared += self.storage.overwrite_cells(&cells)?;
            }
            if fault && tier == 0 {
                fault_point("after_commit");
            }
        }
        let mut raw_points = 0;
        for id in ids {
            if let Some(raw) = &self.raw {
                raw_points += raw.truncate_after(id.0, None);
            }
            self.counter_table.restore(*id, [0; 3], &self.registry);
        }
        Ok((cleared, raw_points))
    }

    /// At open, before any batch: finishes a deletion a crash interrupted (see the module
    /// doc) and removes its intent file. Returns the ids cleared.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] for an intent file that does not read; as
    /// [`Shared::clear_slots`]; [`Error::Io`] when the result cannot be flushed or the file
    /// removed.
    pub(crate) fn finish_interrupted_delete(&self) -> Result<Vec<SeriesId>> {
        let path = self.dir.join(DELETE_INTENT);
        // An intent a crash cut short before its rename: nothing was deleted.
        let _ = std::fs::remove_file(self.dir.join(format!("{DELETE_INTENT}.tmp")));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let ids = parse_intent(&path, &text)?;
        // Ids still registered: the crash came before the commit, and they are whole.
        let holes: Vec<SeriesId> = ids
            .into_iter()
            .filter(|&id| self.registry.is_deleted(id))
            .collect();
        if !holes.is_empty() {
            let (cells, raw) = self.clear_slots(&holes, false)?;
            tracing::warn!(
                series = holes.len(),
                cells,
                raw,
                "finished a deletion the last process did not finish"
            );
            self.flush_files()?;
        }
        remove_intent(&self.dir)?;
        Ok(holes)
    }
}

/// Writes the intent file crash-safely: a temporary file fsynced, renamed, the directory
/// fsynced.
fn write_intent(dir: &Path, ids: &[SeriesId]) -> Result<()> {
    let path = dir.join(DELETE_INTENT);
    let temp = dir.join(format!("{DELETE_INTENT}.tmp"));
    let mut text = format!("{INTENT_HEADER}\n");
    for id in ids {
        text.push_str(&format!("{id}\n"));
    }
    (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, &path)
    })()
    .map_err(|e| Error::io(&path, e))?;
    crate::storage::disk::sync_dir(dir)
}

/// Removes the intent file and makes that durable.
fn remove_intent(dir: &Path) -> Result<()> {
    crate::storage::disk::remove_durably(&dir.join(DELETE_INTENT))
}

/// The ids of an intent file.
fn parse_intent(path: &Path, text: &str) -> Result<Vec<SeriesId>> {
    let mut lines = text.lines();
    if lines.next() != Some(INTENT_HEADER) {
        return Err(Error::corrupt(
            path,
            format!("not a tierdb delete intent (first line is not '{INTENT_HEADER}')"),
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

/// Kills the process when [`Hook::KillMidDelete`] names `stage` (read at each deletion).
fn fault_point(stage: &str) {
    if Hook::KillMidDelete.armed().as_deref() == Some(stage) {
        fault::kill_self();
    }
}
