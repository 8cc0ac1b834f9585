//! PromQL through a cluster node (`/prometheus/api/v1/...`): two `tierdb serve --cluster`
//! nodes with one replica per partition on a real NATS server, so each node answers half the
//! partitions through the other over HTTP, and one single-node `tierdb serve` fed the same
//! samples. Every query, listing and refusal answers through either cluster node exactly as
//! the single node answers it (the evaluator is the same; only its leaf reads fan out), the
//! raw tier included. A default read of a replica behind the log says so in Prometheus'
//! `warnings`; `consistency=strong` waits for the writes.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster::{
    eventually, hour_start, node_pausing_each_group, send_json, single_node, wait_served,
    with_raw_tier, Setup,
};
use crate::support::http::{get_with_header, percent_encode};

/// The flags every server of the comparison runs with: the raw tier's tiers, and limits low
/// enough for the test's refusals to be met.
fn limit_flags(tiers: &Path) -> Vec<String> {
    [
        "--tiers",
        &tiers.display().to_string(),
        "--max-query-series",
        "12",
        "--max-read-values",
        "5000",
    ]
    .map(String::from)
    .to_vec()
}

/// Eight `cpu_load` gauges over two `dc`s, four `mem_used` and four `disk_free` gauges, and
/// three names PromQL cannot write (two Graphite paths, an Influx field `net.bytes_recv`),
/// one sample every 20 s (never on a minute boundary) for 90 minutes from `t0`.
fn workload(t0: i64) -> Vec<(String, Vec<(i64, f64)>)> {
    let mut series = Vec::new();
    for i in 0..19_i64 {
        let key = match i {
            0..8 => format!(
                "cpu_load{{dc={},host=h{i:02}}}",
                if i % 2 == 0 { "east" } else { "west" }
            ),
            8..12 => format!("mem_used{{dc=east,host=h{i:02}}}"),
            12..16 => format!("disk_free{{dc=west,host=h{i:02}}}"),
            16 => "servers.web1.cpu".to_owned(),
            17 => "servers.web2.cpu".to_owned(),
            _ => "net.bytes_recv{host=h18}".to_owned(),
        };
        let samples = (0..270)
            .map(|j| {
                (
                    t0 + 7 + j * 20,
                    ((i * 37 + j * 11) % 101) as f64 * 0.5 - 3.0,
                )
            })
            .collect();
        series.push((key, samples));
    }
    series
}

/// `GET path` of the Prometheus API: the status and the body as JSON.
fn prom(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, _, body) = get_with_header(addr, &format!("/prometheus{path}"), "x-none");
    let json = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("{path} answered {status} and no JSON ({e}): {body:?}"));
    (status, json)
}

/// [`prom`] through a cluster node, asked again while a partition moves between the nodes
/// (503 `unavailable`, as a single node never answers).
fn prom_settled(addr: SocketAddr, path: &str) -> (u16, Value) {
    eventually("an answer while no partition moves", || {
        let (status, body) = prom(addr, path);
        (status != 503 || body["errorType"] != "unavailable")
            .then_some((status, body.clone()))
            .ok_or(format!("{status} {body}"))
    })
}

fn range_path(query: &str, start: i64, end: i64, step: i64) -> String {
    format!(
        "/api/v1/query_range?query={}&start={start}&end={end}&step={step}",
        percent_encode(query)
    )
}

