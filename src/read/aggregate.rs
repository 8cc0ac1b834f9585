//! Cross-series reads: every series a [`Selector`] picks, split into groups by the values of
//! some tags, and folded point by point with one [`Aggregation`]. A whole-range aggregate
//! folds the range into one point per group ("how many butterflies did perpetua count in
//! location 1 last year").
//!
//! The fold is exact because buckets carry count, total, min and max: `avg` of `avg` is the
//! total of every sample over their count, never an average of per-series averages. Series
//! are read chunk by chunk (one file lookup per chunk and period) on rayon's pool.
//!
//! ```
//! use tierdb::{AggregateQuery, Aggregation, Display, Engine, Selector};
//!
//! # fn main() -> tierdb::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let engine = Engine::open(dir.path())?;
//! let now = chrono::Utc::now().timestamp();
//! for (scientist, location, count) in [("perpetua", 1, 3.0), ("perpetua", 1, 4.0), ("perpetua", 2, 5.0), ("leonard", 1, 7.0)] {
//!     let series = format!("butterflies{{scientist={scientist},location={location}}}");
//!     engine.record(&series, now - 86_400, count)?;
//! }
//! engine.sync()?;
//! // How many butterflies did perpetua count in each location over the last year?
//! let selector = Selector::parse("butterflies{scientist=perpetua}")?;
//! let year = AggregateQuery::new(selector, Aggregation::Sum, now - 365 * 86_400, now)
//!     .display(Display::Total)
//!     .group_by(["location"])
//!     .whole_range();
//! let totals: Vec<Option<f64>> =
//!     engine.aggregate(&year)?.groups.iter().map(|g| g.points[0].1).collect();
//! assert_eq!(totals, vec![Some(7.0), Some(5.0)]); // location 1, location 2
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::str::FromStr;

use rayon::prelude::*;

use crate::bucket::{Bucket, ExactF64};
use crate::config::{TierSpec, TiersConfig};
use crate::counter::SeriesKind;
use crate::error::Error;
use crate::error::Result;
use crate::read::budget::ReadBudget;
use crate::read::query::{still_filling, Display, Latest, PointGrid, MAX_QUERY_POINTS};
use crate::read::reader::{join_notes, Member, Reader, SetPartial};
use crate::read::tier_choice::TierChoice;
use crate::registry::Selector;
use crate::time::{Span, Timestamp};

/// How the series of one group are folded into one value per point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// Sum of the series' values. With the `total` display, the total of every sample.
    Sum,
    /// With the `avg` display: the total of every sample over their count (exact, weighted
    /// by samples). With the other displays: the mean of the series' values.
    Avg,
    /// Smallest series value. With the `min` display, the smallest sample.
    Min,
    /// Largest series value. With the `max` display, the largest sample.
    Max,
    /// Number of series with a sample in the point.
    Count,
}

impl Aggregation {
    /// Every aggregation, in documentation order.
    pub const ALL: [Aggregation; 5] = [
        Aggregation::Sum,
        Aggregation::Avg,
        Aggregation::Min,
        Aggregation::Max,
        Aggregation::Count,
    ];

    /// The name used in APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregation::Sum => "sum",
            Aggregation::Avg => "avg",
            Aggregation::Min => "min",
            Aggregation::Max => "max",
            Aggregation::Count => "count",
        }
    }
}

impl FromStr for Aggregation {
    type Err = Error;

    fn from_str(s: &str) -> Result<Aggregation> {
        Aggregation::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                Error::InvalidQuery(format!(
                    "unknown aggregation {s:?} (expected sum, avg, min, max or count)"
                ))
            })
    }
}

/// A read of many series at once.
#[derive(Clone, Debug, PartialEq)]
pub struct AggregateQuery {
    /// Which series take part.
    pub selector: Selector,
    /// Tag keys whose values split the series into groups; empty for one group.
    pub group_by: Vec<String>,
    /// How a group's series are folded.
    pub aggregation: Aggregation,
    /// How each series' bucket is shown before folding.
    pub display: Display,
    /// The tier to read.
    pub tier: TierChoice,
    /// First second of the range (inclusive).
    pub from: Timestamp,
    /// End of the range (exclusive).
    pub to: Timestamp,
    /// Width of one point; `None` for the tier's resolution. Ignored by a whole-range read.
    pub step: Option<Span>,
    /// Point budget for `auto`; `None` for the configured `max_points`.
    pub max_points: Option<u32>,
    /// Fold the whole range into one point per group.
    pub whole_range: bool,
}

