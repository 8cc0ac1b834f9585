//! Creating the cluster's JetStream streams (the ingest log and the KV bucket's stream)
//! replicated on as many servers as the NATS cluster has, up to a bound: the count is found
//! by asking, since a server refuses a stream with more replicas than it has peers.

use async_nats::jetstream::{self, context, stream};

/// Creates the stream `config(replicas)` with the most replicas from `max` down to 1 that
/// the servers accept. Returns the count used, or `None` when the stream already existed
/// (another node created it meanwhile; it stands as it is).
///
/// # Errors
/// The server's refusal when no count is accepted, or any other failure.
pub(crate) async fn create_replicated(
    js: &jetstream::Context,
    max: usize,
    config: impl Fn(usize) -> stream::Config,
) -> Result<Option<usize>, context::CreateStreamError> {
    let mut last_refusal = None;
    for replicas in (1..=max.max(1)).rev() {
        match js.create_stream(config(replicas)).await {
            Ok(_) => return Ok(Some(replicas)),
            Err(e) if refused_for_peers(&e) => last_refusal = Some(e),
            Err(e) if already_exists(&e) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Err(last_refusal.expect("at least one attempt"))
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
