//! The single node's [`WriteTarget`]: the local write path ([`super`]) with the write run off
//! the async threads, for a server's connections and requests.
//!
//! Nothing here blocks an async worker: a name the registry already holds is looked up under
//! its read lock, and everything that may wait on a lock or a disk (registering new series,
//! which may create a chunk of files; declaring a series' kind, which takes the counter
//! table's lock; writing the batch) runs on the blocking pool when the batch is flushed.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;

use super::{LocalBatch, LocalQueue, SeriesLimit};
use crate::config::TiersConfig;
use crate::counter::SeriesKind;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::histogram::Observed;
use crate::ingest::batch::BATCH;
use crate::ingest::report::IngestReport;
use crate::ingest::sink::{Parsed, Queued, Refused, SinkShared, WriteTarget};
use crate::time::Timestamp;

/// Batches one connection's or request's samples into the engine, through the local write
/// path: queued beside the parser, written on the blocking pool.
pub(crate) struct LocalTarget {
    engine: Arc<Engine>,
    shared: SinkShared,
    queue: LocalQueue,
    /// The batch handed back by the last write, for the next.
    spare: Option<LocalBatch>,
}

impl LocalTarget {
    /// A target writing into `engine`, within what every sink of the server shares
    /// (`shared`: the series limit, the name caches' budget, the totals counted in).
    pub(crate) fn new(engine: Arc<Engine>, shared: &SinkShared) -> LocalTarget {
        LocalTarget {
            queue: LocalQueue::new(&engine, shared.name_cache(), BATCH),
            engine,
            shared: shared.clone(),
            spare: None,
        }
    }

    /// Registers the batch's new series, declares the kinds its writes name, and writes it;
    /// returns once its samples are in the mapped files, with what became of them added to
    /// `report`. All of it runs on the blocking pool.
    ///
    /// # Errors
    /// The engine's error (poisoned, I/O); the samples are then counted as refused.
    async fn flush_queued(&mut self, report: &mut IngestReport) -> Result<()> {
        if self.queue.len() == 0 {
            return Ok(());
        }
        let spare = self
            .spare
            .take()
            .unwrap_or_else(|| LocalBatch::with_room(BATCH));
        let mut batch = self.queue.swap(&self.engine, spare);
        let mut taken = std::mem::take(report);
        let (engine, shared) = (Arc::clone(&self.engine), self.shared.clone());
        let started = Instant::now();
        let samples = batch.len();
        let (batch, taken, outcome) = tokio::task::spawn_blocking(move || {
            let limit = shared.max_series.map(|max| SeriesLimit {
                max,
                gate: &shared.series_gate,
            });
            let outcome = super::write(&engine, &mut batch, &mut taken, &*shared.tally, limit);
            (batch, taken, outcome)
        })
        .await
        .map_err(|e| Error::Poisoned(format!("write task failed: {e}")))?;
        *report = taken;
        self.spare = Some(batch);
        self.shared.tally.observe_batch(started.elapsed(), samples);
        outcome
    }
}

impl WriteTarget for LocalTarget {
    /// The engine's clock, for samples that say "now".
    fn now(&self) -> Timestamp {
        self.engine.now()
    }

    /// The engine's tiers.
    fn tiers(&self) -> &TiersConfig {
        self.engine.config()
    }

    /// The kind is declared ([`Engine::declare_kind`]) when the batch is flushed, before the
    /// sample is written. A series the registry does not hold yet is registered at the flush
    /// too, off the async threads; a refusal then (`series_limit`, `invalid_series`) names
    /// this sample's line. A sample the sink refused for its value or time registers no
    /// series.
    #[inline]
    fn push(&mut self, at: Parsed<'_>, kind: Option<SeriesKind>, value: f64) -> Queued {
        let Parsed { series, ts, line } = at;
        let queued = (self.queue).push(&self.engine, series, kind, ts, value, line);
        queued.map_err(Refused::from)
    }

    /// The series is declared a distribution when the batch is flushed, as
    /// [`WriteTarget::push`] declares a kind.
    fn push_histogram(&mut self, at: Parsed<'_>, observed: Observed) -> Queued {
        let Parsed { series, ts, line } = at;
        let queued = (self.queue).push_observed(&self.engine, series, ts, observed, line);
        queued.map_err(Refused::from)
    }

    /// Registers the batch's new series, declares the kinds its writes name, and writes it;
    /// ends once its samples are in the mapped files. All of it runs on the blocking pool.
    /// On the engine's error (poisoned, I/O) the samples are counted as refused.
    fn flush<'a>(&'a mut self, report: &'a mut IngestReport) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.flush_queued(report))
    }
}

#[cfg(test)]
mod tests;
