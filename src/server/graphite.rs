//! Graphite plaintext over TCP and UDP: sockets and line splitting. Parsing is
//! [`crate::ingest::graphite`]; a bad line is counted under its reason and the stream goes
//! on; a connection is never dropped for its content, only for sending nothing for
//! [`super::Limits::graphite_idle_timeout`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;

use super::sink::Sink;
use super::stats::{Protocol, Timeout};
use super::State;
use crate::ingest::graphite::{parse_line, MAX_LINE};
use crate::time::Timestamp;

/// Bytes read from a socket at a time; also the largest UDP datagram taken.
const READ_BUFFER: usize = 64 * 1024;
/// At shutdown, a connection keeps reading what its client already sent for at most this
/// long, stopping earlier at the first pause of [`DRAIN_PAUSE`].
const DRAIN_TIME: Duration = Duration::from_secs(5);
/// See [`DRAIN_TIME`].
const DRAIN_PAUSE: Duration = Duration::from_millis(200);

/// Accepts connections until `shutdown` flips, then waits for the open ones to drain. One
/// over [`super::Limits::graphite_max_connections`] is closed at once.
pub async fn serve_tcp(listener: TcpListener, state: Arc<State>, shutdown: watch::Receiver<bool>) {
    let limit = (Protocol::Graphite, state.limits.graphite_max_connections);
    super::accept_loop(
        listener,
        &state.stats,
        limit,
        shutdown.clone(),
        drop,
        |stream| {
            let (state, shutdown) = (Arc::clone(&state), shutdown.clone());
            async move { connection(stream, &state, shutdown).await }
        },
    )
    .await;
}

/// One TCP stream: lines split on `\n` (a trailing `\r` is the parser's business), each
/// parsed and queued, the batch written after every read. Closed when the client closes it,
/// sends nothing for the idle timeout, or at shutdown once drained.
async fn connection(mut stream: TcpStream, state: &State, mut shutdown: watch::Receiver<bool>) {
    let mut sink = state.sink();
    let mut lines = LineSplitter::default();
    let mut buf = vec![0u8; READ_BUFFER];
    let mut drain_until: Option<Instant> = None;
    let idle = state.limits.graphite_idle_timeout;
    loop {
        let n = match drain_until {
            // Shutting down: take what the client already sent, until it pauses or the
            // drain time is up.
            Some(deadline) => {
                let pause = DRAIN_PAUSE.min(deadline.saturating_duration_since(Instant::now()));
                match tokio::time::timeout(pause, stream.read(&mut buf)).await {
                    Ok(Ok(n)) => n,
                    _ => 0,
                }
            }
            None => tokio::select! {
                read = tokio::time::timeout(idle, stream.read(&mut buf)) => match read {
                    Ok(Ok(n)) => n,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "graphite connection read failed");
                        0
                    }
                    Err(_) => {
                        tracing::debug!("graphite connection idle: closing it");
                        state.stats.count_timed_out(Protocol::Graphite, Timeout::Idle);
                        0
                    }
                },
                _ = shutdown.changed() => {
                    drain_until = Some(Instant::now() + DRAIN_TIME);
                    continue;
                }
            },
        };
        if n == 0 {
            break;
        }
        let now = sink.now();
        lines.feed(&buf[..n], |number, line| {
            ingest_line(&mut sink, number, line, now)
        });
        if let Err(e) = sink.flush().await {
            tracing::error!(error = %e, "graphite write failed");
        }
    }
    let now = sink.now();
    lines.finish(|number, line| ingest_line(&mut sink, number, line, now));
    if let Err(e) = sink.finish().await {
        tracing::error!(error = %e, "graphite write failed");
    }
}

/// Bytes the UDP reader holds while the write before them waits (a cluster node's publish
/// during a NATS leader election takes a second or two), so the kernel's socket buffer, a
/// few hundred KiB, does not overflow meanwhile. Each datagram is charged its length plus
/// [`UDP_DATAGRAM_COST`], so tiny ones cannot queue without bound (empty ones are skipped). Past it,
/// datagrams are dropped and their lines counted as `udp_overflow`: UDP has no way to slow
/// its sender.
const UDP_QUEUE_BYTES: usize = 32 * 1024 * 1024;
/// What a queued datagram costs beyond its bytes: its allocation, its time and its slot.
const UDP_DATAGRAM_COST: usize = 64;
/// The socket receive buffer asked for (the kernel caps it at `net.core.rmem_max`): room
/// for the reader's pauses on a loaded machine.
const UDP_RECEIVE_BUFFER: usize = 4 * 1024 * 1024;
/// Datagrams folded into one write at most: those that queued up during the last one.
const UDP_DATAGRAMS_PER_WRITE: usize = 256;

