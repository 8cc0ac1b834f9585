//! Quantiles through a cluster: three `tierdb serve --cluster` nodes on a NATS server and
//! one single-node `tierdb serve`, fed the same seeded log-normal latencies as StatsD timers
//! (tagged by host and data centre, so the series spread over the partitions). Every `p50`,
//! `p90` and `p99` and every `hist`, of one series and merged over all series or per data
//! centre, at 1m, 1h and 1d, answers through each cluster node exactly as the single node
//! does, and within the relative error the answer states of the exact nearest-rank quantile
//! of the values sent. The same values as native gauge histograms over remote write answer
//! the same way. A cluster that took quantiles per partition, or merged the owners'
//! histograms wrongly, fails it.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};
use serde_json::Value;

use crate::cluster::{eventually, single_node_addrs, wait_served, Setup};
use crate::support::http::{get_json, get_with_header};

const HOSTS: usize = 12;
/// Hosts whose values are also sent as plain timers.
const PLAIN: usize = 4;
const PER_HOST: usize = 240;
const STATSD: [&str; 4] = ["--statsd", "127.0.0.1:0", "--statsd-flush", "1s"];

/// Per host, its data centre and its values, in steps of 2^-10 ms: every sum of them is
/// exact, so the `hist` answers' sums are the same bits whatever order the partitions' parts
/// are added in (values that are not exactly summable give sums equal up to float rounding,
/// as an aggregate's do).
fn latencies() -> Vec<(String, Vec<f64>)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(531);
    let latency = LogNormal::new(3.0, 1.05).expect("valid");
    (0..HOSTS)
        .map(|h| {
            let dc = ["east", "west", "north"][h % 3].to_string();
            let values = (0..PER_HOST)
                .map(|_| {
                    (Distribution::<f64>::sample(&latency, &mut rng) * 1024.0).round() / 1024.0
                })
                .collect();
            (dc, values)
        })
        .collect()
}

