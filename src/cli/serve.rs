//! `tierdb serve`: the server on a data directory until SIGTERM or Ctrl-C, and the serving
//! loop `demo` shares (bind, announce, serve, stop, flush).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::builder::RangedU64ValueParser;
use clap::Args;

#[cfg(feature = "cluster")]
mod cluster;
mod security;

#[cfg(feature = "cluster")]
pub use security::NatsArgs;
pub use security::SecurityArgs;

use super::{engine_builder, Listen, Location};
use crate::engine::Engine;
use crate::server::announce::{self, Announced};
use crate::server::statsd::StatsdListener;
use crate::server::{Limits, Listeners, State};
use crate::time::Span;

/// Runs the server: takes Graphite plaintext, StatsD, InfluxDB line protocol, JSON,
/// Prometheus remote write and OTLP; answers queries, Graphite's render API, PromQL and the dashboard.
///
/// Writes: Graphite plaintext on TCP and UDP (--graphite), StatsD on UDP (--statsd, off
/// unless given), and over HTTP (--http) InfluxDB line protocol (/write, /api/v2/write), JSON
/// (/api/v1/write), Prometheus remote write (/api/v1/prom/write) and OpenTelemetry's OTLP/HTTP
/// metrics (/v1/metrics). Reads over HTTP: the
/// query and aggregate API (/api/v1/...), Graphite's /render, /metrics/find and tag API for
/// Grafana, the Prometheus HTTP API with PromQL under /prometheus, /metrics, and the
/// dashboard at /. With --cluster, a node of a cluster on NATS JetStream. To bring whisper or
/// RRD files along, see `tierdb import --format whisper|rrd`.
///
/// Prints each address it listens on, then `tierdb: ready`. SIGTERM or Ctrl-C stops it
/// gracefully: no new connections, what was received is written, files are flushed.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tierdb serve\n  tierdb serve --data-dir /var/lib/tierdb --http 0.0.0.0:8080 --graphite 0.0.0.0:2003\n  TIERDB_TOKEN=secret tierdb serve --http 127.0.0.1:0 --graphite 127.0.0.1:0\n  tierdb serve --statsd 127.0.0.1:8125 --statsd-flush 10s"
)]
pub struct ServeArgs {
    #[command(flatten)]
    location: Location,
    #[command(flatten)]
    listen: Listen,
    #[cfg(feature = "cluster")]
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Cluster mode: the flags of a node sharing a NATS JetStream with others (docs/cluster.md).
#[cfg(feature = "cluster")]
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Run as a cluster node on these NATS servers (comma-separated URLs, for example
    /// nats://127.0.0.1:4222,nats://127.0.0.1:4223). Without it, a single node.
    #[arg(long = "cluster", env = "TIERDB_CLUSTER", value_name = "URLS")]
    pub urls: Option<String>,
    /// This node's name: unique in the cluster and the same across restarts (its leases and
    /// applied positions are kept under it). Default: the host name.
    #[arg(long, env = "TIERDB_NODE", value_name = "NAME")]
    pub node: Option<String>,
    /// Partitions of the series space, fixed when the cluster is first created; a node
    /// asking for another count is refused.
    #[arg(long, env = "TIERDB_PARTITIONS", default_value_t = 16, value_parser = RangedU64ValueParser::<u32>::new().range(1..=1024))]
    pub partitions: u32,
    /// Nodes applying each partition (when that many are alive).
    #[arg(long, env = "TIERDB_REPLICAS", default_value_t = 2, value_parser = RangedU64ValueParser::<u32>::new().range(1..=8))]
    pub replicas: u32,
    /// A node (or a lease) silent this long is dead and its partitions move to live nodes.
    #[arg(long, env = "TIERDB_LEASE_TIMEOUT", value_name = "SPAN", default_value = "15s", value_parser = positive_span)]
    pub lease_timeout: Duration,
    /// How long the log keeps messages: enough for a replica's rebuild, not the tiers'
    /// retention.
    #[arg(long, env = "TIERDB_LOG_MAX_AGE", value_name = "SPAN", default_value = "24h", value_parser = positive_span)]
    pub log_max_age: Duration,
    /// Bytes the log keeps at most (0: no bound).
    #[arg(long, env = "TIERDB_LOG_MAX_BYTES", value_name = "BYTES", default_value_t = 1 << 30)]
    pub log_max_bytes: u64,
    /// The address other nodes reach this node's HTTP at (host:port), for their fan-out
    /// reads. Default: the bound --http address; required when that is `0.0.0.0` or `[::]`.
    #[arg(long, env = "TIERDB_ADVERTISE_HTTP", value_name = "HOST:PORT")]
    pub advertise_http: Option<String>,
    /// NATS servers holding each log message (at most 3): exactly that many, or the node that
    /// creates the log does not start. Default: as many of the cluster's servers as there
    /// are, up to 3. The leases are kept on as many as there are, up to 3.
    #[arg(long, env = "TIERDB_LOG_REPLICAS", value_parser = RangedU64ValueParser::<usize>::new().range(1..=3))]
    pub log_replicas: Option<usize>,
    /// Credentials and TLS for NATS.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Connection limits and timeouts of `serve` and `demo` (part of [`Listen`]); see
/// [`Limits`] for why each exists.
#[derive(Args, Debug, Clone)]
pub struct ConnectionLimits {
    /// Open Graphite TCP connections at once; one more takes the slot of the one idle
    /// longest, which is closed.
    #[arg(long, env = "TIERDB_GRAPHITE_MAX_CONNECTIONS", value_name = "N", default_value_t = Limits::GRAPHITE_MAX_CONNECTIONS, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub graphite_max_connections: usize,
    /// Close a Graphite TCP connection that sends nothing for this long.
    #[arg(long, env = "TIERDB_GRAPHITE_IDLE_TIMEOUT", value_name = "SPAN", default_value = "5m", value_parser = positive_span)]
    pub graphite_idle_timeout: Duration,
    /// Open HTTP connections at once; one more takes the slot of the one idle longest
    /// (clients that never sent an accepted token first), and is answered 503 only when every
    /// one is handling a request.
    #[arg(long, env = "TIERDB_HTTP_MAX_CONNECTIONS", value_name = "N", default_value_t = Limits::HTTP_MAX_CONNECTIONS, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub http_max_connections: usize,
    /// Close a connection whose request headers take longer than this from their first byte.
    #[arg(long, env = "TIERDB_HTTP_HEADER_TIMEOUT", value_name = "SPAN", default_value = "30s", value_parser = positive_span)]
    pub http_header_timeout: Duration,
    /// Fail a request whose body has not arrived in full this long after its headers.
    #[arg(long, env = "TIERDB_HTTP_BODY_TIMEOUT", value_name = "SPAN", default_value = "60s", value_parser = positive_span)]
    pub http_body_timeout: Duration,
    /// Close an HTTP connection on which nothing moves for this long between requests
    /// (keep-alive) or while its client does not read the answer.
    #[arg(long, env = "TIERDB_HTTP_IDLE_TIMEOUT", value_name = "SPAN", default_value = "60s", value_parser = positive_span)]
    pub http_idle_timeout: Duration,
}

impl ConnectionLimits {
    /// These limits, with the others at their defaults.
    pub fn limits(&self) -> Limits {
        Limits {
            graphite_max_connections: self.graphite_max_connections,
            graphite_idle_timeout: self.graphite_idle_timeout,
            http_max_connections: self.http_max_connections,
            http_header_timeout: self.http_header_timeout,
            http_body_timeout: self.http_body_timeout,
            http_idle_timeout: self.http_idle_timeout,
            ..Limits::default()
        }
    }
}

/// A timeout or interval flag: a [`Span`] ("30s", "5m") of at least a second.
pub(super) fn positive_span(text: &str) -> Result<Duration, String> {
    match Span::parse(text)? {
        span if span.secs() == 0 => Err("must be at least 1s".to_owned()),
        span => Ok(Duration::from_secs(span.secs())),
    }
}

/// Binds the listeners, then opens the data directory (locking it) and serves it until
/// stopped. Binding first means a busy port fails before the directory is created.
pub(super) fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "cluster")]
    if args.cluster.urls.is_some() {
        return cluster::run(&args.location, &args.listen, &args.cluster);
    }
    let builder = engine_builder(&args.location.data_dir, args.location.tiers.as_deref())?;
    let dir = &args.location.data_dir;
    until_shutdown(dir, || builder.open(), &args.listen, |_| Ok(None))
}

