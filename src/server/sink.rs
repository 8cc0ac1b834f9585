//! Where every protocol's parsed samples go: series names resolved to ids (with a
//! per-connection cache drawing on one byte budget for all connections), samples gathered
//! into batches, batches written through the engine off the async threads, and every refusal
//! counted under its reason with the line it came from.
//!
//! Nothing here blocks an async worker: a name the registry already holds is looked up under
//! its read lock, and everything that may wait on a lock or a disk (registering new series,
//! which may create a chunk of files; declaring a series' kind, which takes the counter
//! table's lock; writing the batch) runs on the blocking pool when the batch is flushed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;

use super::stats::ServerStats;
use super::Limits;
use crate::counter::SeriesKind;
use crate::engine::{Engine, SinkBounds};
use crate::error::Error;
use crate::error::Result;
use crate::ingest::batch::{LineBatch, BATCH};
use crate::ingest::name_cache::NameCache;
use crate::ingest::report::IngestReport;
use crate::registry::SeriesId;
use crate::sample::Sample;
use crate::time::Timestamp;

/// Bytes of names not registered yet that a batch may queue before it asks to be flushed,
/// so a request naming endless new series is registered in steps.
const NEW_NAME_BYTES: usize = 1024 * 1024;
/// Entries of room a batch keeps, between flushes, for new names and declared kinds.
const KEPT_ROOM: usize = 256;

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

/// Batches one connection's or request's samples into the engine.
pub(crate) struct LocalSink {
    engine: Arc<Engine>,
    stats: Arc<ServerStats>,
    max_series: Option<usize>,
    batch: Batch,
    cache: NameCache<SeriesId>,
    /// The registry's deletions when `cache` was last checked: a deletion since may have
    /// made a cached id a hole, so the cache is emptied.
    deletions_seen: u64,
    report: IngestReport,
    /// The first and last second a sample may have, taken at the batch's first sample.
    bounds: SinkBounds,
}

/// The samples queued since the last flush, with what must happen before they are written.
#[derive(Default)]
struct Batch {
    /// The samples and their lines; one whose series is new carries a placeholder id until
    /// it is registered.
    queued: LineBatch,
    /// Names the registry did not hold when queued, each with its place in the order of
    /// first appearance (the order they are registered in).
    new_names: HashMap<Box<str>, u32>,
    /// Bytes of `new_names`.
    new_name_bytes: usize,
    /// (position in `samples`, index of its name in `new_names`) of each sample of a new name.
    unresolved: Vec<(usize, u32)>,
    /// (position in `samples`, kind) of each sample whose write declares its series' kind.
    declared: Vec<(usize, SeriesKind)>,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Empties the batch for the next one. The samples keep their room (every batch needs
    /// it); what only a batch of new series or declared kinds needs is given back once
    /// large, so an idle connection holds little.
    fn clear(&mut self) {
        self.queued.clear();
        self.new_names.clear();
        self.new_names.shrink_to(KEPT_ROOM);
        self.new_name_bytes = 0;
        self.unresolved.clear();
        self.unresolved.shrink_to(KEPT_ROOM);
        self.declared.clear();
        self.declared.shrink_to(KEPT_ROOM);
    }
}

/// What the blocking part of a flush needs from the sink.
struct Writer {
    engine: Arc<Engine>,
    stats: Arc<ServerStats>,
    max_series: Option<usize>,
}

impl LocalSink {
    /// A sink writing into `engine`, counting into `stats`, within `limits` (the series
    /// limit, and the name caches' budget it shares through `stats` with every other sink).
    pub(crate) fn new(engine: Arc<Engine>, stats: Arc<ServerStats>, limits: &Limits) -> LocalSink {
        LocalSink {
            cache: NameCache::bounded(Arc::clone(&stats.name_budget), limits.name_cache_bytes),
            deletions_seen: engine.registry().deletions(),
            engine,
            stats,
            max_series: limits.max_series,
            batch: Batch {
                queued: LineBatch::with_room(BATCH),
                ..Batch::default()
            },
            report: IngestReport::default(),
            bounds: SinkBounds::default(),
        }
    }

