//! OTLP/HTTP metrics at `POST /v1/metrics`:
//! - the real OpenTelemetry Python SDK (PyPI's `opentelemetry-sdk` and
//!   `opentelemetry-exporter-otlp-proto-http`, installed by scripts/install-test-deps.sh)
//!   exports a gauge, a cumulative and a delta counter, an explicit and an exponential
//!   histogram, and (with the protobuf classes it uses, since the SDK has no summary
//!   instrument) a summary, to `tierdb serve`; each is read back through the query API and
//!   PromQL under the name docs/otlp.md gives it; the histograms (explicit and exponential,
//!   cumulative and delta) as distributions, their counts and sums exact and their
//!   quantiles within the documented error of the values the SDK recorded;
//! - over real HTTP into a server in the test process: JSON and gzip, the partial success
//!   answer in the request's encoding, bad bodies answered with a `Status`, the body limit
//!   before and after inflating, and the token.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use prost::Message;
use serde_json::Value;
use tierdb::ingest::otlp::proto::{
    AnyValue, Data, ExportMetricsServiceRequest, ExportMetricsServiceResponse, Gauge,
    InstrumentationScope, KeyValue, Metric, NumberDataPoint, NumberValue, Resource,
    ResourceMetrics, ScopeMetrics, Status, Value as AttributeValue,
};
use tierdb::server::Limits;
use tierdb::Display;

use crate::common::NOW;
use crate::support::http;
use crate::support::process::{ensure_programs, Proc};
use crate::support::server::TestServer;

/// Where scripts/install-test-deps.sh installs the SDK (its `OTEL_PYTHONPATH`).
const OTEL_PYTHONPATH: &str = "/usr/local/lib/tierdb-test-deps/opentelemetry-1.45.2";

