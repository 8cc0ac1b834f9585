//! Tier sets (`[[set]]`) in a cluster: three `tierdb serve --cluster` nodes and one single
//! node run the shipped tiers plus a set `short` (2m kept 12h, 1h kept 30d) for the series
//! named `tmp.*`, and are sent the same samples of series of both sets. One node is killed
//! by its apply's fault hook in the middle of a group (SIGKILL, as `kill -9`) and
//! restarted. Then aggregates across both sets (each set read through its own tier, folded
//! on one 2m grid, the answer's note saying so), quantile reads, one-series queries of each
//! set, `/render` (each set's series at its own step, and their sum at the common one) and
//! PromQL (one set's series, and both sets' at the resolution they share) answer through
//! every node exactly as the single node does, every acknowledged
//! sample counted once. A node whose data directory is lost, with the log emptied, is
//! rebuilt from the replicas' copies of its partitions (their set records and `sets/`
//! files with them), and with another node killed, the reads it serves from those copies
//! still answer as the single node does; and so they do after a delete of series of both
//! sets. Before tier sets were built for the cluster, a node refused the tiers at start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tierdb::testing::fault::KILL_MID_APPLY;

use crate::cluster::{eventually, send_json, single_node, wait_caught_up, wait_served, Setup};
use crate::support::http::{get_json, percent_encode, request};

/// The shipped tiers plus the set `short`, written into `dir`; returns its path.
fn tiers_with_a_set(dir: &Path) -> PathBuf {
    let path = dir.join("tiers-with-sets.toml");
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tiers.toml")).unwrap();
    std::fs::write(
        &path,
        format!(
            "{shipped}\n[[set]]\nname = \"short\"\nnames = [\"tmp.*\"]\n\n\
             [[set.tier]]\nname = \"2m\"\nresolution = \"2m\"\nperiod = \"6h\"\n\
             retention = \"12h\"\n\n[[set.tier]]\nname = \"1h\"\nresolution = \"1h\"\n\
             period = \"10d\"\nretention = \"30d\"\n"
        ),
    )
    .unwrap();
    path
}

/// Series of both sets over the hour from `start`, a sample a minute each.
fn workload(start: i64) -> Vec<(String, Vec<(i64, f64)>)> {
    (0..24)
        .map(|i| {
            let name = match i % 2 {
                0 => format!("keep.s{i:02}.value"),
                _ => format!("tmp.s{i:02}.value"),
            };
            let samples = (0..60)
                .map(|j| (start + j * 60 + (i % 7), i as f64 * 1.5 + j as f64 * 0.25))
                .collect();
            (name, samples)
        })
        .collect()
}

fn strong(addr: SocketAddr, path: &str) -> Result<Value, String> {
    get_json(addr, &format!("{path}&consistency=strong"))
}

