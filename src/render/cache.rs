//! The dashboard-refresh cache: what render read from storage for a path (its series'
//! buckets) or a one-pass aggregate (sumSeries and kin over plain paths), kept per path and
//! tier, so that Grafana asking for the same panel again, or for the window slid a little,
//! reads only what may have changed.
//!
//! An entry holds the points of one grid (tier, first bucket, count) as they were at a
//! generation of the engine's `WriteLog`. The next read of the same path on the same tier
//! keeps the entry's points that no write since can have touched (those before the bucket
//! holding the earliest time written since) and that the new grid still covers, and reads
//! the rest from storage: the still-filling bucket, any bucket a late sample touched, and the
//! buckets the window slid onto. A series created since (the registry grew) invalidates the
//! entry whole. So an answer from the cache is the answer
//! storage gives, never an older one.
//!
//! One cache serves every engine it is read through (a cluster node's partitions): an entry
//! is keyed by its engine's `WriteLog` id too, whose generations are that engine's alone.
//!
//! The entries' memory is bounded (`capacity` bytes; the least recently used go first) and
//! shown in `/metrics` with the hits, partial hits and misses.

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::{Combined, Fetched, PathPattern, RenderGrid, Source, StoredSource};
use crate::error::Result;
use crate::read::aggregate::Aggregation;
use crate::read::budget::ReadBudget;
use crate::read::reader::Reader;
use crate::read::write_log::Changed;
use crate::time::Timestamp;

/// The default bound on the cache's memory: 64 MiB, room for the buckets of about 1,400
/// series over a day at 1 m, or for the aggregates of thousands of panels.
pub const DEFAULT_RENDER_CACHE_BYTES: usize = 64 << 20;

/// What an entry was read for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// Every series of a path pattern, on a tier.
    Fetch { pattern: String, tier: String },
    /// An aggregation of the series of path patterns, on a tier.
    Combine {
        patterns: Vec<String>,
        aggregation: Aggregation,
        tier: String,
    },
}

/// What an entry holds: a fetch's series or a combined aggregate, on the entry's grid.
#[derive(Clone, Debug)]
enum Data {
    Fetched(Vec<Fetched>),
    Combined(Combined),
}

impl Data {
    /// Bytes the data holds, roughly: what the bound counts.
    fn bytes(&self) -> usize {
        match self {
            Data::Fetched(list) => (list.iter())
                .map(|f| {
                    std::mem::size_of::<Fetched>()
                        + f.key.to_string().len()
                        + f.buckets.len() * std::mem::size_of::<crate::bucket::Bucket>()
                })
                .sum(),
            Data::Combined(c) => {
                std::mem::size_of::<Combined>()
                    + c.values.len() * std::mem::size_of::<Option<f64>>()
                    + c.matched.len()
            }
        }
    }

    /// Points `skip..skip + keep` of the data, each series' (or the aggregate's) start moved
    /// to `first`; `None` when the data does not hold them (fewer points than its grid).
    fn slice(&self, skip: usize, keep: usize, first: Timestamp) -> Option<Data> {
        match self {
            Data::Fetched(list) => {
                let mut out = Vec::with_capacity(list.len());
                for f in list {
                    let buckets = f.buckets.get(skip..skip + keep)?;
                    out.push(Fetched {
                        key: f.key.clone(),
                        start: first,
                        step: f.step,
                        buckets: buckets.to_vec(),
                        counter: f.counter,
                        // The cache holds stored series only (timer paths are read anew).
                        timer: None,
                    });
                }
                Some(Data::Fetched(out))
            }
            Data::Combined(c) => Some(Data::Combined(Combined {
                start: first,
                values: c.values.get(skip..skip + keep)?.to_vec(),
                matched: c.matched.clone(),
                ..*c
            })),
        }
    }

