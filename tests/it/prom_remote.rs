//! Prometheus remote write over real HTTP into a server in the test process: requests built
//! as Prometheus builds them (protobuf, snappy), gauges and counters landing as such, resets,
//! staleness markers, refused series, malformed bodies, the `/api/v1/write` alias and the
//! bearer token. The real Prometheus is in `prometheus.rs`.

use prost::Message;
use serde_json::Value;
use tierdb::ingest::prom_remote::{Label, PromSample, TimeSeries, WriteRequest, STALE_NAN};
use tierdb::server::Limits;
use tierdb::{Display, SeriesKind};

use crate::common::NOW;
use crate::support::server::TestServer;

const TOKEN: &str = "s3cret";

/// A series of `labels` (`__name__` included) with `(value, unix ms)` samples.
pub(crate) fn series(labels: &[(&str, &str)], samples: &[(f64, i64)]) -> TimeSeries {
    TimeSeries {
        labels: labels
            .iter()
            .map(|(k, v)| Label {
                name: k.as_bytes().to_vec().into(),
                value: v.as_bytes().to_vec().into(),
            })
            .collect(),
        samples: samples
            .iter()
            .map(|&(value, timestamp)| PromSample { value, timestamp })
            .collect(),
        histograms: vec![],
    }
}

pub(crate) fn body(timeseries: Vec<TimeSeries>) -> Vec<u8> {
    let request = WriteRequest {
        timeseries,
        metadata: vec![],
    };
    snap::raw::Encoder::new()
        .compress_vec(&request.encode_to_vec())
        .unwrap()
}

/// POSTs `body` as Prometheus does (its headers, the token) to `path`.
fn post(server: &TestServer, path: &str, body: &[u8]) -> (u16, String) {
    let auth = format!("Bearer {TOKEN}");
    server.request(
        "POST",
        path,
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "snappy"),
            ("X-Prometheus-Remote-Write-Version", "0.1.0"),
            ("Authorization", &auth),
        ],
        body,
    )
}

fn ms(ts: i64) -> i64 {
    ts * 1000
}

/// The minute before [`NOW`], where these tests write.
fn minute(server: &TestServer, key: &str, display: Display) -> Option<f64> {
    server.minute(key, NOW - 60, display)
}

