//! Each bucket keeps its latest sample, its value and its time (a counter's raw value), in
//! the 64-byte records of version 3 period files, through every tier, the read's merge of
//! buckets and compaction (compacted version 4). A data directory written by the build
//! before (version 2 period files: 32-byte records) opens, reads its buckets with the latest
//! sample unknown, takes new writes in its own layout, and compacts.

use std::path::Path;
use std::sync::Arc;

use tierdb::testing::storage::format::{CellLayout, PeriodMeta, HEADER_LEN, RECORD_SIZE};
use tierdb::{Bucket, Engine, Last, ManualClock, Sample, SeriesKind, Span, Timestamp};

/// 2026-12-06T00:00:00Z: a day boundary, so every default tier's period starts here.
const T0: Timestamp = 1_796_515_200;
const MINUTE: i64 = 60;
/// Past the 1m tier's first 6-hour period and its compaction grace.
const LATER: Timestamp = T0 + 7 * 3_600;

fn open(data: &Path, clock: &Arc<ManualClock>) -> Engine {
    Engine::builder(data)
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .unwrap()
}

/// A gauge `g` sampled at 17 s past each of minutes 0..30 with value `1.5 m`; in minute 30
/// three samples arrive: 100 at +10 s, 50 at +40 s, then 999 at +5 s (late: not the latest).
/// A counter `c` whose raw values are 10, 20, 35 at 17 s past minutes 0, 1, 2.
fn write(engine: &Engine) {
    let g = engine.series("g").unwrap();
    let c = engine.series("c").unwrap();
    engine.declare_kind(c, SeriesKind::Counter).unwrap();
    let mut samples: Vec<Sample> = (0..30)
        .map(|m| Sample::new(g, T0 + m * MINUTE + 17, 1.5 * m as f64))
        .collect();
    samples.extend([
        Sample::new(g, T0 + 30 * MINUTE + 10, 100.0),
        Sample::new(g, T0 + 30 * MINUTE + 40, 50.0),
    ]);
    for (m, raw) in [(0, 10.0), (1, 20.0), (2, 35.0)] {
        samples.push(Sample::new(c, T0 + m * MINUTE + 17, raw));
    }
    assert_eq!(engine.record_batch(&samples).unwrap().accepted, 35);
    let late = Sample::new(g, T0 + 30 * MINUTE + 5, 999.0);
    assert_eq!(engine.record_batch(&[late]).unwrap().accepted, 1);
}

/// The buckets of `series` in tier `tier` over the first 35 minutes, `step` wide.
fn buckets(engine: &Engine, series: &str, tier: usize, step: i64) -> Vec<(Timestamp, Bucket)> {
    let id = engine.series(series).unwrap();
    let reader = engine.reader();
    let width = step.max(engine.config().tiers[tier].resolution.secs() as i64);
    let to = T0 + (35 * MINUTE + width - 1) / width * width;
    reader
        .read_buckets(id, tier, T0, to, Span::from_secs(width as u64))
        .unwrap()
}

fn last(value: f64, ts: Timestamp) -> Option<Last> {
    Some(Last::new(value, ts))
}

/// What `write` leaves as the latest samples, every tier and step alike.
fn assert_latest_kept(engine: &Engine, when: &str) {
    let minutes = buckets(engine, "g", 0, MINUTE);
    for (m, (start, bucket)) in minutes.iter().enumerate().take(30) {
        assert_eq!(*start, T0 + m as i64 * MINUTE);
        assert_eq!(
            bucket.last,
            last(1.5 * m as f64, start + 17),
            "{when}: minute {m}"
        );
    }
    assert_eq!(minutes[30].1.count, 3);
    assert_eq!(
        minutes[30].1.last,
        last(50.0, T0 + 30 * MINUTE + 40),
        "{when}: the latest time wins, not the latest arrival"
    );
    assert_eq!(minutes[31].1, Bucket::EMPTY);
    // The 5m tier's buckets, and the 1m tier read 5 minutes a point, keep the latest of
    // their minutes.
    for (tier, step) in [(1, 300), (0, 300)] {
        let points = buckets(engine, "g", tier, step);
        assert_eq!(
            points[0].1.last,
            last(6.0, T0 + 4 * MINUTE + 17),
            "{when}: tier {tier} step {step}"
        );
        assert_eq!(
            points[6].1.last,
            last(50.0, T0 + 30 * MINUTE + 40),
            "{when}"
        );
    }
    // The counter's buckets hold increases and keep its raw value as the latest; its first
    // sample only set the baseline.
    let counter = buckets(engine, "c", 0, MINUTE);
    assert_eq!(counter[0].1, Bucket::EMPTY, "{when}");
    assert_eq!(
        (counter[1].1.total, counter[1].1.last),
        (10.0, last(20.0, T0 + MINUTE + 17)),
        "{when}"
    );
    assert_eq!(
        (counter[2].1.total, counter[2].1.last),
        (15.0, last(35.0, T0 + 2 * MINUTE + 17)),
        "{when}"
    );
}

