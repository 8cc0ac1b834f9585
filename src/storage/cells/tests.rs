use std::sync::Arc;

use super::{same_bits, CellAt};
use crate::bucket::Bucket;
use crate::clock::ManualClock;
use crate::config::{TierSpec, TiersConfig};
use crate::engine::Engine;
use crate::error::Error;
use crate::sample::Sample;
use crate::storage::StoredPeriod;
use crate::time::Span;

/// 2025-11-21T12:00:00Z.
const NOW: i64 = 1_763_726_400;
const HOUR: i64 = 3_600;

/// 1m buckets in 1h files kept 6h; 16 series per chunk.
fn engine(dir: &std::path::Path, clock: &Arc<ManualClock>) -> Engine {
    let mut tiers = TiersConfig::default();
    tiers.engine.series_per_chunk = 16;
    tiers.tiers = vec![TierSpec {
        name: "1m".into(),
        resolution: Span::from_secs(60),
        period: Span::from_secs(HOUR as u64),
        retention: Span::from_secs(6 * HOUR as u64),
        create_ahead: 1,
        earlier_periods: Vec::new(),
    }];
    Engine::builder(dir)
        .tiers(tiers)
        .clock(clock.clone())
        .writer_threads(2)
        .background_maintenance(false)
        .open()
        .unwrap()
}

fn cell(period_start: i64, bucket: u32, slot: u32) -> CellAt {
    CellAt {
        tier: 0,
        period_start,
        chunk: 0,
        bucket,
        slot,
    }
}

fn form(engine: &Engine, period_start: i64) -> Option<&'static str> {
    engine
        .shared
        .storage
        .stored(0, period_start, 0)
        .map(|stored| match stored {
            StoredPeriod::Hot(_) => "hot",
            StoredPeriod::Compacted(_) => "compacted",
        })
}

#[test]
fn cells_read_and_overwrite_alike_in_hot_compacted_and_missing_periods() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = engine(dir.path(), &clock);
    let storage = &engine.shared.storage;
    let id = engine.series("a").unwrap();
    let old = NOW - 3 * HOUR;
    let samples = [
        Sample::new(id, old + 5, 1.5),
        Sample::new(id, old + 50, -0.0),
    ];
    assert_eq!(engine.record_batch(&samples).unwrap().accepted, 2);
    let written = Bucket {
        count: 2,
        total: 1.5,
        min: -0.0,
        max: 1.5,
        last: None,
    };
    let gone = cell(NOW - 5 * HOUR, 0, 0);
    let cells = [cell(old, 0, 0), cell(old, 1, 0), gone];
    let loaded = storage.load_cells(&cells).unwrap();
    assert!(same_bits(&loaded[0], &written), "{loaded:?}");
    assert!(same_bits(&loaded[1], &Bucket::EMPTY));
    assert!(same_bits(&loaded[2], &Bucket::EMPTY), "no file: empty");
    assert_eq!(form(&engine, old), Some("hot"));

    // Compacted (a whole quiet pass after the write), the same bits come back.
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(form(&engine, old), Some("compacted"));
    let loaded = storage.load_cells(&cells).unwrap();
    assert!(same_bits(&loaded[0], &written), "{loaded:?}");

    // Putting back what a compacted period holds changes nothing, and keeps it compacted.
    assert_eq!(storage.overwrite_cells(&[(cells[0], written)]).unwrap(), 0);
    assert_eq!(form(&engine, old), Some("compacted"));

    // A different value makes it hot again, holding the rest of the period as it was.
    let before = Bucket {
        count: 1,
        total: 1.5,
        min: 1.5,
        max: 1.5,
        last: None,
    };
    let other = cell(old, 7, 3);
    assert_eq!(
        storage
            .overwrite_cells(&[(cells[0], before), (other, Bucket::EMPTY)])
            .unwrap(),
        1
    );
    assert_eq!(form(&engine, old), Some("hot"));
    let loaded = storage.load_cells(&cells).unwrap();
    assert!(same_bits(&loaded[0], &before), "{loaded:?}");

    // -0.0 and 0.0 are different bits.
    let zero = Bucket {
        min: 0.0,
        ..written
    };
    storage.overwrite_cells(&[(cells[0], written)]).unwrap();
    assert_eq!(storage.overwrite_cells(&[(cells[0], zero)]).unwrap(), 1);

    // A period without a file is left without one.
    assert_eq!(storage.overwrite_cells(&[(gone, written)]).unwrap(), 0);
    assert_eq!(form(&engine, gone.period_start), None);

    // Cells no file of the tier can hold are refused, not a panic.
    for bad in [
        cell(old, 60, 0),
        cell(old, 0, 16),
        cell(old + 1, 0, 0),
        CellAt {
            tier: 1,
            ..cells[0]
        },
    ] {
        assert!(
            matches!(storage.load_cells(&[bad]), Err(Error::InvalidQuery(_))),
            "{bad:?}"
        );
        assert!(matches!(
            storage.overwrite_cells(&[(bad, written)]),
            Err(Error::InvalidQuery(_))
        ));
    }
    engine.close().unwrap();
}