#[test]
fn promql_through_either_cluster_node_answers_as_one_engine() {
    let Setup {
        runtime: _runtime,
        nats: _nats,
        urls,
        root,
        mut cluster,
    } = Setup::stopped(1, 2);
    let tiers = with_raw_tier(root.path());
    for node in &mut cluster {
        node.args = limit_flags(&tiers);
        node.args.extend(["--replicas", "1"].map(String::from));
        node.start(&urls);
    }
    wait_served(&cluster);
    let (_single, single) = single_node(root.path(), &limit_flags(&tiers));

    let t0 = hour_start() - 3600;
    let data = workload(t0);
    assert_eq!(send_json(single, &data), 204);
    assert_eq!(send_json(cluster[0].http(), &data[..7]), 204);
    assert_eq!(send_json(cluster[1].http(), &data[7..]), 204);

    let (start, end) = (t0 + 600, t0 + 5400);
    let queries: Vec<String> = [
        "sum by (dc) (avg_over_time(cpu_load[5m]))",
        "count_over_time(cpu_load[10m])",
        "max_over_time(mem_used[15m]) - min_over_time(mem_used[15m])",
        "topk(2, sum_over_time(cpu_load[5m]))",
        "quantile_over_time(0.9, cpu_load[5m])",
        "cpu_load",
        "avg(cpu_load) by (dc) / on(dc) group_left sum(mem_used) by (dc)",
        "absent(nothing_here)",
        "max_over_time({__graphite__=\"servers.*.cpu\"}[5m])",
        "-net_bytes_recv",
    ]
    .iter()
    .map(|q| range_path(q, start, end, 60))
    .chain([
        format!(
            "/api/v1/query?query={}&time={end}",
            percent_encode("sum_over_time(cpu_load[30m])")
        ),
        format!("/api/v1/series?match[]=cpu_load&start={start}&end={end}"),
        "/api/v1/labels?match[]=cpu_load".to_string(),
        format!(
            "/api/v1/label/host/values?match[]={}",
            percent_encode("{dc=\"east\"}")
        ),
        "/api/v1/metadata?limit=10".to_string(),
    ])
    .collect();
    // The samples counted on the single node first, then through each cluster node with a
    // strong read, which waits for the owners to apply what the log holds.
    let everything = format!(
        "/api/v1/query?query={}&time={end}",
        percent_encode("sum(count_over_time(cpu_load[2h])) + sum(count_over_time(mem_used[2h]))")
    );
    let (status, expected_all) = eventually("every sample on the single node", || {
        let (status, body) = prom(single, &everything);
        (body["data"]["result"][0]["value"][1] == "3240")
            .then_some((status, body.clone()))
            .ok_or(format!("{status} {body}"))
    });
    assert_eq!(status, 200, "{expected_all}");
    for node in &cluster {
        eventually(&format!("every series through {}", node.name), || {
            let (status, body) = prom(node.http(), &format!("{everything}&consistency=strong"));
            (status == 200 && body["data"] == expected_all["data"])
                .then_some(())
                .ok_or(format!("{status} {body}"))
        });
    }
    for path in &queries {
        let (status, expected) = prom(single, path);
        assert_eq!(status, 200, "{path} on the single node: {expected}");
        assert!(
            expected["data"]["result"]
                .as_array()
                .is_none_or(|r| !r.is_empty())
                || path.contains("absent"),
            "{path} answers nothing: the comparison would check nothing"
        );
        for node in &cluster {
            let (status, got) = prom_settled(node.http(), &format!("{path}&consistency=strong"));
            assert_eq!(status, 200, "{path} through {}: {got}", node.name);
            assert_eq!(got, expected, "{path} through {}", node.name);
        }
    }

    // The limits hold as on one engine, each with Prometheus' error envelope.
    let refused = [
        // 16 series, over --max-query-series 12.
        range_path("count({__name__=~\".+\"})", start, end, 60),
        // 4 series x 1,442 minute buckets, over --max-read-values 5000.
        range_path("sum_over_time(disk_free[24h])", end - 60, end, 60),
        // Not PromQL.
        range_path("sum(cpu_load", start, end, 60),
    ];
    for path in &refused {
        let (status, expected) = prom(single, path);
        assert!(
            status == 400 || status == 422,
            "{path}: {status} {expected}"
        );
        assert_eq!(expected["status"], "error", "{expected}");
        for node in &cluster {
            let (got_status, got) = prom_settled(node.http(), path);
            assert_eq!(
                (got_status, &got["errorType"]),
                (status, &expected["errorType"]),
                "{path} through {}: {got}",
                node.name
            );
        }
    }
}

#[test]
fn a_default_promql_read_of_a_replica_behind_the_log_warns() {
    let setup = node_pausing_each_group("4000");
    let node = setup.cluster[0].http();
    let start = hour_start();
    let series = "lag_probe";
    let path = format!(
        "/prometheus/api/v1/query?query={}&time={}",
        percent_encode(&format!("count_over_time({series}[10m])")),
        start + 600
    );
    let count = |answer: &Value| -> Option<String> {
        answer["data"]["result"][0]["value"][1]
            .as_str()
            .map(str::to_owned)
    };
    assert_eq!(
        send_json(node, &[(series.into(), vec![(start + 30, 1.0)])]),
        204
    );
    eventually("a strong read of the first sample", || {
        let (status, _, body) = get_with_header(node, &format!("{path}&consistency=strong"), "x");
        let answer: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        (status == 200 && count(&answer).as_deref() == Some("1"))
            .then_some(())
            .ok_or(body)
    });

    assert_eq!(
        send_json(node, &[(series.into(), vec![(start + 90, 2.0)])]),
        204
    );
    let mut seen_behind = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, header, body) = get_with_header(node, &path, "x-tierdb-behind");
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        let warnings: Vec<&str> = (answer["warnings"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        if count(&answer).as_deref() == Some("2") {
            if warnings.is_empty() {
                assert!(header.is_none(), "{header:?}");
                break;
            }
            // A read that ran while the group was being applied may already see the sample
            // though the owner, which takes its applied sequence before it reads, claims
            // only the one before: a warning that errs on the safe side. The node must still
            // come to answer whole without one before the deadline.
            assert!(header.is_some(), "warned without the header: {answer}");
        } else {
            assert_eq!(count(&answer).as_deref(), Some("1"), "{answer}");
        }
        let partition = header
            .as_deref()
            .and_then(|h| h.strip_prefix("partitions="))
            .unwrap_or_else(|| panic!("a short count without the header: {answer}"));
        assert!(
            warnings.iter().any(|w| w.contains("behind the log")
                && w.contains(&format!("partitions {partition} (applied"))),
            "a short count without a warning naming partition {partition}: {answer}"
        );
        seen_behind += 1;
        assert!(
            Instant::now() < deadline,
            "the node never applied the sample"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        seen_behind > 0,
        "no read ran while the node was behind: nothing was checked"
    );
    // A strong read waits for the write instead.
    assert_eq!(
        send_json(node, &[(series.into(), vec![(start + 150, 3.0)])]),
        204
    );
    let (status, _, body) = get_with_header(node, &format!("{path}&consistency=strong"), "x");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, count(&answer).as_deref()),
        (200, Some("3")),
        "{body}"
    );
    assert!(answer.get("warnings").is_none(), "{answer}");
}
