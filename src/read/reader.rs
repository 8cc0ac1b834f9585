//! The read side of an open data directory: [`Reader`] and what a read sees through it,
//! the tiers, the clock, the registry (and a selection of it grouped by tags), series
//! kinds, raw points, a series' chunk and slot, and the period files of a chunk; nothing of
//! the write path, so reads never reach into the engine's internals.
//!
//! The reads themselves are methods of [`Reader`] written beside their work, in the files
//! above this one, which import it and are not imported by it: one-series reads in
//! [`crate::read::query`], reads across series in [`crate::read::aggregate`], distribution
//! reads in [`crate::read::distribution`].

use std::borrow::Cow;

use super::budget::ReadBudget;
use super::tier_choice::{self, TierChoice};
use super::write_log::WriteLog;
use crate::clock::Clock;
use crate::config::TiersConfig;
use crate::counter::{CounterTable, SeriesKind};
use crate::error::Result;
use crate::registry::{Registry, Selector, SeriesId};
use crate::storage::raw::{RawRead, RawStore};
use crate::storage::HeldPeriod;
use crate::storage::Storage;
use crate::time::Timestamp;

/// A series a read folds: where its cells are and which group it folds into.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Member {
    pub(crate) chunk: u32,
    pub(crate) slot: u32,
    pub(crate) group: usize,
}

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
    /// Read by the render cache, which comes with the server.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    writes: &'a WriteLog,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(
        config: &'a TiersConfig,
        storage: &'a Storage,
        raw: Option<&'a RawStore>,
        registry: &'a Registry,
        kinds: &'a CounterTable,
        clock: &'a dyn Clock,
        writes: &'a WriteLog,
    ) -> Reader<'a> {
        Reader {
            config,
            storage,
            raw,
            registry,
            kinds,
            clock,
            writes,
        }
    }

    /// The engine's writes by generation: what may have changed since an earlier read.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn writes(&self) -> &'a WriteLog {
        self.writes
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
    /// `limit` points in the range, it stops at `limit + 1` (`RawStore::read`).
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

    /// Series `id` as a member of a read's group `group`: the chunk and slot of its cells.
    pub(crate) fn member(&self, id: SeriesId, group: usize) -> Member {
        let slots = self.slots();
        Member {
            chunk: id.0 / slots,
            slot: id.0 % slots,
            group,
        }
    }

    /// The series `selector` picks, in id order, each with its values of the `group_by`
    /// tags (`None` for a tag it lacks), the registry scan (a value per key) charged to
    /// `budget` first: the selection of the reads that group series.
    ///
    /// # Errors
    /// [`crate::error::Error::InvalidQuery`] when `budget` refuses the scan.
    pub(crate) fn select_grouped(
        &self,
        selector: &Selector,
        group_by: &[String],
        budget: &ReadBudget,
    ) -> Result<Vec<(SeriesId, Vec<Option<String>>)>> {
        budget.charge_scan(self.registry.len())?;
        Ok(self.registry.select(|id, key| {
            selector.matches(key).then(|| {
                let values = (group_by.iter())
                    .map(|k| key.tag(k).map(Cow::into_owned))
                    .collect();
                (id, values)
            })
        }))
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

    /// The tier `choice` names, or the `auto` choice for `[from, to)` within `max_points`
    /// (the configured budget when `None`).
    ///
    /// # Errors
    /// [`crate::Error::UnknownTier`] for a name no tier has.
    pub fn choose_tier(
        &self,
        choice: &TierChoice,
        from: Timestamp,
        to: Timestamp,
        max_points: Option<u32>,
    ) -> Result<usize> {
        choice.resolve(self.config, from, to, max_points, self.now())
    }

    /// The finest tier whose window reaches back to `from` and whose buckets over
    /// `[from, to)` number at most `max_points`; failing that, the tier reaching back
    /// furthest among those within the budget; failing that, the coarsest tier.
    pub fn auto_tier(&self, from: Timestamp, to: Timestamp, max_points: u32) -> usize {
        tier_choice::auto_tier(self.config, from, to, max_points, self.now())
    }
}