    /// Registers the batch's new series, declares the kinds its writes name, and writes it;
    /// returns once its samples are in the mapped files. All of it runs on the blocking pool.
    ///
    /// # Errors
    /// The engine's error (poisoned, I/O); the samples are then counted as refused.
    async fn flush_queued(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let mut batch = std::mem::take(&mut self.batch);
        let mut report = std::mem::take(&mut self.report);
        let writer = Writer {
            engine: Arc::clone(&self.engine),
            stats: Arc::clone(&self.stats),
            max_series: self.max_series,
        };
        let started = Instant::now();
        let (batch, report, outcome) = tokio::task::spawn_blocking(move || {
            let outcome = writer.write(&mut batch, &mut report);
            (batch, report, outcome)
        })
        .await
        .map_err(|e| Error::Poisoned(format!("write task failed: {e}")))?;
        self.batch = batch;
        self.report = report;
        self.stats
            .observe_batch(started.elapsed(), self.batch.queued.len());
        let outcome = outcome.map(|registered| {
            for (name, id) in registered {
                self.cache.insert(&name, id);
            }
        });
        self.batch.clear();
        self.bounds.reset();
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
        let engine = &self.engine;
        if let Err(reason) = (self.bounds).check(engine.config(), || engine.now(), value, ts) {
            self.reject(line, reason.as_str(), format!("sample refused: {reason}"));
            return false;
        }
        let deletions = engine.registry().deletions();
        if deletions != self.deletions_seen {
            self.cache.forget_all();
            self.deletions_seen = deletions;
        }
        let batch = &mut self.batch;
        let position = batch.queued.len();
        let id = match self.cache.get(series) {
            Some(id) => id,
            None => match self.engine.registry().get(series) {
                Some(id) => {
                    self.cache.insert(series, id);
                    id
                }
                None => {
                    let index = match batch.new_names.get(series) {
                        Some(&index) => index,
                        None => {
                            let index = batch.new_names.len() as u32;
                            batch.new_names.insert(series.into(), index);
                            batch.new_name_bytes += series.len();
                            index
                        }
                    };
                    batch.unresolved.push((position, index));
                    SeriesId(u32::MAX)
                }
            },
        };
        if let Some(kind) = kind {
            batch.declared.push((position, kind));
        }
        batch.queued.push(Sample::new(id, ts, value), line)
            || batch.new_name_bytes >= NEW_NAME_BYTES
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

impl Writer {
    /// The blocking part of [`Sink::flush`]: registers `batch`'s new names (in order of
    /// first appearance), declares the kinds its samples name (in line order), drops the
    /// samples refused on the way, and writes the rest. Returns the names registered, for
    /// the cache.
    fn write(
        &self,
        batch: &mut Batch,
        report: &mut IngestReport,
    ) -> Result<Vec<(Box<str>, SeriesId)>> {
        let mut names: Vec<(u32, Box<str>)> = batch
            .new_names
            .drain()
            .map(|(name, index)| (index, name))
            .collect();
        names.sort_unstable_by_key(|(index, _)| *index);
        let ids: Vec<_> = names.iter().map(|(_, name)| self.register(name)).collect();
        let mut refused = Vec::new();
        if !batch.unresolved.is_empty() || !batch.declared.is_empty() {
            refused.resize(batch.queued.len(), false);
        }
        for &(position, index) in &batch.unresolved {
            match &ids[index as usize] {
                Ok(id) => batch.queued.samples[position].series = *id,
                Err((reason, message)) => {
                    refused[position] = true;
                    self.refuse(report, batch.queued.lines[position], reason, message);
                }
            }
        }
        let mut declared = HashMap::new();
        for &(position, kind) in &batch.declared {
            if refused[position] {
                continue;
            }
            let id = batch.queued.samples[position].series;
            let outcome = declared
                .entry((id, kind))
                .or_insert_with(|| self.declare(id, kind));
            if let Err((reason, message)) = outcome {
                refused[position] = true;
                self.refuse(report, batch.queued.lines[position], reason, message);
            }
        }
        if refused.contains(&true) {
            batch.queued.drop_refused(&refused);
        }
        let registered = names
            .into_iter()
            .zip(ids)
            .filter_map(|((_, name), id)| Some((name, id.ok()?)))
            .collect();
        if batch.queued.is_empty() {
            return Ok(registered);
        }
        match batch.queued.write(&self.engine, report) {
            Ok(()) => Ok(registered),
            Err(e) => {
                let n = batch.queued.len() as u64;
                report.refuse_many(&*self.stats, "write_failed", n);
                Err(e)
            }
        }
    }

    /// The id of the new series `name`, registering it. With a series limit, the check and
    /// the registration happen under one lock shared by every sink, so concurrent
    /// connections cannot register more than the limit between them.
    fn register(&self, name: &str) -> std::result::Result<SeriesId, (&'static str, String)> {
        let registered = match self.max_series {
            None => self.engine.series(name),
            Some(max) => {
                let _gate = self.stats.series_gate();
                let registry = self.engine.registry();
                match registry.lookup(name) {
                    Ok(Some(id)) => Ok(id),
                    Ok(None) if registry.live_len() >= max => {
                        return Err((
                            "series_limit",
                            format!(
                                "new series {name:?} refused: the server holds its limit of \
                                 {max} series"
                            ),
                        ))
                    }
                    Ok(None) => self.engine.series(name),
                    Err(e) => Err(e),
                }
            }
        };
        match registered {
            Ok(id) => Ok(id),
            Err(e @ Error::InvalidSeries { .. }) => Err(("invalid_series", e.to_string())),
            Err(e) => Err(("write_failed", e.to_string())),
        }
    }

    /// Declares series `id` a `kind`.
    fn declare(
        &self,
        id: SeriesId,
        kind: SeriesKind,
    ) -> std::result::Result<(), (&'static str, String)> {
        let Err(e) = self.engine.declare_kind(id, kind) else {
            return Ok(());
        };
        let reason = match e {
            Error::Rejected(reason) => reason.as_str(),
            _ => "write_failed",
        };
        let message = match reason {
            "kind_mismatch" => format!(
                "{} is already a {}; this write says {}",
                self.engine
                    .registry()
                    .key(id)
                    .map_or_else(|| id.to_string(), |key| key.to_string()),
                self.engine.series_kind(id).as_str(),
                kind.as_str()
            ),
            _ => e.to_string(),
        };
        Err((reason, message))
    }

    /// Counts one refused sample of `line`.
    fn refuse(&self, report: &mut IngestReport, line: usize, reason: &'static str, message: &str) {
        report.refuse(&*self.stats, line, reason, || message.to_owned());
    }
}
