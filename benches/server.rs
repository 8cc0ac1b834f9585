//! The server over loopback: a Graphite plaintext stream for 100k series replayed into a
//! `tierdb serve` process from this (separate) process, and the latency of a one-series
//! 24h@1m query over HTTP.
//!
//! `cargo bench --bench server`. Prints figures. Needs ~7 GB of free disk for the 100k
//! series' preallocated files (set `TIERDB_BENCH_DIR` to choose where).

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

#[path = "server_support.rs"]
mod server_support;

use server_support::{get, metric, start, Server};

const SERIES: usize = 100_000;
const STEPS: i64 = 60;
const CADENCE: i64 = 10;
const CONNECTIONS: usize = 2;

fn accepted(server: &Server) -> u64 {
    metric(server, "tierdb_samples_accepted_total")
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let server = start();
    let now = chrono::Utc::now().timestamp();
    let start_ts = now - now % 3600 - STEPS * CADENCE;

    // Register the series first (a one-line-each warm-up), as a running fleet would have.
    let mut warm = TcpStream::connect(server.graphite).unwrap();
    let mut text = Vec::new();
    for s in 0..SERIES {
        writeln!(
            text,
            "host{:04}.cpu.metric{:02} 1 {}",
            s / 100,
            s % 100,
            start_ts - 3600
        )
        .unwrap();
    }
    warm.write_all(&text).unwrap();
    drop(warm);
    while accepted(&server) < SERIES as u64 {
        std::thread::sleep(Duration::from_millis(100));
    }

    // The stream: STEPS instants of all series, split across connections by series.
    let streams: Vec<Vec<u8>> = (0..CONNECTIONS)
        .map(|c| {
            let mut out = Vec::with_capacity(SERIES / CONNECTIONS * STEPS as usize * 36);
            for step in 0..STEPS {
                let ts = start_ts + step * CADENCE;
                for s in (c..SERIES).step_by(CONNECTIONS) {
                    writeln!(
                        out,
                        "host{:04}.cpu.metric{:02} {}.5 {ts}",
                        s / 100,
                        s % 100,
                        step % 97
                    )
                    .unwrap();
                }
            }
            out
        })
        .collect();
    let lines = SERIES as u64 * STEPS as u64;
    let bytes: usize = streams.iter().map(Vec::len).sum();
    let before = accepted(&server);
    let began = Instant::now();
    let senders: Vec<_> = streams
        .into_iter()
        .map(|stream| {
            let addr = server.graphite;
            std::thread::spawn(move || {
                let mut conn = TcpStream::connect(addr).unwrap();
                conn.write_all(&stream).unwrap();
            })
        })
        .collect();
    for sender in senders {
        sender.join().unwrap();
    }
    while accepted(&server) < before + lines {
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = began.elapsed();
    println!(
        "graphite tcp: {lines} lines ({:.0} MB, {SERIES} series, {CONNECTIONS} connections) in {elapsed:.2?} = {:.2} M lines/s",
        bytes as f64 / 1e6,
        lines as f64 / elapsed.as_secs_f64() / 1e6
    );

    // One series, 24h at 1m, over HTTP (a new connection per request, as curl would).
    let path = format!(
        "/api/v1/query?series=host0042.cpu.metric07&tier=1m&from={}&to={}",
        now - 86_400,
        now
    );
    assert!(get(server.http, &path).contains("\"points\""));
    let mut times: Vec<Duration> = (0..2000)
        .map(|_| {
            let t = Instant::now();
            let body = get(server.http, &path);
            let took = t.elapsed();
            assert!(body.len() > 1000);
            took
        })
        .collect();
    times.sort();
    println!(
        "http query 24h@1m (1440 points, new connection each): p50 {:.0?}, p99 {:.0?}",
        times[times.len() / 2],
        times[times.len() * 99 / 100]
    );
}
