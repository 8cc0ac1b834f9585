//! Cluster mode (`tierdb serve --cluster`): several nodes sharing one NATS JetStream.
//!
//! The series space is cut into a fixed number of partitions ([`partition_of`]). A node that
//! takes a write parses it, splits it by partition and publishes one compact batch
//! ([`wire`]) per partition to JetStream, which replicates and orders it. Each partition is
//! applied by the nodes that hold its lease ([`ownership`]), each into its own engine
//! directory, exactly once from its own applied sequence ([`apply`]). A read on any node
//! asks one live owner of each partition for partial buckets and merges them.
//!
//! Nothing here replicates or elects anything itself: JetStream is the replicated log, the
//! deduplication window and the lease store. docs/cluster.md describes the whole design.

pub(crate) mod apply;
pub(crate) mod backend;
pub(crate) mod delete_entry;
pub(crate) mod edge;
pub(crate) mod envelope;
pub(crate) mod fanout;
pub(crate) mod ingest_log;
pub(crate) mod log_feed;
pub(crate) mod nats_connect;
pub(crate) mod nats_version;
pub(crate) mod node;
pub(crate) mod ownership;
pub(crate) mod partial;
pub(crate) mod peer;
pub(crate) mod promql_read;
pub(crate) mod promql_source;
pub(crate) mod snapshot;
pub(crate) mod status;
mod streams;
pub(crate) mod wire;

/// The partition of the series whose canonical key is `key`, out of `partitions`: CRC-32
/// (IEEE) of the key's bytes, modulo the count. Stable across versions, platforms and
/// processes, so every node routes a series the same way forever; the count itself is fixed
/// when the cluster is first created.
///
/// # Panics
/// When `partitions` is 0.
pub fn partition_of(key: &str, partitions: u32) -> u32 {
    assert!(partitions > 0, "a cluster has at least one partition");
    crc32fast::hash(key.as_bytes()) % partitions
}

#[cfg(test)]
mod tests {
    use super::partition_of;

    #[test]
    fn a_series_partition_never_changes() {
        // Fixed figures: a change of hash would move every stored series to another partition.
        // CRC-32 of "cpu{host=a}" is 0x7ac3fc6c (zlib.crc32 agrees).
        assert_eq!(partition_of("cpu{host=a}", 16), 12);
        assert_eq!(partition_of("servers.web01.cpu.user", 16), 14);
        assert_eq!(partition_of("cpu{host=a}", 1), 0);
    }
}
