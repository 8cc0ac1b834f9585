//! Samples on their way into an engine, each with the input line it came from, so a refusal
//! found when the batch is written still names its line. A server connection and an import
//! both fill one and write it whole.

use super::report::{IngestReport, Tally};
use crate::engine::Engine;
use crate::error::Result;
use crate::histogram::Observed;
use crate::sample::{ObservedSample, Sample};

/// Samples per engine batch of a server connection or request; it flushes earlier when its
/// input runs dry.
pub(crate) const BATCH: usize = 8192;

/// Samples and the line of each.
pub(crate) struct LineBatch {
    /// The samples, in input order.
    pub(crate) samples: Vec<Sample>,
    /// The input line (or array element) of each sample, 1-based.
    pub(crate) lines: Vec<usize>,
    /// (position in `samples`, observations) of each sample that arrived as a histogram:
    /// its place in `samples` holds its series, time and sum, for the checks a sample gets.
    observed: Vec<(usize, Observed)>,
    /// Samples at which the batch is full.
    room: usize,
}

impl Default for LineBatch {
    /// An empty batch of [`BATCH`] samples that has not taken its room yet.
    fn default() -> LineBatch {
        LineBatch {
            samples: Vec::new(),
            lines: Vec::new(),
            observed: Vec::new(),
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
            observed: Vec::new(),
            room,
        }
    }

    /// Queues `sample` of input line `line`; true once the batch is full.
    pub(crate) fn push(&mut self, sample: Sample, line: usize) -> bool {
        self.samples.push(sample);
        self.lines.push(line);
        self.samples.len() >= self.room
    }

    /// Queues observations that arrived as a histogram, `sample` standing for them (their
    /// series, time and sum); true once the batch is full.
    pub(crate) fn push_observed(
        &mut self,
        sample: Sample,
        observed: Observed,
        line: usize,
    ) -> bool {
        self.observed.push((self.samples.len(), observed));
        self.push(sample, line)
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
        self.observed.clear();
    }

    /// Drops the samples whose place in `refused` is true (refused before the write).
    pub(crate) fn drop_refused(&mut self, refused: &[bool]) {
        let mut keep = refused.iter().map(|refused| !refused);
        self.samples.retain(|_| keep.next() == Some(true));
        let mut keep = refused.iter().map(|refused| !refused);
        self.lines.retain(|_| keep.next() == Some(true));
        if !self.observed.is_empty() {
            // A kept sample's new position: the kept samples before it.
            let mut kept_before = Vec::with_capacity(refused.len());
            let mut kept = 0;
            for &refused in refused {
                kept_before.push(kept);
                kept += usize::from(!refused);
            }
            self.observed.retain(|&(at, _)| !refused[at]);
            for (at, _) in &mut self.observed {
                *at = kept_before[*at];
            }
        }
    }

    /// Writes the batch into `engine` and adds what the engine accepted and refused, by
    /// line, to `report`.
    ///
    /// # Errors
    /// The engine's error (poisoned, I/O); the samples it did not take are then counted
    /// in `report` (and `tally`) as `write_failed`, and none twice.
    pub(crate) fn write(
        &self,
        engine: &Engine,
        report: &mut IngestReport,
        tally: &dyn Tally,
    ) -> Result<()> {
        let failed = |report: &mut IngestReport, n: usize| {
            report.refuse_many(tally, "write_failed", n as u64);
        };
        if self.observed.is_empty() {
            let written = engine
                .record_batch(&self.samples)
                .inspect_err(|_| failed(report, self.samples.len()))?;
            report.add_written(&written, &self.lines);
            return Ok(());
        }
        let mut is_observed = vec![false; self.samples.len()];
        for &(at, _) in &self.observed {
            is_observed[at] = true;
        }
        let (mut samples, mut lines) = (Vec::new(), Vec::new());
        for ((sample, &line), _) in (self.samples.iter().zip(&self.lines))
            .zip(&is_observed)
            .filter(|(_, &observed)| !observed)
        {
            samples.push(*sample);
            lines.push(line);
        }
        if !samples.is_empty() {
            let written = engine
                .record_batch(&samples)
                .inspect_err(|_| failed(report, self.samples.len()))?;
            report.add_written(&written, &lines);
        }
        let observed: Vec<ObservedSample> = (self.observed.iter())
            .map(|(at, observed)| ObservedSample {
                series: self.samples[*at].series,
                ts: self.samples[*at].ts,
                observed: observed.clone(),
            })
            .collect();
        let lines: Vec<usize> = self
            .observed
            .iter()
            .map(|&(at, _)| self.lines[at])
            .collect();
        let written = engine
            .record_observed(&observed)
            .inspect_err(|_| failed(report, observed.len()))?;
        report.add_written(&written, &lines);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::SeriesId;

    /// Dropping refused samples keeps each histogram beside the sample that stands for it.
    #[test]
    fn refusals_keep_histograms_beside_their_samples() {
        let mut batch = LineBatch::with_room(8);
        for i in 0..6u32 {
            let sample = Sample::new(SeriesId(i), 100, f64::from(i));
            if i % 2 == 1 {
                batch.push_observed(sample, Observed::one(f64::from(i)), i as usize + 1);
            } else {
                batch.push(sample, i as usize + 1);
            }
        }
        batch.drop_refused(&[true, true, false, false, true, false]);
        assert_eq!(batch.lines, [3, 4, 6]);
        let kept: Vec<(u32, f64)> = (batch.observed.iter())
            .map(|(at, o)| (batch.samples[*at].series.0, o.sum))
            .collect();
        assert_eq!(kept, [(3, 3.0), (5, 5.0)]);
    }
}
