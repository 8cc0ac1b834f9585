//! `tierdb serve`: the engine behind sockets. Graphite plaintext on TCP and UDP, StatsD on
//! UDP (when asked for), and an HTTP API (Influx line protocol, JSON and Prometheus remote
//! writes, queries, listings, Graphite's `/render` and `/metrics/find` for Grafana,
//! `/metrics`). Every handler reads and writes through one [`Backend`]: a single node's
//! engine ([`LocalBackend`]), or a cluster node, which implements the trait above the
//! server. Every protocol writes through one [`Sink`] per connection or request, the ingest
//! core ([`crate::ingest`]): the server holds the sockets and HTTP, and hands it what it parsed.
//!
//! [`run`] takes already-bound [`Listeners`] and a shutdown future, so tests bind
//! `127.0.0.1:0` and call it directly.

pub mod allowlist;
#[cfg(feature = "cli")]
pub(crate) mod announce;
pub mod auth;
pub(crate) mod backend;
pub(crate) mod dashboard;
mod delete_api;
pub(crate) mod error;
pub(crate) mod graphite;
pub(crate) mod http;
mod http_conn;
mod idle_slots;
mod influx_api;
pub(crate) mod metrics;
mod otlp_api;
mod params;
mod prometheus_api;
pub(crate) mod read_report;
mod refusal_log;
mod render_api;
pub(crate) mod stats;
pub(crate) mod statsd;
mod tags_api;
pub mod tls;
mod udp;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, UdpSocket};

use crate::engine::Engine;
use crate::error::Error;
use crate::error::Result;
use crate::ingest::cumulative::HistogramCounters;
use crate::ingest::otlp::{Streams, MAX_STREAM_BYTES};
use crate::ingest::sink::Sink;
pub use backend::{Backend, LocalBackend, ReadOptions};
pub use delete_api::DeleteAnswer;
pub use metrics::render as render_metrics;
pub use read_report::{
    Behind, PartitionLag, ReadReport, BEHIND_HEADER, EXPLICIT_BUCKETS_HEADER, RELATIVE_ERROR_HEADER,
};
pub use stats::ServerStats;
pub use statsd::StatsdListener;

/// How long shutdown waits for open connections and requests before it flushes and exits
/// without them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

/// How long an accept loop pauses after a failed accept (out of file descriptors, say), so
/// it does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// How long a connection that made room by closing the one idle longest waits for that one's
/// slot. The closed one has nothing left to write but what it already received, so this is
/// ample even on a loaded machine; one that waits longer is refused.
const EVICTION_WAIT: Duration = Duration::from_secs(30);

/// Connections the kernel queues on a TCP listener until they are accepted (the kernel caps
/// it at `net.core.somaxconn`). std and tokio use 128, which a burst of clients connecting at
/// once (collectors reconnecting after a restart) overflows while the accept loop waits for
/// a thread: each dropped handshake costs its client a one-second retransmit.
const LISTEN_BACKLOG: u32 = 1024;

/// A TCP listener on `addr` with [`LISTEN_BACKLOG`].
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Bounds that keep one client from making the server grow without limit or holding a
/// connection slot forever. Connections refused at a limit and closed by a timeout are
/// counted in `/metrics` per protocol.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest HTTP request body, bytes (default 64 MiB). Graphite lines are bounded by
    /// [`crate::ingest::graphite::MAX_LINE`].
    pub max_body: usize,
    /// Series the server will register; a new series past it is refused (`series_limit`)
    /// while existing ones keep writing. `None`: no limit.
    pub max_series: Option<usize>,
    /// Open Graphite TCP connections at once (default 1024): each holds a file descriptor and
    /// a task. One more takes the slot of the connection idle longest, which is closed
    /// (counted as evicted), so idle sockets cannot lock a writing collector out.
    pub graphite_max_connections: usize,
    /// A Graphite TCP connection that sends nothing for this long is closed (default 5
    /// minutes; collectd sends every 10 s), so idle sockets cannot hold every slot.
    pub graphite_idle_timeout: Duration,
    /// Open HTTP connections at once (default 1024). One more takes the slot of the
    /// connection idle longest (not handling a request; one that never presented an accepted
    /// token before one that did), which is closed: clients holding slots without a request,
    /// or trickling a head, cannot lock others out. Only when every connection is handling a
    /// request is one more answered 503 and closed, never queued.
    pub http_max_connections: usize,
    /// A request's headers must arrive within this from their first byte (default 30 s), so
    /// a client trickling them (slowloris) cannot hold a slot.
    pub http_header_timeout: Duration,
    /// A request's body must arrive in full within this from the end of its headers
    /// (default 60 s: 64 MiB at about 1 MB/s); the handler sees a body error.
    pub http_body_timeout: Duration,
    /// A connection on which nothing moves for this long while no request is being handled is
    /// closed (default 60 s): an idle keep-alive connection, or a client not reading its
    /// answer. Longer than Telegraf's 10 s and Prometheus's 15 s intervals, so their
    /// connections are reused.
    pub http_idle_timeout: Duration,
    /// Values one read request may read in all (default
    /// `crate::read::budget::DEFAULT_READ_VALUES`).
    pub max_read_values: u64,
    /// Bytes of series names all connections together may cache (default 64 MiB,
    /// [`DEFAULT_NAME_CACHE_BYTES`]); one connection caches at most 8 MiB of them. A
    /// connection that finds the budget spent empties its own cache and, if that is not
    /// enough, looks names up in the registry without caching them.
    pub name_cache_bytes: usize,
    /// Longest a PromQL query may evaluate (default 2 minutes, Prometheus' own); past it the
    /// query answers Prometheus' `timeout` error. A request's `timeout` may only shorten it.
    pub query_timeout: Duration,
    /// Series one PromQL query may select over all its selectors (default
    /// [`crate::promql::DEFAULT_MAX_SERIES`]); past it the query answers an `execution` error.
    pub max_query_series: usize,
}

