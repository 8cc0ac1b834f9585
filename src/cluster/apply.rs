//! A partition's log entries applied to its engine exactly once: runs of batches through
//! [`Engine::apply`], deletions through [`Engine::apply_delete`], each at its stream
//! sequence. The undo chain, the applied sequence and the recovery after a crash are the
//! engine's (`engine/apply.rs`).

use crate::cluster::delete_entry::LogEntry;
use crate::engine::Engine;
use crate::error::Result;

/// Writer threads of a partition's engine, as a node opens it. A node applies one group per
/// core at once, so its cores are already shared among its partitions' groups: a second
/// writer would only hand a group's samples to another thread and wait for it. With one,
/// the applying thread writes them itself (`engine::writer`).
pub const PARTITION_WRITERS: usize = 1;

/// Applies the log's `entries` in order: each run of batches as one group
/// ([`Engine::apply`]), each deletion alone ([`Engine::apply_delete`]).
///
/// # Errors
/// As those two; what came before the failing entry stays applied.
pub(crate) fn apply_entries(engine: &Engine, entries: Vec<(u64, LogEntry)>) -> Result<()> {
    let mut batches = Vec::new();
    for (seq, entry) in entries {
        match entry {
            LogEntry::Batch(batch) => batches.push((seq, batch)),
            LogEntry::Delete(selector) => {
                if !batches.is_empty() {
                    engine.apply(&std::mem::take(&mut batches))?;
                }
                engine.apply_delete(seq, &selector)?;
            }
        }
    }
    if !batches.is_empty() {
        engine.apply(&batches)?;
    }
    Ok(())
}
