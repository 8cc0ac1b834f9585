//! HTTP connections: the accept loop with its cap on open connections, the header, body and
//! idle timeouts, and the drain at shutdown. The routes are [`super::http::app`], a plain
//! `Router` served here one hyper HTTP/1 connection at a time.
//!
//! Each connection's task watches its own socket ([`Watched`] stamps every byte read or
//! written) and the requests in progress ([`Activity`]), and closes the connection when:
//! - **idle**: no byte moved either way for [`Limits::http_idle_timeout`] while no request was
//!   being handled (waiting for a first or next request, or a client not reading its answer);
//! - **header**: a request's head, from its first byte, took longer than
//!   [`Limits::http_header_timeout`] (a client trickling headers one byte at a time);
//! - **body**: a request's body had not arrived in full [`Limits::http_body_timeout`] after its
//!   head ([`TimedBody`]; the handler sees a body error and answers, then the connection
//!   closes);
//! - **evicted**: at [`Limits::http_max_connections`] a new connection took its slot, it
//!   being the one idle longest ([`super::idle_slots`]: not handling a request, and without an
//!   accepted token before one with). An answer still being written, or a request whose head
//!   arrived meanwhile, is finished first; a head still arriving is not waited for.
//!
//! With TLS ([`super::tls`]), the handshake must finish within the header timeout; a client
//! that speaks plain HTTP to the TLS port is answered 400 in plain text, saying to use
//! `https://`, and closed.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

use super::idle_slots::ConnectionSlot;
use super::stats::{Protocol, ServerStats, Timeout};
use super::tls::ServerTls;
use super::{Limits, State};

/// Accepts HTTP connections until `shutdown` flips, then lets open ones finish their request
/// in progress (idle ones close at once) and waits for them. One over
/// [`Limits::http_max_connections`] takes the slot of the one idle longest; only when every
/// one is handling a request is it answered 503 and closed.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    state: Arc<State>,
    shutdown: watch::Receiver<bool>,
) {
    let limit = state.limits.http_max_connections;
    super::accept_loop(
        listener,
        (&state.stats, &state.allowlists),
        (Protocol::Http, limit),
        shutdown.clone(),
        |stream| refuse(stream, limit),
        |stream, slot| {
            let (app, state, shutdown) = (app.clone(), Arc::clone(&state), shutdown.clone());
            async move {
                match state.tls.clone() {
                    None => connection(stream, app, &state, shutdown, slot).await,
                    Some(tls) => {
                        let shaken = tokio::select! {
                            shaken = handshake(stream, &tls, &state.limits) => shaken,
                            _ = slot.evicted() => None,
                        };
                        if let Some(stream) = shaken {
                            connection(stream, app, &state, shutdown, slot).await;
                        }
                    }
                }
            }
        },
    )
    .await;
}

/// Answers 503 on a connection over the limit (every open one handling a request), as far
/// as the socket takes it without waiting, and closes it. The write goes straight to the socket: tokio's `try_write` would
/// refuse until the reactor has seen the new socket writable.
fn refuse(stream: TcpStream, limit: usize) {
    let body = format!(
        "{{\"error\":\"too many open HTTP connections (limit {limit}, --http-max-connections); \
         retry shortly\"}}"
    );
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if let Ok(mut stream) = stream.into_std() {
        // Non-blocking still: a full socket buffer loses the answer, never stalls the loop.
        let _ = std::io::Write::write(&mut stream, answer.as_bytes());
    }
}

