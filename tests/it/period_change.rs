//! A tier's period change on an existing data directory (issue #55, docs/file-format.md
//! "Period changes"): a directory written with the shipped periods (1m/6h, 5m/1d, 1h/10d,
//! 1d/73d) is reopened with shorter ones (1m/1h, 5m/6h, 1h/2d, 1d/16d). Before, the open
//! was refused (`TiersConfig` conflict); now every stored bucket reads back as before, reads
//! across the boundary (a query, an aggregate, `/render`, PromQL) see both sides, new samples
//! land in new-period files, late ones before the boundary in the old files, old files expire
//! by their own period, both kinds of files compact, and a kill -9 around the switch loses
//! nothing acknowledged.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use tierdb::testing::storage::format::{file_name, PeriodMeta, HEADER_LEN};
use tierdb::{
    AggregateQuery, Aggregation, Bucket, Clock, Display, Engine, ManualClock, Query, Sample,
    Selector, Span, TiersConfig, Timestamp,
};

use crate::common::{open_driven, scratch_dir, NOW};
use crate::support::process::run_child_until_it_kills_itself;

const MINUTE: i64 = 60;
const HOUR: i64 = 3_600;
const DAY: i64 = 24 * HOUR;
const SERIES: usize = 5;
/// Set to the data directory, the kill test runs as the child that gets killed.
const CHILD_DIR: &str = "TIERDB_IT_PERIOD_CHANGE_CHILD_DIR";

/// The shipped periods' directory is reopened with these: 1m/1h, 5m/6h, 1h/2d, 1d/16d.
fn shorter() -> TiersConfig {
    let mut config = TiersConfig::default();
    let periods = [HOUR, 6 * HOUR, 2 * DAY, 16 * DAY];
    for (tier, period) in config.tiers.iter_mut().zip(periods) {
        tier.period = Span::from_secs(period as u64);
    }
    config
}

/// The shipped periods, written out (not `TiersConfig::default()`, which may change).
fn shipped() -> TiersConfig {
    let mut config = TiersConfig::default();
    let periods = [6 * HOUR, DAY, 10 * DAY, 73 * DAY];
    for (tier, period) in config.tiers.iter_mut().zip(periods) {
        tier.period = Span::from_secs(period as u64);
    }
    config
}

fn name(s: usize) -> String {
    format!("s{s}")
}

/// Series `s`'s value at `ts`.
fn value(s: usize, ts: Timestamp) -> f64 {
    (s * 100) as f64 + (ts / MINUTE).rem_euclid(97) as f64
}

/// One sample a minute of every series over `[from, to)`, the clock moved along so each is
/// accepted; returns how many.
fn write_minutes(engine: &Engine, clock: &ManualClock, from: Timestamp, to: Timestamp) -> u64 {
    let ids: Vec<_> = (0..SERIES)
        .map(|s| engine.series(&name(s)).unwrap())
        .collect();
    let mut written = 0;
    let mut hour = from;
    while hour < to {
        let end = (hour + HOUR).min(to);
        clock.set(clock.now().max(end - 1));
        let samples: Vec<Sample> = (hour..end)
            .step_by(MINUTE as usize)
            .flat_map(|ts| {
                let ids = &ids;
                (0..SERIES).map(move |s| Sample::new(ids[s], ts, value(s, ts)))
            })
            .collect();
        let report = engine.record_batch(&samples).unwrap();
        assert_eq!(report.accepted, samples.len() as u64, "{report:?}");
        written += report.accepted;
        hour = end;
    }
    written
}

/// Every bucket of every series in every tier, from 60 days back to two days ahead of `NOW`.
type Stored = Vec<(String, String, Vec<(Timestamp, Bucket)>)>;

fn stored(engine: &Engine) -> Stored {
    let mut all = Vec::new();
    for (tier, spec) in engine.config().tiers.iter().enumerate() {
        for s in 0..SERIES {
            let id = engine.registry().lookup(&name(s)).unwrap().unwrap();
            let buckets = engine
                .reader()
                .read_buckets(id, tier, NOW - 60 * DAY, NOW + 2 * DAY, spec.resolution)
                .unwrap();
            all.push((spec.name.clone(), name(s), buckets));
        }
    }
    all
}

