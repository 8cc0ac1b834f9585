//! Creating the cluster's JetStream streams (the ingest log and the KV bucket's stream)
//! replicated on as many servers as the NATS cluster has, up to a bound: the count is found
//! by asking, since a server refuses a stream with more replicas than it has peers. A stream
//! records the count meant in its metadata: made with fewer (a server not joined yet, or the
//! cluster still forming), it is raised to it once the servers accept it ([`raise_copies`]).

use std::time::Duration;

use async_nats::jetstream::{self, context, stream};

use crate::error::{Error, Result};

/// How long a refusal for want of peers is taken for a NATS cluster still forming and the
/// same count asked again, before fewer copies are taken. Servers started together know
/// each other only after their routes form and each reported to the meta leader: until
/// then a stream of three is refused as if the cluster had fewer servers (nats-server
/// 2.10.26 on a loaded 2-core machine refused it for over a minute at times), and a stream
/// made with fewer copies then would keep fewer for good. A two-server cluster refuses
/// three the same way for good, so its first node waits this long for each stream.
const FORMING_WAIT: Duration = Duration::from_secs(30);

/// Pause between two asks while the cluster forms.
const FORMING_RETRY: Duration = Duration::from_millis(500);

/// The stream metadata key holding how many copies the stream is meant to have.
const COPIES_MEANT: &str = "tierdb_copies_meant";

/// How often a node checks that the streams keep the copies they are meant to have
/// ([`keep_copies`]).
const COPIES_CHECK: Duration = Duration::from_secs(60);

/// How many servers should keep a copy of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Copies {
    /// As many as the NATS cluster has, up to this many.
    UpTo(usize),
    /// This many, or the stream is not made.
    Exactly(usize),
}

/// Creates the stream `config(replicas)`: with [`Copies::UpTo`], with the most replicas from
/// the bound down to 1 that the servers accept; with [`Copies::Exactly`], with that count
/// only. A refusal for want of peers is asked again for [`FORMING_WAIT`] first. Returns the
/// count used, or `None` when the stream already existed (another node created it
/// meanwhile; it stands as it is).
///
/// # Errors
/// The server's refusal when no count is accepted, or any other failure.
pub(crate) async fn create_replicated(
    js: &jetstream::Context,
    copies: Copies,
    config: impl Fn(usize) -> stream::Config,
) -> Result<Option<usize>, context::CreateStreamError> {
    let (mut replicas, exact) = match copies {
        Copies::UpTo(n) => (n.max(1), false),
        Copies::Exactly(n) => (n.max(1), true),
    };
    let meant = replicas;
    let config = |replicas| {
        let mut config = config(replicas);
        (config.metadata).insert(COPIES_MEANT.to_string(), meant.to_string());
        config
    };
    let forming_until = tokio::time::Instant::now() + FORMING_WAIT;
    loop {
        let refusal = match js.create_stream(config(replicas)).await {
            Ok(_) => return Ok(Some(replicas)),
            Err(e) if already_exists(&e) => return Ok(None),
            Err(e) if refused_for_peers(&e) => e,
            Err(e) => return Err(e),
        };
        let forming =
            jetstream_code(&refusal.kind()) == Some(jetstream::ErrorCode::CLUSTER_NO_PEERS);
        if forming && tokio::time::Instant::now() < forming_until {
            tokio::time::sleep(FORMING_RETRY).await;
            continue;
        }
        if exact || replicas == 1 {
            return Err(refusal);
        }
        tracing::warn!(
            stream = %config(replicas).name,
            replicas,
            error = %refusal,
            "the NATS cluster refuses this many copies; trying one fewer"
        );
        replicas -= 1;
    }
}

/// Raises the stream `name` to the copies its metadata says it is meant to have, when it
/// has fewer and the servers now accept that many. Returns the count it was raised to;
/// `None` when nothing changed: as many copies as meant, no count meant (a stream an earlier
/// build made, or one made by hand), or still too few servers.
///
/// # Errors
/// [`Error::Cluster`] when the stream cannot be read or the servers refuse the change for
/// another reason.
async fn raise_copies(js: &jetstream::Context, name: &str) -> Result<Option<usize>> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Error::Cluster(format!("{what} the stream {name}: {e}"))
    };
    let stream = js.get_stream(name).await.map_err(|e| fail("reading", &e))?;
    let mut config = stream.cached_info().config.clone();
    let meant = (config.metadata.get(COPIES_MEANT)).and_then(|n| n.parse::<usize>().ok());
    let Some(meant) = meant.filter(|&meant| meant > config.num_replicas) else {
        return Ok(None);
    };
    config.num_replicas = meant;
    match js.update_stream(&config).await {
        // A server may take the change but keep fewer (a single server keeps one).
        Ok(info) => Ok((info.config.num_replicas == meant).then_some(meant)),
        Err(e) if refused_for_peers(&e) => Ok(None),
        Err(e) => Err(fail("raising the copies of", &e)),
    }
}

/// Every [`COPIES_CHECK`], raises each of the streams `names` to the copies it is meant to
/// have when it was made with fewer: a server had not joined, or the NATS cluster was still
/// forming, when the first node made it ([`raise_copies`]). Every node checks; the servers
/// take the change once.
pub(crate) async fn keep_copies(js: jetstream::Context, names: [String; 2]) {
    let mut ticker = tokio::time::interval(COPIES_CHECK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        for stream in &names {
            match raise_copies(&js, stream).await {
                Ok(Some(copies)) => tracing::warn!(
                    stream,
                    copies,
                    "a stream made with fewer copies than meant now has them"
                ),
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, "checking a stream's copies"),
            }
        }
    }
}

fn jetstream_code(kind: &context::CreateStreamErrorKind) -> Option<jetstream::ErrorCode> {
    match kind {
        context::CreateStreamErrorKind::JetStream(e) => Some(e.error_code()),
        _ => None,
    }
}

/// The server refused the replica count (too few peers, or not clustered at all).
fn refused_for_peers(e: &context::CreateStreamError) -> bool {
    jetstream_code(&e.kind()).is_some_and(|code| {
        [
            jetstream::ErrorCode::CLUSTER_NO_PEERS,
            jetstream::ErrorCode::INSUFFICIENT_RESOURCES,
            jetstream::ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED,
        ]
        .contains(&code)
    })
}

fn already_exists(e: &context::CreateStreamError) -> bool {
    jetstream_code(&e.kind()) == Some(jetstream::ErrorCode::STREAM_NAME_EXIST)
}

/// The stream does not exist.
pub(crate) fn is_not_found(e: &context::GetStreamError) -> bool {
    matches!(
        e.kind(),
        context::GetStreamErrorKind::JetStream(e)
            if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}
