use super::*;

const MIN: i64 = 60_000;
const LOOKBACK: i64 = 5 * MIN;

/// Minute buckets from 0 holding `samples` (second, value), folded in the order given.
fn minutes(n: usize, samples: &[(i64, f64)]) -> Vec<Bucket> {
    let mut buckets = vec![Bucket::EMPTY; n];
    for &(ts, value) in samples {
        buckets[(ts / 60) as usize].add_at(value, Last::new(value, ts));
    }
    buckets
}

/// The latest sample's value where the buckets say it exactly.
fn within(buckets: &[Bucket], t: i64, window: i64) -> Option<Option<f64>> {
    let series = Buckets {
        buckets,
        first_ms: 0,
        res_ms: MIN,
    };
    let found = latest_sample(&series, t, window)?;
    found.exact.then(|| found.last.map(|l| l.value))
}

fn at(buckets: &[Bucket], t: i64) -> Option<Option<f64>> {
    within(buckets, t, LOOKBACK)
}

#[test]
fn the_latest_sample_at_or_before_t_within_the_lookback() {
    let b = minutes(20, &[(0, 1.0), (60, 2.0), (125, 3.0), (130, 4.0)]);
    assert_eq!(at(&b, MIN), Some(Some(2.0)), "a sample at exactly t counts");
    assert_eq!(
        at(&b, 2 * MIN),
        None,
        "the bucket holding t has two samples, the latest after t: the other may be at t"
    );
    assert_eq!(at(&b, 119_000), Some(Some(2.0)));
    assert_eq!(
        at(&b, 3 * MIN),
        Some(Some(4.0)),
        "the later of a bucket's two"
    );
    assert_eq!(at(&b, 130_000), Some(Some(4.0)));
    assert_eq!(
        at(&b, 129_000),
        None,
        "t inside a bucket of two samples whose latest is after t: either may be the answer"
    );
    assert_eq!(
        at(&b, 130_000 + LOOKBACK),
        Some(Some(4.0)),
        "t - 5m included, as Prometheus 2.42 includes it"
    );
    assert_eq!(at(&b, 130_000 + LOOKBACK + 1000), Some(None));
    assert_eq!(at(&b, 19 * MIN), Some(None), "nothing within the lookback");
}

#[test]
fn a_bucket_of_one_sample_after_t_is_passed_over() {
    let b = minutes(5, &[(30, 1.0), (95, 2.0)]);
    assert_eq!(at(&b, 90_000), Some(Some(1.0)));
    assert_eq!(at(&b, 95_000), Some(Some(2.0)));
}

#[test]
fn an_unknown_latest_sample_in_the_way_is_not_exact() {
    let mut b = minutes(5, &[(30, 1.0), (90, 2.0)]);
    b[1].add(5.0);
    assert_eq!(at(&b, 2 * MIN), None);
    assert_eq!(
        at(&b, MIN),
        None,
        "the bucket holding t may hold a sample at t"
    );
    assert_eq!(
        at(&b, 59_000),
        Some(Some(1.0)),
        "the unknown bucket starts after t"
    );
}

/// last_over_time's windows: any width, aligned to the buckets or not. A bucket that starts
/// before the window and whose latest sample lies in it answers; one whose latest is before
/// the window holds nothing in it.
#[test]
fn any_window_the_buckets_can_say() {
    let b = minutes(10, &[(10, 1.0), (70, 2.0), (100, 3.0), (250, 4.0)]);
    // [120 s, 210 s]: nothing; the bucket of 70 and 100 ends at 120, before the window.
    assert_eq!(within(&b, 210_000, 90_000), Some(None));
    // [95 s, 185 s]: the minute [60, 120) starts before the window, its latest (100 s) in it.
    assert_eq!(within(&b, 185_000, 90_000), Some(Some(3.0)));
    // [101 s, 191 s]: that minute's latest is before the window, so is its other sample.
    assert_eq!(within(&b, 191_000, 90_000), Some(None));
    // A window narrower than a bucket, inside it.
    assert_eq!(within(&b, 30_000, 25_000), Some(Some(1.0)));
    assert_eq!(within(&b, 30_000, 15_000), Some(None), "[15 s, 30 s]");
    assert_eq!(
        within(&b, 75_000, 10_000),
        None,
        "the minute holding t has two samples, its latest (100 s) after t"
    );
    // An hour's window reaches back over an empty minute.
    let b = minutes(10, &[(10, 1.0), (150, 3.0)]);
    assert_eq!(within(&b, 125_000, 3_600_000), Some(Some(1.0)));
}

/// Where the bucket holding t has several samples, the latest after t, the latest sample
/// before it is the answer unless one of them lies at or before t: said as not exact.
#[test]
fn a_bucket_of_several_after_t_leaves_the_one_before_unsure() {
    let b = minutes(5, &[(30, 1.0), (125, 3.0), (130, 4.0)]);
    let series = Buckets {
        buckets: &b,
        first_ms: 0,
        res_ms: MIN,
    };
    let found = latest_sample(&series, 2 * MIN, LOOKBACK).unwrap();
    assert_eq!(
        (found.last.map(|l| (l.ts(), l.value)), found.exact),
        (Some((30, 1.0)), false)
    );
    let found = latest_sample(&series, 2 * MIN, MIN).unwrap();
    assert_eq!(
        (found.last, found.exact),
        (None, false),
        "none before, in [1m, 2m]"
    );
    let found = latest_sample(&series, 130_000, LOOKBACK).unwrap();
    assert_eq!(
        (found.last.map(|l| l.value), found.exact),
        (Some(4.0), true)
    );
}

#[test]
fn one_sample_is_known_only_alone_and_with_its_time() {
    let b = minutes(3, &[(10, 1.0), (70, 2.0), (100, 3.0)]);
    assert_eq!(one_sample(&b[0]), Some(Last::new(1.0, 10)));
    assert_eq!(
        one_sample(&b[1]),
        None,
        "two samples: only the latest is known"
    );
    assert_eq!(one_sample(&b[2]), None, "empty");
    let mut unknown = Bucket::EMPTY;
    unknown.add(5.0);
    assert_eq!(one_sample(&unknown), None);
}
