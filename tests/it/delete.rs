//! Deleting series (#31 item 2): the name leaves the registry and the slot's buckets are
//! cleared in every tier, hot and compacted, and in the raw tier, durably; a later sample of
//! the name starts a new series with none of the old data; a crash before the registry's
//! commit leaves the series whole, one after it leaves them gone (the next open finishes the
//! clearing). Then the same as a user meets it: `tierdb delete` and
//! `DELETE /api/v1/series` against `tierdb serve`.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierdb::testing::fault::KILL_MID_DELETE;
use tierdb::testing::intents;
use tierdb::{
    Bucket, ManualClock, RawTierSpec, RejectReason, Sample, Selector, SeriesId, Span, TiersConfig,
    Timestamp,
};

use crate::common::{open_driven, NOW};
use crate::support::http::{percent_encode, request};
use crate::support::process::{run_child_until_it_kills_itself, run_tierdb, tierdb_command, Proc};

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;

/// The compaction tests' tiers (1m/1h/1d with periods 1h/6h/7d, so an hour's 1m period is
/// compacted soon; 16 series per chunk) and a raw tier.
fn config() -> TiersConfig {
    let mut config = crate::compaction::config();
    config.raw = Some(RawTierSpec {
        name: "raw".to_string(),
        period: Span::from_secs(HOUR as u64),
        retention: Span::from_secs(12 * HOUR as u64),
        create_ahead: 1,
        dedupe_unchanged: false,
    });
    config.validate().expect("valid test tiers");
    config
}

/// The start of the hour holding [`NOW`]: the samples go in this hour and the next.
fn start() -> Timestamp {
    NOW - NOW.rem_euclid(HOUR)
}

/// Every bucket `id` holds in every tier over the test's two hours, as (tier, time, bucket).
fn buckets(engine: &tierdb::Engine, id: SeriesId) -> Vec<(usize, Timestamp, Bucket)> {
    let reader = engine.reader();
    let mut all = Vec::new();
    for (tier, spec) in engine.config().tiers.iter().enumerate() {
        let from = start() - start().rem_euclid(spec.period.secs() as i64);
        let got = reader
            .read_buckets(id, tier, from, start() + 2 * HOUR, spec.resolution)
            .expect("read");
        all.extend(
            got.into_iter()
                .filter(|(_, b)| !b.is_empty())
                .map(|(ts, b)| (tier, ts, b)),
        );
    }
    all
}

/// Raw points of `name` over the two hours.
fn raw_points(engine: &tierdb::Engine, name: &str) -> usize {
    let query = tierdb::Query::new(name, start(), start() + 2 * HOUR).tier("raw");
    match engine.query(&query) {
        Ok(result) => result.points.iter().filter(|p| p.1.is_some()).count(),
        Err(tierdb::Error::UnknownSeries(_)) => 0,
        Err(e) => panic!("raw query of {name}: {e}"),
    }
}

/// Writes a minute of `victim` and `neighbour` (same chunk) through the first hour, moves the
/// clock past it and runs the passes that compact its 1m period, then writes ten minutes of
/// the second hour (hot). Returns (victim, neighbour).
fn write_two_hours(engine: &tierdb::Engine, clock: &ManualClock) -> (SeriesId, SeriesId) {
    let victim = engine.series("web.typo.cuont{host=a}").unwrap();
    let neighbour = engine.series("web.requests.count{host=a}").unwrap();
    let batch = |from: i64, minutes: i64| -> Vec<Sample> {
        (0..minutes)
            .flat_map(|m| {
                let ts = from + m * MINUTE;
                [
                    Sample::new(victim, ts, 1.0),
                    Sample::new(neighbour, ts, 2.0),
                ]
            })
            .collect()
    };
    let first = batch(start(), 60);
    assert_eq!(engine.record_batch(&first).unwrap().accepted, 120);
    clock.set(start() + HOUR + 11 * MINUTE);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(
        engine.stats().tiers[0].disk.compactions,
        1,
        "the first hour's 1m file is compacted"
    );
    let second = batch(start() + HOUR, 10);
    assert_eq!(engine.record_batch(&second).unwrap().accepted, 20);
    engine.flush().unwrap();
    (victim, neighbour)
}