impl AggregateQuery {
    /// `aggregation` of the averages of every series `selector` picks over `[from, to)`, from
    /// the `auto` tier, in one group.
    pub fn new(
        selector: Selector,
        aggregation: Aggregation,
        from: Timestamp,
        to: Timestamp,
    ) -> AggregateQuery {
        AggregateQuery {
            selector,
            group_by: Vec::new(),
            aggregation,
            display: Display::Avg,
            tier: TierChoice::Auto,
            from,
            to,
            step: None,
            max_points: None,
            whole_range: false,
        }
    }

    /// One group per distinct value of these tags (a series without a tag groups under
    /// `null` for it).
    pub fn group_by<S: Into<String>>(mut self, keys: impl IntoIterator<Item = S>) -> Self {
        self.group_by = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Shows each series' buckets as `display` before folding.
    pub fn display(mut self, display: Display) -> Self {
        self.display = display;
        self
    }

    /// Reads the tier named `name`.
    pub fn tier(mut self, name: &str) -> Self {
        self.tier = TierChoice::from(name);
        self
    }

    /// Points `step` wide.
    pub fn step(mut self, step: Span) -> Self {
        self.step = Some(step);
        self
    }

    /// One point per group for the whole range.
    pub fn whole_range(mut self) -> Self {
        self.whole_range = true;
        self
    }
}

/// The answer: one series of points per group.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AggregateResult {
    /// The tier read.
    pub tier: String,
    /// How each series' buckets were shown.
    pub display: Display,
    /// How they were folded.
    pub aggregation: Aggregation,
    /// Width of each point in seconds (the whole range's bucket-aligned width for a
    /// whole-range read).
    pub step: i64,
    /// Groups in order of their tag values.
    pub groups: Vec<Group>,
    /// As [`QueryResult::partial_from`](crate::read::query::QueryResult::partial_from): the
    /// start of the first point still filling at the asker's clock, absent when every point
    /// has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_from: Option<Timestamp>,
    /// As [`QueryResult::note`](crate::read::query::QueryResult::note): set when `per_sec`
    /// is asked of series of which some are gauges, saying how many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl AggregateResult {
    /// `group,ts,value` rows, the group its `k=v` tag values joined by `,` and quoted (empty
    /// without `group_by`): the `format=csv` of `/api/v1/aggregate` and `tierdb aggregate`.
    pub fn csv(&self) -> String {
        super::value_text::groups_csv(self.groups.iter().map(|g| (&g.tags, &g.points[..])))
    }
}

/// One group's result.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Group {
    /// The group's value of each `group_by` tag; `None` for series without it.
    pub tags: BTreeMap<String, Option<String>>,
    /// Series the selector picked into this group.
    pub series: usize,
    /// `(start, value)`; `None` where no series of the group had a sample. In JSON, a value
    /// that is not finite is a string, as in [`crate::read::query::QueryResult::points`].
    #[serde(with = "super::value_text::points")]
    pub points: Vec<(Timestamp, Option<f64>)>,
}

/// What an aggregate reads once the asker has fixed it ([`Reader::plan_aggregate`]): the
/// query, the tier by name, the grid of points and the first second the tier's window holds
/// at the asker's clock. Every engine given the plan reads the same buckets, so partial
/// answers of engines with different clocks still merge point by point. Serializable, as a
/// cluster read sends it to the owners of each partition.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AggregatePlan {
    selector: Selector,
    group_by: Vec<String>,
    aggregation: Aggregation,
    display: Display,
    /// The tier, by name: tier indexes are one node's configuration order.
    tier: String,
    from: Timestamp,
    to: Timestamp,
    /// Width of a point; `None` for one point over the whole range.
    step: Option<Span>,
    /// First second the tier held at the asker's clock: nothing older is read, anywhere.
    window: Timestamp,
    /// The points, as the asker's tier gives them; an owner whose tier gives another grid
    /// refuses the plan rather than answer on other points.
    grid: PointGrid,
    /// The first point still filling at the asker's clock (the answer's `partial_from`).
    #[serde(default)]
    partial_from: Option<Timestamp>,
}

