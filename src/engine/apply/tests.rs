use std::sync::Arc;

use proptest::prelude::*;

use super::applied::AppliedFile;
use super::undo_chain::{HistogramImage, RawTail, UndoFile};
use super::{Checkpoints, Fault, FaultAction, Step};
use crate::bucket::Bucket;
use crate::clock::Clock;
use crate::clock::ManualClock;
use crate::config::{EngineSettings, RawTierSpec, TierSpec, TiersConfig};
use crate::counter::SeriesKind;
use crate::engine::Engine;
use crate::engine::EngineBuilder;
use crate::engine::{BatchSample, BatchSeries, KeyIndex, SampleBatch};
use crate::error::Error;
use crate::error::RejectReason;
use crate::histogram::Histogram;
use crate::registry::{SeriesId, SetPlace};
use crate::storage::cells::CellAt;
use crate::storage::undo_entry::Undo;
use crate::time::{Span, Timestamp};

/// 2025-11-21T12:00:00Z.
const NOW: Timestamp = 1_763_726_400;
const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const SERIES: usize = 12;

/// A rollup tier of `resolution`, `period` and `retention` seconds, one period ahead.
fn tier(name: &str, resolution: i64, period: i64, retention: i64) -> TierSpec {
    TierSpec {
        name: name.to_owned(),
        resolution: Span::from_secs(resolution as u64),
        period: Span::from_secs(period as u64),
        retention: Span::from_secs(retention as u64),
        create_ahead: 1,
        earlier_periods: Vec::new(),
    }
}

/// Tiers 10s/1m/5m, periods 10m/1h/1d, retentions 1h/6h/2d, 16 series per chunk; a raw
/// tier of 1h periods kept 6h, writing only changed values.
fn tiers() -> TiersConfig {
    TiersConfig {
        engine: EngineSettings {
            future_bound: Span::from_secs(HOUR as u64),
            series_per_chunk: 16,
            max_points: 1_500,
        },
        counters: Default::default(),
        raw: Some(RawTierSpec {
            name: "raw".to_owned(),
            period: Span::from_secs(HOUR as u64),
            retention: Span::from_secs(6 * HOUR as u64),
            create_ahead: 1,
            dedupe_unchanged: true,
        }),
        tiers: vec![
            tier("10s", 10, 10 * MINUTE, HOUR),
            tier("1m", MINUTE, HOUR, 6 * HOUR),
            tier("5m", 5 * MINUTE, DAY, 2 * DAY),
        ],
        sets: Vec::new(),
    }
}

/// [`tiers`] with a `[[set]]` "short" of tiers 30s/15m (periods 1h/1d, retentions 3h/3d)
/// for the series `s2`, `s6` and those tagged `host=h1`.
fn tiers_with_sets() -> TiersConfig {
    TiersConfig {
        sets: vec![crate::config::TierSet {
            name: "short".to_owned(),
            series: crate::config::SeriesRules {
                names: vec!["s2".to_owned(), "s6".to_owned()],
                tags: vec![("host".to_owned(), "h1".to_owned())],
            },
            tiers: vec![
                tier("30s", 30, HOUR, 3 * HOUR),
                tier("15m", 15 * MINUTE, DAY, 3 * DAY),
            ],
        }],
        ..tiers()
    }
}

fn builder(dir: &std::path::Path, clock: &Arc<ManualClock>) -> EngineBuilder {
    builder_of(dir, clock, tiers())
}

fn builder_of(
    dir: &std::path::Path,
    clock: &Arc<ManualClock>,
    config: TiersConfig,
) -> EngineBuilder {
    Engine::builder(dir)
        .tiers(config)
        .clock(clock.clone())
        .writer_threads(2)
        .background_maintenance(false)
}

/// An engine that checkpoints after every group, as the targeted tests below expect.
fn open(dir: &std::path::Path, clock: &Arc<ManualClock>) -> Engine {
    open_every(dir, clock, 1)
}

/// An engine that checkpoints every `groups` groups (and before a deletion, a snapshot and a
/// close), never by time.
fn open_every(dir: &std::path::Path, clock: &Arc<ManualClock>, groups: u64) -> Engine {
    open_every_of(dir, clock, groups, tiers())
}

/// [`open_every`] with the tiers `config`.
fn open_every_of(
    dir: &std::path::Path,
    clock: &Arc<ManualClock>,
    groups: u64,
    config: TiersConfig,
) -> Engine {
    let checkpoints = Checkpoints {
        interval: std::time::Duration::MAX,
        groups,
        samples: usize::MAX,
    };
    builder_of(dir, clock, config)
        .checkpoints(checkpoints)
        .open()
        .expect("open an engine")
}

/// On tmpfs when there is one: what is tested does not depend on the file system.
fn scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

/// Series `i`'s key; the last one is not a valid key.
fn key(i: usize) -> String {
    match i {
        i if i == SERIES - 1 => "bad{}".to_owned(),
        i if i % 2 == 0 => format!("s{i}"),
        i => format!("s{i}{{host=h{}}}", i % 3),
    }
}

/// One message: samples as (series, declared kind, seconds from now, value).
type Message = Vec<(usize, Option<SeriesKind>, i64, f64)>;

/// A message's batch: a distribution's sample at an odd offset arrives bucketed (a native
/// histogram's point of the value and its double), the others as samples.
fn batch(now: Timestamp, message: &Message) -> SampleBatch {
    let mut batch = SampleBatch::default();
    let mut index = KeyIndex::default();
    for &(series, kind, offset, value) in message {
        if kind == Some(SeriesKind::Distribution) && offset % 2 != 0 {
            let mut histogram = Histogram::default();
            histogram.record(value);
            histogram.record(2.0 * value);
            let observed = crate::histogram::Observed {
                histogram,
                sum: 3.0 * value,
                extremes: None,
            };
            batch.push_observed(&mut index, &key(series), now + offset, observed);
        } else {
            batch.push(&mut index, &key(series), kind, now + offset, value);
        }
    }
    batch
}

/// Sets the fault hook to stop at `step` of the store's next group.
fn arm(store: &Engine, step: Step) {
    let mut guard = store.apply_log.lock();
    let inner = store.opened(&mut guard).unwrap();
    inner.fault = Some(Fault {
        step,
        group: inner.groups + 1,
        action: FaultAction::Stop,
    });
}

fn bits(b: &Bucket) -> [u64; 4] {
    [b.count, b.total.to_bits(), b.min.to_bits(), b.max.to_bits()]
}

