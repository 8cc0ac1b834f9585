//! PromQL over the tiers: what the Prometheus HTTP API (`/prometheus/api/v1/...`,
//! src/server/prometheus_api.rs) evaluates. The text is parsed by the `promql-parser` crate;
//! everything after the parse is here: the evaluator over a step grid (`eval`), the
//! functions (`functions`) and the range-window rules over stored buckets and raw points
//! (`windows`), aggregations (`aggregation`), binary operators with vector matching
//! (`binary`), the tier a selector reads (`tier`) and the labels <-> tags mapping
//! (`labels`) and the names of series PromQL cannot name bare, Graphite paths and Influx
//! fields (`names`). Series are read through the [`Source`] trait, as render reads through its
//! own; [`StoredSource`] is the one over storage, any [`crate::read::store::Store`]: an
//! engine's [`crate::read::reader::Reader`] or a cluster node's fan-out.
//!
//! The rules that make PromQL exact over rollups, and the places where it cannot be, are
//! stated once in docs/promql.md; each function's doc says which applies.

mod aggregation;
mod binary;
mod calendar;
mod error;
mod eval;
mod functions;
mod histograms;
mod instant;
mod labels;
mod listing;
mod names;
mod number;
mod source;
#[cfg(test)]
mod tests;
mod tier;
mod value;
mod windows;

use std::sync::Arc;
use std::time::Instant;

pub use error::{ErrorKind, QueryError};
pub use histograms::FloatHistogram;
#[cfg(feature = "cluster")]
pub(crate) use labels::KeyFilter;
pub use labels::{key_labels, Labels, MatcherSet};
pub use listing::Listing;
pub use source::{
    BucketHistogram, BucketReduce, HistogramVisit, RawPoints, Selected, Source, StoredSource,
};
pub use value::{Answer, ResultValue};

use crate::read::budget::ReadBudget;

/// Prometheus' default lookback: an instant selector sees a sample up to 5 minutes old.
pub const LOOKBACK_MS: i64 = 5 * 60 * 1000;

/// Most series a query may select unless the server says otherwise (`--max-query-series`).
pub const DEFAULT_MAX_SERIES: usize = 100_000;

/// One PromQL evaluation: the text and the grid of evaluation times, in milliseconds.
#[derive(Clone, Debug)]
pub struct Query {
    /// The PromQL text.
    pub text: String,
    /// First evaluation time, unix milliseconds.
    pub start_ms: i64,
    /// Last evaluation time (included when on the grid), unix milliseconds.
    pub end_ms: i64,
    /// Milliseconds between evaluation times; `None` for an instant query (one time,
    /// answered as a vector, scalar, string or matrix rather than a range of points).
    pub step_ms: Option<i64>,
}

/// What one evaluation may spend: the request's read budget, the series it may select, and
/// the time it may take.
#[derive(Clone, Debug)]
pub struct QueryLimits {
    /// Values read (series times buckets or raw points), charged before each read.
    pub budget: Arc<ReadBudget>,
    /// Series all selectors of the query may select together.
    pub max_series: usize,
    /// When evaluation gives up with a `timeout` error.
    pub deadline: Instant,
}

/// A request of the Prometheus query API, as a backend answers it.
#[derive(Clone, Debug)]
pub enum Request {
    /// `query` or `query_range`.
    Query(Query),
    /// `series`.
    Series(Listing),
    /// `labels`.
    LabelNames(Listing),
    /// `label/<name>/values`.
    LabelValues(String, Listing),
    /// `metadata`, for one metric name or all, at most `limit` names.
    Metadata {
        /// Only this metric name.
        metric: Option<String>,
        /// At most this many names.
        limit: Option<usize>,
    },
}

/// A successful answer: the envelope's `data` and `warnings`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The `data` member, as JSON text.
    pub data: String,
    /// The `warnings` member (absent when empty).
    pub warnings: Vec<String>,
}

/// Answers `request` over `source` within `limits`.
///
/// # Errors
/// As [`evaluate`]; listings fail past the budget or the series cap.
pub fn answer(
    source: &dyn Source,
    request: &Request,
    limits: &QueryLimits,
) -> Result<Reply, QueryError> {
    let reply = |data: serde_json::Value| Reply {
        data: data.to_string(),
        warnings: Vec::new(),
    };
    match request {
        Request::Query(query) => {
            let answer = evaluate(source, query, limits)?;
            Ok(Reply {
                data: answer.data_text(),
                warnings: answer.warnings,
            })
        }
        Request::Series(listing) => Ok(reply(listing::series_json(&listing::listed(
            source, listing, limits,
        )?))),
        Request::LabelNames(listing) => Ok(reply(listing::names_json(&listing::listed(
            source, listing, limits,
        )?))),
        Request::LabelValues(name, listing) => Ok(reply(listing::values_json(
            &listing::listed(source, listing, limits)?,
            name,
        ))),
        Request::Metadata { metric, limit } => {
            let uncapped = QueryLimits {
                max_series: usize::MAX,
                ..limits.clone()
            };
            let all = listing::listed(source, &Listing::default(), &uncapped)?;
            Ok(reply(listing::metadata_json(
                &all,
                metric.as_deref(),
                *limit,
            )))
        }
    }
}

/// Parses and evaluates `query` over `source` within `limits`.
///
/// # Errors
/// [`QueryError`] of kind `bad_data` for a text that does not parse, an unsupported
/// function or argument, or a function that needs raw samples the tiers do not hold;
/// `execution` for a read over the budget or the series cap; `timeout` past the deadline.
pub fn evaluate(
    source: &dyn Source,
    query: &Query,
    limits: &QueryLimits,
) -> Result<Answer, QueryError> {
    let expr = promql_parser::parser::parse(&query.text).map_err(|e| {
        let hint =
            labels::dotted_name_hint(&query.text).map_or_else(String::new, |h| format!("; {h}"));
        QueryError::bad_data(format!("invalid PromQL {:?}: {e}{hint}", query.text))
    })?;
    eval::evaluate(source, &expr, query, limits)
}

/// Whether `text` parses as a PromQL series selector (for `match[]`), and its matchers.
///
/// # Errors
/// `bad_data` naming the parameter when it is not a selector.
pub fn parse_selector(text: &str) -> Result<Vec<MatcherSet>, QueryError> {
    labels::parse_match(text)
}
