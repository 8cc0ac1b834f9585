//! Tests of the remote write decoder: a request encoded with prost and snappy decodes to its
//! series keys, kinds and seconds; staleness markers; every body refusal and series refusal;
//! and no panic on any bytes, compressed or not.

use std::collections::HashSet;

use proptest::prelude::*;
use prost::Message;

use super::*;
use crate::registry::SeriesKey;

fn label(name: &str, value: &str) -> Label {
    Label {
        name: Bytes::copy_from_slice(name.as_bytes()),
        value: Bytes::copy_from_slice(value.as_bytes()),
    }
}

fn compress(request: &WriteRequest) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(&request.encode_to_vec())
        .unwrap()
}

fn key_of(labels: &[Label]) -> Result<String, SeriesError> {
    let mut tags = Vec::new();
    let mut key = String::new();
    series_key(labels, &mut tags, &mut key).map(|_| key)
}

#[test]
fn a_request_round_trips_through_snappy_and_protobuf() {
    let request = WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![
                label("__name__", "node_cpu_seconds_total"),
                label("cpu", "0"),
                label("instance", "localhost:9100"),
                label("mode", "idle"),
            ],
            samples: vec![
                PromSample {
                    value: 12.5,
                    timestamp: 1_700_000_000_999,
                },
                PromSample {
                    value: f64::from_bits(STALE_NAN),
                    timestamp: 1_700_000_001_000,
                },
            ],
            histograms: vec![],
        }],
        metadata: vec![],
    };
    let decoded = decode(&compress(&request), 1 << 20).unwrap();
    // Compared as bytes: the staleness marker is a NaN, unequal to itself.
    assert_eq!(decoded.encode_to_vec(), request.encode_to_vec());
    let series = &decoded.timeseries[0];
    assert_eq!(
        key_of(&series.labels).unwrap(),
        "node_cpu_seconds_total{cpu=0,instance=localhost:9100,mode=idle}"
    );
    assert_eq!(seconds(series.samples[0].timestamp), 1_700_000_000);
    assert!(!is_stale(series.samples[0].value));
    assert!(is_stale(series.samples[1].value));
    assert!(
        !is_stale(f64::NAN),
        "an ordinary NaN is a value, not a marker"
    );
}

#[test]
fn keys_equal_what_series_key_new_builds() {
    // Unsorted labels, characters that need escaping, an empty value (absent).
    let labels = [
        label("zone", "eu,west"),
        label("__name__", "http_requests_total"),
        label("path", "/a{b}=c\\d"),
        label("empty", ""),
        label("Alpha", "1"),
    ];
    let expected = SeriesKey::new(
        "http_requests_total",
        [("zone", "eu,west"), ("path", "/a{b}=c\\d"), ("Alpha", "1")],
    )
    .unwrap();
    assert_eq!(key_of(&labels).unwrap(), expected.as_str());
    assert_eq!(
        key_of(&[label("__name__", "up")]).unwrap(),
        "up",
        "no tags, no braces"
    );
}

#[test]
fn series_refusals_have_reasons() {
    assert_eq!(
        key_of(&[label("job", "x")]).unwrap_err().as_str(),
        "missing_metric_name"
    );
    assert_eq!(
        key_of(&[label("__name__", "")]).unwrap_err().as_str(),
        "missing_metric_name"
    );
    let not_utf8 = Label {
        name: Bytes::from_static(b"job"),
        value: Bytes::from_static(b"\xff"),
    };
    assert_eq!(
        key_of(&[label("__name__", "up"), not_utf8]).unwrap_err(),
        SeriesError::InvalidLabel(2)
    );
    assert_eq!(
        key_of(&[label("__name__", "a"), label("__name__", "b")])
            .unwrap_err()
            .as_str(),
        "invalid_label"
    );
    assert_eq!(
        key_of(&[label("__name__", "up"), label("a", "1"), label("a", "2")])
            .unwrap_err()
            .as_str(),
        "invalid_series"
    );
    assert_eq!(
        key_of(&[label("__name__", "up"), label("a", "x\u{7}")])
            .unwrap_err()
            .as_str(),
        "invalid_series"
    );
    let long = "v".repeat(SeriesKey::MAX_LEN);
    assert_eq!(
        key_of(&[label("__name__", "up"), label("a", &long)])
            .unwrap_err()
            .as_str(),
        "invalid_series"
    );
}

