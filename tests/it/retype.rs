//! Retyping series (#54, "kinds fixed per series"): `tierdb retype SELECTOR --kind
//! counter|gauge` converts a series' stored buckets where every one is exact, so a gauge
//! that should have been a counter reads as the counter ingest would have made of the same
//! samples, in every tier; it refuses a series whole, naming the earliest bucket that is not
//! exact and why; `--dry-run` changes nothing; the kind record changes with the buckets (a
//! later sample is folded by the new kind, after a restart too); a kill -9 after the commit
//! is finished by the next open.

use std::path::Path;
use std::sync::Arc;

use tierdb::testing::fault::KILL_MID_RETYPE;
use tierdb::testing::intents;
use tierdb::{
    Bucket, Engine, ManualClock, RetypeOutcome, Sample, SeriesId, SeriesKind, TiersConfig,
    Timestamp,
};

use crate::common::{open_driven, NOW};
use crate::support::process::{run_child_until_it_kills_itself, run_tierdb};

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

/// The default tiers, with series named `ref.*` counters by rule: the reference a retyped
/// gauge must equal.
fn config() -> TiersConfig {
    let mut config = TiersConfig::default();
    config.counters.names = vec!["ref.*".to_owned()];
    config
}

/// A request counter scraped once a minute, 30 s past each minute, for two hours before
/// [`NOW`], with a reset (a restart of the server it counts) after 70 minutes.
fn scrapes() -> Vec<(Timestamp, f64)> {
    let start = NOW - 2 * HOUR;
    (0..120)
        .map(|m| {
            let ts = start + m * MINUTE + 30;
            let value = match m {
                0..70 => 1000.0 + 7.5 * m as f64,
                _ => 3.0 * (m - 69) as f64,
            };
            (ts, value)
        })
        .collect()
}

/// Every bucket of `id` in every tier from two days before [`NOW`] to a day after, as
/// (tier, start, bucket), empty ones left out.
fn buckets(engine: &Engine, id: SeriesId) -> Vec<(usize, Timestamp, Bucket)> {
    let reader = engine.reader();
    let mut all = Vec::new();
    for (tier, spec) in engine.config().tiers.iter().enumerate() {
        let from = NOW - 2 * DAY;
        let from = from - from.rem_euclid(spec.resolution.secs() as i64);
        let got = reader
            .read_buckets(id, tier, from, NOW + DAY, spec.resolution)
            .expect("read");
        all.extend(
            got.into_iter()
                .filter(|(_, b)| !b.is_empty())
                .map(|(ts, b)| (tier, ts, b)),
        );
    }
    all
}

/// Writes `values` to `id`.
fn write(engine: &Engine, id: SeriesId, values: &[(Timestamp, f64)]) {
    let samples: Vec<Sample> = values
        .iter()
        .map(|&(ts, v)| Sample::new(id, ts, v))
        .collect();
    let report = engine.record_batch(&samples).unwrap();
    assert_eq!(report.accepted, samples.len() as u64, "{report:?}");
}

