//! How samples reach this process's engine, for every path that writes into one: a server's
//! connections and requests (through a [`LocalTarget`], the [`super::sink::WriteTarget`]
//! that runs the write on the blocking pool) and `tierdb import` (which writes on its own
//! thread while it parses).
//!
//! Two halves, so the caller decides where each runs:
//! - [`LocalQueue`], beside the parser: resolves a sample's series name (its value and time
//!   already checked, [`super::bounds`]) through a [`NameCache`] and the registry's read
//!   lock, and queues it in a [`LocalBatch`]; a name the registry does not hold yet is queued
//!   by name, as is the kind a write declares;
//! - [`write`], where waiting on a lock or a disk is allowed: registers the batch's new names
//!   (within the series limit), declares the kinds, and writes the batch, every refusal
//!   counted by reason with the line it came from.
//!
//! A server registers off its async threads, in [`write`]. An import, whose parser has a
//! thread of its own, registers a batch's new names as it hands the batch over
//! ([`LocalQueue::register_queued`]), so the names are known to the next batch.

mod target;

use std::collections::HashMap;

pub(crate) use target::LocalTarget;

use super::batch::LineBatch;
use super::name_cache::NameCache;
#[cfg(feature = "cli")]
use super::report::NoTotals;
use super::report::{IngestReport, Tally};
use crate::counter::SeriesKind;
use crate::engine::Engine;
use crate::error::{Error, RejectReason, Result};
use crate::histogram::Observed;
use crate::registry::SeriesId;
use crate::sample::Sample;
use crate::time::Timestamp;

/// Bytes of names not registered yet that a batch may queue before it asks to be written,
/// so input naming endless new series is registered in steps.
const NEW_NAME_BYTES: usize = 1024 * 1024;
/// Entries of room a batch keeps, between writes, for new names and declared kinds.
const KEPT_ROOM: usize = 256;

/// The samples queued since the last write, with what must happen before they are written.
#[derive(Default)]
pub(crate) struct LocalBatch {
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
    /// Per sample, true when refused after it was queued (its name, its kind); empty while
    /// none may have been.
    refused: Vec<bool>,
    /// The names [`LocalBatch::register_new`] registered, for the queue's cache.
    registered: Vec<(Box<str>, SeriesId)>,
}

impl LocalBatch {
    /// An empty batch full at `room` samples.
    pub(crate) fn with_room(room: usize) -> LocalBatch {
        LocalBatch {
            queued: LineBatch::with_room(room),
            ..LocalBatch::default()
        }
    }

    /// Samples queued.
    pub(crate) fn len(&self) -> usize {
        self.queued.len()
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
        self.refused.clear();
        self.registered.clear();
        self.registered.shrink_to(KEPT_ROOM);
    }

    /// Registers the batch's new names (in order of first appearance, within `limit`) and
    /// gives their samples the ids; a sample whose name is refused (`series_limit`,
    /// `invalid_series`) is marked, and counted in `report` and `tally` with its line. A
    /// batch without new names is left as it is.
    fn register_new(
        &mut self,
        engine: &Engine,
        report: &mut IngestReport,
        tally: &dyn Tally,
        limit: Option<SeriesLimit<'_>>,
    ) {
        self.register_new_with(report, tally, |names| {
            (names.iter())
                .map(|(_, name)| register(engine, name, limit))
                .collect()
        });
    }

    /// [`LocalBatch::register_new`] without a series limit, every new name registered with
    /// one write to the registry ([`Engine::series_each`]): an import's, where a batch may
    /// name tens of thousands of new series. (A server registers one name at a time, within
    /// its limit, so a burst of new series on one connection leaves the registry's lock
    /// free between them for the others.)
    #[cfg(feature = "cli")]
    fn register_new_together(&mut self, engine: &Engine, report: &mut IngestReport) {
        self.register_new_with(report, &NoTotals, |names| {
            match engine.series_each(names.iter().map(|(_, name)| &**name)) {
                Ok(ids) => ids.into_iter().map(|id| id.map_err(refusal)).collect(),
                Err(e) => {
                    let refused = refusal(e);
                    names.iter().map(|_| Err(refused.clone())).collect()
                }
            }
        });
    }

