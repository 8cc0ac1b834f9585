//! The one recovery pass of a writable open: every [journal](crate::storage::journal) a
//! stopped process may have left records in is read, each record undone or finished by its
//! kind in one order, the result flushed once, and only then is each journal emptied.
//!
//! The records, by file and kind, as the pass takes them:
//! 1. `counters.journal`, [`Kind::CounterBatch`]: the batch of counter samples being
//!    stored, rolled back ([`CounterTable::roll_back`]);
//! 2. `apply.undo`, [`Kind::ApplyGroup`]: the groups of a numbered log applied since the
//!    last checkpoint whose sequences are above the applied one, rolled back
//!    ([`LeftChain::roll_back`]; a cell in several records gets the first one's pre-image);
//! 3. `engine.journal`, [`Kind::Delete`] and [`Kind::Retype`] (and the intent files older
//!    builds wrote, before them): the changes that must finish once begun, finished in the
//!    order they were recorded ([`LeftIntents::finish`]).
//!
//! Undoes come first, the newest change first, and finishes after them, in sequence order:
//! - a counter batch is always the newest undo record: an apply group's record is written
//!   before its batches run, and nothing appends to `apply.undo` while one does;
//! - an undo puts back what a cell held before a change that was not acknowledged, and a
//!   finish sets a cell's final value (a deleted series' empty bucket, a retype's
//!   converted one). A finish after the undoes leaves the change it finishes whole whether
//!   its record is older or newer than theirs: a finish before them would let an undo's
//!   pre-image (an apply group's cell, a counter batch's state) bring back what a deletion
//!   cleared.
//! - a deletion by an apply ([`super::Engine::apply_delete`]) makes a checkpoint first, so
//!   its record and an apply group in force never meet; `tierdb retype` refuses a
//!   directory fed by applies.
//!
//! Every step sets absolute values and nothing is emptied before the one flush: a crash
//! before it leaves every journal as it was, and the next open repeats the pass whole, in
//! the same order, to the same result. A crash while the journals are emptied, one after
//! another, leaves some of them: their steps are repeated over their own flushed result,
//! which they set again.
//!
//! Then, with what was put back durable, the counter table settles
//! ([`CounterTable::after_recovery`]): the states of ids the registry lost are cleared and
//! the kinds changed `[counters]` rules would change are recorded, both over the states the
//! undoes put back (recorded first, an undone state would erase them).
//!
//! The files stay three (`docs/file-format.md` says why): their records live and end on
//! different clocks, a counter batch's per batch in the page cache, an apply group's until
//! a checkpoint, an intent's until its change is flushed.

use super::apply::ApplyLog;
use super::intent::LeftIntents;
use super::Shared;
use crate::error::Result;
use crate::storage::counter_journal;
#[cfg(doc)]
use {super::apply::LeftChain, crate::counter::CounterTable, crate::storage::journal::Kind};

/// What the pass found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Recovered {
    /// A batch of counter samples was rolled back.
    pub(super) counter_batch: bool,
    /// Apply groups rolled back.
    pub(super) apply_groups: usize,
    /// Deletions and retypes finished.
    pub(super) intents: usize,
}

impl Recovered {
    /// True when the pass changed nothing.
    fn is_empty(&self) -> bool {
        *self == Recovered::default()
    }
}

/// Runs the pass over `shared`'s directory, before any batch, maintenance pass or apply:
/// see the module doc. `apply_log` takes the apply's files when the directory holds them.
///
/// # Errors
/// [`crate::Error::CorruptFile`] naming a journal that does not read, or whose record was
/// written under another tiers layout or lies outside the files; as the undoes and
/// finishes; [`crate::Error::Io`] when the result cannot be flushed (the engine is then
/// poisoned) or a journal emptied. Nothing is emptied unless everything is flushed.
pub(super) fn run(shared: &Shared, apply_log: &ApplyLog) -> Result<Recovered> {
    // Read every journal, changing none.
    let counters = counter_journal::left(&shared.dir)?;
    let chain = apply_log.left(shared)?;
    let intents = LeftIntents::read(shared)?;
    let recovered = Recovered {
        counter_batch: counters.unfinished.is_some(),
        apply_groups: chain.as_ref().map_or(0, |chain| chain.groups_in_force()),
        intents: intents.len(),
    };
    // Undo, newest first.
    shared.counter_table.roll_back(&counters, &shared.storage)?;
    if let Some(chain) = &chain {
        chain.roll_back(shared, apply_log)?;
    }
    // Finish, oldest first.
    intents.finish(shared)?;
    if !recovered.is_empty() {
        if let Err(e) = shared.flush_files() {
            shared.poison(e.to_string());
            return Err(e);
        }
    }
    // Durable: now each journal is emptied.
    counters.end()?;
    if let Some(chain) = chain {
        apply_log.take(shared, chain)?;
    }
    intents.end(&shared.dir)?;
    shared
        .counter_table
        .after_recovery(&shared.dir, &shared.registry)?;
    Ok(recovered)
}

#[cfg(test)]
mod tests;