/// Datagrams until `shutdown` flips; each datagram holds whole lines. One task reads the
/// socket into a queue of at most [`UDP_QUEUE_BYTES`], so reading never waits for a write;
/// this one writes what queued up, up to [`UDP_DATAGRAMS_PER_WRITE`] datagrams at a time.
/// A line that says "now" (`-1`) gets the time its datagram arrived.
pub async fn serve_udp(socket: UdpSocket, state: Arc<State>, shutdown: watch::Receiver<bool>) {
    if let Err(e) = rustix::net::sockopt::set_socket_recv_buffer_size(&socket, UDP_RECEIVE_BUFFER) {
        tracing::debug!(error = %e, "graphite udp receive buffer not enlarged");
    }
    let queue = Arc::new(UdpQueue::default());
    let (sender, mut datagrams) = tokio::sync::mpsc::unbounded_channel::<Datagram>();
    let reader = tokio::spawn(read_datagrams(
        socket,
        sender,
        Arc::clone(&queue),
        Arc::clone(&state),
        shutdown,
    ));
    let mut sink = state.sink();
    let mut taken = Vec::with_capacity(UDP_DATAGRAMS_PER_WRITE);
    while let Some(first) = datagrams.recv().await {
        taken.push(first);
        while taken.len() < UDP_DATAGRAMS_PER_WRITE {
            match datagrams.try_recv() {
                Ok(datagram) => taken.push(datagram),
                Err(_) => break,
            }
        }
        queue.count_dropped(&state);
        for Datagram { arrived, bytes } in taken.drain(..) {
            queue.bytes.fetch_sub(charge(&bytes), Ordering::Relaxed);
            let mut lines = LineSplitter::default();
            lines.feed(&bytes, |number, line| {
                ingest_line(&mut sink, number, line, arrived)
            });
            lines.finish(|number, line| ingest_line(&mut sink, number, line, arrived));
        }
        if let Err(e) = sink.flush().await {
            tracing::error!(error = %e, "graphite write failed");
        }
    }
    let _ = reader.await;
    queue.count_dropped(&state);
    if let Err(e) = sink.finish().await {
        tracing::error!(error = %e, "graphite write failed");
    }
}

/// A datagram queued, with the time it arrived.
struct Datagram {
    arrived: Timestamp,
    bytes: Vec<u8>,
}

/// What a datagram of `bytes` is charged against [`UDP_QUEUE_BYTES`].
fn charge(bytes: &[u8]) -> usize {
    bytes.len() + UDP_DATAGRAM_COST
}

/// What the UDP reader and writer share.
#[derive(Default)]
struct UdpQueue {
    /// Charges of the datagrams queued, not yet written ([`charge`]).
    bytes: AtomicUsize,
    /// Lines of the datagrams dropped since the writer last looked.
    dropped_lines: AtomicU64,
}

impl UdpQueue {
    /// Counts the lines dropped since the last call under `udp_overflow`, and says so.
    fn count_dropped(&self, state: &State) {
        let dropped = self.dropped_lines.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            state.stats.count_rejected("udp_overflow", dropped);
            tracing::warn!(
                lines = dropped,
                "graphite udp datagrams dropped: the writes fell {UDP_QUEUE_BYTES} bytes behind"
            );
        }
    }
}

