//! Creating the new files of one (tier, period) as a group. A new chunk of series needs a
//! file in every tier, and 100k new series are 391 chunks: 1,564 files. Synced one by one
//! at creation, their fsyncs were most of the time an import of new series took, though
//! nothing in a new file needs to be durable before the samples stored into it are (at the
//! next flush, which syncs every file written anyway).
//!
//! So a group's files are made durable at their first flush, and what the group writes
//! first is a list of their names (`<nanos>-<n>.creating` in the tier's directory, synced, its
//! directory entry synced): one fsync and one directory sync for the group. Each file is
//! then written under its temporary name (its header, its length; the records stay holes)
//! and renamed into place, unsynced, several at once. The flush that follows syncs each
//! file whole ([`PeriodFile::flush`]), then the directory, then removes the list.
//!
//! The crash guarantees:
//! - a process crash (kill -9) loses nothing: the page cache holds every file whole, and
//!   the next open finds them as written (and syncs them at its first flush, since the list
//!   is still there);
//! - a power loss before that flush may leave a listed file short or with a header of
//!   zeros: no sample stored into it was made durable yet, so the next open removes it
//!   ([`unfinished`]), and creates it again when a write needs it. A damaged file that no
//!   list names is refused at open, as before;
//! - a file is renamed into place only after the list naming it is on disk, and the list is
//!   removed only after every file it names was synced and so was their directory.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::format::PeriodMeta;
use super::parallel::in_parallel;
use super::period_file::{PeriodFile, SyncAt};
use super::{disk, Creation, Storage, StoredPeriod};
use crate::error::Error;
use crate::error::Result;
use crate::time::Timestamp;

/// The suffix of a group's list of the files it created, not synced yet.
pub(super) const LIST_SUFFIX: &str = ".creating";

/// Files of a group written at once. Most of a creation (the inode, the directory entry) is
/// serialised by the kernel on the directory's lock, where more threads only spin. On a
/// 2-core VM, 1 to 8 threads measured the same within its noise, when each file was still
/// fsynced here.
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
        let list = match write_list(dir, metas) {
            Ok(list) => list,
            Err(e) => {
                let text = e.to_string();
                for meta in metas {
                    let e = Error::io(dir, std::io::Error::other(text.clone()));
                    done.failed.push((meta.chunk, e));
                }
                return;
            }
        };
        let written = in_parallel(metas, CREATE_THREADS, |meta| {
            PeriodFile::write_temp(dir, meta, None, SyncAt::FirstFlush)
                .and_then(|temp| PeriodFile::rename_into_place(dir, meta, &temp))
        });
        let mut renamed: Vec<(&PeriodMeta, PathBuf)> = Vec::with_capacity(metas.len());
        for (meta, result) in metas.iter().zip(written) {
            match result {
                Ok(path) => renamed.push((meta, path)),
                Err(e) => done.failed.push((meta.chunk, e)),
            }
        }
        // The list stays until a flush has synced what it names, even when nothing was
        // renamed: a rename may have reached the disk before its failure was reported.
        (store
            .unsynced_lists
            .lock()
            .unwrap_or_else(|e| e.into_inner()))
        .push(list);
        let mut opened = Vec::with_capacity(renamed.len());
        for (meta, path) in renamed {
            match PeriodFile::open(&path, meta, &self.writers) {
                Ok(file) => {
                    file.set_unsynced();
                    opened.push((meta.period_start, meta.chunk, Arc::new(file)));
                }
                Err(e) => {
                    // Not in the map, so no flush would sync it: removed, as the next open
                    // would remove it after a power loss.
                    let _ = std::fs::remove_file(&path);
                    done.failed.push((meta.chunk, e));
                }
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

/// Writes the list of `metas`' file names into `dir` and makes it durable (the file synced,
/// then the directory), before any of them is renamed into place. Returns its path.
///
/// # Errors
/// [`Error::Io`] naming the list or the directory; nothing is left behind then.
fn write_list(dir: &Path, metas: &[PeriodMeta]) -> Result<PathBuf> {
    static LISTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
        .map_or(0, |d| d.as_nanos());
    let seq = LISTS.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{nanos}-{seq}{LIST_SUFFIX}"));
    let mut names = String::new();
    for meta in metas {
        names.push_str(&meta.file_name());
        names.push('\n');
    }
    let written = std::fs::File::create(&path)
        .and_then(|mut file| {
            file.write_all(names.as_bytes())
                .and_then(|()| file.sync_all())
        })
        .map_err(|e| Error::io(&path, e))
        .and_then(|()| disk::sync_dir(dir));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

/// The lists of unsynced files in a tier's directory, found at open (a crash or a power loss
/// came before the flush that would have removed them), and the names they hold.
#[derive(Default)]
pub(super) struct Unfinished {
    pub lists: Vec<PathBuf>,
    pub names: HashSet<String>,
}

/// Reads the lists in `dir` whose names are among `entries` (the directory's file names).
///
/// # Errors
/// [`Error::Io`] naming a list that cannot be read.
pub(super) fn unfinished(dir: &Path, entries: &[String]) -> Result<Unfinished> {
    let mut found = Unfinished::default();
    for name in entries.iter().filter(|n| n.ends_with(LIST_SUFFIX)) {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        // A torn last line names no file whole: it was written before the list was synced,
        // so no file of it was renamed into place.
        found.names.extend(text.lines().map(str::to_owned));
        found.lists.push(path);
    }
    Ok(found)
}

impl Storage {
    /// Takes every tier's lists of unsynced files, under its creation lock: every file they
    /// name is in the map by then (a group inserts its files before it lets go of the lock),
    /// so a flush that syncs the files it finds afterwards syncs all of theirs.
    pub(super) fn take_unsynced_lists(&self) -> Vec<(usize, Vec<PathBuf>)> {
        let mut taken = Vec::new();
        for (tier, store) in self.tiers.iter().enumerate() {
            let _creating = store.create_lock.lock().unwrap_or_else(|e| e.into_inner());
            let mut lists = store
                .unsynced_lists
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if !lists.is_empty() {
                taken.push((tier, std::mem::take(&mut *lists)));
            }
        }
        taken
    }

    /// After a flush synced every file: syncs the directories of the tiers in `taken` (the
    /// renames), then removes their lists. On failure the lists are put back, so the next
    /// flush tries again.
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory that could not be synced.
    pub(super) fn finish_unsynced_lists(&self, taken: Vec<(usize, Vec<PathBuf>)>) -> Result<()> {
        let mut failure = None;
        for (tier, lists) in taken {
            let store = &self.tiers[tier];
            if failure.is_none() {
                match disk::sync_dir(&store.dir) {
                    Ok(()) => {
                        for list in &lists {
                            // A list left behind only costs the next open a look at the
                            // files it names, which are whole now.
                            let _ = std::fs::remove_file(list);
                        }
                        continue;
                    }
                    Err(e) => failure = Some(e),
                }
            }
            self.put_back_lists(tier, lists);
        }
        failure.map_or(Ok(()), Err)
    }

    /// Puts lists taken by [`Storage::take_unsynced_lists`] back, for a flush that failed.
    pub(super) fn put_back_lists(&self, tier: usize, lists: Vec<PathBuf>) {
        let store = &self.tiers[tier];
        (store
            .unsynced_lists
            .lock()
            .unwrap_or_else(|e| e.into_inner()))
        .extend(lists);
    }
}
