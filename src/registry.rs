//! The series registry: the persistent map between series keys and the dense ids that index
//! slots in the period files.
//!
//! Ids are handed out in order (0, 1, 2, ...) and each one is appended to `series.log`
//! (byte layout at the top of `registry/series_log.rs`) before it is returned, so a process crash
//! never loses an id that data may already use. Power loss is covered by
//! [`Registry::sync`], which the engine's flush calls before it makes data durable.
//!
//! In memory every key is held once, as canonical text in one arena (`registry/store.rs`),
//! and read through a borrowed [`KeyView`]: scans and listings walk the stored text under
//! the read lock instead of copying keys.

pub(crate) mod glob;
mod key;
mod rules;
mod selector;
mod series_log;
mod store;
mod suggest;
#[cfg(test)]
mod tests;
mod view;

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use key::SeriesKey;
pub(crate) use key::{sort_tags_last_wins, split_graphite_tags, write_canonical};
pub(crate) use rules::matches_rules;
#[cfg(feature = "cli")]
pub(crate) use selector::is_glob;
pub use selector::{Selector, TagFilter};
pub(crate) use store::text_hash;
#[cfg(feature = "server")]
pub(crate) use suggest::SUGGESTIONS;
pub use view::KeyView;

use store::{KeyStore, Refusal};

use crate::config::SeriesRules;
use crate::error::Error;
use crate::error::Result;

/// Keys from which [`Registry::select`] spreads its scan over rayon's pool. Handing work to
/// the pool wakes its threads, which then spin for more before they sleep; below this a
/// scan takes a few tens of microseconds on the caller's thread. A cluster node reads each
/// partition's registry on its own, and a partition holds a few hundred series.
const SELECT_IN_PARALLEL: usize = 1024;

/// Dense id of a series; indexes slots in the period files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct SeriesId(pub u32);

impl SeriesId {
    /// The id as a slot index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Where a series' cells are: its tier set, and its place among that set's series, which
/// gives its chunk and slot in the set's period files. Without `[[set]]`s every series is in
/// the default set 0 at its own id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SetPlace {
    /// The tier set (0: the default one; see [`crate::config::TiersConfig::set_tiers`]).
    pub set: u8,
    /// Its place among its set's series, dense from 0 in id order (deleted series keep
    /// theirs).
    pub position: u32,
}

impl SetPlace {
    /// Series `id`'s place without `[[set]]`s: its id, in the default set.
    pub fn of_id(id: SeriesId) -> SetPlace {
        SetPlace {
            set: 0,
            position: id.0,
        }
    }

    /// The tier set as an index.
    pub fn set(self) -> usize {
        usize::from(self.set)
    }

    /// The chunk and slot of its cells in its set's files, for `slots` series per chunk.
    pub fn chunk_and_slot(self, slots: u32) -> (u32, u32) {
        (self.position / slots, self.position % slots)
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
    /// The map itself, the log file and the log length it corresponds to.
    inner: RwLock<Inner>,
    /// Deletions since open: name caches compare it with what they saw to drop ids that may
    /// have become holes.
    deletions: AtomicU64,
    /// Set when an append could not be undone or an fsync failed: the file's state is then
    /// unknown, so no more ids are handed out (existing ones still resolve).
    poisoned: OnceLock<String>,
    /// Whether the log records tier sets (`Inner::sets` is `Some`): read without the lock on
    /// every read's and batch's path, where without sets a series' place is its id.
    has_sets: std::sync::atomic::AtomicBool,
}

struct Inner {
    /// Every key's text and the index by text, so the hot path is one hash lookup on the
    /// text as received.
    keys: KeyStore,
    /// Length of the log's intact part; a failed append is truncated back to it.
    log_len: u64,
    /// The log, opened for appending (`None` when opened read-only). Appends happen under
    /// the write lock, which orders them; `sync` clones it under the read lock and fsyncs
    /// without any lock, so an fsync never stalls lookups or creations. A deletion replaces
    /// it with the rewritten log.
    file: Option<Arc<File>>,
    /// Each series' tier set and place, once the log records sets (version 3).
    sets: Option<SetPlaces>,
    /// The `[[set]]`s' rules, in order: a new series goes to the first that picks it.
    rules: Vec<SeriesRules>,
}

/// Each series' tier set and its place among that set's series.
struct SetPlaces {
    /// The set of each id.
    set_of: Vec<u8>,
    /// The place of each id among its set's series.
    position: Vec<u32>,
    /// Places handed out per set, so far.
    per_set: Vec<u32>,
}

impl SetPlaces {
    fn new(set_of: Vec<u8>) -> SetPlaces {
        let mut places = SetPlaces {
            position: Vec::with_capacity(set_of.len()),
            set_of: Vec::with_capacity(set_of.len()),
            per_set: Vec::new(),
        };
        for set in set_of {
            places.push(set);
        }
        places
    }

