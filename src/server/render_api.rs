//! Graphite's HTTP read API, as Grafana's Graphite data source calls it: `/render` and
//! `/metrics/find`, by GET or by form-encoded POST, answered by [`crate::render`] through the
//! server's [`super::Backend`]: over the engine's [`crate::Reader`] on a single node, over
//! the partitions' owners on a cluster node.

use std::sync::Arc;

use axum::extract::{RawQuery, State as AxumState};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::params::{FormParams, Params};
use super::State;
use crate::read::budget::ReadBudget;
use crate::render::{self, RenderRequest};

/// `GET|POST /render`: `target` (repeatable), `from` (default `-24h`), `until` (default
/// `now`; the two swapped when `until` is the earlier, as graphite-web takes them), `now`
/// (the time `from` and `until` are counted from, default the server's clock), `format`
/// (`json`, the default, `csv`, `raw`, `pickle`, `msgpack`, `dygraph` or `rickshaw`;
/// graphite-web's `rawData` and `pickle` flags ask for raw and pickle), `maxDataPoints`
/// (json only, as in graphite-web),
/// `xFilesFactor` (0 to 1, default 0: graphite-web's request default for consolidation), and
/// on a cluster node `consistency` (as the other reads take it). Answers graphite-web's
/// json, a bare array of `{"target", "datapoints": [[value, ts], ...]}`, or its other
/// formats byte for byte ([`render::Format`]). Other parameters Grafana or graphite clients
/// send (`noCache`, `cacheTimeout`, `local`, `_salt`, ...) are ignored.
pub(super) async fn render(
    AxumState(state): AxumState<Arc<State>>,
    FormParams(params, _): FormParams,
) -> std::result::Result<Response, ApiError> {
    let format = render_format(&params)?;
    let now = state.now();
    let time = |key: &str, default: &str, now| {
        let text = params.get(key).unwrap_or(default);
        crate::time::parse_time(text, now).map_err(|e| ApiError::BadRequest(format!("{key}: {e}")))
    };
    // graphite-web's `now` moves the clock `from` and `until` are read from (only them: times
    // in functions' arguments are read from the server's, as there).
    let clock = time("now", "now", now)?;
    let (from, until) = (time("from", "-24h", clock)?, time("until", "now", clock)?);
    // graphite-web renders from the earlier of the two to the later, so `from=teatime` read
    // in the morning is the range from now to 16:00.
    let (from, until) = (from.min(until), from.max(until));
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
    let x_files_factor = match params.get("xFilesFactor") {
        None => 0.0,
        Some(text) => match text.trim().parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => x,
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "xFilesFactor: {text:?} is not a number from 0 to 1"
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
        // graphite-web consolidates to maxDataPoints in json only: the other formats get
        // every point, which no series exceeds.
        max_data_points: max_data_points.filter(|_| format.consolidates()),
        default_max_points: match format.consolidates() {
            true => state.tiers().engine.max_points,
            false => u32::MAX,
        },
        x_files_factor,
        now,
    };
    let budget = Arc::new(ReadBudget::new(state.limits.max_read_values));
    let read = params.read_options(&state)?;
    let report = read.report.clone();
    let series = (state.backend)
        .render(request, Arc::clone(&budget), read)
        .await;
    let series = over_budget(&state, &budget, series)?;
    let bound = format.upper_bound_bytes(&series);
    if bound > render::MAX_ANSWER_BYTES {
        return Err(ApiError::PayloadTooLarge(format!(
            "format={}: the answer would take up to {bound} bytes, over the server's limit of \
             {} for answers that are not consolidated; ask for a shorter range or fewer \
             series, or for json with maxDataPoints",
            format.name(),
            render::MAX_ANSWER_BYTES
        )));
    }
    if let Some(refusal) = format.unwritable(&series) {
        return Err(ApiError::BadRequest(refusal));
    }
    let content_type = [(axum::http::header::CONTENT_TYPE, format.content_type())];
    Ok(report.mark((content_type, format.write(&series)).into_response()))
}

