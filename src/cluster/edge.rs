//! The edge of the cluster: the cluster node's [`WriteTarget`], where a node that took a
//! write splits its samples by partition and publishes them, instead of writing them into
//! an engine. The [`crate::ingest::sink::Sink`] over it is the one every protocol writes
//! through, with the same time bounds, name cache and report as a single node's.
//!
//! A sample is refused before it is published for what can be known without the series'
//! history, with the reasons a single node gives: `not_finite`, `too_old`,
//! `too_far_in_future` (by the sink), `invalid_series` (here). What depends on a series'
//! stored state (`kind_mismatch`, `counter_out_of_order`) is found when an owner applies the
//! batch, and counted in that owner's `/metrics`. A flush returns once JetStream has acknowledged every message of the
//! batch, so a write answered 2xx is in the replicated log (a Graphite socket, which answers
//! no one, hands its samples to the node's publisher and reads on); a publish that fails is retried
//! with the same message id, which JetStream stores once.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use super::node::Node;
use super::{envelope, partition_of, wire};
use crate::config::TiersConfig;
use crate::counter::SeriesKind;
use crate::engine::{BatchObserved, KeyIndex, SampleBatch};
use crate::error::Error;
use crate::error::RejectReason;
use crate::error::Result;
use crate::histogram::Observed;
use crate::ingest::name_cache::NameCache;
use crate::ingest::report::{self, IngestReport};
use crate::ingest::sink::{Parsed, Queued, Refused, SinkShared, WriteTarget};
use crate::registry::SeriesKey;
use crate::time::Timestamp;

/// Samples per published message at most. A message is also kept under the server's
/// payload limit (1 MiB by default): one that encodes larger, with long keys, is halved.
pub(crate) const MESSAGE_SAMPLES: usize = 4096;

/// Samples one sink queues before its caller is told to flush: sixteen full messages, so
/// samples split over the default 16 partitions still make messages of thousands of samples.
/// About 1.5 MB per connection, less than one HTTP body may hold.
const EDGE_BATCH: usize = 16 * MESSAGE_SAMPLES;

/// Room left under the server's payload limit for the message's headers (its id).
const HEADER_ROOM: usize = 4096;

/// Publish attempts per message before the flush fails.
const PUBLISH_ATTEMPTS: usize = 5;

/// Pause between publish attempts (JetStream elects a new stream leader in 1-2 s).
const PUBLISH_RETRY: Duration = Duration::from_millis(500);

/// Samples that may wait for the node's publisher, of all its sinks together, before a sink
/// handing more waits: four sinks' worth, so the connections and requests of one node share
/// messages (a round's samples of one partition go out as one message, up to
/// [`MESSAGE_SAMPLES`]), while what waits stays bounded, about 6 MB.
const NODE_WAITING: usize = 4 * EDGE_BATCH;

/// How long a round about to start waits for sinks still gathering samples (a request
/// being parsed, a connection between reads) to hand them over, so they share its
/// messages: a message costs the same publish, acknowledgement, log copies and applies
/// whatever its size. A write that is alone on the node is not held.
const LINGER: Duration = Duration::from_millis(2);

/// Encoded bytes up to which a publishing round goes out in messages shared by all its
/// partitions, whatever nodes apply them; a larger round goes out in a message per set of
/// partitions that the same nodes apply. A message costs a publish, an acknowledgement,
/// three log copies and a delivery to each node that reads it whatever its size, while a
/// node skips the sections of partitions it does not apply at little cost (in
/// `benches/cluster.sh`, a third of the messages took a Graphite sample's CPU from
/// 0.94-1.10 to 0.85-1.04 µs; an Influx sample's did not move). Past this size, the bytes
/// that a large cluster's nodes would read and skip (a node applies 2 of every N
/// partitions) would outweigh the messages saved.
const SHARED_ROUND_BYTES: usize = 256 * 1024;

