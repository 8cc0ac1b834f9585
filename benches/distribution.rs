//! Distributions beside scalars, in the same run (issue #53's figures):
//! - ingest: 1,000 timers × 60 samples each (one minute at 1 a second, log-normal values),
//!   through `record_batch` into the default tiers, beside the same samples into 1,000
//!   gauges: each sample into four tiers, the timers' into four histograms too;
//! - read: the p99 over 1,000 timers × 24 h at 1m (one merged histogram per minute), beside
//!   the `sum` aggregate over the same series and buckets as gauges, and beside PromQL's
//!   `histogram_quantile(0.99, sum(rate(x[5m])))` over the same timers at a 60 s step (each
//!   step merges a series' five minute buckets, then the 1,000 series; with the `server`
//!   feature, which brings PromQL).
//!
//! Data for the reads: one sample a series a minute for 24 h (1,440 buckets a series), so
//! each timer bucket's histogram holds one value and the merge of 1,000 holds 1,000.
//! Before criterion times the reads, the p99 and the `sum` are timed in alternation, pair by
//! pair (`DISTRIBUTION_PAIRS`, 21 by default), and the median ratio of the pairs printed:
//! the figure to quote (criterion's two functions run minutes apart on a shared machine).
//! `cargo bench --bench distribution`.

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};
use tierdb::{
    AggregateQuery, Aggregation, DistributionQuery, DistributionTarget, Engine, ManualClock,
    ReadBudget, Sample, Selector, SeriesId, SeriesKind, Shown, TierChoice, TiersConfig,
};

/// 2025-11-21T12:00:00Z.
const NOW: i64 = 1_763_726_400;
const SERIES: u32 = 1_000;

fn engine(dir: &std::path::Path, clock: &Arc<ManualClock>) -> Engine {
    Engine::builder(dir)
        .tiers(TiersConfig::default())
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .expect("open")
}

/// `SERIES` series named `prefix.hNNNN`, declared `kind`.
fn series(engine: &Engine, prefix: &str, kind: SeriesKind) -> Vec<SeriesId> {
    (0..SERIES)
        .map(|i| {
            let id = engine.series(&format!("{prefix}.h{i:04}")).expect("series");
            engine.declare_kind(id, kind).expect("declare");
            id
        })
        .collect()
}

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let latency = LogNormal::new(3.0, 1.05).expect("valid");
    (0..n).map(|_| latency.sample(&mut rng)).collect()
}

/// One minute of samples, one a second, for every id.
fn minute(ids: &[SeriesId], start: i64, values: &[f64]) -> Vec<Sample> {
    let mut batch = Vec::with_capacity(ids.len() * 60);
    for s in 0..60 {
        for (i, &id) in ids.iter().enumerate() {
            batch.push(Sample::new(
                id,
                start + s,
                values[(s as usize * ids.len() + i) % values.len()],
            ));
        }
    }
    batch
}

