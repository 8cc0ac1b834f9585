//! Who applies and serves which partition: node heartbeats and per-partition leases in one
//! JetStream KV bucket, kept by every node's background task, with no clock compared across
//! machines and no consensus of our own (JetStream's compare-and-set is the only arbiter).
//!
//! # The bucket
//! One KV bucket (default `tierdb_cluster`, [`DEFAULT_BUCKET`]), replicated on up to three
//! NATS servers (as many as the cluster has), one value per key:
//!
//! | key | value | written |
//! |---|---|---|
//! | `config.partitions` | the partition count, e.g. `16` | once, create-only, by the first node |
//! | `config.replicas` | the replica count, e.g. `2` | once, create-only, by the first node |
//! | `config.tier_sets` | the `[[set]]`s, e.g. `none` or `short (names tmp.*; tags -; tiers 1m 60s/21600s)` | once, create-only, by the first node |
//! | `node.<name>` | `{"http_addr", "start_id", "applied": {partition: seq}}` | every heartbeat, by that node |
//! | `lease.<p>.<r>` | `{"node": name or null, "epoch": n}` | by compare-and-set on the revision last seen |
//!
//! Both counts are fixed when the cluster is first created: a node asking for others is
//! refused ("the cluster at … has 16 partitions; this node asked for 8"). Nodes that differed
//! on the replica count would differ on every partition's owners and trade leases forever.
//!
//! # Liveness
//! A heartbeat or a lease is alive while its key's revision keeps changing. Each node's
//! watcher notes, on its own monotonic clock, when it last saw each key change, and counts
//! the key dead after `lease_timeout` without a change. A key seen for the first time counts
//! as just changed, so a node that joins waits a full timeout before it takes anything over.
//! When the node's own heartbeat shows a gap of more than three heartbeats (a NATS election,
//! a lost connection), the log stalled for everyone: no key is found dead for it. Each gets
//! until a grace after the stall (half the lease timeout, at least three heartbeats) to
//! change again, or its full timeout, whichever ends later; so a node that died with the
//! stall (its NATS server's death began it) is still found dead one lease timeout after it
//! was last seen, unless the stall outlasted that. And a node takes over an expired slot only on a heartbeat
//! whose own write went through, so it cannot act on a stall it has not noticed yet.
//!
//! # Leases
//! Slot `r` of partition `p` is held by the node named in `lease.<p>.<r>`. The holder renews
//! it every heartbeat by rewriting it unchanged, expecting the revision it last wrote. A free
//! slot (never written, released, or expired) is claimed by writing `{node, epoch + 1}`,
//! expecting the revision last seen; two claimants cannot both win, and the epochs of a slot
//! only grow. A node never holds two slots of one partition. A write that fails is not
//! retried blindly: the node reads the slot again and decides again. A holder that finds its
//! slot rewritten by someone else (a newer epoch) stops claiming it at once. Lease keys are
//! never deleted (a release writes a free record that keeps the epoch); a lease key deleted
//! by hand starts its epochs again at 1 on nodes that had not seen it.
//!
//! Every node renews each of its slots every heartbeat: with `P` partitions and `R` replicas
//! the bucket takes `P × R` small writes per heartbeat, cheap at the default 16 × 2.
//!
//! # Balance and handover
//! The desired owners of each partition are `min(replicas, live nodes)` live nodes: the top
//! of a rendezvous hash of (node, partition), evened out so that every node's count of
//! replicas is within one of every other's (`ownership/balance.rs`). Every node computes the
//! same answer from the same live set. A node applies each partition it holds a slot of, plus
//! each it is desired for but does not hold yet: it catches up on that partition's log while
//! it waits ([`ClusterView::to_apply`]). Desired nodes claim free slots at once. A holder
//! that is no longer desired keeps renewing until a desired node without a slot reports, in
//! its heartbeat, an applied sequence at least the holder's own at the moment it noticed;
//! then it releases the slot (keeping its epoch), and that node claims it. So reads always
//! find a caught-up owner ([`ClusterView::readable_owner`]).
//!
//! # Leaving and failing
//! [`Ownership::leave`] releases every slot and deletes the heartbeat: the others see it at
//! once and take over. A node that dies (or whose [`Ownership`] is dropped without leave)
//! stops renewing, and the others take its slots one lease timeout after they last saw them
//! change. A NATS server's death is survived as long as the bucket's stream keeps a quorum:
//! requests time out and are retried on the next heartbeat, the watcher is replaced when it
//! ends or falls behind, and the lease timeout should be longer than a JetStream election
//! (the default 15 s is).

mod agent;
mod balance;
mod decide;
mod kv_store;
mod records;
mod table;
mod view;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{oneshot, watch};

pub(crate) use kv_store::stream_name as bucket_stream_name;
pub use view::ClusterView;
pub(crate) use view::NodeStatus;

use crate::error::Error;
use crate::error::Result;