/// One connection's or request's samples on their way to the log.
pub(crate) struct EdgeTarget {
    /// The server's totals, where the samples a publish failed are counted.
    totals: Arc<dyn report::Tally>,
    /// Per partition, the batch being built and its key index.
    batches: Batches,
    /// Samples queued in all batches.
    queued: usize,
    /// Canonical keys already checked, with their partition and place in the batch being
    /// built: a key is parsed once per connection, and looked up once per sample. Within
    /// the name caches' server-wide budget.
    known: NameCache<KnownKey>,
    /// Counts the batches handed off: a [`KnownKey`]'s place is good for the batch of its
    /// generation only (64 bits: never wraps back to a stale place).
    generation: u64,
    /// The node's publisher, shared by all its sinks.
    publisher: Arc<Publisher>,
    /// What became of the samples this sink handed to the publisher.
    tally: Arc<Tally>,
    /// The publisher's round that took this sink's last hand-off.
    last_round: Option<u64>,
}

/// Per partition, a batch and its key index.
type Batches = rustc_hash::FxHashMap<u32, (SampleBatch, KeyIndex)>;

/// Per partition, per message that carried its samples, in order: how many and the outcome
/// (why the message failed, if it did).
type Outcomes = Vec<(u32, Vec<(u64, std::result::Result<(), String>)>)>;

/// What a sink knows of a canonical key it met.
#[derive(Clone, Copy)]
struct KnownKey {
    partition: u32,
    /// Its place in the partition's batch of [`KnownKey::generation`].
    series: u32,
    generation: u64,
}

/// The node's publisher: every sink hands its samples here, and one task publishes them in
/// rounds. A round takes everything waiting, so what the sinks of a node hand over while
/// the previous round waits on JetStream goes out together, a batch per partition (more
/// past [`MESSAGE_SAMPLES`]): the node's connections and requests share messages, and every
/// message costs a publish, an acknowledgement, three log copies and an apply on each owner
/// whatever its size. A sink's samples reach the log in the order it handed them, retries
/// included: a round starts when the one before ended, and a partition's messages of a
/// round are published one after another.
pub(crate) struct Publisher {
    node: Arc<Node>,
    /// The server's totals, where each round's time is recorded.
    totals: Arc<dyn report::Tally>,
    state: std::sync::Mutex<PublisherState>,
    /// Rung when a round took what waited, or ended.
    changed: tokio::sync::Notify,
    /// Key texts this node's sinks met that are their own canonical form, with their
    /// partitions: a sink's own cache lives as long as its connection or request, so without
    /// this every HTTP body parsed each of its keys again (a tenth of an Influx write's edge
    /// work). A name cache like the sinks', within the same server-wide budget.
    canonical: std::sync::Mutex<NameCache<u32>>,
}

#[derive(Default)]
struct PublisherState {
    waiting: Batches,
    /// Per partition, whose samples `waiting` holds, in their order: the sink's tally and
    /// how many samples.
    shares: HashMap<u32, Vec<(Arc<Tally>, u64)>>,
    /// Samples in `waiting`.
    queued: usize,
    /// True while the publishing task runs.
    publishing: bool,
    /// Sinks that queued samples they have not handed over yet: a round about to start
    /// waits for them a little ([`LINGER`]).
    filling: usize,
    /// The round that will take what waits now.
    next_round: u64,
    /// Rounds ended: every round below this one.
    rounds_done: u64,
}

impl PublisherState {
    /// One sink fewer gathering samples.
    fn stop_filling(&mut self) {
        debug_assert!(self.filling > 0, "a sink stopped filling twice");
        self.filling = self.filling.saturating_sub(1);
    }
}

/// What became of one sink's handed samples since the sink last looked.
#[derive(Default)]
struct Tally {
    state: std::sync::Mutex<TallyState>,
}

#[derive(Default)]
struct TallyState {
    accepted: u64,
    failed: u64,
    /// Why the last failed message failed.
    error: Option<String>,
}

impl Tally {
    fn lock(&self) -> std::sync::MutexGuard<'_, TallyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Publisher {
    /// The publisher of `node`'s sinks, timing its rounds into `shared`'s totals, its memo
    /// of key texts within `shared`'s name cache budget.
    pub(crate) fn new(node: Arc<Node>, shared: &SinkShared) -> Arc<Publisher> {
        let canonical = shared.name_cache();
        Arc::new(Publisher {
            node,
            totals: Arc::clone(&shared.tally),
            state: std::sync::Mutex::default(),
            changed: tokio::sync::Notify::new(),
            canonical: std::sync::Mutex::new(canonical),
        })
    }

    fn canonical(&self) -> std::sync::MutexGuard<'_, NameCache<u32>> {
        self.canonical.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The partition of `text` when a sink of this node met it as a canonical key text.
    fn canonical_partition(&self, text: &str) -> Option<u32> {
        self.canonical().get(text)
    }

