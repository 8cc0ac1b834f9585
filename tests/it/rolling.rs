//! The rolling window: period files created ahead and dropped on expiry, driven by a manual
//! clock through months of simulated time.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tierdb::{
    Clock, Display, Engine, ManualClock, Query, Sample, SeriesId, TiersConfig, Timestamp,
};

use crate::common::open_driven;

const HOUR: i64 = 3_600;
const DAY: i64 = 86_400;
/// 2025-01-01T00:00:00Z.
const START: Timestamp = 1_735_689_600;

/// File names per tier directory, sorted.
fn listing(dir: &Path) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for tier in std::fs::read_dir(dir.join("tiers")).unwrap() {
        let tier = tier.unwrap();
        let mut names: Vec<String> = std::fs::read_dir(tier.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        out.insert(tier.file_name().into_string().unwrap(), names);
    }
    out
}

fn tier_bytes(dir: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for tier in std::fs::read_dir(dir.join("tiers")).unwrap() {
        let tier = tier.unwrap();
        let bytes = std::fs::read_dir(tier.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        out.insert(tier.file_name().into_string().unwrap(), bytes);
    }
    out
}

/// Writes one sample per minute for each series over the hour ending at `end`, then moves the
/// clock to `end` and runs maintenance: what a live agent plus the background task do.
fn live_hour(engine: &Engine, clock: &ManualClock, ids: &[SeriesId], end: Timestamp) {
    clock.set(end);
    engine.maintain().expect("maintenance");
    let batch: Vec<Sample> = (0..60)
        .flat_map(|m| {
            ids.iter()
                .map(move |&id| Sample::new(id, end - 3600 + m * 60, 1.0 + (m % 7) as f64))
        })
        .collect();
    let report = engine.record_batch(&batch).expect("batch");
    assert_eq!(report.accepted as usize, batch.len());
}

#[test]
fn four_hundred_days_roll_the_window_and_disk_use_stops_growing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let engine = open_driven(dir.path(), &clock, TiersConfig::default());
    let ids: Vec<SeriesId> = ["cpu{host=a}", "cpu{host=b}", "load"]
        .iter()
        .map(|s| engine.series(s).unwrap())
        .collect();
    let checkpoints = [1, 2, 3, 8, 15, 31, 91, 120, 200, 300, 366, 400];
    let mut bytes_at = BTreeMap::new();
    for hour in 1..=400 * 24 {
        let now = START + hour * 3600;
        live_hour(&engine, &clock, &ids, now);
        if hour % 24 == 0 && checkpoints.contains(&(hour / 24)) {
            let day = hour / 24;
            insta::with_settings!({
                description => format!(
                    "default tiers, 3 series writing every minute since 2025-01-01T00:00Z, \
                     maintenance every simulated hour; files per tier after {day} days \
                     (now = {})", tierdb::time::format_ts(now)),
                snapshot_suffix => format!("day{day:03}"),
            }, {
                insta::assert_json_snapshot!("rolling_listing", listing(dir.path()));
            });
            bytes_at.insert(day, tier_bytes(dir.path()));
        }
    }
    // Windows of 1m (48h in 6h files), 5m (14d in 1d files) and 1h (90d in 10d files) are
    // full after 100 days: from then on their disk use is constant. These checkpoints are at
    // midnight, in the same phase of every period's life (hot, closed, compacted, the next
    // one created or not yet; day 366 is in the first half of a 10d period, the others in
    // the second), and every hour holds the same samples, so compacted files are the same
    // size too.
    for tier in ["1m", "5m", "1h"] {
        let steady = bytes_at[&120][tier];
        for day in [200, 300, 400] {
            assert_eq!(bytes_at[&day][tier], steady, "tier {tier} at day {day}");
        }
    }
    let stats = engine.stats();
    let by_name: BTreeMap<_, _> = stats.tiers.iter().map(|t| (t.name.as_str(), t)).collect();
    // The 1d tier keeps 1825d in 73d files: after 400 days it holds every period since the
    // start, the closed ones compacted, plus the current one and one ahead.
    let now = clock.now();
    let period = 73 * DAY;
    let first = START - START.rem_euclid(period);
    let current = now - now.rem_euclid(period);
    let ahead = usize::from(current + period - now < period / 2);
    let held = ((current - first) / period + 1) as usize + ahead;
    assert_eq!(by_name["1d"].disk.files, held);
    assert_eq!(by_name["1d"].disk.compacted_files, held - 1 - ahead);
    assert_eq!(
        by_name["1m"].disk.files, 9,
        "eight 6h periods of the last 48h and the current one (at midnight the next one is \
         not due yet)"
    );
    assert_eq!(by_name["1m"].disk.periods_ahead, 0);
    assert!(by_name["1m"].disk.dropped >= 4 * 400 - 10);
    assert!(by_name["1m"].disk.compactions >= 4 * 400 - 2);
    assert_eq!(stats.on_demand_creations, 0, "maintenance always ran ahead");

    // Old minutes are gone, old hours are still there.
    let now = clock.now();
    let old = Query::new("load", now - 5 * DAY, now - 5 * DAY + 3600).tier("1m");
    assert!(engine
        .query(&old)
        .unwrap()
        .points
        .iter()
        .all(|p| p.1.is_none()));
    let hours = Query::new("load", now - 60 * DAY, now - 60 * DAY + 3600)
        .tier("1h")
        .display(Display::Count);
    assert_eq!(
        engine.query(&hours).unwrap().points,
        vec![(now - 60 * DAY, Some(60.0))]
    );
}

