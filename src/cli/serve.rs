//! `tierdb serve`: the server on a data directory until SIGTERM or Ctrl-C, and the serving
//! loop `demo` shares (bind, announce, serve, stop, flush).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use clap::Args;

use super::{load_tiers, Listen, Location};
use crate::server::{Limits, Listeners, State};
use crate::Engine;

/// Runs the server: Graphite plaintext on TCP and UDP, the HTTP API (Influx line
/// protocol and JSON writes, queries, /metrics) and the dashboard at /.
///
/// Prints each address it listens on, then `tierdb: ready`. SIGTERM or Ctrl-C stops it
/// gracefully: no new connections, what was received is written, files are flushed.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tierdb serve\n  tierdb serve --data-dir /var/lib/tierdb --http 0.0.0.0:8080 --graphite 0.0.0.0:2003\n  TIERDB_TOKEN=secret tierdb serve --http 127.0.0.1:0 --graphite 127.0.0.1:0"
)]
pub struct ServeArgs {
    #[command(flatten)]
    location: Location,
    #[command(flatten)]
    listen: Listen,
}

/// Opens the data directory (locking it) and serves it until stopped.
pub(super) fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let engine = Arc::new(
        Engine::builder(&args.location.data_dir)
            .tiers(load_tiers(args.location.tiers.as_deref())?)
            .open()?,
    );
    until_shutdown(engine, &args.listen, |_| Ok(None))
}

/// A thread running beside the server (the demo agent) and the flag that stops it.
type Companion = (Arc<AtomicBool>, JoinHandle<()>);

/// Runs the server on `engine` until SIGTERM or Ctrl-C; `before_ready` may start a
/// companion (the demo agent) once the sockets are bound.
pub(super) fn until_shutdown(
    engine: Arc<Engine>,
    listen: &Listen,
    before_ready: impl FnOnce(&Arc<Engine>) -> crate::Result<Option<Companion>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listeners = runtime.block_on(Listeners::bind(listen.http, listen.graphite))?;
    let (http, tcp, udp) = listeners.addrs()?;
    println!("tierdb: http listening on {http}");
    println!("tierdb: graphite tcp listening on {tcp}");
    println!("tierdb: graphite udp listening on {udp}");
    let companion = before_ready(&engine)?;
    println!("tierdb: dashboard at http://{http}/");
    println!("tierdb: ready");
    let state = Arc::new(State {
        engine: Arc::clone(&engine),
        stats: Default::default(),
        limits: Limits {
            max_series: (listen.max_series > 0).then_some(listen.max_series),
            max_read_values: listen.max_read_values,
            name_cache_bytes: listen.name_cache_bytes,
            ..Limits::default()
        },
        token: listen.token.clone(),
    });
    let served = runtime.block_on(crate::server::run(state, listeners, shutdown_signal()));
    if let Some((stop, handle)) = companion {
        stop.store(true, Ordering::Relaxed);
        let _ = handle.join();
    }
    drop(runtime);
    served?;
    if let Ok(engine) = Arc::try_unwrap(engine) {
        engine.close()?;
    }
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
