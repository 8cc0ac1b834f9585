//! Compacted files kept open between reads, a bounded number of them: opening one and
//! checking its header and index (an open, a pread and a CRC of the index) costs a read of
//! one series about as much as decoding its slot, and a dashboard reads the same periods
//! again and again. Hundreds of thousands of compacted files may exist, so only the most
//! recently read stay open.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;

use super::compact::{CompactFile, CompactReader};
use crate::error::Result;

/// Compacted files kept open: a day at 1m for every series of 64 chunks (16k series). Each
/// is a file descriptor, and an embedding process may have no more than 1,024 of them in
/// all (the usual soft limit), so the cache takes a quarter at most.
pub(crate) const OPEN_READERS: usize = 256;

/// The open readers, most recently used kept, by [`CompactFile::id`].
pub(crate) struct Readers {
    open: Mutex<LruCache<u64, Arc<CompactReader>>>,
}

impl Readers {
    /// An empty cache of [`OPEN_READERS`] readers.
    pub(crate) fn new() -> Readers {
        Readers {
            open: Mutex::new(LruCache::new(
                NonZeroUsize::new(OPEN_READERS).expect("a non-zero capacity"),
            )),
        }
    }

    /// A reader of `file`: the one kept open, or a new one (opened and checked outside the
    /// cache's lock), then kept.
    ///
    /// # Errors
    /// As [`CompactFile::open_reader`]; a file that fails is not kept.
    pub(crate) fn get(&self, file: &CompactFile) -> Result<Arc<CompactReader>> {
        if let Some(reader) = self.lock().get(&file.id()) {
            return Ok(Arc::clone(reader));
        }
        let reader = Arc::new(file.open_reader()?);
        self.lock().put(file.id(), Arc::clone(&reader));
        Ok(reader)
    }

    /// Forgets `file`'s reader, if kept: the file was replaced or dropped, and its descriptor
    /// would keep the disk space of an unlinked file.
    pub(crate) fn forget(&self, file: &CompactFile) {
        self.lock().pop(&file.id());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<u64, Arc<CompactReader>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for Readers {
    fn default() -> Self {
        Readers::new()
    }
}

#[cfg(test)]
mod tests;
