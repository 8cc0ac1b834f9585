//! What this node does with leases on each heartbeat, decided from the table and the view
//! without any I/O: renew what it holds, claim a slot of a partition it should own, release
//! a slot of one it should no longer own once the node that should have it caught up. The
//! agent carries the actions out as compare-and-set writes; a write that fails only means
//! the table was behind, so the agent reads the key again and decides again.

use std::collections::BTreeMap;

use super::records::LeaseRecord;
use super::table::Table;
use super::view::ClusterView;

/// A slot this node holds, as it last wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Held {
    pub replica: u32,
    pub epoch: u64,
    /// The revision of this node's last write of the slot: the next renewal expects it.
    pub revision: u64,
}

/// This node's own lease state: what it holds (by partition; never two slots of one) and,
/// for partitions it should hand over, how far it had applied when it noticed.
#[derive(Debug, Default)]
pub(super) struct Holdings {
    pub held: BTreeMap<u32, Held>,
    /// Partition → this node's applied sequence when it found itself no longer desired: the
    /// desired node must reach it before this node releases. Fixed at that moment, so a
    /// steady write rate cannot keep the handover waiting forever.
    pub handover: BTreeMap<u32, u64>,
}

/// One compare-and-set write of a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Rewrite a held slot unchanged, so its revision changes.
    Renew {
        partition: u32,
        replica: u32,
        epoch: u64,
        revision: u64,
    },
    /// Take a free or expired slot (or one an earlier run of this node left) with `epoch`,
    /// one more than the slot's. `revision` is `None` for a slot never written.
    Claim {
        partition: u32,
        replica: u32,
        epoch: u64,
        revision: Option<u64>,
    },
    /// Free a slot, keeping its epoch.
    Release {
        partition: u32,
        replica: u32,
        epoch: u64,
        revision: u64,
    },
}

impl Action {
    /// The partition and replica slot written.
    pub(super) fn slot(&self) -> (u32, u32) {
        match *self {
            Action::Renew {
                partition, replica, ..
            }
            | Action::Claim {
                partition, replica, ..
            }
            | Action::Release {
                partition, replica, ..
            } => (partition, replica),
        }
    }

    /// The record the write puts in the slot, for node `me`.
    pub(super) fn record(&self, me: &str) -> LeaseRecord {
        match *self {
            Action::Renew { epoch, .. } | Action::Claim { epoch, .. } => LeaseRecord {
                node: Some(me.to_string()),
                epoch,
            },
            Action::Release { epoch, .. } => LeaseRecord { node: None, epoch },
        }
    }
}

/// First brings `holdings` in line with the table (a slot someone else wrote since this
/// node's last write is lost at once; this node's own write seen late is adopted), then
/// returns the writes of this heartbeat. `applied` is this node's applied sequence per
/// partition. `take_expired` allows claiming slots whose holder stopped renewing: only when
/// this node's own heartbeat just went through, so that a log that stalls and resumes is
/// noticed (and every lease given a fresh timeout) before anything is taken over.
pub(super) fn decide(
    me: &str,
    table: &Table,
    view: &ClusterView,
    holdings: &mut Holdings,
    applied: &BTreeMap<u32, u64>,
    take_expired: bool,
) -> Vec<Action> {
    reconcile(me, table, holdings);
    let mut actions = Vec::new();
    for (p, owners) in (0u32..).zip(&view.partitions) {
        let desired = owners.desired.iter().any(|d| d == me);
        let slots: Vec<(u32, Option<u64>, LeaseRecord)> = (0..view.replicas)
            .map(|r| {
                let (revision, record) = table.lease(p, r);
                (r, revision, record)
            })
            .collect();
        // The slot of this partition already dealt with above (renewed, released, claimed).
        let mut handled: Option<u32> = None;

        if let Some(held) = holdings.held.get(&p).copied() {
            handled = Some(held.replica);
            let renew = Action::Renew {
                partition: p,
                replica: held.replica,
                epoch: held.epoch,
                revision: held.revision,
            };
            if desired {
                holdings.handover.remove(&p);
                actions.push(renew);
            } else {
                let mine = applied.get(&p).copied().unwrap_or(0);
                let target = *holdings.handover.entry(p).or_insert(mine);
                // A desired node without a slot that applied at least as far as this node had.
                let ready = owners
                    .desired
                    .iter()
                    .filter(|d| !owners.holds(d))
                    .filter_map(|d| view.node(d))
                    .any(|d| d.alive && d.applied.get(&p).copied().unwrap_or(0) >= target);
                if ready {
                    holdings.handover.remove(&p);
                    actions.push(Action::Release {
                        partition: p,
                        replica: held.replica,
                        epoch: held.epoch,
                        revision: held.revision,
                    });
                } else {
                    actions.push(renew);
                }
            }
        } else if desired {
            holdings.handover.remove(&p);
            // A slot an earlier run of this node left (or a claim whose answer was lost)
            // first, else the lowest free or expired one.
            let left_by_me = slots.iter().find(|(_, _, record)| record.held_by(me));
            let free = || {
                slots
                    .iter()
                    .find(|&&(r, _, ref record)| match &record.node {
                        None => true,
                        Some(_) => {
                            take_expired
                                && !owners.replicas[r as usize]
                                    .as_ref()
                                    .is_some_and(|lease| lease.alive)
                        }
                    })
            };
            if let Some(&(r, revision, ref record)) = left_by_me.or_else(free) {
                handled = Some(r);
                actions.push(Action::Claim {
                    partition: p,
                    replica: r,
                    epoch: record.epoch + 1,
                    revision,
                });
            }
        } else {
            holdings.handover.remove(&p);
        }

        // Never two slots of one partition: free any other slot that still names this node.
        for (r, revision, record) in &slots {
            if record.held_by(me) && Some(*r) != handled {
                if let Some(revision) = *revision {
                    actions.push(Action::Release {
                        partition: p,
                        replica: *r,
                        epoch: record.epoch,
                        revision,
                    });
                }
            }
        }
    }
    actions
}

/// Drops held slots the table shows rewritten by someone else, or does not show at all, and
/// adopts other revisions of this node's own record: newer ones (its own write seen late),
/// and older ones. The table shows older ones, or none, only after it was read again because
/// the bucket's revisions went back; its own writes update it, so it is never behind them
/// otherwise.
fn reconcile(me: &str, table: &Table, holdings: &mut Holdings) {
    holdings.held.retain(|&p, held| {
        let (revision, record) = table.lease(p, held.replica);
        match revision {
            Some(revision) if revision == held.revision => true,
            Some(revision) if record.held_by(me) && record.epoch == held.epoch => {
                held.revision = revision;
                true
            }
            _ => {
                tracing::info!(
                    partition = p,
                    replica = held.replica,
                    epoch = held.epoch,
                    now = ?record,
                    "lease taken over or lost; no longer claimed"
                );
                false
            }
        }
    });
}
