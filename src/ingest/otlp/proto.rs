//! The messages of OTLP's `ExportMetricsServiceRequest` this reads, with their responses,
//! derived by hand with prost's macros (as `prom_remote` does), and with serde's for OTLP/JSON
//! (lowerCamelCase keys, 64-bit integers as decimal strings or numbers, enums as integers, as
//! the OTLP specification's "JSON Protobuf Encoding" says; `null` reads as the default, as in
//! protobuf's JSON mapping). Fields not declared (exemplars, descriptions, metadata, dropped
//! counts, schema URLs) are skipped by both decoders. Field numbers are those of
//! opentelemetry-proto 1.x (`collector/metrics/v1`, `metrics/v1`, `common/v1`,
//! `resource/v1`).

use prost::{Message, Oneof};
use serde::Deserialize;

use super::json as de;

/// `ExportMetricsServiceRequest`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportMetricsServiceRequest {
    /// The resources (processes, hosts) and their metrics.
    #[prost(message, repeated, tag = "1")]
    #[serde(default, deserialize_with = "de::vec")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

/// `ExportMetricsServiceResponse`: empty on full success.
#[derive(Clone, PartialEq, Message)]
pub struct ExportMetricsServiceResponse {
    /// Set when some data points were refused.
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<ExportMetricsPartialSuccess>,
}

/// `ExportMetricsPartialSuccess`.
#[derive(Clone, PartialEq, Message)]
pub struct ExportMetricsPartialSuccess {
    /// Data points refused.
    #[prost(int64, tag = "1")]
    pub rejected_data_points: i64,
    /// Why, for a person.
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// `google.rpc.Status`, the body of every 4xx and 5xx answer (without `details`).
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    /// The gRPC code (3 invalid argument, 8 resource exhausted, 14 unavailable).
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What was wrong.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `ResourceMetrics`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceMetrics {
    /// The resource's attributes (`service.name`, `host.name`, ...).
    #[prost(message, optional, tag = "1")]
    #[serde(default)]
    pub resource: Option<Resource>,
    /// Metrics by instrumentation scope.
    #[prost(message, repeated, tag = "2")]
    #[serde(default, deserialize_with = "de::vec")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

/// `Resource`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// Attributes of the resource.
    #[prost(message, repeated, tag = "1")]
    #[serde(default, deserialize_with = "de::vec")]
    pub attributes: Vec<KeyValue>,
}

/// `ScopeMetrics`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScopeMetrics {
    /// The instrumentation scope (library) that made the metrics.
    #[prost(message, optional, tag = "1")]
    #[serde(default)]
    pub scope: Option<InstrumentationScope>,
    /// The metrics.
    #[prost(message, repeated, tag = "2")]
    #[serde(default, deserialize_with = "de::vec")]
    pub metrics: Vec<Metric>,
}

/// `InstrumentationScope`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstrumentationScope {
    /// The scope's name (`io.opentelemetry.runtime`, a module's name).
    #[prost(string, tag = "1")]
    #[serde(default, deserialize_with = "de::string")]
    pub name: String,
}

/// `Metric`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    /// The metric's name (`http.server.request.duration`).
    #[prost(string, tag = "1")]
    #[serde(default, deserialize_with = "de::string")]
    pub name: String,
    /// Its unit, in UCUM (`s`, `By`, `1`, `{request}`).
    #[prost(string, tag = "3")]
    #[serde(default, deserialize_with = "de::string")]
    pub unit: String,
    /// Its points, by type.
    #[prost(oneof = "Data", tags = "5, 7, 9, 10, 11")]
    #[serde(flatten, deserialize_with = "de::data")]
    pub data: Option<Data>,
}

/// `Metric.data`.
#[derive(Clone, PartialEq, Oneof)]
pub enum Data {
    /// Gauge points.
    #[prost(message, tag = "5")]
    Gauge(Gauge),
    /// Sum points.
    #[prost(message, tag = "7")]
    Sum(Sum),
    /// Explicit-bucket histogram points.
    #[prost(message, tag = "9")]
    Histogram(Histogram),
    /// Exponential histogram points.
    #[prost(message, tag = "10")]
    ExponentialHistogram(ExponentialHistogram),
    /// Summary points.
    #[prost(message, tag = "11")]
    Summary(Summary),
}

