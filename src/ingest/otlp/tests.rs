//! Tests of the OTLP decoder and translator: Prometheus' names, tags from attributes, every
//! metric type in protobuf and in JSON (the same request both ways gives the same entries),
//! histograms read whole and checked, refusals and skips, and no panic on any bytes.

use proptest::prelude::*;
use prost::Message;

use super::proto::*;
use super::*;

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
    }
}

fn text(key: &str, value: &str) -> KeyValue {
    kv(key, Value::StringValue(value.into()))
}

fn number(value: NumberValue, ns: u64, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        time_unix_nano: ns,
        value: Some(value),
        flags: 0,
    }
}

fn metric(name: &str, unit: &str, data: Data) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(data),
    }
}

fn request(
    resource: Vec<KeyValue>,
    scope: &str,
    metrics: Vec<Metric>,
) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope { name: scope.into() }),
                metrics,
            }],
        }],
    }
}

/// Every entry of `request` as (point, series, what).
fn translate(request: &ExportMetricsServiceRequest) -> Vec<(usize, String, What)> {
    let mut translator = Translator::new(request);
    let mut batch = Batch::default();
    let mut out = Vec::new();
    while translator.next_metric(&mut batch) {
        for entry in batch.entries() {
            out.push((
                entry.point,
                batch.series(entry).to_string(),
                entry.what.clone(),
            ));
        }
    }
    out
}

fn sample(kind: SeriesKind, ts: i64, value: f64) -> What {
    What::Sample {
        kind,
        ts: Some(ts),
        value,
    }
}

const NS: u64 = 1_700_000_000_999_999_999;
const TS: i64 = 1_700_000_000;

#[test]
fn names_follow_prometheus_otlp_translation() {
    let cases = [
        (
            "system.filesystem.usage",
            "By",
            NameKind::Gauge,
            "system_filesystem_usage_bytes",
        ),
        (
            "http.server.duration",
            "ms",
            NameKind::Other,
            "http_server_duration_milliseconds",
        ),
        (
            "http.server.requests",
            "{request}",
            NameKind::MonotonicSum,
            "http_server_requests_total",
        ),
        (
            "requests.total",
            "",
            NameKind::MonotonicSum,
            "requests_total",
        ),
        (
            "total.requests",
            "",
            NameKind::MonotonicSum,
            "requests_total",
        ),
        (
            "cpu.utilization",
            "1",
            NameKind::Gauge,
            "cpu_utilization_ratio",
        ),
        ("cpu.utilization", "1", NameKind::Other, "cpu_utilization"),
        (
            "network.io",
            "By/s",
            NameKind::Gauge,
            "network_io_bytes_per_second",
        ),
        ("rate", "1/s", NameKind::Gauge, "rate_per_second"),
        (
            "queue.size",
            "{items}/s",
            NameKind::Gauge,
            "queue_size_per_second",
        ),
        (
            "bytes.sent",
            "By",
            NameKind::MonotonicSum,
            "bytes_sent_total",
        ),
        ("latency_seconds", "s", NameKind::Other, "latency_seconds"),
        ("2xx.count", "", NameKind::Gauge, "_2xx_count"),
        ("memory", "%", NameKind::Gauge, "memory_percent"),
        ("temp", "Cel", NameKind::Gauge, "temp_celsius"),
        ("weird", "foo bar", NameKind::Gauge, "weird_foo_bar"),
        ("a:b..c", "", NameKind::Gauge, "a:b_c"),
        ("ünïcode", "", NameKind::Gauge, "n_code"),
        ("...", "", NameKind::Gauge, ""),
    ];
    for (name, unit, kind, expected) in cases {
        assert_eq!(
            metric_name(name, unit, kind),
            expected,
            "{name} in {unit:?}"
        );
    }
}

