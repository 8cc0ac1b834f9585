//! The cluster's ingest log: one JetStream stream, whose subjects name the partitions each
//! message holds.
//!
//! A message may hold entries of several partitions ([`super::envelope`]): the edge puts
//! a round's partitions into one message (those of a large round by the nodes that apply
//! them), since a message costs a publish, an acknowledgement and three log copies whatever
//! its size. Its subject in the
//! stream `TIERDB_INGEST` (file storage, replicated on up to three servers) has one token
//! per partition of the cluster, `1` for each partition it holds and `0` for the others:
//! `tierdb.ingest.p.0.1.1.0` holds partitions 1 and 2 of four. A partition's filter is its
//! token (`tierdb.ingest.p.*.1.*.*` for partition 1); a node reads the messages that hold
//! any of its partitions through one consumer ([`super::log_feed`]), in stream order, each
//! once, over filters that each message matches once ([`reader_filters`]). JetStream gives
//! each message a stream sequence, shared by the partitions it holds. One stream rather than
//! one per partition keeps the number of replicated groups at one on a small cluster.
//!
//! Builds before this scheme published one partition per message, on `tierdb.ingest.<p>`;
//! readers read those subjects too, so a log written by them is applied whole after an
//! upgrade.
//!
//! Publishing carries a message id (`Nats-Msg-Id`), so a publish retried after a lost
//! acknowledgement is stored once within the stream's duplicate window.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream, Context};
use bytes::Bytes;
use futures_util::StreamExt;

use super::streams::{self, Copies};
use crate::error::Error;
use crate::error::Result;

/// Servers holding each message at most: more would slow every publish for no gain.
const MAX_REPLICAS: usize = 3;

/// The stream's name.
pub(crate) const STREAM: &str = "TIERDB_INGEST";

/// How long JetStream remembers message ids for deduplication: longer than any retry of a
/// publish, shorter than the memory it costs.
pub(crate) const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// What every subject of a message of the current scheme starts with.
const SUBJECT_PREFIX: &str = "tierdb.ingest.p";

/// [`SUBJECT_PREFIX`], then `token(p)` for each partition `p` of `count`.
fn tokens(count: u32, token: impl Fn(u32) -> &'static str) -> String {
    let mut subject = String::with_capacity(SUBJECT_PREFIX.len() + 2 * count as usize);
    subject.push_str(SUBJECT_PREFIX);
    for partition in 0..count {
        subject.push('.');
        subject.push_str(token(partition));
    }
    subject
}

/// The subject of a message holding `partitions` (sorted, each below `count`): `1` for
/// those it holds, `0` for the others.
fn subject(partitions: &[u32], count: u32) -> String {
    tokens(count, |p| match partitions.binary_search(&p) {
        Ok(_) => "1",
        Err(_) => "0",
    })
}

/// The filter that selects the messages holding `partition` of `count`.
fn partition_filter(partition: u32, count: u32) -> String {
    tokens(count, |p| if p == partition { "1" } else { "*" })
}

/// What a reader of `partitions` (sorted, each below `count`) filters on: one filter per
/// partition, the filter of each selecting the messages that hold it and none of the
/// partitions before it, so that each message matches one filter only (nats-server 2.10 to
/// 2.12.4 refuse a consumer whose filters can match one subject twice), plus each
/// partition's subject of earlier builds. A reader of every partition, or of so many that
/// the filters would pass [`MAX_FILTER_BYTES`], reads the whole stream instead, the feed
/// passing over what it does not apply.
fn reader_filters(partitions: &[u32], count: u32) -> Vec<String> {
    // Per partition: its filter, and its earlier builds' subject with the request's quoting
    // (at most 24 bytes).
    let bytes = partitions.len() * (SUBJECT_PREFIX.len() + 2 * count as usize + 24);
    if partitions.len() >= count as usize || bytes > MAX_FILTER_BYTES {
        return vec![ALL_SUBJECTS.to_string()];
    }
    let mut filters = Vec::with_capacity(2 * partitions.len());
    for (i, &partition) in partitions.iter().enumerate() {
        let before = &partitions[..i];
        filters.push(tokens(count, |p| {
            if p == partition {
                "1"
            } else if before.binary_search(&p).is_ok() {
                "0"
            } else {
                "*"
            }
        }));
        filters.push(legacy_subject(partition));
    }
    filters
}

/// The most a reader's filters may take: they travel in the request that makes its
/// consumer, under the servers' payload limit (1 MiB by default), and the server matches
/// each message against them. At 16 partitions a filter takes about 50 bytes; at 1,024,
/// about 2 KiB.
const MAX_FILTER_BYTES: usize = 64 * 1024;

