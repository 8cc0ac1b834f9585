//! `tierdb serve --cluster`: the server as one node of a cluster. No engine of its own: the
//! node applies the partitions the ownership table gives it, each in its own directory under
//! the data directory, and the handlers publish writes and fan reads out.

use std::sync::Arc;
use std::time::Duration;

use super::{announce_addresses, bind, shutdown_signal, warn, ClusterArgs};
use crate::cli::{load_tiers, Listen, Location};
use crate::cluster::backend::NodeBackend;
use crate::cluster::ingest_log::LogRetention;
use crate::cluster::node::{Node, NodeSettings};
use crate::cluster::ownership::ClusterSettings;
use crate::server::State;

/// How often a node rewrites its heartbeat and renews its leases.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// The tiers the node's partitions use: `--tiers` when given; else those stored in its
/// partition directories (the first one holding them: the node ran before), so a restart
/// without `--tiers` keeps the tiers the partitions were created with; else
/// [`load_tiers`]'s choice for a new node.
///
/// # Errors
/// The tiers file's refusal, or a stored file's, named.
fn node_tiers(location: &Location) -> crate::error::Result<crate::config::TiersConfig> {
    if location.tiers.is_some() {
        return load_tiers(location.tiers.as_deref());
    }
    let partitions = location.data_dir.join("partitions");
    let mut dirs: Vec<_> = match std::fs::read_dir(&partitions) {
        Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    };
    dirs.sort();
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        if let Some(stored) = crate::storage::stored_tiers::read_stored(dir)? {
            return Ok(stored);
        }
    }
    load_tiers(None)
}

/// Binds, joins the cluster, announces the addresses, serves until SIGTERM or Ctrl-C, then
/// leaves the cluster (its partitions move to the other nodes at once).
pub(super) fn run(
    location: &Location,
    listen: &Listen,
    args: &ClusterArgs,
) -> Result<(), Box<dyn std::error::Error>> {
    let urls = args.urls.clone().unwrap_or_default();
    let name = match &args.node {
        Some(name) => name.clone(),
        None => rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
    };
    let tiers = node_tiers(location)?;
    let credentials = listen.security.credentials(listen.token.as_deref())?;
    let nats = args.nats.auth()?;
    let tls = listen.security.tls()?;
    let peer_tls = listen.security.peer_tls()?;
    let allowlists = listen.security.allowlists()?;
    let (runtime, listeners) = bind(listen, &location.data_dir)?;
    let http = listeners.addrs()?.0;
    let advertised = match &args.advertise_http {
        Some(addr) => addr.clone(),
        None if http.ip().is_unspecified() => {
            return Err(format!(
                "--http {http} listens on every interface: say with --advertise-http HOST:PORT \
                 where the other nodes reach this one"
            )
            .into())
        }
        None => http.to_string(),
    };
    let settings = NodeSettings {
        urls: urls.clone(),
        nats,
        name: name.clone(),
        data_dir: location.data_dir.clone(),
        tiers,
        ownership: ClusterSettings {
            partitions: args.partitions,
            replicas: args.replicas,
            heartbeat: HEARTBEAT,
            lease_timeout: args.lease_timeout,
            ..ClusterSettings::default()
        },
        log: LogRetention {
            max_age: args.log_max_age,
            max_bytes: (args.log_max_bytes > 0).then_some(args.log_max_bytes),
            replicas: args.log_replicas.unwrap_or(0),
        },
        token: credentials.internal_token(),
        peer_tls,
    };
    let node = runtime.block_on(Node::start(settings, &advertised))?;
    announce_addresses(&listeners, listen.security.scheme())?;
    let mut warnings = listen.security.startup_warnings(http, &credentials);
    warnings.extend(args.nats.file_warnings());
    warn(warnings);
    println!(
        "tierdb: node {name} joined the cluster at {urls} ({} partitions)",
        node.partitions()
    );
    let (stop, clock) = shutdown_signal(&runtime)?;
    println!("tierdb: ready");
    let state = Arc::new(
        State::with_backend(Arc::new(NodeBackend::new(node)), listen.limits(), None)
            .with_credentials(credentials)
            .with_tls(tls)
            .with_allowlists(allowlists),
    );
    runtime.block_on(crate::server::run(state, listeners, stop))?;
    clock.stopped();
    Ok(())
}
