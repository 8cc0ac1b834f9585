//! The pure parts of ownership: balance, keys and records, the liveness table and the lease
//! decisions. The NATS side is tested against real servers in tests/it/cluster_ownership.rs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::balance::{desired_owners, score};
use super::decide::{decide, Action, Held, Holdings};
use super::records::{
    decode, encode, lease_key, node_key, valid_node_name, Heartbeat, Key, LeaseRecord,
};
use super::table::{Change, Table};
use super::ClusterSettings;

const HEARTBEAT: Duration = Duration::from_millis(100);
const TIMEOUT: Duration = Duration::from_secs(1);

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("node-{i}")).collect()
}

fn loads(owners: &[Vec<String>]) -> BTreeMap<&str, usize> {
    let mut loads = BTreeMap::new();
    for name in owners.iter().flatten() {
        *loads.entry(name.as_str()).or_default() += 1;
    }
    loads
}

#[test]
fn every_partition_gets_distinct_live_owners_and_loads_differ_by_at_most_one() {
    for n in 1..=7 {
        let live = names(n);
        for partitions in [1, 2, 5, 16, 64, 100] {
            for replicas in 1..=4u32 {
                let owners = desired_owners(&live, partitions, replicas);
                assert_eq!(owners.len(), partitions as usize);
                let per = (replicas as usize).min(n);
                for o in &owners {
                    let distinct: BTreeSet<&String> = o.iter().collect();
                    assert_eq!(distinct.len(), per, "{n} nodes, R={replicas}: {o:?}");
                    assert!(o.iter().all(|name| live.contains(name)));
                }
                let loads = loads(&owners);
                let (min, max) = (
                    loads.values().min().copied().unwrap_or(0),
                    loads.values().max().copied().unwrap_or(0),
                );
                // Nodes with no partition at all count as load 0.
                let min = if loads.len() < n { 0 } else { min };
                assert!(
                    max - min <= 1,
                    "{n} nodes, {partitions} partitions, R={replicas}: loads {loads:?}"
                );
            }
        }
    }
}

#[test]
fn desired_owners_do_not_depend_on_the_order_nodes_are_listed_in() {
    let live = names(5);
    let mut reversed = live.clone();
    reversed.reverse();
    let mut doubled = live.clone();
    doubled.extend(live.iter().cloned());
    let owners = desired_owners(&live, 32, 2);
    assert_eq!(desired_owners(&reversed, 32, 2), owners);
    assert_eq!(desired_owners(&doubled, 32, 2), owners);
}

#[test]
fn no_live_node_means_no_owner() {
    assert_eq!(desired_owners(&[], 3, 2), vec![Vec::<String>::new(); 3]);
}

#[test]
fn a_node_joining_or_leaving_moves_few_replicas() {
    // The rendezvous start keeps most placements; the evening out moves a few more. Ideal
    // is a quarter of the 32 replicas moving to a fourth node.
    let moved = |from: &[Vec<String>], to: &[Vec<String>]| -> usize {
        from.iter()
            .zip(to)
            .map(|(f, t)| t.iter().filter(|n| !f.contains(n)).count())
            .sum()
    };
    let three = desired_owners(&names(3), 16, 2);
    let four = desired_owners(&names(4), 16, 2);
    assert!(moved(&three, &four) <= 12, "{three:?} -> {four:?}");
    // When node-3 leaves again, only what it held moves, plus evening out.
    assert!(moved(&four, &three) <= 12, "{four:?} -> {three:?}");
}

#[test]
fn rendezvous_scores_never_change() {
    // Fixed figures (FNV-1a 64 then SplitMix64's finalizer, checked with a Python version):
    // nodes of two tierdb versions must agree on every partition's owners.
    assert_eq!(score("a", 0), 0x02c0_bdbf_4814_20f8);
    assert_eq!(score("a", 1), 0x832b_e066_bd43_a3b8);
    assert_eq!(score("node-1", 7), 0x3542_7fae_c804_65bd);
}

#[test]
fn keys_name_nodes_and_slots() {
    assert_eq!(
        Key::parse(&node_key("web-1.dc")),
        Key::Node("web-1.dc".into())
    );
    assert_eq!(
        Key::parse(&lease_key(12, 1)),
        Key::Lease {
            partition: 12,
            replica: 1
        }
    );
    assert_eq!(lease_key(12, 1), "lease.12.1");
    assert_eq!(Key::parse("config.partitions"), Key::Other);
    assert_eq!(Key::parse("lease.x.1"), Key::Other);
    assert_eq!(Key::parse("lease.3"), Key::Other);
    assert_eq!(Key::parse("lease.3.1.2"), Key::Other);
}