/// Every subject of the stream.
const ALL_SUBJECTS: &str = "tierdb.ingest.>";

/// The subject earlier builds published `partition`'s messages on, one partition each.
fn legacy_subject(partition: u32) -> String {
    format!("tierdb.ingest.{partition}")
}

/// Selects every message of earlier builds: their subjects have one token after `ingest`,
/// the current scheme's at least two.
const LEGACY_SUBJECTS: &str = "tierdb.ingest.*";

/// How long the stream keeps messages. It must cover a replica's rebuild (a node that comes
/// back after being down this long, or a new replica, reads the whole log tail), not the
/// tiers' retention: applied messages live on in the owners' files.
#[derive(Clone, Debug)]
pub struct LogRetention {
    /// Oldest message kept (default 24 hours).
    pub max_age: Duration,
    /// Bytes kept, `None` for no bound (default 1 GiB). JetStream reserves this much on each
    /// server holding a copy, and refuses the stream where the disk has less free.
    pub max_bytes: Option<u64>,
    /// Servers holding each message, at most 3: exactly that many, or the stream is not
    /// made; 0 (the default): as many as the NATS cluster has, up to 3.
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
pub struct IngestLog {
    js: Context,
    /// The cluster's partition count: a subject has a token for each.
    partitions: u32,
    /// Whether the stream holds messages of earlier builds, once the log answered: only
    /// then does [`IngestLog::last_sequences`] look on their subjects too (and while unset).
    legacy: Arc<OnceLock<bool>>,
}

impl IngestLog {
    /// Creates the stream if the cluster has none yet, else opens it as it is (its first
    /// creator's retention stands; a change is a JetStream admin task). `partitions` is the
    /// cluster's partition count.
    ///
    /// # Errors
    /// [`Error::Cluster`] when JetStream refuses or does not answer.
    pub async fn open(js: Context, retention: &LogRetention, partitions: u32) -> Result<IngestLog> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            Error::Cluster(format!("{what} the stream {STREAM}: {e}"))
        };
        match js.get_stream(STREAM).await {
            Ok(_) => {
                return Ok(IngestLog {
                    js,
                    partitions,
                    legacy: Arc::default(),
                })
            }
            Err(e) if !streams::is_not_found(&e) => return Err(fail("looking up", &e)),
            Err(_) => {}
        }
        let copies = match retention.replicas {
            0 => Copies::UpTo(MAX_REPLICAS),
            n => Copies::Exactly(n.min(MAX_REPLICAS)),
        };
        let config = |replicas| stream::Config {
            name: STREAM.to_string(),
            description: Some("tierdb cluster: sample batches, a token per partition".into()),
            subjects: vec![ALL_SUBJECTS.to_string()],
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
        let replicas = streams::create_replicated(&js, copies, config)
            .await
            .map_err(|e| fail("creating", &e))?;
        tracing::info!(?replicas, "opened the ingest log");
        Ok(IngestLog {
            js,
            partitions,
            legacy: Arc::new(OnceLock::from(false)),
        })
    }

    /// Publishes one message holding `partitions` (sorted, distinct), its payload a single
    /// entry or an envelope of their entries ([`super::envelope`]), under the message id
    /// `id`; returns its stream sequence once JetStream has stored it (on a majority of its
    /// replicas). A duplicate id within the window is acknowledged with the first copy's
    /// sequence and stored once.
    ///
    /// # Errors
    /// [`Error::Cluster`] when the publish or its acknowledgement fails (the caller may retry
    /// with the same id).
    pub async fn publish(&self, partitions: &[u32], id: &str, payload: Bytes) -> Result<u64> {
        let message = jetstream::message::PublishMessage::build()
            .payload(payload)
            .message_id(id);
        let ack = self
            .js
            .send_publish(subject(partitions, self.partitions), message)
            .await
            .map_err(|e| Error::Cluster(format!("publishing to partitions {partitions:?}: {e}")))?
            .await
            .map_err(|e| {
                Error::Cluster(format!(
                    "partitions {partitions:?}: JetStream did not acknowledge: {e}"
                ))
            })?;
        Ok(ack.sequence)
    }

    /// The largest message the connected server accepts, in bytes.
    pub(crate) fn max_payload(&self) -> usize {
        self.js.client().server_info().max_payload
    }

