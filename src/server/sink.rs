//! Where every protocol's parsed samples go: the [`Sink`] a connection or request pushes
//! into, and the single node's [`LocalSink`], the local write path
//! ([`crate::ingest::local`]) with the write run off the async threads. Every refusal is
//! counted under its reason with the line it came from.
//!
//! Nothing here blocks an async worker: a name the registry already holds is looked up under
//! its read lock, and everything that may wait on a lock or a disk (registering new series,
//! which may create a chunk of files; declaring a series' kind, which takes the counter
//! table's lock; writing the batch) runs on the blocking pool when the batch is flushed.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;

use super::stats::ServerStats;
use super::Limits;
use crate::counter::SeriesKind;
use crate::engine::Engine;
use crate::error::Error;
use crate::error::Result;
use crate::histogram::Observed;
use crate::ingest::batch::BATCH;
use crate::ingest::local::{self, LocalBatch, LocalQueue, SeriesLimit};
use crate::ingest::name_cache::NameCache;
use crate::ingest::report::IngestReport;
use crate::time::Timestamp;

/// Where one connection's or request's samples go: into this server's engine
/// (`LocalSink`), or, on a cluster node, into the cluster's log (`crate::cluster::edge`).
/// A [`super::Backend`] hands one out per connection or request.
pub trait Sink: Send {
    /// The clock samples that say "now" take.
    fn now(&self) -> Timestamp;

    /// Queues one sample of the series named `series` (canonical text). Returns true when the
    /// batch is full and should be flushed.
    fn push(&mut self, series: &str, ts: Timestamp, value: f64, line: usize) -> bool {
        self.push_declared(series, None, ts, value, line)
    }

    /// [`Sink::push`] for a write that says what kind its series is: the kind is declared
    /// before the sample is written, and a series already fixed as the other kind has the
    /// sample refused as `kind_mismatch`.
    fn push_declared(
        &mut self,
        series: &str,
        kind: Option<SeriesKind>,
        ts: Timestamp,
        value: f64,
        line: usize,
    ) -> bool;

    /// Queues observations that arrived as a histogram (a Prometheus native histogram's
    /// increase, an OTLP histogram point) for the series named `series`, which is declared
    /// a distribution. Returns true when the batch is full and should be flushed. By
    /// default (a cluster node, whose log carries single values, a StatsD timer's among
    /// them, but no bucketed observations) they are refused as `histogram_unsupported`.
    fn push_histogram(
        &mut self,
        series: &str,
        ts: Timestamp,
        observed: Observed,
        line: usize,
    ) -> bool {
        let _ = (ts, observed);
        self.reject(
            line,
            "histogram_unsupported",
            format!(
                "histogram of {series} refused: a cluster node takes no bucketed histograms \
                 (only StatsD timers' single values)"
            ),
        );
        false
    }

    /// Counts a refused line (or field) under `reason`.
    fn reject(&mut self, line: usize, reason: &'static str, message: String);

    /// Writes (or publishes) what is queued; the future ends once it landed.
    fn flush(&mut self) -> BoxFuture<'_, Result<()>>;

    /// Writes what is queued, for a caller that answers no one for it (a Graphite socket):
    /// a sink whose writes wait on the network (the cluster's edge) may let one batch land
    /// while the next gathers, and return at once. [`Sink::finish`] still waits for all.
    /// By default, [`Sink::flush`].
    fn flush_behind(&mut self) -> BoxFuture<'_, Result<()>> {
        self.flush()
    }

    /// Flushes and hands back what was ingested.
    fn finish(self: Box<Self>) -> BoxFuture<'static, Result<IngestReport>>;

    /// What was ingested so far (flushed samples only).
    fn report(&self) -> &IngestReport;
}

/// Batches one connection's or request's samples into the engine, through the local write
/// path ([`crate::ingest::local`]): queued beside the parser, written on the blocking pool.
pub(crate) struct LocalSink {
    engine: Arc<Engine>,
    stats: Arc<ServerStats>,
    max_series: Option<usize>,
    queue: LocalQueue,
    /// The batch handed back by the last write, for the next.
    spare: Option<LocalBatch>,
    report: IngestReport,
}