    /// Registers the batch's new names, in order of first appearance, with `register`
    /// (each name's id or refusal, in the order given), as [`LocalBatch::register_new`] says.
    fn register_new_with(
        &mut self,
        report: &mut IngestReport,
        tally: &dyn Tally,
        register: impl FnOnce(&[(u32, Box<str>)]) -> Vec<Refusable<SeriesId>>,
    ) {
        if self.new_names.is_empty() {
            return;
        }
        let mut names: Vec<(u32, Box<str>)> = (self.new_names.drain())
            .map(|(name, index)| (index, name))
            .collect();
        names.sort_unstable_by_key(|(index, _)| *index);
        let ids = register(&names);
        if self.refused.is_empty() {
            self.refused.resize(self.queued.len(), false);
        }
        for &(position, index) in &self.unresolved {
            match &ids[index as usize] {
                Ok(id) => self.queued.samples[position].series = *id,
                Err((reason, message)) => {
                    self.refused[position] = true;
                    let line = self.queued.lines[position];
                    report.refuse(tally, line, reason, || message.clone());
                }
            }
        }
        self.unresolved.clear();
        self.new_name_bytes = 0;
        let registered =
            (names.into_iter().zip(ids)).filter_map(|((_, name), id)| Some((name, id.ok()?)));
        self.registered.extend(registered);
    }
}

/// The parser's side: name resolution and queueing.
pub(crate) struct LocalQueue {
    cache: NameCache<SeriesId>,
    /// The registry's deletions when `cache` was last checked: a deletion since may have
    /// made a cached id a hole, so the cache is emptied.
    deletions_seen: u64,
    batch: LocalBatch,
}

impl LocalQueue {
    /// A queue resolving names through `cache`, filling batches of `room` samples, for
    /// `engine`.
    pub(crate) fn new(engine: &Engine, cache: NameCache<SeriesId>, room: usize) -> LocalQueue {
        LocalQueue {
            cache,
            deletions_seen: engine.registry().deletions(),
            batch: LocalBatch::with_room(room),
        }
    }

    /// Queues one sample of the series named `series` (canonical text or any spelling the
    /// key grammar takes) from input line `line`, with the kind its write declares. The caller
    /// has checked its value and time ([`super::bounds`]), so a sample refused for them
    /// registers no series. Returns true when the batch should be written.
    ///
    /// # Errors
    /// The reason a sample is refused.
    pub(crate) fn push(
        &mut self,
        engine: &Engine,
        series: &str,
        kind: Option<SeriesKind>,
        ts: Timestamp,
        value: f64,
        line: usize,
    ) -> std::result::Result<bool, RejectReason> {
        self.enqueue(
            engine,
            series,
            kind,
            Sample::new(SeriesId(0), ts, value),
            None,
            line,
        )
    }

    /// [`LocalQueue::push`] for observations that arrived as a histogram: their series is
    /// declared a distribution (the caller checked their sum as a sample's value).
    ///
    /// # Errors
    /// The reason they are refused.
    pub(crate) fn push_observed(
        &mut self,
        engine: &Engine,
        series: &str,
        ts: Timestamp,
        observed: Observed,
        line: usize,
    ) -> std::result::Result<bool, RejectReason> {
        let sample = Sample::new(SeriesId(0), ts, observed.sum);
        let kind = Some(SeriesKind::Distribution);
        self.enqueue(engine, series, kind, sample, Some(observed), line)
    }

