use super::*;
use crate::histogram::bucket_index;
use crate::ingest::otlp::histogram::Temporality;

fn exponential(
    scale: i32,
    zero: (u64, f64),
    positive: (i32, Vec<u64>),
    negative: (i32, Vec<u64>),
) -> Distribution {
    let count = zero.0 + positive.1.iter().sum::<u64>() + negative.1.iter().sum::<u64>();
    Distribution {
        layout: Layout::Exponential {
            scale,
            zero_count: zero.0,
            zero_threshold: zero.1,
            positive: ExponentialBuckets {
                offset: positive.0,
                counts: positive.1,
            },
            negative: ExponentialBuckets {
                offset: negative.0,
                counts: negative.1,
            },
        },
        count,
        sum: Some(0.0),
        min: None,
        max: None,
        temporality: Temporality::Delta,
        start: 0,
        time: 0,
    }
}

fn explicit(bounds: Vec<f64>, counts: Vec<u64>) -> Distribution {
    Distribution {
        count: counts.iter().sum(),
        layout: Layout::Explicit { bounds, counts },
        sum: Some(0.0),
        min: None,
        max: None,
        temporality: Temporality::Delta,
        start: 0,
        time: 0,
    }
}

fn histogram_of(counts: Counts) -> Histogram {
    match counts {
        Counts::Exponential(h) => h,
        Counts::Explicit { .. } => panic!("not exponential"),
    }
}

/// A value inside OTLP's bucket `index` at `scale`, `(base^i, base^(i+1)]`: its geometric
/// middle `base^(i + 1/2)`.
fn inside_otlp_bucket(index: i32, scale: i32) -> f64 {
    2f64.powf((f64::from(index) + 0.5) * 2f64.powi(-scale))
}

#[test]
fn otlp_bucket_i_is_our_bucket_i_plus_one_at_every_kept_scale() {
    for scale in i32::from(MIN_SCALE)..=i32::from(MAX_SCALE) {
        for index in [-300, -17, -1, 0, 1, 5, 64, 255] {
            let value = inside_otlp_bucket(index, scale);
            if !value.is_normal() {
                continue;
            }
            let point = exponential(scale, (0, 0.0), (index, vec![3]), (index, vec![2]));
            let h = histogram_of(Counts::of(&point).unwrap());
            assert_eq!(h.scale(), scale as i8);
            let ours = bucket_index(value, scale as i8);
            assert_eq!(ours, index + 1, "scale {scale} index {index}");
            assert_eq!(h.positive(), &[(ours, 3)], "scale {scale} index {index}");
            assert_eq!(h.negative(), &[(ours, 2)], "scale {scale} index {index}");
        }
    }
}

#[test]
fn a_finer_scale_is_reduced_to_the_finest_kept_as_reduce_to_does() {
    for scale in [9, 12, 20] {
        let offset = -(1 << (scale - 4));
        let counts: Vec<u64> = (1..=40).collect();
        let point = exponential(
            scale,
            (1, 0.0),
            (offset, counts.clone()),
            (7, vec![4, 0, 5]),
        );
        let h = histogram_of(Counts::of(&point).unwrap());
        assert_eq!(h.scale(), MAX_SCALE);
        assert_eq!(h.count(), point.count);
        // The same values recorded at MAX_SCALE land in the same buckets.
        let mut recorded = Histogram::new(MAX_SCALE);
        recorded.record_n(0.0, 1);
        for (k, &c) in counts.iter().enumerate() {
            recorded.record_n(inside_otlp_bucket(offset + k as i32, scale), c);
        }
        recorded.record_n(-inside_otlp_bucket(7, scale), 4);
        recorded.record_n(-inside_otlp_bucket(9, scale), 5);
        assert_eq!(h, recorded, "scale {scale}");
    }
    // At a kept scale, renumbering at the point's scale then reducing is renumbering at the
    // coarser one: the OTLP indexes halved.
    let point = exponential(6, (0, 0.0), (-9, vec![1, 2, 3, 4, 5, 6]), (0, vec![]));
    let mut reduced = histogram_of(Counts::of(&point).unwrap());
    reduced.reduce_to(3);
    let mut halved = Histogram::new(3);
    for (k, c) in (1..=6u64).enumerate() {
        let index = -9 + k as i32;
        halved.record_n(inside_otlp_bucket(index >> 3, 3), c);
    }
    assert_eq!(reduced, halved);
}