/// Every bucket of every tier inside its window (up to the future bound), every raw point,
/// every series' kind and counter state: equal bit for bit, series matched by key.
fn assert_same(clean: &Engine, other: &Engine) {
    let (a, b) = (clean.registry(), other.registry());
    assert_eq!(a.len(), b.len(), "series registered");
    let now = clean.now();
    assert_eq!(now, other.now());
    for i in 0..a.len() {
        let id = SeriesId(i as u32);
        let key = a.key(id).unwrap();
        let other_id = b.get(key.as_str()).expect("registered on both");
        let set = a.placement(id).set();
        assert_eq!(set, b.placement(other_id).set(), "the set of {key}");
        let config = clean.reader().for_set(set).config();
        assert_eq!(clean.series_kind(id), other.series_kind(other_id), "{key}");
        assert_eq!(
            clean.rewind().counter_state(id),
            other.rewind().counter_state(other_id),
            "counter state of {key}"
        );
        let raw = |engine: &Engine, id| {
            let read = (engine.reader())
                .raw_points(id, 0, now + 2 * HOUR, usize::MAX - 1)
                .expect("a raw tier");
            let bits = |p: &(Timestamp, f64)| (p.0, p.1.to_bits());
            let points: Vec<_> = read.points.iter().map(bits).collect();
            (read.before.as_ref().map(bits), points)
        };
        assert_eq!(raw(clean, id), raw(other, other_id), "raw points of {key}");
        if clean.series_kind(id) == SeriesKind::Distribution {
            assert_eq!(
                histograms(clean, id),
                histograms(other, other_id),
                "histograms of {key}"
            );
        }
        for (tier, spec) in config.tiers.iter().enumerate() {
            let from = spec.window_start(now);
            let to = now + HOUR + spec.resolution.secs() as i64;
            let read = |engine: &Engine, id| {
                (engine.reader().for_set(set))
                    .read_buckets(id, tier, from, to, spec.resolution)
                    .unwrap()
            };
            let (x, y) = (read(clean, id), read(other, other_id));
            assert_eq!(x.len(), y.len());
            for ((ts, p), (_, q)) in x.iter().zip(&y) {
                assert_eq!(
                    bits(p),
                    bits(q),
                    "{key} tier {} at {ts}: {p:?} vs {q:?}",
                    spec.name
                );
            }
        }
    }
}

/// The histogram of every bucket of series `id` in every tier inside its window (up to the
/// future bound), as its cells hold them.
fn histograms(engine: &Engine, id: SeriesId) -> Vec<Option<crate::histogram::Histogram>> {
    let config = engine.config();
    let slots = config.engine.series_per_chunk;
    let now = engine.now();
    let place = engine.registry().placement(id);
    let (chunk, slot) = place.chunk_and_slot(slots);
    let mut cells = Vec::new();
    for (tier, spec) in config.indexed_set_tiers(place.set()) {
        let resolution = spec.resolution.secs() as i64;
        let from = spec.window_start(now);
        let mut ts = from - from.rem_euclid(resolution);
        while ts < now + HOUR + resolution {
            let p = crate::time::place(tier, spec, ts);
            cells.push(CellAt {
                tier,
                period_start: p.period_start,
                chunk,
                bucket: p.bucket,
                slot,
            });
            ts += resolution;
        }
    }
    (engine
        .rewind()
        .load_distributions(&cells)
        .unwrap()
        .into_iter())
    .map(|(_, histogram)| histogram)
    .collect()
}

/// What a case does: groups of messages, and clock moves followed by two maintenance passes
/// (which compact the closed periods that went quiet).
#[derive(Clone, Debug)]
enum Op {
    Group(Vec<Message>),
    Advance(i64),
}

/// A simulated crash of the store under test in one group: at `step`, optionally with
/// maintenance (compaction) before the reopen, and a second crash halfway through the
/// recovery.
#[derive(Clone, Copy, Debug)]
struct Crash {
    step: Step,
    compact_first: bool,
    in_recovery: bool,
}

fn kind() -> impl Strategy<Value = Option<SeriesKind>> {
    prop_oneof![
        8 => Just(None),
        1 => Just(Some(SeriesKind::Counter)),
        1 => Just(Some(SeriesKind::Gauge)),
        1 => Just(Some(SeriesKind::Distribution)),
    ]
}

fn offset() -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => -10 * MINUTE..2 * MINUTE,
        3 => -30 * HOUR..-HOUR,
        1 => prop_oneof![Just(-3 * DAY), Just(2 * HOUR), -2 * HOUR..-50 * MINUTE],
    ]
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => (-5i32..40).prop_map(f64::from),
        3 => -1e6f64..1e6,
        1 => prop_oneof![Just(f64::NAN), Just(-0.0), Just(f64::INFINITY)],
    ]
}

fn message() -> impl Strategy<Value = Message> {
    prop::collection::vec((0..SERIES, kind(), offset(), value()), 0..24)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec(message(), 1..4).prop_map(Op::Group),
        1 => (5 * MINUTE..4 * HOUR).prop_map(Op::Advance),
    ]
}

fn crash() -> impl Strategy<Value = Option<Crash>> {
    let step = prop_oneof![
        Just(Step::UndoWritten),
        Just(Step::MidApply),
        Just(Step::Applied),
        Just(Step::Flushed),
    ];
    prop_oneof![
        1 => Just(None),
        2 => (step, any::<bool>(), any::<bool>()).prop_map(|(step, compact_first, in_recovery)| {
            Some(Crash {
                step,
                compact_first,
                in_recovery,
            })
        }),
    ]
}

/// Runs `ops` on a store that never crashes and on one that crashes where `crashes` say,
/// reopening and re-delivering from its applied sequence after each crash, and compares the
/// two after every step. Returns how many compacted periods the recoveries made hot again.
fn run(ops: &[(Op, Option<Crash>)], every: u64) -> u64 {
    run_on(tiers(), ops, every)
}