#[test]
fn attribute_keys_become_prometheus_label_names() {
    for (key, expected) in [
        ("host.name", "host_name"),
        ("http.response.status_code", "http_response_status_code"),
        ("9lives", "key_9lives"),
        ("_private", "key_private"),
        ("__reserved", "__reserved"),
        ("ä", "key_"),
    ] {
        assert_eq!(label_name(key), expected, "{key}");
    }
}

#[test]
fn seconds_floor_and_zero_means_now() {
    assert_eq!(seconds(NS), Some(TS));
    assert_eq!(seconds(1_000_000_000), Some(1));
    assert_eq!(seconds(999_999_999), Some(0));
    assert_eq!(seconds(0), None);
    assert_eq!(seconds(u64::MAX), Some(18_446_744_073));
}

/// A request of every kind of metric, with the entries it must give.
fn every_kind() -> (ExportMetricsServiceRequest, Vec<(usize, String, What)>) {
    let resource = vec![
        text("service.name", "checkout"),
        text("service.namespace", "shop"),
        text("service.instance.id", "pod-7"),
        text("host.name", "web1"),
        text("region", "eu"),
        text("empty", ""),
    ];
    let point_attrs = || vec![text("http.method", "GET"), text("region", "us")];
    let metrics = vec![
        metric(
            "queue.size",
            "{item}",
            Data::Gauge(Gauge {
                data_points: vec![number(NumberValue::AsDouble(2.5), NS, point_attrs())],
            }),
        ),
        metric(
            "http.requests",
            "{request}",
            Data::Sum(Sum {
                data_points: vec![number(NumberValue::AsInt(42), NS, vec![])],
                aggregation_temporality: CUMULATIVE,
                is_monotonic: true,
            }),
        ),
        metric(
            "bytes.sent",
            "By",
            Data::Sum(Sum {
                data_points: vec![number(NumberValue::AsInt(512), NS, vec![])],
                aggregation_temporality: DELTA,
                is_monotonic: true,
            }),
        ),
        metric(
            "balance",
            "",
            Data::Sum(Sum {
                data_points: vec![number(NumberValue::AsDouble(-3.0), NS, vec![])],
                aggregation_temporality: DELTA,
                is_monotonic: false,
            }),
        ),
        metric(
            "connections",
            "",
            Data::Sum(Sum {
                data_points: vec![number(NumberValue::AsInt(7), NS, vec![])],
                aggregation_temporality: CUMULATIVE,
                is_monotonic: false,
            }),
        ),
        metric(
            "rpc.latency",
            "s",
            Data::Summary(Summary {
                data_points: vec![SummaryDataPoint {
                    attributes: vec![],
                    time_unix_nano: NS,
                    count: 10,
                    sum: 4.5,
                    quantile_values: vec![
                        ValueAtQuantile {
                            quantile: 0.5,
                            value: 0.3,
                        },
                        ValueAtQuantile {
                            quantile: 0.99,
                            value: 1.2,
                        },
                    ],
                    flags: 0,
                }],
            }),
        ),
        metric(
            "http.duration",
            "ms",
            Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    attributes: vec![],
                    start_time_unix_nano: NS - 60_000_000_000,
                    time_unix_nano: NS,
                    count: 6,
                    sum: Some(123.0),
                    bucket_counts: vec![1, 2, 3],
                    explicit_bounds: vec![10.0, 100.0],
                    flags: 0,
                    min: Some(1.0),
                    max: Some(150.0),
                }],
                aggregation_temporality: CUMULATIVE,
            }),
        ),
        metric(
            "http.duration.exp",
            "ms",
            Data::ExponentialHistogram(ExponentialHistogram {
                data_points: vec![ExponentialHistogramDataPoint {
                    attributes: vec![],
                    start_time_unix_nano: NS - 60_000_000_000,
                    time_unix_nano: NS,
                    count: 7,
                    sum: Some(20.0),
                    scale: 3,
                    zero_count: 1,
                    positive: Some(Buckets {
                        offset: -2,
                        bucket_counts: vec![2, 0, 3],
                    }),
                    negative: Some(Buckets {
                        offset: 1,
                        bucket_counts: vec![1],
                    }),
                    flags: 0,
                    min: Some(-2.0),
                    max: Some(9.0),
                    zero_threshold: 0.0,
                }],
                aggregation_temporality: DELTA,
            }),
        ),
    ];
    let rest = "instance=pod-7,job=shop/checkout,otel_scope_name=app.meter";
    let tags = format!("host_name=web1,{rest}");
    let expected = vec![
        (
            1,
            format!("queue_size{{host_name=web1,http_method=GET,{rest},region=us}}"),
            sample(SeriesKind::Gauge, TS, 2.5),
        ),
        (
            2,
            format!("http_requests_total{{{tags},region=eu}}"),
            sample(SeriesKind::Counter, TS, 42.0),
        ),
        (
            3,
            format!("bytes_sent_total{{{tags},region=eu}}"),
            sample(SeriesKind::DeltaCounter, TS, 512.0),
        ),
        (
            4,
            format!("balance{{{tags},region=eu}}"),
            sample(SeriesKind::DeltaCounter, TS, -3.0),
        ),
        (
            5,
            format!("connections{{{tags},region=eu}}"),
            sample(SeriesKind::Gauge, TS, 7.0),
        ),
        (
            6,
            format!("rpc_latency_seconds{{{tags},quantile=0.5,region=eu}}"),
            sample(SeriesKind::Gauge, TS, 0.3),
        ),
        (
            6,
            format!("rpc_latency_seconds{{{tags},quantile=0.99,region=eu}}"),
            sample(SeriesKind::Gauge, TS, 1.2),
        ),
        (
            6,
            format!("rpc_latency_seconds_sum{{{tags},region=eu}}"),
            sample(SeriesKind::Counter, TS, 4.5),
        ),
        (
            6,
            format!("rpc_latency_seconds_count{{{tags},region=eu}}"),
            sample(SeriesKind::Counter, TS, 10.0),
        ),
        (
            7,
            // An explicit-bucket histogram's series is tagged as such.
            "http_duration_milliseconds{host_name=web1,instance=pod-7,job=shop/checkout,\
             otel_buckets=explicit,otel_scope_name=app.meter,region=eu}"
                .to_string(),
            What::Histogram {
                ts: Some(TS),
                distribution: Distribution {
                    layout: Layout::Explicit {
                        bounds: vec![10.0, 100.0],
                        counts: vec![1, 2, 3],
                    },
                    count: 6,
                    sum: Some(123.0),
                    min: Some(1.0),
                    max: Some(150.0),
                    temporality: Temporality::Cumulative,
                    start: NS - 60_000_000_000,
                    time: NS,
                },
            },
        ),
        (
            8,
            format!("http_duration_exp_milliseconds{{{tags},region=eu}}"),
            What::Histogram {
                ts: Some(TS),
                distribution: Distribution {
                    layout: Layout::Exponential {
                        scale: 3,
                        zero_count: 1,
                        zero_threshold: 0.0,
                        positive: ExponentialBuckets {
                            offset: -2,
                            counts: vec![2, 0, 3],
                        },
                        negative: ExponentialBuckets {
                            offset: 1,
                            counts: vec![1],
                        },
                    },
                    count: 7,
                    sum: Some(20.0),
                    min: Some(-2.0),
                    max: Some(9.0),
                    temporality: Temporality::Delta,
                    start: NS - 60_000_000_000,
                    time: NS,
                },
            },
        ),
    ];
    (request(resource, "app.meter", metrics), expected)
}

