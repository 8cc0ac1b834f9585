//! What this node saw of the bucket: the last value and revision of every heartbeat and
//! lease key, and when (on this node's monotonic clock) each last changed. Liveness comes
//! from here: a key is live while its revision keeps changing, so no clock is compared
//! across machines.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::balance::desired_owners;
use super::records::{decode, Heartbeat, Key, LeaseRecord};
use super::view::{ClusterView, Lease, NodeStatus, PartitionOwners};

/// A key's last value, its revision, and when this node saw the revision change.
#[derive(Clone, Debug)]
pub(super) struct Seen<T> {
    pub revision: u64,
    pub value: T,
    pub changed_at: Instant,
}

/// One change of a key, as the watcher or a read delivers it.
#[derive(Clone, Debug)]
pub(super) struct Change<'a> {
    pub key: &'a str,
    pub revision: u64,
    /// `None` for a delete or purge marker.
    pub value: Option<&'a [u8]>,
}

/// The bucket as this node last saw it.
pub(super) struct Table {
    /// This node's name: its own heartbeat doubles as the proof that the log is flowing.
    me: String,
    partitions: u32,
    replicas: u32,
    lease_timeout: Duration,
    /// A gap this long between two sightings of this node's own heartbeat means the log
    /// stalled (a NATS election, a lost connection) rather than that the others died.
    stall: Duration,
    /// After a stall, how long a key has to change again before its silence counts in full
    /// ([`Table::own_heartbeat_seen`]).
    stall_grace: Duration,
    nodes: BTreeMap<String, Seen<Heartbeat>>,
    leases: BTreeMap<(u32, u32), Seen<LeaseRecord>>,
    /// When this node's own heartbeat was last seen changing.
    own_seen_at: Option<Instant>,
    /// The last balance computed, with the live set it was computed for.
    desired: Option<(Vec<String>, Vec<Vec<String>>)>,
}

impl Table {
    /// An empty table for node `me` of a cluster of `partitions` × `replicas` slots.
    pub(super) fn new(
        me: &str,
        partitions: u32,
        replicas: u32,
        heartbeat: Duration,
        lease_timeout: Duration,
    ) -> Table {
        Table {
            me: me.to_string(),
            partitions,
            replicas,
            lease_timeout,
            stall: heartbeat * 3,
            stall_grace: stall_grace(heartbeat, lease_timeout),
            nodes: BTreeMap::new(),
            leases: BTreeMap::new(),
            own_seen_at: None,
            desired: None,
        }
    }

    /// Takes in one change seen at `now`. Revisions older than the one known for the key
    /// are ignored (the watcher may deliver a change after a read or write already showed a
    /// newer one); the same revision again is not a change. A heartbeat or lease value this
    /// version cannot read counts as a change all the same: the key is in use.
    ///
    /// Returns whether the view may have changed: not for a renewal (same value, key still
    /// live), which is most changes, so views are rebuilt only when there is news.
    pub(super) fn apply(&mut self, change: Change<'_>, now: Instant) -> bool {
        match Key::parse(change.key) {
            Key::Node(name) => {
                if self
                    .nodes
                    .get(&name)
                    .is_some_and(|s| s.revision >= change.revision)
                {
                    return false;
                }
                let stalled = name == self.me && self.own_heartbeat_seen(now);
                let heartbeat = change.value.map(|v| {
                    decode::<Heartbeat>(v).unwrap_or_else(|| {
                        tracing::warn!(node = %name, "unreadable heartbeat; node shown without address");
                        Heartbeat {
                            http_addr: String::new(),
                            start_id: String::new(),
                            applied: BTreeMap::new(),
                        }
                    })
                });
                let news = match heartbeat {
                    Some(value) => {
                        let seen = Seen {
                            revision: change.revision,
                            value,
                            changed_at: now,
                        };
                        let known = self.nodes.insert(name, seen.clone());
                        known.is_none_or(|k| k.value != seen.value || !self.alive(&k, now))
                    }
                    // A node that left deleted its heartbeat: gone at once.
                    None => self.nodes.remove(&name).is_some(),
                };
                news || stalled
            }
            Key::Lease { partition, replica } => {
                if partition >= self.partitions || replica >= self.replicas {
                    return false;
                }
                let known = self.leases.get(&(partition, replica));
                if known.is_some_and(|s| s.revision >= change.revision) {
                    return false;
                }
                let known_epoch = known.map_or(0, |s| s.value.epoch);
                let value = match change.value {
                    Some(v) => decode::<LeaseRecord>(v).unwrap_or_else(|| {
                        tracing::warn!(partition, replica, "unreadable lease; slot counted free");
                        LeaseRecord {
                            node: None,
                            epoch: known_epoch,
                        }
                    }),
                    // Slots are released by writing a free record; a deleted or purged one
                    // (by hand) is free too, and keeps the epoch known here.
                    None => LeaseRecord {
                        node: None,
                        epoch: known_epoch,
                    },
                };
                let seen = Seen {
                    revision: change.revision,
                    value,
                    changed_at: now,
                };
                let known = self.leases.insert((partition, replica), seen.clone());
                known.is_none_or(|k| k.value != seen.value || !self.alive(&k, now))
            }
            Key::Other => false,
        }
    }