    /// Notes that `text` is a canonical key text, of `partition`.
    fn remember_canonical(&self, text: &str, partition: u32) {
        self.canonical().insert(text, partition);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PublisherState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `batches` (`queued` samples of the sink counting into `tally`) to what waits,
    /// after waiting while [`NODE_WAITING`] samples already wait, and starts the publishing
    /// task when idle. Returns the round that will publish them.
    async fn hand_off(
        self: &Arc<Self>,
        batches: Batches,
        queued: usize,
        tally: &Arc<Tally>,
    ) -> u64 {
        // No longer gathering, even while it waits for room below (and if it is dropped
        // there): a round must not linger for it.
        self.lock().stop_filling();
        loop {
            let changed = self.changed.notified();
            if self.lock().queued < NODE_WAITING {
                break;
            }
            changed.await;
        }
        let mut state = self.lock();
        for (partition, (batch, index)) in batches {
            state
                .shares
                .entry(partition)
                .or_default()
                .push((Arc::clone(tally), batch.len() as u64));
            match state.waiting.entry(partition) {
                Entry::Vacant(vacant) => {
                    vacant.insert((batch, index));
                }
                Entry::Occupied(mut occupied) => {
                    let (waiting, index) = occupied.get_mut();
                    waiting.append(index, batch);
                }
            }
        }
        state.queued += queued;
        if !state.publishing {
            state.publishing = true;
            tokio::spawn(Arc::clone(self).publish_rounds());
        }
        let round = state.next_round;
        drop(state);
        self.changed.notify_waiters();
        round
    }

    /// Waits up to [`LINGER`] while sinks are still gathering samples and what waits
    /// fills less than half of [`NODE_WAITING`].
    async fn linger(&self) {
        let until = tokio::time::Instant::now() + LINGER;
        loop {
            let changed = self.changed.notified();
            {
                let state = self.lock();
                if state.filling == 0 || state.queued >= NODE_WAITING / 2 {
                    return;
                }
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                return;
            }
        }
    }

    /// Notes that a sink began queueing samples it will hand over.
    fn began_filling(&self) {
        self.lock().filling += 1;
    }

    /// Notes that a sink that was queueing samples left without handing them over.
    fn stopped_filling(&self) {
        self.lock().stop_filling();
        self.changed.notify_waiters();
    }

    /// Waits until `round` has ended.
    async fn wait_for(&self, round: u64) {
        loop {
            let changed = self.changed.notified();
            if self.lock().rounds_done > round {
                return;
            }
            changed.await;
        }
    }

    /// The publishing task: round after round, takes everything waiting and publishes it,
    /// a batch per partition (more when one has over [`MESSAGE_SAMPLES`]) in messages shared
    /// by its partitions ([`publish_batches`]), until nothing waits; then
    /// counts each message's samples to the sinks they came from.
    async fn publish_rounds(self: Arc<Self>) {
        loop {
            self.linger().await;
            let (batches, shares, queued) = {
                let mut state = self.lock();
                if state.queued == 0 {
                    state.publishing = false;
                    drop(state);
                    self.changed.notify_waiters();
                    return;
                }
                state.next_round += 1;
                (
                    std::mem::take(&mut state.waiting),
                    std::mem::take(&mut state.shares),
                    std::mem::take(&mut state.queued),
                )
            };
            self.changed.notify_waiters();
            let started = Instant::now();
            let outcomes = publish_batches(&self.node, batches).await;
            self.totals.observe_batch(started.elapsed(), queued);
            count_to_sinks(outcomes, shares);
            self.lock().rounds_done += 1;
            self.changed.notify_waiters();
        }
    }
}

/// Counts each partition's message outcomes (samples, in order) to the sinks whose shares
/// (samples, in the same order) they carried.
fn count_to_sinks(outcomes: Outcomes, mut shares: HashMap<u32, Vec<(Arc<Tally>, u64)>>) {
    for (partition, messages) in outcomes {
        let mut shares = shares.remove(&partition).unwrap_or_default().into_iter();
        let mut share = shares.next();
        for (mut samples, outcome) in messages {
            while samples > 0 {
                let Some((tally, left)) = share.as_mut() else {
                    break;
                };
                let counted = samples.min(*left);
                let mut tally = tally.lock();
                match &outcome {
                    Ok(()) => tally.accepted += counted,
                    Err(e) => {
                        tally.failed += counted;
                        tally.error = Some(e.clone());
                    }
                }
                drop(tally);
                samples -= counted;
                *left -= counted;
                if *left == 0 {
                    share = shares.next();
                }
            }
        }
    }
}

impl EdgeTarget {
    /// Where samples of `series` (canonical text or any spelling the key grammar takes)
    /// written with `kind` go: its partition and its place in that partition's batch,
    /// added when the batch has none.
    ///
    /// # Errors
    /// `invalid_series`, saying why, for a text that is no series.
    fn place(
        &mut self,
        series: &str,
        kind: Option<SeriesKind>,
    ) -> std::result::Result<(u32, u32), Refused> {
        let node = &self.publisher.node;
        let generation = self.generation;
        if let Some(known) = self.known.get_mut(series) {
            let (batch, index) = self.batches.entry(known.partition).or_default();
            let current = known.generation == generation
                && batch.series.get(known.series as usize).map(|s| s.kind) == Some(kind);
            if !current {
                known.series = batch.series_of(index, series, kind);
                known.generation = generation;
            }
            return Ok((known.partition, known.series));
        }
        let parsed;
        let (text, partition) = match self.publisher.canonical_partition(series) {
            Some(partition) => (series, partition),
            None => {
                parsed = SeriesKey::parse(series).map_err(|e| Refused {
                    reason: RejectReason::InvalidSeries,
                    message: Some(e.to_string()),
                })?;
                let partition = partition_of(parsed.as_str(), node.partitions());
                if parsed.as_str() == series {
                    self.publisher.remember_canonical(series, partition);
                }
                (parsed.as_str(), partition)
            }
        };
        let (batch, index) = self.batches.entry(partition).or_default();
        let place = batch.series_of(index, text, kind);
        // Only a text that is its own canonical form stands for its key.
        if text == series {
            let known = KnownKey {
                partition,
                series: place,
                generation,
            };
            self.known.insert(series, known);
        }
        Ok((partition, place))
    }

