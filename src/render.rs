//! The Graphite render API that Grafana's Graphite data source speaks: target parsing
//! (`expr`), path patterns ([`PathPattern`]), `/metrics/find` ([`find`]) and `/render`
//! evaluation ([`render`]) over series read through the [`Source`] trait. All of it is
//! storage-independent except `stored`, the [`Source`] over an engine's [`crate::Reader`]
//! and the grid ([`RenderGrid`]) it reads on, which a cluster node also hands its owners.
//!
//! Series keep their stored buckets while their values are still the buckets' values, so
//! rates of counters, summarize averages and extremes of gauges, and consolidation to
//! `maxDataPoints` merge buckets exactly instead of re-averaging averages.

mod expr;
mod find;
mod functions;
mod path;
mod series;
mod stored;
#[cfg(test)]
mod tests;

pub use find::{find, merge_nodes, FindNode, Finder};
pub use path::{graphite_path, parse_graphite_path, PathPattern};
pub(crate) use stored::charge_points;
pub use stored::RenderGrid;

use crate::bucket::Bucket;
use crate::{Error, ReadBudget, Result, SeriesKey};

/// Earliest and latest `from`/`until` a render accepts: years 0 to 9999, so the arithmetic
/// on steps and point times stays far inside 64 bits.
pub const RENDER_TIMES: std::ops::RangeInclusive<i64> = -62_167_219_200..=253_402_300_799;

/// One stored series as read for a render: buckets at a fixed step from `start`. Travels
/// between cluster nodes as JSON, bit for bit: the key as its canonical text, each bucket as
/// `[count, total, min, max]` (`crate::bucket::exact_buckets`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Fetched {
    /// The series; its Graphite path names the rendered series.
    pub key: SeriesKey,
    /// Timestamp of the first bucket.
    pub start: i64,
    /// Seconds per bucket; positive.
    pub step: i64,
    /// The buckets in time order, empty ones included, so point `i` is at `start + i * step`.
    #[serde(with = "crate::bucket::exact_buckets")]
    pub buckets: Vec<Bucket>,
    /// True when samples are increases since the previous sample: a point's value is then the
    /// bucket total (the increase within it), not the average.
    pub counter: bool,
}

/// Where render reads series from; implemented by the storage side.
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
        max_points: u32,
        budget: &ReadBudget,
    ) -> Result<()>;

    /// Every stored series matching `pattern`, read over [from, until) with at most
    /// `max_points` buckets each (the storage side chooses tier and step), all with the same
    /// start and step.
    ///
    /// # Errors
    ///
    /// Whatever reading storage can fail with; it ends the render.
    fn fetch(
        &self,
        pattern: &PathPattern,
        from: i64,
        until: i64,
        max_points: u32,
    ) -> Result<Vec<Fetched>>;
}

/// A `/render` request, times already parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderRequest {
    /// The `target` parameters, in order.
    pub targets: Vec<String>,
    /// Start of the range, unix seconds, inclusive.
    pub from: i64,
    /// End of the range, unix seconds, exclusive.
    pub until: i64,
    /// Grafana's `maxDataPoints`: the most points any rendered series may have.
    pub max_data_points: Option<u32>,
    /// The budget when the request gives none.
    pub default_max_points: u32,
}

/// One rendered series, serialized as graphite-web's json format:
/// `{"target": "name", "datapoints": [[value or null, timestamp], ...]}`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RenderedSeries {
    /// The series name (a path, or a function's name for it such as `sumSeries(a.*)`).
    pub target: String,
    /// `(value, timestamp)` pairs; the value is never NaN or infinite (those become null).
    pub datapoints: Vec<(Option<f64>, i64)>,
}

/// Evaluates every target and returns their series in target order.
///
/// The point budget is `max_data_points`, else `default_max_points` (at least 1). It is passed
/// to the source, and any evaluated series still longer than it is consolidated in groups of
/// `ceil(n / budget)` consecutive points stamped with the group's first timestamp: buckets
/// merged exactly while the series has them, otherwise the average of the known values (the
/// sum for a counter, whose points are increases).
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
            request.from, request.until
        )));
    }
    let max_points = (request.max_data_points)
        .unwrap_or(request.default_max_points)
        .max(1);
    let cx = functions::Context {
        source,
        from: request.from,
        until: request.until,
        max_points,
        budget,
    };
    let targets: Vec<expr::Expr> = (request.targets.iter())
        .map(|target| expr::parse_target(target))
        .collect::<Result<_>>()?;
    for target in &targets {
        target.for_each_path(&mut |path| match PathPattern::parse(path) {
            Ok(pattern) => source.charge(&pattern, cx.from, cx.until, max_points, budget),
            // Not a path after all (a bare word where a function takes a string): evaluation
            // says what is wrong with it.
            Err(_) => Ok(()),
        })?;
    }
    let mut rendered = Vec::new();
    for target in &targets {
        for series in functions::eval(target, &cx)? {
            let k = series.values.len().div_ceil(max_points as usize);
            rendered.push(series.consolidate(k).rendered());
        }
    }
    Ok(rendered)
}