/// The history the old periods hold: a minute sample of each series for the 30 hours before
/// `NOW`, and hourly ones for a day 40 days back (only the 1h and 1d tiers keep those).
fn write_history(engine: &Engine, clock: &ManualClock) {
    let ids: Vec<_> = (0..SERIES)
        .map(|s| engine.series(&name(s)).unwrap())
        .collect();
    let old: Vec<Sample> = (0..24)
        .flat_map(|h| {
            let ts = NOW - 40 * DAY + h * HOUR;
            let ids = &ids;
            (0..SERIES).map(move |s| Sample::new(ids[s], ts, value(s, ts)))
        })
        .collect();
    assert_eq!(
        engine.record_batch(&old).unwrap().accepted,
        old.len() as u64
    );
    write_minutes(engine, clock, NOW - 30 * HOUR, NOW);
}

/// The file names of a tier's directory, and the period each hot one's header records.
fn files(dir: &Path, tier: &str) -> BTreeSet<(String, Option<i64>)> {
    let tier_dir = dir.join("tiers").join(tier);
    std::fs::read_dir(&tier_dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            let period = name.ends_with(".tdb").then(|| {
                let bytes = std::fs::read(&path).unwrap();
                let meta = PeriodMeta::decode(&bytes[..HEADER_LEN], &path).unwrap();
                meta.period.secs() as i64
            });
            (name, period)
        })
        .collect()
}

/// Whether the tier holds the period starting at `start` (chunk 0), and in which form.
fn form(dir: &Path, tier: &str, start: Timestamp) -> Option<&'static str> {
    let hot = dir.join("tiers").join(tier).join(file_name(start, 0));
    match (hot.exists(), hot.with_extension("tdc").exists()) {
        (true, _) => Some("hot"),
        (false, true) => Some("compacted"),
        (false, false) => None,
    }
}

/// A directory holding [`write_history`] under the shipped periods, closed at `NOW`; with
/// what every tier answers then.
fn old_directory() -> (tempfile::TempDir, Arc<ManualClock>, Stored) {
    let dir = scratch_dir();
    let clock = Arc::new(ManualClock::new(NOW - 30 * HOUR));
    let engine = open_driven(dir.path(), &clock, shipped());
    write_history(&engine, &clock);
    clock.set(NOW);
    engine.maintain().unwrap();
    let before = stored(&engine);
    engine.close().unwrap();
    (dir, clock, before)
}

/// Where the 1m tier's 6h files end and its 1h files start when the directory is reopened
/// at `NOW + 1h`: the end of the 6h period holding the latest sample the old process could
/// have taken (`NOW + 1h` + the 1h future bound), 18:00Z.
const BOUNDARY: Timestamp = NOW + 6 * HOUR;

