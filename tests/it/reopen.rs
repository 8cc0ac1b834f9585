//! Closing and opening the same data directory gives identical answers, also when the tiers
//! configuration changed in the ways that are allowed (a tier added, a tier removed, a
//! retention changed), and a tier whose layout changed under an existing name is refused
//! with a message naming the file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tierdb::time::{align_down, format_ts};
use tierdb::{
    Bucket, Display, Engine, Error, ManualClock, Query, Sample, SeriesId, SeriesKey, Span,
    TiersConfig, Timestamp,
};

use crate::common::{open, tier, NOW};

const MINUTE: i64 = 60;
const HOUR: i64 = 3_600;
const DAY: i64 = 86_400;

/// Plain and tagged series; the last one's tags are given out of order on purpose.
const SERIES: [&str; 4] = [
    "cpu.load",
    "cpu.load{host=a}",
    "http.requests{host=web-1,dc=eu}",
    "disk.used{mount=/var,host=b}",
];

/// The series the snapshot shows, in canonical form.
const SHOWN: &str = "http.requests{dc=eu,host=web-1}";

/// What the history holds, for the snapshot description.
const HISTORY: &str = "every series gets one sample every 5 minutes from 2 days before \
                       00:00 UTC of NOW's day up to NOW, value ((i * 7 + s * 13) % 50) / 4 for \
                       sample i of series s; plus 24 hourly samples 40 days before NOW";

/// The value of sample `i` of series `s`: quarters, so every sum is exact.
/// Every (id, key) of the engine's registry, in id order.
fn all_keys(engine: &Engine) -> Vec<(SeriesId, SeriesKey)> {
    engine.registry().select(|id, key| Some((id, key.to_key())))
}

fn value(s: usize, i: i64) -> f64 {
    ((i * 7 + s as i64 * 13) % 50) as f64 / 4.0
}

/// Writes [`HISTORY`]: 1m data across three daily periods, 5m data across two weekly periods,
/// and 1h/1d data from another 30-day period.
fn write_history(engine: &Engine) {
    let start = align_down(NOW, Span::from_secs(DAY as u64)) - 2 * DAY;
    let old = NOW - 40 * DAY;
    let mut samples = Vec::new();
    for (s, text) in SERIES.iter().enumerate() {
        let id = engine.series(text).unwrap();
        let mut i = 0;
        let mut ts = start;
        while ts < NOW {
            samples.push(Sample::new(id, ts, value(s, i)));
            i += 1;
            ts += 5 * MINUTE;
        }
        for h in 0..24 {
            samples.push(Sample::new(id, old + h * HOUR, value(s, h)));
        }
    }
    let report = engine.record_batch(&samples).unwrap();
    assert_eq!(report.rejected_total(), 0, "{report:?}");
}

/// Per (series, tier name): every bucket of the range the default tiers keep at NOW, from the
/// start of the tier window to two periods past NOW. Tiers not in `engine`'s configuration
/// are skipped.
type Answers = BTreeMap<(String, String), Vec<(Timestamp, Bucket)>>;

fn answers(engine: &Engine) -> Answers {
    let mut all = Answers::new();
    for spec in TiersConfig::default().tiers {
        let Some(tier) = engine.config().tier_index(&spec.name) else {
            continue;
        };
        let from = align_down(NOW - spec.retention.secs() as i64, spec.period);
        let to = align_down(NOW, spec.period) + 2 * spec.period.secs() as i64;
        for text in SERIES {
            let id = engine.registry().lookup(text).unwrap().unwrap();
            let buckets = engine
                .reader()
                .read_buckets(id, tier, from, to, spec.resolution)
                .unwrap();
            all.insert((text.to_string(), spec.name.clone()), buckets);
        }
    }
    all
}

/// Samples folded into the answers of one tier, summed over series and buckets.
fn samples_in(answers: &Answers, tier: &str) -> u64 {
    answers
        .iter()
        .filter(|((_, t), _)| t == tier)
        .flat_map(|(_, buckets)| buckets.iter().map(|(_, b)| b.count))
        .sum()
}

/// A query's points.
type Points = Vec<(Timestamp, Option<f64>)>;

