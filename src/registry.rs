//! The series registry: the persistent map between series keys and the dense ids that index
//! slots in the period files.
//!
//! Ids are handed out in order (0, 1, 2, ...) and each one is appended to `series.log`
//! (byte layout at the top of `registry/log.rs`) before it is returned, so a process crash
//! never loses an id that data may already use. Power loss is covered by
//! [`Registry::sync`], which the engine's flush calls before it makes data durable.

pub mod glob;
mod key;
mod log;
mod selector;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use key::SeriesKey;
pub use selector::{Selector, TagFilter};

use crate::{Error, Result};

/// Dense id of a series; indexes slots in the period files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct SeriesId(pub u32);

impl SeriesId {
    /// The id as a slot index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for SeriesId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The persistent map series key <-> dense id.
///
/// Thread-safe: lookups take a read lock only, creations a write lock. Single-process: the
/// data directory lock that keeps a second process out is taken by the engine.
pub struct Registry {
    /// `dir/series.log`, for error messages.
    path: PathBuf,
    /// The log, opened for appending (`None` when opened read-only). Appends happen under
    /// the write lock of `inner`, which orders them; `sync` uses it without any lock so an
    /// fsync never stalls lookups.
    file: Option<File>,
    /// The map itself and the log length it corresponds to.
    inner: RwLock<Inner>,
    /// Set when an append could not be undone or an fsync failed: the file's state is then
    /// unknown, so no more ids are handed out (existing ones still resolve).
    poisoned: OnceLock<String>,
}

struct Inner {
    /// Canonical text -> id, so the hot path is one hash lookup on the text as received.
    ids: HashMap<Box<str>, SeriesId>,
    /// Key of each id, indexed by id.
    keys: Vec<SeriesKey>,
    /// Length of the log's intact part; a failed append is truncated back to it.
    log_len: u64,
}

impl Registry {
    /// File name inside the data dir.
    pub const FILE_NAME: &'static str = "series.log";

    /// Opens or creates `dir/series.log` and loads every record.
    ///
    /// A torn last record (a crash in the middle of an append) is dropped, the file
    /// truncated back to the last intact record, and a warning logged.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the file cannot be opened, read or repaired;
    /// [`Error::CorruptFile`] naming the path when it is not a series log of this format
    /// version, or when a record other than a torn last one is damaged.
    pub fn open(dir: &Path) -> Result<Registry> {
        Self::load(dir, true)
    }

    /// Reads `dir/series.log` without changing it (no file is created, a torn tail is left
    /// out rather than cut off), for reading beside a running writer. Creating series fails
    /// with [`Error::ReadOnly`].
    ///
    /// # Errors
    /// As [`Registry::open`].
    pub fn open_read_only(dir: &Path) -> Result<Registry> {
        Self::load(dir, false)
    }

    fn load(dir: &Path, writable: bool) -> Result<Registry> {
        let path = dir.join(Self::FILE_NAME);
        let loaded = log::load(&path, writable)?;
        let mut ids = HashMap::with_capacity(loaded.texts.len());
        let mut keys = Vec::with_capacity(loaded.texts.len());
        for (i, text) in loaded.texts.into_iter().enumerate() {
            let bad = |reason: String| Error::corrupt(&path, format!("record {i}: {reason}"));
            let key = SeriesKey::parse(&text).map_err(|e| bad(e.to_string()))?;
            if key.to_string() != text {
                return Err(bad(format!("key {text:?} is not in canonical form")));
            }
            let id = SeriesId(u32::try_from(i).map_err(|_| bad("too many records".into()))?);
            if let Some(first) = ids.insert(text.into_boxed_str(), id) {
                return Err(bad(format!("duplicates the key of id {first}")));
            }
            keys.push(key);
        }
        Ok(Registry {
            path,
            file: loaded.file,
            inner: RwLock::new(Inner {
                ids,
                keys,
                log_len: loaded.len,
            }),
            poisoned: OnceLock::new(),
        })
    }

    /// Fast path: lookup by canonical text (no allocation, no parsing). Text that is not
    /// canonical (tags out of order, say) is simply not found; [`Registry::lookup`] handles it.
    pub fn get(&self, canonical: &str) -> Option<SeriesId> {
        self.read().ids.get(canonical).copied()
    }

