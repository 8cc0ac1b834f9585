//! Prometheus native histograms as remote write carries them (`prometheus.Histogram`),
//! decoded into a [`Histogram`] of this crate: bucket spans and deltas (integer histograms)
//! or absolute counts (float histograms) into `(index, count)` lists. Prometheus numbers
//! buckets as [`crate::histogram`] does, so indexes are taken as they come.
//!
//! What is refused, each under its own reason ([`NativeError::as_str`]): a schema outside
//! `-4..=8` (the custom-bucket schema -53 by name), a float histogram with a count that is
//! not a whole number (counts are never rounded), a count field that differs from the
//! buckets' total (a NaN observation is counted there and in no bucket), a sum that is not
//! finite, and spans, deltas or counts that do not fit together.

use prost::Message;

use crate::histogram::{Histogram, MAX_SCALE, MIN_SCALE};

/// `prometheus.Histogram`. The `count` and `zero_count` oneofs are read as optional fields
/// (the same bytes on the wire): a float histogram sets the `_float` members.
#[derive(Clone, PartialEq, Message)]
pub struct NativeHistogram {
    /// `count_int`: observations, in an integer histogram.
    #[prost(uint64, optional, tag = "1")]
    pub count_int: Option<u64>,
    /// `count_float`: observations, in a float histogram.
    #[prost(double, optional, tag = "2")]
    pub count_float: Option<f64>,
    /// Sum of the observations.
    #[prost(double, tag = "3")]
    pub sum: f64,
    /// Bucket layout: `-4..=8` are exponential (base `2^(2^-schema)`), -53 custom bounds.
    #[prost(sint32, tag = "4")]
    pub schema: i32,
    /// Observations at most this far from zero count in the zero bucket.
    #[prost(double, tag = "5")]
    pub zero_threshold: f64,
    /// `zero_count_int`.
    #[prost(uint64, optional, tag = "6")]
    pub zero_count_int: Option<u64>,
    /// `zero_count_float`.
    #[prost(double, optional, tag = "7")]
    pub zero_count_float: Option<f64>,
    /// Runs of negative buckets.
    #[prost(message, repeated, tag = "8")]
    pub negative_spans: Vec<BucketSpan>,
    /// Integer histograms: each negative bucket's count as the change from the previous one.
    #[prost(sint64, repeated, tag = "9")]
    pub negative_deltas: Vec<i64>,
    /// Float histograms: each negative bucket's count.
    #[prost(double, repeated, tag = "10")]
    pub negative_counts: Vec<f64>,
    /// Runs of positive buckets.
    #[prost(message, repeated, tag = "11")]
    pub positive_spans: Vec<BucketSpan>,
    /// Integer histograms: each positive bucket's count as the change from the previous one.
    #[prost(sint64, repeated, tag = "12")]
    pub positive_deltas: Vec<i64>,
    /// Float histograms: each positive bucket's count.
    #[prost(double, repeated, tag = "13")]
    pub positive_counts: Vec<f64>,
    /// `ResetHint`: see [`RESET_YES`] and [`RESET_GAUGE`].
    #[prost(int32, tag = "14")]
    pub reset_hint: i32,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "15")]
    pub timestamp: i64,
    /// Bucket bounds of the custom-bucket schema, read only to be refused.
    #[prost(double, repeated, tag = "16")]
    pub custom_values: Vec<f64>,
}

/// `prometheus.BucketSpan`: `length` consecutive buckets, `offset` indexes after the end of
/// the previous span (the first span's offset is its first index).
#[derive(Clone, Copy, PartialEq, Message)]
pub struct BucketSpan {
    /// Gap from the previous span's end, or the first index.
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    /// Buckets in the span.
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// `ResetHint.YES`: the histogram restarted since the previous one.
pub const RESET_YES: i32 = 1;
/// `ResetHint.GAUGE`: a gauge histogram, whose counts go up and down.
pub const RESET_GAUGE: i32 = 3;
/// The custom-bucket schema (classic bucket bounds carried in `custom_values`).
pub const CUSTOM_BUCKETS_SCHEMA: i32 = -53;

/// The largest count a float can hold exactly (2^53): a float count past it is not taken.
const MAX_EXACT_FLOAT: f64 = 9_007_199_254_740_992.0;

/// How a decoded native histogram's counts are to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Temporality {
    /// A counter histogram: counts since the series (re)started; `reset` when the sender says
    /// it restarted since the previous one.
    Cumulative {
        /// `ResetHint.YES`.
        reset: bool,
    },
    /// A gauge histogram: each one stands for itself.
    Gauge,
}

/// One native histogram sample, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct NativeSample {
    /// Milliseconds since the epoch.
    pub timestamp: i64,
    /// The buckets.
    pub histogram: Histogram,
    /// Sum of the observations.
    pub sum: f64,
    /// Cumulative (a counter histogram) or a gauge.
    pub temporality: Temporality,
}