/// The last six hours of [`SHOWN`] in the 1h tier, every display, as a text table.
fn table(engine: &Engine) -> String {
    let from = NOW - 6 * HOUR;
    let columns: Vec<(Display, Points)> = [
        Display::Count,
        Display::Total,
        Display::Avg,
        Display::PerSec,
        Display::Min,
        Display::Max,
    ]
    .into_iter()
    .map(|display| {
        let result = engine
            .query(&Query::new(SHOWN, from, NOW).tier("1h").display(display))
            .unwrap();
        assert_eq!(result.series, SHOWN);
        assert_eq!(result.tier, "1h");
        (display, result.points)
    })
    .collect();
    let mut out = format!("{:<22}", "bucket");
    for (display, _) in &columns {
        write!(out, "{:>10}", display.as_str()).unwrap();
    }
    out.push('\n');
    for row in 0..columns[0].1.len() {
        write!(out, "{:<22}", format_ts(columns[0].1[row].0)).unwrap();
        for (display, points) in &columns {
            assert_eq!(points[row].0, columns[0].1[row].0);
            match points[row].1 {
                Some(v) if *display == Display::Count => write!(out, "{v:>10}").unwrap(),
                Some(v) => write!(out, "{v:>10.4}").unwrap(),
                None => write!(out, "{:>10}", "-").unwrap(),
            }
        }
        out.push('\n');
    }
    out
}

/// A directory holding [`HISTORY`] under the default tiers, closed, with its answers.
fn closed_history() -> (tempfile::TempDir, Arc<ManualClock>, Answers) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open(dir.path(), &clock, TiersConfig::default());
    write_history(&engine);
    let before = answers(&engine);
    engine.close().unwrap();
    (dir, clock, before)
}

/// Path, length and content of every file under `dir`, sorted by path.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn reopening_gives_identical_answers() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open(dir.path(), &clock, TiersConfig::default());
    write_history(&engine);
    let before = answers(&engine);
    let table_before = table(&engine);
    let registry_before = all_keys(&engine);
    let stats_before = engine.stats();
    engine.close().unwrap();
    assert!(
        !dir.path().join("OPEN").exists(),
        "close removes the marker"
    );

    let engine = open(dir.path(), &clock, TiersConfig::default());
    assert_eq!(all_keys(&engine), registry_before);
    let after = answers(&engine);
    assert_eq!(after.len(), before.len());
    for (key, buckets) in &before {
        assert!(after[key] == *buckets, "{key:?} differs after reopening");
    }
    // The history lands in every tier that keeps its time: 5-minute samples of the last
    // 2.5 days in every tier but 1m, whose window (48h in 6h periods) holds the last two
    // days; the 40-day-old ones only in 1h and 1d.
    let recent = (60 * HOUR / (5 * MINUTE)) as u64 * SERIES.len() as u64;
    let old = 24 * SERIES.len() as u64;
    assert_eq!(
        samples_in(&after, "1m"),
        (48 * HOUR / (5 * MINUTE)) as u64 * SERIES.len() as u64
    );
    assert_eq!(samples_in(&after, "5m"), recent);
    assert_eq!(samples_in(&after, "1h"), recent + old);
    assert_eq!(samples_in(&after, "1d"), recent + old);
    let stats = engine.stats();
    assert_eq!(stats.series, SERIES.len());
    assert_eq!(stats.accepted, 0, "counters are per process");
    assert!(stats.orphaned_tiers.is_empty());
    for (was, is) in stats_before.tiers.iter().zip(&stats.tiers) {
        assert_eq!(was.disk.files, is.disk.files, "tier {}", is.name);
        assert_eq!(
            is.disk.created_ahead, 0,
            "tier {}: nothing new to create",
            is.name
        );
    }

    let table_after = table(&engine);
    assert_eq!(table_after, table_before);
    insta::with_settings!({
        description => format!(
            "{SHOWN}, tier 1h, the 6 hours before NOW ({}), after close and reopen. \
             Input: {HISTORY}.",
            format_ts(NOW)
        ),
        omit_expression => true,
    }, {
        insta::assert_snapshot!("reopen_1h_table", table_after);
    });

    // Still writable, with the same ids.
    let id = engine.series("cpu.load{host=a}").unwrap();
    assert_eq!(id, registry_before[1].0);
    engine.record_batch(&[Sample::new(id, NOW, 1.0)]).unwrap();
    let now = engine
        .reader()
        .read_buckets(id, 0, NOW, NOW + MINUTE, Span::from_secs(60))
        .unwrap();
    assert_eq!(now[0].1.count, 1);
    engine.close().unwrap();
}