    fn push(&mut self, set: u8) {
        let set_index = usize::from(set);
        if self.per_set.len() <= set_index {
            self.per_set.resize(set_index + 1, 0);
        }
        self.position.push(self.per_set[set_index]);
        self.per_set[set_index] += 1;
        self.set_of.push(set);
    }
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
        let loaded = series_log::load(&path, writable)?;
        let keys = KeyStore::from_texts(loaded.texts, loaded.ends).map_err(|refusal| {
            let (record, reason) = match refusal {
                // The parse says what is wrong, when something is; else only the form is.
                Refusal::NotCanonical(record, text) => match SeriesKey::parse(&text) {
                    Err(e) => (record, e.to_string()),
                    Ok(_) => (record, format!("key {text:?} is not in canonical form")),
                },
                Refusal::Duplicate(record, first) => {
                    (record, format!("duplicates the key of id {first}"))
                }
            };
            Error::corrupt(&path, format!("record {record}: {reason}"))
        })?;
        let has_sets = std::sync::atomic::AtomicBool::new(loaded.sets.is_some());
        Ok(Registry {
            has_sets,
            path,
            inner: RwLock::new(Inner {
                keys,
                log_len: loaded.len,
                file: loaded.file.map(Arc::new),
                sets: loaded.sets.map(SetPlaces::new),
                rules: Vec::new(),
            }),
            deletions: AtomicU64::new(0),
            poisoned: OnceLock::new(),
        })
    }

    /// Gives new series to the `[[set]]` whose rules pick them first (set `i + 1` for
    /// `rules[i]`), the default set 0 when none does. Once there are rules, the log records
    /// each series' set (version 3): an older log is rewritten whole first, its series in
    /// the default set, where they were made. Existing series keep their recorded set.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the log when a series is recorded in a set beyond
    /// `rules` (its set was taken out of the configuration); [`Error::Io`] when the rewrite
    /// fails (the old log is in place).
    pub(crate) fn use_sets(&self, rules: Vec<SeriesRules>) -> Result<()> {
        let mut inner = self.write();
        if let Some(places) = &inner.sets {
            if let Some(&set) = places
                .set_of
                .iter()
                .find(|&&set| usize::from(set) > rules.len())
            {
                return Err(Error::corrupt(
                    &self.path,
                    format!(
                        "series are recorded in tier set {set}, but the configuration has {} \
                         [[set]]s; a set that holds series cannot be removed",
                        rules.len()
                    ),
                ));
            }
        }
        if !rules.is_empty() && inner.sets.is_none() {
            let set_of = vec![0u8; inner.keys.len()];
            if inner.file.is_some() {
                let texts = inner.keys.log_texts();
                let (file, len) = match series_log::rewrite(&self.path, texts, Some(&set_of)) {
                    Ok(done) => done,
                    // The old log is in place and still ours: the open fails, nothing changed.
                    Err(series_log::Rewrite::NotDone(e)) => return Err(e),
                    Err(series_log::Rewrite::Done(e)) => {
                        // The new log is on disk, and appends to the old one's handle would
                        // be lost.
                        let _ = (self.poisoned).set(format!(
                            "rewriting {} to record tier sets failed after its rename ({e})",
                            self.path.display()
                        ));
                        return Err(e);
                    }
                };
                inner.file = Some(Arc::new(file));
                inner.log_len = len;
            }
            inner.sets = Some(SetPlaces::new(set_of));
            self.has_sets.store(true, Ordering::Release);
        }
        inner.rules = rules;
        Ok(())
    }

    /// Where series `id`'s cells are (see [`SetPlace`]); without sets, no lock is taken.
    pub fn placement(&self, id: SeriesId) -> SetPlace {
        if !self.has_sets() {
            return SetPlace::of_id(id);
        }
        Self::place(&self.read(), id)
    }

