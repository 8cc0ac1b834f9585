use proptest::prelude::*;
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};

use super::*;

/// The nearest-rank quantile of `sorted`: the value of rank `max(1, ceil(q n))`.
fn exact(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// Seeded latencies spread over three decades (log-normal, sigma such that the middle
/// 99.9% spans a factor of about 1000).
fn latencies(seed: u64, n: usize) -> Vec<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dist = LogNormal::new(3.0, 1.05).expect("valid");
    (0..n).map(|_| dist.sample(&mut rng)).collect()
}

#[test]
fn index_and_bounds_agree() {
    for scale in MIN_SCALE..=MAX_SCALE {
        for index in [-2000, -65, -64, -1, 0, 1, 2, 63, 64, 65, 1000] {
            let upper = upper_bound(index, scale);
            if upper == 0.0 || upper.is_infinite() {
                continue;
            }
            assert_eq!(
                bucket_index(upper, scale),
                index,
                "upper of {index} at {scale}"
            );
            let above = f64::from_bits(upper.to_bits() + 1);
            assert_eq!(bucket_index(above, scale), index + 1, "just above {index}");
        }
    }
}

#[test]
fn prometheus_numbering() {
    // Scale 0: bucket 1 holds (1, 2], bucket 0 holds (0.5, 1].
    assert_eq!(bucket_index(1.0, 0), 0);
    assert_eq!(bucket_index(1.5, 0), 1);
    assert_eq!(bucket_index(2.0, 0), 1);
    assert_eq!(bucket_index(2.1, 0), 2);
    // Scale 1: base sqrt(2); 1.2 is in (1, 1.414] = bucket 1.
    assert_eq!(bucket_index(1.2, 1), 1);
    assert_eq!(bucket_index(1.5, 1), 2);
    // Scale -1: base 4; 3 is in (1, 4] = bucket 1.
    assert_eq!(bucket_index(3.0, -1), 1);
    assert_eq!(bucket_index(4.0, -1), 1);
    assert_eq!(bucket_index(5.0, -1), 2);
    // Subnormals and the largest finite value have buckets.
    assert!(bucket_index(f64::MIN_POSITIVE / 8.0, 6) < bucket_index(f64::MIN_POSITIVE, 6));
    assert!(upper_bound(bucket_index(f64::MAX, 6), 6) >= f64::MAX);
}

#[test]
fn relative_error_by_scale() {
    assert!((relative_error(6) - 0.00543).abs() < 1e-4);
    assert!((relative_error(5) - 0.01089).abs() < 1e-4);
}

#[test]
fn quantiles_within_the_stated_error() {
    let mut values = latencies(7, 100_000);
    let mut h = Histogram::default();
    for &v in &values {
        h.record(v);
    }
    values.sort_by(f64::total_cmp);
    let extremes = Some((values[0], values[values.len() - 1]));
    for q in [0.0, 0.001, 0.5, 0.9, 0.99, 0.999, 1.0] {
        let want = exact(&values, q);
        let got = h.quantile(q, extremes).expect("not empty");
        let err = (got - want).abs() / want;
        assert!(
            err <= relative_error(DEFAULT_SCALE),
            "q {q}: {got} vs {want}"
        );
    }
    assert_eq!(h.count(), 100_000);
}

/// The sum of any run of ranks is within the stated error times the sum of the magnitudes
/// it covers, negative values and zeros included; a rank's value is the quantile's.
#[test]
fn sums_of_ranks_within_the_stated_error() {
    let mut values = latencies(11, 20_000);
    values.extend([-3.0, -250.0, 0.0, 0.0]);
    let mut h = Histogram::default();
    for &v in &values {
        h.record(v);
    }
    values.sort_by(f64::total_cmp);
    let n = values.len() as u64;
    let e = relative_error(DEFAULT_SCALE);
    for (first, last) in [
        (1, n),
        (1, 1),
        (1, n * 9 / 10),
        (n / 2, n / 2 + 7),
        (n - 3, n),
    ] {
        let inside = &values[(first - 1) as usize..last as usize];
        let want: f64 = inside.iter().sum();
        let bound: f64 = e * inside.iter().map(|v| v.abs()).sum::<f64>();
        let got = h.sum_of_ranks((first, last), None).expect("in range");
        assert!(
            (got - want).abs() <= bound + 1e-9,
            "ranks {first}..={last}: {got} vs {want} (bound {bound})"
        );
        let at = h.value_at_rank(last, None).expect("in range");
        let exact = values[(last - 1) as usize];
        assert!((at - exact).abs() <= e * exact.abs(), "rank {last}");
    }
    assert_eq!(h.sum_of_ranks((0, 3), None), None);
    assert_eq!(h.sum_of_ranks((5, 4), None), None);
    assert_eq!(h.sum_of_ranks((1, n + 1), None), None);
    assert_eq!(h.value_at_rank(n + 1, None), None);
    assert_eq!(h.value_at_rank(0, None), None);
}