#[test]
fn queries_in_flight_over_dropped_files_stay_correct() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let engine = open_driven(dir.path(), &clock, TiersConfig::default());
    let id = engine.series("web.hits").unwrap();
    for hour in 1..=3 * 24 {
        live_hour(&engine, &clock, &[id], START + hour * 3600);
    }
    // Each minute holds one sample of 1.0 + (minute of the hour % 7). Now is START + 3d, so the 1m
    // tier's 48h window starts at START + 1d: read that day while it is dropped.
    let expected = |ts: Timestamp| 1.0 + (((ts - START) / 60 % 60) % 7) as f64;
    let first_day = Query::new("web.hits", START + DAY, START + 2 * DAY).tier("1m");
    let full = engine.query(&first_day).unwrap();
    assert!(full.points.iter().all(|p| p.1.is_some()));

    let engine = &engine;
    let first_day = &first_day;
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let mut saw_values = 0;
            let mut saw_gone = 0;
            for _ in 0..300 {
                let result = engine.query(first_day).expect("query never fails");
                assert_eq!(result.points.len(), 1440);
                for (ts, value) in result.points {
                    match value {
                        Some(v) => {
                            assert_eq!(v, expected(ts), "wrong value at {ts}");
                            saw_values += 1;
                        }
                        None => saw_gone += 1,
                    }
                }
            }
            (saw_values, saw_gone)
        });
        // Meanwhile the window rolls past the first day, a simulated hour at a time, its
        // files dropped under the reader.
        for hour in 3 * 24 + 1..=5 * 24 {
            live_hour(engine, &clock, &[id], START + hour * 3600);
        }
        let (values, gone) = reader.join().unwrap();
        assert!(values + gone > 0);
    });
    assert!(engine
        .query(first_day)
        .unwrap()
        .points
        .iter()
        .all(|p| p.1.is_none()));
    assert!(!listing(dir.path())["1m"]
        .contains(&tierdb::testing::storage::format::file_name(START + DAY, 0)));
}

#[test]
fn a_creation_cut_short_is_cleaned_up_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START + 3600));
    let engine = open_driven(dir.path(), &clock, TiersConfig::default());
    let id = engine.series("x").unwrap();
    engine
        .record_batch(&[Sample::new(id, START + 60, 4.0)])
        .unwrap();
    engine.close().unwrap();
    let before = listing(dir.path());
    // A crash between "written under a temporary name" and "renamed": the file of the
    // period after the next one half written.
    let temp = dir.path().join("tiers/1m").join(format!(
        "{}.tmp",
        tierdb::testing::storage::format::file_name(START + 12 * HOUR, 0)
    ));
    std::fs::write(&temp, b"TIERDBPF half a header").unwrap();

    let engine = open_driven(dir.path(), &clock, TiersConfig::default());
    assert!(!temp.exists(), "the temporary file is removed at open");
    assert_eq!(listing(dir.path()), before);
    let q = Query::new("x", START, START + 120)
        .tier("1m")
        .display(Display::Total);
    assert_eq!(
        engine.query(&q).unwrap().points,
        vec![(START, None), (START + 60, Some(4.0))]
    );
    // And the period whose creation was cut short is created properly when it comes.
    let cut_short = tierdb::testing::storage::format::file_name(START + 12 * HOUR, 0);
    assert!(!listing(dir.path())["1m"].contains(&cut_short));
    // Due three hours before it starts (the second half of the period before it).
    clock.set(START + 9 * HOUR + 60);
    engine.maintain().unwrap();
    assert!(listing(dir.path())["1m"].contains(&cut_short));
}

