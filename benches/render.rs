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
//! A third group (issue #27's speed target) renders `groupByNode(host*.cpu*.load, 0,
//! "sumSeries")` over 10,000 series beside the native aggregate grouped by host over the same
//! samples (`group_by_10k_series_24h_at_1m`), and a fourth a dashboard refresh through the
//! render cache beside the same render without it (`dashboard_refresh_...`).
//!
//! Data: `host{00..24}.cpu{00..39}.load`, one sample a series a minute for 24 h, all periods
//! hot (the third group: 250 hosts of 40). `cargo bench --bench render`.

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use tierdb::render::{self, Fetched, PathPattern, RenderRequest, Source, StoredSource};
use tierdb::{
    AggregateQuery, Aggregation, CachedStore, Clock, Engine, ManualClock, ReadBudget, Reader,
    RenderCache, Result, Sample, Selector, TiersConfig, DEFAULT_RENDER_CACHE_BYTES,
};

/// 2025-11-21T12:00:00Z.
const NOW: i64 = 1_763_726_400;
const DAY: i64 = 86_400;
const SERIES: u32 = 1_000;

/// The engine's reader without the one-pass aggregate: render fetches every series, then
/// adds them up.
struct FetchOnly<'a>(StoredSource<Reader<'a>>);

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

/// Series of the groupByNode comparison: 250 hosts of 40 cpus.
const HOSTS: u32 = 250;
const CPUS: u32 = 40;

/// The groupByNode target against the right control: `groupByNode(host*.cpu*.load,
/// 0, "sumSeries")` over 10,000 series, 24 h at 1 m, beside the native aggregate's `sum`
/// grouped by host (`/api/v1/aggregate?...&group_by=host`) over the same samples kept as
/// tagged series (`load{host=host000,cpu=cpu00}`: the native group_by groups by tags, not
/// path nodes), 250 groups of 40 either way; and `groupByTags` over those tagged series,
/// the render function doing the aggregate's very work.
fn group_by_node_vs_group_by(c: &mut Criterion) {
    let dir = support::bench_dir();
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(Arc::new(ManualClock::new(NOW)))
        .background_maintenance(false)
        .open()
        .expect("open");
    let mut ids = Vec::new();
    for host in 0..HOSTS {
        for cpu in 0..CPUS {
            let path = format!("host{host:03}.cpu{cpu:02}.load");
            let tagged = format!("load{{host=host{host:03},cpu=cpu{cpu:02}}}");
            ids.push((
                engine.series(&path).unwrap(),
                engine.series(&tagged).unwrap(),
            ));
        }
    }
    let mut batch = Vec::with_capacity(2 * ids.len());
    for minute in 0..1_440 {
        let ts = NOW - DAY + minute * 60;
        batch.clear();
        for (i, &(path, tagged)) in ids.iter().enumerate() {
            let value = ((i as i64 + minute) % 100) as f64;
            batch.push(Sample::new(path, ts, value));
            batch.push(Sample::new(tagged, ts, value));
        }
        engine.record_batch(&batch).expect("write");
    }
    let (from, to) = (NOW - DAY, NOW);
    let aggregate = AggregateQuery::new(Selector::new("load"), Aggregation::Sum, from, to)
        .tier("1m")
        .group_by(["host"]);
    let request = |target: &str| RenderRequest {
        targets: vec![target.into()],
        from: from - 60,
        until: to - 60,
        max_data_points: Some(1_500),
        default_max_points: 1_500,
        x_files_factor: 0.0,
        now: NOW,
    };
    let by_node = request("groupByNode(host*.cpu*.load, 0, \"sumSeries\")");
    let by_tags = request("groupByTags(seriesByTag('name=load'), 'sumSeries', 'host')");
    let render = |request: &RenderRequest| {
        let source = StoredSource::new(engine.reader());
        render::render(&source, request, &ReadBudget::unlimited()).unwrap()
    };
    // The same 250 groups of the same sums, point for point.
    let want = engine.aggregate(&aggregate).expect("aggregate");
    assert_eq!(want.groups.len(), HOSTS as usize);
    for got in [render(&by_node), render(&by_tags)] {
        assert_eq!(got.len(), HOSTS as usize);
        for (group, series) in want.groups.iter().zip(&got) {
            let values: Vec<_> = series.datapoints.iter().map(|p| (p.1, p.0)).collect();
            assert_eq!(values, group.points, "{}", series.target);
        }
    }

    // The control the earlier figures used: the same sum, not grouped.
    let ungrouped =
        AggregateQuery::new(Selector::new("host*.cpu*.load"), Aggregation::Sum, from, to)
            .tier("1m");
    let mut group = c.benchmark_group("group_by_10k_series_24h_at_1m");
    group.sample_size(10);
    group.bench_function("aggregate_sum_group_by_host", |b| {
        b.iter(|| engine.aggregate(&aggregate).unwrap())
    });
    group.bench_function("aggregate_sum_ungrouped", |b| {
        b.iter(|| engine.aggregate(&ungrouped).unwrap())
    });
    group.bench_function("group_by_node_sum_series", |b| b.iter(|| render(&by_node)));
    group.bench_function("group_by_tags_sum_series", |b| b.iter(|| render(&by_tags)));
    group.finish();
}