#[test]
fn node_names_must_fit_in_a_key() {
    for good in ["a", "web-01", "web_01.dc1", "N0"] {
        assert!(valid_node_name(good), "{good}");
    }
    for bad in [
        "",
        ".a",
        "a.",
        "a..b",
        "a b",
        "a*",
        "a>",
        "é",
        &"x".repeat(129),
    ] {
        assert!(!valid_node_name(bad), "{bad:?}");
    }
}

#[test]
fn records_round_trip_as_json() {
    let free = LeaseRecord {
        node: None,
        epoch: 3,
    };
    assert_eq!(encode(&free), br#"{"node":null,"epoch":3}"#);
    assert_eq!(decode::<LeaseRecord>(&encode(&free)), Some(free));
    let heartbeat = Heartbeat {
        http_addr: "10.0.0.1:8080".into(),
        start_id: "s1".into(),
        applied: BTreeMap::from([(0, 5), (12, 99)]),
    };
    assert_eq!(
        decode::<Heartbeat>(&encode(&heartbeat)),
        Some(heartbeat.clone())
    );
    assert_eq!(decode::<LeaseRecord>(b"not json"), None);
    assert_eq!(decode::<LeaseRecord>(b"{\"epoch\":\"x\"}"), None);
}

#[test]
fn settings_are_checked() {
    assert!(ClusterSettings::default().validate().is_ok());
    let refused = |s: ClusterSettings| s.validate().unwrap_err().to_string();
    let zero = ClusterSettings {
        partitions: 0,
        ..ClusterSettings::default()
    };
    assert!(refused(zero).contains("partitions must be between 1 and"));
    let no_replica = ClusterSettings {
        replicas: 0,
        ..ClusterSettings::default()
    };
    assert!(refused(no_replica).contains("replicas must be at least 1"));
    let short = ClusterSettings {
        lease_timeout: Duration::from_secs(2),
        ..ClusterSettings::default()
    };
    assert!(refused(short).contains("at least three heartbeats"));
    let bucket = ClusterSettings {
        bucket: "a.b".into(),
        ..ClusterSettings::default()
    };
    assert!(refused(bucket).contains("bucket name"));
}

/// A table of node `a` in a cluster of 4 partitions × 2 replicas.
fn table() -> Table {
    Table::new("a", 4, 2, HEARTBEAT, TIMEOUT)
}

fn beat(table: &mut Table, name: &str, revision: u64, at: Instant) {
    beat_applied(table, name, revision, at, &[]);
}

fn beat_applied(
    table: &mut Table,
    name: &str,
    revision: u64,
    at: Instant,
    applied: &[(u32, u64)],
) -> bool {
    let value = encode(&Heartbeat {
        http_addr: format!("{name}:80"),
        start_id: "s".into(),
        applied: applied.iter().copied().collect(),
    });
    table.apply(
        Change {
            key: &node_key(name),
            revision,
            value: Some(&value),
        },
        at,
    )
}

fn put_lease(
    table: &mut Table,
    (p, r): (u32, u32),
    node: Option<&str>,
    epoch: u64,
    revision: u64,
    at: Instant,
) {
    let value = encode(&LeaseRecord {
        node: node.map(str::to_string),
        epoch,
    });
    table.apply(
        Change {
            key: &lease_key(p, r),
            revision,
            value: Some(&value),
        },
        at,
    );
}

#[test]
fn a_key_is_alive_while_its_revision_changes() {
    let t0 = Instant::now();
    let mut table = table();
    beat(&mut table, "b", 1, t0);
    put_lease(&mut table, (0, 0), Some("b"), 1, 2, t0);
    let alive = |table: &mut Table, at| {
        let view = table.view(at);
        let lease = view.partitions[0].replicas[0].clone().expect("held");
        (view.node("b").unwrap().alive, lease.alive)
    };
    assert_eq!(alive(&mut table, t0 + TIMEOUT / 2), (true, true));
    assert_eq!(alive(&mut table, t0 + TIMEOUT), (false, false));
    // The same revision again is no change; an older one is ignored.
    beat(&mut table, "b", 1, t0 + TIMEOUT / 2);
    put_lease(&mut table, (0, 0), Some("c"), 9, 1, t0 + TIMEOUT / 2);
    assert_eq!(alive(&mut table, t0 + TIMEOUT), (false, false));
    assert_eq!(
        table.lease(0, 0),
        (
            Some(2),
            LeaseRecord {
                node: Some("b".into()),
                epoch: 1
            }
        )
    );
    // A new revision brings the node back, but a lease whose holder is dead is not alive.
    beat(&mut table, "b", 3, t0 + TIMEOUT);
    assert_eq!(alive(&mut table, t0 + TIMEOUT), (true, false));
    put_lease(&mut table, (0, 0), Some("b"), 1, 4, t0 + TIMEOUT);
    assert_eq!(alive(&mut table, t0 + TIMEOUT), (true, true));
    // A lease of a node without a heartbeat is not alive either.
    put_lease(&mut table, (1, 0), Some("gone"), 1, 5, t0 + TIMEOUT);
    let view = table.view(t0 + TIMEOUT);
    assert!(!view.partitions[1].replicas[0].as_ref().unwrap().alive);
}

#[test]
fn a_deleted_heartbeat_is_gone_and_a_deleted_lease_is_free_with_its_epoch() {
    let t0 = Instant::now();
    let mut table = table();
    beat(&mut table, "b", 1, t0);
    put_lease(&mut table, (2, 1), Some("b"), 7, 2, t0);
    fn deleted(key: &str, revision: u64) -> Change<'_> {
        Change {
            key,
            revision,
            value: None,
        }
    }
    table.apply(deleted(&node_key("b"), 3), t0);
    table.apply(deleted(&lease_key(2, 1), 4), t0);
    let view = table.view(t0);
    assert!(view.node("b").is_none());
    assert_eq!(view.partitions[2].replicas[1], None);
    assert_eq!(
        table.lease(2, 1),
        (
            Some(4),
            LeaseRecord {
                node: None,
                epoch: 7
            }
        )
    );
    // An unreadable lease is free too, keeping the epoch known.
    table.apply(
        Change {
            key: &lease_key(2, 1),
            revision: 5,
            value: Some(b"garbage"),
        },
        t0,
    );
    assert_eq!(
        table.lease(2, 1),
        (
            Some(5),
            LeaseRecord {
                node: None,
                epoch: 7
            }
        )
    );
    // Slots beyond the cluster's counts, and other keys, are ignored.
    put_lease(&mut table, (4, 0), Some("b"), 1, 6, t0);
    put_lease(&mut table, (0, 2), Some("b"), 1, 7, t0);
    table.apply(
        Change {
            key: "config.partitions",
            revision: 8,
            value: Some(b"4"),
        },
        t0,
    );
    assert_eq!(table.view(t0).partitions.len(), 4);
    assert_eq!(table.lease(0, 0), (None, LeaseRecord::FREE));
}

