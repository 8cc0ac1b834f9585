//! The cluster's KV bucket: opened, or created on the first node's join, and the settings it
//! fixes for good (partition and replica counts), checked on every join.
//!
//! The bucket's stream `KV_<bucket>` is created here with the settings a KV bucket has, then
//! opened as a bucket: async-nats's `create_key_value` always allows direct gets, which any
//! replica may answer, and the table needs reads from the stream's leader (see
//! [`bucket_stream`]).

use async_nats::jetstream::{self, kv, stream};

use crate::cluster::streams::{self, Copies};
use crate::error::Error;
use crate::error::Result;

/// How many of the stream's servers keep a copy, at most: more would slow every write for
/// no gain in a metrics cluster.
const MAX_BUCKET_REPLICAS: usize = 3;

/// Names the NATS server `js` is connected to, for messages.
pub(super) fn server_label(js: &jetstream::Context) -> String {
    let info = js.client().server_info();
    if info.host.is_empty() {
        "the NATS server".to_string()
    } else {
        format!("nats://{}:{}", info.host, info.port)
    }
}

/// Opens the bucket `bucket`, creating its stream when there is none, replicated on as many
/// servers as the cluster has, up to three. The count is found by asking: a server refuses
/// a stream with more replicas than it has peers, and then one fewer is tried.
///
/// # Errors
/// [`Error::Cluster`] when JetStream is unreachable or refuses the stream.
pub(super) async fn open_bucket(js: &jetstream::Context, bucket: &str) -> Result<kv::Store> {
    let at = server_label(js);
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Error::Cluster(format!("{what} KV bucket {bucket} at {at}: {e}"))
    };
    match js.get_stream(stream_name(bucket)).await {
        Ok(_) => return js.get_key_value(bucket).await.map_err(|e| fail("open", &e)),
        Err(e) if !streams::is_not_found(&e) => return Err(fail("look up", &e)),
        Err(_) => {}
    }
    let replicas = streams::create_replicated(js, Copies::UpTo(MAX_BUCKET_REPLICAS), |replicas| {
        bucket_stream(bucket, replicas)
    })
    .await
    .map_err(|e| fail("create", &e))?;
    tracing::info!(bucket, ?replicas, "opened the cluster bucket");
    js.get_key_value(bucket).await.map_err(|e| fail("open", &e))
}

/// The name of the stream behind KV bucket `bucket`.
pub(crate) fn stream_name(bucket: &str) -> String {
    format!("KV_{bucket}")
}

/// The stream behind KV bucket `bucket`, configured as async-nats configures a bucket with
/// one value per key (leases and heartbeats need only their latest), but without direct gets.
fn bucket_stream(bucket: &str, replicas: usize) -> stream::Config {
    stream::Config {
        name: stream_name(bucket),
        description: Some("tierdb cluster: settings, node heartbeats, partition leases".into()),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        discard: stream::DiscardPolicy::New,
        allow_rollup: true,
        deny_delete: true,
        deny_purge: false,
        // Reads of a key go to the stream's leader: a direct get may be answered by any
        // replica, and one still catching up after a restart answers an old revision, which
        // after a failed compare-and-set would only repeat what the table already had.
        allow_direct: false,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    }
}

/// A cluster-wide count fixed by the first node (`config.partitions`, `config.replicas`):
/// writes `wanted` when the key does not exist yet (create-only, so two first nodes cannot
/// both win), else checks that the stored count is `wanted`. `what` names the count in
/// messages ("partitions"); `sentence` words a mismatch from (stored, wanted).
///
/// # Errors
/// [`Error::Cluster`] when the stored count differs, cannot be read, or NATS fails.
pub(super) async fn fix_count(
    store: &kv::Store,
    key: &str,
    wanted: u32,
    at: &str,
    sentence: impl Fn(u32, u32) -> String,
) -> Result<()> {
    let stored = fix_value(store, key, &wanted.to_string(), at).await?;
    let Some(stored) = stored else {
        return Ok(());
    };
    let count: u32 = stored.trim().parse().map_err(|_| {
        Error::Cluster(format!(
            "{key} in KV bucket {} at {at}: not a count: {stored:?}",
            store.name
        ))
    })?;
    match count == wanted {
        true => Ok(()),
        false => Err(refusal(store, at, &sentence(count, wanted))),
    }
}

/// A cluster-wide text fixed by the first node (`config.tier_sets`), as [`fix_count`] fixes
/// a count: written when missing, else compared whole; `sentence` words a mismatch from
/// (stored, wanted).
///
/// # Errors
/// [`Error::Cluster`] when the stored text differs, cannot be read, or NATS fails.
pub(super) async fn fix_text(
    store: &kv::Store,
    key: &str,
    wanted: &str,
    at: &str,
    sentence: impl Fn(&str, &str) -> String,
) -> Result<()> {
    match fix_value(store, key, wanted, at).await? {
        Some(stored) if stored != wanted => Err(refusal(store, at, &sentence(&stored, wanted))),
        _ => Ok(()),
    }
}

/// The refusal of a node that differs from the cluster at `at` in what `sentence` says.
fn refusal(store: &kv::Store, at: &str, sentence: &str) -> Error {
    Error::Cluster(format!(
        "the cluster at {at} (KV bucket {}) {sentence}",
        store.name
    ))
}

/// Writes `wanted` at `key` when the key does not exist yet (create-only, so two first
/// nodes cannot both win): `None`; else the value stored, as text.
///
/// # Errors
/// [`Error::Cluster`] when the value cannot be read or NATS fails.
async fn fix_value(store: &kv::Store, key: &str, wanted: &str, at: &str) -> Result<Option<String>> {
    let fail = |e: &dyn std::fmt::Display| {
        Error::Cluster(format!("{key} in KV bucket {} at {at}: {e}", store.name))
    };
    match store.create(key, wanted.as_bytes().to_vec().into()).await {
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail(&e)),
    }
    let stored = store
        .get(key)
        .await
        .map_err(|e| fail(&e))?
        .ok_or_else(|| fail(&"created by another node, then deleted"))?;
    Ok(Some(String::from_utf8_lossy(&stored).into_owned()))
}
