//! One engine holding every series against the same series split over 1..=5 engines by
//! [`partition_of`], whose partial answers are JSON round-tripped, merged in random order and
//! finished: the answers must be equal, bit for bit wherever the arithmetic is exact.
//! Aggregates, `/metrics/find` and the series listing, then Graphite's `/render`.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::clock::ManualClock;
use crate::cluster::partition_of;
use crate::cluster::promql_read::{self, PromAnswer, PromRead};
use crate::cluster::promql_source::{ClusterStore, Owners};
use crate::config::TierSpec;
use crate::config::TiersConfig;
use crate::counter::SeriesKind;
use crate::engine::Engine;
use crate::read::aggregate::AggregateQuery;
use crate::read::aggregate::Aggregation;
use crate::read::query::Display;
use crate::read::store::cache::{RenderCache, DEFAULT_RENDER_CACHE_BYTES};
use crate::render::{Fetched, PathPattern, RenderGrid, StoredSource};
use crate::sample::Sample;
use crate::time::{Span, Timestamp};

/// 2025-11-21T12:00:00Z.
const NOW: Timestamp = 1_763_726_400;
const DAY: i64 = 86_400;

const NAMES: [&str; 6] = [
    "cpu",
    "mem",
    "servers.web.cpu",
    "servers.db.load",
    "servers.web.mem.free",
    "net.rx",
];

/// 16 series per chunk: 1m/1d kept 2 days, 1h/30d kept 90 days, 1d/365d kept 5 years (the
/// integration tests' small tiers).
fn tiers() -> TiersConfig {
    let tier = |name: &str, resolution: u64, period: u64, retention: u64| TierSpec {
        name: name.to_string(),
        resolution: Span::from_secs(resolution),
        period: Span::from_secs(period),
        retention: Span::from_secs(retention),
        create_ahead: 1,
        earlier_periods: Vec::new(),
    };
    let mut config = TiersConfig::default();
    config.engine.series_per_chunk = 16;
    config.tiers = vec![
        tier("1m", 60, DAY as u64, 2 * DAY as u64),
        tier("1h", 3_600, 30 * DAY as u64, 90 * DAY as u64),
        tier("1d", DAY as u64, 365 * DAY as u64, 1_825 * DAY as u64),
    ];
    config
}

/// A fresh directory on tmpfs when there is one: each engine creates dozens of files.
fn scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("temp dir")
}

fn open(dir: &std::path::Path, clock: &Arc<ManualClock>) -> Engine {
    Engine::builder(dir)
        .tiers(tiers())
        .clock(clock.clone())
        .writer_threads(1)
        .background_maintenance(false)
        .open()
        .expect("open engine")
}

/// One engine with every series and `partitions` engines each with its partition's.
struct Cluster {
    _dirs: Vec<tempfile::TempDir>,
    clock: Arc<ManualClock>,
    single: Engine,
    parts: Vec<Engine>,
}

/// A series: name index, host and dc tags (each maybe absent), and whether it is a counter.
type SeriesSpec = (usize, Option<u8>, Option<u8>, bool);

fn key_of(&(name, host, dc, _): &SeriesSpec) -> String {
    let mut tags = Vec::new();
    if let Some(dc) = dc {
        tags.push(format!("dc=d{dc}"));
    }
    if let Some(host) = host {
        tags.push(format!("host=h{host}"));
    }
    if tags.is_empty() {
        NAMES[name].to_string()
    } else {
        format!("{}{{{}}}", NAMES[name], tags.join(","))
    }
}

impl Cluster {
    /// Writes `samples` (series index, seconds before now, value in quarters) in order to the
    /// single engine and to each series' partition, so every series sees its samples in the
    /// same order on both sides.
    fn build(partitions: u32, series: &[SeriesSpec], samples: &[(usize, i64, i32)]) -> Cluster {
        let clock = Arc::new(ManualClock::new(NOW));
        let mut dirs = vec![scratch()];
        let single = open(dirs[0].path(), &clock);
        let parts: Vec<Engine> = (0..partitions)
            .map(|_| {
                dirs.push(scratch());
                open(dirs.last().expect("dir").path(), &clock)
            })
            .collect();
        let keys: Vec<String> = series.iter().map(key_of).collect();
        let mut ids = Vec::new();
        let mut kinds: BTreeMap<&str, bool> = BTreeMap::new();
        for (key, spec) in keys.iter().zip(series) {
            let counter = *kinds.entry(key).or_insert(spec.3);
            let part = &parts[partition_of(key, partitions) as usize];
            let (a, b) = (single.series(key).unwrap(), part.series(key).unwrap());
            if counter {
                single.declare_kind(a, SeriesKind::Counter).unwrap();
                part.declare_kind(b, SeriesKind::Counter).unwrap();
            }
            ids.push((a, partition_of(key, partitions) as usize, b));
        }
        for batch in samples.chunks(37) {
            let mut to_single = Vec::new();
            let mut to_parts = vec![Vec::new(); parts.len()];
            for &(s, ago, quarters) in batch {
                let (a, p, b) = ids[s];
                let value = f64::from(quarters) / 4.0;
                to_single.push(Sample::new(a, NOW - ago, value));
                to_parts[p].push(Sample::new(b, NOW - ago, value));
            }
            single.record_batch(&to_single).unwrap();
            for (part, samples) in parts.iter().zip(&to_parts) {
                part.record_batch(samples).unwrap();
            }
        }
        Cluster {
            _dirs: dirs,
            clock,
            single,
            parts,
        }
    }

