//! The HTTP API: Influx line protocol, JSON and Prometheus remote writes, OTLP metrics
//! (`otlp_api.rs`), queries, series and tier listings, Graphite's `/render` and
//! `/metrics/find` (handled in `render_api.rs`), InfluxDB's `/ping`, `/health` and `/query`
//! (`influx_api.rs`), and the server's own metrics. `app(state)` is a plain router, so
//! tests can drive it directly or over a real socket.

#[cfg(test)]
mod tests;

mod json_body;

use std::pin::Pin;
use std::sync::Arc;

use axum::body::{Bytes, HttpBody};
use axum::extract::{DefaultBodyLimit, RawQuery, Request, State as AxumState};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::error::ApiError;
use super::params::Params;
use super::render_api;
use super::tags_api;
use super::State;
use crate::counter::SeriesKind;
use crate::histogram::Observed;
use crate::ingest::cumulative::{Step, Unwritten};
use crate::ingest::influx::{self, Precision};
use crate::ingest::prom_remote;
use crate::ingest::prom_remote::native::{decode_native, NativeHistogram, Temporality};
use crate::ingest::report::IngestReport;
use crate::ingest::sink::Sink;
use crate::ingest::time_unit;
use crate::read::aggregate::{AggregateQuery, Aggregation};
use crate::read::budget::ReadBudget;
use crate::read::distribution::{DistributionQuery, DistributionTarget, Shown};
use crate::read::query::{Display, Query};
use crate::read::tier_choice::TierChoice;
use crate::registry::{Selector, SeriesKey, TagFilter};
use crate::time::{parse_time, Span};
use json_body::{ArraySplitter, Element};

/// The router of every endpoint. The credential check wraps the API and unknown paths; the
/// dashboard's page and assets are served without it (its script sends the token, and a
/// read token is enough for it).
pub(crate) fn app(state: Arc<State>) -> Router {
    let api = Router::new()
        .route("/write", post(influx_v1))
        .route("/api/v2/write", post(influx_v2))
        .route("/api/v1/write", post(api_v1_write))
        .route("/api/v1/prom/write", post(prom_write))
        .route("/v1/metrics", post(super::otlp_api::metrics))
        .route("/api/v1/query", get(query))
        .route("/api/v1/aggregate", get(aggregate))
        .route(
            "/api/v1/series",
            get(series).delete(super::delete_api::delete_series),
        )
        .route("/api/v1/tiers", get(tiers))
        .route(
            "/query",
            get(super::influx_api::query).post(super::influx_api::query),
        )
        .route("/metrics", get(metrics))
        .route("/render", get(render_api::render).post(render_api::render))
        .route("/functions", get(render_api::functions))
        .route("/functions/", get(render_api::functions))
        .route("/functions/{name}", get(render_api::function))
        .route("/tags", get(tags_api::list))
        .route("/tags/", get(tags_api::list))
        .route(
            "/tags/findSeries",
            get(tags_api::find_series).post(tags_api::find_series),
        )
        .route(
            "/tags/autoComplete/tags",
            get(tags_api::complete_tags).post(tags_api::complete_tags),
        )
        .route(
            "/tags/autoComplete/values",
            get(tags_api::complete_values).post(tags_api::complete_values),
        )
        .route("/tags/{tag}", get(tags_api::values))
        .route("/version", get(render_api::version))
        .route("/version/", get(render_api::version))
        .route(
            "/metrics/find",
            get(render_api::find).post(render_api::find),
        )
        .route(
            "/metrics/find/",
            get(render_api::find).post(render_api::find),
        )
        .merge(super::prometheus_api::routes())
        .merge(state.backend.routes())
        .layer(DefaultBodyLimit::max(state.limits.max_body))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            authorize,
        ));
    // Probes carry no token (InfluxDB leaves them open too); they answer nothing stored.
    let probes = Router::new()
        .route("/ping", get(super::influx_api::ping))
        .route("/health", get(super::influx_api::health));
    // Merged into the dashboard, the API router keeps its fallback, credential check included.
    super::dashboard::routes()
        .merge(probes)
        .merge(api)
        .with_state(state)
}