/// `AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA`.
pub const DELTA: i32 = 1;
/// `AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE`.
pub const CUMULATIVE: i32 = 2;
/// `DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK`.
pub const NO_RECORDED_VALUE: u32 = 1;

/// `Gauge`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gauge {
    /// The points.
    #[prost(message, repeated, tag = "1")]
    #[serde(default, deserialize_with = "de::vec")]
    pub data_points: Vec<NumberDataPoint>,
}

/// `Sum`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sum {
    /// The points.
    #[prost(message, repeated, tag = "1")]
    #[serde(default, deserialize_with = "de::vec")]
    pub data_points: Vec<NumberDataPoint>,
    /// [`DELTA`] or [`CUMULATIVE`] (0 is unspecified, which is invalid).
    #[prost(int32, tag = "2")]
    #[serde(default, deserialize_with = "de::i32")]
    pub aggregation_temporality: i32,
    /// True for a sum that only grows (a counter).
    #[prost(bool, tag = "3")]
    #[serde(default, deserialize_with = "de::bool")]
    pub is_monotonic: bool,
}

/// `Histogram`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Histogram {
    /// The points.
    #[prost(message, repeated, tag = "1")]
    #[serde(default, deserialize_with = "de::vec")]
    pub data_points: Vec<HistogramDataPoint>,
    /// [`DELTA`] or [`CUMULATIVE`].
    #[prost(int32, tag = "2")]
    #[serde(default, deserialize_with = "de::i32")]
    pub aggregation_temporality: i32,
}

/// `ExponentialHistogram`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExponentialHistogram {
    /// The points.
    #[prost(message, repeated, tag = "1")]
    #[serde(default, deserialize_with = "de::vec")]
    pub data_points: Vec<ExponentialHistogramDataPoint>,
    /// [`DELTA`] or [`CUMULATIVE`].
    #[prost(int32, tag = "2")]
    #[serde(default, deserialize_with = "de::i32")]
    pub aggregation_temporality: i32,
}

/// `Summary`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The points.
    #[prost(message, repeated, tag = "1")]
    #[serde(default, deserialize_with = "de::vec")]
    pub data_points: Vec<SummaryDataPoint>,
}

/// `NumberDataPoint`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NumberDataPoint {
    /// The point's attributes.
    #[prost(message, repeated, tag = "7")]
    #[serde(default, deserialize_with = "de::vec")]
    pub attributes: Vec<KeyValue>,
    /// When the point was taken, in nanoseconds since the epoch (0: not said).
    #[prost(fixed64, tag = "3")]
    #[serde(default, deserialize_with = "de::u64")]
    pub time_unix_nano: u64,
    /// The value.
    #[prost(oneof = "NumberValue", tags = "4, 6")]
    #[serde(flatten, deserialize_with = "de::number_value")]
    pub value: Option<NumberValue>,
    /// [`NO_RECORDED_VALUE`] marks a point without a value.
    #[prost(uint32, tag = "8")]
    #[serde(default, deserialize_with = "de::u32")]
    pub flags: u32,
}

/// `NumberDataPoint.value`.
#[derive(Clone, PartialEq, Oneof)]
pub enum NumberValue {
    /// A float.
    #[prost(double, tag = "4")]
    AsDouble(f64),
    /// An integer.
    #[prost(sfixed64, tag = "6")]
    AsInt(i64),
}

