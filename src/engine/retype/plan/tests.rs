use super::*;

/// A tier of `resolution` seconds whose buckets start at 0 and hold `buckets`.
fn tier(name: &str, resolution: i64, buckets: Vec<Bucket>) -> TierCells {
    let cells = (buckets.into_iter().enumerate())
        .map(|(i, bucket)| {
            let at = CellAt {
                tier: 0,
                period_start: 0,
                chunk: 0,
                bucket: i as u32,
                slot: 0,
            };
            (at, i as i64 * resolution, bucket)
        })
        .collect();
    TierCells {
        name: name.to_owned(),
        resolution,
        cells,
    }
}

/// A gauge's buckets of `samples` (time, value), `resolution` wide, `n` of them.
fn gauge(samples: &[(i64, f64)], resolution: i64, n: usize) -> Vec<Bucket> {
    let mut buckets = vec![Bucket::EMPTY; n];
    for &(ts, value) in samples {
        buckets[(ts / resolution) as usize].add_at(value, Last::new(value, ts));
    }
    buckets
}

/// A counter's buckets of raw `samples`, as ingest stores them: the first is the baseline.
fn counter(samples: &[(i64, f64)], resolution: i64, n: usize) -> Vec<Bucket> {
    let mut buckets = vec![Bucket::EMPTY; n];
    for pair in samples.windows(2) {
        let ((_, before), (ts, value)) = (pair[0], pair[1]);
        buckets[(ts / resolution) as usize].add_at(increase(before, value), Last::new(value, ts));
    }
    buckets
}

/// Applies a plan's cells to the tiers' buckets.
fn applied(tiers: &[TierCells], cells: &[(CellAt, Bucket)], tier_of: &[&str]) -> Vec<Vec<Bucket>> {
    let mut out: Vec<Vec<Bucket>> = (tiers.iter())
        .map(|t| t.cells.iter().map(|c| c.2).collect())
        .collect();
    for (at, bucket) in cells {
        let index = tier_of
            .iter()
            .position(|n| *n == tiers[at.tier].name)
            .unwrap();
        out[index][at.bucket as usize] = *bucket;
    }
    out
}

/// Once-a-minute samples over 10 minutes with a reset at minute 6.
const SAMPLES: [(i64, f64); 10] = [
    (5, 10.0),
    (65, 12.0),
    (125, 15.0),
    (185, 15.0),
    (245, 20.0),
    (305, 26.0),
    (365, 3.0),
    (425, 5.0),
    (485, 9.0),
    (545, 10.0),
];

fn with_tier_index(mut tiers: Vec<TierCells>) -> Vec<TierCells> {
    for (i, tier) in tiers.iter_mut().enumerate() {
        for cell in &mut tier.cells {
            cell.0.tier = i;
        }
    }
    tiers
}

#[test]
fn a_gauge_whose_minutes_hold_one_sample_becomes_the_counter_ingest_would_have_made() {
    let tiers = with_tier_index(vec![
        tier("1m", 60, gauge(&SAMPLES, 60, 10)),
        tier("5m", 300, gauge(&SAMPLES, 300, 2)),
    ]);
    let Plan::Convert {
        cells,
        latest,
        notes,
        ..
    } = plan(SeriesKind::Gauge, SeriesKind::Counter, &tiers)
    else {
        panic!("refused")
    };
    let got = applied(&tiers, &cells, &["1m", "5m"]);
    assert_eq!(got[0], counter(&SAMPLES, 60, 10));
    assert_eq!(got[1], counter(&SAMPLES, 300, 2));
    assert_eq!(latest, Some((545, 10.0)));
    assert!(notes[0].contains("baseline"), "{notes:?}");
}

#[test]
fn a_counter_becomes_the_gauge_of_its_raw_values_but_its_baseline() {
    let tiers = with_tier_index(vec![
        tier("1m", 60, counter(&SAMPLES, 60, 10)),
        tier("5m", 300, counter(&SAMPLES, 300, 2)),
    ]);
    let Plan::Convert { cells, latest, .. } = plan(SeriesKind::Counter, SeriesKind::Gauge, &tiers)
    else {
        panic!("refused")
    };
    let got = applied(&tiers, &cells, &["1m", "5m"]);
    assert_eq!(got[0], gauge(&SAMPLES[1..], 60, 10));
    assert_eq!(got[1], gauge(&SAMPLES[1..], 300, 2));
    assert_eq!(latest, Some((545, 10.0)));
}

#[test]
fn a_bucket_of_several_samples_no_finer_tier_knows_refuses_the_series_naming_it() {
    // The 1m tier holds only the last five minutes (a backfill older than its window).
    let mut minutes = gauge(&SAMPLES, 60, 10);
    minutes[..5].fill(Bucket::EMPTY);
    let tiers = with_tier_index(vec![
        tier("1m", 60, minutes.split_off(5)),
        tier("5m", 300, gauge(&SAMPLES, 300, 2)),
    ]);
    // The 1m tier's cells start at 300.
    let tiers = {
        let mut tiers = tiers;
        for cell in &mut tiers[0].cells {
            cell.1 += 300;
        }
        tiers
    };
    let Plan::Refuse(why) = plan(SeriesKind::Gauge, SeriesKind::Counter, &tiers) else {
        panic!("converted")
    };
    assert!(
        why.starts_with(
            "the 5m bucket at 1970-01-01T00:00:00Z cannot be converted exactly: it holds 5 samples"
        ),
        "{why}"
    );
}

#[test]
fn a_single_sample_bucket_without_its_latest_sample_is_not_exact() {
    let mut minutes = gauge(&SAMPLES, 60, 10);
    minutes[3].last = None;
    let tiers = with_tier_index(vec![tier("1m", 60, minutes)]);
    let Plan::Refuse(why) = plan(SeriesKind::Gauge, SeriesKind::Counter, &tiers) else {
        panic!("converted")
    };
    assert!(why.contains("does not keep"), "{why}");
    assert!(why.contains("00:03:00Z"), "{why}");
}