    /// Moves every engine's clock on and runs two maintenance passes, so closed periods
    /// are compacted and old ones dropped alike everywhere.
    fn age(&self, seconds: i64) {
        self.clock.advance(seconds);
        for _ in 0..2 {
            self.single.maintain().unwrap();
            for part in &self.parts {
                part.maintain().unwrap();
            }
        }
    }

    /// Owners: partition `p` is held by owner `owner_of[p] % owners`; an owner answers for
    /// all its partitions at once.
    fn owners(&self, owner_of: &[u8]) -> Vec<Vec<Reader<'_>>> {
        (self.owned(owner_of).into_iter())
            .map(|(_, readers)| readers)
            .collect()
    }

    /// [`Cluster::owners`], each with the partitions it holds.
    fn owned(&self, owner_of: &[u8]) -> Vec<(Vec<u32>, Vec<Reader<'_>>)> {
        let owners = self.parts.len().div_ceil(2).max(1);
        let mut held = vec![(Vec::new(), Vec::new()); owners];
        for (p, part) in self.parts.iter().enumerate() {
            let owner = &mut held[usize::from(owner_of[p % owner_of.len()]) % owners];
            owner.0.push(p as u32);
            owner.1.push(part.reader());
        }
        held.retain(|(_, readers)| !readers.is_empty());
        held
    }
}

/// `items` reordered by `keys` (a random permutation's sort keys).
fn shuffled<T>(items: Vec<T>, keys: &[u32]) -> Vec<T> {
    let mut keyed: Vec<(u32, usize, T)> = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| (keys[i % keys.len()], i, item))
        .collect();
    keyed.sort_by_key(|(k, i, _)| (*k, *i));
    keyed.into_iter().map(|(_, _, item)| item).collect()
}

/// Through JSON and back, as the transport carries it.
fn over_the_wire<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
    serde_json::from_str(&serde_json::to_string(value).expect("serialize")).expect("deserialize")
}

/// The aggregate as the cluster answers it: planned on one node's engine, each owner's part
/// charged to its own budget and sent as JSON, the parts merged in the order `order` gives
/// and each charged to the request's budget.
fn cluster_aggregate(
    cluster: &Cluster,
    query: &AggregateQuery,
    owner_of: &[u8],
    order: &[u32],
    request: &ReadBudget,
) -> Result<AggregateResult> {
    let plan = over_the_wire(&cluster.parts[0].reader().plan_aggregate(query)?);
    let mut answers = Vec::new();
    for readers in cluster.owners(owner_of) {
        let budget = owner_budget(request);
        let part = aggregate_over(&readers, &plan, &budget)?;
        answers.push(over_the_wire(&Charged::new(part, &budget)));
    }
    let parts = shuffled(answers, order)
        .into_iter()
        .map(|answer| answer.take(request))
        .collect::<Result<Vec<_>>>()?;
    merge_aggregates(plan, parts)
}

/// True when the fold of `aggregation` over `display` values adds only what the samples
/// hold (multiples of a quarter, far from overflow), so every order of the additions gives
/// the same bits. The others add per-series quotients (`total / count`, `total / seconds`),
/// whose float sum depends on the order the series are added in, on one engine as across
/// partitions.
fn exact(aggregation: Aggregation, display: Display) -> bool {
    let sums = matches!(aggregation, Aggregation::Sum | Aggregation::Avg);
    let quotients = matches!(display, Display::Avg | Display::PerSec);
    !(sums && quotients) || (aggregation == Aggregation::Avg && display == Display::Avg)
}

fn same_value(a: Option<f64>, b: Option<f64>, exact: bool) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) if exact => a.to_bits() == b.to_bits(),
        (Some(a), Some(b)) => (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0),
        _ => false,
    }
}

fn assert_same(
    got: &AggregateResult,
    want: &AggregateResult,
) -> std::result::Result<(), TestCaseError> {
    let exact = exact(want.aggregation, want.display);
    prop_assert_eq!(&got.tier, &want.tier);
    prop_assert_eq!(got.display, want.display);
    prop_assert_eq!(got.aggregation, want.aggregation);
    prop_assert_eq!(got.step, want.step);
    prop_assert_eq!(got.groups.len(), want.groups.len());
    for (g, w) in got.groups.iter().zip(&want.groups) {
        prop_assert_eq!(&g.tags, &w.tags);
        prop_assert_eq!(g.series, w.series);
        prop_assert_eq!(g.points.len(), w.points.len());
        for (&(t1, v1), &(t2, v2)) in g.points.iter().zip(&w.points) {
            prop_assert_eq!(t1, t2);
            prop_assert!(same_value(v1, v2, exact), "at {}: {:?} != {:?}", t1, v1, v2);
        }
    }
    Ok(())
}