/// A thread running beside the server (the demo agent) and the flag that stops it.
type Companion = (Arc<AtomicBool>, JoinHandle<()>);

/// Binds the listeners, then opens the engine of `dir` with `open` (so a busy port leaves no
/// data directory behind), prints the addresses (so a directory another process holds is
/// refused before any is printed), writes them into the directory's `SERVER` file
/// ([`crate::server::announce`]) and runs the server until SIGTERM or Ctrl-C; `before_ready`
/// may start a companion (the demo agent). The file is removed at the end.
pub(super) fn until_shutdown(
    dir: &Path,
    open: impl FnOnce() -> crate::error::Result<Engine>,
    listen: &Listen,
    before_ready: impl FnOnce(&Arc<Engine>) -> crate::error::Result<Option<Companion>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let credentials = listen.security.credentials(listen.token.as_deref())?;
    let tls = listen.security.tls()?;
    let allowlists = listen.security.allowlists()?;
    let (runtime, listeners) = bind(listen, dir)?;
    let engine = Arc::new(open()?);
    announce_addresses(&listeners, listen.security.scheme())?;
    let (http, graphite, _) = listeners.addrs()?;
    warn(listen.security.startup_warnings(http, &credentials));
    let dir = engine.dir().to_path_buf();
    let announced = Announced {
        pid: std::process::id(),
        http,
        graphite,
        statsd: (listeners.statsd.as_ref())
            .map(|s| s.local_addr())
            .transpose()?,
    };
    announced.write(&dir)?;
    let companion = before_ready(&engine)?;
    let (stop, clock) = shutdown_signal(&runtime)?;
    println!(
        "tierdb: dashboard at {}://{http}/",
        listen.security.scheme()
    );
    println!("tierdb: ready");
    let state = Arc::new(
        State::new(Arc::clone(&engine), listen.limits(), None)
            .with_credentials(credentials)
            .with_tls(tls)
            .with_allowlists(allowlists),
    );
    let served = runtime.block_on(crate::server::run(state, listeners, stop));
    if let Some((stop, handle)) = companion {
        stop.store(true, Ordering::Relaxed);
        let _ = handle.join();
    }
    drop(runtime);
    announce::remove(&dir);
    served?;
    if let Ok(engine) = Arc::try_unwrap(engine) {
        engine.close()?;
    }
    clock.stopped();
    Ok(())
}