impl AggregatePlan {
    /// The plan of `query` with `tiers` at `now`: the tier chosen, the grid and the tier's
    /// window fixed, so every engine that reads with the plan reads that grid, whatever its
    /// own clock says. A cluster node with no engine plans from its tiers and clock.
    ///
    /// # Errors
    /// As [`Reader::plan_aggregate`].
    pub fn new(
        tiers: &TiersConfig,
        now: Timestamp,
        query: &AggregateQuery,
    ) -> Result<AggregatePlan> {
        let tier = query
            .tier
            .resolve(tiers, query.from, query.to, query.max_points, now)?;
        let spec = &tiers.tiers[tier];
        let step = (!query.whole_range).then(|| query.step.unwrap_or(spec.resolution));
        AggregatePlan::on(query, spec, (step, spec.window_start(now)), now)
    }

    /// The plan of `query` reading tier `spec` at points `step` wide (one over the range for
    /// `None`) from `window` on, at `now`.
    ///
    /// # Errors
    /// As [`PointGrid::of`].
    pub(crate) fn on(
        query: &AggregateQuery,
        spec: &TierSpec,
        (step, window): (Option<Span>, Timestamp),
        now: Timestamp,
    ) -> Result<AggregatePlan> {
        let grid = PointGrid::of(spec, query.from, query.to, step)?;
        Ok(AggregatePlan {
            selector: query.selector.clone(),
            group_by: query.group_by.clone(),
            aggregation: query.aggregation,
            display: query.display,
            tier: spec.name.clone(),
            from: query.from,
            to: query.to,
            step,
            window,
            partial_from: still_filling(grid.first, grid.step, grid.points, now),
            grid,
        })
    }

    /// The tier read.
    pub fn tier(&self) -> &str {
        &self.tier
    }
}

/// An aggregate's answer before its values are shown: each group's tag values, its series
/// count and one accumulator per point, over the series of some engines. Partials over
/// disjoint sets of series [`merge`](PartialAggregate::merge) exactly into the partial over
/// their union: series counts and sample counts add, minima and maxima fold, and sums add as
/// the single-engine read adds its workers' rows (so `avg` is the merged total over the merged
/// count, never a mean of means). [`finish`](PartialAggregate::finish) turns it into the
/// [`AggregateResult`]; [`Reader::aggregate_within`] is the partial over one engine, finished.
///
/// Serializable: every float survives JSON bit for bit (finite ones as shortest round-trip
/// numbers, the others as `"inf"`, `"-inf"`, `"NaN"`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartialAggregate {
    plan: AggregatePlan,
    /// Sorted by tag values, each value list once.
    groups: Vec<PartialGroup>,
}

/// One group of a [`PartialAggregate`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct PartialGroup {
    /// The value of each `group_by` tag, in the plan's order.
    tags: Vec<Option<String>>,
    /// Series selected into the group.
    series: usize,
    /// Of them, the gauges, counted only for `per_sec` (for the answer's note); absent in a
    /// partial from a node that does not count them.
    #[serde(default)]
    gauges: usize,
    /// One accumulator per point of the plan's grid.
    rows: Vec<Fold>,
}

impl SetPartial for PartialAggregate {
    type Plan = AggregatePlan;
    type Answer = AggregateResult;

    fn empty(plan: AggregatePlan) -> PartialAggregate {
        PartialAggregate::empty(plan)
    }

    fn merge(&mut self, other: PartialAggregate) -> Result<()> {
        PartialAggregate::merge(self, other)
    }

    fn merge_set(&mut self, mut part: PartialAggregate, tiers: &str) -> Result<()> {
        self.plan.grid.same_points(&part.plan.grid, tiers)?;
        part.plan = self.plan.clone();
        PartialAggregate::merge(self, part)
    }

