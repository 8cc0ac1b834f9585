//! The Prometheus API's listings over the registry: `series`, `labels`,
//! `label/<name>/values` (each with `match[]`, `start`, `end`) and `metadata`.
//!
//! With `start` or `end`, a series is listed when it has a sample in a bucket that overlaps
//! `[start, end]`, in the tier `auto` picks for that range (the finest whose buckets over it
//! number at most the engine's `max_points`), so the answer is exact to that tier's
//! resolution. Without either, every series the matchers pick is listed, as Prometheus
//! lists every series it holds.

use promql_parser::label::{MatchOp, Matcher};

use super::error::QueryError;
use super::labels::{MatcherSet, NAME};
use super::source::{Selected, Source};
use super::QueryLimits;
use crate::read::tier_choice::auto_tier;

/// A listing: the `match[]` selectors (each its alternatives) and the time range, ms.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// One entry per `match[]`; empty for every series.
    pub matches: Vec<Vec<MatcherSet>>,
    /// `start`, unix ms.
    pub start_ms: Option<i64>,
    /// `end`, unix ms.
    pub end_ms: Option<i64>,
}

/// The series `listing` picks, in label order.
///
/// # Errors
/// `execution` past the budget or the series cap.
pub(crate) fn listed(
    source: &dyn Source,
    listing: &Listing,
    limits: &QueryLimits,
) -> Result<Vec<Selected>, QueryError> {
    let selected = if listing.matches.is_empty() {
        let any = Matcher::new(
            MatchOp::Re(regex::Regex::new("^(?:.+)$").unwrap()),
            NAME,
            ".+",
        );
        source.select(&[vec![any]], &limits.budget)?
    } else {
        // Each `match[]` on its own, as a query's selector reads (its series by their
        // PromQL names too when it finds none under the names as written).
        let mut all: Vec<Selected> = Vec::new();
        for sets in &listing.matches {
            all.extend(super::names::select(source, sets, &limits.budget)?);
        }
        all.sort_by(|a, b| a.labels.cmp(&b.labels));
        let mut ids = std::collections::HashSet::new();
        all.retain(|s| ids.insert(s.id));
        all
    };
    if selected.len() > limits.max_series {
        return Err(QueryError::execution(format!(
            "the match[] selectors pick {} series; a request may list at most {} (the \
             server's --max-query-series): narrow them",
            selected.len(),
            limits.max_series
        )));
    }
    if listing.start_ms.is_none() && listing.end_ms.is_none() || selected.is_empty() {
        return Ok(selected);
    }
    let now = source.now();
    let from = listing
        .start_ms
        .map_or(i64::MIN / 4, |ms| ms.div_euclid(1000));
    let to = listing.end_ms.map_or(now, |ms| ms.div_euclid(1000)) + 1;
    if to <= from {
        return Ok(Vec::new());
    }
    let tiers = source.tiers();
    let from = from.max(
        tiers
            .tiers
            .iter()
            .map(|t| t.window_start(now))
            .min()
            .unwrap_or(from),
    );
    let tier = auto_tier(tiers, from, to, tiers.engine.max_points, now);
    let buckets = source.buckets(&selected, tier, from, to.max(from + 1), &limits.budget)?;
    Ok((selected.into_iter().zip(buckets))
        .filter(|(_, b)| b.iter().any(|b| b.count > 0))
        .map(|(s, _)| s)
        .collect())
}

/// `/api/v1/series`'s data: each series' labels.
pub(crate) fn series_json(selected: &[Selected]) -> serde_json::Value {
    selected.iter().map(|s| s.labels.to_json()).collect()
}

/// `/api/v1/labels`'s data: the label names of `selected`, sorted.
pub(crate) fn names_json(selected: &[Selected]) -> serde_json::Value {
    let mut names: Vec<&str> = (selected.iter())
        .flat_map(|s| s.labels.iter().map(|(n, _)| n))
        .collect();
    names.sort_unstable();
    names.dedup();
    serde_json::json!(names)
}

/// `/api/v1/label/<name>/values`'s data: the values of `name` in `selected`, sorted.
pub(crate) fn values_json(selected: &[Selected], name: &str) -> serde_json::Value {
    let mut values: Vec<&str> = (selected.iter())
        .map(|s| s.labels.get(name))
        .filter(|v| !v.is_empty())
        .collect();
    values.sort_unstable();
    values.dedup();
    serde_json::json!(values)
}

/// `/api/v1/metadata`'s data: per metric name (`metric` only, when given; at most `limit`
/// names), its type as tierdb stores it (`counter` or `gauge`), with empty help and unit,
/// which tierdb does not keep.
pub(crate) fn metadata_json(
    selected: &[Selected],
    metric: Option<&str>,
    limit: Option<usize>,
) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for s in selected {
        let name = s.labels.get(NAME);
        if metric.is_some_and(|m| m != name) || out.contains_key(name) {
            continue;
        }
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        let kind = if s.counter { "counter" } else { "gauge" };
        out.insert(
            name.to_owned(),
            serde_json::json!([{"type": kind, "help": "", "unit": ""}]),
        );
    }
    serde_json::Value::Object(out)
}
