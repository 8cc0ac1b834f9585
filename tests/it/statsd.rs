//! StatsD over real UDP into a server in the test process, its clock moved by hand across
//! flush intervals: counters with sample rates summed per interval, gauges with relative
//! values, timers and histograms as samples, sets counted, DogStatsD tags, bad lines counted
//! by reason; every 1m bucket checked against what the lines say.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use tierdb::{Display, SeriesKind, TiersConfig};

use crate::common::NOW;
use crate::support::http::percent_encode;
use crate::support::server::TestServer;

/// How long a datagram may take to be received and written, on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(30);

fn send(server: &TestServer, lines: &[&str]) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let datagram = lines.join("\n");
    socket
        .send_to(datagram.as_bytes(), server.statsd.unwrap())
        .unwrap();
}

/// Waits until `check` holds, or panics with `what` past [`DEADLINE`].
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < DEADLINE, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn known(server: &TestServer, series: &str) -> bool {
    server.engine.registry().get(series).is_some()
}

/// The 1m bucket at NOW of `series`, shown as `display`.
fn minute(server: &TestServer, series: &str, display: Display) -> Option<f64> {
    server.minute(series, NOW, display)
}

#[test]
fn statsd_lines_aggregate_per_interval_into_buckets() {
    // A rule that would store `page.*` as a counter of running totals: StatsD declares its
    // counters delta counters, and its other series gauges.
    let mut tiers = TiersConfig::default();
    tiers.counters.names = vec!["page.*".into()];
    let server = TestServer::with_statsd(tiers, Duration::from_secs(10));

    // Interval [NOW, NOW + 10), all in one datagram so it is taken at one instant.
    let mut first = vec!["page.views:1|c|@0.1"; 5];
    first.extend([
        "page.views:2|c",
        "page.views:1|c|#page:home",
        "temp:20|g",
        "temp:+5|g",
        "temp:-3|g",
        "req.time:100|ms",
        "req.time:300|h",
        "req.time:200:400|ms|#",
        "users:alice|s",
        "users:bob|s",
        "users:alice|s",
        "garbage",
        "bad:1|x",
        "rate:1|c|@2",
    ]);
    send(&server, &first);
    // Timer values are written as they arrive; aggregates only once the interval ends.
    wait_until("req.time written", || known(&server, "req.time"));
    assert!(
        !known(&server, "page.views"),
        "a counter written before its interval ended"
    );

    server.clock.advance(10);
    // A series is registered just before its batch is written: wait for the value.
    wait_until("the first interval written", || {
        known(&server, "page.views") && minute(&server, "page.views", Display::Count) == Some(1.0)
    });
    assert_eq!(minute(&server, "page.views", Display::Total), Some(52.0));
    assert_eq!(minute(&server, "page.views", Display::Count), Some(1.0));

    // Interval [NOW + 10, NOW + 20); the timer tells when the datagram was taken.
    send(
        &server,
        &["page.views:3|c", "temp:+1|g", "users:carol|s", "mark:1|ms"],
    );
    wait_until("the second datagram taken", || known(&server, "mark"));
    server.clock.advance(10);
    // One batch, stored by several writer threads: wait for every series of it.
    wait_until("the second interval written", || {
        ["page.views", "temp", "users"]
            .iter()
            .all(|series| minute(&server, series, Display::Count) == Some(2.0))
    });

    // Counters: the sum of scaled increments per interval; the minute's total is both.
    assert_eq!(minute(&server, "page.views", Display::Total), Some(55.0));
    assert_eq!(
        minute(&server, "page.views", Display::PerSec),
        Some(55.0 / 60.0)
    );
    assert_eq!(
        minute(&server, "page.views{page=home}", Display::Total),
        Some(1.0)
    );
    // Gauges: 20 + 5 - 3 = 22, then moved by +1.
    assert_eq!(minute(&server, "temp", Display::Min), Some(22.0));
    assert_eq!(minute(&server, "temp", Display::Max), Some(23.0));
    assert_eq!(minute(&server, "temp", Display::Count), Some(2.0));
    // Timers and histograms: every value a sample.
    assert_eq!(minute(&server, "req.time", Display::Count), Some(4.0));
    assert_eq!(minute(&server, "req.time", Display::Total), Some(1000.0));
    assert_eq!(minute(&server, "req.time", Display::Min), Some(100.0));
    assert_eq!(minute(&server, "req.time", Display::Max), Some(400.0));
    // Sets: distinct members per interval.
    assert_eq!(minute(&server, "users", Display::Max), Some(2.0));
    assert_eq!(minute(&server, "users", Display::Min), Some(1.0));

    for (series, kind) in [
        ("page.views", SeriesKind::Counter),
        ("temp", SeriesKind::Gauge),
        ("req.time", SeriesKind::Distribution),
        ("users", SeriesKind::Gauge),
    ] {
        let id = server.engine.registry().get(series).unwrap();
        assert_eq!(server.engine.series_kind(id), kind, "{series}");
    }

    // PromQL: a StatsD counter is a counter, so rate() and increase() are its exact count
    // over the window (55 in the minute), under its PromQL name too.
    let query = |text: &str| {
        let path = format!(
            "/prometheus/api/v1/query?query={}&time={}",
            percent_encode(text),
            NOW + 60
        );
        let (status, body) = server.get(&path);
        assert_eq!(status, 200, "{text}: {body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer.get("warnings"), None, "{text}: {body}");
        let value = answer["data"]["result"][0]["value"][1]
            .as_str()
            .map(str::to_owned);
        value.map(|v| v.parse::<f64>().unwrap())
    };
    assert_eq!(query("rate(page_views[1m])"), Some(55.0 / 60.0));
    assert_eq!(query("increase({__name__=\"page.views\"}[1m])"), Some(55.0));
    assert_eq!(
        query("sum(increase({__graphite__=\"page.*\"}[1m]))"),
        Some(56.0)
    );

    // Bad lines are counted by reason; the rest landed.
    let (status, metrics) = server.get("/metrics");
    assert_eq!(status, 200);
    for reason in ["missing_value", "unknown_type", "invalid_sample_rate"] {
        let line = format!("tierdb_samples_rejected_total{{reason=\"{reason}\"}} 1");
        assert!(metrics.contains(&line), "no {line:?} in\n{metrics}");
    }
    assert!(!known(&server, "rate"), "a refused line landed");
}
