//! One cluster node: its NATS connection, its place in the ownership table, and the
//! partitions it applies, each an engine directory under `<data>/partitions/<p>/` fed from
//! the log by its own task.
//!
//! A partition's task takes the messages holding the partition from the node's one reader
//! of the log ([`super::log_feed`]), from the one after its applied sequence, applies them
//! in groups ([`Engine::apply`], exactly once) and reports the new applied sequence
//! to the ownership table, which tells readers how far each owner is. When the partition
//! leaves the set this node applies, the task stops and the engine is closed; its directory
//! stays, so taking the partition back later only reads the log from where it stopped.
//!
//! A partition this node has nothing of (a new node, or one back with an empty disk), or
//! less than the log still holds (away for longer than the log keeps messages), is first
//! rebuilt from a live replica's files ([`super::snapshot`]); the log then supplies only the
//! tail after the copy's applied sequence.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::apply;
use super::delete_entry::LogEntry;
use super::envelope;
use super::ingest_log::{IngestLog, LogRetention};
use super::log_feed::{self, LogFeed};
use super::nats_version;
use super::ownership::{self, ClusterSettings, ClusterView, Ownership};
use super::peer;
use super::snapshot::{self, SnapshotInfo};
use super::streams;
use crate::clock::{Clock, SystemClock};
use crate::config::TiersConfig;
use crate::engine::Engine;
use crate::engine::EngineStats;
use crate::error::Error;
use crate::error::Result;
use crate::fault::Hook;
use crate::read::store::cache::{RenderCache, DEFAULT_RENDER_CACHE_BYTES};
use crate::time::Timestamp;

/// Messages applied together at most: one undo record and one flush per group.
const GROUP_MESSAGES: usize = 64;

/// Samples after which a partition's task stops gathering its group. What a group's apply
/// holds (its decoded messages, the samples queued for the writers, the pre-images and
/// their undo record) grows with it, on each group applying at once (one per core, see
/// [`Node::apply_partition`]): a bound keeps that memory, and the fresh pages the kernel
/// must zero to back it, small, while a group stays large enough that its undo record and
/// flush are spread over many samples.
const GROUP_SAMPLES: usize = 16_384;

/// How long a partition's task waits for one more message before it applies what it has.
/// Under load a partition's messages come a few milliseconds apart, in bursts: waiting out
/// the gaps within a burst makes one group (one undo record and its fdatasync) of what would
/// be several. With three nodes and 16 partitions, 25 ms rather than 5 ms (and the bound
/// below) took the cluster's fdatasyncs over `benches/cluster.sh` from 2,200-4,000 to 500-650.
const GROUP_WAIT: Duration = Duration::from_millis(25);

/// How long a partition's task gathers one group at most, from its first message: what the
/// wait above may add to the time a sample takes to be applied, and so readable.
const GROUP_SPAN: Duration = Duration::from_millis(250);

/// How long a partition's task may be given nothing before it makes what it applied durable
/// (a checkpoint) rather than wait for the next group.
const IDLE_CHECKPOINT: Duration = Duration::from_secs(3);

/// How long a task pauses after a failed read or apply before it tries again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// How long a node's task that panicked waits before it is started again.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// How long copying a replica's files may take.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a node keeps trying to copy a partition the log can no longer give it whole,
/// while a replica that applied more is listed, before it applies what the log still holds
/// (and reports the gap). Until then it does not apply, so it does not serve, the partition:
/// a copy that failed once (a timeout, a holder handing the partition over) is tried again.
const COPY_PATIENCE: Duration = Duration::from_secs(120);

/// Cluster renders running at once at most. A render holds a blocking-pool thread while it
/// waits for its fan-out, whose reads of this node's partitions need blocking threads too:
/// with every thread of the pool (512) held by renders, those reads would never run.
const CONCURRENT_RENDERS: usize = 64;

/// How often a node checks that the log still holds what it applied.
const LOG_CHECK: Duration = Duration::from_secs(10);

/// How long a starting node waits for JetStream to answer (a leader elected) before it
/// gives up.
const JETSTREAM_WAIT: Duration = Duration::from_secs(120);