#[test]
fn a_stalled_log_gives_every_key_a_grace_to_renew_but_no_fresh_timeout() {
    let t0 = Instant::now();
    let mut table = table();
    beat(&mut table, "a", 1, t0);
    beat(&mut table, "b", 2, t0);
    put_lease(&mut table, (0, 0), Some("b"), 1, 3, t0);
    // Our own heartbeats keep arriving: b's silence is b's.
    let mut revision = 3;
    let mut at = t0;
    while at < t0 + TIMEOUT {
        at += HEARTBEAT;
        revision += 1;
        beat(&mut table, "a", revision, at);
    }
    assert!(!table.view(at).node("b").unwrap().alive);

    // Our own heartbeat returns after a gap longer than the timeout: nobody's silence
    // during it counts, but each key must change within the grace (half the timeout here)
    // after it.
    let stalled = |gap: Duration| {
        let mut table = self::table();
        beat(&mut table, "a", 1, t0);
        beat(&mut table, "b", 2, t0);
        put_lease(&mut table, (0, 0), Some("b"), 1, 3, t0);
        let resumed = t0 + gap;
        beat(&mut table, "a", 4, resumed);
        (table, resumed)
    };
    let (mut table, resumed) = stalled(TIMEOUT * 2);
    let view = table.view(resumed + TIMEOUT / 4);
    assert!(view.node("b").unwrap().alive);
    assert!(view.partitions[0].replicas[0].as_ref().unwrap().alive);
    let view = table.view(resumed + TIMEOUT / 2);
    assert!(!view.node("b").unwrap().alive);
    assert!(!view.partitions[0].replicas[0].as_ref().unwrap().alive);
    // A live node renews within the grace and stays alive.
    let (mut table, resumed) = stalled(TIMEOUT * 2);
    beat(&mut table, "b", 5, resumed + HEARTBEAT * 2);
    assert!(table.view(resumed + TIMEOUT / 2).node("b").unwrap().alive);

    // A stall shorter than the timeout does not delay finding b dead: a node that died as
    // the stall began is dead one timeout after it was last seen, as without the stall.
    let (mut table, _) = stalled(HEARTBEAT * 4);
    assert!(
        table
            .view(t0 + TIMEOUT - HEARTBEAT)
            .node("b")
            .unwrap()
            .alive
    );
    assert!(!table.view(t0 + TIMEOUT).node("b").unwrap().alive);
}