#[test]
fn a_scale_coarser_than_kept_is_refused_with_its_reason() {
    let ok = exponential(i32::from(MIN_SCALE), (0, 0.0), (0, vec![1]), (0, vec![]));
    assert!(Counts::of(&ok).is_ok());
    let coarse = exponential(
        i32::from(MIN_SCALE) - 1,
        (0, 0.0),
        (0, vec![1]),
        (0, vec![]),
    );
    let e = Counts::of(&coarse).unwrap_err();
    assert_eq!(e, HistogramError::ScaleTooCoarse(i32::from(MIN_SCALE) - 1));
    assert_eq!(e.as_str(), "otlp_histogram_scale");
    assert!(e.to_string().contains("-5"), "{e}");
}

#[test]
fn buckets_no_finite_value_fits_are_refused() {
    for (scale, offset) in [(8, 300_000), (8, -300_000), (0, i32::MAX), (-4, -200)] {
        let point = exponential(scale, (0, 0.0), (offset, vec![1]), (0, vec![]));
        let e = Counts::of(&point).unwrap_err();
        assert!(
            matches!(e, HistogramError::BucketRange { .. }),
            "{scale} {offset}: {e:?}"
        );
        assert_eq!(e.as_str(), "otlp_invalid_histogram");
    }
    // Empty buckets anywhere are fine.
    let point = exponential(8, (0, 0.0), (i32::MAX, vec![0]), (0, vec![]));
    assert!(Counts::of(&point).is_ok());
}

#[test]
fn zero_bucket_and_threshold_are_kept() {
    let point = exponential(2, (4, 0.001), (-1, vec![1]), (3, vec![2]));
    let h = histogram_of(Counts::of(&point).unwrap());
    assert_eq!(h.zero_count(), 4);
    assert_eq!(h.zero_threshold(), 0.001);
    assert_eq!(h.count(), 7);
    let exact = (Some(-3.0), Some(2.0));
    let o = observed(&Counts::of(&point).unwrap(), 1.5, exact, exact);
    assert_eq!(o.histogram, h);
    assert_eq!(o.sum, 1.5);
    assert_eq!(o.extremes, Some((-3.0, 2.0)));
    // Extremes not known: the outer bounds of the populated buckets, OTLP's negative
    // bucket 3 (our 4) and positive -1 (our 0) at scale 2.
    let o = observed(&Counts::of(&point).unwrap(), 1.5, exact, (None, None));
    assert_eq!(o.extremes, Some((-2.0, 1.0)));
    let o = observed(&Counts::of(&point).unwrap(), 1.5, exact, (None, Some(0.75)));
    assert_eq!(o.extremes, Some((-2.0, 0.75)));
}