#[test]
fn a_gauge_retyped_as_a_counter_equals_the_counter_ingest_makes_of_the_same_samples() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open_driven(dir.path(), &clock, config());
    let gauge = engine.series("web.requests").unwrap();
    let reference = engine.series("ref.requests").unwrap();
    assert_eq!(engine.series_kind(gauge), SeriesKind::Gauge);
    assert_eq!(engine.series_kind(reference), SeriesKind::Counter);
    write(&engine, gauge, &scrapes());
    write(&engine, reference, &scrapes());
    let as_gauge = buckets(&engine, gauge);
    assert_ne!(as_gauge, buckets(&engine, reference));

    // A dry run says what it would do and changes nothing.
    let report = engine.retype(&[gauge], SeriesKind::Counter, true).unwrap();
    assert_eq!(report.len(), 1);
    let RetypeOutcome::Converted {
        buckets: per_tier,
        notes,
    } = &report[0].outcome
    else {
        panic!("{report:?}")
    };
    assert_eq!(report[0].from, SeriesKind::Gauge);
    // Every minute changes but the one after the reset, whose increase is its value (the
    // first minute too: its only sample becomes the baseline, the bucket empty); every 5m,
    // 1h and 1d bucket changes.
    let rewritten: Vec<(&str, usize)> = per_tier.iter().map(|(t, n)| (t.as_str(), *n)).collect();
    assert_eq!(rewritten, [("1m", 119), ("5m", 24), ("1h", 2), ("1d", 1)]);
    assert!(notes[0].contains("baseline"), "{notes:?}");
    assert_eq!(
        buckets(&engine, gauge),
        as_gauge,
        "the dry run changed nothing"
    );
    assert_eq!(engine.series_kind(gauge), SeriesKind::Gauge);

    let report = engine.retype(&[gauge], SeriesKind::Counter, false).unwrap();
    assert!(matches!(report[0].outcome, RetypeOutcome::Converted { .. }));
    assert_eq!(engine.series_kind(gauge), SeriesKind::Counter);
    let converted = buckets(&engine, gauge);
    assert!(converted.iter().all(|(_, _, b)| b.last.is_some()));
    assert_eq!(
        converted,
        buckets(&engine, reference),
        "every tier holds what the counter made of the same samples, latest samples included"
    );
    // A second retype has nothing to do.
    let again = engine.retype(&[gauge], SeriesKind::Counter, false).unwrap();
    assert_eq!(again[0].outcome, RetypeOutcome::Already);

    // A later sample is folded as a counter's: its increase since the last scrape, and a
    // sample not newer than that is refused as a counter's is.
    let later = [(NOW + 30, 400.0)];
    write(&engine, gauge, &later);
    write(&engine, reference, &later);
    assert_eq!(buckets(&engine, gauge), buckets(&engine, reference));
    let stale = engine
        .record_batch(&[Sample::new(gauge, NOW - 10, 1.0)])
        .unwrap();
    assert_eq!(stale.accepted, 0, "counter_out_of_order: {stale:?}");
    engine.close().unwrap();

    // The kind is recorded: after a restart it is still a counter, and goes on as one.
    let engine = open_driven(dir.path(), &clock, config());
    assert_eq!(engine.series_kind(gauge), SeriesKind::Counter);
    let next = [(NOW + 90, 430.0)];
    write(&engine, gauge, &next);
    write(&engine, reference, &next);
    assert_eq!(buckets(&engine, gauge), buckets(&engine, reference));
}

#[test]
fn a_counter_retyped_as_a_gauge_holds_its_raw_values_but_its_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open_driven(dir.path(), &clock, config());
    let counter = engine.series("ref.temperature").unwrap();
    let reference = engine.series("web.temperature").unwrap();
    write(&engine, counter, &scrapes());
    // A counter stores nothing for its first sample: the gauge begins at the second.
    write(&engine, reference, &scrapes()[1..]);
    let report = engine.retype(&[counter], SeriesKind::Gauge, false).unwrap();
    let RetypeOutcome::Converted { notes, .. } = &report[0].outcome else {
        panic!("{report:?}")
    };
    assert!(notes[0].contains("second sample"), "{notes:?}");
    assert_eq!(engine.series_kind(counter), SeriesKind::Gauge);
    assert_eq!(buckets(&engine, counter), buckets(&engine, reference));
    // A later sample is stored as it comes, whenever it was taken.
    let later = [(NOW + 30, 2.0), (NOW - 15, 1.0)];
    write(&engine, counter, &later);
    write(&engine, reference, &later);
    assert_eq!(buckets(&engine, counter), buckets(&engine, reference));
}

#[test]
fn a_series_whose_old_buckets_hold_several_samples_is_refused_whole_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open_driven(dir.path(), &clock, config());
    let gauge = engine.series("web.requests").unwrap();
    // Three days ago, older than the 1m tier's two days: only 5m, 1h and 1d hold it, each
    // bucket several samples. And the last two hours, which alone would convert.
    let old_start = NOW - 3 * DAY;
    let old: Vec<(Timestamp, f64)> = (0..30)
        .map(|m| (old_start + m * MINUTE, m as f64))
        .collect();
    write(&engine, gauge, &old);
    write(&engine, gauge, &scrapes());
    let before = buckets(&engine, gauge);
    for dry_run in [true, false] {
        let report = engine
            .retype(&[gauge], SeriesKind::Counter, dry_run)
            .unwrap();
        let RetypeOutcome::Refused(why) = &report[0].outcome else {
            panic!("{report:?}")
        };
        assert!(
            why.starts_with(
                "the 5m bucket at 2025-11-18T12:00:00Z cannot be converted exactly: it holds 5 \
                 samples and keeps only their count, total, min, max and latest; no finer tier \
                 holds them one by one"
            ),
            "{why}"
        );
        assert!(why.contains("of its"), "how many are not exact: {why}");
        assert_eq!(buckets(&engine, gauge), before, "nothing changed");
        assert_eq!(engine.series_kind(gauge), SeriesKind::Gauge);
    }
}

/// Set to the data directory, the crash test runs as the child that gets killed.
const CHILD_DIR: &str = "TIERDB_IT_RETYPE_CHILD_DIR";

