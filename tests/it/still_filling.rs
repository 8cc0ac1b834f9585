//! What a read's answer says about its values (#31): the bucket still filling is marked,
//! and per_sec of a gauge says it is a gauge.
//!
//! The bug: `tierdb aggregate http.requests --display per_sec --range 3h --tier 1h` printed
//! `05:00 176.23` then `06:00 163.72` forty minutes into the hour, which reads as a drop in
//! traffic: the last bucket held only forty minutes of samples. The dashboard marked it; the
//! JSON API and the command line did not.

use serde_json::{json, Value};
use tierdb::server::Limits;

use crate::common::NOW;
use crate::support::process::tierdb_ok as tierdb;
use crate::support::server::TestServer;

const HOUR: i64 = 3600;

/// A server whose clock is 40 minutes into the hour after [`NOW`], with `http.requests{host=a}`
/// and `{host=b}` getting one sample of 6 every 10 s over the three hours before.
fn server_forty_minutes_into_the_hour() -> TestServer {
    let server = TestServer::start(None, Limits::default());
    let now = NOW + 40 * 60;
    server.clock.set(now);
    server.engine.maintain().unwrap();
    for host in ["a", "b"] {
        let series = format!("http.requests{{host={host}}}");
        let mut ts = NOW - 2 * HOUR;
        while ts < now {
            server.engine.record(&series, ts, 6.0).unwrap();
            ts += 10;
        }
    }
    server.engine.sync().unwrap();
    server
}

#[test]
fn query_and_aggregate_answers_name_the_point_still_filling() {
    let server = server_forty_minutes_into_the_hour();
    let range = format!("tier=1h&from={}&to={}", NOW - 2 * HOUR, NOW + HOUR);
    let query = server.json(&format!(
        "/api/v1/query?series=http.requests{{host=a}}&display=total&{range}"
    ));
    // Whole hours total 360 samples of 6; the one 40 minutes in, 240 of them.
    assert_eq!(
        query["points"],
        json!([
            [NOW - 2 * HOUR, 2160.0],
            [NOW - HOUR, 2160.0],
            [NOW, 1440.0]
        ])
    );
    assert_eq!(query["partial_from"], json!(NOW));

    let aggregate = server.json(&format!(
        "/api/v1/aggregate?match=http.requests&agg=sum&display=per_sec&{range}"
    ));
    assert_eq!(aggregate["partial_from"], json!(NOW), "{aggregate}");
    assert_eq!(aggregate["groups"][0]["points"][2][0], json!(NOW));

    // A whole-range aggregate that reaches now is partial as a whole; one over ended hours,
    // and a query over them, are not.
    let whole = server.json(&format!(
        "/api/v1/aggregate?match=http.requests&agg=sum&display=total&range=whole&{range}"
    ));
    assert_eq!(whole["partial_from"], json!(NOW - 2 * HOUR), "{whole}");
    let ended = format!("tier=1h&from={}&to={NOW}", NOW - 2 * HOUR);
    for path in [
        format!("/api/v1/query?series=http.requests{{host=a}}&{ended}"),
        format!("/api/v1/aggregate?match=http.requests&agg=sum&{ended}"),
    ] {
        let answer: Value = server.json(&path);
        assert_eq!(answer.get("partial_from"), None, "{path}: {answer}");
    }
}

#[test]
fn the_command_line_marks_the_row_still_filling() {
    // Not within seconds of an hour's end, where the row still filling could end between the
    // import and the read.
    let mut now = chrono::Utc::now().timestamp();
    if now % HOUR > HOUR - 30 {
        std::thread::sleep(std::time::Duration::from_secs(
            (HOUR - now % HOUR + 2) as u64,
        ));
        now = chrono::Utc::now().timestamp();
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let input = dir.path().join("in.txt");
    let lines: String = (0..3 * HOUR / 10)
        .map(|i| format!("http.requests;host=a 6 {}\n", now - 3 * HOUR + i * 10))
        .collect();
    std::fs::write(&input, lines).unwrap();
    tierdb(&["import", input.to_str().unwrap()], &data);

    let hour = now - now % HOUR;
    let table = tierdb(
        &[
            "aggregate",
            "http.requests",
            "--display",
            "per_sec",
            "--range",
            "3h",
            "--tier",
            "1h",
        ],
        &data,
    );
    let rows: Vec<&str> = table.lines().skip(2).collect();
    let (last, ended) = rows.split_last().unwrap();
    assert!(
        last.starts_with(&tierdb::time::format_ts(hour)) && last.ends_with("(still filling)"),
        "{table}"
    );
    assert!(ended.iter().all(|row| !row.contains('(')), "{table}");

    // The JSON the command line prints is the HTTP API's, with the same mark.
    let json: Value = serde_json::from_str(&tierdb(
        &[
            "query",
            "http.requests{host=a}",
            "--range",
            "3h",
            "--tier",
            "1h",
            "--format",
            "json",
        ],
        &data,
    ))
    .unwrap();
    assert_eq!(json["partial_from"], json!(hour));
}

/// `per_sec` of a gauge passed for a rate without a word (#31): a running total sent over
/// Graphite is a gauge unless a rule says otherwise, and its per_sec printed 1183 where the
/// rate was 6/s. The answer now says the series is a gauge and what makes it a counter.
#[test]
fn per_sec_of_a_gauge_says_it_is_a_gauge_and_how_to_make_it_a_counter() {
    let server = server_forty_minutes_into_the_hour();
    let range = format!("tier=1h&from={}&to={NOW}", NOW - 2 * HOUR);
    let answer = server.json(&format!(
        "/api/v1/query?series=http.requests{{host=a}}&display=per_sec&{range}"
    ));
    let note = answer["note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("http.requests{host=a} is a gauge")
            && note.contains("[counters]")
            && note.contains("kind=counter"),
        "{answer}"
    );
    // Other displays, and per_sec of a counter, need no note.
    let avg = server.json(&format!(
        "/api/v1/query?series=http.requests{{host=a}}&display=avg&{range}"
    ));
    assert_eq!(avg.get("note"), None);
    server
        .engine
        .declare_kind(
            server.engine.series("rate.counter").unwrap(),
            tierdb::SeriesKind::Counter,
        )
        .unwrap();
    server
        .engine
        .record("rate.counter", NOW - 120, 10.0)
        .unwrap();
    server
        .engine
        .record("rate.counter", NOW - 60, 70.0)
        .unwrap();
    server.engine.sync().unwrap();
    let counter = server.json(&format!(
        "/api/v1/query?series=rate.counter&display=per_sec&tier=1m&from={}&to={NOW}",
        NOW - 180
    ));
    assert_eq!(counter.get("note"), None, "{counter}");

    // An aggregate's per_sec says how many of its series are gauges.
    let aggregate = |selector: &str| {
        server.json(&format!(
            "/api/v1/aggregate?match={selector}&agg=sum&display=per_sec&tier=1m&from={}&to={NOW}",
            NOW - 180
        ))
    };
    let gauges = aggregate("http.requests");
    let note = gauges["note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("all 2 series are gauges") && note.contains("[counters]"),
        "{gauges}"
    );
    let mixed = aggregate("*");
    let note = mixed["note"].as_str().unwrap_or_default();
    assert!(note.starts_with("2 of the 3 series are gauges"), "{mixed}");
    assert_eq!(aggregate("rate.counter").get("note"), None);
    let total = server.json(&format!(
        "/api/v1/aggregate?match=http.requests&agg=sum&display=total&tier=1m&from={}&to={NOW}",
        NOW - 180
    ));
    assert_eq!(total.get("note"), None, "{total}");
}
