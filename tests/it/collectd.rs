//! End to end with a real agent: collectd's `write_graphite` plugin sends its cpu, memory and
//! load samples over Graphite plaintext TCP to `tierdb serve` on 127.0.0.1, and the samples
//! are read back through the HTTP API.
//!
//! Needs `/usr/sbin/collectd` with the cpu, memory, load and write_graphite plugins (Debian's
//! `collectd-core`, which `scripts/test.sh` installs). When it is missing the test fails,
//! naming the install script, so CI cannot pass without running it; set `TIERDB_SKIP_E2E=1`
//! to skip it on a machine that cannot install collectd (CI never sets it).
//!
//! With the configuration below, collectd 5.12 sends lines such as (each ending in `\r\n`)
//! ```text
//! collectd.e2e.cpu.percent.user 0.502512562814 1795264327
//! collectd.e2e.memory.memory.used 99168256 1795264327
//! collectd.e2e.load.load.shortterm 0.6787109375 1795264327
//! ```
//! and, besides those, `cpu.percent.{system,idle,nice,wait,interrupt,softirq,steal}`,
//! `memory.memory.{free,cached,buffered,slab_recl,slab_unrecl}` and
//! `load.load.{midterm,longterm}`. cpu percentages need two readings, so cpu series start one
//! interval after memory and load.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::http::{get_json, percent_encode};
use crate::support::process::{ensure_programs, Proc};
use crate::support::{file, unix_now};

const COLLECTD: &str = "/usr/sbin/collectd";
const LOAD: &str = "collectd.e2e.load.load.shortterm";
const MEMORY: &str = "collectd.e2e.memory.memory.used";
const CPU: &str = "collectd.e2e.cpu.percent.user";

/// How long collectd may take until every expected series has a point.
const DATA_TIMEOUT: Duration = Duration::from_secs(30);
/// collectd runs at least this long (about this many 1 s intervals), so each series gets
/// several samples per minute bucket.
const MIN_COLLECT: Duration = Duration::from_secs(6);