/// `HistogramDataPoint`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistogramDataPoint {
    /// The point's attributes.
    #[prost(message, repeated, tag = "9")]
    #[serde(default, deserialize_with = "de::vec")]
    pub attributes: Vec<KeyValue>,
    /// When the counts began, in nanoseconds since the epoch (0 when not said): a cumulative
    /// point's counts are since then, so a new start is a reset.
    #[prost(fixed64, tag = "2")]
    #[serde(default, deserialize_with = "de::u64")]
    pub start_time_unix_nano: u64,
    /// When the point was taken, in nanoseconds since the epoch.
    #[prost(fixed64, tag = "3")]
    #[serde(default, deserialize_with = "de::u64")]
    pub time_unix_nano: u64,
    /// Values counted.
    #[prost(fixed64, tag = "4")]
    #[serde(default, deserialize_with = "de::u64")]
    pub count: u64,
    /// Their sum, when known.
    #[prost(double, optional, tag = "5")]
    #[serde(default, deserialize_with = "de::opt_f64")]
    pub sum: Option<f64>,
    /// Values per bucket: one more than `explicit_bounds`.
    #[prost(fixed64, repeated, tag = "6")]
    #[serde(default, deserialize_with = "de::vec_u64")]
    pub bucket_counts: Vec<u64>,
    /// The buckets' upper bounds, strictly increasing.
    #[prost(double, repeated, tag = "7")]
    #[serde(default, deserialize_with = "de::vec_f64")]
    pub explicit_bounds: Vec<f64>,
    /// [`NO_RECORDED_VALUE`] marks a point without a value.
    #[prost(uint32, tag = "10")]
    #[serde(default, deserialize_with = "de::u32")]
    pub flags: u32,
    /// The least value, when known.
    #[prost(double, optional, tag = "11")]
    #[serde(default, deserialize_with = "de::opt_f64")]
    pub min: Option<f64>,
    /// The greatest value, when known.
    #[prost(double, optional, tag = "12")]
    #[serde(default, deserialize_with = "de::opt_f64")]
    pub max: Option<f64>,
}

/// `ExponentialHistogramDataPoint`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExponentialHistogramDataPoint {
    /// The point's attributes.
    #[prost(message, repeated, tag = "1")]
    #[serde(default, deserialize_with = "de::vec")]
    pub attributes: Vec<KeyValue>,
    /// When the counts began, in nanoseconds since the epoch (0 when not said): a cumulative
    /// point's counts are since then, so a new start is a reset.
    #[prost(fixed64, tag = "2")]
    #[serde(default, deserialize_with = "de::u64")]
    pub start_time_unix_nano: u64,
    /// When the point was taken, in nanoseconds since the epoch.
    #[prost(fixed64, tag = "3")]
    #[serde(default, deserialize_with = "de::u64")]
    pub time_unix_nano: u64,
    /// Values counted.
    #[prost(fixed64, tag = "4")]
    #[serde(default, deserialize_with = "de::u64")]
    pub count: u64,
    /// Their sum, when known.
    #[prost(double, optional, tag = "5")]
    #[serde(default, deserialize_with = "de::opt_f64")]
    pub sum: Option<f64>,
    /// Bucket `i` is `(base^i, base^(i+1)]` with `base = 2^(2^-scale)`.
    #[prost(sint32, tag = "6")]
    #[serde(default, deserialize_with = "de::i32")]
    pub scale: i32,
    /// Values in the zero bucket.
    #[prost(fixed64, tag = "7")]
    #[serde(default, deserialize_with = "de::u64")]
    pub zero_count: u64,
    /// Buckets of positive values.
    #[prost(message, optional, tag = "8")]
    #[serde(default)]
    pub positive: Option<Buckets>,
    /// Buckets of negative values (by absolute value).
    #[prost(message, optional, tag = "9")]
    #[serde(default)]
    pub negative: Option<Buckets>,
    /// [`NO_RECORDED_VALUE`] marks a point without a value.
    #[prost(uint32, tag = "10")]
    #[serde(default, deserialize_with = "de::u32")]
    pub flags: u32,
    /// The least value, when known.
    #[prost(double, optional, tag = "12")]
    #[serde(default, deserialize_with = "de::opt_f64")]
    pub min: Option<f64>,
    /// The greatest value, when known.
    #[prost(double, optional, tag = "13")]
    #[serde(default, deserialize_with = "de::opt_f64")]
    pub max: Option<f64>,
    /// The zero bucket's width: values of absolute value up to it are counted there.
    #[prost(double, tag = "14")]
    #[serde(default, deserialize_with = "de::f64")]
    pub zero_threshold: f64,
}

