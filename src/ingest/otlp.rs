//! OTLP/HTTP metrics (`POST /v1/metrics`): an `ExportMetricsServiceRequest` in protobuf or
//! JSON, decoded and translated into series and samples, with no sockets in sight (the
//! server owns those). docs/otlp.md is the user's account of every rule below.
//!
//! - Names: Prometheus' OTLP receiver's ([`names`]): `http.server.duration` in `ms` becomes
//!   `http_server_duration_milliseconds`, a monotonic sum gains `_total`, a gauge of unit `1`
//!   `_ratio`.
//! - Tags: the point's attributes, then the resource's (a point's own win), keys as
//!   Prometheus label names (`host.name` as `host_name`); the scope's name as
//!   `otel_scope_name`; `service.name` (after `service.namespace` and `/`) as `job` and
//!   `service.instance.id` as `instance`. An empty value is no tag.
//! - Kinds: a gauge and a non-monotonic cumulative sum are gauges, a monotonic cumulative
//!   sum a counter (stored as increases), a delta sum a delta counter (its values are
//!   increases already); a summary is a gauge per quantile (tag `quantile`) and the counters
//!   `_sum` and `_count`. A histogram, explicit or exponential, is a distribution: read whole
//!   and checked ([`histogram`]), made a [`crate::histogram::Observed`] ([`distribution`]), a
//!   cumulative one's increase since its stream's last point ([`streams`]). An explicit
//!   one's series carries the tag [`EXPLICIT_BUCKETS_TAG`], so that reads can say its
//!   quantiles are within its buckets' widths rather than the scale's error.
//! - Time: `time_unix_nano` floored to the second; 0 (not said) is "now".
//! - A point flagged `NO_RECORDED_VALUE` is skipped (it says the series went away).
//!
//! Every data point of the request has a number, from 1 in request order (resources, scopes,
//! metrics, points): refusals name it as other protocols name a line.

pub mod distribution;
pub mod histogram;
mod json;
mod names;
pub mod proto;
pub mod streams;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ops::Range;

use prost::Message;

pub use distribution::Counts;
pub use histogram::{Distribution, ExponentialBuckets, HistogramError, Layout, Temporality};
pub use names::{label_name, metric_name, NameKind};
use proto::{Data, ExportMetricsServiceRequest, KeyValue, Metric, NumberValue};
pub use streams::{Streams, MAX_STREAM_BYTES};

use crate::counter::SeriesKind;
use crate::histogram::EXPLICIT_BUCKETS_TAG;
use crate::registry::write_canonical;
use crate::time::Timestamp;

/// The two encodings OTLP/HTTP sends, told apart by `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

impl Encoding {
    /// The encoding of a `Content-Type` header value; `None` for another type.
    pub fn of_content_type(value: &str) -> Option<Encoding> {
        let media = value.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case("application/x-protobuf") {
            Some(Encoding::Protobuf)
        } else if media.eq_ignore_ascii_case("application/json") {
            Some(Encoding::Json)
        } else {
            None
        }
    }

    /// The `Content-Type` of this encoding, which an answer repeats.
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// Entries one request may hold (resources, scopes, metrics, points, attributes, bucket
/// counts, quantiles: every field decoding allocates for). As for remote write
/// ([`super::prom_remote::MAX_ENTRIES`]): an OTLP exporter sends batches of thousands of
/// points (the Collector's `batch` processor 8,192 by default), each with its attributes at
/// about four entries apiece: up to a few hundred thousand entries. A decoded entry takes
/// at most 184 bytes (an empty exponential histogram point; an attribute 56 plus its text),
/// so a million bound what a body of tiny entries makes the decoder allocate to about
/// 190 MB, twice that while a list grows.
pub const MAX_ENTRIES: usize = 1_000_000;

/// Deepest nesting of messages read (list and map attributes nest): as prost's own limit.
const MAX_DEPTH: usize = 100;

/// Why a whole request body is refused (answered 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Not a protobuf `ExportMetricsServiceRequest`.
    #[error("body is not a protobuf ExportMetricsServiceRequest: {0}")]
    Protobuf(String),
    /// Not an OTLP/JSON `ExportMetricsServiceRequest`.
    #[error("body is not an OTLP/JSON ExportMetricsServiceRequest: {0}")]
    Json(String),
    /// More entries than [`MAX_ENTRIES`].
    #[error(
        "request holds more than {limit} resources, metrics, points, attributes and other \
         entries: send smaller batches"
    )]
    TooManyEntries {
        /// The limit.
        limit: usize,
    },
}

