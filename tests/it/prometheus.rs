//! End to end with the real Prometheus: node_exporter on a loopback port, Prometheus (in
//! agent mode: scrape and remote write, no local queries) scraping it every second and
//! remote-writing to `tierdb serve` with the server's bearer token, as its
//! `authorization: credentials` sends it. The test waits until tierdb holds
//! `node_cpu_seconds_total` and `node_memory_MemAvailable_bytes`, then checks that the values
//! are plausible: the CPU rate summed over modes and CPUs lies between 0 and the number of
//! CPUs (it can only if the counter was stored as increases), and available memory is above
//! 0 and at most MemTotal. Every process is stopped by pid.
//!
//! Needs Debian's `prometheus` (2.42) and `prometheus-node-exporter`, at the paths
//! `PROMETHEUS` and `NODE_EXPORTER` name (the install script's overrides too), which
//! `scripts/test.sh` installs; when missing, the test fails naming the install script, as the
//! collectd test does.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tierdb::{Engine, SeriesKind};

use crate::support::http::{percent_encode, request};
use crate::support::process::{ensure_programs, tierdb_command, Proc};
use crate::support::{file, unix_now};

const TOKEN: &str = "remote-write-token";
/// How long until Prometheus has scraped and sent enough for every check.
const DATA_TIMEOUT: Duration = Duration::from_secs(120);
/// Scrapes to wait for at least, so each CPU counter has increases and not just a baseline.
const MIN_COLLECT: Duration = Duration::from_secs(8);

