//! A checked OTLP histogram point ([`Distribution`]) as tierdb's distribution value
//! ([`crate::histogram`]): an exponential point's buckets renumbered at the source's own
//! scale, an explicit point's buckets each placed at one value inside its bounds.
//! docs/otlp.md states the error each keeps or adds.
//!
//! - Exponential: OTLP's bucket `i` holds `(base^i, base^(i+1)]`, which is bucket `i + 1` in
//!   Prometheus' numbering that [`Histogram`] uses. The point's scale is kept, so its
//!   quantiles keep the source's own error; a scale finer than [`MAX_SCALE`] is reduced to
//!   it (as [`Histogram::reduce_to`] would), one coarser than [`MIN_SCALE`] is refused.
//! - Explicit: a bucket between two bounds is placed at their midpoint; the open-ended
//!   first `(-inf, b0]` and last `(bN, +inf)` at the point's min and max when it gives them,
//!   else at `b0` and `bN`. The values are recorded at [`MAX_SCALE`], so a quantile is within
//!   the explicit bucket's width of the sample (half of it between two bounds), plus
//!   [`MAX_SCALE`]'s error.
//! - Extremes: the values' own min and max where known; else the outer bounds of the
//!   populated buckets (an explicit histogram's own bounds, not those of the scale-8 buckets
//!   its values were placed in), which hold every value.

use super::histogram::{Distribution, ExponentialBuckets, HistogramError, Layout};
use crate::histogram::{lower_bound, upper_bound, Histogram, Observed, MAX_SCALE, MIN_SCALE};
use crate::ingest::cumulative::increase;

/// A point's bucket counts, in the form a cumulative stream subtracts
/// ([`Counts::increase_since`]) and [`observed`] places.
#[derive(Clone, Debug, PartialEq)]
pub enum Counts {
    /// An exponential point's buckets, renumbered, at most [`MAX_SCALE`].
    Exponential(Histogram),
    /// An explicit point's bounds and counts, as sent.
    Explicit {
        /// Upper bounds, finite and strictly increasing.
        bounds: Vec<f64>,
        /// One count more than `bounds`.
        counts: Vec<u64>,
    },
}

impl Counts {
    /// The counts of a checked point.
    ///
    /// # Errors
    /// [`HistogramError::ScaleTooCoarse`] for a scale under [`MIN_SCALE`],
    /// [`HistogramError::BucketRange`] for a populated bucket no finite value fits in, and
    /// [`HistogramError::NoBounds`] for an explicit point that counts values but has no bound.
    pub fn of(distribution: &Distribution) -> Result<Counts, HistogramError> {
        match &distribution.layout {
            Layout::Exponential {
                scale,
                zero_count,
                zero_threshold,
                positive,
                negative,
            } => {
                let source = *scale;
                if source < i32::from(MIN_SCALE) {
                    return Err(HistogramError::ScaleTooCoarse(source));
                }
                let kept = source.min(i32::from(MAX_SCALE)) as i8;
                let shift = (source - i32::from(kept)) as u32;
                let positive = renumbered(positive, source, kept, shift)?;
                let negative = renumbered(negative, source, kept, shift)?;
                let histogram =
                    Histogram::from_parts(kept, *zero_threshold, *zero_count, positive, negative)
                        .ok_or(HistogramError::ZeroThreshold(*zero_threshold))?;
                Ok(Counts::Exponential(histogram))
            }
            Layout::Explicit { bounds, counts } => {
                let count: u64 = counts.iter().sum();
                if bounds.is_empty() && (count > 0 || distribution.count > 0) {
                    return Err(HistogramError::NoBounds(distribution.count));
                }
                Ok(Counts::Explicit {
                    bounds: bounds.clone(),
                    counts: counts.clone(),
                })
            }
        }
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        match self {
            Counts::Exponential(histogram) => histogram.count(),
            Counts::Explicit { counts, .. } => counts.iter().sum(),
        }
    }

    /// The counts added since `earlier`, a point of the same cumulative stream: `None` when
    /// they cannot be told, as after a reset: a count lower than `earlier`'s, explicit bounds
    /// other than `earlier`'s, or the other kind of histogram. Exponential counts are compared
    /// at the coarser of the two scales and the wider of the two zero thresholds (a source
    /// may coarsen its histogram as its range grows).
    pub fn increase_since(&self, earlier: &Counts) -> Option<Counts> {
        match (self, earlier) {
            (Counts::Exponential(now), Counts::Exponential(then)) => {
                // `now` brought to the common layout, which `increase` brings `then` to.
                let scale = now.scale().min(then.scale());
                let threshold = now.zero_threshold().max(then.zero_threshold());
                increase(then, &common_form(now, scale, threshold)).map(Counts::Exponential)
            }
            (
                Counts::Explicit { bounds, counts },
                Counts::Explicit {
                    bounds: earlier_bounds,
                    counts: earlier_counts,
                },
            ) => {
                if bounds != earlier_bounds || counts.len() != earlier_counts.len() {
                    return None;
                }
                let counts = (counts.iter().zip(earlier_counts))
                    .map(|(now, then)| now.checked_sub(*then))
                    .collect::<Option<Vec<u64>>>()?;
                Some(Counts::Explicit {
                    bounds: bounds.clone(),
                    counts,
                })
            }
            _ => None,
        }
    }