    fn finish_across(mut self, tiers: &str, note: &Option<String>) -> Result<AggregateResult> {
        self.plan.tier = tiers.to_owned();
        let mut result = self.finish()?;
        result.note = join_notes(result.note.take(), note);
        Ok(result)
    }

    fn finish_alone(self) -> Result<AggregateResult> {
        self.finish()
    }
}

impl PartialAggregate {
    /// The partial over no series: what merging starts from.
    pub fn empty(plan: AggregatePlan) -> PartialAggregate {
        PartialAggregate {
            plan,
            groups: Vec::new(),
        }
    }

    /// The plan this answers.
    pub fn plan(&self) -> &AggregatePlan {
        &self.plan
    }

    /// Number of groups.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// Folds `other`, a partial over other series, in. Merging in any order gives the same
    /// groups, series counts, sample counts, minima and maxima; sums are added as floats, so
    /// they are the same in any order whenever the sums are exact (see ARCHITECTURE.md).
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] when `other` answers another plan, or a group's rows do not
    /// match the plan's points (a partial garbled on its way), and `self` is unchanged then;
    /// or when the merged groups × points exceed `MAX_QUERY_POINTS`.
    pub fn merge(&mut self, other: PartialAggregate) -> Result<()> {
        if other.plan != self.plan {
            return Err(Error::InvalidQuery(
                "partial aggregates of different plans cannot be merged".into(),
            ));
        }
        other.check_shape()?;
        let points = self.plan.grid.points;
        let mine = std::mem::take(&mut self.groups);
        let mut merged = Vec::with_capacity(mine.len().max(other.groups.len()));
        let (mut a, mut b) = (
            mine.into_iter().peekable(),
            other.groups.into_iter().peekable(),
        );
        loop {
            let order = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => x.tags.cmp(&y.tags),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => break,
            };
            match order {
                std::cmp::Ordering::Less => merged.extend(a.next()),
                std::cmp::Ordering::Greater => merged.extend(b.next()),
                std::cmp::Ordering::Equal => {
                    let (mut x, y) = (a.next().expect("peeked"), b.next().expect("peeked"));
                    x.series += y.series;
                    x.gauges += y.gauges;
                    for (fold, other) in x.rows.iter_mut().zip(&y.rows) {
                        fold.merge(other);
                    }
                    debug_assert_eq!(x.rows.len(), points);
                    merged.push(x);
                }
            }
        }
        self.groups = merged;
        // Refused as soon as the merged groups are too many, so neither an owner merging its
        // engines' parts nor the asker holds more than the answer may.
        check_cells(self.groups.len(), points)
    }

    /// The answer: each group's points shown with the plan's display and folded with its
    /// aggregation.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] when groups × points exceeds `MAX_QUERY_POINTS` (the merged
    /// groups of many partitions can, where each partition's did not), or the partial is
    /// garbled (see [`PartialAggregate::merge`]).
    pub fn finish(self) -> Result<AggregateResult> {
        self.check_shape()?;
        let plan = self.plan;
        let grid = plan.grid;
        check_cells(self.groups.len(), grid.points)?;
        let seconds = grid.step as u64;
        let series: usize = self.groups.iter().map(|g| g.series).sum();
        let gauges: usize = self.groups.iter().map(|g| g.gauges).sum();
        let note = (plan.display == Display::PerSec && gauges > 0)
            .then(|| per_sec_of_gauges(gauges, series));
        let groups = self
            .groups
            .into_iter()
            .map(|group| Group {
                tags: plan.group_by.iter().cloned().zip(group.tags).collect(),
                series: group.series,
                points: group
                    .rows
                    .iter()
                    .enumerate()
                    .map(|(i, acc)| {
                        (
                            grid.start_of(i),
                            acc.value(plan.aggregation, plan.display, seconds),
                        )
                    })
                    .collect(),
            })
            .collect();
        Ok(AggregateResult {
            tier: plan.tier,
            display: plan.display,
            aggregation: plan.aggregation,
            step: grid.step,
            groups,
            partial_from: plan.partial_from,
            note,
        })
    }

    /// Refuses a partial whose groups are not sorted and distinct, or are not one row per
    /// point and one tag value per `group_by` key: only a partial that came over the wire can
    /// be so, and merging it would misplace values.
    fn check_shape(&self) -> Result<()> {
        let points = self.plan.grid.points;
        let keys = self.plan.group_by.len();
        let sorted = self.groups.windows(2).all(|w| w[0].tags < w[1].tags);
        let shaped = (self.groups.iter()).all(|g| g.rows.len() == points && g.tags.len() == keys);
        if sorted && shaped {
            Ok(())
        } else {
            Err(Error::InvalidQuery(
                "a partial aggregate's groups do not match its plan".into(),
            ))
        }
    }
}