fn series_spec() -> impl Strategy<Value = SeriesSpec> {
    (
        0..NAMES.len(),
        prop::option::of(0u8..3),
        prop::option::of(0u8..2),
        prop::bool::weighted(0.3),
    )
}

/// A random aggregate over the last few days.
fn aggregate_query() -> impl Strategy<Value = AggregateQuery> {
    let selectors = prop::sample::select(vec!["*", "cpu", "servers.*", "*{host=h1}", "*{dc!=d0}"]);
    let group_by = prop::sample::select(vec![
        vec![],
        vec!["host"],
        vec!["dc"],
        vec!["host", "dc"],
        vec!["dc", "host"],
    ]);
    let tiers = prop::sample::select(vec!["auto", "1m", "1h", "1d"]);
    (
        (selectors, group_by, tiers),
        prop::sample::select(Aggregation::ALL.to_vec()),
        prop::sample::select(Display::ALL.to_vec()),
        (0..5 * DAY, 1..3 * DAY),
        prop::option::of(1u64..4),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |((selector, group_by, tier), aggregation, display, (ago, len), steps, whole)| {
                let mut query = AggregateQuery::new(
                    crate::registry::Selector::parse(selector).expect("selector"),
                    aggregation,
                    NOW - ago,
                    NOW - ago + len,
                )
                .group_by(group_by)
                .display(display)
                .tier(tier);
                let resolution = match tier {
                    "1m" => Some(60),
                    "1h" => Some(3_600),
                    "1d" => Some(DAY as u64),
                    _ => None,
                };
                if let (Some(resolution), Some(steps)) = (resolution, steps) {
                    query = query.step(Span::from_secs(resolution * steps));
                }
                if whole {
                    query = query.whole_range();
                }
                query
            },
        )
}

const FINDS: [&str; 9] = [
    "*",
    "servers.*",
    "servers.*.*",
    "servers.web.*",
    "*.*.*",
    "servers.{web,db}.*",
    "cpu;host=h1",
    "*;dc=d0",
    "servers.web.mem.*",
];

const LISTINGS: [&str; 5] = ["*", "servers.*", "cpu{host=h0}", "*{dc!=d1}", "nothing"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn merged_partials_answer_as_one_engine(
        partitions in 1u32..=5,
        series in prop::collection::vec(series_spec(), 1..40),
        samples in prop::collection::vec((0usize..40, 0..4 * DAY, -400i32..400), 0..400),
        age in prop::option::of(DAY / 2..2 * DAY),
        queries in prop::collection::vec(aggregate_query(), 1..8),
        owner_of in prop::collection::vec(0u8..5, 5),
        order in prop::collection::vec(any::<u32>(), 5),
    ) {
        let samples: Vec<_> = samples
            .into_iter()
            .map(|(s, ago, q)| (s % series.len(), ago, q))
            .collect();
        let cluster = Cluster::build(partitions, &series, &samples);
        if let Some(age) = age {
            cluster.age(age);
        }
        for query in &queries {
            let single_budget = ReadBudget::unlimited();
            let want = cluster.single.reader().aggregate_within(query, &single_budget);
            let request = ReadBudget::unlimited();
            let got = cluster_aggregate(&cluster, query, &owner_of, &order, &request);
            match (got, want) {
                (Ok(got), Ok(want)) => {
                    assert_same(&got, &want)?;
                    // Scans and cells split over the partitions add up to one engine's.
                    prop_assert_eq!(request.used(), single_budget.used());
                }
                (Err(_), Err(_)) => {}
                (got, want) => prop_assert!(false, "{:?}: {:?} vs {:?}", query, got, want),
            }
        }
        let owners = cluster.owners(&owner_of);
        for query in FINDS {
            let mut single = crate::render::Finder::new(query).unwrap();
            let single_budget = ReadBudget::unlimited();
            single.add_registry(cluster.single.registry(), &single_budget).unwrap();
            let parts: Vec<Vec<FindNode>> = owners
                .iter()
                .map(|readers| {
                    over_the_wire(&find_over(readers, query, &ReadBudget::unlimited()).unwrap())
                })
                .collect();
            prop_assert_eq!(merge_find(shuffled(parts, &order)), single.nodes(), "{}", query);
        }
        for pattern in LISTINGS {
            let selector = crate::registry::Selector::parse(pattern).unwrap();
            let mut want = cluster.single.reader().series_keys(&selector);
            want.sort();
            let parts: Vec<Vec<String>> = owners
                .iter()
                .map(|readers| over_the_wire(&series_over(readers, &selector)))
                .collect();
            prop_assert_eq!(merge_series(shuffled(parts, &order)), want, "{}", pattern);
        }
    }

    /// Partials whose sums overflow (to infinities, and NaN where they meet) and values of
    /// every magnitude come back from JSON with the same bits.
    #[test]
    fn partials_survive_json_bit_for_bit(
        values in prop::collection::vec(
            prop_oneof![any::<f64>().prop_filter("finite", |v| v.is_finite()), Just(f64::MAX), Just(-f64::MAX), Just(-0.0)],
            1..60,
        ),
        display in prop::sample::select(Display::ALL.to_vec()),
        aggregation in prop::sample::select(Aggregation::ALL.to_vec()),
    ) {
        let clock = Arc::new(ManualClock::new(NOW));
        let dir = scratch();
        let engine = open(dir.path(), &clock);
        let samples: Vec<Sample> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let id = engine.series(&format!("m{{host=h{}}}", i % 3)).unwrap();
                Sample::new(id, NOW - 3_600 + (i as i64 % 7) * 60, v)
            })
            .collect();
        engine.record_batch(&samples).unwrap();
        let query = AggregateQuery::new(crate::registry::Selector::new("m"), aggregation, NOW - 3_600, NOW)
            .tier("1m")
            .display(display)
            .step(Span::from_secs(120));
        let reader = engine.reader();
        let plan = reader.plan_aggregate(&query).unwrap();
        let part = reader.aggregate_partial(&plan, &ReadBudget::unlimited()).unwrap();
        let back: PartialAggregate = over_the_wire(&part);
        let (want, got) = (part.finish().unwrap(), back.finish().unwrap());
        for (w, g) in want.groups.iter().zip(&got.groups) {
            for (&(_, a), &(_, b)) in w.points.iter().zip(&g.points) {
                let same = match (a, b) {
                    (Some(a), Some(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    (a, b) => a == b,
                };
                prop_assert!(same, "{:?} != {:?}", a, b);
            }
        }
        prop_assert_eq!(want.groups.len(), got.groups.len());
    }
}