/// The partition count of a new cluster.
pub(crate) const DEFAULT_PARTITIONS: u32 = 16;
/// The largest partition count: each partition costs a lease per replica and a heartbeat
/// entry, and balancing is quadratic in the count.
pub(crate) const MAX_PARTITIONS: u32 = 1024;
/// How many nodes apply each partition.
pub(crate) const DEFAULT_REPLICAS: u32 = 2;
/// How often a node rewrites its heartbeat and renews its leases.
pub(crate) const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a heartbeat or lease may go unchanged before it counts as dead.
pub(crate) const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_secs(15);
/// The KV bucket that holds the cluster's settings, heartbeats and leases.
pub(crate) const DEFAULT_BUCKET: &str = "tierdb_cluster";

/// How a node takes part in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    /// The partition count; must match the cluster's once it exists.
    pub partitions: u32,
    /// How many nodes apply each partition (fewer while fewer are live); must match the
    /// cluster's once it exists.
    pub replicas: u32,
    /// How often the node heartbeats and renews its leases.
    pub heartbeat: Duration,
    /// How long another node's heartbeat or lease may go unchanged before this node counts
    /// it dead; at least three heartbeats.
    pub lease_timeout: Duration,
    /// The KV bucket; clusters sharing one NATS need different buckets.
    pub bucket: String,
    /// The node's tier sets, as [`crate::config::TiersConfig::tier_sets_text`] writes them
    /// (`none` without `[[set]]`s); must match the cluster's once it exists.
    pub tier_sets: String,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            partitions: DEFAULT_PARTITIONS,
            replicas: DEFAULT_REPLICAS,
            heartbeat: DEFAULT_HEARTBEAT,
            lease_timeout: DEFAULT_LEASE_TIMEOUT,
            bucket: DEFAULT_BUCKET.to_string(),
            tier_sets: crate::config::TiersConfig::default().tier_sets_text(),
        }
    }
}

impl ClusterSettings {
    /// Refuses settings the cluster cannot run on, in a sentence.
    ///
    /// # Errors
    /// [`Error::Cluster`] naming the setting.
    pub fn validate(&self) -> Result<()> {
        let refuse = |message: String| Err(Error::Cluster(message));
        if !(1..=MAX_PARTITIONS).contains(&self.partitions) {
            return refuse(format!(
                "partitions must be between 1 and {MAX_PARTITIONS}, not {}",
                self.partitions
            ));
        }
        if self.replicas == 0 {
            return refuse("replicas must be at least 1".to_string());
        }
        if self.heartbeat.is_zero() {
            return refuse("the heartbeat interval must be longer than zero".to_string());
        }
        if self.lease_timeout < self.heartbeat * 3 {
            return refuse(format!(
                "the lease timeout ({:?}) must be at least three heartbeats (3 × {:?})",
                self.lease_timeout, self.heartbeat
            ));
        }
        let bucket_ok = !self.bucket.is_empty()
            && self
                .bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
        if !bucket_ok {
            return refuse(format!(
                "bucket name {:?}: use letters, digits, '-' and '_'",
                self.bucket
            ));
        }
        Ok(())
    }
}

/// This node's membership: its heartbeat and leases, kept by a background task until
/// [`Ownership::leave`]. Dropping it stops the task without leaving, as a crash would: the
/// others take over after the lease timeout.
pub struct Ownership {
    node: String,
    partitions: u32,
    view: watch::Receiver<Arc<ClusterView>>,
    applied: Arc<Mutex<BTreeMap<u32, u64>>>,
    leave: Option<oneshot::Sender<agent::LeaveRequest>>,
    task: tokio::task::JoinHandle<()>,
}

