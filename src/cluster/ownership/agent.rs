//! The node's background task: it heartbeats, watches the bucket into the [`Table`], carries
//! out the lease writes [`decide`] asks for, and publishes the [`ClusterView`] whenever it
//! changes. Every NATS request has a time limit and a failure is retried on the next
//! heartbeat, so a server's death or an election never stops the task.
//!
//! The bucket's revisions can also go back. After NATS servers were killed with SIGKILL again
//! and again, nats-server 2.9 was seen to elect a leader of the bucket's stream that lacked
//! writes it had already answered, and to number new writes from there. A table that kept the
//! higher revisions would then ignore every later change of those keys and expect revisions
//! that no longer exist, so each lease write failed until the node restarted. The task notices
//! (its own heartbeat's revision not above the last one, or a slot read back below what the
//! table holds), forgets what it saw, and reads the bucket again: see [`Agent::resync`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use tokio::sync::{oneshot, watch};

use super::decide::{decide, Action, Held, Holdings};
use super::records::{encode, lease_key, node_key, Heartbeat, LeaseRecord};
use super::table::{Change, Table};
use super::view::ClusterView;
use super::ClusterSettings;
use crate::error::Error;
use crate::error::Result;

/// Extra decision passes in one heartbeat after compare-and-set writes failed.
const RETRY_PASSES: usize = 2;

/// A request to leave, with where to send the outcome.
pub(super) type LeaveRequest = oneshot::Sender<Result<()>>;

/// The task's state.
pub(super) struct Agent {
    me: String,
    http_addr: String,
    start_id: String,
    store: kv::Store,
    /// The time limit of one NATS request.
    request_timeout: Duration,
    table: Table,
    holdings: Holdings,
    /// Applied sequences reported by the node's appliers, sent with each heartbeat.
    applied: Arc<Mutex<BTreeMap<u32, u64>>>,
    view: watch::Sender<Arc<ClusterView>>,
    /// The highest revision the watcher delivered: where a new watcher resumes.
    watched_revision: u64,
    /// This node's first heartbeat the watcher has not delivered yet, and when it was
    /// written: a watcher that stays behind its own node's writes is stuck and is replaced.
    unwatched_heartbeat: Option<(u64, Instant)>,
    /// The revision of this node's first heartbeat: a later one with another start id means
    /// a second process runs under this node's name.
    first_heartbeat: Option<u64>,
    /// The revision of this node's last heartbeat: the next one must be above it.
    last_heartbeat: u64,
    /// Set when a read showed the bucket's revisions went back; the next heartbeat resyncs.
    went_back: bool,
    settings: ClusterSettings,
}

/// What woke the task.
enum Event {
    Leave(std::result::Result<LeaveRequest, oneshot::error::RecvError>),
    Tick,
    Watched(Option<std::result::Result<kv::Entry, kv::WatcherError>>),
}

impl Agent {
    /// Writes the first heartbeat, reads the bucket as it is, takes the first leases, and
    /// returns the task's state, its watcher (kept apart: a watcher is not `Sync`) and the
    /// receiver of its views.
    ///
    /// # Errors
    /// [`Error::Cluster`] when the heartbeat cannot be written or the bucket not watched.
    pub(super) async fn start(
        store: kv::Store,
        me: &str,
        http_addr: &str,
        start_id: String,
        settings: &ClusterSettings,
        applied: Arc<Mutex<BTreeMap<u32, u64>>>,
    ) -> Result<(Agent, kv::Watch, watch::Receiver<Arc<ClusterView>>)> {
        let table = Table::new(
            me,
            settings.partitions,
            settings.replicas,
            settings.heartbeat,
            settings.lease_timeout,
        );
        let (view, view_rx) = watch::channel(Arc::new(ClusterView::default()));
        let mut agent = Agent {
            me: me.to_string(),
            http_addr: http_addr.to_string(),
            start_id,
            store,
            request_timeout: settings.lease_timeout / 3,
            table,
            holdings: Holdings::default(),
            applied,
            view,
            watched_revision: 0,
            unwatched_heartbeat: None,
            first_heartbeat: None,
            last_heartbeat: 0,
            went_back: false,
            settings: settings.clone(),
        };
        agent
            .write_heartbeat()
            .await
            .map_err(|e| agent.error(&format!("write the heartbeat of node {me}"), &e))?;
        let watch = match agent.read_bucket(settings.lease_timeout).await {
            Ok(watch) => watch,
            Err(e) => {
                // Not joined after all: take the heartbeat back rather than let it expire.
                let _ = agent.limit(agent.store.delete(node_key(me))).await;
                return Err(e);
            }
        };
        agent.settle_leases(true).await;
        agent.publish_view();
        Ok((agent, watch, view_rx))
    }