#[test]
fn merge_is_exact_and_order_free() {
    let a = latencies(1, 5000);
    let b = latencies(2, 5000);
    let mut ha = Histogram::default();
    let mut hb = Histogram::default();
    let mut both = Histogram::default();
    a.iter().for_each(|&v| ha.record(v));
    b.iter().for_each(|&v| hb.record(v));
    a.iter().chain(&b).for_each(|&v| both.record(v));
    let mut ab = ha.clone();
    ab.merge(&hb);
    let mut ba = hb.clone();
    ba.merge(&ha);
    assert_eq!(ab, both);
    assert_eq!(ba, both);
}

#[test]
fn merge_reduces_the_finer_input() {
    let values = latencies(3, 2000);
    let mut fine = Histogram::new(6);
    let mut coarse = Histogram::new(3);
    values.iter().for_each(|&v| fine.record(v));
    values.iter().for_each(|&v| coarse.record(v));
    let mut merged = coarse.clone();
    merged.merge(&fine);
    let mut doubled = Histogram::new(3);
    values.iter().for_each(|&v| doubled.record_n(v, 2));
    assert_eq!(merged, doubled);
    // And the other way round: the coarser input sets the scale.
    let mut merged = fine.clone();
    merged.merge(&coarse);
    assert_eq!(merged, doubled);
}

#[test]
fn an_empty_histogram_takes_the_other_as_it_is() {
    let mut fine = Histogram::new(8);
    fine.record(3.0);
    let mut total = Histogram::default();
    total.merge(&fine);
    assert_eq!(total, fine);
}

#[test]
fn limit_reduces_until_it_fits() {
    let values = latencies(4, 50_000);
    let mut h = Histogram::default();
    values.iter().for_each(|&v| h.record(v));
    assert!(h.populated() > MAX_POPULATED);
    let count = h.count();
    h.limit(MAX_POPULATED);
    assert!(h.populated() <= MAX_POPULATED);
    assert!(h.scale() < DEFAULT_SCALE);
    assert_eq!(h.count(), count);
}

#[test]
fn zero_and_negative_values() {
    let mut h = Histogram::default();
    for v in [-4.0, -1.0, 0.0, 0.0, 1.0, 4.0] {
        h.record(v);
    }
    assert_eq!(h.zero_count(), 2);
    assert_eq!(h.count(), 6);
    assert_eq!(h.quantile(0.5, None), Some(0.0));
    let low = h.quantile(0.0, None).expect("some");
    assert!((low + 4.0).abs() / 4.0 <= relative_error(6));
    let high = h.quantile(1.0, None).expect("some");
    assert!((high - 4.0).abs() / 4.0 <= relative_error(6));
    assert_eq!(h.quantile(1.5, None), None);
    assert_eq!(Histogram::default().quantile(0.5, None), None);
}

#[test]
fn a_wider_zero_threshold_takes_the_buckets_inside_it() {
    let mut h = Histogram::default();
    h.record(0.001);
    h.record(10.0);
    let wide = Histogram::from_parts(6, 0.01, 1, [], []).expect("valid");
    h.merge(&wide);
    assert_eq!(h.zero_count(), 2);
    assert_eq!(h.zero_threshold(), 0.01);
    assert_eq!(h.count(), 3);
}

