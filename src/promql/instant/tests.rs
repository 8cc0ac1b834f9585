use super::*;
use crate::bucket::Last;

const MIN: i64 = 60_000;
const LOOKBACK: i64 = 5 * MIN;

/// Minute buckets from 0 holding `samples` (second, value), folded in the order given.
fn minutes(n: usize, samples: &[(i64, f64)]) -> Vec<Bucket> {
    let mut buckets = vec![Bucket::EMPTY; n];
    for &(ts, value) in samples {
        buckets[(ts / 60) as usize].add_at(value, Last { value, ts });
    }
    buckets
}

fn at(buckets: &[Bucket], t: i64) -> Option<Option<f64>> {
    let series = Buckets {
        buckets,
        first_ms: 0,
        res_ms: MIN,
    };
    exact_value(&series, t, LOOKBACK)
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
    assert_eq!(at(&b, 130_000 + LOOKBACK), Some(None), "t - 5m excluded");
    assert_eq!(at(&b, 130_000 + LOOKBACK - 1000), Some(Some(4.0)));
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