    /// The sequence of each of `partitions`' last message, 0 for one with none: what an
    /// owner must have applied for a read to see every acknowledged write (every default
    /// read of a cluster node asks this).
    ///
    /// Each question costs the servers a copy of the message that answers it, the whole
    /// payload, a round's samples. So for several partitions the stream's last message is
    /// asked first: its sequence is the last of every partition it holds, since nothing
    /// comes after it, and a round's message usually holds them all. Only the partitions it
    /// does not hold are then asked one by one, all at once; each answer is at least what
    /// the log held when the call began.
    ///
    /// # Errors
    /// [`Error::Cluster`] when JetStream does not answer.
    pub async fn last_sequences(&self, partitions: &[u32]) -> Result<BTreeMap<u32, u64>> {
        let stream = (self.js)
            .get_stream_no_info(STREAM)
            .await
            .map_err(|e| Error::Cluster(format!("stream {STREAM}: {e}")))?;
        let last_on = |partition: u32, subject: String| {
            let stream = &stream;
            async move {
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
        };
        let legacy = match self.legacy.get() {
            Some(&legacy) => legacy,
            None => match stream
                .get_last_raw_message_by_subject(LEGACY_SUBJECTS)
                .await
            {
                Ok(_) => *self.legacy.get_or_init(|| true),
                Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
                    *self.legacy.get_or_init(|| false)
                }
                // Asked again next time; meanwhile, look.
                Err(_) => true,
            },
        };
        let mut last = BTreeMap::new();
        let mut rest = partitions.to_vec();
        if partitions.len() > 1 {
            let newest = tokens(self.partitions, |_| "*");
            match stream.get_last_raw_message_by_subject(&newest).await {
                Ok(message) => {
                    let held = held_partitions(&message.subject);
                    rest.retain(|&partition| {
                        let answered = held.binary_search(&partition).is_ok();
                        if answered {
                            last.insert(partition, message.sequence);
                        }
                        !answered
                    });
                }
                Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
                    last.extend(partitions.iter().map(|&partition| (partition, 0)));
                    rest.clear();
                }
                Err(e) => return Err(Error::Cluster(format!("last message of the log: {e}"))),
            }
        }
        let mut asked = Vec::with_capacity(partitions.len());
        for &partition in &rest {
            asked.push(last_on(
                partition,
                partition_filter(partition, self.partitions),
            ));
        }
        if legacy {
            for &partition in partitions {
                asked.push(last_on(partition, legacy_subject(partition)));
            }
        }
        for (partition, seq) in futures_util::future::try_join_all(asked).await? {
            let at = last.entry(partition).or_insert(0);
            *at = seq.max(*at);
        }
        Ok(last)
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

    /// Reads the messages holding any of `partitions` (sorted; earlier builds' messages
    /// included) from the one after `applied`, in sequence order, each once however many of
    /// them it holds; with many partitions, other messages too ([`reader_filters`]). An
    /// ordered consumer: ephemeral, unacknowledged, recreated by the client from the last
    /// sequence it delivered if it is lost (a server restart, a leader change), so nothing
    /// is skipped or repeated. A consumer lost before it delivered anything the client
    /// makes again from the stream's start: the reader then fails at its first message
    /// rather than read the log again from there.
    ///
    /// # Errors
    /// [`Error::Cluster`] when the consumer cannot be created.
    pub(crate) async fn read_from(&self, partitions: &[u32], applied: u64) -> Result<LogReader> {
        let fail = |e: &dyn std::fmt::Display| {
            Error::Cluster(format!(
                "reading the log for {} partitions: {e}",
                partitions.len()
            ))
        };
        let stream = self.stream().await?;
        let deliver_policy = if applied == 0 {
            consumer::DeliverPolicy::All
        } else {
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: applied + 1,
            }
        };
        let filter_subjects = reader_filters(partitions, self.partitions);
        let consumer = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subjects,
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|e| fail(&e))?;
        let messages = consumer.messages().await.map_err(|e| fail(&e))?;
        Ok(LogReader {
            messages,
            start: applied + 1,
        })
    }
}

/// The partitions a message on `subject` holds, in order: the tokens set to `1` of the
/// current scheme, or an earlier build's one partition. Empty for a subject of neither.
fn held_partitions(subject: &str) -> Vec<u32> {
    if let Some(tokens) = subject.strip_prefix(SUBJECT_PREFIX) {
        return (0u32..)
            .zip(tokens.split('.').skip(1))
            .filter(|&(_, token)| token == "1")
            .map(|(partition, _)| partition)
            .collect();
    }
    let legacy = subject.strip_prefix("tierdb.ingest.");
    legacy.and_then(|p| p.parse().ok()).into_iter().collect()
}

