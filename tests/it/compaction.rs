//! Closed periods are compacted, late samples make them hot again, expired ones are dropped,
//! and none of it changes an answer: a random run of months of a manual clock (writes now and
//! days late, maintenance passes, reopens) is compared bucket for bucket, bit for bit, with a
//! naive model that adds every accepted sample to a map in arrival order. The random run keeps
//! the background maintenance thread on, whose first pass runs at every open beside the
//! test's own passes (a regression: two passes at once compacted one file twice and one of
//! them failed on the other's temporary file; passes now run one at a time).

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use tierdb::{
    Bucket, Clock, Engine, EngineSettings, ManualClock, Sample, Span, TiersConfig, Timestamp,
};

use crate::common::{open_driven as open, scratch_dir, tier, NOW};

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

/// Tiers 1m/1h/1d with periods 1h/6h/7d and retentions 6h/3d/60d, 16 series per chunk:
/// small files, and a few weeks cross dozens of period boundaries in every tier.
pub(crate) fn config() -> TiersConfig {
    let config = TiersConfig {
        engine: EngineSettings {
            future_bound: Span::from_secs(HOUR as u64),
            series_per_chunk: 16,
            max_points: 1_500,
        },
        counters: Default::default(),
        raw: None,
        tiers: vec![
            tier("1m", MINUTE as u64, HOUR as u64, 6 * HOUR as u64),
            tier("1h", HOUR as u64, 6 * HOUR as u64, 3 * DAY as u64),
            tier("1d", DAY as u64, 7 * DAY as u64, 60 * DAY as u64),
        ],
        sets: Vec::new(),
    };
    config.validate().expect("valid test tiers");
    config
}

#[derive(Clone, Debug)]
enum Op {
    /// Moves the clock forward.
    Advance(i64),
    /// One batch: (series, seconds before now, value).
    Write(Vec<(u32, i64, f64)>),
    /// Two maintenance passes: a quiet closed period is compacted on the second.
    Maintain,
    /// Close and open again.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let value = prop_oneof![
        (-5i32..=20).prop_map(f64::from),
        -1e6f64..1e6,
        Just(-0.0),
        (0u32..10_000).prop_map(|v| f64::from(v) / 100.0),
    ];
    let lateness = prop_oneof![
        3 => 0i64..10 * MINUTE,
        2 => 0i64..12 * HOUR,
        2 => 0i64..4 * DAY,
        1 => 0i64..70 * DAY,
    ];
    prop_oneof![
        3 => prop_oneof![0i64..2 * HOUR, 0i64..3 * DAY].prop_map(Op::Advance),
        5 => prop::collection::vec((0u32..40, lateness, value), 1..60).prop_map(Op::Write),
        3 => Just(Op::Maintain),
        1 => Just(Op::Reopen),
    ]
}

/// What the engine should hold: per (series, tier, bucket start), every accepted sample
/// added in arrival order, with the window rule of the docs.
struct Model {
    config: TiersConfig,
    buckets: BTreeMap<(u32, usize, Timestamp), Bucket>,
}

impl Model {
    fn window(&self, tier: usize, now: Timestamp) -> Timestamp {
        let spec = &self.config.tiers[tier];
        let period = spec.period.secs() as i64;
        let start = now - spec.retention.secs() as i64;
        start - start.rem_euclid(period)
    }

    fn apply(&mut self, series: u32, ts: Timestamp, value: f64, now: Timestamp) {
        for tier in 0..self.config.tiers.len() {
            if ts < self.window(tier, now) {
                continue;
            }
            let res = self.config.tiers[tier].resolution.secs() as i64;
            self.buckets
                .entry((series, tier, ts - ts.rem_euclid(res)))
                .or_insert(Bucket::EMPTY)
                .add(value);
        }
    }
}

fn same(a: &Bucket, b: &Bucket) -> bool {
    a.count == b.count
        && a.total.to_bits() == b.total.to_bits()
        && a.min.to_bits() == b.min.to_bits()
        && a.max.to_bits() == b.max.to_bits()
}