/// [`run`] on engines of the tiers `config`.
fn run_on(config: TiersConfig, ops: &[(Op, Option<Crash>)], every: u64) -> u64 {
    let mut rehydrated = 0;
    let (clean_dir, crash_dir) = (scratch(), scratch());
    let clean_clock = Arc::new(ManualClock::new(NOW));
    let crash_clock = Arc::new(ManualClock::new(NOW));
    let clean = open_every_of(clean_dir.path(), &clean_clock, 1, config.clone());
    let open_every = |dir: &std::path::Path, clock: &Arc<ManualClock>, every: u64| {
        open_every_of(dir, clock, every, config.clone())
    };
    let builder =
        |dir: &std::path::Path, clock: &Arc<ManualClock>| builder_of(dir, clock, config.clone());
    let mut store = open_every(crash_dir.path(), &crash_clock, every);
    let mut delivered: Vec<(u64, SampleBatch)> = Vec::new();
    let mut seq = 0;
    for (op, crash) in ops {
        match op {
            Op::Advance(secs) => {
                // A checkpoint comes at most a second after a group, and the clock moves
                // minutes here: a replay after a crash must not meet a clock hours on.
                store.checkpoint().unwrap();
                for (clock, store) in [(&clean_clock, &clean), (&crash_clock, &store)] {
                    clock.advance(*secs);
                    store.maintain().unwrap();
                    store.maintain().unwrap();
                }
            }
            Op::Group(messages) => {
                let now = clean_clock.now();
                let group: Vec<(u64, SampleBatch)> = messages
                    .iter()
                    .map(|m| {
                        // Gaps: other partitions' messages sit between ours.
                        seq += 1 + m.len() as u64 % 3;
                        (seq, batch(now, m))
                    })
                    .collect();
                let expected = clean.apply(&group).unwrap();
                assert_eq!(expected.applied, group.len());
                if let Some(crash) = crash {
                    let before = store.applied();
                    arm(&store, crash.step);
                    // The flushed step comes in a checkpoint: one after the group, if it
                    // did not make one itself.
                    let err = (store.apply(&group).and_then(|_| store.checkpoint())).unwrap_err();
                    assert!(err.to_string().contains("fault hook"), "{err}");
                    assert!(matches!(store.apply(&group), Err(Error::Poisoned(_))));
                    if crash.compact_first {
                        store.maintain().unwrap();
                        store.maintain().unwrap();
                    }
                    drop(store);
                    if crash.in_recovery {
                        let fault = Fault {
                            step: Step::MidRestore,
                            group: 0,
                            action: FaultAction::Stop,
                        };
                        // No undo record in force (a group naming no series) opens at once.
                        if let Ok(store) = builder(crash_dir.path(), &crash_clock)
                            .apply_fault(fault)
                            .open()
                        {
                            drop(store);
                        }
                    }
                    store = open_every(crash_dir.path(), &crash_clock, every);
                    rehydrated += (store.stats().tiers.iter())
                        .map(|t| t.disk.rehydrations)
                        .sum::<u64>();
                    // Back to the last checkpoint: the groups since are applied again.
                    let durable = store.applied();
                    assert!(durable <= before, "the crashed group is not applied");
                    if every == 1 {
                        assert_eq!(durable, before, "every group was a checkpoint");
                    }
                    // Redelivery from the start: what the checkpoint holds is skipped.
                    let again = store.apply(&delivered).unwrap();
                    let kept = delivered.iter().filter(|(seq, _)| *seq <= durable).count();
                    assert_eq!(again.skipped, kept);
                    assert_eq!(again.applied, delivered.len() - kept);
                }
                let report = store.apply(&group).unwrap();
                assert_eq!(
                    report.samples, expected.samples,
                    "same refusals, same positions"
                );
                assert_eq!(report.applied, group.len());
                assert_eq!(store.applied(), seq);
                delivered.extend(group);
            }
        }
        assert_eq!(store.applied(), clean.applied());
        assert_same(&clean, &store);
    }
    store.close().unwrap();
    // A clean reopen changes nothing.
    let store = open_every(crash_dir.path(), &crash_clock, every);
    assert_same(&clean, &store);
    clean.close().unwrap();
    rehydrated
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn a_crash_at_any_step_then_a_redelivery_equals_applying_once(
        ops in prop::collection::vec((op(), crash()), 1..8),
        every in 1..4u64,
    ) {
        run(&ops, every);
    }

    /// The same with a `[[set]]`: each series' cells are taken, stored and put back in its
    /// own set's tiers, at its place there.
    #[test]
    fn with_tier_sets_a_crash_then_a_redelivery_equals_applying_once(
        ops in prop::collection::vec((op(), crash()), 1..8),
        every in 1..4u64,
    ) {
        run_on(tiers_with_sets(), &ops, every);
    }
}

/// Each series' place without `[[set]]`s: its id in the default set.
fn at_ids(resolved: &[Vec<super::Resolved>]) -> Vec<Vec<SetPlace>> {
    (resolved.iter())
        .map(|series| {
            (series.iter())
                .map(|r| match *r {
                    super::Resolved::Id(id) => SetPlace::of_id(id),
                    _ => SetPlace::of_id(SeriesId(0)),
                })
                .collect()
        })
        .collect()
}

/// The cells a group touches, as `cells_touched` must find them (it skips the arithmetic
/// while samples stay in one bucket): every bucket of every tier of every finite sample of a
/// registered series, in the order met, as computed sample by sample.
fn cells_by_each_sample(
    config: &TiersConfig,
    todo: &[&(u64, SampleBatch)],
    resolved: &[Vec<super::Resolved>],
) -> Vec<crate::storage::cells::CellAt> {
    let slots = config.engine.series_per_chunk;
    let mut cells = Vec::new();
    for ((_, batch), series) in todo.iter().zip(resolved) {
        for sample in &batch.samples {
            let Some(super::Resolved::Id(id)) = series.get(sample.series as usize) else {
                continue;
            };
            if !sample.value.is_finite() {
                continue;
            }
            for (tier, spec) in config.tiers.iter().enumerate() {
                let start = sample.ts - sample.ts.rem_euclid(spec.period.secs() as i64);
                cells.push(crate::storage::cells::CellAt {
                    tier,
                    period_start: start,
                    chunk: id.0 / slots,
                    bucket: ((sample.ts - start) / spec.resolution.secs() as i64) as u32,
                    slot: id.0 % slots,
                });
            }
        }
    }
    cells
}

