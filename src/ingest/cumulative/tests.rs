//! Tests of cumulative histograms into increases: a baseline, increases bucket by bucket,
//! resets by hint and by every kind of drop, layout changes, order and the series limit;
//! and, against random cumulative runs, that the stored increases add up to the last
//! histogram exactly.

use proptest::prelude::*;

use super::*;

/// [`HistogramCounters::step`] of a write that lands.
fn step(
    table: &HistogramCounters,
    series: &str,
    timestamp: i64,
    histogram: Histogram,
    sum: f64,
    reset: bool,
) -> Result<Option<Observed>, CumulativeError> {
    let mut unwritten: Unwritten<Step> = Unwritten::default();
    table.step(series, timestamp, (histogram, sum), reset, &mut unwritten)
}

fn hist(scale: i8, zero: u64, positive: &[(i32, u64)], negative: &[(i32, u64)]) -> Histogram {
    Histogram::from_parts(
        scale,
        0.0,
        zero,
        positive.iter().copied(),
        negative.iter().copied(),
    )
    .unwrap()
}

#[test]
fn the_first_histogram_is_a_baseline_and_later_ones_store_increases() {
    let table = HistogramCounters::default();
    let first = hist(3, 1, &[(1, 2), (4, 1)], &[(2, 1)]);
    assert_eq!(step(&table, "h", 1000, first, 10.0, false), Ok(None));
    let second = hist(3, 1, &[(1, 5), (3, 2), (4, 1)], &[(2, 3)]);
    let stored = step(&table, "h", 2000, second, 25.5, false)
        .unwrap()
        .unwrap();
    assert_eq!(stored.histogram, hist(3, 0, &[(1, 3), (3, 2)], &[(2, 2)]));
    assert_eq!(stored.sum, 15.5);
    // Nothing new: nothing stored.
    let same = hist(3, 1, &[(1, 5), (3, 2), (4, 1)], &[(2, 3)]);
    assert_eq!(step(&table, "h", 3000, same, 25.5, false), Ok(None));
}

#[test]
fn resets_store_the_new_histogram_whole() {
    let before = hist(2, 4, &[(1, 5), (2, 5)], &[(1, 1)]);
    let drops = [
        // A bucket drops, the total grows.
        hist(2, 4, &[(1, 4), (2, 9)], &[(1, 1)]),
        // A bucket disappears.
        hist(2, 4, &[(2, 9)], &[(1, 2)]),
        // The zero bucket drops.
        hist(2, 3, &[(1, 6), (2, 6)], &[(1, 1)]),
        // A negative bucket drops.
        hist(2, 4, &[(1, 6), (2, 6)], &[]),
        // A finer scale.
        hist(3, 4, &[(1, 6), (2, 6)], &[(1, 1)]),
    ];
    for (n, after) in drops.into_iter().enumerate() {
        let table = HistogramCounters::default();
        step(&table, "h", 1, before.clone(), 100.0, false).unwrap();
        let stored = step(&table, "h", 2, after.clone(), 7.0, false)
            .unwrap()
            .unwrap();
        assert_eq!(stored.histogram, after, "case {n}");
        assert_eq!(stored.sum, 7.0, "case {n}");
    }
    // The sender's hint, with nothing dropping.
    let table = HistogramCounters::default();
    step(&table, "h", 1, before.clone(), 1.0, false).unwrap();
    let grown = hist(2, 5, &[(1, 5), (2, 5)], &[(1, 1)]);
    let stored = step(&table, "h", 2, grown.clone(), 2.0, true)
        .unwrap()
        .unwrap();
    assert_eq!(stored.histogram, grown);
    assert_eq!(stored.sum, 2.0);
}

#[test]
fn a_coarser_scale_or_a_wider_zero_threshold_is_no_reset() {
    let before = hist(1, 0, &[(1, 1), (2, 1), (3, 1)], &[]);
    // At scale 0, buckets 1 and 2 of scale 1 make bucket 1, bucket 3 makes 2.
    let after = hist(0, 0, &[(1, 3), (2, 4)], &[]);
    assert_eq!(
        increase(&before, &after),
        Some(hist(0, 0, &[(1, 1), (2, 3)], &[]))
    );
    // A threshold of 1 holds bucket 0 at scale 0 ((0.5, 1]).
    let before = hist(0, 2, &[(0, 3), (2, 1)], &[]);
    let after = Histogram::from_parts(0, 1.0, 6, [(2, 2)], []).unwrap();
    assert_eq!(
        increase(&before, &after),
        Histogram::from_parts(0, 1.0, 1, [(2, 1)], [])
    );
    // Narrower: a reset.
    assert_eq!(increase(&after, &before), None);
}

#[test]
fn out_of_order_histograms_are_refused_and_change_nothing() {
    let table = HistogramCounters::default();
    step(&table, "h", 10, hist(0, 1, &[], &[]), 0.0, false).unwrap();
    for ts in [10, 9] {
        let refused = step(&table, "h", ts, hist(0, 9, &[], &[]), 0.0, false);
        assert_eq!(refused, Err(CumulativeError::OutOfOrder));
    }
    let stored = step(&table, "h", 11, hist(0, 3, &[], &[]), 0.0, false);
    assert_eq!(stored.unwrap().unwrap().histogram, hist(0, 2, &[], &[]));
    // Series are apart.
    assert_eq!(
        step(&table, "other", 1, hist(0, 1, &[], &[]), 0.0, false),
        Ok(None)
    );
}

#[test]
fn forgetting_a_series_makes_the_next_histogram_a_baseline() {
    let table = HistogramCounters::default();
    step(&table, "h", 1, hist(0, 1, &[], &[]), 0.0, false).unwrap();
    table.forget("h");
    assert_eq!(
        step(&table, "h", 2, hist(0, 5, &[], &[]), 0.0, false),
        Ok(None)
    );
}

