//! Prometheus native histograms over remote write, into a server in the test process: a
//! counter histogram (with a client restart mid-way), a float counter histogram and a gauge
//! histogram, sent every 15 s as Prometheus sends them (spans and deltas, snappy), then read
//! back per minute over HTTP with `display=hist` and `display=p90`: counts, sums, the zero
//! bucket and every bucket exact (the observations between two scrapes land in the minute of
//! the later one; the first scrape is a baseline), p90 within the stated error of the exact
//! nearest-rank p90 of the observations. Refused histograms are counted by reason.

use prost::Message;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};
use serde_json::Value;
use tierdb::histogram::{lower_bound, upper_bound, Histogram};
use tierdb::ingest::prom_remote::native::{BucketSpan, NativeHistogram, RESET_GAUGE};
use tierdb::ingest::prom_remote::{Label, TimeSeries, WriteRequest, STALE_NAN};
use tierdb::server::Limits;
use tierdb::SeriesKind;

use crate::common::NOW;
use crate::support::server::TestServer;

/// The scale the clients record at (Prometheus' client default is 3).
const SCALE: i8 = 3;
/// Scrape interval, seconds.
const INTERVAL: i64 = 15;
/// Minutes checked.
const MINUTES: i64 = 3;
/// First minute checked.
const START: i64 = NOW - MINUTES * 60;

/// A client library's native histogram: what it has observed since it (re)started.
#[derive(Clone)]
pub(crate) struct Client {
    pub histogram: Histogram,
    pub sum: f64,
}

impl Client {
    pub(crate) fn new() -> Client {
        Client {
            histogram: Histogram::from_parts(SCALE, 2f64.powi(-128), 0, [], []).unwrap(),
            sum: 0.0,
        }
    }

    pub(crate) fn observe(&mut self, v: f64) {
        self.histogram.record(v);
        self.sum += v;
    }
}

/// Dyadic latencies (multiples of 1/256, so every sum is exact in f64), some zero, some
/// negative.
pub(crate) fn observation(rng: &mut rand::rngs::StdRng) -> f64 {
    let latency = LogNormal::new(2.0, 1.2).expect("valid");
    let v: f64 = (Distribution::<f64>::sample(&latency, rng) * 256.0).round() / 256.0;
    match rng.gen_range(0..20) {
        0 => 0.0,
        1 => -v,
        _ => v,
    }
}

/// Spans and deltas as Prometheus encodes them: a gap of up to two empty buckets stays in
/// the span as zero counts, a longer one starts a new span.
fn spans_and_deltas(buckets: &[(i32, u64)]) -> (Vec<BucketSpan>, Vec<i64>) {
    let (mut spans, mut deltas) = (Vec::<BucketSpan>::new(), Vec::new());
    let (mut next, mut previous) = (0i32, 0i64);
    for &(index, count) in buckets {
        let gap = index - next;
        if spans.is_empty() || gap > 2 {
            let offset = if spans.is_empty() { index } else { gap };
            spans.push(BucketSpan { offset, length: 0 });
        } else {
            for _ in 0..gap {
                spans.last_mut().unwrap().length += 1;
                deltas.push(-previous);
                previous = 0;
            }
        }
        spans.last_mut().unwrap().length += 1;
        deltas.push(count as i64 - previous);
        previous = count as i64;
        next = index + 1;
    }
    (spans, deltas)
}

/// `h` as an integer native histogram at `ms`.
pub(crate) fn integer(h: &Histogram, sum: f64, ms: i64, reset_hint: i32) -> NativeHistogram {
    let (positive_spans, positive_deltas) = spans_and_deltas(h.positive());
    let (negative_spans, negative_deltas) = spans_and_deltas(h.negative());
    NativeHistogram {
        count_int: Some(h.count()),
        sum,
        schema: i32::from(h.scale()),
        zero_threshold: h.zero_threshold(),
        zero_count_int: Some(h.zero_count()),
        positive_spans,
        positive_deltas,
        negative_spans,
        negative_deltas,
        reset_hint,
        timestamp: ms,
        ..Default::default()
    }
}

