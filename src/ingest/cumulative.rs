//! Cumulative histograms (Prometheus counter histograms) turned into the increases a
//! distribution series stores, as a counter's running totals are ([`crate::counter`]).
//!
//! - A series' first histogram sets its baseline and stores nothing. Each later one stores
//!   the increase since the previous one: bucket by bucket, the zero bucket, and the sum.
//! - A reset stores the new histogram whole (the observations since the reset): the sender
//!   says so (`reset_hint` YES), or any bucket, the zero bucket or the total count drops,
//!   or the scale gets finer or the zero threshold narrower (which no running histogram
//!   does). A coarser scale or a wider threshold is not a reset: the previous histogram is
//!   brought to the new layout before the two are compared, as Prometheus does.
//! - A histogram not newer than the series' last one is refused (`counter_out_of_order`).
//! - The last histogram of each series lives in memory. A clean shutdown saves the table in
//!   the data directory ([`FILE_NAME`]) once its connections are drained and the engine
//!   flushed, and the next start
//!   takes it back and removes the file before taking any write: a clean restart continues
//!   where each series was. After a crash (or when the file cannot be read or removed) each
//!   series' first histogram sets its baseline again, so the observations between the last
//!   histogram before the crash and the first after it are not stored; a stale table is
//!   never used.
//! - The state advances when a histogram is accepted for writing, so a write refused after
//!   that (a kind mismatch, the series limit, a failed batch) loses its increase.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::histogram::{Histogram, Observed};
use crate::storage::disk::{sync_dir, write_atomic};

/// The file a clean shutdown leaves the table in, in the data directory: the magic
/// `TDBHCS01`, then per series its key's length (u32) and bytes, the last histogram's
/// timestamp (i64, milliseconds), its sum (f64 bits) and the histogram
/// ([`Histogram::encode`]), then a CRC-32 of everything before it (u32); little-endian.
pub const FILE_NAME: &str = "histogram_counters.state";

/// The first bytes of [`FILE_NAME`], with its format version.
const MAGIC: &[u8; 8] = b"TDBHCS01";

/// The most series whose last histogram is kept: past it a new series' histograms are
/// refused (`histogram_counter_limit`) rather than grow memory without end.
pub const MAX_TRACKED: usize = 100_000;

/// Why a cumulative histogram is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CumulativeError {
    /// Not newer than the series' last histogram: its increase is unknowable.
    #[error("histogram not newer than the series' last one")]
    OutOfOrder,
    /// [`MAX_TRACKED`] series are tracked already.
    #[error("{MAX_TRACKED} counter histogram series are tracked already")]
    Limit,
}

impl CumulativeError {
    /// The reason's stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            CumulativeError::OutOfOrder => "counter_out_of_order",
            CumulativeError::Limit => "histogram_counter_limit",
        }
    }
}

/// A series' last cumulative histogram.
#[derive(Clone, Debug)]
struct Last {
    timestamp: i64,
    histogram: Histogram,
    sum: f64,
}

/// The steps a table of cumulative series took whose increases are not yet known written
/// (one request's): each series' key and its state before the step (`T`, the table's own),
/// so that the table's `undo` puts it back when the write fails. The series' next histogram
/// then carries the increase the failed one did, and nothing is lost.
#[derive(Debug)]
pub struct Unwritten<T>(Vec<(String, T)>);

impl<T> Default for Unwritten<T> {
    fn default() -> Unwritten<T> {
        Unwritten(Vec::new())
    }
}

impl<T> Unwritten<T> {
    /// The steps' increases landed: they stay taken.
    pub fn landed(&mut self) {
        self.0.clear();
    }

    /// True when no step waits for its write.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Notes a step of series `key`, whose state before it was `before`.
    pub(crate) fn note(&mut self, key: &str, before: T) {
        self.0.push((key.to_owned(), before));
    }

    /// The steps noted, latest first, for an undo; none are left.
    pub(crate) fn latest_first(&mut self) -> impl Iterator<Item = (String, T)> + '_ {
        self.0.drain(..).rev()
    }
}