/// The [`AggregateResult::note`] of `per_sec` over `series` series of which `gauges` are
/// gauges.
fn per_sec_of_gauges(gauges: usize, series: usize) -> String {
    let which = match (gauges, series) {
        (1, 1) => "the series is a gauge".to_owned(),
        (g, s) if g == s => format!("all {s} series are gauges"),
        (g, s) => format!("{g} of the {s} series are gauges"),
    };
    format!(
        "{which}: per_sec of a gauge is the sum of its samples per second of bucket, a rate \
         only if each sample is an increase; if they are counters (running totals), name them \
         in the [counters] rules of tiers.toml or write them with kind=counter, and per_sec is \
         their rate"
    )
}

/// Refuses an answer of `groups` × `points` values over `MAX_QUERY_POINTS`.
fn check_cells(groups: usize, points: usize) -> Result<()> {
    let cells = groups.saturating_mul(points);
    if cells as u64 > MAX_QUERY_POINTS {
        return Err(Error::InvalidQuery(format!(
            "{groups} groups x {points} points = {cells} values; at most {MAX_QUERY_POINTS} \
             (group by fewer tags, or use a coarser step or tier)"
        )));
    }
    Ok(())
}

/// The reads across series.
impl Reader<'_> {
    /// Answers `query`, however many cells it reads.
    ///
    /// # Errors
    /// [`Error::UnknownTier`], or [`Error::InvalidQuery`] for an empty range, a step that is
    /// not a multiple of the tier's resolution, or groups × points over `MAX_QUERY_POINTS`.
    pub fn aggregate(&self, query: &AggregateQuery) -> Result<AggregateResult> {
        self.aggregate_within(query, &ReadBudget::unlimited())
    }

    /// Answers `query` if what it reads fits in `budget`: the registry's keys (one value
    /// each, charged before the scan) and the cells, every selected series times the tier's
    /// buckets in the range (within the tier's retention window), charged before any is read.
    /// The plan, its partial answer over this engine, and the finish: the same steps a
    /// cluster read takes across partitions (see [`PartialAggregate`]).
    ///
    /// # Errors
    /// As [`Reader::aggregate`], and [`Error::InvalidQuery`] when `budget` refuses the read.
    pub fn aggregate_within(
        &self,
        query: &AggregateQuery,
        budget: &ReadBudget,
    ) -> Result<AggregateResult> {
        if !self.spans_sets() {
            let plan = self.plan_aggregate(query)?;
            return self.aggregate_partial(&plan, budget)?.finish();
        }
        match self.sets_selected(&query.selector, budget)?.as_slice() {
            [] => self.for_set(0).aggregate_within(query, budget),
            &[set] => self.for_set(set).aggregate_within(query, budget),
            sets => self.aggregate_across_sets(query, sets, budget),
        }
    }

    /// An aggregate over series of several tier sets: each set's series read through the
    /// tier that set would read alone ([`Reader::choose_tier`] in the set), on one grid of
    /// points as wide as the least common multiple of those tiers' resolutions, from the
    /// latest of their windows on (so every point holds every set), the sets' partials
    /// merged as engines' are. When the resolutions differ, the answer's note says so.
    ///
    /// # Errors
    /// As [`Reader::aggregate`]; [`Error::InvalidQuery`] for a `step` that is not a multiple
    /// of every set's resolution.
    fn aggregate_across_sets(
        &self,
        query: &AggregateQuery,
        sets: &[usize],
        budget: &ReadBudget,
    ) -> Result<AggregateResult> {
        let now = self.now();
        let across = self.across_sets(
            sets,
            &query.tier,
            (query.from, query.to),
            (query.max_points, query.step, query.whole_range),
        )?;
        let merged = across.merge_parts(
            |reader, spec| {
                let plan = AggregatePlan::on(query, spec, (across.step, across.window), now)?;
                reader.aggregate_partial(&plan, budget)
            },
            |merged: &mut PartialAggregate, part| merged.merge_set(part, &across.tiers),
        )?;
        merged.finish_across(&across.tiers, &across.note)
    }

    /// Fixes what `query` reads from this engine's clock and tiers: the tier (`auto` chosen
    /// now), the grid of points and the first second the tier's window holds. Whoever reads
    /// with the plan reads that grid, whatever its own clock says.
    ///
    /// # Errors
    /// [`Error::UnknownTier`], or [`Error::InvalidQuery`] for an empty range, a step that is
    /// not a multiple of the tier's resolution, or more than `MAX_QUERY_POINTS` points.
    pub fn plan_aggregate(&self, query: &AggregateQuery) -> Result<AggregatePlan> {
        AggregatePlan::new(self.config(), self.now(), query)
    }

    /// The series of this engine `plan` selects, grouped and folded into one row of
    /// accumulators per group, if what it reads fits in `budget` (charged as
    /// [`Reader::aggregate_within`] says). Partials of engines holding disjoint series merge
    /// into the partial of one engine holding them all.
    ///
    /// # Errors
    /// [`Error::UnknownTier`] when this engine has no tier of the plan's name,
    /// [`Error::InvalidQuery`] when that tier's layout differs from the plan's, when groups ×
    /// points exceeds `MAX_QUERY_POINTS` or `budget` refuses the read;
    /// [`Error::CorruptFile`] or [`Error::Io`] for a compacted file that cannot be read.
    pub fn aggregate_partial(
        &self,
        plan: &AggregatePlan,
        budget: &ReadBudget,
    ) -> Result<PartialAggregate> {
        let tier = PointGrid::planned_tier(
            self.config(),
            &plan.tier,
            plan.from,
            plan.to,
            plan.step,
            &plan.grid,
        )?;
        let grid = plan.grid;
        let matched = self.select_grouped(&plan.selector, &plan.group_by, budget)?;
        // (index, series, gauges) of each group; gauges are looked up only for per_sec.
        let mut groups: BTreeMap<Vec<Option<String>>, (usize, usize, usize)> = BTreeMap::new();
        for (id, values) in &matched {
            let group = groups.entry(values.clone()).or_default();
            group.1 += 1;
            if plan.display == Display::PerSec && self.series_kind(*id) == SeriesKind::Gauge {
                group.2 += 1;
            }
        }
        for (index, entry) in groups.values_mut().enumerate() {
            entry.0 = index;
        }
        check_cells(groups.len(), grid.points)?;
        grid.charge_held(
            budget,
            (plan.from.max(plan.window), plan.to),
            matched.len(),
            &plan.tier,
        )?;
        let members: Vec<Member> = (matched.iter())
            .map(|(id, values)| self.member(*id, groups[values].0))
            .collect::<Result<_>>()?;
        let folded = fold_members(
            self,
            tier,
            &plan.grid,
            (plan.display, plan.window),
            &members,
            groups.len(),
        )?;
        let points = grid.points;
        let groups = groups
            .into_iter()
            .map(|(tags, (index, series, gauges))| PartialGroup {
                tags,
                series,
                gauges,
                rows: folded[index * points..(index + 1) * points].to_vec(),
            })
            .collect();
        Ok(PartialAggregate {
            plan: plan.clone(),
            groups,
        })
    }

    /// The series `ids` (in any order, an id given twice counted twice) on `grid` of tier
    /// `tier`, each bucket shown as `display`, folded into one row: the aggregate's
    /// chunk-wise parallel pass, for the render API's sumSeries and kin
    /// (src/render/stored.rs), which select their series by Graphite path instead of by
    /// [`Selector`]. `window` is the first second of the tier the read sees.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] or [`Error::Io`] for a compacted file that cannot be read.
    #[cfg(feature = "server")]
    pub(crate) fn fold_series(
        &self,
        tier: usize,
        grid: &PointGrid,
        shown: (Display, Timestamp),
        ids: &[crate::registry::SeriesId],
    ) -> Result<Vec<Fold>> {
        let mut members: Vec<Member> = (ids.iter())
            .map(|id| self.member(*id, 0))
            .collect::<Result<_>>()?;
        members.sort_unstable_by_key(|m| (m.chunk, m.slot));
        fold_members(self, tier, grid, shown, &members, 1)
    }
}