#[test]
fn retention_edits_apply_at_the_next_maintenance_run_without_rewriting() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let engine = open_driven(dir.path(), &clock, TiersConfig::default());
    let id = engine.series("x").unwrap();
    for hour in 1..=3 * 24 {
        live_hour(&engine, &clock, &[id], START + hour * 3600);
    }
    engine.close().unwrap();
    let minute_files = |d: &Path| listing(d)["1m"].clone();
    // Eight 6h periods of the last 48h (compacted but the last) and the current one; at
    // midnight the next one is not due yet (it comes in the second half of the current one).
    assert_eq!(minute_files(dir.path()).len(), 9);
    let modified = |d: &Path| {
        std::fs::read_dir(d.join("tiers/1m"))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let meta = e.metadata().unwrap();
                (e.file_name(), (meta.modified().unwrap(), meta.len()))
            })
            .collect::<BTreeMap<_, _>>()
    };
    let before = modified(dir.path());

    // Shorter: 1m keeps 24h, so the four periods of the day before yesterday go at the open's
    // maintenance run.
    let mut shorter = TiersConfig::default();
    shorter.tiers[0].retention = tierdb::Span::from_secs(DAY as u64);
    let engine = open_driven(dir.path(), &clock, shorter.clone());
    assert_eq!(minute_files(dir.path()).len(), 5);
    engine.close().unwrap();

    // Longer again: nothing comes back and nothing is rewritten; files are kept longer.
    let mut longer = TiersConfig::default();
    longer.tiers[0].retention = tierdb::Span::from_secs(4 * DAY as u64);
    let engine = open_driven(dir.path(), &clock, longer);
    assert_eq!(minute_files(dir.path()).len(), 5);
    for hour in 3 * 24 + 1..=4 * 24 {
        live_hour(&engine, &clock, &[id], START + hour * 3600);
    }
    assert_eq!(
        minute_files(dir.path()).len(),
        9,
        "a day (four periods) was added, none dropped"
    );
    let after = modified(dir.path());
    for (name, (time, _)) in &after {
        if let Some((old, _)) = before.get(name) {
            assert!(time >= old);
        }
    }
    engine.close().unwrap();
    // Retention edits never resize a file: hot files keep their preallocated length, and
    // compacted ones are never rewritten.
    for (name, (_, len)) in &before {
        if let Ok(meta) = std::fs::metadata(dir.path().join("tiers/1m").join(name)) {
            assert_eq!(meta.len(), *len, "{name:?}");
            if name.to_string_lossy().ends_with(".tdb") {
                assert_eq!(meta.len(), 4096 + 368 * 256 * 32);
            }
        }
    }
}

#[test]
fn three_months_down_catches_up_without_filling_the_gap_and_backfill_lands_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START + 3600));
    let engine = open_driven(dir.path(), &clock, TiersConfig::default());
    let id = engine.series("x").unwrap();
    engine
        .record_batch(&[Sample::new(id, START + 60, 1.0)])
        .unwrap();
    engine.close().unwrap();

    let later = START + 92 * DAY + 3600;
    clock.set(later);
    let engine = open_driven(dir.path(), &clock, TiersConfig::default());
    let files = listing(dir.path());
    let current = tierdb::time::align_down(later, tierdb::Span::from_secs(6 * HOUR as u64));
    assert_eq!(
        files["1m"],
        vec![tierdb::testing::storage::format::file_name(current, 0)],
        "the 1m tier holds only the current period (the next one is due in the second half \
         of it): nothing for the 91 days between"
    );
    let stats = engine.stats();
    assert!(stats.tiers[0].disk.dropped >= 1);
    assert_eq!(stats.on_demand_creations, 0);

    // Backfill a day a month ago: inside 5m/1h/1d retention, outside 1m's. Its 5m file is
    // created on demand and the samples land.
    let month_ago = later - 30 * DAY - 3600;
    let batch: Vec<Sample> = (0..60)
        .map(|m| Sample::new(id, month_ago + m * 60, 2.0))
        .collect();
    let report = engine.record_batch(&batch).unwrap();
    assert_eq!(report.accepted, 60);
    let stats = engine.stats();
    assert!(stats.on_demand_creations >= 1, "{stats:?}");
    let hour = tierdb::time::align_down(month_ago, tierdb::Span::from_secs(3600));
    let q = Query::new("x", hour, hour + 2 * 3600)
        .tier("1h")
        .display(Display::Total);
    let points = engine.query(&q).unwrap().points;
    assert_eq!(points.iter().filter_map(|p| p.1).sum::<f64>(), 120.0);
}