impl Limits {
    /// [`Limits::graphite_max_connections`]'s default.
    pub const GRAPHITE_MAX_CONNECTIONS: usize = 1024;
    /// [`Limits::graphite_idle_timeout`]'s default.
    pub const GRAPHITE_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
    /// [`Limits::http_max_connections`]'s default.
    pub const HTTP_MAX_CONNECTIONS: usize = 1024;
    /// [`Limits::http_header_timeout`]'s default.
    pub const HTTP_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
    /// [`Limits::http_body_timeout`]'s default.
    pub const HTTP_BODY_TIMEOUT: Duration = Duration::from_secs(60);
    /// [`Limits::http_idle_timeout`]'s default.
    pub const HTTP_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
    /// [`Limits::query_timeout`]'s default.
    pub const QUERY_TIMEOUT: Duration = Duration::from_secs(120);
}

/// The default of [`Limits::name_cache_bytes`].
pub const DEFAULT_NAME_CACHE_BYTES: usize = 64 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body: 64 * 1024 * 1024,
            max_series: None,
            graphite_max_connections: Limits::GRAPHITE_MAX_CONNECTIONS,
            graphite_idle_timeout: Limits::GRAPHITE_IDLE_TIMEOUT,
            http_max_connections: Limits::HTTP_MAX_CONNECTIONS,
            http_header_timeout: Limits::HTTP_HEADER_TIMEOUT,
            http_body_timeout: Limits::HTTP_BODY_TIMEOUT,
            http_idle_timeout: Limits::HTTP_IDLE_TIMEOUT,
            max_read_values: crate::read::budget::DEFAULT_READ_VALUES,
            name_cache_bytes: DEFAULT_NAME_CACHE_BYTES,
            query_timeout: Limits::QUERY_TIMEOUT,
            max_query_series: crate::promql::DEFAULT_MAX_SERIES,
        }
    }
}

/// Accepts connections of `protocol` on `listener` until `shutdown` flips, at most `limit`
/// open at once (a peer outside the protocol's allowlist closed at once and counted), each
/// let in by the listener's [`idle_slots::IdleSlots`] and served by `serve` (with its
/// [`idle_slots::ConnectionSlot`]) in a task of its own, counted as open while it runs. One
/// over the limit takes the slot of the open connection idle longest, which is closed
/// (counted as evicted); when none can be chosen (every one closing, or handling a request)
/// it is handed to `refuse`, which closes it (counted as refused), never queued. Then waits
/// for the open ones to finish.
async fn accept_loop<Served>(
    listener: TcpListener,
    (stats, allowlists): (&Arc<ServerStats>, &allowlist::Allowlists),
    (protocol, limit): (stats::Protocol, usize),
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    refuse: impl Fn(tokio::net::TcpStream),
    serve: impl Fn(tokio::net::TcpStream, idle_slots::ConnectionSlot) -> Served,
) where
    Served: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(idle_slots::IdleSlots::new(limit));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, most likely: pause rather than spin.
                        tracing::warn!(protocol = protocol.as_str(), error = %e, "accept failed");
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                        continue;
                    }
                };
                let guarded = match protocol {
                    stats::Protocol::Graphite => allowlist::Listener::GraphiteTcp,
                    stats::Protocol::Http => allowlist::Listener::Http,
                };
                if !allowlists.admits(guarded, peer.ip()) {
                    drop(stream); // closed before anything is read
                    continue;
                }
                let registration = match slots.admit() {
                    idle_slots::Admission::Free(registration) => registration,
                    idle_slots::Admission::MadeRoom(registration) => {
                        tracing::debug!(protocol = protocol.as_str(), %peer, "connection limit reached: closing the connection idle longest");
                        stats.count_evicted(protocol);
                        registration
                    }
                    idle_slots::Admission::Full => {
                        tracing::debug!(protocol = protocol.as_str(), %peer, "connection refused: connection limit reached, no connection idle");
                        stats.count_refused(protocol);
                        refuse(stream);
                        continue;
                    }
                };
                let stats = Arc::clone(stats);
                let served = serve(stream, registration.connection());
                connections.spawn(async move {
                    if tokio::time::timeout(EVICTION_WAIT, registration.arrived()).await.is_err() {
                        tracing::debug!(protocol = protocol.as_str(), %peer, "connection refused: the connection closed to make room did not close in time");
                        stats.count_refused(protocol);
                        return; // drops the stream unserved: closed
                    }
                    let open = stats.open_connection(protocol);
                    served.await;
                    drop(open);
                    // Unregisters the connection and passes its slot on, in one step.
                    drop(registration);
                });
            }
            _ = shutdown.changed() => break,
        }
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Raises this process's soft limit on open files to its hard limit, so thousands of client
/// sockets do not run into the common default of 1024. Returns the soft limit in force
/// afterwards (`None`: unlimited).
///
/// # Errors
/// The OS refused to read or set the limit.
pub fn raise_open_files_limit() -> std::io::Result<Option<u64>> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    if current != maximum {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: maximum,
                maximum,
            },
        )?;
    }
    Ok(maximum)
}

