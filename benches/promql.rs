//! PromQL against tierdb's own aggregate over the same data: `sum by (instance)
//! (rate(node_cpu_seconds_total[5m]))` over 24 h at a 60 s step, 1,000 counter series (100
//! instances x 10 CPU modes), against `/api/v1/aggregate`'s sum by instance of the per-second
//! rate over the same 24 h of minute buckets (the target: PromQL at most 1.5x).
//!
//! Both read every series' 1,440 minute buckets of the 1m tier: the aggregate folds them in
//! its chunk-wise pass, PromQL reads each series' buckets, sums a 5-minute window per step
//! and groups. Data: one sample a series every 30 s for 24 h, counters by a `[counters]`
//! rule. Each also with its answer written as the JSON its HTTP endpoint sends (`..._as_json`).
//!
//! Criterion times one function's samples after the other's, so on a shared machine a change
//! of load between them moves the ratio. Before criterion runs, the bench therefore times the
//! two in alternation, pair by pair (`PROMQL_PAIRS` pairs, 41 by default), and prints the
//! median time of each and the median, lowest and highest ratio of the pairs: the figure to
//! quote. `cargo bench --bench promql`; `RAYON_NUM_THREADS=1` for one thread.

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use tierdb::promql::{self, QueryLimits, ResultValue, StoredSource};
use tierdb::{
    AggregateQuery, Aggregation, Display, Engine, ManualClock, ReadBudget, Sample, Selector,
    TiersConfig,
};

/// 2025-11-21T12:00:00Z.
const NOW: i64 = 1_763_726_400;
const DAY: i64 = 86_400;
const INSTANCES: u32 = 100;
const MODES: u32 = 10;

fn promql_vs_aggregate(c: &mut Criterion) {
    let dir = support::bench_dir();
    let mut tiers = TiersConfig::default();
    tiers.counters.names = vec!["node_cpu_seconds_total".into()];
    let engine = Engine::builder(dir.path())
        .tiers(tiers)
        .clock(Arc::new(ManualClock::new(NOW)))
        .background_maintenance(false)
        .open()
        .expect("open");
    let ids: Vec<_> = (0..INSTANCES * MODES)
        .map(|i| {
            let key = format!(
                "node_cpu_seconds_total{{cpu=0,instance=host{:03}:9100,mode=m{}}}",
                i / MODES,
                i % MODES
            );
            engine.series(&key).expect("series")
        })
        .collect();
    let from = NOW - DAY;
    let mut batch = Vec::with_capacity(ids.len());
    for step in 0..(DAY / 30 + 10) {
        let ts = from - 300 + step * 30;
        batch.clear();
        batch.extend(
            (ids.iter().enumerate())
                .map(|(i, &id)| Sample::new(id, ts, (step * (1 + i as i64 % 7)) as f64 * 0.25)),
        );
        engine.record_batch(&batch).expect("write");
    }

    let query = promql::Query {
        text: "sum by (instance) (rate(node_cpu_seconds_total[5m]))".into(),
        start_ms: (from + 60) * 1000,
        end_ms: NOW * 1000,
        step_ms: Some(60_000),
    };
    let limits = || QueryLimits {
        budget: Arc::new(ReadBudget::default()),
        max_series: 100_000,
        deadline: Instant::now() + Duration::from_secs(120),
    };
    let evaluate = || {
        let source = StoredSource::new(engine.reader());
        promql::evaluate(&source, &query, &limits()).expect("promql")
    };
    let answer = evaluate();
    let ResultValue::Matrix(series) = &answer.result else {
        panic!("a matrix");
    };
    assert_eq!(series.len(), INSTANCES as usize);
    assert!(
        series.iter().all(|(_, points)| points.len() == 1440),
        "a point per step"
    );
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);

    let aggregate = AggregateQuery::new(
        Selector::new("node_cpu_seconds_total"),
        Aggregation::Sum,
        from,
        NOW,
    )
    .tier("1m")
    .display(Display::PerSec)
    .group_by(["instance"]);
    let aggregate_once = || {
        let budget = ReadBudget::default();
        (engine.reader())
            .aggregate_within(&aggregate, &budget)
            .expect("aggregate")
    };
    assert_eq!(aggregate_once().groups.len(), INSTANCES as usize);

    let pairs = support::env_count("PROMQL_PAIRS", 41);
    support::alternate(
        "library calls",
        pairs,
        ("PromQL", &mut || drop(evaluate())),
        ("aggregate", &mut || drop(aggregate_once())),
    );
    support::alternate(
        "with the answer's JSON",
        pairs,
        ("PromQL", &mut || drop(evaluate().data_text())),
        ("aggregate", &mut || {
            drop(serde_json::to_vec(&aggregate_once()).unwrap())
        }),
    );

    let mut group = c.benchmark_group("promql_1000_series_24h_at_60s");
    group.sample_size(20);
    group.bench_function("promql_sum_by_instance_rate_5m", |b| b.iter(evaluate));
    group.bench_function("aggregate_sum_by_instance_per_sec", |b| {
        b.iter(aggregate_once)
    });
    // What the HTTP answer adds: each answer written as the JSON its endpoint sends.
    group.bench_function("promql_sum_by_instance_rate_5m_as_json", |b| {
        b.iter(|| evaluate().data_text().len())
    });
    group.bench_function("aggregate_sum_by_instance_per_sec_as_json", |b| {
        b.iter(|| serde_json::to_vec(&aggregate_once()).unwrap().len())
    });
    group.finish();
}

criterion_group!(benches, promql_vs_aggregate);
criterion_main!(benches);
