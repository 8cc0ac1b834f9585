//! Tests of native histogram decoding: spans and deltas into indexes and counts (gaps,
//! negative offsets, both signs), float counts, every refusal by its reason, and no panic on
//! any message.

use proptest::prelude::*;

use super::*;

fn span(offset: i32, length: u32) -> BucketSpan {
    BucketSpan { offset, length }
}

/// An integer histogram as Prometheus' client encodes one.
fn integer() -> NativeHistogram {
    NativeHistogram {
        count_int: Some(12),
        sum: 33.25,
        schema: 3,
        zero_threshold: 2f64.powi(-128),
        zero_count_int: Some(2),
        // Buckets -2, -1, then 3: counts 1, 1, 2.
        negative_spans: vec![span(-2, 2), span(3, 1)],
        negative_deltas: vec![1, 0, 1],
        // Buckets 0..=2 and 5: counts 3, 1, 0, 2.
        positive_spans: vec![span(0, 3), span(2, 1)],
        positive_deltas: vec![3, -2, -1, 2],
        timestamp: 1_700_000_000_123,
        ..Default::default()
    }
}

#[test]
fn spans_and_deltas_decode_to_indexes_and_counts() {
    let sample = decode_native(&integer()).unwrap();
    let h = &sample.histogram;
    assert_eq!(h.scale(), 3);
    assert_eq!(h.zero_count(), 2);
    assert_eq!(h.zero_threshold(), 2f64.powi(-128));
    // The empty bucket 2 is dropped.
    assert_eq!(h.positive(), &[(0, 3), (1, 1), (5, 2)]);
    assert_eq!(h.negative(), &[(-2, 1), (-1, 1), (3, 2)]);
    assert_eq!(h.count(), 12);
    assert_eq!(sample.sum, 33.25);
    assert_eq!(sample.timestamp, 1_700_000_000_123);
    assert_eq!(sample.temporality, Temporality::Cumulative { reset: false });
}

#[test]
fn float_histograms_take_whole_counts_as_they_are() {
    let native = NativeHistogram {
        count_float: Some(7.0),
        zero_count_float: Some(1.0),
        schema: -2,
        positive_spans: vec![span(-1, 2)],
        positive_counts: vec![4.0, 2.0],
        reset_hint: RESET_GAUGE,
        ..Default::default()
    };
    let sample = decode_native(&native).unwrap();
    assert_eq!(sample.histogram.positive(), &[(-1, 4), (0, 2)]);
    assert_eq!(sample.histogram.count(), 7);
    assert_eq!(sample.temporality, Temporality::Gauge);
    let reset = NativeHistogram {
        reset_hint: RESET_YES,
        ..native
    };
    assert_eq!(
        decode_native(&reset).unwrap().temporality,
        Temporality::Cumulative { reset: true }
    );
}

#[test]
fn refusals_say_why() {
    let cases: Vec<(NativeHistogram, &str)> = vec![
        (
            NativeHistogram {
                schema: -53,
                custom_values: vec![0.1, 1.0],
                ..integer()
            },
            "native_histogram_custom_buckets",
        ),
        (
            NativeHistogram {
                schema: 9,
                ..integer()
            },
            "native_histogram_schema",
        ),
        (
            NativeHistogram {
                schema: -5,
                ..integer()
            },
            "native_histogram_schema",
        ),
        (
            NativeHistogram {
                count_int: Some(13),
                ..integer()
            },
            "native_histogram_count_mismatch",
        ),
        (
            NativeHistogram {
                sum: f64::NAN,
                ..integer()
            },
            "native_histogram_sum_not_finite",
        ),
        (
            NativeHistogram {
                positive_deltas: vec![3, -4, 1, 2],
                ..integer()
            },
            "native_histogram_malformed",
        ),
        (
            NativeHistogram {
                positive_deltas: vec![3, -2],
                ..integer()
            },
            "native_histogram_malformed",
        ),
        (
            NativeHistogram {
                zero_threshold: -1.0,
                ..integer()
            },
            "native_histogram_malformed",
        ),
        (
            NativeHistogram {
                positive_spans: vec![span(i32::MAX, 2)],
                positive_deltas: vec![1, 0],
                count_int: Some(6),
                negative_spans: vec![],
                negative_deltas: vec![],
                ..integer()
            },
            "native_histogram_malformed",
        ),
        (
            NativeHistogram {
                count_float: Some(2.5),
                zero_count_float: Some(2.5),
                ..Default::default()
            },
            "native_histogram_fractional_count",
        ),
        (
            NativeHistogram {
                count_float: Some(1.0),
                positive_spans: vec![span(0, 1)],
                positive_counts: vec![0.5],
                ..Default::default()
            },
            "native_histogram_fractional_count",
        ),
        (
            NativeHistogram {
                count_float: Some(1e300),
                positive_spans: vec![span(0, 1)],
                positive_counts: vec![1e300],
                ..Default::default()
            },
            "native_histogram_fractional_count",
        ),
    ];
    for (native, reason) in cases {
        let error = decode_native(&native).unwrap_err();
        assert_eq!(error.as_str(), reason, "{error}");
    }
}

#[test]
fn a_histogram_round_trips_through_protobuf() {
    let native = integer();
    let decoded = NativeHistogram::decode(&*native.encode_to_vec()).unwrap();
    assert_eq!(decoded, native);
}

proptest! {
    #[test]
    fn no_message_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(native) = NativeHistogram::decode(&*bytes) {
            let _ = decode_native(&native);
        }
    }

    #[test]
    fn any_spans_decode_without_panic(
        spans in prop::collection::vec((any::<i32>(), 0u32..8), 0..6),
        deltas in prop::collection::vec(-5i64..5, 0..40),
    ) {
        let native = NativeHistogram {
            positive_spans: spans.iter().map(|&(o, l)| span(o, l)).collect(),
            positive_deltas: deltas,
            ..Default::default()
        };
        let _ = decode_native(&native);
    }
}
