//! `tierdb import` speed: a Graphite plaintext file imported into a fresh data directory
//! through the same code path as the command (`tierdb::cli::import::import`). Prints lines/s.
//!
//! Two shapes, both at a 10 s cadence ending near now:
//! - `cargo bench --bench import`: 1,000 series × 10,000 instants (10 M lines, about 28
//!   hours): steady ingest, few files.
//! - `TIERDB_IMPORT_SHAPE=new-series cargo bench --bench import`: 100,000 series × 60
//!   instants (6 M lines, 10 minutes): every series is new, so the import creates the files
//!   of 391 chunks as it goes (about 6 GB of preallocated files under `TIERDB_BENCH_DIR`).
//!
//! `TIERDB_IMPORT_AGAIN=1` imports the file a second time into the same data directory, as
//! a control: the same lines with every series registered and every file in place.
//!
//! Space new-series runs a few minutes apart, or keep earlier runs' directories until the
//! end: on ext4 without a journal (this machine's disk) the inode allocator steps over every
//! inode deleted in the last 1-6 minutes, so files created just after a run's directory was
//! removed cost far more CPU (`recently_deleted` in a profile).

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use std::io::Write;
use std::time::Instant;

use tierdb::cli::import::Precision;
use tierdb::cli::import::{import, Format};
use tierdb::Engine;

const CADENCE: i64 = 10;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let (series, instants): (usize, i64) = match std::env::var("TIERDB_IMPORT_SHAPE").as_deref() {
        Ok("new-series") => (100_000, 60),
        _ => (1_000, 10_000),
    };
    let dir = support::bench_dir();
    let now = chrono::Utc::now().timestamp();
    // The long shape ends at the last full hour, the short one a minute before now.
    let end = if instants > 60 {
        now - now % 3600
    } else {
        now - 60
    };
    let start = end - instants * CADENCE;
    let file = dir.path().join("input.txt");
    {
        let mut out =
            std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&file).unwrap());
        for step in 0..instants {
            let ts = start + step * CADENCE;
            for s in 0..series {
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
    // Read it once so the figure is import speed, not disk speed, and write it to the disk
    // so its writeback does not compete with the import's.
    let _ = std::fs::read(&file).unwrap();
    rustix::fs::sync();
    // `TIERDB_IMPORT_AGAIN=1` imports the file a second time into the same directory: the
    // control, with every series registered and every file there.
    let rounds = if std::env::var_os("TIERDB_IMPORT_AGAIN").is_some() {
        2
    } else {
        1
    };
    for round in 0..rounds {
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
        let stats = engine.stats();
        let files: usize = stats.tiers.iter().map(|t| t.disk.files).sum();
        let closing = Instant::now();
        engine.close().unwrap();
        let closed = closing.elapsed();
        assert_eq!(summary.lines, series as u64 * instants as u64);
        println!(
            "import{}: {} lines ({:.0} MB, {series} series at {CADENCE} s) in {elapsed:.2?} = {:.2} M lines/s; {} accepted, {} rejected; {files} period files ({} created by batches); close {closed:.2?}; with the close {:.2} M lines/s",
            if round == 0 { "" } else { " again" },
            summary.lines,
            bytes as f64 / 1e6,
            summary.lines as f64 / elapsed.as_secs_f64() / 1e6,
            summary.report.accepted,
            summary.rejected_total(),
            stats.on_demand_creations,
            summary.lines as f64 / (elapsed + closed).as_secs_f64() / 1e6,
        );
    }
}