#[test]
fn collectd_write_graphite_end_to_end() {
    if !ensure_programs(&[Path::new(COLLECTD)], "collectd") {
        return;
    }
    let test_start = unix_now();
    let tmp = tempfile::tempdir().expect("temp dir");

    // The server, on ephemeral ports.
    let server_log = tmp.path().join("server.stderr");
    let mut server = Proc::tierdb("serve", &tmp.path().join("data"), server_log);
    let addrs = server.wait_ready();
    let http = addrs.http;

    // collectd, sending to the server's Graphite TCP port.
    let conf = tmp.path().join("collectd.conf");
    std::fs::write(&conf, collectd_conf(tmp.path(), addrs.graphite_tcp))
        .expect("write collectd.conf");
    let collectd_stderr = tmp.path().join("collectd.stderr");
    let mut collectd = Proc::spawn(
        "collectd",
        Command::new(COLLECTD)
            .arg("-f")
            .arg("-C")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(file(&tmp.path().join("collectd.stdout")))
            .stderr(file(&collectd_stderr)),
        vec![collectd_stderr.clone(), tmp.path().join("collectd.log")],
        false,
    );

    // Until every expected series is listed and has a point (at least MIN_COLLECT).
    let started = Instant::now();
    loop {
        let elapsed = started.elapsed();
        let missing: Vec<&str> = match get_json(http, "/api/v1/series?match=collectd.e2e.*") {
            Ok(body) => {
                let listed = series_names(&body);
                [LOAD, MEMORY, CPU]
                    .into_iter()
                    .filter(|s| {
                        !listed.iter().any(|l| l == s)
                            || non_null(&query(http, s, test_start)).is_empty()
                    })
                    .collect()
            }
            Err(_) => vec![LOAD, MEMORY, CPU],
        };
        if missing.is_empty() && elapsed >= MIN_COLLECT {
            break;
        }
        collectd.assert_running();
        server.assert_running();
        if elapsed > DATA_TIMEOUT {
            panic!(
                "after {elapsed:?} still no data for {missing:?}\n{}\n{}\nseries: {:?}",
                collectd.diagnostics(),
                server.diagnostics(),
                get_json(http, "/api/v1/series")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let status = collectd.terminate(Duration::from_secs(15));
    assert!(
        status.success(),
        "collectd exited with {status}\n{}",
        collectd.diagnostics()
    );

    // The listing holds every collectd series we rely on, under its exact Graphite path.
    let listed =
        series_names(&get_json(http, "/api/v1/series?match=collectd.e2e.*").expect("series"));
    for expected in [LOAD, MEMORY, CPU] {
        assert!(
            listed.iter().any(|l| l == expected),
            "{expected} not in {listed:?}"
        );
    }
    assert!(
        listed.iter().all(|l| l.starts_with("collectd.e2e.")),
        "the glob matched foreign series: {listed:?}"
    );

    // Each reads back at 1m with plausible values at plausible times.
    let now = unix_now();
    let check = |name: &str, plausible: &dyn Fn(f64) -> bool, what: &str| {
        let body = query(http, name, test_start);
        assert_eq!(body["series"].as_str(), Some(name), "{body}");
        assert_eq!(body["tier"].as_str(), Some("1m"), "{body}");
        assert_eq!(body["display"].as_str(), Some("avg"), "{body}");
        let points = non_null(&body);
        assert!(!points.is_empty(), "{name}: no non-null point in {body}");
        for (ts, value) in points {
            assert!(
                (test_start - 60..=now + 60).contains(&ts),
                "{name}: point at {ts} outside [{}, {}]: {body}",
                test_start - 60,
                now + 60
            );
            assert!(
                value.is_finite() && plausible(value),
                "{name}: {value} at {ts} is not {what}: {body}"
            );
        }
    };
    check(LOAD, &|v| v >= 0.0, "a load average (>= 0)");
    check(MEMORY, &|v| v > 0.0, "a byte count (> 0)");
    check(
        CPU,
        &|v| (0.0..=100.0).contains(&v),
        "a percentage (0..=100)",
    );

    // SIGTERM: a graceful shutdown with exit code 0.
    let status = server.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "tierdb serve exited with {status} on SIGTERM\n{}",
        server.diagnostics()
    );
}

/// collectd.conf: 1 s interval, host `e2e`, cpu/memory/load to write_graphite over TCP, all
/// state and the log inside `dir`.
fn collectd_conf(dir: &Path, graphite: SocketAddr) -> String {
    let dir = dir.display();
    format!(
        r#"Hostname "e2e"
FQDNLookup false
BaseDir "{dir}"
PIDFile "{dir}/collectd.pid"
PluginDir "/usr/lib/collectd"
TypesDB "/usr/share/collectd/types.db"
Interval 1

LoadPlugin logfile
<Plugin logfile>
  LogLevel "info"
  File "{dir}/collectd.log"
  Timestamp true
</Plugin>

LoadPlugin cpu
LoadPlugin memory
LoadPlugin load
LoadPlugin write_graphite

<Plugin cpu>
  ReportByCpu false
  ReportByState true
  ValuesPercentage true
</Plugin>

<Plugin write_graphite>
  <Node "tierdb">
    Host "{host}"
    Port "{port}"
    Protocol "tcp"
    LogSendErrors true
    Prefix "collectd."
    EscapeCharacter "_"
    SeparateInstances true
    StoreRates true
    AlwaysAppendDS false
  </Node>
</Plugin>
"#,
        host = graphite.ip(),
        port = graphite.port(),
    )
}

/// `GET /api/v1/query` for `name` at 1m, avg, over [test_start - 120, now + 60).
fn query(http: SocketAddr, name: &str, test_start: i64) -> Value {
    let path = format!(
        "/api/v1/query?series={}&tier=1m&from={}&to={}&display=avg",
        percent_encode(name),
        test_start - 120,
        unix_now() + 60
    );
    get_json(http, &path).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// The `(ts, value)` pairs of a query answer whose value is not null.
fn non_null(body: &Value) -> Vec<(i64, f64)> {
    let Some(points) = body["points"].as_array() else {
        return Vec::new();
    };
    points
        .iter()
        .filter_map(|p| {
            let ts = p
                .get(0)?
                .as_i64()
                .unwrap_or_else(|| panic!("bad timestamp in {p}"));
            let value = p.get(1)?;
            (!value.is_null()).then(|| {
                (
                    ts,
                    value.as_f64().unwrap_or_else(|| panic!("bad value in {p}")),
                )
            })
        })
        .collect()
}

fn series_names(body: &Value) -> Vec<String> {
    body["series"]
        .as_array()
        .unwrap_or_else(|| panic!("no series array in {body}"))
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("series entry {s} is not a string"))
                .to_string()
        })
        .collect()
}
