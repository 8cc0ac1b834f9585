//! OTLP histograms as distributions, over real HTTP into a server in the test process
//! (its clock at NOW, so the server started at NOW): explicit and exponential points, delta
//! and cumulative, read back with `display=hist` and `display=pNN`; a cumulative series'
//! increases, its reset by a new start time and by a lower count, its baseline when it
//! started before the server; and each refusal under its reason, the rest of the request
//! written.

use prost::Message;
use serde_json::Value;
use tierdb::ingest::otlp::proto::{
    AnyValue, Buckets, Data, ExponentialHistogram, ExponentialHistogramDataPoint,
    ExportMetricsServiceRequest, ExportMetricsServiceResponse, Histogram, HistogramDataPoint,
    KeyValue, Metric, Resource, ResourceMetrics, ScopeMetrics, Value as AttributeValue, CUMULATIVE,
    DELTA,
};
use tierdb::server::Limits;

use crate::common::NOW;
use crate::support::http;
use crate::support::server::TestServer;

const SECOND: u64 = 1_000_000_000;

fn ns(seconds: i64) -> u64 {
    seconds as u64 * SECOND
}

/// A request of the metrics `(name, data)` in milliseconds from service `svc`.
fn request(metrics: Vec<(&str, Data)>) -> Vec<u8> {
    let service = KeyValue {
        key: "service.name".into(),
        value: Some(AnyValue {
            value: Some(AttributeValue::StringValue("svc".into())),
        }),
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![service],
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: None,
                metrics: (metrics.into_iter())
                    .map(|(name, data)| Metric {
                        name: name.into(),
                        unit: "ms".into(),
                        data: Some(data),
                    })
                    .collect(),
            }],
        }],
    }
    .encode_to_vec()
}

/// An explicit point over bounds 10, 100, 1000 of `values`, counted since `start`.
fn explicit(start: i64, at: i64, values: &[f64]) -> HistogramDataPoint {
    let bounds = vec![10.0, 100.0, 1000.0];
    let mut counts = vec![0; 4];
    for &v in values {
        counts[bounds.partition_point(|&b| b < v)] += 1;
    }
    HistogramDataPoint {
        start_time_unix_nano: ns(start),
        time_unix_nano: ns(at),
        count: values.len() as u64,
        sum: Some(values.iter().sum()),
        bucket_counts: counts,
        explicit_bounds: bounds,
        min: values.iter().copied().reduce(f64::min),
        max: values.iter().copied().reduce(f64::max),
        ..HistogramDataPoint::default()
    }
}

fn explicit_data(temporality: i32, points: Vec<HistogramDataPoint>) -> Data {
    Data::Histogram(Histogram {
        data_points: points,
        aggregation_temporality: temporality,
    })
}

/// An exponential point of `values` (all positive) at `scale`, counted since `start`: each
/// value in OTLP's bucket `ceil(log2(v) × 2^scale) - 1`.
fn exponential(start: i64, at: i64, scale: i32, values: &[f64]) -> ExponentialHistogramDataPoint {
    let index = |v: f64| ((v.log2() * 2f64.powi(scale)).ceil() as i32) - 1;
    let offset = values.iter().map(|&v| index(v)).min().unwrap_or(0);
    let last = values.iter().map(|&v| index(v)).max().unwrap_or(0);
    let mut counts = vec![0; (last - offset + 1) as usize];
    for &v in values {
        counts[(index(v) - offset) as usize] += 1;
    }
    ExponentialHistogramDataPoint {
        start_time_unix_nano: ns(start),
        time_unix_nano: ns(at),
        count: values.len() as u64,
        sum: Some(values.iter().sum()),
        scale,
        positive: Some(Buckets {
            offset,
            bucket_counts: counts,
        }),
        min: values.iter().copied().reduce(f64::min),
        max: values.iter().copied().reduce(f64::max),
        ..ExponentialHistogramDataPoint::default()
    }
}

fn exponential_data(temporality: i32, points: Vec<ExponentialHistogramDataPoint>) -> Data {
    Data::ExponentialHistogram(ExponentialHistogram {
        data_points: points,
        aggregation_temporality: temporality,
    })
}