    /// Counts one more queued sample; true when the batch is full and should be flushed.
    fn queued_one(&mut self) -> bool {
        if self.queued == 0 {
            self.publisher.began_filling();
        }
        self.queued += 1;
        self.queued >= EDGE_BATCH
    }

    /// A target of `publisher`'s node, counting into `shared`'s totals, its key cache within
    /// `shared`'s name cache budget.
    pub(crate) fn new(publisher: Arc<Publisher>, shared: &SinkShared) -> EdgeTarget {
        EdgeTarget {
            known: shared.name_cache(),
            totals: Arc::clone(&shared.tally),
            batches: Batches::default(),
            generation: 0,
            queued: 0,
            publisher,
            tally: Arc::default(),
            last_round: None,
        }
    }

    /// Hands every queued sample to the node's publisher, after waiting while
    /// [`NODE_WAITING`] samples already wait for it; returns without waiting for them to be
    /// published. Counts what was published meanwhile into `report`.
    ///
    /// # Errors
    /// [`Error::Cluster`] when a message published since the last call failed after
    /// retries (its samples are counted as `write_failed`; the others landed).
    async fn hand_off(&mut self, report: &mut IngestReport) -> Result<()> {
        if self.queued > 0 {
            self.generation += 1;
            let batches = std::mem::take(&mut self.batches);
            let queued = std::mem::take(&mut self.queued);
            let round = self.publisher.hand_off(batches, queued, &self.tally).await;
            self.last_round = Some(round);
        }
        self.count_published(report)
    }

    /// Counts the samples published since the last look into `report`.
    ///
    /// # Errors
    /// As [`EdgeTarget::hand_off`].
    fn count_published(&mut self, report: &mut IngestReport) -> Result<()> {
        let tally = std::mem::take(&mut *self.tally.lock());
        report.accepted += tally.accepted;
        if tally.failed > 0 {
            report.refuse_many(&*self.totals, "write_failed", tally.failed);
        }
        tally.error.map_or(Ok(()), |e| Err(Error::Cluster(e)))
    }

