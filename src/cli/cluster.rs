//! `tierdb cluster status`: the cluster's nodes and partitions, asked of any live node.

use clap::{Args, Subcommand, ValueEnum};

use super::print;
use crate::cluster::ownership::{node_addresses, DEFAULT_BUCKET};
use crate::cluster::status::Status;

/// Shows a cluster's state (nodes alive, partitions with their owners and replicas, applied
/// sequence and lag per partition), as a node of it sees it.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tierdb cluster status --cluster nats://127.0.0.1:4222\n  TIERDB_CLUSTER=nats://10.0.0.1:4222,nats://10.0.0.2:4222 tierdb cluster status --format json"
)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Nodes alive, partitions with their owners and replicas, applied sequence and lag.
    #[command(
        after_help = "Examples:\n  tierdb cluster status --cluster nats://127.0.0.1:4222\n  tierdb cluster status --cluster nats://127.0.0.1:4222 --format json"
    )]
    Status {
        /// The cluster's NATS servers (comma-separated URLs).
        #[arg(long = "cluster", env = "TIERDB_CLUSTER", value_name = "URLS")]
        urls: String,
        /// The bearer token the nodes require, if any.
        #[arg(long, env = "TIERDB_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: StatusFormat,
        /// The nodes serve HTTPS: trust the CAs of this PEM file (a node's --peer-ca).
        #[arg(long, env = "TIERDB_PEER_CA", value_name = "FILE")]
        peer_ca: Option<std::path::PathBuf>,
        /// A client certificate (PEM) for nodes that require one (--tls-client-ca); needs
        /// --client-key and --peer-ca.
        #[arg(long, value_name = "FILE", requires_all = ["client_key", "peer_ca"])]
        client_cert: Option<std::path::PathBuf>,
        /// The private key of --client-cert.
        #[arg(long, value_name = "FILE", requires = "client_cert")]
        client_key: Option<std::path::PathBuf>,
        /// Credentials and TLS for NATS.
        #[command(flatten)]
        nats: super::serve::NatsArgs,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StatusFormat {
    Table,
    Json,
}

/// Finds the nodes' addresses in the cluster's bucket and asks them, in name order, until
/// one answers.
pub(super) fn run(args: ClusterArgs) -> Result<(), Box<dyn std::error::Error>> {
    let ClusterCommand::Status {
        urls,
        token,
        format,
        peer_ca,
        client_cert,
        client_key,
        nats,
    } = args.command;
    let nats = nats.auth()?;
    let peer_tls = match &peer_ca {
        Some(ca) => {
            let identity = client_cert.as_deref().zip(client_key.as_deref());
            let config = crate::server::tls::client_config(ca, identity)?;
            Some(std::sync::Arc::new(config))
        }
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let status = runtime.block_on(async {
        let client =
            crate::cluster::nats_connect::connect(&urls, "tierdb cluster", &nats, false).await?;
        let js = async_nats::jetstream::new(client);
        let nodes = node_addresses(&js, DEFAULT_BUCKET).await?;
        let mut failures = Vec::new();
        for (name, addr) in &nodes {
            match crate::cluster::peer::get::<Status>(
                addr,
                "/api/v1/cluster",
                token.as_deref(),
                &peer_tls,
                std::time::Duration::from_secs(10),
            )
            .await
            {
                Ok(Ok(status)) => return Ok(status),
                Ok(Err(refusal)) => failures.push(format!("{name} ({addr}): {}", refusal.message)),
                Err(e) => failures.push(format!("{name} ({addr}): {e}")),
            }
        }
        Err::<Status, Box<dyn std::error::Error>>(
            format!(
                "no node of the cluster at {urls} answered ({} known): {}",
                nodes.len(),
                failures.join("; ")
            )
            .into(),
        )
    })?;
    match format {
        StatusFormat::Json => print(&format!("{}\n", serde_json::to_string_pretty(&status)?))?,
        StatusFormat::Table => print(&table(&status))?,
    }
    Ok(())
}

/// The status as two aligned tables: nodes, then partitions.
fn table(status: &Status) -> String {
    let mut out = format!("as seen by node {}\n\n", status.node);
    out.push_str(&format!(
        "{:<20} {:<22} {:<6} {:>8} {:>6}\n",
        "node", "http", "alive", "applying", "holds"
    ));
    for n in &status.nodes {
        out.push_str(&format!(
            "{:<20} {:<22} {:<6} {:>8} {:>6}\n",
            n.name,
            n.http_addr,
            if n.alive { "yes" } else { "no" },
            n.applying,
            n.holds
        ));
    }
    out.push_str(&format!(
        "\n{:>9} {:>10} {:<20} {}\n",
        "partition", "last seq", "serving", "replicas (node epoch applied lag)"
    ));
    for p in &status.partitions {
        let replicas: Vec<String> = p
            .replicas
            .iter()
            .map(|r| {
                format!(
                    "{}{} e{} {} lag {}",
                    r.node,
                    if r.alive { "" } else { " (dead)" },
                    r.epoch,
                    r.applied,
                    r.lag
                )
            })
            .collect();
        out.push_str(&format!(
            "{:>9} {:>10} {:<20} {}\n",
            p.partition,
            p.last_sequence,
            p.serving.as_deref().unwrap_or("-"),
            replicas.join(", ")
        ));
    }
    out
}