#[test]
fn encoding_round_trips() {
    let mut h = Histogram::default();
    latencies(5, 300).iter().for_each(|&v| h.record(v));
    h.record(-2.5);
    h.record(0.0);
    let mut out = vec![];
    h.encode(&mut out);
    assert_eq!(out.len(), h.encoded_len());
    let (back, used) = Histogram::decode(&out).expect("decodes");
    assert_eq!(back, h);
    assert_eq!(used, out.len());
    let t = Histogram::from_parts(3, 1e-9, 4, [(5, 1)], []).expect("valid");
    let mut out = vec![];
    t.encode(&mut out);
    assert_eq!(Histogram::decode(&out).expect("decodes").0, t);
}

/// Bucket lists are packed: a bucket of count 1 with a small gap takes one byte. The
/// unpacked form earlier builds wrote (flag bit 1 clear) still decodes, to the same histogram.
#[test]
fn packed_encodings_are_written_and_unpacked_ones_still_read() {
    let h = Histogram::from_parts(6, 0.0, 0, [(5, 3), (6, 1), (70, 1)], [(2, 1)]).expect("valid");
    let mut out = vec![];
    h.encode(&mut out);
    // flags (packed), scale, zero count; 3 positive: zigzag(5) << 1 | more, 3; gap 0; gap 63;
    // 1 negative: zigzag(2) << 1.
    assert_eq!(out, [2, 6, 0, 3, 21, 3, 0, 126, 1, 8]);
    // The same histogram as earlier builds wrote it: each step and count a varint.
    let unpacked = [0, 6, 0, 3, 10, 3, 0, 1, 63, 1, 1, 4, 1];
    assert_eq!(
        Histogram::decode(&unpacked),
        Ok((h.clone(), unpacked.len()))
    );
    assert_eq!(Histogram::decode(&out), Ok((h, out.len())));
    // A packed list's length past one byte a bucket is damage.
    assert!(Histogram::decode(&[2, 6, 0, 5, 2, 2, 2, 0]).is_err());
}

#[test]
fn encode_within_reduces_the_scale() {
    let mut h = Histogram::default();
    latencies(6, 20_000).iter().for_each(|&v| h.record(v));
    let count = h.count();
    let mut out = vec![];
    h.encode_within(248, &mut out).expect("fits");
    assert!(out.len() <= 248);
    assert!(h.scale() < DEFAULT_SCALE);
    assert_eq!(Histogram::decode(&out).expect("decodes").0.count(), count);
}

#[test]
fn damaged_bytes_are_errors() {
    let mut h = Histogram::default();
    latencies(8, 50).iter().for_each(|&v| h.record(v));
    let mut out = vec![];
    h.encode(&mut out);
    for cut in 0..out.len() {
        assert!(Histogram::decode(&out[..cut]).is_err(), "cut at {cut}");
    }
    assert_eq!(Histogram::decode(&[4, 6]), Err(DecodeError::Flags(4)));
    assert_eq!(Histogram::decode(&[0, 9]), Err(DecodeError::Scale(9)));
}

/// Every length of varint, the one- and two-byte fast paths' edges among them, reads back
/// what was written, and each one cut short is an error.
#[test]
fn varints_round_trip_and_cut_ones_are_errors() {
    let edges = [
        0,
        1,
        0x7f,
        0x80,
        0x3fff,
        0x4000,
        0x1f_ffff,
        1 << 35,
        u64::MAX - 1,
        u64::MAX,
    ];
    for v in edges {
        let mut out = vec![];
        put_varint(&mut out, v);
        let mut at = 0;
        assert_eq!(get_varint(&out, &mut at), Ok(v));
        assert_eq!(at, out.len());
        for cut in 0..out.len() {
            let mut at = 0;
            assert!(
                get_varint(&out[..cut], &mut at).is_err(),
                "{v} cut at {cut}"
            );
        }
    }
    // Eleven bytes, or a tenth byte past 1, are past 64 bits.
    let mut at = 0;
    assert_eq!(
        get_varint(&[0xff; 11], &mut at),
        Err(DecodeError::Malformed(0))
    );
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Histogram::decode(&bytes);
    }

    #[test]
    fn index_brackets_the_value(v in 1e-300f64..1e300, scale in MIN_SCALE..=MAX_SCALE) {
        let index = bucket_index(v, scale);
        prop_assert!(lower_bound(index, scale) < v);
        prop_assert!(v <= upper_bound(index, scale));
    }

    #[test]
    fn reduction_keeps_every_value_in_its_bucket(v in 1e-30f64..1e30, from in 0i8..=8, by in 1i8..4) {
        let mut h = Histogram::new(from);
        h.record(v);
        h.reduce_to(from - by);
        let mut direct = Histogram::new(from - by);
        direct.record(v);
        prop_assert_eq!(h, direct);
    }
}