fn program(env: &str, default: &str) -> PathBuf {
    std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// A loopback port free at the time of asking (the child binds it right after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` with the token, as JSON (`None` until it answers 200).
fn get(http: SocketAddr, path: &str) -> Option<Value> {
    let auth = format!("Bearer {TOKEN}");
    let (status, body) = request(http, "GET", path, &[("Authorization", &auth)], b"");
    (status == 200).then(|| serde_json::from_str(&body).unwrap())
}

/// The non-null points of an aggregate's only group.
fn points(http: SocketAddr, query: &str, from: i64) -> Vec<f64> {
    let path = format!(
        "/api/v1/aggregate?{query}&tier=1m&from={from}&to={}",
        unix_now() + 60
    );
    let Some(body) = get(http, &path) else {
        return Vec::new();
    };
    let Some(group) = body["groups"].as_array().and_then(|g| g.first()) else {
        return Vec::new();
    };
    group["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p[1].as_f64())
        .collect()
}

fn series(http: SocketAddr, name: &str) -> Vec<String> {
    let path = format!("/api/v1/series?match={}", percent_encode(name));
    get(http, &path).map_or_else(Vec::new, |body| {
        body["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    })
}

#[test]
fn prometheus_remote_write_end_to_end() {
    let prometheus = program("PROMETHEUS", "/usr/bin/prometheus");
    let node_exporter = program("NODE_EXPORTER", "/usr/bin/prometheus-node-exporter");
    if !ensure_programs(
        &[&prometheus, &node_exporter],
        "prometheus and node_exporter",
    ) {
        return;
    }
    let test_start = unix_now();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    let server_log = dir.join("server.stderr");
    let data = dir.join("data");
    let mut server = Proc::spawn(
        "tierdb serve",
        tierdb_command("serve", &data)
            .args(["--token", TOKEN])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file(&server_log)),
        vec![server_log],
        false,
    );
    let http = server.wait_ready().http;

    let exporter_port = free_port();
    let exporter_log = dir.join("node_exporter.stderr");
    let mut exporter = Proc::spawn(
        "node_exporter",
        Command::new(&node_exporter)
            .arg(format!("--web.listen-address=127.0.0.1:{exporter_port}"))
            .args([
                "--collector.disable-defaults",
                "--collector.cpu",
                "--collector.meminfo",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file(&exporter_log)),
        vec![exporter_log],
        false,
    );
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", exporter_port)).is_err() {
        exporter.assert_running();
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "node_exporter never listened\n{}",
            exporter.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let config = dir.join("prometheus.yml");
    std::fs::write(&config, prometheus_config(exporter_port, http)).unwrap();
    let prometheus_log = dir.join("prometheus.stderr");
    let mut prometheus = Proc::spawn(
        "prometheus",
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg("--enable-feature=agent")
            .arg(format!(
                "--storage.agent.path={}",
                dir.join("agent").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{}", free_port()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file(&prometheus_log)),
        vec![prometheus_log],
        false,
    );

    // Until both metrics have points, and at least MIN_COLLECT of scrapes.
    let from = test_start - 120;
    let cpu_rate = "match=node_cpu_seconds_total&agg=sum&display=per_sec";
    let available = "match=node_memory_MemAvailable_bytes&agg=max&display=max";
    let total = "match=node_memory_MemTotal_bytes&agg=min&display=min";
    let started = Instant::now();
    loop {
        let ready = [cpu_rate, available, total]
            .iter()
            .all(|query| !points(http, query, from).is_empty());
        if ready && started.elapsed() >= MIN_COLLECT {
            break;
        }
        for process in [&mut server, &mut exporter, &mut prometheus] {
            process.assert_running();
        }
        if started.elapsed() > DATA_TIMEOUT {
            panic!(
                "no data after {DATA_TIMEOUT:?}\n{}\n{}\nseries: {:?}",
                prometheus.diagnostics(),
                server.diagnostics(),
                get(http, "/api/v1/series?match=node_*")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    // CPU seconds per second, summed over modes and CPUs: between 0 and the CPUs.
    let cpu_series = series(http, "node_cpu_seconds_total");
    let mut cpus: Vec<String> = cpu_series
        .iter()
        .filter_map(|s| s.split(['{', ',']).find_map(|t| t.strip_prefix("cpu=")))
        .map(str::to_owned)
        .collect();
    cpus.sort();
    cpus.dedup();
    assert!(!cpus.is_empty(), "no cpu label in {cpu_series:?}");
    let rates = points(http, cpu_rate, from);
    let most = cpus.len() as f64 * 1.1;
    for rate in &rates {
        assert!(
            (0.0..=most).contains(rate),
            "CPU seconds per second {rate} outside 0..={most} ({} CPUs): {rates:?}",
            cpus.len()
        );
    }
    assert!(
        rates.iter().any(|r| *r > 0.0),
        "no CPU time at all: {rates:?}"
    );

    // Available memory: above 0 and at most the total.
    let totals = points(http, total, from);
    let smallest_total = totals.iter().copied().fold(f64::INFINITY, f64::min);
    for bytes in points(http, available, from) {
        assert!(
            bytes > 0.0 && bytes <= smallest_total,
            "MemAvailable {bytes} not in (0, {smallest_total}]"
        );
    }

    let status = prometheus.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}\n{}", prometheus.diagnostics());
    // node_exporter installs no SIGTERM handler: the signal ends it.
    let status = exporter.terminate(Duration::from_secs(30));
    assert!(
        status.success() || status.signal() == Some(15),
        "{status}\n{}",
        exporter.diagnostics()
    );
    let status = server.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}\n{}", server.diagnostics());

    // Kinds, read from the data directory the server left.
    let engine = Engine::builder(&data).read_only().open().unwrap();
    let kind = |name: &str| {
        let key = series_in(&engine, name);
        engine.series_kind(engine.registry().get(&key).unwrap())
    };
    assert_eq!(kind("node_cpu_seconds_total"), SeriesKind::Counter);
    assert_eq!(kind("node_memory_MemAvailable_bytes"), SeriesKind::Gauge);
}

/// The first series named `name` the engine holds.
fn series_in(engine: &Engine, name: &str) -> String {
    let selector = tierdb::Selector::parse(name).unwrap();
    engine
        .reader()
        .series_keys(&selector)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no {name} series"))
        .to_string()
}

/// Scrape node_exporter every second; remote write to tierdb with its token, sending at
/// least every second.
fn prometheus_config(exporter_port: u16, tierdb: SocketAddr) -> String {
    format!(
        r#"global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: node
    static_configs:
      - targets: ["127.0.0.1:{exporter_port}"]
remote_write:
  - url: http://{tierdb}/api/v1/prom/write
    authorization:
      credentials: {TOKEN}
    queue_config:
      batch_send_deadline: 1s
      max_samples_per_send: 500
"#
    )
}