/// One message of the log, as a [`LogReader`] delivers it.
pub(crate) struct LogMessage {
    /// Its stream sequence.
    pub seq: u64,
    /// The partitions it holds, in order.
    pub partitions: Vec<u32>,
    /// An entry, or an envelope of entries ([`super::envelope`]).
    pub payload: Bytes,
}

/// The messages of some partitions in order; see [`IngestLog::read_from`].
pub(crate) struct LogReader {
    messages: consumer::pull::Ordered,
    /// The first sequence asked for.
    start: u64,
}

impl LogReader {
    /// The next message, waiting for one; `None` when the consumer ended.
    ///
    /// # Errors
    /// [`Error::Cluster`] on a delivery error the client could not recover from, or a
    /// message before the first one asked for (see [`IngestLog::read_from`]).
    pub(crate) async fn next(&mut self) -> Option<Result<LogMessage>> {
        let message = self.messages.next().await?;
        let fail = |e: &dyn std::fmt::Display| Error::Cluster(format!("reading the log: {e}"));
        Some(message.map_err(|e| fail(&e)).and_then(|message| {
            let seq = message.info().map_err(|e| fail(&e))?.stream_sequence;
            if seq < self.start {
                return Err(fail(&format!(
                    "the consumer was made again from the stream's start (sequence {seq}, \
                     asked from {})",
                    self.start
                )));
            }
            Ok(LogMessage {
                seq,
                partitions: held_partitions(&message.subject),
                payload: message.payload.clone(),
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_has_a_token_per_partition_and_a_filter_selects_one() {
        assert_eq!(subject(&[1, 2], 4), "tierdb.ingest.p.0.1.1.0");
        assert_eq!(subject(&[0], 1), "tierdb.ingest.p.1");
        assert_eq!(partition_filter(1, 4), "tierdb.ingest.p.*.1.*.*");
        assert_eq!(partition_filter(0, 1), "tierdb.ingest.p.1");
        assert_eq!(legacy_subject(3), "tierdb.ingest.3");
    }

    /// Whether `subject` matches NATS filter `filter` (`*` one token, `>` the rest).
    fn matches(filter: &str, subject: &str) -> bool {
        let (mut f, mut s) = (filter.split('.'), subject.split('.'));
        loop {
            match (f.next(), s.next()) {
                (Some(">"), Some(_)) => return true,
                (Some(a), Some(b)) if a == "*" || a == b => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    #[test]
    fn a_readers_filters_select_each_message_of_its_partitions_once() {
        let count = 5;
        let reader = [0, 2, 3];
        let filters = reader_filters(&reader, count);
        assert_eq!(
            filters,
            [
                "tierdb.ingest.p.1.*.*.*.*",
                "tierdb.ingest.0",
                "tierdb.ingest.p.0.*.1.*.*",
                "tierdb.ingest.2",
                "tierdb.ingest.p.0.*.0.1.*",
                "tierdb.ingest.3",
            ]
        );
        let mut subjects: Vec<(String, Vec<u32>)> = (1u32..1 << count)
            .map(|set| {
                let held: Vec<u32> = (0..count).filter(|p| set & (1 << p) != 0).collect();
                (subject(&held, count), held)
            })
            .collect();
        subjects.extend((0..count).map(|p| (legacy_subject(p), vec![p])));
        for (subject, held) in subjects {
            let matched = filters.iter().filter(|f| matches(f, &subject)).count();
            let wanted = usize::from(held.iter().any(|p| reader.contains(p)));
            assert_eq!(matched, wanted, "{subject}");
        }
    }

    #[test]
    fn a_reader_of_every_partition_or_of_too_many_reads_the_whole_stream() {
        assert_eq!(reader_filters(&[0, 1, 2, 3], 4), [ALL_SUBJECTS]);
        let many: Vec<u32> = (0..40).collect();
        assert_eq!(reader_filters(&many, 1024), [ALL_SUBJECTS]);
        assert_eq!(reader_filters(&many[..20], 1024).len(), 40);
        assert!(matches(ALL_SUBJECTS, &subject(&[7], 1024)));
        assert!(matches(ALL_SUBJECTS, &legacy_subject(7)));
    }

    #[test]
    fn a_messages_partitions_are_read_from_its_subject() {
        assert_eq!(held_partitions(&subject(&[1, 2], 4)), [1, 2]);
        assert_eq!(held_partitions(&subject(&[0, 3], 4)), [0, 3]);
        assert_eq!(held_partitions(&legacy_subject(7)), [7]);
        assert!(held_partitions("tierdb.ingest.x").is_empty());
        assert!(held_partitions("other").is_empty());
    }
}