/// The TLS handshake on a new connection, within the header timeout; `None` (the connection
/// closed, the failure counted) when it fails or the client speaks plain HTTP.
async fn handshake(
    stream: TcpStream,
    tls: &ServerTls,
    limits: &Limits,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let counters = &tls.counters;
    let accepted = tokio::time::timeout(limits.http_header_timeout, async {
        // A TLS connection opens with a handshake record (content type 22); a letter is a
        // plain HTTP request line.
        let mut first = [0u8; 1];
        match stream.peek(&mut first).await {
            Ok(1) if first[0] != 0x16 => {
                counters.plain_http.fetch_add(1, Ordering::Relaxed);
                refuse_plain_http(stream).await;
                return None;
            }
            Ok(1) => {}
            _ => return None,
        }
        match tls.acceptor().accept(stream).await {
            Ok(stream) => Some(stream),
            Err(e) => {
                counters.handshake_failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "TLS handshake failed");
                None
            }
        }
    })
    .await;
    accepted.unwrap_or_else(|_| {
        counters.handshake_failed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("TLS handshake timed out");
        None
    })
}

/// Answers a plain HTTP request on the TLS port with a plain 400 saying so, and closes.
async fn refuse_plain_http(mut stream: TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = "{\"error\":\"this port speaks HTTPS (TLS): use https://\"}";
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Serves one connection until the client closes it, a timeout closes it, or shutdown or
/// its eviction (`slot`) has let its request in progress finish. Each request carries the
/// slot's [`super::idle_slots::SlotHandle`], through which the credential check marks the
/// connection trusted.
async fn connection<S: AsyncRead + AsyncWrite + Send + Unpin + 'static>(
    stream: S,
    app: Router,
    state: &State,
    mut shutdown: watch::Receiver<bool>,
    slot: ConnectionSlot,
) {
    let limits = &state.limits;
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: Arc::clone(&activity),
    });
    let router = TowerToHyperService::new(app);
    let service = {
        let activity = Arc::clone(&activity);
        let stats = Arc::clone(&state.stats);
        let body_timeout = limits.http_body_timeout;
        let handle = slot.handle();
        service_fn(move |request: hyper::Request<Incoming>| {
            let handling = (activity.handling(), handle.busy());
            let mut request =
                request.map(|body| TimedBody::new(body, body_timeout, Arc::clone(&stats)));
            request.extensions_mut().insert(handle.clone());
            let answer = hyper::service::Service::call(&router, request);
            async move {
                let answer: Result<_, Infallible> = answer.await;
                drop(handling);
                answer
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        let deadline = activity.deadline(limits);
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(error = %e, "http connection ended with an error");
                }
                return;
            }
            _ = shutdown.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = slot.evicted(), if !stopping => {
                tracing::debug!("http connection idle longest at the connection limit: closing it");
                if activity.requests.load(Ordering::Relaxed) == 0 {
                    // No request yet, so no answer to finish: closed at once. hyper's graceful
                    // shutdown would wait for the end of a first head that has begun to
                    // arrive, which a client holding the slot never sends (the header
                    // timeout closed it, 30 s later by default).
                    return;
                }
                // hyper closes a connection waiting for its next request head at once, and one
                // still writing an answer (its handler may have returned: the body is sent
                // after) once the answer is out, so no answer is cut short.
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = activity.changed.notified() => {}
            _ = sleep_until(deadline), if deadline.is_some() => {
                if let Some(timeout) = activity.expired(limits, Instant::now()) {
                    tracing::debug!(timeout = timeout.as_str(), "http connection timed out");
                    state.stats.count_timed_out(Protocol::Http, timeout);
                    return;
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    if let Some(deadline) = deadline {
        tokio::time::sleep_until(deadline.into()).await;
    }
}

/// Stands for "no head in progress" in [`Activity::head_started`].
const NONE: u64 = u64::MAX;

/// What one connection is doing, for its timeouts. Times are milliseconds since `start`.
/// Everything here changes inside the connection's own task; the atomics only make it `Sync`.
/// A later `last_io` only moves a deadline later, which the task finds when its timer fires;
/// a head starting and a handler starting or ending change which deadline applies, so they
/// wake the task (`changed`).
struct Activity {
    start: Instant,
    changed: Notify,
    /// The last byte read or written, or the end of the last request's handling.
    last_io: AtomicU64,
    /// The first byte read while no request was being handled: a head has begun.
    head_started: AtomicU64,
    /// Requests whose handler is running (head received, answer not yet produced).
    handlers: AtomicUsize,
    /// Requests whose head was received on the connection, in all.
    requests: AtomicUsize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            changed: Notify::new(),
            last_io: AtomicU64::new(0),
            head_started: AtomicU64::new(NONE),
            handlers: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn at(&self, millis: u64) -> Instant {
        self.start + Duration::from_millis(millis)
    }

    fn on_read(&self) {
        let now = self.now();
        self.last_io.store(now, Ordering::Relaxed);
        if self.handlers.load(Ordering::Relaxed) == 0 {
            let started =
                self.head_started
                    .compare_exchange(NONE, now, Ordering::Relaxed, Ordering::Relaxed);
            if started.is_ok() {
                self.changed.notify_one();
            }
        }
    }

    fn on_write(&self) {
        self.last_io.store(self.now(), Ordering::Relaxed);
    }

    /// A head arrived: its handler runs until the guard drops.
    fn handling(self: &Arc<Self>) -> Handling {
        self.handlers.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.head_started.store(NONE, Ordering::Relaxed);
        self.changed.notify_one();
        Handling(Arc::clone(self))
    }

    /// When the connection next needs a look: `None` while a handler runs (the body
    /// timeout is [`TimedBody`]'s, and a handler may take its time).
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        if self.handlers.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let idle = self.at(self.last_io.load(Ordering::Relaxed)) + limits.http_idle_timeout;
        Some(match self.head_started.load(Ordering::Relaxed) {
            NONE => idle,
            started => idle.min(self.at(started) + limits.http_header_timeout),
        })
    }

    /// Which timeout, if any, has passed at `now`.
    fn expired(&self, limits: &Limits, now: Instant) -> Option<Timeout> {
        if self.handlers.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let started = self.head_started.load(Ordering::Relaxed);
        if started != NONE && now >= self.at(started) + limits.http_header_timeout {
            return Some(Timeout::Header);
        }
        let idle = self.at(self.last_io.load(Ordering::Relaxed)) + limits.http_idle_timeout;
        (now >= idle).then_some(Timeout::Idle)
    }
}

/// A request being handled ([`Activity::handling`]).
struct Handling(Arc<Activity>);

impl Drop for Handling {
    fn drop(&mut self) {
        self.0.on_write();
        self.0.handlers.fetch_sub(1, Ordering::Relaxed);
        self.0.changed.notify_one();
    }
}

/// A socket (plain or TLS) that stamps its connection's [`Activity`] on every byte moved.
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.on_read();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.on_write();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.on_write();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The body-timeout error a handler sees when reading the body.
#[derive(Debug)]
pub(crate) struct BodyTimeout(Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive in full within {}s of its headers \
             (--http-body-timeout)",
            self.0.as_secs_f64()
        )
    }
}

impl std::error::Error for BodyTimeout {}

/// A request body that fails with [`BodyTimeout`] when it has not ended by its deadline.
struct TimedBody {
    inner: Incoming,
    deadline: Instant,
    limit: Duration,
    /// Armed on the first wait for data, so a request without a body costs no timer.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    stats: Arc<ServerStats>,
    expired: bool,
}

impl TimedBody {
    fn new(inner: Incoming, limit: Duration, stats: Arc<ServerStats>) -> TimedBody {
        TimedBody {
            inner,
            deadline: Instant::now() + limit,
            limit,
            timer: None,
            stats,
            expired: false,
        }
    }
}

impl hyper::body::Body for TimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.expired {
            return Poll::Ready(Some(Err(BodyTimeout(this.limit).into())));
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline.into())));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        this.expired = true;
        this.stats.count_timed_out(Protocol::Http, Timeout::Body);
        tracing::debug!("http request body timed out");
        Poll::Ready(Some(Err(BodyTimeout(this.limit).into())))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