    /// `self` followed by `tail`, read later on the grid's next points; `None` when they do
    /// not describe the same series (in the same order) or the same kind of values.
    fn then(self, tail: Data) -> Option<Data> {
        match (self, tail) {
            (Data::Fetched(mut head), Data::Fetched(tail)) => {
                if head.len() != tail.len() {
                    return None;
                }
                for (h, t) in head.iter_mut().zip(tail) {
                    if h.key != t.key || h.counter != t.counter || h.step != t.step {
                        return None;
                    }
                    h.buckets.extend(t.buckets);
                }
                Some(Data::Fetched(head))
            }
            (Data::Combined(mut head), Data::Combined(tail)) => {
                if head.counter != tail.counter || head.step != tail.step {
                    return None;
                }
                head.values.extend(tail.values);
                head.matched = tail.matched;
                Some(Data::Combined(head))
            }
            _ => None,
        }
    }

    /// True when the data holds every point of a grid of `points` points starting at
    /// `first` (a fetch without series, or an aggregate over none, holds none and is read
    /// again).
    fn covers(&self, first: Timestamp, points: usize) -> bool {
        match self {
            Data::Fetched(list) => {
                !list.is_empty()
                    && (list.iter()).all(|f| f.start == first && f.buckets.len() == points)
            }
            Data::Combined(c) => c.start == first && c.values.len() == points,
        }
    }
}

/// One cached read.
struct Entry {
    /// The grid the data is on.
    grid: RenderGrid,
    data: Data,
    /// The write generation the data was read at (or after): writes after it may have
    /// changed it.
    as_of: u64,
    /// Series in the registry when it was read: a new series may match the path.
    series: usize,
    bytes: usize,
    /// When it was last used, in [`Entries::tick`]s: the least recent goes first.
    used: u64,
}

/// An entry's key: what it was read for, from which engine (its write log's id).
type EntryKey = (u64, Key);

#[derive(Default)]
struct Entries {
    map: HashMap<EntryKey, Entry>,
    bytes: usize,
    tick: u64,
}

/// Counts since start, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenderCacheStats {
    /// Bytes the entries hold now.
    pub bytes: usize,
    /// The bound on `bytes`.
    pub capacity: usize,
    /// Entries held now.
    pub entries: usize,
    /// Reads answered from an entry alone.
    pub hits: u64,
    /// Reads that kept part of an entry and read the rest from storage.
    pub partial_hits: u64,
    /// Reads with nothing to keep, read whole from storage.
    pub misses: u64,
    /// Entries dropped to stay within `capacity`.
    pub evictions: u64,
}

