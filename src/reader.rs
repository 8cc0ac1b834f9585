//! The read side of an open data directory: the one narrow interface that one-series
//! queries ([`crate::query`]), cross-series aggregates ([`crate::aggregate`]) and the render
//! API's source read through. It hands out the tiers, the clock, the registry, series kinds
//! and the period files of a chunk, and nothing of the write path, so reads never reach into
//! the engine's internals.

use crate::clock::Clock;
use crate::config::TiersConfig;
use crate::counter::{CounterTable, SeriesKind};
use crate::registry::{Registry, Selector, SeriesId};
use crate::storage::raw::{RawRead, RawStore};
use crate::storage::HeldPeriod;
use crate::storage::Storage;
use crate::time::Timestamp;
use crate::Result;

/// A read view of an engine, cheap to copy (it borrows); get one with
/// [`crate::Engine::reader`]. Reads take no lock on bucket memory.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    config: &'a TiersConfig,
    storage: &'a Storage,
    raw: Option<&'a RawStore>,
    registry: &'a Registry,
    kinds: &'a CounterTable,
    clock: &'a dyn Clock,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(
        config: &'a TiersConfig,
        storage: &'a Storage,
        raw: Option<&'a RawStore>,
        registry: &'a Registry,
        kinds: &'a CounterTable,
        clock: &'a dyn Clock,
    ) -> Reader<'a> {
        Reader {
            config,
            storage,
            raw,
            registry,
            kinds,
            clock,
        }
    }

    /// The tiers read.
    pub fn config(&self) -> &'a TiersConfig {
        self.config
    }

    /// The engine clock's current time.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The series registry (names, tags, ids).
    pub fn registry(&self) -> &'a Registry {
        self.registry
    }

    /// How series `id` stores its samples: as they come (gauge) or as increases (counter).
    pub fn series_kind(&self, id: SeriesId) -> SeriesKind {
        self.kinds.kind(id, self.registry)
    }

    /// [`Reader::series_kind`] of each of `ids`, in order, taking the counter table's lock
    /// once.
    pub fn series_kinds(&self, ids: &[SeriesId]) -> Vec<SeriesKind> {
        self.kinds.kinds(ids, self.registry)
    }

    /// First second tier `tier` holds at `now` (the clock read once per read).
    pub fn window_start(&self, tier: usize, now: Timestamp) -> Timestamp {
        self.config.tiers[tier].window_start(now)
    }

    /// The canonical keys of the series `selector` picks, in id order: one parallel scan of
    /// the registry, copying only the keys it answers.
    pub fn series_keys(&self, selector: &Selector) -> Vec<String> {
        self.registry
            .select(|_, key| selector.matches(key).then(|| key.as_str().to_owned()))
    }

    /// The points of series `id` in `[from, to)` in the raw tier, with the neighbours
    /// just outside; `None` without a raw tier. Points before the tier's window at the
    /// clock's now are not shown (their period is about to be dropped). With more than
    /// `limit` points in the range, it stops at `limit + 1` ([`RawStore::read`]).
    pub fn raw_points(
        &self,
        id: SeriesId,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> Option<RawRead> {
        let raw = self.raw?;
        let window = raw.spec().window_start(self.now());
        let mut read = raw.read(id.0, from.max(window), to, limit);
        if read.before.is_some_and(|(ts, _)| ts < window) {
            read.before = None;
        }
        Some(read)
    }

    /// Series slots per chunk: series `id` lives in chunk `id / slots`, slot `id % slots`.
    pub(crate) fn slots(&self) -> u32 {
        self.storage.slots()
    }

    /// The files of `chunk` in `tier` whose periods overlap `span`, oldest first, each with
    /// its period start. Only periods that have a file: a read is bounded by the files held,
    /// not by the width of its range.
    pub(crate) fn period_files(
        &self,
        tier: usize,
        chunk: u32,
        span: std::ops::Range<Timestamp>,
    ) -> Result<Vec<(Timestamp, HeldPeriod)>> {
        self.storage
            .files_of_chunk(tier, chunk, span.start, span.end)
    }
}
