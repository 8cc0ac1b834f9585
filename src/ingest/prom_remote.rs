//! Prometheus remote write 1.0: a snappy-compressed (block format) protobuf `WriteRequest`,
//! decoded into its series and samples, with no sockets in sight (the server owns those).
//!
//! - A series is named by its `__name__` label; every other label becomes a tag. A label
//!   with an empty value is absent, as in Prometheus.
//! - Timestamps are milliseconds; a sample lands in the second it falls in (floored).
//! - A series is a counter (stored as increases, as a `[counters]` rule would store it) when
//!   its name ends in `_total`, `_count`, `_sum` or `_bucket`, or when the request's metadata
//!   types its family `counter` (Prometheus sends metadata in requests of their own, so in
//!   practice the suffix decides). Other series are left to the rules.
//! - A NaN with the bits of Prometheus' staleness marker is not a sample: it says the series
//!   went away. It is skipped and counted under its own reason ([`Skipped`]), as a sample's
//!   value or a native histogram's sum.
//! - A native histogram ([`native`]) makes its series a distribution: a counter histogram's
//!   increases are stored ([`crate::ingest::cumulative`]), a gauge histogram as it comes.
//!
//! The messages below are the subset of `prompb/remote.proto` and `types.proto` this reads,
//! derived by hand with prost's macros; fields not declared (exemplars) are skipped by the
//! decoder. Label texts are decoded as byte slices of the decompressed body (no copy) and
//! checked for UTF-8 here.

pub mod native;
#[cfg(test)]
mod tests;

use std::collections::HashSet;

use bytes::Bytes;
use prost::Message;

use crate::counter::SeriesKind;
use crate::registry::write_canonical;
use crate::time::Timestamp;

/// `prometheus.WriteRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct WriteRequest {
    /// The series, each with its samples.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    /// What the scraped targets said about their metric families.
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

/// `prometheus.TimeSeries`.
#[derive(Clone, PartialEq, Message)]
pub struct TimeSeries {
    /// Labels, sorted by name as Prometheus sends them (not relied on).
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// Samples, oldest first.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<PromSample>,
    /// Native histogram samples, oldest first.
    #[prost(message, repeated, tag = "4")]
    pub histograms: Vec<native::NativeHistogram>,
}

/// `prometheus.Label`: protobuf strings, read as bytes so they borrow the body.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// The label's name.
    #[prost(bytes = "bytes", tag = "1")]
    pub name: Bytes,
    /// The label's value.
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

/// `prometheus.Sample`.
#[derive(Clone, Copy, PartialEq, Message)]
pub struct PromSample {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// `prometheus.MetricMetadata`.
#[derive(Clone, PartialEq, Message)]
pub struct MetricMetadata {
    /// `MetricType`: 1 is `COUNTER`.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    /// The family's name (`http_requests_total`, or without `_total` from OpenMetrics).
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
}

/// `MetricMetadata.MetricType.COUNTER`.
const METADATA_COUNTER: i32 = 1;

/// The bits of Prometheus' staleness marker (`value.StaleNaN`).
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// Why a whole request body is refused (answered 400: Prometheus does not retry it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The body is not snappy's block format.
    #[error("body is not snappy-compressed (block format): {0}")]
    Snappy(String),
    /// The body says it decompresses to more than the limit.
    #[error("body decompresses to {size} bytes, more than the limit of {limit}")]
    TooLarge {
        /// What the body's header says.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The decompressed body is not a `WriteRequest`.
    #[error("body is not a protobuf WriteRequest: {0}")]
    Protobuf(String),
    /// The request holds more entries (series, labels, samples, metadata) than one request
    /// may: decoding allocates a struct per entry, so a small body of empty entries would
    /// cost far more memory than its bytes.
    #[error(
        "request holds {entries} series, labels, samples and other entries, more than the \
         limit of {limit}: send smaller batches (max_samples_per_send)"
    )]
    TooManyEntries {
        /// Entries counted (up to the first one over the limit).
        entries: usize,
        /// The limit.
        limit: usize,
    },
}

/// Entries one request may hold: its time series and metadata, and the labels, samples,
/// exemplars and histograms inside the series. Prometheus sends at most
/// `max_samples_per_send` samples (500 by default in 2.42, 2,000 in later versions) with
/// their series' labels: tens of thousands of entries. A million bounds what decoding
/// allocates to about 72 MB, whatever the body.
pub const MAX_ENTRIES: usize = 1_000_000;

/// Why one series is refused; each has a stable snake_case name ([`SeriesError::as_str`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeriesError {
    /// No `__name__` label, or an empty one.
    #[error("series has no __name__ label")]
    MissingName,
    /// A label's name or value is not UTF-8, or `__name__` appears twice.
    #[error("label {0} is not UTF-8 or repeats __name__")]
    InvalidLabel(usize),
    /// The labels make no series key (control characters, a repeated label, too long).
    #[error("labels make no series: {0}")]
    InvalidSeries(String),
}

impl SeriesError {
    /// The reason's stable snake_case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            SeriesError::MissingName => "missing_metric_name",
            SeriesError::InvalidLabel(_) => "invalid_label",
            SeriesError::InvalidSeries(_) => "invalid_series",
        }
    }
}

/// What is skipped without being an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// A staleness marker ([`STALE_NAN`]).
    StaleMarker,
}

impl Skipped {
    /// The reason's stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Skipped::StaleMarker => "stale_marker",
        }
    }
}