/// `h` as a float native histogram (absolute counts) at `ms`.
fn float(h: &Histogram, sum: f64, ms: i64) -> NativeHistogram {
    let spans = |list: &[(i32, u64)]| spans_and_deltas(list).0;
    NativeHistogram {
        count_float: Some(h.count() as f64),
        sum,
        schema: i32::from(h.scale()),
        zero_threshold: h.zero_threshold(),
        zero_count_float: Some(h.zero_count() as f64),
        positive_spans: spans(h.positive()),
        positive_counts: absolute(h.positive()),
        negative_spans: spans(h.negative()),
        negative_counts: absolute(h.negative()),
        timestamp: ms,
        ..Default::default()
    }
}

/// Every count the spans of `list` lay out, gaps included, as floats.
fn absolute(list: &[(i32, u64)]) -> Vec<f64> {
    let mut out = Vec::new();
    let mut next: Option<i32> = None;
    for &(index, count) in list {
        if let Some(n) = next {
            if index - n <= 2 {
                out.extend(std::iter::repeat_n(0.0, (index - n) as usize));
            }
        }
        out.push(count as f64);
        next = Some(index + 1);
    }
    out
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> Vec<Label> {
    pairs
        .iter()
        .map(|(k, v)| Label {
            name: k.as_bytes().to_vec().into(),
            value: v.as_bytes().to_vec().into(),
        })
        .collect()
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

fn post(server: &TestServer, body: &[u8]) -> (u16, String) {
    server.request(
        "POST",
        "/api/v1/write",
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "snappy"),
            ("X-Prometheus-Remote-Write-Version", "0.1.0"),
        ],
        body,
    )
}

/// What one series should hold in one minute.
#[derive(Clone)]
struct Expected {
    histogram: Histogram,
    sum: f64,
    values: Vec<f64>,
}

impl Expected {
    fn new() -> Expected {
        Expected {
            histogram: Client::new().histogram,
            sum: 0.0,
            values: Vec::new(),
        }
    }
}

/// The buckets `h` shows over HTTP, `[lower, upper, count]`, negative ones first.
fn shown(h: &Histogram) -> Vec<(f64, f64, u64)> {
    let scale = h.scale();
    let mut out: Vec<(f64, f64, u64)> = (h.negative().iter().rev())
        .map(|&(i, c)| (-upper_bound(i, scale), -lower_bound(i, scale), c))
        .collect();
    out.extend(
        (h.positive().iter()).map(|&(i, c)| (lower_bound(i, scale), upper_bound(i, scale), c)),
    );
    out
}

