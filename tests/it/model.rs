//! Random workloads against a naive in-memory model.
//!
//! Samples (some refused: not finite, too far in the future, too old for every tier) go in
//! through `record_batch`, through `record` + `sync`, and through `record` left pending across
//! later batches. The model decides refusals and tier membership from the documented rules
//! alone (`window_start = align_down(now - retention, period)`, a sample lands in every tier
//! whose window start is at or before it) and keeps `(series, tier, bucket start) -> rollup`
//! in a `BTreeMap`. Every series is then read in every tier and display, over the whole window
//! and over random unaligned sub-ranges, with steps of 1, 2, 6 and 7 resolutions (7 does not
//! divide the periods, so points straddle period files), and compared point by point; the
//! same again after closing and reopening the directory. Small tiers (10s/1m/5m with 10m/1h/1d
//! periods) and 16-slot chunks keep the files small and make workloads cross periods and
//! chunk files created mid-period.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use tierdb::{
    BatchReport, Display, Engine, EngineSettings, Error, ManualClock, Query, RejectReason, Sample,
    Span, TierSpec, TiersConfig, Timestamp,
};

use crate::common::{open, scratch_dir, NOW as NOON};

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const FUTURE_BOUND: i64 = HOUR;
const MAX_SERIES: usize = 40;
/// Point widths tried, in resolutions of the tier read.
const STEP_MULTIPLES: [i64; 4] = [1, 2, 6, 7];
/// Relative error allowed on sums (total, avg, per_sec), against the sum of magnitudes so that
/// cancelling samples do not make the bound meaningless.
const SUM_TOLERANCE: f64 = 1e-9;

/// Tiers 10s/1m/5m, periods 10m/1h/1d, retentions 1h/6h/2d, 16 series per chunk.
fn config() -> TiersConfig {
    let tier = |name: &str, resolution: i64, period: i64, retention: i64| TierSpec {
        name: name.to_owned(),
        resolution: Span::from_secs(resolution as u64),
        period: Span::from_secs(period as u64),
        retention: Span::from_secs(retention as u64),
        create_ahead: 1,
        earlier_periods: Vec::new(),
    };
    let config = TiersConfig {
        engine: EngineSettings {
            future_bound: Span::from_secs(FUTURE_BOUND as u64),
            series_per_chunk: 16,
            max_points: 1_500,
        },
        counters: Default::default(),
        raw: None,
        tiers: vec![
            tier("10s", 10, 10 * MINUTE, HOUR),
            tier("1m", MINUTE, HOUR, 6 * HOUR),
            tier("5m", 5 * MINUTE, DAY, 2 * DAY),
        ],
        sets: Vec::new(),
    };
    config.validate().expect("valid test tiers");
    config
}

/// Series `i` as sent: plain, tagged, or tagged with keys out of canonical order.
fn series_name(i: usize) -> String {
    match i % 3 {
        0 => format!("m{i}"),
        1 => format!("m{i}{{host=a}}"),
        _ => format!("m{i}{{host=b,dc=x}}"),
    }
}

/// Series `i` as the engine names it back (tags sorted by key).
fn canonical_name(i: usize) -> String {
    match i % 3 {
        0 => format!("m{i}"),
        1 => format!("m{i}{{host=a}}"),
        _ => format!("m{i}{{dc=x,host=b}}"),
    }
}

fn align_down(ts: Timestamp, step: i64) -> Timestamp {
    ts - ts.rem_euclid(step)
}

fn secs(span: Span) -> i64 {
    span.secs() as i64
}

/// When a sample is stamped, resolved against the case's now.
#[derive(Clone, Copy, Debug)]
enum When {
    /// `now + offset`.
    Rel(i64),
    /// `edges[index] + delta`, see [`Model::edges`].
    Edge(usize, i64),
}

/// How one slice of the workload is sent.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// One `record_batch`.
    Batch,
    /// `record` each, then `sync`.
    RecordSync,
    /// `record` each, left pending until a later sync.
    Record,
    /// One `record` of an unparsable series name (takes no sample).
    Invalid,
}