/// Serves a request only when its credential grants the role its route needs
/// ([`super::auth`]); a refusal is answered 401 or 403 and counted. An accepted token marks
/// its connection trusted ([`super::idle_slots`]).
async fn authorize(
    AxumState(state): AxumState<Arc<State>>,
    request: Request,
    next: Next,
) -> Response {
    let checked =
        (state.credentials).check(request.method(), request.uri().path(), request.headers());
    if checked.is_ok() && state.credentials.enabled() {
        // A token the server knows: at the connection limit, its connection is closed only
        // once no connection without one is idle.
        if let Some(slot) = request.extensions().get::<super::idle_slots::SlotHandle>() {
            slot.trust();
        }
    }
    if let Err(denied) = checked {
        state.stats.auth.count(denied);
        tracing::debug!(
            path = request.uri().path(),
            needed = denied.needed.as_str(),
            reason = denied.reason.as_str(),
            "request refused"
        );
        return denied.into_response();
    }
    next.run(request).await
}

/// The answer to a write: 204 when everything landed, 400 with counts and the first reasons
/// (with line numbers) when some lines were refused; the good lines land either way.
/// When the server itself failed (a full disk) and nothing landed, 503 says a retry is safe;
/// once anything landed, a retry would count it twice, so the answer stays 400.
fn write_answer(report: IngestReport) -> Response {
    body_answer(report, None, None)
}

/// [`write_answer`] for a body that could not be read to its end: `broken` is the status
/// (400, 413) and what stopped the read, said before the counts of what landed. A `hint`
/// (what the refusals suggest, such as another timestamp unit) follows the counts and is
/// given alone as `hint`.
fn body_answer(
    report: IngestReport,
    broken: Option<(StatusCode, String)>,
    hint: Option<String>,
) -> Response {
    if report.rejected_total() == 0 && broken.is_none() {
        return StatusCode::NO_CONTENT.into_response();
    }
    let server_side = ["storage_unavailable", "write_failed"]
        .iter()
        .any(|r| report.rejected.contains_key(r));
    let counts = format!(
        "{} line(s) or sample(s) refused; the other {} sample(s) were written",
        report.rejected_total(),
        report.accepted
    );
    let (status, mut error) = match broken {
        Some((status, why)) => (status, format!("{why}; {counts}")),
        None if server_side && report.accepted == 0 => (StatusCode::SERVICE_UNAVAILABLE, counts),
        None => (StatusCode::BAD_REQUEST, counts),
    };
    if let Some(hint) = &hint {
        error = format!("{error}; {hint}");
    }
    let mut body = serde_json::json!({
        "error": error,
        "accepted": report.accepted,
        "rejected": report.rejected_total(),
        "rejected_by_reason": report.rejected,
        "errors": report.errors,
    });
    if let Some(hint) = hint {
        body["hint"] = hint.into();
    }
    (status, Json(body)).into_response()
}

/// InfluxDB 1.x `/write` (`db` accepted and ignored, `precision` = ns|u|ms|s|m|h).
async fn influx_v1(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body = decoded(&headers, body, state.limits.max_body)?;
    influx_write(&state, raw.as_deref(), Precision::parse_v1, &body).await
}

/// InfluxDB 2.x `/api/v2/write` (`bucket`/`org` accepted and ignored, `precision` =
/// ns|us|ms|s).
async fn influx_v2(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body = decoded(&headers, body, state.limits.max_body)?;
    influx_write(&state, raw.as_deref(), Precision::parse_v2, &body).await
}

/// A write's body as sent, or inflated when its `Content-Encoding` is `gzip`, as Telegraf's
/// InfluxDB outputs send it by default. The inflated body is held to the same `max_body`
/// bytes as a plain one, so a small bomb cannot make the server grow.
///
/// # Errors
/// [`ApiError::UnsupportedMediaType`] for another encoding, [`ApiError::BadRequest`] for a
/// body that is not gzip, [`ApiError::PayloadTooLarge`] past `max_body`.
pub(super) fn decoded(
    headers: &HeaderMap,
    body: Bytes,
    max_body: usize,
) -> Result<Bytes, ApiError> {
    let Some(encoding) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(body);
    };
    let encoding = encoding.to_str().unwrap_or("").trim().to_ascii_lowercase();
    match encoding.as_str() {
        "" | "identity" => Ok(body),
        "gzip" | "x-gzip" => {
            use std::io::Read;
            let mut inflated = Vec::new();
            let limit = u64::try_from(max_body)
                .unwrap_or(u64::MAX)
                .saturating_add(1);
            flate2::read::MultiGzDecoder::new(&body[..])
                .take(limit)
                .read_to_end(&mut inflated)
                .map_err(|e| {
                    ApiError::BadRequest(format!("body: Content-Encoding is gzip, but {e}"))
                })?;
            if inflated.len() > max_body {
                return Err(ApiError::PayloadTooLarge(format!(
                    "body: larger than the limit of {max_body} bytes"
                )));
            }
            Ok(Bytes::from(inflated))
        }
        other => Err(ApiError::UnsupportedMediaType(format!(
            "Content-Encoding {other:?}: only gzip (or none) is read"
        ))),
    }
}

