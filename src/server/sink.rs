//! Where every protocol's parsed samples go: series names resolved to ids (with a
//! per-connection cache drawing on one byte budget for all connections), samples gathered
//! into batches, batches written through the engine off the async threads, and every refusal
//! counted under its reason with the line it came from.
//!
//! Nothing here blocks an async worker: a name the registry already holds is looked up under
//! its read lock, and everything that may wait on a lock or a disk (registering new series,
//! which may create a chunk of files; declaring a series' kind, which takes the counter
//! table's lock; writing the batch) runs on the blocking pool when the batch is flushed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::stats::ServerStats;
use super::Limits;
use crate::cluster::edge::EdgeSink;
use crate::counter::SeriesKind;
use crate::error::RejectReason;
use crate::registry::SeriesId;
use crate::sample::{BatchReport, Sample};
use crate::time::Timestamp;
use crate::{Engine, Error, Result};

/// Samples per engine batch; a connection flushes earlier when its input runs dry.
pub const BATCH: usize = 8192;
/// Bytes of names not registered yet that a batch may queue before it asks to be flushed,
/// so a request naming endless new series is registered in steps.
const NEW_NAME_BYTES: usize = 1024 * 1024;
/// Entries of room a batch keeps, between flushes, for new names and declared kinds.
const KEPT_ROOM: usize = 256;
/// Refusals reported back with their line numbers.
const FIRST_ERRORS: usize = 10;
/// Bytes of names one connection may cache, however much of the server-wide budget
/// ([`Limits::name_cache_bytes`]) is free, so a few connections cannot take all of it.
const CACHE_BYTES: usize = 8 * 1024 * 1024;
/// What a cached name costs beyond its text: the map's slot and the allocation's overhead.
const CACHE_ENTRY_BYTES: usize = 32;

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
    fn count(&mut self, reason: &'static str, n: u64) {
        *self.rejected.entry(reason).or_default() += n;
    }

    /// Counts `n` samples refused under `reason` here and in the server's totals (`stats`).
    pub(crate) fn refuse_many(&mut self, stats: &ServerStats, reason: &'static str, n: u64) {
        self.count(reason, n);
        stats.count_rejected(reason, n);
    }

    /// Counts one refused line (or field, or sample) of `line` under `reason`, here and in
    /// the server's totals, and keeps its message if it is among the first.
    pub(crate) fn refuse(
        &mut self,
        stats: &ServerStats,
        line: usize,
        reason: &'static str,
        message: impl FnOnce() -> String,
    ) {
        stats.count_rejected(reason, 1);
        self.reject(line, reason, message);
    }

    /// Adds `other`'s counts and first refusals (kept in line order) to this report.
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

/// Where one connection's or request's samples go: into this server's engine, or, on a
/// cluster node, into the cluster's log.
pub enum Sink {
    /// A single node: batches written into the engine.
    Local(LocalSink),
    /// A cluster node: batches published per partition (see [`EdgeSink`]).
    Cluster(EdgeSink),
}

impl Sink {
    /// The clock samples that say "now" take.
    pub fn now(&self) -> Timestamp {
        match self {
            Sink::Local(sink) => sink.now(),
            Sink::Cluster(sink) => sink.now(),
        }
    }

    /// Queues one sample of the series named `series` (canonical text). Returns true when the
    /// batch is full and should be flushed.
    pub fn push(&mut self, series: &str, ts: Timestamp, value: f64, line: usize) -> bool {
        self.push_declared(series, None, ts, value, line)
    }

    /// [`Sink::push`] for a write that says what kind its series is; see
    /// [`LocalSink::push_declared`].
    pub fn push_declared(
        &mut self,
        series: &str,
        kind: Option<SeriesKind>,
        ts: Timestamp,
        value: f64,
        line: usize,
    ) -> bool {
        match self {
            Sink::Local(sink) => sink.push_declared(series, kind, ts, value, line),
            Sink::Cluster(sink) => sink.push_declared(series, kind, ts, value, line),
        }
    }

    /// Counts a refused line (or field) under `reason`.
    pub fn reject(&mut self, line: usize, reason: &'static str, message: impl Into<String>) {
        match self {
            Sink::Local(sink) => sink.reject(line, reason, message),
            Sink::Cluster(sink) => sink.reject(line, reason, message),
        }
    }

