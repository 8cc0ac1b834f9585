//! One time grammar for every surface: `tierdb query --from now-7d` (the command line, read
//! beside a running server) and `/render?from=now-7d` (Graphite's API over HTTP) read the
//! same window, point for point.

use std::process::Command;

use serde_json::{json, Value};

use crate::support::http::{get_json, request};
use crate::support::process::Proc;

const HOUR: i64 = 3_600;

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

    // Both read relative to their own clock; a run that straddles an hour boundary (where
    // the 1h grid moves) is repeated.
    let (cli, render) = loop {
        let hour = chrono::Utc::now().timestamp() / HOUR;
        let output = Command::new(env!("CARGO_BIN_EXE_tierdb"))
            .args(["query", "disk.used", "--from", "now-7d", "--format", "json"])
            .arg("--data-dir")
            .arg(dir.path())
            .env_remove("TIERDB_TIERS")
            .output()
            .expect("run tierdb query");
        assert!(output.status.success(), "{output:?}");
        let cli: Value = serde_json::from_slice(&output.stdout).unwrap();
        let render = get_json(
            addrs.http,
            "/render?target=disk.used&from=now-7d&format=json",
        )
        .expect("render");
        if chrono::Utc::now().timestamp() / HOUR == hour {
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
    assert_eq!(cli["tier"], "1h", "{cli}");
    assert_eq!(cli_points.len(), 168, "{cli}");
    assert!(cli_points.iter().all(|(_, v)| v.is_some()), "{cli}");
    assert_eq!(cli_points, render_points);
    server.terminate(std::time::Duration::from_secs(20));
}