/// The `kind` parameter of a write (`gauge` or `counter`): the kind every series of the
/// request is declared as; `None` when absent (rules and earlier declarations decide).
fn kind_param(params: &Params) -> Result<Option<SeriesKind>, ApiError> {
    params
        .get("kind")
        .map(|k| {
            k.parse()
                .map_err(|e| ApiError::BadRequest(format!("kind: {e}")))
        })
        .transpose()
}

/// An Influx write of either API version: the query string's `precision` (read by the
/// version's rules, `parse`; nanoseconds when absent) and `kind`, then the body's lines.
async fn influx_write(
    state: &State,
    query: Option<&str>,
    parse: fn(&str) -> Result<Precision, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let params = Params::query(query);
    let precision = match params.get("precision") {
        Some(p) => parse(p).map_err(|e| ApiError::BadRequest(format!("precision: {e}")))?,
        None => Precision::Nanoseconds,
    };
    let kind = kind_param(&params)?;
    let mut sink = BodySink::new(state.sink());
    let now = sink.now();
    let mut parser = influx::LineParser::default();
    // The first timestamp as written, for the hint when every sample is refused for its time.
    let mut first_ts = None;
    for (index, line) in body.split(|&b| b == b'\n').enumerate() {
        let number = index + 1;
        let Ok(line) = std::str::from_utf8(line) else {
            sink.reject(number, "invalid_utf8", "line is not UTF-8");
            continue;
        };
        match parser.parse(line, precision) {
            Ok(()) => {
                if first_ts.is_none() && parser.has_points() {
                    first_ts = time_unit::written_ts(line);
                }
                let ts = parser.ts().unwrap_or(now);
                for (series, value) in parser.points() {
                    sink.push(series, kind, ts, value, number).await;
                }
                for skip in parser.skipped() {
                    state.stats.count_rejected(skip.as_str(), 1);
                }
            }
            Err(e) => sink.reject(number, e.as_str(), e.to_string()),
        }
    }
    let report = sink.finish().await;
    let hint = first_ts.and_then(|raw| unit_hint(&report, raw, precision, now));
    Ok(body_answer(report, None, hint))
}

/// When every sample of an Influx write was refused for its time and its first timestamp,
/// `raw` as written, is a recent time in another unit: a sentence naming that unit and the
/// `precision` that reads it, as `tierdb import` says it.
fn unit_hint(
    report: &IngestReport,
    raw: i64,
    precision: Precision,
    now: crate::time::Timestamp,
) -> Option<String> {
    if !time_unit::refused_only_for_time(report) {
        return None;
    }
    let unit = time_unit::looks_like(raw, precision, now)?;
    let first = crate::time::format_ts(precision.to_seconds(raw).unwrap_or(raw));
    // InfluxDB 2.x spells microseconds `us`.
    let flag = match unit.flag {
        "u" => "u (us on /api/v2/write)",
        flag => flag,
    };
    Some(format!(
        "the timestamps look like {} (the first, read as {}, is {first}): add precision={flag} \
         to the URL",
        unit.name,
        time_unit::name_of(precision),
    ))
}

/// `POST /api/v1/prom/write`: Prometheus remote write.
async fn prom_write(
    AxumState(state): AxumState<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    remote_write(&state, &body).await
}

