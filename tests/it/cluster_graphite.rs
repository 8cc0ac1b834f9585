//! graphite-web's tag API and a repeated `/render` through a cluster node: three
//! `tierdb serve --cluster` nodes on a real NATS server, and one single-node `tierdb serve`
//! fed the same samples. Every tag endpoint (`/tags`, `/tags/<tag>`, `/tags/findSeries`, both
//! completions) and every render answers through each cluster node with the same status and
//! the same bytes as the single node. A render asked again is answered from the owners'
//! render caches (counted in their `/metrics`), and a late sample written after it is in the
//! next answer: the cache never hides a write.

use std::net::SocketAddr;

use crate::cluster::{eventually, hour_start, send_json, single_node, wait_served, Setup};
use crate::support::http::{get_with_header, percent_encode};

/// Tagged series over two names and three data centres, and two plain Graphite paths: one
/// sample every 30 s for an hour from `t0`.
fn workload(t0: i64) -> Vec<(String, Vec<(i64, f64)>)> {
    let mut series = Vec::new();
    for i in 0..12_i64 {
        let name = if i < 8 { "disk.used" } else { "net.rx" };
        let dc = ["east", "west", "north"][(i % 3) as usize];
        let key = format!("{name}{{dc={dc},host=h{i:02}}}");
        series.push((key, samples(t0, i)));
    }
    for (i, path) in ["servers.web1.cpu", "servers.web2.cpu"].iter().enumerate() {
        series.push((path.to_string(), samples(t0, 20 + i as i64)));
    }
    series
}

fn samples(t0: i64, i: i64) -> Vec<(i64, f64)> {
    (0..120)
        .map(|j| (t0 + 13 + j * 30, ((i * 31 + j * 7) % 97) as f64 * 0.25))
        .collect()
}

/// `GET path`: the status and the body's text.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, _, body) = get_with_header(addr, path, "x-none");
    (status, body)
}

/// [`get`] through a cluster node with a strong read (which waits for the owners to apply
/// every write acknowledged before it), asked again while a partition moves between the
/// nodes (503, as a single node never answers).
fn strong(addr: SocketAddr, path: &str) -> (u16, String) {
    let join = if path.contains('?') { '&' } else { '?' };
    let path = format!("{path}{join}consistency=strong");
    eventually("an answer while no partition moves", || {
        let (status, body) = get(addr, &path);
        (status != 503)
            .then_some((status, body.clone()))
            .ok_or(format!("{status} {body}"))
    })
}

/// The sum of `tierdb_render_cache_reads_total{answer="hit"}` over `nodes`' `/metrics`.
fn cache_hits(nodes: &[SocketAddr]) -> u64 {
    nodes
        .iter()
        .map(|&addr| {
            let (status, text) = get(addr, "/metrics");
            assert_eq!(status, 200, "{text}");
            text.lines()
                .find_map(|l| l.strip_prefix("tierdb_render_cache_reads_total{answer=\"hit\"} "))
                .unwrap_or_else(|| panic!("no render cache hits in /metrics: {text}"))
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

#[test]
fn tags_and_repeated_renders_through_a_cluster_node_answer_as_one_node() {
    let Setup {
        runtime: _runtime,
        nats: _nats,
        urls,
        root,
        mut cluster,
    } = Setup::stopped(1, 3);
    for node in &mut cluster {
        node.start(&urls);
    }
    wait_served(&cluster);
    let (_single, single) = single_node(root.path(), &[]);
    let nodes: Vec<SocketAddr> = cluster.iter().map(|n| n.http()).collect();

    let t0 = hour_start() - 3600;
    let data = workload(t0);
    assert_eq!(send_json(single, &data), 204);
    assert_eq!(send_json(nodes[0], &data[..5]), 204);
    assert_eq!(send_json(nodes[1], &data[5..10]), 204);
    assert_eq!(send_json(nodes[2], &data[10..]), 204);

    let (from, until) = (t0, t0 + 3600);
    let render = |target: &str| {
        format!(
            "/render?target={}&from={from}&until={until}&format=json",
            percent_encode(target)
        )
    };
    let paths: Vec<String> = [
        "/tags".to_string(),
        "/tags?filter=d%7Ch&limit=2".into(),
        "/tags/dc".into(),
        "/tags/host?filter=h0&limit=3".into(),
        "/tags/name".into(),
        "/tags/nothing".into(),
        "/tags/findSeries?expr=name%3Ddisk.used&expr=dc!%3Dwest".into(),
        "/tags/findSeries?expr=dc%3D~n.*".into(),
        "/tags/autoComplete/tags?expr=dc%3Deast".into(),
        "/tags/autoComplete/tags?tagPrefix=h".into(),
        "/tags/autoComplete/values?tag=host&expr=name%3Ddisk.used&limit=4".into(),
        "/tags/autoComplete/values?tag=dc&valuePrefix=n".into(),
        render("seriesByTag('name=disk.used','dc=east')"),
        render("sumSeries(seriesByTag('dc=west'))"),
        render("groupByTags(seriesByTag('name=~.+'),'max','dc')"),
        render("servers.*.cpu"),
        // Two samples a bucket: the latest, carried from the owners with the buckets.
        render("consolidateBy(servers.*.cpu,'last')"),
    ]
    .into_iter()
    .collect();
    for path in &paths {
        let (status, expected) = get(single, path);
        assert_eq!(status, 200, "{path} on the single node: {expected}");
        assert!(
            !matches!(expected.as_str(), "[]" | "null") || path.contains("nothing"),
            "{path} answers nothing: the comparison would check nothing"
        );
        for (i, &node) in nodes.iter().enumerate() {
            let got = strong(node, path);
            assert_eq!(got, (status, expected.clone()), "{path} through node{i}");
        }
    }
    // A refusal is the single node's too.
    let bad = "/tags?filter=(";
    let (status, expected) = get(single, bad);
    assert_eq!(status, 400, "{expected}");
    for &node in &nodes {
        assert_eq!(strong(node, bad), (status, expected.clone()), "{bad}");
    }

    // A render asked twice through a node: the second is answered from the owners' caches.
    let panel = render("seriesByTag('name=net.rx')");
    let (status, expected) = get(single, &panel);
    assert_eq!(status, 200, "{expected}");
    let first = strong(nodes[1], &panel);
    assert_eq!(first, (status, expected.clone()));
    let hits = cache_hits(&nodes);
    let second = strong(nodes[1], &panel);
    assert_eq!(second, (status, expected.clone()));
    let hits_after = cache_hits(&nodes);
    assert!(
        hits_after > hits,
        "the repeated render read no cache entry: hits {hits} then {hits_after}"
    );

    // A late sample into the cached window, written to both: the next render has it.
    let late = vec![(
        "net.rx{dc=west,host=h10}".to_string(),
        vec![(t0 + 600 + 17, 1_000.0)],
    )];
    assert_eq!(send_json(single, &late), 204);
    assert_eq!(send_json(nodes[2], &late), 204);
    let before = expected;
    let (_, expected) = get(single, &panel);
    assert_ne!(
        expected, before,
        "the late sample changed nothing on the single node"
    );
    for (i, &node) in nodes.iter().enumerate() {
        assert_eq!(strong(node, &panel), (200, expected.clone()), "node{i}");
    }
}