/// A counter histogram series' state before a step of [`HistogramCounters::step`], and the
/// timestamp the step set.
#[derive(Debug)]
pub struct Step {
    taken_at: i64,
    before: Last,
}

/// Every counter histogram series' last histogram, by series key; one lock orders the
/// updates.
#[derive(Debug, Default)]
pub struct HistogramCounters {
    last: Mutex<HashMap<String, Last>>,
}

impl HistogramCounters {
    /// Takes series `series`' cumulative `histogram` and `sum` at `timestamp` (any unit, the
    /// same for every call): the observations it stores (without extremes: a cumulative
    /// histogram does not say which observations are new), `None` for the series' first (a
    /// baseline) or for one that adds no observation.
    ///
    /// The step is noted in `unwritten` until the caller knows the increase landed
    /// ([`Unwritten::landed`]) or failed ([`HistogramCounters::undo`]).
    ///
    /// # Errors
    /// A [`CumulativeError`]; the state is then unchanged.
    pub fn step(
        &self,
        series: &str,
        timestamp: i64,
        (histogram, sum): (Histogram, f64),
        reset: bool,
        unwritten: &mut Unwritten<Step>,
    ) -> std::result::Result<Option<Observed>, CumulativeError> {
        let mut table = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let len = table.len();
        let next = Last {
            timestamp,
            histogram,
            sum,
        };
        let Some(last) = table.get_mut(series) else {
            if len >= MAX_TRACKED {
                return Err(CumulativeError::Limit);
            }
            // A baseline writes nothing, so no failed write can take it back.
            table.insert(series.to_owned(), next);
            return Ok(None);
        };
        if timestamp <= last.timestamp {
            return Err(CumulativeError::OutOfOrder);
        }
        let increase = match (reset, increase(&last.histogram, &next.histogram)) {
            (false, Some(histogram)) => Observed {
                histogram,
                sum: next.sum - last.sum,
                extremes: None,
            },
            _ => Observed {
                histogram: next.histogram.clone(),
                sum: next.sum,
                extremes: None,
            },
        };
        let before = std::mem::replace(last, next);
        let taken_at = timestamp;
        unwritten.note(series, Step { taken_at, before });
        Ok((!increase.histogram.is_empty()).then_some(increase))
    }

    /// Takes back the steps of `unwritten`, latest first, whose writes failed: each series
    /// returns to its state before them, unless a later step (another request's) moved it
    /// on since, which then stands.
    pub fn undo(&self, unwritten: &mut Unwritten<Step>) {
        let mut table = self.last.lock().unwrap_or_else(|e| e.into_inner());
        for (series, step) in unwritten.latest_first() {
            if table.get(&series).map(|last| last.timestamp) == Some(step.taken_at) {
                table.insert(series, step.before);
            }
        }
    }

    /// Forgets series `series` (it became a gauge histogram): a later counter histogram
    /// sets a new baseline.
    pub fn forget(&self, series: &str) {
        let mut table = self.last.lock().unwrap_or_else(|e| e.into_inner());
        table.remove(series);
    }

    /// Series with a last histogram.
    pub fn len(&self) -> usize {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when no series has a last histogram.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The table a clean shutdown saved in `dir` ([`HistogramCounters::save`]), with the
    /// file removed (and the removal synced) before it is used, so that a crash from here
    /// on is followed by an empty table, never by this one grown stale. An empty table when
    /// there is no file; when it cannot be read or removed, an empty table and a warning.
    pub fn take_saved(dir: &Path) -> HistogramCounters {
        let path = dir.join(FILE_NAME);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return HistogramCounters::default()
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the counter histograms' last state; each series' next histogram sets its baseline");
                return HistogramCounters::default();
            }
        };
        if let Err(e) = std::fs::remove_file(&path)
            .map_err(|e| Error::io(&path, e))
            .and_then(|()| sync_dir(dir))
        {
            tracing::warn!(error = %e, "cannot remove the counter histograms' saved state, so it is not used (a crash would leave it stale); each series' next histogram sets its baseline");
            return HistogramCounters::default();
        }
        match decode_table(&bytes) {
            Some(last) => HistogramCounters {
                last: Mutex::new(last),
            },
            None => {
                tracing::warn!(path = %path.display(), "the counter histograms' saved state is damaged; each series' next histogram sets its baseline");
                HistogramCounters::default()
            }
        }
    }

    /// Saves the table in `dir` ([`FILE_NAME`]), for the next start's
    /// [`HistogramCounters::take_saved`]. Only a clean shutdown calls it, once every
    /// accepted histogram has landed.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let table = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = MAGIC.to_vec();
        for (key, last) in table.iter() {
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(&last.timestamp.to_le_bytes());
            out.extend_from_slice(&last.sum.to_bits().to_le_bytes());
            last.histogram.encode(&mut out);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        write_atomic(&dir.join(FILE_NAME), &out)
    }
}