    /// [`Registry::placement`] of each of `ids`, in order, under one read lock.
    pub fn placements(&self, ids: impl IntoIterator<Item = SeriesId>) -> Vec<SetPlace> {
        if !self.has_sets() {
            return ids.into_iter().map(SetPlace::of_id).collect();
        }
        let inner = self.read();
        ids.into_iter().map(|id| Self::place(&inner, id)).collect()
    }

    /// Whether series may be in other sets than the default one: without, every series'
    /// place is its id.
    pub fn has_sets(&self) -> bool {
        self.has_sets.load(Ordering::Acquire)
    }

    /// Places handed out in set `set` so far: its series' places are below this.
    pub fn set_len(&self, set: usize) -> usize {
        let inner = self.read();
        match &inner.sets {
            Some(places) => places.per_set.get(set).map_or(0, |&n| n as usize),
            None if set == 0 => inner.keys.len(),
            None => 0,
        }
    }

    fn place(inner: &Inner, id: SeriesId) -> SetPlace {
        match &inner.sets {
            Some(places) if id.index() < places.set_of.len() => SetPlace {
                set: places.set_of[id.index()],
                position: places.position[id.index()],
            },
            _ => SetPlace::of_id(id),
        }
    }

    /// Fast path: lookup by canonical text (no allocation, no parsing). Text that is not
    /// canonical (tags out of order, say) is simply not found; [`Registry::lookup`] handles it.
    pub fn get(&self, canonical: &str) -> Option<SeriesId> {
        self.read().keys.get(canonical).map(SeriesId)
    }

