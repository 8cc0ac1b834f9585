//! Where one connection's or request's parsed samples go: a [`Sink`], the ingest core every
//! protocol writes through, over a [`WriteTarget`] that holds the batch being built and
//! lands it. Two targets implement it: this process's engine
//! ([`crate::ingest::local::LocalTarget`]) and, on a cluster node, the cluster's log
//! (`crate::cluster::edge`, above the server). The sink keeps the one report of what was
//! ingested and counts every refusal, the target's included, under its reason with the line
//! it came from.
//!
//! Parse → check bounds → resolve names → batch → hand to the write target: the protocol
//! handler parses and pushes; the sink checks the sample's value and time
//! ([`super::bounds`], taken afresh at every flush); the target resolves its name through a
//! name cache ([`super::name_cache`]) and queues it; a flush lands the batch and adds what
//! became of it to the report.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::bounds::TimeBounds;
use super::name_cache::{NameBudget, NameCache};
use super::report::{IngestReport, Tally};
use crate::config::TiersConfig;
use crate::counter::SeriesKind;
use crate::error::{RejectReason, Result};
use crate::histogram::Observed;
use crate::time::Timestamp;

/// Where a sink's samples land: the engine of this process, or a cluster's log. It
/// resolves and queues each sample beside the parser, without blocking, and lands the queue
/// when flushed. The sink has checked the sample's value and time before.
pub(crate) trait WriteTarget: Send {
    /// The clock samples that say "now" take, and the time bounds are taken at.
    fn now(&self) -> Timestamp;

    /// The tiers whose windows bound the times of samples accepted.
    fn tiers(&self) -> &TiersConfig;

    /// Queues one sample, `value` at `at` (finite, within the time bounds), with the kind its
    /// write declares. Returns true when the batch is full and should be flushed.
    ///
    /// # Errors
    /// Why the sample is refused, before anything of it is queued.
    fn push(&mut self, at: Parsed<'_>, kind: Option<SeriesKind>, value: f64) -> Queued;

    /// Queues observations that arrived as a histogram, at `at`: its series is declared a
    /// distribution (their sum was checked as a sample's value, and they are finite).
    ///
    /// # Errors
    /// Why they are refused, before anything of them is queued.
    fn push_histogram(&mut self, at: Parsed<'_>, observed: Observed) -> Queued;

    /// Lands what is queued; the future ends once it landed, with what became of it added
    /// to `report`.
    fn flush<'a>(&'a mut self, report: &'a mut IngestReport) -> BoxFuture<'a, Result<()>>;

    /// Lands what is queued, for a caller that answers no one for it (a Graphite socket): a
    /// target whose writes wait on the network (the cluster's edge) may let one batch land
    /// while the next gathers, and return at once. By default, [`WriteTarget::flush`].
    fn flush_behind<'a>(&'a mut self, report: &'a mut IngestReport) -> BoxFuture<'a, Result<()>> {
        self.flush(report)
    }
}

/// Where a parsed sample goes and where it came from, as a sink hands it to its target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parsed<'a> {
    /// The series' name: canonical text or any spelling the key grammar takes.
    pub(crate) series: &'a str,
    pub(crate) ts: Timestamp,
    /// The input line (or array element, or point) it came from, 1-based.
    pub(crate) line: usize,
}

/// What a write target says of a sample it was handed: queued (true when the batch is full
/// and should be flushed), or refused.
pub(crate) type Queued = std::result::Result<bool, Refused>;

/// Why a write target refused a sample.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) reason: RejectReason,
    /// What to tell the client, when more than the reason (a series name that is no key
    /// says why).
    pub(crate) message: Option<String>,
}

impl From<RejectReason> for Refused {
    fn from(reason: RejectReason) -> Refused {
        Refused {
            reason,
            message: None,
        }
    }
}

/// What every sink of one server shares: the totals its refusals and batches count in, the
/// name caches' byte budget, and the series limit.
#[derive(Clone)]
pub(crate) struct SinkShared {
    /// The server's totals (`/metrics`).
    pub(crate) tally: Arc<dyn Tally>,
    /// What all the sinks' name caches hold together.
    pub(crate) name_budget: Arc<NameBudget>,
    /// Bytes all the name caches may hold together.
    pub(crate) name_cache_bytes: usize,
    /// Series the server registers at most; `None`: no limit.
    pub(crate) max_series: Option<usize>,
    /// Held while a new series is checked against the limit and registered, so sinks
    /// registering at the same time cannot overshoot it.
    pub(crate) series_gate: Arc<Mutex<()>>,
}

impl SinkShared {
    /// A name cache within the shared budget.
    pub(crate) fn name_cache<V: Copy>(&self) -> NameCache<V> {
        NameCache::bounded(Arc::clone(&self.name_budget), self.name_cache_bytes)
    }
}