#[test]
fn a_directory_written_with_the_shipped_periods_takes_shorter_ones() {
    let (dir, clock, before) = old_directory();
    assert_eq!(NOW % (6 * HOUR), 0, "NOW is 12:00Z, a 6h period start");
    clock.set(NOW + HOUR);
    let engine = open_driven(dir.path(), &clock, shorter());

    // Recorded in the directory: each tier's old period and where it ends.
    let recorded = tierdb::testing::storage::stored_tiers::read_stored(dir.path())
        .unwrap()
        .unwrap();
    let minute = &recorded.tiers[0];
    assert_eq!(minute.period, Span::from_secs(HOUR as u64));
    assert_eq!(minute.earlier_periods.len(), 1);
    assert_eq!(minute.earlier_periods[0].until, BOUNDARY);
    assert_eq!(
        minute.earlier_periods[0].period,
        Span::from_secs(6 * HOUR as u64)
    );
    for tier in &recorded.tiers {
        assert_eq!(tier.earlier_periods.len(), 1, "{}", tier.name);
        let until = tier.earlier_periods[0].until;
        let old = tier.earlier_periods[0].period.secs() as i64;
        assert_eq!(until % old, 0, "{}: on the old grid", tier.name);
        assert!(
            until > NOW + 2 * HOUR,
            "{}: after every sample taken",
            tier.name
        );
    }

    // Every stored bucket reads back as before, in every tier.
    assert_eq!(stored(&engine), before);

    // New samples up to 20:00Z: until the boundary into the 6h file, then 1h files.
    write_minutes(&engine, &clock, NOW, NOW + 8 * HOUR);
    engine.maintain().unwrap();
    let six_hours = Some(6 * HOUR);
    let hour = Some(HOUR);
    let now_files = files(dir.path(), "1m");
    assert!(
        now_files.contains(&(file_name(NOW, 0), six_hours)),
        "{now_files:?}"
    );
    for h in 0..2 {
        let start = BOUNDARY + h * HOUR;
        assert!(
            now_files.contains(&(file_name(start, 0), hour)),
            "{now_files:?}"
        );
    }
    // No 1h file before the boundary, no 6h file after it.
    for (name, period) in &now_files {
        let start =
            tierdb::testing::storage::format::parse_file_name(&name.replace(".tdc", ".tdb"))
                .unwrap()
                .0;
        match start < BOUNDARY {
            true => assert!(period.is_none_or(|p| p == 6 * HOUR), "{name}"),
            false => assert!(period.is_none_or(|p| p == HOUR), "{name}"),
        }
    }

    // A query across the boundary, minute by minute, and an aggregate of every series.
    let (from, to) = (NOW - 2 * HOUR, NOW + 8 * HOUR);
    for s in 0..SERIES {
        let query = Query::new(name(s), from, to)
            .tier("1m")
            .display(Display::Avg);
        let points = engine.query(&query).unwrap().points;
        assert_eq!(points.len(), 600);
        for (ts, got) in points {
            assert_eq!(got, Some(value(s, ts)), "s{s} at {ts}");
        }
    }
    let sum = |ts: Timestamp| (0..SERIES).map(|s| value(s, ts)).sum::<f64>();
    let all = AggregateQuery::new(Selector::new("s*"), Aggregation::Sum, from, to).tier("1m");
    let result = engine.aggregate(&all).unwrap();
    assert_eq!(result.groups[0].series, SERIES);
    assert_eq!(result.groups[0].points.len(), 600);
    for (ts, got) in &result.groups[0].points {
        assert_eq!(*got, Some(sum(*ts)), "sum at {ts}");
    }
    // The 5m tier: its boundary is the end of the day (00:00Z), its 6h files after it; a
    // 5m bucket holds five minutes.
    let five = AggregateQuery::new(Selector::new("s0"), Aggregation::Sum, from, to)
        .tier("5m")
        .display(Display::Count);
    for (ts, got) in &engine.aggregate(&five).unwrap().groups[0].points {
        assert_eq!(*got, Some(5.0), "5m count at {ts}");
    }

    // /render and PromQL across the boundary.
    let source = tierdb::render::StoredSource::new(engine.reader());
    let request = tierdb::render::RenderRequest {
        targets: vec!["sumSeries(s*)".into()],
        from,
        until: to - 1,
        max_data_points: None,
        default_max_points: 1_500,
        x_files_factor: 0.0,
        now: clock.now(),
    };
    let rendered =
        tierdb::render::render(&source, &request, &tierdb::ReadBudget::unlimited()).unwrap();
    assert_eq!(rendered[0].step, 60);
    // graphite-web's first point is the step after `from`.
    let points: Vec<_> = rendered[0].datapoints.iter().filter(|p| p.1 < to).collect();
    assert_eq!(points.len(), 599);
    for (got, ts) in points {
        assert_eq!(*got, Some(sum(*ts)), "render at {ts}");
    }
    let source = tierdb::promql::StoredSource::new(engine.reader());
    let limits = tierdb::promql::QueryLimits {
        budget: Arc::new(tierdb::ReadBudget::default()),
        max_series: tierdb::promql::DEFAULT_MAX_SERIES,
        deadline: std::time::Instant::now() + std::time::Duration::from_secs(60),
    };
    // Instants from 17:00Z to 19:00Z: each the last minute's sample of each series.
    let query = tierdb::promql::Query {
        text: r#"sum({__name__=~"s[0-9]"})"#.to_owned(),
        start_ms: (BOUNDARY - HOUR) * 1000,
        end_ms: (BOUNDARY + HOUR) * 1000,
        step_ms: Some(60_000),
    };
    let answer = tierdb::promql::evaluate(&source, &query, &limits).unwrap();
    let data: serde_json::Value = serde_json::from_str(&answer.data_text()).unwrap();
    let values = data["result"][0]["values"].as_array().unwrap();
    assert_eq!(values.len(), 121, "{data}");
    for v in values {
        let at = v[0].as_f64().unwrap() as i64;
        let want = sum(at - MINUTE);
        let got: f64 = v[1].as_str().unwrap().parse().unwrap();
        assert!(
            got == want || got == sum(at),
            "promql at {at}: {got}, want {want}"
        );
    }

    // A late sample before the boundary goes into the old 6h file, not a new 1h one.
    let late = NOW + 2 * HOUR + 30;
    let id = engine.series("s0").unwrap();
    let report = engine.record_batch(&[Sample::new(id, late, 1.0)]).unwrap();
    assert_eq!(report.accepted, 1);
    let query = Query::new("s0", late - 30, late + 30)
        .tier("1m")
        .display(Display::Count);
    assert_eq!(
        engine.query(&query).unwrap().points,
        [(late - 30, Some(2.0))]
    );
    let after_late = files(dir.path(), "1m");
    assert!(!after_late
        .iter()
        .any(|(name, _)| name.starts_with(&file_name(NOW + 2 * HOUR, 0)[..16])));
    assert_eq!(form(dir.path(), "1m", NOW + 2 * HOUR), None);
    engine.close().unwrap();

    // Reopened without tiers (the stored ones, ranges and all) and with the shorter ones
    // again: the same answers, nothing recorded anew.
    let stored_text = std::fs::read_to_string(dir.path().join("tiers.toml")).unwrap();
    let plain = Engine::builder(dir.path())
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .unwrap();
    let answers = stored(&plain);
    plain.close().unwrap();
    let engine = open_driven(dir.path(), &clock, shorter());
    assert_eq!(stored(&engine), answers);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("tiers.toml")).unwrap(),
        stored_text
    );

    // Compaction of both kinds: the old 6h file and a new 1h one, once closed and quiet;
    // they read the same compacted.
    clock.set(NOW + 8 * HOUR + 11 * MINUTE);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(form(dir.path(), "1m", NOW), Some("compacted"));
    assert_eq!(form(dir.path(), "1m", BOUNDARY), Some("compacted"));
    assert_eq!(form(dir.path(), "1m", BOUNDARY + HOUR), Some("compacted"));
    assert_eq!(stored(&engine), answers);
    // A late sample into the compacted old file makes it hot again, a 6h file.
    let late = NOW + 3 * HOUR;
    engine.record_batch(&[Sample::new(id, late, 1.0)]).unwrap();
    assert_eq!(form(dir.path(), "1m", NOW), Some("hot"));
    assert!(files(dir.path(), "1m").contains(&(file_name(NOW, 0), Some(6 * HOUR))));

    // Expiry by each file's own period: the 6h file holding 12:00-18:00Z leaves once the
    // 48h window starts at 18:00Z, the 1h files one an hour after.
    clock.set(BOUNDARY + 48 * HOUR - 1);
    engine.maintain().unwrap();
    assert_eq!(form(dir.path(), "1m", NOW), Some("hot"));
    assert_eq!(form(dir.path(), "1m", BOUNDARY), Some("compacted"));
    clock.set(BOUNDARY + 48 * HOUR);
    engine.maintain().unwrap();
    assert_eq!(form(dir.path(), "1m", NOW), None);
    assert_eq!(form(dir.path(), "1m", BOUNDARY), Some("compacted"));
    clock.set(BOUNDARY + 49 * HOUR);
    engine.maintain().unwrap();
    assert_eq!(form(dir.path(), "1m", BOUNDARY), None);
    assert_eq!(form(dir.path(), "1m", BOUNDARY + HOUR), Some("compacted"));
    engine.close().unwrap();
}