fn pythonpath() -> PathBuf {
    std::env::var_os("OTEL_PYTHONPATH")
        .map_or_else(|| PathBuf::from(OTEL_PYTHONPATH), PathBuf::from)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The value of every bucket of `series` at 1m from `from` on that has one, shown as
/// `display`.
fn values_of(addr: std::net::SocketAddr, series: &str, display: &str, from: i64) -> Vec<f64> {
    let path = format!(
        "/api/v1/query?series={}&tier=1m&from={from}&to={}&display={display}",
        http::percent_encode(series),
        unix_now() + 120
    );
    let answer = http::get_json(addr, &path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (answer["points"].as_array().unwrap().iter())
        .filter_map(|p| p[1].as_f64())
        .collect()
}

/// The sum of [`values_of`]; `None` when no bucket has a value.
fn sum_of(addr: std::net::SocketAddr, series: &str, display: &str, from: i64) -> Option<f64> {
    let values = values_of(addr, series, display, from);
    (!values.is_empty()).then(|| values.iter().sum())
}

#[test]
fn the_python_sdk_exports_land_as_documented() {
    let pins = pythonpath().join("OTEL_PINS");
    if !ensure_programs(
        &[&pins],
        "the OpenTelemetry Python SDK (PyPI, pip --target)",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Proc::tierdb(
        "serve",
        &tmp.path().join("data"),
        tmp.path().join("server.stderr"),
    );
    let addr = server.wait_ready().http;
    let from = unix_now() - 600;
    // A cumulative histogram's first point is counted whole when its stream started in a
    // later second than the server (docs/otlp.md): the SDK's streams start after this.
    std::thread::sleep(Duration::from_millis(1100));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/otlp_sdk.py");
    // `python3` as scripts/install-test-deps.sh ran pip with.
    let output = Command::new("python3")
        .arg(&script)
        .arg(format!("http://{addr}"))
        .env("PYTHONPATH", pythonpath())
        .output()
        .expect("run python3");
    assert!(
        output.status.success(),
        "otlp_sdk.py failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let said: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    // The exporter's exports succeed; the summary, all stored, answers without a partial
    // success.
    let exports = ["SUCCESS", "SUCCESS", "SUCCESS", "SUCCESS"];
    assert_eq!(said["exports"], serde_json::json!(exports), "{said}");
    assert_eq!(said["summary_status"], 200, "{said}");
    assert_eq!(
        said["summary_content_type"], "application/x-protobuf",
        "{said}"
    );
    assert_eq!(said["summary_partial"], false, "{said}");

    let sdk = "deployment_environment=ci,instance=i-1,job=otlp-test,otel_scope_name=tierdb.test";
    // An explicit-bucket histogram's series is tagged as such (docs/otlp.md).
    let explicit_sdk =
        "deployment_environment=ci,instance=i-1,job=otlp-test,otel_buckets=explicit,\
         otel_scope_name=tierdb.test";
    let telemetry =
        "telemetry_sdk_language=python,telemetry_sdk_name=opentelemetry,telemetry_sdk_version=1.45.2";
    let gauge = format!("queue_depth{{{sdk},queue=main,{telemetry}}}");
    let counter = format!("jobs_done_total{{{sdk},queue=main,{telemetry}}}");
    let delta = format!("bytes_out_total{{{sdk},peer=b,{telemetry}}}");
    let summary = "instance=i-1,job=otlp-test";
    let p50 = format!("rpc_latency_seconds{{{summary},quantile=0.5}}");
    let p99 = format!("rpc_latency_seconds{{{summary},quantile=0.99}}");
    let sum = format!("rpc_latency_seconds_sum{{{summary}}}");
    let count = format!("rpc_latency_seconds_count{{{summary}}}");
    // (instrument, series, explicit, cumulative)
    let histograms = [
        (
            "request.duration",
            format!("request_duration_milliseconds{{{explicit_sdk},route=/a,{telemetry}}}"),
            true,
            true,
        ),
        (
            "queue.wait",
            format!("queue_wait_milliseconds{{{sdk},{telemetry}}}"),
            false,
            true,
        ),
        (
            "payload.size",
            format!("payload_size_bytes{{{sdk},{telemetry}}}"),
            false,
            false,
        ),
        (
            "batch.size",
            format!("batch_size{{{explicit_sdk},{telemetry}}}"),
            true,
            false,
        ),
    ];
    let listed = http::get_json(addr, "/api/v1/series").unwrap();
    let mut listed: Vec<&str> = (listed["series"].as_array().unwrap().iter())
        .map(|s| s.as_str().unwrap())
        .collect();
    listed.sort_unstable();
    let mut expected = vec![&gauge, &counter, &delta, &p50, &p99, &sum, &count];
    expected.extend(histograms.iter().map(|h| &h.1));
    expected.sort_unstable();
    assert_eq!(listed, expected, "a histogram is one series");

    // The gauge is exported with each of the two flushes, 1.2 s apart: one bucket, or two
    // when a minute ends between them.
    let gauge_max = values_of(addr, &gauge, "max", from);
    assert!(matches!(gauge_max[..], [7.5] | [7.5, 7.5]), "{gauge_max:?}");
    // The counter's first export is its baseline; the second carries the increase.
    assert_eq!(sum_of(addr, &counter, "total", from), Some(2.0));
    assert_eq!(sum_of(addr, &delta, "total", from), Some(100.0));
    assert_eq!(sum_of(addr, &p50, "max", from), Some(0.5));
    assert_eq!(sum_of(addr, &p99, "max", from), Some(1.25));
    assert_eq!(sum_of(addr, &count, "total", from), Some(6.0));
    assert_eq!(sum_of(addr, &sum, "total", from), Some(5.5));

    // PromQL reads the names as Prometheus' OTLP receiver gives them (an instant selector
    // answers the latest whole bucket: asked after the summary's minute ends).
    let path = format!(
        "/prometheus/api/v1/query?query=rpc_latency_seconds%7Bquantile%3D%220.99%22%7D&time={}",
        unix_now() + 90
    );
    let answer = http::get_json(addr, &path).unwrap();
    assert_eq!(answer["data"]["result"][0]["value"][1], "1.25", "{answer}");
    assert_eq!(
        answer["data"]["result"][0]["metric"]["job"], "otlp-test",
        "{answer}"
    );

    for (instrument, series, explicit, cumulative) in &histograms {
        let raw: Vec<f64> = (said["recorded"][instrument].as_array().unwrap().iter())
            .map(|v| v.as_f64().unwrap())
            .collect();
        let bounds: Option<Vec<f64>> = explicit.then(|| {
            (said["bounds"][instrument].as_array().unwrap().iter())
                .map(|v| v.as_f64().unwrap())
                .collect()
        });
        check_distribution(addr, series, &raw, bounds.as_deref(), *cumulative, from);
    }

    // Nothing was refused.
    let (status, metrics) = http::request(addr, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    let refused: Vec<&str> = (metrics.lines())
        .filter(|l| l.starts_with("tierdb_samples_rejected_total{") && !l.ends_with(" 0"))
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
    server.terminate(Duration::from_secs(30));
}

/// The nearest-rank quantile of `values`.
fn nearest_rank(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Reads the distribution `series` back over HTTP, one histogram over everything since
/// `from`, against `raw`, every value the SDK recorded into it: count and sum exact (the
/// values are whole numbers), min and max exact for delta points, and p50, p90 and p99
/// within docs/otlp.md's error: the stated relative error of the value of that rank for an
/// exponential histogram; for an explicit one (of `bounds`), half the width of the bucket
/// holding that value (the whole width of an open one, from the least value to the first
/// bound or from the last bound to the greatest) plus the stated error, the answer naming
/// the series as one of explicit buckets.
fn check_distribution(
    addr: std::net::SocketAddr,
    series: &str,
    raw: &[f64],
    bounds: Option<&[f64]>,
    cumulative: bool,
    from: i64,
) {
    // An aggregate of the one series folds the range (a query answers per bucket).
    let query = |display: &str| {
        let path = format!(
            "/api/v1/aggregate?match={}&tier=1m&range=whole&from={from}&to={}&display={display}",
            http::percent_encode(series),
            unix_now() + 120
        );
        http::get_json(addr, &path).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let answer = query("hist");
    assert_eq!(answer["groups"][0]["series"], 1, "{series}: {answer}");
    let shown = &answer["groups"][0]["histograms"][0][1];
    assert_eq!(shown["count"], raw.len(), "{series}: {answer}");
    assert_eq!(shown["sum"], raw.iter().sum::<f64>(), "{series}: {answer}");
    let counted: u64 = (shown["buckets"].as_array().unwrap().iter())
        .map(|b| b[2].as_u64().unwrap())
        .sum::<u64>()
        + shown["zero_count"].as_u64().unwrap();
    assert_eq!(counted, raw.len() as u64, "{series}: {answer}");
    let least = raw.iter().copied().fold(f64::INFINITY, f64::min);
    let greatest = raw.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !cumulative {
        assert_eq!(shown["min"], least, "{series}: {answer}");
        assert_eq!(shown["max"], greatest, "{series}: {answer}");
    }
    for q in [50, 90, 99] {
        let answer = query(&format!("p{q}"));
        let got = answer["groups"][0]["points"][0][1]
            .as_f64()
            .expect("a quantile");
        let stated = answer["relative_error"].as_f64().expect("a stated error");
        let explicit_buckets = answer["explicit_buckets"].as_u64().unwrap_or(0);
        assert_eq!(
            explicit_buckets,
            u64::from(bounds.is_some()),
            "{series}: {answer}"
        );
        let want = nearest_rank(raw, f64::from(q) / 100.0);
        let allowed = match bounds {
            None => stated * want,
            Some(bounds) => {
                let k = bounds.partition_point(|&b| b < want);
                let low = if k == 0 { least } else { bounds[k - 1] };
                let high = if k == bounds.len() {
                    greatest
                } else {
                    bounds[k]
                };
                let between_bounds = k > 0 && k < bounds.len();
                let width = if between_bounds {
                    (high - low) / 2.0
                } else {
                    high - low
                };
                width + stated * high.abs().max(low.abs())
            }
        };
        assert!(
            (got - want).abs() <= allowed,
            "{series} p{q}: {got} vs {want}, allowed {allowed}: {answer}"
        );
    }
}

fn attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(AttributeValue::StringValue(value.into())),
        }),
    }
}

/// A request of one gauge point `value` at unix second `ts`, from service `svc`.
fn gauge_request(value: f64, ts: i64) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![attribute("service.name", "svc")],
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope::default()),
                metrics: vec![Metric {
                    name: "temperature".into(),
                    unit: "Cel".into(),
                    data: Some(Data::Gauge(Gauge {
                        data_points: vec![NumberDataPoint {
                            attributes: vec![attribute("room", "a")],
                            time_unix_nano: ts as u64 * 1_000_000_000,
                            value: Some(NumberValue::AsDouble(value)),
                            flags: 0,
                        }],
                    })),
                }],
            }],
        }],
    }
}