/// One connection's or request's samples on their way to a write target (this process's
/// engine, or a cluster's log), and the report of what became of them.
pub struct Sink {
    target: Box<dyn WriteTarget>,
    /// Checked before the target sees a sample; taken afresh at every flush.
    bounds: TimeBounds,
    report: IngestReport,
    tally: Arc<dyn Tally>,
}

impl Sink {
    /// A sink into `target`, counting its refusals into `shared`'s totals too.
    pub(crate) fn new(target: impl WriteTarget + 'static, shared: &SinkShared) -> Sink {
        Sink {
            target: Box::new(target),
            bounds: TimeBounds::default(),
            report: IngestReport::default(),
            tally: Arc::clone(&shared.tally),
        }
    }

    /// The clock samples that say "now" take.
    pub fn now(&self) -> Timestamp {
        self.target.now()
    }

    /// Queues one sample of the series named `series` (canonical text). Returns true when the
    /// batch is full and should be flushed.
    pub fn push(&mut self, series: &str, ts: Timestamp, value: f64, line: usize) -> bool {
        self.push_declared(series, None, ts, value, line)
    }

    /// [`Sink::push`] for a write that says what kind its series is: the kind is declared
    /// before the sample is written, and a series already fixed as the other kind has the
    /// sample refused as `kind_mismatch`. A sample that is not finite, outside the tiers'
    /// windows or of a name that is no series is refused here, with its line.
    #[inline]
    pub fn push_declared(
        &mut self,
        series: &str,
        kind: Option<SeriesKind>,
        ts: Timestamp,
        value: f64,
        line: usize,
    ) -> bool {
        let target = &self.target;
        if let Err(reason) = (self.bounds).check(value, ts, || (target.tiers(), target.now())) {
            self.refused(line, "sample", reason.into());
            return false;
        }
        let at = Parsed { series, ts, line };
        match self.target.push(at, kind, value) {
            Ok(full) => full,
            Err(refused) => {
                self.refused(line, "sample", refused);
                false
            }
        }
    }

    /// Queues observations that arrived as a histogram (a Prometheus native histogram's
    /// increase, an OTLP histogram point) for the series named `series`, which is declared
    /// a distribution; they are checked as a sample of their sum, and refused as
    /// `not_finite` when their extremes are not finite either, before a series is
    /// registered for them. Returns true when the batch is full and should be flushed.
    pub fn push_histogram(
        &mut self,
        series: &str,
        ts: Timestamp,
        observed: Observed,
        line: usize,
    ) -> bool {
        let target = &self.target;
        let sum = observed.sum;
        let checked = (self.bounds).check(sum, ts, || (target.tiers(), target.now()));
        let checked = checked.and_then(|()| {
            if observed.is_finite() {
                Ok(())
            } else {
                Err(RejectReason::NotFinite)
            }
        });
        if let Err(reason) = checked {
            self.refused(line, "histogram", reason.into());
            return false;
        }
        let at = Parsed { series, ts, line };
        match self.target.push_histogram(at, observed) {
            Ok(full) => full,
            Err(refused) => {
                self.refused(line, "histogram", refused);
                false
            }
        }
    }

    /// Counts what the target refused of `line`, a `what` ("sample", "histogram").
    #[cold]
    fn refused(&mut self, line: usize, what: &str, refused: Refused) {
        let Refused { reason, message } = refused;
        let message = message.unwrap_or_else(|| format!("{what} refused: {reason}"));
        self.reject(line, reason.as_str(), message);
    }

    /// Counts a refused line (or field) under `reason`.
    pub fn reject(&mut self, line: usize, reason: &'static str, message: String) {
        self.report.refuse(&*self.tally, line, reason, || message);
    }

    /// Lands what is queued (written into the engine, or acknowledged by the cluster's log).
    ///
    /// # Errors
    /// The target's error (a poisoned engine, a publish that failed after retries); the
    /// samples that did not land are counted as `write_failed`.
    pub async fn flush(&mut self) -> Result<()> {
        self.bounds.retake();
        self.target.flush(&mut self.report).await
    }

    /// Lands what is queued, for a caller that answers no one for it (a Graphite socket): a
    /// cluster node's sink lets one batch land while the next gathers, and returns at once.
    /// [`Sink::finish`] still waits for all.
    ///
    /// # Errors
    /// As [`Sink::flush`], for what landed since the last call.
    pub async fn flush_behind(&mut self) -> Result<()> {
        self.bounds.retake();
        self.target.flush_behind(&mut self.report).await
    }

    /// Flushes and hands back what was ingested.
    ///
    /// # Errors
    /// As [`Sink::flush`].
    pub async fn finish(mut self) -> Result<IngestReport> {
        self.flush().await?;
        Ok(std::mem::take(&mut self.report))
    }

    /// What was ingested so far (flushed samples only).
    pub fn report(&self) -> &IngestReport {
        &self.report
    }
}

#[cfg(test)]
mod tests;