proptest! {
    #[test]
    fn a_groups_cells_are_every_samples_bucket_in_every_tier(
        messages in prop::collection::vec(
            prop::collection::vec((0..SERIES as u32, -3 * HOUR..3 * HOUR, any::<bool>()), 0..60),
            1..4,
        ),
    ) {
        let config = tiers();
        let groups: Vec<(u64, SampleBatch)> = (messages.iter().enumerate())
            .map(|(seq, samples)| {
                // Each series' samples together, as the format delivers them.
                let mut samples = samples.clone();
                samples.sort_by_key(|&(series, _, _)| series);
                let batch = SampleBatch {
                    series: (0..SERIES)
                        .map(|i| BatchSeries { key: key(i), kind: None })
                        .collect(),
                    samples: (samples.iter())
                        .map(|&(series, offset, finite)| BatchSample {
                            series,
                            ts: NOW + offset,
                            value: if finite { 1.0 } else { f64::NAN },
                        })
                        .collect(),
                    observed: Vec::new(),
                };
                (seq as u64 + 1, batch)
            })
            .collect();
        let todo: Vec<&(u64, SampleBatch)> = groups.iter().collect();
        // Every fifth series invalid; ids spread over several chunks.
        let resolved: Vec<Vec<super::Resolved>> = (0..groups.len())
            .map(|_| {
                (0..SERIES)
                    .map(|i| match i % 5 {
                        4 => super::Resolved::Invalid,
                        _ => super::Resolved::Id(SeriesId(i as u32 * 7)),
                    })
                    .collect()
            })
            .collect();
        // On a new chain, the whole group, then each message again: every cell touched
        // and not yet taken is taken, nothing else is, and no cell more than twice.
        let mut chain = super::ChainCells::new(&config);
        let mut held: std::collections::HashMap<_, usize> = std::collections::HashMap::new();
        let whole = std::iter::once((todo.clone(), resolved.clone()));
        let each = (todo.iter().zip(&resolved)).map(|(m, s)| (vec![*m], vec![s.clone()]));
        for (group, series) in whole.chain(each) {
            let touched = cells_by_each_sample(&config, &group, &series);
            // No series is known empty: every cell is listed to be read.
            let mut known = super::KnownEmpty::new(&config, usize::MAX);
            let taken = super::cells_touched(&config, &group, (&series, &at_ids(&series)), &mut chain, &mut known).cells;
            for cell in &touched {
                prop_assert!(held.contains_key(cell) || taken.contains(cell), "{:?}", cell);
            }
            for cell in &taken {
                prop_assert!(touched.contains(cell), "{:?}", cell);
                let times = held.entry(*cell).or_default();
                *times += 1;
                prop_assert!(*times <= 2, "{:?} taken {} times", cell, times);
            }
        }
    }

    /// Samples in time order per series, as agents send them, never take a cell twice.
    #[test]
    fn samples_in_time_order_take_each_cell_once(
        steps in prop::collection::vec((0..SERIES as u32, 0..400i64), 1..300),
    ) {
        let config = tiers();
        let mut chain = super::ChainCells::new(&config);
        let mut at = [NOW - 3 * HOUR; SERIES];
        let mut taken = std::collections::HashSet::new();
        for (series, step) in steps {
            at[series as usize] += step;
            let batch = SampleBatch {
                series: vec![BatchSeries { key: key(series as usize), kind: None }],
                samples: vec![BatchSample { series: 0, ts: at[series as usize], value: 1.0 }],
                observed: Vec::new(),
            };
            let group = [(1, batch)];
            let todo: Vec<&(u64, SampleBatch)> = group.iter().collect();
            let resolved = vec![vec![super::Resolved::Id(SeriesId(series * 5))]];
            let mut known = super::KnownEmpty::new(&config, usize::MAX);
            for cell in super::cells_touched(&config, &todo, (&resolved, &at_ids(&resolved)), &mut chain, &mut known).cells {
                prop_assert!(taken.insert(cell), "{:?} taken twice", cell);
            }
        }
    }

    /// The chain spares the pre-image of a cell only while it holds it: after its series
    /// noted it, until the chain is forgotten; it spares it while the series stays in it,
    /// and whenever the series' cells so far lie within 64 buckets.
    #[test]
    fn a_chain_spares_only_cells_it_holds(
        notes in prop::collection::vec(
            (0..6u32, 0..3usize, prop_oneof![0..4u32, 0..200u32], any::<bool>()),
            1..300,
        ),
    ) {
        let config = tiers();
        let mut chain = super::ChainCells::new(&config);
        let mut held = std::collections::HashSet::new();
        let mut last = std::collections::HashMap::new();
        let mut spans = std::collections::HashMap::new();
        for (series, tier, bucket, forget) in notes {
            let id = SeriesId(series * 7);
            let resolution = config.tiers[tier].resolution.secs() as i64;
            let taken = chain.note(id, tier, NOW + i64::from(bucket) * resolution);
            if !taken {
                prop_assert!(held.contains(&(id, tier, bucket)), "{:?}", (id, tier, bucket));
            }
            if last.get(&(id, tier)) == Some(&bucket) {
                prop_assert!(!taken, "{:?}", (id, tier, bucket));
            }
            // Within 64 buckets of each other, a series' cells are each taken once.
            let span = spans.entry((id, tier)).or_insert((bucket, bucket));
            *span = (span.0.min(bucket), span.1.max(bucket));
            if span.1 - span.0 <= 64 && held.contains(&(id, tier, bucket)) {
                prop_assert!(!taken, "{:?} taken twice", (id, tier, bucket));
            }
            held.insert((id, tier, bucket));
            last.insert((id, tier), bucket);
            if forget {
                chain.forget();
                held.clear();
                last.clear();
                spans.clear();
            }
        }
    }
}

/// The cases the random ones must cover, spelled out: a late sample into a compacted period
/// whose group crashes after storing it, with compaction again before the reopen; and a
/// crash in every step of one group of counters and gauges.
#[test]
fn late_samples_into_compacted_periods_are_rolled_back_and_reapplied_exactly() {
    let late: Message = vec![
        (0, None, -3 * HOUR, 4.0),
        (1, Some(SeriesKind::Counter), -3 * HOUR, 10.0),
        (1, None, -3 * HOUR + 30, 25.0),
        (2, None, -20 * HOUR, -0.0),
    ];
    let fresh: Message = vec![(0, None, 0, 1.0), (1, None, 5, 30.0), (3, None, 5, 2.5)];
    for step in [
        Step::UndoWritten,
        Step::MidApply,
        Step::Applied,
        Step::Flushed,
    ] {
        let rehydrated = run(
            &[
                (Op::Group(vec![late.clone(), fresh.clone()]), None),
                (Op::Advance(2 * HOUR), None),
                (
                    Op::Group(vec![late.clone(), fresh.clone()]),
                    Some(Crash {
                        step,
                        compact_first: true,
                        in_recovery: false,
                    }),
                ),
                (Op::Advance(HOUR), None),
                (
                    Op::Group(vec![fresh.clone(), late.clone()]),
                    Some(Crash {
                        step,
                        compact_first: true,
                        in_recovery: true,
                    }),
                ),
            ],
            2,
        );
        // Before the undo is written nothing changed, so nothing differs to put back.
        if step != Step::UndoWritten {
            assert!(
                rehydrated > 0,
                "{step:?}: the recovery restored into a compacted period"
            );
        }
    }
}

/// A bucket with data that the chain first took as a gauge's, before a later group of the
/// same chain declares its series a distribution and writes a histogram into it: the
/// roll-back must take that histogram back with the bucket, or the re-apply adds it twice.
/// Groups 1 and 2 are checkpointed (every 2); the chain is groups 3 and 4; the 5m bucket
/// holds every sample, the 1m buckets do not.
#[test]
fn a_gauge_declared_a_distribution_within_a_chain_rolls_its_histogram_back() {
    let gauge = || (Op::Group(vec![vec![(8, None, -MINUTE, 0.0)]]), None);
    for step in [Step::MidApply, Step::Applied, Step::Flushed] {
        run(
            &[
                gauge(),
                gauge(),
                gauge(),
                (
                    Op::Group(vec![vec![(
                        8,
                        Some(SeriesKind::Distribution),
                        -4 * MINUTE,
                        -5.0,
                    )]]),
                    Some(Crash {
                        step,
                        compact_first: false,
                        in_recovery: false,
                    }),
                ),
            ],
            2,
        );
    }
}

/// The regression a kind cache not rolled back with its declaration would be: the first
/// message stores series x as a gauge, the second declares it a counter; after a crash, x
/// must be a gauge again for the first message's re-apply.
#[test]
fn a_declaration_rolled_back_takes_the_series_kind_back_with_it() {
    let dir = scratch();
    let clock = Arc::new(ManualClock::new(NOW));
    let store = open(dir.path(), &clock);
    let group = vec![
        (
            7,
            batch(NOW, &vec![(0, None, -30, 5.0), (0, None, -20, 7.0)]),
        ),
        (
            9,
            batch(
                NOW,
                &vec![
                    (0, Some(SeriesKind::Counter), -10, 10.0),
                    (0, None, 0, 15.0),
                ],
            ),
        ),
    ];
    arm(&store, Step::Flushed);
    store.apply(&group).unwrap_err();
    let x = store.series(&key(0)).unwrap();
    assert_eq!(store.series_kind(x), SeriesKind::Counter);
    drop(store);
    let store = open(dir.path(), &clock);
    assert_eq!(store.applied(), 0);
    assert_eq!(store.series_kind(x), SeriesKind::Gauge);
    assert_eq!(store.rewind().counter_state(x), [0, 0, 0]);
    store.apply(&group).unwrap();
    assert_eq!(store.applied(), 9);
    let minute = store
        .reader()
        .read_buckets(x, 1, NOW - MINUTE, NOW + MINUTE, Span::from_secs(60))
        .unwrap();
    // 5 and 7 as a gauge, then 10 as the counter's baseline and 15 - 10.
    assert_eq!(minute[0].1.count, 2);
    assert_eq!(minute[0].1.total, 12.0);
    assert_eq!(minute[1].1.count, 1);
    assert_eq!(minute[1].1.total, 5.0);
}

