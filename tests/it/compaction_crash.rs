//! `kill -9` during the compaction of a just-closed period. A child process (this test
//! binary, run again for one test) opens a data directory whose last hour has just closed,
//! and runs maintenance with the compaction fault hook armed: it kills itself once the
//! compacted file is in place beside the hot one (`after_write`), or once the hot file is
//! unlinked and before the directory is synced (`after_swap`). The next open must serve
//! every bucket as before, compact the period again, and still take a late sample into it.

use std::path::Path;
use std::sync::Arc;

use tierdb::testing::fault::KILL_MID_COMPACTION;
use tierdb::testing::storage::format::file_name;
use tierdb::{Display, Engine, ManualClock, Query, Sample, Timestamp};

use crate::common::{open_driven, scratch_dir, NOW};
use crate::compaction::config;
use crate::support::process::run_child_until_it_kills_itself;

/// Set to the data directory, the test runs as the child that gets killed.
const CHILD_DIR: &str = "TIERDB_IT_COMPACTION_CHILD_DIR";
const HOUR: i64 = 3_600;
/// The hour that closes: the 1m tier's period is one hour.
const START: Timestamp = NOW - NOW % HOUR;
/// Just past the end of that hour and its grace, when the maintenance pass compacts it.
const CLOSED: Timestamp = START + HOUR + 601;
const SERIES: u32 = 20;

fn open(dir: &Path, now: Timestamp) -> Engine {
    open_driven(dir, &Arc::new(ManualClock::new(now)), config())
}

/// Every series' buckets of the hour in the 1m and 1h tiers: (count, total) per point.
/// Per point of every series' reads: (count, total).
type Points = Vec<(Option<f64>, Option<f64>)>;

fn buckets(engine: &Engine) -> Points {
    let mut all = Vec::new();
    for series in 0..SERIES {
        for tier in ["1m", "1h"] {
            let read = |display| {
                let query = Query::new(format!("s{series}"), START, START + HOUR)
                    .tier(tier)
                    .display(display);
                engine.query(&query).unwrap().points
            };
            let counts = read(Display::Count);
            let totals = read(Display::Total);
            all.extend(counts.iter().zip(&totals).map(|(c, t)| (c.1, t.1)));
        }
    }
    all
}

/// The child: opens the directory (its pass looks at the closed hour) and runs the pass
/// that compacts it, where the armed hook kills it.
fn child_compacts(dir: &Path) {
    let engine = open(dir, CLOSED);
    let _ = engine.maintain();
    panic!("the compaction hook did not fire");
}

fn crash_at(stage: &str, test: &str) -> (tempfile::TempDir, Points) {
    let dir = scratch_dir();
    let before = {
        let engine = open(dir.path(), START + HOUR - 1);
        let ids: Vec<_> = (0..SERIES)
            .map(|i| engine.series(&format!("s{i}")).unwrap())
            .collect();
        let samples: Vec<Sample> = (0..HOUR / 10)
            .flat_map(|k| {
                ids.iter().enumerate().map(move |(i, id)| {
                    Sample::new(*id, START + 10 * k, (i as i64 * 1000 + k) as f64 / 4.0)
                })
            })
            .collect();
        let report = engine.record_batch(&samples).unwrap();
        assert_eq!(report.accepted, samples.len() as u64);
        let before = buckets(&engine);
        engine.close().unwrap();
        before
    };
    run_child_until_it_kills_itself(
        test,
        &[
            (CHILD_DIR, dir.path().as_os_str()),
            (KILL_MID_COMPACTION, stage.as_ref()),
        ],
    );
    (dir, before)
}

/// The hour's hot and compacted files of chunk 0 in the 1m tier: (exists, exists).
fn forms(dir: &Path) -> (bool, bool) {
    let hot = dir.join("tiers/1m").join(file_name(START, 0));
    (hot.exists(), hot.with_extension("tdc").exists())
}

fn recovers(dir: &Path, before: &[(Option<f64>, Option<f64>)]) {
    let engine = open(dir, CLOSED);
    assert_eq!(
        forms(dir).0 as u8 + forms(dir).1 as u8,
        1,
        "one form per period"
    );
    assert_eq!(
        buckets(&engine),
        before,
        "the reopened period answers as before"
    );
    // Two passes: the first looks, the second compacts what stayed quiet.
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(forms(dir), (false, true), "the period is compacted again");
    assert_eq!(buckets(&engine), before);
    // A late sample still lands in it.
    let id = engine.series("s0").unwrap();
    let report = engine
        .record_batch(&[Sample::new(id, START + 5, 1.0)])
        .unwrap();
    assert_eq!(report.accepted, 1);
    let after = buckets(&engine);
    // s0's first minute, and its hour (the 60 minutes come first).
    for changed in [0, 60] {
        assert_eq!(after[changed].0, before[changed].0.map(|c| c + 1.0));
    }
    for (at, (after, before)) in after.iter().zip(before).enumerate() {
        if at != 0 && at != 60 {
            assert_eq!(after, before, "point {at}");
        }
    }
    engine.close().unwrap();
}

#[test]
fn a_kill_after_the_compacted_file_is_written_keeps_the_hot_one() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child_compacts(Path::new(&dir));
    }
    let (dir, before) = crash_at(
        "after_write",
        "compaction_crash::a_kill_after_the_compacted_file_is_written_keeps_the_hot_one",
    );
    assert_eq!(
        forms(dir.path()),
        (true, true),
        "the child died with both forms on disk"
    );
    recovers(dir.path(), &before);
}

#[test]
fn a_kill_after_the_swap_serves_the_compacted_file() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child_compacts(Path::new(&dir));
    }
    let (dir, before) = crash_at(
        "after_swap",
        "compaction_crash::a_kill_after_the_swap_serves_the_compacted_file",
    );
    assert_eq!(
        forms(dir.path()),
        (false, true),
        "the child died after the unlink"
    );
    recovers(dir.path(), &before);
}
