//! Chosen bucket cells, read and overwritten whichever form their period is in (hot,
//! compacted, or without a file): what an undo needs, which takes a cell's value before a
//! change and puts that absolute value back after a crash; a distribution series' cells with
//! their histograms. Reads of a compacted period go
//! through its reader; an overwrite that changes a compacted period makes it hot again first,
//! as a late sample does.

use super::compact::Loaded;
use super::period_file::WritableFile;
use super::{Creation, HeldPeriod, Storage};
use crate::bucket::Bucket;
use crate::error::Error;
use crate::error::Result;
use crate::histogram::Histogram;
use crate::time::Timestamp;

/// Where one bucket cell lives: the tier, the period file (its period start and chunk), the
/// bucket in the period and the series slot in the chunk. Sorting puts the cells of one file
/// next to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CellAt {
    /// Tier index.
    pub tier: usize,
    /// Start of the period.
    pub period_start: Timestamp,
    /// Chunk of series.
    pub chunk: u32,
    /// Bucket in the period.
    pub bucket: u32,
    /// Series slot in the chunk.
    pub slot: u32,
}

impl CellAt {
    fn same_file(&self, other: &CellAt) -> bool {
        (self.tier, self.period_start, self.chunk) == (other.tier, other.period_start, other.chunk)
    }
}

/// A distribution cell's content: its bucket and its histogram, `None` for none.
pub(crate) type Image = (CellAt, Loaded);

/// One cell to put back: where, its bucket, and (for a distribution series) its histogram.
struct CellImage<'a> {
    at: CellAt,
    bucket: &'a Bucket,
    histogram: Option<&'a Histogram>,
}

/// True when `a` and `b` hold the same bits in count, total, min and max: what an exact
/// restore compares (`==` on floats would take -0.0 for 0.0 and never match a NaN). The
/// latest sample is not compared: an undo image does not carry it (a cell restored from one
/// reads it as unknown), and a cell whose count and fields are unchanged was not written, so
/// it holds the latest sample it had.
pub(crate) fn same_bits(a: &Bucket, b: &Bucket) -> bool {
    a.count == b.count
        && a.total.to_bits() == b.total.to_bits()
        && a.min.to_bits() == b.min.to_bits()
        && a.max.to_bits() == b.max.to_bits()
}

impl CellImage<'_> {
    /// The images of buckets without histograms.
    fn buckets(cells: &[(CellAt, Bucket)]) -> Vec<CellImage<'_>> {
        (cells.iter())
            .map(|(at, bucket)| CellImage {
                at: *at,
                bucket,
                histogram: None,
            })
            .collect()
    }
}

/// True when `a` and `b` keep the same latest sample, bit for bit (both unknown included).
pub(crate) fn same_last(a: &Bucket, b: &Bucket) -> bool {
    let last = |b: &Bucket| b.last.map(|l| (l.ts(), l.value.to_bits()));
    last(a) == last(b)
}

/// [`same_bits`], and [`same_last`] where `latest` says the cell keeps a latest sample: what
/// an import compares, so that importing again what an earlier build imported without the
/// latest samples adds them, while a file without a latest area (it reads every latest
/// sample as unknown) is not rewritten at every import.
fn same_import(now: &Bucket, want: &Bucket, latest: bool) -> bool {
    same_bits(now, want) && (!latest || same_last(now, want))
}

