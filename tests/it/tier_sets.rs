//! Retention per series pattern (#55 item 2): a `[[set]]` in tiers.toml gives the series it
//! picks other tiers, as a carbon storage-schemas section does. A series' set is fixed when
//! it is created and recorded; each set's files live under `sets/<name>/` and follow its own
//! retention, so the short set's files are dropped on time while the long set's are kept; a
//! read of one series reads its set's tiers; an aggregate across sets reads each set's
//! tier on one grid of points, and says so when their resolutions differ.

use std::path::Path;
use std::sync::Arc;

use tierdb::{
    AggregateQuery, Aggregation, ManualClock, Query, Sample, Selector, TiersConfig, Timestamp,
};

use crate::common::{open_driven, NOW};

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;

/// The default set keeps minutes for 6 hours and hours for 3 days; `short` keeps the
/// `tmp.*` series and those tagged `env=dev` at 5 minutes, for 2 hours only.
const TIERS: &str = r#"
[engine]
series_per_chunk = 16

[[tier]]
name = "1m"
resolution = "1m"
period = "1h"
retention = "6h"

[[tier]]
name = "1h"
resolution = "1h"
period = "6h"
retention = "3d"

[[set]]
name = "short"
names = ["tmp.*"]
tags = ["env=dev"]

[[set.tier]]
name = "5m"
resolution = "5m"
period = "1h"
retention = "2h"
"#;

fn config() -> TiersConfig {
    TiersConfig::from_toml_str(TIERS, "tier_sets test").expect("valid tiers")
}

/// The start of the hour holding [`NOW`].
fn hour() -> Timestamp {
    NOW - NOW.rem_euclid(HOUR)
}

/// Writes `value` once a minute through the first `minutes` minutes of [`hour`] to every
/// series of `names` (created as needed), the clock following.
fn write_minutes(engine: &tierdb::Engine, clock: &ManualClock, names: &[&str], minutes: i64) {
    for minute in 0..minutes {
        let ts = hour() + minute * MINUTE;
        clock.set(ts);
        let batch: Vec<Sample> = names
            .iter()
            .enumerate()
            .map(|(i, name)| Sample {
                series: engine.series(name).expect("series"),
                ts,
                value: (i + 1) as f64,
            })
            .collect();
        let report = engine.record_batch(&batch).expect("batch");
        assert_eq!(report.accepted as usize, names.len(), "{report:?}");
    }
}

/// The period files under `dir` (recursively), as paths relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "tdb" || e == "tdc") {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn each_series_keeps_the_tiers_of_its_set_in_the_sets_own_files() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(hour()));
    let engine = open_driven(dir.path(), &clock, config());
    write_minutes(
        &engine,
        &clock,
        &["web.cpu", "tmp.scratch", "db.load{env=dev}"],
        30,
    );

    // The long series reads minutes; the short ones 5-minute buckets of five samples.
    let web = engine
        .query(&Query::new("web.cpu", hour(), hour() + 30 * MINUTE))
        .unwrap();
    assert_eq!(web.tier, "1m");
    assert_eq!(web.points.iter().filter(|p| p.1 == Some(1.0)).count(), 30);
    for name in ["tmp.scratch", "db.load{env=dev}"] {
        let short = engine
            .query(&Query::new(name, hour(), hour() + 30 * MINUTE).display(tierdb::Display::Count))
            .unwrap();
        assert_eq!(short.tier, "5m", "{name}");
        assert_eq!(short.points.len(), 6, "{name}");
        assert!(
            short.points.iter().all(|p| p.1 == Some(5.0)),
            "{name}: {short:?}"
        );
    }
    // Asking the short set's series for a tier only the default set has is refused.
    let err = engine
        .query(&Query::new("tmp.scratch", hour(), hour() + HOUR).tier("1m"))
        .unwrap_err();
    assert!(err.to_string().contains("1m"), "{err}");

    // Both sets' series are at place 0 and 1 of their own set: chunk 0 of each set's files.
    let files = files_under(dir.path());
    assert!(
        files.iter().any(|f| f.starts_with("sets/short/5m/")),
        "{files:?}"
    );
    assert!(
        files.iter().any(|f| f.starts_with("tiers/1m/")),
        "{files:?}"
    );
    assert!(
        !files.iter().any(|f| f.starts_with("tiers/5m")),
        "{files:?}"
    );

    // Statistics name the set's tier by set.
    let stats = engine.stats();
    let names: Vec<&str> = stats.tiers.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["1m", "1h", "short/5m"]);
}