/// `POST /api/v1/write`: Prometheus remote write when the body is protobuf (what Prometheus
/// sends as `Content-Type`), else a JSON write.
async fn api_v1_write(
    state: AxumState<Arc<State>>,
    raw: RawQuery,
    request: Request,
) -> Result<Response, ApiError> {
    let protobuf = (request.headers().get(header::CONTENT_TYPE))
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/x-protobuf"));
    if !protobuf {
        return json_write(state, raw, request).await;
    }
    let max_body = state.limits.max_body;
    let body = match axum::body::to_bytes(request.into_body(), max_body).await {
        Ok(body) => body,
        Err(e) => {
            let e = e.into_inner();
            if e.is::<http_body_util::LengthLimitError>() {
                return Ok(too_large(max_body));
            }
            return Err(ApiError::BadRequest(format!(
                "body: reading it failed: {e}"
            )));
        }
    };
    remote_write(&state, &body).await
}

/// A remote write request's body (see [`prom_remote`]): 400 for a body that is not one
/// (Prometheus does not retry it), else every series' samples and native histograms through
/// the request's sink, answered as every write is ([`write_answer`]: 204 once landed, 5xx
/// only when nothing landed, which Prometheus retries). A refused series is counted once per
/// sample and histogram, with its 1-based position in the request as its "line". Staleness
/// markers (samples' and histograms') are counted in the server's totals, not refused.
async fn remote_write(state: &State, body: &[u8]) -> Result<Response, ApiError> {
    let request = prom_remote::decode(body, state.limits.max_body)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let counters = prom_remote::counter_families(&request);
    let mut sink = BodySink::new(state.sink());
    // Counter histograms' steps until their batch lands, undone if it fails.
    let mut unwritten: Unwritten<Step> = Unwritten::default();
    let (mut tags, mut key) = (Vec::new(), String::new());
    let mut stale = 0;
    for (index, series) in request.timeseries.iter().enumerate() {
        let number = index + 1;
        let name = match prom_remote::series_key(&series.labels, &mut tags, &mut key) {
            Ok(name) => name,
            Err(e) => {
                for _ in 0..series.samples.len() + series.histograms.len() {
                    sink.reject(number, e.as_str(), e.to_string());
                }
                continue;
            }
        };
        let kind = prom_remote::kind_of(name, &counters);
        for sample in &series.samples {
            if prom_remote::is_stale(sample.value) {
                stale += 1;
                continue;
            }
            let ts = prom_remote::seconds(sample.timestamp);
            sink.push(&key, kind, ts, sample.value, number).await;
            sink.settle(&mut unwritten, |u| state.histogram_counters.undo(u));
        }
        for native in &series.histograms {
            // A staleness marker for a histogram series is a histogram whose sum is one.
            if prom_remote::is_stale(native.sum) {
                stale += 1;
                continue;
            }
            remote_histogram(state, &mut sink, &key, native, number, &mut unwritten).await;
            sink.settle(&mut unwritten, |u| state.histogram_counters.undo(u));
        }
    }
    if stale > 0 {
        let reason = prom_remote::Skipped::StaleMarker.as_str();
        state.stats.count_rejected(reason, stale);
    }
    sink.flush().await;
    sink.settle(&mut unwritten, |u| state.histogram_counters.undo(u));
    Ok(write_answer(sink.finish().await))
}

/// One native histogram of series `key` into the sink: a gauge histogram as it comes, a
/// counter histogram's increase since the series' previous one
/// ([`crate::ingest::cumulative::HistogramCounters`]);
/// refused with its reason when it does not decode or comes out of order.
async fn remote_histogram(
    state: &State,
    sink: &mut BodySink,
    key: &str,
    native: &NativeHistogram,
    line: usize,
    unwritten: &mut Unwritten<Step>,
) {
    if sink.has_failed() {
        // Refused unread: a step now would be taken for a histogram that is not written.
        let why = "not written: an earlier batch of this request failed on the server";
        return sink.reject(line, "write_failed", why);
    }
    let sample = match decode_native(native) {
        Ok(sample) => sample,
        Err(e) => return sink.reject(line, e.as_str(), e.to_string()),
    };
    let ts = prom_remote::seconds(sample.timestamp);
    let observed = match sample.temporality {
        Temporality::Gauge => {
            state.histogram_counters.forget(key);
            if sample.histogram.is_empty() {
                // No observation: nothing to add.
                return;
            }
            Observed {
                histogram: sample.histogram,
                sum: sample.sum,
                extremes: None,
            }
        }
        Temporality::Cumulative { reset } => {
            let step = state.histogram_counters.step(
                key,
                sample.timestamp,
                (sample.histogram, sample.sum),
                reset,
                unwritten,
            );
            match step {
                Ok(Some(increase)) => increase,
                Ok(None) => return,
                Err(e) => return sink.reject(line, e.as_str(), e.to_string()),
            }
        }
    };
    sink.push_histogram(key, ts, observed, line).await;
}