    /// Returns the id of `key`, creating it if new; the second element is true when this
    /// call created it. A new id is appended to the log with one write call before it is
    /// returned. Racing creators of the same key get the same id and one record is written.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the append fails (the log is cut back to its last intact record
    /// and the id is not handed out); [`Error::Poisoned`] when an earlier failure left the
    /// log in an unknown state; [`Error::InvalidSeries`] when all 2^32 ids are taken.
    pub fn get_or_create(&self, key: &SeriesKey) -> Result<(SeriesId, bool)> {
        let text = key.to_string();
        if let Some(id) = self.get(&text) {
            return Ok((id, false));
        }
        let mut inner = self.write();
        // Another thread may have created it between the two locks.
        if let Some(&id) = inner.ids.get(text.as_str()) {
            return Ok((id, false));
        }
        if let Some(reason) = self.poisoned.get() {
            return Err(Error::Poisoned(reason.clone()));
        }
        let Some(file) = &self.file else {
            return Err(Error::ReadOnly(self.path.clone()));
        };
        let id =
            u32::try_from(inner.keys.len())
                .map(SeriesId)
                .map_err(|_| Error::InvalidSeries {
                    input: text.clone(),
                    reason: "the registry already holds the maximum number of series".to_owned(),
                })?;
        let record = log::encode_record(id, &text);
        if let Err(e) = (&*file).write_all(&record) {
            // A partial record would sit in front of the next one and make the log refuse
            // to open; cut it off, or stop appending if that fails too.
            if let Err(undo) = file.set_len(inner.log_len) {
                let _ = self.poisoned.set(format!(
                    "appending to {} failed ({e}) and truncating it back failed ({undo})",
                    self.path.display()
                ));
            }
            return Err(Error::io(&self.path, e));
        }
        inner.log_len += record.len() as u64;
        inner.ids.insert(text.into_boxed_str(), id);
        inner.keys.push(key.clone());
        Ok((id, true))
    }

    /// [`Registry::get`] on `text` first; on a miss, parses it (canonicalising tag order)
    /// and calls [`Registry::get_or_create`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSeries`] when `text` is not a valid key, and the errors of
    /// [`Registry::get_or_create`].
    pub fn resolve(&self, text: &str) -> Result<SeriesId> {
        if let Some(id) = self.get(text) {
            return Ok(id);
        }
        let key = SeriesKey::parse(text)?;
        self.get_or_create(&key).map(|(id, _)| id)
    }

    /// Looks `text` up, parsing and canonicalising it when the fast path misses; never
    /// creates.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSeries`] when `text` is not a valid key.
    pub fn lookup(&self, text: &str) -> Result<Option<SeriesId>> {
        if let Some(id) = self.get(text) {
            return Ok(Some(id));
        }
        let key = SeriesKey::parse(text)?;
        Ok(self.get(&key.to_string()))
    }

    /// The key of `id`, if it exists.
    pub fn key(&self, id: SeriesId) -> Option<SeriesKey> {
        self.read().keys.get(id.index()).cloned()
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.read().keys.len()
    }

    /// Whether no series exists yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys `selector` selects, in id order.
    pub fn matching(&self, selector: &Selector) -> Vec<SeriesKey> {
        self.select(|_, key| selector.matches(key).then(|| key.clone()))
    }

    /// Runs `pick` on every (id, key) under one read lock, in parallel, and keeps what it
    /// returns, in id order. Cross-series reads use it to match thousands of keys without
    /// cloning them.
    pub fn select<T: Send>(
        &self,
        pick: impl Fn(SeriesId, &SeriesKey) -> Option<T> + Sync,
    ) -> Vec<T> {
        use rayon::prelude::*;
        self.read()
            .keys
            .par_iter()
            .enumerate()
            .filter_map(|(i, key)| pick(SeriesId(i as u32), key))
            .collect()
    }

    /// Calls `f` on every (id, key) from id `first` on, in id order, under one read lock.
    pub fn for_each_from(&self, first: usize, mut f: impl FnMut(SeriesId, &SeriesKey)) {
        for (i, key) in self.read().keys.iter().enumerate().skip(first) {
            f(SeriesId(i as u32), key);
        }
    }

    /// Every (id, key) in id order, as a snapshot.
    pub fn all(&self) -> Vec<(SeriesId, SeriesKey)> {
        self.read()
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| (SeriesId(i as u32), k.clone()))
            .collect()
    }

    /// Path of the log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// fsyncs the log, making every id handed out so far survive power loss. The engine's
    /// flush calls it before it makes data that uses those ids durable.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the fsync fails; the registry then refuses new series
    /// ([`Error::Poisoned`]) because the kernel may have dropped the unsynced pages.
    /// [`Error::Poisoned`] when an earlier failure already poisoned it.
    pub fn sync(&self) -> Result<()> {
        if let Some(reason) = self.poisoned.get() {
            return Err(Error::Poisoned(reason.clone()));
        }
        let Some(file) = &self.file else {
            return Ok(());
        };
        file.sync_data().map_err(|e| {
            let _ = self
                .poisoned
                .set(format!("fsync of {} failed ({e})", self.path.display()));
            Error::io(&self.path, e)
        })
    }

    /// Read lock; a panic elsewhere cannot leave `Inner` half-updated (the map and key list
    /// are only changed after the append succeeded, in two infallible steps), so a poisoned
    /// lock is still sound to use.
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("path", &self.path)
            .field("len", &self.len())
            .field("poisoned", &self.poisoned.get())
            .finish()
    }
}