#[test]
fn the_short_sets_files_are_dropped_on_time_and_the_long_sets_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(hour()));
    let engine = open_driven(dir.path(), &clock, config());
    write_minutes(&engine, &clock, &["web.cpu", "tmp.scratch"], 60);
    let first_hour = |prefix: &str| {
        let hot = tierdb::testing::storage::format::file_name(hour(), 0);
        let stem = hot.trim_end_matches(".tdb");
        files_under(dir.path())
            .into_iter()
            .filter(|f| f.starts_with(prefix) && f.contains(stem))
            .count()
    };
    assert_eq!(first_hour("sets/short/5m/"), 1);
    assert_eq!(first_hour("tiers/1m/"), 1);

    // Three hours on, the short set's first hour is out of its 2 hours; the default set's
    // minutes keep it for 6.
    clock.set(hour() + 3 * HOUR + 10 * MINUTE);
    engine.maintain().unwrap();
    assert_eq!(
        first_hour("sets/short/5m/"),
        0,
        "{:?}",
        files_under(dir.path())
    );
    assert_eq!(first_hour("tiers/1m/"), 1, "{:?}", files_under(dir.path()));

    let gone = engine
        .query(&Query::new("tmp.scratch", hour(), hour() + HOUR))
        .unwrap();
    assert!(gone.points.iter().all(|p| p.1.is_none()), "{gone:?}");
    let kept = engine
        .query(&Query::new("web.cpu", hour(), hour() + HOUR).tier("1m"))
        .unwrap();
    assert_eq!(kept.points.iter().filter(|p| p.1.is_some()).count(), 60);
}

#[test]
fn an_aggregate_across_sets_reads_each_sets_tier_on_one_grid_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(hour()));
    let engine = open_driven(dir.path(), &clock, config());
    let names = ["web.cpu{dc=x}", "api.cpu{dc=x}", "tmp.cpu{dc=x}"];
    write_minutes(&engine, &clock, &names, 30);

    let selector = Selector::parse("*{dc=x}").unwrap();
    let query = AggregateQuery::new(selector, Aggregation::Sum, hour(), hour() + 30 * MINUTE)
        .display(tierdb::Display::Total);
    let result = engine.aggregate(&query).unwrap();
    assert_eq!(result.step, 5 * MINUTE, "{result:?}");
    assert_eq!(result.tier, "1m, short/5m");
    let note = result.note.as_deref().unwrap_or_default();
    assert!(note.contains("different tier sets"), "{note}");
    let group = &result.groups[0];
    assert_eq!(group.series, 3);
    // Per 5 minutes: web 1.0 and api 2.0 five times each from minutes, tmp 3.0 five times
    // from its 5m buckets.
    assert_eq!(group.points.len(), 6);
    for (ts, value) in &group.points {
        assert_eq!(*value, Some(5.0 * (1.0 + 2.0 + 3.0)), "at {ts}");
    }

    // The same sum read set by set and added by hand.
    let per_set: f64 = [("[wa]*.cpu{dc=x}", "1m"), ("tmp.*{dc=x}", "5m")]
        .iter()
        .map(|(selector, tier)| {
            let query = AggregateQuery::new(
                Selector::parse(selector).unwrap(),
                Aggregation::Sum,
                hour(),
                hour() + 30 * MINUTE,
            )
            .display(tierdb::Display::Total)
            .whole_range();
            let result = engine.aggregate(&query).unwrap();
            assert_eq!(result.tier, *tier, "{selector}");
            result.groups[0].points[0].1.unwrap()
        })
        .sum();
    assert_eq!(per_set, 30.0 * (1.0 + 2.0 + 3.0));

    // Within one set, no note: the set's own tier.
    let one = engine
        .aggregate(&AggregateQuery::new(
            Selector::parse("tmp.*").unwrap(),
            Aggregation::Sum,
            hour(),
            hour() + 30 * MINUTE,
        ))
        .unwrap();
    assert_eq!(one.tier, "5m");
    assert_eq!(one.note, None);
}