/// The table [`HistogramCounters::save`] wrote; `None` when the bytes are not one.
fn decode_table(bytes: &[u8]) -> Option<HashMap<String, Last>> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut rest = body.strip_prefix(MAGIC.as_slice())?;
    let mut table = HashMap::new();
    while !rest.is_empty() {
        let len = u32::from_le_bytes(take(&mut rest, 4)?.try_into().ok()?) as usize;
        let key = std::str::from_utf8(take(&mut rest, len)?).ok()?.to_owned();
        let timestamp = i64::from_le_bytes(take(&mut rest, 8)?.try_into().ok()?);
        let sum = f64::from_bits(u64::from_le_bytes(take(&mut rest, 8)?.try_into().ok()?));
        let (histogram, used) = Histogram::decode(rest).ok()?;
        take(&mut rest, used)?;
        table.insert(
            key,
            Last {
                timestamp,
                histogram,
                sum,
            },
        );
    }
    Some(table)
}

/// The first `n` bytes of `rest`, which moves past them.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, tail) = rest.split_at_checked(n)?;
    *rest = tail;
    Some(head)
}

/// The observations `current` holds beyond `previous`, at `current`'s scale and zero
/// threshold; `None` when `current` is not a continuation of `previous` (a reset). OTLP's
/// exponential streams take their increases here too ([`super::otlp::Counts`]), after
/// bringing `current` to the coarser layout of the two.
pub fn increase(previous: &Histogram, current: &Histogram) -> Option<Histogram> {
    if current.scale() > previous.scale()
        || current.zero_threshold() < previous.zero_threshold()
        || current.count() < previous.count()
    {
        return None;
    }
    // `previous` in `current`'s layout: a coarser scale, then the buckets a wider zero
    // threshold holds moved into the zero bucket (as a merge into an empty histogram does).
    let mut base = previous.clone();
    base.reduce_to(current.scale());
    if current.zero_threshold() > base.zero_threshold() {
        let mut widened =
            Histogram::from_parts(current.scale(), current.zero_threshold(), 0, [], [])?;
        widened.merge(&base);
        base = widened;
    }
    let zero_count = current.zero_count().checked_sub(base.zero_count())?;
    let positive = difference(current.positive(), base.positive())?;
    let negative = difference(current.negative(), base.negative())?;
    Histogram::from_parts(
        current.scale(),
        current.zero_threshold(),
        zero_count,
        positive,
        negative,
    )
}

/// Bucket by bucket, `current` minus `previous` (both sorted by index); `None` when a bucket
/// of `previous` holds more than the same bucket of `current`.
fn difference(current: &[(i32, u64)], previous: &[(i32, u64)]) -> Option<Vec<(i32, u64)>> {
    let mut out = Vec::with_capacity(current.len());
    let mut before = previous.iter().peekable();
    for &(index, count) in current {
        let mut had = 0u64;
        while let Some(&&(i, c)) = before.peek() {
            if i > index {
                break;
            }
            if i < index {
                // A bucket `current` no longer has: it dropped to zero.
                return None;
            }
            had = c;
            before.next();
        }
        let added = count.checked_sub(had)?;
        if added > 0 {
            out.push((index, added));
        }
    }
    // Buckets past `current`'s last are gone: a drop.
    before.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests;
