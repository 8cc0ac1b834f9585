//! `POST /v1/metrics`: OTLP/HTTP metrics, as the OpenTelemetry Collector's `otlphttp`
//! exporter and the SDKs' OTLP/HTTP exporters send them (see [`crate::ingest::otlp`] and
//! docs/otlp.md). Answers follow the OTLP specification rather than tierdb's other writes:
//! in the request's encoding, 200 with an `ExportMetricsServiceResponse` (its
//! `partial_success` saying what was refused, which the client does not retry), 400 for a
//! body that is not a request, 413 past the body limit, 415 for another `Content-Type`, and
//! 503 (which the client retries) only when the server failed before anything landed; every
//! error body a `google.rpc.Status`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State as AxumState};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message;

use super::error::ApiError;
use super::http::{decoded, BodySink};
use super::State;
use crate::ingest::cumulative::Unwritten;
use crate::ingest::otlp::proto::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse, Status,
};
use crate::ingest::otlp::streams::StreamStep;
use crate::ingest::otlp::{self, Batch, Encoding, Translator, What};
use crate::ingest::report::IngestReport;

/// gRPC's codes, which `Status.code` carries (the specification lets clients ignore them).
const INVALID_ARGUMENT: i32 = 3;
const RESOURCE_EXHAUSTED: i32 = 8;
const UNAVAILABLE: i32 = 14;

/// Refusals an answer's `error_message` quotes with their point numbers.
const QUOTED: usize = 3;

/// `POST /v1/metrics`.
pub(super) async fn metrics(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let content_type = (request.headers().get(header::CONTENT_TYPE))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(encoding) = Encoding::of_content_type(content_type) else {
        let message = format!(
            "Content-Type {content_type:?}: OTLP/HTTP takes application/x-protobuf or \
             application/json"
        );
        return status(
            Encoding::Json,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            INVALID_ARGUMENT,
            message,
        );
    };
    match write(&state, encoding, request).await {
        Ok(report) => answer(encoding, &report),
        Err(e) => error(encoding, e),
    }
}

/// Reads, inflates, decodes and writes the request's body.
async fn write(
    state: &State,
    encoding: Encoding,
    request: Request,
) -> Result<IngestReport, ApiError> {
    let max_body = state.limits.max_body;
    let headers = request.headers().clone();
    let body: Bytes = match axum::body::to_bytes(request.into_body(), max_body).await {
        Ok(body) => body,
        Err(e) => {
            let e = e.into_inner();
            if e.is::<http_body_util::LengthLimitError>() {
                return Err(ApiError::PayloadTooLarge(format!(
                    "body: larger than the limit of {max_body} bytes"
                )));
            }
            return Err(ApiError::BadRequest(format!(
                "body: reading it failed: {e}"
            )));
        }
    };
    let body = decoded(&headers, body, max_body)?;
    let request = otlp::decode(&body, encoding).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let mut sink = BodySink::new(state.sink());
    let now = sink.now();
    // Cumulative streams' steps until their batch lands, undone if it fails.
    let mut unwritten = Unwritten::default();
    let undo = |unwritten: &mut Unwritten<StreamStep>| {
        let mut streams = state.otlp_streams.lock().unwrap_or_else(|e| e.into_inner());
        streams.undo(unwritten);
    };
    let mut translator = Translator::new(&request);
    let mut batch = Batch::default();
    let mut skipped = std::collections::BTreeMap::<&'static str, u64>::new();
    while translator.next_metric(&mut batch) {
        for entry in batch.entries() {
            match &entry.what {
                What::Sample { kind, ts, value } => {
                    let ts = ts.unwrap_or(now);
                    (sink.push(batch.series(entry), Some(*kind), ts, *value, entry.point)).await;
                    sink.settle(&mut unwritten, undo);
                }
                What::Histogram { .. } if sink.has_failed() => {
                    // Refused unread: a step now would be taken for a point not written.
                    let why = "not written: an earlier batch of this request failed on the server";
                    sink.reject(entry.point, "write_failed", why);
                }
                What::Histogram { ts, distribution } => {
                    let series = batch.series(entry);
                    let observed = (state.otlp_streams.lock())
                        .unwrap_or_else(|e| e.into_inner())
                        .observe(series, distribution, now, &mut unwritten);
                    match observed {
                        Ok(Some(observed)) => {
                            let ts = ts.unwrap_or(now);
                            (sink.push_histogram(series, ts, observed, entry.point)).await;
                            sink.settle(&mut unwritten, undo);
                        }
                        // A cumulative series' baseline, or a point that adds nothing.
                        Ok(None) => {}
                        Err(e) => sink.reject(entry.point, e.as_str(), e.to_string()),
                    }
                }
                What::Refused { reason, message } => {
                    sink.reject(entry.point, reason, message.clone())
                }
                What::Skipped { reason } => *skipped.entry(reason).or_default() += 1,
            }
        }
    }
    for (reason, n) in skipped {
        state.stats.count_rejected(reason, n);
    }
    sink.flush().await;
    sink.settle(&mut unwritten, undo);
    Ok(sink.finish().await)
}