#[test]
fn a_series_keeps_its_set_when_the_rules_change_and_a_set_with_series_cannot_be_removed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(hour()));
    {
        let engine = open_driven(dir.path(), &clock, config());
        write_minutes(&engine, &clock, &["tmp.scratch", "web.cpu"], 10);
    }
    // The rules change: `tmp.*` no longer picked, `web.*` now is.
    let changed = TiersConfig::from_toml_str(
        &TIERS.replace(r#"names = ["tmp.*"]"#, r#"names = ["web.*"]"#),
        "changed",
    )
    .unwrap();
    {
        let engine = open_driven(dir.path(), &clock, changed);
        let tier_of = |name: &str| {
            engine
                .query(&Query::new(name, hour(), hour() + 10 * MINUTE))
                .unwrap()
                .tier
        };
        assert_eq!(
            tier_of("tmp.scratch"),
            "5m",
            "created in the set, stays there"
        );
        assert_eq!(
            tier_of("web.cpu"),
            "1m",
            "created in the default set, stays there"
        );
        // A new series follows the new rules.
        let id = engine.series("web.new").unwrap();
        engine
            .record_batch(&[Sample {
                series: id,
                ts: hour() + 10 * MINUTE,
                value: 1.0,
            }])
            .unwrap();
        assert_eq!(tier_of("web.new"), "5m");
    }
    // Without the set, its series would have no tiers: refused, naming the set.
    let mut without = config();
    without.sets.clear();
    let err = tierdb::Engine::builder(dir.path())
        .tiers(without)
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .err()
        .expect("refused");
    assert!(err.to_string().contains("short"), "{err}");
}

#[test]
fn graphite_reads_each_series_at_its_sets_step_and_sums_them_as_graphite_web_does() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(hour()));
    let engine = open_driven(dir.path(), &clock, config());
    write_minutes(&engine, &clock, &["web.cpu", "api.cpu", "tmp.cpu"], 30);

    let source = tierdb::render::StoredSource::new(engine.reader());
    let request = tierdb::render::RenderRequest {
        targets: vec!["*.cpu".into(), "sumSeries(*.cpu)".into()],
        from: hour() - 1,
        until: hour() + 30 * MINUTE - 1,
        max_data_points: None,
        default_max_points: 1_500,
        x_files_factor: 0.0,
        now: hour() + 30 * MINUTE,
    };
    let rendered =
        tierdb::render::render(&source, &request, &tierdb::ReadBudget::unlimited()).unwrap();
    let steps: Vec<(&str, i64)> = rendered
        .iter()
        .map(|s| (s.target.as_str(), s.step))
        .collect();
    // Each stored series at its own set's step, as graphite-web reads each whisper file at
    // its archive's; the sum on the least common step, minutes averaged into it.
    assert_eq!(
        steps,
        [
            ("api.cpu", 60),
            ("tmp.cpu", 300),
            ("web.cpu", 60),
            ("sumSeries(*.cpu)", 300)
        ]
    );
    let tmp = &rendered[1];
    assert!(
        tmp.datapoints.iter().take(6).all(|p| p.0 == Some(3.0)),
        "{tmp:?}"
    );
    let sum = &rendered[3];
    assert!(
        sum.datapoints.iter().take(6).all(|p| p.0 == Some(6.0)),
        "{sum:?}"
    );
}