    /// Watches the bucket and reads its current keys, up to the last one pending when the
    /// watch began (the bucket is never empty here: it holds this node's heartbeat), or for
    /// at most `limit`.
    async fn read_bucket(&mut self, limit: Duration) -> Result<kv::Watch> {
        let mut watch = self
            .limit(self.store.watch_with_history(">"))
            .await
            .map_err(|e| self.error("watch", &e))?;
        let deadline = Instant::now() + limit;
        while let Ok(Some(entry)) = tokio::time::timeout_at(deadline.into(), watch.next()).await {
            let entry = entry.map_err(|e| self.error("read the bucket", &e))?;
            let caught_up = entry.delta == 0;
            self.take_watched(&entry);
            if caught_up {
                break;
            }
        }
        Ok(watch)
    }

    /// Runs until a leave request (answered once the node left) or until the [`Ownership`]
    /// is dropped (then it just stops, as a crash would).
    ///
    /// [`Ownership`]: super::Ownership
    pub(super) async fn run(
        mut self,
        watch: kv::Watch,
        mut leave: oneshot::Receiver<LeaveRequest>,
    ) {
        let mut watch = Some(watch);
        let mut ticker = tokio::time::interval(self.settings.heartbeat);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await; // The first tick is immediate; start did its work.
        loop {
            let event = tokio::select! {
                request = &mut leave => Event::Leave(request),
                _ = ticker.tick() => Event::Tick,
                entry = next_entry(&mut watch) => Event::Watched(entry),
            };
            match event {
                Event::Leave(Ok(reply)) => {
                    let _ = reply.send(self.leave().await);
                    return;
                }
                Event::Leave(Err(_)) => return,
                Event::Tick => self.tick(&mut watch).await,
                Event::Watched(Some(Ok(entry))) => {
                    if self.take_watched(&entry) {
                        self.publish_view();
                    }
                }
                Event::Watched(Some(Err(e))) => {
                    tracing::warn!(error = %e, "cluster bucket watch failed; watching again");
                    watch = None;
                }
                Event::Watched(None) => {
                    tracing::warn!("cluster bucket watch ended; watching again");
                    watch = None;
                }
            }
        }
    }

    /// One heartbeat: write it, make sure the watcher keeps up (and the table is still the
    /// bucket's), settle the leases, publish.
    async fn tick(&mut self, watch: &mut Option<kv::Watch>) {
        let beat = self.write_heartbeat().await;
        if let Err(e) = &beat {
            tracing::warn!(error = %e, node = %self.me, "heartbeat not written");
        }
        if self.went_back {
            self.resync(watch).await;
        } else {
            self.check_watch(watch).await;
        }
        self.settle_leases(beat.is_ok()).await;
        self.publish_view();
    }

