//! Internals that the integration tests and benches reach into: file names and layouts to
//! damage files on purpose, the cluster's apply and wire for their own benches, the
//! registry alone. Not part of the library's API (hidden from its docs) and free to change
//! with the code; the paths mirror the modules the items live in.

/// Period files: names, layouts, the stored tiers and the writers' state file.
pub mod storage {
    /// A tier's period files: names and byte layout (docs/file-format.md).
    pub mod format {
        pub use crate::storage::format::{
            cell_index, file_name, parse_file_name, CellLayout, PeriodMeta, HEADER_LEN,
            LATEST_SIZE, RECORD_SIZE,
        };
    }
    /// Compacted period files.
    pub mod compact {
        pub use crate::storage::compact::{
            CompactFile, CompactReader, Loaded, ENTRY_LEN, HEADER_LEN,
        };
    }
    /// The raw tier's segment files.
    pub mod raw {
        pub use crate::storage::raw::SEGMENT_POINTS;
        /// Segment file names.
        pub mod segment {
            pub use crate::storage::raw::segment::file_name;
        }
    }
    /// Bucket cells in a mapping.
    pub mod mapped_cell {
        pub use crate::storage::mapped_cell::STALE_AFTER;
    }
    /// `writers.state`.
    pub mod writer_state {
        pub use crate::storage::writer_state::WriterStateFile;
    }
    /// The tiers a data directory stores.
    pub mod stored_tiers {
        pub use crate::storage::stored_tiers::read_stored;
    }
}

/// The series registry alone.
pub mod registry {
    pub use crate::registry::Registry;
}

/// The cluster's parts: a partition's store, the log, and the log's wire format.
#[cfg(feature = "cluster")]
pub mod cluster {
    pub use crate::cluster::partition_of;
    /// How a node opens a partition's engine.
    pub mod apply {
        pub use crate::cluster::apply::PARTITION_WRITERS;
    }
    /// Leases and their table.
    pub mod ownership {
        pub use crate::cluster::ownership::{ClusterSettings, ClusterView, Ownership};
    }
    /// The ingest log and a node's reader of it.
    pub mod ingest_log {
        pub use crate::cluster::ingest_log::{IngestLog, LogRetention};
        pub use crate::cluster::log_feed::{FedMessage, LogFeed};
    }
    /// The log's payload.
    pub mod wire {
        pub use crate::cluster::wire::{decode, encode};
    }
}

/// Series `id`'s counter state record in `engine` (see the engine's undo surface).
pub fn counter_state(engine: &crate::engine::Engine, id: crate::registry::SeriesId) -> [u64; 3] {
    engine.shared.counter_table.snapshot(id)
}

/// The engine journal, where a deletion or a retype records what it is about to do.
pub mod intents {
    use std::path::Path;

    /// The kinds (`delete`, `retype`) of the changes `dir`'s journal records as begun and
    /// not finished, read without opening an engine.
    ///
    /// # Errors
    /// When the journal does not read.
    pub fn pending(dir: &Path) -> crate::error::Result<Vec<&'static str>> {
        crate::engine::intent_pending(dir)
    }

    /// Rewrites what `dir`'s journal records as the intent files an older build wrote
    /// (`DELETING`, `RETYPING`), and removes the journal: a directory as an older build's
    /// crash left it.
    ///
    /// # Errors
    /// When the journal does not read or a file cannot be written.
    #[cfg(feature = "fault-injection")]
    pub fn to_older_files(dir: &Path) -> crate::error::Result<()> {
        crate::engine::intent_to_older_files(dir)
    }
}

/// The crash tests' fault hooks: the environment variables that arm them, in a process built
/// with the `fault-injection` feature (as the test suite builds it).
#[cfg(feature = "fault-injection")]
pub mod fault {
    pub use crate::fault::variables::*;
}