#[test]
fn every_kind_translates_from_protobuf() {
    let (request, expected) = every_kind();
    let body = request.encode_to_vec();
    let decoded = decode(&body, Encoding::Protobuf).unwrap();
    assert_eq!(decoded, request);
    assert_eq!(translate(&decoded), expected);
}

/// The same request as the OTLP/JSON an exporter writes: camelCase, 64-bit integers as
/// strings, enums as integers, plus what a reader must take: unknown fields (ignored),
/// `null`, numbers where strings are usual and the reverse.
#[test]
fn every_kind_translates_from_json() {
    let (_, expected) = every_kind();
    const START: u64 = NS - 60_000_000_000;
    let json = format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[
            {{"key":"service.name","value":{{"stringValue":"checkout"}}}},
            {{"key":"service.namespace","value":{{"stringValue":"shop"}}}},
            {{"key":"service.instance.id","value":{{"stringValue":"pod-7"}}}},
            {{"key":"host.name","value":{{"stringValue":"web1"}}}},
            {{"key":"region","value":{{"stringValue":"eu"}}}},
            {{"key":"empty","value":{{}}}}],"droppedAttributesCount":0}},
          "schemaUrl":"https://opentelemetry.io/schemas/1.21.0",
          "scopeMetrics":[{{"scope":{{"name":"app.meter","version":"1.0"}},"metrics":[
            {{"name":"queue.size","unit":"{{item}}","description":"d","gauge":{{"dataPoints":[
              {{"attributes":[{{"key":"http.method","value":{{"stringValue":"GET"}}}},
                              {{"key":"region","value":{{"stringValue":"us"}}}}],
                "startTimeUnixNano":"0","timeUnixNano":"{NS}","asDouble":2.5,"exemplars":[
                  {{"traceId":"5B8EFFF798038103D269B633813FC60C","spanId":"EEE19B7EC3C1B174","asDouble":1}}]}}]}}}},
            {{"name":"http.requests","unit":"{{request}}","sum":{{"aggregationTemporality":2,"isMonotonic":true,
              "dataPoints":[{{"timeUnixNano":"{NS}","asInt":"42","flags":null}}]}}}},
            {{"name":"bytes.sent","unit":"By","sum":{{"aggregationTemporality":"1","isMonotonic":true,
              "dataPoints":[{{"timeUnixNano":{NS},"asInt":512}}]}}}},
            {{"name":"balance","sum":{{"aggregationTemporality":1,"dataPoints":[
              {{"timeUnixNano":"{NS}","asDouble":"-3"}}]}}}},
            {{"name":"connections","unit":null,"sum":{{"aggregationTemporality":2,"isMonotonic":false,
              "dataPoints":[{{"timeUnixNano":"{NS}","asInt":"7"}}]}}}},
            {{"name":"rpc.latency","unit":"s","summary":{{"dataPoints":[{{"timeUnixNano":"{NS}",
              "count":"10","sum":4.5,"quantileValues":[{{"quantile":0.5,"value":0.3}},
              {{"quantile":0.99,"value":1.2}}]}}]}}}},
            {{"name":"http.duration","unit":"ms","histogram":{{"aggregationTemporality":2,"dataPoints":[
              {{"startTimeUnixNano":"{START}","timeUnixNano":"{NS}","count":"6","sum":123,"bucketCounts":["1","2",3],
                "explicitBounds":[10,100.0],"min":1,"max":150}}]}}}},
            {{"name":"http.duration.exp","unit":"ms","exponentialHistogram":{{"aggregationTemporality":1,
              "dataPoints":[{{"startTimeUnixNano":{START},"timeUnixNano":"{NS}","count":"7","sum":20,"scale":3,"zeroCount":"1",
                "positive":{{"offset":-2,"bucketCounts":["2","0","3"]}},
                "negative":{{"offset":1,"bucketCounts":["1"]}},"min":-2,"max":9}}]}}}}
          ]}}]}}]}}"#
    );
    let decoded = decode(json.as_bytes(), Encoding::Json).unwrap();
    assert_eq!(translate(&decoded), expected);
}