#[test]
fn an_added_tier_starts_empty_and_works() {
    let (dir, clock, before) = closed_history();
    let mut config = TiersConfig::default();
    // In the middle, so the indexes of the tiers after it shift.
    config.tiers.insert(
        1,
        tier("10m", 10 * MINUTE as u64, DAY as u64, 2 * DAY as u64),
    );
    let engine = open(dir.path(), &clock, config);
    assert_eq!(answers(&engine), before);

    let ten = engine.config().tier_index("10m").unwrap();
    let stats = engine.stats();
    // At noon the next day's file is not due yet: it comes in the second half of the day.
    assert_eq!(stats.tiers[ten].disk.files, 1, "the current period");
    assert_eq!(stats.tiers[ten].disk.created_ahead, 1);
    let from = NOW - 2 * DAY;
    for text in SERIES {
        let result = engine
            .query(
                &Query::new(text, from, NOW)
                    .tier("10m")
                    .display(Display::Count),
            )
            .unwrap();
        assert_eq!(result.points.len(), 2 * 24 * 6);
        assert!(
            result.points.iter().all(|(_, v)| v.is_none()),
            "{text}: the new tier holds no history"
        );
    }

    let id = engine.series(SERIES[0]).unwrap();
    let ts = NOW - 30 * MINUTE;
    engine
        .record_batch(&[Sample::new(id, ts, 4.0), Sample::new(id, ts + 60, 6.0)])
        .unwrap();
    let result = engine
        .query(&Query::new(SERIES[0], ts, ts + 600).tier("10m"))
        .unwrap();
    assert_eq!(result.points, vec![(ts, Some(5.0))]);
    // The old tiers saw the new samples too.
    let minute = engine
        .query(
            &Query::new(SERIES[0], ts, ts + 120)
                .tier("1m")
                .display(Display::Count),
        )
        .unwrap();
    assert_eq!(minute.points, vec![(ts, Some(2.0)), (ts + 60, Some(1.0))]);
    engine.close().unwrap();
}

#[test]
fn a_removed_tier_is_left_in_place_and_reported() {
    let (dir, clock, before) = closed_history();
    let day_dir = dir.path().join("tiers").join("1d");
    let day_files = files_under(&day_dir);
    assert!(!day_files.is_empty());

    let mut config = TiersConfig::default();
    config.tiers.retain(|t| t.name != "1d");
    let engine = open(dir.path(), &clock, config);
    assert_eq!(engine.stats().orphaned_tiers, vec!["1d".to_string()]);
    let mut expected = before.clone();
    expected.retain(|(_, tier), _| tier != "1d");
    assert_eq!(answers(&engine), expected);
    let err = engine
        .query(&Query::new(SERIES[0], NOW - DAY, NOW).tier("1d"))
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownTier(ref t) if t == "1d"),
        "{err}"
    );
    // Writes go on without the removed tier.
    let id = engine.series(SERIES[0]).unwrap();
    let report = engine.record_batch(&[Sample::new(id, NOW, 2.0)]).unwrap();
    assert_eq!(report.accepted, 1);
    engine.close().unwrap();
    assert_eq!(
        files_under(&day_dir),
        day_files,
        "the 1d files are untouched"
    );

    // Bringing the tier back finds its history as it was.
    let engine = open(dir.path(), &clock, TiersConfig::default());
    assert!(engine.stats().orphaned_tiers.is_empty());
    let after = answers(&engine);
    for text in SERIES {
        let key = (text.to_string(), "1d".to_string());
        assert!(after[&key] == before[&key], "{key:?}");
    }
    engine.close().unwrap();
}

