//! The Prometheus HTTP API under `/prometheus` (VictoriaMetrics' convention), so Grafana's
//! Prometheus data source pointed at `http://HOST:PORT/prometheus` works unchanged:
//! `query` and `query_range` (GET and form POST), `series`, `labels`,
//! `label/<name>/values`, `metadata`, `status/buildinfo` and `query_exemplars`. This file
//! reads the parameters as Prometheus does (times as RFC 3339 or unix seconds, durations as
//! PromQL durations or seconds) and writes Prometheus' envelopes; the work is
//! [`crate::promql`]'s, through the server's [`super::Backend`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, RawQuery, State as AxumState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::error::ApiError;
use super::params::{FormParams, Params};
use super::read_report::Behind;
use super::State;
use crate::promql::{self, ErrorKind, Listing, QueryError, QueryLimits, Request};
use crate::read::budget::ReadBudget;

/// The version tierdb answers `status/buildinfo` with: the Prometheus release whose API and
/// PromQL it follows (Grafana picks its features by it).
pub(crate) const PROMETHEUS_VERSION: &str = "2.42.0";

/// The routes, mounted beside the rest of the API.
pub(crate) fn routes() -> Router<Arc<State>> {
    const V1: &str = "/prometheus/api/v1";
    Router::new()
        .route(&format!("{V1}/query"), get(query).post(query))
        .route(
            &format!("{V1}/query_range"),
            get(query_range).post(query_range),
        )
        .route(&format!("{V1}/series"), get(series).post(series))
        .route(&format!("{V1}/labels"), get(labels).post(labels))
        .route(&format!("{V1}/label/{{name}}/values"), get(label_values))
        .route(&format!("{V1}/metadata"), get(metadata))
        .route(&format!("{V1}/status/buildinfo"), get(buildinfo))
        .route(
            &format!("{V1}/query_exemplars"),
            get(query_exemplars).post(query_exemplars),
        )
}

/// A failed request, answered in Prometheus' error envelope.
struct PromError(QueryError);

impl From<QueryError> for PromError {
    fn from(e: QueryError) -> PromError {
        PromError(e)
    }
}

impl IntoResponse for PromError {
    fn into_response(self) -> Response {
        let QueryError { kind, message } = self.0;
        let status = match kind {
            ErrorKind::BadData => StatusCode::BAD_REQUEST,
            ErrorKind::Execution => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::Timeout | ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = if kind == ErrorKind::Internal {
            tracing::error!(%message, "internal error answering a PromQL request");
            "internal error; see the server log".to_owned()
        } else {
            message
        };
        let body = serde_json::json!({
            "status": "error",
            "errorType": kind.as_str(),
            "error": message,
        });
        (status, Json(body)).into_response()
    }
}

type Answer = Result<Response, PromError>;

/// Prometheus' success envelope, around the `data` text as it is: written into the text's own
/// buffer (a range query's data leaves room for it), not copied into a second one.
fn success(reply: promql::Reply) -> Response {
    let mut body = reply.data;
    body.insert_str(0, "{\"status\":\"success\",\"data\":");
    if !reply.warnings.is_empty() {
        body.push_str(",\"warnings\":");
        body.push_str(&serde_json::json!(reply.warnings).to_string());
    }
    body.push('}');
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Request parameters that cannot be read ([`FormParams`]), refused as Prometheus refuses
/// bad data.
impl From<ApiError> for PromError {
    fn from(e: ApiError) -> PromError {
        let why = match e {
            ApiError::BadRequest(why) => why,
            other => format!("{other:?}"),
        };
        PromError(QueryError::bad_data(format!(
            "invalid request parameters: {why}"
        )))
    }
}

fn bad_param(name: &str, why: String) -> PromError {
    PromError(QueryError::bad_data(format!(
        "invalid parameter {name:?}: {why}"
    )))
}

/// A Prometheus time: unix seconds (a float) or RFC 3339, in unix ms.
pub(crate) fn parse_time(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 1e14 {
            return Ok((secs * 1000.0).round() as i64);
        }
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|_| format!("cannot parse {text:?} to a valid timestamp"))
}

/// A Prometheus duration: seconds (a float) or a PromQL duration (`1m30s`), in ms.
pub(crate) fn parse_duration(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 1e14 {
            return Ok((secs * 1000.0).round() as i64);
        }
        return Err(format!(
            "cannot parse {text:?} to a valid duration. It overflows int64"
        ));
    }
    // The parser refuses a zero duration in PromQL; as a parameter, Prometheus takes it.
    if text.starts_with('0') && text.chars().all(|c| c == '0' || "ywdhms".contains(c)) {
        return Ok(0);
    }
    promql_parser::util::parse_duration(text)
        .map(|d| d.as_millis() as i64)
        .map_err(|_| format!("cannot parse {text:?} to a valid duration"))
}

