//! The recovery pass, through an engine's open.

use std::sync::Arc;

use crate::clock::ManualClock;
use crate::config::{SeriesRules, TiersConfig};
use crate::counter::SeriesKind;
use crate::engine::apply::{Checkpoints, Fault};
use crate::engine::{Engine, KeyIndex, SampleBatch};
use crate::error::Error;
use crate::registry::SeriesId;
use crate::time::Timestamp;

/// 2025-11-21T12:00:00Z.
const NOW: Timestamp = 1_763_726_400;

/// The default tiers, with `[counters]` rules that make the names in `names` counters.
fn tiers(names: &[&str]) -> TiersConfig {
    TiersConfig {
        counters: SeriesRules {
            names: names.iter().map(|name| (*name).to_owned()).collect(),
            tags: Vec::new(),
        },
        ..TiersConfig::default()
    }
}

/// A message of one sample of `series`, no kind declared, at `ts`.
fn message(series: &str, ts: Timestamp, value: f64) -> SampleBatch {
    let mut batch = SampleBatch::default();
    batch.push(&mut KeyIndex::default(), series, None, ts, value);
    batch
}

/// The total a series' finest buckets hold from `NOW` on.
fn stored_total(engine: &Engine, id: SeriesId) -> f64 {
    let spec = &engine.config().tiers[0];
    (engine.reader())
        .read_buckets(id, 0, NOW, NOW + 60, spec.resolution)
        .unwrap()
        .iter()
        .map(|(_, bucket)| bucket.total)
        .sum()
}

/// A group an apply left in force (an undo record above the applied sequence) rolls back a
/// counter's state to one that records no kind, the kind its series has by the rules the
/// directory stores. An open that changes those rules records that kind for each existing
/// series they would change. The roll-back has to come first: recorded first, the state put
/// back after it would erase the record, and the series would take the new rules' kind, its
/// next samples stored as a gauge's values instead of a counter's increases.
#[test]
fn a_group_rolled_back_at_an_open_that_changes_the_counter_rules_keeps_its_series_kind() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW + 30));
    let builder = |names: &[&str]| {
        Engine::builder(dir.path())
            .tiers(tiers(names))
            .clock(clock.clone())
            .writer_threads(1)
            .background_maintenance(false)
            .checkpoints(Checkpoints {
                interval: std::time::Duration::MAX,
                groups: 1,
                samples: usize::MAX,
            })
    };
    let engine = builder(&["*_total"])
        .apply_fault(Fault::stop_once_applied(2))
        .open()
        .unwrap();
    // Group 1, checkpointed: the counter's baseline, its state recording no declared kind.
    engine
        .apply(&[(1, message("req_total", NOW, 10.0))])
        .unwrap();
    let id = engine.registry().get("req_total").unwrap();
    assert_eq!(engine.series_kind(id), SeriesKind::Counter);
    // Group 2 stops once stored, as a kill would leave it: its record in force.
    let second = [(2, message("req_total", NOW + 10, 15.0))];
    let err = engine.apply(&second).unwrap_err();
    assert!(matches!(err, Error::Poisoned(_)), "{err}");
    assert_eq!(stored_total(&engine, id), 5.0);
    drop(engine);

    // Reopened with rules under which no series is a counter.
    let engine = builder(&[]).open().unwrap();
    assert_eq!(engine.applied(), 1);
    assert_eq!(stored_total(&engine, id), 0.0, "group 2 rolled back");
    assert_eq!(engine.series_kind(id), SeriesKind::Counter, "the kind kept");
    engine.apply(&second).unwrap();
    assert_eq!(
        stored_total(&engine, id),
        5.0,
        "stored again as an increase"
    );
    drop(engine);
    let engine = builder(&[]).open().unwrap();
    assert_eq!(engine.series_kind(id), SeriesKind::Counter);
}

/// The pass runs before the open stores the tiers it was given. A journal refused for being
/// written under another tiers layout (here an apply group's, the tiers reordered since)
/// then leaves the stored tiers as the stopped process had them, and the directory opens
/// with them as it stands, rolling the group back; stored first, the given tiers would be
/// the directory's from then on, and only an open naming the old ones could recover it.
#[test]
fn a_journal_refused_for_its_tiers_leaves_the_stored_tiers_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW + 30));
    let builder = || {
        Engine::builder(dir.path())
            .clock(clock.clone())
            .writer_threads(1)
            .background_maintenance(false)
    };
    let engine = (builder().tiers(tiers(&[])))
        .apply_fault(Fault::stop_once_applied(1))
        .open()
        .unwrap();
    let err = (engine.apply(&[(1, message("load", NOW, 1.0))])).unwrap_err();
    assert!(matches!(err, Error::Poisoned(_)), "{err}");
    drop(engine);

    let mut reordered = tiers(&[]);
    reordered.tiers.reverse();
    let err = builder().tiers(reordered).open().err().unwrap();
    assert!(matches!(err, Error::CorruptFile { .. }), "{err}");
    assert!(err.to_string().contains("apply.undo"), "{err}");
    let stored = crate::storage::stored_tiers::read_stored(dir.path()).unwrap();
    assert_eq!(stored, Some(tiers(&[])), "the stored tiers as they were");

    let engine = builder().open().unwrap();
    assert_eq!(engine.applied(), 0);
    let id = engine.registry().get("load").unwrap();
    assert_eq!(stored_total(&engine, id), 0.0, "the group rolled back");
}
