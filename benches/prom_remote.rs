//! Prometheus remote write into a `tierdb serve` process over loopback, as Prometheus sends
//! it: requests of 500 series × 1 sample (its `max_samples_per_send` default), snappy-
//! compressed protobuf, over keep-alive connections (Prometheus' shards), each series always
//! on the same connection so its samples arrive in order. Half the series are `_total`
//! counters (stored as increases), half gauges, with node_exporter's label shapes.
//!
//! Beside them, in the same run and on the same server, the same number of series sending
//! native histograms instead (issue #53): integer counter histograms at schema 3, as a Go or
//! Java client exposes them, [`BUCKETS`] populated buckets each, every sample a distribution
//! bucket's merge. Runs alternate between the two, so both see the same machine.
//!
//! `cargo bench --bench prom_remote`. Prints figures: samples/s end to end (every request
//! answered 204, so every sample landed), and the decode cost of one request in this process
//! (snappy, protobuf, series keys) for comparison. Bodies are built before the clock starts.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use prost::Message;
use tierdb::ingest::prom_remote::native::{BucketSpan, NativeHistogram};
use tierdb::ingest::prom_remote::{self, Label, PromSample, TimeSeries, WriteRequest};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

#[path = "server_support.rs"]
#[allow(dead_code)]
mod server_support;

/// Series in the fleet: 40 hosts × 250 metrics.
const SERIES: usize = 10_000;
/// Series (and samples) per request.
const PER_REQUEST: usize = 500;
/// Scrapes sent per run, each a sample of every series.
const SCRAPES: i64 = 30;
const CADENCE: i64 = 10;
/// Concurrent connections (Prometheus' shards).
const CONNECTIONS: usize = 4;
/// Timed runs.
const RUNS: usize = 3;
/// Populated buckets of each native histogram.
const BUCKETS: usize = 12;

/// What a request's series carry.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// One float sample each: half counters, half gauges.
    Floats,
    /// One native histogram each (a counter histogram).
    Histograms,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Floats => "float samples",
            Kind::Histograms => "native histogram samples",
        }
    }
}

fn labels(s: usize, kind: Kind) -> Vec<Label> {
    let metric = s % 250;
    let name = if kind == Kind::Histograms {
        format!("node_metric{metric:03}_seconds")
    } else if metric.is_multiple_of(2) {
        format!("node_metric{metric:03}_total")
    } else {
        format!("node_metric{metric:03}_bytes")
    };
    let pairs = [
        ("__name__", name),
        ("instance", format!("host{:03}:9100", s / 250)),
        ("job", "node".to_string()),
        ("mode", ["idle", "user", "system"][metric % 3].to_string()),
    ];
    pairs
        .into_iter()
        .map(|(k, v)| Label {
            name: k.as_bytes().to_vec().into(),
            value: v.into_bytes().into(),
        })
        .collect()
}

/// Series `s`'s counter histogram at scrape `step`: [`BUCKETS`] buckets from an index that
/// depends on the series, each having gained `j + 1 + s % 7` observations a scrape.
fn native(s: usize, step: i64, ts: i64) -> NativeHistogram {
    let step = step as u64 + 1;
    let counts: Vec<u64> = (0..BUCKETS as u64)
        .map(|j| step * (j + 1 + s as u64 % 7))
        .collect();
    let deltas = counts
        .iter()
        .scan(0i64, |previous, &c| {
            let delta = c as i64 - *previous;
            *previous = c as i64;
            Some(delta)
        })
        .collect();
    NativeHistogram {
        count_int: Some(counts.iter().sum()),
        sum: counts.iter().sum::<u64>() as f64 * 0.042,
        schema: 3,
        zero_threshold: 2.938735877055719e-39,
        zero_count_int: Some(0),
        positive_spans: vec![BucketSpan {
            offset: -40 + (s % 5) as i32,
            length: BUCKETS as u32,
        }],
        positive_deltas: deltas,
        timestamp: ts * 1000 + 123,
        ..NativeHistogram::default()
    }
}

/// The request of series group `group` (series `group*500 .. +500`) at scrape `step`.
fn request(fleet: &[Vec<Label>], kind: Kind, group: usize, step: i64, ts: i64) -> Vec<u8> {
    let timeseries = (group * PER_REQUEST..(group + 1) * PER_REQUEST)
        .map(|s| TimeSeries {
            labels: fleet[s].clone(),
            samples: match kind {
                Kind::Floats => vec![PromSample {
                    value: (step * 1000 + (s as i64 % 97)) as f64 + 0.25,
                    timestamp: ts * 1000 + 123,
                }],
                Kind::Histograms => vec![],
            },
            histograms: match kind {
                Kind::Floats => vec![],
                Kind::Histograms => vec![native(s, step, ts)],
            },
        })
        .collect();
    let body = WriteRequest {
        timeseries,
        metadata: vec![],
    }
    .encode_to_vec();
    snap::raw::Encoder::new().compress_vec(&body).unwrap()
}

