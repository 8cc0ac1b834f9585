//! Cross-series aggregates against the same aggregate computed naively from each series'
//! own buckets (`read_buckets`), for random series sets, tags, selectors, groupings, tiers,
//! steps and ranges; plus the seed 004 question by hand.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use tierdb::{
    AggregateQuery, Aggregation, Bucket, Display, Engine, EngineSettings, ManualClock, Sample,
    Selector, SeriesKey, Span, TagFilter, TiersConfig, Timestamp,
};

use crate::common::{engine_at, open, tier, NOW};

const MINUTE: i64 = 60;
const HOUR: i64 = 3600;

/// Tiers 1m/5m with periods 1h/1d, 16 series per chunk: small files, many chunks.
fn config() -> TiersConfig {
    TiersConfig {
        engine: EngineSettings {
            series_per_chunk: 16,
            ..EngineSettings::default()
        },
        counters: Default::default(),
        raw: None,
        tiers: vec![
            tier("1m", 60, 3600, 6 * 3600),
            tier("5m", 300, 86_400, 2 * 86_400),
        ],
        sets: Vec::new(),
    }
}

#[derive(Clone, Debug)]
struct Workload {
    /// (name, host, dc) per series.
    series: Vec<(usize, Option<usize>, Option<usize>)>,
    /// (series index, seconds before now, value).
    samples: Vec<(usize, i64, f64)>,
}

const NAMES: [&str; 3] = ["a.x", "a.y", "b.x"];
const PATTERNS: [&str; 4] = ["*", "a.*", "*.x", "b.x"];

fn workload() -> impl Strategy<Value = Workload> {
    let series = prop::collection::vec(
        (
            0..NAMES.len(),
            prop::option::of(0..3usize),
            prop::option::of(0..2usize),
        ),
        1..40,
    );
    series.prop_flat_map(|series| {
        let n = series.len();
        let samples = prop::collection::vec((0..n, 0..5 * HOUR, -1e3..1e3f64), 0..400);
        (Just(series), samples).prop_map(|(series, samples)| Workload { series, samples })
    })
}

fn key(name: usize, host: Option<usize>, dc: Option<usize>) -> SeriesKey {
    let mut tags = Vec::new();
    if let Some(h) = host {
        tags.push(("host".to_string(), format!("h{h}")));
    }
    if let Some(d) = dc {
        tags.push(("dc".to_string(), d.to_string()));
    }
    SeriesKey::new(NAMES[name], tags).unwrap()
}

#[derive(Clone, Debug)]
struct Ask {
    pattern: usize,
    filters: Vec<TagFilter>,
    group_by: Vec<String>,
    aggregation: Aggregation,
    display: Display,
    tier: &'static str,
    step_multiple: u64,
    /// Range, in seconds before now.
    from_ago: i64,
    width: i64,
    whole_range: bool,
}

fn ask() -> impl Strategy<Value = Ask> {
    let filter = prop_oneof![
        Just(TagFilter::Eq("host".into(), "h1".into())),
        Just(TagFilter::NotEq("host".into(), "h2".into())),
        Just(TagFilter::Eq("dc".into(), "0".into())),
        Just(TagFilter::NotEq("dc".into(), "1".into())),
    ];
    (
        0..PATTERNS.len(),
        prop::collection::vec(filter, 0..3),
        prop::sample::subsequence(vec!["host".to_string(), "dc".to_string()], 0..=2),
        prop::sample::select(Aggregation::ALL.to_vec()),
        prop::sample::select(Display::ALL.to_vec()),
        prop::sample::select(vec!["1m", "5m"]),
        prop::sample::select(vec![1u64, 2, 7]),
        (0..6 * HOUR, 1..6 * HOUR),
        any::<bool>(),
    )
        .prop_map(
            |(
                pattern,
                filters,
                group_by,
                aggregation,
                display,
                tier,
                step_multiple,
                range,
                whole_range,
            )| Ask {
                pattern,
                filters,
                group_by,
                aggregation,
                display,
                tier,
                step_multiple,
                from_ago: range.0,
                width: range.1,
                whole_range,
            },
        )
}

/// A group's value of each `group_by` tag.
type GroupLabels = Vec<Option<String>>;
/// A group's answer.
type Points = Vec<(Timestamp, Option<f64>)>;
/// What one point of a group saw: each series' bucket and shown value.
type Seen = Vec<(Bucket, Option<f64>)>;

