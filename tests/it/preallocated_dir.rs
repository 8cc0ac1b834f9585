//! A data directory written by a build that preallocated every period file whole (before
//! period files were sparse) opens, reads and takes writes as it is: the file format did not
//! change, only when disk blocks are allocated. The fixture `tests/fixtures/dir-preallocated`
//! was made by that build: `tierdb import` of three series `fixture.s<N>`, one sample a
//! minute with value `N * 100 + minutes since FIXTURE_START`, from FIXTURE_START to
//! FIXTURE_NOW, with the tiers stored in its `tiers.toml` (1m/1h/6h and 1h/6h/3d, 16 series
//! per chunk).

use std::path::Path;
use std::sync::Arc;

use tierdb::{Display, Engine, ManualClock, Query, Timestamp};

use crate::common::copy_dir;

/// The first sample's time (2026-12-06T02:00:00Z) and the import's clock.
const FIXTURE_START: Timestamp = 1_796_522_400;
const FIXTURE_NOW: Timestamp = 1_796_526_156;

fn minutes(engine: &Engine, series: u32, from: Timestamp, to: Timestamp) -> Vec<Option<f64>> {
    let query = Query::new(format!("fixture.s{series}"), from, to)
        .tier("1m")
        .display(Display::Total);
    let points = engine.query(&query).unwrap().points;
    points.into_iter().map(|(_, v)| v).collect()
}

#[test]
fn a_directory_of_preallocated_files_opens_reads_writes_and_compacts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dir-preallocated"),
        &data,
    );
    let clock = Arc::new(ManualClock::new(FIXTURE_NOW));
    let open = || {
        Engine::builder(&data)
            .clock(clock.clone())
            .background_maintenance(false)
            .open()
            .expect("a directory of preallocated files opens")
    };
    let engine = open();
    let last = (FIXTURE_NOW - FIXTURE_START) / 60;
    let want = |series: u32| -> Vec<Option<f64>> {
        (0..=last)
            .map(|m| Some(f64::from(series * 100) + m as f64))
            .collect()
    };
    for series in 0..3 {
        assert_eq!(
            minutes(&engine, series, FIXTURE_START, FIXTURE_NOW),
            want(series)
        );
    }
    // A write into a page the old build allocated, and a new series.
    let report = engine
        .record_batch(&[
            tierdb::Sample::new(engine.series("fixture.s0").unwrap(), FIXTURE_NOW, 0.5),
            tierdb::Sample::new(engine.series("fixture.new").unwrap(), FIXTURE_NOW, 7.0),
        ])
        .unwrap();
    assert_eq!(report.accepted, 2);
    engine.close().unwrap();

    // Two hours on, the closed hours are compacted, and everything reads the same.
    clock.set(FIXTURE_NOW + 2 * 3_600);
    let engine = open();
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert!(engine.stats().tiers[0].disk.compacted_files > 0);
    let mut s0 = want(0);
    *s0.last_mut().unwrap() = s0.last().unwrap().map(|v| v + 0.5);
    assert_eq!(minutes(&engine, 0, FIXTURE_START, FIXTURE_NOW), s0);
    for series in 1..3 {
        assert_eq!(
            minutes(&engine, series, FIXTURE_START, FIXTURE_NOW),
            want(series)
        );
    }
    engine.close().unwrap();
}