/// Reads datagrams into `sender` until `shutdown` flips (then drops it, so the writer ends
/// after what is queued).
async fn read_datagrams(
    socket: UdpSocket,
    sender: tokio::sync::mpsc::UnboundedSender<Datagram>,
    queue: Arc<UdpQueue>,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; READ_BUFFER];
    loop {
        let n = tokio::select! {
            received = socket.recv_from(&mut buf) => match received {
                Ok((n, _)) => n,
                Err(e) => {
                    tracing::debug!(error = %e, "graphite udp receive failed");
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
        if queue.bytes.fetch_add(cost, Ordering::Relaxed) + cost > UDP_QUEUE_BYTES {
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
            bytes: bytes.to_vec(),
        };
        if sender.send(datagram).is_err() {
            break;
        }
    }
}

fn ingest_line(sink: &mut Sink, number: usize, line: Result<&[u8], ()>, now: i64) {
    let line = match line {
        Ok(line) => line,
        Err(()) => {
            sink.reject(
                number,
                "line_too_long",
                format!("line longer than {MAX_LINE} bytes"),
            );
            return;
        }
    };
    match parse_line(line) {
        Ok(Some(parsed)) => {
            sink.push(
                &parsed.series,
                parsed.ts.unwrap_or(now),
                parsed.value,
                number,
            );
        }
        Ok(None) => {}
        Err(e) => sink.reject(number, e.as_str(), e.to_string()),
    }
}

/// True when a line (without its `\n`) is longer than [`MAX_LINE`], not counting a `\r`.
fn too_long(line: &[u8]) -> bool {
    line.len() > MAX_LINE + usize::from(line.last() == Some(&b'\r'))
}

/// Splits a byte stream into lines across reads, holding at most [`MAX_LINE`] bytes of an
/// unfinished line: a longer line is reported once as too long and skipped to its end, so
/// a client cannot make the server buffer without bound.
#[derive(Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
    overlong: bool,
    number: usize,
}

impl LineSplitter {
    /// Hands every complete line in `chunk` (with what earlier chunks left) to `each`, with its
    /// 1-based number; `Err(())` stands for a line that was too long.
    pub fn feed(&mut self, mut chunk: &[u8], mut each: impl FnMut(usize, Result<&[u8], ()>)) {
        while let Some(end) = chunk.iter().position(|&b| b == b'\n') {
            let (line, rest) = (&chunk[..end], &chunk[end + 1..]);
            chunk = rest;
            self.number += 1;
            if self.overlong {
                self.overlong = false;
                self.partial.clear();
                each(self.number, Err(()));
            } else if self.partial.is_empty() {
                if too_long(line) {
                    each(self.number, Err(()));
                } else {
                    each(self.number, Ok(line));
                }
            } else {
                self.partial.extend_from_slice(line);
                let whole = std::mem::take(&mut self.partial);
                if too_long(&whole) {
                    each(self.number, Err(()));
                } else {
                    each(self.number, Ok(&whole));
                }
            }
        }
        if !self.overlong {
            // One byte of slack for the `\r` of a `\r\n` ending still to come.
            if self.partial.len() + chunk.len() > MAX_LINE + 1 {
                self.overlong = true;
                self.partial.clear();
            } else {
                self.partial.extend_from_slice(chunk);
            }
        }
    }

    /// The last line of a stream that did not end with `\n`.
    pub fn finish(&mut self, mut each: impl FnMut(usize, Result<&[u8], ()>)) {
        if self.overlong {
            self.number += 1;
            each(self.number, Err(()));
        } else if !self.partial.is_empty() {
            self.number += 1;
            let last = std::mem::take(&mut self.partial);
            each(self.number, Ok(&last));
        }
        self.overlong = false;
    }
}

#[cfg(test)]
mod tests {
    use super::{LineSplitter, MAX_LINE};

    fn split(chunks: &[&[u8]]) -> Vec<(usize, Result<Vec<u8>, ()>)> {
        let mut splitter = LineSplitter::default();
        let mut out = Vec::new();
        for chunk in chunks {
            splitter.feed(chunk, |n, line| out.push((n, line.map(<[u8]>::to_vec))));
        }
        splitter.finish(|n, line| out.push((n, line.map(<[u8]>::to_vec))));
        out
    }

    #[test]
    fn lines_split_across_reads_and_long_lines_are_refused_without_buffering() {
        assert_eq!(
            split(&[b"a 1 2\r\nb 3", b" 4\nc 5 6"]),
            vec![
                (1, Ok(b"a 1 2\r".to_vec())),
                (2, Ok(b"b 3 4".to_vec())),
                (3, Ok(b"c 5 6".to_vec()))
            ]
        );
        let longest = vec![b'x'; MAX_LINE];
        let mut with_cr = longest.clone();
        with_cr.extend_from_slice(b"\r\n");
        assert_eq!(
            split(&[&with_cr]),
            vec![(1, Ok([longest.as_slice(), b"\r"].concat()))]
        );
        let too_long = vec![b'x'; MAX_LINE + 10];
        assert_eq!(
            split(&[&too_long[..100], &too_long[100..], b"\nok 1 2\n"]),
            vec![(1, Err(())), (2, Ok(b"ok 1 2".to_vec()))]
        );
    }
}