/// Why a native histogram is refused; each has a stable snake_case name
/// ([`NativeError::as_str`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NativeError {
    /// The custom-bucket schema (-53), which has no exponential layout.
    #[error("native histogram with custom buckets (schema -53) is not supported: only exponential schemas -4..=8")]
    CustomBuckets,
    /// Another schema outside `-4..=8`.
    #[error("native histogram schema {0} is outside -4..=8")]
    Schema(i32),
    /// A float histogram whose count, zero count or bucket count is not a whole number
    /// (or not finite, negative, or past 2^53).
    #[error("float histogram {0} is not a whole number of observations: counts are not rounded")]
    FractionalCount(&'static str),
    /// The count field is not the total of the buckets (NaN observations are counted in no
    /// bucket).
    #[error("native histogram count {count} differs from its buckets' total {buckets}")]
    CountMismatch {
        /// The count field.
        count: u64,
        /// Zero bucket plus every bucket.
        buckets: u64,
    },
    /// The sum is NaN or infinite.
    #[error("native histogram sum is not finite")]
    SumNotFinite,
    /// Spans, deltas and counts do not fit together, a count goes negative, an index leaves
    /// 32 bits, or the zero threshold is negative or not finite.
    #[error("native histogram malformed: {0}")]
    Malformed(&'static str),
}

impl NativeError {
    /// The reason's stable snake_case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            NativeError::CustomBuckets => "native_histogram_custom_buckets",
            NativeError::Schema(_) => "native_histogram_schema",
            NativeError::FractionalCount(_) => "native_histogram_fractional_count",
            NativeError::CountMismatch { .. } => "native_histogram_count_mismatch",
            NativeError::SumNotFinite => "native_histogram_sum_not_finite",
            NativeError::Malformed(_) => "native_histogram_malformed",
        }
    }
}

/// Decodes one native histogram sample.
///
/// # Errors
/// A [`NativeError`] saying why it is refused; nothing panics on any input.
pub fn decode_native(native: &NativeHistogram) -> Result<NativeSample, NativeError> {
    if native.schema == CUSTOM_BUCKETS_SCHEMA || !native.custom_values.is_empty() {
        return Err(NativeError::CustomBuckets);
    }
    let scale = i8::try_from(native.schema)
        .ok()
        .filter(|s| (MIN_SCALE..=MAX_SCALE).contains(s))
        .ok_or(NativeError::Schema(native.schema))?;
    if !native.sum.is_finite() {
        return Err(NativeError::SumNotFinite);
    }
    let float = native.count_float.is_some();
    let (count, zero_count, positive, negative) = if float {
        let whole = |v: f64, what| whole_count(v).ok_or(NativeError::FractionalCount(what));
        (
            whole(native.count_float.unwrap_or(0.0), "count")?,
            whole(native.zero_count_float.unwrap_or(0.0), "zero count")?,
            float_buckets(&native.positive_spans, &native.positive_counts)?,
            float_buckets(&native.negative_spans, &native.negative_counts)?,
        )
    } else {
        (
            native.count_int.unwrap_or(0),
            native.zero_count_int.unwrap_or(0),
            delta_buckets(&native.positive_spans, &native.positive_deltas)?,
            delta_buckets(&native.negative_spans, &native.negative_deltas)?,
        )
    };
    let histogram =
        Histogram::from_parts(scale, native.zero_threshold, zero_count, positive, negative).ok_or(
            NativeError::Malformed(
                "zero threshold negative or not finite, or a bucket no finite value fits in",
            ),
        )?;
    let buckets = histogram.count();
    if buckets != count {
        return Err(NativeError::CountMismatch { count, buckets });
    }
    // Bounded as every stored histogram is, before a counter's state keeps it: a request's
    // one histogram of millions of buckets must not stay in memory per series.
    let mut histogram = histogram;
    histogram.limit(crate::histogram::MAX_POPULATED);
    let temporality = match native.reset_hint {
        RESET_GAUGE => Temporality::Gauge,
        hint => Temporality::Cumulative {
            reset: hint == RESET_YES,
        },
    };
    Ok(NativeSample {
        timestamp: native.timestamp,
        histogram,
        sum: native.sum,
        temporality,
    })
}

/// A float count as a whole number of observations, when it is one exactly.
fn whole_count(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= MAX_EXACT_FLOAT).then_some(v as u64)
}

/// The bucket indexes `spans` lay out, in order; an error when one leaves 32 bits.
fn indexes(spans: &[BucketSpan]) -> impl Iterator<Item = Result<i32, NativeError>> + '_ {
    let mut next = 0i64;
    spans.iter().enumerate().flat_map(move |(n, span)| {
        // The first span's offset is its first index; each later one's the gap after the
        // previous span.
        let start = if n == 0 {
            i64::from(span.offset)
        } else {
            next + i64::from(span.offset)
        };
        next = start + i64::from(span.length);
        (start..start + i64::from(span.length)).map(|index| {
            i32::try_from(index).map_err(|_| NativeError::Malformed("bucket index past 32 bits"))
        })
    })
}

/// The number of buckets `spans` lay out.
fn span_total(spans: &[BucketSpan]) -> u64 {
    spans.iter().map(|s| u64::from(s.length)).sum()
}

/// An integer histogram's buckets: each count is the previous bucket's plus its delta.
fn delta_buckets(spans: &[BucketSpan], deltas: &[i64]) -> Result<Vec<(i32, u64)>, NativeError> {
    if span_total(spans) != deltas.len() as u64 {
        return Err(NativeError::Malformed("spans and deltas differ in length"));
    }
    let mut count = 0i64;
    let mut out = Vec::with_capacity(deltas.len());
    for (index, &delta) in indexes(spans).zip(deltas) {
        count = count
            .checked_add(delta)
            .filter(|&c| c >= 0)
            .ok_or(NativeError::Malformed(
                "a bucket count goes negative or overflows",
            ))?;
        out.push((index?, count as u64));
    }
    Ok(out)
}

/// A float histogram's buckets, each a whole count.
fn float_buckets(spans: &[BucketSpan], counts: &[f64]) -> Result<Vec<(i32, u64)>, NativeError> {
    if span_total(spans) != counts.len() as u64 {
        return Err(NativeError::Malformed("spans and counts differ in length"));
    }
    indexes(spans)
        .zip(counts)
        .map(|(index, &count)| {
            let count = whole_count(count).ok_or(NativeError::FractionalCount("bucket count"))?;
            Ok((index?, count))
        })
        .collect()
}

#[cfg(test)]
mod tests;
