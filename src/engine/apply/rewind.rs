//! The undo surface: what an undo of a partly applied group needs of an engine, and nothing
//! else. [`Engine::apply`] takes the pre-images of the cells, the counter states and the raw
//! tails a group will change, and puts them back after a crash before the group is applied
//! again; [`Engine::with_files_still`] copies the files while they stand still. Every method
//! that puts something back is only valid while no batch runs: at open, before the engine is
//! handed out.

use crate::bucket::Bucket;
use crate::engine::{Engine, Shared};
use crate::error::{Error, Result};
use crate::registry::SeriesId;
use crate::storage::cells::{CellAt, Image};
use crate::storage::compact::Loaded;
use crate::time::Timestamp;

/// An engine's undo surface; get it with [`Engine::rewind`].
#[derive(Clone, Copy)]
pub(super) struct Rewind<'a> {
    shared: &'a Shared,
}

impl Engine {
    /// The undo surface of this engine: pre-images of cells, counter states and raw tails,
    /// and putting them back (see [`Rewind`]).
    pub(super) fn rewind(&self) -> Rewind<'_> {
        self.shared.rewind()
    }
}

impl Shared {
    /// [`Engine::rewind`], for the recovery at open before the engine is whole.
    pub(super) fn rewind(&self) -> Rewind<'_> {
        Rewind { shared: self }
    }
}

impl Rewind<'_> {
    /// The buckets of `cells` as they stand, whichever form their periods are in (see
    /// [`Storage::load_cells`]): the pre-images an undo keeps before a change.
    ///
    /// # Errors
    /// As [`Storage::load_cells`].
    pub(super) fn load_cells(&self, cells: &[CellAt]) -> Result<Vec<Bucket>> {
        self.shared.storage.load_cells(cells)
    }

    /// The buckets of `cells` with their histograms, read as [`Rewind::load_cells`] reads
    /// the buckets: the pre-images of a distribution series' cells.
    ///
    /// # Errors
    /// As [`Storage::load_cells`].
    pub(super) fn load_distributions(&self, cells: &[CellAt]) -> Result<Vec<Loaded>> {
        self.shared.storage.load_distributions(cells)
    }

    /// [`Rewind::restore_cells`] for a distribution series' cells: their buckets and
    /// histograms put back (see [`Storage::overwrite_distributions`]).
    ///
    /// # Errors
    /// As [`Rewind::restore_cells`].
    pub(super) fn restore_distributions(&self, cells: &[Image]) -> Result<usize> {
        self.check_writable()?;
        self.shared.check_poison()?;
        let changed = self.shared.storage.overwrite_distributions(cells);
        (self.shared.write_log).note(crate::time::Timestamp::MIN);
        changed
    }

    /// Puts absolute buckets back into `cells` (see [`Storage::overwrite_cells`]); durable
    /// with the next [`Engine::flush`]. Returns how many cells changed. Only valid while no
    /// batch runs and no read of these cells does: an undo at open, before the engine is
    /// handed out.
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::Poisoned`], and as [`Storage::overwrite_cells`].
    pub(super) fn restore_cells(&self, cells: &[(CellAt, Bucket)]) -> Result<usize> {
        self.check_writable()?;
        self.shared.check_poison()?;
        let changed = self.shared.storage.overwrite_cells(cells);
        (self.shared.write_log).note(crate::time::Timestamp::MIN);
        changed
    }

    /// [`Error::ReadOnly`] for an engine opened read-only: nothing may be put back.
    fn check_writable(&self) -> Result<()> {
        match self.shared.lock {
            Some(_) => Ok(()),
            None => Err(Error::ReadOnly(self.shared.dir.clone())),
        }
    }

    /// Series `id`'s counter state record (flags with the declared kind, a counter's last
    /// time and raw value as bits; zeros when never written), for an undo to put back.
    pub(super) fn counter_state(&self, id: SeriesId) -> [u64; 3] {
        self.shared.counter_table.snapshot(id)
    }

    /// Puts series `id`'s counter state record back to `record`, its kind evaluated again
    /// from it; durable with the next [`Engine::flush`]. Only valid while no batch runs.
    ///
    /// # Errors
    /// [`Error::ReadOnly`].
    pub(super) fn restore_counter_state(&self, id: SeriesId, record: [u64; 3]) -> Result<()> {
        self.check_writable()?;
        (self.shared.counter_table).restore(id, record, &self.shared.registry);
        Ok(())
    }

    /// The time of series `id`'s last raw point: `None` without a raw tier or without a
    /// point. What an undo keeps of the raw tier ([`Rewind::truncate_raw_after`]).
    pub(super) fn raw_last_time(&self, id: SeriesId) -> Option<Timestamp> {
        self.shared.raw.as_ref()?.last_time(id.0)
    }

    /// Takes series `id`'s raw points after `last` away (all for `None`; see
    /// [`RawStore::truncate_after`]); durable with the next [`Engine::flush`]. Returns the
    /// points taken away. Only valid at open, before any batch: the writers keep the raw
    /// tails they met.
    ///
    /// # Errors
    /// [`Error::ReadOnly`].
    pub(super) fn truncate_raw_after(
        &self,
        id: SeriesId,
        last: Option<Timestamp>,
    ) -> Result<usize> {
        self.check_writable()?;
        Ok(self
            .shared
            .raw
            .as_ref()
            .map_or(0, |raw| raw.truncate_after(id.0, last)))
    }

    /// Runs `copy` on the engine's directory while no maintenance pass runs and no batch
    /// stores anything, so no file is swapped, dropped or written meanwhile (the chunk
    /// creator may still make an empty file for new series: whole, under a temporary name
    /// first, so a copy that leaves out `*.tmp` files sees it whole or not at all). The
    /// caller stops its own writes first ([`Engine::with_files_still`] holds the apply
    /// lock).
    #[cfg(feature = "cluster")]
    pub(super) fn with_files_still<R>(&self, copy: impl FnOnce(&std::path::Path) -> R) -> R {
        // The order a maintenance pass takes them in: its lock, then the batch gate.
        let _no_pass = self
            .shared
            .pass_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let _no_batch = self.shared.storage.hold_batches();
        copy(&self.shared.dir)
    }
}