/// A request's [`Sink`] that keeps going when a batch cannot be written (a poisoned engine):
/// the batch and every later sample of the body are refused as `write_failed`, and the
/// answer says what landed before. A retry then resends only what did not land; failing the
/// whole request would make it resend earlier batches too, and count them twice.
pub(super) struct BodySink {
    sink: Sink,
    /// A batch of this request failed; the rest of it is refused without trying.
    failed: bool,
    /// Batches written whole.
    written: u64,
    /// `written` at the last [`BodySink::settle`].
    settled: u64,
}

impl BodySink {
    pub(super) fn new(sink: Sink) -> BodySink {
        BodySink {
            sink,
            failed: false,
            written: 0,
            settled: 0,
        }
    }

    /// True once a batch of this request failed.
    pub(super) fn has_failed(&self) -> bool {
        self.failed
    }

    /// After a push or a flush: the cumulative histograms' steps `unwritten` are taken back
    /// by `undo` when a batch failed (each series' next histogram then carries the
    /// increase), and kept once a batch landed since the last call (a batch writes
    /// everything queued).
    pub(super) fn settle<T>(
        &mut self,
        unwritten: &mut Unwritten<T>,
        undo: impl FnOnce(&mut Unwritten<T>),
    ) {
        let landed = self.written > self.settled;
        self.settled = self.written;
        if unwritten.is_empty() {
            return;
        }
        if self.failed {
            undo(unwritten);
        } else if landed {
            unwritten.landed();
        }
    }

    pub(super) fn now(&self) -> crate::time::Timestamp {
        self.sink.now()
    }

    /// Queues one sample ([`Sink::push_declared`]), writing the batch once it is full.
    pub(super) async fn push(
        &mut self,
        series: &str,
        kind: Option<SeriesKind>,
        ts: crate::time::Timestamp,
        value: f64,
        line: usize,
    ) {
        if self.failed {
            let why = "not written: an earlier batch of this request failed on the server";
            self.sink.reject(line, "write_failed", why.into());
        } else if self.sink.push_declared(series, kind, ts, value, line) {
            self.flush().await;
        }
    }

    /// Queues observations that arrived as a histogram ([`Sink::push_histogram`]), writing
    /// the batch once it is full.
    pub(super) async fn push_histogram(
        &mut self,
        series: &str,
        ts: crate::time::Timestamp,
        observed: crate::histogram::Observed,
        line: usize,
    ) {
        if self.failed {
            let why = "not written: an earlier batch of this request failed on the server";
            self.sink.reject(line, "write_failed", why.into());
        } else if self.sink.push_histogram(series, ts, observed, line) {
            self.flush().await;
        }
    }

    pub(super) fn reject(&mut self, line: usize, reason: &'static str, message: impl Into<String>) {
        self.sink.reject(line, reason, message.into());
    }

    /// Writes what is queued; a failure refuses the rest of the request.
    pub(super) async fn flush(&mut self) {
        if self.failed {
            return;
        }
        match self.sink.flush().await {
            Ok(()) => self.written += 1,
            Err(e) => {
                tracing::error!(error = %e, "a write batch failed; refusing the rest of the request");
                self.failed = true;
            }
        }
    }

    /// Writes what is queued and hands back what landed and what was refused.
    pub(super) async fn finish(mut self) -> IngestReport {
        self.flush().await;
        self.sink.report().clone()
    }
}

