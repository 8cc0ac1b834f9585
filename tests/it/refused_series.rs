//! A series exists once a sample of it lands, and not before (#31).
//!
//! The bug: `a.b nan`, a sample three days ahead, a millisecond timestamp read as seconds or
//! an import line older than every tier was refused and counted, yet its series was
//! registered on the way: it showed in `tierdb series`, in `/metrics/find` and in the
//! dashboard's picker (which lists `/api/v1/series`) with "no samples in this window".

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tierdb::server::Limits;

use crate::common::NOW;
use crate::support::process::run_tierdb;
use crate::support::server::TestServer;

const DAY: i64 = 86_400;

/// Graphite lines, each refused for its value or time but the last, which lands.
fn refused_and_kept_lines(now: i64) -> String {
    [
        format!("refused.nan nan {}", now - 60),
        format!("refused.infinite inf {}", now - 60),
        format!("refused.future 1 {}", now + 3 * DAY),
        format!("refused.millis 1 {}", now * 1000),
        format!("refused.old 1 {}", now - 3650 * DAY),
        format!("kept.one 1 {}", now - 60),
    ]
    .join("\n")
        + "\n"
}

/// The total of the `/metrics` family `name` over all its samples.
fn metric_total(server: &TestServer, name: &str) -> u64 {
    let (status, text) = server.get("/metrics");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter(|line| line.starts_with(name))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn refused_samples_leave_no_series_in_the_listing_find_or_the_picker() {
    let server = TestServer::start(None, Limits::default());
    // Over Graphite TCP.
    let mut stream = TcpStream::connect(server.graphite).unwrap();
    stream
        .write_all(refused_and_kept_lines(NOW).as_bytes())
        .unwrap();
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric_total(&server, "tierdb_samples_rejected_total") < 5
        || metric_total(&server, "tierdb_samples_accepted_total") < 1
    {
        assert!(Instant::now() < deadline, "the lines were never counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Over HTTP: an Influx line in seconds read as nanoseconds (too old), and JSON samples
    // too far ahead and not finite (a string the parser reads as NaN is refused earlier).
    let (status, body) = server.request(
        "POST",
        "/write?db=test",
        &[],
        format!("refused_influx,host=a value=1 {NOW}\n").as_bytes(),
    );
    assert!(body.contains("too_old"), "{status}: {body}");
    let element = json!([{"series": "refused.json", "ts": NOW + 3 * DAY, "value": 1.0}]);
    let (status, body) = server.request(
        "POST",
        "/api/v1/write",
        &[("Content-Type", "application/json")],
        element.to_string().as_bytes(),
    );
    assert!(body.contains("too_far_in_future"), "{status}: {body}");

    // Only the series whose sample landed is listed: in the dashboard's picker
    // (/api/v1/series) and in Grafana's /metrics/find.
    assert_eq!(
        server.json("/api/v1/series"),
        json!({"series": ["kept.one"]})
    );
    let found: Vec<Value> = server
        .json("/metrics/find?query=*")
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["id"].clone())
        .collect();
    assert_eq!(found, vec![json!("kept")]);
    assert_eq!(server.engine.registry().len(), 1);
}

#[test]
fn the_library_records_a_refused_sample_without_registering_its_series() {
    let dir = tempfile::tempdir().unwrap();
    let clock = std::sync::Arc::new(tierdb::ManualClock::new(NOW));
    let engine = tierdb::Engine::builder(dir.path())
        .clock(clock)
        .background_maintenance(false)
        .open()
        .unwrap();
    for (series, ts, value) in [
        ("refused.nan", NOW, f64::NAN),
        ("refused.future", NOW + 3 * DAY, 1.0),
        ("refused.old", NOW - 3650 * DAY, 1.0),
    ] {
        let refused = engine.record(series, ts, value);
        assert!(
            matches!(refused, Err(tierdb::Error::Rejected(_))),
            "{series}: {refused:?}"
        );
    }
    engine.record("kept.one", NOW - 60, 1.0).unwrap();
    engine.sync().unwrap();
    assert_eq!(engine.registry().len(), 1);
    let stats = engine.stats();
    let rejected: u64 = stats.rejected.iter().map(|(_, n)| n).sum();
    assert_eq!(rejected, 3, "{:?}", stats.rejected);
}

#[test]
fn an_import_of_refused_lines_adds_no_series_to_tierdb_series() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let now = chrono::Utc::now().timestamp();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, refused_and_kept_lines(now)).unwrap();
    let tierdb = |args: &[&str]| run_tierdb(args, &data);
    let import = tierdb(&["import", input.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&import.stderr).into_owned()
        + &String::from_utf8_lossy(&import.stdout);
    assert!(import.status.success(), "{said}");
    assert!(said.contains("1 samples accepted, 5 rejected"), "{said}");
    let listed = tierdb(&["series", "*"]);
    assert!(listed.status.success());
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "kept.one");
}