#[test]
fn json_reads_special_floats_and_attribute_types() {
    let json = r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"g","gauge":{"dataPoints":[
        {"timeUnixNano":"1000000000","asDouble":"NaN","attributes":[
          {"key":"b","value":{"boolValue":true}},
          {"key":"i","value":{"intValue":"-5"}},
          {"key":"d","value":{"doubleValue":0.25}},
          {"key":"bytes","value":{"bytesValue":"aGk="}},
          {"key":"list","value":{"arrayValue":{"values":[{"stringValue":"a"},{"intValue":"1"}]}}},
          {"key":"map","value":{"kvlistValue":{"values":[{"key":"k","value":{"stringValue":"v"}}]}}}]},
        {"timeUnixNano":"1000000000","asDouble":"-Infinity"}]}}]}]}]}"#;
    let decoded = decode(json.as_bytes(), Encoding::Json).unwrap();
    let entries = translate(&decoded);
    assert_eq!(
        entries[0].1,
        r#"g{b=true,bytes=aGk\=,d=0.25,i=-5,list=["a"\,1],map=\{"k":"v"\}}"#
    );
    let What::Sample { value, .. } = entries[0].2 else {
        panic!("{entries:?}")
    };
    assert!(value.is_nan());
    assert_eq!(
        entries[1].2,
        sample(SeriesKind::Gauge, 1, f64::NEG_INFINITY)
    );
}