/// The cache, shared by every render of a server.
pub struct RenderCache {
    capacity: usize,
    entries: Mutex<Entries>,
    hits: AtomicU64,
    partial_hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

impl RenderCache {
    /// A cache holding at most `capacity` bytes (0 keeps nothing).
    pub fn new(capacity: usize) -> RenderCache {
        RenderCache {
            capacity,
            entries: Mutex::new(Entries::default()),
            hits: AtomicU64::new(0),
            partial_hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// What it holds and has done.
    pub fn stats(&self) -> RenderCacheStats {
        let entries = self.lock();
        RenderCacheStats {
            bytes: entries.bytes,
            capacity: self.capacity,
            entries: entries.map.len(),
            hits: self.hits.load(Ordering::Relaxed),
            partial_hits: self.partial_hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The points of `key` on `grid` as `reader`'s storage holds them now: what an entry
    /// holds that no write since can have changed, and `read` of the rest (the whole grid
    /// without such an entry). `read` answering `None` (no one-pass aggregate of these
    /// series) is passed on and drops the entry.
    fn through(
        &self,
        reader: &Reader<'_>,
        key: Key,
        grid: &RenderGrid,
        read: impl Fn(&RenderGrid) -> Result<Option<Data>>,
    ) -> Result<Option<Data>> {
        let key = (reader.writes().id(), key);
        // Both taken before reading, so that the data stored is at least this fresh.
        let as_of = reader.writes().generation();
        let series = reader.registry().len();
        let points = grid.points as usize;
        let kept = self.keep(reader, &key, grid, series);
        let data = match kept {
            Some((head, kept)) if kept == points => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                if self.holds_grid(&key, grid) {
                    // The entry is this very read: nothing to store again.
                    return Ok(Some(head));
                }
                Some(head)
            }
            Some((head, kept)) => {
                let tail_grid = RenderGrid {
                    first: grid.first + kept as i64 * grid.resolution,
                    points: (points - kept) as u64,
                    ..grid.clone()
                };
                match read(&tail_grid)? {
                    Some(tail) => match head.then(tail) {
                        Some(data) => {
                            self.partial_hits.fetch_add(1, Ordering::Relaxed);
                            Some(data)
                        }
                        None => {
                            self.misses.fetch_add(1, Ordering::Relaxed);
                            read(grid)?
                        }
                    },
                    None => None,
                }
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                read(grid)?
            }
        };
        match &data {
            Some(data) if data.covers(grid.first, points) => {
                self.store(key, grid, data.clone(), as_of, series);
            }
            _ => {
                self.remove(&key);
            }
        }
        Ok(data)
    }

    /// The leading points of `grid` the entry of `key` holds unchanged, and how many: those
    /// the entry's grid covers (on the same tier and points), read since no write touched
    /// them, with no series created since. `None` when it holds none.
    fn keep(
        &self,
        reader: &Reader<'_>,
        key: &EntryKey,
        grid: &RenderGrid,
        series: usize,
    ) -> Option<(Data, usize)> {
        let mut entries = self.lock();
        entries.tick += 1;
        let tick = entries.tick;
        let entry = entries.map.get_mut(key)?;
        entry.used = tick;
        let step = grid.resolution;
        let cached = &entry.grid;
        if entry.series != series
            || cached.resolution != step
            || cached.tier != grid.tier
            || grid.first < cached.first
            || (grid.first - cached.first) % step != 0
        {
            return None;
        }
        let cached_end = cached.first + cached.points as i64 * step;
        // The first bucket a write since may have touched: the one holding its time.
        let valid_end = match reader.writes().changed_since(entry.as_of) {
            Changed::Nothing => cached_end,
            Changed::From(t) => cached_end.min(t.saturating_sub(t.rem_euclid(step))),
        };
        let grid_end = grid.first + grid.points as i64 * step;
        let keep_end = valid_end.min(grid_end);
        if keep_end <= grid.first {
            return None;
        }
        let skip = ((grid.first - cached.first) / step) as usize;
        let keep = ((keep_end - grid.first) / step) as usize;
        Some((entry.data.slice(skip, keep, grid.first)?, keep))
    }

    /// True when `key`'s entry is on `grid` exactly.
    /// Every series of `reader`'s engine that `pattern` matches, on `grid`
    /// ([`StoredSource::fetch_on`]), through the cache: a single node's render, and a
    /// cluster owner's part of one (its grid chosen by the asking node).
    ///
    /// # Errors
    /// As [`StoredSource::fetch_on`].
    pub fn fetch_on(
        &self,
        reader: Reader<'_>,
        pattern: &PathPattern,
        grid: &RenderGrid,
    ) -> Result<Vec<Fetched>> {
        let stored = StoredSource::new(reader);
        let key = Key::Fetch {
            pattern: pattern.as_str().to_owned(),
            // Sets may name their tiers alike: a set's reader reads its own.
            tier: (reader.whole_config()).tier_label(reader.set(), &grid.tier),
        };
        let read = |grid: &RenderGrid| Ok(Some(Data::Fetched(stored.fetch_on(pattern, grid)?)));
        match self.through(&reader, key, grid, read)? {
            Some(Data::Fetched(list)) => Ok(list),
            _ => stored.fetch_on(pattern, grid),
        }
    }

    fn holds_grid(&self, key: &EntryKey, grid: &RenderGrid) -> bool {
        self.lock().map.get(key).is_some_and(|e| e.grid == *grid)
    }

    /// Keeps `data`, read on `grid` at generation `as_of` with `series` series registered,
    /// as `key`'s entry, dropping the least recently used entries beyond the bound.
    fn store(&self, key: EntryKey, grid: &RenderGrid, data: Data, as_of: u64, series: usize) {
        let bytes = data.bytes() + std::mem::size_of::<Entry>();
        let mut entries = self.lock();
        if let Some(old) = entries.map.remove(&key) {
            entries.bytes -= old.bytes;
        }
        if bytes > self.capacity {
            return;
        }
        while entries.bytes + bytes > self.capacity {
            let Some(oldest) = (entries.map.iter())
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(old) = entries.map.remove(&oldest) {
                entries.bytes -= old.bytes;
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        entries.tick += 1;
        let used = entries.tick;
        entries.bytes += bytes;
        let entry = Entry {
            grid: grid.clone(),
            data,
            as_of,
            series,
            bytes,
            used,
        };
        entries.map.insert(key, entry);
    }

    fn remove(&self, key: &EntryKey) {
        let mut entries = self.lock();
        if let Some(old) = entries.map.remove(key) {
            entries.bytes -= old.bytes;
        }
    }
}

/// [`StoredSource`] through a [`RenderCache`]: fetches and one-pass aggregates are answered
/// from what the cache holds unchanged plus what storage holds for the rest; everything else
/// is the stored source's.
pub struct CachedSource<'a> {
    reader: Reader<'a>,
    stored: StoredSource<'a>,
    cache: &'a RenderCache,
}

impl<'a> CachedSource<'a> {
    /// Render's view of `reader` through `cache`.
    pub fn new(reader: Reader<'a>, cache: &'a RenderCache) -> CachedSource<'a> {
        CachedSource {
            reader,
            stored: StoredSource::new(reader),
            cache,
        }
    }
}

impl Source for CachedSource<'_> {
    fn charge(
        &self,
        pattern: &PathPattern,
        from: i64,
        until: i64,
        budget: &ReadBudget,
    ) -> Result<()> {
        self.stored.charge(pattern, from, until, budget)
    }

    /// The stored series through the cache, then the timer paths read from storage (the
    /// cache keeps no histograms). With `[[set]]`s, each set's series on its own grid,
    /// read past the cache ([`StoredSource`]'s fetch).
    fn fetch(&self, pattern: &PathPattern, from: i64, until: i64) -> Result<Vec<Fetched>> {
        if self.reader.spans_sets() {
            return self.stored.fetch(pattern, from, until);
        }
        let Some(grid) = self.stored.grid(from, until)? else {
            return Ok(Vec::new());
        };
        let stored = self.cache.fetch_on(self.reader, pattern, &grid)?;
        super::timer_paths::with_timer_paths(&self.reader, pattern, &grid, stored)
    }

    fn combine(
        &self,
        patterns: &[PathPattern],
        aggregation: Aggregation,
        from: i64,
        until: i64,
    ) -> Result<Option<Combined>> {
        if (patterns.iter()).any(|p| super::timer_paths::count(&self.reader, p) > 0) {
            return Ok(None);
        }
        if self.reader.spans_sets() {
            // Past the cache, as the fetch with sets.
            return self.stored.combine(patterns, aggregation, from, until);
        }
        let Some(grid) = self.stored.grid(from, until)? else {
            return Ok(Some(Combined::nothing(patterns.len())));
        };
        let key = Key::Combine {
            patterns: patterns.iter().map(|p| p.as_str().to_owned()).collect(),
            aggregation,
            tier: grid.tier.clone(),
        };
        let read = |grid: &RenderGrid| {
            Ok((self.stored.combine_on(patterns, aggregation, grid)?).map(Data::Combined))
        };
        match self.cache.through(&self.reader, key, &grid, read)? {
            Some(Data::Combined(combined)) => Ok(Some(combined)),
            Some(Data::Fetched(_)) => self.stored.combine_on(patterns, aggregation, &grid),
            None => Ok(None),
        }
    }

    fn names(&self, pattern: &PathPattern) -> Result<Option<Vec<String>>> {
        self.stored.names(pattern)
    }

    fn step(&self, from: i64, until: i64) -> Result<Option<Option<i64>>> {
        self.stored.step(from, until)
    }
}
