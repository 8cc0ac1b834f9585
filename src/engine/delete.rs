//! Deleting series: the name leaves the registry and the slot's buckets are cleared in every
//! tier, with the raw tier's points and the counter state, durably and crash-safely.
//!
//! The registry's rewrite is the commit point ([`crate::registry::Registry::delete`]): before
//! it every deleted series is whole, after it every one is gone from every read, and its id
//! is a hole never handed out again, so a later sample of that name starts a new series in a
//! new slot. Clearing the old slot comes after it, and a record in the engine journal makes
//! that clearing survive a crash:
//!
//! 1. the ids are appended to the engine journal (`engine.journal`, [`super::intent`]) and
//!    fsynced;
//! 2. the registry rewrites its log without their keys (the commit);
//! 3. batches stop storing into the ids (they are refused as `unknown_series` from now on),
//!    and the batches already past that check are waited for;
//! 4. every bucket of the slots in every period file of every tier is emptied (a compacted
//!    period is made hot again to do so, as a late sample does, and compacted again by
//!    maintenance), the raw tier's points are given up, the counter states zeroed;
//! 5. everything is flushed, then the journal is emptied.
//!
//! An open that finds the deletion's record in the journal finishes step 4 for its ids that
//! are holes, then empties the journal: a crash before step 2 leaves the series whole, one
//! after it leaves them gone.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Engine, Shared};
use crate::bucket::Bucket;
use crate::error::Result;
use crate::fault::{self, Hook};
use crate::registry::{Selector, SeriesId, SeriesKey};
use crate::storage::cells::CellAt;
use crate::time::Timestamp;

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
    /// [`crate::Error::ReadOnly`], [`crate::Error::Poisoned`]; [`crate::Error::Io`] when the
    /// journal or the registry cannot be written (nothing is deleted then), or when clearing
    /// or flushing fails after the commit (the series are gone; the next open finishes the
    /// clearing).
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
        let begun =
            super::intent::begin_delete(&shared.dir, shared.config.layout_fingerprint(), &wanted)?;
        fault_point("before_commit");
        let gone = match shared.registry.delete(&wanted) {
            Ok(gone) => gone,
            Err(e) => {
                // Nothing was deleted unless the rename was done (then the registry says so
                // and is poisoned, and the record is left for the next open to finish).
                if !wanted.iter().any(|&id| shared.registry.is_deleted(id)) {
                    let _ = begun.finish();
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
        begun.finish()?;
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
            for (&(_, chunk), chunk_slots) in by_chunk.range((set, 0)..=(set, u32::MAX)) {
                let held =
                    self.storage
                        .files_of_chunk(tier, chunk, Timestamp::MIN, Timestamp::MAX)?;
                let buckets = spec.buckets_per_period() as usize;
                let mut cells = Vec::with_capacity(held.len() * chunk_slots.len() * buckets);
                for (period_start, _) in held {
                    // A file cut before a period change has its own period's buckets.
                    let buckets = spec.buckets_at(period_start);
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

    /// Finishes a deletion of `ids` a crash interrupted, at open (see the module doc): clears
    /// those that are holes (the registry's rewrite was done); durable with the next flush.
    ///
    /// # Errors
    /// As [`Shared::clear_slots`].
    pub(super) fn finish_delete(&self, ids: &[SeriesId]) -> Result<()> {
        // Ids still registered: the crash came before the commit, and they are whole.
        let holes: Vec<SeriesId> = (ids.iter().copied())
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
        }
        Ok(())
    }
}

/// Kills the process when [`Hook::KillMidDelete`] names `stage` (read at each deletion).
fn fault_point(stage: &str) {
    if Hook::KillMidDelete.armed().as_deref() == Some(stage) {
        fault::kill_self();
    }
}