/// The cluster's store without the network: the tiers and clock the single engine's (the
/// asker's), each owner's answer to a leaf read made by its engines within its own budget
/// and sent as JSON, the answers taken in the order `order` gives; what `ClusterStore`
/// makes of them is the node's own code.
struct InProcess<'a> {
    /// Per owner, the partitions it holds and their engines' readers.
    owners: Vec<(Vec<u32>, Vec<Reader<'a>>)>,
    /// Partitions in all.
    all: u32,
    asker: Reader<'a>,
    order: &'a [u32],
    /// The owners' render cache (one for all, as a node's serves all its partitions): the
    /// ranges of a case, read one after another, are answered partly from it.
    cache: RenderCache,
}

impl Owners for InProcess<'_> {
    fn tiers(&self) -> &TiersConfig {
        self.asker.config()
    }

    fn now(&self) -> Timestamp {
        self.asker.now()
    }

    fn ask(&self, read: PromRead, budget: u64) -> Result<Vec<PromAnswer>> {
        let read = over_the_wire(&read);
        let answers = (self.owners.iter())
            .map(|(partitions, readers)| {
                let budget = ReadBudget::new(budget);
                let answer = promql_read::answer_over(
                    (readers, &self.cache),
                    partitions,
                    self.all,
                    read.clone(),
                    &budget,
                )?;
                Ok(over_the_wire(&answer))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(shuffled(answers, self.order))
    }
}

/// Render's source over `cluster`'s owners (`owner_of` as [`Cluster::owned`] takes it),
/// answers taken in the order `order` gives.
fn cluster_source<'a>(
    cluster: &'a Cluster,
    owner_of: &[u8],
    order: &'a [u32],
) -> StoredSource<ClusterStore<'a>> {
    StoredSource::new(ClusterStore::of(Box::new(InProcess {
        owners: cluster.owned(owner_of),
        all: cluster.parts.len() as u32,
        asker: cluster.single.reader(),
        order,
        cache: RenderCache::new(DEFAULT_RENDER_CACHE_BYTES),
    })))
}

/// Fetched series as they would cross the wire: equal texts are equal series, bit for bit
/// (floats are written exactly, non-finite ones included).
fn exact_text(fetched: &[Fetched]) -> String {
    serde_json::to_string(fetched).expect("serialize")
}

const RENDER_PATHS: [&str; 10] = [
    "*",
    "cpu",
    "servers.*.*",
    "servers.{web,db}.*",
    "servers.web.mem.*",
    "cpu;host=h1",
    "*;dc!=d0",
    "*.*;host=",
    "net.rx;dc=d*",
    "nothing",
];

