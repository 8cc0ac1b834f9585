//! Embedding tierdb in a program of its own: a tiny system monitor that samples this
//! machine's load average and free memory a few times a second, keeps them in an embedded
//! tierdb, and prints what the last minutes looked like at each zoom level.
//!
//! Run it with `cargo run --release --example embed [SECONDS] [DATA_DIR]` (default: 5 s
//! into a temporary directory). Run it twice with the same DATA_DIR and the second run's
//! report includes the first run's samples: the data directory is the whole state.
//!
//! What it shows:
//! - opening an engine with its defaults (`Engine::open`) and the series API
//!   (`engine.series` returns the dense id the batch API takes);
//! - writing as you go with `record_batch` (each call returns once the samples are in the
//!   memory-mapped files);
//! - reading back the same data as averages, extremes and counts, at 1m and 1h;
//! - closing cleanly (`close` flushes and unlocks), so the next run opens without repair.

use std::time::{Duration, Instant};

use tierdb::{Display, Engine, Query, Sample};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(5);
    let temp = tempfile::tempdir()?;
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temp.path().to_path_buf());

    // One engine per data directory; it locks the directory for as long as it is open.
    let engine = Engine::open(&dir)?;
    let host = "localhost";
    let load = engine.series(&format!("system.load1{{host={host}}}"))?;
    let free = engine.series(&format!("system.mem_available_bytes{{host={host}}}"))?;

    println!("sampling for {seconds} s into {}", dir.display());
    let started = Instant::now();
    let mut samples = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        let now = chrono::Utc::now().timestamp();
        let mut batch = Vec::new();
        if let Some(value) = read_loadavg() {
            batch.push(Sample::new(load, now, value));
        }
        if let Some(value) = read_mem_available() {
            batch.push(Sample::new(free, now, value));
        }
        // Returns once the samples are in the mapped files; bad ones would be counted in
        // the report by reason, never silently dropped.
        samples += engine.record_batch(&batch)?.accepted;
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("wrote {samples} samples\n");

    let now = chrono::Utc::now().timestamp();
    let from = now - now % 60 - 5 * 60;
    for (series, unit) in [
        (format!("system.load1{{host={host}}}"), ""),
        (
            format!("system.mem_available_bytes{{host={host}}}"),
            " bytes",
        ),
    ] {
        println!("{series}, last minutes at 1m (avg / min / max, samples):");
        let read = |display| {
            engine.query(
                &Query::new(series.clone(), from, now + 1)
                    .tier("1m")
                    .display(display),
            )
        };
        let (avg, min, max, count) = (
            read(Display::Avg)?,
            read(Display::Min)?,
            read(Display::Max)?,
            read(Display::Count)?,
        );
        for i in 0..avg.points.len() {
            let (ts, value) = avg.points[i];
            let Some(value) = value else { continue };
            println!(
                "  {}  {value:.2}{unit} / {:.2} / {:.2}  ({} samples)",
                tierdb::time::format_ts(ts),
                min.points[i].1.unwrap_or_default(),
                max.points[i].1.unwrap_or_default(),
                count.points[i].1.unwrap_or_default()
            );
        }
        let hour = engine.query(
            &Query::new(series.clone(), now - now % 3600, now + 1)
                .tier("1h")
                .display(Display::Max),
        )?;
        println!("  this hour's max at 1h: {:?}\n", hour.points[0].1);
    }
    engine.close()?;
    Ok(())
}

/// The 1-minute load average from /proc/loadavg (Linux).
fn read_loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// MemAvailable from /proc/meminfo, in bytes (Linux).
fn read_mem_available() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0)
}
