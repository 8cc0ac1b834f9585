//! One-series reads: 24 h at 1 m (1440 points from the 1m tier) and 30 d at 1 h (720 points
//! from the 1h tier), through the public `Engine::query`, series named by text. Data: 1000
//! series, the queried one written every 10 s for the whole range. Read first with every
//! period hot (mapped), then again after maintenance compacted the closed periods (`_compacted`:
//! the day is four closed 6h periods, so all of it comes from compacted files; the month is
//! two closed 10d periods and the current, hot one).
//!
//! `cargo bench --bench query`.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use tierdb::{Display, Engine, ManualClock, Query, Sample, TiersConfig};

/// 2025-11-21T12:00:00Z.
const NOW: i64 = 1_763_726_400;
const DAY: i64 = 86_400;

fn query(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(clock)
        .background_maintenance(false)
        .open()
        .expect("open");
    let ids: Vec<_> = (0..1000)
        .map(|i| engine.series(&format!("host{i:04}.cpu{{dc=eu}}")).unwrap())
        .collect();
    let target = ids[777];
    let start = NOW - 31 * DAY;
    let batch: Vec<Sample> = (0..31 * DAY / 10)
        .map(|i| Sample::new(target, start + i * 10, (i % 97) as f64))
        .collect();
    for chunk in batch.chunks(100_000) {
        engine.record_batch(chunk).expect("write");
    }
    let series = "host0777.cpu{dc=eu}";
    let day = Query::new(series, NOW - DAY, NOW)
        .tier("1m")
        .display(Display::Avg);
    let month = Query::new(series, NOW - 30 * DAY, NOW)
        .tier("1h")
        .display(Display::PerSec);
    assert_eq!(engine.query(&day).unwrap().points.len(), 1440);
    assert_eq!(engine.query(&month).unwrap().points.len(), 720);
    assert!(engine
        .query(&month)
        .unwrap()
        .points
        .iter()
        .all(|p| p.1.is_some()));

    let mut group = c.benchmark_group("query_one_series");
    group.bench_function("24h_at_1m", |b| b.iter(|| engine.query(&day).unwrap()));
    group.bench_function("30d_at_1h", |b| b.iter(|| engine.query(&month).unwrap()));
    let hot = (engine.query(&day).unwrap(), engine.query(&month).unwrap());
    // Two passes: the first sees the closed periods quiet, the second compacts them.
    engine.maintain().expect("maintenance");
    let compacted = engine.maintain().expect("maintenance").compacted;
    assert!(compacted > 0);
    assert_eq!(
        (engine.query(&day).unwrap(), engine.query(&month).unwrap()),
        hot
    );
    group.bench_function("24h_at_1m_compacted", |b| {
        b.iter(|| engine.query(&day).unwrap())
    });
    group.bench_function("30d_at_1h_compacted", |b| {
        b.iter(|| engine.query(&month).unwrap())
    });
    group.finish();
}

criterion_group!(benches, query);
criterion_main!(benches);
