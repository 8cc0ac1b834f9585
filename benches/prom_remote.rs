//! Prometheus remote write into a `tierdb serve` process over loopback, as Prometheus sends
//! it: requests of 500 series × 1 sample (its `max_samples_per_send` default), snappy-
//! compressed protobuf, over keep-alive connections (Prometheus' shards), each series always
//! on the same connection so its samples arrive in order. Half the series are `_total`
//! counters (stored as increases), half gauges, with node_exporter's label shapes.
//!
//! `cargo bench --bench prom_remote`. Prints figures: samples/s end to end (every request
//! answered 204, so every sample landed), and the decode cost of one request in this process
//! (snappy, protobuf, series keys) for comparison. Bodies are built before the clock starts.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use prost::Message;
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

fn labels(s: usize) -> Vec<Label> {
    let metric = s % 250;
    let name = if metric.is_multiple_of(2) {
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

/// The request of series group `group` (series `group*500 .. +500`) at scrape `step`.
fn request(fleet: &[Vec<Label>], group: usize, step: i64, ts: i64) -> Vec<u8> {
    let timeseries = (group * PER_REQUEST..(group + 1) * PER_REQUEST)
        .map(|s| TimeSeries {
            labels: fleet[s].clone(),
            samples: vec![PromSample {
                value: (step * 1000 + (s as i64 % 97)) as f64 + 0.25,
                timestamp: ts * 1000 + 123,
            }],
            histograms: vec![],
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
fn run(addr: SocketAddr, fleet: &[Vec<Label>], steps: std::ops::Range<i64>, t0: i64) -> Duration {
    let groups = SERIES / PER_REQUEST;
    let per_connection: Vec<Vec<Vec<u8>>> = (0..CONNECTIONS)
        .map(|c| {
            let mut bodies = Vec::new();
            for step in steps.clone() {
                for group in (c..groups).step_by(CONNECTIONS) {
                    bodies.push(request(fleet, group, step, t0 + step * CADENCE));
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
    let fleet: Vec<Vec<Label>> = (0..SERIES).map(labels).collect();

    // In process: what decoding one request costs (no engine, no HTTP).
    let body = request(&fleet, 0, 1, chrono::Utc::now().timestamp());
    let mut key = String::new();
    let rounds: u32 = std::env::var("TIERDB_BENCH_ROUNDS").map_or(2000, |r| r.parse().unwrap());
    let began = Instant::now();
    for _ in 0..rounds {
        let decoded = prom_remote::decode(&body, 64 << 20).unwrap();
        let mut tags = Vec::new();
        for series in &decoded.timeseries {
            prom_remote::series_key(&series.labels, &mut tags, &mut key).unwrap();
        }
    }
    let each = began.elapsed() / rounds;
    println!(
        "decode one request (500 series, {} bytes): {each:.1?} = {:.2} M samples/s on one core",
        body.len(),
        PER_REQUEST as f64 / each.as_secs_f64() / 1e6
    );

    // For a profile of the decode alone (callgrind): TIERDB_BENCH_DECODE_ONLY=1.
    if std::env::var_os("TIERDB_BENCH_DECODE_ONLY").is_some() {
        return;
    }
    let server = server_support::start();
    let now = chrono::Utc::now().timestamp();
    let t0 = now - now % 3600 - (RUNS as i64 + 1) * SCRAPES * CADENCE;
    // Warm-up: every series registered (and its counter's baseline set), as in steady state.
    run(server.http, &fleet, 0..1, t0);
    for r in 0..RUNS as i64 {
        let steps = 1 + r * SCRAPES..1 + (r + 1) * SCRAPES;
        let took = run(server.http, &fleet, steps, t0);
        let samples = SERIES as f64 * SCRAPES as f64;
        println!(
            "remote write over HTTP: {samples} samples ({SERIES} series, {PER_REQUEST} per request, \
             {CONNECTIONS} connections) in {took:.2?} = {:.2} M samples/s",
            samples / took.as_secs_f64() / 1e6
        );
    }
}