/// An OTLP/JSON request of one monotonic delta sum `name` in `unit` from service `cl`, with
/// `(unix second, value)` points: what the cluster test sends.
pub(crate) fn delta_sum_json(name: &str, unit: &str, points: &[(i64, i64)]) -> String {
    let points: Vec<String> = (points.iter())
        .map(|(ts, value)| {
            format!(
                r#"{{"timeUnixNano":"{}","asInt":"{value}"}}"#,
                ts * 1_000_000_000
            )
        })
        .collect();
    format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"cl"}}}}]}},
        "scopeMetrics":[{{"metrics":[{{"name":"{name}","unit":"{unit}","sum":{{"aggregationTemporality":1,
        "isMonotonic":true,"dataPoints":[{}]}}}}]}}]}}]}}"#,
        points.join(",")
    )
}

const TOKEN: &str = "otlp-token";

fn post(
    server: &TestServer,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Option<String>, Vec<u8>) {
    let auth = format!("Bearer {TOKEN}");
    let mut all = vec![("Authorization", auth.as_str())];
    all.extend_from_slice(headers);
    http::request_bytes(server.http, "POST", "/v1/metrics", &all, body)
}

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(body).unwrap();
    encoder.finish().unwrap()
}

const PROTOBUF: (&str, &str) = ("Content-Type", "application/x-protobuf");
const JSON: (&str, &str) = ("Content-Type", "application/json");