fn time_param(params: &Params, name: &str) -> Result<Option<i64>, PromError> {
    params
        .get(name)
        .filter(|t| !t.is_empty())
        .map(|t| parse_time(t).map_err(|e| bad_param(name, e)))
        .transpose()
}

/// Runs `request` on the backend within the server's limits (a request's `timeout` may
/// shorten the query timeout), answering the envelope.
async fn run(state: &State, params: &Params, request: Request) -> Answer {
    let mut timeout = state.limits.query_timeout;
    if let Some(text) = params.get("timeout").filter(|t| !t.is_empty()) {
        let ms = parse_duration(text).map_err(|e| bad_param("timeout", e))?;
        timeout = timeout.min(Duration::from_millis(ms.max(0) as u64));
    }
    let budget = Arc::new(ReadBudget::new(state.limits.max_read_values));
    let limits = QueryLimits {
        budget: Arc::clone(&budget),
        max_series: state.limits.max_query_series,
        deadline: Instant::now() + timeout,
    };
    let read = params.read_options(state).map_err(|e| match e {
        super::error::ApiError::BadRequest(why) => PromError(QueryError::bad_data(why)),
        other => bad_param("consistency", format!("{other:?}")),
    })?;
    let report = read.report.clone();
    let answer = state.backend.prometheus(request, limits, read);
    let reply = match tokio::time::timeout(timeout, answer).await {
        Ok(reply) => reply,
        Err(_) => Err(QueryError {
            kind: ErrorKind::Timeout,
            message: format!(
                "query timed out in query execution after {}s; the server's limit is \
                 --query-timeout",
                timeout.as_secs_f64()
            ),
        }),
    };
    if budget.exceeded() {
        state.stats.count_over_budget();
    }
    let mut reply = reply?;
    let behind = report.behind();
    if !behind.is_complete() {
        reply.warnings.push(behind_warning(&behind));
    }
    Ok(report.mark(success(reply)))
}

/// The `warnings` entry of an answer read from a replica behind the log (a cluster node's
/// default read), as the other read endpoints' `behind` field says it.
fn behind_warning(behind: &Behind) -> String {
    let which = match &behind.unknown {
        Some(why) if behind.partitions.is_empty() => {
            return format!(
                "incomplete: whether every acknowledged write was read is unknown ({why}); \
                 consistency=strong waits for them"
            )
        }
        _ => (behind.partitions.iter())
            .map(|l| format!("{} (applied {} of {})", l.partition, l.applied, l.log))
            .collect::<Vec<_>>()
            .join(", "),
    };
    format!(
        "incomplete: partitions {which} were read from a replica behind the log, so the \
         answer may lack acknowledged writes; consistency=strong waits for them"
    )
}

/// `query`: `query`, `time` (default now), `timeout`.
async fn query(
    AxumState(state): AxumState<Arc<State>>,
    FormParams(params, _): FormParams<PromError>,
) -> Answer {
    let time = time_param(&params, "time")?.unwrap_or_else(|| state.now() * 1000);
    let request = Request::Query(promql::Query {
        text: params.get("query").unwrap_or_default().to_owned(),
        start_ms: time,
        end_ms: time,
        step_ms: None,
    });
    run(&state, &params, request).await
}

