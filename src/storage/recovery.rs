//! The repair at an unclean open (the `OPEN` marker was left behind): what a crash can leave
//! in the period files, found from what the writers published in `writers.state` rather
//! than by reading every cell, so the work scales with what was being written when the
//! process died, not with the size of the data directory.
//!
//! What a crash can leave, and how each is found:
//! - An update in flight: a cell with its `BUSY` bit set (see [`super::mapped_cell::BucketCell`]).
//!   A writer publishes a cell's name before it sets the bit and moves on only after
//!   clearing it, so the last name each writer published is the only cell it can have left
//!   busy. After a process crash (`kill -9`, OOM, panic) the page cache holds both the bit
//!   and the name, and the named cells are all that is repaired.
//! - Slots of series the registry does not know: after a power loss the kernel may have
//!   written bucket pages whose series' registry record never reached the disk. Only chunks
//!   at or after the first unknown series id can hold them, and in the first of those only
//!   the slots from that id on, so only those runs are read.
//! - When `writers.state` cannot be trusted (missing, replaced, or written under another
//!   tiers layout), every cell of every file is read, as before the file existed.
//!
//! What remains after a power loss: the kernel may have written a cell's page with its
//! `BUSY` bit set and not the page of `writers.state` naming it. Such a bit is not found
//! here. Reads mask it at once (no live writer publishes the cell) and log it once per file,
//! and the next write to the cell heals it, counting the half-applied sample as not arrived;
//! until then its total, min and max may hold that sample. Power loss also loses whatever
//! was written since the last flush, which this cannot bring back.

use std::collections::BTreeSet;

use super::period_file::WritableFile;
use super::Storage;
use crate::error::Result;
use crate::time::Timestamp;

/// What the repair at an unclean open did, for the log line and for tests.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Recovery {
    /// Cells whose interrupted update was undone (`BUSY` cleared, the count as before the
    /// sample).
    pub interrupted: usize,
    /// Cells cleared because their series id is past the registry's end.
    pub cleared: usize,
    /// Cells the writers had published, each checked for an interrupted update.
    pub published: usize,
    /// Period files read through for slots of unknown series (or, in a full scan, for
    /// everything).
    pub files_scanned: usize,
    /// Cells read by those scans.
    pub cells_scanned: usize,
    /// Why every cell was read instead of only the published ones, when it was.
    pub full_scan: Option<String>,
}

impl Storage {
    /// Repairs what a crash left, when `unclean` (the directory's `OPEN` marker was found),
    /// then readies `writers.state` for this process's writers: its publications forgotten,
    /// `layout` (the tiers' [`crate::TiersConfig::layout_fingerprint`]) recorded. Returns
    /// what the repair did; `None` when the open was clean or the storage is read-only.
    /// `known_series` is the registry's length. Only valid before any writer starts.
    ///
    /// # Errors
    /// [`crate::Error::Io`] naming the file when msync of a repaired file or of
    /// `writers.state` fails.
    pub(crate) fn recover(
        &self,
        unclean: bool,
        layout: u64,
        known_series: &[usize],
    ) -> Result<Option<Recovery>> {
        let Some(mut state) = self.writers.state() else {
            return Ok(None);
        };
        let recovery = if !unclean {
            None
        } else {
            let full_scan = match state.fingerprint() {
                None => Some(format!(
                    "{} was missing or not whole",
                    state.path().display()
                )),
                Some(found) if found != layout => Some(format!(
                    "{} was written under another tiers layout",
                    state.path().display()
                )),
                Some(_) => None,
            };
            let recovery = match full_scan {
                Some(why) => self.repair_everything(known_series, why)?,
                None => self.repair_published(&state.publications(), known_series)?,
            };
            Some(recovery)
        };
        state.reset(layout)?;
        Ok(recovery)
    }

    /// The repair when `writers.state` names the cells that were being written.
    fn repair_published(
        &self,
        publications: &[(super::writer_state::Publication, Option<Vec<u64>>)],
        known_series: &[usize],
    ) -> Result<Recovery> {
        let mut recovery = Recovery::default();
        let mut touched: BTreeSet<(usize, Timestamp, u32)> = BTreeSet::new();
        for (publication, image) in publications {
            let Some((tier, start, chunk, index)) = publication.decode() else {
                continue;
            };
            recovery.published += 1;
            let file = (tier < self.tiers.len())
                .then(|| self.writable_file(tier, start, chunk))
                .flatten();
            // A file gone since (dropped as expired) needs nothing.
            match file.and_then(|f| Some((f.repair_cell(index)?, f))) {
                Some((true, file)) => {
                    // A distribution cell's histogram goes back to its image too.
                    if let Some(image) = image {
                        file.restore_histogram(index, image);
                    }
                    recovery.interrupted += 1;
                    touched.insert((tier, start, chunk));
                }
                Some((false, _)) => {}
                None => tracing::debug!(
                    tier,
                    start,
                    chunk,
                    index,
                    "a published cell is not in the files; nothing to repair"
                ),
            }
        }
        for (tier, store) in self.tiers.iter().enumerate() {
            let known_series = known_in(known_series, self.set_of_tier(tier));
            let first_chunk = (known_series / self.slots as usize) as u32;
            let keys: Vec<(Timestamp, u32)> = store
                .files
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .filter(|(_, chunk)| *chunk >= first_chunk)
                .copied()
                .collect();
            for (start, chunk) in keys {
                let Some(file) = self.writable_file(tier, start, chunk) else {
                    continue;
                };
                let (cleared, read) = file.clear_unknown(known_series);
                recovery.files_scanned += 1;
                recovery.cells_scanned += read;
                recovery.cleared += cleared;
                if cleared > 0 {
                    touched.insert((tier, start, chunk));
                }
            }
        }
        for (tier, start, chunk) in touched {
            if let Some(file) = self.writable_file(tier, start, chunk) {
                file.flush_repairs()?;
            }
        }
        Ok(recovery)
    }

    /// The repair when nothing says which cells were being written: every cell of every
    /// file, those of tiers the configuration no longer names included. Repaired files are
    /// msynced, since the publications are forgotten next.
    fn repair_everything(&self, known_series: &[usize], why: String) -> Result<Recovery> {
        let files: Vec<(usize, WritableFile)> = (0..self.tiers.len())
            .flat_map(|tier| {
                let known = known_in(known_series, self.set_of_tier(tier));
                self.hot_files_of(tier).into_iter().map(move |f| (known, f))
            })
            .collect();
        let mut recovery = Recovery {
            files_scanned: files.len(),
            cells_scanned: files.iter().map(|(_, f)| f.file().meta().cells()).sum(),
            ..Recovery::default()
        };
        for (known_series, file) in &files {
            let (interrupted, cleared) = file.repair(*known_series);
            recovery.interrupted += interrupted;
            recovery.cleared += cleared;
            if interrupted + cleared > 0 {
                file.flush_repairs()?;
            }
        }
        let (interrupted, cleared) = self.repair_orphans(known_series);
        recovery.interrupted += interrupted;
        recovery.cleared += cleared;
        recovery.full_scan = Some(why);
        Ok(recovery)
    }
}

/// The places set `set` has handed out, of the counts `known_series` gives per set.
fn known_in(known_series: &[usize], set: usize) -> usize {
    known_series.get(set).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests;