#[test]
fn protobuf_gzip_and_json_land_and_answer_in_kind() {
    let server = TestServer::start(Some(TOKEN), Limits::default());
    let key = "temperature_celsius{job=svc,room=a}";
    // Protobuf, gzip: 200, an empty ExportMetricsServiceResponse in protobuf.
    let body = gzip(&gauge_request(21.5, NOW - 50).encode_to_vec());
    let (status, kind, answer) = post(&server, &[PROTOBUF, ("Content-Encoding", "gzip")], &body);
    assert_eq!(
        (status, kind.as_deref()),
        (200, Some("application/x-protobuf"))
    );
    assert_eq!(
        ExportMetricsServiceResponse::decode(&answer[..]).unwrap(),
        ExportMetricsServiceResponse::default()
    );
    assert_eq!(server.minute(key, NOW - 60, Display::Max), Some(21.5));

    // JSON with a stored point, a histogram point without its sum and a NaN: 200 with
    // partialSuccess, the count as a string, the reasons in the message; the good point
    // landed.
    let json = format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"svc"}}}}]}},
        "scopeMetrics":[{{"metrics":[
          {{"name":"temperature","unit":"Cel","gauge":{{"dataPoints":[
            {{"attributes":[{{"key":"room","value":{{"stringValue":"b"}}}}],"timeUnixNano":"{t}","asDouble":19}},
            {{"attributes":[{{"key":"room","value":{{"stringValue":"c"}}}}],"timeUnixNano":"{t}","asDouble":"NaN"}}]}}}},
          {{"name":"latency","unit":"s","histogram":{{"aggregationTemporality":2,"dataPoints":[
            {{"timeUnixNano":"{t}","count":"2","bucketCounts":["1","1"],"explicitBounds":[0.5]}}]}}}}]}}]}}]}}"#,
        t = (NOW - 50) * 1_000_000_000
    );
    let (status, kind, answer) = post(&server, &[JSON], json.as_bytes());
    assert_eq!((status, kind.as_deref()), (200, Some("application/json")));
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    let partial = &answer["partialSuccess"];
    assert_eq!(partial["rejectedDataPoints"], "2", "{answer}");
    let message = partial["errorMessage"].as_str().unwrap();
    assert!(
        message.contains("otlp_histogram_missing_sum 1"),
        "{message}"
    );
    assert!(message.contains("not_finite 1"), "{message}");
    assert!(message.contains("data point 2"), "{message}");
    assert_eq!(
        server.minute(
            "temperature_celsius{job=svc,room=b}",
            NOW - 60,
            Display::Max
        ),
        Some(19.0)
    );

    // The same partial success in protobuf.
    let mut histogram_only: ExportMetricsServiceRequest =
        tierdb::ingest::otlp::decode(json.as_bytes(), tierdb::ingest::otlp::Encoding::Json)
            .unwrap();
    histogram_only.resource_metrics[0].scope_metrics[0]
        .metrics
        .remove(0);
    let (status, _, answer) = post(&server, &[PROTOBUF], &histogram_only.encode_to_vec());
    assert_eq!(status, 200);
    let partial = ExportMetricsServiceResponse::decode(&answer[..])
        .unwrap()
        .partial_success
        .unwrap();
    assert_eq!(partial.rejected_data_points, 1);
    assert!(
        partial.error_message.contains("otlp_histogram_missing_sum"),
        "{partial:?}"
    );
}