/// Decodes a request body (already inflated) of `encoding`, refusing one of more than
/// [`MAX_ENTRIES`] entries before decoding it.
///
/// # Errors
/// A [`BodyError`] saying what is wrong with the body.
pub fn decode(body: &[u8], encoding: Encoding) -> Result<ExportMetricsServiceRequest, BodyError> {
    match encoding {
        Encoding::Protobuf => {
            let mut entries = 0;
            count_entries(body, Kind::Request, 0, &mut entries)?;
            ExportMetricsServiceRequest::decode(body)
                .map_err(|e| BodyError::Protobuf(e.to_string()))
        }
        Encoding::Json => {
            // serde would read a struct from an array too; OTLP/JSON's request is an object.
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            if first.is_some_and(|&b| b != b'{') {
                return Err(BodyError::Json("expected a JSON object".into()));
            }
            if json::values(body) > MAX_ENTRIES {
                return Err(BodyError::TooManyEntries { limit: MAX_ENTRIES });
            }
            serde_json::from_slice(body).map_err(|e| BodyError::Json(e.to_string()))
        }
    }
}

/// The messages whose fields [`count_entries`] walks into.
#[derive(Clone, Copy)]
enum Kind {
    Request,
    ResourceMetrics,
    Resource,
    ScopeMetrics,
    Metric,
    /// Gauge, Sum, Histogram, ExponentialHistogram, Summary: field 1 holds the points.
    Points(Point),
    Point(Point),
    Buckets,
    KeyValue,
    AnyValue,
    /// ArrayValue (of AnyValue) and KeyValueList (of KeyValue).
    List(bool),
    /// A message with no field walked into.
    Leaf,
}

#[derive(Clone, Copy)]
enum Point {
    Number,
    Histogram,
    Exponential,
    Summary,
}

/// What a field of a message is, for counting: a message to walk, a packed list of scalars
/// of the given least size in bytes, or a scalar.
enum Field {
    Message(Kind),
    Packed(usize),
    Scalar,
}

fn field(kind: Kind, number: u64) -> Field {
    use Field::{Message as M, Packed, Scalar};
    match (kind, number) {
        (Kind::Request, 1) => M(Kind::ResourceMetrics),
        (Kind::ResourceMetrics, 1) => M(Kind::Resource),
        (Kind::ResourceMetrics, 2) => M(Kind::ScopeMetrics),
        (Kind::Resource, 1) | (Kind::List(false), 1) => M(Kind::KeyValue),
        (Kind::ScopeMetrics, 1) => M(Kind::Leaf),
        (Kind::ScopeMetrics, 2) => M(Kind::Metric),
        (Kind::Metric, 5 | 7) => M(Kind::Points(Point::Number)),
        (Kind::Metric, 9) => M(Kind::Points(Point::Histogram)),
        (Kind::Metric, 10) => M(Kind::Points(Point::Exponential)),
        (Kind::Metric, 11) => M(Kind::Points(Point::Summary)),
        (Kind::Points(point), 1) => M(Kind::Point(point)),
        (Kind::Point(Point::Number), 7)
        | (Kind::Point(Point::Histogram), 9)
        | (Kind::Point(Point::Exponential), 1)
        | (Kind::Point(Point::Summary), 7) => M(Kind::KeyValue),
        (Kind::Point(Point::Histogram), 6 | 7) => Packed(8),
        (Kind::Point(Point::Exponential), 8 | 9) => M(Kind::Buckets),
        (Kind::Point(Point::Summary), 6) => M(Kind::Leaf),
        (Kind::Buckets, 2) => Packed(1),
        (Kind::KeyValue, 2) => M(Kind::AnyValue),
        (Kind::AnyValue, 5) => M(Kind::List(true)),
        (Kind::AnyValue, 6) => M(Kind::List(false)),
        (Kind::List(true), 1) => M(Kind::AnyValue),
        _ => Scalar,
    }
}