#[test]
fn redeliveries_are_skipped_and_disorder_is_refused_before_anything_lands() {
    let dir = scratch();
    let clock = Arc::new(ManualClock::new(NOW));
    let store = open(dir.path(), &clock);
    let one = batch(NOW, &vec![(0, None, 0, 1.0)]);
    let report = store.apply(&[(5, one.clone()), (6, one.clone())]).unwrap();
    assert_eq!((report.applied, report.skipped), (2, 0));
    assert_eq!(report.samples.accepted, 2);
    let report = store
        .apply(&[(5, one.clone()), (6, one.clone()), (8, one.clone())])
        .unwrap();
    assert_eq!((report.applied, report.skipped), (1, 2));
    assert_eq!(store.applied(), 8);
    let err = store
        .apply(&[(10, one.clone()), (9, one.clone())])
        .unwrap_err();
    assert!(matches!(err, Error::InvalidQuery(_)), "{err}");
    assert!(err.to_string().contains("log's order"), "{err}");
    assert_eq!(store.applied(), 8);
    // The apply is not poisoned by a refused group.
    store.apply(&[(9, one.clone())]).unwrap();
    let id = store.series(&key(0)).unwrap();
    let buckets = store
        .reader()
        .read_buckets(id, 0, NOW, NOW + 10, Span::from_secs(10))
        .unwrap();
    assert_eq!(buckets[0].1.count, 4);
    // Empty groups and groups of empty messages.
    assert_eq!(store.apply(&[]).unwrap(), Default::default());
    let report = store.apply(&[(12, SampleBatch::default())]).unwrap();
    assert_eq!((report.applied, report.undo_entries), (1, 0));
    assert_eq!(store.applied(), 12);
    store.close().unwrap();
    assert_eq!(open(dir.path(), &clock).applied(), 12);
}

#[test]
fn a_chain_holding_the_most_samples_is_checkpointed_whatever_the_interval() {
    let dir = scratch();
    let clock = Arc::new(ManualClock::new(NOW));
    let checkpoints = Checkpoints {
        interval: std::time::Duration::MAX,
        groups: u64::MAX,
        samples: 10,
    };
    let store = builder(dir.path(), &clock)
        .checkpoints(checkpoints)
        .open()
        .unwrap();
    let four = batch(NOW, &(0..4).map(|i| (i, None, 0, 1.0)).collect());
    let durable = |store: &Engine| store.apply_log.lock().as_ref().unwrap().state.applied();
    store.apply(&[(1, four.clone())]).unwrap();
    store.apply(&[(2, four.clone())]).unwrap();
    assert_eq!(
        (store.applied(), durable(&store)),
        (2, 0),
        "8 samples: no checkpoint"
    );
    store.apply(&[(3, four.clone())]).unwrap();
    assert_eq!(
        (store.applied(), durable(&store)),
        (3, 3),
        "12 samples: a checkpoint"
    );
    store.apply(&[(4, four.clone())]).unwrap();
    assert_eq!(
        durable(&store),
        3,
        "the count starts again after a checkpoint"
    );
}

/// The checkpoint before a group that makes a distribution of a series the chain holds
/// comes once, for the group that changes its kind; a series declared a gauge stays one
/// whatever later writes declare (as StatsD timers of an earlier build), and costs none.
#[test]
fn only_a_series_becoming_a_distribution_takes_a_checkpoint_first() {
    let dir = scratch();
    let clock = Arc::new(ManualClock::new(NOW));
    let store = open_every(dir.path(), &clock, u64::MAX);
    let durable = |store: &Engine| store.apply_log.lock().as_ref().unwrap().state.applied();
    let dist = Some(SeriesKind::Distribution);
    // Series 0 declared a gauge; series 2 left to the rules (a gauge).
    let first = batch(
        NOW,
        &vec![(0, Some(SeriesKind::Gauge), -60, 1.0), (2, None, -60, 1.0)],
    );
    store.apply(&[(1, first)]).unwrap();
    for seq in 2..5 {
        store
            .apply(&[(seq, batch(NOW, &vec![(0, dist, -50, 2.0)]))])
            .unwrap();
    }
    assert_eq!(
        durable(&store),
        0,
        "a declared gauge stays one: no checkpoint"
    );
    assert_eq!(store.series_kind(SeriesId(0)), SeriesKind::Gauge);
    store
        .apply(&[(5, batch(NOW, &vec![(2, dist, -40, 3.0)]))])
        .unwrap();
    assert_eq!(
        durable(&store),
        4,
        "checkpointed before the group that changed the kind"
    );
    store
        .apply(&[(6, batch(NOW, &vec![(2, dist, -30, 4.0)]))])
        .unwrap();
    assert_eq!(durable(&store), 4, "a distribution already: no checkpoint");
}

#[test]
fn refusals_are_counted_never_errors_nor_panics() {
    let dir = scratch();
    let clock = Arc::new(ManualClock::new(NOW));
    let store = open(dir.path(), &clock);
    let mut message = batch(
        NOW,
        &vec![
            (SERIES - 1, None, 0, 1.0),             // invalid key
            (0, Some(SeriesKind::Gauge), 0, 1.0),   // fixes s0 a gauge
            (0, Some(SeriesKind::Counter), 0, 1.0), // kind_mismatch
            (2, None, -3 * DAY, 1.0),               // too_old
            (2, None, 2 * HOUR, 1.0),               // too_far_in_future
            (2, None, 0, f64::NAN),                 // not_finite
        ],
    );
    message.samples.push(BatchSample {
        series: 99,
        ts: NOW,
        value: 1.0,
    });
    message.series.push(BatchSeries {
        key: "unused".into(),
        kind: None,
    });
    let report = store.apply(&[(1, message)]).unwrap().samples;
    assert_eq!(report.accepted, 1);
    for (reason, n) in [
        (RejectReason::InvalidSeries, 1),
        (RejectReason::KindMismatch, 1),
        (RejectReason::TooOld, 1),
        (RejectReason::TooFarInFuture, 1),
        (RejectReason::NotFinite, 1),
        (RejectReason::UnknownSeries, 1),
    ] {
        assert_eq!(report.rejected(reason), n, "{reason}");
    }
    let mut positions: Vec<(usize, RejectReason)> = report.first_rejections.clone();
    positions.sort();
    assert_eq!(
        positions,
        vec![
            (0, RejectReason::InvalidSeries),
            (2, RejectReason::KindMismatch),
            (3, RejectReason::TooOld),
            (4, RejectReason::TooFarInFuture),
            (5, RejectReason::NotFinite),
            (6, RejectReason::UnknownSeries),
        ]
    );
    assert_eq!(store.applied(), 1);
    // A new series none of whose samples landed is not registered, as on a single node;
    // one that landed a sample is.
    let registry = store.registry();
    assert!(registry.get(&key(2)).is_none(), "s2 registered");
    assert!(registry.get(&key(0)).is_some());
}

