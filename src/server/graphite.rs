//! Graphite plaintext over TCP and UDP: sockets and line splitting. Parsing is
//! [`crate::ingest::graphite`]; a bad line is counted under its reason and the stream goes
//! on; a connection is never dropped for its content, only for sending nothing for
//! [`super::Limits::graphite_idle_timeout`], or at the connection limit for being the one idle
//! longest when a new one arrives ([`super::idle_slots`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;

use super::idle_slots::ConnectionSlot;
use super::refusal_log::RefusalLog;
use super::stats::{Protocol, Timeout};
use super::udp::{Datagram, UdpReader};
use super::State;
use crate::ingest::graphite::{parse_line, MAX_LINE};
use crate::ingest::report::IngestReport;
use crate::ingest::sink::Sink;

/// Bytes read from a socket at a time; also the largest UDP datagram taken.
const READ_BUFFER: usize = 64 * 1024;
/// At shutdown, a connection keeps reading what its client already sent for at most this
/// long, stopping earlier at the first pause of [`DRAIN_PAUSE`].
const DRAIN_TIME: Duration = Duration::from_secs(5);
/// See [`DRAIN_TIME`].
const DRAIN_PAUSE: Duration = Duration::from_millis(200);

/// Accepts connections until `shutdown` flips, then waits for the open ones to drain. One
/// over [`super::Limits::graphite_max_connections`] takes the slot of the connection idle
/// longest, which is closed.
pub(crate) async fn serve_tcp(
    listener: TcpListener,
    state: Arc<State>,
    shutdown: watch::Receiver<bool>,
) {
    let limit = (Protocol::Graphite, state.limits.graphite_max_connections);
    super::accept_loop(
        listener,
        (&state.stats, &state.allowlists),
        limit,
        shutdown.clone(),
        drop,
        |stream, slot| {
            let (state, shutdown) = (Arc::clone(&state), shutdown.clone());
            async move { connection(stream, &state, shutdown, slot).await }
        },
    )
    .await;
}

/// One TCP stream: lines split on `\n` (a trailing `\r` is the parser's business), each
/// parsed and queued, the batch written after every read. Closed when the client closes it,
/// sends nothing for the idle timeout, is the one idle longest when a connection arrives at
/// the limit (`slot`), or at shutdown once drained.
async fn connection(
    mut stream: TcpStream,
    state: &State,
    mut shutdown: watch::Receiver<bool>,
    slot: ConnectionSlot,
) {
    let mut sink = state.sink();
    let mut lines = LineSplitter::default();
    let mut buf = vec![0u8; READ_BUFFER];
    let mut drain_until: Option<Instant> = None;
    let idle = state.limits.graphite_idle_timeout;
    let mut refusals = stream
        .peer_addr()
        .ok()
        .map(|peer| RefusalWatch::new(&state.stats.refusal_log, peer));
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
                _ = slot.evicted() => {
                    tracing::debug!("graphite connection idle longest at the connection limit: closing it");
                    0
                }
            },
        };
        if n == 0 {
            break;
        }
        slot.touch();
        let now = sink.now();
        lines.feed(&buf[..n], |number, line| {
            ingest_line(&mut sink, number, line, now);
            if let Some(watch) = &mut refusals {
                watch.check(sink.report(), Some(line.unwrap_or(b"")));
            }
        });
        if let Err(e) = sink.flush_behind().await {
            tracing::error!(error = %e, "graphite write failed");
        }
        if let Some(watch) = &mut refusals {
            watch.check(sink.report(), None);
        }
    }
    let now = sink.now();
    lines.finish(|number, line| ingest_line(&mut sink, number, line, now));
    match sink.finish().await {
        Ok(report) => {
            if let Some(watch) = &mut refusals {
                watch.check(&report, None);
            }
        }
        Err(e) => tracing::error!(error = %e, "graphite write failed"),
    }
}

/// Bytes of a refused line a warning quotes.
const EXAMPLE_BYTES: usize = 200;

