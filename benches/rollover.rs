//! Period rollover under load: 100k series ingest at a 10 s cadence across 2011-12-22T00:00Z,
//! where every default tier starts a new period, while the background maintenance task
//! creates the next periods' files for all 100k series (391 chunks x 4 tiers = 1,564 files)
//! and prefaults the bucket blocks ahead. Prints ingest throughput and the batch latency
//! distribution across the boundary.
//!
//! Two runs, each on a fresh data directory:
//! - `saturated`: batches back to back, as fast as the engine takes them (throughput).
//! - `live`: batches offered at 1 M samples/s (100 agents' flushes a second; `OFFERED=N` for
//!   another rate), simulated time 100x faster than the wall clock and maintenance every
//!   600 ms instead of every minute to match: the rollover must not stall ingest, so the
//!   worst batch should stay within 2x of the median.
//!
//! In the saturated run simulated time runs ~1000x faster than the wall clock and
//! maintenance runs every 20 ms, so its work takes a far larger share of the machine than
//! it would in a day of real time.
//!
//! `cargo bench --bench rollover`. Prints figures rather than criterion statistics, because
//! the figure that matters is the worst batch, not the mean. Needs ~45 GB of free disk (set
//! `TIERDB_BENCH_DIR` to choose where).

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support.rs"]
mod support;

use tierdb::{Engine, ManualClock, Sample, TiersConfig};

const SERIES: u32 = 100_000;
const CADENCE: i64 = 10;
const BATCH: usize = 10_000;
/// 2011-12-22T00:00:00Z: divisible by 1d, 7d, 30d and 365d.
const BOUNDARY: i64 = 1_324_512_000;
/// Simulated minutes on each side of the boundary.
const MINUTES: i64 = 10;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let saturated = run(None);
    saturated.print("saturated");
    let offered = std::env::var("OFFERED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1e6);
    run(Some(offered)).print(&format!("live, offered {:.1} M samples/s", offered / 1e6));
}

struct Outcome {
    rate: f64,
    latencies: Vec<Duration>,
    after_boundary: Vec<Duration>,
    created_during_run: u64,
    on_demand: u64,
}

impl Outcome {
    fn print(&self, name: &str) {
        let mut all = self.latencies.clone();
        all.sort();
        let pct = |p: f64| all[((all.len() - 1) as f64 * p) as usize];
        let median = pct(0.5);
        let worst = *all.last().unwrap();
        let worst_after = self
            .after_boundary
            .iter()
            .max()
            .copied()
            .unwrap_or_default();
        println!(
            "{name}: {} batches of {BATCH} = {:.2} M samples/s ingested (4 tiers each)",
            all.len(),
            self.rate / 1e6
        );
        println!(
            "  batch latency: median {median:.2?}, p99 {:.2?}, p99.9 {:.2?}, worst {worst:.2?} ({:.2}x median); worst in the first simulated minute after the boundary {worst_after:.2?} ({:.2}x median)",
            pct(0.99),
            pct(0.999),
            worst.as_secs_f64() / median.as_secs_f64(),
            worst_after.as_secs_f64() / median.as_secs_f64(),
        );
        println!(
            "  files of the periods after the boundary created during the run: {} of 1564; on-demand creations: {}",
            self.created_during_run, self.on_demand
        );
    }
}

/// The default tiers' maintenance interval (one minute), scaled by how much faster than the
/// wall clock simulated time runs at the offered rate; every 20 ms when saturated.
fn maintenance_every(rate: Option<f64>) -> Duration {
    let samples_per_real_second = f64::from(SERIES) / CADENCE as f64;
    rate.map_or(Duration::from_millis(20), |rate| {
        Duration::from_secs_f64(60.0 * samples_per_real_second / rate)
    })
}

/// Ingests from ten simulated minutes before the boundary to ten after, offering `rate`
/// samples per second (`None`: as fast as possible).
fn run(rate: Option<f64>) -> Outcome {
    let dir = support::bench_dir();
    let start = BOUNDARY - MINUTES * 60;
    let clock = Arc::new(ManualClock::new(start));
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(clock.clone())
        .maintenance_every(maintenance_every(rate))
        .background_maintenance(std::env::var_os("NO_MAINT").is_none())
        .open()
        .expect("open");
    // The current and next periods exist before the run; the run crosses into "next" and
    // maintenance creates the one after it.
    let ids = support::register_fleet(&engine, SERIES);
    let ahead_files = |engine: &Engine| -> u64 {
        engine
            .stats()
            .tiers
            .iter()
            .map(|t| t.disk.created_ahead)
            .sum()
    };
    let ahead_before = ahead_files(&engine);

    let mut latencies = Vec::new();
    let mut after_boundary = Vec::new();
    let mut batch = Vec::with_capacity(BATCH);
    let began = Instant::now();
    let mut busy = Duration::ZERO;
    let mut sent = 0usize;
    let mut ts = start;
    while ts < BOUNDARY + MINUTES * 60 {
        clock.set(ts);
        for chunk in ids.chunks(BATCH) {
            if let Some(rate) = rate {
                let due = began + Duration::from_secs_f64(sent as f64 / rate);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            batch.clear();
            batch.extend(
                chunk
                    .iter()
                    .map(|&id| Sample::new(id, ts, (ts % 600) as f64)),
            );
            let t = Instant::now();
            let report = engine.record_batch(&batch).expect("batch");
            let took = t.elapsed();
            busy += took;
            sent += batch.len();
            assert_eq!(report.accepted as usize, batch.len());
            latencies.push(took);
            if (BOUNDARY..BOUNDARY + 60).contains(&ts) {
                after_boundary.push(took);
            }
        }
        ts += CADENCE;
    }
    let elapsed = began.elapsed();
    let stats = engine.stats();
    Outcome {
        rate: sent as f64 / if rate.is_some() { elapsed } else { busy }.as_secs_f64(),
        latencies,
        after_boundary,
        created_during_run: ahead_files(&engine) - ahead_before,
        on_demand: stats.on_demand_creations,
    }
}