/// `POST /api/v1/write`: a JSON array of `{series, tags?, ts, value, kind?}`, read and
/// written as it arrives (see [`json_body`]), so a body costs one element and one batch of
/// memory, not its size. An element that is not a sample is refused with its number and the
/// rest go on; a body that stops being JSON lands the elements before the break and answers
/// 400 with what landed.
async fn json_write(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
    request: Request,
) -> Result<Response, ApiError> {
    let request_kind = kind_param(&Params::query(raw.as_deref()))?;
    let max_body = state.limits.max_body;
    let declared = (request.headers().get(header::CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > max_body as u64) {
        return Ok(too_large(max_body));
    }
    let mut body = request.into_body();
    let mut sink = BodySink::new(state.sink());
    let now = sink.now();
    let mut splitter = ArraySplitter::new();
    let mut received = 0usize;
    let broken = loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None => splitter.end(),
            Some(Err(e)) => {
                break Some((
                    StatusCode::BAD_REQUEST,
                    format!("body: reading it failed after {received} bytes: {e}"),
                ))
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                received += data.len();
                if received > max_body {
                    break Some((
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("body: larger than the limit of {max_body} bytes"),
                    ));
                }
                splitter.feed(&data);
            }
        }
        match write_elements(&mut splitter, &mut sink, now, request_kind).await {
            Err(e) if e.elements == 0 => {
                return Err(ApiError::BadRequest(format!(
                    "body: expected a JSON array of {{series, tags?, ts, value, kind?}}: {}",
                    e.message
                )))
            }
            Err(e) => {
                let message = format!(
                    "body: not a JSON array after element {}: {}; the elements before it were \
                     read",
                    e.elements, e.message
                );
                sink.reject(e.elements + 1, "invalid_json", message.clone());
                break Some((StatusCode::BAD_REQUEST, message));
            }
            Ok(()) if splitter.ended() => break None,
            Ok(()) => {}
        }
    };
    Ok(body_answer(sink.finish().await, broken, None))
}

/// Writes every element `splitter` holds whole, `now` and `kind` as [`json_body::sample`]
/// takes them.
async fn write_elements(
    splitter: &mut ArraySplitter,
    sink: &mut BodySink,
    now: crate::time::Timestamp,
    kind: Option<SeriesKind>,
) -> Result<(), json_body::BodyError> {
    while let Some(item) = splitter.next()? {
        let number = splitter.elements();
        match json_body::sample(item, now, kind) {
            Element::Sample {
                series,
                kind,
                ts,
                value,
            } => sink.push(&series, kind, ts, value, number).await,
            Element::Refused { reason, message } => sink.reject(number, reason, message),
        }
    }
    Ok(())
}

/// 413 for a body whose declared length is over `max_body` bytes: nothing of it is read.
fn too_large(max_body: usize) -> Response {
    ApiError::PayloadTooLarge(format!("body: larger than the limit of {max_body} bytes"))
        .into_response()
}

/// The series a request names: `series=name{k=v}`, or `series=name` plus `tag=k=v` pairs
/// (read as [`TagFilter`]s; only `k=v` names a series, so `k!=v` is refused).
fn series_param(params: &Params) -> Result<String, ApiError> {
    let name = params.get("series").ok_or_else(|| {
        ApiError::BadRequest("series: missing (series=name or series=name{k=v,...})".into())
    })?;
    let tags: Vec<(String, String)> = params
        .all("tag")
        .map(|text| match TagFilter::parse(text) {
            Ok(TagFilter::Eq(k, v)) => Ok((k, v)),
            Ok(TagFilter::NotEq(..)) => Err(ApiError::BadRequest(format!(
                "tag: {text:?} excludes series, but a query reads one series: name its tags \
                 with k=v (k!=v filters work in /api/v1/series and /api/v1/aggregate)"
            ))),
            Err(e) => Err(ApiError::BadRequest(format!("tag: {e}"))),
        })
        .collect::<Result<_, _>>()?;
    if tags.is_empty() {
        return Ok(name.to_string());
    }
    let key =
        SeriesKey::new(name, tags).map_err(|e| ApiError::BadRequest(format!("series: {e}")))?;
    Ok(key.to_string())
}

/// The series a listing or aggregate covers: `match=glob` or `match=glob{k=v,k!=v}` (default
/// `*`), plus any `tag=k=v` / `tag=k!=v` filters.
fn selector_param(params: &Params) -> Result<Selector, ApiError> {
    Selector::parse(params.get("match").unwrap_or("*"))
        .map_err(|e| ApiError::BadRequest(format!("match: {e}")))?
        .with_tags(params.all("tag"))
        .map_err(|e| ApiError::BadRequest(format!("tag: {e}")))
}

/// What every read takes besides the series: `from`, `to` (default the last hour), `tier`,
/// `display`, `step`, `max_points`.
struct ReadParams {
    from: i64,
    to: i64,
    tier: TierChoice,
    display: Display,
    step: Option<Span>,
    max_points: Option<u32>,
}