/// The child of the kill test: opens the old directory with the shorter periods, writes
/// across the boundary and kills itself as `kill -9` would, right after the write returned.
fn child_writes_and_dies(dir: &Path) -> ! {
    let clock = Arc::new(ManualClock::new(NOW + HOUR));
    let engine = open_driven(dir, &clock, shorter());
    write_minutes(&engine, &clock, NOW, NOW + 8 * HOUR);
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    std::process::abort()
}

#[test]
fn a_kill_after_the_switch_loses_nothing_acknowledged() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child_writes_and_dies(Path::new(&dir));
    }
    let (dir, clock, before) = old_directory();
    run_child_until_it_kills_itself(
        "period_change::a_kill_after_the_switch_loses_nothing_acknowledged",
        &[(CHILD_DIR, dir.path().as_os_str())],
    );
    // Reopened with the shorter periods: the boundary the child recorded, the old buckets
    // and everything the child's writes were acknowledged for.
    clock.set(NOW + 8 * HOUR);
    let engine = open_driven(dir.path(), &clock, shorter());
    let recorded = tierdb::testing::storage::stored_tiers::read_stored(dir.path())
        .unwrap()
        .unwrap();
    assert_eq!(recorded.tiers[0].earlier_periods[0].until, BOUNDARY);
    let after = stored(&engine);
    for ((tier, series, old), (_, _, new)) in before.iter().zip(&after) {
        let spec = engine
            .config()
            .tiers
            .iter()
            .find(|t| &t.name == tier)
            .unwrap();
        let resolution = spec.resolution.secs() as i64;
        for (ts, bucket) in old {
            // Buckets the child's writes (from NOW on) did not add to.
            if *ts < NOW - 2 * DAY || *ts + resolution > NOW {
                continue;
            }
            let found = new.iter().find(|(t, _)| t == ts);
            assert_eq!(found.map(|f| f.1), Some(*bucket), "{tier} {series} at {ts}");
        }
    }
    for s in 0..SERIES {
        let query = Query::new(name(s), NOW, NOW + 8 * HOUR)
            .tier("1m")
            .display(Display::Avg);
        for (ts, got) in engine.query(&query).unwrap().points {
            assert_eq!(got, Some(value(s, ts)), "s{s} at {ts}");
        }
    }
    assert!(files(dir.path(), "1m").contains(&(file_name(BOUNDARY + HOUR, 0), Some(HOUR))));
    engine.close().unwrap();
}

