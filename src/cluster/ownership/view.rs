//! What a node knows of the cluster at one moment: the nodes with their liveness and applied
//! sequences, and each partition's lease holders and desired owners. Plain data, built by the
//! node's watcher and shared read-only ([`super::Ownership::view`]); serializable for
//! `tierdb cluster status` and `/metrics`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// The cluster as one node sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClusterView {
    /// Replica slots per partition (the cluster's fixed replica count).
    pub replicas: u32,
    /// Every node with a heartbeat in the bucket, live or not, by name.
    pub nodes: Vec<NodeStatus>,
    /// Every partition's owners; index = partition.
    pub partitions: Vec<PartitionOwners>,
}

/// One node, from its heartbeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// The node's name (`--node`), unique in the cluster.
    pub name: String,
    /// Where it serves HTTP, for reads fanned out to it.
    pub http_addr: String,
    /// Different on every start of the node.
    pub start_id: String,
    /// Its heartbeat changed within the lease timeout, on this node's clock.
    pub alive: bool,
    /// The last log sequence it applied, per partition it applies.
    pub applied: BTreeMap<u32, u64>,
}

/// One partition's owners.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PartitionOwners {
    /// Replica slots `0..replicas`: the lease of each, or `None` when free.
    pub replicas: Vec<Option<Lease>>,
    /// The live nodes that should own it (rendezvous hash, evened out), best first. They
    /// apply it while they wait for a slot.
    pub desired: Vec<String>,
}

/// A held replica slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Lease {
    /// The holder.
    pub node: String,
    /// Grows with every new holder of the slot, so an old holder's late work can be told
    /// from the new holder's.
    pub epoch: u64,
    /// The lease was renewed within the lease timeout and its holder's heartbeat is live:
    /// the holder may serve reads of the partition.
    pub alive: bool,
}

impl ClusterView {
    /// The node named `name`, when it has a heartbeat.
    pub fn node(&self, name: &str) -> Option<&NodeStatus> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The partitions `node` applies: those it holds a slot of, and those it should own but
    /// does not hold yet (it catches up on their log meanwhile, so it is ready to serve reads
    /// when it gets the slot).
    pub fn to_apply(&self, node: &str) -> BTreeSet<u32> {
        (0u32..)
            .zip(&self.partitions)
            .filter(|(_, owners)| owners.appliers().any(|n| n == node))
            .map(|(p, _)| p)
            .collect()
    }

    /// The nodes that apply `partition` ([`PartitionOwners::appliers`]), by name: the nodes
    /// its log messages reach. Empty for a partition the view does not know.
    pub fn appliers(&self, partition: u32) -> BTreeSet<&str> {
        let owners = self.partitions.get(partition as usize);
        owners
            .into_iter()
            .flat_map(PartitionOwners::appliers)
            .collect()
    }

    /// A node to read `partition` from: a live lease holder with a live heartbeat; `prefer`
    /// (usually the asking node) when it is one, else the one that applied furthest. `None`
    /// when no holder is live (or no such partition).
    pub fn readable_owner(&self, partition: u32, prefer: &str) -> Option<&NodeStatus> {
        let owners = self.partitions.get(partition as usize)?;
        let live = owners
            .replicas
            .iter()
            .flatten()
            .filter(|lease| lease.alive)
            .filter_map(|lease| self.node(&lease.node))
            .filter(|node| node.alive);
        let mut best: Option<&NodeStatus> = None;
        for node in live {
            if node.name == prefer {
                return Some(node);
            }
            let applied = |n: &NodeStatus| n.applied.get(&partition).copied().unwrap_or(0);
            if best.is_none_or(|b| applied(node) > applied(b)) {
                best = Some(node);
            }
        }
        best
    }

    /// How many partitions `node` holds a slot of (at most one slot each).
    pub fn held_by(&self, node: &str) -> usize {
        self.partitions.iter().filter(|o| o.holds(node)).count()
    }
}

impl PartitionOwners {
    /// The nodes that apply the partition, a node possibly more than once: its slots'
    /// holders, and its desired owners, which apply it while they wait for a slot.
    pub fn appliers(&self) -> impl Iterator<Item = &str> {
        let holders = self
            .replicas
            .iter()
            .flatten()
            .map(|lease| lease.node.as_str());
        holders.chain(self.desired.iter().map(String::as_str))
    }

    /// Whether `node` holds one of the slots (live or not).
    pub fn holds(&self, node: &str) -> bool {
        self.replicas
            .iter()
            .flatten()
            .any(|lease| lease.node == node)
    }
}
