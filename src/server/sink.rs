//! Where every protocol's parsed samples go: series names resolved to ids (with a
//! per-connection cache), samples gathered into batches, batches written through the engine
//! off the async threads, and every refusal counted under its reason with the line it came
//! from.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::stats::ServerStats;
use crate::counter::SeriesKind;
use crate::registry::SeriesId;
use crate::sample::Sample;
use crate::time::Timestamp;
use crate::{Engine, Error, Result};

/// Samples per engine batch; a connection flushes earlier when its input runs dry.
pub const BATCH: usize = 8192;
/// Refusals reported back with their line numbers.
const FIRST_ERRORS: usize = 10;
/// Bytes of names a connection remembers; past this the cache starts over, so a client
/// sending endless new names cannot grow it without bound.
const CACHE_BYTES: usize = 8 * 1024 * 1024;

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
    /// The first refusals with their line numbers.
    pub errors: Vec<LineError>,
}

impl IngestReport {
    /// Refusals of every reason.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
}

/// Batches one connection's or request's samples into the engine.
pub struct Sink {
    engine: Arc<Engine>,
    stats: Arc<ServerStats>,
    max_series: Option<usize>,
    batch: Vec<Sample>,
    /// Line number of each sample in `batch`, to report engine refusals precisely.
    lines: Vec<usize>,
    cache: HashMap<Box<str>, SeriesId>,
    cache_bytes: usize,
    report: IngestReport,
}

impl Sink {
    /// A sink writing into `engine`, counting into `stats`, refusing new series once the
    /// registry holds `max_series`.
    pub fn new(engine: Arc<Engine>, stats: Arc<ServerStats>, max_series: Option<usize>) -> Sink {
        Sink {
            engine,
            stats,
            max_series,
            batch: Vec::with_capacity(BATCH),
            lines: Vec::with_capacity(BATCH),
            cache: HashMap::new(),
            cache_bytes: 0,
            report: IngestReport::default(),
        }
    }

    /// The engine's clock, for samples that say "now".
    pub fn now(&self) -> Timestamp {
        self.engine.now()
    }

    /// Queues one sample of the series named `series` (canonical text). Returns true when the
    /// batch is full and should be flushed.
    pub fn push(&mut self, series: &str, ts: Timestamp, value: f64, line: usize) -> bool {
        self.push_declared(series, None, ts, value, line)
    }

    /// [`Sink::push`] for a write that says what kind its series is: the kind is declared
    /// first ([`Engine::declare_kind`]), and a series already fixed as the other kind has the
    /// sample refused as `kind_mismatch`.
    pub fn push_declared(
        &mut self,
        series: &str,
        kind: Option<SeriesKind>,
        ts: Timestamp,
        value: f64,
        line: usize,
    ) -> bool {
        let id = match self.cache.get(series) {
            Some(&id) => id,
            None => match self.resolve(series) {
                Ok(id) => {
                    if self.cache_bytes >= CACHE_BYTES {
                        self.cache.clear();
                        self.cache_bytes = 0;
                    }
                    self.cache_bytes += series.len() + 32;
                    self.cache.insert(series.into(), id);
                    id
                }
                Err((reason, message)) => {
                    self.reject(line, reason, message);
                    return false;
                }
            },
        };
        if let Some(kind) = kind {
            if let Err(e) = self.engine.declare_kind(id, kind) {
                let reason = match e {
                    Error::Rejected(reason) => reason.as_str(),
                    _ => "write_failed",
                };
                let message = match reason {
                    "kind_mismatch" => format!(
                        "{series} is already a {}; this write says {}",
                        self.engine.series_kind(id).as_str(),
                        kind.as_str()
                    ),
                    _ => e.to_string(),
                };
                self.reject(line, reason, message);
                return false;
            }
        }
        self.batch.push(Sample::new(id, ts, value));
        self.lines.push(line);
        self.batch.len() >= BATCH
    }

    fn resolve(&self, series: &str) -> std::result::Result<SeriesId, (&'static str, String)> {
        let registry = self.engine.registry();
        if let Some(id) = registry.get(series) {
            return Ok(id);
        }
        if let Some(max) = self.max_series {
            if registry.len() >= max && registry.lookup(series).ok().flatten().is_none() {
                return Err((
                    "series_limit",
                    format!(
                        "new series {series:?} refused: the server holds its limit of {max} series"
                    ),
                ));
            }
        }
        match self.engine.series(series) {
            Ok(id) => Ok(id),
            Err(e @ Error::InvalidSeries { .. }) => Err(("invalid_series", e.to_string())),
            Err(e) => Err(("write_failed", e.to_string())),
        }
    }

    /// Counts a refused line (or field) under `reason`.
    pub fn reject(&mut self, line: usize, reason: &'static str, message: impl Into<String>) {
        *self.report.rejected.entry(reason).or_default() += 1;
        self.stats.count_rejected(reason, 1);
        if self.report.errors.len() < FIRST_ERRORS {
            self.report.errors.push(LineError {
                line,
                reason,
                message: message.into(),
            });
        }
    }

    /// Writes the queued samples; returns once they are in the mapped files.
    ///
    /// # Errors
    /// The engine's error (poisoned, I/O); the samples are then counted as refused.
    pub async fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let engine = Arc::clone(&self.engine);
        let started = Instant::now();
        let (batch, result) = tokio::task::spawn_blocking(move || {
            let result = engine.record_batch(&batch);
            (batch, result)
        })
        .await
        .map_err(|e| Error::Poisoned(format!("write task failed: {e}")))?;
        self.stats.observe_batch(started.elapsed(), batch.len());
        self.batch = batch;
        let outcome = match result {
            Ok(report) => {
                self.report.accepted += report.accepted;
                for reason in crate::sample::RejectReason::ALL {
                    let n = report.rejected(reason);
                    if n > 0 {
                        *self.report.rejected.entry(reason.as_str()).or_default() += n;
                    }
                }
                for &(position, reason) in &report.first_rejections {
                    if self.report.errors.len() < FIRST_ERRORS {
                        self.report.errors.push(LineError {
                            line: self.lines[position],
                            reason: reason.as_str(),
                            message: format!("sample refused: {reason}"),
                        });
                    }
                }
                Ok(())
            }
            Err(e) => {
                *self.report.rejected.entry("write_failed").or_default() += self.batch.len() as u64;
                self.stats
                    .count_rejected("write_failed", self.batch.len() as u64);
                Err(e)
            }
        };
        self.batch.clear();
        self.lines.clear();
        outcome
    }

    /// Flushes and hands back what was ingested.
    ///
    /// # Errors
    /// As [`Sink::flush`].
    pub async fn finish(mut self) -> Result<IngestReport> {
        self.flush().await?;
        Ok(self.report)
    }

    /// What was ingested so far (flushed samples only).
    pub fn report(&self) -> &IngestReport {
        &self.report
    }
}