#[test]
fn a_changed_retention_keeps_working() {
    let (dir, clock, before) = closed_history();
    // NOW is a 6h boundary, and the 1m tier's window moves in 6h periods: windows of whole
    // days of retention start at `edge` minus those days.
    let edge = align_down(NOW, Span::from_secs(6 * HOUR as u64));

    // Longer: 1m keeps three days. Everything answers as before, and a sample from three
    // days ago, which 1m refused to hold before, now lands there.
    let mut longer = TiersConfig::default();
    longer.tiers[0].retention = Span::from_secs(72 * HOUR as u64);
    let engine = open(dir.path(), &clock, longer);
    assert_eq!(answers(&engine), before);
    assert_eq!(engine.stats().tiers[0].window_start, edge - 3 * DAY);
    let id = engine.series(SERIES[0]).unwrap();
    let ts = edge - 3 * DAY + HOUR;
    engine.record_batch(&[Sample::new(id, ts, 8.0)]).unwrap();
    let result = engine
        .query(&Query::new(SERIES[0], ts, ts + MINUTE).tier("1m"))
        .unwrap();
    assert_eq!(result.points, vec![(ts, Some(8.0))]);
    // That sample is in the 5m, 1h and 1d answers now (and in 1m, before the range read).
    let before = answers(&engine);
    engine.close().unwrap();

    // Shorter: 1m keeps one day. Yesterday and edge answer as before; the days before are
    // outside the window, read empty, and their two files (the history's and the backfill's)
    // are dropped at open.
    let mut shorter = TiersConfig::default();
    shorter.tiers[0].retention = Span::from_secs(24 * HOUR as u64);
    let engine = open(dir.path(), &clock, shorter);
    let stats = engine.stats();
    assert_eq!(stats.tiers[0].window_start, edge - DAY);
    assert_eq!(
        stats.tiers[0].disk.oldest_period,
        Some(edge - DAY),
        "the days before were dropped at open"
    );
    // The four 6h periods of the history before the window, and the backfill's.
    assert_eq!(stats.tiers[0].disk.dropped, 5);
    let after = answers(&engine);
    for text in SERIES {
        let key = (text.to_string(), "1m".to_string());
        for ((ts, was), (ts2, is)) in before[&key].iter().zip(&after[&key]) {
            assert_eq!(ts, ts2);
            if *ts >= edge - DAY {
                assert_eq!(is, was, "{text} at {}", format_ts(*ts));
            } else {
                assert!(
                    is.is_empty(),
                    "{text} at {}: outside the window",
                    format_ts(*ts)
                );
            }
        }
        for tier in ["5m", "1h", "1d"] {
            let key = (text.to_string(), tier.to_string());
            assert!(after[&key] == before[&key], "{key:?}");
        }
    }
    let id = engine.series(SERIES[1]).unwrap();
    let report = engine
        .record_batch(&[
            Sample::new(id, NOW - 30 * MINUTE, 1.0),
            Sample::new(id, edge - DAY - MINUTE, 1.0),
        ])
        .unwrap();
    assert_eq!(
        report.accepted, 2,
        "the older sample still lands in 5m, 1h and 1d"
    );
    let five = engine
        .query(
            &Query::new(SERIES[1], edge - DAY - 5 * MINUTE, edge - DAY)
                .tier("5m")
                .display(Display::Count),
        )
        .unwrap();
    assert_eq!(five.points, vec![(edge - DAY - 5 * MINUTE, Some(2.0))]);
    let minute = engine
        .query(
            &Query::new(SERIES[1], edge - DAY - MINUTE, edge - DAY)
                .tier("1m")
                .display(Display::Count),
        )
        .unwrap();
    assert_eq!(minute.points, vec![(edge - DAY - MINUTE, None)]);
    engine.close().unwrap();
}

#[test]
fn a_changed_layout_under_an_existing_name_is_refused_naming_the_file() {
    let (dir, clock, before) = closed_history();
    let mut resolution = TiersConfig::default();
    resolution.tiers[0].resolution = Span::from_secs(120);
    let mut period = TiersConfig::default();
    period.tiers[1].period = Span::from_secs(7 * DAY as u64);
    let mut chunk = TiersConfig::default();
    chunk.engine.series_per_chunk = 512;
    let cases = [
        (
            "1m resolution 1m -> 2m",
            resolution,
            "1m",
            r#"tier "1m" resolution: 1m in the directory, 2m given"#,
        ),
        (
            "5m period 1d -> 7d",
            period,
            "5m",
            r#"tier "5m" period: 1d in the directory, 7d given"#,
        ),
        (
            "series_per_chunk 256 -> 512",
            chunk,
            "1m",
            "engine.series_per_chunk: 256 in the directory, 512 given",
        ),
    ];
    // The tiers the directory stored refuse each change first, spelling it out.
    let stored = dir.path().join("tiers.toml");
    let stored_text = std::fs::read_to_string(&stored).unwrap();
    // A period change is one the stored tiers take (tests/it/period_change.rs); without
    // them, the files cannot tell it from a mistake, and refuse it below.
    for (what, config, _, difference) in cases.iter().filter(|c| !c.0.contains("period")) {
        let err = Engine::builder(dir.path())
            .tiers(config.clone())
            .clock(clock.clone())
            .writer_threads(1)
            .open()
            .err()
            .unwrap_or_else(|| panic!("{what}: opened"));
        let Error::TiersConflict { path, .. } = &err else {
            panic!("{what}: expected TiersConflict, got {err:?}");
        };
        assert_eq!(path, &stored, "{what}");
        assert!(err.to_string().contains(difference), "{what}: {err}");
    }
    assert_eq!(std::fs::read_to_string(&stored).unwrap(), stored_text);
    // A directory from before tiers were stored: the period files refuse each change.
    std::fs::remove_file(&stored).unwrap();
    for (what, config, tier_dir, _) in cases {
        let result = Engine::builder(dir.path())
            .tiers(config)
            .clock(clock.clone())
            .writer_threads(1)
            .open();
        let err = match result {
            Ok(_) => panic!("{what}: opened"),
            Err(e) => e,
        };
        let Error::CorruptFile { path, reason } = &err else {
            panic!("{what}: expected CorruptFile, got {err:?}");
        };
        assert_eq!(
            path.parent().unwrap(),
            dir.path().join("tiers").join(tier_dir),
            "{what}: {err}"
        );
        assert!(path.is_file(), "{what}: {err}");
        let message = err.to_string();
        assert!(
            message.contains(&path.display().to_string()),
            "{what}: {message}"
        );
        assert!(message.contains("cannot change"), "{what}: {message}");
        // A changed period names the old default periods: what a directory created before
        // they changed meets when opened without its tiers.toml.
        assert_eq!(
            message.contains("default periods changed"),
            what.contains("period"),
            "{what}: {message}"
        );
        assert!(!reason.is_empty());
    }

    // Nothing was changed: the original configuration opens and answers as before.
    let engine = open(dir.path(), &clock, TiersConfig::default());
    assert_eq!(answers(&engine), before);
    engine.close().unwrap();
}