/// Whether a failure to join may pass by itself: JetStream not answering yet, rather than a
/// refusal (another partition count, a bad node name) that retrying cannot change.
fn retryable(e: &Error) -> bool {
    let text = e.to_string();
    [
        "timed out",
        "no responders",
        "unavailable",
        "not ready",
        "leader",
        // A bucket another node made a moment ago, not yet found by a read of a key.
        "no stream found",
    ]
    .iter()
    .any(|sign| text.contains(sign))
}

/// What a node is given to start.
#[derive(Clone, Debug)]
pub(crate) struct NodeSettings {
    /// NATS server URLs, comma-separated.
    pub urls: String,
    /// The credentials and TLS the NATS servers require.
    pub nats: super::nats_connect::NatsAuth,
    /// This node's name, unique in the cluster and stable across restarts.
    pub name: String,
    /// The node's data directory; partitions live under `partitions/`.
    pub data_dir: PathBuf,
    /// The tiers every partition's engine uses (the same on every node).
    pub tiers: TiersConfig,
    /// Partition count, replicas, heartbeat and lease timeout.
    pub ownership: ClusterSettings,
    /// How long the log keeps messages.
    pub log: LogRetention,
    /// The bearer token the nodes' HTTP APIs require (one for the cluster), for copying a
    /// replica's files from a peer.
    pub token: Option<String>,
    /// How the node reaches its peers' HTTP: TLS when they serve it.
    pub peer_tls: super::peer::PeerTls,
}

/// A running node. Shared by the server's handlers; [`Node::leave`] stops it.
pub(crate) struct Node {
    name: String,
    data_dir: PathBuf,
    tiers: TiersConfig,
    clock: Arc<dyn Clock>,
    log: IngestLog,
    /// The one reader of the log, feeding every partition applied here.
    feed: Arc<LogFeed>,
    ownership: Mutex<Option<Ownership>>,
    view: watch::Receiver<Arc<ClusterView>>,
    partitions: u32,
    /// The partitions this node applies, each with its engine and task.
    applying: Mutex<BTreeMap<u32, Applying>>,
    /// The background tasks: the manager that follows the view, and the log check.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Woken by a partition task that ended on a failed apply, so the manager reopens it.
    failed: tokio::sync::Notify,
    /// Message ids of this process's publishes: `<node>.<start>.<n>`, unique across
    /// restarts because `start` is the process's start time in nanoseconds.
    publish_prefix: String,
    publish_count: std::sync::atomic::AtomicU64,
    token: Option<String>,
    peer_tls: super::peer::PeerTls,
    /// The partitions rebuilt from a peer's copy since this process started.
    rebuilds: Mutex<Vec<Rebuild>>,
    /// Partitions waiting for a copy the log cannot replace ([`COPY_PATIENCE`]), with when
    /// the first attempt failed.
    copy_waits: Mutex<BTreeMap<u32, Instant>>,
    /// Renders running at once (see [`Node::render_slot`]).
    renders: tokio::sync::Semaphore,
    /// What this node's partitions gave the renders that read them (through any node),
    /// kept for the next refresh of the same panel.
    render_cache: Arc<RenderCache>,
    /// Groups applying at once: one per core (see [`Node::apply_partition`]).
    applies: tokio::sync::Semaphore,
    /// Partitions this node applied past the log's last sequence, as last checked: partition
    /// → (applied, the log's last sequence). See [`Node::check_log`].
    ahead_of_log: Mutex<BTreeMap<u32, (u64, u64)>>,
    /// The pause before each group's apply that [`Hook::ApplyPauseMs`] asks for, if set: the
    /// lag tests' way to let partitions fall behind the log while the node answers reads.
    apply_pause: Option<Duration>,
}

/// A partition rebuilt from a live replica's files.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Rebuild {
    /// The partition.
    pub partition: u32,
    /// The node the files came from.
    pub from: String,
    /// This node's applied sequence before: 0 when it had nothing.
    pub applied_before: u64,
    /// The copy's applied sequence, where reading the log resumed.
    pub applied: u64,
    /// Files copied.
    pub files: u32,
    /// Bytes copied.
    pub bytes: u64,
}

/// A partition being applied here.
struct Applying {
    engine: Arc<Engine>,
    task: JoinHandle<()>,
    stop: watch::Sender<bool>,
}