#[test]
fn cluster_with_tier_sets_aggregates_across_sets_as_one_node_through_a_kill_mid_apply() {
    let Setup {
        runtime,
        nats,
        urls,
        root,
        mut cluster,
    } = Setup::stopped(3, 3);
    let tiers = tiers_with_a_set(root.path());
    let args = vec!["--tiers".to_string(), tiers.display().to_string()];
    for node in &mut cluster {
        node.args = args.clone();
    }
    // Node 1 kills itself halfway through its second group.
    cluster[1].env = vec![(KILL_MID_APPLY, "mid-apply:2".to_string())];
    for node in &mut cluster {
        node.start(&urls);
    }
    wait_served(&cluster);
    let (_single, single) = single_node(root.path(), &args);

    let now = chrono::Utc::now().timestamp();
    let start = now - now % 3600 - 3600;
    let series = workload(start);
    assert_eq!(send_json(single, &series), 204);
    // Each series' first half, then, once applied, its second half: every partition a
    // series lands in applies two groups or more.
    for half in [0..30, 30..60] {
        let part: Vec<(String, Vec<(i64, f64)>)> = (series.iter())
            .map(|(name, samples)| (name.clone(), samples[half.clone()].to_vec()))
            .collect();
        for chunk in part.chunks(4) {
            assert_eq!(send_json(cluster[0].http(), chunk), 204);
        }
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    // Node 1 dies in the middle of its second group; restarted without the hook, it rolls
    // the group back and applies it again.
    let killed_log = cluster[1].log_path();
    eventually("node 1 killed in its apply", || {
        let log = std::fs::read_to_string(&killed_log).unwrap_or_default();
        log.contains("fault hook: killing this process at mid-apply")
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    });
    cluster[1].kill();
    cluster[1].env.clear();
    cluster[1].start(&urls);
    wait_served(&cluster);

    let total = series.iter().map(|(_, s)| s.len()).sum::<usize>() as f64;
    let count = format!(
        "/api/v1/aggregate?match=*.*.value&agg=sum&display=count&range=whole&from={start}&to={}",
        start + 3600
    );
    for addr in [
        single,
        cluster[0].http(),
        cluster[1].http(),
        cluster[2].http(),
    ] {
        eventually("every sample counted once", || {
            let answer = strong(addr, &count)?;
            let got = answer["groups"][0]["points"][0][1].as_f64().unwrap_or(0.0);
            (got == total)
                .then_some(())
                .ok_or(format!("{got} of {total}: {answer}"))
        });
    }
    let reads = [
        format!(
            "/api/v1/aggregate?match=*.*.value&agg=sum&from={start}&to={}",
            start + 3600
        ),
        format!(
            "/api/v1/query?series=tmp.s03.value&from={start}&to={}",
            start + 3600
        ),
        format!(
            "/api/v1/query?series=keep.s04.value&from={start}&to={}",
            start + 3600
        ),
        format!(
            "/api/v1/query?series=tmp.s05.value&tier=1h&display=count&from={start}&to={}",
            start + 3600
        ),
        format!(
            "/api/v1/aggregate?match=*.*.value&display=p99&range=whole&from={start}&to={}",
            start + 3600
        ),
        format!(
            "/render?target=*.s0*.value&from={start}&until={}&format=json",
            start + 3600
        ),
        format!(
            "/prometheus/api/v1/query_range?query={}&start={start}&end={}&step=600",
            percent_encode("sum(count_over_time({__name__=~\"(keep|tmp)[.].*\"}[1h]))"),
            start + 3600
        ),
        format!(
            "/prometheus/api/v1/query_range?query={}&start={start}&end={}&step=600",
            percent_encode("max_over_time({__name__=~\"tmp[.].*\"}[10m])"),
            start + 3600
        ),
        format!(
            "/render?target={}&from={start}&until={}&format=json",
            percent_encode("sumSeries(*.*.value)"),
            start + 3600
        ),
        format!(
            "/api/v1/aggregate?match=*.*.value&agg=max&display=count&from={start}&to={}",
            start + 3600
        ),
        format!(
            "/api/v1/aggregate?match=tmp.*.value&agg=avg&from={start}&to={}",
            start + 3600
        ),
        format!(
            "/api/v1/aggregate?match=*.*.value&agg=sum&tier=1h&from={}&to={}",
            start - 3600,
            start + 3600
        ),
    ];
    for read in &reads {
        let expected = strong(single, read).unwrap();
        for node in &cluster {
            let got = strong(node.http(), read).unwrap();
            assert_eq!(got, expected, "{read} on {}", node.name);
        }
    }
    for read in reads.iter().filter(|r| r.starts_with("/prometheus")) {
        let answer = strong(single, read).unwrap();
        let result = answer["data"]["result"].as_array().map_or(0, Vec::len);
        assert!(result > 0, "{read}: {answer}");
    }
    let across = strong(single, &reads[0]).unwrap();
    assert!(
        across["note"]
            .as_str()
            .is_some_and(|n| n.contains("different tier sets")),
        "{across}"
    );
    assert_eq!(across["tier"], "1m, short/2m", "{across}");

    // Node 2 loses its disk while the log was emptied: only the replicas' copies of its
    // partitions bring them back. With node 0 then killed, the partitions node 0 and node 2
    // held are read from node 2's copies.
    wait_caught_up(&cluster);
    runtime.block_on(async {
        let js = nats.jetstream().await;
        let stream = js.get_stream("TIERDB_INGEST").await.expect("the log");
        stream.purge().await.expect("purge the log");
    });
    cluster[2].kill();
    std::fs::remove_dir_all(&cluster[2].dir).unwrap();
    cluster[2].start(&urls);
    wait_served(&cluster);
    eventually("node 2 rebuilt from copies", || {
        let status = get_json(cluster[2].http(), "/api/v1/cluster")?;
        let rebuilt = status["rebuilds"].as_array().map_or(0, Vec::len) as u64;
        let node2 = (status["nodes"].as_array().into_iter().flatten())
            .find(|n| n["name"] == "node2")
            .ok_or("node2 not listed")?;
        let (applying, holds) = (node2["applying"].as_u64(), node2["holds"].as_u64());
        (rebuilt > 0 && applying == holds && applying.is_some_and(|a| a > 0))
            .then_some(())
            .ok_or(format!("rebuilt {rebuilt}, node2 {node2}"))
    });
    wait_caught_up(&cluster);
    let copied_sets = std::fs::read_dir(cluster[2].dir.join("partitions"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("sets/short").is_dir())
        .count();
    assert!(copied_sets > 0, "no partition of node 2 holds sets/short");
    cluster[0].kill();
    for read in &reads {
        let expected = strong(single, read).unwrap();
        for node in &cluster[1..] {
            let got = strong(node.http(), read).unwrap();
            assert_eq!(got, expected, "{read} on {} after the rebuild", node.name);
        }
    }
    cluster[0].start(&urls);
    wait_served(&cluster);

    // A delete of series of both sets, through a node and on the single node.
    let query = format!("match={}", percent_encode("*.s1*.value"));
    for addr in [single, cluster[2].http()] {
        let (status, body) = request(addr, "DELETE", &format!("/api/v1/series?{query}"), &[], b"");
        assert_eq!(status, 200, "{body}");
    }
    let left = (series.iter())
        .filter(|(name, _)| !name.contains(".s1"))
        .map(|(_, s)| s.len())
        .sum::<usize>() as f64;
    for node in &cluster {
        eventually("the deleted series gone", || {
            let answer = strong(node.http(), &count)?;
            let got = answer["groups"][0]["points"][0][1].as_f64().unwrap_or(0.0);
            (got == left)
                .then_some(())
                .ok_or(format!("{got} of {left}: {answer}"))
        });
    }
    for read in &reads[..2] {
        let expected = strong(single, read).unwrap();
        for node in &cluster {
            assert_eq!(
                strong(node.http(), read).unwrap(),
                expected,
                "{read} on {}",
                node.name
            );
        }
    }
}