/// Node `a`'s decisions on `table` at `at`, with the given desired owners per partition.
fn decide_at(
    table: &mut Table,
    at: Instant,
    desired: &[&[&str]],
    holdings: &mut Holdings,
    applied: &[(u32, u64)],
    take_expired: bool,
) -> Vec<Action> {
    let mut view = table.view(at);
    for (owners, desired) in view.partitions.iter_mut().zip(desired) {
        owners.desired = desired.iter().map(|d| d.to_string()).collect();
    }
    let applied = applied.iter().copied().collect();
    decide("a", table, &view, holdings, &applied, take_expired)
}

#[test]
fn a_desired_node_claims_the_lowest_free_slot_with_the_next_epoch() {
    let t0 = Instant::now();
    let mut table = table();
    beat(&mut table, "a", 1, t0);
    beat(&mut table, "b", 2, t0);
    put_lease(&mut table, (0, 0), Some("b"), 4, 3, t0); // live: not free
    put_lease(&mut table, (0, 1), None, 6, 5, t0); // released: free, epoch kept
    let mut holdings = Holdings::default();
    let desired: &[&[&str]] = &[&["a", "b"], &["a"], &["b"], &[]];
    let actions = decide_at(&mut table, t0, desired, &mut holdings, &[], true);
    assert_eq!(
        actions,
        vec![
            Action::Claim {
                partition: 0,
                replica: 1,
                epoch: 7,
                revision: Some(5)
            },
            Action::Claim {
                partition: 1,
                replica: 0,
                epoch: 1,
                revision: None
            },
        ]
    );
}

#[test]
fn an_expired_slot_is_taken_only_after_a_heartbeat_went_through() {
    let t0 = Instant::now();
    let mut table = table();
    beat(&mut table, "b", 1, t0);
    put_lease(&mut table, (0, 0), Some("b"), 4, 2, t0);
    put_lease(&mut table, (0, 1), Some("c"), 2, 3, t0);
    let later = t0 + TIMEOUT;
    beat(&mut table, "a", 9, later);
    let desired: &[&[&str]] = &[&["a"], &[], &[], &[]];
    let mut holdings = Holdings::default();
    assert_eq!(
        decide_at(&mut table, later, desired, &mut holdings, &[], false),
        vec![]
    );
    assert_eq!(
        decide_at(&mut table, later, desired, &mut holdings, &[], true),
        vec![Action::Claim {
            partition: 0,
            replica: 0,
            epoch: 5,
            revision: Some(2)
        }]
    );
}

#[test]
fn a_holder_renews_and_never_claims_a_second_slot() {
    let t0 = Instant::now();
    let mut table = table();
    beat(&mut table, "a", 1, t0);
    put_lease(&mut table, (0, 0), Some("a"), 3, 2, t0);
    let mut holdings = Holdings::default();
    holdings.held.insert(
        0,
        Held {
            replica: 0,
            epoch: 3,
            revision: 2,
        },
    );
    let desired: &[&[&str]] = &[&["a", "b"], &[], &[], &[]];
    let actions = decide_at(&mut table, t0, desired, &mut holdings, &[], true);
    assert_eq!(
        actions,
        vec![Action::Renew {
            partition: 0,
            replica: 0,
            epoch: 3,
            revision: 2
        }]
    );
}

#[test]
fn a_slot_an_earlier_run_left_is_taken_back_and_a_second_one_freed() {
    let t0 = Instant::now();
    let mut table = table();
    beat(&mut table, "a", 1, t0);
    put_lease(&mut table, (0, 0), Some("a"), 3, 2, t0);
    put_lease(&mut table, (0, 1), Some("a"), 5, 3, t0);
    put_lease(&mut table, (1, 1), Some("a"), 2, 4, t0);
    let mut holdings = Holdings::default();
    let desired: &[&[&str]] = &[&["a"], &["b"], &[], &[]];
    let actions = decide_at(&mut table, t0, desired, &mut holdings, &[], true);
    assert_eq!(
        actions,
        vec![
            Action::Claim {
                partition: 0,
                replica: 0,
                epoch: 4,
                revision: Some(2)
            },
            Action::Release {
                partition: 0,
                replica: 1,
                epoch: 5,
                revision: 3
            },
            // Not desired there: freed for the desired node.
            Action::Release {
                partition: 1,
                replica: 1,
                epoch: 2,
                revision: 4
            },
        ]
    );
}