    /// Writes (or publishes) what is queued; returns once it landed.
    ///
    /// # Errors
    /// As [`LocalSink::flush`] and [`EdgeSink::flush`].
    pub async fn flush(&mut self) -> Result<()> {
        match self {
            Sink::Local(sink) => sink.flush().await,
            Sink::Cluster(sink) => sink.flush().await,
        }
    }

    /// Flushes and hands back what was ingested.
    ///
    /// # Errors
    /// As [`Sink::flush`].
    pub async fn finish(self) -> Result<IngestReport> {
        match self {
            Sink::Local(sink) => sink.finish().await,
            Sink::Cluster(sink) => sink.finish().await,
        }
    }

    /// What was ingested so far (flushed samples only).
    pub fn report(&self) -> &IngestReport {
        match self {
            Sink::Local(sink) => sink.report(),
            Sink::Cluster(sink) => sink.report(),
        }
    }
}

/// Batches one connection's or request's samples into the engine.
pub struct LocalSink {
    engine: Arc<Engine>,
    stats: Arc<ServerStats>,
    max_series: Option<usize>,
    batch: Batch,
    cache: NameCache,
    report: IngestReport,
}

/// The samples queued since the last flush, with what must happen before they are written.
#[derive(Default)]
struct Batch {
    /// The samples; one whose series is new carries a placeholder id until it is registered.
    samples: Vec<Sample>,
    /// Line number of each sample, to report refusals precisely.
    lines: Vec<usize>,
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
        self.samples.is_empty()
    }

    /// Empties the batch for the next one. The samples keep their room (every batch needs
    /// it); what only a batch of new series or declared kinds needs is given back once
    /// large, so an idle connection holds little.
    fn clear(&mut self) {
        self.samples.clear();
        self.lines.clear();
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
    pub fn new(engine: Arc<Engine>, stats: Arc<ServerStats>, limits: &Limits) -> LocalSink {
        LocalSink {
            cache: NameCache::new(Arc::clone(&stats), limits.name_cache_bytes),
            engine,
            stats,
            max_series: limits.max_series,
            batch: Batch {
                samples: Vec::with_capacity(BATCH),
                lines: Vec::with_capacity(BATCH),
                ..Batch::default()
            },
            report: IngestReport::default(),
        }
    }

    /// The engine's clock, for samples that say "now".
    pub fn now(&self) -> Timestamp {
        self.engine.now()
    }

    /// [`Sink::push`] for a write that says what kind its series is: the kind is declared
    /// ([`Engine::declare_kind`]) when the batch is flushed, before the sample is written,
    /// and a series already fixed as the other kind has the sample refused as
    /// `kind_mismatch`.
    ///
    /// A series the registry does not hold yet is registered at the flush too, off the async
    /// threads; a refusal then (`series_limit`, `invalid_series`) names this sample's line.
    pub fn push_declared(
        &mut self,
        series: &str,
        kind: Option<SeriesKind>,
        ts: Timestamp,
        value: f64,
        line: usize,
    ) -> bool {
        let batch = &mut self.batch;
        let position = batch.samples.len();
        let id = match self.cache.get(series) {
            Some(id) => id,
            None => match self.engine.registry().get(series) {
                Some(id) => {
                    self.cache.insert(series.into(), id);
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
        batch.samples.push(Sample::new(id, ts, value));
        batch.lines.push(line);
        batch.samples.len() >= BATCH || batch.new_name_bytes >= NEW_NAME_BYTES
    }

    /// Counts a refused line (or field) under `reason`.
    pub fn reject(&mut self, line: usize, reason: &'static str, message: impl Into<String>) {
        self.report
            .refuse(&self.stats, line, reason, || message.into());
    }

    /// Registers the batch's new series, declares the kinds its writes name, and writes it;
    /// returns once its samples are in the mapped files. All of it runs on the blocking pool.
    ///
    /// # Errors
    /// The engine's error (poisoned, I/O); the samples are then counted as refused.
    pub async fn flush(&mut self) -> Result<()> {
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
            .observe_batch(started.elapsed(), self.batch.samples.len());
        let outcome = outcome.map(|registered| {
            for (name, id) in registered {
                self.cache.insert(name, id);
            }
        });
        self.batch.clear();
        outcome
    }

    /// Flushes and hands back what was ingested.
    ///
    /// # Errors
    /// As [`LocalSink::flush`].
    pub async fn finish(mut self) -> Result<IngestReport> {
        self.flush().await?;
        Ok(self.report)
    }

    /// What was ingested so far (flushed samples only).
    pub fn report(&self) -> &IngestReport {
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
            refused.resize(batch.samples.len(), false);
        }
        for &(position, index) in &batch.unresolved {
            match &ids[index as usize] {
                Ok(id) => batch.samples[position].series = *id,
                Err((reason, message)) => {
                    refused[position] = true;
                    self.refuse(report, batch.lines[position], reason, message);
                }
            }
        }
        let mut declared = HashMap::new();
        for &(position, kind) in &batch.declared {
            if refused[position] {
                continue;
            }
            let id = batch.samples[position].series;
            let outcome = declared
                .entry((id, kind))
                .or_insert_with(|| self.declare(id, kind));
            if let Err((reason, message)) = outcome {
                refused[position] = true;
                self.refuse(report, batch.lines[position], reason, message);
            }
        }
        if refused.contains(&true) {
            let mut keep = refused.iter().map(|refused| !refused);
            batch.samples.retain(|_| keep.next() == Some(true));
            let mut keep = refused.iter().map(|refused| !refused);
            batch.lines.retain(|_| keep.next() == Some(true));
        }
        let registered = names
            .into_iter()
            .zip(ids)
            .filter_map(|((_, name), id)| Some((name, id.ok()?)))
            .collect();
        if batch.samples.is_empty() {
            return Ok(registered);
        }
        match self.engine.record_batch(&batch.samples) {
            Ok(written) => {
                merge(report, &written, &batch.lines);
                Ok(registered)
            }
            Err(e) => {
                let n = batch.samples.len() as u64;
                report.refuse_many(&self.stats, "write_failed", n);
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
                    Ok(None) if registry.len() >= max => {
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
        report.refuse(&self.stats, line, reason, || message.to_owned());
    }
}

/// Adds what the engine said about a written batch to `report`; `lines` maps the batch's
/// positions to lines.
pub(crate) fn merge(report: &mut IngestReport, written: &BatchReport, lines: &[usize]) {
    report.accepted += written.accepted;
    for reason in RejectReason::ALL {
        let n = written.rejected(reason);
        if n > 0 {
            report.count(reason.as_str(), n);
        }
    }
    for &(position, reason) in &written.first_rejections {
        report.note(lines[position], reason.as_str(), || {
            format!("sample refused: {reason}")
        });
    }
}

/// A connection's cache from series name to what the name resolves to: its id on a single
/// node, its partition on a cluster node's edge. Its bytes are drawn from a budget every
/// connection shares (kept in [`ServerStats`]), and given back when it is cleared or dropped.
pub(crate) struct NameCache<V = SeriesId> {
    map: HashMap<Box<str>, V>,
    /// Bytes this cache holds, as drawn from the budget.
    bytes: usize,
    stats: Arc<ServerStats>,
    /// The budget of all connections' caches together.
    budget: usize,
}

impl<V: Copy> NameCache<V> {
    pub(crate) fn new(stats: Arc<ServerStats>, budget: usize) -> NameCache<V> {
        NameCache {
            map: HashMap::new(),
            bytes: 0,
            stats,
            budget,
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<V> {
        self.map.get(name).copied()
    }

    /// Remembers `name`. A cache at its own limit ([`CACHE_BYTES`]), or one that finds the
    /// shared budget spent, starts over; if the budget is still spent by the others, the
    /// name is not cached (lookups then go to the registry).
    pub(crate) fn insert(&mut self, name: Box<str>, id: V) {
        if self.map.contains_key(&name) {
            return;
        }
        let cost = name.len() + CACHE_ENTRY_BYTES;
        if self.bytes + cost > CACHE_BYTES {
            self.clear();
        }
        if !self.stats.draw_name_cache(cost, self.budget) {
            if self.bytes == 0 {
                return;
            }
            self.clear();
            if !self.stats.draw_name_cache(cost, self.budget) {
                return;
            }
        }
        self.bytes += cost;
        self.map.insert(name, id);
    }

    /// Empties the cache, freeing its memory, and gives its bytes back to the budget.
    fn clear(&mut self) {
        if self.bytes > 0 {
            self.stats.count_name_cache_clear();
        }
        self.map = HashMap::new();
        self.stats.return_name_cache(self.bytes);
        self.bytes = 0;
    }
}

impl<V> Drop for NameCache<V> {
    fn drop(&mut self) {
        self.stats.return_name_cache(self.bytes);
    }
}

#[cfg(test)]
mod tests;