/// A random sub-range read: tier, position of `from` in the tier's window (0..=u16::MAX),
/// length in buckets, jitter seconds, index into [`STEP_MULTIPLES`].
type SubRange = (usize, u16, i64, i64, usize);

#[derive(Clone, Debug)]
struct Input {
    series: usize,
    now_offset: i64,
    samples: Vec<(usize, When, f64)>,
    plan: Vec<(Via, usize)>,
    sub_ranges: Vec<SubRange>,
}

const EDGES: usize = 8;

fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        3 => (-3 * DAY..=2 * HOUR).prop_map(When::Rel),
        2 => (-8 * HOUR..=2 * HOUR).prop_map(When::Rel),
        3 => (-15 * MINUTE..=15 * MINUTE).prop_map(When::Rel),
        1 => (-6i64..6).prop_map(|k| When::Rel(k * 37)),
        2 => (0..EDGES, -11i64..=11).prop_map(|(edge, delta)| When::Edge(edge, delta)),
    ]
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => (-5i32..=20).prop_map(f64::from),
        3 => -1e6f64..1e6,
        1 => -1e-3f64..1e-3,
        1 => prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
        ],
    ]
}

fn via() -> impl Strategy<Value = Via> {
    prop_oneof![
        4 => Just(Via::Batch),
        2 => Just(Via::RecordSync),
        1 => Just(Via::Record),
        1 => Just(Via::Invalid),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    (
        1..=MAX_SERIES,
        prop_oneof![Just(1234i64), Just(0i64), 0..DAY],
        prop::collection::vec((0..MAX_SERIES, when(), value()), 1..400),
        prop::collection::vec((via(), 0usize..60), 0..30),
        prop::collection::vec(
            (
                0..3usize,
                any::<u16>(),
                1i64..150,
                0i64..300,
                0..STEP_MULTIPLES.len(),
            ),
            1..6,
        ),
    )
        .prop_map(|(series, now_offset, samples, plan, sub_ranges)| Input {
            series,
            now_offset,
            samples,
            plan,
            sub_ranges,
        })
}

/// One bucket (or merged step) of the model.
#[derive(Clone, Copy, Debug)]
struct Agg {
    count: u64,
    total: f64,
    /// Sum of magnitudes: the scale of the rounding error a different addition order makes.
    magnitude: f64,
    min: f64,
    max: f64,
}

impl Agg {
    fn of(value: f64) -> Agg {
        Agg {
            count: 1,
            total: value,
            magnitude: value.abs(),
            min: value,
            max: value,
        }
    }

    fn fold(self, other: Agg) -> Agg {
        Agg {
            count: self.count + other.count,
            total: self.total + other.total,
            magnitude: self.magnitude + other.magnitude,
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }

    /// The value shown and the error allowed on it.
    fn shown(&self, display: Display, step: i64) -> (f64, f64) {
        let tolerance = SUM_TOLERANCE * self.magnitude;
        match display {
            Display::Avg => (
                self.total / self.count as f64,
                tolerance / self.count as f64,
            ),
            Display::PerSec => (self.total / step as f64, tolerance / step as f64),
            Display::Total => (self.total, tolerance),
            Display::Max => (self.max, 0.0),
            Display::Min => (self.min, 0.0),
            Display::Count => (self.count as f64, 0.0),
        }
    }
}

/// Tier parameters in seconds.
#[derive(Clone, Copy, Debug)]
struct Tier {
    resolution: i64,
    period: i64,
    /// First second the tier holds at the model's now.
    window: Timestamp,
}

/// What the engine should hold, computed naively from the documented rules.
struct Model {
    now: Timestamp,
    tiers: Vec<Tier>,
    buckets: BTreeMap<(usize, usize, Timestamp), Agg>,
    /// Accepted by `record`, not yet synced: `(series, ts, value)`.
    pending: Vec<(usize, Timestamp, f64)>,
    registered: BTreeSet<usize>,
    accepted: u64,
    rejected: [u64; RejectReason::ALL.len()],
}

fn reason_index(reason: RejectReason) -> usize {
    RejectReason::ALL
        .iter()
        .position(|&r| r == reason)
        .expect("a listed reason")
}

impl Model {
    fn new(config: &TiersConfig, now: Timestamp) -> Model {
        let tiers = config
            .tiers
            .iter()
            .map(|spec| Tier {
                resolution: secs(spec.resolution),
                period: secs(spec.period),
                window: align_down(now - secs(spec.retention), secs(spec.period)),
            })
            .collect();
        Model {
            now,
            tiers,
            buckets: BTreeMap::new(),
            pending: Vec::new(),
            registered: BTreeSet::new(),
            accepted: 0,
            rejected: [0; RejectReason::ALL.len()],
        }
    }

    /// Instants where behaviour changes: each window start, the future bound, now, and the
    /// current period start of each tier (`EDGES` of them).
    fn edges(&self) -> Vec<Timestamp> {
        let mut edges: Vec<Timestamp> = self.tiers.iter().map(|t| t.window).collect();
        edges.push(self.now + FUTURE_BOUND);
        edges.push(self.now);
        edges.extend(self.tiers.iter().map(|t| align_down(self.now, t.period)));
        assert_eq!(edges.len(), EDGES);
        edges
    }

    fn resolve(&self, when: When, edges: &[Timestamp]) -> Timestamp {
        match when {
            When::Rel(offset) => self.now + offset,
            When::Edge(index, delta) => edges[index] + delta,
        }
    }

    /// The documented checks, in the documented order.
    fn check(&self, ts: Timestamp, value: f64) -> Result<(), RejectReason> {
        let oldest = self.tiers.iter().map(|t| t.window).min().expect("tiers");
        if !value.is_finite() {
            Err(RejectReason::NotFinite)
        } else if ts > self.now + FUTURE_BOUND {
            Err(RejectReason::TooFarInFuture)
        } else if ts < oldest {
            Err(RejectReason::TooOld)
        } else {
            Ok(())
        }
    }

    fn reject(&mut self, reason: RejectReason) {
        self.rejected[reason_index(reason)] += 1;
    }

    /// Folds an accepted sample into every tier whose window holds it.
    fn apply(&mut self, series: usize, ts: Timestamp, value: f64) {
        self.accepted += 1;
        for (t, tier) in self.tiers.iter().enumerate() {
            if ts < tier.window {
                continue;
            }
            let key = (series, t, align_down(ts, tier.resolution));
            let agg = match self.buckets.get(&key) {
                Some(agg) => agg.fold(Agg::of(value)),
                None => Agg::of(value),
            };
            self.buckets.insert(key, agg);
        }
    }

    /// A batch: the report it should give, applying what it accepts.
    fn batch(&mut self, samples: &[(usize, Timestamp, f64)]) -> BatchReport {
        let mut report = BatchReport::default();
        for (position, &(series, ts, value)) in samples.iter().enumerate() {
            match self.check(ts, value) {
                Ok(()) => {
                    self.apply(series, ts, value);
                    report.accepted += 1;
                }
                Err(reason) => {
                    self.reject(reason);
                    report.rejected[reason_index(reason)] += 1;
                    if report.first_rejections.len() < BatchReport::FIRST_REJECTIONS {
                        report.first_rejections.push((position, reason));
                    }
                }
            }
        }
        report
    }

    /// A sync: the pending records land, all accepted.
    fn sync(&mut self) -> BatchReport {
        let pending = std::mem::take(&mut self.pending);
        for &(series, ts, value) in &pending {
            self.apply(series, ts, value);
        }
        BatchReport {
            accepted: pending.len() as u64,
            ..BatchReport::default()
        }
    }

    /// One point per `step`-aligned start in `[from, to)`, each folding the buckets inside.
    fn points(
        &self,
        series: usize,
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        step: i64,
    ) -> Vec<(Timestamp, Option<Agg>)> {
        let mut points = Vec::new();
        let mut start = align_down(from + step - 1, step);
        while start < to {
            let merged = self
                .buckets
                .range((series, tier, start)..(series, tier, start + step))
                .map(|(_, agg)| *agg)
                .reduce(Agg::fold);
            points.push((start, merged));
            start += step;
        }
        points
    }
}

/// A read: tier, from, to, step in seconds.
type Range = (usize, Timestamp, Timestamp, i64);

/// The whole window of every tier (from a step before it to past the future bound), at every
/// step multiple.
fn full_ranges(model: &Model) -> Vec<Range> {
    let mut ranges = Vec::new();
    for (t, tier) in model.tiers.iter().enumerate() {
        for multiple in STEP_MULTIPLES {
            let step = multiple * tier.resolution;
            ranges.push((
                t,
                tier.window - step - 7,
                model.now + FUTURE_BOUND + tier.resolution + 3,
                step,
            ));
        }
    }
    ranges
}

/// The random sub-ranges, `from` anywhere from a little before the tier's window to the
/// future bound, neither end aligned in general.
fn sub_ranges(model: &Model, picks: &[SubRange]) -> Vec<Range> {
    picks
        .iter()
        .map(|&(t, position, buckets, jitter, multiple)| {
            let tier = model.tiers[t];
            let lo = tier.window - 3 * tier.resolution;
            let hi = model.now + FUTURE_BOUND;
            let from = lo + (hi - lo) * i64::from(position) / i64::from(u16::MAX) + jitter;
            let to = from + buckets * tier.resolution + jitter % tier.resolution + 1;
            (t, from, to, STEP_MULTIPLES[multiple] * tier.resolution)
        })
        .collect()
}

/// Reads every series over every range in every display and compares with the model.
fn compare(
    engine: &Engine,
    model: &Model,
    series: usize,
    ranges: &[Range],
) -> Result<(), TestCaseError> {
    let config = engine.config();
    for s in 0..series {
        let name = series_name(s);
        if !model.registered.contains(&s) {
            let (t, from, to, _) = ranges[0];
            let answer =
                engine.query(&Query::new(name.as_str(), from, to).tier(&config.tiers[t].name));
            prop_assert!(
                matches!(answer, Err(Error::UnknownSeries(_))),
                "series {} was never sent, yet the query gave {:?}",
                name,
                answer
            );
            continue;
        }
        for &(t, from, to, step) in ranges {
            let spec = &config.tiers[t];
            let expected = model.points(s, t, from, to, step);
            let expected_ts: Vec<Timestamp> = expected.iter().map(|(ts, _)| *ts).collect();
            for display in Display::ALL {
                let mut query = Query::new(name.as_str(), from, to)
                    .tier(&spec.name)
                    .display(display);
                if step != secs(spec.resolution) {
                    query = query.step(Span::from_secs(step as u64));
                }
                let answer = engine
                    .query(&query)
                    .map_err(|e| TestCaseError::fail(format!("{query:?}: {e}")))?;
                let context = format!(
                    "series {name} tier {} [{from}, {to}) step {step} display {}",
                    spec.name,
                    display.as_str()
                );
                prop_assert_eq!(&answer.series, &canonical_name(s), "{}", context);
                prop_assert_eq!(&answer.tier, &spec.name, "{}", context);
                prop_assert_eq!(answer.display, display, "{}", context);
                prop_assert_eq!(answer.step, Span::from_secs(step as u64), "{}", context);
                let answer_ts: Vec<Timestamp> = answer.points.iter().map(|(ts, _)| *ts).collect();
                prop_assert_eq!(&answer_ts, &expected_ts, "timestamps: {}", context);
                for (&(ts, got), (_, want)) in answer.points.iter().zip(&expected) {
                    match (got, want) {
                        (None, None) => {}
                        (Some(got), Some(agg)) => {
                            let (want, tolerance) = agg.shown(display, step);
                            prop_assert!(
                                got == want || (got - want).abs() <= tolerance,
                                "{}: at {} the engine says {} and the model {} ({:?})",
                                context,
                                ts,
                                got,
                                want,
                                agg
                            );
                        }
                        _ => prop_assert!(
                            false,
                            "{}: at {} the engine says {:?} and the model {:?}",
                            context,
                            ts,
                            got,
                            want
                        ),
                    }
                }
            }
        }
    }
    Ok(())
}

/// Stats of an engine opened at the model's now that has taken the whole workload (`fresh`:
/// reopened, so its counters start from zero).
fn compare_stats(engine: &Engine, model: &Model, fresh: bool) -> Result<(), TestCaseError> {
    let stats = engine.stats();
    prop_assert_eq!(stats.now, model.now);
    prop_assert_eq!(stats.series, model.registered.len());
    let windows: Vec<Timestamp> = stats.tiers.iter().map(|t| t.window_start).collect();
    let model_windows: Vec<Timestamp> = model.tiers.iter().map(|t| t.window).collect();
    prop_assert_eq!(windows, model_windows);
    let (accepted, rejected) = if fresh {
        (0, [0; RejectReason::ALL.len()])
    } else {
        (model.accepted, model.rejected)
    };
    prop_assert_eq!(stats.accepted, accepted);
    let expected: Vec<(&str, u64)> = RejectReason::ALL
        .iter()
        .map(|r| (r.as_str(), rejected[reason_index(*r)]))
        .collect();
    prop_assert_eq!(stats.rejected, expected);
    Ok(())
}

fn run(input: &Input) -> Result<(), TestCaseError> {
    let config = config();
    let now = NOON + input.now_offset;
    let clock = Arc::new(ManualClock::new(now));
    let dir = scratch_dir();
    let engine = open(dir.path(), &clock, config.clone());
    let mut model = Model::new(&config, now);
    let edges = model.edges();
    let samples: Vec<(usize, Timestamp, f64)> = input
        .samples
        .iter()
        .map(|&(s, when, value)| (s % input.series, model.resolve(when, &edges), value))
        .collect();

    let id = |model: &mut Model, s: usize| {
        model.registered.insert(s);
        engine.series(&series_name(s)).expect("register series")
    };
    let mut rest = &samples[..];
    let mut plan = input.plan.clone();
    plan.push((Via::Batch, usize::MAX)); // whatever the plan left over
    for (via, len) in plan {
        let (part, tail) = match via {
            Via::Invalid => rest.split_at(0),
            _ => rest.split_at(len.min(rest.len())),
        };
        rest = tail;
        match via {
            Via::Batch => {
                let batch: Vec<Sample> = part
                    .iter()
                    .map(|&(s, ts, value)| Sample::new(id(&mut model, s), ts, value))
                    .collect();
                let report = engine.record_batch(&batch).expect("record_batch");
                prop_assert_eq!(report, model.batch(part), "batch {:?}", part);
            }
            Via::RecordSync | Via::Record => {
                for &(s, ts, value) in part {
                    let got = engine.record(&series_name(s), ts, value);
                    match model.check(ts, value) {
                        Ok(()) => {
                            // Only a sample within the bounds registers its series (#31).
                            model.registered.insert(s);
                            prop_assert!(got.is_ok(), "record {} {} {}: {:?}", s, ts, value, got);
                            model.pending.push((s, ts, value));
                        }
                        Err(reason) => {
                            prop_assert!(
                                matches!(got, Err(Error::Rejected(r)) if r == reason),
                                "record {} {} {}: expected {:?}, got {:?}",
                                s,
                                ts,
                                value,
                                reason,
                                got
                            );
                            model.reject(reason);
                        }
                    }
                }
                if matches!(via, Via::RecordSync) {
                    let report = engine.sync().expect("sync");
                    prop_assert_eq!(report, model.sync());
                }
            }
            Via::Invalid => {
                let got = engine.record("bad{series", now, 1.0);
                prop_assert!(matches!(got, Err(Error::InvalidSeries { .. })), "{:?}", got);
                model.reject(RejectReason::InvalidSeries);
            }
        }
    }
    let report = engine.sync().expect("final sync");
    prop_assert_eq!(report, model.sync());

    let mut ranges = full_ranges(&model);
    ranges.extend(sub_ranges(&model, &input.sub_ranges));
    compare_stats(&engine, &model, false)?;
    compare(&engine, &model, input.series, &ranges)?;

    engine.close().expect("close");
    let engine = open(dir.path(), &clock, config);
    compare_stats(&engine, &model, true)?;
    compare(&engine, &model, input.series, &ranges)?;
    engine.close().expect("close after reopen");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn random_workloads_match_a_naive_model(input in input()) {
        run(&input)?;
    }
}
