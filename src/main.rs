//! The `tierdb` command: parses the command line and calls the library. Errors print as one
//! line on stderr with a non-zero exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tierdb::{Display, Engine, Query, TiersConfig, Timestamp};

/// tierdb: a multi-resolution rollup engine for metrics.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the server: Graphite plaintext on TCP and UDP, the HTTP API (Influx line
    /// protocol and JSON writes, queries, /metrics), with the rolling-window maintenance.
    ///
    /// Prints each address it listens on, then `tierdb: ready`. SIGTERM or Ctrl-C stops it
    /// gracefully: no new connections, what was received is written, files are flushed.
    ///
    /// Examples:
    ///   tierdb serve
    ///   tierdb serve --data-dir /var/lib/tierdb --http 0.0.0.0:8080 --graphite 0.0.0.0:2003
    ///   TIERDB_TOKEN=secret tierdb serve --http 127.0.0.1:0 --graphite 127.0.0.1:0
    Serve {
        /// The data directory (created when missing).
        #[arg(long, env = "TIERDB_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        /// The tiers file (default: ./tiers.toml when present, else the built-in default).
        #[arg(long, env = "TIERDB_TIERS")]
        tiers: Option<PathBuf>,
        /// HTTP listen address; port 0 picks a free port.
        #[arg(long, env = "TIERDB_HTTP", default_value = "127.0.0.1:8080")]
        http: std::net::SocketAddr,
        /// Graphite plaintext listen address, TCP and UDP; port 0 picks a free port.
        #[arg(long, env = "TIERDB_GRAPHITE", default_value = "127.0.0.1:2003")]
        graphite: std::net::SocketAddr,
        /// Require `Authorization: Bearer <token>` on every HTTP endpoint.
        #[arg(long, env = "TIERDB_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Refuse new series beyond this many (existing series keep writing). Every 256 new
        /// series preallocate a chunk of files (~70 MiB with the default tiers), and Graphite
        /// has no authentication, so the default keeps a stray or hostile sender from
        /// filling the disk; 0 means no limit.
        #[arg(long, env = "TIERDB_MAX_SERIES", default_value_t = 100_000)]
        max_series: usize,
    },
    /// Checks a tiers.toml and prints the tiers it defines.
    ///
    /// Example: tierdb tiers --tiers ./tiers.toml
    Tiers {
        /// The tiers file (default: the built-in default, equal to the shipped tiers.toml).
        #[arg(long, env = "TIERDB_TIERS")]
        tiers: Option<PathBuf>,
    },
    /// Prints where a sample at TS lands: for each tier, the period file and the bucket.
    ///
    /// Example: tierdb lookup 1763726400
    Lookup {
        /// Unix seconds.
        ts: Timestamp,
        /// The tiers file (default: the built-in default).
        #[arg(long, env = "TIERDB_TIERS")]
        tiers: Option<PathBuf>,
    },
    /// Queries one series and prints the result as JSON.
    ///
    /// Example: tierdb query 'cpu.load{host=a}' --from 1763640000 --to 1763726400 --tier 1h --display max
    Query {
        /// The series: `name` or `name{k=v,...}`.
        series: String,
        /// First second (unix seconds, inclusive).
        #[arg(long)]
        from: Timestamp,
        /// End (unix seconds, exclusive).
        #[arg(long)]
        to: Timestamp,
        /// A tier name or `auto`.
        #[arg(long, default_value = "auto")]
        tier: String,
        /// avg, per_sec, total, max, min or count.
        #[arg(long, default_value = "avg")]
        display: String,
        /// The data directory.
        #[arg(long, env = "TIERDB_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        /// The tiers file (default: the built-in default).
        #[arg(long, env = "TIERDB_TIERS")]
        tiers: Option<PathBuf>,
    },
    /// Prints the data directory's tiers, files, series and counters as JSON.
    ///
    /// Example: tierdb info --data-dir ./data
    Info {
        /// The data directory.
        #[arg(long, env = "TIERDB_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        /// The tiers file (default: the built-in default).
        #[arg(long, env = "TIERDB_TIERS")]
        tiers: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tierdb: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(
    engine: std::sync::Arc<Engine>,
    http: std::net::SocketAddr,
    graphite: std::net::SocketAddr,
    token: Option<String>,
    max_series: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    use tierdb::server::{run, Limits, Listeners, State};
    let listeners = Listeners::bind(http, graphite).await?;
    let (http, tcp, udp) = listeners.addrs()?;
    println!("tierdb: http listening on {http}");
    println!("tierdb: graphite tcp listening on {tcp}");
    println!("tierdb: graphite udp listening on {udp}");
    println!("tierdb: ready");
    let state = std::sync::Arc::new(State {
        engine,
        stats: Default::default(),
        limits: Limits {
            max_series: (max_series > 0).then_some(max_series),
            ..Limits::default()
        },
        token,
    });
    run(state, listeners, shutdown_signal()).await?;
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}

fn load_tiers(path: Option<&PathBuf>) -> tierdb::Result<TiersConfig> {
    match path {
        Some(path) => TiersConfig::load(path),
        None => Ok(TiersConfig::default()),
    }
}

fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Serve {
            data_dir,
            tiers,
            http,
            graphite,
            token,
            max_series,
        } => {
            let tiers = match tiers {
                Some(path) => TiersConfig::load(&path)?,
                None if std::path::Path::new("tiers.toml").exists() => {
                    TiersConfig::load(std::path::Path::new("tiers.toml"))?
                }
                None => TiersConfig::default(),
            };
            let engine = std::sync::Arc::new(Engine::builder(&data_dir).tiers(tiers).open()?);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(serve(
                std::sync::Arc::clone(&engine),
                http,
                graphite,
                token,
                max_series,
            ))?;
            drop(runtime);
            if let Ok(engine) = std::sync::Arc::try_unwrap(engine) {
                engine.close()?;
            }
        }
        Command::Tiers { tiers } => {
            let config = load_tiers(tiers.as_ref())?;
            println!(
                "{:<8} {:>10} {:>8} {:>10} {:>12}",
                "tier", "resolution", "period", "retention", "create_ahead"
            );
            for t in &config.tiers {
                println!(
                    "{:<8} {:>10} {:>8} {:>10} {:>12}",
                    t.name,
                    t.resolution.to_string(),
                    t.period.to_string(),
                    t.retention.to_string(),
                    t.create_ahead
                );
            }
        }
        Command::Lookup { ts, tiers } => {
            let config = load_tiers(tiers.as_ref())?;
            for p in tierdb::locate(&config.tiers, ts) {
                let tier = &config.tiers[p.tier];
                println!(
                    "{:<8} period {} ({}) bucket {} ({})",
                    tier.name,
                    tierdb::time::format_ts(p.period_start),
                    tierdb::storage::format::file_name(p.period_start, 0),
                    p.bucket,
                    tierdb::time::format_ts(
                        p.period_start + i64::from(p.bucket) * tier.resolution.secs() as i64
                    )
                );
            }
        }
        Command::Query {
            series,
            from,
            to,
            tier,
            display,
            data_dir,
            tiers,
        } => {
            let engine = Engine::builder(&data_dir)
                .tiers(load_tiers(tiers.as_ref())?)
                .open()?;
            let display: Display = display.parse()?;
            let result =
                engine.query(&Query::new(series, from, to).tier(&tier).display(display))?;
            println!("{}", serde_json::to_string(&result)?);
        }
        Command::Info { data_dir, tiers } => {
            let engine = Engine::builder(&data_dir)
                .tiers(load_tiers(tiers.as_ref())?)
                .open()?;
            println!("{}", serde_json::to_string_pretty(&engine.stats())?);
        }
    }
    Ok(())
}
