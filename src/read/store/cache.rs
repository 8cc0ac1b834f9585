//! The render cache, for dashboard refreshes: what render read from an engine on a grid (series' buckets,
//! or a one-pass aggregate of series for sumSeries and kin), kept per series and tier, so
//! that Grafana asking for the same panel again, or for the window slid a little, reads
//! only what may have changed. It is a decorator of the engine's store ([`CachedStore`]):
//! a single node renders through it, and a cluster's owners answer the bucket reads of a
//! render's grid through it, so a cluster node's renders are cached where the data is.
//!
//! An entry holds the points of one grid (tier, first bucket, count) as they were at a
//! generation of the engine's `WriteLog`. The next read of the same series on the same tier
//! keeps the entry's points that no write since can have touched (those before the bucket
//! holding the earliest time written since) and that the new grid still covers, and reads
//! the rest from storage: the still-filling bucket, any bucket a late sample touched, and the
//! buckets the window slid onto. A series created since (the registry grew) invalidates the
//! entry whole. So an answer from the cache is the answer storage gives, never an older
//! one.
//!
//! One cache serves every engine it is read through (a cluster node's partitions): an entry
//! is keyed by its engine's `WriteLog` id too, whose generations are that engine's alone.
//!
//! The entries' memory is bounded (`capacity` bytes; the least recently used go first) and
//! shown in `/metrics` with the hits, partial hits and misses.

// The tests render through the cache, and render needs the server.
#[cfg(all(test, feature = "server"))]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::{bucket_span, Found, HistogramVisit, RawPoints, SeriesFilter, SeriesRef, Store};
use crate::bucket::Bucket;
use crate::config::{TierSpec, TiersConfig};
use crate::error::Result;
use crate::read::aggregate::Fold;
use crate::read::budget::ReadBudget;
use crate::read::query::Display;
use crate::read::reader::Reader;
use crate::read::write_log::Changed;
use crate::time::Timestamp;

/// The default bound on the cache's memory: 64 MiB, room for the buckets of about 1,400
/// series over a day at 1 m, or for the aggregates of thousands of panels.
pub const DEFAULT_RENDER_CACHE_BYTES: usize = 64 << 20;

/// What an entry was read for: series of one engine (by id), on a tier.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// The series' buckets.
    Buckets { series: Vec<u32>, tier: String },
    /// The series' shown values folded.
    Fold {
        series: Vec<u32>,
        display: Display,
        tier: String,
    },
}

/// What an entry holds: each series' buckets, or their fold, on the entry's grid.
#[derive(Clone, Debug)]
enum Data {
    Buckets(Vec<Vec<Bucket>>),
    Folds(Vec<Fold>),
}

impl Data {
    /// Bytes the data holds, roughly: what the bound counts.
    fn bytes(&self) -> usize {
        match self {
            Data::Buckets(list) => (list.iter())
                .map(|b| std::mem::size_of::<Vec<Bucket>>() + std::mem::size_of_val(&b[..]))
                .sum(),
            Data::Folds(folds) => std::mem::size_of_val(&folds[..]),
        }
    }

    /// Points `skip..skip + keep` of the data; `None` when the data does not hold them
    /// (fewer points than its grid).
    fn slice(&self, skip: usize, keep: usize) -> Option<Data> {
        match self {
            Data::Buckets(list) => Some(Data::Buckets(
                (list.iter())
                    .map(|b| b.get(skip..skip + keep).map(<[Bucket]>::to_vec))
                    .collect::<Option<_>>()?,
            )),
            Data::Folds(folds) => Some(Data::Folds(folds.get(skip..skip + keep)?.to_vec())),
        }
    }

    /// `self` followed by `tail`, read later on the grid's next points; `None` when they do
    /// not hold the same series or the same kind of values.
    fn then(self, tail: Data) -> Option<Data> {
        match (self, tail) {
            (Data::Buckets(mut head), Data::Buckets(tail)) => {
                if head.len() != tail.len() {
                    return None;
                }
                for (h, t) in head.iter_mut().zip(tail) {
                    h.extend(t);
                }
                Some(Data::Buckets(head))
            }
            (Data::Folds(mut head), Data::Folds(tail)) => {
                head.extend(tail);
                Some(Data::Folds(head))
            }
            _ => None,
        }
    }

    /// True when the data holds every point of a grid of `points` points.
    fn covers(&self, points: usize) -> bool {
        match self {
            Data::Buckets(list) => !list.is_empty() && list.iter().all(|b| b.len() == points),
            Data::Folds(folds) => folds.len() == points,
        }
    }
}

/// The points of a read: a tier's buckets from `first` on, and the tier's window it saw.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Grid {
    /// The tier, by name.
    tier: String,
    /// Its resolution, seconds.
    resolution: i64,
    /// Start of the first bucket.
    first: Timestamp,
    /// Buckets read.
    points: u64,
    /// The first second read (render's grid's window).
    window: Timestamp,
}