#[test]
fn a_holder_no_longer_desired_releases_once_the_desired_node_caught_up() {
    let t0 = Instant::now();
    let mut table = table();
    beat(&mut table, "a", 1, t0);
    beat_applied(&mut table, "b", 2, t0, &[(0, 40)]);
    put_lease(&mut table, (0, 0), Some("a"), 3, 3, t0);
    let mut holdings = Holdings::default();
    holdings.held.insert(
        0,
        Held {
            replica: 0,
            epoch: 3,
            revision: 3,
        },
    );
    let desired: &[&[&str]] = &[&["b"], &[], &[], &[]];
    let renew = Action::Renew {
        partition: 0,
        replica: 0,
        epoch: 3,
        revision: 3,
    };
    // b is behind a's 50: a keeps the slot, and remembers 50 as the mark.
    let actions = decide_at(&mut table, t0, desired, &mut holdings, &[(0, 50)], true);
    assert_eq!(actions, vec![renew.clone()]);
    // a moves on to 70 meanwhile; b reaching the mark of 50 is enough.
    beat_applied(&mut table, "b", 4, t0, &[(0, 55)]);
    let actions = decide_at(&mut table, t0, desired, &mut holdings, &[(0, 70)], true);
    assert_eq!(
        actions,
        vec![Action::Release {
            partition: 0,
            replica: 0,
            epoch: 3,
            revision: 3
        }]
    );
    assert!(holdings.handover.is_empty());
}

#[test]
fn a_holder_whose_slot_was_taken_stops_at_once() {
    let t0 = Instant::now();
    let mut table = table();
    beat(&mut table, "a", 1, t0);
    beat(&mut table, "b", 2, t0);
    put_lease(&mut table, (0, 0), Some("b"), 4, 9, t0);
    let mut holdings = Holdings::default();
    holdings.held.insert(
        0,
        Held {
            replica: 0,
            epoch: 3,
            revision: 5,
        },
    );
    // Still desired, but slot 0 is b's now: a claims the free slot 1 instead of renewing.
    let desired: &[&[&str]] = &[&["a", "b"], &[], &[], &[]];
    let actions = decide_at(&mut table, t0, desired, &mut holdings, &[], true);
    assert!(holdings.held.is_empty());
    assert_eq!(
        actions,
        vec![Action::Claim {
            partition: 0,
            replica: 1,
            epoch: 1,
            revision: None
        }]
    );
    // Its own record seen with a newer revision (an answer lost) is adopted instead.
    put_lease(&mut table, (1, 0), Some("a"), 2, 12, t0);
    holdings.held.insert(
        1,
        Held {
            replica: 0,
            epoch: 2,
            revision: 10,
        },
    );
    let desired: &[&[&str]] = &[&[], &["a"], &[], &[]];
    let actions = decide_at(&mut table, t0, desired, &mut holdings, &[], true);
    assert_eq!(holdings.held[&1].revision, 12);
    assert_eq!(
        actions,
        vec![Action::Renew {
            partition: 1,
            replica: 0,
            epoch: 2,
            revision: 12
        }]
    );
}

#[test]
fn only_news_asks_for_a_new_view() {
    let t0 = Instant::now();
    let mut table = table();
    let lease = |node: &str, epoch| {
        encode(&LeaseRecord {
            node: Some(node.into()),
            epoch,
        })
    };
    let put = |table: &mut Table, revision, value: &[u8], at| {
        table.apply(
            Change {
                key: &lease_key(0, 0),
                revision,
                value: Some(value),
            },
            at,
        )
    };
    assert!(put(&mut table, 1, &lease("b", 1), t0), "a new slot");
    assert!(!put(&mut table, 2, &lease("b", 1), t0), "a renewal");
    assert!(
        !put(&mut table, 2, &lease("c", 2), t0),
        "a revision seen already"
    );
    assert!(put(&mut table, 3, &lease("c", 2), t0), "a new holder");
    assert!(
        put(&mut table, 4, &lease("c", 2), t0 + TIMEOUT),
        "a renewal of a lease that had expired"
    );
    beat(&mut table, "a", 5, t0);
    assert!(!beat_applied(&mut table, "a", 6, t0 + HEARTBEAT, &[]));
    assert!(beat_applied(
        &mut table,
        "a",
        7,
        t0 + HEARTBEAT * 2,
        &[(0, 1)]
    ));
    // Our own heartbeat after a stall gives every key a grace: news.
    assert!(beat_applied(
        &mut table,
        "a",
        8,
        t0 + HEARTBEAT * 6,
        &[(0, 1)]
    ));
}