/// A random render range over the last few days, often shorter than a bucket of the coarse
/// tiers (so that it may hold no bucket's stamp), and a point budget.
fn render_range() -> impl Strategy<Value = (i64, i64, u32)> {
    (
        0..5 * DAY,
        prop_oneof![1..4 * 3_600i64, 1..3 * DAY],
        prop::sample::select(vec![1u32, 7, 60, 1_500, 100_000]),
    )
        .prop_map(|(ago, len, max_points)| (NOW - ago, NOW - ago + len, max_points))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// For random paths and ranges, render's fetch through the cluster's store (selected
    /// and read on the asker's grid by the owners, merged) is the single engine's fetch bit
    /// for bit; a render of the path and of `sumSeries` of it answers the same (the single
    /// engine's sumSeries in the aggregate's one pass, the cluster's by fetching and adding
    /// in path order: equal but for the order of float additions of per-series averages);
    /// and the cluster charges what the single engine charges.
    #[test]
    fn merged_render_fetches_answer_as_one_engine(
        partitions in 1u32..=5,
        series in prop::collection::vec(series_spec(), 1..40),
        samples in prop::collection::vec((0usize..40, 0..4 * DAY, -400i32..400), 0..400),
        age in prop::option::of(DAY / 2..2 * DAY),
        ranges in prop::collection::vec(render_range(), 1..6),
        owner_of in prop::collection::vec(0u8..5, 5),
        order in prop::collection::vec(any::<u32>(), 5),
    ) {
        use crate::render::{render, RenderRequest, Source};

        let samples: Vec<_> = samples
            .into_iter()
            .map(|(s, ago, q)| (s % series.len(), ago, q))
            .collect();
        let cluster = Cluster::build(partitions, &series, &samples);
        if let Some(age) = age {
            cluster.age(age);
        }
        let single = StoredSource::new(cluster.single.reader());
        let source = cluster_source(&cluster, &owner_of, &order);
        for (from, until, max_points) in ranges {
            for path in RENDER_PATHS {
                let pattern = PathPattern::parse(path).unwrap();
                let want = single.fetch(&pattern, from, until).unwrap();
                let got = source.fetch(&pattern, from, until).unwrap();
                prop_assert_eq!(
                    exact_text(&got),
                    exact_text(&want),
                    "{} over {}..{} at {}", path, from, until, max_points
                );
                let request = RenderRequest {
                    targets: vec![path.to_string(), format!("sumSeries({path})")],
                    from,
                    until,
                    max_data_points: Some(max_points),
                    default_max_points: 1_500,
                    x_files_factor: 0.0,
                    now: 0,
                };
                let (single_budget, cluster_budget) =
                    (ReadBudget::unlimited(), ReadBudget::unlimited());
                let want = render(&single, &request, &single_budget);
                let got = render(&source, &request, &cluster_budget);
                match (got, want) {
                    (Ok(got), Ok(want)) => {
                        prop_assert_eq!(got.len(), want.len(), "{}", path);
                        for (g, w) in got.iter().zip(&want) {
                            prop_assert_eq!(&g.target, &w.target);
                            prop_assert_eq!(g.datapoints.len(), w.datapoints.len(), "{}", path);
                            for (&(v1, t1), &(v2, t2)) in g.datapoints.iter().zip(&w.datapoints) {
                                prop_assert_eq!(t1, t2);
                                let exact = !w.target.starts_with("sumSeries");
                                prop_assert!(same_value(v1, v2, exact), "{} at {}: {:?} != {:?}", path, t1, v1, v2);
                            }
                        }
                    }
                    (Err(got), Err(want)) => {
                        prop_assert_eq!(got.to_string(), want.to_string());
                    }
                    (got, want) => prop_assert!(false, "{}: {:?} vs {:?}", path, got, want),
                }
                prop_assert_eq!(cluster_budget.used(), single_budget.used(), "{}", path);
            }
        }
    }
}

/// A render's budget refuses the same requests on the cluster as on one engine, with the
/// same message, and the owners' scans count against it.
#[test]
fn the_render_budget_holds_across_owners() {
    use crate::render::{render, RenderRequest};

    let series: Vec<SeriesSpec> = (0..NAMES.len())
        .map(|n| (n, Some(0), None, false))
        .collect();
    let samples: Vec<(usize, i64, i32)> = (0..series.len()).map(|s| (s, 600, 4)).collect();
    let cluster = Cluster::build(3, &series, &samples);
    let order = [0, 1, 2];
    let source = cluster_source(&cluster, &[0, 1, 2], &order);
    let request = RenderRequest {
        targets: vec!["*".into(), "servers.*.*".into()],
        from: NOW - 3_600,
        until: NOW,
        max_data_points: None,
        default_max_points: 1_500,
        x_files_factor: 0.0,
        now: 0,
    };
    // Two scans of 6 keys, then 2 + 2 series at 60 points: 252 values.
    for limit in [251, 252] {
        let (single_budget, cluster_budget) = (ReadBudget::new(limit), ReadBudget::new(limit));
        let want = render(
            &StoredSource::new(cluster.single.reader()),
            &request,
            &single_budget,
        );
        let got = render(&source, &request, &cluster_budget);
        assert_eq!(want.is_ok(), limit == 252, "{want:?}");
        assert_eq!(got.is_ok(), limit == 252, "{got:?}");
        if let (Err(got), Err(want)) = (got, want) {
            assert_eq!(got.to_string(), want.to_string());
        }
    }
}

/// A store whose tier of the grid's name has another resolution refuses the grid rather
/// than read other points; a grid naming a tier it does not have is refused too.
#[test]
fn a_store_refuses_a_render_grid_its_tiers_do_not_fit() {
    let cluster = Cluster::build(1, &[(0, None, None, false)], &[(0, 60, 4)]);
    let reader = StoredSource::new(cluster.parts[0].reader());
    let pattern = PathPattern::parse("cpu").unwrap();
    let grid = reader.grid(0, NOW - DAY, NOW).unwrap().unwrap();
    assert_eq!((grid.tier.as_str(), grid.resolution), ("1m", 60));
    assert!(reader.fetch_on(&pattern, 0, &grid).is_ok());
    let other = RenderGrid {
        resolution: 30,
        ..grid.clone()
    };
    let err = reader.fetch_on(&pattern, 0, &other).unwrap_err();
    assert!(err.to_string().contains("cannot be read on it"), "{err}");
    let unknown = RenderGrid {
        tier: "5m".into(),
        ..grid
    };
    assert!(reader.fetch_on(&pattern, 0, &unknown).is_err());
}

