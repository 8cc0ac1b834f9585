use super::*;
use crate::histogram::{Histogram, Observed, MAX_SCALE};
use crate::ingest::otlp::histogram::{ExponentialBuckets, Layout};

const SECOND: u64 = 1_000_000_000;
/// The process's start, in unix seconds.
const STARTED: Timestamp = 1_700_000_000;
const NOW: Timestamp = STARTED + 600;

fn ns(seconds: Timestamp) -> u64 {
    seconds as u64 * SECOND
}

/// An explicit cumulative point over bounds 1, 10.
fn point(start: Timestamp, at: Timestamp, counts: [u64; 3], sum: f64) -> Distribution {
    Distribution {
        layout: Layout::Explicit {
            bounds: vec![1.0, 10.0],
            counts: counts.to_vec(),
        },
        count: counts.iter().sum(),
        sum: Some(sum),
        min: Some(0.5),
        max: Some(20.0),
        temporality: Temporality::Cumulative,
        start: ns(start),
        time: ns(at),
    }
}

/// The histogram explicit counts over bounds 1, 10 place (min 0.5, max 20).
fn placed(counts: [u64; 3]) -> Histogram {
    let mut h = Histogram::new(MAX_SCALE);
    h.record_n(0.5, counts[0]);
    h.record_n(5.5, counts[1]);
    h.record_n(20.0, counts[2]);
    h
}

fn streams() -> Streams {
    Streams::new(STARTED, MAX_STREAM_BYTES)
}

impl Streams {
    /// [`Streams::observe`] of a point whose write lands.
    fn observe_landed(
        &mut self,
        stream: &str,
        point: &Distribution,
        now: Timestamp,
    ) -> Result<Option<Observed>, HistogramError> {
        self.observe(stream, point, now, &mut Unwritten::default())
    }
}

#[test]
fn a_delta_point_is_written_as_it_is() {
    let mut s = streams();
    let mut p = point(0, NOW, [1, 2, 3], 70.0);
    p.temporality = Temporality::Delta;
    let o = s.observe_landed("h", &p, NOW).unwrap().unwrap();
    assert_eq!(o.histogram, placed([1, 2, 3]));
    assert_eq!(o.sum, 70.0);
    assert_eq!(o.extremes, Some((0.5, 20.0)));
    assert!(s.is_empty(), "delta points keep no state");
    // Twice: counted twice, as two deltas are.
    assert!(s.observe_landed("h", &p, NOW).unwrap().is_some());
    // An empty delta writes nothing.
    let mut empty = point(0, NOW, [0, 0, 0], 0.0);
    empty.temporality = Temporality::Delta;
    assert_eq!(s.observe_landed("h", &empty, NOW).unwrap(), None);
}

#[test]
fn cumulative_points_write_their_increases() {
    let mut s = streams();
    let start = STARTED + 10;
    let first = s
        .observe_landed("h", &point(start, start + 5, [1, 0, 0], 0.5), NOW)
        .unwrap();
    let first = first.expect("a stream started after the process is counted whole");
    assert_eq!(first.histogram, placed([1, 0, 0]));
    assert_eq!(first.extremes, Some((0.5, 20.0)));

    let second = s
        .observe_landed("h", &point(start, start + 15, [1, 2, 1], 20.5), NOW)
        .unwrap();
    let second = second.unwrap();
    assert_eq!(second.histogram, placed([0, 2, 1]));
    assert_eq!(second.sum, 20.0);
    // The point's min and max are since the start: the increase's are its buckets' bounds.
    assert_eq!(second.extremes, Some((1.0, 20.0)));

    // Nothing new: nothing written.
    let third = s
        .observe_landed("h", &point(start, start + 25, [1, 2, 1], 20.5), NOW)
        .unwrap();
    assert_eq!(third, None);
    let fourth = s
        .observe_landed("h", &point(start, start + 35, [1, 2, 4], 80.5), NOW)
        .unwrap();
    let fourth = fourth.unwrap();
    assert_eq!(fourth.histogram, placed([0, 0, 3]));
    assert_eq!(fourth.extremes, Some((10.0, 20.0)));
    // A greater max than before is a value of the increase: exact.
    let mut fifth = point(start, start + 45, [1, 2, 5], 110.5);
    fifth.max = Some(30.0);
    let fifth = s.observe_landed("h", &fifth, NOW).unwrap().unwrap();
    assert_eq!(fifth.extremes, Some((10.0, 30.0)));
    assert_eq!(s.len(), 1);
}