#[test]
fn tags_colliding_as_label_names_join_in_key_order() {
    let request = request(
        vec![text("a.b", "resource")],
        "",
        vec![metric(
            "m",
            "",
            Data::Gauge(Gauge {
                data_points: vec![number(
                    NumberValue::AsInt(1),
                    NS,
                    vec![text("a_b", "second"), text("a.b", "first")],
                )],
            }),
        )],
    );
    assert_eq!(translate(&request)[0].1, "m{a_b=first;second}");
}

#[test]
fn points_without_values_are_skipped_and_bad_points_refused() {
    let no_value = NumberDataPoint {
        flags: NO_RECORDED_VALUE,
        ..number(NumberValue::AsInt(1), NS, vec![])
    };
    let missing = NumberDataPoint {
        value: None,
        ..number(NumberValue::AsInt(1), NS, vec![])
    };
    let long = vec![text("k", &"v".repeat(crate::SeriesKey::MAX_LEN))];
    let request = request(
        vec![],
        "",
        vec![
            metric(
                "g",
                "",
                Data::Gauge(Gauge {
                    data_points: vec![no_value, missing, number(NumberValue::AsInt(1), NS, long)],
                }),
            ),
            metric(
                "s",
                "",
                Data::Sum(Sum {
                    data_points: vec![number(NumberValue::AsInt(1), NS, vec![])],
                    aggregation_temporality: 0,
                    is_monotonic: true,
                }),
            ),
            metric(
                "...",
                "",
                Data::Gauge(Gauge {
                    data_points: vec![number(NumberValue::AsInt(1), 0, vec![])],
                }),
            ),
            metric("nothing", "", Data::Gauge(Gauge::default())),
        ],
    );
    let reasons: Vec<(usize, &str)> = translate(&request)
        .iter()
        .map(|(point, series, what)| {
            assert!(series.is_empty(), "{what:?}");
            let reason = match what {
                What::Refused { reason, .. } | What::Skipped { reason } => *reason,
                other => panic!("{other:?}"),
            };
            (*point, reason)
        })
        .collect();
    assert_eq!(
        reasons,
        [
            (1, "otlp_no_recorded_value"),
            (2, "otlp_missing_value"),
            (3, "invalid_series"),
            (4, "otlp_invalid_temporality"),
            (5, "missing_metric_name"),
        ]
    );
}

fn explicit_point(bounds: Vec<f64>, counts: Vec<u64>, count: u64) -> HistogramDataPoint {
    HistogramDataPoint {
        count,
        bucket_counts: counts,
        explicit_bounds: bounds,
        ..HistogramDataPoint::default()
    }
}