#[test]
fn remote_write_lands_gauges_and_counters() {
    let server = TestServer::start(Some(TOKEN), Limits::default());
    let memory = [
        ("__name__", "node_memory_MemAvailable_bytes"),
        ("instance", "a:9100"),
        ("job", "node"),
    ];
    let requests = [
        ("__name__", "http_requests_total"),
        ("code", "200"),
        ("job", "api"),
    ];
    let gone = [("__name__", "gone"), ("job", "x")];
    let t0 = NOW - 60;
    let first = body(vec![
        series(&memory, &[(1000.0, ms(t0) + 999)]),
        series(&requests, &[(100.0, ms(t0))]),
    ]);

    // The token applies, as Prometheus' `authorization: credentials` sends it.
    let (status, _) = server.request("POST", "/api/v1/prom/write", &[], &first);
    assert_eq!(status, 401);
    let (status, answer) = post(&server, "/api/v1/prom/write", &first);
    assert_eq!(status, 204, "{answer}");

    // Later samples; a staleness marker is skipped and counted, not an error. The same
    // endpoint answers at /api/v1/write for a protobuf body.
    let second = body(vec![
        series(&memory, &[(2000.0, ms(t0 + 15))]),
        series(&requests, &[(130.0, ms(t0 + 15)), (160.0, ms(t0 + 30))]),
        series(&gone, &[(f64::from_bits(STALE_NAN), ms(t0 + 15))]),
    ]);
    let (status, answer) = post(&server, "/api/v1/write", &second);
    assert_eq!(status, 204, "{answer}");
    // A reset: 160 -> 10 counts 10, never a negative increase.
    let reset = body(vec![series(&requests, &[(10.0, ms(t0 + 45))])]);
    assert_eq!(post(&server, "/api/v1/prom/write", &reset).0, 204);

    let counter = "http_requests_total{code=200,job=api}";
    let gauge = "node_memory_MemAvailable_bytes{instance=a:9100,job=node}";
    let id = server.engine.registry().get(counter).unwrap();
    assert_eq!(server.engine.series_kind(id), SeriesKind::Counter);
    let id = server.engine.registry().get(gauge).unwrap();
    assert_eq!(server.engine.series_kind(id), SeriesKind::Gauge);
    assert_eq!(
        minute(&server, counter, Display::Total),
        Some(30.0 + 30.0 + 10.0)
    );
    assert_eq!(minute(&server, gauge, Display::Avg), Some(1500.0));
    assert_eq!(minute(&server, gauge, Display::Count), Some(2.0));
    assert!(server.engine.registry().get("gone{job=x}").is_none());
    let auth = format!("Bearer {TOKEN}");
    let (_, metrics) = server.request("GET", "/metrics", &[("Authorization", &auth)], b"");
    assert!(
        metrics.contains("tierdb_samples_rejected_total{reason=\"stale_marker\"} 1"),
        "{metrics}"
    );

    // A JSON body at /api/v1/write is still a JSON write.
    let json = format!(r#"[{{"series":"j","ts":{t0},"value":1}}]"#);
    let (status, answer) = server.request(
        "POST",
        "/api/v1/write",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        json.as_bytes(),
    );
    assert_eq!(status, 204, "{answer}");
    assert!(server.engine.registry().get("j").is_some());
}

#[test]
fn bad_series_are_refused_by_reason_and_the_rest_lands() {
    let server = TestServer::start(Some(TOKEN), Limits::default());
    let t0 = NOW - 60;
    let request = body(vec![
        series(&[("job", "nameless")], &[(1.0, ms(t0)), (2.0, ms(t0 + 1))]),
        series(&[("__name__", "ok_metric")], &[(5.0, ms(t0))]),
        series(&[("__name__", "nan_metric")], &[(f64::NAN, ms(t0))]),
        series(&[("__name__", "ancient")], &[(1.0, 0)]),
    ]);
    let (status, answer) = post(&server, "/api/v1/prom/write", &request);
    assert_eq!(status, 400, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["accepted"], 1, "{answer}");
    assert_eq!(
        answer["rejected_by_reason"],
        serde_json::json!({"missing_metric_name": 2, "not_finite": 1, "too_old": 1}),
        "{answer}"
    );
    assert_eq!(
        answer["errors"][0]["line"], 1,
        "the series' position: {answer}"
    );
    assert_eq!(minute(&server, "ok_metric", Display::Total), Some(5.0));

    // Bodies that are no WriteRequest: 400, which Prometheus does not retry.
    for bad in [
        &b"not snappy"[..],
        &snap::raw::Encoder::new().compress_vec(b"\x0a\xff").unwrap(),
    ] {
        let (status, answer) = post(&server, "/api/v1/prom/write", bad);
        assert_eq!(status, 400, "{answer}");
        assert!(answer.contains("body is not"), "{answer}");
    }
}

#[test]
fn bodies_over_the_limit_are_refused_before_decompressing() {
    let limits = Limits {
        max_body: 64 * 1024,
        ..Limits::default()
    };
    let server = TestServer::start(Some(TOKEN), limits);
    // Compresses to a few KiB, decompresses past the limit.
    let long_value = "x".repeat(8000);
    let many: Vec<TimeSeries> = (0..20)
        .map(|i| {
            let name = format!("m{i}");
            series(
                &[("__name__", name.as_str()), ("v", long_value.as_str())],
                &[(1.0, ms(NOW - 60))],
            )
        })
        .collect();
    let request = body(many);
    assert!(request.len() < 64 * 1024);
    let (status, answer) = post(&server, "/api/v1/prom/write", &request);
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("more than the limit"), "{answer}");
    // Past the body limit itself: 413 at either path.
    let huge = vec![0u8; 65 * 1024];
    assert_eq!(post(&server, "/api/v1/prom/write", &huge).0, 413);
    assert_eq!(post(&server, "/api/v1/write", &huge).0, 413);
}
