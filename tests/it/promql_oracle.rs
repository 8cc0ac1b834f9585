//! PromQL against the real thing: Debian's Prometheus 2.42, started with
//! `--web.enable-remote-write-receiver`, beside `tierdb serve`. Both receive the same remote
//! write requests (gauges with a gap, counters, one with a reset, a histogram), every
//! sample 7 seconds past a 15-second beat, so none lies on a bucket boundary. Then:
//! - the label and series endpoints answer the same;
//! - the `*_over_time` family, aggregations, binary operators with matching, offset, `@`,
//!   subqueries and `label_replace` answer the same on windows that cover whole buckets;
//! - `increase` and `rate` of a counter are the exact stored increase: checked against
//!   Prometheus' own `c - c offset 5m` (the same increase, without `increase`'s
//!   extrapolation) where no reset intervenes, and against a naive model of the rule
//!   (each sample's increase since the one before, a drop counting as a reset) where one
//!   does; `histogram_quantile` over increases likewise;
//! - an instant selector answers Prometheus' latest sample, said approximate where the
//!   minute holding the time has several samples (one could lie at the time itself);
//! - over once-a-minute scrapes at steps of 1m, 5m and 1h, an instant selector of a gauge and
//!   of a counter, `last_over_time`, `timestamp()` and a range vector asked for itself equal
//!   Prometheus' answers with no warning, from the buckets' latest samples
//!   (`latest_samples_match_prometheus`).
//!
//! Values are compared to a relative 1e-9: the two sum the same samples in a different
//! order.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::prom_remote::{body, series};
use crate::support::http::{percent_encode, request};
use crate::support::process::{ensure_programs, tierdb_command, Proc};
use crate::support::{file, unix_now};

/// Seconds between samples, and where in the beat they fall.
const BEAT: i64 = 15;
const PHASE: i64 = 7;
/// Samples per series.
const SAMPLES: i64 = 200;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A small deterministic generator (so a failure reproduces).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// A series' labels, and its `(value, unix seconds)` samples.
type SentSeries = (Vec<(String, String)>, Vec<(f64, i64)>);

/// The data both receive.
struct Data {
    series: Vec<SentSeries>,
}

impl Data {
    fn new(t0: i64) -> Data {
        let mut rng = Lcg(42);
        let mut out = Vec::new();
        let labels = |name: &str, pairs: &[(&str, &str)]| {
            let mut l = vec![("__name__".to_string(), name.to_string())];
            l.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            l
        };
        let time = |i: i64| t0 + PHASE + BEAT * i;
        for (instance, job, gap) in [
            ("a", "lab", None),
            ("b", "lab", Some(60..90)),
            ("c", "other", None),
        ] {
            let samples = (0..SAMPLES)
                .filter(|i| {
                    !gap.clone()
                        .is_some_and(|g: std::ops::Range<i64>| g.contains(i))
                })
                .map(|i| ((rng.next() % 10_000) as f64 / 100.0, time(i)))
                .collect();
            out.push((
                labels(
                    "oracle_temperature",
                    &[("instance", instance), ("job", job)],
                ),
                samples,
            ));
        }
        for (instance, reset) in [("a", Some(100)), ("b", None)] {
            let mut total = 0.0;
            let samples = (0..SAMPLES)
                .map(|i| {
                    if reset == Some(i) {
                        total = 0.0;
                    }
                    total += (rng.next() % 20) as f64;
                    (total, time(i))
                })
                .collect();
            out.push((
                labels(
                    "oracle_requests_total",
                    &[("instance", instance), ("job", "lab")],
                ),
                samples,
            ));
        }
        // A histogram: each beat observes a few latencies.
        let bounds = ["0.1", "0.5", "1", "+Inf"];
        let mut counts = [0.0; 4];
        let (mut sum, mut count) = (0.0, 0.0);
        let mut per_bucket: Vec<Vec<(f64, i64)>> = vec![Vec::new(); 4];
        let (mut sums, mut totals) = (Vec::new(), Vec::new());
        for i in 0..SAMPLES {
            for _ in 0..(rng.next() % 5) {
                let latency = (rng.next() % 1500) as f64 / 1000.0;
                for (b, bound) in bounds.iter().enumerate() {
                    if *bound == "+Inf" || latency <= bound.parse::<f64>().unwrap() {
                        counts[b] += 1.0;
                    }
                }
                sum += latency;
                count += 1.0;
            }
            for b in 0..4 {
                per_bucket[b].push((counts[b], time(i)));
            }
            sums.push((sum, time(i)));
            totals.push((count, time(i)));
        }
        for (b, samples) in per_bucket.into_iter().enumerate() {
            out.push((
                labels(
                    "oracle_latency_seconds_bucket",
                    &[("instance", "a"), ("job", "lab"), ("le", bounds[b])],
                ),
                samples,
            ));
        }
        out.push((
            labels(
                "oracle_latency_seconds_sum",
                &[("instance", "a"), ("job", "lab")],
            ),
            sums,
        ));
        out.push((
            labels(
                "oracle_latency_seconds_count",
                &[("instance", "a"), ("job", "lab")],
            ),
            totals,
        ));
        Data { series: out }
    }

    /// The remote write body of every series.
    fn body(&self) -> Vec<u8> {
        body(
            (self.series.iter())
                .map(|(labels, samples)| {
                    let labels: Vec<(&str, &str)> = labels
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    let samples: Vec<(f64, i64)> =
                        samples.iter().map(|&(v, ts)| (v, ts * 1000)).collect();
                    series(&labels, &samples)
                })
                .collect(),
        )
    }