impl LocalSink {
    /// A sink writing into `engine`, counting into `stats`, within `limits` (the series
    /// limit, and the name caches' budget it shares through `stats` with every other sink).
    pub(crate) fn new(engine: Arc<Engine>, stats: Arc<ServerStats>, limits: &Limits) -> LocalSink {
        let cache = NameCache::bounded(Arc::clone(&stats.name_budget), limits.name_cache_bytes);
        LocalSink {
            queue: LocalQueue::new(&engine, cache, BATCH),
            engine,
            stats,
            max_series: limits.max_series,
            spare: None,
            report: IngestReport::default(),
        }
    }

    /// Registers the batch's new series, declares the kinds its writes name, and writes it;
    /// returns once its samples are in the mapped files. All of it runs on the blocking pool.
    ///
    /// # Errors
    /// The engine's error (poisoned, I/O); the samples are then counted as refused.
    async fn flush_queued(&mut self) -> Result<()> {
        if self.queue.len() == 0 {
            return Ok(());
        }
        let spare = self
            .spare
            .take()
            .unwrap_or_else(|| LocalBatch::with_room(BATCH));
        let mut batch = self.queue.swap(&self.engine, spare);
        let mut report = std::mem::take(&mut self.report);
        let (engine, stats, max_series) = (
            Arc::clone(&self.engine),
            Arc::clone(&self.stats),
            self.max_series,
        );
        let started = Instant::now();
        let samples = batch.len();
        let (batch, report, outcome) = tokio::task::spawn_blocking(move || {
            let limit = max_series.map(|max| SeriesLimit {
                max,
                gate: stats.series_gate_lock(),
            });
            let outcome = local::write(&engine, &mut batch, &mut report, &*stats, limit);
            (batch, report, outcome)
        })
        .await
        .map_err(|e| Error::Poisoned(format!("write task failed: {e}")))?;
        self.report = report;
        self.spare = Some(batch);
        self.stats.observe_batch(started.elapsed(), samples);
        outcome
    }
}

impl Sink for LocalSink {
    /// The engine's clock, for samples that say "now".
    fn now(&self) -> Timestamp {
        self.engine.now()
    }

    /// The kind is declared ([`Engine::declare_kind`]) when the batch is flushed, before the
    /// sample is written. A series the registry does not hold yet is registered at the flush
    /// too, off the async threads; a refusal then (`series_limit`, `invalid_series`) names
    /// this sample's line. A sample that is not finite or outside the tiers' windows is
    /// refused here, so it registers no series.
    fn push_declared(
        &mut self,
        series: &str,
        kind: Option<SeriesKind>,
        ts: Timestamp,
        value: f64,
        line: usize,
    ) -> bool {
        match (self.queue).push(&self.engine, series, kind, ts, value, line) {
            Ok(full) => full,
            Err(reason) => {
                self.reject(line, reason.as_str(), format!("sample refused: {reason}"));
                false
            }
        }
    }

    /// The series is declared a distribution when the batch is flushed, as
    /// [`Sink::push_declared`] declares a kind; the observations are checked as a sample of
    /// their sum.
    fn push_histogram(
        &mut self,
        series: &str,
        ts: Timestamp,
        observed: Observed,
        line: usize,
    ) -> bool {
        match (self.queue).push_observed(&self.engine, series, ts, observed, line) {
            Ok(full) => full,
            Err(reason) => {
                self.reject(
                    line,
                    reason.as_str(),
                    format!("histogram refused: {reason}"),
                );
                false
            }
        }
    }

    /// Counts a refused line (or field) under `reason`.
    fn reject(&mut self, line: usize, reason: &'static str, message: String) {
        self.report.refuse(&*self.stats, line, reason, || message);
    }

    /// Registers the batch's new series, declares the kinds its writes name, and writes it;
    /// ends once its samples are in the mapped files. All of it runs on the blocking pool.
    /// On the engine's error (poisoned, I/O) the samples are counted as refused.
    fn flush(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.flush_queued())
    }

    fn finish(mut self: Box<Self>) -> BoxFuture<'static, Result<IngestReport>> {
        Box::pin(async move {
            self.flush_queued().await?;
            Ok(std::mem::take(&mut self.report))
        })
    }

    fn report(&self) -> &IngestReport {
        &self.report
    }
}