#[test]
fn explicit_histograms_are_checked() {
    let c = Temporality::Cumulative;
    let ok = histogram::explicit(&explicit_point(vec![1.0, 2.0], vec![1, 0, 4], 5), c).unwrap();
    assert_eq!(ok.count, 5);
    // Count and sum only: no buckets at all.
    assert!(histogram::explicit(&explicit_point(vec![], vec![], 9), c).is_ok());
    let err = |p| histogram::explicit(&p, c).unwrap_err();
    assert_eq!(
        err(explicit_point(vec![1.0], vec![1, 2, 3], 6)),
        HistogramError::BucketsMismatch {
            counts: 3,
            bounds: 1
        }
    );
    assert_eq!(
        err(explicit_point(vec![2.0, 1.0], vec![0, 0, 0], 0)),
        HistogramError::Bounds
    );
    assert_eq!(
        err(explicit_point(vec![f64::NAN], vec![0, 0], 0)),
        HistogramError::Bounds
    );
    assert_eq!(
        err(explicit_point(vec![1.0], vec![u64::MAX, u64::MAX], 1)),
        HistogramError::CountMismatch {
            buckets: 2 * u128::from(u64::MAX),
            count: 1
        }
    );
    let p = HistogramDataPoint {
        min: Some(3.0),
        max: Some(1.0),
        ..explicit_point(vec![], vec![], 1)
    };
    assert_eq!(err(p).as_str(), "otlp_invalid_histogram");
}

#[test]
fn exponential_histograms_are_checked() {
    let d = Temporality::Delta;
    let point = |scale, zero_count, positive: Vec<u64>, count| ExponentialHistogramDataPoint {
        scale,
        zero_count,
        count,
        positive: Some(Buckets {
            offset: 0,
            bucket_counts: positive,
        }),
        ..ExponentialHistogramDataPoint::default()
    };
    assert!(histogram::exponential(&point(20, 1, vec![2], 3), d).is_ok());
    assert!(histogram::exponential(&point(-10, 0, vec![], 0), d).is_ok());
    let err = |p| histogram::exponential(&p, d).unwrap_err();
    assert_eq!(err(point(21, 0, vec![], 0)), HistogramError::Scale(21));
    assert_eq!(err(point(-11, 0, vec![], 0)), HistogramError::Scale(-11));
    assert_eq!(
        err(point(0, 1, vec![2], 4)),
        HistogramError::CountMismatch {
            buckets: 3,
            count: 4
        }
    );
    let mut p = point(0, 0, vec![1, 1], 2);
    p.positive.as_mut().unwrap().offset = i32::MAX;
    assert!(matches!(err(p), HistogramError::Indexes { .. }));
    let mut p = point(0, 0, vec![], 0);
    p.zero_threshold = -1.0;
    assert_eq!(err(p), HistogramError::ZeroThreshold(-1.0));
}

#[test]
fn histogram_points_flagged_without_value_are_skipped() {
    let point = HistogramDataPoint {
        flags: NO_RECORDED_VALUE,
        ..explicit_point(vec![1.0], vec![1, 1], 5)
    };
    let request = request(
        vec![],
        "",
        vec![metric(
            "h",
            "",
            Data::Histogram(Histogram {
                data_points: vec![point],
                aggregation_temporality: CUMULATIVE,
            }),
        )],
    );
    let entries = translate(&request);
    assert_eq!(
        entries[0].2,
        What::Skipped {
            reason: "otlp_no_recorded_value"
        }
    );
}

#[test]
fn bodies_that_are_no_request_are_refused() {
    assert!(matches!(
        decode(b"\xff\xff\xff", Encoding::Protobuf),
        Err(BodyError::Protobuf(_))
    ));
    assert!(matches!(
        decode(b"{\"resourceMetrics\":", Encoding::Json),
        Err(BodyError::Json(_))
    ));
    assert!(matches!(
        decode(b"[]", Encoding::Json),
        Err(BodyError::Json(_))
    ));
    let wrong_type = br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"g","gauge":{"dataPoints":[{"asInt":"x"}]}}]}]}]}"#;
    let e = decode(wrong_type, Encoding::Json).unwrap_err();
    assert!(e.to_string().contains("not an integer"), "{e}");
    // An empty body is an empty request, as protobuf reads it.
    assert_eq!(
        decode(b"", Encoding::Protobuf).unwrap(),
        ExportMetricsServiceRequest::default()
    );
    assert_eq!(
        decode(b"{}", Encoding::Json).unwrap(),
        ExportMetricsServiceRequest::default()
    );
}

