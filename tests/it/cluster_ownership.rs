//! Partition ownership against real NATS servers ([`super::nats`]): up to three
//! [`Ownership`]s in this process, each on its own connection, share the partitions, refuse
//! a node with other counts, take over from a node that falls silent or leaves, hand a
//! partition over only to a node that caught up, and keep their leases through the death of
//! a NATS server (three servers; the tests of other things use one, which starts faster).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use tierdb::testing::cluster::ownership::{ClusterSettings, ClusterView, Ownership};

use crate::nats::NatsCluster;

const PARTITIONS: u32 = 16;
const REPLICAS: u32 = 2;
/// How long the nodes may take to settle on a balanced assignment from a standing start.
const SETTLE: Duration = Duration::from_secs(20);

fn settings(lease_timeout: Duration) -> ClusterSettings {
    ClusterSettings {
        partitions: PARTITIONS,
        replicas: REPLICAS,
        heartbeat: Duration::from_millis(300),
        lease_timeout,
        ..ClusterSettings::default()
    }
}

/// Node `name` joined on a connection of its own.
async fn join(cluster: &NatsCluster, name: &str, settings: ClusterSettings) -> Ownership {
    join_with(cluster.jetstream().await, name, settings).await
}

async fn join_with(js: jetstream::Context, name: &str, settings: ClusterSettings) -> Ownership {
    Ownership::join(js, name, &format!("{name}.test:8080"), settings)
        .await
        .unwrap_or_else(|e| panic!("{name} joins: {e}"))
}

/// Every slot's epoch seen so far; panics when one goes down.
#[derive(Default)]
struct Epochs(BTreeMap<(usize, usize), u64>);

impl Epochs {
    fn check(&mut self, view: &ClusterView) {
        for (p, owners) in view.partitions.iter().enumerate() {
            for (r, lease) in owners.replicas.iter().enumerate() {
                if let Some(lease) = lease {
                    let seen = self.0.entry((p, r)).or_insert(lease.epoch);
                    assert!(
                        lease.epoch >= *seen,
                        "slot {p}.{r}: epoch went from {seen} to {}",
                        lease.epoch
                    );
                    *seen = lease.epoch;
                }
            }
        }
    }
}

/// The current view of each node.
fn views(nodes: &[&Ownership]) -> Vec<Arc<ClusterView>> {
    nodes.iter().map(|n| n.view().borrow().clone()).collect()
}