#[test]
fn the_applied_sequence_survives_a_torn_slot_and_refuses_two() {
    let dir = scratch();
    let mut state = AppliedFile::open(dir.path()).unwrap();
    assert_eq!(state.applied(), 0);
    for applied in [3, 17, 40] {
        state.record(applied).unwrap();
    }
    drop(state);
    assert_eq!(AppliedFile::open(dir.path()).unwrap().applied(), 40);
    // Write 3 (applied 40) sits in slot 1; tearing it leaves write 2 (applied 17).
    let path = dir.path().join(AppliedFile::FILE_NAME);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4096 + 32 + 3] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(AppliedFile::open(dir.path()).unwrap().applied(), 17);
    bytes[4096 + 1] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let err = AppliedFile::open(dir.path()).err().unwrap().to_string();
    assert!(
        err.contains("apply.state") && err.contains("checksum"),
        "{err}"
    );
    std::fs::write(&path, b"something else entirely, long enough for a header").unwrap();
    let err = AppliedFile::open(dir.path()).err().unwrap().to_string();
    assert!(err.contains("apply.state"), "{err}");
}

#[test]
fn undo_chains_round_trip_and_torn_or_damaged_records_are_told_apart() {
    let dir = scratch();
    let mut undo = UndoFile::open(dir.path()).unwrap();
    assert_eq!(undo.read().unwrap(), vec![]);
    let entries: Vec<Undo> = (0..300u32)
        .map(|i| Undo::Cell {
            at: CellAt {
                tier: 2,
                period_start: NOW - DAY,
                chunk: i,
                bucket: 7,
                slot: 15,
            },
            adds: 0,
            before: Bucket {
                count: 3,
                total: -0.0,
                min: f64::MIN_POSITIVE,
                max: 1e300,
                last: None,
            },
        })
        .chain([Undo::State {
            id: 4,
            before: [1, NOW as u64, 2.5f64.to_bits()],
        }])
        .collect();
    let raw_tails = [
        RawTail { id: 4, last: None },
        RawTail {
            id: u32::MAX,
            last: Some(-1),
        },
        RawTail {
            id: 0,
            last: Some(NOW),
        },
    ];
    // Histograms of every length: none, one within the entry, and ones past it.
    let histograms: Vec<HistogramImage> = [0usize, 1, 3, 40, 400]
        .into_iter()
        .enumerate()
        .map(|(i, values)| {
            let mut histogram = Histogram::default();
            for v in 0..values {
                histogram.record(1.5f64.powi(v as i32 % 60) * if v % 7 == 0 { -1.0 } else { 1.0 });
            }
            HistogramImage {
                at: CellAt {
                    tier: 1,
                    period_start: NOW - DAY,
                    chunk: 3,
                    bucket: i as u32,
                    slot: 9,
                },
                histogram: (values > 0).then_some(histogram),
            }
        })
        .collect();
    let written = undo
        .append(99, 42, &entries, &raw_tails, &histograms)
        .unwrap();
    // What append counts is what it wrote: a header, the control entry, the entries and the
    // zero control entry that ends the chain. The longer histograms take more than one.
    let path = dir.path().join(UndoFile::FILE_NAME);
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(len, 4096 + 64 * (written as u64 + 2));
    assert!(written > entries.len() + raw_tails.len() + histograms.len() + 2);
    let chain = undo.read().unwrap();
    assert_eq!(chain.len(), 1);
    assert_eq!((chain[0].seq, chain[0].layout), (99, 42));
    assert_eq!(chain[0].entries.len(), entries.len());
    for (a, b) in chain[0].entries.iter().zip(&entries) {
        assert_eq!(a.encode(), b.encode());
    }
    assert_eq!(chain[0].raw_tails, raw_tails);
    assert_eq!(chain[0].histograms, histograms);
    // A second group's record follows the first; a reopened file appends after both.
    undo.append(100, 42, &entries[..2], &[], &[]).unwrap();
    let mut reopened = UndoFile::open(dir.path()).unwrap();
    let lens = |undo: &UndoFile| -> Vec<(u64, usize)> {
        (undo.read().unwrap().iter())
            .map(|r| (r.seq, r.entries.len()))
            .collect()
    };
    assert_eq!(lens(&reopened), vec![(99, 301), (100, 2)]);
    reopened.append(103, 42, &entries[..1], &[], &[]).unwrap();
    assert_eq!(lens(&undo), vec![(99, 301), (100, 2), (103, 1)]);
    undo.clear().unwrap();
    assert_eq!(undo.read().unwrap(), vec![]);
    // After a clear, a short record over a longer old one ends the chain.
    undo.append(104, 42, &entries[..1], &[], &[]).unwrap();
    assert_eq!(lens(&UndoFile::open(dir.path()).unwrap()), vec![(104, 1)]);
    undo.clear().unwrap();
    // A whole record followed by an older one, not the zero control entry its append wrote
    // (a failed write over what an earlier chain left), ends the chain there.
    undo.append(105, 42, &entries[..1], &[], &[]).unwrap();
    undo.append(106, 42, &entries[..1], &[], &[]).unwrap();
    let cleared = std::fs::read(&path).unwrap();
    undo.clear().unwrap();
    undo.append(107, 42, &entries[..1], &[], &[]).unwrap();
    let mut lost_end = std::fs::read(&path).unwrap();
    lost_end[4096 + 128..4096 + 192].copy_from_slice(&cleared[4096 + 128..4096 + 192]);
    std::fs::write(&path, &lost_end).unwrap();
    assert_eq!(lens(&UndoFile::open(dir.path()).unwrap()), vec![(107, 1)]);
    undo.clear().unwrap();

    undo.append(101, 42, &entries, &raw_tails, &[]).unwrap();
    undo.append(102, 42, &entries[..3], &[], &[]).unwrap();
    let whole = std::fs::read(&path).unwrap();
    let second = 4096 + 64 * (1 + entries.len() + raw_tails.len());
    // Torn: a flipped byte anywhere in a record, or a control record naming more entries
    // than the file holds, ends the chain before that record.
    for (at, left) in [(second + 64 + 9, 1), (4096 + 64 * 200 + 9, 0)] {
        let mut torn = whole.clone();
        torn[at] ^= 1;
        std::fs::write(&path, &torn).unwrap();
        assert_eq!(undo.read().unwrap().len(), left, "flipped byte {at}");
    }
    let mut short = whole.clone();
    short[4096 + 8..4096 + 16].copy_from_slice(&1_000_000u64.to_le_bytes());
    std::fs::write(&path, &short).unwrap();
    assert_eq!(undo.read().unwrap(), vec![]);
    // A record whose sequence does not follow its predecessor's ends the chain.
    let mut disorder = whole.clone();
    disorder[second..second + 8].copy_from_slice(&100u64.to_le_bytes());
    std::fs::write(&path, &disorder).unwrap();
    assert_eq!(undo.read().unwrap().len(), 1);
    // Whole but holding an entry of no known kind: refused by name.
    std::fs::write(&path, &whole).unwrap();
    let mut undo = UndoFile::open(dir.path()).unwrap();
    undo.clear().unwrap();
    undo.append(
        102,
        42,
        &[Undo::State {
            id: 1,
            before: [0; 3],
        }],
        &[RawTail { id: 1, last: None }],
        &[],
    )
    .unwrap();
    let written = std::fs::read(&path).unwrap();
    // An unknown kind; a raw tail entry with a flag other than 0 or 1; one with a time but
    // no flag; one with a stray word.
    for (entry, word, value) in [(1, 0, 9), (2, 2, 2), (2, 3, 5), (2, 6, 1)] {
        let mut bytes = written.clone();
        let at = 4096 + 64 * entry + 8 * word;
        bytes[at..at + 8].copy_from_slice(&(value as u64).to_le_bytes());
        let crc = {
            let mut h = crc32fast::Hasher::new();
            h.update(&bytes[4096..4096 + 24]);
            h.update(&bytes[4096 + 64..4096 + 192]);
            h.finalize()
        };
        bytes[4096 + 24..4096 + 28].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let err = undo.read().unwrap_err().to_string();
        assert!(
            err.contains("apply.undo") && err.contains(&format!("entry {entry}")),
            "{err}"
        );
    }
}