/// Posts a protobuf request; the answer's partial success (rejected points and message),
/// none when everything landed.
fn post(server: &TestServer, body: &[u8]) -> Option<(i64, String)> {
    let headers = [("Content-Type", "application/x-protobuf")];
    let (status, _, answer) =
        http::request_bytes(server.http, "POST", "/v1/metrics", &headers, body);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let answer = ExportMetricsServiceResponse::decode(&answer[..]).unwrap();
    (answer.partial_success).map(|p| (p.rejected_data_points, p.error_message))
}

/// The range every read covers: the hour around NOW.
fn range() -> String {
    format!("tier=1m&range=whole&from={}&to={}", NOW - 3600, NOW + 3600)
}

/// `display=hist` of `series` over [`range`], folded into one histogram (an aggregate of
/// the one series: a query answers a histogram per bucket).
fn hist(server: &TestServer, series: &str) -> Value {
    let answer = server.json(&format!(
        "/api/v1/aggregate?match={}&display=hist&{}",
        http::percent_encode(series),
        range()
    ));
    answer["groups"][0]["histograms"][0][1].clone()
}

/// `display=p{q}` of `series` over [`range`]: the value and the stated relative error.
fn quantile(server: &TestServer, series: &str, q: u32) -> (f64, f64) {
    let answer = server.json(&format!(
        "/api/v1/aggregate?match={}&display=p{q}&{}",
        http::percent_encode(series),
        range()
    ));
    let value = answer["groups"][0]["points"][0][1].as_f64();
    let stated = answer["relative_error"].as_f64();
    (value.expect("a quantile"), stated.expect("a stated error"))
}