    /// Hands every queued sample off and waits until JetStream acknowledged them all.
    ///
    /// # Errors
    /// As [`EdgeTarget::hand_off`].
    async fn flush_queued(&mut self, report: &mut IngestReport) -> Result<()> {
        let handed = self.hand_off(report).await;
        if let Some(round) = self.last_round {
            self.publisher.wait_for(round).await;
        }
        handed.and(self.count_published(report))
    }
}

/// Publishes `batches`. A round that encodes to at most [`SHARED_ROUND_BYTES`] goes out in
/// messages shared by all its partitions; a larger one in messages shared by the
/// partitions that the same nodes apply, as this node's view of the leases has it. A
/// message holds a part of each partition of its group ([`pack`]). A group's messages are
/// published one after another, the groups at once. A stale view costs messages, never
/// correctness: each partition is read by its own token.
async fn publish_batches(node: &Arc<Node>, batches: Batches) -> Outcomes {
    let max_bytes = node.log().max_payload().saturating_sub(HEADER_ROOM);
    let mut outcomes = Outcomes::new();
    let mut encoded: Vec<PartitionParts> = Vec::with_capacity(batches.len());
    for (partition, (batch, _)) in batches {
        match encode_messages(&batch, max_bytes) {
            Ok(parts) => encoded.push((partition, parts)),
            Err(e) => {
                tracing::error!(partition, error = %e, "encoding a batch failed");
                let samples = batch.len() as u64;
                outcomes.push((partition, vec![(samples, Err(failure(&e)))]));
            }
        }
    }
    let view = node.view();
    let groups = group_round(encoded, |partition| view.appliers(partition));
    let publishes = groups.into_iter().map(|group| {
        let node = Arc::clone(node);
        async move {
            let mut outcomes: BTreeMap<u32, Vec<_>> = BTreeMap::new();
            for message in pack(group, max_bytes) {
                let id = node.next_message_id();
                let partitions: Vec<u32> = message.sections.iter().map(|&(p, _)| p).collect();
                let outcome = publish(&node, &partitions, &id, message.payload)
                    .await
                    .map_err(|e| failure(&e));
                for (partition, samples) in message.sections {
                    let carried = outcomes.entry(partition).or_default();
                    carried.push((samples, outcome.clone()));
                }
            }
            outcomes
        }
    });
    for group in futures_util::future::join_all(publishes).await {
        outcomes.extend(group);
    }
    outcomes
}

/// The groups whose parts share messages: the whole round when it encodes to at most
/// [`SHARED_ROUND_BYTES`], else a group per set of nodes that apply its partitions
/// (`appliers`).
fn group_round<'a>(
    encoded: Vec<PartitionParts>,
    appliers: impl Fn(u32) -> BTreeSet<&'a str>,
) -> Vec<Vec<PartitionParts>> {
    let round_bytes: usize = encoded
        .iter()
        .flat_map(|(_, parts)| parts)
        .map(|(_, part)| part.len())
        .sum();
    if round_bytes <= SHARED_ROUND_BYTES {
        return vec![encoded];
    }
    let mut groups: BTreeMap<BTreeSet<&str>, Vec<PartitionParts>> = BTreeMap::new();
    for (partition, parts) in encoded {
        groups
            .entry(appliers(partition))
            .or_default()
            .push((partition, parts));
    }
    groups.into_values().collect()
}

/// Why a publish failed, as a sink reports it.
fn failure(e: &Error) -> String {
    match e {
        Error::Cluster(message) => message.clone(),
        other => other.to_string(),
    }
}

/// A partition's round of samples as encoded messages, in order, with their sample counts.
type PartitionParts = (u32, Vec<(u64, bytes::Bytes)>);

/// One message of a round: the partitions it holds with the samples of each, in partition
/// order, and its payload.
struct Packed {
    sections: Vec<(u32, u64)>,
    payload: bytes::Bytes,
}