/// Cells empty before the chain are written in blocks of 16 buckets by 16 slots, 64 bytes a
/// block, and read back as the cell entries they stand for, whether a group's cells come a
/// series at a time or an instant at a time; a cell holding anything but zeros (even a count
/// of 0 beside a `-0.0`) keeps an entry of its own, and a malformed block is refused by name.
#[test]
fn empty_cells_are_written_in_blocks_and_read_back_as_cells() {
    let dir = scratch();
    let mut undo = UndoFile::open(dir.path()).unwrap();
    let cell = |tier, bucket, slot, before| Undo::Cell {
        at: CellAt {
            tier,
            period_start: NOW - DAY,
            chunk: 2,
            bucket,
            slot,
        },
        adds: 0,
        before,
    };
    let full = Bucket {
        count: 2,
        total: 3.0,
        min: 1.0,
        max: 2.0,
        last: None,
    };
    let zero_but_signed = Bucket {
        min: -0.0,
        ..Bucket::EMPTY
    };
    // A series at a time, each sample's tiers in turn: 32 slots × 32 buckets in two tiers,
    // 8 blocks.
    let mut entries = Vec::new();
    for slot in 0..32 {
        for bucket in 0..32 {
            for tier in 0..2 {
                entries.push(cell(tier, bucket, slot, Bucket::EMPTY));
            }
        }
    }
    entries.insert(100, cell(0, 99, 7, full));
    entries.insert(500, cell(1, 99, 7, zero_but_signed));
    // Then an instant at a time in a third tier: 40 slots of 3 buckets, in 3 more blocks.
    for bucket in 0..3 {
        for slot in 0..40 {
            entries.push(cell(2, bucket, slot, Bucket::EMPTY));
        }
    }
    entries.push(Undo::State {
        id: 3,
        before: [0; 3],
    });
    undo.append(7, 42, &entries, &[], &[]).unwrap();
    let path = dir.path().join(UndoFile::FILE_NAME);
    let written = std::fs::read(&path).unwrap();
    // After the header, the control entry, 2 cells, the state and 11 blocks, then the zero
    // entry that ends the chain.
    assert_eq!(written.len(), 4096 + 64 * (1 + 2 + 11 + 1) + 64);
    let chain = undo.read().unwrap();
    let sorted = |entries: &[Undo]| {
        let mut words: Vec<_> = entries.iter().map(Undo::encode).collect();
        words.sort_unstable();
        words
    };
    assert_eq!(sorted(&chain[0].entries), sorted(&entries));
    // Entry 4, the first block (blocks follow the other entries): one whose first slot or
    // bucket is not a multiple of 16, that marks no cell, or whose kind word has stray bits,
    // is refused by name.
    let block = 4096 + 64 * 4;
    let chunk_and = |bucket: u64| 2 << 32 | bucket;
    for (word, value) in [(3, 5u64), (2, chunk_and(7)), (4, 0), (0, 4 | 1 << 40)] {
        let mut bytes = written.clone();
        let at = block + 8 * word;
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        if word == 4 {
            bytes[at + 8..at + 32].fill(0);
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&bytes[4096..4096 + 24]);
        h.update(&bytes[4096 + 64..4096 + 64 * 15]);
        bytes[4096 + 24..4096 + 28].copy_from_slice(&h.finalize().to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let err = undo.read().unwrap_err().to_string();
        assert!(
            err.contains("apply.undo") && err.contains("entry 4"),
            "{err}"
        );
    }
}

#[test]
fn an_undo_record_of_another_tiers_layout_is_refused_by_name() {
    let dir = scratch();
    let clock = Arc::new(ManualClock::new(NOW));
    let store = open(dir.path(), &clock);
    arm(&store, Step::Applied);
    store
        .apply(&[(1, batch(NOW, &vec![(0, None, 0, 1.0)]))])
        .unwrap_err();
    drop(store);
    let mut other = tiers();
    other.tiers[0].retention = Span::from_secs(2 * HOUR as u64);
    other.tiers.truncate(2);
    let err = Engine::builder(dir.path())
        .tiers(other)
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("apply.undo") && err.contains("tiers"), "{err}");
    // With the tiers it was written under, it rolls back.
    let store = open(dir.path(), &clock);
    assert_eq!(store.applied(), 0);
    let id = store.series(&key(0)).unwrap();
    let buckets = store
        .reader()
        .read_buckets(id, 0, NOW, NOW + 10, Span::from_secs(10))
        .unwrap();
    assert_eq!(buckets[0].1.count, 0, "rolled back");
}

