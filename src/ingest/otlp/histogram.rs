//! OTLP's histogram points read whole into plain structs, checked against the data model's
//! rules; [`super::distribution`] turns a checked point into tierdb's distribution value.

use super::proto::{Buckets, ExponentialHistogramDataPoint, HistogramDataPoint, CUMULATIVE, DELTA};

/// Smallest and largest scale OTLP allows for an exponential histogram.
pub const SCALES: std::ops::RangeInclusive<i32> = -10..=20;

/// How a histogram's counts accumulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Temporality {
    /// Counts of the interval since the previous point.
    Delta,
    /// Counts since the start (`start_time_unix_nano`), as a counter's.
    Cumulative,
}

impl Temporality {
    /// The temporality of OTLP's `AggregationTemporality` value; `None` for unspecified (0)
    /// or unknown values, which the data model does not allow.
    pub fn of(value: i32) -> Option<Temporality> {
        match value {
            DELTA => Some(Temporality::Delta),
            CUMULATIVE => Some(Temporality::Cumulative),
            _ => None,
        }
    }
}

/// One side (positive or negative) of an exponential histogram: consecutive buckets from
/// index `offset`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExponentialBuckets {
    /// Index of `counts[0]`: bucket `i` holds values of absolute value in
    /// `(base^i, base^(i+1)]`, with `base = 2^(2^-scale)`.
    pub offset: i32,
    /// Values per bucket.
    pub counts: Vec<u64>,
}

/// The buckets of a histogram point.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// Exponential buckets, as Prometheus' native histograms lay them out.
    Exponential {
        /// Resolution: `base = 2^(2^-scale)`, in [`SCALES`].
        scale: i32,
        /// Values of absolute value up to `zero_threshold`.
        zero_count: u64,
        /// The zero bucket's width (0 when only exact zeros go there).
        zero_threshold: f64,
        /// Buckets of positive values.
        positive: ExponentialBuckets,
        /// Buckets of negative values, indexed by absolute value.
        negative: ExponentialBuckets,
    },
    /// Buckets between explicit bounds: `counts[i]` holds values in
    /// `(bounds[i-1], bounds[i]]`, the first from -inf, the last to +inf. Both empty when the
    /// point gives its count and sum only.
    Explicit {
        /// Upper bounds, finite and strictly increasing.
        bounds: Vec<f64>,
        /// Values per bucket: one more than `bounds`.
        counts: Vec<u64>,
    },
}

/// A histogram point, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    /// The buckets.
    pub layout: Layout,
    /// Values counted: the buckets' counts (with the zero bucket's) add up to it.
    pub count: u64,
    /// Their sum, when the point gives it.
    pub sum: Option<f64>,
    /// The least value, when given.
    pub min: Option<f64>,
    /// The greatest value, when given.
    pub max: Option<f64>,
    /// Delta or cumulative counts.
    pub temporality: Temporality,
    /// `start_time_unix_nano`: when a cumulative point's counts began (0 when not said).
    pub start: u64,
    /// `time_unix_nano`: when the point was taken (0 when not said).
    pub time: u64,
}

/// Why a histogram point is refused: most break the data model's rules and count as
/// `otlp_invalid_histogram`; the rest name what tierdb cannot store ([`HistogramError::as_str`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HistogramError {
    /// The buckets' counts do not add up to the point's count.
    #[error("bucket counts add up to {buckets}, but the point's count is {count}")]
    CountMismatch {
        /// What the buckets (and the zero bucket) add up to.
        buckets: u128,
        /// The point's count.
        count: u64,
    },
    /// An explicit histogram with a number of counts other than bounds + 1.
    #[error("{counts} bucket counts for {bounds} bounds (expected bounds + 1)")]
    BucketsMismatch {
        /// Counts given.
        counts: usize,
        /// Bounds given.
        bounds: usize,
    },
    /// Bounds not finite or not strictly increasing.
    #[error("explicit bounds are not finite and strictly increasing")]
    Bounds,
    /// A scale outside [`SCALES`].
    #[error("scale {0} is outside -10..=20")]
    Scale(i32),
    /// A zero threshold that is negative or not finite.
    #[error("zero threshold {0} is negative or not finite")]
    ZeroThreshold(f64),
    /// Buckets whose last index overflows a 32-bit index.
    #[error("bucket indexes overflow (offset {offset}, {len} buckets)")]
    Indexes {
        /// The first index.
        offset: i32,
        /// Buckets.
        len: usize,
    },
    /// A minimum above the maximum.
    #[error("min {min} is above max {max}")]
    MinMax {
        /// The minimum.
        min: f64,
        /// The maximum.
        max: f64,
    },
    /// A populated bucket no finite value fits in (its lower bound past f64's largest, or
    /// its upper bound below its smallest).
    #[error("bucket {index} at scale {scale} holds no finite value")]
    BucketRange {
        /// The bucket's index, in OTLP's numbering.
        index: i64,
        /// The point's scale.
        scale: i32,
    },
    /// An exponential point coarser than tierdb keeps (`otlp_histogram_scale`).
    #[error(
        "scale {0} is coarser than the coarsest tierdb keeps ({min}): configure the \
         exporter's histogram with more buckets or a smaller range",
        min = crate::histogram::MIN_SCALE
    )]
    ScaleTooCoarse(i32),
    /// Values counted without their sum (`otlp_histogram_missing_sum`): a distribution keeps
    /// the exact total of its values.
    #[error("the point counts {0} values but gives no sum")]
    MissingSum(u64),
    /// An explicit point whose values have no finite bound to be placed at
    /// (`otlp_histogram_no_bounds`): count and sum only, or one bucket from -inf to +inf.
    #[error("the point counts {0} values in no bucket with a finite bound")]
    NoBounds(u64),
    /// A cumulative point not later than the last point of its stream
    /// (`otlp_histogram_out_of_order`): its increase cannot be told.
    #[error("cumulative point at {time} ns is not later than its stream's last, at {last} ns")]
    OutOfOrder {
        /// The point's `time_unix_nano`.
        time: u64,
        /// The stream's last point's.
        last: u64,
    },
}