/// The messages that carry `group`'s parts: each holds at most one part of a partition, and
/// a partition's parts go in the order they came, in messages of at most `max_bytes` bytes.
/// A message of one part is that part alone; one of several, an envelope of them.
fn pack(mut group: Vec<PartitionParts>, max_bytes: usize) -> Vec<Packed> {
    group.sort_unstable_by_key(|&(partition, _)| partition);
    let rounds = group
        .iter()
        .map(|(_, parts)| parts.len())
        .max()
        .unwrap_or(0);
    let mut left: Vec<_> = group
        .into_iter()
        .map(|(partition, parts)| (partition, parts.into_iter()))
        .collect();
    let mut messages = Vec::new();
    let mut open: Vec<(u32, u64, bytes::Bytes)> = Vec::new();
    for _ in 0..rounds {
        for (partition, parts) in &mut left {
            let Some((samples, part)) = parts.next() else {
                continue;
            };
            let open_bytes: usize = open.iter().map(|(.., held)| held.len()).sum();
            let fits = open_bytes + part.len() + envelope::overhead(open.len() + 1) <= max_bytes;
            let holds = open.iter().any(|(held, ..)| held == partition);
            if !open.is_empty() && (holds || !fits) {
                messages.push(seal(std::mem::take(&mut open)));
            }
            open.push((*partition, samples, part));
        }
    }
    if !open.is_empty() {
        messages.push(seal(open));
    }
    messages
}

/// The message of `parts` (at most one per partition).
fn seal(mut parts: Vec<(u32, u64, bytes::Bytes)>) -> Packed {
    parts.sort_unstable_by_key(|&(partition, ..)| partition);
    let sections = parts.iter().map(|&(p, samples, _)| (p, samples)).collect();
    let payload = match parts.as_slice() {
        [(_, _, part)] => part.clone(),
        _ => envelope::encode(
            &parts
                .into_iter()
                .map(|(p, _, part)| (p, part))
                .collect::<Vec<_>>(),
        ),
    };
    Packed { sections, payload }
}

impl Drop for EdgeTarget {
    /// A sink dropped with samples queued (a request that failed part way) no longer keeps
    /// a round waiting for them.
    fn drop(&mut self) {
        if self.queued > 0 {
            self.publisher.stopped_filling();
        }
    }
}

impl WriteTarget for EdgeTarget {
    /// The node's clock, for samples that say "now".
    fn now(&self) -> Timestamp {
        self.publisher.node.now()
    }

    /// The cluster's tiers.
    fn tiers(&self) -> &TiersConfig {
        self.publisher.node.tiers()
    }

    /// Queues one sample of `at.series` (canonical text or any spelling the key grammar
    /// takes), declaring `kind` when the write names one.
    fn push(&mut self, at: Parsed<'_>, kind: Option<SeriesKind>, value: f64) -> Queued {
        let (partition, place) = self.place(at.series, kind)?;
        let (batch, _) = self.batches.entry(partition).or_default();
        batch.push_sample(place, at.ts, value);
        Ok(self.queued_one())
    }

    /// Queues bucketed observations of `at.series`, a distribution; the partition stores
    /// them as a node's native histograms.
    fn push_histogram(&mut self, at: Parsed<'_>, observed: Observed) -> Queued {
        let (partition, place) = self.place(at.series, Some(SeriesKind::Distribution))?;
        let (batch, _) = self.batches.entry(partition).or_default();
        batch.observed.push(BatchObserved {
            series: place,
            ts: at.ts,
            observed,
        });
        Ok(self.queued_one())
    }

    /// Publishes every queued sample; ends when JetStream acknowledged them all. When a
    /// message could not be published after retries ([`Error::Cluster`]), its samples are
    /// counted as `write_failed` (the others of the flush landed).
    fn flush<'a>(&'a mut self, report: &'a mut IngestReport) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.flush_queued(report))
    }

    /// See [`EdgeTarget::hand_off`].
    fn flush_behind<'a>(&'a mut self, report: &'a mut IngestReport) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.hand_off(report))
    }
}

/// Publishes one message holding `partitions`, retrying with the same id until JetStream
/// acknowledges it.
pub(super) async fn publish(
    node: &Node,
    partitions: &[u32],
    id: &str,
    payload: bytes::Bytes,
) -> Result<()> {
    let mut last = None;
    for attempt in 0..PUBLISH_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(PUBLISH_RETRY).await;
        }
        match node.log().publish(partitions, id, payload.clone()).await {
            Ok(_) => return Ok(()),
            Err(e) => {
                tracing::warn!(?partitions, attempt, error = %e, "publish failed; retrying");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| Error::Cluster("publish failed".into())))
}