/// Reads every member (sorted by id, so one chunk's members are adjacent) and folds it
/// into its group's row; rows are `grid.points` long. Chunks are spread over rayon's
/// pool, each worker folding into rows of its own that are merged at the end; members of
/// one chunk only (a cluster partition's, a small selection's) are folded on the caller's
/// thread, since the pool would run them as one job anyway, its threads then spinning idle.
///
/// Within a chunk the read goes span by span ([`SPAN_BUCKETS`] buckets), every member
/// per span: a span's cells of consecutive slots are adjacent in the file, so the read
/// streams instead of jumping a whole row of the file per 16 buckets, and the member two
/// ahead is prefetched. On the aggregate benchmark (10k series x 168 buckets, 54 MB of
/// cells) series-at-a-time took 19.8 ms, spans 16.0 ms, spans plus prefetch 9.8 ms.
///
/// `shown` is how each bucket is shown and the first second of the tier's window the
/// read sees.
fn fold_members(
    reader: &Reader<'_>,
    tier: usize,
    grid: &PointGrid,
    shown: (Display, Timestamp),
    members: &[Member],
    groups: usize,
) -> Result<Vec<Fold>> {
    let (display, window) = shown;
    let points = grid.points;
    let seconds = grid.step as u64;
    let runs: Vec<&[Member]> = members.chunk_by(|a, b| a.chunk == b.chunk).collect();
    let empty = || (vec![Fold::EMPTY; groups * points], Vec::new());
    let fold_run = |(mut rows, mut buckets): (Vec<Fold>, Vec<Bucket>), run: &&[Member]| {
        let held = reader.files_for(tier, grid, run[0].chunk, window)?;
        if held.is_empty() {
            return Ok((rows, buckets));
        }
        // A compacted period decodes a slot whole per read: read each member's
        // range in one piece instead of span by span.
        let (tile, span) = if held.has_compacted() {
            (points, i64::MAX)
        } else {
            (
                (SPAN_BUCKETS / grid.buckets_per_point()).max(1) as usize,
                SPAN_BUCKETS * grid.resolution(),
            )
        };
        for first in (0..points).step_by(tile) {
            let n = tile.min(points - first);
            buckets.clear();
            buckets.resize(run.len() * n, Bucket::EMPTY);
            let (start, end) = (grid.boundary(first), grid.boundary(first + n));
            let mut from = start;
            while from < end {
                let to = end.min(from.saturating_add(span));
                for (i, (member, out)) in run.iter().zip(buckets.chunks_exact_mut(n)).enumerate() {
                    if let Some(next) = run.get(i + 2) {
                        grid.prefetch_span(&held, next.slot, from..to, Latest::Skip);
                    }
                    grid.fold_span(&held, member.slot, from..to, first, out, Latest::Skip)?;
                }
                from = to;
            }
            for (member, got) in run.iter().zip(buckets.chunks_exact(n)) {
                let row = &mut rows[member.group * points + first..][..n];
                for (fold, bucket) in row.iter_mut().zip(got) {
                    fold.add(bucket, display, seconds);
                }
            }
        }
        Ok((rows, buckets))
    };
    if runs.len() <= 1 {
        return (runs.iter().try_fold(empty(), fold_run)).map(|(rows, _)| rows);
    }
    runs.par_iter()
        .try_fold(empty, fold_run)
        .map(|folded| folded.map(|(rows, _)| rows))
        .try_reduce_with(|mut a, b| {
            for (x, y) in a.iter_mut().zip(&b) {
                x.merge(y);
            }
            Ok(a)
        })
        .unwrap_or_else(|| Ok(vec![Fold::EMPTY; groups * points]))
}