/// The answer format a render asks for, as graphite-web reads it: `format`, else `rawData`
/// or `pickle` present, else json.
///
/// # Errors
/// [`ApiError::BadRequest`] naming the formats tierdb writes, for another (`png`, `svg` and
/// `pdf` included: tierdb draws charts with `tierdb plot`, not through `/render`); and for
/// `jsonp` where graphite-web would wrap the answer in that callback (beside an explicit
/// json, dygraph or rickshaw `format`). A jsonp answer is a script any web page may load, so
/// pages a user opens could read a tokenless server's answers across origins, which its
/// missing CORS headers otherwise prevent; elsewhere graphite-web ignores `jsonp`, and so
/// does tierdb.
fn render_format(params: &Params) -> std::result::Result<render::Format, ApiError> {
    if params.get("jsonp").is_some()
        && matches!(params.get("format"), Some("json" | "dygraph" | "rickshaw"))
    {
        return Err(ApiError::BadRequest(
            "jsonp: not supported: a jsonp answer is a script any web page could load to read \
             this server's answers from another origin; ask for format=json without it"
                .into(),
        ));
    }
    let flag = |key: &str| params.all(key).next().is_some();
    let name = match params.get("format") {
        Some(name) => name,
        None if flag("rawData") => "raw",
        None if flag("pickle") => "pickle",
        None => "json",
    };
    render::Format::parse(name).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "format: {name:?} is not supported; use json, csv, raw, pickle, msgpack, dygraph \
             or rickshaw (tierdb draws charts with `tierdb plot`, not through /render)"
        ))
    })
}

/// `GET /functions`: graphite-web's list of render functions, exactly those tierdb
/// evaluates, by name (by group then name with `grouped=true`), each with its parameters, as
/// Grafana's Graphite 1.1 data source reads it for its function picker.
pub(super) async fn functions(RawQuery(raw): RawQuery) -> Response {
    let params = Params::query(raw.as_deref());
    let grouped = matches!(params.get("grouped"), Some("true" | "1"));
    Json(render::functions_json(grouped)).into_response()
}

/// `GET /functions/<name>`: one function's entry, or 404 naming it.
pub(super) async fn function(
    axum::extract::Path(name): axum::extract::Path<String>,
) -> std::result::Result<Response, ApiError> {
    match render::function_json(&name) {
        Some(entry) => Ok(Json(entry).into_response()),
        None => Err(ApiError::NotFound(format!(
            "function {name:?} is not supported"
        ))),
    }
}

/// The graphite-web version tierdb's render API matches, as `/version` answers it.
pub(crate) const GRAPHITE_VERSION: &str = "1.1.8";

/// `GET /version`: graphite-web's version line, so Grafana's Graphite data source detects
/// 1.1 (and asks for `/functions`).
pub(super) async fn version() -> String {
    format!("{GRAPHITE_VERSION}\n")
}

/// `GET|POST /metrics/find` (and `/metrics/find/`): `query` (a path pattern), answered with
/// graphite-web's treejson nodes of the next level under it. `from` and `until` are accepted
/// and ignored: every series the registry knows is listed, whatever its data's age.
pub(super) async fn find(
    AxumState(state): AxumState<Arc<State>>,
    FormParams(params, _): FormParams,
) -> std::result::Result<Response, ApiError> {
    params.require_format("treejson")?;
    let query = params
        .get("query")
        .ok_or_else(|| ApiError::BadRequest("query: missing (query=servers.*)".into()))?
        .to_owned();
    let budget = Arc::new(ReadBudget::new(state.limits.max_read_values));
    let read = params.read_options(&state)?;
    let report = read.report.clone();
    let nodes = (state.backend).find(query, Arc::clone(&budget), read).await;
    let nodes = over_budget(&state, &budget, nodes)?;
    Ok(report.json(nodes))
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
