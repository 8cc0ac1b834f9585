//! The read side of an open data directory: the one narrow interface that one-series
//! queries ([`crate::read::query`]), cross-series aggregates ([`crate::read::aggregate`]) and the render
//! API's source read through. It hands out the tiers, the clock, the registry, series kinds
//! and the period files of a chunk, and nothing of the write path, so reads never reach into
//! the engine's internals.

use super::aggregate::{self, AggregatePlan, AggregateQuery, AggregateResult, PartialAggregate};
use super::budget::ReadBudget;
#[cfg(feature = "server")]
use super::query::Display;
use super::query::{self, HeldFiles, PointGrid, Query, QueryResult};
use super::tier_choice::{self, TierChoice};
use super::write_log::WriteLog;
use crate::bucket::Bucket;
use crate::clock::Clock;
use crate::config::TiersConfig;
use crate::counter::{CounterTable, SeriesKind};
use crate::error::Result;
use crate::registry::{Registry, Selector, SeriesId};
use crate::storage::raw::{RawRead, RawStore};
use crate::storage::HeldPeriod;
use crate::storage::Storage;
use crate::time::{Span, Timestamp};

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

    // One-series reads (src/read/query.rs).

    /// Answers `query`.
    ///
    /// # Errors
    /// [`crate::Error::UnknownSeries`], [`crate::Error::UnknownTier`], [`crate::Error::InvalidSeries`], or
    /// [`crate::Error::InvalidQuery`] for an empty or oversized range or a step that is not a
    /// multiple of the tier's resolution.
    pub fn query(&self, query: &Query) -> Result<QueryResult> {
        query::query(self, query)
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

    /// The merged buckets of series `id` in tier `tier`: one per `step`-aligned interval
    /// whose start lies in `[from, to)`, each folding the tier's buckets inside it. Buckets
    /// before the tier's window or in periods without a file are empty.
    ///
    /// # Errors
    /// [`crate::Error::InvalidQuery`] when `from >= to`, `step` is not a multiple of the tier's
    /// resolution, or the answer would exceed `query::MAX_QUERY_POINTS`.
    pub fn read_buckets(
        &self,
        id: SeriesId,
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        step: Span,
    ) -> Result<Vec<(Timestamp, Bucket)>> {
        query::read_buckets(self, id, tier, from, to, step)
    }

    /// The points of distribution series `id` in tier `tier`: per `step`-aligned interval
    /// whose start lies in `[from, to)`, the merged bucket and histogram, from which
    /// quantiles are taken ([`crate::read::distribution::DistributionPoint::quantile`]).
    ///
    /// # Errors
    /// As [`Reader::read_buckets`], and a compacted file that cannot be read.
    pub fn distribution(
        &self,
        id: SeriesId,
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        step: Span,
    ) -> Result<Vec<super::distribution::DistributionPoint>> {
        super::distribution::read(self, id, tier, from, to, step)
    }

    /// Answers a distribution read: quantiles (or histograms) per point, of one series or of
    /// the series a selector picks merged per group, within `budget`.
    ///
    /// # Errors
    /// [`crate::Error::UnknownSeries`] for a single series not registered,
    /// [`crate::Error::UnknownTier`], [`crate::Error::InvalidQuery`] as for
    /// [`Reader::aggregate`], and a read over `budget`.
    pub fn distribution_query(
        &self,
        query: &super::distribution::DistributionQuery,
        budget: &ReadBudget,
    ) -> Result<super::distribution::DistributionResult> {
        super::distribution::answer(self, query, budget)
    }

    /// [`Reader::read_buckets`] without the timestamps, seeing the tier from `window` on
    /// (the first second its window holds at the clock of whoever chose the read; nothing
    /// older is read): the first point's start and the merged buckets, one per step.
    pub(crate) fn merged_buckets(
        &self,
        id: SeriesId,
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        step: Span,
        window: Timestamp,
    ) -> Result<(Timestamp, Vec<Bucket>)> {
        query::merged_buckets(self, id, tier, from, to, step, window)
    }

    /// The files of `chunk` in `tier` that hold part of `grid` from `window` (the first
    /// second of the tier's window the read sees) on, oldest first. Only periods that have a
    /// file: the walk is bounded by the files held, not by the width of the range.
    ///
    /// # Errors
    /// [`crate::Error::CorruptFile`] or [`crate::Error::Io`] naming a compacted file that cannot be read.
    pub(crate) fn files_for(
        &self,
        tier: usize,
        grid: &PointGrid,
        chunk: u32,
        window: Timestamp,
    ) -> Result<HeldFiles> {
        query::files_for(self, tier, grid, chunk, window)
    }

    // Reads across series (src/read/aggregate.rs).

    /// Answers `query`, however many cells it reads.
    ///
    /// # Errors
    /// [`crate::Error::UnknownTier`], or [`crate::Error::InvalidQuery`] for an empty range,
    /// a step that is not a multiple of the tier's resolution, or groups × points over
    /// `query::MAX_QUERY_POINTS`.
    pub fn aggregate(&self, query: &AggregateQuery) -> Result<AggregateResult> {
        aggregate::aggregate(self, query)
    }

    /// Answers `query` if what it reads fits in `budget`: the registry's keys (one value
    /// each, charged before the scan) and the cells, every selected series times the tier's
    /// buckets in the range (within the tier's retention window), charged before any is read.
    /// The plan, its partial answer over this engine, and the finish: the same steps a
    /// cluster read takes across partitions (see [`PartialAggregate`]).
    ///
    /// # Errors
    /// As [`Reader::aggregate`], and [`crate::Error::InvalidQuery`] when `budget` refuses the read.
    pub fn aggregate_within(
        &self,
        query: &AggregateQuery,
        budget: &ReadBudget,
    ) -> Result<AggregateResult> {
        aggregate::aggregate_within(self, query, budget)
    }

    /// Fixes what `query` reads from this engine's clock and tiers: the tier (`auto` chosen
    /// now), the grid of points and the first second the tier's window holds. Whoever reads
    /// with the plan reads that grid, whatever its own clock says.
    ///
    /// # Errors
    /// [`crate::Error::UnknownTier`], or [`crate::Error::InvalidQuery`] for an empty range,
    /// a step that is not a multiple of the tier's resolution, or more than
    /// `query::MAX_QUERY_POINTS` points.
    pub fn plan_aggregate(&self, query: &AggregateQuery) -> Result<AggregatePlan> {
        aggregate::plan_aggregate(self, query)
    }

    /// The series of this engine `plan` selects, grouped and folded into one row of
    /// accumulators per group, if what it reads fits in `budget` (charged as
    /// [`Reader::aggregate_within`] says). Partials of engines holding disjoint series merge
    /// into the partial of one engine holding them all.
    ///
    /// # Errors
    /// [`crate::Error::UnknownTier`] when this engine has no tier of the plan's name,
    /// [`crate::Error::InvalidQuery`] when that tier's layout differs from the plan's, when
    /// groups × points exceeds `query::MAX_QUERY_POINTS` or `budget` refuses the read;
    /// [`crate::Error::CorruptFile`] or [`crate::Error::Io`] for a compacted file that
    /// cannot be read.
    pub fn aggregate_partial(
        &self,
        plan: &AggregatePlan,
        budget: &ReadBudget,
    ) -> Result<PartialAggregate> {
        aggregate::aggregate_partial(self, plan, budget)
    }

    /// The series `ids` (in any order, an id given twice counted twice) on `grid` of tier
    /// `tier`, each bucket shown as `display`, folded into one row: the aggregate's
    /// chunk-wise parallel pass, for the render API's sumSeries and kin
    /// (src/render/stored.rs), which select their series by Graphite path instead of by
    /// [`Selector`]. `window` is the first second of the tier the read sees.
    ///
    /// # Errors
    /// [`crate::Error::CorruptFile`] or [`crate::Error::Io`] for a compacted file that cannot be read.
    #[cfg(feature = "server")]
    pub(crate) fn fold_series(
        &self,
        tier: usize,
        grid: &PointGrid,
        shown: (Display, Timestamp),
        ids: &[crate::registry::SeriesId],
    ) -> Result<Vec<aggregate::Fold>> {
        aggregate::fold_series(self, tier, grid, shown, ids)
    }
}