/// Buckets of one series read before moving to the next series of the chunk: four 16-bucket
/// blocks, so each span streams through four contiguous runs of the file.
pub(crate) const SPAN_BUCKETS: i64 = 64;

/// What one point of one group has seen so far: the merged buckets (for the exact
/// aggregates) and the series' shown values (for the rest). Folds of disjoint series merge
/// exactly (a store's partial folds, [`crate::Store::fold`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fold {
    samples: Bucket,
    sum: f64,
    min: f64,
    max: f64,
    series: u32,
}

impl Fold {
    /// The fold of no value.
    pub(crate) const EMPTY: Fold = Fold {
        samples: Bucket::EMPTY,
        sum: 0.0,
        min: 0.0,
        max: 0.0,
        series: 0,
    };

    #[inline]
    fn add(&mut self, bucket: &Bucket, display: Display, seconds: u64) {
        let Some(value) = display.value(bucket, seconds) else {
            return;
        };
        let first = self.series == 0;
        self.min = if first { value } else { self.min.min(value) };
        self.max = if first { value } else { self.max.max(value) };
        self.sum += value;
        self.series += 1;
        self.samples.merge(bucket);
    }

    pub(crate) fn merge(&mut self, other: &Fold) {
        if other.series == 0 {
            return;
        }
        if self.series == 0 {
            *self = *other;
            return;
        }
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
        self.series += other.series;
        self.samples.merge(&other.samples);
    }