/// Maintenance compacting the closed periods that late samples keep writing into (and the
/// writes making them hot again) on another thread while groups are applied, crashed and
/// rolled back: whatever form a period is in when pre-images are read, stored or restored,
/// the result equals a store that applied the same groups alone. (A helper thread runs the
/// passes back to back: the engine's own maintenance thread runs at nice 19 and may not get
/// a core at all on a loaded machine.)
#[test]
fn maintenance_racing_the_applies_changes_nothing() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (clean_dir, busy_dir) = (scratch(), scratch());
    let clock = Arc::new(ManualClock::new(NOW));
    let clean = open(clean_dir.path(), &clock);
    // Every group the busy store was given, for the redelivery after a crash.
    let mut delivered: Vec<(u64, SampleBatch)> = Vec::new();
    let compacted = AtomicUsize::new(0);
    // The crash ending each life but the last.
    let crashes = [Step::MidApply, Step::Applied, Step::Flushed];
    let mut seq = 0;
    let mut round = 0usize;
    let mut crashed: Option<Vec<(u64, SampleBatch)>> = None;
    // Four lives of the store, each ended by a crash but the last.
    for life in 0..4 {
        let busy = open_every(busy_dir.path(), &clock, 2);
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let report = busy.maintain().unwrap();
                    compacted.fetch_add(report.compacted, Ordering::Relaxed);
                }
            });
            for i in 0..6 {
                round += 1;
                // Late samples into periods that closed hours ago (compacted as soon as
                // they are quiet for a pass), and a sample of now.
                let message: Message = (0..SERIES - 1)
                    .map(|s| {
                        let hours = 2 + (round + s) as i64 % 20;
                        let at = -hours * HOUR + (round * 7 + s) as i64;
                        (s, None, at, (round * s) as f64 / 3.0)
                    })
                    .chain([(0, None, 0, round as f64)])
                    .collect();
                let group: Vec<(u64, SampleBatch)> = (0..2)
                    .map(|_| {
                        seq += 1;
                        (seq, batch(NOW, &message))
                    })
                    .collect();
                clean.apply(&group).unwrap();
                if let (5, Some(&step)) = (i, crashes.get(life)) {
                    arm(&busy, step);
                    (busy.apply(&group).and_then(|_| busy.checkpoint())).unwrap_err();
                    crashed = Some(group);
                    // Passes over the half-applied state before the "crash".
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    break;
                }
                busy.apply(&group).unwrap();
                delivered.extend(group);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            stop.store(true, Ordering::Relaxed);
        });
        if life == 3 {
            assert_same(&clean, &busy);
        }
        drop(busy);
        if let Some(group) = crashed.take() {
            // Reopened (the rollback to the last checkpoint) and the groups since
            // delivered again.
            let busy = open_every(busy_dir.path(), &clock, 2);
            assert!(busy.applied() < clean.applied());
            busy.apply(&delivered).unwrap();
            busy.apply(&group).unwrap();
            delivered.extend(group);
            assert_eq!(busy.applied(), clean.applied());
            assert_same(&clean, &busy);
        }
    }
    // Not an assertion on timing: the number only tells whether the race happened this run.
    eprintln!(
        "compactions racing the applies: {}",
        compacted.load(Ordering::Relaxed)
    );
}

/// The power loss the raw tail entries are for: a group appended into a series' last segment
/// and into a new one; the new segment reached the disk, the older page did not (its `LEN`
/// is back where the group found it). The roll-back gives the new segment up, so the
/// re-apply appends every point again: none is refused as older than the lost ones' successors.
#[test]
fn a_raw_group_whose_older_page_was_lost_is_cut_back_and_applied_whole() {
    let (clean_dir, crash_dir) = (scratch(), scratch());
    let clock = Arc::new(ManualClock::new(NOW));
    let clean = open(clean_dir.path(), &clock);
    let mut store = open(crash_dir.path(), &clock);
    // 300 distinct values 10 s apart in the hour before NOW: one raw period.
    let points = |range: std::ops::Range<i64>| -> Message {
        range.map(|i| (0, None, -3000 + i * 10, i as f64)).collect()
    };
    let first = vec![(1, batch(NOW, &points(0..200)))];
    let second = vec![(2, batch(NOW, &points(200..300)))];
    for group in [&first, &second] {
        clean.apply(group).unwrap();
    }
    store.apply(&first).unwrap();
    arm(&store, Step::Applied);
    assert!(store.apply(&second).is_err());
    drop(store);
    // The first segment holds 252 points now: 200 of the first group, 52 of the second;
    // the second segment the other 48. Lose the first segment's page: back to 200 points,
    // no next segment.
    let spec = tiers().raw.unwrap();
    let path = crash_dir.path().join("raw").join(&spec.name).join(
        crate::storage::raw::segment::file_name(
            crate::time::align_down(NOW - 3000, spec.period),
            0,
        ),
    );
    let file = crate::storage::raw::RawFile::open(&path, spec.period, true).unwrap();
    assert_eq!(file.segment(0).len(), 252);
    assert_eq!(file.segment(1).len(), 48);
    file.segment(0).truncate(200);
    drop(file);
    store = open(crash_dir.path(), &clock);
    store.apply(&second).unwrap();
    let read = |engine: &Engine| {
        let id = engine.registry().get("s0").unwrap();
        (engine.reader().raw_points(id, 0, NOW, 1_000))
            .unwrap()
            .points
    };
    assert_eq!(read(&store).len(), 300);
    assert_eq!(read(&store), read(&clean));
    assert_same(&clean, &store);
}

/// A deletion in the log is applied once: a redelivery is skipped, one applied again after a
/// reopen finds nothing more, and the batch after it registers the name anew.
#[test]
fn a_deletion_is_applied_once_in_the_logs_order() {
    use crate::registry::Selector;
    let dir = scratch();
    let clock = Arc::new(ManualClock::new(NOW));
    let store = open(dir.path(), &clock);
    let message: Message = vec![(0, None, -120, 1.0), (2, None, -120, 2.0)];
    let selector = Selector::parse("s0").unwrap();
    store.apply(&[(1, batch(NOW, &message))]).unwrap();
    assert_eq!(store.apply_delete(2, &selector).unwrap(), 1);
    assert_eq!(store.applied(), 2);
    let registry = store.registry();
    assert_eq!(registry.lookup("s0").unwrap(), None);
    assert_eq!(registry.lookup("s2").unwrap(), Some(SeriesId(1)));
    assert_eq!(store.apply_delete(2, &selector).unwrap(), 0, "a redelivery");
    store.close().unwrap();

    let store = open(dir.path(), &clock);
    assert_eq!(store.applied(), 2);
    assert_eq!(store.apply_delete(2, &selector).unwrap(), 0);
    // The name after the deletion: a new series with the new sample only.
    let again: Message = vec![(0, None, -60, 7.0)];
    store.apply(&[(3, batch(NOW, &again))]).unwrap();
    let id = store.registry().lookup("s0").unwrap().unwrap();
    assert_eq!(id, SeriesId(2), "the hole's id is not reused");
    let report = store.stats();
    assert_eq!(report.series, 2);
}

/// Bucketed observations in a log land as a node's native histograms do: the series is a
/// distribution, its bucket counts them, and its histogram holds them.
#[test]
fn bucketed_observations_land_in_their_distribution() {
    let dir = scratch();
    let clock = Arc::new(ManualClock::new(NOW));
    let store = open(dir.path(), &clock);
    let message: Message = vec![(3, Some(SeriesKind::Distribution), -61, 4.0)];
    let report = store.apply(&[(1, batch(NOW, &message))]).unwrap();
    assert_eq!(report.samples.accepted, 1, "{report:?}");
    let id = store.registry().get(key(3).as_str()).unwrap();
    assert_eq!(store.series_kind(id), SeriesKind::Distribution);
    let points = (store.reader())
        .distribution(id, 0, NOW - 3_600, NOW, Span::from_secs(60))
        .unwrap();
    let landed: Vec<_> = points.iter().filter(|p| p.bucket.count > 0).collect();
    assert_eq!(landed.len(), 1, "{points:?}");
    assert!(landed[0].is_complete(), "{landed:?}");
    assert_eq!((landed[0].bucket.count, landed[0].bucket.total), (2, 12.0));
}