#[test]
fn a_reset_has_the_point_counted_whole() {
    let mut s = streams();
    let start = STARTED + 10;
    s.observe_landed("h", &point(start, start + 5, [1, 2, 3], 60.0), NOW)
        .unwrap();
    // A new start time, even with higher counts.
    let restarted = point(start + 100, start + 105, [2, 2, 3], 61.0);
    let o = s.observe_landed("h", &restarted, NOW).unwrap().unwrap();
    assert_eq!(o.histogram, placed([2, 2, 3]));
    assert_eq!(o.sum, 61.0);
    assert_eq!(o.extremes, Some((0.5, 20.0)));
    // The same start, one count lower (a source that lost its state without saying so).
    let lower = point(start + 100, start + 110, [3, 1, 3], 62.0);
    let o = s.observe_landed("h", &lower, NOW).unwrap().unwrap();
    assert_eq!(o.histogram, placed([3, 1, 3]));
    // Other bounds.
    let mut rebucketed = point(start + 100, start + 120, [3, 1, 3], 62.0);
    rebucketed.layout = Layout::Explicit {
        bounds: vec![1.0, 20.0],
        counts: vec![3, 1, 3],
    };
    assert_eq!(
        s.observe_landed("h", &rebucketed, NOW)
            .unwrap()
            .unwrap()
            .histogram
            .count(),
        7
    );
}

#[test]
fn a_first_point_that_may_have_been_counted_is_a_baseline() {
    let mut s = streams();
    // Started before this process: counted (in part) by a process before it.
    let before = STARTED - 3600;
    assert_eq!(
        s.observe_landed("h", &point(before, NOW - 10, [5, 5, 5], 100.0), NOW)
            .unwrap(),
        None
    );
    let o = s
        .observe_landed("h", &point(before, NOW, [5, 6, 5], 105.5), NOW)
        .unwrap()
        .unwrap();
    assert_eq!(o.histogram, placed([0, 1, 0]));
    assert_eq!(o.sum, 5.5);
    // No start time: a baseline too.
    assert_eq!(
        s.observe_landed("g", &point(0, NOW, [1, 0, 0], 0.5), NOW)
            .unwrap(),
        None
    );
    // In the very second the process started: a baseline.
    assert_eq!(
        s.observe_landed("f", &point(STARTED, NOW, [1, 0, 0], 0.5), NOW)
            .unwrap(),
        None
    );
}

#[test]
fn points_not_later_than_the_last_are_refused() {
    let mut s = streams();
    let start = STARTED + 10;
    s.observe_landed("h", &point(start, start + 20, [1, 0, 0], 0.5), NOW)
        .unwrap();
    for at in [start + 20, start + 19] {
        let e = s
            .observe_landed("h", &point(start, at, [1, 1, 0], 6.0), NOW)
            .unwrap_err();
        assert_eq!(e.as_str(), "otlp_histogram_out_of_order");
        assert_eq!(
            e,
            HistogramError::OutOfOrder {
                time: ns(at),
                last: ns(start + 20)
            }
        );
    }
    // The refused points left the state as it was.
    let o = s
        .observe_landed("h", &point(start, start + 30, [1, 1, 0], 6.0), NOW)
        .unwrap();
    assert_eq!(o.unwrap().histogram, placed([0, 1, 0]));
}

#[test]
fn values_without_a_sum_are_refused() {
    let mut s = streams();
    let mut p = point(STARTED + 10, NOW, [1, 0, 0], 0.0);
    p.sum = None;
    let e = s.observe_landed("h", &p, NOW).unwrap_err();
    assert_eq!(e.as_str(), "otlp_histogram_missing_sum");
    assert!(s.is_empty());
    let mut empty = point(STARTED + 10, NOW, [0, 0, 0], 0.0);
    empty.sum = None;
    assert_eq!(s.observe_landed("h", &empty, NOW).unwrap(), None);
}