/// `batch` encoded as messages of at most [`MESSAGE_SAMPLES`] samples and `max_bytes` bytes
/// each, samples in order, with their sample counts: a part that encodes larger is halved
/// until it fits.
///
/// # Errors
/// [`Error::Cluster`] when one sample alone encodes larger than `max_bytes`, or the format
/// refuses a part.
fn encode_messages(batch: &SampleBatch, max_bytes: usize) -> Result<Vec<(u64, bytes::Bytes)>> {
    let total = batch.len();
    // A stack of sample ranges, the first on top.
    let mut todo: Vec<std::ops::Range<usize>> = (0..total)
        .step_by(MESSAGE_SAMPLES)
        .map(|start| start..(start + MESSAGE_SAMPLES).min(total))
        .rev()
        .collect();
    let mut messages = Vec::new();
    while let Some(range) = todo.pop() {
        let mut payload = Vec::new();
        let encoded = if range.len() == total {
            wire::encode(batch, &mut payload)
        } else {
            wire::encode(&sub_batch(batch, range.clone()), &mut payload)
        };
        encoded.map_err(|e| Error::Cluster(format!("encoding a batch: {e}")))?;
        if payload.len() > max_bytes {
            if range.len() == 1 {
                return Err(Error::Cluster(format!(
                    "one sample encodes to {} bytes, over the NATS payload limit of {max_bytes}",
                    payload.len()
                )));
            }
            let middle = range.start + range.len() / 2;
            todo.push(middle..range.end);
            todo.push(range.start..middle);
            continue;
        }
        messages.push((range.len() as u64, bytes::Bytes::from(payload)));
    }
    Ok(messages)
}

