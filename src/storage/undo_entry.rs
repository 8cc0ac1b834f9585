//! One undo entry: what one cell or one counter state held before a change, in the 64
//! bytes (eight little-endian words) the [journals](super::journal) store it in: the
//! counters' journal (`counters.journal`, [`super::counter_journal`]) for the batch being
//! stored, and the apply's chain (`apply.undo`, `engine/apply/undo_chain.rs`) for the groups
//! since the last checkpoint, which adds kinds of its own (3 to 5) beside these two. A
//! retype's record (`engine.journal`, `engine/intent.rs`) keeps each new bucket in a cell
//! entry.
//!
//! ```text
//! cell:  w0 = 1 | tier << 8 | adds << 32, w1 = period start (i64), w2 = chunk << 32 | bucket,
//!        w3 = slot, w4..w8 = count, total, min, max before the change (f64 bits)
//! state: w0 = 2, w1 = series id, w2..w5 = the counter state record's flags, last time and
//!        last raw value before the change, w5..w8 zero
//! ```

use super::cells::CellAt;
use crate::bucket::Bucket;
use crate::time::Timestamp;

/// Bytes per entry: eight words.
pub(crate) const ENTRY_SIZE: usize = 64;
/// Words per entry.
pub(crate) const WORDS: usize = ENTRY_SIZE / 8;

const KIND_CELL: u64 = 1;
const KIND_STATE: u64 = 2;

/// One thing a batch changes, as it was before the batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Undo {
    /// A bucket cell: where it is, how many samples the batch adds to it, its content before.
    Cell {
        /// Where it is.
        at: CellAt,
        /// Samples the batch adds to this cell.
        adds: u32,
        /// The cell before the batch.
        before: Bucket,
    },
    /// A counter state record (see `counter_state.rs`): its three words before the batch.
    State {
        /// Series id.
        id: usize,
        /// Flags, last time, last raw value (bits).
        before: [u64; 3],
    },
}

impl Undo {
    /// The entry's eight words, as the journal stores them.
    pub(crate) fn encode(&self) -> [u64; WORDS] {
        match *self {
            Undo::Cell { at, adds, before } => [
                KIND_CELL | (at.tier as u64) << 8 | u64::from(adds) << 32,
                at.period_start as u64,
                u64::from(at.chunk) << 32 | u64::from(at.bucket),
                u64::from(at.slot),
                before.count,
                before.total.to_bits(),
                before.min.to_bits(),
                before.max.to_bits(),
            ],
            Undo::State { id, before } => [
                KIND_STATE, id as u64, before[0], before[1], before[2], 0, 0, 0,
            ],
        }
    }

    /// The entry `w` encodes; `None` when its kind is none this format writes.
    pub(crate) fn decode(w: [u64; WORDS]) -> Option<Undo> {
        match w[0] & 0xff {
            KIND_CELL => Some(Undo::Cell {
                at: CellAt {
                    tier: ((w[0] >> 8) & 0xff_ffff) as usize,
                    period_start: w[1] as Timestamp,
                    chunk: (w[2] >> 32) as u32,
                    bucket: w[2] as u32,
                    slot: w[3] as u32,
                },
                adds: (w[0] >> 32) as u32,
                before: Bucket {
                    count: w[4],
                    total: f64::from_bits(w[5]),
                    min: f64::from_bits(w[6]),
                    max: f64::from_bits(w[7]),
                    last: None,
                },
            }),
            KIND_STATE => Some(Undo::State {
                id: w[1] as usize,
                before: [w[2], w[3], w[4]],
            }),
            _ => None,
        }
    }
}