#[test]
fn exponential_cumulative_points_subtract_in_our_numbering() {
    let mut s = streams();
    let start = STARTED + 10;
    let exp = |at: Timestamp, counts: Vec<u64>, sum: f64| Distribution {
        count: counts.iter().sum(),
        layout: Layout::Exponential {
            scale: 10,
            zero_count: 0,
            zero_threshold: 0.0,
            positive: ExponentialBuckets {
                offset: 1024,
                counts,
            },
            negative: ExponentialBuckets::default(),
        },
        sum: Some(sum),
        min: None,
        max: None,
        temporality: Temporality::Cumulative,
        start: ns(start),
        time: ns(at),
    };
    s.observe_landed("e", &exp(start + 1, vec![1, 0, 0, 0, 2], 10.0), NOW)
        .unwrap();
    let o = s.observe_landed(
        "e",
        &exp(start + 2, vec![1, 0, 0, 0, 3, 0, 0, 0, 1], 14.0),
        NOW,
    );
    let o = o.unwrap().unwrap();
    // Scale 10 reduced to 8: OTLP indexes 1024..=1032 become ours 257 (1024..1027), 258, 259.
    assert_eq!(o.histogram.scale(), 8);
    assert_eq!(o.histogram.positive(), &[(258, 1), (259, 1)]);
    assert_eq!(o.sum, 4.0);
    // No min or max sent: the outer bounds of the buckets.
    let bare = Observed {
        extremes: None,
        ..o.clone()
    };
    assert_eq!(o.extremes, bare.extremes());
}

#[test]
fn state_is_bounded_and_a_forgotten_stream_starts_again_with_a_baseline() {
    let one = {
        let mut s = streams();
        s.observe_landed("h000", &point(STARTED + 10, NOW, [1, 0, 0], 0.5), NOW)
            .unwrap();
        s.bytes
    };
    let mut s = Streams::new(STARTED, one * 10);
    // Stream k starts at STARTED + 100 + 10 k and is first written a second later.
    let start = |k: i64| STARTED + 100 + 10 * k;
    for k in 0..100 {
        let p = point(start(k), start(k) + 1, [1, 0, 0], 0.5);
        let o = s.observe_landed(&format!("h{k:03}"), &p, start(k) + 1);
        assert!(
            o.unwrap().is_some(),
            "stream {k} started after the last was forgotten"
        );
    }
    assert!(s.len() <= 10, "{} streams kept", s.len());
    assert!(s.bytes <= one * 10);
    // The most recently written streams are the ones kept.
    assert!(s.last.contains_key("h099"));
    assert!(!s.last.contains_key("h000"));
    // h000 was forgotten: its next point may carry values counted before, so it is a
    // baseline, and the one after it an increase.
    let later = start(100);
    let next = point(start(0), later, [2, 0, 0], 1.0);
    assert_eq!(s.observe_landed("h000", &next, later).unwrap(), None);
    let after = point(start(0), later + 10, [3, 0, 0], 1.5);
    let o = s
        .observe_landed("h000", &after, later + 10)
        .unwrap()
        .unwrap();
    assert_eq!(o.histogram.count(), 1);
    // A stream first seen that started before the last was forgotten: a baseline too.
    let old = point(start(99), later + 20, [1, 0, 0], 0.5);
    assert_eq!(s.observe_landed("old", &old, later + 20).unwrap(), None);
}

#[test]
fn a_failed_write_is_undone_so_the_next_point_carries_its_increase() {
    let mut s = streams();
    let start = STARTED - 100;
    assert_eq!(
        s.observe_landed("h", &point(start, start + 5, [1, 0, 0], 0.5), NOW),
        Ok(None)
    );
    let bytes = s.bytes;
    let mut unwritten = Unwritten::default();
    let failed = point(start, start + 15, [1, 2, 1], 20.5);
    assert!(s
        .observe("h", &failed, NOW, &mut unwritten)
        .unwrap()
        .is_some());
    s.undo(&mut unwritten);
    assert!(unwritten.is_empty());
    assert_eq!(s.bytes, bytes);
    // The retry writes the increase since the last point written.
    let retried = s.observe_landed("h", &failed, NOW).unwrap().unwrap();
    assert_eq!(retried.histogram.count(), 3);
    // A stream first seen in a failed request (started after the process: counted whole)
    // is forgotten, and its retry counts whole again.
    let mut unwritten = Unwritten::default();
    let fresh = point(STARTED + 10, STARTED + 20, [0, 1, 0], 5.0);
    assert!(s
        .observe("new", &fresh, NOW, &mut unwritten)
        .unwrap()
        .is_some());
    s.undo(&mut unwritten);
    assert_eq!(s.len(), 1);
    assert!(s.observe_landed("new", &fresh, NOW).unwrap().is_some());
}
