//! Creating the new files of one (tier, period) as a group. A new chunk of series needs a
//! file in every tier, and 100k new series are 391 chunks: created one at a time, each with
//! its own two fsyncs, that was most of the time an import of new series took. In a group,
//! every file is written whole under its temporary name and synced, several at once (so
//! their fsyncs overlap), then all are renamed into place and the directory
//! is synced once for the lot, before any of them is mapped for writes.
//!
//! The crash guarantees are those of `PeriodFile::create`: each file's contents are on
//! disk before its rename, so a crash leaves a `.tmp` (removed at open) or a whole file,
//! and the directory sync comes before any sample can be stored into a file of the group.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::format::PeriodMeta;
use super::parallel::in_parallel;
use super::period_file::PeriodFile;
use super::{disk, Creation, Storage, StoredPeriod};
use crate::error::Error;
use crate::time::Timestamp;

/// Files of a group written at once. Their fsyncs overlap; the rest of a creation (the
/// inode, the directory entry) is serialised by the kernel on the directory's lock, where
/// more threads only spin. On a 2-core VM, 1 to 8 threads measured the same within its noise.
const CREATE_THREADS: usize = 4;

/// What [`Storage::create_files`] did.
#[derive(Debug, Default)]
pub(crate) struct Created {
    /// Files created (compacted periods made hot again included).
    pub created: usize,
    /// Chunks whose file could not be created, each with its error.
    pub failed: Vec<(u32, Error)>,
}

impl Storage {
    /// Creates the hot files of `chunks` for the period of `tier` starting at
    /// `period_start`, skipping those that exist hot; a chunk held compacted is made hot
    /// again ([`Storage::get_or_create`]). A file that cannot be created (a full disk) does
    /// not stop the others; it is reported in [`Created::failed`].
    pub(crate) fn create_files(
        &self,
        tier: usize,
        period_start: Timestamp,
        chunks: &[u32],
        why: Creation,
    ) -> Created {
        let mut done = Created::default();
        let store = &self.tiers[tier];
        let mut compacted = Vec::new();
        if self.writable && chunks.len() > 1 {
            let _creating = store.create_lock.lock().unwrap_or_else(|e| e.into_inner());
            let mut fresh = Vec::new();
            {
                let files = store.files.read().unwrap_or_else(|e| e.into_inner());
                for &chunk in chunks {
                    match files.get(&(period_start, chunk)) {
                        Some(StoredPeriod::Hot(_)) => {}
                        Some(StoredPeriod::Compacted(_)) => compacted.push(chunk),
                        None => fresh.push(store.meta(period_start, chunk, self.slots)),
                    }
                }
            }
            self.create_group(tier, &fresh, why, &mut done);
        } else {
            compacted.extend_from_slice(chunks);
        }
        // One at a time: single files, compacted periods (their cells are copied over), and
        // read-only storage (which refuses).
        for chunk in compacted {
            match self.get_or_create(tier, period_start, chunk, why) {
                Ok((_, true)) => done.created += 1,
                Ok((_, false)) => {}
                Err(e) => done.failed.push((chunk, e)),
            }
        }
        done
    }

    /// Creates the files of `metas`, none of which exists, under the tier's creation lock.
    fn create_group(&self, tier: usize, metas: &[PeriodMeta], why: Creation, done: &mut Created) {
        if metas.is_empty() {
            return;
        }
        let store = &self.tiers[tier];
        let dir = &store.dir;
        let written = in_parallel(metas, CREATE_THREADS, |meta| {
            PeriodFile::write_temp(dir, meta, None)
                .and_then(|temp| PeriodFile::rename_into_place(dir, meta, &temp))
        });
        let mut renamed: Vec<(&PeriodMeta, PathBuf)> = Vec::with_capacity(metas.len());
        for (meta, result) in metas.iter().zip(written) {
            match result {
                Ok(path) => renamed.push((meta, path)),
                Err(e) => done.failed.push((meta.chunk, e)),
            }
        }
        if renamed.is_empty() {
            return;
        }
        // The renamed files stay on disk, whole, when this fails: the next open maps them.
        if let Err(e) = disk::sync_dir(dir) {
            let text = e.to_string();
            for (meta, _) in renamed {
                done.failed.push((
                    meta.chunk,
                    Error::io(dir, std::io::Error::other(text.clone())),
                ));
            }
            return;
        }
        let mut opened = Vec::with_capacity(renamed.len());
        for (meta, path) in renamed {
            match PeriodFile::open(&path, meta, &self.writers) {
                Ok(file) => opened.push((meta.period_start, meta.chunk, Arc::new(file))),
                Err(e) => done.failed.push((meta.chunk, e)),
            }
        }
        let counter = match why {
            Creation::Ahead => &store.created_ahead,
            Creation::OnDemand => &store.created_on_demand,
        };
        counter.fetch_add(opened.len() as u64, Ordering::Relaxed);
        done.created += opened.len();
        let mut files = store.files.write().unwrap_or_else(|e| e.into_inner());
        for (period_start, chunk, file) in opened {
            tracing::debug!(path = %file.path().display(), ?why, "created period file");
            files.insert((period_start, chunk), StoredPeriod::Hot(file));
        }
    }
}