    fn value(&self, aggregation: Aggregation, display: Display, seconds: u64) -> Option<f64> {
        match (aggregation, display) {
            (Aggregation::Avg, Display::Avg) if self.series > 0 => {
                display.value(&self.samples, seconds)
            }
            _ => self.of_series(aggregation),
        }
    }

    /// `aggregation` of the series' shown values (the mean of them for `avg`, never the
    /// merged samples' mean): Graphite's sumSeries and kin. `None` when no series had one.
    pub fn of_series(&self, aggregation: Aggregation) -> Option<f64> {
        if self.series == 0 {
            return None;
        }
        Some(match aggregation {
            Aggregation::Avg => self.sum / f64::from(self.series),
            Aggregation::Sum => self.sum,
            Aggregation::Min => self.min,
            Aggregation::Max => self.max,
            Aggregation::Count => f64::from(self.series),
        })
    }
}

/// A fold on the wire: `null` when no series had a value, else
/// `[series, sum, min, max, count, total, sample min, sample max]` with each float exact.
impl serde::Serialize for Fold {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        if self.series == 0 {
            return serializer.serialize_none();
        }
        let b = &self.samples;
        serializer.collect_seq([
            Exact::Count(u64::from(self.series)),
            Exact::Float(self.sum),
            Exact::Float(self.min),
            Exact::Float(self.max),
            Exact::Count(b.count),
            Exact::Float(b.total),
            Exact::Float(b.min),
            Exact::Float(b.max),
        ])
    }
}

impl<'de> serde::Deserialize<'de> for Fold {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Fold, D::Error> {
        type Wire = Option<(
            u32,
            ExactF64,
            ExactF64,
            ExactF64,
            u64,
            ExactF64,
            ExactF64,
            ExactF64,
        )>;
        let Some((series, sum, min, max, count, total, low, high)) =
            Wire::deserialize(deserializer)?
        else {
            return Ok(Fold::EMPTY);
        };
        if series == 0 || count == 0 {
            return Err(serde::de::Error::custom(
                "a fold with a value has a series and a sample",
            ));
        }
        Ok(Fold {
            samples: Bucket {
                count,
                total: total.0,
                min: low.0,
                max: high.0,
                last: None,
            },
            sum: sum.0,
            min: min.0,
            max: max.0,
            series,
        })
    }
}

/// One element of a serialized [`Fold`].
enum Exact {
    Count(u64),
    Float(f64),
}

impl serde::Serialize for Exact {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            Exact::Count(n) => serializer.serialize_u64(n),
            Exact::Float(x) => ExactF64(x).serialize(serializer),
        }
    }
}
