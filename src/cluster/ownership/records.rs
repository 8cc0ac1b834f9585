//! The cluster bucket's keys and what their values hold: the names every node must agree on,
//! and the JSON of a heartbeat and of a lease.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The partition count, written once by the first node (create-only).
pub(super) const CONFIG_PARTITIONS: &str = "config.partitions";
/// The replica count, written once by the first node (create-only): nodes that disagree on
/// it would disagree on every partition's desired owners and trade leases forever.
pub(super) const CONFIG_REPLICAS: &str = "config.replicas";
/// The tier sets (`[[set]]`: names, rules, tiers), written once by the first node
/// (create-only): replicas of a partition decide a new series' set each from its rules, so
/// nodes that disagreed on them would keep one series in different sets.
pub(super) const CONFIG_TIER_SETS: &str = "config.tier_sets";
const NODE_PREFIX: &str = "node.";
const LEASE_PREFIX: &str = "lease.";

/// What a key of the bucket is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Key {
    /// `node.<name>`: that node's heartbeat.
    Node(String),
    /// `lease.<partition>.<replica>`: one replica slot of a partition.
    Lease { partition: u32, replica: u32 },
    /// `config.*` or a key this version does not know: not watched for liveness.
    Other,
}

impl Key {
    /// Parses a key of the bucket (without the `$KV.<bucket>.` prefix).
    pub(super) fn parse(key: &str) -> Key {
        if let Some(name) = key.strip_prefix(NODE_PREFIX) {
            return Key::Node(name.to_string());
        }
        if let Some(slot) = key.strip_prefix(LEASE_PREFIX) {
            if let Some((p, r)) = slot.split_once('.') {
                if let (Ok(partition), Ok(replica)) = (p.parse(), r.parse()) {
                    return Key::Lease { partition, replica };
                }
            }
        }
        Key::Other
    }
}

/// The heartbeat key of node `name`.
pub(super) fn node_key(name: &str) -> String {
    format!("{NODE_PREFIX}{name}")
}

/// The key of replica slot `replica` of `partition`.
pub(super) fn lease_key(partition: u32, replica: u32) -> String {
    format!("{LEASE_PREFIX}{partition}.{replica}")
}

/// Whether `name` can name a node: it becomes part of a key (`node.<name>`), so letters,
/// digits, `-`, `_` and inner dots only, at most 128 bytes.
pub(super) fn valid_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A node's heartbeat, rewritten every heartbeat interval: the rewrite itself is the sign of
/// life (its revision changes), the content is what the others need from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Heartbeat {
    /// Where the node serves HTTP, for reads fanned out to it.
    pub http_addr: String,
    /// Different on every start, so a restarted node is told from one that kept running.
    pub start_id: String,
    /// The last log sequence applied, per partition the node applies: a holder hands a
    /// partition over only to a node that caught up.
    #[serde(default)]
    pub applied: BTreeMap<u32, u64>,
}

/// A replica slot's value. A released slot keeps its epoch (`node` is `None`) so that the
/// next holder's epoch is still one more than every earlier one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LeaseRecord {
    /// The holder, or `None` when the slot is free.
    pub node: Option<String>,
    /// Grows by one with every new holder of the slot.
    pub epoch: u64,
}

impl LeaseRecord {
    /// The record of a slot that was never written, or whose value cannot be read: free.
    pub(super) const FREE: LeaseRecord = LeaseRecord {
        node: None,
        epoch: 0,
    };

    /// Whether `node` holds the slot.
    pub(super) fn held_by(&self, node: &str) -> bool {
        self.node.as_deref() == Some(node)
    }
}

/// Encodes a value as the bucket stores it.
pub(super) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs (strings, integers, integer-keyed maps) cannot fail.
    serde_json::to_vec(value).expect("heartbeats and leases serialize")
}

/// Decodes a stored value; `None` when it is not a value of this version.
pub(super) fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Option<T> {
    serde_json::from_slice(bytes).ok()
}