    /// Bytes these counts hold on the heap, for a bounded store of them.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Counts::Exponential(h) => (h.positive().len() + h.negative().len()) * 16,
            Counts::Explicit { bounds, counts } => (bounds.len() + counts.len()) * 8,
        }
    }
}

/// One side's buckets in [`Histogram`]'s numbering at scale `kept`: OTLP's index `i` at
/// scale `source` is `(i >> shift) + 1` (OTLP's reduction by one scale halves the index,
/// rounding down; ours is one more). Empty buckets are left out.
fn renumbered(
    side: &ExponentialBuckets,
    source: i32,
    kept: i8,
    shift: u32,
) -> Result<Vec<(i32, u64)>, HistogramError> {
    let mut out = Vec::with_capacity(side.counts.len());
    for (k, &count) in side.counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let index = i64::from(side.offset) + k as i64;
        let out_of_range = || HistogramError::BucketRange {
            index,
            scale: source,
        };
        let ours = i32::try_from((index >> shift) + 1).map_err(|_| out_of_range())?;
        if lower_bound(ours, kept).is_infinite() || upper_bound(ours, kept) == 0.0 {
            return Err(out_of_range());
        }
        out.push((ours, count));
    }
    Ok(out)
}

/// `histogram` at `scale` (not finer than its own) with zero threshold `threshold` (not
/// narrower than its own): buckets wholly within the threshold move to the zero bucket.
fn common_form(histogram: &Histogram, scale: i8, threshold: f64) -> Histogram {
    let mut out = Histogram::from_parts(scale, threshold, 0, [], []).unwrap_or_default();
    out.merge(histogram);
    out.reduce_to(scale);
    out
}

/// The least and greatest of some values, each when known.
pub type Extremes = (Option<f64>, Option<f64>);

/// The sample `counts` writes, with the values' `sum`: an exponential histogram as it is, an
/// explicit one placed ([`placed`]) using `placing`, the point's min and max (a cumulative
/// point's are since its start). `exact` are these values' own least and greatest where
/// known (a delta point's min and max; a cumulative point's new least or greatest since its
/// previous point): the sample carries them, and in their place the outer bounds of the
/// populated buckets, which hold every value (for an explicit histogram its buckets'
/// bounds, the open ones' as placed).
pub fn observed(counts: &Counts, sum: f64, placing: Extremes, exact: Extremes) -> Observed {
    let (histogram, outer) = match counts {
        Counts::Exponential(histogram) => {
            let bare = Observed {
                histogram: histogram.clone(),
                sum,
                extremes: None,
            };
            let outer = bare.extremes();
            (bare.histogram, outer)
        }
        Counts::Explicit { bounds, counts } => (
            placed(bounds, counts, placing),
            explicit_outer(bounds, counts, placing),
        ),
    };
    let extremes = match (exact, outer) {
        ((Some(min), Some(max)), _) => Some((min, max)),
        ((min, max), Some((low, high))) => Some((min.unwrap_or(low), max.unwrap_or(high))),
        (_, None) => None,
    };
    Observed {
        extremes: extremes.filter(|_| !histogram.is_empty()),
        histogram,
        sum,
    }
}

/// Where an explicit histogram's first and last buckets are placed: the point's min when
/// given and not above `b0`, else `b0`; its max when given and above `bN`, else `bN`.
fn open_ends(bounds: &[f64], (min, max): Extremes) -> Option<(f64, f64)> {
    let (&first, &last) = (bounds.first()?, bounds.last()?);
    Some((
        min.filter(|&m| m <= first).unwrap_or(first),
        max.filter(|&m| m > last).unwrap_or(last),
    ))
}

/// The outer bounds of an explicit histogram's populated buckets, the open ones' as placed.
fn explicit_outer(bounds: &[f64], counts: &[u64], placing: Extremes) -> Option<(f64, f64)> {
    let (low_end, high_end) = open_ends(bounds, placing)?;
    let lowest = counts.iter().position(|&c| c > 0)?;
    let highest = counts.iter().rposition(|&c| c > 0)?;
    let low = if lowest == 0 {
        low_end
    } else {
        bounds[lowest - 1]
    };
    let high = if highest == bounds.len() {
        high_end
    } else {
        bounds[highest]
    };
    Some((low, high))
}

/// An explicit histogram's counts recorded at [`MAX_SCALE`], each bucket's at one value
/// inside it: the midpoint between two bounds, the open ones at [`open_ends`].
fn placed(bounds: &[f64], counts: &[u64], placing: Extremes) -> Histogram {
    let mut histogram = Histogram::new(MAX_SCALE);
    let Some((low_end, high_end)) = open_ends(bounds, placing) else {
        return histogram;
    };
    for (k, &count) in counts.iter().enumerate() {
        let value = if k == 0 {
            low_end
        } else if k == bounds.len() {
            high_end
        } else {
            bounds[k - 1] / 2.0 + bounds[k] / 2.0
        };
        histogram.record_n(value, count);
    }
    histogram
}

#[cfg(test)]
mod tests;