/// The asker's grid, not an owner's clock, decides the tier's window: an owner whose clock
/// runs a day ahead still reads the first day of a two-day range of the 1m tier (the grid's
/// window travels with the bucket read).
#[test]
fn owners_read_renders_on_the_askers_window_whatever_their_clock() {
    use crate::render::Source;

    let samples: Vec<(usize, i64, i32)> =
        (0..100).map(|i| (0, 2 * DAY - 600 - i * 900, 4)).collect();
    let cluster = Cluster::build(1, &[(0, None, None, false)], &samples);
    let pattern = PathPattern::parse("cpu").unwrap();
    let (from, until) = (NOW - 2 * DAY, NOW);
    let single = StoredSource::new(cluster.single.reader());
    let want = single.fetch(&pattern, from, until).unwrap();
    let grid = single.grid(0, from, until).unwrap().unwrap();
    assert_eq!(grid.tier, "1m");
    let order = [0];
    let source = cluster_source(&cluster, &[0], &order);
    cluster.clock.set(NOW + DAY);
    let got = source.fetch_on(&pattern, 0, &grid).unwrap();
    cluster.clock.set(NOW);
    assert!(want[0].buckets.iter().any(|b| !b.is_empty()));
    assert_eq!(exact_text(&got), exact_text(&want));
}

/// Two partitions of 175 groups each over 2880 points fit the points limit alone, and their
/// merge (350 × 2880 > 1,000,000 values) does not: the limit holds on the merged answer, as
/// it does on one engine with both partitions' series.
#[test]
fn the_points_limit_holds_on_the_merged_answer() {
    let series: Vec<SeriesSpec> = Vec::new();
    let cluster = Cluster::build(2, &series, &[]);
    for host in 0..350u32 {
        let key = format!("wide{{host=h{host:03}}}");
        let part = &cluster.parts[usize::from(host >= 175)];
        for engine in [&cluster.single, part] {
            let id = engine.series(&key).unwrap();
            engine
                .record_batch(&[Sample::new(id, NOW - 60, 1.0)])
                .unwrap();
        }
    }
    let query = AggregateQuery::new(
        crate::registry::Selector::new("wide"),
        Aggregation::Sum,
        NOW - 2 * DAY,
        NOW,
    )
    .tier("1m")
    .group_by(["host"]);
    let err = cluster.single.aggregate(&query).unwrap_err().to_string();
    assert!(err.contains("350 groups x 2880 points"), "{err}");
    let plan = cluster.parts[0].reader().plan_aggregate(&query).unwrap();
    let parts: Vec<PartialAggregate> = cluster
        .parts
        .iter()
        .map(|part| {
            part.reader()
                .aggregate_partial(&plan, &ReadBudget::unlimited())
                .unwrap()
        })
        .collect();
    assert_eq!(parts[0].groups(), 175);
    let err = merge_aggregates(plan, parts).unwrap_err().to_string();
    assert!(err.contains("350 groups x 2880 points"), "{err}");
}

/// A part answering another plan, or with rows that do not fit its plan's points, is refused
/// rather than merged onto the wrong points.
#[test]
fn parts_of_another_plan_or_garbled_are_refused() {
    let series = [(0, Some(0), None, false), (1, Some(1), None, false)];
    let cluster = Cluster::build(1, &series, &[(0, 60, 4), (1, 120, 8)]);
    let reader = cluster.parts[0].reader();
    let query = AggregateQuery::new(
        crate::registry::Selector::new("*"),
        Aggregation::Max,
        NOW - DAY,
        NOW,
    )
    .tier("1h")
    .group_by(["host"]);
    let plan = reader.plan_aggregate(&query).unwrap();
    let other = reader.plan_aggregate(&query.clone().tier("1m")).unwrap();
    let part = reader
        .aggregate_partial(&other, &ReadBudget::unlimited())
        .unwrap();
    assert!(merge_aggregates(plan.clone(), [part]).is_err());

    let part = reader
        .aggregate_partial(&plan, &ReadBudget::unlimited())
        .unwrap();
    let mut json: serde_json::Value = serde_json::to_value(&part).unwrap();
    json["groups"][0]["rows"].as_array_mut().unwrap().pop();
    let garbled: PartialAggregate = serde_json::from_value(json).unwrap();
    assert!(merge_aggregates(plan.clone(), [garbled]).is_err());

    let mut json: serde_json::Value = serde_json::to_value(&part).unwrap();
    json["groups"].as_array_mut().unwrap().reverse();
    let unsorted: PartialAggregate = serde_json::from_value(json).unwrap();
    assert!(merge_aggregates(plan.clone(), [unsorted]).is_err());

    let answer = merge_aggregates(plan, [part]).unwrap();
    assert_eq!(answer, cluster.single.aggregate(&query).unwrap());
}