/// Decompresses and decodes a request body, refusing one that says it decompresses to more
/// than `limit` bytes before allocating anything for it.
///
/// # Errors
/// A [`BodyError`] saying what is wrong with the body.
pub fn decode(body: &[u8], limit: usize) -> Result<WriteRequest, BodyError> {
    let size = snap::raw::decompress_len(body).map_err(|e| BodyError::Snappy(e.to_string()))?;
    if size > limit {
        return Err(BodyError::TooLarge { size, limit });
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| BodyError::Snappy(e.to_string()))?;
    check_entries(&raw, MAX_ENTRIES)?;
    WriteRequest::decode(Bytes::from(raw)).map_err(|e| BodyError::Protobuf(e.to_string()))
}

/// Counts the request's entries from its protobuf framing alone, without decoding: its
/// top-level fields (time series, metadata) and the fields inside each time series (labels,
/// samples, exemplars, histograms); refuses more than `limit`.
fn check_entries(message: &[u8], limit: usize) -> Result<(), BodyError> {
    let mut entries = 0usize;
    let count = |entries: &mut usize| {
        *entries += 1;
        if *entries > limit {
            Err(BodyError::TooManyEntries {
                entries: *entries,
                limit,
            })
        } else {
            Ok(())
        }
    };
    for_each_field(message, &mut |field, payload| {
        count(&mut entries)?;
        if field == 1 {
            for_each_field(payload, &mut |_, _| count(&mut entries))?;
        }
        Ok(())
    })
}

/// What [`for_each_field`] calls per field: its number and length-delimited payload.
type FieldVisitor<'a> = dyn FnMut(u64, &[u8]) -> Result<(), BodyError> + 'a;

/// Calls `each` with the number and the length-delimited payload (empty for other wire
/// types) of every field of the protobuf message `message`, in order.
fn for_each_field(message: &[u8], each: &mut FieldVisitor<'_>) -> Result<(), BodyError> {
    let malformed = |what: &str| BodyError::Protobuf(format!("malformed framing: {what}"));
    let mut rest = message;
    while !rest.is_empty() {
        let key = prost::encoding::decode_varint(&mut rest).map_err(|_| malformed("a key"))?;
        let skip = |rest: &mut &[u8], n: u64| -> Result<(), BodyError> {
            let n = usize::try_from(n).map_err(|_| malformed("a length"))?;
            if n > rest.len() {
                return Err(malformed("a field runs past the end"));
            }
            *rest = &rest[n..];
            Ok(())
        };
        let payload = match key & 7 {
            0 => {
                prost::encoding::decode_varint(&mut rest).map_err(|_| malformed("a varint"))?;
                &[][..]
            }
            1 => {
                skip(&mut rest, 8)?;
                &[][..]
            }
            2 => {
                let len =
                    prost::encoding::decode_varint(&mut rest).map_err(|_| malformed("a length"))?;
                let start = rest;
                skip(&mut rest, len)?;
                &start[..start.len() - rest.len()]
            }
            5 => {
                skip(&mut rest, 4)?;
                &[][..]
            }
            other => return Err(malformed(&format!("wire type {other}"))),
        };
        each(key >> 3, payload)?;
    }
    Ok(())
}

/// The metric families the request's metadata types `counter`.
pub fn counter_families(request: &WriteRequest) -> HashSet<&str> {
    request
        .metadata
        .iter()
        .filter(|m| m.r#type == METADATA_COUNTER)
        .map(|m| m.metric_family_name.as_str())
        .collect()
}

/// A series' kind by its name: `Some(Counter)` for the counter suffixes and the families in
/// `counters`; `None` (the `[counters]` rules decide) otherwise.
pub fn kind_of(name: &str, counters: &HashSet<&str>) -> Option<SeriesKind> {
    let by_suffix = ["_total", "_count", "_sum", "_bucket"]
        .iter()
        .any(|suffix| name.ends_with(suffix));
    let by_metadata = !counters.is_empty()
        && (counters.contains(name)
            || name
                .strip_suffix("_total")
                .is_some_and(|family| counters.contains(family)));
    (by_suffix || by_metadata).then_some(SeriesKind::Counter)
}

/// Writes the canonical series key of `labels` into `key` and returns the metric name (a
/// slice of `key`'s source, not of `key`). `tags` is scratch room, reused between series.
///
/// # Errors
/// A [`SeriesError`]; `key` is then empty.
pub fn series_key<'a>(
    labels: &'a [Label],
    tags: &mut Vec<(&'a str, &'a str)>,
    key: &mut String,
) -> Result<&'a str, SeriesError> {
    key.clear();
    tags.clear();
    let mut name = None;
    for (i, label) in labels.iter().enumerate() {
        let (Ok(k), Ok(v)) = (
            std::str::from_utf8(&label.name),
            std::str::from_utf8(&label.value),
        ) else {
            return Err(SeriesError::InvalidLabel(i + 1));
        };
        if k == "__name__" {
            if name.replace(v).is_some() {
                return Err(SeriesError::InvalidLabel(i + 1));
            }
        } else if !v.is_empty() {
            tags.push((k, v));
        }
    }
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or(SeriesError::MissingName)?;
    if !tags.is_sorted_by(|a, b| a.0 <= b.0) {
        tags.sort_unstable_by(|a, b| a.0.cmp(b.0));
    }
    write_canonical(name, tags, key).map_err(SeriesError::InvalidSeries)?;
    Ok(name)
}

/// A sample's unix second: its milliseconds floored.
pub fn seconds(millis: i64) -> Timestamp {
    millis.div_euclid(1000)
}

/// True for Prometheus' staleness marker, which is a NaN with particular bits (other NaNs
/// are values, refused by the engine as `not_finite`).
pub fn is_stale(value: f64) -> bool {
    value.to_bits() == STALE_NAN
}