#[test]
fn a_deleted_series_leaves_every_tier_and_the_registry_and_its_name_starts_anew() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(start()));
    let engine = open_driven(dir.path(), &clock, config());
    let (victim, neighbour) = write_two_hours(&engine, &clock);
    let neighbour_before = buckets(&engine, neighbour);
    assert_eq!(buckets(&engine, victim).len(), neighbour_before.len());
    assert_eq!(raw_points(&engine, "web.typo.cuont{host=a}"), 70);

    let selector = Selector::parse("web.typo.*{host=a}").unwrap();
    let picked = engine.select_series(&selector);
    assert_eq!(picked, vec![(victim, "web.typo.cuont{host=a}".to_string())]);
    let deleted = engine.delete_series(&[victim]).unwrap();
    assert_eq!(
        deleted
            .series
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["web.typo.cuont{host=a}"]
    );
    // 70 minutes in the 1m tier, 2 hours in the 1h tier, 1 day in the 1d tier.
    assert_eq!(deleted.cells_cleared, 70 + 2 + 1);
    assert_eq!(deleted.raw_points, 70);
    assert!(intents::pending(dir.path()).unwrap().is_empty());

    // Gone from the registry, from every tier (the compacted period too), from the raw tier.
    assert_eq!(
        engine.registry().lookup("web.typo.cuont{host=a}").unwrap(),
        None
    );
    assert!(engine
        .select_series(&Selector::parse("*").unwrap())
        .iter()
        .all(|(id, _)| *id != victim));
    assert_eq!(
        buckets(&engine, victim),
        vec![],
        "the old slot is empty in every tier"
    );
    assert_eq!(
        buckets(&engine, neighbour),
        neighbour_before,
        "the neighbour is untouched"
    );
    // An id resolved before the deletion is refused, not stored into the old slot.
    let late = engine
        .record_batch(&[Sample::new(victim, start() + HOUR + 20 * MINUTE, 5.0)])
        .unwrap();
    assert_eq!(late.accepted, 0);
    assert_eq!(late.rejected[RejectReason::UnknownSeries as usize], 1);
    // Deleting it again does nothing.
    assert_eq!(
        engine.delete_series(&[victim]).unwrap(),
        tierdb::Deleted::default()
    );

    // The name again: a new series, a new slot, none of the old data.
    let reborn = engine.series("web.typo.cuont{host=a}").unwrap();
    assert_ne!(reborn, victim);
    let ts = start() + HOUR + 20 * MINUTE;
    assert_eq!(
        engine
            .record_batch(&[Sample::new(reborn, ts, 7.0)])
            .unwrap()
            .accepted,
        1
    );
    let reborn_buckets = buckets(&engine, reborn);
    assert_eq!(
        reborn_buckets.len(),
        3,
        "one bucket per tier: {reborn_buckets:?}"
    );
    assert!(reborn_buckets
        .iter()
        .all(|(_, _, b)| b.count == 1 && b.total == 7.0));
    assert_eq!(raw_points(&engine, "web.typo.cuont{host=a}"), 1);
    engine.close().unwrap();

    // Durable: the same after a reopen, and the log says it holds a hole (version 2).
    let engine = open_driven(dir.path(), &clock, config());
    assert_eq!(
        engine.registry().lookup("web.typo.cuont{host=a}").unwrap(),
        Some(reborn)
    );
    assert_eq!(buckets(&engine, victim), vec![]);
    assert_eq!(buckets(&engine, reborn), reborn_buckets);
    assert_eq!(buckets(&engine, neighbour), neighbour_before);
    assert_eq!(raw_points(&engine, "web.typo.cuont{host=a}"), 1);
    let log = std::fs::read(dir.path().join("series.log")).unwrap();
    assert_eq!(&log[8..12], &2u32.to_le_bytes());
    let next = engine.series("a.new.one").unwrap();
    assert_eq!(
        next.0,
        reborn.0 + 1,
        "the hole's id is never handed out again"
    );
}