#[test]
fn every_tier_keeps_each_buckets_latest_sample_hot_and_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let clock = Arc::new(ManualClock::new(T0 + 35 * MINUTE));
    let engine = open(&data, &clock);
    write(&engine);
    assert_latest_kept(&engine, "hot");
    engine.close().unwrap();

    clock.set(LATER);
    let engine = open(&data, &clock);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert!(engine.stats().tiers[0].disk.compacted_files > 0);
    assert_latest_kept(&engine, "compacted");
    engine.close().unwrap();
    let engine = open(&data, &clock);
    assert_latest_kept(&engine, "compacted, reopened");
}

/// Rewrites the version 3 period file at `path` as the build before wrote it: version 2,
/// the records without the latest area, the histogram area after them.
fn to_version_2(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let meta = PeriodMeta::decode(&bytes, path).unwrap();
    assert!(meta.keeps_last());
    let old = PeriodMeta {
        histogram_cells: CellLayout::version_2(meta.resolution),
        ..meta.clone()
    };
    let histograms = &bytes[meta.histogram_offset() as usize..];
    let mut out = vec![0u8; old.histogram_offset() as usize + histograms.len()];
    out[..HEADER_LEN].copy_from_slice(&old.encode());
    let records = HEADER_LEN..HEADER_LEN + meta.cells() * RECORD_SIZE;
    out[records.clone()].copy_from_slice(&bytes[records]);
    out[old.histogram_offset() as usize..].copy_from_slice(histograms);
    std::fs::write(path, out).unwrap();
}

/// Every period file under `data`.
fn period_files(data: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for tier in std::fs::read_dir(data.join("tiers")).unwrap() {
        for file in std::fs::read_dir(tier.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            if path.extension().is_some_and(|e| e == "tdb") {
                found.push(path);
            }
        }
    }
    found
}

fn version(path: &Path) -> u32 {
    let bytes = std::fs::read(path).unwrap();
    u32::from_le_bytes(bytes[8..12].try_into().unwrap())
}

#[test]
fn a_directory_of_version_2_files_reads_its_latest_samples_unknown_writes_and_compacts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let clock = Arc::new(ManualClock::new(T0 + 35 * MINUTE));
    let engine = open(&data, &clock);
    write(&engine);
    let want: Vec<(Timestamp, Bucket)> = buckets(&engine, "g", 0, MINUTE)
        .into_iter()
        .map(|(ts, b)| (ts, Bucket { last: None, ..b }))
        .collect();
    engine.close().unwrap();
    let files = period_files(&data);
    assert!(!files.is_empty());
    for path in &files {
        to_version_2(path);
    }

    let engine = open(&data, &clock);
    assert_eq!(
        buckets(&engine, "g", 0, MINUTE),
        want,
        "every field as written, the latest sample unknown"
    );
    assert!(buckets(&engine, "c", 0, MINUTE)
        .iter()
        .all(|(_, b)| b.last.is_none()));
    // A new sample lands in the version 2 file, which stays version 2.
    let g = engine.series("g").unwrap();
    let report = engine
        .record_batch(&[Sample::new(g, T0 + 31 * MINUTE + 3, 7.0)])
        .unwrap();
    assert_eq!(report.accepted, 1);
    let mut want = want;
    want[31].1 = Bucket {
        count: 1,
        total: 7.0,
        min: 7.0,
        max: 7.0,
        last: None,
    };
    assert_eq!(buckets(&engine, "g", 0, MINUTE), want);
    assert!(files.iter().all(|path| version(path) == 2));
    engine.close().unwrap();

    clock.set(LATER);
    let engine = open(&data, &clock);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert!(engine.stats().tiers[0].disk.compacted_files > 0);
    assert_eq!(buckets(&engine, "g", 0, MINUTE), want, "compacted");
    // A late sample makes the period hot again in a version 3 file: the buckets compacted
    // from version 2 keep their latest sample unknown, the new one is known.
    let report = engine
        .record_batch(&[Sample::new(g, T0 + 32 * MINUTE + 9, 8.0)])
        .unwrap();
    assert_eq!(report.accepted, 1);
    let found = buckets(&engine, "g", 0, MINUTE);
    assert_eq!(found[..32], want[..32]);
    assert_eq!(found[32].1.last, last(8.0, T0 + 32 * MINUTE + 9));
}