/// `ExponentialHistogramDataPoint.Buckets`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Buckets {
    /// Index of the first bucket.
    #[prost(sint32, tag = "1")]
    #[serde(default, deserialize_with = "de::i32")]
    pub offset: i32,
    /// Values per bucket, from `offset` on.
    #[prost(uint64, repeated, tag = "2")]
    #[serde(default, deserialize_with = "de::vec_u64")]
    pub bucket_counts: Vec<u64>,
}

/// `SummaryDataPoint`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryDataPoint {
    /// The point's attributes.
    #[prost(message, repeated, tag = "7")]
    #[serde(default, deserialize_with = "de::vec")]
    pub attributes: Vec<KeyValue>,
    /// When the point was taken, in nanoseconds since the epoch.
    #[prost(fixed64, tag = "3")]
    #[serde(default, deserialize_with = "de::u64")]
    pub time_unix_nano: u64,
    /// Values counted since the start.
    #[prost(fixed64, tag = "4")]
    #[serde(default, deserialize_with = "de::u64")]
    pub count: u64,
    /// Their sum.
    #[prost(double, tag = "5")]
    #[serde(default, deserialize_with = "de::f64")]
    pub sum: f64,
    /// Values at quantiles.
    #[prost(message, repeated, tag = "6")]
    #[serde(default, deserialize_with = "de::vec")]
    pub quantile_values: Vec<ValueAtQuantile>,
    /// [`NO_RECORDED_VALUE`] marks a point without a value.
    #[prost(uint32, tag = "8")]
    #[serde(default, deserialize_with = "de::u32")]
    pub flags: u32,
}

/// `SummaryDataPoint.ValueAtQuantile`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValueAtQuantile {
    /// In `[0, 1]`.
    #[prost(double, tag = "1")]
    #[serde(default, deserialize_with = "de::f64")]
    pub quantile: f64,
    /// The value at it.
    #[prost(double, tag = "2")]
    #[serde(default, deserialize_with = "de::f64")]
    pub value: f64,
}

/// `KeyValue`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyValue {
    /// The attribute's name (`http.request.method`).
    #[prost(string, tag = "1")]
    #[serde(default, deserialize_with = "de::string")]
    pub key: String,
    /// Its value.
    #[prost(message, optional, tag = "2")]
    #[serde(default)]
    pub value: Option<AnyValue>,
}

/// `AnyValue`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnyValue {
    /// The value; `None` for an empty one.
    #[prost(oneof = "Value", tags = "1, 2, 3, 4, 5, 6, 7")]
    #[serde(flatten, deserialize_with = "de::any_value")]
    pub value: Option<Value>,
}

/// `AnyValue.value`.
#[derive(Clone, PartialEq, Oneof)]
pub enum Value {
    /// Text.
    #[prost(string, tag = "1")]
    StringValue(String),
    /// A boolean.
    #[prost(bool, tag = "2")]
    BoolValue(bool),
    /// An integer.
    #[prost(int64, tag = "3")]
    IntValue(i64),
    /// A float.
    #[prost(double, tag = "4")]
    DoubleValue(f64),
    /// A list.
    #[prost(message, tag = "5")]
    ArrayValue(ArrayValue),
    /// A map.
    #[prost(message, tag = "6")]
    KvlistValue(KeyValueList),
    /// Bytes (base64 in JSON).
    #[prost(bytes = "vec", tag = "7")]
    BytesValue(Vec<u8>),
}

/// `ArrayValue`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArrayValue {
    /// The elements.
    #[prost(message, repeated, tag = "1")]
    #[serde(default, deserialize_with = "de::vec")]
    pub values: Vec<AnyValue>,
}

/// `KeyValueList`.
#[derive(Clone, PartialEq, Message, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyValueList {
    /// The entries.
    #[prost(message, repeated, tag = "1")]
    #[serde(default, deserialize_with = "de::vec")]
    pub values: Vec<KeyValue>,
}