/// Counts the entries of `message` (of `kind`) from its protobuf framing alone, without
/// decoding: one per field, and one per element of a packed list; refuses more than
/// [`MAX_ENTRIES`] in all, or nesting deeper than [`MAX_DEPTH`].
fn count_entries(
    message: &[u8],
    kind: Kind,
    depth: usize,
    entries: &mut usize,
) -> Result<(), BodyError> {
    let malformed = |what: &str| BodyError::Protobuf(format!("malformed framing: {what}"));
    if depth > MAX_DEPTH {
        return Err(malformed("messages nested too deep"));
    }
    let mut rest = message;
    let skip = |rest: &mut &[u8], n: u64| -> Result<(), BodyError> {
        let n = usize::try_from(n).map_err(|_| malformed("a length"))?;
        if n > rest.len() {
            return Err(malformed("a field runs past the end"));
        }
        *rest = &rest[n..];
        Ok(())
    };
    while !rest.is_empty() {
        let key = prost::encoding::decode_varint(&mut rest).map_err(|_| malformed("a key"))?;
        *entries += 1;
        match key & 7 {
            0 => {
                prost::encoding::decode_varint(&mut rest).map_err(|_| malformed("a varint"))?;
            }
            1 => skip(&mut rest, 8)?,
            2 => {
                let len =
                    prost::encoding::decode_varint(&mut rest).map_err(|_| malformed("a length"))?;
                let start = rest;
                skip(&mut rest, len)?;
                let payload = &start[..start.len() - rest.len()];
                match field(kind, key >> 3) {
                    Field::Message(inner) => count_entries(payload, inner, depth + 1, entries)?,
                    Field::Packed(size) => *entries += payload.len() / size,
                    Field::Scalar => {}
                }
            }
            5 => skip(&mut rest, 4)?,
            other => return Err(malformed(&format!("wire type {other}"))),
        }
        if *entries > MAX_ENTRIES {
            return Err(BodyError::TooManyEntries { limit: MAX_ENTRIES });
        }
    }
    Ok(())
}

/// What became of one data point (or of one of a summary's samples).
#[derive(Clone, Debug, PartialEq)]
pub enum What {
    /// A sample to write.
    Sample {
        /// How the series stores it.
        kind: SeriesKind,
        /// Unix seconds; `None` for "now".
        ts: Option<Timestamp>,
        /// The value (not checked: the write path refuses what is not finite).
        value: f64,
    },
    /// A histogram point, read whole and checked: a distribution sample once
    /// [`Streams::observe`] made it one.
    Histogram {
        /// Unix seconds; `None` for "now".
        ts: Option<Timestamp>,
        /// The point.
        distribution: Distribution,
    },
    /// A point refused, with its reason's snake_case name and what was wrong.
    Refused {
        /// The reason's name.
        reason: &'static str,
        /// For a person.
        message: String,
    },
    /// A point with nothing to write, counted under its reason.
    Skipped {
        /// The reason's name.
        reason: &'static str,
    },
}

/// One translated entry: the data point it came from, its series (empty when refused before
/// one was made) and what it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The data point's number in the request, from 1.
    pub point: usize,
    series: Range<usize>,
    /// What it is.
    pub what: What,
}

/// One metric's entries, their series texts one after another in one string; reused from
/// metric to metric.
#[derive(Debug, Default)]
pub struct Batch {
    text: String,
    entries: Vec<Entry>,
}

impl Batch {
    /// The entries, in request order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// An entry's series, as canonical text (see [`crate::SeriesKey`]).
    pub fn series(&self, entry: &Entry) -> &str {
        &self.text[entry.series.clone()]
    }

    fn clear(&mut self) {
        self.text.clear();
        self.entries.clear();
    }

    fn push(&mut self, point: usize, key: &str, what: What) {
        let start = self.text.len();
        self.text.push_str(key);
        self.entries.push(Entry {
            point,
            series: start..self.text.len(),
            what,
        });
    }
}