/// `query_range`: `query`, `start`, `end`, `step`, `timeout`.
async fn query_range(
    AxumState(state): AxumState<Arc<State>>,
    FormParams(params, _): FormParams<PromError>,
) -> Answer {
    let required = |name: &str| {
        time_param(&params, name)?
            .ok_or_else(|| bad_param(name, "cannot parse \"\" to a valid timestamp".into()))
    };
    let start = required("start")?;
    let end = required("end")?;
    if end < start {
        return Err(bad_param(
            "end",
            "end timestamp must not be before start time".into(),
        ));
    }
    let step_text = params.get("step").unwrap_or_default();
    let step = parse_duration(step_text).map_err(|e| bad_param("step", e))?;
    if step <= 0 {
        return Err(bad_param(
            "step",
            "zero or negative query resolution step widths are not accepted. Try a positive \
             integer"
                .into(),
        ));
    }
    if (end - start) / step > 11_000 {
        return Err(PromError(QueryError::bad_data(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the \
             query resolution (?step=XX)",
        )));
    }
    let request = Request::Query(promql::Query {
        text: params.get("query").unwrap_or_default().to_owned(),
        start_ms: start,
        end_ms: end,
        step_ms: Some(step),
    });
    run(&state, &params, request).await
}

/// The `match[]`, `start` and `end` of a listing; `required`: at least one `match[]`.
fn listing(params: &Params, required: bool) -> Result<Listing, PromError> {
    let matches = (params.all("match[]"))
        .map(|m| promql::parse_selector(m).map_err(PromError))
        .collect::<Result<Vec<_>, _>>()?;
    if required && matches.is_empty() {
        return Err(PromError(QueryError::bad_data(
            "no match[] parameter provided",
        )));
    }
    Ok(Listing {
        matches,
        start_ms: time_param(params, "start")?,
        end_ms: time_param(params, "end")?,
    })
}

/// `series`: `match[]` (one or more), `start`, `end`.
async fn series(
    AxumState(state): AxumState<Arc<State>>,
    FormParams(params, _): FormParams<PromError>,
) -> Answer {
    let request = Request::Series(listing(&params, true)?);
    run(&state, &params, request).await
}

/// `labels`: `match[]`, `start`, `end`.
async fn labels(
    AxumState(state): AxumState<Arc<State>>,
    FormParams(params, _): FormParams<PromError>,
) -> Answer {
    let request = Request::LabelNames(listing(&params, false)?);
    run(&state, &params, request).await
}

/// `label/<name>/values`: `match[]`, `start`, `end`.
async fn label_values(
    AxumState(state): AxumState<Arc<State>>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Answer {
    let params = Params::query(raw.as_deref());
    let valid = name
        .chars()
        .enumerate()
        .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
    if name.is_empty() || !valid {
        return Err(bad_param("label", format!("invalid label name: {name:?}")));
    }
    let request = Request::LabelValues(name, listing(&params, false)?);
    run(&state, &params, request).await
}

/// `metadata`: `metric`, `limit`.
async fn metadata(AxumState(state): AxumState<Arc<State>>, RawQuery(raw): RawQuery) -> Answer {
    let params = Params::query(raw.as_deref());
    let limit = match params.get("limit").filter(|l| !l.is_empty()) {
        None => None,
        Some(text) => match text.parse::<i64>() {
            Ok(n) if n > 0 => Some(n as usize),
            Ok(_) => None,
            Err(_) => return Err(bad_param("limit", format!("{text:?} is not a number"))),
        },
    };
    let request = Request::Metadata {
        metric: params
            .get("metric")
            .filter(|m| !m.is_empty())
            .map(str::to_owned),
        limit,
    };
    run(&state, &params, request).await
}

/// `status/buildinfo`: the Prometheus version whose API tierdb follows, and tierdb's own.
async fn buildinfo() -> Response {
    success(promql::Reply {
        data: serde_json::json!({
            "version": PROMETHEUS_VERSION,
            "revision": format!("tierdb {}", env!("CARGO_PKG_VERSION")),
            "branch": "",
            "buildUser": "",
            "buildDate": "",
            "goVersion": "",
        })
        .to_string(),
        warnings: Vec::new(),
    })
}

/// `query_exemplars`: tierdb keeps no exemplars; the query is still checked, as Prometheus
/// checks it.
async fn query_exemplars(FormParams(params, _): FormParams<PromError>) -> Answer {
    let text = params.get("query").unwrap_or_default();
    promql_parser::parser::parse(text)
        .map_err(|e| bad_param("query", format!("invalid PromQL {text:?}: {e}")))?;
    Ok(success(promql::Reply {
        data: "[]".into(),
        warnings: Vec::new(),
    }))
}
