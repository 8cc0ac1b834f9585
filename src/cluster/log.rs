//! The cluster's ingest log: one JetStream stream, one subject per partition.
//!
//! Every published batch goes to `tierdb.ingest.<partition>` of the stream `TIERDB_INGEST`
//! (file storage, replicated on up to three servers). JetStream gives each message a stream
//! sequence; a partition's messages are the stream's messages on its subject, in sequence
//! order, and an owner reads them from the sequence after the last one it applied. One
//! stream rather than one per partition keeps the number of replicated groups at one on a
//! small cluster; the partition subjects keep the owners' reads apart.
//!
//! Publishing carries a message id (`Nats-Msg-Id`), so a publish retried after a lost
//! acknowledgement is stored once within the stream's duplicate window.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream, Context};
use bytes::Bytes;
use futures_util::StreamExt;

use super::streams;
use crate::error::Error;
use crate::error::Result;

/// Servers holding each message at most: more would slow every publish for no gain.
const MAX_REPLICAS: usize = 3;

/// The stream's name.
pub(crate) const STREAM: &str = "TIERDB_INGEST";

/// How long JetStream remembers message ids for deduplication: longer than any retry of a
/// publish, shorter than the memory it costs.
pub(crate) const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// The subject of `partition`'s messages.
pub(crate) fn subject(partition: u32) -> String {
    format!("tierdb.ingest.{partition}")
}

/// How long the stream keeps messages. It must cover a replica's rebuild (a node that comes
/// back after being down this long, or a new replica, reads the whole log tail), not the
/// tiers' retention: applied messages live on in the owners' files.
#[derive(Clone, Debug)]
pub(crate) struct LogRetention {
    /// Oldest message kept (default 24 hours).
    pub max_age: Duration,
    /// Bytes kept, `None` for no bound (default 1 GiB). JetStream reserves this much on each
    /// server holding a copy, and refuses the stream where the disk has less free.
    pub max_bytes: Option<u64>,
    /// Servers holding each message, at most 3; 0 (the default): as many as the NATS
    /// cluster has, up to 3.
    pub replicas: usize,
}

impl Default for LogRetention {
    fn default() -> Self {
        LogRetention {
            max_age: Duration::from_secs(24 * 3600),
            max_bytes: Some(1 << 30),
            replicas: 0,
        }
    }
}

/// The ingest stream, opened (created on first use).
#[derive(Clone)]
pub(crate) struct IngestLog {
    js: Context,
}