/// An owner's tier named like the plan's but laid out otherwise (another resolution) refuses
/// the plan instead of answering on its own grid.
#[test]
fn an_owner_with_another_tier_layout_refuses_the_plan() {
    let cluster = Cluster::build(1, &[(0, None, None, false)], &[(0, 60, 4)]);
    let plan = cluster
        .single
        .reader()
        .plan_aggregate(
            &AggregateQuery::new(
                crate::registry::Selector::new("*"),
                Aggregation::Sum,
                NOW - DAY,
                NOW,
            )
            .tier("1h"),
        )
        .unwrap();
    let mut config = tiers();
    config.tiers[1].resolution = Span::from_secs(1_800);
    let clock = Arc::new(ManualClock::new(NOW));
    let dir = scratch();
    let other = Engine::builder(dir.path())
        .tiers(config)
        .clock(clock)
        .background_maintenance(false)
        .open()
        .unwrap();
    let err = other
        .reader()
        .aggregate_partial(&plan, &ReadBudget::unlimited())
        .unwrap_err();
    assert!(err.to_string().contains("another grid"), "{err}");
}

/// The asker's plan, not an owner's clock, decides the tier and its window: an owner whose
/// clock runs a day ahead reads on the asker's grid and window and answers as the asker's
/// engine would.
#[test]
fn owners_read_on_the_askers_plan_whatever_their_clock() {
    let series = [(0, Some(0), None, false), (0, Some(1), None, false)];
    let samples: Vec<(usize, i64, i32)> = (0..200)
        .map(|i| (i % 2, i as i64 * 1_000, i as i32))
        .collect();
    let cluster = Cluster::build(1, &series, &samples);
    let query = AggregateQuery::new(
        crate::registry::Selector::new("cpu"),
        Aggregation::Sum,
        NOW - 2 * DAY,
        NOW,
    )
    .display(Display::Total)
    .tier("1m");
    let plan = cluster.single.reader().plan_aggregate(&query).unwrap();
    // The owner's clock is a day ahead: by its own clock the 1m tier's window would start a
    // day later and hide the first day of the range. The plan's window wins.
    cluster.clock.set(NOW + DAY);
    let part = cluster.parts[0]
        .reader()
        .aggregate_partial(&plan, &ReadBudget::unlimited())
        .unwrap();
    cluster.clock.set(NOW);
    assert_eq!(
        merge_aggregates(plan, [part]).unwrap(),
        cluster.single.aggregate(&query).unwrap()
    );
}

#[test]
fn a_pinned_query_names_the_askers_tier() {
    let cluster = Cluster::build(1, &[(0, None, None, false)], &[(0, 60, 4)]);
    let reader = cluster.single.reader();
    let query = crate::read::query::Query::new("cpu", NOW - 10 * DAY, NOW);
    let pinned = pinned_query(reader.config(), reader.now(), &query).unwrap();
    assert_eq!(pinned.tier, TierChoice::Named("1h".into()));
    assert_eq!(
        cluster.parts[0].query(&pinned).unwrap(),
        cluster.single.query(&query).unwrap()
    );
}

/// Each owner reads within what the request may still read, and the request refuses parts
/// whose reads add up past its budget, even when each fits alone.
#[test]
fn the_request_budget_bounds_the_parts_together() {
    let series = [
        (0, Some(0), None, false),
        (0, Some(1), None, false),
        (0, Some(2), None, false),
    ];
    let cluster = Cluster::build(3, &series, &[(0, 60, 4), (1, 60, 8), (2, 60, 12)]);
    let query = AggregateQuery::new(
        crate::registry::Selector::new("cpu"),
        Aggregation::Sum,
        NOW - DAY,
        NOW,
    )
    .tier("1h");
    let single = ReadBudget::unlimited();
    cluster
        .single
        .reader()
        .aggregate_within(&query, &single)
        .unwrap();
    let plan = cluster.single.reader().plan_aggregate(&query).unwrap();
    let answer = |request: &ReadBudget| -> Result<AggregateResult> {
        let mut parts = Vec::new();
        for part in &cluster.parts {
            let budget = owner_budget(request);
            let sent = match aggregate_over(&[part.reader()], &plan, &budget) {
                Ok(answer) => Ok(Charged::new(answer, &budget)),
                Err(error) => Err(Refusal::new(&error, &budget)),
            };
            match over_the_wire(&sent) {
                Ok(charged) => parts.push(charged.take(request)?),
                Err(refusal) => return Err(refusal.into_error(request)),
            }
        }
        merge_aggregates(plan.clone(), parts)
    };
    let exact = ReadBudget::new(single.used());
    assert_eq!(
        answer(&exact).unwrap(),
        cluster.single.aggregate(&query).unwrap()
    );
    assert_eq!(exact.used(), single.used());
    let short = ReadBudget::new(single.used() - 1);
    assert!(answer(&short)
        .unwrap_err()
        .to_string()
        .contains("read budget"));
    assert!(short.exceeded());
}