impl Storage {
    /// The buckets of `cells`, in their order: a hot period's cells loaded from the mapping,
    /// a compacted period's slots read through its reader, and a period without a file read
    /// as empty (its cells have never been written, or were dropped with it).
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] for a cell outside its tier's files; [`Error::CorruptFile`] or
    /// [`Error::Io`] naming a compacted file that cannot be read.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn load_cells(&self, cells: &[CellAt]) -> Result<Vec<Bucket>> {
        let mut out = vec![Bucket::EMPTY; cells.len()];
        self.load_each(cells, false, &mut |i, bucket, _| out[i] = bucket)?;
        Ok(out)
    }

    /// The buckets of `cells` with their histograms, in their order, read as
    /// [`Storage::load_cells`] reads the buckets: the pre-images of a distribution series'
    /// cells. A histogram that does not decode is logged and read as none, as every read of
    /// it does.
    ///
    /// # Errors
    /// As [`Storage::load_cells`].
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn load_distributions(&self, cells: &[CellAt]) -> Result<Vec<Loaded>> {
        let mut out = vec![(Bucket::EMPTY, None); cells.len()];
        self.load_each(cells, true, &mut |i, bucket, histogram| {
            out[i] = (bucket, histogram)
        })?;
        Ok(out)
    }

    /// Calls `found` with each cell's index in `cells`, its bucket and (with `histograms`)
    /// its histogram, a file at a time.
    fn load_each(
        &self,
        cells: &[CellAt],
        histograms: bool,
        found: &mut dyn FnMut(usize, Bucket, Option<Histogram>),
    ) -> Result<()> {
        let mut order: Vec<usize> = (0..cells.len()).collect();
        order.sort_unstable_by_key(|&i| cells[i]);
        for group in order.chunk_by(|&a, &b| cells[a].same_file(&cells[b])) {
            for &i in group {
                self.check_cell(&cells[i])?;
            }
            match self.held(&cells[group[0]])? {
                None => {}
                Some(HeldPeriod::Hot(file)) => {
                    for &i in group {
                        let CellAt { bucket, slot, .. } = cells[i];
                        match histograms {
                            true => {
                                let (bucket, histogram) = file.load_closed(bucket, slot);
                                found(i, bucket, histogram);
                            }
                            false => found(i, file.load(bucket, slot), None),
                        }
                    }
                }
                Some(HeldPeriod::Compacted(reader)) => {
                    // One decode per slot: the group comes sorted by bucket, so it is sorted
                    // again by slot and each slot's run decoded once.
                    let mut by_slot = group.to_vec();
                    by_slot.sort_unstable_by_key(|&i| (cells[i].slot, cells[i].bucket));
                    for run in by_slot.chunk_by(|&a, &b| cells[a].slot == cells[b].slot) {
                        let slot = cells[run[0]].slot;
                        let from = cells[run[0]].bucket;
                        let to = cells[run[run.len() - 1]].bucket + 1;
                        if histograms {
                            let mut loaded = reader.read_slot_distributions(slot, from..to)?;
                            for &i in run {
                                let at = (cells[i].bucket - from) as usize;
                                let (bucket, histogram) =
                                    std::mem::replace(&mut loaded[at], (Bucket::EMPTY, None));
                                found(i, bucket, histogram);
                            }
                        } else {
                            let mut buckets = vec![Bucket::EMPTY; (to - from) as usize];
                            reader.read_slot(slot, from..to, &mut buckets)?;
                            for &i in run {
                                found(i, buckets[(cells[i].bucket - from) as usize], None);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Puts each cell's absolute value back: every cell whose bits differ from the value given
    /// is overwritten, in its hot file, a compacted period being made hot again first (as a
    /// late sample does). A period without a file whose cells are to be non-empty was dropped
    /// since (it left its tier's retention): it is left dropped. Runs under the batch gate,
    /// so no compaction swaps a file mid-overwrite; the files changed are marked dirty for the
    /// next flush. Returns how many cells changed.
    ///
    /// Only valid while nothing else stores into these cells and no read of them runs (an
    /// undo at open): the stores are not the seqlock's, so a concurrent read could see a
    /// mix of old and new fields.
    ///
    /// # Errors
    /// As [`Storage::load_cells`]; [`Error::Io`] when a compacted period cannot be made hot
    /// again (a full disk); on a read-only storage, [`Error::ReadOnly`] for a period already
    /// hot, [`Error::Io`] for one that would have to be created or made hot again.
    pub(crate) fn overwrite_cells(&self, cells: &[(CellAt, Bucket)]) -> Result<usize> {
        self.overwrite(&CellImage::buckets(cells), false, false)
    }

    /// [`Storage::overwrite_cells`], comparing and setting each cell's latest sample too:
    /// a retype's new buckets, whose latest samples are known, where an undo image carries
    /// none.
    ///
    /// # Errors
    /// As [`Storage::overwrite_cells`].
    pub(crate) fn replace_cells(&self, cells: &[(CellAt, Bucket)]) -> Result<usize> {
        self.overwrite(&CellImage::buckets(cells), false, true)
    }

    /// [`Storage::overwrite_cells`] for a distribution series' cells: each cell's bucket and
    /// its histogram (`None`: none) are put back, where either differs.
    ///
    /// # Errors
    /// As [`Storage::overwrite_cells`].
    pub(crate) fn overwrite_distributions(&self, cells: &[Image]) -> Result<usize> {
        let images: Vec<CellImage<'_>> = (cells.iter())
            .map(|(at, (bucket, histogram))| CellImage {
                at: *at,
                bucket,
                histogram: histogram.as_ref(),
            })
            .collect();
        self.overwrite(&images, true, false)
    }

    /// [`Storage::overwrite_cells`], with the histograms too when `histograms` is set, and
    /// the latest samples compared too when `with_last` is.
    fn overwrite(
        &self,
        cells: &[CellImage<'_>],
        histograms: bool,
        with_last: bool,
    ) -> Result<usize> {
        let _no_swap = self.batch_gate();
        let mut sorted: Vec<&CellImage<'_>> = cells.iter().collect();
        sorted.sort_unstable_by_key(|image| image.at);
        let mut changed = 0;
        for group in sorted.chunk_by(|a, b| a.at.same_file(&b.at)) {
            let at: Vec<CellAt> = group.iter().map(|image| image.at).collect();
            let mut now: Vec<Loaded> = vec![(Bucket::EMPTY, None); at.len()];
            self.load_each(&at, histograms, &mut |i, bucket, histogram| {
                now[i] = (bucket, histogram)
            })?;
            let differ: Vec<&CellImage<'_>> = group
                .iter()
                .zip(&now)
                .filter(|(want, (bucket, histogram))| {
                    !same_bits(want.bucket, bucket)
                        || (with_last && !same_last(want.bucket, bucket))
                        || want.histogram != histogram.as_ref()
                })
                .map(|(image, _)| *image)
                .collect();
            if differ.is_empty() {
                continue;
            }
            let first = at[0];
            if self
                .stored(first.tier, first.period_start, first.chunk)
                .is_none()
            {
                tracing::debug!(
                    tier = first.tier,
                    period_start = first.period_start,
                    chunk = first.chunk,
                    "not restoring cells of a period dropped since"
                );
                continue;
            }
            let (file, _) = self.get_or_create(
                first.tier,
                first.period_start,
                first.chunk,
                Creation::OnDemand,
            )?;
            let Some(file) = WritableFile::new(file) else {
                return Err(Error::ReadOnly(self.root.clone()));
            };
            // Marked dirty even when a page cannot get its space: the cells set before it
            // must reach the disk at the next flush.
            let restored = differ.iter().try_for_each(|image| {
                let CellAt { bucket, slot, .. } = image.at;
                file.restore(bucket, slot, image.bucket)?;
                match histograms {
                    true => file.restore_histogram_of(bucket, slot, image.histogram),
                    false => Ok(()),
                }
            });
            file.mark_dirty();
            restored?;
            changed += differ.len();
        }
        Ok(changed)
    }

    /// Sets each cell to the absolute value given (its latest sample too, where the file
    /// keeps one: [`same_import`] compares), as [`Storage::overwrite_cells`] does,
    /// except that a period without a file is created (an import sets buckets of periods
    /// never written; the caller keeps to the tiers' windows), and that the cells are taken
    /// in the order given, each run of cells of one file at once: an import hands them
    /// series by series in time order. A hot file's cells are compared and set in one pass
    /// (a file created here is known empty and not read);
    /// a compacted period is read first and made hot again only when a cell differs, so a
    /// second import of the same data leaves compacted periods as they are. Returns how many
    /// cells changed.
    ///
    /// Only valid while nothing else stores into these cells and no read of them runs (an
    /// import holding the directory alone), as for [`Storage::overwrite_cells`].
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] for a cell outside its tier's files; [`Error::Io`] when a file
    /// cannot be created or made hot again (a full disk), [`Error::CorruptFile`] when a
    /// compacted one cannot be read; [`Error::ReadOnly`] on a read-only storage.
    pub(crate) fn import_cells(&self, cells: &[(CellAt, Bucket)]) -> Result<usize> {
        let _no_swap = self.batch_gate();
        let mut changed = 0;
        for group in cells.chunk_by(|a, b| a.0.same_file(&b.0)) {
            for (cell, _) in group {
                self.check_cell(cell)?;
            }
            let first = group[0].0;
            // A file this call creates (not one made hot again from its compacted form) holds
            // only empty cells: they are not read, which would fault every page in once to
            // read and again to write.
            let (file, new) = match self.file(first.tier, first.period_start, first.chunk) {
                Some(hot) => (hot, false),
                None => {
                    let compacted = self
                        .stored(first.tier, first.period_start, first.chunk)
                        .is_some();
                    if compacted {
                        let at: Vec<CellAt> = group.iter().map(|(cell, _)| *cell).collect();
                        let now = self.load_cells(&at)?;
                        if group
                            .iter()
                            .zip(&now)
                            .all(|((_, want), now)| same_import(now, want, true))
                        {
                            continue;
                        }
                    }
                    let (file, created) = self.get_or_create(
                        first.tier,
                        first.period_start,
                        first.chunk,
                        Creation::OnDemand,
                    )?;
                    (file, created && !compacted)
                }
            };
            let Some(file) = WritableFile::new(file) else {
                return Err(Error::ReadOnly(self.root.clone()));
            };
            let mut differ = 0;
            let mut restored = Ok(());
            let latest = file.file().meta().keeps_last();
            for (cell, want) in group {
                let now = match new {
                    true => Bucket::EMPTY,
                    false => file.file().load(cell.bucket, cell.slot),
                };
                if !same_import(&now, want, latest) {
                    restored = file.restore(cell.bucket, cell.slot, want);
                    if restored.is_err() {
                        break;
                    }
                    differ += 1;
                }
            }
            if differ > 0 {
                file.mark_dirty();
            }
            restored?;
            changed += differ;
        }
        Ok(changed)
    }

    /// `cell`'s period in the form it is held, opened for a read; `None` without a file.
    fn held(&self, cell: &CellAt) -> Result<Option<HeldPeriod>> {
        let found = self.files_of_chunk(
            cell.tier,
            cell.chunk,
            cell.period_start,
            cell.period_start.saturating_add(1),
        )?;
        Ok(found
            .into_iter()
            .find(|(start, _)| *start == cell.period_start)
            .map(|(_, held)| held))
    }

    /// Refuses a cell that no file of its tier can hold.
    fn check_cell(&self, cell: &CellAt) -> Result<()> {
        let fits = self.tiers.get(cell.tier).is_some_and(|store| {
            let spec = &store.spec;
            spec.period_start(cell.period_start) == cell.period_start
                && cell.bucket < spec.buckets_at(cell.period_start)
                && cell.slot < self.slots
        });
        if fits {
            Ok(())
        } else {
            Err(Error::InvalidQuery(format!(
                "bucket cell {cell:?} lies outside the files of its tier"
            )))
        }
    }
}

#[cfg(test)]
mod tests;