/// Set to the data directory, a crash test runs as the child that gets killed.
const CHILD_DIR: &str = "TIERDB_IT_DELETE_CHILD_DIR";

/// The child's part of a crash test: the data of [`write_two_hours`] (already written by the
/// parent), then a deletion of the victim, which the fault hook cuts short.
fn child_deletes(dir: &Path) -> ! {
    let clock = Arc::new(ManualClock::new(start() + HOUR + 11 * MINUTE));
    let engine = open_driven(dir, &clock, config());
    let victim = engine
        .registry()
        .lookup("web.typo.cuont{host=a}")
        .unwrap()
        .unwrap();
    let _ = engine.delete_series(&[victim]);
    unreachable!("the fault hook kills the process in the deletion");
}

/// Writes the data, kills a child mid-deletion at `stage` (`older`: then leaves the
/// directory as an older build would have, its intent in a `DELETING` file), reopens; returns the engine, the
/// victim and neighbour and what each held before.
#[allow(clippy::type_complexity)]
fn crash_at(
    stage: &str,
    test: &str,
    older: bool,
) -> (
    tempfile::TempDir,
    tierdb::Engine,
    (SeriesId, Vec<(usize, Timestamp, Bucket)>),
    (SeriesId, Vec<(usize, Timestamp, Bucket)>),
) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(start()));
    let (victim, neighbour, before) = {
        let engine = open_driven(dir.path(), &clock, config());
        let (victim, neighbour) = write_two_hours(&engine, &clock);
        let before = (buckets(&engine, victim), buckets(&engine, neighbour));
        engine.close().unwrap();
        (victim, neighbour, before)
    };
    run_child_until_it_kills_itself(
        test,
        &[
            (CHILD_DIR, dir.path().as_os_str()),
            (KILL_MID_DELETE, stage.as_ref()),
        ],
    );
    assert_eq!(
        intents::pending(dir.path()).unwrap(),
        ["delete"],
        "the child died with its intent written"
    );
    if older {
        intents::to_older_files(dir.path()).unwrap();
        assert!(dir.path().join("DELETING").exists());
    }
    let engine = open_driven(dir.path(), &clock, config());
    assert!(
        intents::pending(dir.path()).unwrap().is_empty(),
        "the open finished with the intent"
    );
    assert!(!dir.path().join("DELETING").exists());
    (dir, engine, (victim, before.0), (neighbour, before.1))
}

#[test]
fn a_deletion_killed_before_its_commit_leaves_the_series_whole() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child_deletes(Path::new(&dir));
    }
    let (_dir, engine, (victim, victim_before), (neighbour, neighbour_before)) = crash_at(
        "before_commit",
        "delete::a_deletion_killed_before_its_commit_leaves_the_series_whole",
        false,
    );
    assert_eq!(
        engine.registry().lookup("web.typo.cuont{host=a}").unwrap(),
        Some(victim)
    );
    assert_eq!(buckets(&engine, victim), victim_before);
    assert_eq!(raw_points(&engine, "web.typo.cuont{host=a}"), 70);
    assert_eq!(buckets(&engine, neighbour), neighbour_before);
}

#[test]
fn a_deletion_killed_after_its_commit_is_finished_by_the_next_open() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child_deletes(Path::new(&dir));
    }
    killed_after_its_commit(
        "delete::a_deletion_killed_after_its_commit_is_finished_by_the_next_open",
        false,
    );
}

/// An older build wrote a deletion's intent as a `DELETING` file: one its crash left is
/// finished by the next open as a journal record is.
#[test]
fn a_deletion_an_older_build_left_in_deleting_is_finished_by_the_next_open() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child_deletes(Path::new(&dir));
    }
    killed_after_its_commit(
        "delete::a_deletion_an_older_build_left_in_deleting_is_finished_by_the_next_open",
        true,
    );
}