/// The aggregate computed the slow way: each series read alone, folded in plain loops.
fn naive(
    engine: &Engine,
    ask: &Ask,
    from: Timestamp,
    to: Timestamp,
) -> BTreeMap<GroupLabels, (usize, Points)> {
    let tier = engine.config().tier_index(ask.tier).unwrap();
    let res = engine.config().tiers[tier].resolution.secs();
    let step = Span::from_secs(if ask.whole_range {
        res
    } else {
        res * ask.step_multiple
    });
    let mut selector = Selector::new(PATTERNS[ask.pattern]);
    selector.filters = ask.filters.clone();
    // Per group: per point, the (bucket, shown value) of each series.
    let mut groups: BTreeMap<GroupLabels, (usize, Vec<(Timestamp, Seen)>)> = BTreeMap::new();
    let keys = engine.registry().select(|id, key| Some((id, key.to_key())));
    for (id, key) in keys {
        if !selector.matches(key.view()) {
            continue;
        }
        let group: Vec<Option<String>> = ask
            .group_by
            .iter()
            .map(|k| key.tag(k).map(|v| v.into_owned()))
            .collect();
        let mut points = engine
            .reader()
            .read_buckets(id, tier, from, to, step)
            .unwrap();
        let mut seconds = step.secs();
        if ask.whole_range {
            seconds = res * points.len() as u64;
            let mut all = Bucket::EMPTY;
            for (_, b) in &points {
                all.merge(b);
            }
            points = points
                .first()
                .map(|&(ts, _)| vec![(ts, all)])
                .unwrap_or_default();
        }
        let entry = groups
            .entry(group)
            .or_insert_with(|| (0, points.iter().map(|&(ts, _)| (ts, Vec::new())).collect()));
        entry.0 += 1;
        for (slot, (_, bucket)) in entry.1.iter_mut().zip(&points) {
            slot.1.push((*bucket, ask.display.value(bucket, seconds)));
        }
    }
    groups
        .into_iter()
        .map(|(group, (series, points))| {
            let values = points
                .into_iter()
                .map(|(ts, seen)| {
                    let shown: Vec<f64> = seen.iter().filter_map(|(_, v)| *v).collect();
                    let value = if shown.is_empty() {
                        None
                    } else {
                        Some(match (ask.aggregation, ask.display) {
                            (Aggregation::Avg, Display::Avg) => {
                                let mut all = Bucket::EMPTY;
                                for (b, _) in &seen {
                                    all.merge(b);
                                }
                                all.total / all.count as f64
                            }
                            (Aggregation::Avg, _) => shown.iter().sum::<f64>() / shown.len() as f64,
                            (Aggregation::Sum, _) => shown.iter().sum(),
                            (Aggregation::Min, _) => {
                                shown.iter().copied().fold(f64::INFINITY, f64::min)
                            }
                            (Aggregation::Max, _) => {
                                shown.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                            }
                            (Aggregation::Count, _) => shown.len() as f64,
                        })
                    };
                    (ts, value)
                })
                .collect();
            (group, (series, values))
        })
        .collect()
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs())) * 1e3,
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn aggregates_equal_the_naive_fold(work in workload(), asks in prop::collection::vec(ask(), 1..8)) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(NOW));
        let engine = open(dir.path(), &clock, config());
        let ids: Vec<_> = work.series.iter().map(|&(n, h, d)| engine.series_key(&key(n, h, d)).unwrap()).collect();
        let samples: Vec<Sample> = work.samples.iter().map(|&(s, ago, v)| Sample::new(ids[s], NOW - ago, v)).collect();
        engine.record_batch(&samples).unwrap();
        for ask in &asks {
            let from = NOW - ask.from_ago;
            let to = from + ask.width;
            let mut selector = Selector::new(PATTERNS[ask.pattern]);
            selector.filters = ask.filters.clone();
            let mut query = AggregateQuery::new(selector, ask.aggregation, from, to)
                .group_by(ask.group_by.clone())
                .display(ask.display)
                .tier(ask.tier);
            let res = engine.config().tiers[engine.config().tier_index(ask.tier).unwrap()].resolution.secs();
            if ask.whole_range {
                query = query.whole_range();
            } else {
                query = query.step(Span::from_secs(res * ask.step_multiple));
            }
            let got = engine.aggregate(&query).unwrap();
            let expected = naive(&engine, ask, from, to);
            prop_assert_eq!(got.groups.len(), expected.len(), "{:?}", ask);
            for (group, (want_group, (want_series, want_points))) in got.groups.iter().zip(&expected) {
                let labels: Vec<Option<String>> = ask.group_by.iter().map(|k| group.tags[k].clone()).collect();
                prop_assert_eq!(&labels, want_group);
                prop_assert_eq!(group.series, *want_series);
                prop_assert_eq!(group.points.len(), want_points.len(), "{:?}", ask);
                for (&(ts, v), &(want_ts, want)) in group.points.iter().zip(want_points) {
                    prop_assert_eq!(ts, want_ts);
                    prop_assert!(close(v, want), "{:?} at {}: got {:?}, want {:?}", ask, ts, v, want);
                }
            }
        }
    }
}

