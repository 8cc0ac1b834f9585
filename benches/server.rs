//! The server over loopback: a Graphite plaintext stream for 100k series replayed into a
//! `tierdb serve` process from this (separate) process, and the latency of a one-series
//! 24h@1m query over HTTP.
//!
//! `cargo bench --bench server`. Prints figures. Needs ~30 GB of free disk for the 100k
//! series' preallocated files (set `TIERDB_BENCH_DIR` to choose where).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

const SERIES: usize = 100_000;
const STEPS: i64 = 60;
const CADENCE: i64 = 10;
const CONNECTIONS: usize = 2;

struct Server {
    child: Child,
    http: SocketAddr,
    graphite: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn start(dir: &std::path::Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--graphite",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start tierdb serve");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut http, mut graphite) = (None, None);
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(addr) = line.strip_prefix("tierdb: http listening on ") {
            http = addr.parse().ok();
        } else if let Some(addr) = line.strip_prefix("tierdb: graphite tcp listening on ") {
            graphite = addr.parse().ok();
        } else if line == "tierdb: ready" {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Server {
        child,
        http: http.expect("http address"),
        graphite: graphite.expect("graphite address"),
    }
}

fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

fn accepted(server: &Server) -> u64 {
    get(server.http, "/metrics")
        .lines()
        .find_map(|l| l.strip_prefix("tierdb_samples_accepted_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = support::bench_dir();
    let server = start(dir.path());
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
