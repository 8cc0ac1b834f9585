//! The edge of the cluster: where a node that took a write checks its samples, splits them
//! by partition and publishes them, instead of writing them into an engine.
//!
//! A sample is refused here for what can be known without the series' history, with the
//! reasons a single node gives: `not_finite`, `too_old`, `too_far_in_future`,
//! `invalid_series`. What depends on a series' stored state (`kind_mismatch`,
//! `counter_out_of_order`) is found when an owner applies the batch, and counted in that
//! owner's `/metrics`. A flush returns once JetStream has acknowledged every message of the
//! batch, so a write answered 2xx is in the replicated log; a publish that fails is retried
//! with the same message id, which JetStream stores once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::node::Node;
use super::{partition_of, wire, SampleBatch};
use crate::counter::SeriesKind;
use crate::engine::{accepted_times, check_value_and_time};
use crate::registry::SeriesKey;
use crate::sample::RejectReason;
use crate::server::sink::{IngestReport, NameCache, BATCH};
use crate::server::stats::ServerStats;
use crate::server::Limits;
use crate::time::Timestamp;
use crate::{Error, Result};

/// Samples per published message at most, so a message stays well under NATS's default
/// 1 MiB payload limit whatever the keys.
pub const MESSAGE_SAMPLES: usize = 4096;

/// Publish attempts per message before the flush fails.
const PUBLISH_ATTEMPTS: usize = 5;

/// Pause between publish attempts (JetStream elects a new stream leader in 1-2 s).
const PUBLISH_RETRY: Duration = Duration::from_millis(500);

/// One connection's or request's samples on their way to the log.
pub struct EdgeSink {
    node: Arc<Node>,
    stats: Arc<ServerStats>,
    /// Per partition, the batch being built and its key index.
    batches: HashMap<u32, (SampleBatch, HashMap<String, u32>)>,
    /// Samples queued in all batches.
    queued: usize,
    /// First and last second accepted, fixed when the batch began.
    bounds: Option<(Timestamp, Timestamp)>,
    /// Canonical keys already checked, with their partition: a key is parsed once per
    /// connection, not once per sample. Within the name caches' server-wide budget.
    known: NameCache<u32>,
    report: IngestReport,
}

impl EdgeSink {
    /// A sink publishing through `node`, counting into `stats`, its key cache within
    /// `limits`' name cache budget.
    pub fn new(node: Arc<Node>, stats: Arc<ServerStats>, limits: &Limits) -> EdgeSink {
        EdgeSink {
            known: NameCache::new(Arc::clone(&stats), limits.name_cache_bytes),
            node,
            stats,
            batches: HashMap::new(),
            queued: 0,
            bounds: None,
            report: IngestReport::default(),
        }
    }

    /// The node's clock, for samples that say "now".
    pub fn now(&self) -> Timestamp {
        self.node.now()
    }

    /// Queues one sample of `series` (canonical text or any spelling the key grammar
    /// takes), declaring `kind` when the write names one. Returns true when the batch is full
    /// and should be flushed.
    pub fn push_declared(
        &mut self,
        series: &str,
        kind: Option<SeriesKind>,
        ts: Timestamp,
        value: f64,
        line: usize,
    ) -> bool {
        let bounds = *self
            .bounds
            .get_or_insert_with(|| accepted_times(self.node.tiers(), self.node.now()));
        if let Err(reason) = check_value_and_time(value, ts, bounds) {
            self.reject(line, reason.as_str(), format!("sample refused: {reason}"));
            return false;
        }
        let parsed;
        let (key, partition) = match self.known.get(series) {
            Some(partition) => (series, partition),
            None => {
                parsed = match SeriesKey::parse(series) {
                    Ok(key) => key,
                    Err(e) => {
                        self.reject(line, RejectReason::InvalidSeries.as_str(), e.to_string());
                        return false;
                    }
                };
                let partition = partition_of(parsed.as_str(), self.node.partitions());
                // Only a text that is its own canonical form stands for its key.
                if parsed.as_str() == series {
                    self.known.insert(series.into(), partition);
                }
                (parsed.as_str(), partition)
            }
        };
        let (batch, index) = self.batches.entry(partition).or_default();
        batch.push(index, key, kind, ts, value);
        self.queued += 1;
        self.queued >= BATCH
    }

