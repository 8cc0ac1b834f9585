//! The reading side of a UDP listener (Graphite, StatsD): a task reads the socket into a
//! bounded queue in memory, so reading never waits for a write. A cluster node's write is a
//! publish awaiting JetStream's acknowledgement (a second or two during a leader election);
//! read inline, the kernel's socket buffer, a few hundred KiB, overflowed meanwhile and
//! datagrams were lost without a count.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::allowlist::Listener;
use super::State;
use crate::time::Timestamp;

/// Bytes queued at most. Each datagram is charged its length plus [`DATAGRAM_COST`], so
/// tiny ones cannot queue without bound (empty ones are skipped). Past it, datagrams are
/// dropped and their lines counted as `udp_overflow`: UDP has no way to slow its sender.
const QUEUE_BYTES: usize = 32 * 1024 * 1024;
/// What a queued datagram costs beyond its bytes: its allocation, its time and its slot.
const DATAGRAM_COST: usize = 64;
/// The socket receive buffer asked for (the kernel caps it at `net.core.rmem_max`): room
/// for the reader's pauses on a loaded machine.
const RECEIVE_BUFFER: usize = 4 * 1024 * 1024;
/// Largest datagram taken (UDP's own limit is just under 64 KiB).
const DATAGRAM: usize = 64 * 1024;
/// Datagrams handed over at most per [`UdpReader::next`]: those that queued up during the
/// last write, folded into the next one.
const PER_WRITE: usize = 256;

/// A datagram, with the time it arrived (a line without a time of its own gets it) and its
/// sender (named in the warnings about refused lines).
pub(crate) struct Datagram {
    pub arrived: Timestamp,
    pub peer: SocketAddr,
    pub bytes: Vec<u8>,
}

/// The queue a listener's writer takes datagrams from.
pub(crate) struct UdpReader {
    datagrams: mpsc::UnboundedReceiver<Datagram>,
    queue: Arc<Queue>,
    task: JoinHandle<()>,
    state: Arc<State>,
    /// The listener: named in the overflow warning, and whose allowlist applies.
    listener: Listener,
}

/// What the reading task and the writer share.
#[derive(Default)]
struct Queue {
    /// Charges of the datagrams queued, not yet taken ([`charge`]).
    bytes: AtomicUsize,
    /// Lines of the datagrams dropped since the writer last looked.
    dropped_lines: AtomicU64,
}

impl UdpReader {
    /// Starts reading `socket` until `shutdown` flips, dropping datagrams from outside
    /// `listener`'s allowlist.
    pub(crate) fn start(
        socket: UdpSocket,
        state: Arc<State>,
        shutdown: watch::Receiver<bool>,
        listener: Listener,
    ) -> UdpReader {
        let protocol = listener.as_str();
        if let Err(e) = rustix::net::sockopt::set_socket_recv_buffer_size(&socket, RECEIVE_BUFFER) {
            tracing::debug!(error = %e, protocol, "udp receive buffer not enlarged");
        }
        let queue = Arc::new(Queue::default());
        let (sender, datagrams) = mpsc::unbounded_channel();
        let task = tokio::spawn(read(
            socket,
            sender,
            Arc::clone(&queue),
            (Arc::clone(&state), listener),
            shutdown,
        ));
        UdpReader {
            datagrams,
            queue,
            task,
            state,
            listener,
        }
    }

    /// Waits for a datagram, then moves it and those queued behind it (up to
    /// [`PER_WRITE`] in all) into `taken`, and counts the datagrams dropped meanwhile.
    /// False once reading stopped and the queue is empty. Cancel-safe: the one wait is the
    /// channel's.
    pub(crate) async fn next(&mut self, taken: &mut Vec<Datagram>) -> bool {
        let Some(first) = self.datagrams.recv().await else {
            return false;
        };
        taken.push(first);
        while taken.len() < PER_WRITE {
            match self.datagrams.try_recv() {
                Ok(datagram) => taken.push(datagram),
                Err(_) => break,
            }
        }
        let charged: usize = taken.iter().map(|d| charge(&d.bytes)).sum();
        self.queue.bytes.fetch_sub(charged, Ordering::Relaxed);
        self.count_dropped();
        true
    }

    /// Waits for the reading task to end (after `shutdown`), and counts what it dropped.
    pub(crate) async fn finish(mut self) {
        let _ = (&mut self.task).await;
        self.count_dropped();
    }

    /// Counts the lines dropped since the last call under `udp_overflow`, and says so.
    fn count_dropped(&self) {
        let dropped = self.queue.dropped_lines.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            self.state.stats.count_rejected("udp_overflow", dropped);
            tracing::warn!(
                lines = dropped,
                protocol = self.listener.as_str(),
                "udp datagrams dropped: the writes fell {QUEUE_BYTES} bytes behind"
            );
        }
    }
}

/// What a datagram of `bytes` is charged against [`QUEUE_BYTES`].
fn charge(bytes: &[u8]) -> usize {
    bytes.len() + DATAGRAM_COST
}

/// Reads datagrams into `sender` (those from peers `listener`'s allowlist admits) until
/// `shutdown` flips (then drops it, so the writer ends after what is queued).
async fn read(
    socket: UdpSocket,
    sender: mpsc::UnboundedSender<Datagram>,
    queue: Arc<Queue>,
    (state, listener): (Arc<State>, Listener),
    mut shutdown: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; DATAGRAM];
    loop {
        let (n, peer) = tokio::select! {
            received = socket.recv_from(&mut buf) => match received {
                Ok((n, peer)) if state.allowlists.admits(listener, peer.ip()) => (n, peer),
                Ok(_) => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "udp receive failed");
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let bytes = &buf[..n];
        if bytes.is_empty() {
            continue;
        }
        let cost = charge(bytes);
        if queue.bytes.fetch_add(cost, Ordering::Relaxed) + cost > QUEUE_BYTES {
            queue.bytes.fetch_sub(cost, Ordering::Relaxed);
            let lines = bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count();
            queue
                .dropped_lines
                .fetch_add(lines as u64, Ordering::Relaxed);
            continue;
        }
        let datagram = Datagram {
            arrived: state.now(),
            peer,
            bytes: bytes.to_vec(),
        };
        if sender.send(datagram).is_err() {
            break;
        }
    }
}
