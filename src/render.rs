//! The Graphite render API that Grafana's Graphite data source speaks: target parsing
//! (`expr`), path patterns ([`PathPattern`]), `/metrics/find` ([`find`]) and `/render`
//! evaluation ([`render`]) over series read through the [`Source`] trait. Storage is read
//! through [`crate::read::store::Store`] only: [`StoredSource`] is the one [`Source`] over
//! a store (an engine's [`crate::Reader`], through the render cache
//! [`crate::CachedStore`] on a server, or a cluster node's fan-out to its partitions'
//! owners), reading each path on the grid ([`RenderGrid`]) it chooses from the store's
//! tiers and clock. Only the tag API (`tags`) and the timer paths find and the tag API list
//! read an engine's registry.
//!
//! Series keep their stored buckets while their values are still the buckets' values, so
//! rates of counters, summarize averages and extremes of gauges, and consolidation to
//! `maxDataPoints` merge buckets exactly instead of re-averaging averages. A single node
//! also answers StatsD timer paths (`svc.time.upper_90`, `stats.timers.svc.time.mean`) from
//! distribution series (`timer_paths`), whose points merge histograms when consolidated.

mod aggfunc;
mod expr;
mod find;
mod format;
mod functions;
mod path;
mod python;
mod series;
mod stored;
pub mod tags;
#[cfg(test)]
mod tests;
mod timer_paths;

pub use find::{find, merge_nodes, FindNode, Finder};
pub use format::{Format, MAX_ANSWER_BYTES};
pub use path::{graphite_path, parse_graphite_path, PathPattern};
#[cfg(feature = "cluster")]
pub(crate) use stored::AnyPath;
pub use stored::{RenderGrid, StoredSource};
pub(crate) use timer_paths::add_to_finder as add_timer_paths;
#[cfg(feature = "cluster")]
pub(crate) use timer_paths::TimerFilter;

use crate::bucket::Bucket;
use crate::error::Error;
use crate::error::Result;
use crate::read::budget::ReadBudget;
use crate::registry::SeriesKey;

/// Earliest and latest `from`/`until` a render accepts: years 0 to 9999, so the arithmetic
/// on steps and point times stays far inside 64 bits.
pub const RENDER_TIMES: std::ops::RangeInclusive<i64> = -62_167_219_200..=253_402_300_799;

/// graphite-web's `/functions` answer listing every render function tierdb evaluates, by
/// name, or by group then name when `grouped`: each with its parameters as Grafana's
/// function picker reads them.
pub fn functions_json(grouped: bool) -> serde_json::Value {
    functions::table::list_json(grouped)
}

/// graphite-web's `/functions/<name>` answer; `None` when tierdb has no such function.
pub fn function_json(name: &str) -> Option<serde_json::Value> {
    functions::table::function(name).map(functions::table::Function::describe)
}

/// One stored series as read for a render: buckets at a fixed step from `start`. Travels
/// between cluster nodes as JSON, bit for bit ([`FetchedWire`]): the key as its canonical
/// text, each bucket as `[count, total, min, max]` (`crate::bucket::exact_buckets`), and the
/// buckets' latest samples beside them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(into = "FetchedWire", try_from = "FetchedWire")]
pub struct Fetched {
    /// The series; its Graphite path names the rendered series.
    pub key: SeriesKey,
    /// Timestamp of the first bucket.
    pub start: i64,
    /// Seconds per bucket; positive.
    pub step: i64,
    /// The buckets in time order, empty ones included, so point `i` is at `start + i * step`.
    pub buckets: Vec<Bucket>,
    /// True when samples are increases since the previous sample: a point's value is then the
    /// bucket total (the increase within it), not the average.
    pub counter: bool,
    /// For a StatsD timer path (`timer_paths`), its stat and the distribution points behind
    /// `buckets`; absent for a stored series.
    pub(crate) timer: Option<timer_paths::TimerPoints>,
}

/// [`Fetched`] on the wire: its buckets bit for bit, and their latest samples in a field of
/// their own (`consolidateBy('last')` reads them), which a node of a build before buckets
/// kept them ignores, and which reads back empty from such a node's answer (every latest
/// sample unknown).
#[derive(serde::Serialize, serde::Deserialize)]
struct FetchedWire {
    key: SeriesKey,
    start: i64,
    step: i64,
    #[serde(with = "crate::bucket::exact_buckets")]
    buckets: Vec<Bucket>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    latest: Vec<crate::bucket::exact_buckets::WireLatest>,
    counter: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timer: Option<timer_paths::TimerPoints>,
}

impl From<Fetched> for FetchedWire {
    fn from(f: Fetched) -> FetchedWire {
        FetchedWire {
            key: f.key,
            start: f.start,
            step: f.step,
            latest: crate::bucket::exact_buckets::latest_of(&f.buckets),
            buckets: f.buckets,
            counter: f.counter,
            timer: f.timer,
        }
    }
}

impl TryFrom<FetchedWire> for Fetched {
    type Error = String;