#[test]
fn promql_reads_each_series_through_its_sets_tier_of_the_chosen_resolution() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(hour()));
    // Here the short set keeps minutes too, for 2 hours.
    let minutes = TiersConfig::from_toml_str(
        &TIERS.replace(
            r#"name = "5m"
resolution = "5m""#,
            r#"name = "1m"
resolution = "1m""#,
        ),
        "minutes",
    )
    .unwrap();
    let engine = open_driven(dir.path(), &clock, minutes);
    write_minutes(&engine, &clock, &["web.cpu", "tmp.cpu"], 30);

    let source = tierdb::promql::StoredSource::new(engine.reader());
    let limits = tierdb::promql::QueryLimits {
        budget: Arc::new(tierdb::ReadBudget::default()),
        max_series: tierdb::promql::DEFAULT_MAX_SERIES,
        deadline: std::time::Instant::now() + std::time::Duration::from_secs(60),
    };
    let query = |text: &str| tierdb::promql::Query {
        text: text.to_owned(),
        start_ms: (hour() + 10 * MINUTE) * 1000,
        end_ms: (hour() + 20 * MINUTE) * 1000,
        step_ms: Some(60_000),
    };
    let answer =
        tierdb::promql::evaluate(&source, &query(r#"sum({__name__=~".*cpu"})"#), &limits).unwrap();
    let data: serde_json::Value = serde_json::from_str(&answer.data_text()).unwrap();
    let values = data["result"][0]["values"].as_array().unwrap();
    assert_eq!(values.len(), 11);
    assert!(values.iter().all(|v| v[1] == "3"), "{data}");

    // With the test's own tiers the short set has no minutes: refused, naming the set.
    drop(engine);
    let dir = tempfile::tempdir().unwrap();
    let engine = open_driven(dir.path(), &clock, config());
    write_minutes(&engine, &clock, &["web.cpu", "tmp.cpu"], 30);
    let source = tierdb::promql::StoredSource::new(engine.reader());
    let err = tierdb::promql::evaluate(&source, &query(r#"sum({__name__=~".*cpu"})"#), &limits)
        .unwrap_err();
    assert!(err.to_string().contains("\"short\""), "{err}");
}

#[test]
fn deleting_a_series_of_a_set_clears_its_own_cells_and_not_those_at_its_place_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(hour()));
    let engine = open_driven(dir.path(), &clock, config());
    // Both are the first series of their set: the same chunk and slot, in other files.
    write_minutes(&engine, &clock, &["web.cpu", "tmp.cpu"], 30);
    let id = engine.series("tmp.cpu").unwrap();
    engine.delete_series(&[id]).unwrap();
    drop(engine);

    let engine = open_driven(dir.path(), &clock, config());
    let web = engine
        .query(&Query::new("web.cpu", hour(), hour() + 30 * MINUTE))
        .unwrap();
    assert_eq!(web.points.iter().filter(|p| p.1 == Some(1.0)).count(), 30);
    // The name comes back as a new series of the set, with none of the old buckets.
    let again = engine.series("tmp.cpu").unwrap();
    assert_ne!(again, id);
    let fresh = engine
        .query(&Query::new("tmp.cpu", hour(), hour() + 30 * MINUTE))
        .unwrap();
    assert_eq!(fresh.tier, "5m");
    assert!(fresh.points.iter().all(|p| p.1.is_none()), "{fresh:?}");
}

#[test]
fn a_sets_closed_periods_are_compacted_and_read_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(hour()));
    let engine = open_driven(dir.path(), &clock, config());
    write_minutes(&engine, &clock, &["web.cpu", "tmp.cpu"], 60);
    let read = |engine: &tierdb::Engine| {
        engine
            .query(&Query::new("tmp.cpu", hour(), hour() + HOUR).display(tierdb::Display::Total))
            .unwrap()
            .points
    };
    let before = read(&engine);
    assert_eq!(before.iter().filter(|p| p.1 == Some(10.0)).count(), 12);

    // Past the period's end and the grace for late samples, two quiet passes compact it.
    clock.set(hour() + HOUR + 15 * MINUTE);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    let files = files_under(dir.path());
    let compacted = |prefix: &str| {
        files
            .iter()
            .any(|f| f.starts_with(prefix) && f.ends_with(".tdc"))
    };
    assert!(compacted("sets/short/5m/"), "{files:?}");
    assert!(compacted("tiers/1m/"), "{files:?}");
    assert_eq!(read(&engine), before);
    drop(engine);
    let engine = open_driven(dir.path(), &clock, config());
    assert_eq!(read(&engine), before);
}

/// Set to the data directory, [`a_writer_killed_mid_update_of_a_sets_series_is_repaired`]
/// runs as the child that gets killed.
const CRASH_CHILD_DIR: &str = "TIERDB_IT_SETS_CRASH_CHILD_DIR";