/// Grafana's refresh of a `sumSeries(host*.cpu*.load)` panel over 1,000 series, 24 h at
/// 1 m, through the render cache (tierdb::RenderCache) beside the same render without it:
/// the same request again with nothing written, and the window slid 10 s with a sample
/// written to every series at the clock between refreshes (the still-filling bucket read
/// again, the window's new bucket read once a minute). VictoriaMetrics answers this panel
/// in 0.53 ms from its rollup cache (docs: perf-notes, 2026-11-27).
fn dashboard_refresh(c: &mut Criterion) {
    let dir = support::bench_dir();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(Arc::clone(&clock) as Arc<dyn tierdb::Clock>)
        .background_maintenance(false)
        .open()
        .expect("open");
    let ids: Vec<_> = (0..SERIES)
        .map(|i| {
            let name = format!("host{:02}.cpu{:02}.load", i / 40, i % 40);
            engine.series(&name).expect("series")
        })
        .collect();
    let write_at = |ts: i64| {
        let batch: Vec<Sample> = (ids.iter().enumerate())
            .map(|(i, &id)| Sample::new(id, ts, ((i as i64 + ts / 60) % 100) as f64))
            .collect();
        engine.record_batch(&batch).expect("write");
    };
    for minute in 0..1_440 {
        write_at(NOW - DAY + minute * 60);
    }
    let panel = |now: i64| RenderRequest {
        targets: vec!["sumSeries(host*.cpu*.load)".into()],
        from: now - DAY,
        until: now,
        max_data_points: Some(1_500),
        default_max_points: 1_500,
        x_files_factor: 0.0,
        now,
    };
    let cache = RenderCache::new(DEFAULT_RENDER_CACHE_BYTES);
    let uncached = |r: &RenderRequest| {
        let source = StoredSource::new(engine.reader());
        render::render(&source, r, &ReadBudget::unlimited()).unwrap()
    };
    let cached = |r: &RenderRequest| {
        let source = StoredSource::new(CachedStore::new(engine.reader(), &cache));
        render::render(&source, r, &ReadBudget::unlimited()).unwrap()
    };
    assert_eq!(cached(&panel(NOW)), uncached(&panel(NOW)));
    assert_eq!(cached(&panel(NOW)), uncached(&panel(NOW)));

    let mut group = c.benchmark_group("dashboard_refresh_sum_1k_series_24h_at_1m");
    group.bench_function("uncached", |b| b.iter(|| uncached(&panel(NOW))));
    group.bench_function("cached_repeat", |b| b.iter(|| cached(&panel(NOW))));
    group.bench_function("cached_slid_10s_after_a_write", |b| {
        b.iter_batched(
            || {
                clock.advance(10);
                let now = clock.now();
                write_at(now);
                panel(now)
            },
            |r| cached(&r),
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
    // The slid answers were the cache's; they must still be storage's.
    let now = clock.now();
    assert_eq!(cached(&panel(now)), uncached(&panel(now)));
    assert!(cache.stats().partial_hits > 0);
}

criterion_group!(
    benches,
    render_vs_aggregate,
    group_by_node_vs_group_by,
    dashboard_refresh
);
criterion_main!(benches);