    /// [`Registry::get`] of each key, under one read lock: a batch of keys pays the lock's
    /// two atomic operations once, where they cost a lookup by key as much as the lookup.
    pub fn get_each<'a>(
        &self,
        canonical: impl IntoIterator<Item = &'a str>,
    ) -> Vec<Option<SeriesId>> {
        let inner = self.read();
        (canonical.into_iter())
            .map(|key| inner.keys.get(key).map(SeriesId))
            .collect()
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
        let text = key.as_str();
        if let Some(id) = self.get(text) {
            return Ok((id, false));
        }
        let mut inner = self.write();
        // Another thread may have created it between the two locks.
        if let Some(id) = inner.keys.get(text) {
            return Ok((SeriesId(id), false));
        }
        let id = self.append(&mut inner, &[text])?;
        Ok((id, true))
    }

    /// [`Registry::get_or_create`] of every key in `keys`, with one write lock and one write
    /// call for all the new ones, in the order given: a batch of new series (an import's)
    /// pays the lock and the system call once, not once a series. A key given twice gets
    /// one id, created by its first appearance. Returns each key's id and whether this call
    /// created it, in the order of `keys`.
    ///
    /// # Errors
    /// As [`Registry::get_or_create`], for the whole batch: when the append fails, no id
    /// of the batch is handed out; [`Error::InvalidSeries`] when the batch's new series
    /// would go past the maximum.
    pub fn get_or_create_all(&self, keys: &[SeriesKey]) -> Result<Vec<(SeriesId, bool)>> {
        let known = self.get_each(keys.iter().map(SeriesKey::as_str));
        if known.iter().all(Option::is_some) {
            return Ok(known.into_iter().flatten().map(|id| (id, false)).collect());
        }
        let mut inner = self.write();
        // Looked up again under the write lock: another thread may have created some.
        let first_new = inner.keys.len();
        let mut new: Vec<&str> = Vec::new();
        let mut in_batch: std::collections::HashMap<&str, usize> = Default::default();
        let mut ids = Vec::with_capacity(keys.len());
        for key in keys {
            let text = key.as_str();
            if let Some(id) = inner.keys.get(text) {
                ids.push((id as usize, false));
                continue;
            }
            let next = first_new + new.len();
            let id = *in_batch.entry(text).or_insert_with(|| {
                new.push(text);
                next
            });
            ids.push((id, id == next));
        }
        if !new.is_empty() {
            self.append(&mut inner, &new)?;
        }
        // Every id fits: `append` refused a batch that would pass the maximum.
        Ok((ids.into_iter())
            .map(|(id, created)| (SeriesId(id as u32), created))
            .collect())
    }

    /// Appends `texts` (none held yet, no two alike) to the log with one write call and
    /// then to the map, as the next ids in order; returns the first of them.
    fn append(&self, inner: &mut Inner, texts: &[&str]) -> Result<SeriesId> {
        if let Some(reason) = self.poisoned.get() {
            return Err(Error::Poisoned(reason.clone()));
        }
        let Some(file) = inner.file.clone() else {
            return Err(Error::ReadOnly(self.path.clone()));
        };
        let last = inner.keys.len() + texts.len() - 1;
        let (Ok(first), Ok(_)) = (u32::try_from(inner.keys.len()), u32::try_from(last)) else {
            return Err(Error::InvalidSeries {
                input: texts[0].to_owned(),
                reason: "the registry already holds the maximum number of series".to_owned(),
            });
        };
        // With sets, each new series' set: the first whose rules pick it, else the default.
        let sets: Option<Vec<u8>> = inner.sets.as_ref().map(|_| {
            (texts.iter())
                .map(|text| {
                    let key = KeyView::new(text);
                    let picked = (inner.rules.iter()).position(|rules| matches_rules(rules, key));
                    picked.map_or(0, |i| (i + 1) as u8)
                })
                .collect()
        });
        let mut records = Vec::new();
        for (at, (id, text)) in (first..).zip(texts).enumerate() {
            let set = sets.as_ref().map(|sets| sets[at]);
            records.extend_from_slice(&series_log::encode_record(SeriesId(id), set, text));
        }
        if let Err(e) = (&*file).write_all(&records) {
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
        inner.log_len += records.len() as u64;
        for text in texts {
            inner.keys.push(text);
        }
        if let (Some(places), Some(sets)) = (&mut inner.sets, sets) {
            for set in sets {
                places.push(set);
            }
        }
        Ok(SeriesId(first))
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
        Ok(self.get(key.as_str()))
    }

    /// The key of `id`, if it exists (a copy of its text).
    pub fn key(&self, id: SeriesId) -> Option<SeriesKey> {
        self.read().keys.view(id.index()).map(|key| key.to_key())
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.read().keys.len()
    }

    /// Number of series not deleted: [`Registry::len`] less the holes.
    pub fn live_len(&self) -> usize {
        let inner = self.read();
        inner.keys.len() - inner.keys.hole_count()
    }

    /// Whether no series exists yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `pick` on every (id, key) under one read lock, in parallel from
    /// [`SELECT_IN_PARALLEL`] keys on, and keeps what it returns, in id order. Cross-series
    /// reads and listings use it to match every key where it is stored, copying only what
    /// `pick` returns.
    pub fn select<T: Send>(
        &self,
        pick: impl Fn(SeriesId, KeyView<'_>) -> Option<T> + Sync,
    ) -> Vec<T> {
        self.select_in(None, pick)
    }

    /// [`Registry::select`] among the series of tier set `set` only, when given.
    pub fn select_in<T: Send>(
        &self,
        set: Option<usize>,
        pick: impl Fn(SeriesId, KeyView<'_>) -> Option<T> + Sync,
    ) -> Vec<T> {
        use rayon::prelude::*;
        let inner = self.read();
        let in_set = |i: usize| match (set, &inner.sets) {
            (Some(set), Some(places)) => places.set_of.get(i).map(|&s| usize::from(s)) == Some(set),
            (Some(set), None) => set == 0,
            (None, _) => true,
        };
        let picked = |i: usize| {
            if !in_set(i) {
                return None;
            }
            inner
                .keys
                .view(i)
                .and_then(|key| pick(SeriesId(i as u32), key))
        };
        let keys = 0..inner.keys.len();
        if keys.len() < SELECT_IN_PARALLEL {
            return keys.filter_map(picked).collect();
        }
        keys.into_par_iter().filter_map(picked).collect()
    }

    /// Calls `f` on every (id, key) from id `first` on, in id order, under one read lock.
    pub fn for_each_from(&self, first: usize, f: impl FnMut(SeriesId, KeyView<'_>)) {
        self.for_each_in(first..usize::MAX, f);
    }

    /// Calls `f` on every (id, key) with an id in `ids`, in id order, under one read lock:
    /// a bounded scan stops at the end of `ids`, however many series there are.
    pub fn for_each_in(
        &self,
        ids: std::ops::Range<usize>,
        mut f: impl FnMut(SeriesId, KeyView<'_>),
    ) {
        let inner = self.read();
        for i in ids.start..ids.end.min(inner.keys.len()) {
            if let Some(key) = inner.keys.view(i) {
                f(SeriesId(i as u32), key);
            }
        }
    }

    /// Deletes the series `ids` (those that are holes already, or beyond the registry, are
    /// passed over): their keys are no longer found or listed, their ids are never handed out
    /// again, and a later series of the same name gets a new id. Durable when it returns: the
    /// log is rewritten whole without their texts and renamed over the old one
    /// (`registry/series_log.rs`), so a crash leaves every one of them registered or none. Returns the
    /// ids deleted, with their keys. Lookups wait for the rewrite, which writes the whole log.
    ///
    /// # Errors
    /// [`Error::ReadOnly`] on a read-only registry, [`Error::Poisoned`] after an earlier
    /// failure, [`Error::Io`] when the new log cannot be written or renamed (nothing is
    /// deleted then, unless the rename was done and only reopening the new log failed:
    /// the registry is then poisoned for new series).
    pub(crate) fn delete(&self, ids: &[SeriesId]) -> Result<Vec<(SeriesId, SeriesKey)>> {
        let mut inner = self.write();
        if let Some(reason) = self.poisoned.get() {
            return Err(Error::Poisoned(reason.clone()));
        }
        if inner.file.is_none() {
            return Err(Error::ReadOnly(self.path.clone()));
        }
        let mut deleted: Vec<(SeriesId, SeriesKey)> = ids
            .iter()
            .filter_map(|&id| Some((id, inner.keys.view(id.index())?.to_key())))
            .collect();
        deleted.sort_unstable_by_key(|(id, _)| *id);
        deleted.dedup_by_key(|(id, _)| *id);
        if deleted.is_empty() {
            return Ok(deleted);
        }
        let texts = inner.keys.log_texts().enumerate().map(|(id, text)| {
            match deleted.binary_search_by_key(&(id as u32), |(d, _)| d.0) {
                Ok(_) => "",
                Err(_) => text,
            }
        });
        let sets = inner.sets.as_ref().map(|places| places.set_of.as_slice());
        let failed = match series_log::rewrite(&self.path, texts, sets) {
            Ok((file, len)) => {
                inner.file = Some(Arc::new(file));
                inner.log_len = len;
                None
            }
            Err(series_log::Rewrite::NotDone(e)) => return Err(e),
            Err(series_log::Rewrite::Done(e)) => {
                // The new log is on disk, and appends to the old one's handle would be lost.
                let _ = (self.poisoned).set(format!(
                    "rewriting {} for a deletion failed after its rename ({e})",
                    self.path.display()
                ));
                Some(e)
            }
        };
        for (id, _) in &deleted {
            inner.keys.remove(id.0);
        }
        self.deletions.fetch_add(1, Ordering::AcqRel);
        match failed {
            Some(e) => Err(e),
            None => Ok(deleted),
        }
    }

    /// Whether `id` is a deleted series' hole.
    pub(crate) fn is_deleted(&self, id: SeriesId) -> bool {
        self.read().keys.is_hole(id.index())
    }

    /// The ids of deleted series, in id order.
    pub(crate) fn deleted(&self) -> Vec<SeriesId> {
        let mut holes: Vec<SeriesId> = self.read().keys.holes().map(SeriesId).collect();
        holes.sort_unstable();
        holes
    }

    /// How many deletions this registry has made since open: a cache of ids that saw
    /// another count drops what it holds, since some of its ids may be holes now.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn deletions(&self) -> u64 {
        self.deletions.load(Ordering::Acquire)
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
        let Some(file) = self.read().file.clone() else {
            return Ok(());
        };
        file.sync_data().map_err(|e| {
            let _ = self
                .poisoned
                .set(format!("fsync of {} failed ({e})", self.path.display()));
            Error::io(&self.path, e)
        })
    }

    /// Read lock; a panic elsewhere cannot leave `Inner` half-updated (the keys are only
    /// changed after the append succeeded, by pushes whose only failure is running out of
    /// memory, which aborts), so a poisoned lock is still sound to use.
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