impl Ownership {
    /// Joins the cluster whose bucket lives in `js` as node `node`, serving HTTP at
    /// `http_addr`: creates the bucket if this is the first node, checks the cluster's fixed
    /// settings, writes the first heartbeat, reads the bucket and takes the first leases,
    /// then keeps all that up in a task on the current tokio runtime.
    ///
    /// # Errors
    /// [`Error::Cluster`] when the settings or node name are refused, the cluster's partition
    /// or replica count differs from the settings, or JetStream cannot be reached.
    pub async fn join(
        js: async_nats::jetstream::Context,
        node: &str,
        http_addr: &str,
        settings: ClusterSettings,
    ) -> Result<Ownership> {
        settings.validate()?;
        if !records::valid_node_name(node) {
            return Err(Error::Cluster(format!(
                "node name {node:?}: use letters, digits, '-', '_' and inner dots, at most 128 bytes"
            )));
        }
        let store = kv_store::open_bucket(&js, &settings.bucket).await?;
        let at = kv_store::server_label(&js);
        kv_store::fix_count(
            &store,
            records::CONFIG_PARTITIONS,
            settings.partitions,
            &at,
            |stored, wanted| format!("has {stored} partitions; this node asked for {wanted}"),
        )
        .await?;
        kv_store::fix_count(
            &store,
            records::CONFIG_REPLICAS,
            settings.replicas,
            &at,
            |stored, wanted| {
                format!("keeps {stored} replicas of each partition; this node asked for {wanted}")
            },
        )
        .await?;
        kv_store::fix_text(
            &store,
            records::CONFIG_TIER_SETS,
            &settings.tier_sets,
            &at,
            |stored, wanted| {
                format!(
                    "keeps the tier sets {stored}; this node's tiers have {wanted}. Every \
                     node places a new series in a set by the same rules: give every node \
                     the same [[set]]s (to change them, stop every node, delete the key \
                     {} of the bucket, and start them with the new tiers)",
                    records::CONFIG_TIER_SETS
                )
            },
        )
        .await?;
        let applied = Arc::new(Mutex::new(BTreeMap::new()));
        let (agent, watch, view) = agent::Agent::start(
            store,
            node,
            http_addr,
            start_id(),
            &settings,
            applied.clone(),
        )
        .await?;
        let (leave, leave_rx) = oneshot::channel();
        let task = tokio::spawn(agent.run(watch, leave_rx));
        Ok(Ownership {
            node: node.to_string(),
            partitions: settings.partitions,
            view,
            applied,
            leave: Some(leave),
            task,
        })
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The cluster's partition count.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The cluster as this node sees it; the receiver sees each change (nodes coming and
    /// going, leases moving, applied sequences advancing).
    pub fn view(&self) -> watch::Receiver<Arc<ClusterView>> {
        self.view.clone()
    }

    /// Records that this node applied `partition`'s log up to `seq`; it goes out with the
    /// next heartbeat, where holders waiting to hand the partition over look for it.
    ///
    /// # Errors
    /// [`Error::Cluster`] when there is no such partition.
    pub fn report_applied(&self, partition: u32, seq: u64) -> Result<()> {
        if partition >= self.partitions {
            return Err(Error::Cluster(format!(
                "applied sequence reported for partition {partition}; the cluster has {} partitions",
                self.partitions
            )));
        }
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(partition, seq);
        Ok(())
    }

    /// Stops reporting an applied sequence for `partition`: this node no longer applies it,
    /// so its heartbeat should not say how far it got.
    pub fn forget_applied(&self, partition: u32) {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&partition);
    }

    /// Leaves the cluster cleanly: releases every lease and deletes the heartbeat, so the
    /// other nodes take over at once.
    ///
    /// # Errors
    /// [`Error::Cluster`] when a release or the delete failed (what was not released expires
    /// after the lease timeout), or the task had stopped.
    pub async fn leave(mut self) -> Result<()> {
        let (reply, outcome) = oneshot::channel();
        let asked = self.leave.take().map(|leave| leave.send(reply).is_ok());
        if asked != Some(true) {
            return Err(self.stopped());
        }
        outcome.await.map_err(|_| self.stopped())?
    }

    fn stopped(&self) -> Error {
        Error::Cluster(format!(
            "node {}: the cluster task had stopped, so the node could not leave cleanly",
            self.node
        ))
    }
}

impl Drop for Ownership {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The HTTP address of every node with a heartbeat in the cluster's bucket, by name, live or
/// not: how a tool that is not a node (`tierdb cluster status`) finds one to ask.
///
/// # Errors
/// [`Error::Cluster`] when the bucket does not exist (no node ever joined) or cannot be read.
pub(crate) async fn node_addresses(
    js: &async_nats::jetstream::Context,
    bucket: &str,
) -> Result<BTreeMap<String, String>> {
    use futures_util::StreamExt;
    let fail = |e: &dyn std::fmt::Display| {
        Error::Cluster(format!(
            "KV bucket {bucket} at {}: {e} (has any node joined this cluster?)",
            kv_store::server_label(js)
        ))
    };
    let store = js.get_key_value(bucket).await.map_err(|e| fail(&e))?;
    let mut keys = store.keys().await.map_err(|e| fail(&e))?;
    let mut nodes = BTreeMap::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(|e| fail(&e))?;
        let records::Key::Node(name) = records::Key::parse(&key) else {
            continue;
        };
        let Some(value) = store.get(&key).await.map_err(|e| fail(&e))? else {
            continue;
        };
        if let Some(heartbeat) = records::decode::<records::Heartbeat>(&value) {
            nodes.insert(name, heartbeat.http_addr);
        }
    }
    Ok(nodes)
}

/// A start id unique to this start of this process: wall-clock nanoseconds, the process id
/// and a counter (several nodes may run in one process, as in tests).
fn start_id() -> String {
    static STARTS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = STARTS.fetch_add(1, Ordering::Relaxed);
    format!("{nanos:x}-{:x}-{n}", std::process::id())
}

#[cfg(test)]
mod tests;
