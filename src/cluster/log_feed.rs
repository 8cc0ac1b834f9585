//! A node's one reader of the ingest log, feeding each partition it applies the messages
//! that hold it.
//!
//! A message holds several partitions ([`super::envelope`]), so one consumer over all of a
//! node's partitions receives it once, where a consumer per partition would receive it once
//! per partition: each delivery costs the servers and the node about the same whatever its
//! size. The feed hands each partition's task the message (its bytes shared) with its
//! sequence, in stream order, and only those past what the task said it applied; the
//! sections of partitions the node does not apply are skipped.
//!
//! The consumer is made again, from the lowest position any partition needs, whenever the
//! set of partitions or a partition's position changes (a partition taken, given up, or
//! reopened after a failed apply and so rolled back to its checkpoint); a partition already
//! past a message skips it. A partition whose task is slow holds the others back (its queue
//! is bounded), which bounds what the feed keeps in memory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use super::ingest_log::{IngestLog, LogMessage};

/// Messages queued for one partition's task at most: a full group and as many more.
const QUEUED_MESSAGES: usize = 128;

/// How long the feed may receive nothing before the log is asked whether it holds more for
/// the partitions it feeds. A consumer whose NATS server died, or whose stream leader
/// moved, delivers nothing until the client notices two missed idle heartbeats (15 s each by
/// default): up to 45 s with the partitions unapplied and their strong reads refused. When
/// the log has more than was delivered, the consumer is replaced at once. The check is a read
/// of each partition's last message, and a new consumer is made only when the log answers:
/// nothing piles onto a JetStream that is electing a leader.
const STALL_CHECK: Duration = Duration::from_secs(3);

/// Longest wait for a consumer's first delivery before the stall check replaces it. Each
/// consumer replaced in a row without having delivered anything waits twice as long as the
/// one before, from [`STALL_CHECK`]: a server that needs longer to start delivering (a
/// filtered scan from an old position of a big stream, a leader still catching up) would
/// otherwise see every new consumer replaced before its first message, forever.
const STALL_PATIENCE_MAX: Duration = Duration::from_secs(24);

/// How long the feed pauses after a failed read before it makes its consumer again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Why the feed stopped reading through a consumer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The partitions or their positions changed.
    Changed,
    /// The read failed, or the consumer ended.
    Failed,
    /// The stall check found the log holding more than it delivered.
    Stalled { delivered: bool },
}

/// A partition's messages as the feed hands them: (stream sequence, payload).
pub type FedMessage = (u64, Bytes);

/// The node's reader of the log; see the module docs.
pub struct LogFeed {
    log: IngestLog,
    feeds: Mutex<BTreeMap<u32, Feed>>,
    /// Bumped whenever `feeds` changes in a way the consumer must follow.
    changed: watch::Sender<u64>,
}

/// One partition's queue.
struct Feed {
    queue: mpsc::Sender<FedMessage>,
    /// The lowest sequence the partition still needs.
    next: u64,
    /// The consumer that reads for it: the one made from a position at or before `next`
    /// after the partition subscribed. 0 until one is: a message from an earlier consumer
    /// may lie past what the partition still needs, and handing it over would skip the
    /// messages in between.
    consumer: u64,
}

impl Feed {
    /// Whether the message at `seq`, read by `consumer`, is one this partition still needs
    /// from it.
    fn needs(&self, consumer: u64, seq: u64) -> bool {
        self.consumer == consumer && self.next <= seq
    }
}