/// The samples and observations `range` of `batch` (its samples counted first, then its
/// observations), with the series they name.
fn sub_batch(batch: &SampleBatch, range: std::ops::Range<usize>) -> SampleBatch {
    let mut part = SampleBatch::default();
    let mut index = KeyIndex::default();
    let samples = batch.samples.len();
    for sample in &batch.samples[range.start.min(samples)..range.end.min(samples)] {
        let series = &batch.series[sample.series as usize];
        part.push(
            &mut index,
            &series.key,
            series.kind,
            sample.ts,
            sample.value,
        );
    }
    let observed = range.start.max(samples) - samples..range.end.max(samples) - samples;
    for o in &batch.observed[observed] {
        let series = &batch.series[o.series as usize];
        let place = part.series_of(&mut index, &series.key, series.kind);
        part.observed.push(BatchObserved {
            series: place,
            ..o.clone()
        });
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of `n` samples, three per series, over series with keys of about `key_len`
    /// bytes, unlike enough that deflate cannot shrink them much.
    fn batch(n: usize, key_len: usize) -> SampleBatch {
        let mut batch = SampleBatch::default();
        let mut index = KeyIndex::default();
        for i in 0..n {
            let series = i % n.div_ceil(3);
            let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ series as u64;
            let mut name = format!("s{series}.");
            while name.len() < key_len {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                name.push(char::from(b'a' + (state % 26) as u8));
            }
            batch.push(&mut index, &name, None, 1_800_000_000 + i as i64, i as f64);
        }
        batch
    }

    /// The samples of `messages`, decoded, as (key, ts, value bits), each series' samples in
    /// the order they came (the format groups a message's samples by series).
    fn decoded(messages: &[(u64, bytes::Bytes)]) -> Vec<(String, i64, u64)> {
        let mut out = Vec::new();
        for (count, payload) in messages {
            let part = wire::decode(payload).unwrap();
            assert_eq!(part.samples.len() as u64, *count);
            for s in &part.samples {
                let key = part.series[s.series as usize].key.clone();
                out.push((key, s.ts, s.value.to_bits()));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    #[test]
    fn messages_stay_under_the_payload_limit_with_long_keys_and_keep_the_order() {
        let limit = 1 << 20;
        let batch = batch(3 * MESSAGE_SAMPLES + 17, 600);
        let messages = encode_messages(&batch, limit).unwrap();
        assert!(messages.len() > 4, "{} messages", messages.len());
        for (count, payload) in &messages {
            assert!(payload.len() <= limit, "{} bytes", payload.len());
            assert!(*count as usize <= MESSAGE_SAMPLES);
        }
        let whole = encode_messages(&batch, usize::MAX).unwrap();
        assert_eq!(whole.len(), 4);
        assert_eq!(decoded(&messages), decoded(&whole));
        assert_eq!(decoded(&whole).len(), batch.samples.len());
    }

    #[test]
    fn a_rounds_outcomes_are_counted_to_the_sinks_whose_samples_each_message_carried() {
        let (a, b, c) = (
            Arc::<Tally>::default(),
            Arc::<Tally>::default(),
            Arc::default(),
        );
        let failed = || Err("partition 1: JetStream did not acknowledge".to_string());
        // Partition 1: a's 2 samples then b's 5, in messages of 3 (landed) and 4 (failed);
        // partition 2: c's 6 in one message that landed, and b's 1 after them.
        let outcomes = vec![
            (1, vec![(3, Ok(())), (4, failed())]),
            (2, vec![(7, Ok(()))]),
        ];
        let shares = HashMap::from([
            (1, vec![(Arc::clone(&a), 2), (Arc::clone(&b), 5)]),
            (2, vec![(Arc::clone(&c), 6), (Arc::clone(&b), 1)]),
        ]);
        count_to_sinks(outcomes, shares);
        let counts = |t: &Tally| {
            let t = t.lock();
            (t.accepted, t.failed, t.error.clone())
        };
        assert_eq!(counts(&a), (2, 0, None));
        let error = Some("partition 1: JetStream did not acknowledge".to_string());
        assert_eq!(counts(&b), (2, 4, error));
        assert_eq!(counts(&c), (6, 0, None));
    }

    #[test]
    fn a_groups_parts_share_messages_in_order_and_under_the_limit() {
        // Partition 7: three parts; 2: one; 5: two, the second too large to share.
        let part = |tag: u8, len: usize| (len as u64, bytes::Bytes::from(vec![tag; len]));
        let group = vec![
            (7, vec![part(70, 300), part(71, 300), part(72, 50)]),
            (2, vec![part(20, 200)]),
            (5, vec![part(50, 100), part(51, 900)]),
        ];
        let limit = 1000;
        let messages = pack(group.clone(), limit);
        let held: Vec<Vec<u32>> = messages
            .iter()
            .map(|m| m.sections.iter().map(|&(p, _)| p).collect())
            .collect();
        assert_eq!(held, [vec![2, 5, 7], vec![5], vec![7], vec![7]]);
        let mut carried: BTreeMap<u32, Vec<bytes::Bytes>> = BTreeMap::new();
        for message in &messages {
            assert!(message.payload.len() <= limit, "{}", message.payload.len());
            for &(partition, samples) in &message.sections {
                let entry = envelope::section(&message.payload, partition).unwrap();
                assert_eq!(entry.len() as u64, samples);
                carried.entry(partition).or_default().push(entry);
            }
        }
        // A message of one part is the part itself, without an envelope.
        assert_eq!(messages[1].payload, vec![51; 900]);
        for (partition, parts) in group {
            let parts: Vec<_> = parts.into_iter().map(|(_, part)| part).collect();
            assert_eq!(carried[&partition], parts, "partition {partition}");
        }
    }

    #[test]
    fn a_small_round_shares_messages_and_a_large_one_goes_by_the_nodes_applying_it() {
        let part = |len: usize| (1, bytes::Bytes::from(vec![0; len]));
        let round = |len: usize| -> Vec<PartitionParts> {
            (0..4)
                .map(|partition| (partition, vec![part(len)]))
                .collect()
        };
        // Partitions 0 and 2 on nodes a and b, 1 and 3 on b and c.
        let appliers = |partition: u32| -> BTreeSet<&'static str> {
            if partition.is_multiple_of(2) {
                ["a", "b"].into()
            } else {
                ["b", "c"].into()
            }
        };
        let held = |groups: Vec<Vec<PartitionParts>>| -> Vec<Vec<u32>> {
            groups
                .into_iter()
                .map(|group| group.into_iter().map(|(p, _)| p).collect())
                .collect()
        };
        let small = round(SHARED_ROUND_BYTES / 4);
        assert_eq!(held(group_round(small, appliers)), [vec![0, 1, 2, 3]]);
        let large = round(SHARED_ROUND_BYTES / 4 + 1);
        assert_eq!(held(group_round(large, appliers)), [vec![0, 2], vec![1, 3]]);
    }

    #[test]
    fn a_sample_too_large_alone_is_refused() {
        let err = encode_messages(&batch(2, 600), 100).unwrap_err();
        assert!(
            err.to_string().contains("over the NATS payload limit"),
            "{err}"
        );
    }
}