#[test]
fn an_accumulator_sums_as_merge_does() {
    let mut merged = Histogram::default();
    let mut acc = Accumulator::default();
    for (seed, scale) in [(11, 6), (12, 3), (13, 8), (14, 6)] {
        let mut h = Histogram::new(scale);
        latencies(seed, 500).iter().for_each(|&v| h.record(v));
        h.record(-7.0);
        h.record(0.0);
        merged.merge(&h);
        let mut bytes = vec![];
        h.encode(&mut bytes);
        if seed % 2 == 0 {
            acc.add_encoded(&bytes).expect("decodes");
        } else {
            acc.add(&h);
        }
    }
    assert_eq!(acc.to_histogram(), merged);
}

#[test]
fn an_accumulator_coarsens_past_its_width() {
    let mut acc = Accumulator::default();
    let mut h = Histogram::default();
    h.record(1e-200);
    h.record(1e200);
    acc.add(&h);
    let sum = acc.to_histogram();
    assert_eq!(sum.count(), 2);
    assert!(sum.scale() < DEFAULT_SCALE);
    let mut direct = Histogram::new(sum.scale());
    direct.record(1e-200);
    direct.record(1e200);
    assert_eq!(sum, direct);
}

/// Buckets of one input after the accumulator coarsened partway through it land at the
/// coarser scale too, encoded or not: the sum is the histogram the values make at its scale.
#[test]
fn an_accumulator_coarsening_mid_input_places_the_rest_at_its_scale() {
    let values = [1e-200, 3.0, 1e200, 1e201, -5.0, -1e150];
    let mut h = Histogram::new(MAX_SCALE);
    values.iter().for_each(|&v| h.record(v));
    let mut encoded = Vec::new();
    h.encode(&mut encoded);
    for via_bytes in [false, true] {
        let mut acc = Accumulator::default();
        if via_bytes {
            acc.add_encoded(&encoded).unwrap();
        } else {
            acc.add(&h);
        }
        let sum = acc.to_histogram();
        assert!(sum.scale() < MAX_SCALE);
        let mut direct = Histogram::new(sum.scale());
        values.iter().for_each(|&v| direct.record(v));
        assert_eq!(sum, direct, "via bytes: {via_bytes}");
    }
}

/// A bucket no finite value fits in is refused whole.
#[test]
fn parts_out_of_the_value_range_are_refused() {
    assert!(Histogram::from_parts(8, 0.0, 0, [(8000, 1)], []).is_some());
    assert!(Histogram::from_parts(8, 0.0, 0, [(i32::MAX, 1)], []).is_none());
    assert!(Histogram::from_parts(-4, 0.0, 0, [], [(-2_147_483_647, 1)]).is_none());
    assert!(Histogram::from_parts(0, 0.0, 0, [(1025, 1)], []).is_none());
}

proptest! {
    /// An accumulator fed one value at a time, in any order (so its dense lists grow down as
    /// well as up, past their room), and two accumulators merged, both sum as
    /// [`Histogram::merge`] does, at the scale the accumulator kept: values farther apart
    /// than its dense width (-0.001 and -3922 at scale 8) coarsen it, which a merge does not.
    #[test]
    fn accumulators_grow_either_way_and_merge_as_histograms_do(
        values in proptest::collection::vec(
            prop_oneof![1e-3f64..1e4, -1e4f64..-1e-3, Just(0.0)], 1..300),
        split in 0usize..300,
        scale in 0i8..=8,
    ) {
        let split = split.min(values.len());
        let mut merged = Histogram::new(scale);
        let (mut first, mut second) = (Accumulator::default(), Accumulator::default());
        for (i, &v) in values.iter().enumerate() {
            let mut one = Histogram::new(scale);
            one.record(v);
            merged.merge(&one);
            let mut bytes = Vec::new();
            one.encode(&mut bytes);
            let acc = if i < split { &mut first } else { &mut second };
            acc.add_encoded(&bytes).expect("decodes");
        }
        first.merge(&second);
        let summed = first.to_histogram();
        prop_assert!(summed.scale() <= scale);
        merged.reduce_to(summed.scale());
        prop_assert_eq!(summed, merged);
    }
}

