//! `tierdb import` speed: a 10-million-line Graphite plaintext file (1,000 series at a 10 s
//! cadence: 10,000 instants, about 28 hours) imported into a fresh data directory through
//! the same code path as the command (`tierdb::cli::import::import`).
//! Prints lines/s. `cargo bench --bench import`.

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use std::io::Write;
use std::time::Instant;

use tierdb::cli::import::{import, Format};
use tierdb::ingest::influx::Precision;
use tierdb::Engine;

const SERIES: usize = 1_000;
const INSTANTS: i64 = 10_000;
const CADENCE: i64 = 10;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = support::bench_dir();
    let now = chrono::Utc::now().timestamp();
    let start = now - now % 3600 - INSTANTS * CADENCE;
    let file = dir.path().join("input.txt");
    {
        let mut out =
            std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&file).unwrap());
        for step in 0..INSTANTS {
            let ts = start + step * CADENCE;
            for s in 0..SERIES {
                writeln!(
                    out,
                    "servers.host{:03}.cpu.metric{:02} {}.25 {ts}",
                    s / 10,
                    s % 10,
                    (step + s as i64) % 100
                )
                .unwrap();
            }
        }
    }
    let bytes = std::fs::metadata(&file).unwrap().len();
    // Read it once so the figure is import speed, not disk speed.
    let _ = std::fs::read(&file).unwrap();
    let engine = Engine::open(dir.path().join("data")).unwrap();
    let began = Instant::now();
    let summary = import(
        &engine,
        std::fs::File::open(&file).unwrap(),
        Some(Format::Graphite),
        Precision::Nanoseconds,
        |_| {},
    )
    .unwrap();
    let elapsed = began.elapsed();
    engine.close().unwrap();
    assert_eq!(summary.lines, SERIES as u64 * INSTANTS as u64);
    println!(
        "import: {} lines ({:.0} MB, {SERIES} series at {CADENCE} s) in {elapsed:.2?} = {:.2} M lines/s; {} accepted, {} rejected",
        summary.lines,
        bytes as f64 / 1e6,
        summary.lines as f64 / elapsed.as_secs_f64() / 1e6,
        summary.accepted,
        summary.rejected_total()
    );
}