impl HistogramError {
    /// The reason's stable snake_case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            HistogramError::ScaleTooCoarse(_) => "otlp_histogram_scale",
            HistogramError::MissingSum(_) => "otlp_histogram_missing_sum",
            HistogramError::NoBounds(_) => "otlp_histogram_no_bounds",
            HistogramError::OutOfOrder { .. } => "otlp_histogram_out_of_order",
            _ => "otlp_invalid_histogram",
        }
    }
}

/// `total` added to the sum of `counts` (which cannot overflow: fewer than 2^64 counts).
fn add_counts(total: u128, counts: &[u64]) -> u128 {
    counts.iter().fold(total, |sum, &c| sum + u128::from(c))
}

fn check_count(buckets: u128, count: u64) -> Result<(), HistogramError> {
    if buckets == u128::from(count) {
        Ok(())
    } else {
        Err(HistogramError::CountMismatch { buckets, count })
    }
}

fn check_min_max(min: Option<f64>, max: Option<f64>) -> Result<(), HistogramError> {
    match (min, max) {
        (Some(min), Some(max)) if min > max => Err(HistogramError::MinMax { min, max }),
        _ => Ok(()),
    }
}

fn buckets(side: Option<&Buckets>) -> Result<ExponentialBuckets, HistogramError> {
    let Some(side) = side else {
        return Ok(ExponentialBuckets::default());
    };
    let last = i64::from(side.offset) + side.bucket_counts.len() as i64 - 1;
    if last > i64::from(i32::MAX) {
        return Err(HistogramError::Indexes {
            offset: side.offset,
            len: side.bucket_counts.len(),
        });
    }
    Ok(ExponentialBuckets {
        offset: side.offset,
        counts: side.bucket_counts.clone(),
    })
}

/// An exponential histogram point, checked: the scale in [`SCALES`], a zero threshold that
/// is finite and not negative, indexes within 32 bits, the zero count and every bucket's
/// count adding up to the point's count, min not above max.
///
/// # Errors
/// The first rule the point breaks.
pub fn exponential(
    point: &ExponentialHistogramDataPoint,
    temporality: Temporality,
) -> Result<Distribution, HistogramError> {
    if !SCALES.contains(&point.scale) {
        return Err(HistogramError::Scale(point.scale));
    }
    if !(point.zero_threshold.is_finite() && point.zero_threshold >= 0.0) {
        return Err(HistogramError::ZeroThreshold(point.zero_threshold));
    }
    let positive = buckets(point.positive.as_ref())?;
    let negative = buckets(point.negative.as_ref())?;
    let zero = u128::from(point.zero_count);
    let total = add_counts(add_counts(zero, &positive.counts), &negative.counts);
    check_count(total, point.count)?;
    check_min_max(point.min, point.max)?;
    Ok(Distribution {
        layout: Layout::Exponential {
            scale: point.scale,
            zero_count: point.zero_count,
            zero_threshold: point.zero_threshold,
            positive,
            negative,
        },
        count: point.count,
        sum: point.sum,
        min: point.min,
        max: point.max,
        temporality,
        start: point.start_time_unix_nano,
        time: point.time_unix_nano,
    })
}

/// An explicit-bucket histogram point, checked: one count more than bounds (or neither),
/// bounds finite and strictly increasing, counts adding up to the point's count, min not
/// above max.
///
/// # Errors
/// The first rule the point breaks.
pub fn explicit(
    point: &HistogramDataPoint,
    temporality: Temporality,
) -> Result<Distribution, HistogramError> {
    let (bounds, counts) = (&point.explicit_bounds, &point.bucket_counts);
    let none = bounds.is_empty() && counts.is_empty();
    if !none && counts.len() != bounds.len() + 1 {
        return Err(HistogramError::BucketsMismatch {
            counts: counts.len(),
            bounds: bounds.len(),
        });
    }
    if bounds.iter().any(|b| !b.is_finite()) || bounds.windows(2).any(|w| w[0] >= w[1]) {
        return Err(HistogramError::Bounds);
    }
    if !none {
        check_count(add_counts(0, counts), point.count)?;
    }
    check_min_max(point.min, point.max)?;
    Ok(Distribution {
        layout: Layout::Explicit {
            bounds: bounds.clone(),
            counts: counts.clone(),
        },
        count: point.count,
        sum: point.sum,
        min: point.min,
        max: point.max,
        temporality,
        start: point.start_time_unix_nano,
        time: point.time_unix_nano,
    })
}