/// Every series in every tier, bucket by bucket over the tier's whole window.
fn compare(engine: &Engine, model: &Model, now: Timestamp) -> Result<(), TestCaseError> {
    let reader = engine.reader();
    for series in 0..40u32 {
        let Some(id) = engine
            .registry()
            .lookup(&format!("s{series}"))
            .expect("valid name")
        else {
            continue;
        };
        for (tier, spec) in model.config.tiers.iter().enumerate() {
            let from = model.window(tier, now);
            let to = now + 2 * spec.period.secs() as i64;
            let got = reader
                .read_buckets(id, tier, from, to, spec.resolution)
                .map_err(|e| TestCaseError::fail(format!("read s{series} {}: {e}", spec.name)))?;
            for (start, bucket) in got {
                let want = model
                    .buckets
                    .get(&(series, tier, start))
                    .copied()
                    .unwrap_or(Bucket::EMPTY);
                prop_assert!(
                    same(&bucket, &want),
                    "s{} tier {} bucket {}: engine {:?}, model {:?}",
                    series,
                    spec.name,
                    start,
                    bucket,
                    want
                );
            }
        }
    }
    Ok(())
}

fn run(ops: &[Op]) -> Result<(u64, u64), TestCaseError> {
    let config = config();
    let clock = Arc::new(ManualClock::new(NOW));
    let dir = scratch_dir();
    // With the background thread on: its first pass runs at every open, beside the ops.
    let open = crate::common::open;
    let mut engine = Some(open(dir.path(), &clock, config.clone()));
    let mut model = Model {
        config: config.clone(),
        buckets: BTreeMap::new(),
    };
    let (mut compactions, mut rehydrations) = (0, 0);
    let mut count = |engine: &Engine| {
        for tier in engine.stats().tiers {
            compactions += tier.disk.compactions;
            rehydrations += tier.disk.rehydrations;
        }
    };
    for op in ops {
        let live = engine.as_ref().expect("open");
        let now = clock.now();
        match op {
            Op::Advance(secs) => clock.advance(*secs),
            Op::Write(samples) => {
                let oldest = (0..config.tiers.len())
                    .map(|t| model.window(t, now))
                    .min()
                    .expect("tiers");
                let batch: Vec<Sample> = samples
                    .iter()
                    .map(|&(s, late, value)| {
                        let id = live.series(&format!("s{s}")).expect("series");
                        Sample::new(id, now - late, value)
                    })
                    .collect();
                let report = live.record_batch(&batch).expect("batch");
                let mut refused = 0;
                for &(s, late, value) in samples {
                    if now - late < oldest {
                        refused += 1;
                    } else {
                        model.apply(s, now - late, value, now);
                    }
                }
                prop_assert_eq!(report.rejected_total(), refused);
            }
            Op::Maintain => {
                live.maintain().expect("maintenance");
                live.maintain().expect("maintenance");
            }
            Op::Reopen => {
                let closing = engine.take().expect("open");
                count(&closing);
                closing.close().expect("close");
                engine = Some(open(dir.path(), &clock, config.clone()));
            }
        }
    }
    let live = engine.take().expect("open");
    compare(&live, &model, clock.now())?;
    count(&live);
    live.close().expect("close");
    let reopened = open(dir.path(), &clock, config);
    compare(&reopened, &model, clock.now())?;
    Ok((compactions, rehydrations))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn compaction_late_writes_drops_and_reopens_match_the_model(
        ops in prop::collection::vec(op(), 10..60),
    ) {
        run(&ops)?;
    }
}

/// A fresh directory with series `s0` registered, the clock at [`NOW`], and the start of the
/// 1m tier's period holding it.
fn one_series() -> (
    tempfile::TempDir,
    Arc<ManualClock>,
    Engine,
    tierdb::SeriesId,
    Timestamp,
) {
    let clock = Arc::new(ManualClock::new(NOW));
    let dir = tempfile::tempdir().expect("temp dir");
    let engine = open(dir.path(), &clock, config());
    let id = engine.series("s0").expect("series");
    (dir, clock, engine, id, NOW - NOW.rem_euclid(HOUR))
}