#[test]
fn counters_by_suffix_and_by_metadata() {
    let none = HashSet::new();
    for name in [
        "node_cpu_seconds_total",
        "http_request_duration_seconds_count",
        "http_request_duration_seconds_sum",
        "http_request_duration_seconds_bucket",
    ] {
        assert_eq!(kind_of(name, &none), Some(SeriesKind::Counter), "{name}");
    }
    for name in ["node_memory_MemAvailable_bytes", "up", "total", "x_totals"] {
        assert_eq!(kind_of(name, &none), None, "{name}");
    }
    let request = WriteRequest {
        timeseries: vec![],
        metadata: vec![
            MetricMetadata {
                r#type: METADATA_COUNTER,
                metric_family_name: "legacy_requests".into(),
            },
            MetricMetadata {
                r#type: METADATA_COUNTER,
                metric_family_name: "om_requests".into(),
            },
            MetricMetadata {
                r#type: 2, // gauge
                metric_family_name: "temperature".into(),
            },
        ],
    };
    let families = counter_families(&request);
    assert_eq!(
        kind_of("legacy_requests", &families),
        Some(SeriesKind::Counter)
    );
    assert_eq!(
        kind_of("om_requests_total", &families),
        Some(SeriesKind::Counter)
    );
    assert_eq!(kind_of("temperature", &families), None);
}

#[test]
fn bodies_that_are_not_requests_are_refused() {
    assert!(matches!(
        decode(b"not snappy at all", 1 << 20),
        Err(BodyError::Snappy(_))
    ));
    let garbage = snap::raw::Encoder::new()
        .compress_vec(b"\x0a\xff\xff\xff\xff\x0f")
        .unwrap();
    assert!(matches!(
        decode(&garbage, 1 << 20),
        Err(BodyError::Protobuf(_))
    ));
    // The header's length is checked before anything is allocated for it.
    let big = snap::raw::Encoder::new()
        .compress_vec(&vec![0u8; 100_000])
        .unwrap();
    assert_eq!(
        decode(&big, 4096),
        Err(BodyError::TooLarge {
            size: 100_000,
            limit: 4096
        })
    );
    assert!(matches!(decode(b"", 1 << 20), Err(BodyError::Snappy(_))));
}

#[test]
fn a_request_of_too_many_entries_is_refused_before_it_is_decoded() {
    // A time series with two labels and a sample: four entries.
    let series = [
        &b"\x0a\x10"[..],
        b"\x0a\x04\x0a\x00\x12\x00",
        b"\x0a\x04\x0a\x00\x12\x00",
        b"\x12\x02\x09\x00",
    ]
    .concat();
    assert_eq!(check_entries(&series, 4), Ok(()));
    assert_eq!(
        check_entries(&series, 3),
        Err(BodyError::TooManyEntries {
            entries: 4,
            limit: 3
        })
    );
    // Empty time series cost 2 bytes each on the wire and a struct each decoded: a body of
    // them a bit over the limit is refused, though far under the size limit.
    let empties = b"\x0a\x00".repeat(MAX_ENTRIES + 1);
    let body = snap::raw::Encoder::new().compress_vec(&empties).unwrap();
    assert!(body.len() < 1 << 20, "{} bytes compressed", body.len());
    assert_eq!(
        decode(&body, 64 << 20),
        Err(BodyError::TooManyEntries {
            entries: MAX_ENTRIES + 1,
            limit: MAX_ENTRIES
        })
    );
}

proptest! {
    #[test]
    fn no_panic_on_any_body(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes, 1 << 16);
        let compressed = snap::raw::Encoder::new().compress_vec(&bytes).unwrap();
        if let Ok(request) = decode(&compressed, 1 << 16) {
            let (mut tags, mut key) = (Vec::new(), String::new());
            for series in &request.timeseries {
                let _ = series_key(&series.labels, &mut tags, &mut key);
            }
        }
    }

    #[test]
    fn any_labels_give_a_parseable_key_or_a_reason(
        labels in proptest::collection::vec(("[a-z_]{0,6}", "\\PC{0,8}"), 0..6),
        name in "\\PC{0,10}",
    ) {
        let mut all: Vec<Label> = labels.iter().map(|(k, v)| label(k, v)).collect();
        all.push(label("__name__", &name));
        match key_of(&all) {
            Ok(key) => {
                let parsed = SeriesKey::parse(&key).unwrap();
                prop_assert_eq!(parsed.as_str(), key.as_str());
                prop_assert_eq!(parsed.name(), name.as_str());
            }
            Err(e) => prop_assert!(!e.as_str().is_empty()),
        }
    }
}
