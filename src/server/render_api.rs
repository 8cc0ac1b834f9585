//! Graphite's HTTP read API, as Grafana's Graphite data source calls it: `/render` and
//! `/metrics/find`, by GET or by form-encoded POST, answered by [`crate::render`] over the
//! engine's [`Reader`], which implements render's [`Source`] here.

#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as AxumState};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rayon::prelude::*;

use super::error::{blocking, ApiError};
use super::params::Params;
use super::{Backend, State};
use crate::cluster::fanout;
use crate::counter::SeriesKind;
use crate::query::{PointGrid, MAX_QUERY_POINTS};
use crate::render::{self, graphite_path, Fetched, Finder, PathPattern, RenderRequest, Source};
use crate::time::Span;
use crate::{Error, ReadBudget, Reader, Result};

/// `GET|POST /render`: `target` (repeatable), `from` (default `-24h`), `until` (default
/// `now`), `format` (`json`, the default, is the only one), `maxDataPoints`. Answers
/// graphite-web's json: a bare array of `{"target", "datapoints": [[value, ts], ...]}`.
/// Other parameters Grafana or graphite clients send (`noCache`, `cacheTimeout`, `_salt`,
/// ...) are ignored.
pub(super) async fn render(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> std::result::Result<Response, ApiError> {
    let params = Params::query_and_form(raw.as_deref(), &headers, &body)?;
    params.require_format("json")?;
    let engine = Arc::clone(state.engine("/render")?);
    let now = engine.now();
    let time = |key: &str, default: &str| {
        let text = params.get(key).unwrap_or(default);
        crate::time::parse_time(text, now).map_err(|e| ApiError::BadRequest(format!("{key}: {e}")))
    };
    let from = time("from", "-24h")?;
    let until = time("until", "now")?;
    let max_data_points = match params.get("maxDataPoints") {
        None => None,
        Some(text) => match text.trim().parse::<u32>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "maxDataPoints: {text:?} is not a whole number of at least 1"
                )))
            }
        },
    };
    let request = RenderRequest {
        // Blank targets (an emptied query row) select nothing rather than fail the panel.
        targets: (params.all("target"))
            .filter(|v| !v.trim().is_empty())
            .map(str::to_owned)
            .collect(),
        from,
        until,
        max_data_points,
        default_max_points: engine.config().engine.max_points,
    };
    let budget = Arc::new(ReadBudget::new(state.limits.max_read_values));
    let read_budget = Arc::clone(&budget);
    let series = blocking(move || render::render(&engine.reader(), &request, &read_budget));
    let series = over_budget(&state, &budget, series.await)?;
    Ok(Json(series).into_response())
}