/// The nearest-rank quantile of `values`.
fn exact(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[test]
fn cumulative_explicit_histograms_write_their_increases_and_resets() {
    let server = TestServer::start(None, Limits::default());
    server.clock.set(NOW + 1200);
    let series = "latency_milliseconds{job=svc}";
    let start = NOW + 5;
    // The series started after the server: its first point counted whole.
    let first = [5.0, 50.0, 60.0];
    let points = vec![explicit(start, start + 60, &first)];
    assert_eq!(
        post(
            &server,
            &request(vec![("latency", explicit_data(CUMULATIVE, points))])
        ),
        None
    );
    // Then its increase: two values more.
    let second = [5.0, 50.0, 60.0, 500.0, 20.0];
    let points = vec![explicit(start, start + 120, &second)];
    assert_eq!(
        post(
            &server,
            &request(vec![("latency", explicit_data(CUMULATIVE, points))])
        ),
        None
    );
    let shown = hist(&server, series);
    assert_eq!(shown["count"], 5, "{shown}");
    assert_eq!(shown["sum"], 635.0, "{shown}");

    // The same point again: refused, not counted twice.
    let points = vec![explicit(start, start + 120, &second)];
    let refused = post(
        &server,
        &request(vec![("latency", explicit_data(CUMULATIVE, points))]),
    );
    let (rejected, message) = refused.expect("refused");
    assert_eq!(rejected, 1);
    assert!(
        message.contains("otlp_histogram_out_of_order 1"),
        "{message}"
    );

    // A reset by a new start time: counted whole.
    let restarted = [7.0, 2000.0];
    let points = vec![explicit(start + 150, start + 180, &restarted)];
    assert_eq!(
        post(
            &server,
            &request(vec![("latency", explicit_data(CUMULATIVE, points))])
        ),
        None
    );
    // A reset by a lower count under the same start: counted whole.
    let lower = [8.0];
    let points = vec![explicit(start + 150, start + 240, &lower)];
    assert_eq!(
        post(
            &server,
            &request(vec![("latency", explicit_data(CUMULATIVE, points))])
        ),
        None
    );

    let all: Vec<f64> = second
        .iter()
        .chain(&restarted)
        .chain(&lower)
        .copied()
        .collect();
    let shown = hist(&server, series);
    assert_eq!(shown["count"], all.len(), "{shown}");
    assert_eq!(shown["sum"], all.iter().sum::<f64>(), "{shown}");
    // Each value is answered within half its explicit bucket's width (the whole width of
    // an open one, running to the least or greatest value) plus the scale's error.
    let bounds = [10.0, 100.0, 1000.0];
    for q in [10, 50, 90, 99] {
        let (got, stated) = quantile(&server, series, q);
        let want = exact(&all, f64::from(q) / 100.0);
        let k = bounds.partition_point(|&b| b < want);
        let low = if k == 0 { 5.0 } else { bounds[k - 1] };
        let high = if k == bounds.len() { 2000.0 } else { bounds[k] };
        let width = if k > 0 && k < bounds.len() {
            (high - low) / 2.0
        } else {
            high - low
        };
        assert!(
            (got - want).abs() <= width + stated * high,
            "p{q}: {got} vs {want} in ({low}, {high}]"
        );
    }
}

/// An explicit-bucket histogram's quantiles are within its buckets' widths, which the
/// scale's `relative_error` does not bound: every answer reading one says so (the count of
/// such series and a note; a warning in PromQL), and one of exponential buckets does not.
#[test]
fn answers_over_explicit_buckets_name_their_error_beside_the_scales() {
    let server = TestServer::start(None, Limits::default());
    server.clock.set(NOW + 1200);
    let values = [5.0, 50.0, 60.0, 500.0];
    let metrics = vec![
        (
            "latency",
            explicit_data(DELTA, vec![explicit(0, NOW + 10, &values)]),
        ),
        (
            "wait",
            exponential_data(DELTA, vec![exponential(0, NOW + 10, 5, &values)]),
        ),
    ];
    assert_eq!(post(&server, &request(metrics)), None);
    let p99 = |path: &str, target: &str| {
        server.json(&format!(
            "/api/v1/{path}{}&display=p99&{}",
            http::percent_encode(target),
            range()
        ))
    };

    for answer in [
        p99("aggregate?match=", "latency_milliseconds"),
        p99(
            "query?series=",
            "latency_milliseconds{job=svc,otel_buckets=explicit}",
        ),
    ] {
        assert_eq!(answer["explicit_buckets"], 1, "{answer}");
        let note = answer["note"].as_str().unwrap_or_default();
        assert!(note.contains("explicit bucket holding it"), "{answer}");
        assert!(answer["relative_error"].is_f64(), "{answer}");
    }
    // Both series in one aggregate: the one of explicit buckets is counted.
    let both = p99("aggregate?match=", "*_milliseconds");
    assert_eq!(both["groups"][0]["series"], 2, "{both}");
    assert_eq!(both["explicit_buckets"], 1, "{both}");
    let exponential = p99("aggregate?match=", "wait_milliseconds");
    assert!(
        exponential.get("explicit_buckets").is_none(),
        "{exponential}"
    );
    assert!(exponential.get("note").is_none(), "{exponential}");

    let promql = |query: &str| {
        server.json(&format!(
            "/prometheus/api/v1/query?query={}&time={}",
            http::percent_encode(query),
            NOW + 300
        ))
    };
    let answer = promql("histogram_quantile(0.99, sum(rate(latency_milliseconds[5m])))");
    let warnings = answer["warnings"].to_string();
    assert!(warnings.contains("otel_buckets=explicit"), "{answer}");
    let answer = promql("histogram_quantile(0.99, sum(rate(wait_milliseconds[5m])))");
    assert!(answer.get("warnings").is_none(), "{answer}");

    // A Graphite render of the series' StatsD timer path `upper_90` (an estimate): the
    // explicit one's answer counts it in its own header beside the scale's bound.
    let render = |path: &str| {
        let target = http::percent_encode(path);
        let query = format!(
            "/render?target={target}&from={}&until={}&format=json",
            NOW - 3600,
            NOW + 3600
        );
        let (status, explicit, body) =
            http::get_with_header(server.http, &query, "x-tierdb-explicit-buckets");
        assert_eq!(status, 200, "{query}: {body}");
        assert!(body.contains("upper_90"), "{query}: {body}");
        explicit
    };
    let path = "latency_milliseconds.upper_90;job=svc;otel_buckets=explicit";
    assert_eq!(render(path).as_deref(), Some("1"));
    assert_eq!(render("wait_milliseconds.upper_90;job=svc"), None);
}

#[test]
fn exponential_histograms_keep_their_scale_and_counts() {
    let server = TestServer::start(None, Limits::default());
    server.clock.set(NOW + 1200);
    let values: Vec<f64> = (1..=200).map(|k| f64::from(k * k) / 4.0).collect();
    // Delta points at scale 5, in two requests: added.
    let (a, b) = values.split_at(120);
    let delta = |at, part: &[f64]| exponential_data(DELTA, vec![exponential(0, at, 5, part)]);
    assert_eq!(
        post(&server, &request(vec![("wait", delta(NOW + 10, a))])),
        None
    );
    assert_eq!(
        post(&server, &request(vec![("wait", delta(NOW + 70, b))])),
        None
    );
    let series = "wait_milliseconds{job=svc}";
    let shown = hist(&server, series);
    assert_eq!(shown["count"], values.len(), "{shown}");
    assert_eq!(shown["sum"], values.iter().sum::<f64>(), "{shown}");
    assert_eq!(shown["min"], 0.25, "{shown}");
    assert_eq!(shown["max"], 10_000.0, "{shown}");
    assert!(shown["scale"].as_i64().unwrap() <= 5, "{shown}");
    for q in [50, 90, 99] {
        let (got, stated) = quantile(&server, series, q);
        let want = exact(&values, f64::from(q) / 100.0);
        assert!(
            (got - want).abs() <= stated * want,
            "p{q}: {got} vs {want} ({stated})"
        );
    }

    // Scale 14 is reduced to 8; cumulative, started before the server: a baseline, then
    // the increase.
    let fine = "fine_milliseconds{job=svc}";
    let cumulative = |at, part: &[f64]| {
        exponential_data(CUMULATIVE, vec![exponential(NOW - 3600, at, 14, part)])
    };
    assert_eq!(
        post(&server, &request(vec![("fine", cumulative(NOW + 10, a))])),
        None
    );
    let (status, _) = server.get(&format!(
        "/api/v1/query?series={}&display=hist&{}",
        http::percent_encode(fine),
        range()
    ));
    assert_eq!(status, 404, "a baseline writes nothing");
    assert_eq!(
        post(
            &server,
            &request(vec![("fine", cumulative(NOW + 70, &values))])
        ),
        None
    );
    let shown = hist(&server, fine);
    assert_eq!(shown["count"], b.len(), "{shown}");
    assert_eq!(shown["sum"], b.iter().sum::<f64>(), "{shown}");
    assert!(shown["scale"].as_i64().unwrap() <= 8, "{shown}");
}

#[test]
fn histograms_tierdb_cannot_keep_are_refused_with_their_reason() {
    let server = TestServer::start(None, Limits::default());
    let coarse = exponential_data(DELTA, vec![exponential(0, NOW - 30, -5, &[3.0, 70_000.0])]);
    let mut no_sum = explicit(0, NOW - 30, &[1.0, 20.0]);
    no_sum.sum = None;
    let no_bounds = HistogramDataPoint {
        time_unix_nano: ns(NOW - 30),
        count: 4,
        sum: Some(10.0),
        ..HistogramDataPoint::default()
    };
    let good = explicit(0, NOW - 30, &[3.0]);
    let body = request(vec![
        ("coarse", coarse),
        ("nosum", explicit_data(DELTA, vec![no_sum])),
        ("nobounds", explicit_data(DELTA, vec![no_bounds])),
        ("good", explicit_data(DELTA, vec![good])),
    ]);
    let (rejected, message) = post(&server, &body).expect("a partial success");
    assert_eq!(rejected, 3, "{message}");
    for reason in [
        "otlp_histogram_scale 1",
        "otlp_histogram_missing_sum 1",
        "otlp_histogram_no_bounds 1",
    ] {
        assert!(message.contains(reason), "{reason}: {message}");
    }
    let shown = hist(&server, "good_milliseconds{job=svc}");
    assert_eq!(shown["count"], 1, "{shown}");
    assert_eq!(shown["sum"], 3.0, "{shown}");
}