impl LogFeed {
    /// A feed reading `log`; [`LogFeed::run`] reads it.
    pub fn new(log: IngestLog) -> Arc<LogFeed> {
        Arc::new(LogFeed {
            log,
            feeds: Mutex::new(BTreeMap::new()),
            changed: watch::Sender::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u32, Feed>> {
        self.feeds.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|version| *version += 1);
    }

    /// The messages holding `partition` after `applied`, in order; replaces the partition's
    /// earlier queue, if any.
    pub fn subscribe(&self, partition: u32, applied: u64) -> mpsc::Receiver<FedMessage> {
        let (queue, messages) = mpsc::channel(QUEUED_MESSAGES);
        let next = applied + 1;
        let feed = Feed {
            queue,
            next,
            consumer: 0,
        };
        self.lock().insert(partition, feed);
        self.bump();
        messages
    }

    /// Stops feeding `partition`.
    pub fn unsubscribe(&self, partition: u32) {
        if self.lock().remove(&partition).is_some() {
            self.bump();
        }
    }

    /// Reads the log for the partitions subscribed, until the node stops the task.
    pub async fn run(self: Arc<Self>) {
        let mut changed = self.changed.subscribe();
        let mut consumer = 0;
        // Consumers in a row the stall check replaced before their first delivery.
        let mut fruitless = 0u32;
        loop {
            changed.borrow_and_update();
            consumer += 1;
            let (partitions, from) = {
                let mut feeds = self.lock();
                let from = feeds.values().map(|f| f.next).min();
                for feed in feeds.values_mut() {
                    feed.consumer = consumer;
                }
                (feeds.keys().copied().collect::<Vec<u32>>(), from)
            };
            let Some(from) = from else {
                if changed.changed().await.is_err() {
                    return;
                }
                continue;
            };
            let mut reader = match self.log.read_from(&partitions, from - 1).await {
                Ok(reader) => reader,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the log; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            let first_wait = (STALL_CHECK * 2u32.pow(fruitless.min(8))).min(STALL_PATIENCE_MAX);
            let mut delivered = false;
            let ended = loop {
                let wait = if delivered { STALL_CHECK } else { first_wait };
                let next = tokio::select! {
                    _ = changed.changed() => break Ended::Changed,
                    next = tokio::time::timeout(wait, reader.next()) => next,
                };
                match next {
                    Err(_) => {
                        if self.stalled(&partitions, consumer).await {
                            tracing::warn!(
                                waited_s = wait.as_secs(),
                                "the log holds more than its reader delivers; reading it again"
                            );
                            break Ended::Stalled { delivered };
                        }
                    }
                    Ok(None) => break Ended::Failed,
                    Ok(Some(Err(e))) => {
                        tracing::warn!(error = %e, "reading the log; reading it again");
                        break Ended::Failed;
                    }
                    Ok(Some(Ok(message))) => {
                        delivered = true;
                        self.hand_out(message, consumer).await;
                    }
                }
            };
            // Dropped first, so that it pulls nothing more meanwhile.
            drop(reader);
            fruitless = match ended {
                Ended::Stalled { delivered: false } => fruitless + 1,
                _ => 0,
            };
            if ended == Ended::Failed {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }

    /// Queues `message`, read by `consumer`, for each partition it holds that `consumer`
    /// reads for and that needs it.
    async fn hand_out(&self, message: LogMessage, consumer: u64) {
        for partition in message.partitions {
            let queue = {
                let mut feeds = self.lock();
                match feeds.get_mut(&partition) {
                    Some(feed) if feed.needs(consumer, message.seq) => {
                        feed.next = message.seq + 1;
                        feed.queue.clone()
                    }
                    _ => continue,
                }
            };
            // A task that ended (its partition stopped or failed) left its queue: the
            // partition subscribes again from its own position when it starts over.
            let _ = queue.send((message.seq, message.payload.clone())).await;
        }
    }

    /// Whether the log holds messages of `partitions` that `consumer` reads for and did not
    /// hand out (the consumer, idle, then delivers nothing of them). A partition subscribed
    /// since is not counted: the change makes the consumer again anyway. A log that does
    /// not answer says nothing.
    async fn stalled(&self, partitions: &[u32], consumer: u64) -> bool {
        let Ok(last) = self.log.last_sequences(partitions).await else {
            return false;
        };
        let feeds = self.lock();
        last.iter()
            .any(|(p, &last)| feeds.get(p).is_some_and(|feed| feed.needs(consumer, last)))
    }
}