/// What the handlers share.
pub struct State {
    /// Where writes go and reads come from.
    pub backend: Arc<dyn Backend>,
    /// The server's own counters.
    pub stats: Arc<ServerStats>,
    /// Size limits.
    pub limits: Limits,
    /// The tokens of each role; when any is set, every API endpoint requires one that
    /// grants its role ([`auth`]).
    pub credentials: auth::Credentials,
    /// When set, the HTTP listener speaks only TLS ([`tls`]).
    pub tls: Option<Arc<tls::ServerTls>>,
    /// The networks each listener admits ([`allowlist`]).
    pub allowlists: allowlist::Allowlists,
    /// Each cumulative OTLP histogram series' last point, so that the next writes its
    /// increase (docs/otlp.md); in memory, bounded.
    pub otlp_streams: std::sync::Mutex<Streams>,
    /// Each Prometheus counter histogram series' last histogram, so that remote write stores
    /// its increases ([`crate::ingest::cumulative`]).
    pub(crate) histogram_counters: HistogramCounters,
    /// Where a clean shutdown saves `histogram_counters` for the next start: the data
    /// directory of a single node (a cluster node keeps them in memory only).
    histogram_counters_dir: Option<std::path::PathBuf>,
}

impl State {
    /// A single node's state: `engine` behind the handlers; `token`, when set, grants every
    /// role ([`State::with_credentials`] sets tokens by role).
    pub fn new(engine: Arc<Engine>, limits: Limits, token: Option<String>) -> State {
        let dir = engine.dir().to_path_buf();
        let mut state = State::with_backend(Arc::new(LocalBackend::new(engine)), limits, token);
        state.histogram_counters = HistogramCounters::take_saved(&dir);
        state.histogram_counters_dir = Some(dir);
        state
    }

    /// The state of a server over `backend`.
    pub fn with_backend(backend: Arc<dyn Backend>, limits: Limits, token: Option<String>) -> State {
        let started = backend.now();
        State {
            otlp_streams: std::sync::Mutex::new(Streams::new(started, MAX_STREAM_BYTES)),
            backend,
            stats: Default::default(),
            limits,
            credentials: auth::Credentials::all_roles(token),
            tls: None,
            allowlists: Default::default(),
            histogram_counters: HistogramCounters::default(),
            histogram_counters_dir: None,
        }
    }

    /// This state with the listeners admitting only the networks of `allowlists`.
    pub fn with_allowlists(mut self, allowlists: allowlist::Allowlists) -> State {
        self.allowlists = allowlists;
        self
    }

    /// This state with its HTTP listener speaking TLS.
    pub fn with_tls(mut self, tls: Option<Arc<tls::ServerTls>>) -> State {
        self.tls = tls;
        self
    }

    /// This state with `credentials` in place of the token it was made with.
    pub fn with_credentials(mut self, credentials: auth::Credentials) -> State {
        self.credentials = credentials;
        self
    }

    /// A sink for one request or connection.
    pub fn sink(&self) -> Sink {
        self.backend.sink(&self.stats, &self.limits)
    }

    /// The clock's now.
    pub fn now(&self) -> crate::time::Timestamp {
        self.backend.now()
    }