/// A read-only open (`tierdb query` beside `tierdb serve`) given a period the directory has
/// not recorded is refused, as a writer may still be cutting files with the old one; once a
/// writable open recorded it, both read-only opens work. A second change, back to the
/// shipped periods, records a second range after the first and reads everything as before.
#[test]
fn a_read_only_open_waits_for_the_record_and_a_second_change_adds_a_range() {
    let (dir, clock, before) = old_directory();
    clock.set(NOW + HOUR);
    let read_only = |tiers: Option<TiersConfig>| {
        let builder = Engine::builder(dir.path()).clock(clock.clone()).read_only();
        match tiers {
            Some(tiers) => builder.tiers(tiers).open(),
            None => builder.open(),
        }
    };
    let err = read_only(Some(shorter())).err().expect("refused");
    assert!(
        matches!(err, tierdb::Error::TiersConflict { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("recorded by the first writable open"),
        "{err}"
    );

    let engine = open_driven(dir.path(), &clock, shorter());
    write_minutes(&engine, &clock, NOW, NOW + 8 * HOUR);
    let answers = stored(&engine);
    engine.close().unwrap();
    for tiers in [None, Some(shorter())] {
        let reader = read_only(tiers).unwrap();
        assert_eq!(stored(&reader), answers);
    }

    // Back to the shipped periods a day later: a second range, from the end of the newest
    // 1h file on.
    clock.set(NOW + DAY);
    let answers = stored(&read_only(None).unwrap());
    let engine = open_driven(dir.path(), &clock, shipped());
    let recorded = tierdb::testing::storage::stored_tiers::read_stored(dir.path())
        .unwrap()
        .unwrap();
    let minute = &recorded.tiers[0];
    assert_eq!(minute.period, Span::from_secs(6 * HOUR as u64));
    assert_eq!(
        minute.earlier_periods.len(),
        2,
        "{:?}",
        minute.earlier_periods
    );
    assert_eq!(minute.earlier_periods[0].until, BOUNDARY);
    assert_eq!(
        minute.earlier_periods[1].period,
        Span::from_secs(HOUR as u64)
    );
    let second = minute.earlier_periods[1].until;
    assert!(second > NOW + DAY + HOUR && second % HOUR == 0, "{second}");
    assert!(
        stored(&engine) == answers,
        "the second change reads as before"
    );
    // The history written before the first change is all there.
    for ((tier, series, old), (_, _, now)) in before.iter().zip(&answers) {
        for (ts, bucket) in old.iter().filter(|(ts, _)| *ts >= NOW - 20 * HOUR) {
            let resolution = if tier == "1d" { DAY } else { 0 };
            if *ts + resolution > NOW || bucket.count == 0 {
                continue;
            }
            let found = now.iter().find(|(t, _)| t == ts).map(|f| f.1);
            assert!(found == Some(*bucket), "{tier} {series} at {ts}");
        }
    }
    // New samples after the second boundary land in a 6h file on the grid that starts there.
    write_minutes(&engine, &clock, second - 10 * MINUTE, second + 10 * MINUTE);
    let held = files(dir.path(), "1m");
    assert!(
        held.contains(&(file_name(second, 0), Some(6 * HOUR))),
        "{held:?}"
    );
    assert!(
        held.contains(&(file_name(second - HOUR, 0), Some(HOUR))),
        "{held:?}"
    );
    let query = Query::new("s1", second - 10 * MINUTE, second + 10 * MINUTE)
        .tier("1m")
        .display(Display::Avg);
    for (ts, got) in engine.query(&query).unwrap().points {
        assert_eq!(got, Some(value(1, ts)), "at {ts}");
    }
    // That file, off the epoch's 6h grid, compacts once closed and reads the same.
    let points = engine.query(&query).unwrap().points;
    clock.set(second + 6 * HOUR + 11 * MINUTE);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(form(dir.path(), "1m", second), Some("compacted"));
    assert_eq!(engine.query(&query).unwrap().points, points);
    engine.close().unwrap();
}