#[test]
fn an_import_sets_cells_creating_periods_and_changes_nothing_the_second_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = engine(dir.path(), &clock);
    let storage = &engine.shared.storage;
    let old = NOW - 3 * HOUR;
    let one = |v: f64| Bucket {
        count: 1,
        total: v,
        min: v,
        max: v,
        last: None,
    };
    // Two periods never written, in the order an import gives them (series by series).
    let cells = [
        (cell(old, 0, 2), one(1.0)),
        (cell(old, 1, 2), one(2.0)),
        (cell(old + HOUR, 5, 2), one(3.0)),
        (cell(old, 0, 3), one(4.0)),
    ];
    assert_eq!(form(&engine, old), None);
    assert_eq!(storage.import_cells(&cells).unwrap(), 4);
    assert_eq!(form(&engine, old), Some("hot"));
    let at: Vec<CellAt> = cells.iter().map(|c| c.0).collect();
    let loaded = storage.load_cells(&at).unwrap();
    for ((_, want), got) in cells.iter().zip(&loaded) {
        assert!(same_bits(want, got), "{got:?}");
    }
    // Set, not added: again, nothing changes.
    assert_eq!(storage.import_cells(&cells).unwrap(), 0);

    // A compacted period stays compacted when the import brings the same values, and is
    // made hot again when one differs.
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(form(&engine, old), Some("compacted"));
    assert_eq!(storage.import_cells(&cells[..2]).unwrap(), 0);
    assert_eq!(form(&engine, old), Some("compacted"));
    assert_eq!(storage.import_cells(&[(cells[0].0, one(9.0))]).unwrap(), 1);
    assert_eq!(form(&engine, old), Some("hot"));
    assert!(same_bits(
        &storage.load_cells(&at[1..2]).unwrap()[0],
        &one(2.0)
    ));

    // The same values with their latest samples (an import by a build that keeps them, of
    // what an earlier one imported without): set, the hot cell and the compacted one alike,
    // and then unchanged.
    let latest = |v: f64, ts: i64| Bucket {
        last: Some(crate::bucket::Last::new(v, ts)),
        ..one(v)
    };
    let hot = [
        (cells[0].0, latest(9.0, old)),
        (cells[1].0, latest(2.0, old + 60)),
    ];
    assert_eq!(storage.import_cells(&hot).unwrap(), 2);
    assert_eq!(storage.import_cells(&hot).unwrap(), 0);
    let later = [(cells[2].0, latest(3.0, old + HOUR + 300))];
    assert_eq!(form(&engine, old + HOUR), Some("compacted"));
    assert_eq!(storage.import_cells(&later).unwrap(), 1);
    assert_eq!(storage.import_cells(&later).unwrap(), 0);
    let at = [hot[0].0, hot[1].0, later[0].0];
    let loaded = storage.load_cells(&at).unwrap();
    let lasts: Vec<_> = loaded.iter().map(|b| b.last).collect();
    assert_eq!(lasts, [hot[0].1.last, hot[1].1.last, later[0].1.last]);

    // A cell no file can hold is refused, not a panic.
    assert!(matches!(
        storage.import_cells(&[(cell(old, 60, 0), one(1.0))]),
        Err(Error::InvalidQuery(_))
    ));
    engine.close().unwrap();
}