fn killed_after_its_commit(test: &str, older: bool) {
    let (_dir, engine, (victim, _), (neighbour, neighbour_before)) =
        crash_at("after_commit", test, older);
    assert_eq!(
        engine.registry().lookup("web.typo.cuont{host=a}").unwrap(),
        None
    );
    // The child cleared only the 1m tier before it died; the open cleared the rest.
    assert_eq!(buckets(&engine, victim), vec![]);
    assert_eq!(raw_points(&engine, "web.typo.cuont{host=a}"), 0);
    assert_eq!(buckets(&engine, neighbour), neighbour_before);
}

/// Graphite lines of three hosts' `cpu.user` and a typo, one a minute over the last ten
/// minutes, ending at `now`.
fn lines(now: i64) -> String {
    let mut text = String::new();
    for m in 0..10 {
        let ts = now - 600 + m * 60;
        for host in ["web-1", "web-2", "db-1"] {
            text.push_str(&format!("cpu.user;host={host} 1 {ts}\n"));
        }
        text.push_str(&format!("web.typo.cuont 5 {ts}\n"));
    }
    text
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn tierdb_delete_lists_with_a_dry_run_refuses_everything_and_deletes() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let now = chrono::Utc::now().timestamp();
    let input = work.path().join("in.txt");
    std::fs::write(&input, lines(now)).unwrap();
    let out = run_tierdb(&["import", input.to_str().unwrap()], &data);
    assert!(out.status.success(), "{}", stderr(&out));

    let out = run_tierdb(&["delete", "cpu.user{host=web-*}", "--dry-run"], &data);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "cpu.user{host=web-1}\ncpu.user{host=web-2}\n");
    assert!(
        stderr(&out).contains("would delete 2 series"),
        "{}",
        stderr(&out)
    );
    let listed = run_tierdb(&["series"], &data);
    assert_eq!(
        stdout(&listed).lines().count(),
        4,
        "the dry run deleted nothing"
    );

    let out = run_tierdb(&["delete", "*"], &data);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("add --all"), "{}", stderr(&out));
    let out = run_tierdb(&["delete", "web.typo.cuontt"], &data);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no series match 'web.typo.cuontt'")
            && stderr(&out).contains("web.typo.cuont"),
        "the nearest name is offered: {}",
        stderr(&out)
    );

    let out = run_tierdb(&["delete", "cpu.user", "--tag", "host=web-*"], &data);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "cpu.user{host=web-1}\ncpu.user{host=web-2}\n");
    assert!(
        stderr(&out).contains("deleted 2 series"),
        "{}",
        stderr(&out)
    );
    let listed = run_tierdb(&["series"], &data);
    assert_eq!(stdout(&listed), "cpu.user{host=db-1}\nweb.typo.cuont\n");
    let out = run_tierdb(&["query", "cpu.user{host=web-1}"], &data);
    assert!(!out.status.success(), "a deleted series is not read");

    // A later sample of the name starts a new series: one sample, none of the old ten. It is
    // a second before `now`: a query's range ends before its `to` (the query's own now), so a
    // sample at the very second the query runs is outside it when that second starts a
    // bucket (it failed so once, at hh:mm:00).
    std::fs::write(&input, format!("cpu.user;host=web-1 9 {}\n", now - 1)).unwrap();
    let out = run_tierdb(&["import", input.to_str().unwrap()], &data);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run_tierdb(
        &[
            "query",
            "cpu.user{host=web-1}",
            "--range",
            "1h",
            "--tier",
            "1m",
            "--display",
            "count",
            "--format",
            "csv",
        ],
        &data,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let counts: f64 = stdout(&out)
        .lines()
        .filter_map(|line| line.split(',').nth(1)?.parse::<f64>().ok())
        .sum();
    assert_eq!(counts, 1.0, "{}", stdout(&out));
}