impl Grid {
    /// The grid of a read of `tier` over `(from, to)` from `window` on; `None` when it
    /// holds no point.
    fn of(tier: &TierSpec, (from, to): (Timestamp, Timestamp), window: Timestamp) -> Option<Grid> {
        let (first, points) = bucket_span(tier, from, to);
        (points > 0).then(|| Grid {
            tier: tier.name.clone(),
            resolution: tier.resolution.secs() as i64,
            first,
            points: points as u64,
            window,
        })
    }

    /// The range of its points.
    fn range(&self) -> (Timestamp, Timestamp) {
        (
            self.first,
            self.first + self.points as i64 * self.resolution,
        )
    }
}

/// One cached read.
struct Entry {
    /// The grid the data is on.
    grid: Grid,
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
        grid: &Grid,
        read: impl Fn(&Grid) -> Result<Option<Data>>,
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
                let tail_grid = Grid {
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
            Some(data) if data.covers(points) => {
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
        grid: &Grid,
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
        Some((entry.data.slice(skip, keep)?, keep))
    }

    /// True when `key`'s entry is on `grid` exactly.
    fn holds_grid(&self, key: &EntryKey, grid: &Grid) -> bool {
        self.lock().map.get(key).is_some_and(|e| e.grid == *grid)
    }

    /// Keeps `data`, read on `grid` at generation `as_of` with `series` series registered,
    /// as `key`'s entry, dropping the least recently used entries beyond the bound.
    fn store(&self, key: EntryKey, grid: &Grid, data: Data, as_of: u64, series: usize) {
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

/// An engine's [`Reader`] as a [`Store`] through a [`RenderCache`]: the reads of a render's
/// grid (bucket reads and folds given the grid's window) are answered from what the cache
/// holds unchanged plus what storage holds for the rest; every other read is the reader's.
#[derive(Clone, Copy)]
pub struct CachedStore<'a> {
    reader: Reader<'a>,
    cache: &'a RenderCache,
}

impl<'a> CachedStore<'a> {
    /// `reader` read through `cache`.
    pub fn new(reader: Reader<'a>, cache: &'a RenderCache) -> CachedStore<'a> {
        CachedStore { reader, cache }
    }
}

impl Store for CachedStore<'_> {
    fn tiers(&self) -> &TiersConfig {
        self.reader.tiers()
    }

    fn now(&self) -> Timestamp {
        Store::now(&self.reader)
    }

    fn select(&self, filter: &dyn SeriesFilter, budget: &ReadBudget) -> Result<Vec<Found>> {
        Store::select(&self.reader, filter, budget)
    }

    fn count(&self, filter: &dyn SeriesFilter, budget: &ReadBudget) -> Result<Vec<usize>> {
        self.reader.count(filter, budget)
    }

    /// Through the cache when `window` is given (a render's grid).
    fn buckets(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        range: (Timestamp, Timestamp),
        window: Option<Timestamp>,
    ) -> Result<Vec<Vec<Bucket>>> {
        let grid = window.and_then(|window| Grid::of(tier, range, window));
        let Some(grid) = grid.filter(|_| !series.is_empty()) else {
            return self.reader.buckets(series, tier, range, window);
        };
        let key = Key::Buckets {
            series: series.iter().map(|s| s.id).collect(),
            tier: tier.name.clone(),
        };
        let read = |grid: &Grid| {
            let read = (self.reader).buckets(series, tier, grid.range(), Some(grid.window));
            Ok(Some(Data::Buckets(read?)))
        };
        match self.cache.through(&self.reader, key, &grid, read)? {
            Some(Data::Buckets(buckets)) => Ok(buckets),
            _ => self.reader.buckets(series, tier, range, window),
        }
    }

    fn visit_histograms(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        range: (Timestamp, Timestamp),
        window: Option<Timestamp>,
        visit: &HistogramVisit<'_>,
    ) -> Result<()> {
        (self.reader).visit_histograms(series, tier, range, window, visit)
    }

    /// Through the cache when `window` is given (a render's grid).
    fn fold(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        range: (Timestamp, Timestamp),
        window: Option<Timestamp>,
        display: Display,
    ) -> Result<Option<Vec<Fold>>> {
        let grid = window.and_then(|window| Grid::of(tier, range, window));
        let Some(grid) = grid.filter(|_| !series.is_empty()) else {
            return self.reader.fold(series, tier, range, window, display);
        };
        let key = Key::Fold {
            series: series.iter().map(|s| s.id).collect(),
            display,
            tier: tier.name.clone(),
        };
        let read = |grid: &Grid| {
            let read = (self.reader).fold(series, tier, grid.range(), Some(grid.window), display);
            Ok(read?.map(Data::Folds))
        };
        match self.cache.through(&self.reader, key, &grid, read)? {
            Some(Data::Folds(folds)) => Ok(Some(folds)),
            Some(Data::Buckets(_)) => self.reader.fold(series, tier, range, window, display),
            None => Ok(None),
        }
    }

    fn raw(
        &self,
        series: &[SeriesRef],
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Option<Vec<RawPoints>>> {
        self.reader.raw(series, from, to, budget)
    }

    fn raw_reaches(&self, from: Timestamp) -> bool {
        self.reader.raw_reaches(from)
    }
}