    /// Queues `sample` (its series to be resolved from `series`), with what arrived as a
    /// histogram, if it did.
    fn enqueue(
        &mut self,
        engine: &Engine,
        series: &str,
        kind: Option<SeriesKind>,
        sample: Sample,
        observed: Option<Observed>,
        line: usize,
    ) -> std::result::Result<bool, RejectReason> {
        let (ts, value) = (sample.ts, sample.value);
        let deletions = engine.registry().deletions();
        if deletions != self.deletions_seen {
            self.cache.forget_all();
            self.deletions_seen = deletions;
        }
        let batch = &mut self.batch;
        let position = batch.queued.len();
        let id = match self.cache.get(series) {
            Some(id) => id,
            None => match engine.registry().get(series) {
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
        let sample = Sample::new(id, ts, value);
        let full = match observed {
            None => batch.queued.push(sample, line),
            Some(observed) => batch.queued.push_observed(sample, observed, line),
        };
        Ok(full || batch.new_name_bytes >= NEW_NAME_BYTES)
    }

    /// Samples queued.
    pub(crate) fn len(&self) -> usize {
        self.batch.len()
    }

    /// Registers the queued batch's new names now, on the caller's thread, and learns their
    /// ids, for a caller that may wait on the registry and its files (an import's parser):
    /// the names then meet the cache in the next batch rather than being queued as new
    /// again while the writer registers them. Refusals are counted in `report` with their
    /// lines.
    #[cfg(feature = "cli")]
    pub(crate) fn register_queued(&mut self, engine: &Engine, report: &mut IngestReport) {
        (self.batch).register_new_together(engine, report);
        for (name, id) in self.batch.registered.drain(..) {
            self.cache.insert(&name, id);
        }
    }

    /// The batch queued, handed over for [`write`] in place of `empty` (a batch written
    /// before, whose registered names the cache learns now, unless a series of `engine` was
    /// deleted since).
    pub(crate) fn swap(&mut self, engine: &Engine, mut empty: LocalBatch) -> LocalBatch {
        let deletions = engine.registry().deletions();
        if deletions != self.deletions_seen {
            self.cache.forget_all();
            self.deletions_seen = deletions;
        } else {
            for (name, id) in empty.registered.drain(..) {
                self.cache.insert(&name, id);
            }
        }
        empty.clear();
        std::mem::replace(&mut self.batch, empty)
    }
}

/// The series limit a write registers within, and the lock every writer of the engine
/// holds from the check of the limit until the new series is registered, so concurrent
/// writers cannot register more than the limit between them.
#[derive(Clone, Copy)]
pub(crate) struct SeriesLimit<'a> {
    pub(crate) max: usize,
    pub(crate) gate: &'a std::sync::Mutex<()>,
}

/// Registers `batch`'s new names ([`LocalBatch::register_new`], if not done yet), declares
/// the kinds its samples name (in line order), drops the samples refused on the way, and
/// writes the rest into `engine`. Every refusal is counted in `report` (and in `tally`,
/// the server's totals) with its line. The names registered stay in the batch for the
/// queue's cache ([`LocalQueue::swap`]).
///
/// # Errors
/// The engine's error (poisoned, I/O); the samples are then counted as `write_failed`.
pub(crate) fn write(
    engine: &Engine,
    batch: &mut LocalBatch,
    report: &mut IngestReport,
    tally: &dyn Tally,
    limit: Option<SeriesLimit<'_>>,
) -> Result<()> {
    batch.register_new(engine, report, tally, limit);
    if !batch.declared.is_empty() && batch.refused.is_empty() {
        batch.refused.resize(batch.queued.len(), false);
    }
    let mut declared = HashMap::new();
    for &(position, kind) in &batch.declared {
        if batch.refused[position] {
            continue;
        }
        let id = batch.queued.samples[position].series;
        let outcome = declared
            .entry((id, kind))
            .or_insert_with(|| declare(engine, id, kind));
        if let Err((reason, message)) = outcome {
            batch.refused[position] = true;
            let line = batch.queued.lines[position];
            report.refuse(tally, line, reason, || message.clone());
        }
    }
    if batch.refused.contains(&true) {
        batch.queued.drop_refused(&batch.refused);
    }
    if batch.queued.is_empty() {
        return Ok(());
    }
    batch.queued.write(engine, report, tally)
}

/// A value, or the reason and message of a refusal.
type Refusable<T> = std::result::Result<T, (&'static str, String)>;

/// The id of the new series `name`, registering it within `limit`.
fn register(engine: &Engine, name: &str, limit: Option<SeriesLimit<'_>>) -> Refusable<SeriesId> {
    let registered = match limit {
        None => engine.series(name),
        Some(SeriesLimit { max, gate }) => {
            // It guards no data: a panic while it was held leaves nothing half-done.
            let _gate = gate.lock().unwrap_or_else(|e| e.into_inner());
            let registry = engine.registry();
            match registry.lookup(name) {
                Ok(Some(id)) => Ok(id),
                Ok(None) if registry.live_len() >= max => {
                    return Err((
                        "series_limit",
                        format!(
                            "new series {name:?} refused: the server holds its limit of {max} \
                             series"
                        ),
                    ))
                }
                Ok(None) => engine.series(name),
                Err(e) => Err(e),
            }
        }
    };
    registered.map_err(refusal)
}

/// The refusal of a name the registry did not take: `invalid_series` when it is not a
/// valid key, `write_failed` otherwise.
fn refusal(e: Error) -> (&'static str, String) {
    match e {
        Error::InvalidSeries { .. } => ("invalid_series", e.to_string()),
        _ => ("write_failed", e.to_string()),
    }
}

/// Declares series `id` a `kind`.
fn declare(
    engine: &Engine,
    id: SeriesId,
    kind: SeriesKind,
) -> std::result::Result<(), (&'static str, String)> {
    let Err(e) = engine.declare_kind(id, kind) else {
        return Ok(());
    };
    let reason = match e {
        Error::Rejected(reason) => reason.as_str(),
        _ => "write_failed",
    };
    let message = match reason {
        "kind_mismatch" => format!(
            "{} is already a {}; this write says {}",
            (engine.registry())
                .key(id)
                .map_or_else(|| id.to_string(), |key| key.to_string()),
            engine.series_kind(id).as_str(),
            kind.as_str()
        ),
        _ => e.to_string(),
    };
    Err((reason, message))
}