/// `GET|POST /metrics/find` (and `/metrics/find/`): `query` (a path pattern), answered with
/// graphite-web's treejson nodes of the next level under it. `from` and `until` are accepted
/// and ignored: every series the registry knows is listed, whatever its data's age.
pub(super) async fn find(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> std::result::Result<Response, ApiError> {
    let params = Params::query_and_form(raw.as_deref(), &headers, &body)?;
    params.require_format("treejson")?;
    let query = params
        .get("query")
        .ok_or_else(|| ApiError::BadRequest("query: missing (query=servers.*)".into()))?
        .to_owned();
    let budget = Arc::new(ReadBudget::new(state.limits.max_read_values));
    let nodes = match &state.backend {
        Backend::Engine(engine) => {
            let engine = Arc::clone(engine);
            let read_budget = Arc::clone(&budget);
            blocking(move || {
                let mut finder = Finder::new(&query)?;
                finder.add_registry(engine.registry(), &read_budget)?;
                Ok(finder.nodes())
            })
            .await
        }
        Backend::Cluster(node) => fanout::find(node, query, &budget, state.token.as_deref())
            .await
            .map_err(ApiError::from),
    };
    let nodes = over_budget(&state, &budget, nodes)?;
    Ok(Json(nodes).into_response())
}

/// A read's answer, counted in `/metrics` when `budget` refused it, with the server flag
/// that sets the budget named in the refusal.
pub(super) fn over_budget<T>(
    state: &State,
    budget: &ReadBudget,
    answer: std::result::Result<T, ApiError>,
) -> std::result::Result<T, ApiError> {
    match answer {
        Err(ApiError::BadRequest(message)) if budget.exceeded() => {
            state.stats.count_over_budget();
            Err(ApiError::BadRequest(format!(
                "{message}; the server's limit is --max-read-values"
            )))
        }
        other => other,
    }
}

/// The engine's read view as render's source. Every fetch of a render reads one tier on one
/// grid, so all the series it returns share start and step, which functions combining series
/// rely on.
impl Source for Reader<'_> {
    /// Charges the registry scan (a value per key), then counts the series `pattern`
    /// matches (nothing cloned) at the points of [`Source::fetch`]'s grid.
    fn charge(
        &self,
        pattern: &PathPattern,
        from: i64,
        until: i64,
        max_points: u32,
        budget: &ReadBudget,
    ) -> Result<()> {
        let (_, step) = self.grid(from, until, max_points)?;
        budget.charge_scan(self.registry().len())?;
        let series = (self.registry())
            .select(|_, key| pattern.matches(key).then_some(()))
            .len();
        let points = PointGrid::span(from, until, i128::from(step)).1;
        charge(budget, pattern, series, points)
    }

    /// The tier is the `auto` choice for the range and budget. The step is the
    /// tier's resolution, or a multiple of it that keeps the grid within `max_points`
    /// (capped at [`MAX_QUERY_POINTS`]) when even the chosen tier has more buckets than that
    /// (see [`step_within`]). Points are those whose start lies in [from, until), or the one
    /// holding `from` when no start does. Series come sorted by Graphite path, as
    /// graphite-web's finders list them; one matched but without data in range has only
    /// empty buckets (null points).
    fn fetch(
        &self,
        pattern: &PathPattern,
        from: i64,
        until: i64,
        max_points: u32,
    ) -> Result<Vec<Fetched>> {
        let (tier, step) = self.grid(from, until, max_points)?;
        // One scan under the registry's read lock, even for a literal name: the pattern also
        // selects the name's tagged variants, and the registry has no index by bare name.
        let mut matched = self.registry().select(|id, key| {
            pattern
                .matches(key)
                .then(|| (graphite_path(key), id, key.to_key()))
        });
        let (first, points) = PointGrid::span(from, until, i128::from(step));
        matched.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        // A range shorter than the step may hold no point's start (two hours inside one day
        // of the 1d tier): read the one point that holds `from` rather than answer nothing.
        let (from, first) = match points {
            0 => {
                let start = from - from.rem_euclid(step);
                (start, start)
            }
            // A point starts in [from, until), so `first` fits in an i64.
            _ => (from, first as i64),
        };
        matched
            .into_par_iter()
            .map(|(_, id, key)| {
                let read =
                    self.read_buckets(id, tier, from, until, Span::from_secs(step as u64))?;
                Ok(Fetched {
                    key,
                    start: read.first().map_or(first, |(ts, _)| *ts),
                    step,
                    buckets: read.into_iter().map(|(_, bucket)| bucket).collect(),
                    counter: self.series_kind(id) == SeriesKind::Counter,
                })
            })
            .collect()
    }
}

impl Reader<'_> {
    /// The tier and step a render's fetch over [from, until) reads at `max_points`.
    fn grid(&self, from: i64, until: i64, max_points: u32) -> Result<(usize, i64)> {
        let max_points = max_points.clamp(1, MAX_QUERY_POINTS as u32);
        let tier = self.auto_tier(from, until, max_points);
        let resolution = self.config().tiers[tier].resolution.secs() as i64;
        Ok((tier, step_within(from, until, resolution, max_points)?))
    }
}

/// Charges a read of `series` series at `points` points each (at least one) to `budget`.
fn charge(budget: &ReadBudget, pattern: &PathPattern, series: usize, points: i128) -> Result<()> {
    let points = points.max(1);
    let values = points.unsigned_abs() * series as u128;
    budget.charge(values, || {
        format!(
            "{:?} matches {series} series x {points} points",
            pattern.as_str()
        )
    })
}

/// A step for [from, until) within `max_points`: `resolution` times `ceil(buckets /
/// max_points)`, where `buckets` counts the tier's buckets in the range, or times the next
/// whole number up when the grid of that step, aligned differently, still has one point too
/// many.
///
/// # Errors
///
/// [`Error::InvalidQuery`] when that step does not fit in an i64 (a range of centuries
/// squeezed into a handful of points).
fn step_within(from: i64, until: i64, resolution: i64, max_points: u32) -> Result<i64> {
    let resolution = i128::from(resolution.max(1));
    let budget = i128::from(max_points.max(1));
    let buckets = PointGrid::span(from, until, resolution).1;
    // ceil(buckets / budget) is almost always enough; an unaligned range may need one more.
    let mut k = ((buckets + budget - 1) / budget).max(1);
    while PointGrid::span(from, until, resolution * k).1 > budget {
        k += 1;
    }
    i64::try_from(resolution * k)
        .ok()
        .filter(|&step| step < i64::MAX / 2)
        .ok_or_else(|| {
            Error::InvalidQuery(format!(
                "range {from}..{until} is too wide for {max_points} points"
            ))
        })
}