/// A bind failure's message with the flag that chose the address, and, when the address is
/// taken, how to get a free one: `--http 127.0.0.1:0` takes any free port (printed once
/// bound).
fn with_flag(message: &str, listen: &Listen) -> String {
    let flag = if message.contains(&format!("listen address {}", listen.http)) {
        ("--http", listen.http)
    } else {
        ("--graphite", listen.graphite)
    };
    let (name, addr) = flag;
    if message.to_ascii_lowercase().contains("in use") {
        format!(
            "{name}: {message}; choose another port with {name}, or port 0 for any free one \
             ({name} {}:0; the port taken is printed)",
            addr.ip()
        )
    } else {
        format!("{name}: {message}")
    }
}

/// The server's runtime and its bound sockets, the open-files limit raised first; nothing is
/// printed (see [`announce_addresses`]). A bind that fails while
/// a live server announced itself in `dir` (its `SERVER` file) says so: the same ports are
/// usually taken by the server already serving the directory, and binding comes before the
/// directory's lock, whose refusal would have named it.
fn bind(
    listen: &Listen,
    dir: &Path,
) -> Result<(tokio::runtime::Runtime, Listeners), Box<dyn std::error::Error>> {
    match crate::server::raise_open_files_limit() {
        Ok(limit) => tracing::debug!(?limit, "open files limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open files limit"),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut listeners = runtime
        .block_on(Listeners::bind(listen.http, listen.graphite))
        .map_err(|e| match serving(dir) {
            Some(at) => format!(
                "{e}; {} is already served by pid {} (http {}, graphite {})",
                dir.display(),
                at.pid,
                at.http,
                at.graphite
            ),
            None => with_flag(&e.to_string(), listen),
        })?;
    if let Some(addr) = listen.statsd {
        listeners.statsd = Some(runtime.block_on(StatsdListener::bind(addr, listen.statsd_flush))?);
    }
    Ok((runtime, listeners))
}

/// Prints each address listened on (what tests and scripts read before `tierdb: ready`), the
/// HTTP one under its `scheme` (`https` with TLS): only once the data directory is open, so a
/// directory held by another process is refused before any listener announces itself.
///
/// # Errors
/// When an address cannot be read back from its socket.
pub(super) fn announce_addresses(listeners: &Listeners, scheme: &str) -> std::io::Result<()> {
    let (http, tcp, udp) = listeners.addrs()?;
    println!("tierdb: {scheme} listening on {http}");
    println!("tierdb: graphite tcp listening on {tcp}");
    println!("tierdb: graphite udp listening on {udp}");
    if let Some(statsd) = &listeners.statsd {
        println!("tierdb: statsd udp listening on {}", statsd.local_addr()?);
    }
    Ok(())
}

/// The server `dir`'s `SERVER` file announces, when its process is alive.
fn serving(dir: &Path) -> Option<Announced> {
    let text = std::fs::read_to_string(announce::path(dir)).ok()?;
    Announced::parse(&text).filter(|at| Path::new(&format!("/proc/{}", at.pid)).exists())
}

/// Installs the SIGTERM and SIGINT (Ctrl-C) handlers now, and returns the future that
/// completes on either (saying so on stdout) and the clock that then says when the stop
/// ended. Called before `tierdb: ready` is printed: a handler installed only once the
/// server's future first ran left a window after `ready` in which a SIGTERM killed the
/// process unflushed (a stop sent as soon as `ready` was read ended by the signal 12 times
/// in 20).
///
/// # Errors
/// When a handler cannot be installed.
pub(super) fn shutdown_signal(
    runtime: &tokio::runtime::Runtime,
) -> std::io::Result<(
    impl std::future::Future<Output = ()> + Send + 'static,
    StopClock,
)> {
    use tokio::signal::unix::{signal, SignalKind};
    let _context = runtime.enter();
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let clock = StopClock::default();
    let started = clock.clone();
    let stop = async move {
        let signal = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        let _ = started.0.set(Instant::now());
        println!(
            "tierdb: {signal}: stopping (no new connections; what was received is written, \
             then the files are flushed)"
        );
    };
    Ok((stop, clock))
}

/// Prints each of `warnings` on stderr, one line each.
pub(super) fn warn(warnings: Vec<String>) {
    for warning in warnings {
        eprintln!("tierdb: warning: {warning}");
    }
}

/// When the stop signal came, so the last line of a clean stop says how long it took.
#[derive(Clone, Default)]
pub(super) struct StopClock(Arc<OnceLock<Instant>>);

impl StopClock {
    /// Says the server stopped, and how long after the signal.
    pub(super) fn stopped(&self) {
        let since = self.0.get().map_or(0.0, |at| at.elapsed().as_secs_f64());
        println!("tierdb: stopped ({since:.1}s after the signal)");
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};
    use crate::server::Limits;

    fn limits(args: &[&str]) -> Limits {
        let cli = Cli::try_parse_from([&["tierdb", "serve"], args].concat()).unwrap();
        let Command::Serve(serve) = cli.command else {
            panic!("not serve")
        };
        serve.listen.connections.limits()
    }

    #[test]
    fn the_flags_default_to_limits_default_and_refuse_zero() {
        let (flags, default) = (limits(&[]), Limits::default());
        assert_eq!(
            format!("{flags:?}"),
            format!("{default:?}"),
            "the flags' defaults drifted from Limits::default()"
        );
        let set = limits(&[
            "--http-header-timeout",
            "5s",
            "--graphite-idle-timeout",
            "2m",
        ]);
        assert_eq!(set.http_header_timeout.as_secs(), 5);
        assert_eq!(set.graphite_idle_timeout.as_secs(), 120);
        for zero in [
            ["--http-body-timeout", "0s"],
            ["--http-max-connections", "0"],
        ] {
            let refused = Cli::try_parse_from([&["tierdb", "serve"][..], &zero].concat());
            assert!(refused.is_err(), "{zero:?} accepted");
        }
    }
}