fn read_params(state: &State, params: &Params) -> Result<ReadParams, ApiError> {
    let now = state.now();
    let time = |key: &str, default: i64| -> Result<i64, ApiError> {
        match params.get(key) {
            Some(text) => {
                parse_time(text, now).map_err(|e| ApiError::BadRequest(format!("{key}: {e}")))
            }
            None => Ok(default),
        }
    };
    let to = time("to", now)?;
    let from = time("from", to.saturating_sub(3600))?;
    let tier = TierChoice::parse(state.tiers(), params.get("tier").unwrap_or("auto"))
        .map_err(|e| ApiError::BadRequest(format!("tier: {e}")))?;
    let display = match params.get("display") {
        // A quantile or `hist` display is a distribution read's, which its handler takes
        // first (`distribution_display`); its bucket display is then unused.
        Some(display) if !Shown::is_distribution_display(display) => display
            .parse::<Display>()
            .map_err(|e| ApiError::BadRequest(format!("display: {e}")))?,
        _ => Display::Avg,
    };
    let step = params
        .get("step")
        .map(|step| Span::parse(step).map_err(|e| ApiError::BadRequest(format!("step: {e}"))))
        .transpose()?;
    let max_points = params
        .get("max_points")
        .map(|max| {
            max.parse().map_err(|_| {
                ApiError::BadRequest(format!("max_points: {max:?} is not a whole number"))
            })
        })
        .transpose()?;
    Ok(ReadParams {
        from,
        to,
        tier,
        display,
        step,
        max_points,
    })
}

async fn query(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let params = Params::query(raw.as_deref());
    if let Some(shown) = distribution_display(&params)? {
        let target = DistributionTarget::Series(series_param(&params)?);
        let whole_range = params.either("range", "points", "whole")?;
        return distribution(&state, &params, target, shown, whole_range).await;
    }
    let format = response_format(&params)?;
    let read = read_params(&state, &params)?;
    let query = Query {
        series: series_param(&params)?,
        tier: read.tier,
        from: read.from,
        to: read.to,
        display: read.display,
        step: read.step,
        max_points: read.max_points,
    };
    let read = params.read_options(&state)?;
    let report = read.report.clone();
    let result = state.backend.query(query, read).await?;
    let csv = (format == Format::Csv).then(|| result.csv());
    Ok(answer(&report, csv, result))
}

/// What a query or aggregate answers in: its `format` parameter.
#[derive(Clone, Copy, PartialEq)]
enum Format {
    Json,
    Csv,
}

/// The request's `format`: `json` (the default) or `csv`.
///
/// # Errors
/// [`ApiError::BadRequest`] for any other.
fn response_format(params: &Params) -> Result<Format, ApiError> {
    match params.get("format").unwrap_or("json") {
        "json" => Ok(Format::Json),
        "csv" => Ok(Format::Csv),
        other => Err(ApiError::BadRequest(format!(
            "format: {other:?} is not json or csv"
        ))),
    }
}

/// `csv` when the request asked for it, else `json` as JSON; with the read's headers.
fn answer(
    report: &crate::server::ReadReport,
    csv: Option<String>,
    json: impl serde::Serialize,
) -> Response {
    match csv {
        Some(csv) => {
            report.mark(([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], csv).into_response())
        }
        None => report.json(json),
    }
}

/// `GET /api/v1/aggregate`: the series `match` and `tag` select, folded with `agg` (sum,
/// avg, min, max, count; default sum) into one line per distinct value of the `group_by`
/// tags (comma-separated or repeated); `range=whole` folds the range into one point.
async fn aggregate(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let params = Params::query(raw.as_deref());
    if let Some(shown) = distribution_display(&params)? {
        let whole_range = params.either("range", "points", "whole")?;
        let target = DistributionTarget::Select {
            selector: selector_param(&params)?,
            group_by: group_by_param(&params),
        };
        return distribution(&state, &params, target, shown, whole_range).await;
    }
    let format = response_format(&params)?;
    let read = read_params(&state, &params)?;
    let aggregation = params
        .get("agg")
        .unwrap_or("sum")
        .parse::<Aggregation>()
        .map_err(|e| ApiError::BadRequest(format!("agg: {e}")))?;
    let whole_range = params.either("range", "points", "whole")?;
    let query = AggregateQuery {
        selector: selector_param(&params)?,
        group_by: group_by_param(&params),
        aggregation,
        display: read.display,
        tier: read.tier,
        from: read.from,
        to: read.to,
        step: read.step,
        max_points: read.max_points,
        whole_range,
    };
    let budget = Arc::new(ReadBudget::new(state.limits.max_read_values));
    let read = params.read_options(&state)?;
    let report = read.report.clone();
    let result = (state.backend)
        .aggregate(query, Arc::clone(&budget), read)
        .await;
    let result = render_api::over_budget(&state, &budget, result)?;
    let csv = (format == Format::Csv).then(|| result.csv());
    Ok(answer(&report, csv, result))
}

