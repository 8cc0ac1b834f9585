//! One time grammar for every surface: `tierdb query --from now-7d` (the command line, read
//! beside a running server) and `/render?from=now-7d` (Graphite's API over HTTP) read the
//! same window, point for point.

use std::process::Command;

use serde_json::{json, Value};

use crate::support::http::{get_json, request};
use crate::support::process::{tierdb_ok, Proc};

const HOUR: i64 = 3_600;
const FIVE_MINUTES: i64 = 300;

#[test]
fn cli_query_and_render_read_the_same_window_for_now_minus_7d() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Proc::tierdb("serve", dir.path(), dir.path().join("serve.log"));
    let addrs = server.wait_ready();
    // One sample an hour over the last eight days: the 7-day window holds 168 of them.
    let now = chrono::Utc::now().timestamp();
    let samples: Vec<Value> = (0..8 * 24)
        .map(|h| json!({"series": "disk.used", "ts": now - h * HOUR, "value": h}))
        .collect();
    let (status, body) = request(
        addrs.http,
        "POST",
        "/api/v1/write",
        &[("Content-Type", "application/json")],
        serde_json::to_string(&samples).unwrap().as_bytes(),
    );
    assert_eq!(status, 204, "{body}");

    // Both read relative to their own clock; a run that straddles a five-minute boundary
    // (where the 5m grid moves), or starts on one, is repeated. Off the boundaries the
    // native API's [from, to) and render's graphite-web window (points after `from` up to
    // and including `until`) hold the same buckets.
    let (cli, render) = loop {
        let before = chrono::Utc::now().timestamp();
        let output = Command::new(env!("CARGO_BIN_EXE_tierdb"))
            .args(["query", "disk.used", "--from", "now-7d", "--tier", "5m"])
            .args(["--format", "json"])
            .arg("--data-dir")
            .arg(dir.path())
            .env_remove("TIERDB_TIERS")
            .output()
            .expect("run tierdb query");
        assert!(output.status.success(), "{output:?}");
        let cli: Value = serde_json::from_slice(&output.stdout).unwrap();
        let render = get_json(
            addrs.http,
            "/render?target=disk.used&from=now-7d&format=json&maxDataPoints=2016",
        )
        .expect("render");
        let after = chrono::Utc::now().timestamp();
        if before % FIVE_MINUTES != 0 && before / FIVE_MINUTES == after / FIVE_MINUTES {
            break (cli, render);
        }
    };
    let cli_points: Vec<(i64, Option<f64>)> = cli["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_i64().unwrap(), p[1].as_f64()))
        .collect();
    let render_points: Vec<(i64, Option<f64>)> = render[0]["datapoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[1].as_i64().unwrap(), p[0].as_f64()))
        .collect();
    assert_eq!(cli["tier"], "5m", "{cli}");
    assert_eq!(cli_points.len(), 2016, "{cli}");
    let known = cli_points.iter().filter(|(_, v)| v.is_some()).count();
    assert_eq!(known, 168, "{cli}");
    assert_eq!(cli_points, render_points);
    server.terminate(std::time::Duration::from_secs(20));
}

/// The dashboard offers `1mo` and the command line refused it, asking for `1mon` (#31): every
/// spelling of a month, and of the other units, now reads the same everywhere.
#[test]
fn a_month_is_spelled_the_same_way_on_every_surface() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let now = chrono::Utc::now().timestamp();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, format!("disk.used 5 {}\n", now - 3 * 86_400)).unwrap();
    let tierdb = |args: &[&str]| tierdb_ok(args, &data);
    tierdb(&["import", input.to_str().unwrap()]);
    let read = |range: &str, step: &str| {
        tierdb(&[
            "query",
            "disk.used",
            "--range",
            range,
            "--tier",
            "1d",
            "--step",
            step,
            "--format",
            "json",
        ])
    };
    let month = read("30d", "1d");
    assert!(month.contains("5.0"), "{month}");
    for (range, step) in [
        ("1mo", "24h"),
        ("1mon", "1day"),
        ("1month", "1d"),
        ("-1mo", "1d"),
    ] {
        assert_eq!(read(range, step), month, "--range {range} --step {step}");
    }
}
