//! Ingest throughput: 100k series at a 10 s cadence through the batch API, every sample fanned
//! out to the four default tiers, over simulated time that crosses every tier's period
//! boundary (the run starts one hour before 2011-12-22T00:00Z, a common multiple of the 1d,
//! 7d, 30d and 365d periods).
//!
//! `cargo bench --bench ingest`. Needs ~7 GB of free disk: the files for 100k series are
//! preallocated (current and next period of every tier), about 16 MB per 256 series.
//! `TIERDB_BENCH_SERIES=20000` runs a smaller fleet on a machine whose disk is shared.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use tierdb::{Engine, ManualClock, Sample, TiersConfig};

/// Series in the fleet unless `TIERDB_BENCH_SERIES` says otherwise.
const SERIES: u32 = 100_000;
const CADENCE: i64 = 10;
/// Samples per `record_batch` call: one agent flush.
const BATCH: usize = 10_000;
/// 2011-12-22T00:00:00Z: divisible by 1d, 7d, 30d and 365d.
const BOUNDARY: i64 = 1_324_512_000;
/// Simulated steps per measured iteration: five minutes of agent time.
const STEPS_PER_ITER: u64 = 30;

fn ingest(c: &mut Criterion) {
    let dir = support::bench_dir();
    let start = BOUNDARY - 1800;
    let clock = Arc::new(ManualClock::new(start));
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(clock.clone())
        .open()
        .expect("open");
    let setup = Instant::now();
    let series = std::env::var("TIERDB_BENCH_SERIES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(SERIES);
    let ids = support::register_fleet(&engine, series);
    eprintln!(
        "registered {series} series and preallocated their files in {:.1?}",
        setup.elapsed()
    );
    let mut batch = Vec::with_capacity(BATCH);
    let mut ts = start;
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(u64::from(series) * STEPS_PER_ITER));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(30));
    group.bench_function("100k_series_10s_step_4_tiers", |b| {
        b.iter_custom(|steps| {
            let begin = Instant::now();
            for _ in 0..steps * STEPS_PER_ITER {
                clock.set(ts);
                for chunk in ids.chunks(BATCH) {
                    batch.clear();
                    batch.extend(
                        chunk
                            .iter()
                            .map(|&id| Sample::new(id, ts, (ts % 600) as f64)),
                    );
                    let report = engine.record_batch(&batch).expect("batch");
                    assert_eq!(report.accepted as usize, batch.len());
                }
                ts += CADENCE;
                // Stay inside the periods created ahead (issue: rolling window).
                if ts >= BOUNDARY + 7200 {
                    ts = start;
                }
            }
            begin.elapsed()
        })
    });
    group.finish();
    let stats = engine.stats();
    eprintln!(
        "accepted {} samples; on-demand file creations {}",
        stats.accepted, stats.on_demand_creations
    );
}

criterion_group!(benches, ingest);
criterion_main!(benches);