/// Seed 004: "how many butterflies were counted by scientist perpetua in location 1 during
/// the last year", per location, from the 1d tier.
#[test]
fn totals_by_tag_over_a_range() {
    let (_dir, engine, _clock) = engine_at(NOW);
    let counts = [
        ("perpetua", "1", 3.0, 0),
        ("perpetua", "1", 4.0, 100),
        ("perpetua", "2", 5.0, 200),
        ("leonard", "1", 7.0, 300),
    ];
    for (day, &(scientist, location, count, ago_days)) in counts.iter().enumerate() {
        let key = format!("butterflies{{location={location},scientist={scientist}}}");
        engine
            .record(&key, NOW - ago_days * 86_400 - day as i64, count)
            .unwrap();
    }
    engine.sync().unwrap();
    let selector = Selector::parse("butterflies{scientist=perpetua}").unwrap();
    let year = AggregateQuery::new(selector, Aggregation::Sum, NOW - 365 * 86_400, NOW + 1)
        .display(Display::Total)
        .group_by(["location"])
        .whole_range();
    let result = engine.aggregate(&year).unwrap();
    assert_eq!(result.tier, "1d");
    let totals: Vec<(Option<String>, Option<f64>)> = result
        .groups
        .iter()
        .map(|g| (g.tags["location"].clone(), g.points[0].1))
        .collect();
    assert_eq!(
        totals,
        vec![(Some("1".into()), Some(7.0)), (Some("2".into()), Some(5.0))]
    );
}

/// The average across series is total over count, not the mean of per-series means.
#[test]
fn avg_across_series_weighs_every_sample() {
    let (_dir, engine, _clock) = engine_at(NOW);
    let t = NOW - NOW % HOUR - HOUR;
    // Series a: one sample of 10; series b: three samples of 0 in the same hour.
    engine.record("load{host=a}", t, 10.0).unwrap();
    for i in 0..3 {
        engine.record("load{host=b}", t + i * MINUTE, 0.0).unwrap();
    }
    engine.sync().unwrap();
    let query =
        AggregateQuery::new(Selector::new("load"), Aggregation::Avg, t, t + HOUR).tier("1h");
    let result = engine.aggregate(&query).unwrap();
    assert_eq!(result.groups[0].points, vec![(t, Some(2.5))]);
    assert_eq!(result.groups[0].series, 2);
    let by_host = engine.aggregate(&query.clone().group_by(["host"])).unwrap();
    let values: Vec<Option<f64>> = by_host.groups.iter().map(|g| g.points[0].1).collect();
    assert_eq!(values, vec![Some(10.0), Some(0.0)]);
}

#[test]
fn too_many_groups_times_points_is_refused() {
    let (_dir, engine, _clock) = engine_at(NOW);
    for i in 0..3 {
        engine
            .record(&format!("m{{i={i}}}"), NOW - 10, 1.0)
            .unwrap();
    }
    engine.sync().unwrap();
    let query = AggregateQuery::new(
        Selector::new("m"),
        Aggregation::Sum,
        NOW - 400 * 86_400 * 365,
        NOW,
    )
    .tier("1m")
    .group_by(["i"]);
    let err = engine.aggregate(&query).unwrap_err().to_string();
    assert!(err.contains("points"), "{err}");
}
