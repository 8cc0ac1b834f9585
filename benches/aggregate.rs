//! Cross-series reads: the sum over 10,000 series × 7 days at 1 h, grouped by one tag (10
//! groups of 1,000), the figure issue #6 names (target ≤ 20 ms on the 2-core machine); plus
//! the same over the whole range (one point per group) and an ungrouped avg.
//!
//! Data: `cpu.load{dc=dcK,host=hNNNNN}`, one sample a series every 10 minutes for 7 days, so
//! every 1h bucket read holds 6 samples. Read with every period hot (mapped), then again
//! (`sum_by_dc_compacted`) after maintenance compacted the closed 10d period the first four
//! days lie in. `cargo bench --bench aggregate`.

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use tierdb::{
    AggregateQuery, Aggregation, Display, Engine, ManualClock, Sample, Selector, TiersConfig,
};

/// 2025-11-21T12:00:00Z.
const NOW: i64 = 1_763_726_400;
const HOUR: i64 = 3600;
const SERIES: u32 = 10_000;
const GROUPS: u32 = 10;

fn aggregate(c: &mut Criterion) {
    let dir = support::bench_dir();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(clock)
        .background_maintenance(false)
        .open()
        .expect("open");
    let ids: Vec<_> = (0..SERIES)
        .map(|i| {
            engine
                .series(&format!("cpu.load{{dc=dc{},host=h{i:05}}}", i % GROUPS))
                .expect("series")
        })
        .collect();
    let from = NOW - NOW % HOUR - 7 * 24 * HOUR;
    let mut batch = Vec::with_capacity(ids.len());
    for step in 0..7 * 24 * 6 {
        let ts = from + step * 600;
        batch.clear();
        batch.extend(
            ids.iter()
                .enumerate()
                .map(|(i, &id)| Sample::new(id, ts, ((i as i64 + step) % 100) as f64)),
        );
        engine.record_batch(&batch).expect("write");
    }
    let to = from + 7 * 24 * HOUR;
    let by_dc = AggregateQuery::new(Selector::new("cpu.load"), Aggregation::Sum, from, to)
        .tier("1h")
        .group_by(["dc"]);
    let answer = engine.aggregate(&by_dc).expect("aggregate");
    assert_eq!(answer.groups.len(), GROUPS as usize);
    assert!(answer.groups.iter().all(|g| g.series == 1000
        && g.points.len() == 168
        && g.points.iter().all(|p| p.1.is_some())));
    let whole = by_dc.clone().display(Display::Total).whole_range();
    let avg_all =
        AggregateQuery::new(Selector::new("cpu.*"), Aggregation::Avg, from, to).tier("1h");

    let mut group = c.benchmark_group("aggregate_10k_series_7d_at_1h");
    group.bench_function("sum_by_dc", |b| {
        b.iter(|| engine.aggregate(&by_dc).unwrap())
    });
    group.bench_function("sum_by_dc_whole_range", |b| {
        b.iter(|| engine.aggregate(&whole).unwrap())
    });
    group.bench_function("avg_all", |b| {
        b.iter(|| engine.aggregate(&avg_all).unwrap())
    });
    let hot = engine.aggregate(&by_dc).unwrap();
    engine.maintain().expect("maintenance");
    assert!(engine.maintain().expect("maintenance").compacted > 0);
    // The same buckets (compaction is bit for bit); the sums across series may differ in the
    // last bit, as the order rayon folds chunks in is not fixed.
    let compacted = engine.aggregate(&by_dc).unwrap();
    for (a, b) in hot.groups.iter().zip(&compacted.groups) {
        for (&(t1, v1), &(t2, v2)) in a.points.iter().zip(&b.points) {
            let (v1, v2) = (v1.expect("a value"), v2.expect("a value"));
            assert!(
                t1 == t2 && (v1 - v2).abs() <= 1e-12 * v1.abs(),
                "{v1} != {v2}"
            );
        }
    }
    group.bench_function("sum_by_dc_compacted", |b| {
        b.iter(|| engine.aggregate(&by_dc).unwrap())
    });
    group.finish();
}

criterion_group!(benches, aggregate);
criterion_main!(benches);
