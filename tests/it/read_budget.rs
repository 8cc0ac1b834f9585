//! Hostile reads against a real server on loopback: one request may read only its budget in
//! all (`--max-read-values`), however many targets or paths it names.
//!
//! The bug: the render budget held per path, so 500 `target`s (or `sumSeries(a.*, a.*, ...)`)
//! read 500 times it, `/api/v1/aggregate` capped the groups x points it answered but not the
//! series x buckets it read, and `/metrics/find` cloned every registry key per request.

use std::time::{Duration, Instant};

use tierdb::server::Limits;

use crate::support::http::percent_encode;
use crate::support::server::TestServer;

/// A refusal that names the budget, within a bound far above what it takes (a refusal must
/// not cost what the read would have).
fn refused(server: &TestServer, path: &str) -> String {
    let started = Instant::now();
    let (status, body) = server.get(path);
    let took = started.elapsed();
    eprintln!("{} refused after {took:?}", short(path));
    assert_eq!(status, 400, "{}", short(&body));
    assert!(body.contains("read budget: "), "{body}");
    assert!(body.contains("--max-read-values"), "{body}");
    assert!(
        took < Duration::from_secs(60),
        "refused only after {took:?}"
    );
    body
}

/// The start of a (possibly huge) answer, for a failure message.
fn short(body: &str) -> String {
    body.chars().take(300).collect()
}

fn over_budget_count(server: &TestServer) -> u64 {
    let (status, metrics) = server.get("/metrics");
    assert_eq!(status, 200);
    let line = (metrics.lines())
        .find(|l| l.starts_with("tierdb_requests_over_budget_total "))
        .unwrap_or_else(|| panic!("no over-budget counter in {metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// A server with a read budget of `max_read_values` holding the series `names` (empty).
fn serve(max_read_values: u64, names: impl IntoIterator<Item = String>) -> TestServer {
    let limits = Limits {
        max_read_values,
        ..Limits::default()
    };
    let server = TestServer::start(None, limits);
    for name in names {
        server.engine.series(&name).unwrap();
    }
    server
}

#[test]
fn a_render_of_500_targets_shares_one_budget() {
    let default = Limits::default().max_read_values;
    let server = serve(default, (0..20).map(|i| format!("load.s{i}")));
    // Each target reads 20 series x 2016 points (a week of 5m) = 40,320 values: far within
    // the budget alone, 20 M together.
    let window = "from=-7d&maxDataPoints=2016";
    let targets: String = (0..500).map(|_| "&target=load.*").collect();
    let body = refused(&server, &format!("/render?{window}{targets}"));
    assert!(
        body.contains("\\\"load.*\\\" matches 20 series x 2016 points = 40320 values on top of"),
        "{body}"
    );
    // One target repeating the path inside a function shares it the same way.
    let paths = vec!["load.*"; 500].join(",");
    let target = percent_encode(&format!("sumSeries({paths})"));
    refused(&server, &format!("/render?{window}&target={target}"));
    assert_eq!(over_budget_count(&server), 2);
    // A dashboard's worth of targets still renders.
    let targets: String = (0..10).map(|_| "&target=load.*").collect();
    let (status, body) = server.get(&format!("/render?{window}{targets}"));
    assert_eq!(status, 200, "{}", short(&body));
    assert_eq!(over_budget_count(&server), 2);
}

#[test]
fn an_aggregate_over_every_series_at_1m_is_refused_by_what_it_reads() {
    let server = serve(6_000, (0..100).map(|i| format!("load{{host=h{i}}}")));
    // One group and one point, but 100 series x 2880 buckets of 1m read.
    let body = refused(
        &server,
        "/api/v1/aggregate?match=*&range=whole&tier=1m&from=-48h&to=now",
    );
    assert!(body.contains("100 series x 2880 buckets of 1m"), "{body}");
    assert_eq!(over_budget_count(&server), 1);
    // The same at 1h reads 100 x 48 cells (and scans 100 keys): within the budget.
    let (status, body) = server.get("/api/v1/aggregate?match=*&range=whole&tier=1h&from=-48h");
    assert_eq!(status, 200, "{body}");
    // A range reaching past the tier's retention costs only the buckets it still holds
    // (at most three days of 1m for one series), not a year's.
    let (status, body) =
        server.get("/api/v1/aggregate?match=load{host=h1}&range=whole&tier=1m&from=-1y");
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_find_answers_at_most_the_budget_in_nodes() {
    // The scan costs 20, each node 1.
    let server = serve(30, (0..20).map(|i| format!("app.s{i}.latency")));
    let body = refused(&server, "/metrics/find?query=app.*");
    assert!(
        body.contains("\\\"app.*\\\" has more nodes than that"),
        "{body}"
    );
    // Twenty series under one branch are one node.
    let (status, body) = server.get("/metrics/find?query=*");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"id\":\"app\""), "{body}");
    assert_eq!(over_budget_count(&server), 1);
}

#[test]
fn many_paths_pay_for_their_registry_scans() {
    let server = serve(6_000, (0..100).map(|i| format!("load{{host=h{i}}}")));
    // Each target matches one series at one point (the minute up to now), but scans 100
    // keys to find it.
    let targets: String = (0..60).map(|_| "&target=load;host=h1").collect();
    let body = refused(&server, &format!("/render?from=-1min&until=now{targets}"));
    assert!(
        body.contains("a scan of the 100 series = 100 values"),
        "{body}"
    );
    let targets: String = (0..50).map(|_| "&target=load;host=h1").collect();
    let (status, body) = server.get(&format!("/render?from=-1min&until=now{targets}"));
    assert_eq!(status, 200, "{}", short(&body));
}