    fn try_from(wire: FetchedWire) -> std::result::Result<Fetched, String> {
        let mut buckets = wire.buckets;
        crate::bucket::exact_buckets::put_latest(&mut buckets, wire.latest)
            .map_err(|i| format!("the latest sample of bucket {i}, past the buckets"))?;
        Ok(Fetched {
            key: wire.key,
            start: wire.start,
            step: wire.step,
            buckets,
            counter: wire.counter,
            timer: wire.timer,
        })
    }
}

/// What a source answers for sumSeries and kin over plain paths when it can fold the series
/// in one pass ([`Source::combine`]): the aggregate's values on the paths' grid.
#[derive(Clone, Debug, PartialEq)]
pub struct Combined {
    /// Timestamp of the first point.
    pub start: i64,
    /// Seconds per point.
    pub step: i64,
    /// One value per point; empty when no series matched.
    pub values: Vec<Option<f64>>,
    /// True when every series folded is a counter (each value an increase).
    pub counter: bool,
    /// Per pattern, whether it matched any series: graphite-web names the result after the
    /// path expressions that fetched something.
    pub matched: Vec<bool>,
}

impl Combined {
    /// The answer over no series, for `patterns` patterns.
    pub fn nothing(patterns: usize) -> Combined {
        Combined {
            start: 0,
            step: 1,
            values: Vec::new(),
            counter: false,
            matched: vec![false; patterns],
        }
    }
}

/// Where render reads series from; implemented by the storage side, which chooses the tier
/// and the points (graphite-web's whisper rules, see [`RenderGrid::choose`]).
pub trait Source {
    /// Charges to `budget` what [`Source::fetch`] of the same arguments would read (the
    /// series matched times their points), without reading it.
    ///
    /// # Errors
    ///
    /// The budget's refusal; it ends the render before anything is read.
    fn charge(
        &self,
        pattern: &PathPattern,
        from: i64,
        until: i64,
        budget: &ReadBudget,
    ) -> Result<()>;

    /// Every stored series matching `pattern`, read at the resolution of one tier over the
    /// points stamped after `from` up to and including `until`, all with the same start and
    /// step; none when the range holds no data at all (after the clock, before every tier).
    ///
    /// # Errors
    ///
    /// Whatever reading storage can fail with; it ends the render.
    fn fetch(&self, pattern: &PathPattern, from: i64, until: i64) -> Result<Vec<Fetched>>;

    /// `aggregation` (sum, avg, max or min) of the values of every series the `patterns`
    /// match, point by point, nulls skipped: what sumSeries and kin make of
    /// [`Source::fetch`]'s series, in one pass over storage. `None` when this source has no
    /// such pass (render then fetches and combines), which is the default.
    ///
    /// # Errors
    ///
    /// As [`Source::fetch`].
    fn combine(
        &self,
        patterns: &[PathPattern],
        aggregation: crate::read::aggregate::Aggregation,
        from: i64,
        until: i64,
    ) -> Result<Option<Combined>> {
        let _ = (patterns, aggregation, from, until);
        Ok(None)
    }

    /// The Graphite paths of the series `pattern` matches, sorted, without reading their
    /// data, so that groupByNode can split a path into groups that [`Source::combine`]
    /// folds; `None` when this source cannot list them (the default).
    ///
    /// # Errors
    ///
    /// As [`Source::fetch`].
    fn names(&self, pattern: &PathPattern) -> Result<Option<Vec<String>>> {
        let _ = pattern;
        Ok(None)
    }

    /// The step every path fetched over `from`..`until` has, without reading: `Some(None)`
    /// when such a fetch finds no data at all (after the clock, before every tier); `None`
    /// when this source cannot tell (the default), so that moving windows of a number of
    /// points fetch their argument to learn it.
    ///
    /// # Errors
    ///
    /// As [`Source::fetch`].
    fn step(&self, from: i64, until: i64) -> Result<Option<Option<i64>>> {
        let _ = (from, until);
        Ok(None)
    }
}

/// A `/render` request, times already parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderRequest {
    /// The `target` parameters, in order.
    pub targets: Vec<String>,
    /// Start of the range, unix seconds: points are those stamped after it.
    pub from: i64,
    /// End of the range, unix seconds: the point holding it is the last.
    pub until: i64,
    /// Grafana's `maxDataPoints`: the most points any rendered series may have.
    pub max_data_points: Option<u32>,
    /// The budget when the request gives none.
    pub default_max_points: u32,
    /// graphite-web's `xFilesFactor` parameter: the share of a window's points that must be
    /// known for consolidation and the functions that aggregate to give it a value (0, its
    /// default, asks for one).
    pub x_files_factor: f64,
    /// The clock, unix seconds: `now` and relative times in function arguments
    /// (`timeSlice(x, "-1h")`, `verticalLine("-5min")`) are counted from it.
    pub now: i64,
}