/// 200 with the response message, its `partial_success` set when anything was refused; 503
/// when the server failed and nothing landed, so the client retries.
fn answer(encoding: Encoding, report: &IngestReport) -> Response {
    let rejected = report.rejected_total();
    if rejected == 0 {
        return message(
            encoding,
            StatusCode::OK,
            &ExportMetricsServiceResponse::default(),
        );
    }
    let server_side = ["storage_unavailable", "write_failed"]
        .iter()
        .any(|r| report.rejected.contains_key(r));
    let mut text = format!(
        "{rejected} sample(s) refused, {} written; by reason: {}",
        report.accepted,
        (report.rejected.iter())
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for e in report.errors.iter().take(QUOTED) {
        text.push_str(&format!(
            "; data point {}: {} ({})",
            e.line, e.message, e.reason
        ));
    }
    if server_side && report.accepted == 0 {
        return status(encoding, StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE, text);
    }
    let response = ExportMetricsServiceResponse {
        partial_success: Some(ExportMetricsPartialSuccess {
            rejected_data_points: i64::try_from(rejected).unwrap_or(i64::MAX),
            error_message: text,
        }),
    };
    message(encoding, StatusCode::OK, &response)
}

/// An error answer of the API's kind as OTLP gives it: a `Status` in the request's encoding.
fn error(encoding: Encoding, e: ApiError) -> Response {
    let (code, grpc, text) = match e {
        ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, INVALID_ARGUMENT, m),
        ApiError::PayloadTooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, RESOURCE_EXHAUSTED, m),
        ApiError::UnsupportedMediaType(m) => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, INVALID_ARGUMENT, m)
        }
        // Writes give no other kind; answered as the API answers it.
        other => return other.into_response(),
    };
    status(encoding, code, grpc, text)
}

fn status(encoding: Encoding, code: StatusCode, grpc: i32, message: String) -> Response {
    match encoding {
        Encoding::Protobuf => {
            let body = Status {
                code: grpc,
                message,
            }
            .encode_to_vec();
            (
                code,
                [(header::CONTENT_TYPE, encoding.content_type())],
                body,
            )
                .into_response()
        }
        Encoding::Json => {
            let body = serde_json::json!({ "code": grpc, "message": message });
            (
                code,
                [(header::CONTENT_TYPE, encoding.content_type())],
                body.to_string(),
            )
                .into_response()
        }
    }
}

/// The response message in `encoding`: protobuf, or OTLP/JSON (lowerCamelCase, the 64-bit
/// count as a decimal string).
fn message(
    encoding: Encoding,
    code: StatusCode,
    response: &ExportMetricsServiceResponse,
) -> Response {
    let body = match encoding {
        Encoding::Protobuf => response.encode_to_vec(),
        Encoding::Json => {
            let json = match &response.partial_success {
                None => serde_json::json!({}),
                Some(partial) => serde_json::json!({
                    "partialSuccess": {
                        "rejectedDataPoints": partial.rejected_data_points.to_string(),
                        "errorMessage": partial.error_message,
                    }
                }),
            };
            json.to_string().into_bytes()
        }
    };
    (
        code,
        [(header::CONTENT_TYPE, encoding.content_type())],
        body,
    )
        .into_response()
}