/// Polls the nodes' views until `done` holds for all of them, checking epochs on the way.
async fn until(
    what: &str,
    nodes: &[&Ownership],
    epochs: &mut Epochs,
    timeout: Duration,
    done: impl Fn(&ClusterView) -> bool,
) -> Duration {
    let started = Instant::now();
    loop {
        let views = views(nodes);
        for view in &views {
            epochs.check(view);
        }
        if views.iter().all(|v| done(v)) {
            return started.elapsed();
        }
        if started.elapsed() > timeout {
            panic!(
                "not {what} within {timeout:?}; views:\n{}",
                serde_json::to_string(&views.iter().map(|v| &**v).collect::<Vec<_>>()).unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every partition has `REPLICAS` live leases held by distinct nodes among `live`, the
/// holders are the desired owners, and every node holds within one of the others.
fn settled(view: &ClusterView, live: &[&str]) -> bool {
    let partitions_ok = view.partitions.iter().all(|owners| {
        let mut holders: Vec<&str> = owners
            .replicas
            .iter()
            .flatten()
            .filter(|l| l.alive)
            .map(|l| l.node.as_str())
            .collect();
        holders.sort_unstable();
        holders.dedup();
        let mut desired: Vec<&str> = owners.desired.iter().map(String::as_str).collect();
        desired.sort_unstable();
        holders.len() == REPLICAS as usize
            && holders.iter().all(|h| live.contains(h))
            && holders == desired
    });
    let held: Vec<usize> = live.iter().map(|n| view.held_by(n)).collect();
    let (min, max) = (held.iter().min().unwrap(), held.iter().max().unwrap());
    partitions_ok && max - min <= 1 && view.partitions.len() == PARTITIONS as usize
}

/// Slot → (holder, epoch), of live leases.
fn holders(view: &ClusterView) -> BTreeMap<(usize, usize), (String, u64)> {
    let mut out = BTreeMap::new();
    for (p, owners) in view.partitions.iter().enumerate() {
        for (r, lease) in owners.replicas.iter().enumerate() {
            if let Some(lease) = lease.as_ref().filter(|l| l.alive) {
                out.insert((p, r), (lease.node.clone(), lease.epoch));
            }
        }
    }
    out
}

/// The lease timeout of [`two_settled_on_one_server`]'s nodes.
const LEASE_TIMEOUT: Duration = Duration::from_secs(3);

/// One NATS server, and nodes `a` and `b` settled on it ([`LEASE_TIMEOUT`]).
async fn two_settled_on_one_server() -> (NatsCluster, Ownership, Ownership, Epochs) {
    let cluster = NatsCluster::start(1).await;
    let a = join(&cluster, "a", settings(LEASE_TIMEOUT)).await;
    let b = join(&cluster, "b", settings(LEASE_TIMEOUT)).await;
    let mut epochs = Epochs::default();
    until("settled on a, b", &[&a, &b], &mut epochs, SETTLE, |v| {
        settled(v, &["a", "b"])
    })
    .await;
    (cluster, a, b, epochs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ownership_spreads_partitions_refuses_other_counts_and_hands_over_on_leave() {
    let cluster = NatsCluster::start(3).await;
    // A long timeout: a handover faster than it comes from leave, not from expiry.
    let lease_timeout = Duration::from_secs(10);
    let a = join(&cluster, "a", settings(lease_timeout)).await;
    let b = join(&cluster, "b", settings(lease_timeout)).await;
    let c = join(&cluster, "c", settings(lease_timeout)).await;
    let mut epochs = Epochs::default();
    until(
        "settled on a, b, c",
        &[&a, &b, &c],
        &mut epochs,
        SETTLE,
        |v| settled(v, &["a", "b", "c"]),
    )
    .await;

    let view = a.view().borrow().clone();
    let held: Vec<usize> = ["a", "b", "c"].iter().map(|n| view.held_by(n)).collect();
    assert_eq!(held.iter().sum::<usize>(), (PARTITIONS * REPLICAS) as usize);
    for (p, owners) in (0u32..).zip(&view.partitions) {
        for node in ["a", "b", "c"] {
            let holds = owners.holds(node);
            assert_eq!(
                view.to_apply(node).contains(&p),
                holds,
                "{node}, partition {p}"
            );
            // A holder reads its own copy; a non-holder is sent to a holder.
            let reader = view.readable_owner(p, node).expect("a live owner");
            assert!(owners.holds(&reader.name));
            assert_eq!(reader.name == node, holds);
            assert_eq!(reader.http_addr, format!("{}.test:8080", reader.name));
        }
    }
    assert!(view.readable_owner(PARTITIONS, "a").is_none());
    assert!(a.report_applied(PARTITIONS, 1).is_err());
    assert_eq!(view.nodes.len(), 3);
    assert!(view.nodes.iter().all(|n| n.alive));

    // Another partition count, or replica count, is refused with the cluster's own.
    let js = cluster.jetstream().await;
    let other = ClusterSettings {
        partitions: 8,
        ..settings(lease_timeout)
    };
    let refused = Ownership::join(js.clone(), "d", "d:1", other).await.err();
    let message = refused.expect("8 partitions refused").to_string();
    assert!(
        message.contains("has 16 partitions; this node asked for 8"),
        "{message}"
    );
    let other = ClusterSettings {
        replicas: 3,
        ..settings(lease_timeout)
    };
    let message = Ownership::join(js, "d", "d:1", other)
        .await
        .err()
        .expect("3 replicas refused")
        .to_string();
    assert!(
        message.contains("keeps 2 replicas of each partition; this node asked for 3"),
        "{message}"
    );
    // The refused node left no heartbeat behind.
    assert!(a.view().borrow().node("d").is_none());

    // c leaves: a and b take every partition long before c's leases could have expired.
    let applied_by_a = a.report_applied(3, 42);
    assert!(applied_by_a.is_ok());
    c.leave().await.expect("c leaves cleanly");
    let took = until("settled on a, b", &[&a, &b], &mut epochs, SETTLE, |v| {
        settled(v, &["a", "b"]) && v.node("c").is_none()
    })
    .await;
    eprintln!("handover after leave: {took:?}");
    assert!(
        took < lease_timeout,
        "the handover after leave took {took:?}, as long as an expiry"
    );
    // a's report went out with its heartbeat.
    until("a's report seen by b", &[&b], &mut epochs, SETTLE, |v| {
        v.node("a").and_then(|n| n.applied.get(&3)) == Some(&42)
    })
    .await;
    a.leave().await.expect("a leaves");
    b.leave().await.expect("b leaves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ownership_a_silent_node_loses_its_partitions_after_the_lease_timeout() {
    let cluster = NatsCluster::start(3).await;
    let lease_timeout = Duration::from_secs(3);
    let a = join(&cluster, "a", settings(lease_timeout)).await;
    let b = join(&cluster, "b", settings(lease_timeout)).await;
    let c = join(&cluster, "c", settings(lease_timeout)).await;
    let mut epochs = Epochs::default();
    until(
        "settled on a, b, c",
        &[&a, &b, &c],
        &mut epochs,
        SETTLE,
        |v| settled(v, &["a", "b", "c"]),
    )
    .await;
    let before = holders(&a.view().borrow());
    let c_slots: Vec<(usize, usize)> = before
        .iter()
        .filter(|(_, (node, _))| node == "c")
        .map(|(&slot, _)| slot)
        .collect();
    assert!(!c_slots.is_empty());

    // c stops heartbeating without a word, as if it crashed.
    let silenced = Instant::now();
    drop(c);
    tokio::time::sleep(lease_timeout / 2).await;
    let view = a.view().borrow().clone();
    for slot in &c_slots {
        let lease = view.partitions[slot.0].replicas[slot.1].as_ref();
        assert_eq!(
            lease.map(|l| l.node.as_str()),
            Some("c"),
            "slot {slot:?} moved before c's lease timed out"
        );
    }

    until("settled on a, b", &[&a, &b], &mut epochs, SETTLE, |v| {
        settled(v, &["a", "b"])
    })
    .await;
    let took = silenced.elapsed();
    eprintln!("takeover after silence: {took:?} (lease timeout {lease_timeout:?})");
    assert!(
        took < lease_timeout + Duration::from_secs(10),
        "takeover took {took:?}"
    );
    let view = a.view().borrow().clone();
    assert!(!view.node("c").expect("c's heartbeat stays").alive);
    let after = holders(&view);
    for slot in &c_slots {
        let (node, epoch) = &after[slot];
        assert_ne!(node, "c");
        assert!(
            *epoch > before[slot].1,
            "slot {slot:?} taken over with a new epoch"
        );
    }
    a.leave().await.expect("a leaves");
    b.leave().await.expect("b leaves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ownership_keeps_leases_when_a_nats_server_dies() {
    let mut cluster = NatsCluster::start(3).await;
    // Longer than a JetStream election on a loaded machine.
    let lease_timeout = Duration::from_secs(6);
    // One node on each server: whichever server dies, one node loses its connection.
    let mut nodes = Vec::new();
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        let js = jetstream::new(cluster.client_on(i).await);
        nodes.push(join_with(js, name, settings(lease_timeout)).await);
    }
    let [a, b, c] = <[Ownership; 3]>::try_from(nodes).ok().expect("three nodes");
    let nodes = [&a, &b, &c];
    let mut epochs = Epochs::default();
    until("settled on a, b, c", &nodes, &mut epochs, SETTLE, |v| {
        settled(v, &["a", "b", "c"])
    })
    .await;
    let before = holders(&a.view().borrow());

    // Kill the server leading the bucket's stream: the worst one to lose.
    let js = cluster.jetstream().await;
    let mut stream = js
        .get_stream("KV_tierdb_cluster")
        .await
        .expect("bucket stream");
    let info = stream.info().await.expect("stream info").clone();
    let cluster_info = info.cluster.expect("replicated");
    assert_eq!(
        cluster_info.replicas.len() + 1,
        3,
        "the bucket is on all three servers"
    );
    let leader = cluster_info.leader.expect("a leader");
    let killed = cluster.index_of(&leader).expect("one of ours");
    cluster.kill(killed);
    eprintln!(
        "killed {leader}, the bucket's stream leader, and node {}'s server",
        ["a", "b", "c"][killed]
    );

    // Through the election and well past one lease timeout, nothing changes hands.
    let watched = Instant::now();
    while watched.elapsed() < lease_timeout + Duration::from_secs(3) {
        for view in views(&nodes) {
            epochs.check(&view);
            for (slot, (node, epoch)) in holders(&view) {
                assert_eq!(
                    before.get(&slot),
                    Some(&(node.clone(), epoch)),
                    "slot {slot:?} changed hands after the NATS server died"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every node still hears every other: new heartbeats arrive through the watchers (a
    // watcher lost with the server was replaced).
    for (i, node) in nodes.iter().enumerate() {
        node.report_applied(0, 100 + i as u64).expect("partition 0");
    }
    until(
        "new heartbeats seen everywhere",
        &nodes,
        &mut epochs,
        SETTLE,
        |v| {
            ["a", "b", "c"].iter().enumerate().all(|(i, name)| {
                v.node(name).and_then(|n| n.applied.get(&0)) == Some(&(100 + i as u64))
            })
        },
    )
    .await;
    // And the leases are still renewed: every one alive, on every node, a full lease
    // timeout after the last stall could have refreshed them.
    tokio::time::sleep(lease_timeout).await;
    until("all leases alive", &nodes, &mut epochs, SETTLE, |v| {
        holders(v) == before
    })
    .await;
    for node in [a, b, c] {
        node.leave().await.expect("leave");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ownership_runs_on_a_single_nats_server() {
    // A lone server refuses a replicated stream: the bucket is created with one copy.
    let cluster = NatsCluster::start(1).await;
    let lease_timeout = Duration::from_secs(3);
    let a = join(&cluster, "a", settings(lease_timeout)).await;
    let mut epochs = Epochs::default();
    // Alone, a holds one slot of every partition (never two).
    until("a holds everything", &[&a], &mut epochs, SETTLE, |v| {
        v.partitions.iter().all(|o| {
            o.desired == ["a"]
                && o.replicas.iter().flatten().filter(|l| l.alive).count() == 1
                && o.holds("a")
        })
    })
    .await;
    let b = join(&cluster, "b", settings(lease_timeout)).await;
    until("settled on a, b", &[&a, &b], &mut epochs, SETTLE, |v| {
        settled(v, &["a", "b"])
    })
    .await;
    let js = cluster.jetstream().await;
    let mut stream = js.get_stream("KV_tierdb_cluster").await.expect("bucket");
    let info = stream.info().await.expect("stream info");
    assert_eq!(info.config.num_replicas, 1);
    a.leave().await.expect("a leaves");
    until("b alone", &[&b], &mut epochs, SETTLE, |v| {
        v.node("a").is_none()
            && v.partitions
                .iter()
                .all(|o| o.desired == ["b"] && o.holds("b"))
    })
    .await;
    b.leave().await.expect("b leaves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ownership_hands_a_partition_over_only_to_a_caught_up_node() {
    let (cluster, a, b, mut epochs) = two_settled_on_one_server().await;
    // Both applied every partition's log up to 100.
    for node in [&a, &b] {
        for p in 0..PARTITIONS {
            node.report_applied(p, 100).expect("a partition");
        }
    }
    until("reports out", &[&a, &b], &mut epochs, SETTLE, |v| {
        v.nodes
            .iter()
            .all(|n| n.applied.len() == PARTITIONS as usize)
    })
    .await;

    // c joins: it should own some partitions, and applies them while it catches up, but
    // gets no slot while it is behind.
    let c = join(&cluster, "c", settings(LEASE_TIMEOUT)).await;
    let nodes = [&a, &b, &c];
    until("c desired", &nodes, &mut epochs, SETTLE, |v| {
        !v.to_apply("c").is_empty()
    })
    .await;
    let behind_since = Instant::now();
    while behind_since.elapsed() < Duration::from_secs(2) {
        for view in views(&nodes) {
            epochs.check(&view);
            assert_eq!(view.held_by("c"), 0, "c got a slot while behind");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let to_apply = c.view().borrow().to_apply("c");
    for &p in &to_apply {
        c.report_applied(p, 99).expect("a partition");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        c.view().borrow().held_by("c"),
        0,
        "c got a slot at 99 of 100"
    );

    // Caught up: a and b hand over, and c holds what it was catching up on.
    for &p in &to_apply {
        c.report_applied(p, 100).expect("a partition");
    }
    until("settled on a, b, c", &nodes, &mut epochs, SETTLE, |v| {
        settled(v, &["a", "b", "c"])
    })
    .await;
    let view = c.view().borrow().clone();
    assert_eq!(view.to_apply("c"), to_apply);
    for p in &to_apply {
        assert!(view.partitions[*p as usize].holds("c"));
    }
    for node in nodes {
        let view = node.view().borrow().clone();
        assert_eq!(view.held_by("c"), to_apply.len());
    }
    for node in [a, b, c] {
        node.leave().await.expect("leave");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ownership_recovers_when_the_bucket_revisions_go_back() {
    // nats-server 2.9 was seen, after repeated kill -9 of its servers, to elect a leader of
    // the bucket's stream without writes it had answered, numbering new writes from there.
    // Deleting the stream and creating it again makes revisions go back the same way (and
    // further: to 1), with every lease gone.
    let (cluster, a, b, _) = two_settled_on_one_server().await;
    let js = cluster.jetstream().await;
    let mut stream = js.get_stream("KV_tierdb_cluster").await.expect("bucket");
    let config = stream.info().await.expect("stream info").config.clone();
    // Far enough that the new revisions stay below the old ones for a while.
    while stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence
        < 100
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    js.delete_stream("KV_tierdb_cluster").await.expect("delete");
    js.create_stream(config).await.expect("create again");
    let store = js.get_key_value("tierdb_cluster").await.expect("bucket");
    for (key, value) in [
        ("config.partitions", PARTITIONS),
        ("config.replicas", REPLICAS),
    ] {
        store
            .put(key, value.to_string().into_bytes().into())
            .await
            .expect("config");
    }
    // Until both views are settled again, and each live lease in them is the bucket's.
    let deadline = Instant::now() + SETTLE;
    loop {
        let mut mismatch = None;
        for view in views(&[&a, &b]) {
            if !settled(&view, &["a", "b"]) {
                mismatch = Some(format!("not settled: {view:?}"));
                break;
            }
            for ((p, r), (node, epoch)) in holders(&view) {
                let entry = store.entry(format!("lease.{p}.{r}")).await.expect("read");
                let text = entry.map(|e| String::from_utf8_lossy(&e.value).into_owned());
                let matches = text.as_ref().is_some_and(|t| {
                    t.contains(&format!("\"{node}\"")) && t.contains(&format!(":{epoch}"))
                });
                if !matches {
                    mismatch = Some(format!(
                        "slot {p}.{r}: the view says {node} at epoch {epoch}, the bucket {text:?}"
                    ));
                }
            }
        }
        match mismatch {
            None => break,
            Some(m) if Instant::now() > deadline => panic!("after the rewind, {m}"),
            Some(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    a.leave().await.expect("a leaves");
    b.leave().await.expect("b leaves");
}

/// Every replica of a partition decides a new series' tier set from the rules itself: a node
/// whose `[[set]]`s differ from the cluster's is refused at join, both named, and one with
/// the same sets joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ownership_refuses_a_node_whose_tier_sets_differ() {
    let cluster = NatsCluster::start(1).await;
    let with_sets = |tier_sets: &str| ClusterSettings {
        tier_sets: tier_sets.to_string(),
        ..settings(Duration::from_secs(15))
    };
    let short = "short (names tmp.*; tags -; tiers 2m 120s/21600s)";
    let a = join(&cluster, "a", with_sets(short)).await;
    let js = cluster.jetstream().await;
    let refused = Ownership::join(js.clone(), "b", "b:1", with_sets("none")).await;
    let message = refused.err().expect("other sets refused").to_string();
    assert!(
        message.contains(&format!(
            "keeps the tier sets {short}; this node's tiers have none"
        )),
        "{message}"
    );
    let other = "short (names tmp.*; tags -; tiers 5m 300s/21600s)";
    let refused = Ownership::join(js.clone(), "b", "b:1", with_sets(other)).await;
    assert!(refused.is_err(), "another set's tiers refused");
    let b = join_with(js, "b", with_sets(short)).await;
    b.leave().await.unwrap();
    a.leave().await.unwrap();
}