#[test]
fn a_retype_killed_after_its_commit_is_finished_by_the_next_open() {
    killed_after_its_commit(
        "retype::a_retype_killed_after_its_commit_is_finished_by_the_next_open",
        false,
    );
}

/// An older build wrote a retype's intent as a `RETYPING` file: one its crash left is
/// finished by the next open as a journal record is.
#[test]
fn a_retype_an_older_build_left_in_retyping_is_finished_by_the_next_open() {
    killed_after_its_commit(
        "retype::a_retype_an_older_build_left_in_retyping_is_finished_by_the_next_open",
        true,
    );
}

/// Kills a child retyping at each stage after its commit (`older`: then leaves the
/// directory as an older build would have, its intent in a `RETYPING` file), reopens, and
/// checks the open finished the conversion.
fn killed_after_its_commit(test: &str, older: bool) {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        let clock = Arc::new(ManualClock::new(NOW));
        let engine = open_driven(Path::new(&dir), &clock, config());
        let gauge = engine.registry().lookup("web.requests").unwrap().unwrap();
        let _ = engine.retype(&[gauge], SeriesKind::Counter, false);
        unreachable!("the fault hook kills the process in the retype");
    }
    for stage in ["after_intent", "after_first_tier"] {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(NOW));
        let (gauge, reference) = {
            let engine = open_driven(dir.path(), &clock, config());
            let gauge = engine.series("web.requests").unwrap();
            let reference = engine.series("ref.requests").unwrap();
            write(&engine, gauge, &scrapes());
            write(&engine, reference, &scrapes());
            engine.close().unwrap();
            (gauge, reference)
        };
        run_child_until_it_kills_itself(
            test,
            &[
                (CHILD_DIR, dir.path().as_os_str()),
                (KILL_MID_RETYPE, stage.as_ref()),
            ],
        );
        assert_eq!(
            intents::pending(dir.path()).unwrap(),
            ["retype"],
            "the child died with its intent written ({stage})"
        );
        if older {
            intents::to_older_files(dir.path()).unwrap();
            assert!(dir.path().join("RETYPING").exists());
        }
        let engine = open_driven(dir.path(), &clock, config());
        assert!(intents::pending(dir.path()).unwrap().is_empty(), "{stage}");
        assert!(!dir.path().join("RETYPING").exists(), "{stage}");
        assert_eq!(engine.series_kind(gauge), SeriesKind::Counter, "{stage}");
        assert_eq!(
            buckets(&engine, gauge),
            buckets(&engine, reference),
            "the open finished the conversion ({stage})"
        );
        let later = [(NOW + 30, 400.0)];
        write(&engine, gauge, &later);
        write(&engine, reference, &later);
        assert_eq!(buckets(&engine, gauge), buckets(&engine, reference));
    }
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The 1m totals of `name` over the last `minutes`, from `tierdb query`'s CSV.
fn totals(data: &Path, name: &str) -> String {
    let out = run_tierdb(
        &[
            "query",
            name,
            "--tier",
            "1m",
            "--range",
            "30m",
            "--display",
            "total",
            "--format",
            "csv",
        ],
        data,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

#[test]
fn tierdb_retype_says_what_it_would_do_refuses_with_the_reason_and_converts() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let now = chrono::Utc::now().timestamp();
    let start = now - now.rem_euclid(60) - 20 * 60;
    // nginx request counts scraped once a minute into a gauge (no [counters] rule yet), and
    // one series sent twice within a minute.
    let mut lines = String::new();
    for m in 0..20 {
        let ts = start + m * 60 + 5;
        lines.push_str(&format!(
            "servers.web1.nginx.requests {} {ts}\n",
            100 + 10 * m
        ));
        lines.push_str(&format!(
            "servers.web2.nginx.requests {} {ts}\n",
            500 + 2 * m
        ));
    }
    lines.push_str(&format!("servers.web3.nginx.requests 1 {}\n", start + 5));
    lines.push_str(&format!("servers.web3.nginx.requests 2 {}\n", start + 35));
    let input = work.path().join("in.txt");
    std::fs::write(&input, lines).unwrap();
    let out = run_tierdb(&["import", input.to_str().unwrap()], &data);
    assert!(out.status.success(), "{}", stderr(&out));
    let before = totals(&data, "servers.web1.nginx.requests");

    // The rule added later: the open names the series it leaves alone, and the fix.
    let rules = work.path().join("rules.toml");
    let shipped = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tiers.toml"));
    let shipped = (shipped.unwrap()).replacen("names = []", "names = [\"*.nginx.requests\"]", 1);
    std::fs::write(&rules, shipped).unwrap();

    let selector = "servers.*.nginx.requests";
    let out = run_tierdb(
        &["retype", selector, "--kind", "counter", "--dry-run"],
        &data,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a series is refused: {}",
        stderr(&out)
    );
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    // 20 minutes; the 5m, 1h and 1d buckets they fall in depend on the time the test runs.
    assert!(
        lines[0].starts_with("servers.web1.nginx.requests: gauge -> counter: ")
            && lines[0].contains(" buckets would be rewritten (1m 20, 5m "),
        "{text}"
    );
    assert!(
        lines[0].contains("becomes the counter's baseline"),
        "{text}"
    );
    assert!(
        lines[2].starts_with(
            "servers.web3.nginx.requests: refused (gauge, not made a counter): the 1m bucket at "
        ) && lines[2].contains("it holds 2 samples and keeps only their count, total, min, max"),
        "{text}"
    );
    assert!(
        stderr(&out).contains("would convert 2 series to counters, refused 1, 0 already counters (dry run: nothing changed)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        totals(&data, "servers.web1.nginx.requests"),
        before,
        "dry run"
    );

    // In cluster mode it is refused.
    let node = work.path().join("node");
    std::fs::create_dir_all(node.join("partitions")).unwrap();
    let out = run_tierdb(&["retype", selector, "--kind", "counter"], &node);
    assert!(
        stderr(&out).contains("retype is not supported in cluster mode"),
        "{}",
        stderr(&out)
    );

    // The real thing, under the new rules: the open's warning names retype as the fix.
    let out = run_tierdb(
        &[
            "retype",
            "servers.web[12].nginx.requests",
            "--kind",
            "counter",
            "--tiers",
        ]
        .into_iter()
        .chain([rules.to_str().unwrap()])
        .collect::<Vec<_>>(),
        &data,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("tierdb retype SELECTOR --kind counter|gauge"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("converted 2 series to counters, refused 0"),
        "{}",
        stderr(&out)
    );
    // Each minute's total is now the increase since the scrape before: 10 a minute, and
    // nothing in the first minute (the baseline).
    let after = totals(&data, "servers.web1.nginx.requests");
    let values: Vec<&str> = (after.lines().skip(1))
        .filter_map(|line| line.split(',').nth(1))
        .filter(|v| !v.is_empty())
        .collect();
    assert!(
        !values.is_empty() && values.iter().all(|v| *v == "10"),
        "{after}"
    );
    let out = run_tierdb(&["retype", selector, "--kind", "counter"], &data);
    assert!(
        stdout(&out).contains("servers.web1.nginx.requests: already a counter"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn compacted_periods_are_converted_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::compaction::config();
    config.counters.names = vec!["ref.*".to_owned()];
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open_driven(dir.path(), &clock, config.clone());
    let gauge = engine.series("web.requests").unwrap();
    let reference = engine.series("ref.requests").unwrap();
    let hour: Vec<(Timestamp, f64)> = (0..60)
        .map(|m| (NOW + m * MINUTE + 30, 100.0 + (m * m) as f64))
        .collect();
    write(&engine, gauge, &hour);
    write(&engine, reference, &hour);
    clock.set(NOW + HOUR + 11 * MINUTE);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(
        engine.stats().tiers[0].disk.compactions,
        1,
        "the hour's 1m file"
    );
    let report = engine.retype(&[gauge], SeriesKind::Counter, false).unwrap();
    assert!(
        matches!(report[0].outcome, RetypeOutcome::Converted { .. }),
        "{report:?}"
    );
    assert_eq!(buckets(&engine, gauge), buckets(&engine, reference));
    engine.close().unwrap();
    let engine = open_driven(dir.path(), &clock, config);
    assert_eq!(buckets(&engine, gauge), buckets(&engine, reference));
}

#[test]
fn a_series_with_raw_points_is_refused_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config();
    config.raw = Some(tierdb::RawTierSpec {
        name: "raw".to_string(),
        period: tierdb::Span::from_secs(DAY as u64),
        retention: tierdb::Span::from_secs(7 * DAY as u64),
        create_ahead: 1,
        dedupe_unchanged: false,
    });
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open_driven(dir.path(), &clock, config);
    let gauge = engine.series("web.requests").unwrap();
    write(&engine, gauge, &scrapes());
    let before = buckets(&engine, gauge);
    let report = engine.retype(&[gauge], SeriesKind::Counter, false).unwrap();
    assert_eq!(
        report[0].outcome,
        RetypeOutcome::Refused(
            "it has points in the raw tier \"raw\", which keep the gauge's values, and retype \
             does not rewrite raw points"
                .to_owned()
        )
    );
    assert_eq!(buckets(&engine, gauge), before);
    assert_eq!(engine.series_kind(gauge), SeriesKind::Gauge);
}