fn bucket_lists() -> impl Strategy<Value = Vec<(i32, u64)>> {
    prop::collection::vec((-20i32..20, 0u64..50), 0..12)
}

proptest! {
    /// Adding up the stored increases of a cumulative run, resets included, gives the
    /// observations since the last reset plus everything before it: with no reset, the
    /// last histogram minus the first.
    #[test]
    fn increases_add_up_to_the_run(steps in prop::collection::vec((bucket_lists(), bucket_lists(), 0u64..5, 0u8..10), 1..12)) {
        let table = HistogramCounters::default();
        let mut running = hist(2, 0, &[], &[]);
        let mut first: Option<Histogram> = None;
        let mut stored_total = hist(2, 0, &[], &[]);
        let mut resets = 0;
        for (n, (positive, negative, zero, roll)) in steps.into_iter().enumerate() {
            // Mostly growth; sometimes a restart from empty.
            if roll == 0 {
                running = hist(2, 0, &[], &[]);
                resets += 1;
            }
            running.merge(&hist(2, zero, &positive, &negative));
            let stored = step(&table, "h", n as i64, running.clone(), 0.0, false).unwrap();
            if first.is_none() {
                first = Some(running.clone());
                prop_assert_eq!(&stored, &None);
            }
            if let Some(stored) = stored {
                stored_total.merge(&stored.histogram);
            }
        }
        if resets == 0 {
            let mut sum = first.unwrap();
            sum.merge(&stored_total);
            prop_assert_eq!(sum, running);
        }
    }
}

#[test]
fn a_saved_table_is_taken_back_once_and_damage_gives_an_empty_one() {
    let dir = tempfile::tempdir().unwrap();
    let table = HistogramCounters::default();
    let first = Histogram::from_parts(3, 1e-9, 2, [(1, 2), (4, 1)], [(-3, 5)]).unwrap();
    step(&table, "a{job=x}", 1000, first, 12.5, false).unwrap();
    step(&table, "b", 7, hist(0, 1, &[], &[]), 0.0, false).unwrap();
    table.save(dir.path()).unwrap();

    let taken = HistogramCounters::take_saved(dir.path());
    assert_eq!(taken.len(), 2);
    // The file is gone: a crash from here on starts empty.
    assert!(!dir.path().join(FILE_NAME).exists());
    assert!(HistogramCounters::take_saved(dir.path()).is_empty());
    // The series continues where it was.
    let grown = Histogram::from_parts(3, 1e-9, 3, [(1, 2), (4, 4)], [(-3, 5)]).unwrap();
    let stored = step(&taken, "a{job=x}", 2000, grown, 20.0, false)
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.histogram,
        Histogram::from_parts(3, 1e-9, 1, [(4, 3)], []).unwrap()
    );
    assert_eq!(stored.sum, 7.5);
    assert_eq!(
        step(&taken, "b", 7, hist(0, 2, &[], &[]), 0.0, false),
        Err(CumulativeError::OutOfOrder)
    );

    // Any flipped byte or a cut: an empty table, the file removed.
    taken.save(dir.path()).unwrap();
    let bytes = std::fs::read(dir.path().join(FILE_NAME)).unwrap();
    for at in [0, 9, bytes.len() / 2, bytes.len() - 1] {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x40;
        std::fs::write(dir.path().join(FILE_NAME), &damaged).unwrap();
        assert!(
            HistogramCounters::take_saved(dir.path()).is_empty(),
            "byte {at}"
        );
        assert!(!dir.path().join(FILE_NAME).exists());
    }
    std::fs::write(dir.path().join(FILE_NAME), &bytes[..bytes.len() - 3]).unwrap();
    assert!(HistogramCounters::take_saved(dir.path()).is_empty());
}

#[test]
fn a_failed_write_is_undone_so_the_next_histogram_carries_its_increase() {
    let table = HistogramCounters::default();
    step(&table, "h", 1, hist(0, 2, &[], &[]), 0.0, false).unwrap();
    // Two steps of one request whose batch failed, then taken back.
    let mut unwritten: Unwritten<Step> = Unwritten::default();
    for (ts, zero) in [(2, 5), (3, 9)] {
        let grown = (hist(0, zero, &[], &[]), 0.0);
        table.step("h", ts, grown, false, &mut unwritten).unwrap();
    }
    table.undo(&mut unwritten);
    assert!(unwritten.is_empty());
    // The retry lands the whole increase since the last written histogram.
    let stored = step(&table, "h", 3, hist(0, 9, &[], &[]), 0.0, false);
    assert_eq!(stored.unwrap().unwrap().histogram.zero_count(), 7);
    // A baseline writes nothing, so a failed request keeps it.
    let mut unwritten: Unwritten<Step> = Unwritten::default();
    (table.step("new", 1, (hist(0, 1, &[], &[]), 0.0), false, &mut unwritten)).unwrap();
    table.undo(&mut unwritten);
    assert_eq!(table.len(), 2);
    // A step another request took since stands.
    let mut unwritten: Unwritten<Step> = Unwritten::default();
    (table.step("h", 4, (hist(0, 10, &[], &[]), 0.0), false, &mut unwritten)).unwrap();
    step(&table, "h", 5, hist(0, 12, &[], &[]), 0.0, false).unwrap();
    table.undo(&mut unwritten);
    let stored = step(&table, "h", 6, hist(0, 13, &[], &[]), 0.0, false);
    assert_eq!(stored.unwrap().unwrap().histogram.zero_count(), 1);
}