    /// The tiers read and written.
    pub fn tiers(&self) -> &crate::config::TiersConfig {
        self.backend.tiers()
    }
}

/// The bound sockets of a server.
pub struct Listeners {
    /// HTTP API.
    pub http: TcpListener,
    /// Graphite plaintext, TCP.
    pub graphite_tcp: TcpListener,
    /// Graphite plaintext, UDP.
    pub graphite_udp: UdpSocket,
    /// StatsD, UDP; off unless set.
    pub statsd: Option<statsd::StatsdListener>,
}

impl Listeners {
    /// Binds the HTTP address and the Graphite address (TCP and UDP on the same port; with
    /// port 0, UDP takes the port TCP got).
    ///
    /// # Errors
    /// [`Error::Io`] naming the address that could not be bound.
    pub async fn bind(http: SocketAddr, graphite: SocketAddr) -> Result<Listeners> {
        let bind_error =
            |addr: SocketAddr, e: std::io::Error| Error::io(format!("listen address {addr}"), e);
        let http_listener = listen(http).map_err(|e| bind_error(http, e))?;
        let graphite_tcp = listen(graphite).map_err(|e| bind_error(graphite, e))?;
        let tcp_addr = graphite_tcp
            .local_addr()
            .map_err(|e| bind_error(graphite, e))?;
        let graphite_udp = UdpSocket::bind(tcp_addr)
            .await
            .map_err(|e| bind_error(tcp_addr, e))?;
        Ok(Listeners {
            http: http_listener,
            graphite_tcp,
            graphite_udp,
            statsd: None,
        })
    }

    /// The addresses actually bound: (http, graphite tcp, graphite udp).
    pub fn addrs(&self) -> std::io::Result<(SocketAddr, SocketAddr, SocketAddr)> {
        Ok((
            self.http.local_addr()?,
            self.graphite_tcp.local_addr()?,
            self.graphite_udp.local_addr()?,
        ))
    }
}

/// Serves until `shutdown` completes, then stops accepting, lets open connections and
/// requests finish with what they received, and flushes the engine.
///
/// ```no_run
/// use std::sync::Arc;
/// use tierdb::server::{run, Limits, Listeners, State};
///
/// # async fn serve() -> tierdb::Result<()> {
/// let engine = Arc::new(tierdb::Engine::open("data")?);
/// let loopback = "127.0.0.1:0".parse().unwrap();
/// let listeners = Listeners::bind(loopback, loopback).await?;
/// println!("HTTP on {}", listeners.addrs().unwrap().0);
/// let state = Arc::new(State::new(engine, Limits::default(), None));
/// run(state, listeners, async { let _ = tokio::signal::ctrl_c().await; }).await
/// # }
/// ```
///
/// # Errors
/// The engine's flush failure at the end.
pub async fn run(
    state: Arc<State>,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let tcp = tokio::spawn(graphite::serve_tcp(
        listeners.graphite_tcp,
        Arc::clone(&state),
        stopped.clone(),
    ));
    let udp = tokio::spawn(graphite::serve_udp(
        listeners.graphite_udp,
        Arc::clone(&state),
        stopped.clone(),
    ));
    let statsd = listeners
        .statsd
        .map(|listener| tokio::spawn(statsd::serve(listener, Arc::clone(&state), stopped.clone())));
    let tls_watch = (state.tls.clone()).map(|tls| tokio::spawn(tls.watch(stopped.clone())));
    let http = tokio::spawn(http_conn::serve(
        listeners.http,
        http::app(Arc::clone(&state)),
        Arc::clone(&state),
        stopped,
    ));
    shutdown.await;
    tracing::info!("shutting down: no new connections; draining what was received");
    let _ = stop.send(true);
    // Past the grace, the listeners' tasks still running are stopped, so a UDP backlog
    // behind a stalled log does not go on writing after the final flush or the cluster
    // leave below. (A TCP or HTTP connection's own task ends at its timeouts.)
    let mut tasks = vec![tcp.abort_handle(), udp.abort_handle(), http.abort_handle()];
    tasks.extend(statsd.as_ref().map(|task| task.abort_handle()));
    tasks.extend(tls_watch.as_ref().map(|task| task.abort_handle()));
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        let _ = tcp.await;
        let _ = udp.await;
        if let Some(statsd) = statsd {
            let _ = statsd.await;
        }
        let _ = http.await;
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "connections still open {}s after shutdown began; stopping without them",
            SHUTDOWN_GRACE.as_secs()
        );
        for task in tasks {
            task.abort();
        }
    }
    state.backend.close().await?;
    if let Some(dir) = &state.histogram_counters_dir {
        if !state.histogram_counters.is_empty() {
            state.histogram_counters.save(dir)?;
        }
    }
    Ok(())
}