/// The life cycle on one series, step by step: a closed quiet period is compacted (the hot
/// file goes, a `.tdc` comes), a late sample makes it hot again and is read back exactly
/// with the rest, and expiry unlinks the compacted file.
#[test]
fn a_closed_period_is_compacted_made_hot_by_a_late_sample_and_dropped_whole() {
    let (dir, clock, engine, id, start) = one_series();
    let config = config();
    let samples: Vec<Sample> = (0..60)
        .map(|m| Sample::new(id, start + m * MINUTE, m as f64 * 0.1))
        .collect();
    engine.record_batch(&samples).expect("batch");
    let read = |engine: &Engine| {
        engine
            .reader()
            .read_buckets(id, 0, start, start + HOUR, Span::from_secs(60))
            .expect("read")
    };
    let before = read(&engine);
    let tier_dir = dir.path().join("tiers").join("1m");
    let name = |suffix: &str| {
        let stamp = chrono::DateTime::from_timestamp(start, 0)
            .expect("time")
            .format("%Y%m%dT%H%M%SZ");
        tier_dir.join(format!("{stamp}-c00000{suffix}"))
    };
    assert!(name(".tdb").exists());

    clock.advance(HOUR + 11 * MINUTE);
    engine.maintain().expect("maintenance");
    assert!(
        name(".tdb").exists(),
        "compacted only once a pass saw it quiet"
    );
    engine.maintain().expect("maintenance");
    assert!(!name(".tdb").exists(), "the hot file is gone");
    assert!(name(".tdc").exists(), "the compacted file is there");
    assert_eq!(engine.stats().tiers[0].disk.compactions, 1);
    assert_eq!(read(&engine), before, "compaction changed nothing");

    engine
        .record_batch(&[Sample::new(id, start + 5 * MINUTE, 100.0)])
        .expect("late batch");
    assert!(
        name(".tdb").exists(),
        "the late sample made the period hot again"
    );
    assert!(!name(".tdc").exists());
    assert_eq!(engine.stats().tiers[0].disk.rehydrations, 1);
    let mut want = before.clone();
    // At the second of the bucket's sample: the one that arrived later is the latest.
    let ts = start + 5 * MINUTE;
    want[5].1.add_at(100.0, tierdb::Last::new(100.0, ts));
    assert_eq!(read(&engine), want);

    clock.advance(HOUR);
    engine.maintain().expect("maintenance");
    engine.maintain().expect("maintenance");
    assert!(name(".tdc").exists(), "compacted again");
    // Read through a new reader: the one kept open for the first compacted file (same name)
    // would still give the bucket without the late sample.
    assert_eq!(
        read(&engine),
        want,
        "read back from the file compacted again"
    );
    engine.close().expect("close");
    let engine = open(dir.path(), &clock, config.clone());
    assert_eq!(read(&engine), want, "read back after a reopen");

    clock.advance(7 * HOUR);
    engine.maintain().expect("maintenance");
    assert!(!name(".tdc").exists(), "dropped whole on expiry");
}