/// One rendered series, written as graphite-web's json format by [`Format::write`]:
/// `{"target": "name", "datapoints": [[value or null, timestamp], ...]}`.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedSeries {
    /// The series name (a path, or a function's name for it such as `sumSeries(a.*)`).
    pub target: String,
    /// `(value, timestamp)` pairs; the value is never NaN (graphite-web's null), and may be
    /// infinite (an overflowed sum), which each format writes as graphite-web does.
    pub datapoints: Vec<(Option<f64>, i64)>,
    /// graphite-web's `start`, `end` and `step` of the series, which the raw and pickle
    /// formats write ([`Format`]); not in json.
    pub start: i64,
    /// See [`RenderedSeries::start`].
    pub end: i64,
    /// See [`RenderedSeries::start`].
    pub step: i64,
    /// graphite-web's `pathExpression`, for the pickle format.
    pub path_expression: String,
    /// graphite-web's `consolidationFunc` (`average`, or what `consolidateBy` named), for the
    /// pickle format.
    pub consolidation: String,
    /// The series' xFilesFactor, for the pickle format.
    pub x_files_factor: f64,
}

/// Evaluates every target and returns their series in target order.
///
/// Paths read the points stamped after `from` up to and including `until`, at the
/// resolution of the finest tier holding `from` (see [`RenderGrid::choose`]). Then, as
/// graphite-web's json renderer does, each series with more points than the budget
/// (`max_data_points`, else `default_max_points`, at least 1) counted over the time range
/// of all the request's series is consolidated `ceil(points / budget)` points into one:
/// stamped at multiples of the wider step, each window starting one point before its
/// stamp (graphite-web's "nudge"). Buckets are merged exactly while the series has them
/// (count-weighted means, true extremes), else the known values are averaged (summed for a
/// counter, whose points are increases). A budget of 1 folds each series into one point.
///
/// Every target reads within one `budget`: every path of every target is charged to it
/// ([`Source::charge`]) before any is fetched, and each `summarize` window as it is made, so
/// the request as a whole, not each of its paths, is bounded, and a request past it is
/// refused before it reads anything.
///
/// # Errors
///
/// [`Error::InvalidQuery`] when `from` is not before `until`, for a target that does not
/// parse or evaluate (unknown function, wrong arguments), or when the targets together read
/// more than `budget` allows; any error of the source.
pub fn render(
    source: &dyn Source,
    request: &RenderRequest,
    budget: &ReadBudget,
) -> Result<Vec<RenderedSeries>> {
    render_stated(source, request, budget).map(|rendered| rendered.series)
}

/// A render's answer with what it states of its exactness.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The series, in target order.
    pub series: Vec<RenderedSeries>,
    /// Set when values fetched for the answer are estimates (a StatsD timer path's
    /// `median`, `upper_NN`, `sum_NN`, ...): the largest relative error of the histograms
    /// behind them, each estimate within it of the stat it stands for, before any function
    /// applied to it. `None` when every value fetched is exact.
    pub relative_error: Option<f64>,
    /// Series fetched for estimates whose values were placed from explicit buckets (OTLP
    /// explicit-bucket histograms): their estimates are within an explicit bucket's width,
    /// beyond `relative_error`. 0 when none.
    pub explicit_buckets: usize,
}

/// [`render`], with the relative error of the estimates it fetched.
///
/// # Errors
/// As [`render`].
pub fn render_stated(
    source: &dyn Source,
    request: &RenderRequest,
    budget: &ReadBudget,
) -> Result<Rendered> {
    for (name, time) in [("from", request.from), ("until", request.until)] {
        if !RENDER_TIMES.contains(&time) {
            return Err(Error::InvalidQuery(format!(
                "{name} ({time}) is outside the years 0 to 9999"
            )));
        }
    }
    if request.from >= request.until {
        return Err(Error::InvalidQuery(format!(
            "from ({}) must be before until ({})",
            crate::time::format_ts(request.from),
            crate::time::format_ts(request.until)
        )));
    }
    let max_points = (request.max_data_points)
        .unwrap_or(request.default_max_points)
        .max(1);
    let stacks = functions::Stacks::default();
    let x_files_factor = std::cell::Cell::new(request.x_files_factor);
    let relative_error = std::cell::Cell::new(None);
    let explicit_buckets = std::cell::RefCell::default();
    let cx = functions::Context {
        source,
        from: request.from,
        until: request.until,
        budget,
        stacks: &stacks,
        x_files_factor: &x_files_factor,
        now: request.now,
        relative_error: &relative_error,
        explicit_buckets: &explicit_buckets,
    };
    let targets: Vec<expr::Expr> = (request.targets.iter())
        .map(|target| expr::parse_target(target))
        .collect::<Result<_>>()?;
    for target in &targets {
        functions::charge_paths(target, &cx, cx.from, cx.until)?;
    }
    let mut evaluated = Vec::new();
    for target in &targets {
        evaluated.extend(functions::eval(target, &cx)?);
    }
    // graphite-web sizes every series' consolidation by the span of all of them.
    let start = evaluated.iter().map(|s| s.start).min().unwrap_or(0);
    let end = evaluated.iter().map(|s| s.end).max().unwrap_or(0);
    let series = (evaluated.into_iter())
        .map(|series| Ok(series.fit(max_points, end - start)?.rendered()))
        .collect::<Result<_>>()?;
    Ok(Rendered {
        series,
        relative_error: relative_error.get(),
        explicit_buckets: explicit_buckets.into_inner().len(),
    })
}