/// POSTs each body on one keep-alive connection, in order; panics on any answer but 204.
fn send_all(addr: SocketAddr, bodies: &[Vec<u8>]) {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut line = String::new();
    for body in bodies {
        write!(
            writer,
            "POST /api/v1/prom/write HTTP/1.1\r\nHost: b\r\nContent-Type: application/x-protobuf\r\n\
             Content-Encoding: snappy\r\nX-Prometheus-Remote-Write-Version: 0.1.0\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        writer.write_all(body).unwrap();
        line.clear();
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 204"), "answer: {line}");
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
        }
    }
}

/// Sends scrapes `steps` of the fleet over [`CONNECTIONS`] connections; returns the time.
fn run(
    addr: SocketAddr,
    fleet: &[Vec<Label>],
    kind: Kind,
    steps: std::ops::Range<i64>,
    t0: i64,
) -> Duration {
    let groups = SERIES / PER_REQUEST;
    let per_connection: Vec<Vec<Vec<u8>>> = (0..CONNECTIONS)
        .map(|c| {
            let mut bodies = Vec::new();
            for step in steps.clone() {
                for group in (c..groups).step_by(CONNECTIONS) {
                    bodies.push(request(fleet, kind, group, step, t0 + step * CADENCE));
                }
            }
            bodies
        })
        .collect();
    let began = Instant::now();
    let senders: Vec<_> = per_connection
        .into_iter()
        .map(|bodies| std::thread::spawn(move || send_all(addr, &bodies)))
        .collect();
    for sender in senders {
        sender.join().unwrap();
    }
    began.elapsed()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let fleet: Vec<Vec<Label>> = (0..SERIES).map(|s| labels(s, Kind::Floats)).collect();
    let histogram_fleet: Vec<Vec<Label>> =
        (0..SERIES).map(|s| labels(s, Kind::Histograms)).collect();

    // In process: what decoding one request costs (no engine, no HTTP).
    let rounds: u32 = std::env::var("TIERDB_BENCH_ROUNDS").map_or(2000, |r| r.parse().unwrap());
    for (kind, fleet) in [(Kind::Floats, &fleet), (Kind::Histograms, &histogram_fleet)] {
        let body = request(fleet, kind, 0, 1, chrono::Utc::now().timestamp());
        let mut key = String::new();
        let began = Instant::now();
        for _ in 0..rounds {
            let decoded = prom_remote::decode(&body, 64 << 20).unwrap();
            let mut tags = Vec::new();
            for series in &decoded.timeseries {
                prom_remote::series_key(&series.labels, &mut tags, &mut key).unwrap();
                for histogram in &series.histograms {
                    prom_remote::native::decode_native(histogram).unwrap();
                }
            }
        }
        let each = began.elapsed() / rounds;
        println!(
            "decode one request (500 series of {}, {} bytes): {each:.1?} = {:.2} M samples/s on one core",
            kind.as_str(),
            body.len(),
            PER_REQUEST as f64 / each.as_secs_f64() / 1e6
        );
    }

    // For a profile of the decode alone (callgrind): TIERDB_BENCH_DECODE_ONLY=1.
    if std::env::var_os("TIERDB_BENCH_DECODE_ONLY").is_some() {
        return;
    }
    let server = server_support::start();
    let now = chrono::Utc::now().timestamp();
    let t0 = now - now % 3600 - (RUNS as i64 + 1) * SCRAPES * CADENCE;
    // Warm-up: every series registered (and its counter's baseline set), as in steady state.
    run(server.http, &fleet, Kind::Floats, 0..1, t0);
    run(server.http, &histogram_fleet, Kind::Histograms, 0..1, t0);
    for r in 0..RUNS as i64 {
        let steps = 1 + r * SCRAPES..1 + (r + 1) * SCRAPES;
        for (kind, fleet) in [(Kind::Floats, &fleet), (Kind::Histograms, &histogram_fleet)] {
            let took = run(server.http, fleet, kind, steps.clone(), t0);
            let samples = SERIES as f64 * SCRAPES as f64;
            println!(
                "remote write over HTTP: {samples} {} ({SERIES} series, {PER_REQUEST} per request, \
                 {CONNECTIONS} connections) in {took:.2?} = {:.2} M samples/s",
                kind.as_str(),
                samples / took.as_secs_f64() / 1e6
            );
        }
    }
}