    fn samples(&self, name: &str, instance: &str) -> &[(f64, i64)] {
        let found = self.series.iter().find(|(labels, _)| {
            labels.contains(&("__name__".into(), name.into()))
                && labels.contains(&("instance".into(), instance.into()))
        });
        &found.unwrap().1
    }
}

/// `GET path` as JSON, whatever the status.
fn get(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, text) = request(addr, "GET", path, &[], b"");
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {path} -> {text}"));
    (status, value)
}

/// A range query's answer, labels (as JSON text) -> points.
fn range(
    addr: SocketAddr,
    prefix: &str,
    query: &str,
    start: i64,
    end: i64,
    step: i64,
) -> BTreeMap<String, Vec<(f64, f64)>> {
    let path = format!(
        "{prefix}/api/v1/query_range?query={}&start={start}&end={end}&step={step}",
        percent_encode(query)
    );
    let (status, body) = get(addr, &path);
    assert_eq!(status, 200, "{path}: {body}");
    assert_eq!(body["status"], "success", "{path}: {body}");
    matrix(&body["data"])
}

/// A matrix's series by labels (as JSON text), each label set at most once: one series
/// split in two is a wrong answer.
fn matrix(data: &Value) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut out = BTreeMap::new();
    for s in data["result"].as_array().unwrap() {
        let points = (s["values"].as_array().unwrap().iter())
            .map(|p| {
                (
                    p[0].as_f64().unwrap(),
                    p[1].as_str().unwrap().parse::<f64>().unwrap(),
                )
            })
            .collect();
        let labels = s["metric"].to_string();
        assert!(
            out.insert(labels.clone(), points).is_none(),
            "{labels} twice in {data}"
        );
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) || (a.is_nan() && b.is_nan())
}

fn assert_same(
    what: &str,
    ours: &BTreeMap<String, Vec<(f64, f64)>>,
    theirs: &BTreeMap<String, Vec<(f64, f64)>>,
) {
    assert!(!theirs.is_empty(), "{what}: Prometheus answered nothing");
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "{what}: series differ"
    );
    for (labels, points) in theirs {
        let mine = &ours[labels];
        assert_eq!(
            mine.iter().map(|p| p.0).collect::<Vec<_>>(),
            points.iter().map(|p| p.0).collect::<Vec<_>>(),
            "{what} {labels}: times differ\nours   {mine:?}\ntheirs {points:?}"
        );
        for (m, p) in mine.iter().zip(points) {
            assert!(
                close(m.1, p.1),
                "{what} {labels} at {}: ours {} theirs {}",
                p.0,
                m.1,
                p.1
            );
        }
    }
}