/// Notices the refusals a connection's report gains and hands each reason's new ones to the
/// server's [`RefusalLog`], which warns at most once a minute per reason.
struct RefusalWatch<'a> {
    log: &'a RefusalLog,
    peer: SocketAddr,
    /// The report's refusals when last checked: in all, and per reason.
    total: u64,
    seen: BTreeMap<&'static str, u64>,
}

impl<'a> RefusalWatch<'a> {
    fn new(log: &'a RefusalLog, peer: SocketAddr) -> Self {
        RefusalWatch {
            log,
            peer,
            total: 0,
            seen: BTreeMap::new(),
        }
    }

    /// Warns about the refusals `report` gained since the last check: `line` is the line
    /// just read, the example when the refusal came from it; without one (refused when the
    /// batch was written) the example is the report's first kept refusal of that reason.
    fn check(&mut self, report: &IngestReport, line: Option<&[u8]>) {
        let total = report.rejected_total();
        if total == self.total {
            return;
        }
        self.total = total;
        for (&reason, &n) in &report.rejected {
            let before = self.seen.insert(reason, n).unwrap_or(0);
            if n <= before {
                continue;
            }
            let example = match line {
                Some(line) => {
                    String::from_utf8_lossy(&line[..line.len().min(EXAMPLE_BYTES)]).into_owned()
                }
                None => (report.errors.iter())
                    .find(|e| e.reason == reason)
                    .map_or_else(String::new, |e| format!("line {}: {}", e.line, e.message)),
            };
            self.log.refused(reason, n - before, self.peer, &example);
        }
    }
}

/// Datagrams until `shutdown` flips; each datagram holds whole lines. A task reads the
/// socket into a bounded queue ([`UdpReader`]), so reading never waits for a write; this
/// one writes what queued up. A line that says "now" (`-1`) gets the time its datagram
/// arrived. Refused lines are warned about as on TCP, naming the datagram's sender.
pub(crate) async fn serve_udp(
    socket: UdpSocket,
    state: Arc<State>,
    shutdown: watch::Receiver<bool>,
) {
    let mut reader = UdpReader::start(
        socket,
        Arc::clone(&state),
        shutdown,
        super::allowlist::Listener::GraphiteUdp,
    );
    let mut sink = state.sink();
    let mut taken = Vec::new();
    let unknown = SocketAddr::from(([0, 0, 0, 0], 0));
    let mut refusals = RefusalWatch::new(&state.stats.refusal_log, unknown);
    while reader.next(&mut taken).await {
        for Datagram {
            arrived,
            peer,
            bytes,
        } in taken.drain(..)
        {
            refusals.peer = peer;
            let mut lines = LineSplitter::default();
            let mut ingest = |number, line: Result<&[u8], ()>| {
                ingest_line(&mut sink, number, line, arrived);
                refusals.check(sink.report(), Some(line.unwrap_or(b"")));
            };
            lines.feed(&bytes, &mut ingest);
            lines.finish(&mut ingest);
        }
        // Refusals at the write (the last datagram's sender named for them).
        if let Err(e) = sink.flush_behind().await {
            tracing::error!(error = %e, "graphite write failed");
        }
        refusals.check(sink.report(), None);
    }
    reader.finish().await;
    match sink.finish().await {
        Ok(report) => refusals.check(&report, None),
        Err(e) => tracing::error!(error = %e, "graphite write failed"),
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
pub(crate) struct LineSplitter {
    partial: Vec<u8>,
    overlong: bool,
    number: usize,
}

impl LineSplitter {
    /// Hands every complete line in `chunk` (with what earlier chunks left) to `each`, with its
    /// 1-based number; `Err(())` stands for a line that was too long.
    pub(crate) fn feed(
        &mut self,
        mut chunk: &[u8],
        mut each: impl FnMut(usize, Result<&[u8], ()>),
    ) {
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
    pub(crate) fn finish(&mut self, mut each: impl FnMut(usize, Result<&[u8], ()>)) {
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