fn ingest(c: &mut Criterion) {
    let dir = support::bench_dir();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = engine(dir.path(), &clock);
    let timers = series(&engine, "req.time", SeriesKind::Distribution);
    let gauges = series(&engine, "req.gauge", SeriesKind::Gauge);
    let values = values(60 * SERIES as usize, 1);
    let mut group = c.benchmark_group("ingest_1000_series_x_60_samples");
    group.throughput(criterion::Throughput::Elements(60 * u64::from(SERIES)));
    // Each iteration writes a minute not written before, so a bucket's histogram grows as
    // a live timer's does; the minutes walk back from NOW inside the 1m tier's window.
    let mut at = NOW - 60;
    group.bench_function("gauges", |b| {
        b.iter_batched(
            || {
                at -= 60;
                minute(&gauges, at, &values)
            },
            |batch| engine.record_batch(&batch).unwrap(),
            BatchSize::LargeInput,
        )
    });
    let mut at = NOW - 60;
    group.bench_function("timers", |b| {
        b.iter_batched(
            || {
                at -= 60;
                minute(&timers, at, &values)
            },
            |batch| engine.record_batch(&batch).unwrap(),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn read(c: &mut Criterion) {
    let dir = support::bench_dir();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = engine(dir.path(), &clock);
    let timers = series(&engine, "req.time", SeriesKind::Distribution);
    let gauges = series(&engine, "req.gauge", SeriesKind::Gauge);
    let values = values(1 << 16, 2);
    let from = NOW - NOW % 3600 - 24 * 3600;
    let to = from + 24 * 3600;
    for m in 0..24 * 60 {
        let ts = from + m * 60;
        let batch: Vec<Sample> = timers
            .iter()
            .chain(&gauges)
            .enumerate()
            .map(|(i, &id)| Sample::new(id, ts, values[(m as usize * 2000 + i) % values.len()]))
            .collect();
        engine.record_batch(&batch).expect("write");
    }
    let sum =
        AggregateQuery::new(Selector::new("req.gauge.*"), Aggregation::Sum, from, to).tier("1m");
    let p99 = DistributionQuery {
        target: DistributionTarget::Select {
            selector: Selector::new("req.time.*"),
            group_by: Vec::new(),
        },
        shown: Shown::Quantile(0.99),
        tier: TierChoice::parse(engine.config(), "1m").unwrap(),
        from,
        to,
        step: None,
        max_points: None,
        whole_range: false,
    };
    let budget = ReadBudget::unlimited();
    let answer = engine.reader().distribution_query(&p99, &budget).unwrap();
    assert_eq!(answer.groups[0].series, SERIES as usize);
    assert!(answer.groups[0]
        .points
        .as_ref()
        .unwrap()
        .iter()
        .all(|p| p.1.is_some()));
    let pairs = support::env_count("DISTRIBUTION_PAIRS", 21);
    support::alternate(
        "p99 of 1,000 timers beside sum of 1,000 gauges, 24 h at 1m",
        pairs,
        ("p99", &mut || {
            drop(engine.reader().distribution_query(&p99, &budget).unwrap())
        }),
        ("sum", &mut || drop(engine.aggregate(&sum).unwrap())),
    );
    let mut group = c.benchmark_group("aggregate_1000_series_24h_at_1m");
    group.sample_size(10);
    group.bench_function("sum_of_gauges", |b| {
        b.iter(|| engine.aggregate(&sum).unwrap())
    });
    group.bench_function("p99_of_timers", |b| {
        b.iter(|| engine.reader().distribution_query(&p99, &budget).unwrap())
    });
    #[cfg(feature = "server")]
    {
        let evaluate = promql_p99(&engine, from, to);
        group.bench_function("promql_histogram_quantile_p99_sum_rate_5m", |b| {
            b.iter(&evaluate)
        });
    }
    group.finish();
}

/// PromQL's p99 of all timers, `histogram_quantile(0.99, sum(rate(x[5m])))`, from `from`'s
/// first minute to `to` at a 60 s step (1,440 points, as the native p99 answers), checked
/// once: one series of a point per step.
#[cfg(feature = "server")]
fn promql_p99(engine: &Engine, from: i64, to: i64) -> impl Fn() -> tierdb::promql::Answer + '_ {
    use std::time::{Duration, Instant};
    use tierdb::promql::{self, QueryLimits, ResultValue, StoredSource};

    let query = promql::Query {
        text: r#"histogram_quantile(0.99, sum(rate({__graphite__="req.time.*"}[5m])))"#.into(),
        start_ms: (from + 60) * 1000,
        end_ms: to * 1000,
        step_ms: Some(60_000),
    };
    let evaluate = move || {
        let limits = QueryLimits {
            budget: Arc::new(ReadBudget::unlimited()),
            max_series: 100_000,
            deadline: Instant::now() + Duration::from_secs(120),
        };
        promql::evaluate(&StoredSource::new(engine.reader()), &query, &limits).expect("promql")
    };
    let answer = evaluate();
    let ResultValue::Matrix(series) = &answer.result else {
        panic!("a matrix, not {:?}", answer.result);
    };
    assert_eq!(series.len(), 1, "one series");
    assert_eq!(series[0].1.len(), 24 * 60, "a point per step");
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    evaluate
}

criterion_group!(benches, ingest, read);
criterion_main!(benches);