/// `tierdb serve` and Debian's Prometheus (with its remote write receiver), side by side.
struct Both {
    server: Proc,
    tierdb: SocketAddr,
    prom: Proc,
    prom_addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Both {
    /// Both started and ready; `None` when Prometheus is not installed (as
    /// `ensure_programs` allows).
    fn start() -> Option<Both> {
        let prometheus = std::env::var_os("PROMETHEUS")
            .map_or_else(|| PathBuf::from("/usr/bin/prometheus"), PathBuf::from);
        if !ensure_programs(&[&prometheus], "prometheus") {
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let server_log = dir.join("server.stderr");
        let mut server = Proc::spawn(
            "tierdb serve",
            tierdb_command("serve", &dir.join("data"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(file(&server_log)),
            vec![server_log],
            false,
        );
        let tierdb = server.wait_ready().http;

        let port = free_port();
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, "global:\n  scrape_interval: 1m\n").unwrap();
        let prometheus_log = dir.join("prometheus.stderr");
        let mut prom = Proc::spawn(
            "prometheus",
            Command::new(&prometheus)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("prom").display()
                ))
                .arg("--web.enable-remote-write-receiver")
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(file(&prometheus_log)),
            vec![prometheus_log],
            false,
        );
        let prom_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let started = Instant::now();
        loop {
            prom.assert_running();
            if std::net::TcpStream::connect(prom_addr).is_ok()
                && request(prom_addr, "GET", "/-/ready", &[], b"").0 == 200
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "prometheus never ready\n{}",
                prom.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(Both {
            server,
            tierdb,
            prom,
            prom_addr,
            _dir: tmp,
        })
    }

    /// Sends the remote write `body` to both, then waits until tierdb answers `probe` (an
    /// instant query's path under `/prometheus`) with a series: a write is visible once
    /// tierdb's writers applied it.
    fn write(&self, body: &[u8], probe: &str) {
        let headers = [
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "snappy"),
            ("X-Prometheus-Remote-Write-Version", "0.1.0"),
        ];
        let (status, text) = request(self.tierdb, "POST", "/api/v1/prom/write", &headers, body);
        assert_eq!(status, 204, "tierdb: {text}");
        let (status, text) = request(self.prom_addr, "POST", "/api/v1/write", &headers, body);
        assert_eq!(status, 204, "prometheus: {text}");
        let started = Instant::now();
        loop {
            let (_, answer) = get(self.tierdb, &format!("/prometheus{probe}"));
            if answer["data"]["result"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "tierdb never showed the data: {answer}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops both, each of which must exit cleanly.
    fn stop(mut self) {
        let status = self.prom.terminate(Duration::from_secs(30));
        assert!(status.success(), "{status}\n{}", self.prom.diagnostics());
        let status = self.server.terminate(Duration::from_secs(30));
        assert!(status.success(), "{status}\n{}", self.server.diagnostics());
    }
}

#[test]
fn promql_matches_prometheus() {
    let Some(both) = Both::start() else {
        return;
    };
    let (tierdb, prom_addr) = (both.tierdb, both.prom_addr);

    // Data from about an hour ago, in 10-minute-aligned time.
    let t0 = (unix_now() - 3600).div_euclid(600) * 600;
    let data = Data::new(t0);
    // Visible once the last sample is.
    let last = t0 + PHASE + BEAT * (SAMPLES - 1);
    both.write(
        &data.body(),
        &format!(
            "/api/v1/query?query=count_over_time(oracle_temperature%7Binstance%3D%22c%22%7D%5B1m%5D)&time={}",
            last + 60 - (last + 60) % 60
        ),
    );

    // Label and series endpoints: equal, with and without a time range.
    let (start, end) = (t0 + 900, t0 + 2700);
    for path in [
        "/api/v1/labels".to_string(),
        format!("/api/v1/labels?start={start}&end={end}"),
        "/api/v1/label/__name__/values".to_string(),
        "/api/v1/label/instance/values".to_string(),
        format!("/api/v1/label/job/values?match[]=oracle_temperature&start={start}&end={end}"),
        format!(
            "/api/v1/series?match[]=oracle_temperature&match[]={}",
            percent_encode("oracle_requests_total{instance!=\"b\"}")
        ),
        format!(
            "/api/v1/series?match[]={}&start={start}&end={end}",
            percent_encode("{job=\"lab\",instance=~\"a|b\"}")
        ),
        format!(
            "/api/v1/series?match[]={}",
            percent_encode("{__name__=~\"oracle_latency.*\",le=\"\"}")
        ),
    ] {
        let (s1, ours) = get(tierdb, &format!("/prometheus{path}"));
        let (s2, theirs) = get(prom_addr, &path);
        assert_eq!((s1, s2), (200, 200), "{path}: {ours} / {theirs}");
        let sorted = |v: &Value| {
            let mut items: Vec<String> = v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(Value::to_string)
                .collect();
            items.sort();
            items
        };
        assert_eq!(sorted(&ours), sorted(&theirs), "{path}");
    }

    // Same answers on whole-bucket windows.
    let at = t0 + 1200;
    for query in [
        "sum_over_time(oracle_temperature[5m])".to_string(),
        "count_over_time(oracle_temperature[5m])".to_string(),
        "min_over_time(oracle_temperature[10m])".to_string(),
        "max_over_time(oracle_temperature[5m])".to_string(),
        "avg_over_time(oracle_temperature[5m])".to_string(),
        "present_over_time(oracle_temperature[2m])".to_string(),
        "sum by (job) (avg_over_time(oracle_temperature[5m]))".to_string(),
        "max without (instance) (max_over_time(oracle_temperature[5m]))".to_string(),
        "min(min_over_time(oracle_temperature[3m]))".to_string(),
        "avg by (job) (sum_over_time(oracle_temperature[5m]))".to_string(),
        "count(count_over_time(oracle_temperature[5m]))".to_string(),
        "group by (job) (count_over_time(oracle_temperature[5m]))".to_string(),
        "topk(1, max_over_time(oracle_temperature[5m]))".to_string(),
        "bottomk(2, min_over_time(oracle_temperature[5m]))".to_string(),
        "quantile(0.5, avg_over_time(oracle_temperature[5m]))".to_string(),
        "stddev(sum_over_time(oracle_temperature[5m]))".to_string(),
        "stdvar by (job) (sum_over_time(oracle_temperature[5m]))".to_string(),
        "count_values(\"n\", count_over_time(oracle_temperature[5m]))".to_string(),
        "max_over_time(oracle_temperature[5m]) > bool 50".to_string(),
        "max_over_time(oracle_temperature[5m]) > 50".to_string(),
        "sum_over_time(oracle_temperature[5m]) / ignoring(job) count_over_time(oracle_temperature[5m])".to_string(),
        "max_over_time(oracle_temperature{job=\"lab\"}[5m]) and on(instance) count_over_time(oracle_temperature{instance!=\"b\"}[5m])".to_string(),
        "max_over_time(oracle_temperature[5m]) unless on(instance) max_over_time(oracle_temperature{instance=\"a\"}[5m])".to_string(),
        "min_over_time(oracle_temperature{instance=\"a\"}[5m]) or max_over_time(oracle_temperature[5m])".to_string(),
        "max_over_time(oracle_temperature[5m]) - on(job) group_left sum by (job) (min_over_time(oracle_temperature[5m]))".to_string(),
        "sum by (job) (min_over_time(oracle_temperature[5m])) / on(job) group_right max_over_time(oracle_temperature[5m])".to_string(),
        "sum_over_time(oracle_temperature[5m] offset 10m)".to_string(),
        format!("max_over_time(oracle_temperature[5m] @ {at})"),
        "max_over_time(avg_over_time(oracle_temperature[5m])[10m:5m])".to_string(),
        "min_over_time(sum by (job) (max_over_time(oracle_temperature[2m]))[6m:])".to_string(),
        "label_replace(max_over_time(oracle_temperature[5m]), \"host\", \"h-$1\", \"instance\", \"(.*)\")".to_string(),
        "label_join(max_over_time(oracle_temperature[5m]), \"both\", \"/\", \"job\", \"instance\")".to_string(),
        "abs(-max_over_time(oracle_temperature[5m])) + ceil(avg_over_time(oracle_temperature[5m])) * 2".to_string(),
        "clamp(avg_over_time(oracle_temperature[5m]), 20, 60)".to_string(),
        "round(avg_over_time(oracle_temperature[5m]), 0.5)".to_string(),
        "absent_over_time(oracle_temperature{instance=\"b\"}[2m])".to_string(),
        "vector(1) + scalar(count(count_over_time(oracle_temperature[5m])))".to_string(),
        "time() - 1".to_string(),
        // Date and trigonometric functions: of the evaluation time, of stored values, of
        // the time of a computed vector.
        "hour() * 100 + minute() + day_of_week() + day_of_month() + month() + year() + days_in_month() + day_of_year()".to_string(),
        "day_of_week(vector(time() + 86400 * 3)) + days_in_month(vector(1709251199.5)) + year(vector(-0.5))".to_string(),
        "minute(max_over_time(oracle_temperature[5m]) * 1000)".to_string(),
        "timestamp(sum by (job) (max_over_time(oracle_temperature[5m])))".to_string(),
        "sin(avg_over_time(oracle_temperature[5m])) + cos(max_over_time(oracle_temperature[5m])) * scalar(tan(vector(0.25)))".to_string(),
        "scalar(asin(vector(0.5)) + acos(vector(0.25))) + atan(min_over_time(oracle_temperature[5m]))".to_string(),
        "scalar(sinh(vector(1.5)) + cosh(vector(0.5))) + tanh(avg_over_time(oracle_temperature[5m]) / 100)".to_string(),
        "asinh(max_over_time(oracle_temperature[5m])) + scalar(acosh(vector(2)) + atanh(vector(0.5)))".to_string(),
        "deg(avg_over_time(oracle_temperature[5m])) - scalar(rad(vector(90))) * pi()".to_string(),
        // The stored increase, against Prometheus' difference over the same span.
        "increase(oracle_requests_total{instance=\"b\"}[5m])".to_string(),
        "sum by (job) (rate(oracle_requests_total{instance=\"b\"}[5m]))".to_string(),
        "histogram_quantile(0.9, sum by (le) (increase(oracle_latency_seconds_bucket[10m])))".to_string(),
    ] {
        let theirs_query = query
            .replace(
                "increase(oracle_requests_total{instance=\"b\"}[5m])",
                "(oracle_requests_total{instance=\"b\"} - oracle_requests_total{instance=\"b\"} offset 5m)",
            )
            .replace(
                "rate(oracle_requests_total{instance=\"b\"}[5m])",
                "(oracle_requests_total{instance=\"b\"} - oracle_requests_total{instance=\"b\"} offset 5m) / 300",
            )
            .replace(
                "increase(oracle_latency_seconds_bucket[10m])",
                "(oracle_latency_seconds_bucket - oracle_latency_seconds_bucket offset 10m)",
            );
        let ours = range(tierdb, "/prometheus", &query, start, end, 60);
        let theirs = range(prom_addr, "", &theirs_query, start, end, 60);
        assert_same(&query, &ours, &theirs);
    }

    // An instant query: the same answer as Prometheus' at the same time.
    let instant = format!(
        "/api/v1/query?query={}&time={at}",
        percent_encode("sort_desc(sum by (job) (sum_over_time(oracle_temperature[10m])))")
    );
    let (_, ours) = get(tierdb, &format!("/prometheus{instant}"));
    let (_, theirs) = get(prom_addr, &instant);
    assert_eq!(ours["data"]["resultType"], "vector");
    assert_eq!(ours["data"], theirs["data"], "{instant}");

    // Where tierdb differs by design: the naive model of its rules.
    // The counter with a reset: the sum of each sample's increase in [t - 5m, t).
    let counter = data.samples("oracle_requests_total", "a");
    let ours = range(
        tierdb,
        "/prometheus",
        "increase(oracle_requests_total{instance=\"a\"}[5m])",
        start,
        end,
        60,
    );
    let points = &ours.values().next().expect("an increase")[..];
    for &(t, value) in points {
        let t = t as i64;
        let model: f64 = (1..counter.len())
            .filter(|&i| (t - 300..t).contains(&counter[i].1))
            .map(|i| {
                let (now, before) = (counter[i].0, counter[i - 1].0);
                if now >= before {
                    now - before
                } else {
                    now
                }
            })
            .sum();
        assert!(
            close(value, model),
            "increase at {t}: ours {value}, model {model}"
        );
    }
    assert_eq!(points.len() as i64, (end - start) / 60 + 1);
    // An instant selector: Prometheus' latest sample within 5 minutes (instance b has a gap
    // of 7.5 minutes). At whole minutes the minute holding the time has four samples, the
    // latest after it, so the answer, the latest sample before that minute, is Prometheus'
    // here (no sample lies on a minute) but says approximate; `latest_samples_match_prometheus`
    // checks the exact cases.
    let query = "oracle_temperature";
    let ours = range(tierdb, "/prometheus", query, start, end, 60);
    let theirs = range(prom_addr, "", query, start, end, 60);
    assert_same(query, &ours, &theirs);
    let said = warnings(tierdb, query, (start, end, 60));
    assert!(
        said.iter()
            .any(|w| w.starts_with("approximate: oracle_temperature: an instant value")),
        "{said:?}"
    );

    both.stop();
}

/// Values are written as Prometheus writes them, text for text: Go's shortest digits, the
/// even ones where two are equally close, `'e'` form below 1e-6 and from 1e21 on
/// (src/promql/number.rs); `count_values` labels in `'f'` form. One sample a series, so
/// tierdb's bucket average is the sample.
#[test]
fn values_are_written_as_prometheus_writes_them() {
    let Some(both) = Both::start() else {
        return;
    };
    // As decimal text: the first four are ties between two shortest digit strings.
    let values: Vec<f64> = [
        "1394865425023536.25",
        "643371375338642.25",
        "562949953421312.125",
        "4503599627370495.5",
        "36028797018963968",
        "0.1",
        "0.3333333333333333",
        "0.2833333333333334",
        "1e-7",
        "1.5e-7",
        "1e-6",
        "9.99e-7",
        "1.23e-6",
        "1e16",
        "9.99e20",
        "1e21",
        "1.2345678901234568e20",
        "1.234e25",
        "-2.5e30",
        "-1e-7",
        "5e-324",
        "1.7976931348623157e308",
        "123456789.125",
    ]
    .iter()
    .map(|v| v.parse().unwrap())
    .collect();
    let t0 = (unix_now() - 3600).div_euclid(600) * 600;
    let names: Vec<String> = (0..values.len()).map(|i| format!("{i:02}")).collect();
    let body = body(
        (values.iter().zip(&names))
            .map(|(&v, i)| {
                series(
                    &[("__name__", "oracle_text"), ("i", i)],
                    &[(v, (t0 + PHASE) * 1000)],
                )
            })
            .collect(),
    );
    let at = t0 + 60;
    let query = |q: &str| format!("/api/v1/query?query={}&time={at}", percent_encode(q));
    both.write(
        &body,
        &query(&format!("oracle_text{{i=\"{}\"}}", names[names.len() - 1])),
    );
    let texts = |addr: SocketAddr, path: &str, label: &str| -> BTreeMap<String, String> {
        let (status, answer) = get(addr, path);
        assert_eq!(status, 200, "{path}: {answer}");
        (answer["data"]["result"].as_array().unwrap().iter())
            .map(|r| {
                let key = r["metric"][label].as_str().unwrap().to_owned();
                (key, r["value"][1].as_str().unwrap().to_owned())
            })
            .collect()
    };
    let path = query("oracle_text");
    let ours = texts(both.tierdb, &format!("/prometheus{path}"), "i");
    let theirs = texts(both.prom_addr, &path, "i");
    assert_eq!(ours.len(), values.len(), "{ours:?}");
    assert_eq!(ours, theirs);
    let path = query("count_values(\"v\", oracle_text)");
    let ours = texts(both.tierdb, &format!("/prometheus{path}"), "v");
    let theirs = texts(both.prom_addr, &path, "v");
    assert_eq!(ours.len(), values.len(), "{ours:?}");
    assert_eq!(ours, theirs);
    both.stop();
}

/// Where two series come to share a label set, the errors of `topk` and the order of an
/// instant answer: the answers of Prometheus 2.42 exactly, which checks a function without a
/// range argument, an aggregation and a binary operator per evaluation step (series sharing
/// labels at different steps are one series), and a range function's result and a unary
/// minus over the whole range, and answers an instant query in its order of evaluation. Then a Graphite-style dotted name: the hint for it in query text, which
/// Prometheus answers with a parse error, and tierdb's rules for such names (kept by
/// functions, reached as `measurement_field`) over Prometheus' values.
#[test]
fn same_labelsets_topk_and_dotted_names_as_prometheus() {
    let Some(both) = Both::start() else {
        return;
    };
    let t0 = (unix_now() - 3600).div_euclid(600) * 600;
    // One sample a minute, 7 s past it: an instant selector at a whole minute then answers
    // the sample Prometheus answers.
    let minute = |i: i64| (t0 + PHASE + 60 * i) * 1000;
    let samples = |range: std::ops::Range<i64>, f: &dyn Fn(i64) -> f64| -> Vec<(f64, i64)> {
        range.map(|i| (f(i), minute(i))).collect()
    };
    let api = [("job", "api"), ("instance", "x")];
    let web = [("job", "web"), ("instance", "y")];
    let mut all = vec![
        // dup_a and dup_b share their labels but never a step: the last dup_a sample is
        // visible until minute 24, the first dup_b one from minute 31.
        series(
            &[&[("__name__", "dup_a")][..], &api].concat(),
            &samples(0..20, &|i| 10.0 + i as f64),
        ),
        series(
            &[&[("__name__", "dup_b")][..], &api].concat(),
            &samples(30..50, &|i| 100.0 + i as f64),
        ),
        // dup_c and dup_d share their labels at every step.
        series(
            &[&[("__name__", "dup_c")][..], &web].concat(),
            &samples(0..50, &|i| 2.0 * i as f64),
        ),
        series(
            &[&[("__name__", "dup_d")][..], &web].concat(),
            &samples(0..50, &|i| 3.0 * i as f64),
        ),
        series(
            &[("__name__", "cpu.usage_user"), ("host", "h")],
            &samples(0..50, &|i| (i % 7) as f64 + 0.5),
        ),
        // Their order by name is the reverse of their order by job: the name dropped, an
        // instant answer in label order differs from Prometheus' order of evaluation.
        series(
            &[("__name__", "ord_a"), ("job", "z")],
            &samples(0..50, &|i| 1.0 + i as f64),
        ),
        series(
            &[("__name__", "ord_b"), ("job", "y")],
            &samples(0..50, &|i| 2.0 + i as f64),
        ),
        // gap{instance="a"} ends at minute 20; relabelled as "c" later, it has no sample to
        // place the series it joins.
        series(
            &[("__name__", "gap"), ("instance", "a")],
            &samples(0..20, &|i| i as f64),
        ),
        series(
            &[("__name__", "gap"), ("instance", "b")],
            &samples(0..50, &|i| 100.0 + i as f64),
        ),
        series(
            &[("__name__", "gap"), ("instance", "c")],
            &samples(0..50, &|i| 200.0 + i as f64),
        ),
    ];
    for (k, (instance, job)) in [
        ("1", "alpha"),
        ("2", "alpha"),
        ("3", "beta"),
        ("4", "beta"),
        ("5", "beta"),
    ]
    .into_iter()
    .enumerate()
    {
        let k = k as i64;
        all.push(series(
            &[("__name__", "rank"), ("instance", instance), ("job", job)],
            &samples(0..50, &|i| ((i * 7 + k * 13) % 50) as f64 + k as f64 / 10.0),
        ));
    }
    let at = t0 + 600;
    both.write(
        &body(all),
        &format!("/api/v1/query?query=rank&time={}", t0 + 50 * 60),
    );
    let (tierdb, prom) = (both.tierdb, both.prom_addr);
    let (start, end) = (t0 + 60, t0 + 3000);

    // Range queries both answer, the same.
    for query in [
        // Item 5: relabelled to one label set at different times.
        r#"label_replace({__name__=~"dup_a|dup_b"}, "__name__", "same", "__name__", ".*")"#,
        r#"label_join({__name__=~"dup_a|dup_b"}, "__name__", "-", "job", "instance")"#,
        // Item 6: the name dropped, at different times.
        r#"ceil({__name__=~"dup_a|dup_b"})"#,
        r#"{__name__=~"dup_a|dup_b"} * 2"#,
        // Item 7: one series, not two.
        "-dup_a or -dup_b",
        "sum by (job) (dup_a) or sum by (job) (dup_b)",
        "rank",
    ] {
        let ours = range(tierdb, "/prometheus", query, start, end, 60);
        let theirs = range(prom, "", query, start, end, 60);
        assert_same(query, &ours, &theirs);
    }

    // Errors both give: the same status, type and text (ours may say more after it).
    let error = |addr: SocketAddr, path: &str| {
        let (status, body) = get(addr, path);
        (
            status,
            body["errorType"].clone(),
            body["error"].as_str().unwrap_or("").to_owned(),
            body,
        )
    };
    let range_path = |q: &str| {
        format!(
            "/api/v1/query_range?query={}&start={start}&end={end}&step=60",
            percent_encode(q)
        )
    };
    let instant_path = |q: &str| format!("/api/v1/query?query={}&time={at}", percent_encode(q));
    for path in [
        // Items 5 and 6: one label set at one step.
        range_path(
            r#"label_replace({__name__=~"dup_c|dup_d"}, "__name__", "same", "__name__", ".*")"#,
        ),
        instant_path(r#"label_join({__name__=~"dup_c|dup_d"}, "__name__", "", "job")"#),
        range_path(r#"ceil({__name__=~"dup_c|dup_d"})"#),
        instant_path(r#"ceil({__name__=~"dup_c|dup_d"})"#),
        range_path(r#"{__name__=~"dup_c|dup_d"} + 1"#),
        range_path(r#"max_over_time({__name__=~"dup_c|dup_d"}[5m])"#),
        // A unary minus and a range function: over the whole range, in Prometheus 2.42.
        range_path(r#"-{job="api"}"#),
        range_path(r#"-{job="web"}"#),
        range_path(r#"max_over_time({job="api"}[5m])"#),
        // Item 8: k must be an int64 at every step, series or not.
        instant_path("topk(NaN, non_existent)"),
        range_path("bottomk(NaN, non_existent)"),
        instant_path("topk(1e19, rank)"),
        instant_path("topk(-Inf, rank)"),
    ] {
        let (s1, kind1, text1, ours) = error(tierdb, &format!("/prometheus{path}"));
        let (s2, kind2, text2, theirs) = error(prom, &path);
        assert_eq!(s2, 422, "{path}: Prometheus answered {theirs}");
        assert_eq!(
            (s1, &kind1),
            (s2, &kind2),
            "{path}: ours {ours}, theirs {theirs}"
        );
        assert!(
            text1.starts_with(&text2),
            "{path}: ours {ours}, theirs {theirs}"
        );
    }

    // Instant answers in Prometheus' order, which is its order of evaluation: topk and
    // bottomk ranked by value, also inside what keeps its operand's order (functions,
    // operators); groups and series whose name is dropped in the order they are met.
    let late = t0 + 40 * 60;
    let instants = [
        r#"-{job="api"}"#,
        "topk(10, rank)",
        "bottomk(10, rank)",
        "topk(3, rank)",
        "bottomk(2, rank)",
        "topk by (job) (2, rank)",
        "bottomk without (instance) (10, rank)",
        "(topk(5, rank))",
        "topk(3, rank) * 2",
        "100 - bottomk(3, rank)",
        "-topk(3, rank)",
        "abs(bottomk(3, rank))",
        r#"label_replace(topk(3, rank), "x", "y", "", "")"#,
        "sort_desc(rank) + 0",
        "topk(3, rank) > 0",
        "topk(3, rank) or rank",
        "topk(4, rank) unless bottomk(1, rank)",
        "topk(3, rank) and rank",
        "sum by (job) (rank) / on(job) group_right topk(3, rank)",
        r#"sum by (job) ({__name__=~"ord_a|ord_b"})"#,
        r#"max_over_time({__name__=~"ord_a|ord_b"}[5m])"#,
        r#"-{__name__=~"ord_a|ord_b"}"#,
        r#"count_values("v", rank)"#,
        r#"count_values by (job) ("v", sort(rank))"#,
        r#"count_values without (v) ("v", rank)"#,
    ]
    .map(|query| (query, at));
    // At minute 40 gap{instance="a"} has no sample.
    let late = [(
        r#"label_replace(gap, "instance", "c", "instance", "a")"#,
        late,
    )];
    for (query, time) in instants.into_iter().chain(late) {
        let path = format!("/api/v1/query?query={}&time={time}", percent_encode(query));
        let (s1, ours) = get(tierdb, &format!("/prometheus{path}"));
        let (s2, theirs) = get(prom, &path);
        assert_eq!(
            (s1, s2),
            (200, 200),
            "{query}: ours {ours}, theirs {theirs}"
        );
        assert!(
            !theirs["data"]["result"].as_array().unwrap().is_empty(),
            "{query}"
        );
        assert_eq!(ours["data"], theirs["data"], "{query}");
    }

    // Item 13: a dotted name is a parse error in both; ours names the matchers that work.
    let path = instant_path("rate(cpu.usage_user[5m])");
    let (s1, kind1, text1, ours) = error(tierdb, &format!("/prometheus{path}"));
    let (s2, kind2, _, theirs) = error(prom, &path);
    assert_eq!((s1, &kind1), (s2, &kind2), "ours {ours}, theirs {theirs}");
    assert!(
        text1.contains(r#"as in rate({__name__="cpu.usage_user"}[5m])"#)
            && text1.contains(r#"{__graphite__="cpu.usage_user"}"#),
        "{ours}"
    );
    // Item 12, tierdb's documented rule (docs/promql.md, "Graphite paths and Influx
    // fields"): a name PromQL cannot write stays where Prometheus drops it; the values are
    // Prometheus'.
    let query = r#"max_over_time({__name__="cpu.usage_user"}[5m])"#;
    let ours: BTreeMap<String, _> = range(tierdb, "/prometheus", query, start, end, 60)
        .into_iter()
        .map(|(labels, points)| {
            let kept = r#"{"__name__":"cpu.usage_user","#;
            assert!(labels.starts_with(kept), "{query}: {labels}");
            (labels.replacen(kept, "{", 1), points)
        })
        .collect();
    let theirs = range(prom, "", query, start, end, 60);
    assert_same(query, &ours, &theirs);
    // And the name PromQL users try, `measurement_field`, finds the field (Prometheus has
    // no such rule and answers nothing), with the value Prometheus gives the field.
    let path = instant_path(r#"cpu_usage_user{host="h"}"#);
    let (_, ours) = get(tierdb, &format!("/prometheus{path}"));
    let (_, theirs) = get(
        prom,
        &instant_path(r#"{__name__="cpu.usage_user", host="h"}"#),
    );
    let field = &theirs["data"]["result"][0];
    assert!(field["value"].is_array(), "{theirs}");
    assert_eq!(
        ours["data"]["result"],
        serde_json::json!([{
            "metric": {"__name__": "cpu_usage_user", "host": "h"},
            "value": field["value"],
        }]),
        "{ours}"
    );

    both.stop();
}

/// tierdb's warnings on a range query (empty when it says the answer is exact).
fn warnings(addr: SocketAddr, query: &str, (start, end, step): (i64, i64, i64)) -> Vec<String> {
    let path = format!(
        "/prometheus/api/v1/query_range?query={}&start={start}&end={end}&step={step}",
        percent_encode(query)
    );
    let (status, body) = get(addr, &path);
    assert_eq!(status, 200, "{path}: {body}");
    (body["warnings"].as_array().into_iter().flatten())
        .map(|w| w.as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Issue #54 items 9-11, "how it is checked": the buckets' latest samples answer what
/// Prometheus 2.42 answers. Three hours of scrapes, sent to both in one request: gauges and
/// counters scraped once a minute (23 s past it, and one gauge on the minute with a gap of
/// six minutes, so a sample lies exactly at a time's lookback edge), and scraped every 15 s
/// (7 s past a 15-second beat), one counter reset. Range queries at steps of 1m, 5m and 1h
/// from an hour boundary:
/// - over the once-a-minute series, an instant selector of a gauge and of a counter (its
///   running total), `last_over_time` over 5m, 1h and 90s windows and `timestamp()` equal
///   Prometheus' answers, with no warning;
/// - over the 15-second series at the same steps the minute holding each time has four
///   samples, the latest after it, and one of the others could lie at the time itself:
///   the buckets cannot say, so the answer (the latest sample before that minute, equal to
///   Prometheus' here) says `approximate`. The same grid 53 s later (after each minute's last
///   sample) is exact: equal, with no warning;
/// - an instant query of a range vector (`x[3m]`) over once-a-minute buckets answers
///   Prometheus' samples at their times, a counter's raw values.
#[test]
fn latest_samples_match_prometheus() {
    let Some(both) = Both::start() else {
        return;
    };
    let (tierdb, prom) = (both.tierdb, both.prom_addr);
    let t0 = (unix_now() - 3 * 3600).div_euclid(3600) * 3600;
    let end = t0 + 3 * 3600;
    let mut rng = Lcg(54);
    let mut value = || (rng.next() % 10_000) as f64 / 100.0;
    let at = |second: i64| second * 1000;
    let minutes = |from: i64, phase: i64| (from..end).step_by(60).map(move |m| m + phase);
    let beats = |from: i64| (from..end).step_by(15).map(|b| b + 7);
    let gauge = |times: &mut dyn Iterator<Item = i64>, value: &mut dyn FnMut() -> f64| {
        times.map(|t| (value(), at(t))).collect::<Vec<_>>()
    };
    let counter = |times: &mut dyn Iterator<Item = i64>, reset_at: Option<i64>| {
        let mut total = 0.0;
        let mut step = Lcg(7);
        (times.enumerate())
            .map(|(i, t)| {
                if reset_at == Some(i as i64) {
                    total = 0.0;
                }
                total += (step.next() % 20) as f64;
                (total, at(t))
            })
            .collect::<Vec<_>>()
    };
    let minute_gauge = gauge(&mut minutes(t0, 23), &mut value);
    // On the minute, minutes 61 to 66 missing: at minute 65 the sample of minute 60 lies
    // exactly at the lookback's start.
    let edge_gauge = gauge(
        &mut minutes(t0, 0).filter(|t| !(61..=66).contains(&((t - t0) / 60))),
        &mut value,
    );
    let fast_gauge = gauge(&mut beats(t0), &mut value);
    // A counter's first sample sets its baseline and is not stored: the counters start ten
    // minutes early, out of every lookback of the grid.
    let minute_counter = counter(&mut minutes(t0 - 600, 23), Some(100));
    let fast_counter = counter(&mut beats(t0 - 600), None);
    let job = ("job", "latest");
    let all = vec![
        series(&[("__name__", "latest_minute"), job], &minute_gauge),
        series(&[("__name__", "latest_edge"), job], &edge_gauge),
        series(&[("__name__", "latest_fast"), job], &fast_gauge),
        series(&[("__name__", "latest_minute_total"), job], &minute_counter),
        series(&[("__name__", "latest_fast_total"), job], &fast_counter),
    ];
    both.write(
        &body(all),
        &format!("/api/v1/query?query=latest_fast_total&time={}", end - 1),
    );

    let exact = [
        "latest_minute",
        "latest_edge",
        "latest_minute_total",
        "last_over_time(latest_minute[5m])",
        "last_over_time(latest_minute[1h])",
        "last_over_time(latest_minute[90s])",
        "last_over_time(latest_edge[5m])",
        "last_over_time(latest_minute_total[5m])",
        "last_over_time(latest_minute_total[1h])",
        "timestamp(latest_minute)",
        "timestamp(latest_edge)",
        "timestamp(latest_minute_total)",
    ];
    let fast = [
        "latest_fast",
        "latest_fast_total",
        "last_over_time(latest_fast[5m])",
        "last_over_time(latest_fast_total[1h])",
        "timestamp(latest_fast)",
    ];
    for step in [60, 300, 3600] {
        let grid = (t0, end, step);
        for query in exact {
            let ours = range(tierdb, "/prometheus", query, t0, end, step);
            let theirs = range(prom, "", query, t0, end, step);
            assert_same(&format!("{query} at step {step}"), &ours, &theirs);
            let said = warnings(tierdb, query, grid);
            assert!(said.is_empty(), "{query} at step {step}: {said:?}");
        }
        for query in fast {
            // Said approximate, though no sample lies on a minute here: the latest sample
            // before the minute holding each time, which is Prometheus' answer.
            let said = warnings(tierdb, query, grid);
            assert!(
                said.iter().any(|w| w.starts_with("approximate: ")),
                "{query} at step {step}: {said:?}"
            );
            let ours = range(tierdb, "/prometheus", query, t0, end, step);
            let theirs = range(prom, "", query, t0, end, step);
            assert_same(&format!("{query} at step {step}"), &ours, &theirs);
            // After each minute's last sample, 53 s past it.
            let (start, end) = (t0 + 53, end - 60 + 53);
            let ours = range(tierdb, "/prometheus", query, start, end, step);
            let theirs = range(prom, "", query, start, end, step);
            assert_same(&format!("{query} at step {step}, +53 s"), &ours, &theirs);
            let said = warnings(tierdb, query, (start, end, step));
            assert!(said.is_empty(), "{query} at step {step}, +53 s: {said:?}");
        }
    }

    // A range vector asked for itself: the samples at their times, on and off the minute.
    for (query, time) in [
        ("latest_minute[3m]", t0 + 3600),
        ("latest_minute[3m]", t0 + 3600 + 30),
        ("latest_minute_total[5m]", t0 + 7200 + 23),
        ("latest_edge[10m]", t0 + 67 * 60),
    ] {
        let path = format!("/api/v1/query?query={}&time={time}", percent_encode(query));
        let (s1, ours) = get(tierdb, &format!("/prometheus{path}"));
        let (s2, theirs) = get(prom, &path);
        assert_eq!((s1, s2), (200, 200), "{query}: {ours} / {theirs}");
        assert_eq!(theirs["data"]["resultType"], "matrix", "{theirs}");
        let expected = matrix(&theirs["data"]);
        assert_same(query, &matrix(&ours["data"]), &expected);
        assert!(ours.get("warnings").is_none(), "{query}: {ours}");
    }

    both.stop();
}
