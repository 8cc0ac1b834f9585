//! Graphite render of a cross-series aggregate beside the aggregate read of the same work
//! (issue #18: render within 1.2x of the aggregate): `sumSeries(host*.cpu*.load)` over
//! 1,000 series, 24 h at 1 m (1,440 points), against the `sum` aggregate of the same series,
//! range and tier, in the same criterion run. A third case renders the same target through
//! series-by-series fetches (what a cluster node, or a sumSeries over functions, does), to
//! show what the shared pass saves.
//!
//! A second group (issue #27) renders the 1,000 series plain beside the functions dashboards
//! use most over them: `aliasByNode` and `movingAverage` (target: within 1.2x of the plain
//! render) and `groupByNode(..., 0, "sumSeries")` (target: within 1.5x of the aggregate of the
//! same series, which it is measured beside).
//!
//! Data: `host{00..24}.cpu{00..39}.load`, one sample a series a minute for 24 h, all periods
//! hot. `cargo bench --bench render`.

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use tierdb::render::{self, Fetched, PathPattern, RenderRequest, Source, StoredSource};
use tierdb::{
    AggregateQuery, Aggregation, Engine, ManualClock, ReadBudget, Result, Sample, Selector,
    TiersConfig,
};

/// 2025-11-21T12:00:00Z.
const NOW: i64 = 1_763_726_400;
const DAY: i64 = 86_400;
const SERIES: u32 = 1_000;

/// The engine's reader without the one-pass aggregate: render fetches every series, then
/// adds them up.
struct FetchOnly<'a>(StoredSource<'a>);

impl Source for FetchOnly<'_> {
    fn charge(&self, p: &PathPattern, from: i64, until: i64, budget: &ReadBudget) -> Result<()> {
        self.0.charge(p, from, until, budget)
    }

    fn fetch(&self, p: &PathPattern, from: i64, until: i64) -> Result<Vec<Fetched>> {
        self.0.fetch(p, from, until)
    }
}

fn render_vs_aggregate(c: &mut Criterion) {
    let dir = support::bench_dir();
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(Arc::new(ManualClock::new(NOW)))
        .background_maintenance(false)
        .open()
        .expect("open");
    let ids: Vec<_> = (0..SERIES)
        .map(|i| {
            let name = format!("host{:02}.cpu{:02}.load", i / 40, i % 40);
            engine.series(&name).expect("series")
        })
        .collect();
    let mut batch = Vec::with_capacity(ids.len());
    for minute in 0..1_440 {
        let ts = NOW - DAY + minute * 60;
        batch.clear();
        batch.extend(
            (ids.iter().enumerate())
                .map(|(i, &id)| Sample::new(id, ts, ((i as i64 + minute) % 100) as f64)),
        );
        engine.record_batch(&batch).expect("write");
    }
    let (from, to) = (NOW - DAY, NOW);
    let aggregate =
        AggregateQuery::new(Selector::new("host*.cpu*.load"), Aggregation::Sum, from, to)
            .tier("1m");
    let request = RenderRequest {
        targets: vec!["sumSeries(host*.cpu*.load)".into()],
        from: from - 60,
        until: to - 60,
        max_data_points: Some(1_500),
        default_max_points: 1_500,
        x_files_factor: 0.0,
        now: 0,
    };
    // The same 1,440 points, the same sums.
    let want = engine.aggregate(&aggregate).expect("aggregate");
    let reader = StoredSource::new(engine.reader());
    let got = render::render(&reader, &request, &ReadBudget::unlimited()).expect("render");
    let slow = render::render(&FetchOnly(reader), &request, &ReadBudget::unlimited())
        .expect("render by fetches");
    let points = &want.groups[0].points;
    assert_eq!(got[0].datapoints.len(), points.len());
    for ((&(ts, value), rendered), fetched) in points
        .iter()
        .zip(&got[0].datapoints)
        .zip(&slow[0].datapoints)
    {
        assert_eq!((value, ts), *rendered);
        assert_eq!(rendered, fetched);
    }

    let mut group = c.benchmark_group("render_1k_series_24h_at_1m");
    group.bench_function("aggregate_sum", |b| {
        b.iter(|| engine.aggregate(&aggregate).unwrap())
    });
    group.bench_function("render_sum_series", |b| {
        b.iter(|| {
            render::render(
                &render::StoredSource::new(engine.reader()),
                &request,
                &ReadBudget::unlimited(),
            )
            .unwrap()
        })
    });
    group.bench_function("render_sum_series_by_fetches", |b| {
        b.iter(|| {
            let source = FetchOnly(StoredSource::new(engine.reader()));
            render::render(&source, &request, &ReadBudget::unlimited()).unwrap()
        })
    });
    group.finish();

    let engine = &engine;
    let render_one = |target: &str| {
        let request = RenderRequest {
            targets: vec![target.into()],
            ..request.clone()
        };
        move || {
            let source = StoredSource::new(engine.reader());
            render::render(&source, &request, &ReadBudget::unlimited()).unwrap()
        }
    };
    let plain = render_one("host*.cpu*.load")();
    let moving = render_one("movingAverage(host*.cpu*.load, 10)")();
    assert_eq!((plain.len(), moving.len()), (1_000, 1_000));
    assert_eq!(moving[0].datapoints.len(), plain[0].datapoints.len());
    let grouped = render_one("groupByNode(host*.cpu*.load, 0, \"sumSeries\")")();
    assert_eq!(grouped.len(), 25);
    let mut group = c.benchmark_group("render_functions_1k_series_24h_at_1m");
    group.bench_function("aggregate_sum", |b| {
        b.iter(|| engine.aggregate(&aggregate).unwrap())
    });
    for (name, target) in [
        ("plain", "host*.cpu*.load"),
        ("alias_by_node", "aliasByNode(host*.cpu*.load, 0, 1)"),
        ("moving_average_10", "movingAverage(host*.cpu*.load, 10)"),
        (
            "moving_average_10min",
            "movingAverage(host*.cpu*.load, \"10min\")",
        ),
        (
            "group_by_node_sum",
            "groupByNode(host*.cpu*.load, 0, \"sumSeries\")",
        ),
    ] {
        let run = render_one(target);
        group.bench_function(name, |b| b.iter(&run));
    }
    group.finish();
}

criterion_group!(benches, render_vs_aggregate);
criterion_main!(benches);