#[test]
fn a_writer_killed_mid_update_of_a_sets_series_is_repaired() {
    let clock = Arc::new(ManualClock::new(hour() + 10 * MINUTE));
    if let Some(dir) = std::env::var_os(CRASH_CHILD_DIR) {
        let engine = open_driven(Path::new(&dir), &clock, config());
        let id = engine.series("tmp.cpu").unwrap();
        let _ = engine.record_batch(&[Sample::new(id, hour() + 4 * MINUTE, 100.0)]);
        unreachable!("the fault hook kills the process in the writer");
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let count = |engine: &tierdb::Engine, name: &str| {
        let points = engine
            .query(&Query::new(name, hour(), hour() + 5 * MINUTE).display(tierdb::Display::Count))
            .unwrap()
            .points;
        points.iter().filter_map(|p| p.1).sum::<f64>()
    };
    let victim = {
        let engine = open_driven(dir, &clock, config());
        let web = engine.series("web.cpu").unwrap();
        let tmp = engine.series("tmp.cpu").unwrap();
        let samples: Vec<Sample> = (1..=3)
            .flat_map(|i| {
                [
                    Sample::new(web, hour() + i, 1.0),
                    Sample::new(tmp, hour() + i, 1.0),
                ]
            })
            .collect();
        assert_eq!(engine.record_batch(&samples).unwrap().accepted, 6);
        engine.close().unwrap();
        tmp
    };
    let victim_text = victim.0.to_string();
    crate::support::process::run_child_until_it_kills_itself(
        "tier_sets::a_writer_killed_mid_update_of_a_sets_series_is_repaired",
        &[
            (CRASH_CHILD_DIR, dir.as_os_str()),
            (
                tierdb::testing::fault::KILL_MID_UPDATE,
                victim_text.as_ref(),
            ),
        ],
    );
    let engine = open_driven(dir, &clock, config());
    let recovery = engine.recovery().expect("an unclean open").clone();
    assert_eq!(recovery.interrupted, 1, "{recovery:?}");
    assert_eq!(recovery.full_scan, None, "{recovery:?}");
    // The set's bucket as before the sample; the default set's series at the same place in
    // its own files untouched.
    assert_eq!(count(&engine, "tmp.cpu"), 3.0);
    assert_eq!(count(&engine, "web.cpu"), 3.0);
}

#[test]
fn a_quantile_across_sets_merges_each_sets_histograms_on_one_grid() {
    use tierdb::{DistributionQuery, DistributionTarget, SeriesKind, Shown};
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(hour()));
    let engine = open_driven(dir.path(), &clock, config());
    // 1..=100 ms in the default set's timer, 101..=200 in the short set's: the median of all
    // is 100.5, of each 50.5 and 150.5.
    let web = engine.series("web.time").unwrap();
    let tmp = engine.series("tmp.time").unwrap();
    for id in [web, tmp] {
        engine.declare_kind(id, SeriesKind::Distribution).unwrap();
    }
    let samples: Vec<Sample> = (1..=100)
        .flat_map(|i| {
            let ts = hour() + (i % 25) * 10;
            [
                Sample::new(web, ts, i as f64),
                Sample::new(tmp, ts, (100 + i) as f64),
            ]
        })
        .collect();
    clock.set(hour() + 5 * MINUTE);
    assert_eq!(engine.record_batch(&samples).unwrap().accepted, 200);

    let query = DistributionQuery {
        target: DistributionTarget::Select {
            selector: Selector::parse("*.time").unwrap(),
            group_by: Vec::new(),
        },
        shown: Shown::Quantile(0.5),
        tier: tierdb::TierChoice::Auto,
        from: hour(),
        to: hour() + 5 * MINUTE,
        step: None,
        max_points: None,
        whole_range: true,
    };
    let result = engine
        .reader()
        .distribution_query(&query, &tierdb::ReadBudget::unlimited())
        .unwrap();
    assert_eq!(result.tier, "1m, short/5m");
    assert!(result
        .note
        .as_deref()
        .unwrap_or_default()
        .contains("different tier sets"));
    let group = &result.groups[0];
    assert_eq!(group.series, 2);
    let median = group.points.as_ref().unwrap()[0].1.unwrap();
    let bound = result.relative_error.unwrap();
    assert!(
        (median - 100.5).abs() <= 100.5 * bound + 0.5,
        "median {median}, relative error {bound}"
    );
}

#[test]
fn sets_added_to_a_directory_place_new_series_only() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(hour()));
    let mut without = config();
    without.sets.clear();
    {
        let engine = open_driven(dir.path(), &clock, without);
        write_minutes(&engine, &clock, &["web.cpu", "tmp.old"], 10);
    }
    let engine = open_driven(dir.path(), &clock, config());
    let tier_of = |name: &str| {
        engine
            .query(&Query::new(name, hour(), hour() + 10 * MINUTE))
            .unwrap()
            .tier
    };
    assert_eq!(
        tier_of("tmp.old"),
        "1m",
        "made before the set: stays in the default set"
    );
    let id = engine.series("tmp.new").unwrap();
    engine
        .record_batch(&[Sample::new(id, hour() + 10 * MINUTE, 1.0)])
        .unwrap();
    assert_eq!(tier_of("tmp.new"), "5m");
    let old = engine
        .query(&Query::new("tmp.old", hour(), hour() + 10 * MINUTE))
        .unwrap();
    assert_eq!(old.points.iter().filter(|p| p.1 == Some(2.0)).count(), 10);
}