/// The `group_by` tags: comma-separated or repeated.
fn group_by_param(params: &Params) -> Vec<String> {
    params
        .all("group_by")
        .flat_map(|v| v.split(','))
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A `display` that reads distributions: `pNN` (a quantile) or `hist`; `None` for the
/// bucket displays.
fn distribution_display(params: &Params) -> Result<Option<Shown>, ApiError> {
    match params.get("display") {
        Some(text) if Shown::is_distribution_display(text) => text
            .parse()
            .map(Some)
            .map_err(|e| ApiError::BadRequest(format!("display: {e}"))),
        _ => Ok(None),
    }
}

/// A quantile or `hist` read of `target` (see [`Backend::distribution`]): the query and
/// aggregate APIs' shared half. An aggregate needs no `agg`: histograms merge.
async fn distribution(
    state: &Arc<State>,
    params: &Params,
    target: DistributionTarget,
    shown: Shown,
    whole_range: bool,
) -> Result<Response, ApiError> {
    let format = response_format(params)?;
    if (format, shown) == (Format::Csv, Shown::Histogram) {
        return Err(ApiError::BadRequest(
            "format: csv has no columns for display=hist (a histogram a point); use json".into(),
        ));
    }
    let read_params = read_params(state, params)?;
    let query = DistributionQuery {
        target,
        shown,
        tier: read_params.tier,
        from: read_params.from,
        to: read_params.to,
        step: read_params.step,
        max_points: read_params.max_points,
        whole_range,
    };
    let budget = Arc::new(ReadBudget::new(state.limits.max_read_values));
    let options = params.read_options(state)?;
    let report = options.report.clone();
    let result = (state.backend)
        .distribution(query, Arc::clone(&budget), options)
        .await;
    let result = render_api::over_budget(state, &budget, result)?;
    // (A quantile's points always have CSV: `hist` was refused above.)
    let csv = (format == Format::Csv).then(|| result.csv()).flatten();
    // A single series answers as a bucket display's query does: its points beside it.
    Ok(match result.into_series() {
        Ok(series) => answer(&report, csv, series),
        Err(result) => answer(&report, csv, result),
    })
}

/// `GET /api/v1/series`: the names `match` and `tag` select, matched by a parallel registry
/// scan on the blocking pool.
async fn series(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let params = Params::query(raw.as_deref());
    let selector = selector_param(&params)?;
    let read = params.read_options(&state)?;
    let report = read.report.clone();
    let names = (state.backend).series(selector, read).await?;
    Ok(report.json(serde_json::json!({ "series": names })))
}

/// The engine's stats; on a cluster node, the partitions it applies, added up.
async fn engine_stats(state: &State) -> Result<crate::engine::EngineStats, ApiError> {
    state.backend.stats().await
}

async fn tiers(AxumState(state): AxumState<Arc<State>>) -> Result<Response, ApiError> {
    let stats = engine_stats(&state).await?;
    Ok(Json(serde_json::json!({
        "now": stats.now,
        "tiers": stats.tiers,
        "orphaned_tiers": stats.orphaned_tiers,
    }))
    .into_response())
}

async fn metrics(
    AxumState(state): AxumState<Arc<State>>,
    _headers: HeaderMap,
) -> Result<Response, ApiError> {
    let stats = engine_stats(&state).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        super::metrics::render(&stats, &state.stats)
            + &state.backend.metrics().await?
            + &(state.tls.as_ref())
                .map(|tls| super::metrics::render_tls(&tls.counters))
                .unwrap_or_default()
            + &super::metrics::render_allowlists(&state.allowlists)
            + &super::metrics::render_process(),
    )
        .into_response())
}
