//! `tierdb serve`: the engine behind sockets. Graphite plaintext on TCP and UDP, and an HTTP
//! API (Influx line protocol and JSON writes, queries, listings, Graphite's `/render` and
//! `/metrics/find` for Grafana, `/metrics`). Every protocol writes through one [`sink::Sink`]
//! per connection or request into the same engine.
//!
//! [`run`] takes already-bound [`Listeners`] and a shutdown future, so tests bind
//! `127.0.0.1:0` and call it directly.

pub mod dashboard;
pub mod error;
pub mod graphite;
pub mod http;
pub mod metrics;
mod params;
mod render_api;
pub mod sink;
pub mod stats;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};

use crate::{Engine, Error, Result};
use sink::Sink;
use stats::ServerStats;

/// How long shutdown waits for open connections and requests before it flushes and exits
/// without them.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

/// Bounds that keep one client from making the server grow without limit.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest HTTP request body, bytes (default 64 MiB). Graphite lines are bounded by
    /// [`crate::ingest::graphite::MAX_LINE`].
    pub max_body: usize,
    /// Series the server will register; a new series past it is refused (`series_limit`)
    /// while existing ones keep writing. `None`: no limit.
    pub max_series: Option<usize>,
    /// Open Graphite TCP connections at once (default 1024).
    pub max_connections: usize,
    /// Values one read request may read in all (default [`crate::budget::DEFAULT_READ_VALUES`]).
    pub max_read_values: u64,
    /// Bytes of series names all connections together may cache (default 64 MiB,
    /// [`DEFAULT_NAME_CACHE_BYTES`]); one connection caches at most 8 MiB of them. A
    /// connection that finds the budget spent empties its own cache and, if that is not
    /// enough, looks names up in the registry without caching them.
    pub name_cache_bytes: usize,
}

/// The default of [`Limits::name_cache_bytes`].
pub const DEFAULT_NAME_CACHE_BYTES: usize = 64 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body: 64 * 1024 * 1024,
            max_series: None,
            max_connections: 1024,
            max_read_values: crate::budget::DEFAULT_READ_VALUES,
            name_cache_bytes: DEFAULT_NAME_CACHE_BYTES,
        }
    }
}

/// What the handlers share.
pub struct State {
    /// The engine everything writes into and reads from.
    pub engine: Arc<Engine>,
    /// The server's own counters.
    pub stats: Arc<ServerStats>,
    /// Size limits.
    pub limits: Limits,
    /// When set, every endpoint requires `Authorization: Bearer <token>`.
    pub token: Option<String>,
}

impl State {
    /// A sink for one request or connection.
    pub fn sink(&self) -> Sink {
        Sink::new(
            Arc::clone(&self.engine),
            Arc::clone(&self.stats),
            &self.limits,
        )
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
        let http_listener = TcpListener::bind(http)
            .await
            .map_err(|e| bind_error(http, e))?;
        let graphite_tcp = TcpListener::bind(graphite)
            .await
            .map_err(|e| bind_error(graphite, e))?;
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
    let mut http_stopped = stopped.clone();
    let app = http::app(Arc::clone(&state));
    let http = tokio::spawn(async move {
        axum::serve(listeners.http, app)
            .with_graceful_shutdown(async move {
                let _ = http_stopped.changed().await;
            })
            .await
    });
    shutdown.await;
    tracing::info!("shutting down: no new connections; draining what was received");
    let _ = stop.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        let _ = tcp.await;
        let _ = udp.await;
        if let Ok(Err(e)) = http.await {
            tracing::warn!(error = %e, "http server ended with an error");
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "connections still open {}s after shutdown began; stopping without them",
            SHUTDOWN_GRACE.as_secs()
        );
    }
    let engine = Arc::clone(&state.engine);
    tokio::task::spawn_blocking(move || engine.flush())
        .await
        .map_err(|e| Error::Poisoned(format!("flush task failed: {e}")))?
}
