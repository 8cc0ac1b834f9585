//! A `tierdb serve` in the test process: the server's `run` on ephemeral loopback ports with
//! a manual clock at [`NOW`], for tests that speak to it over real sockets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tierdb::server::StatsdListener;
use tierdb::server::{run, Limits, Listeners, State};
use tierdb::{Display, Engine, ManualClock, Query, TiersConfig, Timestamp};

use crate::common::NOW;
use crate::support::http;

/// A server on ephemeral loopback ports, stopped (and its engine flushed) on drop.
pub(crate) struct TestServer {
    /// The HTTP address.
    pub http: SocketAddr,
    /// The Graphite plaintext address (TCP and UDP).
    pub graphite: SocketAddr,
    /// The StatsD address, when started with one ([`TestServer::with_statsd`]).
    pub statsd: Option<SocketAddr>,
    /// The engine behind the server, for writing or reading beside it.
    pub engine: Arc<Engine>,
    /// The engine's clock, at [`NOW`] to begin with.
    pub clock: Arc<ManualClock>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    /// A server with `token` and `limits` over the default tiers, its clock at [`NOW`].
    pub(crate) fn start(token: Option<&str>, limits: Limits) -> TestServer {
        Self::with_tiers(TiersConfig::default(), token, limits)
    }

    /// [`TestServer::start`] over `tiers`.
    pub(crate) fn with_tiers(
        tiers: TiersConfig,
        token: Option<&str>,
        limits: Limits,
    ) -> TestServer {
        Self::build(tiers, token, limits, None)
    }

    /// [`TestServer::with_tiers`] with StatsD on an ephemeral loopback port, intervals of
    /// `flush`.
    pub(crate) fn with_statsd(tiers: TiersConfig, flush: Duration) -> TestServer {
        Self::build(tiers, None, Limits::default(), Some(flush))
    }

    fn build(
        tiers: TiersConfig,
        token: Option<&str>,
        limits: Limits,
        statsd: Option<Duration>,
    ) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(NOW));
        let engine = Arc::new(
            Engine::builder(dir.path())
                .tiers(tiers)
                .clock(clock.clone())
                .writer_threads(2)
                .background_maintenance(false)
                .open()
                .unwrap(),
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut listeners = runtime
            .block_on(Listeners::bind(
                "127.0.0.1:0".parse().unwrap(),
                "127.0.0.1:0".parse().unwrap(),
            ))
            .unwrap();
        if let Some(flush) = statsd {
            let listener = runtime
                .block_on(StatsdListener::bind("127.0.0.1:0".parse().unwrap(), flush))
                .unwrap();
            listeners.statsd = Some(listener);
        }
        let statsd = (listeners.statsd.as_ref()).map(|listener| listener.local_addr().unwrap());
        let (http, graphite, udp) = listeners.addrs().unwrap();
        assert_eq!(graphite, udp, "UDP takes the port TCP got");
        let state = Arc::new(State::new(
            Arc::clone(&engine),
            limits,
            token.map(str::to_string),
        ));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            runtime
                .block_on(run(state, listeners, async move {
                    let _ = stopped.await;
                }))
                .expect("server run");
        });
        TestServer {
            http,
            graphite,
            statsd,
            engine,
            clock,
            stop: Some(stop),
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Sends one request; returns the status and the body.
    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String) {
        http::request(self.http, method, path, headers, body)
    }

    /// `POST /api/v1/write` of `points` (JSON), which must answer 204.
    pub(crate) fn write_points(&self, points: &serde_json::Value) {
        let (status, text) =
            self.request("POST", "/api/v1/write", &[], points.to_string().as_bytes());
        assert_eq!(status, 204, "{text}");
    }

    /// `GET path`.
    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path, &[], b"")
    }

    /// `GET path`, which must answer 200, as JSON.
    pub(crate) fn json(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// The 1m bucket of `series` starting at `start`, shown as `display`.
    pub(crate) fn minute(&self, series: &str, start: Timestamp, display: Display) -> Option<f64> {
        let query = Query::new(series, start, start + 60)
            .tier("1m")
            .display(display);
        self.engine.query(&query).unwrap().points[0].1
    }

    /// Polls the series listing until `series` shows up (ingest over sockets is async).
    pub(crate) fn wait_for_series(&self, series: &str) {
        for _ in 0..200 {
            let listed = self.json("/api/v1/series");
            if listed["series"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s == series)
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("series {series} never appeared");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