fn check_minutes(server: &TestServer, key: &str, expected: &[Expected]) {
    let hist = server.json(&format!(
        "/api/v1/query?series={}&display=hist&tier=1m&from={START}&to={NOW}",
        crate::support::http::percent_encode(key)
    ));
    let p90 = server.json(&format!(
        "/api/v1/query?series={}&display=p90&tier=1m&from={START}&to={NOW}",
        crate::support::http::percent_encode(key)
    ));
    let stated = p90["relative_error"].as_f64().expect("an error bound");
    for (minute, want) in expected.iter().enumerate() {
        let got: &Value = &hist["histograms"][minute][1];
        assert_eq!(
            got["count"],
            want.histogram.count(),
            "{key} minute {minute}: {got}"
        );
        assert_eq!(got["sum"].as_f64(), Some(want.sum), "{key} minute {minute}");
        let scale = got["scale"].as_i64().unwrap() as i8;
        let mut reduced = want.histogram.clone();
        reduced.reduce_to(scale);
        assert_eq!(
            got["zero_count"],
            reduced.zero_count(),
            "{key} minute {minute}"
        );
        let buckets: Vec<(f64, f64, u64)> = (got["buckets"].as_array().unwrap().iter())
            .map(|b| {
                (
                    b[0].as_f64().unwrap(),
                    b[1].as_f64().unwrap(),
                    b[2].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(buckets, shown(&reduced), "{key} minute {minute}");
        // p90 within the stated error of the exact nearest-rank p90.
        let mut values = want.values.clone();
        values.sort_by(f64::total_cmp);
        let rank = ((0.9 * values.len() as f64).ceil() as usize).clamp(1, values.len());
        let exact = values[rank - 1];
        let answered = p90["points"][minute][1].as_f64().expect("a p90");
        assert!(
            (answered - exact).abs() <= exact.abs() * stated,
            "{key} minute {minute}: p90 {answered}, exact {exact}, error bound {stated}"
        );
    }
}

#[test]
fn native_histograms_land_as_distributions_with_exact_counts_and_sums() {
    let server = TestServer::start(None, Limits::default());
    let mut rng = rand::rngs::StdRng::seed_from_u64(53);
    let counter = [("__name__", "rpc_duration_seconds"), ("job", "api")];
    let floats = [("__name__", "rpc_size_bytes"), ("job", "api")];
    let gauge = [("__name__", "queue_wait_seconds"), ("job", "api")];
    let (mut a, mut f) = (Client::new(), Client::new());
    let mut want_a = vec![Expected::new(); MINUTES as usize];
    let mut want_f = vec![Expected::new(); MINUTES as usize];
    let mut want_g = vec![Expected::new(); MINUTES as usize];
    // The first scrape, before the first minute, is a baseline; the client restarts after
    // the scrape at START + 75.
    for t in (START - INTERVAL..NOW).step_by(INTERVAL as usize) {
        let minute = (t - START).div_euclid(60);
        if t == START + 90 {
            a = Client::new();
        }
        let mut g = Client::new();
        for _ in 0..rng.gen_range(10..40) {
            let (va, vf, vg) = (
                observation(&mut rng),
                observation(&mut rng),
                observation(&mut rng),
            );
            a.observe(va);
            f.observe(vf);
            g.observe(vg);
            if minute >= 0 {
                let m = minute as usize;
                for (want, v) in [(&mut want_a, va), (&mut want_f, vf), (&mut want_g, vg)] {
                    want[m].histogram.record(v);
                    want[m].sum += v;
                    want[m].values.push(v);
                }
            }
        }
        if minute < 0 {
            // The gauge histogram of the baseline scrape is stored too: not sent.
            g = Client::new();
        }
        let ms = t * 1000 + 250;
        let mut sent = vec![
            TimeSeries {
                labels: labels(&counter),
                samples: vec![],
                histograms: vec![integer(&a.histogram, a.sum, ms, 0)],
            },
            TimeSeries {
                labels: labels(&floats),
                samples: vec![],
                histograms: vec![float(&f.histogram, f.sum, ms)],
            },
        ];
        if !g.histogram.is_empty() {
            sent.push(TimeSeries {
                labels: labels(&gauge),
                samples: vec![],
                histograms: vec![integer(&g.histogram, g.sum, ms, RESET_GAUGE)],
            });
        }
        let (status, answer) = post(&server, &body(sent));
        assert_eq!(status, 204, "scrape at {t}: {answer}");
    }
    for (key, want) in [
        ("rpc_duration_seconds{job=api}", &want_a),
        ("rpc_size_bytes{job=api}", &want_f),
        ("queue_wait_seconds{job=api}", &want_g),
    ] {
        let id = server.engine.registry().get(key).expect(key);
        assert_eq!(
            server.engine.series_kind(id),
            SeriesKind::Distribution,
            "{key}"
        );
        check_minutes(&server, key, want);
    }
}

#[test]
fn refused_native_histograms_are_counted_by_reason_and_the_rest_lands() {
    let server = TestServer::start(None, Limits::default());
    let mut client = Client::new();
    client.observe(1.5);
    let good = integer(
        &client.histogram,
        client.sum,
        (NOW - 30) * 1000,
        RESET_GAUGE,
    );
    let custom = NativeHistogram {
        schema: -53,
        custom_values: vec![0.1, 1.0],
        ..good.clone()
    };
    let fractional = NativeHistogram {
        count_float: Some(0.5),
        zero_count_float: Some(0.5),
        count_int: None,
        zero_count_int: None,
        positive_spans: vec![],
        positive_deltas: vec![],
        ..good.clone()
    };
    let finer = NativeHistogram {
        schema: 9,
        ..good.clone()
    };
    // A staleness marker: skipped and counted, not refused.
    let stale = NativeHistogram {
        sum: f64::from_bits(STALE_NAN),
        timestamp: (NOW - 20) * 1000,
        ..Default::default()
    };
    let series = |name: &str, h: NativeHistogram| TimeSeries {
        labels: labels(&[("__name__", name)]),
        samples: vec![],
        histograms: vec![h],
    };
    let (status, answer) = post(
        &server,
        &body(vec![
            series("custom", custom),
            series("fractional", fractional),
            series("finer", finer),
            series("gone", stale),
            series("good", good),
        ]),
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("3 line(s) or sample(s) refused"),
        "{answer}"
    );
    let (_, metrics) = server.get("/metrics");
    for reason in [
        "native_histogram_custom_buckets",
        "native_histogram_fractional_count",
        "native_histogram_schema",
        "stale_marker",
    ] {
        assert!(
            metrics.contains(&format!(
                "tierdb_samples_rejected_total{{reason=\"{reason}\"}} 1"
            )),
            "{reason}: {metrics}"
        );
    }
    let hist = server.json(&format!(
        "/api/v1/query?series=good&display=hist&tier=1m&from={}&to={NOW}",
        NOW - 60
    ));
    assert_eq!(hist["histograms"][0][1]["count"], 1, "{hist}");
    assert_eq!(hist["histograms"][0][1]["sum"], 1.5, "{hist}");
    assert!(server.engine.registry().get("gone").is_none());
}

/// `GET path` on `addr` as JSON, `None` unless it answers 200.
fn get_json(addr: std::net::SocketAddr, path: &str) -> Option<Value> {
    let (status, body) = crate::support::http::request(addr, "GET", path, &[], b"");
    (status == 200).then(|| serde_json::from_str(&body).unwrap())
}

/// The only result of the instant PromQL `query` at `time`.
fn promql(addr: std::net::SocketAddr, query: &str, time: i64) -> Value {
    let path = format!(
        "/api/v1/query?query={}&time={time}",
        crate::support::http::percent_encode(query)
    );
    let answer = get_json(addr, &path).unwrap_or_else(|| panic!("{query}: no answer"));
    only_result(&answer, query)
}

/// The only result of a PromQL `answer` to `query`.
fn only_result(answer: &Value, query: &str) -> Value {
    let result = &answer["data"]["result"];
    assert_eq!(
        result.as_array().map(Vec::len),
        Some(1),
        "{query}: {answer}"
    );
    result[0].clone()
}

/// The real Prometheus 2.42 (TSDB, native histograms and the remote write receiver on)
/// receives the same remote write requests as tierdb: two counter histograms, one of them
/// restarting mid-way, sampled every 15 s from 15 s before a 5-minute window. Prometheus'
/// `increase(x[5m])` at the window's last sample (first sample on the range's start, so no
/// extrapolation) equals the histogram tierdb stores for those 5 minutes: count, sum and
/// every bucket, exactly, and both equal what the client observed.
#[test]
fn prometheus_agrees_on_native_histogram_increases() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use crate::support::file;
    use crate::support::process::{ensure_programs, Proc};

    let prometheus = std::env::var_os("PROMETHEUS")
        .map_or_else(|| "/usr/bin/prometheus".into(), std::path::PathBuf::from);
    if !ensure_programs(&[&prometheus], "prometheus") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 1m\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = tmp.path().join("prometheus.stderr");
    let mut process = Proc::spawn(
        "prometheus",
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                tmp.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--enable-feature=native-histograms")
            .arg("--web.enable-remote-write-receiver")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file(&log)),
        vec![log],
        false,
    );
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let started = Instant::now();
    while std::net::TcpStream::connect(addr).is_err()
        || crate::support::http::request(addr, "GET", "/-/ready", &[], b"").0 != 200
    {
        process.assert_running();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "prometheus never became ready\n{}",
            process.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let server = TestServer::start(None, Limits::default());
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    // Two instances of one histogram.
    let names = ["api1", "api2"];
    let mut clients = [Client::new(), Client::new()];
    let mut wants = [Expected::new(), Expected::new()];
    // The window [window, window + 300), one 5m bucket in tierdb; Prometheus' range
    // [window - 15, window + 285].
    let window = NOW - 600;
    for t in (window - INTERVAL..window + 300).step_by(INTERVAL as usize) {
        // The second client restarts once, in the middle of the window.
        if t == window + 150 {
            clients[1] = Client::new();
        }
        let mut sent = Vec::new();
        for (s, client) in clients.iter_mut().enumerate() {
            for _ in 0..rng.gen_range(5..30) {
                let v = observation(&mut rng);
                client.observe(v);
                if t >= window {
                    wants[s].histogram.record(v);
                    wants[s].sum += v;
                }
            }
            sent.push(TimeSeries {
                labels: labels(&[
                    ("__name__", "rpc_duration_seconds"),
                    ("instance", names[s]),
                    ("job", "api"),
                ]),
                samples: vec![],
                histograms: vec![integer(&client.histogram, client.sum, t * 1000, 0)],
            });
        }
        let sent = body(sent);
        let (status, answer) = post(&server, &sent);
        assert_eq!(status, 204, "tierdb, scrape at {t}: {answer}");
        let (status, answer) = crate::support::http::request(
            addr,
            "POST",
            "/api/v1/write",
            &[
                ("Content-Type", "application/x-protobuf"),
                ("Content-Encoding", "snappy"),
                ("X-Prometheus-Remote-Write-Version", "0.1.0"),
            ],
            &sent,
        );
        assert_eq!(status, 204, "prometheus, scrape at {t}: {answer}");
    }

    let at = window + 300 - INTERVAL;
    for (name, want) in names.iter().zip(&wants) {
        let key = format!("rpc_duration_seconds{{instance={name},job=api}}");
        let ours = server.json(&format!(
            "/api/v1/query?series={}&display=hist&tier=5m&from={window}&to={}",
            crate::support::http::percent_encode(&key),
            window + 300
        ));
        let ours = &ours["histograms"][0][1];
        let selector = format!("rpc_duration_seconds{{instance=\"{name}\"}}");
        let theirs = promql(addr, &format!("increase({selector}[5m])"), at);
        let theirs = &theirs["histogram"][1];
        let number = |v: &Value| -> f64 { v.as_str().unwrap().parse().unwrap() };
        // Both hold what the client observed in the window.
        assert_eq!(ours["count"], want.histogram.count(), "{name}: {ours}");
        assert_eq!(ours["sum"].as_f64(), Some(want.sum), "{name}: {ours}");
        assert_eq!(
            number(&theirs["count"]),
            want.histogram.count() as f64,
            "{name}: {theirs}"
        );
        assert_eq!(number(&theirs["sum"]), want.sum, "{name}: {theirs}");
        for (function, value) in [
            ("histogram_count", want.histogram.count() as f64),
            ("histogram_sum", want.sum),
        ] {
            let answer = promql(addr, &format!("{function}(increase({selector}[5m]))"), at);
            assert_eq!(number(&answer["value"][1]), value, "{function}: {answer}");
        }
        // Bucket by bucket: Prometheus lists `[boundary rule, lower, upper, count]`, the zero
        // bucket as `[-threshold, threshold]`.
        assert_eq!(
            ours["scale"], SCALE,
            "{name}: stored coarser than sent: {ours}"
        );
        let all: Vec<(f64, f64, u64)> = (theirs["buckets"].as_array().unwrap().iter())
            .map(|b| (number(&b[1]), number(&b[2]), number(&b[3]) as u64))
            .filter(|&(_, _, count)| count > 0)
            .collect();
        let zero: u64 = (all.iter())
            .filter(|&&(lower, upper, _)| lower == -upper)
            .map(|b| b.2)
            .sum();
        assert_eq!(
            ours["zero_count"], zero,
            "{name}: ours {ours}, Prometheus {theirs}"
        );
        assert_eq!(zero, want.histogram.zero_count(), "{name}");
        let mut listed: Vec<(f64, f64, u64)> = (all.into_iter())
            .filter(|&(lower, upper, _)| lower != -upper)
            .collect();
        listed.sort_by(|a, b| a.0.total_cmp(&b.0));
        let stored: Vec<(f64, f64, u64)> = (ours["buckets"].as_array().unwrap().iter())
            .map(|b| {
                (
                    b[0].as_f64().unwrap(),
                    b[1].as_f64().unwrap(),
                    b[2].as_u64().unwrap(),
                )
            })
            .collect();
        // Prometheus computes bounds its own way: they agree to the last bit or two.
        let near = |a: f64, b: f64| (a - b).abs() <= a.abs().max(b.abs()) * 1e-12;
        assert_eq!(
            stored.len(),
            listed.len(),
            "{name}: ours {ours}, Prometheus {theirs}"
        );
        for (s, l) in stored.iter().zip(&listed) {
            assert!(
                near(s.0, l.0) && near(s.1, l.1) && s.2 == l.2,
                "{name}: bucket {s:?} ours, {l:?} Prometheus"
            );
        }
        assert_eq!(stored, shown(&want.histogram), "{name}");
    }
    promql_agrees_with_prometheus(&server, addr, window, &wants);
    let status = process.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}\n{}", process.diagnostics());
}

/// tierdb's PromQL over the histograms `prometheus_agrees_on_native_histogram_increases`
/// sent both (observations `wants` in the 5 minutes from `window`), beside Prometheus at
/// `addr`: each query over the window's whole buckets, at its end for tierdb and at its last
/// sample for Prometheus (whose range then starts at its first sample: no extrapolation).
/// Counts, sums and every bucket are exact; quantiles and fractions follow Prometheus' rule
/// (linear within a bucket), so they agree but for the last bits of the bucket bounds.
fn promql_agrees_with_prometheus(
    server: &TestServer,
    addr: std::net::SocketAddr,
    window: i64,
    wants: &[Expected],
) {
    let ours = |query: &str| -> Value {
        let answer = server.json(&format!(
            "/prometheus/api/v1/query?query={}&time={}",
            crate::support::http::percent_encode(query),
            window + 300
        ));
        only_result(&answer, query)
    };
    let number = |v: &Value| -> f64 { v.as_str().unwrap().parse().unwrap() };
    let near = |a: f64, b: f64| (a - b).abs() <= a.abs().max(b.abs()) * 1e-9;
    let both = "rpc_duration_seconds";
    let count: u64 = wants.iter().map(|w| w.histogram.count()).sum();
    let sum: f64 = wants.iter().map(|w| w.sum).sum();
    // The merged histogram: the same buckets and counts, the same sum.
    let merged = format!("sum by (job) (increase({both}[5m]))");
    let (mine, theirs) = (ours(&merged), promql(addr, &merged, window + 285));
    assert_eq!(mine["metric"], serde_json::json!({"job": "api"}), "{mine}");
    let (mine, theirs) = (&mine["histogram"][1], &theirs["histogram"][1]);
    assert_eq!(number(&mine["count"]), count as f64, "{mine}");
    assert_eq!(number(&theirs["count"]), count as f64, "{theirs}");
    assert!(near(number(&mine["sum"]), sum), "{mine}");
    assert!(
        near(number(&mine["sum"]), number(&theirs["sum"])),
        "{mine} {theirs}"
    );
    let buckets = |h: &Value| -> Vec<(u64, f64, f64, f64)> {
        (h["buckets"].as_array().unwrap().iter())
            .map(|b| {
                (
                    b[0].as_u64().unwrap(),
                    number(&b[1]),
                    number(&b[2]),
                    number(&b[3]),
                )
            })
            .filter(|b| b.3 > 0.0)
            .collect()
    };
    let (a, b) = (buckets(mine), buckets(theirs));
    assert_eq!(a.len(), b.len(), "{mine}\n{theirs}");
    for (a, b) in a.iter().zip(&b) {
        assert!(
            a.0 == b.0 && near(a.1, b.1) && near(a.2, b.2) && a.3 == b.3,
            "bucket {a:?} ours, {b:?} Prometheus"
        );
    }
    // Numbers of the merged rate, from both.
    let rate = format!("sum by (job) (rate({both}[5m]))");
    for query in [
        format!("histogram_quantile(0.9, {rate})"),
        format!("histogram_quantile(0.5, {rate})"),
        format!("histogram_quantile(0.99, {rate})"),
        format!("histogram_count({rate})"),
        format!("histogram_sum({rate})"),
        format!("histogram_fraction(0, 0.05, {rate})"),
        format!("histogram_fraction(0.01, 1, {rate})"),
        r#"histogram_quantile(0.9, rate(rpc_duration_seconds{instance="api2"}[5m]))"#.to_owned(),
        r#"histogram_count(increase(rpc_duration_seconds{instance="api1"}[5m]))"#.to_owned(),
    ] {
        let mine = number(&ours(&query)["value"][1]);
        let theirs = number(&promql(addr, &query, window + 285)["value"][1]);
        assert!(
            near(mine, theirs),
            "{query}: ours {mine}, Prometheus {theirs}"
        );
    }
    assert_eq!(
        number(&ours(&format!("histogram_count({rate})"))["value"][1]),
        count as f64 / 300.0
    );
    // histogram_avg (Prometheus 2.50 and later): the sum over the count.
    let avg = number(&ours(&format!("histogram_avg({rate})"))["value"][1]);
    assert!(near(avg, sum / count as f64), "histogram_avg {avg}");
}

/// A counter histogram across restarts of a real `tierdb serve`: a clean stop (SIGTERM)
/// saves each series' last histogram and the next start continues from it, so every
/// observation after the first scrape is stored; after a kill (SIGKILL) the next scrape only
/// sets a baseline, so exactly the observations between the last scrape before the kill and
/// the first after it are missing, and nothing is counted twice.
#[test]
fn counter_histograms_continue_across_a_clean_restart_and_restart_from_a_baseline_after_a_kill() {
    use std::time::Duration;

    use rustix::process::Signal;
    use tierdb::ingest::cumulative::FILE_NAME;

    use crate::support::process::Proc;
    use crate::support::unix_now;

    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let start = |n: usize| {
        let mut server = Proc::tierdb("serve", &data, tmp.path().join(format!("serve{n}.log")));
        let http = server.wait_ready().http;
        (server, http)
    };
    let send = |http, client: &Client, t: i64| {
        let sent = body(vec![TimeSeries {
            labels: labels(&[("__name__", "rpc_duration_seconds"), ("job", "api")]),
            samples: vec![],
            histograms: vec![integer(&client.histogram, client.sum, t * 1000, 0)],
        }]);
        let (status, answer) = crate::support::http::request(
            http,
            "POST",
            "/api/v1/prom/write",
            &[("Content-Type", "application/x-protobuf")],
            &sent,
        );
        assert_eq!(status, 204, "scrape at {t}: {answer}");
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut client = Client::new();
    let mut want = Expected::new();
    // A 5-minute bucket, read whole.
    let t0 = unix_now() / 300 * 300 - 600;
    // Observations made before the scrape at `t`; counted when `stored`.
    let mut scrape = |http, t: i64, stored: bool| {
        for _ in 0..rng.gen_range(5..30) {
            let v = observation(&mut rng);
            client.observe(v);
            if stored {
                want.histogram.record(v);
                want.sum += v;
            }
        }
        send(http, &client, t);
    };

    let (mut server, http) = start(0);
    scrape(http, t0 - INTERVAL, false);
    for k in 0..3 {
        scrape(http, t0 + k * INTERVAL, true);
    }
    let status = server.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}\n{}", server.diagnostics());
    assert!(
        data.join(FILE_NAME).exists(),
        "a clean stop saves the table"
    );

    let (mut server, http) = start(1);
    for k in 3..6 {
        scrape(http, t0 + k * INTERVAL, true);
    }
    assert!(
        !data.join(FILE_NAME).exists(),
        "the start removed the table"
    );
    server.signal(Signal::KILL);
    let _ = server.terminate(Duration::from_secs(30));

    let (mut server, http) = start(2);
    // The kill lost the table: this scrape is a baseline.
    scrape(http, t0 + 6 * INTERVAL, false);
    scrape(http, t0 + 7 * INTERVAL, true);
    let (status, answer) = crate::support::http::request(
        http,
        "GET",
        &format!(
            "/api/v1/query?series={}&display=hist&tier=5m&from={t0}&to={}",
            crate::support::http::percent_encode("rpc_duration_seconds{job=api}"),
            t0 + 300
        ),
        &[],
        b"",
    );
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let stored = &answer["histograms"][0][1];
    assert_eq!(stored["count"], want.histogram.count(), "{answer}");
    assert_eq!(stored["sum"].as_f64(), Some(want.sum), "{answer}");
    assert_eq!(
        stored["zero_count"],
        want.histogram.zero_count(),
        "{answer}"
    );
    let status = server.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}\n{}", server.diagnostics());
}
