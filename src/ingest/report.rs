//! What an ingest did: samples that landed, refusals counted by reason, and the first
//! refusals with their line numbers, for the client or the import's summary. Every ingest
//! path (a server connection or request, a cluster node's edge, an import) keeps one.

use std::collections::BTreeMap;

use crate::error::RejectReason;
use crate::sample::BatchReport;

/// Refusals reported back with their line numbers.
pub(crate) const FIRST_ERRORS: usize = 10;

/// Totals a report's refusals are also counted in as they happen, with the time each batch
/// took to land: the server's, shown in `/metrics`.
pub(crate) trait Tally: Send + Sync {
    /// Counts `n` refusals under `reason`.
    fn count_rejected(&self, reason: &'static str, n: u64);

    /// Records that a batch of `samples` took `took` to land. By default, nothing.
    fn observe_batch(&self, took: std::time::Duration, samples: usize) {
        let _ = (took, samples);
    }
}

/// No totals beyond the report's own: an import's, which has no server to count in.
#[cfg(feature = "cli")]
pub(crate) struct NoTotals;

#[cfg(feature = "cli")]
impl Tally for NoTotals {
    fn count_rejected(&self, _: &'static str, _: u64) {}
}

/// One refused line, for the client.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LineError {
    /// 1-based line (or array element) number in the request or stream.
    pub line: usize,
    /// The reason's snake_case name.
    pub reason: &'static str,
    /// What was wrong, for a person.
    pub message: String,
}

/// What a request or a connection ingested.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct IngestReport {
    /// Samples that landed.
    pub accepted: u64,
    /// Refusals (lines, fields or samples) per reason.
    pub rejected: BTreeMap<&'static str, u64>,
    /// The refusals with the lowest line numbers, in line order.
    pub errors: Vec<LineError>,
}

impl IngestReport {
    /// Refusals of every reason.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }

    /// Counts `n` refusals under `reason`.
    pub(crate) fn count(&mut self, reason: &'static str, n: u64) {
        *self.rejected.entry(reason).or_default() += n;
    }

    /// Counts `n` samples refused under `reason` here and in `tally`.
    pub(crate) fn refuse_many(&mut self, tally: &dyn Tally, reason: &'static str, n: u64) {
        self.count(reason, n);
        tally.count_rejected(reason, n);
    }

    /// Counts one refused line (or field, or sample) of `line` under `reason`, here and in
    /// `tally`, and keeps its message if it is among the first.
    pub(crate) fn refuse(
        &mut self,
        tally: &dyn Tally,
        line: usize,
        reason: &'static str,
        message: impl FnOnce() -> String,
    ) {
        tally.count_rejected(reason, 1);
        self.reject(line, reason, message);
    }

    /// Adds `other`'s counts and first refusals (kept in line order) to this report (an
    /// import's files, read in parallel).
    #[cfg(feature = "cli")]
    pub(crate) fn absorb(&mut self, other: IngestReport) {
        self.accepted += other.accepted;
        for (reason, n) in other.rejected {
            self.count(reason, n);
        }
        for error in other.errors {
            self.note(error.line, error.reason, || error.message);
        }
    }

    /// Counts one refused line (or field, or sample) of `line` under `reason` here only (an
    /// import, which has no server totals), and keeps its message if it is among the first.
    pub(crate) fn reject(
        &mut self,
        line: usize,
        reason: &'static str,
        message: impl FnOnce() -> String,
    ) {
        self.count(reason, 1);
        self.note(line, reason, message);
    }

    /// Adds what the engine said about a written batch; `lines` maps the batch's positions
    /// to lines.
    pub(crate) fn add_written(&mut self, written: &BatchReport, lines: &[usize]) {
        self.accepted += written.accepted;
        for reason in RejectReason::ALL {
            let n = written.rejected(reason);
            if n > 0 {
                self.count(reason.as_str(), n);
            }
        }
        for &(position, reason) in &written.first_rejections {
            self.note(lines[position], reason.as_str(), || {
                format!("sample refused: {reason}")
            });
        }
    }

    /// Keeps a refusal if it is among the [`FIRST_ERRORS`] lowest lines. A batch's own
    /// refusals are found when it is flushed, after refusals of later lines that were caught
    /// while parsing, so they are placed by line rather than appended.
    fn note(&mut self, line: usize, reason: &'static str, message: impl FnOnce() -> String) {
        let at = self.errors.partition_point(|e| e.line <= line);
        if at < FIRST_ERRORS {
            self.errors.insert(
                at,
                LineError {
                    line,
                    reason,
                    message: message(),
                },
            );
            self.errors.truncate(FIRST_ERRORS);
        }
    }
}

#[cfg(test)]
mod tests;