#[test]
fn http_delete_against_tierdb_serve_is_behind_the_token_and_a_new_sample_starts_anew() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let log = work.path().join("serve.log");
    let mut command = tierdb_command("serve", &data);
    command
        .args(["--token", "s3cret"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut server = Proc::spawn("tierdb serve", &mut command, vec![log], false);
    let addrs = server.wait_ready();
    let auth = [("Authorization", "Bearer s3cret")];
    let now = chrono::Utc::now().timestamp();
    // A collector that stays connected: its connection has the names' ids cached.
    let mut collector = TcpStream::connect(addrs.graphite_tcp).unwrap();
    collector.write_all(lines(now).as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = request(addrs.http, "GET", "/api/v1/series", &auth, b"");
        if body.matches("cpu.user").count() == 3 && body.contains("cuont") {
            break;
        }
        assert!(Instant::now() < deadline, "the lines never landed: {body}");
        std::thread::sleep(Duration::from_millis(50));
    }

    let path = |query: &str| format!("/api/v1/series?{query}");
    let web = format!("match={}", percent_encode("cpu.user{host=web-*}"));
    let (status, body) = request(addrs.http, "DELETE", &path(&web), &[], b"");
    assert_eq!(status, 401, "no token, no deletion: {body}");
    let (status, body) = request(
        addrs.http,
        "DELETE",
        &path(&format!("{web}&dry_run=true")),
        &auth,
        b"",
    );
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["dry_run"], true);
    assert_eq!(
        answer["series"],
        serde_json::json!(["cpu.user{host=web-1}", "cpu.user{host=web-2}"])
    );
    let (status, body) = request(addrs.http, "DELETE", &path("match=*"), &auth, b"");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("all=true"), "{body}");
    let (status, body) = request(
        addrs.http,
        "DELETE",
        &path("match=nothing.here"),
        &auth,
        b"",
    );
    assert_eq!(status, 404, "{body}");
    let (status, body) = request(addrs.http, "DELETE", "/api/v1/series", &auth, b"");
    assert_eq!(status, 400, "{body}");

    // Graphite's tagged form, as /render takes it.
    let graphite_form = format!("match={}", percent_encode("cpu.user;host=web-*"));
    let (status, body) = request(addrs.http, "DELETE", &path(&graphite_form), &auth, b"");
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["dry_run"], false);
    assert_eq!(answer["series"].as_array().unwrap().len(), 2, "{body}");
    assert!(answer["cells_cleared"].as_u64().unwrap() >= 20, "{body}");
    let (_, body) = request(addrs.http, "GET", "/api/v1/series", &auth, b"");
    assert!(!body.contains("web-"), "{body}");

    // The collector, still connected, writes the name again: a new series with only the new
    // sample (its cached id for the name was dropped with the deletion).
    collector
        .write_all(format!("cpu.user;host=web-1 9 {now}\n").as_bytes())
        .unwrap();
    drop(collector);
    let query = format!(
        "/api/v1/query?series={}&from={}&to={}&tier=1m&display=count",
        percent_encode("cpu.user{host=web-1}"),
        now - 3600,
        now + 60
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = request(addrs.http, "GET", &query, &auth, b"");
        if status == 200 {
            let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
            let count: f64 = answer["points"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p[1].as_f64())
                .sum();
            // A flush registers the name, then writes the sample: a read in between sees
            // the series without it. Once the sample is there, it is the only one.
            if count != 0.0 {
                assert_eq!(count, 1.0, "{body}");
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the new sample never landed: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(server.terminate(Duration::from_secs(60)).success());

    // The directory is the server's no more: the deletion is durable.
    let listed = run_tierdb(&["series"], &data);
    assert_eq!(
        stdout(&listed),
        "cpu.user{host=db-1}\nweb.typo.cuont\ncpu.user{host=web-1}\n"
    );
}
