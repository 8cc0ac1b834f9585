//! What `GET /api/v1/cluster`, `tierdb cluster status` and a cluster node's `/metrics`
//! show: the nodes, every partition's owners with their applied sequence and lag behind the
//! log, and the owner this node reads each partition from.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::node::{Node, Rebuild};
use crate::error::Result;

/// The cluster as one node sees it, with the log's positions.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Status {
    /// The node that answered.
    pub node: String,
    /// Replica slots per partition.
    pub replicas: u32,
    /// Every node with a heartbeat.
    pub nodes: Vec<NodeLine>,
    /// Every partition, by number.
    pub partitions: Vec<PartitionLine>,
    /// The partitions the answering node rebuilt from a replica's files since it started.
    #[serde(default)]
    pub rebuilds: Vec<Rebuild>,
    /// The partitions the answering node applied past the log's last sequence: the log went
    /// back ([`Node::ahead_of_log`]).
    #[serde(default)]
    pub ahead_of_log: Vec<AheadOfLog>,
}

/// A partition applied past the log's last sequence.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct AheadOfLog {
    /// The partition.
    pub partition: u32,
    /// What the answering node applied.
    pub applied: u64,
    /// The log's last sequence.
    pub log_last: u64,
}

/// One node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct NodeLine {
    /// Its name.
    pub name: String,
    /// Where it serves HTTP.
    pub http_addr: String,
    /// Its heartbeat is live.
    pub alive: bool,
    /// Partitions it applies.
    pub applying: usize,
    /// Replica slots it holds.
    pub holds: usize,
}

/// One partition.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PartitionLine {
    /// Its number.
    pub partition: u32,
    /// The sequence of its last message in the log (0: none yet).
    pub last_sequence: u64,
    /// Its replica slots, in slot order; free slots are left out.
    pub replicas: Vec<ReplicaLine>,
    /// The live nodes that should own it, best first.
    pub desired: Vec<String>,
    /// The owner this node reads it from, `None` when no owner is live.
    pub serving: Option<String>,
}

/// One held replica slot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ReplicaLine {
    /// The holder.
    pub node: String,
    /// The slot's epoch.
    pub epoch: u64,
    /// The lease and the holder's heartbeat are live.
    pub alive: bool,
    /// The last sequence the holder applied (as its heartbeat says).
    pub applied: u64,
    /// `last_sequence - applied`: 0 when the holder is caught up. Sequences count every
    /// partition's messages, so this is the distance in the stream, an upper bound on the
    /// partition's own messages still to apply.
    pub lag: u64,
}

impl Status {
    /// The status as `node` sees it now.
    ///
    /// # Errors
    /// [`crate::Error::Cluster`] when the log's positions cannot be read.
    pub(crate) async fn of(node: &Arc<Node>) -> Result<Status> {
        let view = node.view();
        let numbers: Vec<u32> = (0u32..).take(view.partitions.len()).collect();
        let last = node.log().last_sequences(&numbers).await?;
        let mut partitions = Vec::with_capacity(view.partitions.len());
        for (partition, owners) in (0u32..).zip(&view.partitions) {
            let last_sequence = last.get(&partition).copied().unwrap_or(0);
            let replicas = owners
                .replicas
                .iter()
                .flatten()
                .map(|lease| {
                    let applied = view
                        .node(&lease.node)
                        .and_then(|n| n.applied.get(&partition).copied())
                        .unwrap_or(0);
                    ReplicaLine {
                        node: lease.node.clone(),
                        epoch: lease.epoch,
                        alive: lease.alive,
                        applied,
                        lag: last_sequence.saturating_sub(applied),
                    }
                })
                .collect();
            partitions.push(PartitionLine {
                partition,
                last_sequence,
                replicas,
                desired: owners.desired.clone(),
                serving: view
                    .readable_owner(partition, node.name())
                    .map(|n| n.name.clone()),
            });
        }
        let nodes = view
            .nodes
            .iter()
            .map(|n| NodeLine {
                name: n.name.clone(),
                http_addr: n.http_addr.clone(),
                alive: n.alive,
                applying: n.applied.len(),
                holds: view.held_by(&n.name),
            })
            .collect();
        Ok(Status {
            node: node.name().to_string(),
            replicas: view.replicas,
            nodes,
            partitions,
            rebuilds: node.rebuilds(),
            ahead_of_log: node
                .ahead_of_log()
                .into_iter()
                .map(|(partition, (applied, log_last))| AheadOfLog {
                    partition,
                    applied,
                    log_last,
                })
                .collect(),
        })
    }
}