/// The resource and scope a metric comes from, as tags.
#[derive(Default)]
struct Context {
    /// The resource's attributes other than `service.*` identity, keys as label names.
    resource: BTreeMap<String, String>,
    /// `job`, `instance` and `otel_scope_name`, which override any attribute.
    overrides: Vec<(&'static str, String)>,
}

/// Where [`Translator::next_metric`] is in the request.
#[derive(Default)]
struct Position {
    resource: usize,
    scope: usize,
    metric: usize,
}

/// Walks a decoded request metric by metric, translating each into a [`Batch`]: one
/// metric's entries at a time, so a request costs its decoded form and one metric's series
/// texts, whatever its size.
pub struct Translator<'a> {
    request: &'a ExportMetricsServiceRequest,
    at: Position,
    /// The context of the resource and scope at `at`, made on entering them.
    context: Option<Context>,
    /// Data points numbered so far.
    points: usize,
    /// The point's tags being built, and the series key printed from them.
    tags: BTreeMap<String, String>,
    key: String,
}

/// `service.name`, `service.namespace` and `service.instance.id`: the resource attributes
/// that become `job` and `instance` rather than tags of their own.
const IDENTITY: [&str; 3] = ["service.name", "service.namespace", "service.instance.id"];

impl<'a> Translator<'a> {
    /// A translator of `request`, from its first metric.
    pub fn new(request: &'a ExportMetricsServiceRequest) -> Translator<'a> {
        Translator {
            request,
            at: Position::default(),
            context: None,
            points: 0,
            tags: BTreeMap::new(),
            key: String::new(),
        }
    }

    /// Data points numbered so far (all of them once [`Translator::next_metric`] said
    /// false).
    pub fn points(&self) -> usize {
        self.points
    }

    /// Translates the next metric into `batch` (emptied first); false once every metric was.
    pub fn next_metric(&mut self, batch: &mut Batch) -> bool {
        batch.clear();
        loop {
            let Some(resource) = self.request.resource_metrics.get(self.at.resource) else {
                return false;
            };
            let Some(scope) = resource.scope_metrics.get(self.at.scope) else {
                self.at = Position {
                    resource: self.at.resource + 1,
                    ..Position::default()
                };
                self.context = None;
                continue;
            };
            let Some(metric) = scope.metrics.get(self.at.metric) else {
                self.at.scope += 1;
                self.at.metric = 0;
                self.context = None;
                continue;
            };
            self.at.metric += 1;
            let context = self.context.get_or_insert_with(|| {
                let attributes = resource
                    .resource
                    .as_ref()
                    .map_or(&[][..], |r| &r.attributes);
                let scope_name = scope.scope.as_ref().map_or("", |s| s.name.as_str());
                context(attributes, scope_name)
            });
            let context = std::mem::take(context);
            self.metric(metric, &context, batch);
            self.context = Some(context);
            return true;
        }
    }

    fn metric(&mut self, metric: &Metric, context: &Context, batch: &mut Batch) {
        let Some(data) = &metric.data else {
            return;
        };
        let name_kind = match data {
            Data::Gauge(_) => NameKind::Gauge,
            Data::Sum(sum) if sum.is_monotonic => NameKind::MonotonicSum,
            _ => NameKind::Other,
        };
        let name = metric_name(&metric.name, &metric.unit, name_kind);
        match data {
            Data::Gauge(gauge) => {
                for point in &gauge.data_points {
                    let number = self.number();
                    let what = number_sample(
                        point.flags,
                        point.value.as_ref(),
                        point.time_unix_nano,
                        Some(SeriesKind::Gauge),
                    );
                    self.entry(
                        batch,
                        number,
                        &name,
                        "",
                        context,
                        &point.attributes,
                        None,
                        what,
                    );
                }
            }
            Data::Sum(sum) => {
                let kind = match (
                    Temporality::of(sum.aggregation_temporality),
                    sum.is_monotonic,
                ) {
                    (Some(Temporality::Delta), _) => Some(SeriesKind::DeltaCounter),
                    (Some(Temporality::Cumulative), true) => Some(SeriesKind::Counter),
                    (Some(Temporality::Cumulative), false) => Some(SeriesKind::Gauge),
                    (None, _) => None,
                };
                for point in &sum.data_points {
                    let number = self.number();
                    let what = number_sample(
                        point.flags,
                        point.value.as_ref(),
                        point.time_unix_nano,
                        kind,
                    );
                    self.entry(
                        batch,
                        number,
                        &name,
                        "",
                        context,
                        &point.attributes,
                        None,
                        what,
                    );
                }
            }
            Data::Summary(summary) => {
                for point in &summary.data_points {
                    let number = self.number();
                    let ts = seconds(point.time_unix_nano);
                    if point.flags & proto::NO_RECORDED_VALUE != 0 {
                        batch.push(number, "", no_recorded_value());
                        continue;
                    }
                    for quantile in &point.quantile_values {
                        let what = What::Sample {
                            kind: SeriesKind::Gauge,
                            ts,
                            value: quantile.value,
                        };
                        let tag = ("quantile", format!("{}", quantile.quantile));
                        self.entry(
                            batch,
                            number,
                            &name,
                            "",
                            context,
                            &point.attributes,
                            Some(tag),
                            what,
                        );
                    }
                    for (suffix, value) in [("_sum", point.sum), ("_count", point.count as f64)] {
                        let what = What::Sample {
                            kind: SeriesKind::Counter,
                            ts,
                            value,
                        };
                        self.entry(
                            batch,
                            number,
                            &name,
                            suffix,
                            context,
                            &point.attributes,
                            None,
                            what,
                        );
                    }
                }
            }
            Data::Histogram(histogram) => {
                let temporality = Temporality::of(histogram.aggregation_temporality);
                for point in &histogram.data_points {
                    let number = self.number();
                    let what =
                        histogram_point(point.flags, point.time_unix_nano, temporality, |t| {
                            histogram::explicit(point, t)
                        });
                    let (key, value) = EXPLICIT_BUCKETS_TAG;
                    self.entry(
                        batch,
                        number,
                        &name,
                        "",
                        context,
                        &point.attributes,
                        Some((key, value.to_string())),
                        what,
                    );
                }
            }
            Data::ExponentialHistogram(histogram) => {
                let temporality = Temporality::of(histogram.aggregation_temporality);
                for point in &histogram.data_points {
                    let number = self.number();
                    let what =
                        histogram_point(point.flags, point.time_unix_nano, temporality, |t| {
                            histogram::exponential(point, t)
                        });
                    self.entry(
                        batch,
                        number,
                        &name,
                        "",
                        context,
                        &point.attributes,
                        None,
                        what,
                    );
                }
            }
        }
    }

    fn number(&mut self) -> usize {
        self.points += 1;
        self.points
    }

    /// Pushes `what` for the series `name` + `suffix` with the point's tags; an entry that
    /// is no sample or histogram needs no series, and one whose series cannot be made is
    /// refused instead.
    #[allow(clippy::too_many_arguments)]
    fn entry(
        &mut self,
        batch: &mut Batch,
        number: usize,
        name: &str,
        suffix: &str,
        context: &Context,
        attributes: &[KeyValue],
        extra: Option<(&'static str, String)>,
        what: What,
    ) {
        if matches!(what, What::Refused { .. } | What::Skipped { .. }) {
            batch.push(number, "", what);
            return;
        }
        if name.is_empty() {
            let message = "metric name has no letter or digit".to_string();
            let what = What::Refused {
                reason: "missing_metric_name",
                message,
            };
            batch.push(number, "", what);
            return;
        }
        tags_of(attributes, &mut self.tags);
        for (k, v) in &context.resource {
            if !self.tags.contains_key(k) {
                self.tags.insert(k.clone(), v.clone());
            }
        }
        for (k, v) in context.overrides.iter().chain(extra.as_ref()) {
            self.tags.insert((*k).to_string(), v.clone());
        }
        let tags: Vec<(&str, &str)> = (self.tags.iter())
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let full_name;
        let series_name = if suffix.is_empty() {
            name
        } else {
            full_name = format!("{name}{suffix}");
            &full_name
        };
        match write_canonical(series_name, &tags, &mut self.key) {
            Ok(()) => batch.push(number, &self.key, what),
            Err(why) => {
                let what = What::Refused {
                    reason: "invalid_series",
                    message: format!("the point's tags make no series: {why}"),
                };
                batch.push(number, "", what);
            }
        }
    }
}

fn no_recorded_value() -> What {
    What::Skipped {
        reason: "otlp_no_recorded_value",
    }
}

/// A gauge's or sum's point: skipped when flagged without value, refused without a value or
/// a kind (a sum of unspecified temporality).
fn number_sample(
    flags: u32,
    value: Option<&NumberValue>,
    time_unix_nano: u64,
    kind: Option<SeriesKind>,
) -> What {
    if flags & proto::NO_RECORDED_VALUE != 0 {
        return no_recorded_value();
    }
    let Some(kind) = kind else {
        return invalid_temporality();
    };
    let value = match value {
        Some(NumberValue::AsDouble(v)) => *v,
        Some(NumberValue::AsInt(v)) => *v as f64,
        None => {
            return What::Refused {
                reason: "otlp_missing_value",
                message: "the point has neither asDouble nor asInt".into(),
            }
        }
    };
    What::Sample {
        kind,
        ts: seconds(time_unix_nano),
        value,
    }
}

fn invalid_temporality() -> What {
    What::Refused {
        reason: "otlp_invalid_temporality",
        message: "aggregation temporality is neither delta (1) nor cumulative (2)".into(),
    }
}

/// A histogram point read whole by `read`, or why not.
fn histogram_point(
    flags: u32,
    time_unix_nano: u64,
    temporality: Option<Temporality>,
    read: impl FnOnce(Temporality) -> Result<Distribution, HistogramError>,
) -> What {
    if flags & proto::NO_RECORDED_VALUE != 0 {
        return no_recorded_value();
    }
    let Some(temporality) = temporality else {
        return invalid_temporality();
    };
    match read(temporality) {
        Ok(distribution) => What::Histogram {
            ts: seconds(time_unix_nano),
            distribution,
        },
        Err(e) => What::Refused {
            reason: e.as_str(),
            message: e.to_string(),
        },
    }
}

/// The tags of a resource and scope.
fn context(attributes: &[KeyValue], scope_name: &str) -> Context {
    let mut overrides = Vec::new();
    let text = |key: &str| {
        (attributes.iter())
            .find(|kv| kv.key == key)
            .map(|kv| names::value_text(kv.value.as_ref()))
            .filter(|v| !v.is_empty())
    };
    if !scope_name.is_empty() {
        overrides.push(("otel_scope_name", scope_name.to_string()));
    }
    if let Some(service) = text("service.name") {
        let job = match text("service.namespace") {
            Some(namespace) => format!("{namespace}/{service}"),
            None => service,
        };
        overrides.push(("job", job));
    }
    if let Some(instance) = text("service.instance.id") {
        overrides.push(("instance", instance));
    }
    let others: Vec<KeyValue> = (attributes.iter())
        .filter(|kv| !IDENTITY.contains(&kv.key.as_str()))
        .cloned()
        .collect();
    let mut resource = BTreeMap::new();
    tags_of(&others, &mut resource);
    Context {
        resource,
        overrides,
    }
}

/// Attributes as tags, into `tags` (emptied first): keys as label names; values of keys that
/// become the same name joined with `;` in the order of the keys as written, as Prometheus
/// does; empty values left out.
fn tags_of(attributes: &[KeyValue], tags: &mut BTreeMap<String, String>) {
    tags.clear();
    let mut sorted: Vec<&KeyValue> = attributes.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    for kv in sorted {
        let value = names::value_text(kv.value.as_ref());
        if value.is_empty() {
            continue;
        }
        tags.entry(label_name(&kv.key))
            .and_modify(|v| {
                v.push(';');
                v.push_str(&value);
            })
            .or_insert(value);
    }
}

/// A point's unix second: its nanoseconds floored; `None` ("now") for 0, which OTLP uses for
/// a time not given.
pub fn seconds(time_unix_nano: u64) -> Option<Timestamp> {
    (time_unix_nano != 0).then_some((time_unix_nano / 1_000_000_000) as Timestamp)
}