#[test]
fn bad_requests_answer_a_status_in_the_request_encoding() {
    let limits = Limits {
        max_body: 4096,
        ..Limits::default()
    };
    let server = TestServer::start(Some(TOKEN), limits);
    let status_of = |answer: &[u8]| Status::decode(answer).unwrap();

    let (status, kind, answer) = post(&server, &[PROTOBUF], b"\xff\xff\xff\xff");
    assert_eq!(
        (status, kind.as_deref()),
        (400, Some("application/x-protobuf"))
    );
    let decoded = status_of(&answer);
    assert_eq!(decoded.code, 3);
    assert!(
        decoded
            .message
            .contains("not a protobuf ExportMetricsServiceRequest"),
        "{decoded:?}"
    );

    let (status, kind, answer) = post(&server, &[JSON], b"{\"resourceMetrics\": 5}");
    assert_eq!((status, kind.as_deref()), (400, Some("application/json")));
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["code"], 3);
    assert!(
        answer["message"].as_str().unwrap().contains("OTLP/JSON"),
        "{answer}"
    );

    let (status, _, answer) = post(&server, &[("Content-Type", "text/plain")], b"x");
    assert_eq!(status, 415, "{}", String::from_utf8_lossy(&answer));

    let (status, _, answer) = post(
        &server,
        &[PROTOBUF, ("Content-Encoding", "gzip")],
        b"not gzip at all",
    );
    assert_eq!(status, 400);
    assert!(status_of(&answer).message.contains("gzip"));

    // Past the body limit as sent, and once inflated (a small bomb).
    let (status, _, answer) = post(&server, &[PROTOBUF], &vec![0u8; 5000]);
    assert_eq!(status, 413);
    assert_eq!(status_of(&answer).code, 8);
    let bomb = gzip(&vec![0u8; 1 << 20]);
    assert!(bomb.len() < 4096);
    let (status, _, _) = post(&server, &[PROTOBUF, ("Content-Encoding", "gzip")], &bomb);
    assert_eq!(status, 413);

    // A write path: no token, no write.
    let body = gauge_request(1.0, NOW - 50).encode_to_vec();
    let (status, _, _) =
        http::request_bytes(server.http, "POST", "/v1/metrics", &[PROTOBUF], &body);
    assert_eq!(status, 401);
    let query = tierdb::Query::new("temperature_celsius{job=svc,room=a}", NOW - 60, NOW);
    assert!(server.engine.query(&query).is_err(), "no series was made");
}