/// What [`visit`] reads of `bytes` when that is one positive bucket: `(scale, zero count,
/// index, count)`; `None` for any other encoding, or damage.
fn visited_one_bucket(bytes: &[u8]) -> Option<(i8, u64, i32, u64)> {
    let mut head = None;
    let mut buckets = Vec::new();
    visit(bytes, |event| match event {
        Event::Head(h) => head = Some(h),
        Event::Bucket(negative, index, count) => buckets.push((negative, index, count)),
    })
    .ok()?;
    let head = head?;
    match buckets[..] {
        [(false, index, count)] if head.zero_threshold == 0.0 => {
            Some((head.scale, head.zero_count, index, count))
        }
        _ => None,
    }
}

proptest! {
    /// The one-bucket shortcut reads what the general decoder reads, or leaves the bytes to
    /// it: over encodings of one bucket at every scale, index and small count, and over
    /// arbitrary bytes.
    #[test]
    fn the_one_bucket_shortcut_reads_as_the_decoder_does(
        scale in MIN_SCALE..=MAX_SCALE,
        index in -20_000i32..20_000,
        count in 1u64..300,
        zero_count in 0u64..300,
        noise in proptest::collection::vec(any::<u8>(), 0..12),
    ) {
        let h = Histogram::from_parts(scale, 0.0, zero_count, [(index, count)], []);
        // The shortcut's fixed head, unpacked and packed, before arbitrary bytes, and
        // arbitrary bytes alone.
        let mut encodings = vec![noise.clone()];
        for flags in [0, 2] {
            let mut shaped = vec![flags, scale as u8, (zero_count % 0x90) as u8, 1];
            shaped.extend(noise.iter().take(5));
            encodings.push(shaped);
        }
        if let Some(h) = h {
            let mut bytes = Vec::new();
            h.encode(&mut bytes);
            encodings.push(bytes);
        }
        for bytes in encodings {
            if let Some(one) = OneBucket::of(&bytes) {
                prop_assert_eq!(
                    Some((one.scale, one.zero_count, one.index, one.count)),
                    visited_one_bucket(&bytes),
                    "{:?}", bytes
                );
            }
        }
    }
}

/// The shortcut takes what one sample leaves, at the default scale, and a read's accumulator
/// sums such cells as the decoder would.
#[test]
fn one_sample_encodings_take_the_one_bucket_shortcut() {
    let mut decoded = Histogram::default();
    let mut acc = Accumulator::default();
    for v in latencies(21, 200) {
        let mut one = Histogram::default();
        one.record(v);
        let mut bytes = Vec::new();
        one.encode(&mut bytes);
        assert!(OneBucket::of(&bytes).is_some(), "{v}: {bytes:?}");
        decoded.merge(&Histogram::decode(&bytes).expect("decodes").0);
        acc.add_encoded(&bytes).expect("decodes");
    }
    assert_eq!(acc.to_histogram(), decoded);
}

/// A cleared accumulator sums as a new one does, whatever it held (another scale, values
/// far from the new ones, so its lists move rather than grow).
#[test]
fn a_cleared_accumulator_sums_as_a_new_one() {
    let mut reused = Accumulator::default();
    for (seed, scale, shift) in [(31, 6, 1.0), (32, 3, 1e-9), (33, 8, 1e12), (34, 6, -1.0)] {
        let mut h = Histogram::new(scale);
        latencies(seed, 300)
            .iter()
            .for_each(|&v| h.record(v * shift));
        h.record(0.0);
        let mut fresh = Accumulator::default();
        fresh.add(&h);
        reused.clear();
        assert!(reused.is_empty());
        reused.add(&h);
        assert_eq!(reused.to_histogram(), fresh.to_histogram(), "seed {seed}");
        assert_eq!(reused.to_histogram(), h, "seed {seed}");
    }
}
