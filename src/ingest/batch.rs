//! Samples on their way into an engine, each with the input line it came from, so a refusal
//! found when the batch is written still names its line. A server connection and an import
//! both fill one and write it whole.

use super::report::IngestReport;
use crate::engine::Engine;
use crate::sample::Sample;
use crate::Result;

/// Samples per engine batch of a server connection or request; it flushes earlier when its
/// input runs dry.
pub const BATCH: usize = 8192;

/// Samples and the line of each.
pub(crate) struct LineBatch {
    /// The samples, in input order.
    pub(crate) samples: Vec<Sample>,
    /// The input line (or array element) of each sample, 1-based.
    pub(crate) lines: Vec<usize>,
    /// Samples at which the batch is full.
    room: usize,
}

impl Default for LineBatch {
    /// An empty batch of [`BATCH`] samples that has not taken its room yet.
    fn default() -> LineBatch {
        LineBatch {
            samples: Vec::new(),
            lines: Vec::new(),
            room: BATCH,
        }
    }
}

impl LineBatch {
    /// A batch full at `room` samples, with room for all of them, so filling it never
    /// grows it.
    pub(crate) fn with_room(room: usize) -> LineBatch {
        LineBatch {
            samples: Vec::with_capacity(room),
            lines: Vec::with_capacity(room),
            room,
        }
    }

    /// Queues `sample` of input line `line`; true once the batch is full.
    pub(crate) fn push(&mut self, sample: Sample, line: usize) -> bool {
        self.samples.push(sample);
        self.lines.push(line);
        self.samples.len() >= self.room
    }

    pub(crate) fn len(&self) -> usize {
        self.samples.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Empties the batch, keeping its room.
    pub(crate) fn clear(&mut self) {
        self.samples.clear();
        self.lines.clear();
    }

    /// Drops the samples whose place in `refused` is true (refused before the write).
    pub(crate) fn drop_refused(&mut self, refused: &[bool]) {
        let mut keep = refused.iter().map(|refused| !refused);
        self.samples.retain(|_| keep.next() == Some(true));
        let mut keep = refused.iter().map(|refused| !refused);
        self.lines.retain(|_| keep.next() == Some(true));
    }

    /// Writes the batch into `engine` and adds what the engine accepted and refused, by
    /// line, to `report`.
    ///
    /// # Errors
    /// The engine's error (poisoned, I/O); nothing is added to `report` then.
    pub(crate) fn write(&self, engine: &Engine, report: &mut IngestReport) -> Result<()> {
        let written = engine.record_batch(&self.samples)?;
        report.add_written(&written, &self.lines);
        Ok(())
    }
}