#[test]
fn explicit_buckets_are_placed_at_their_midpoint_or_the_given_extremes() {
    let point = explicit(vec![10.0, 100.0, 1000.0], vec![1, 2, 0, 3]);
    let counts = Counts::of(&point).unwrap();
    let mut expected = Histogram::new(MAX_SCALE);
    expected.record_n(1.0, 1);
    expected.record_n(55.0, 2);
    expected.record_n(5000.0, 3);
    let given = (Some(1.0), Some(5000.0));
    let o = observed(&counts, 0.0, given, given);
    assert_eq!(o.histogram, expected);
    assert_eq!(o.histogram.count(), 6);
    assert_eq!(o.extremes, Some((1.0, 5000.0)));

    // Without min and max (or with ones outside the open buckets): the finite bounds.
    let mut bounds_only = Histogram::new(MAX_SCALE);
    bounds_only.record_n(10.0, 1);
    bounds_only.record_n(55.0, 2);
    bounds_only.record_n(1000.0, 3);
    let none = (None, None);
    let o = observed(&counts, 0.0, none, none);
    assert_eq!(o.histogram, bounds_only);
    assert_eq!(o.extremes, Some((10.0, 1000.0)));
    let o = observed(&counts, 0.0, (Some(20.0), Some(900.0)), none);
    assert_eq!(o.histogram, bounds_only);
    assert_eq!(o.extremes, Some((10.0, 1000.0)));

    // Extremes not the values' own (a cumulative increase): the explicit buckets' bounds,
    // not the placed values' scale-8 buckets; an exact one where known.
    let increase = Counts::Explicit {
        bounds: vec![10.0, 100.0, 1000.0],
        counts: vec![0, 2, 1, 0],
    };
    let o = observed(&increase, 0.0, given, none);
    assert_eq!(o.extremes, Some((10.0, 1000.0)));
    let o = observed(&increase, 0.0, given, (None, Some(700.0)));
    assert_eq!(o.extremes, Some((10.0, 700.0)));
    let open = Counts::Explicit {
        bounds: vec![10.0, 100.0, 1000.0],
        counts: vec![1, 0, 0, 1],
    };
    assert_eq!(
        observed(&open, 0.0, given, none).extremes,
        Some((1.0, 5000.0))
    );

    // Negative and zero-straddling bounds.
    let point = explicit(vec![-5.0, 5.0], vec![1, 1, 1]);
    let mut expected = Histogram::new(MAX_SCALE);
    expected.record_n(-5.0, 1);
    expected.record_n(0.0, 1);
    expected.record_n(5.0, 1);
    let o = observed(
        &Counts::of(&point).unwrap(),
        0.0,
        (None, None),
        (None, None),
    );
    assert_eq!(o.histogram, expected);
}

#[test]
fn explicit_quantiles_are_within_the_bucket_width_plus_the_scale_error() {
    // Raw values, bucketed as an SDK does, placed, and every percentile compared with the
    // nearest-rank sample.
    let bounds = vec![
        0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 1000.0,
    ];
    let raw: Vec<f64> = (0..500).map(|k| 0.3 + (k as f64 * 7.77) % 1400.0).collect();
    let mut counts = vec![0u64; bounds.len() + 1];
    for &v in &raw {
        counts[bounds.partition_point(|&b| b < v)] += 1;
    }
    let min = raw.iter().copied().fold(f64::INFINITY, f64::min);
    let max = raw.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let o = observed(
        &Counts::of(&explicit(bounds.clone(), counts)).unwrap(),
        raw.iter().sum(),
        (Some(min), Some(max)),
        (Some(min), Some(max)),
    );
    let mut sorted = raw.clone();
    sorted.sort_by(f64::total_cmp);
    for p in 1..=100 {
        let q = f64::from(p) / 100.0;
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        let exact = sorted[rank - 1];
        let k = bounds.partition_point(|&b| b < exact);
        let low = if k == 0 { min } else { bounds[k - 1] };
        let high = if k == bounds.len() { max } else { bounds[k] };
        let open = k == 0 || k == bounds.len();
        let width = if open { high - low } else { (high - low) / 2.0 };
        let estimate = o.histogram.quantile(q, o.extremes).unwrap();
        let bound = width + o.histogram.relative_error() * high.abs().max(low.abs());
        assert!(
            (estimate - exact).abs() <= bound,
            "p{p}: {estimate} vs {exact} (bucket {low}..{high})"
        );
    }
}

#[test]
fn explicit_points_without_bounds_are_refused_unless_empty() {
    for (bounds, counts, count) in [(vec![], vec![], 5), (vec![], vec![5], 5)] {
        let mut point = explicit(bounds, counts);
        point.count = count;
        let e = Counts::of(&point).unwrap_err();
        assert_eq!(e, HistogramError::NoBounds(5));
        assert_eq!(e.as_str(), "otlp_histogram_no_bounds");
    }
    let empty = Counts::of(&explicit(vec![], vec![])).unwrap();
    assert_eq!(empty.count(), 0);
    let o = observed(&empty, 0.0, (Some(1.0), Some(2.0)), (Some(1.0), Some(2.0)));
    assert!(o.histogram.is_empty());
    assert_eq!(o.extremes, None);
}

