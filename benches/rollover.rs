//! Period rollover under load: 100k series ingest at a 10 s cadence across 2011-12-22T00:00Z,
//! where every default tier starts a new period, while a maintenance thread creates the next
//! periods' files for all 100k series (391 chunks x 4 tiers) and drops nothing yet. Prints
//! ingest throughput and the batch latency distribution across the boundary; the rollover
//! must not stall ingest: the worst batch stays within 2x of the median.
//!
//! `cargo bench --bench rollover` (prints figures; not a criterion statistics run, because the
//! figure that matters is the worst batch, not the mean). Needs ~45 GB of free disk.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierdb::{Engine, ManualClock, Sample, SeriesId, TiersConfig};

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
    let dir = tempfile::tempdir_in(std::env::var("TIERDB_BENCH_DIR").unwrap_or(".".into()))
        .expect("temp dir");
    let start = BOUNDARY - MINUTES * 60;
    let clock = Arc::new(ManualClock::new(start));
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .expect("open");
    let setup = Instant::now();
    let ids: Vec<SeriesId> = (0..SERIES)
        .map(|i| {
            engine
                .series(&format!("host{:03}.metric{:03}", i / 1000, i % 1000))
                .unwrap()
        })
        .collect();
    eprintln!(
        "registered {SERIES} series; current and next periods preallocated in {:.1?}",
        setup.elapsed()
    );
    engine.maintain().expect("maintenance");

    let running = AtomicBool::new(true);
    let mut latencies = Vec::new();
    let mut boundary_batches = Vec::new();
    let mut creations = (0usize, Duration::ZERO);
    let began = Instant::now();
    std::thread::scope(|scope| {
        // Maintenance as the background task runs it, but far more often than its real
        // interval, because simulated time here runs ~1000x faster than the wall clock.
        let maintenance = scope.spawn(|| {
            let mut created = 0;
            let mut busy = Duration::ZERO;
            while running.load(Ordering::Relaxed) {
                let t = Instant::now();
                if std::env::var("NO_MAINT").is_err() {
                    created += engine.maintain().expect("maintenance").created;
                }
                busy += t.elapsed();
                std::thread::sleep(Duration::from_millis(20));
            }
            (created, busy)
        });
        let mut batch = Vec::with_capacity(BATCH);
        let mut ts = start;
        while ts < BOUNDARY + MINUTES * 60 {
            clock.set(ts);
            for chunk in ids.chunks(BATCH) {
                batch.clear();
                batch.extend(
                    chunk
                        .iter()
                        .map(|&id| Sample::new(id, ts, (ts % 600) as f64)),
                );
                let t = Instant::now();
                let report = engine.record_batch(&batch).expect("batch");
                let took = t.elapsed();
                assert_eq!(report.accepted as usize, batch.len());
                latencies.push(took);
                if std::env::var("SHOW_SLOW").is_ok() && took > Duration::from_millis(3) {
                    eprintln!(
                        "slow batch at ts {} (boundary{:+}s) chunk {}: {took:.2?}",
                        ts,
                        ts - BOUNDARY,
                        chunk[0].0 / BATCH as u32
                    );
                }
                if (BOUNDARY..BOUNDARY + 60).contains(&ts) {
                    boundary_batches.push(took);
                }
            }
            ts += CADENCE;
        }
        running.store(false, Ordering::Relaxed);
        creations = maintenance.join().unwrap();
    });
    let elapsed = began.elapsed();
    let samples = latencies.len() * BATCH;
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    let median = pct(0.5);
    let worst = *latencies.last().unwrap();
    let worst_boundary = boundary_batches.iter().max().copied().unwrap_or_default();
    let stats = engine.stats();
    println!(
        "rollover: {samples} samples in {elapsed:.2?} = {:.2} M samples/s (4 tiers each)",
        samples as f64 / elapsed.as_secs_f64() / 1e6
    );
    println!(
        "batch of {BATCH}: median {median:.2?}, p99 {:.2?}, p99.9 {:.2?}, worst {worst:.2?} ({:.2}x median); worst in the first minute after the boundary {worst_boundary:.2?}",
        pct(0.99),
        pct(0.999),
        worst.as_secs_f64() / median.as_secs_f64()
    );
    println!(
        "maintenance created {} files during the run, busy {:.2?}; on-demand creations {}",
        creations.0, creations.1, stats.on_demand_creations
    );
}