/// A crash between writing the compacted file and deleting the hot one leaves both: the open
/// keeps the hot one, which holds everything, and removes the other.
#[test]
fn when_both_forms_of_a_period_exist_the_hot_one_wins() {
    let (dir, clock, engine, id, start) = one_series();
    let config = config();
    engine
        .record_batch(&[Sample::new(id, start, 1.0)])
        .expect("batch");
    clock.advance(HOUR + 11 * MINUTE);
    engine.maintain().expect("maintenance");
    engine.maintain().expect("maintenance");
    engine.close().expect("close");
    let tier_dir = dir.path().join("tiers").join("1m");
    let compacted: Vec<_> = std::fs::read_dir(&tier_dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tdc"))
        .collect();
    assert_eq!(compacted.len(), 1);
    // A hot file beside it holding one more sample: as if the late write's rehydration
    // had created it and crashed before unlinking the compacted one.
    let engine = open(dir.path(), &clock, config.clone());
    engine
        .record_batch(&[Sample::new(id, start, 2.0)])
        .expect("late batch");
    engine.close().expect("close");
    let hot = compacted[0].with_extension("tdb");
    assert!(hot.exists());
    std::fs::write(&compacted[0], b"stale compacted leftover").expect("leftover");
    let engine = open(dir.path(), &clock, config);
    assert!(
        !compacted[0].exists(),
        "the superseded compacted file is removed"
    );
    let got = engine
        .reader()
        .read_buckets(id, 0, start, start + MINUTE, Span::from_secs(60))
        .expect("read");
    assert_eq!(got[0].1.count, 2);
    assert_eq!(got[0].1.total, 3.0);
}

/// A damaged compacted file (a flipped data byte, a flipped header byte, a truncation, a
/// foreign file under its name) is refused with its name by the reads that need it and by a
/// late write into its period, never a panic; every other series and period keeps serving,
/// and the open does not read it at all.
#[test]
fn a_damaged_compacted_file_is_refused_by_name_and_the_rest_keeps_serving() {
    let config = config();
    let start = NOW - NOW.rem_euclid(HOUR);
    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, Damage); 4] = [
        ("a flipped data byte", |b| {
            let last = b.len() - 3;
            b[last] ^= 0x40;
        }),
        ("a flipped header byte", |b| b[20] ^= 1),
        ("a truncation", |b| b.truncate(b.len() / 2)),
        ("a foreign file", |b| {
            *b = b"not a tierdb file at all, just some bytes".repeat(8)
        }),
    ];
    for (what, damage) in damages {
        let clock = Arc::new(ManualClock::new(NOW));
        let dir = scratch_dir();
        let engine = open(dir.path(), &clock, config.clone());
        // s0 is in chunk 0, s20 in chunk 1: one damaged file must not hide the other chunk.
        let ids: Vec<_> = (0..21)
            .map(|i| engine.series(&format!("s{i}")).expect("series"))
            .collect();
        let batch: Vec<Sample> = [0usize, 20]
            .iter()
            .flat_map(|&i| (0..60).map(move |m| (i, m)))
            .map(|(i, m)| Sample::new(ids[i], start + m * MINUTE, (m + 1) as f64))
            .collect();
        engine.record_batch(&batch).expect("batch");
        clock.advance(HOUR + 11 * MINUTE);
        engine.maintain().expect("maintenance");
        engine.maintain().expect("maintenance");
        engine.close().expect("close");
        let stamp = chrono::DateTime::from_timestamp(start, 0)
            .expect("time")
            .format("%Y%m%dT%H%M%SZ");
        let damaged = dir
            .path()
            .join("tiers/1m")
            .join(format!("{stamp}-c00000.tdc"));
        let mut bytes = std::fs::read(&damaged).expect("compacted file");
        damage(&mut bytes);
        std::fs::write(&damaged, &bytes).expect("damage");

        let engine = open(dir.path(), &clock, config.clone());
        let read = |id| {
            engine
                .reader()
                .read_buckets(id, 0, start, start + HOUR, Span::from_secs(60))
        };
        match read(ids[0]) {
            Err(tierdb::Error::CorruptFile { path, .. }) => {
                assert_eq!(path, damaged, "{what}")
            }
            other => panic!("{what}: the read gave {other:?}"),
        }
        // The other chunk's compacted file, and the other tiers, serve.
        let other = read(ids[20]).expect("the other chunk reads");
        assert_eq!(
            other.iter().map(|(_, b)| b.count).sum::<u64>(),
            60,
            "{what}"
        );
        let hours = engine
            .reader()
            .read_buckets(ids[0], 1, start, start + HOUR, Span::from_secs(3600))
            .expect("the 1h tier reads");
        assert_eq!(hours[0].1.count, 60, "{what}");
        // A late sample for the damaged period is refused as storage_unavailable, and one
        // for the other chunk's compacted period lands.
        let report = engine
            .record_batch(&[
                Sample::new(ids[0], start + 5 * MINUTE, 1.0),
                Sample::new(ids[20], start + 5 * MINUTE, 1.0),
            ])
            .expect("batch");
        assert_eq!(report.accepted, 1, "{what}");
        assert_eq!(
            report.rejected(tierdb::RejectReason::StorageUnavailable),
            1,
            "{what}"
        );
        assert!(
            damaged.exists(),
            "{what}: the damaged file is left for inspection"
        );
        engine.close().expect("close");
    }
}