#[test]
fn increases_subtract_bucket_by_bucket() {
    let then = Counts::of(&exponential(3, (1, 0.0), (-2, vec![1, 0, 2]), (0, vec![1]))).unwrap();
    let now = Counts::of(&exponential(
        3,
        (3, 0.0),
        (-3, vec![4, 1, 0, 5]),
        (0, vec![1, 2]),
    ))
    .unwrap();
    let increase = histogram_of(now.increase_since(&then).unwrap());
    let expected = Histogram::from_parts(3, 0.0, 2, [(-2, 4), (1, 3)], [(2, 2)]).unwrap();
    assert_eq!(increase, expected);

    // Any count lower: a reset.
    let lower = Counts::of(&exponential(3, (1, 0.0), (-2, vec![1, 0, 1]), (0, vec![1]))).unwrap();
    assert_eq!(lower.increase_since(&then), None);
    let fewer_zeros =
        Counts::of(&exponential(3, (0, 0.0), (-2, vec![1, 0, 2]), (0, vec![1]))).unwrap();
    assert_eq!(fewer_zeros.increase_since(&then), None);
    let bucket_gone =
        Counts::of(&exponential(3, (1, 0.0), (-2, vec![1, 0, 3]), (0, vec![]))).unwrap();
    assert_eq!(bucket_gone.increase_since(&then), None);

    // Explicit: same bounds subtract; other bounds or kinds are a reset.
    let a = Counts::of(&explicit(vec![1.0, 2.0], vec![1, 2, 3])).unwrap();
    let b = Counts::of(&explicit(vec![1.0, 2.0], vec![1, 5, 4])).unwrap();
    assert_eq!(
        b.increase_since(&a),
        Some(Counts::Explicit {
            bounds: vec![1.0, 2.0],
            counts: vec![0, 3, 1]
        })
    );
    assert_eq!(a.increase_since(&b), None);
    let other = Counts::of(&explicit(vec![1.0, 3.0], vec![1, 5, 4])).unwrap();
    assert_eq!(other.increase_since(&a), None);
    assert_eq!(then.increase_since(&a), None);
    assert_eq!(a.increase_since(&then), None);
}

#[test]
fn increases_across_a_coarsened_scale_or_a_wider_zero_bucket() {
    // (then, now) scales: a source that coarsens its cumulative histogram from scale 4 to 2
    // as its range grows; and a finer scale after a coarser one, compared at the coarser
    // (not a reset, as it is for a Prometheus counter histogram).
    let values_then = [0.3, 1.7, 2.2, 9.0];
    let values_added = [0.31, 40.0, 1000.0];
    let mut expected = Histogram::new(2);
    values_added.iter().for_each(|&v| expected.record(v));
    for (then_scale, now_scale) in [(4, 2), (2, 4)] {
        let mut then = Histogram::new(then_scale);
        values_then.iter().for_each(|&v| then.record(v));
        let mut now = Histogram::new(now_scale);
        values_then
            .iter()
            .chain(&values_added)
            .for_each(|&v| now.record(v));
        let increase = Counts::Exponential(now)
            .increase_since(&Counts::Exponential(then))
            .unwrap();
        let scales = format!("scale {then_scale}, then {now_scale}");
        assert_eq!(histogram_of(increase), expected, "{scales}");
    }

    // A zero threshold widened to 0.5: the earlier buckets within it compare as zeros.
    let mut then = Histogram::from_parts(4, 0.0, 0, [], []).unwrap();
    [0.1, 0.2, 3.0].iter().for_each(|&v| then.record(v));
    let mut now = Histogram::from_parts(4, 0.5, 0, [], []).unwrap();
    [0.1, 0.2, 3.0, 0.4, 3.0]
        .iter()
        .for_each(|&v| now.record(v));
    let increase = Counts::Exponential(now)
        .increase_since(&Counts::Exponential(then))
        .unwrap();
    let mut expected = Histogram::from_parts(4, 0.5, 0, [], []).unwrap();
    [0.4, 3.0].iter().for_each(|&v| expected.record(v));
    assert_eq!(histogram_of(increase), expected);
}