    /// Forgets the table (and the watcher) and reads the bucket again, after its revisions
    /// went back (see the module docs). Every key read gets a fresh lease timeout, as after a
    /// stall; held slots whose record is still this node's, with the same epoch, are kept at
    /// the revision read (see [`decide`]), the others are dropped.
    async fn resync(&mut self, watch: &mut Option<kv::Watch>) {
        tracing::warn!(
            node = %self.me,
            "the cluster bucket's revisions went back (a NATS leader without some answered writes); reading it again"
        );
        self.went_back = false;
        self.table = Table::new(
            &self.me,
            self.settings.partitions,
            self.settings.replicas,
            self.settings.heartbeat,
            self.settings.lease_timeout,
        );
        self.watched_revision = 0;
        self.unwatched_heartbeat = None;
        self.first_heartbeat = None;
        self.last_heartbeat = 0;
        *watch = None;
        match self.read_bucket(self.settings.lease_timeout).await {
            Ok(new) => *watch = Some(new),
            // check_watch starts one from the first revision on the next heartbeat.
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cluster bucket; retrying next heartbeat")
            }
        }
    }

    /// Writes this node's heartbeat (a plain put: only this node writes its key).
    async fn write_heartbeat(&mut self) -> std::result::Result<(), String> {
        let heartbeat = Heartbeat {
            http_addr: self.http_addr.clone(),
            start_id: self.start_id.clone(),
            applied: self
                .applied
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        let value = encode(&heartbeat);
        let key = node_key(&self.me);
        let revision = self
            .limit(self.store.put(&key, value.clone().into()))
            .await?;
        let now = Instant::now();
        if revision <= self.last_heartbeat {
            self.went_back = true;
        }
        self.last_heartbeat = revision;
        self.first_heartbeat.get_or_insert(revision);
        if self.unwatched_heartbeat.is_none() && revision > self.watched_revision {
            self.unwatched_heartbeat = Some((revision, now));
        }
        self.table.apply(
            Change {
                key: &key,
                revision,
                value: Some(&value),
            },
            now,
        );
        Ok(())
    }

    /// Replaces a watcher that ended, failed, or fell behind this node's own writes by more
    /// than a few heartbeats; it resumes after the last revision it delivered.
    async fn check_watch(&mut self, watch: &mut Option<kv::Watch>) {
        let stuck = self
            .unwatched_heartbeat
            .is_some_and(|(_, at)| at.elapsed() > self.settings.heartbeat * 3);
        if watch.is_some() && !stuck {
            return;
        }
        if stuck {
            tracing::warn!("cluster bucket watch fell behind; watching again");
        }
        let from = self.watched_revision + 1;
        match self.limit(self.store.watch_all_from_revision(from)).await {
            Ok(new) => {
                *watch = Some(new);
                self.unwatched_heartbeat = None;
            }
            Err(e) => {
                *watch = None;
                tracing::warn!(error = %e, "cannot watch the cluster bucket; retrying next heartbeat");
            }
        }
    }

    /// Takes in one entry the watcher delivered; whether the view may have changed.
    fn take_watched(&mut self, entry: &kv::Entry) -> bool {
        self.watched_revision = self.watched_revision.max(entry.revision);
        if self
            .unwatched_heartbeat
            .is_some_and(|(revision, _)| revision <= self.watched_revision)
        {
            self.unwatched_heartbeat = None;
        }
        let value = (entry.operation == kv::Operation::Put).then_some(&entry.value[..]);
        if entry.key == node_key(&self.me)
            && self
                .first_heartbeat
                .is_some_and(|first| entry.revision > first)
        {
            let theirs = value.and_then(super::records::decode::<Heartbeat>);
            if theirs.is_some_and(|h| h.start_id != self.start_id) {
                tracing::error!(
                    node = %self.me,
                    "another process heartbeats under this node's name; give each node its own name"
                );
            }
        }
        self.table.apply(
            Change {
                key: &entry.key,
                revision: entry.revision,
                value,
            },
            Instant::now(),
        )
    }

    /// Decides and writes; after failed writes, reads those slots again and decides again
    /// for their partitions (at most [`RETRY_PASSES`] more times). `take_expired`: this
    /// heartbeat went through (see [`decide`]).
    async fn settle_leases(&mut self, take_expired: bool) {
        let mut only: Option<BTreeSet<u32>> = None;
        for _ in 0..=RETRY_PASSES {
            let view = self.table.view(Instant::now());
            let applied = self
                .applied
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let mut actions = decide(
                &self.me,
                &self.table,
                &view,
                &mut self.holdings,
                &applied,
                take_expired,
            );
            if let Some(only) = &only {
                actions.retain(|a| only.contains(&a.slot().0));
            }
            if actions.is_empty() {
                return;
            }
            let outcomes = futures_util::future::join_all(
                actions.iter().map(|action| self.write_lease(action)),
            )
            .await;
            let mut failed = Vec::new();
            for (action, outcome) in actions.iter().zip(outcomes) {
                match outcome {
                    Ok(revision) => self.wrote(action, revision),
                    Err(e) => {
                        tracing::debug!(?action, error = %e, "lease write failed; reading the slot again");
                        failed.push(action);
                    }
                }
            }
            // Deciding again helps only where a read showed something new; when NATS does
            // not answer, or the table must be read again first, the next heartbeat tries.
            if failed.is_empty() || self.reread(&failed).await == 0 || self.went_back {
                return;
            }
            only = Some(failed.iter().map(|a| a.slot().0).collect());
        }
    }

    /// One compare-and-set write of a slot; the new revision.
    async fn write_lease(&self, action: &Action) -> std::result::Result<u64, String> {
        let (partition, replica) = action.slot();
        let key = lease_key(partition, replica);
        let value = encode(&action.record(&self.me)).into();
        match *action {
            Action::Claim { revision: None, .. } => {
                self.limit(self.store.create(&key, value)).await
            }
            Action::Renew { revision, .. }
            | Action::Release { revision, .. }
            | Action::Claim {
                revision: Some(revision),
                ..
            } => self.limit(self.store.update(&key, value, revision)).await,
        }
    }

    /// Records a write that succeeded.
    fn wrote(&mut self, action: &Action, revision: u64) {
        let (partition, replica) = action.slot();
        let record = action.record(&self.me);
        self.table.apply(
            Change {
                key: &lease_key(partition, replica),
                revision,
                value: Some(&encode(&record)),
            },
            Instant::now(),
        );
        match *action {
            Action::Renew { epoch, .. } | Action::Claim { epoch, .. } => {
                if matches!(action, Action::Claim { .. }) {
                    tracing::info!(node = %self.me, partition, replica, epoch, "lease taken");
                }
                self.holdings.held.insert(
                    partition,
                    Held {
                        replica,
                        epoch,
                        revision,
                    },
                );
            }
            Action::Release { .. } => {
                tracing::info!(node = %self.me, partition, replica, "lease released");
                if self
                    .holdings
                    .held
                    .get(&partition)
                    .is_some_and(|h| h.replica == replica)
                {
                    self.holdings.held.remove(&partition);
                }
            }
        }
    }

    /// After failed writes: reads their slots again (all at once) into the table. A slot
    /// that shows a write landed after all (its answer was lost) records it as done. Returns
    /// how many slots could be read: only those teach anything new.
    async fn reread(&mut self, actions: &[&Action]) -> usize {
        let keys: Vec<String> = actions
            .iter()
            .map(|a| {
                let (partition, replica) = a.slot();
                lease_key(partition, replica)
            })
            .collect();
        let entries = futures_util::future::join_all(
            keys.iter().map(|key| self.limit(self.store.entry(key))),
        )
        .await;
        let mut read = 0;
        for ((action, key), entry) in actions.iter().zip(&keys).zip(entries) {
            let entry = match entry {
                Ok(Some(entry)) => entry,
                Ok(None) => {
                    // A key the table knows is never gone without a trace (a delete leaves a
                    // marker): the stream lost it.
                    self.went_back |= self.table.revision_of(key).is_some();
                    read += 1;
                    continue;
                }
                Err(e) => {
                    tracing::debug!(key, error = %e, "slot not read; retrying next heartbeat");
                    continue;
                }
            };
            read += 1;
            if self
                .table
                .revision_of(key)
                .is_some_and(|known| entry.revision < known)
            {
                self.went_back = true;
            }
            let value = (entry.operation == kv::Operation::Put).then_some(&entry.value[..]);
            let landed = value.and_then(super::records::decode::<LeaseRecord>)
                == Some(action.record(&self.me));
            if landed && !matches!(action, Action::Renew { .. }) {
                self.wrote(action, entry.revision);
            } else {
                self.table.apply(
                    Change {
                        key,
                        revision: entry.revision,
                        value,
                    },
                    Instant::now(),
                );
            }
        }
        read
    }

    /// Sends the view when it changed.
    fn publish_view(&mut self) {
        let view = self.table.view(Instant::now());
        self.view.send_if_modified(|current| {
            if **current == view {
                false
            } else {
                *current = Arc::new(view);
                true
            }
        });
    }

    /// Releases every held slot and deletes the heartbeat, so the others take over at once.
    async fn leave(mut self) -> Result<()> {
        let releases: Vec<Action> = self
            .holdings
            .held
            .iter()
            .map(|(&partition, held)| Action::Release {
                partition,
                replica: held.replica,
                epoch: held.epoch,
                revision: held.revision,
            })
            .collect();
        let outcomes =
            futures_util::future::join_all(releases.iter().map(|a| self.write_lease(a))).await;
        let mut refused = Vec::new();
        for (action, outcome) in releases.iter().zip(outcomes) {
            match outcome {
                Ok(revision) => self.wrote(action, revision),
                Err(e) => refused.push((action, e)),
            }
        }
        let actions: Vec<&Action> = refused.iter().map(|(a, _)| *a).collect();
        self.reread(&actions).await;
        // A slot someone else took meanwhile is not this node's to release any more.
        let mut failures: Vec<String> = refused
            .iter()
            .filter(|(action, _)| {
                let (partition, replica) = action.slot();
                self.table.lease(partition, replica).1.held_by(&self.me)
            })
            .map(|(action, e)| format!("release of partition {}: {e}", action.slot().0))
            .collect();
        let key = node_key(&self.me);
        if let Err(e) = self.limit(self.store.delete(&key)).await {
            failures.push(format!("delete of {key}: {e}"));
        }
        if failures.is_empty() {
            Ok(())
        } else {
            // What was not released expires after the lease timeout.
            Err(Error::Cluster(format!(
                "node {} left the KV bucket {} uncleanly: {}",
                self.me,
                self.store.name,
                failures.join("; ")
            )))
        }
    }

    /// `request` with the time limit of one NATS request; its error as text.
    async fn limit<T, E: std::fmt::Display>(
        &self,
        request: impl std::future::Future<Output = std::result::Result<T, E>>,
    ) -> std::result::Result<T, String> {
        match tokio::time::timeout(self.request_timeout, request).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {:?}", self.request_timeout)),
        }
    }

    fn error(&self, what: &str, e: &dyn std::fmt::Display) -> Error {
        Error::Cluster(format!("{what} in KV bucket {}: {e}", self.store.name))
    }
}

/// The watcher's next entry; never ready while there is no watcher.
async fn next_entry(
    watch: &mut Option<kv::Watch>,
) -> Option<std::result::Result<kv::Entry, kv::WatcherError>> {
    match watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}