    /// Counts a refused line (or field) under `reason`.
    pub fn reject(&mut self, line: usize, reason: &'static str, message: impl Into<String>) {
        self.report
            .refuse(&self.stats, line, reason, || message.into());
    }

    /// Publishes every queued sample, a message per partition (more when one has over
    /// [`MESSAGE_SAMPLES`]), all at once; returns when JetStream acknowledged them all.
    ///
    /// # Errors
    /// [`Error::Cluster`] when a message could not be published after retries; its samples
    /// are counted as `write_failed` (the others of the flush landed).
    pub async fn flush(&mut self) -> Result<()> {
        // The bounds are taken afresh for the next samples even when none was queued: a
        // long-lived sink (a UDP socket's) must not keep a "now" from hours ago.
        self.bounds = None;
        if self.queued == 0 {
            return Ok(());
        }
        let started = Instant::now();
        let queued = std::mem::take(&mut self.queued);
        // Partitions are published at once; one partition's messages one after another, so
        // they reach the log in the order they were written (a counter's samples must).
        let mut publishes = Vec::new();
        for (partition, (batch, _)) in self.batches.drain() {
            let mut messages = Vec::new();
            for part in split(batch) {
                let samples = part.samples.len() as u64;
                let mut payload = Vec::new();
                if let Err(e) = wire::encode(&part, &mut payload) {
                    // Only a batch past the format's bounds fails, which `split` prevents.
                    self.report
                        .refuse_many(&self.stats, "write_failed", samples);
                    tracing::error!(partition, error = %e, "encoding a batch failed");
                    continue;
                }
                messages.push((samples, bytes::Bytes::from(payload)));
            }
            let node = Arc::clone(&self.node);
            publishes.push(async move {
                let mut outcomes = Vec::with_capacity(messages.len());
                for (samples, payload) in messages {
                    let id = node.next_message_id();
                    outcomes.push((samples, publish(&node, partition, &id, payload).await));
                }
                outcomes
            });
        }
        let mut failure = None;
        for (samples, outcome) in futures_util::future::join_all(publishes)
            .await
            .into_iter()
            .flatten()
        {
            match outcome {
                Ok(()) => self.report.accepted += samples,
                Err(e) => {
                    self.report
                        .refuse_many(&self.stats, "write_failed", samples);
                    failure = Some(e);
                }
            }
        }
        self.stats.observe_batch(started.elapsed(), queued);
        failure.map_or(Ok(()), Err)
    }

    /// What was published so far.
    pub fn report(&self) -> &IngestReport {
        &self.report
    }

    /// Flushes and hands back what was published.
    ///
    /// # Errors
    /// As [`EdgeSink::flush`].
    pub async fn finish(mut self) -> Result<IngestReport> {
        self.flush().await?;
        Ok(self.report)
    }
}

/// Publishes one message, retrying with the same id until JetStream acknowledges it.
async fn publish(node: &Node, partition: u32, id: &str, payload: bytes::Bytes) -> Result<()> {
    let mut last = None;
    for attempt in 0..PUBLISH_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(PUBLISH_RETRY).await;
        }
        match node.log().publish(partition, id, payload.clone()).await {
            Ok(_) => return Ok(()),
            Err(e) => {
                tracing::warn!(partition, attempt, error = %e, "publish failed; retrying");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| Error::Cluster("publish failed".into())))
}

/// `batch` cut into messages of at most [`MESSAGE_SAMPLES`] samples, each with the series
/// its samples name. Samples keep their order.
fn split(batch: SampleBatch) -> Vec<SampleBatch> {
    if batch.samples.len() <= MESSAGE_SAMPLES {
        return vec![batch];
    }
    batch
        .samples
        .chunks(MESSAGE_SAMPLES)
        .map(|chunk| {
            let mut part = SampleBatch::default();
            let mut index = HashMap::new();
            for sample in chunk {
                let series = &batch.series[sample.series as usize];
                part.push(
                    &mut index,
                    &series.key,
                    series.kind,
                    sample.ts,
                    sample.value,
                );
            }
            part
        })
        .collect()
}
