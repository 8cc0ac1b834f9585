//! The raw tier (issue 16). Two measurements, each beside a control in the same run (the
//! machine is shared and noisy, so compare within a run, not across runs):
//! - `raw_ingest`: 2,000 series written at a 10 s cadence through the batch API, every
//!   sample folded into the four default rollup tiers, with a raw tier (`rollups_and_raw`)
//!   and without one (`rollups_only`, the control). Throughput is samples per second; the
//!   issue's target is >= 5 M/s with the raw tier. Maintenance passes run between measured
//!   steps, outside the timing, as the background thread runs them ahead of need
//!   (`TIERDB_BENCH_NO_MAINT=1`: none, so the writers create raw files on demand, timed).
//! - `raw_read`: one series' 24 h of raw points at 10 s (8,640 points, 35 segments) through
//!   `Engine::query` with `tier=raw` (target <= 50 us), and the same day from the 1m rollup
//!   tier (1,440 buckets) as the control.
//!
//! `cargo bench --bench raw`. Uses about 300 MB of disk under `TIERDB_BENCH_DIR` (or the
//! system temp dir).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use tierdb::{Engine, ManualClock, Query, RawTierSpec, Sample, Span, TiersConfig};

/// 2025-11-21T00:00:00Z: a day boundary, so a run stays within the raw tier's 1d period.
const DAY_START: i64 = 1_763_683_200;
const DAY: i64 = 86_400;
const SERIES: u32 = 2_000;
const CADENCE: i64 = 10;
/// Instants per measured iteration: 100k samples.
const STEPS_PER_ITER: u64 = 50;

fn with_raw() -> TiersConfig {
    TiersConfig {
        raw: Some(RawTierSpec {
            name: "raw".to_string(),
            period: Span::from_secs(DAY as u64),
            retention: Span::from_secs(7 * DAY as u64),
            create_ahead: 1,
            dedupe_unchanged: false,
        }),
        ..TiersConfig::default()
    }
}

fn ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("raw_ingest");
    group.throughput(Throughput::Elements(u64::from(SERIES) * STEPS_PER_ITER));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    for (name, config) in [
        ("rollups_only", TiersConfig::default()),
        ("rollups_and_raw", with_raw()),
    ] {
        let dir = support::bench_dir();
        let start = DAY_START + 60;
        let clock = Arc::new(ManualClock::new(start));
        let engine = Engine::builder(dir.path())
            .tiers(config)
            .clock(clock.clone())
            .background_maintenance(false)
            .open()
            .expect("open");
        let ids = support::register_fleet(&engine, SERIES);
        let mut batch = Vec::with_capacity(ids.len());
        let mut ts = start;
        let no_maint = std::env::var_os("TIERDB_BENCH_NO_MAINT").is_some();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    // What the background thread does ahead of need (every minute for real,
                    // every 500 simulated seconds here, where the clock runs thousands of
                    // times faster), outside the timing: with `TIERDB_BENCH_NO_MAINT=1` the
                    // writers create the raw files on demand instead, inside it.
                    if !no_maint {
                        engine.maintain().expect("maintenance");
                    }
                    let begin = Instant::now();
                    for _ in 0..STEPS_PER_ITER {
                        clock.set(ts);
                        batch.clear();
                        batch.extend(ids.iter().map(|&id| Sample::new(id, ts, (ts % 600) as f64)));
                        let report = engine.record_batch(&batch).expect("batch");
                        assert_eq!(report.accepted as usize, batch.len());
                        ts += CADENCE;
                    }
                    spent += begin.elapsed();
                }
                spent
            })
        });
        let stats = engine.stats();
        if stats.raw.stored > 0 {
            assert_eq!(stats.raw.out_of_order + stats.raw.unavailable, 0);
            let raw = stats.tiers.last().expect("raw tier");
            eprintln!(
                "{name}: {} raw points in {} files ({} created on demand), {:.1} bytes per point",
                stats.raw.stored,
                raw.disk.files,
                raw.disk.on_demand_creations,
                raw.disk.bytes as f64 / stats.raw.stored as f64
            );
        }
    }
    group.finish();
}

fn read(c: &mut Criterion) {
    let dir = support::bench_dir();
    let now = DAY_START + DAY;
    let clock = Arc::new(ManualClock::new(now));
    let engine = Engine::builder(dir.path())
        .tiers(with_raw())
        .clock(clock)
        .background_maintenance(false)
        .open()
        .expect("open");
    let ids: Vec<_> = (0..1000)
        .map(|i| engine.series(&format!("host{i:04}.followers")).unwrap())
        .collect();
    // Interleaved with other series, as a live day would be: the target's segments are not
    // neighbours in their files.
    for step in 0..DAY / CADENCE {
        let ts = DAY_START + step * CADENCE;
        let batch: Vec<Sample> = ids
            .iter()
            .step_by(50)
            .map(|&id| Sample::new(id, ts, (step % 97) as f64))
            .collect();
        engine.record_batch(&batch).expect("write");
    }
    let series = "host0050.followers";
    let raw = Query::new(series, DAY_START, now).tier("raw");
    let rollup = Query::new(series, DAY_START, now).tier("1m");
    let answer = engine.query(&raw).unwrap();
    assert_eq!(answer.points.len(), 8_640);
    assert_eq!(engine.query(&rollup).unwrap().points.len(), 1_440);
    let mut group = c.benchmark_group("raw_read");
    group.bench_function("24h_of_10s_points_raw", |b| {
        b.iter(|| engine.query(&raw).unwrap())
    });
    group.bench_function("24h_at_1m_rollup_control", |b| {
        b.iter(|| engine.query(&rollup).unwrap())
    });
    group.finish();
}

criterion_group!(benches, ingest, read);
criterion_main!(benches);