#[test]
fn too_many_entries_are_refused_before_decoding() {
    // Empty ResourceMetrics: 2 bytes each.
    let body: Vec<u8> = [0x0a, 0x00].repeat(MAX_ENTRIES + 1);
    assert_eq!(
        decode(&body, Encoding::Protobuf),
        Err(BodyError::TooManyEntries { limit: MAX_ENTRIES })
    );
    let json = format!(
        "{{\"resourceMetrics\":[{}{{}}]}}",
        "{},".repeat(MAX_ENTRIES)
    );
    assert_eq!(
        decode(json.as_bytes(), Encoding::Json),
        Err(BodyError::TooManyEntries { limit: MAX_ENTRIES })
    );
    // Packed bucket counts count per element.
    let point = ExponentialHistogramDataPoint {
        positive: Some(Buckets {
            offset: 0,
            bucket_counts: vec![1; MAX_ENTRIES],
        }),
        ..ExponentialHistogramDataPoint::default()
    };
    let big = request(
        vec![],
        "",
        vec![metric(
            "h",
            "",
            Data::ExponentialHistogram(ExponentialHistogram {
                data_points: vec![point],
                aggregation_temporality: DELTA,
            }),
        )],
    );
    assert_eq!(
        decode(&big.encode_to_vec(), Encoding::Protobuf),
        Err(BodyError::TooManyEntries { limit: MAX_ENTRIES })
    );
}

#[test]
fn deeply_nested_attributes_are_refused() {
    let mut value = AnyValue {
        value: Some(Value::IntValue(1)),
    };
    for _ in 0..200 {
        value = AnyValue {
            value: Some(Value::ArrayValue(ArrayValue {
                values: vec![value],
            })),
        };
    }
    let point = NumberDataPoint {
        attributes: vec![KeyValue {
            key: "deep".into(),
            value: Some(value),
        }],
        ..number(NumberValue::AsInt(1), NS, vec![])
    };
    let deep = request(
        vec![],
        "",
        vec![metric(
            "g",
            "",
            Data::Gauge(Gauge {
                data_points: vec![point],
            }),
        )],
    );
    let e = decode(&deep.encode_to_vec(), Encoding::Protobuf).unwrap_err();
    assert!(e.to_string().contains("nested too deep"), "{e}");
}

#[test]
fn content_types_name_the_encoding() {
    assert_eq!(
        Encoding::of_content_type("application/x-protobuf"),
        Some(Encoding::Protobuf)
    );
    assert_eq!(
        Encoding::of_content_type("application/json; charset=utf-8"),
        Some(Encoding::Json)
    );
    assert_eq!(Encoding::of_content_type("text/plain"), None);
    assert_eq!(Encoding::of_content_type(""), None);
}

proptest! {
    #[test]
    fn no_bytes_make_a_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        for encoding in [Encoding::Protobuf, Encoding::Json] {
            if let Ok(request) = decode(&body, encoding) {
                translate(&request);
            }
        }
    }

    #[test]
    fn no_mutation_of_a_request_makes_a_panic(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)
    ) {
        let mut body = every_kind().0.encode_to_vec();
        for (at, byte) in flips {
            let at = at % body.len();
            body[at] = byte;
        }
        if let Ok(request) = decode(&body, Encoding::Protobuf) {
            translate(&request);
        }
    }
}

/// MAX_ENTRIES' bound on what decoding allocates takes the largest entry's size from here.
#[test]
fn the_largest_entry_has_the_size_max_entries_names() {
    assert_eq!(std::mem::size_of::<ExponentialHistogramDataPoint>(), 184);
}
