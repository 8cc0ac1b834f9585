use super::still_filling;

#[test]
fn the_point_still_filling_is_the_first_that_ends_after_now() {
    // Three minutes from 0: [0, 60), [60, 120), [120, 180).
    assert_eq!(still_filling(0, 60, 3, 59), Some(0));
    assert_eq!(
        still_filling(0, 60, 3, 60),
        Some(60),
        "a bucket ends at its end"
    );
    assert_eq!(still_filling(0, 60, 3, 179), Some(120));
    assert_eq!(still_filling(0, 60, 3, 180), None, "every point has ended");
    // A range wholly ahead of now: its first point.
    assert_eq!(still_filling(600, 60, 3, 10), Some(600));
    // A point wider than a bucket (a step of an hour over 1m buckets) is partial until the
    // last of its buckets ends.
    assert_eq!(still_filling(3600, 3600, 2, 7199), Some(3600));
    assert_eq!(still_filling(-120, 60, 2, -61), Some(-120));
    assert_eq!(still_filling(0, 60, 0, 0), None, "no points");
    assert_eq!(still_filling(i64::MAX - 120, 60, 2, i64::MAX), None);
}
