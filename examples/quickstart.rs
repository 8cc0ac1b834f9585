//! Quickstart: tierdb plays back a monitoring agent's last 24 hours and answers at every zoom
//! level.
//!
//! Run it with `cargo run --release --example quickstart`. It needs no setup: the data
//! directory is a temporary one, deleted at the end (pass a path to keep it).
//!
//! What happens:
//! 1. We open an engine with the default tiers (1m, 5m, 1h, 1d; see tiers.toml).
//! 2. A simulated agent on three hosts reports every 10 seconds for the last 24 hours:
//!    `cpu.user` (percent, with a daily shape), `memory.used` (bytes) and `http.requests`
//!    (requests served in each 10 s interval, busier in the afternoon).
//! 3. Every sample fans out to all four tiers as it is written; nothing keeps raw data.
//! 4. We read it back the way MMS's charts do: requests as avg/sec and as totals, cpu as
//!    average and max, each at the zoom level that fits the range.

use std::time::Instant;

use tierdb::{Display, Engine, Query, Sample};

const HOSTS: [&str; 3] = ["web-1", "web-2", "db-1"];
const CADENCE: i64 = 10;
const DAY: i64 = 86_400;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Open (or create) a data directory. `Engine::open` locks it, maps its files and
    //    creates the current and next period files of every tier ahead of need.
    let temp = tempfile::tempdir()?;
    let dir = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temp.path().to_path_buf());
    let engine = Engine::open(&dir)?;

    // 2. Resolve each series once to its dense id; the batch API takes ids.
    let now = chrono::Utc::now().timestamp();
    let end = now - now % 3600; // the last whole hour
    let start = end - DAY;
    let mut series = Vec::new();
    for host in HOSTS {
        for metric in ["cpu.user", "memory.used", "http.requests"] {
            let id = engine.series(&format!("{metric}{{host={host}}}"))?;
            series.push((id, metric, host));
        }
    }

    // 3. Play the day back as a backfill script would: one batch per simulated hour. Each
    //    `record_batch` returns once its samples are in the mapped files. (A live agent sends
    //    one small batch per flush; that works the same, at a per-batch cost of a thread
    //    hand-off.)
    let began = Instant::now();
    let mut written = 0u64;
    let mut batch = Vec::new();
    for hour in (start..end).step_by(3600) {
        batch.clear();
        for ts in (hour..hour + 3600).step_by(CADENCE as usize) {
            for (h, &(id, metric, _)) in series.iter().enumerate() {
                batch.push(Sample::new(id, ts, simulate(metric, h as f64, ts)));
            }
        }
        written += engine.record_batch(&batch)?.accepted;
    }
    let elapsed = began.elapsed();
    println!(
        "wrote {written} samples ({} series x 24 h at {CADENCE} s) in {elapsed:.2?}: {:.1} M samples/s, each into 4 tiers\n",
        series.len(),
        written as f64 / elapsed.as_secs_f64() / 1e6
    );

    // 4. Read at each zoom level.
    let requests = "http.requests{host=web-1}";
    let cpu = "cpu.user{host=web-1}";
    show(
        &engine,
        "last 10 minutes at 1m",
        Query::new(requests, end - 600, end)
            .tier("1m")
            .display(Display::PerSec),
        "req/s",
    )?;
    show(
        &engine,
        "last hour at 5m",
        Query::new(cpu, end - 3600, end)
            .tier("5m")
            .display(Display::Max),
        "max cpu %",
    )?;
    show(
        &engine,
        "last 24 hours at 1h",
        Query::new(requests, start, end)
            .tier("1h")
            .display(Display::Total),
        "requests",
    )?;
    let day = Query::new(requests, end - end % DAY - DAY, end + DAY).tier("1d");
    show(
        &engine,
        "by day at 1d (yesterday and today so far)",
        day.display(Display::Total),
        "requests",
    )?;
    let auto = Query::new(cpu, start, end).display(Display::Avg);
    let picked = engine.query(&auto)?;
    println!(
        "auto zoom for 24 h of {cpu}: tier {} with {} points (budget {})",
        picked.tier,
        picked.points.len(),
        engine.config().engine.max_points
    );
    engine.close()?;
    Ok(())
}

/// A plausible value for `metric` on host number `host` at `ts`.
fn simulate(metric: &str, host: f64, ts: i64) -> f64 {
    let hour = (ts % DAY) as f64 / 3600.0;
    // Busy in the (UTC) afternoon, quiet at night.
    let daily = 0.5 - 0.5 * ((hour - 3.0) / 24.0 * std::f64::consts::TAU).cos();
    let jitter = ((ts as f64 * 0.37 + host * 11.0).sin() + 1.0) / 2.0;
    match metric {
        "cpu.user" => 5.0 + 60.0 * daily + 10.0 * jitter + host * 3.0,
        "memory.used" => (2.0 + daily + 0.1 * jitter) * 1024.0 * 1024.0 * 1024.0,
        _ => (200.0 + 1800.0 * daily + 100.0 * jitter).round(),
    }
}

fn show(engine: &Engine, title: &str, query: Query, unit: &str) -> tierdb::Result<()> {
    let result = engine.query(&query)?;
    println!(
        "{} / {title} / {} ({unit}):",
        result.series,
        result.display.as_str()
    );
    for (ts, value) in result.points {
        let when = tierdb::time::format_ts(ts);
        match value {
            Some(v) => println!("  {when}  {v:>16.2}"),
            None => println!("  {when}  {:>16}", "(no samples)"),
        }
    }
    println!();
    Ok(())
}