    /// After a stall of the log as seen here, no key is found dead for the stall: each
    /// gets until `stall_grace` after its end to change again, or its full lease timeout,
    /// whichever ends later. The others' renewals were held up like ours and are not
    /// evidence of death, but a node that died with the stall (its server's death began it)
    /// has been silent all along, and is found dead one lease timeout after it was last
    /// seen (or one grace after the stall, when the stall outlasted the timeout), not one
    /// full timeout after the stall. Returns whether there was a stall.
    fn own_heartbeat_seen(&mut self, now: Instant) -> bool {
        let mut stalled = false;
        if let Some(last) = self.own_seen_at {
            if now.saturating_duration_since(last) > self.stall {
                tracing::info!(
                    gap = ?now.saturating_duration_since(last),
                    grace = ?self.stall_grace,
                    "the cluster log stalled; every node and lease gets at least a grace to renew"
                );
                // Counted as changed `lease_timeout - stall_grace` ago: dead at `now +
                // stall_grace` unless it changes. (`now` itself where the monotonic clock
                // does not reach that far back.)
                let renew_by = (now + self.stall_grace)
                    .checked_sub(self.lease_timeout)
                    .unwrap_or(now);
                for seen in self.nodes.values_mut() {
                    seen.changed_at = seen.changed_at.max(renew_by);
                }
                for seen in self.leases.values_mut() {
                    seen.changed_at = seen.changed_at.max(renew_by);
                }
                stalled = true;
            }
        }
        self.own_seen_at = Some(now);
        stalled
    }

    /// The last revision seen of `key` (a heartbeat or lease key), if any.
    pub(super) fn revision_of(&self, key: &str) -> Option<u64> {
        match Key::parse(key) {
            Key::Node(name) => self.nodes.get(&name).map(|s| s.revision),
            Key::Lease { partition, replica } => {
                self.leases.get(&(partition, replica)).map(|s| s.revision)
            }
            Key::Other => None,
        }
    }

    /// Replica slot `replica` of `partition`: its revision (`None` when never written) and
    /// record.
    pub(super) fn lease(&self, partition: u32, replica: u32) -> (Option<u64>, LeaseRecord) {
        match self.leases.get(&(partition, replica)) {
            Some(seen) => (Some(seen.revision), seen.value.clone()),
            None => (None, LeaseRecord::FREE),
        }
    }

    fn alive<T>(&self, seen: &Seen<T>, now: Instant) -> bool {
        now.saturating_duration_since(seen.changed_at) < self.lease_timeout
    }

    /// The cluster as seen at `now`.
    pub(super) fn view(&mut self, now: Instant) -> ClusterView {
        let nodes: Vec<NodeStatus> = self
            .nodes
            .iter()
            .map(|(name, seen)| NodeStatus {
                name: name.clone(),
                http_addr: seen.value.http_addr.clone(),
                start_id: seen.value.start_id.clone(),
                alive: self.alive(seen, now),
                applied: seen.value.applied.clone(),
            })
            .collect();
        let live: Vec<String> = nodes
            .iter()
            .filter(|n| n.alive)
            .map(|n| n.name.clone())
            .collect();
        let desired = self.desired_for(live);
        let node_alive = |name: &str| nodes.iter().any(|n| n.name == name && n.alive);
        let partitions = (0..self.partitions)
            .map(|p| PartitionOwners {
                replicas: (0..self.replicas)
                    .map(|r| {
                        let seen = self.leases.get(&(p, r))?;
                        let node = seen.value.node.clone()?;
                        Some(Lease {
                            alive: self.alive(seen, now) && node_alive(&node),
                            node,
                            epoch: seen.value.epoch,
                        })
                    })
                    .collect(),
                desired: desired[p as usize].clone(),
            })
            .collect();
        ClusterView {
            replicas: self.replicas,
            nodes,
            partitions,
        }
    }

    /// The desired owners for the live set `live` (sorted), computed again only when the
    /// live set changed.
    fn desired_for(&mut self, live: Vec<String>) -> Vec<Vec<String>> {
        match &self.desired {
            Some((known, desired)) if *known == live => desired.clone(),
            _ => {
                let desired = desired_owners(&live, self.partitions, self.replicas);
                self.desired = Some((live, desired.clone()));
                desired
            }
        }
    }
}

/// How long a key has after a stall of the log to change again: half the lease timeout, and
/// at least three heartbeats (a live node renews every heartbeat, but its first write after
/// the stall may wait out a request that the stall held up).
fn stall_grace(heartbeat: Duration, lease_timeout: Duration) -> Duration {
    (lease_timeout / 2).max(heartbeat * 3).min(lease_timeout)
}
