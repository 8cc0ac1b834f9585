//! A steady writer's batch latency while another connection creates 10k new series, against
//! the same writer with no such load, in one run of one `tierdb serve` process.
//!
//! The steady writer posts 500-sample Influx batches of series the server already holds over
//! one keep-alive HTTP connection, one batch every 5 ms, and times each from the request's
//! first byte to the end of its 204. First it runs alone (the control), then while a Graphite
//! TCP connection sends one sample each of 10,000 new series in one go: 40 new chunks of
//! files with the default tiers. The burst phase lasts until the server has registered all of
//! them and their samples landed.
//!
//! `cargo bench --bench series_burst`. Prints figures rather than criterion statistics,
//! because the figure that matters is the tail. Needs ~3 GB of free disk for the new series'
//! preallocated files (set `TIERDB_BENCH_DIR` to choose where).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

#[path = "server_support.rs"]
mod server_support;

use server_support::{metric, start};

/// Series the steady writer writes, one sample each per batch.
const STEADY_SERIES: usize = 500;
/// Pause between the steady writer's batches.
const CADENCE: Duration = Duration::from_millis(5);
/// How long the control phase runs.
const CONTROL: Duration = Duration::from_secs(15);
/// New series the burst creates.
const NEW_SERIES: usize = 10_000;
/// How long any wait may take.
const PATIENCE: Duration = Duration::from_secs(600);

/// One keep-alive HTTP/1.1 connection posting Influx batches.
struct Writer {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Writer {
    fn connect(addr: SocketAddr) -> Writer {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        Writer {
            stream,
            buf: Vec::new(),
        }
    }

    /// Posts `body` to `/write?precision=s`; panics unless it answers 204.
    fn post(&mut self, body: &[u8]) {
        write!(
            self.stream,
            "POST /write?precision=s HTTP/1.1\r\nHost: b\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        self.stream.write_all(body).unwrap();
        // A 204 has no body: the answer ends with its headers.
        self.buf.clear();
        let mut chunk = [0u8; 1024];
        while !self.buf.ends_with(b"\r\n\r\n") {
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
        assert!(
            self.buf.starts_with(b"HTTP/1.1 204"),
            "{}",
            String::from_utf8_lossy(&self.buf)
        );
    }
}

/// p50, p99 and the worst of `times`, as text.
fn summary(mut times: Vec<Duration>) -> String {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:.2?}, p99 {:.2?}, worst {:.2?} ({} batches)",
        at(0.5),
        at(0.99),
        times[times.len() - 1],
        times.len()
    )
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let server = start();
    let now = chrono::Utc::now().timestamp();
    let ts = now - now % 60 - 60;
    let mut steady = Vec::new();
    for s in 0..STEADY_SERIES {
        writeln!(steady, "steady,host=h{s:03} value=1 {ts}").unwrap();
    }
    let mut writer = Writer::connect(server.http);
    writer.post(&steady);

    // The steady writer, for the whole run: (when sent, how long it took).
    let stop = Arc::new(AtomicBool::new(false));
    let steady_thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut times = Vec::new();
            let began = Instant::now();
            while !stop.load(Ordering::Relaxed) && began.elapsed() < PATIENCE {
                let sent = Instant::now();
                writer.post(&steady);
                times.push((sent, sent.elapsed()));
                std::thread::sleep(CADENCE);
            }
            times
        })
    };
    let control_start = Instant::now();
    std::thread::sleep(CONTROL);
    let control_end = Instant::now();

    let series_before = metric(&server, "tierdb_series");
    let accepted_before = metric(&server, "tierdb_samples_accepted_total");
    let burst: String = (0..NEW_SERIES)
        .map(|s| format!("burst.host{:03}.metric{:03} 1 {ts}\n", s / 1000, s % 1000))
        .collect();
    let burst_start = Instant::now();
    let mut conn = TcpStream::connect(server.graphite).unwrap();
    conn.write_all(burst.as_bytes()).unwrap();
    drop(conn);
    // Done when every new series is registered and the burst's samples (beside the steady
    // writer's) have landed: polled on a new connection every 10 ms.
    loop {
        assert!(burst_start.elapsed() < PATIENCE, "the burst never finished");
        if metric(&server, "tierdb_series") >= series_before + NEW_SERIES as u64 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let burst_end = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let times = steady_thread.join().unwrap();
    assert!(metric(&server, "tierdb_samples_accepted_total") > accepted_before);

    // The batches sent in a phase, however long they took.
    let during = |from: Instant, to: Instant| -> Vec<Duration> {
        times
            .iter()
            .filter(|(sent, _)| (from..to).contains(sent))
            .map(|(_, took)| *took)
            .collect()
    };
    println!("steady writer ({STEADY_SERIES}-sample Influx batches over HTTP, every {CADENCE:?}):");
    println!(
        "  alone (control, {CONTROL:?}): {}",
        summary(during(control_start, control_end))
    );
    println!(
        "  while {NEW_SERIES} new series are created on another connection ({:.2?}): {}",
        burst_end - burst_start,
        summary(during(burst_start, burst_end))
    );
}
