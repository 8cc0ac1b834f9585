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
//! - The last histogram of each series lives in this process's memory only: after a
//!   restart, each series' first histogram sets its baseline again, so the observations
//!   between the last histogram before the restart and the first after it are not stored.
//!   The state advances when a histogram is accepted for writing, so a write refused after
//!   that (a kind mismatch, the series limit, a failed batch) loses its increase too.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::histogram::Histogram;

/// The most series whose last histogram is kept: past it a new series' histograms are
/// refused (`histogram_counter_limit`) rather than grow memory without end.
pub const MAX_TRACKED: usize = 100_000;

/// What one cumulative histogram stores.
#[derive(Clone, Debug, PartialEq)]
pub struct Increase {
    /// The observations since the previous histogram, by bucket.
    pub histogram: Histogram,
    /// Their sum.
    pub sum: f64,
}

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

/// Every counter histogram series' last histogram, by series key; one lock orders the
/// updates.
#[derive(Debug, Default)]
pub struct HistogramCounters {
    last: Mutex<HashMap<String, Last>>,
}

impl HistogramCounters {
    /// Takes series `series`' cumulative `histogram` and `sum` at `timestamp` (any unit, the
    /// same for every call): what it stores, `None` for the series' first (a baseline) or
    /// for one that adds no observation.
    ///
    /// # Errors
    /// A [`CumulativeError`]; the state is then unchanged.
    pub fn step(
        &self,
        series: &str,
        timestamp: i64,
        histogram: Histogram,
        sum: f64,
        reset: bool,
    ) -> Result<Option<Increase>, CumulativeError> {
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
            table.insert(series.to_owned(), next);
            return Ok(None);
        };
        if timestamp <= last.timestamp {
            return Err(CumulativeError::OutOfOrder);
        }
        let increase = match (reset, increase(&last.histogram, &next.histogram)) {
            (false, Some(histogram)) => Increase {
                histogram,
                sum: next.sum - last.sum,
            },
            _ => Increase {
                histogram: next.histogram.clone(),
                sum: next.sum,
            },
        };
        *last = next;
        Ok((!increase.histogram.is_empty()).then_some(increase))
    }

    /// Forgets series `series` (it became a gauge histogram): a later counter histogram
    /// sets a new baseline.
    pub fn forget(&self, series: &str) {
        let mut table = self.last.lock().unwrap_or_else(|e| e.into_inner());
        table.remove(series);
    }
}

/// The observations `current` holds beyond `previous`, at `current`'s scale and zero
/// threshold; `None` when `current` is not a continuation of `previous` (a reset).
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