/// A distribution read as the cluster answers it: planned from the tiers and clock, each
/// owner's part sent as JSON, the parts merged in the order `order` gives (a one-series read
/// from its partition's engine alone).
fn cluster_distribution(
    cluster: &Cluster,
    query: &crate::read::distribution::DistributionQuery,
    owner_of: &[u8],
    order: &[u32],
) -> Result<DistributionResult> {
    let plan = DistributionPlan::new(cluster.single.config(), cluster.single.now(), query)?;
    let plan = over_the_wire(&plan);
    let budget = ReadBudget::unlimited();
    // A one-series read asks its partition's owner only.
    let owners = match plan.series() {
        Some(key) => {
            let partition = partition_of(key, cluster.parts.len() as u32) as usize;
            vec![vec![cluster.parts[partition].reader()]]
        }
        None => cluster.owners(owner_of),
    };
    let mut answers = Vec::new();
    for readers in owners {
        answers.push(over_the_wire(&distribution_over(&readers, &plan, &budget)?));
    }
    merge_distributions(plan, shuffled(answers, order))
}

/// Seeded log-normal latencies into 24 distribution series (and one gauge, which a selector
/// picks and the answer leaves out) on one engine and split over five: every quantile and
/// histogram, of one series, of all and per data centre, at 1m and 1h, hot and compacted,
/// is the single engine's, field for field, whatever owners hold the partitions and in
/// whatever order their parts merge.
#[test]
fn distribution_parts_merge_into_the_single_engines_answer() {
    use crate::read::distribution::{DistributionQuery, DistributionTarget, Shown};
    use rand::{Rng, SeedableRng};
    use rand_distr::{Distribution, LogNormal};

    let cluster = Cluster::build(5, &[], &[]);
    let mut rng = rand::rngs::StdRng::seed_from_u64(53);
    let latency = LogNormal::new(3.0, 1.05).expect("valid");
    let mut keys: Vec<String> = (0..24)
        .map(|h| format!("lat{{dc=d{},host=h{h:02}}}", h % 3))
        .collect();
    keys.push("lat{dc=d0,host=gauge}".into());
    let mut to_single = Vec::new();
    let mut to_parts = vec![Vec::new(); cluster.parts.len()];
    for (i, key) in keys.iter().enumerate() {
        let p = partition_of(key, 5) as usize;
        let (a, b) = (
            cluster.single.series(key).unwrap(),
            cluster.parts[p].series(key).unwrap(),
        );
        if i < 24 {
            cluster
                .single
                .declare_kind(a, SeriesKind::Distribution)
                .unwrap();
            cluster.parts[p]
                .declare_kind(b, SeriesKind::Distribution)
                .unwrap();
        }
        for _ in 0..400 {
            let ago = rng.gen_range(1..3 * 3_600);
            // Multiples of 2^-10: every sum of them is exact, so totals merge to the same
            // bits in any order (as the aggregates' checks above).
            let v: f64 = latency.sample(&mut rng);
            let v = (v * 1024.0).round() / 1024.0;
            to_single.push(Sample::new(a, NOW - ago, v));
            to_parts[p].push(Sample::new(b, NOW - ago, v));
        }
    }
    cluster.single.record_batch(&to_single).unwrap();
    for (part, samples) in cluster.parts.iter().zip(&to_parts) {
        part.record_batch(samples).unwrap();
    }
    let check = |cluster: &Cluster| {
        let now = cluster.single.now();
        let targets = [
            DistributionTarget::Series("lat{dc=d1,host=h07}".into()),
            DistributionTarget::Select {
                selector: Selector::new("lat"),
                group_by: Vec::new(),
            },
            DistributionTarget::Select {
                selector: Selector::new("lat"),
                group_by: vec!["dc".into()],
            },
        ];
        let mut checked = 0;
        for target in &targets {
            for shown in [0.5, 0.9, 0.99]
                .map(Shown::Quantile)
                .into_iter()
                .chain([Shown::Histogram])
            {
                for (tier, whole_range) in [("1m", false), ("1h", false), ("1h", true)] {
                    let query = DistributionQuery {
                        target: target.clone(),
                        shown,
                        tier: TierChoice::Named(tier.into()),
                        from: NOW - 4 * 3_600,
                        to: now,
                        step: None,
                        max_points: None,
                        whole_range,
                    };
                    let single = cluster
                        .single
                        .reader()
                        .distribution_query(&query, &ReadBudget::unlimited())
                        .unwrap();
                    assert!(single.relative_error.is_some(), "{single:?}");
                    for (owner_of, order) in
                        [(&[0u8, 1, 2, 0, 1][..], &[3u32, 1, 4][..]), (&[0], &[0])]
                    {
                        let merged =
                            cluster_distribution(cluster, &query, owner_of, order).unwrap();
                        assert_eq!(merged, single, "{query:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 3 * 4 * 3 * 2);
    };
    check(&cluster);
    // Closed days compacted everywhere: the parts read compacted histograms alike.
    cluster.age(DAY);
    check(&cluster);
}