impl Node {
    /// Connects to NATS, opens the log, joins the ownership table and starts applying the
    /// partitions the table gives this node. `http_addr` is where other nodes reach this
    /// node's reads.
    ///
    /// # Errors
    /// [`Error::Cluster`] when NATS cannot be reached or the cluster refuses this node (a
    /// different partition count); [`Error::Io`] for the data directory.
    pub(crate) async fn start(settings: NodeSettings, http_addr: &str) -> Result<Arc<Node>> {
        let partitions = settings.data_dir.join("partitions");
        std::fs::create_dir_all(&partitions).map_err(|e| Error::io(&partitions, e))?;
        snapshot::tidy_unfinished(&partitions)?;
        let client = super::nats_connect::connect(
            &settings.urls,
            &format!("tierdb {}", settings.name),
            &settings.nats,
            true,
        )
        .await?;
        let js = async_nats::jetstream::new(client);
        // NATS servers started together with the nodes elect JetStream's leader a few
        // seconds after they accept connections: wait for it rather than fail.
        let deadline = tokio::time::Instant::now() + JETSTREAM_WAIT;
        let (log, ownership) = loop {
            let joined = async {
                nats_version::check(&js.client().server_info())?;
                // The count the node asks for: joining refuses a cluster that has another.
                let partitions = settings.ownership.partitions;
                let log = IngestLog::open(js.clone(), &settings.log, partitions).await?;
                let ownership = Ownership::join(
                    js.clone(),
                    &settings.name,
                    http_addr,
                    ClusterSettings {
                        tier_sets: settings.tiers.tier_sets_text(),
                        ..settings.ownership.clone()
                    },
                )
                .await?;
                Ok::<_, Error>((log, ownership))
            };
            match joined.await {
                Ok(joined) => break joined,
                Err(e) if tokio::time::Instant::now() < deadline && retryable(&e) => {
                    tracing::warn!(error = %e, "JetStream not ready; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) => return Err(e),
            }
        };
        let view = ownership.view();
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let kept_streams = [
            super::ingest_log::STREAM.to_string(),
            ownership::bucket_stream_name(&settings.ownership.bucket),
        ];
        let node = Arc::new(Node {
            name: settings.name.clone(),
            data_dir: settings.data_dir,
            tiers: settings.tiers,
            clock: Arc::new(SystemClock),
            feed: LogFeed::new(log.clone()),
            log,
            partitions: ownership.partitions(),
            ownership: Mutex::new(Some(ownership)),
            view,
            applying: Mutex::new(BTreeMap::new()),
            tasks: Mutex::new(Vec::new()),
            failed: tokio::sync::Notify::new(),
            publish_prefix: format!("{}.{started}", settings.name),
            publish_count: Default::default(),
            token: settings.token,
            peer_tls: settings.peer_tls,
            rebuilds: Mutex::new(Vec::new()),
            copy_waits: Mutex::new(BTreeMap::new()),
            renders: tokio::sync::Semaphore::new(CONCURRENT_RENDERS),
            render_cache: Arc::new(RenderCache::new(DEFAULT_RENDER_CACHE_BYTES)),
            applies: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
            ahead_of_log: Mutex::new(BTreeMap::new()),
            apply_pause: Hook::ApplyPauseMs
                .armed()
                .and_then(|ms| ms.parse().ok())
                .map(Duration::from_millis),
        });
        let feed = Arc::clone(&node.feed);
        let (viewer, checker) = (Arc::clone(&node), Arc::clone(&node));
        let tasks = vec![
            supervised("the log feed", move || Arc::clone(&feed).run()),
            supervised("the view follower", move || {
                Arc::clone(&viewer).follow_view()
            }),
            supervised("the log check", move || Arc::clone(&checker).check_log()),
            supervised("the streams' copies", move || {
                streams::keep_copies(js.clone(), kept_streams.clone())
            }),
        ];
        *node.tasks.lock().unwrap_or_else(|e| e.into_inner()) = tasks;
        Ok(node)
    }

    /// This node's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The cluster's partition count.
    pub(crate) fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The tiers every partition uses.
    pub(crate) fn tiers(&self) -> &TiersConfig {
        &self.tiers
    }

    /// The node's clock.
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// How this node reaches its peers' HTTP.
    pub(crate) fn peer_tls(&self) -> &super::peer::PeerTls {
        &self.peer_tls
    }

    /// The ingest log.
    pub(crate) fn log(&self) -> &IngestLog {
        &self.log
    }

    /// The latest view of nodes and leases.
    pub(crate) fn view(&self) -> Arc<ClusterView> {
        Arc::clone(&self.view.borrow())
    }

    /// A fresh message id for a publish of this process.
    pub(crate) fn next_message_id(&self) -> String {
        let n = self
            .publish_count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{}.{n}", self.publish_prefix)
    }

    /// The render cache of this node's partitions.
    pub(crate) fn render_cache(&self) -> Arc<RenderCache> {
        Arc::clone(&self.render_cache)
    }

    /// The engine of `partition` if this node applies it.
    pub(crate) fn local(&self, partition: u32) -> Option<Arc<Engine>> {
        self.lock_applying()
            .get(&partition)
            .map(|a| Arc::clone(&a.engine))
    }

    /// The partitions this node applies, with their applied sequences.
    pub(crate) fn applied(&self) -> BTreeMap<u32, u64> {
        self.lock_applying()
            .iter()
            .map(|(&p, a)| (p, a.engine.applied()))
            .collect()
    }

    /// What the engines of the partitions applied here hold and counted, added up (each
    /// partition counted by every node that applies it).
    pub(crate) fn stats(&self) -> EngineStats {
        let engines: Vec<_> = self
            .lock_applying()
            .values()
            .map(|a| Arc::clone(&a.engine))
            .collect();
        let mut stats = EngineStats::empty(&self.tiers, self.now());
        for engine in engines {
            stats.absorb(&engine.stats());
        }
        stats
    }

    fn lock_applying(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Applying>> {
        self.applying.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the set of applied partitions equal to what the view gives this node.
    async fn follow_view(self: Arc<Node>) {
        let mut view = self.view.clone();
        loop {
            let wanted = view.borrow_and_update().to_apply(&self.name);
            // A wait for a copy ends with the partition leaving this node: it starts afresh
            // if the partition comes back.
            self.lock_copy_waits().retain(|p, _| wanted.contains(p));
            let held: Vec<(u32, bool)> = self
                .lock_applying()
                .iter()
                .map(|(&p, a)| (p, a.task.is_finished()))
                .collect();
            for (partition, ended) in held {
                // A task ends by itself only after a failed apply: its engine is reopened.
                if ended || !wanted.contains(&partition) {
                    self.stop_applying(partition).await;
                }
            }
            for &partition in &wanted {
                if self.lock_applying().contains_key(&partition) {
                    continue;
                }
                if let Err(e) = self.start_applying(partition).await {
                    tracing::error!(partition, error = %e, "cannot apply partition; retrying");
                }
            }
            let retry = wanted.len() != self.lock_applying().len();
            if retry {
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            tokio::select! {
                changed = view.changed() => if changed.is_err() { return },
                () = self.failed.notified() => tokio::time::sleep(RETRY_PAUSE).await,
            }
        }
    }

    /// Opens `partition`'s engine (rolling back an interrupted group), after a rebuild from a
    /// replica's files when it needs one, and starts its task.
    async fn start_applying(self: &Arc<Node>, partition: u32) -> Result<()> {
        let dir = self.partition_dir(partition);
        self.rebuild_if_needed(partition, &dir).await?;
        let tiers = self.tiers.clone();
        let engine = tokio::task::spawn_blocking(move || {
            Engine::builder(dir)
                .tiers(tiers)
                .writer_threads(apply::PARTITION_WRITERS)
                .open()
        })
        .await
        .map_err(|e| Error::Poisoned(format!("opening a partition failed: {e}")))??;
        let engine = Arc::new(engine);
        self.report_applied(partition, engine.applied());
        let (stop, stopped) = watch::channel(false);
        let task =
            tokio::spawn(Arc::clone(self).apply_partition(partition, Arc::clone(&engine), stopped));
        tracing::info!(partition, applied = engine.applied(), "applying partition");
        self.lock_applying()
            .insert(partition, Applying { engine, task, stop });
        Ok(())
    }

    /// Stops `partition`'s task, waits for its group in flight, and closes its engine.
    async fn stop_applying(&self, partition: u32) {
        let Some(applying) = self.lock_applying().remove(&partition) else {
            return;
        };
        let _ = applying.stop.send(true);
        let _ = applying.task.await;
        self.feed.unsubscribe(partition);
        if let Some(ownership) = self
            .ownership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            ownership.forget_applied(partition);
        }
        tracing::info!(partition, "no longer applying partition");
        match Arc::try_unwrap(applying.engine) {
            Ok(engine) => {
                let closed = tokio::task::spawn_blocking(move || engine.close()).await;
                if let Ok(Err(e)) = closed {
                    tracing::error!(partition, error = %e, "closing partition");
                }
            }
            // Its directory stays locked until then: opening it again, or putting a
            // replica's copy in its place, is refused and tried again.
            Err(_) => tracing::info!(
                partition,
                "the partition's engine is still in use (a read, or a copy for a peer); it \
                 closes when that ends"
            ),
        }
    }

    /// A render's turn: renders beyond [`CONCURRENT_RENDERS`] wait here, on the async side,
    /// before they take a blocking thread.
    pub(crate) async fn render_slot(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.renders
            .acquire()
            .await
            .expect("the render semaphore is never closed")
    }

    /// Partitions this node applied past the log's last sequence, as last checked: partition
    /// → (applied, the log's last sequence).
    pub(crate) fn ahead_of_log(&self) -> BTreeMap<u32, (u64, u64)> {
        self.ahead_of_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every [`LOG_CHECK`], compares each applied partition's sequence with the log's last
    /// one. A partition applied past it means the log went back: a NATS leader was elected
    /// without writes it had answered, as nats-server 2.9 was seen to do with the KV bucket
    /// after repeated kill -9 of its servers. This node's copy then holds messages the log
    /// lost, and the log numbers new messages at sequences this node takes for applied, so
    /// it would skip them. Nothing here can tell which messages differ, so it is reported
    /// (an error log when first seen, `/api/v1/cluster`, `/metrics`) for an operator, who can
    /// wipe the node's copy of the partition to rebuild it from a replica or the log.
    async fn check_log(self: Arc<Node>) {
        let mut ticker = tokio::time::interval(LOG_CHECK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Ok((_, last)) = self.log.bounds().await else {
                continue;
            };
            let applied = self.applied();
            let wanted = self.view.borrow().to_apply(&self.name);
            let mut ahead = self.ahead_of_log.lock().unwrap_or_else(|e| e.into_inner());
            let before = std::mem::take(&mut *ahead);
            // A partition still this node's but not open at this moment (reopened after a
            // failed apply, as when the log is made again under it) keeps what it was found
            // at: it holds the same applied sequence when it opens again. Dropping it made
            // the report flicker to 0 while the node was still ahead.
            let reopening =
                (before.iter()).filter(|(p, _)| wanted.contains(p) && !applied.contains_key(p));
            ahead.extend(reopening.map(|(&p, &entry)| (p, entry)));
            for (partition, applied) in applied {
                if applied > last {
                    if !before.contains_key(&partition) {
                        tracing::error!(
                            partition,
                            applied,
                            log_last = last,
                            "this node applied the partition past the log's last sequence: the log \
                             went back (NATS lost answered writes); new messages at sequences up to \
                             {applied} will be taken for applied and skipped"
                        );
                    }
                    ahead.insert(partition, (applied, last));
                }
            }
        }
    }

    /// The partitions rebuilt from a peer's copy since this process started.
    pub(crate) fn rebuilds(&self) -> Vec<Rebuild> {
        self.rebuilds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces `partition`'s directory `dir` by a live replica's copy when this node has
    /// nothing of the partition and a replica has applied some, or when the log no longer
    /// holds the messages after what this node applied. Tries the replicas that applied
    /// furthest first. When none can be copied: with the log whole, the log alone is
    /// applied; with the log trimmed while a replica holds more, the partition is not
    /// applied yet (an error, so the caller tries again) for up to [`COPY_PATIENCE`], after
    /// which the log alone is applied and the gap reported as an error.
    ///
    /// # Errors
    /// [`Error::Cluster`] while waiting for a copy the trimmed log cannot replace.
    async fn rebuild_if_needed(self: &Arc<Node>, partition: u32, dir: &Path) -> Result<()> {
        let peek = dir.to_path_buf();
        let local = match tokio::task::spawn_blocking(move || Engine::applied_in(&peek)).await {
            Ok(Ok(applied)) => applied,
            // Opening it reports what is wrong, by name.
            _ => return Ok(()),
        };
        let first = self.log.bounds().await.ok().map(|(first, _)| first);
        let trimmed = first.is_some_and(|first| local + 1 < first);
        if local > 0 && !trimmed {
            return Ok(());
        }
        let view = self.view();
        let mut sources: Vec<(u64, String, String)> = view
            .partitions
            .get(partition as usize)
            .into_iter()
            .flat_map(|owners| owners.replicas.iter().flatten())
            .filter(|lease| lease.alive && lease.node != self.name)
            .filter_map(|lease| view.node(&lease.node))
            .filter(|node| node.alive)
            .map(|node| {
                let applied = node.applied.get(&partition).copied().unwrap_or(0);
                (applied, node.name.clone(), node.http_addr.clone())
            })
            .filter(|(applied, _, _)| *applied > local)
            .collect();
        sources.sort_by_key(|source| std::cmp::Reverse(source.0));
        let had_sources = !sources.is_empty();
        // Some node, live or not, says it applied more: a trimmed log cannot replace that.
        let others_hold_more = view.nodes.iter().any(|node| {
            node.name != self.name && node.applied.get(&partition).is_some_and(|&a| a > local)
        });
        for (_, from, addr) in sources {
            match self.rebuild_from(partition, dir, &addr).await {
                Ok(info) => {
                    tracing::info!(
                        partition,
                        from = %from,
                        applied_before = local,
                        applied = info.applied,
                        files = info.files,
                        bytes = info.bytes,
                        "rebuilt the partition from a replica's files"
                    );
                    self.rebuilds
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(Rebuild {
                            partition,
                            from,
                            applied_before: local,
                            applied: info.applied,
                            files: info.files,
                            bytes: info.bytes,
                        });
                    self.lock_copy_waits().remove(&partition);
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(partition, from = %from, error = %e, "copying a replica's files failed")
                }
            }
        }
        // Says why there was no copy, so a node that reads the whole log instead can be told
        // from one that had nothing to copy.
        // Every source applied more, so `had_sources` implies `others_hold_more`.
        match (trimmed, others_hold_more) {
            (false, _) if had_sources => tracing::warn!(
                partition,
                applied = local,
                "no replica's files could be copied: reading the partition from the log"
            ),
            (false, _) => tracing::info!(
                partition,
                applied = local,
                "no live replica applied more of this partition: reading it from the log"
            ),
            (true, true) => {
                let since = *self
                    .lock_copy_waits()
                    .entry(partition)
                    .or_insert_with(Instant::now);
                if since.elapsed() < COPY_PATIENCE {
                    return Err(Error::Cluster(format!(
                        "partition {partition}: the log starts at sequence {}, after this \
                         node's applied {local}, and no replica's files could be copied yet; \
                         not applying it until one can be",
                        first.unwrap_or(0)
                    )));
                }
                self.lock_copy_waits().remove(&partition);
                tracing::error!(
                    partition,
                    applied = local,
                    log_starts_at = ?first,
                    waited = ?COPY_PATIENCE,
                    "the log no longer holds every message after this node's applied sequence, \
                     and no live replica could be copied: this node's copy of the partition \
                     misses what was in between"
                );
            }
            // A partition that never had a message, or whose every replica is gone.
            (true, false) => tracing::warn!(
                partition,
                applied = local,
                log_starts_at = ?first,
                "the log starts after this node's applied sequence and no live replica applied \
                 more: if the partition had messages before the log's start, this node's copy \
                 misses them"
            ),
        }
        Ok(())
    }

    fn lock_copy_waits(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Instant>> {
        self.copy_waits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Downloads `partition`'s files from the node at `addr` and puts them in place of
    /// `dir` ([`snapshot::place`]); refused before the download while an engine of this
    /// process still has `dir` open.
    async fn rebuild_from(&self, partition: u32, dir: &Path, addr: &str) -> Result<SnapshotInfo> {
        let held = dir.to_path_buf();
        tokio::task::spawn_blocking(move || Engine::lock_if_present(&held).map(drop))
            .await
            .map_err(|e| {
                Error::Poisoned(format!("checking a partition's directory failed: {e}"))
            })??;
        let download = dir.with_extension(snapshot::DOWNLOAD);
        let path = format!("{}/{partition}", peer::SNAPSHOT_PATH);
        let fetched = peer::download(
            addr,
            &path,
            (self.token.as_deref(), &self.peer_tls),
            SNAPSHOT_TIMEOUT,
            &download,
        )
        .await;
        let fetched = match fetched {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(refusal)) => Err(Error::Cluster(format!(
                "the node at {addr} refused to copy partition {partition}: {} {}",
                refusal.status, refusal.message
            ))),
            Err(e) => Err(e),
        };
        let dir = dir.to_path_buf();
        let placed = tokio::task::spawn_blocking(move || {
            let placed = fetched.and_then(|_| snapshot::place(&download, partition, &dir));
            let _ = std::fs::remove_file(&download);
            placed
        })
        .await
        .map_err(|e| Error::Poisoned(format!("placing a partition's copy failed: {e}")))?;
        placed
    }

    /// A copy of `partition`'s files for a peer that rebuilds it ([`super::snapshot`]),
    /// taken between two groups into a file that is already unlinked (nothing is left
    /// behind, whatever happens to the request), positioned at its start.
    ///
    /// # Errors
    /// [`Error::Cluster`] when this node does not apply the partition; [`Error::Io`].
    pub(crate) async fn snapshot(&self, partition: u32) -> Result<(std::fs::File, SnapshotInfo)> {
        let engine = self.local(partition).ok_or_else(|| {
            Error::Cluster(format!(
                "node {} does not apply partition {partition}",
                self.name
            ))
        })?;
        let dir = self.data_dir.join("snapshots");
        tokio::task::spawn_blocking(move || {
            use std::io::{Seek, Write};
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            let path = dir.join(format!("{partition:03}-{nanos}.snapshot"));
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| Error::io(&path, e))?;
            std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, &mut file);
            let info = engine.with_files_still(|still| {
                super::snapshot::write(still, partition, &mut out, &path)
            })??;
            out.flush().map_err(|e| Error::io(&path, e))?;
            drop(out);
            file.rewind().map_err(|e| Error::io(&path, e))?;
            Ok((file, info))
        })
        .await
        .map_err(|e| Error::Poisoned(format!("copying a partition failed: {e}")))?
    }

    fn partition_dir(&self, partition: u32) -> PathBuf {
        self.data_dir
            .join("partitions")
            .join(format!("{partition:03}"))
    }

    fn report_applied(&self, partition: u32, seq: u64) {
        if let Some(ownership) = self
            .ownership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            // Only a partition past the count is refused, and the view gives no such one.
            let _ = ownership.report_applied(partition, seq);
        }
    }

    /// Applies the messages the node's feed gives `partition` until told to stop.
    async fn apply_partition(
        self: Arc<Node>,
        partition: u32,
        engine: Arc<Engine>,
        mut stopped: watch::Receiver<bool>,
    ) {
        let mut feed = self.feed.subscribe(partition, engine.applied());
        loop {
            if *stopped.borrow() {
                return;
            }
            let waited = tokio::time::timeout(IDLE_CHECKPOINT, feed.recv());
            let Some(first) = unless_stopped(&mut stopped, waited).await else {
                return;
            };
            let Ok(first) = first else {
                // Idle: make what was applied durable now rather than at the next group.
                let idle = Arc::clone(&engine);
                let checkpoint = tokio::task::spawn_blocking(move || idle.checkpoint())
                    .await
                    .map_err(|e| Error::Poisoned(format!("checkpoint task failed: {e}")))
                    .and_then(|r| r);
                if let Err(e) = checkpoint {
                    tracing::error!(partition, error = %e, "a checkpoint failed; reopening the partition");
                    self.failed.notify_one();
                    return;
                }
                continue;
            };
            let Some(first) = first else {
                // The feed dropped this queue (another took its place): ask again.
                feed = self.feed.subscribe(partition, engine.applied());
                continue;
            };
            let first = log_entry(partition, first);
            let mut samples = first.1.samples();
            let mut entries = vec![first];
            let span_end = tokio::time::Instant::now() + GROUP_SPAN;
            while entries.len() < GROUP_MESSAGES && samples < GROUP_SAMPLES {
                let wait_end = (tokio::time::Instant::now() + GROUP_WAIT).min(span_end);
                let waited = tokio::time::timeout_at(wait_end, feed.recv());
                match unless_stopped(&mut stopped, waited).await {
                    None => return,
                    Some(Ok(Some(message))) => {
                        let entry = log_entry(partition, message);
                        samples += entry.1.samples();
                        entries.push(entry);
                    }
                    Some(_) => break,
                }
            }
            if let Some(pause) = self.apply_pause {
                if unless_stopped(&mut stopped, tokio::time::sleep(pause))
                    .await
                    .is_none()
                {
                    return;
                }
            }
            // A group past one per core gains no CPU by starting, and each group applying
            // holds its memory (`GROUP_SAMPLES`): with every partition applying at once, a
            // burst had a node back ten groups at a time with fresh pages. So it waits its
            // turn here, on the async side; a stop ends the wait (the group's messages are
            // read again by whoever applies the partition next).
            let Some(turn) = unless_stopped(&mut stopped, self.applies.acquire()).await else {
                return;
            };
            let _turn = turn.expect("the apply semaphore is never closed");
            let applying = Arc::clone(&engine);
            let applied =
                tokio::task::spawn_blocking(move || apply::apply_entries(&applying, entries))
                    .await
                    .map_err(|e| Error::Poisoned(format!("apply task failed: {e}")))
                    .and_then(|r| r);
            match applied {
                Ok(()) => self.report_applied(partition, engine.applied()),
                Err(e) => {
                    // A group that failed part way (a full disk, a panic) is rolled back
                    // only by opening the engine again: end here and let the manager
                    // close and reopen it, then read again from the applied sequence.
                    tracing::error!(partition, error = %e, "applying failed; reopening the partition");
                    self.failed.notify_one();
                    return;
                }
            }
        }
    }

    /// Stops applying, closes every partition's engine, and leaves the ownership table so
    /// other nodes take this node's partitions at once.
    ///
    /// # Errors
    /// [`Error::Cluster`] when the table could not be updated (the leases then expire).
    pub(crate) async fn leave(&self) -> Result<()> {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
        let held: Vec<u32> = self.lock_applying().keys().copied().collect();
        for partition in held {
            self.stop_applying(partition).await;
        }
        let ownership = self
            .ownership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match ownership {
            Some(ownership) => ownership.leave().await,
            None => Ok(()),
        }
    }
}

/// What `work` gives, or `None` when `stopped` changes first (a partition's task is told to
/// stop, or whoever could tell it is gone): every wait of the task ends at a stop.
async fn unless_stopped<T>(
    stopped: &mut watch::Receiver<bool>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        _ = stopped.changed() => None,
        done = work => Some(done),
    }
}

/// `partition`'s entry in a message of the log, with its sequence. A message that cannot be
/// read is skipped by every owner alike (the log is the same for all): it stands as an empty
/// batch.
fn log_entry(partition: u32, (seq, payload): log_feed::FedMessage) -> (u64, LogEntry) {
    match envelope::entry(&payload, partition) {
        Ok(entry) => (seq, entry),
        Err(e) => {
            tracing::error!(partition, seq, error = %e, "skipping an undecodable message");
            (seq, LogEntry::Batch(Default::default()))
        }
    }
}

/// Runs the node's long-lived task `name`, made by `make`, until it ends or is aborted; one
/// that panics is logged and made again after [`RESTART_PAUSE`]. Without it, a panic in the
/// log feed would leave every partition unapplied, and one in the view follower the node
/// deaf to the ownership table, with nothing said. Aborting the handle drops the task too:
/// it runs inside the supervising task, not beside it.
fn supervised<F, Fut>(name: &'static str, make: F) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    use futures_util::FutureExt;
    tokio::spawn(async move {
        while let Err(panic) = std::panic::AssertUnwindSafe(make()).catch_unwind().await {
            let why = (panic.downcast_ref::<&str>().copied())
                .or(panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            tracing::error!(
                task = name,
                panic = why,
                "a node task panicked; starting it again"
            );
            tokio::time::sleep(RESTART_PAUSE).await;
        }
    })
}

#[cfg(test)]
mod tests;