/// Sends every host's values as timers `cd.time{dc,host}` to `statsd`, and the first
/// [`PLAIN`] hosts' again as plain Graphite-style timers `cdp.h<NN>.time`, 20 lines a
/// datagram, paced so that the loopback's socket buffer drops none.
fn send(statsd: SocketAddr, hosts: &[(String, Vec<f64>)]) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    for (h, (dc, values)) in hosts.iter().enumerate() {
        for chunk in values.chunks(20) {
            let lines: Vec<String> = (chunk.iter())
                .map(|v| format!("cd.time:{v}|ms|#dc:{dc},host:h{h:02}"))
                .chain(
                    (chunk.iter())
                        .filter(|_| h < PLAIN)
                        .map(|v| format!("cdp.h{h:02}.time:{v}|ms")),
                )
                .collect();
            socket.send_to(lines.join("\n").as_bytes(), statsd).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// The nearest-rank quantile: the value of rank max(1, ceil(q n)).
fn exact(values: &[f64], q: f64) -> f64 {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// `path` read from `addr` as a strong read (every acknowledged write applied first).
fn strong(addr: SocketAddr, path: &str) -> Value {
    eventually(path, || {
        get_json(addr, &format!("{path}&consistency=strong"))
    })
}

#[test]
fn statsd_timers_answer_quantiles_through_a_cluster_as_one_node() {
    let Setup {
        runtime: _runtime,
        nats: _nats,
        urls,
        root,
        mut cluster,
    } = Setup::stopped(1, 3);
    for node in &mut cluster {
        node.args = STATSD.map(String::from).to_vec();
        node.start(&urls);
    }
    wait_served(&cluster);
    let (_single, single) = single_node_addrs(root.path(), &STATSD.map(String::from));
    let nodes: Vec<SocketAddr> = cluster.iter().map(|n| n.http()).collect();

    let hosts = latencies();
    // StatsD stamps a timer's values with its flush's time, and each server flushes on its
    // own second: values sent across a minute's end could fall in different minutes on the
    // two. Sending starts early in a minute, so both put every value in the same one.
    let second = chrono::Utc::now().timestamp() % 60;
    if second > 30 {
        std::thread::sleep(Duration::from_secs((61 - second) as u64));
    }
    let started = chrono::Utc::now().timestamp();
    send(single.statsd.expect("a statsd address"), &hosts);
    send(cluster[1].statsd(), &hosts);
    // The same values as native gauge histograms over remote write, one per host.
    let native = native_histograms(&hosts, started);
    for addr in [single.http, nodes[0]] {
        let (status, answer) = crate::support::http::request(
            addr,
            "POST",
            "/api/v1/prom/write",
            &[("Content-Type", "application/x-protobuf")],
            &native,
        );
        assert_eq!(status, 204, "{answer}");
    }

    // Wide enough for every sample, whenever its flush landed.
    let hour = started - started % 3600;
    let day = started - started % 86_400;
    let counted = |addr: SocketAddr| -> Result<u64, String> {
        let path = format!(
            "/api/v1/aggregate?match=cd.time&agg=sum&display=count&tier=1h&range=whole&from={hour}&to={}&consistency=strong",
            hour + 2 * 3600
        );
        let answer = get_json(addr, &path)?;
        let count = answer["groups"][0]["points"][0][1].as_f64().unwrap_or(0.0) as u64;
        (count == (HOSTS * PER_HOST) as u64)
            .then_some(count)
            .ok_or(format!("{count} of {} values: {answer}", HOSTS * PER_HOST))
    };
    eventually("every value on the single node", || counted(single.http));
    eventually("every value in the cluster", || counted(nodes[0]));
    let plain_counted = |addr: SocketAddr| -> Result<(), String> {
        let path = format!(
            "/api/v1/aggregate?match=cdp.*.time&agg=sum&display=count&tier=1h&range=whole&from={hour}&to={}&consistency=strong",
            hour + 2 * 3600
        );
        let answer = get_json(addr, &path)?;
        let count = answer["groups"][0]["points"][0][1].as_f64().unwrap_or(0.0) as usize;
        (count == PLAIN * PER_HOST).then_some(()).ok_or(format!(
            "{count} of {} plain values: {answer}",
            PLAIN * PER_HOST
        ))
    };
    eventually("every plain value on the single node", || {
        plain_counted(single.http)
    });
    eventually("every plain value in the cluster", || {
        plain_counted(nodes[0])
    });

    let now = chrono::Utc::now().timestamp();
    let minute = started - started % 60;
    let ranges = [
        ("1m", minute, now - now % 60 + 60),
        ("1h", hour, now - now % 3600 + 3600),
        ("1d", day, now - now % 86_400 + 86_400),
    ];
    let all: Vec<f64> = hosts.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    let mut compared = 0;
    for (tier, from, to) in ranges {
        let span = format!("tier={tier}&range=whole&from={from}&to={to}");
        for q in [50, 90, 99] {
            let one = format!(
                "/api/v1/query?series=cd.time%7Bdc%3Dwest,host%3Dh07%7D&display=p{q}&{span}"
            );
            let merged = format!("/api/v1/aggregate?match=cd.time&display=p{q}&{span}");
            let by_dc = format!("/api/v1/aggregate?match=cd.time&group_by=dc&display=p{q}&{span}");
            let expected_one = get_json(single.http, &format!("{one}&consistency=strong")).unwrap();
            let expected_merged =
                get_json(single.http, &format!("{merged}&consistency=strong")).unwrap();
            let expected_by_dc =
                get_json(single.http, &format!("{by_dc}&consistency=strong")).unwrap();
            let q = f64::from(q) / 100.0;

            // Against the exact quantiles of the values sent.
            let within = |answer: &Value, got: &Value, values: &[f64]| {
                // A bucket of more samples than its hot cell holds at scale 6 states the
                // coarser scale's error.
                let stated = answer["relative_error"].as_f64().expect("an error stated");
                let got = got.as_f64().unwrap_or_else(|| panic!("no value: {answer}"));
                let want = exact(values, q);
                assert!(
                    (got - want).abs() / want <= stated,
                    "{got} vs exact {want} ({answer})"
                );
            };
            within(&expected_one, &expected_one["points"][0][1], &hosts[7].1);
            within(
                &expected_merged,
                &expected_merged["groups"][0]["points"][0][1],
                &all,
            );
            let groups = expected_by_dc["groups"].as_array().unwrap();
            assert_eq!(groups.len(), 3, "{expected_by_dc}");
            for group in groups {
                let dc = group["tags"]["dc"].as_str().unwrap();
                let values: Vec<f64> = (hosts.iter())
                    .filter(|(d, _)| d == dc)
                    .flat_map(|(_, v)| v.iter().copied())
                    .collect();
                assert_eq!(group["series"], HOSTS / 3, "{expected_by_dc}");
                within(&expected_by_dc, &group["points"][0][1], &values);
            }

            // Through every node, as the single node answers.
            for (i, &node) in nodes.iter().enumerate() {
                for (path, expected) in [
                    (&one, &expected_one),
                    (&merged, &expected_merged),
                    (&by_dc, &expected_by_dc),
                ] {
                    assert_eq!(&strong(node, path), expected, "{path} through node{i}");
                    compared += 1;
                }
            }
        }
        // The merged histograms themselves, bucket by bucket.
        let hist = format!("/api/v1/aggregate?match=cd.time&group_by=dc&display=hist&{span}");
        let expected = get_json(single.http, &format!("{hist}&consistency=strong")).unwrap();
        let counts: u64 = (expected["groups"].as_array().unwrap().iter())
            .map(|g| g["histograms"][0][1]["count"].as_u64().unwrap())
            .sum();
        assert_eq!(counts, (HOSTS * PER_HOST) as u64, "{expected}");
        for (i, &node) in nodes.iter().enumerate() {
            assert_eq!(strong(node, &hist), expected, "{hist} through node{i}");
        }
    }
    assert_eq!(compared, 3 * 3 * 3 * 3);

    // StatsD timer paths on /render, /metrics/find and the tag API: the same bytes and the
    // same stated error as the single node's. A render's first point is the minute after
    // `from` (as whisper's fetch), so the window starts a minute before the hour: values sent
    // in an hour's first minute are in it too.
    let until = now - now % 60 + 120;
    let from = hour - 60;
    let render = |target: &str| {
        format!(
            "/render?target={}&from={from}&until={until}&format=json",
            crate::support::http::percent_encode(target)
        )
    };
    let paths = [
        render("stats.timers.cdp.*.time.upper_90"),
        render("cdp.*.time.median"),
        render("cdp.h01.time.mean"),
        render("sumSeries(cdp.*.time.count)"),
        render("seriesByTag('name=cd.time.upper_99','dc=west')"),
        "/metrics/find?query=cdp.h01.time.*".to_string(),
        "/metrics/find?query=stats.timers.cdp.*".to_string(),
        "/tags/findSeries?expr=name%3Dcd.time.upper_90&expr=dc%3Deast".to_string(),
    ];
    for path in &paths {
        let header = tierdb::server::RELATIVE_ERROR_HEADER;
        let expected = get_with_header(single.http, path, header);
        assert_eq!(expected.0, 200, "{path} on the single node: {expected:?}");
        assert!(
            !matches!(expected.2.as_str(), "[]" | "null"),
            "{path} answers nothing: the comparison would check nothing"
        );
        // Percentiles and the median are estimates, and say so; means and counts are exact.
        let estimates = ["upper", "median"].iter().any(|stat| path.contains(stat));
        if path.starts_with("/render") {
            assert_eq!(expected.1.is_some(), estimates, "{path}: {expected:?}");
        }
        for (i, &node) in nodes.iter().enumerate() {
            let got = get_with_header(node, &format!("{path}&consistency=strong"), header);
            assert_eq!(got, expected, "{path} through node{i}");
        }
    }

    // PromQL's histogram functions over the timers' histograms, instant and range.
    let at = now - now % 60 + 60;
    let promql = |query: &str| {
        let query = crate::support::http::percent_encode(query);
        [
            format!("/prometheus/api/v1/query?query={query}&time={at}"),
            format!("/prometheus/api/v1/query_range?query={query}&start={hour}&end={at}&step=60"),
        ]
    };
    let queries = [
        r#"histogram_quantile(0.99, sum by (dc) ({__name__="cd.time"}))"#,
        r#"histogram_quantile(0.5, {__name__="cdp.h01.time"})"#,
        r#"histogram_count(sum({__name__="cd.time"}))"#,
        r#"histogram_sum(sum by (dc) ({__name__="cd.time"}))"#,
    ];
    for path in queries.iter().flat_map(|q| promql(q)) {
        let expected = get_with_header(single.http, &path, "x-none");
        assert_eq!(expected.0, 200, "{path} on the single node: {expected:?}");
        let answer: Value = serde_json::from_str(&expected.2).unwrap();
        let result = answer["data"]["result"].as_array();
        assert!(
            result.is_some_and(|r| !r.is_empty()),
            "{path} answers nothing: the comparison would check nothing ({answer})"
        );
        for (i, &node) in nodes.iter().enumerate() {
            let got = get_with_header(node, &format!("{path}&consistency=strong"), "x-none");
            assert_eq!(got, expected, "{path} through node{i}");
        }
    }

    // The native histograms: their quantiles and merged buckets, as the single node's.
    let span = format!("tier=1h&range=whole&from={hour}&to={}", hour + 2 * 3600);
    for display in ["p50", "p99", "hist"] {
        let path = format!("/api/v1/aggregate?match=cd_wait_ms&display={display}&{span}");
        let expected = get_json(single.http, &format!("{path}&consistency=strong")).unwrap();
        let answered = match display {
            "hist" => {
                expected["groups"][0]["histograms"][0][1]["count"].as_u64()
                    == Some((HOSTS * PER_HOST) as u64)
            }
            _ => expected["groups"][0]["points"][0][1].is_f64(),
        };
        assert!(answered, "{path} on the single node: {expected}");
        for (i, &node) in nodes.iter().enumerate() {
            let got = eventually(&format!("{path} through node{i}"), || {
                let got = strong(node, &path);
                (got == expected)
                    .then_some(got.clone())
                    .ok_or(format!("{got}"))
            });
            assert_eq!(got, expected);
        }
    }

    // A series nobody has is a 404 through a cluster node, as on the single node.
    let missing = format!(
        "/api/v1/query?series=cd.none&display=p99&tier=1h&from={hour}&to={}&consistency=strong",
        hour + 3600
    );
    let single_missing = get_json(single.http, &missing).unwrap_err();
    assert!(single_missing.contains("404"), "{single_missing}");
    let cluster_missing = get_json(nodes[2], &missing).unwrap_err();
    assert!(cluster_missing.contains("404"), "{cluster_missing}");

    // An OTLP histogram point whose min is not finite: the client hears of its refusal from
    // a cluster node as from the single node, and the good point beside it lands.
    let t = started * 1_000_000_000;
    let otlp = format!(
        r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[
          {{"name":"cd.otlp","histogram":{{"aggregationTemporality":1,"dataPoints":[
            {{"timeUnixNano":"{t}","count":"2","sum":3,"min":"-Infinity","max":2,"bucketCounts":["1","1"],"explicitBounds":[1.5]}},
            {{"attributes":[{{"key":"ok","value":{{"stringValue":"yes"}}}}],"timeUnixNano":"{t}","count":"2","sum":3,"min":1,"max":2,"bucketCounts":["1","1"],"explicitBounds":[1.5]}}]}}}}]}}]}}]}}"#
    );
    for addr in [single.http, nodes[1]] {
        let (status, answer) = crate::support::http::request(
            addr,
            "POST",
            "/v1/metrics",
            &[("Content-Type", "application/json")],
            otlp.as_bytes(),
        );
        assert_eq!(status, 200, "{answer}");
        let answer: Value = serde_json::from_str(&answer).unwrap();
        let partial = &answer["partialSuccess"];
        assert_eq!(partial["rejectedDataPoints"], "1", "{addr}: {answer}");
        let message = partial["errorMessage"].as_str().unwrap_or_default();
        assert!(message.contains("not_finite 1"), "{addr}: {message}");
    }
}

/// One remote-write request holding each host's values as a native gauge histogram
/// `cd_wait_ms{host}` at `at`.
fn native_histograms(hosts: &[(String, Vec<f64>)], at: i64) -> Vec<u8> {
    let series = (hosts.iter().enumerate())
        .map(|(h, (_, values))| {
            let mut client = crate::prom_native::Client::new();
            values.iter().for_each(|&v| client.observe(v));
            tierdb::ingest::prom_remote::TimeSeries {
                labels: crate::prom_native::labels(&[
                    ("__name__", "cd_wait_ms"),
                    ("host", &format!("h{h:02}")),
                ]),
                histograms: vec![crate::prom_native::integer(
                    &client.histogram,
                    client.sum,
                    at * 1000,
                    tierdb::ingest::prom_remote::native::RESET_GAUGE,
                )],
                ..Default::default()
            }
        })
        .collect();
    crate::prom_native::body(series)
}