impl IngestLog {
    /// Creates the stream if the cluster has none yet, else opens it as it is (its first
    /// creator's retention stands; a change is a JetStream admin task).
    ///
    /// # Errors
    /// [`Error::Cluster`] when JetStream refuses or does not answer.
    pub(crate) async fn open(js: Context, retention: &LogRetention) -> Result<IngestLog> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            Error::Cluster(format!("{what} the stream {STREAM}: {e}"))
        };
        match js.get_stream(STREAM).await {
            Ok(_) => return Ok(IngestLog { js }),
            Err(e) if !streams::is_not_found(&e) => return Err(fail("looking up", &e)),
            Err(_) => {}
        }
        let max_replicas = match retention.replicas {
            0 => MAX_REPLICAS,
            n => n.min(MAX_REPLICAS),
        };
        let config = |replicas| stream::Config {
            name: STREAM.to_string(),
            description: Some("tierdb cluster: sample batches, a subject per partition".into()),
            subjects: vec!["tierdb.ingest.>".to_string()],
            storage: stream::StorageType::File,
            num_replicas: replicas,
            duplicate_window: DUPLICATE_WINDOW,
            max_age: retention.max_age,
            max_bytes: retention
                .max_bytes
                .map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX)),
            discard: stream::DiscardPolicy::Old,
            ..Default::default()
        };
        let replicas = streams::create_replicated(&js, max_replicas, config)
            .await
            .map_err(|e| fail("creating", &e))?;
        tracing::info!(?replicas, "opened the ingest log");
        Ok(IngestLog { js })
    }

    /// Publishes one encoded batch of `partition` under the message id `id`; returns its
    /// stream sequence once JetStream has stored it (on a majority of its replicas). A
    /// duplicate id within the window is acknowledged with the first copy's sequence and
    /// stored once.
    ///
    /// # Errors
    /// [`Error::Cluster`] when the publish or its acknowledgement fails (the caller may retry
    /// with the same id).
    pub(crate) async fn publish(&self, partition: u32, id: &str, payload: Bytes) -> Result<u64> {
        let message = jetstream::message::PublishMessage::build()
            .payload(payload)
            .message_id(id);
        let ack = self
            .js
            .send_publish(subject(partition), message)
            .await
            .map_err(|e| Error::Cluster(format!("publishing to partition {partition}: {e}")))?
            .await
            .map_err(|e| {
                Error::Cluster(format!(
                    "partition {partition}: JetStream did not acknowledge: {e}"
                ))
            })?;
        Ok(ack.sequence)
    }

    /// The largest message the connected server accepts, in bytes.
    pub(crate) fn max_payload(&self) -> usize {
        self.js.client().server_info().max_payload
    }

    /// The sequence of each of `partitions`' last message, 0 for one with none: what an
    /// owner must have applied for a read to see every acknowledged write. The partitions
    /// are asked all at once, in one round trip's time, without asking for the stream's
    /// info first (every default read of a cluster node asks this).
    ///
    /// # Errors
    /// [`Error::Cluster`] when JetStream does not answer.
    pub(crate) async fn last_sequences(&self, partitions: &[u32]) -> Result<BTreeMap<u32, u64>> {
        let stream = (self.js)
            .get_stream_no_info(STREAM)
            .await
            .map_err(|e| Error::Cluster(format!("stream {STREAM}: {e}")))?;
        let asked = partitions.iter().map(|&partition| {
            let stream = &stream;
            async move {
                let subject = subject(partition);
                match stream.get_last_raw_message_by_subject(&subject).await {
                    Ok(message) => Ok((partition, message.sequence)),
                    Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
                        Ok((partition, 0))
                    }
                    Err(e) => Err(Error::Cluster(format!(
                        "last message of partition {partition}: {e}"
                    ))),
                }
            }
        });
        futures_util::future::try_join_all(asked)
            .await
            .map(|pairs| pairs.into_iter().collect())
    }

    /// The stream's first sequence still held (messages before it were dropped by
    /// retention, or purged) and its last sequence ever stored (0 when none; a purge keeps
    /// it).
    ///
    /// # Errors
    /// [`Error::Cluster`] when JetStream does not answer.
    pub(crate) async fn bounds(&self) -> Result<(u64, u64)> {
        let info = self
            .stream()
            .await?
            .get_info()
            .await
            .map_err(|e| Error::Cluster(format!("stream {STREAM} info: {e}")))?;
        Ok((info.state.first_sequence, info.state.last_sequence))
    }

    async fn stream(&self) -> Result<stream::Stream> {
        self.js
            .get_stream(STREAM)
            .await
            .map_err(|e| Error::Cluster(format!("stream {STREAM}: {e}")))
    }

    /// Reads `partition`'s messages from the one after `applied`, in sequence order, as
    /// (sequence, payload). An ordered consumer: ephemeral, unacknowledged, recreated by the
    /// client from the last sequence it delivered if it is lost (a server restart, a leader
    /// change), so nothing is skipped or repeated.
    ///
    /// # Errors
    /// [`Error::Cluster`] when the consumer cannot be created.
    pub(crate) async fn read_from(&self, partition: u32, applied: u64) -> Result<PartitionReader> {
        let stream = self.stream().await?;
        let deliver_policy = if applied == 0 {
            consumer::DeliverPolicy::All
        } else {
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: applied + 1,
            }
        };
        let consumer = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: subject(partition),
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|e| Error::Cluster(format!("reading partition {partition}: {e}")))?;
        let messages = consumer
            .messages()
            .await
            .map_err(|e| Error::Cluster(format!("reading partition {partition}: {e}")))?;
        Ok(PartitionReader {
            partition,
            messages,
        })
    }
}

/// One partition's messages in order; see [`IngestLog::read_from`].
pub(crate) struct PartitionReader {
    partition: u32,
    messages: consumer::pull::Ordered,
}

impl PartitionReader {
    /// The next message, waiting for one; `None` when the consumer ended.
    ///
    /// # Errors
    /// [`Error::Cluster`] on a delivery error the client could not recover from.
    pub(crate) async fn next(&mut self) -> Option<Result<(u64, Bytes)>> {
        let message = self.messages.next().await?;
        Some(
            message
                .map_err(|e| Error::Cluster(format!("partition {}: {e}", self.partition)))
                .and_then(|message| {
                    let seq = message
                        .info()
                        .map_err(|e| Error::Cluster(format!("partition {}: {e}", self.partition)))?
                        .stream_sequence;
                    Ok((seq, message.payload.clone()))
                }),
        )
    }

    /// The next message if one arrives within `wait`.
    pub(crate) async fn next_within(&mut self, wait: Duration) -> Option<Result<(u64, Bytes)>> {
        tokio::time::timeout(wait, self.next()).await.ok().flatten()
    }
}