/// A read-only engine beside a writing one (as `tierdb query` beside `tierdb serve`): no lock
/// taken, nothing on disk changed, live values seen, writes refused.
#[test]
fn a_read_only_engine_reads_beside_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let writer = open(dir.path(), &clock, TiersConfig::default());
    let id = writer.series("live{host=a}").unwrap();
    let minute = NOW - NOW % 60 - 60;
    writer
        .record_batch(&[tierdb::Sample::new(id, minute, 2.0)])
        .unwrap();
    let listing = |dir: &Path| -> Vec<(PathBuf, u64)> {
        let mut files: Vec<(PathBuf, u64)> = walk(dir)
            .into_iter()
            .map(|p| {
                let len = std::fs::metadata(&p).unwrap().len();
                (p, len)
            })
            .collect();
        files.sort();
        files
    };
    let before = listing(dir.path());

    let reader = tierdb::Engine::builder(dir.path())
        .clock(clock.clone())
        .read_only()
        .open()
        .unwrap();
    assert!(reader.is_read_only());
    let q = tierdb::Query::new("live{host=a}", minute, minute + 60)
        .tier("1m")
        .display(tierdb::Display::Total);
    assert_eq!(reader.query(&q).unwrap().points, vec![(minute, Some(2.0))]);
    // The writer keeps writing; the reader sees it through the shared mapping.
    writer
        .record_batch(&[tierdb::Sample::new(id, minute + 5, 3.0)])
        .unwrap();
    assert_eq!(reader.query(&q).unwrap().points, vec![(minute, Some(5.0))]);
    assert!(matches!(
        reader.record_batch(&[tierdb::Sample::new(id, minute, 1.0)]),
        Err(tierdb::Error::ReadOnly(_))
    ));
    assert!(matches!(
        reader.series("new.series"),
        Err(tierdb::Error::ReadOnly(_))
    ));
    reader.close().unwrap();
    assert_eq!(listing(dir.path()), before, "the reader changed nothing");
    writer.close().unwrap();
    let missing = tierdb::Engine::builder(dir.path().join("nope"))
        .read_only()
        .open();
    assert!(missing.err().unwrap().to_string().contains("nope"));
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Tiers given in another order are stored in that order: the layout fingerprint the
/// journals and `writers.state` record follows the order, so an open without tiers after a
/// crash must get the order the crashed process wrote under. (No field differs, so the
/// stored file was left as it was.)
#[test]
fn reordered_tiers_are_stored_in_their_new_order() {
    let (dir, clock, before) = closed_history();
    let mut config = TiersConfig::default();
    config.tiers.reverse();
    let engine = open(dir.path(), &clock, config.clone());
    assert_eq!(answers(&engine), before);
    engine.close().unwrap();
    let stored = tierdb::testing::storage::stored_tiers::read_stored(dir.path())
        .unwrap()
        .expect("stored tiers");
    let names = |c: &TiersConfig| c.tiers.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&stored), names(&config));
    assert_eq!(stored.layout_fingerprint(), config.layout_fingerprint());
}
