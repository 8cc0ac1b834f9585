//! The whisper reader on files built here byte by byte: what it reads, and what it refuses.

use super::{Aggregation, WhisperError, WhisperFile, POINT_LEN};

/// A whisper file of `archives` `(step, points)`, `aggregation_type`, `xff`, with `points`
/// `(archive, ts, value)` written where whisper puts them (base: the first point's stamp).
fn build(
    aggregation_type: u32,
    xff: f32,
    archives: &[(u32, u32)],
    points: &[(usize, u32, f64)],
) -> Vec<u8> {
    let mut out = Vec::new();
    let max_retention = archives.last().map_or(0, |(s, p)| s * p);
    out.extend(aggregation_type.to_be_bytes());
    out.extend(max_retention.to_be_bytes());
    out.extend(xff.to_be_bytes());
    out.extend((archives.len() as u32).to_be_bytes());
    let mut offset = 16 + 12 * archives.len() as u32;
    let mut offsets = Vec::new();
    for &(step, n) in archives {
        out.extend(offset.to_be_bytes());
        out.extend(step.to_be_bytes());
        out.extend(n.to_be_bytes());
        offsets.push(offset);
        offset += n * POINT_LEN as u32;
    }
    out.resize(offset as usize, 0);
    let mut bases = vec![None; archives.len()];
    for &(a, ts, v) in points {
        let (step, n) = archives[a];
        let base = *bases[a].get_or_insert(ts);
        let slot = ((i64::from(ts) - i64::from(base)) / i64::from(step)).rem_euclid(i64::from(n));
        let at = offsets[a] as usize + slot as usize * POINT_LEN;
        out[at..at + 4].copy_from_slice(&ts.to_be_bytes());
        out[at + 4..at + 12].copy_from_slice(&v.to_be_bytes());
    }
    out
}

#[test]
fn points_come_back_in_time_order_and_stale_slots_are_left_out() {
    let now = 1_000_020;
    // 60 s x 5 slots: the ring came round, so 999_720 (written first, at base) was
    // overwritten by 1_000_020; slot 2 still holds 999_540 from a round before, stale.
    let bytes = build(
        1,
        0.5,
        &[(60, 5), (300, 10)],
        &[
            (0, 999_720, 1.0),
            (0, 999_540, 7.0),
            (0, 999_780, 2.0),
            (0, 999_900, 4.0),
            (0, 1_000_020, 6.0),
            (1, 999_600, 9.0),
        ],
    );
    let file = WhisperFile::parse(bytes).unwrap();
    assert_eq!(file.header.aggregation, Aggregation::Average);
    assert_eq!(file.header.x_files_factor, 0.5);
    // Kept: now - retention < ts <= now, as whisper's fetch.
    assert_eq!(
        file.points(0, now),
        [(999_780, 2.0), (999_900, 4.0), (1_000_020, 6.0)]
    );
    assert_eq!(file.points(1, now), [(999_600, 9.0)]);
    let read = file.archives(now);
    assert_eq!(read.points, 4);
    assert_eq!(read.span, Some((999_600, 1_000_020)));
}

#[test]
fn truncated_foreign_and_inconsistent_files_are_refused_with_a_reason() {
    let good = build(1, 0.5, &[(60, 5), (300, 10)], &[]);
    assert!(WhisperFile::parse(good.clone()).is_ok());
    let cut = good[..good.len() - 1].to_vec();
    assert!(matches!(
        WhisperFile::parse(cut),
        Err(WhisperError::Truncated(_))
    ));
    assert!(matches!(
        WhisperFile::parse(good[..10].to_vec()),
        Err(WhisperError::Truncated(_))
    ));
    let mut longer = good.clone();
    longer.push(0);
    assert!(matches!(
        WhisperFile::parse(longer),
        Err(WhisperError::NotWhisper(_))
    ));
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10".to_vec();
    assert!(matches!(
        WhisperFile::parse(png),
        Err(WhisperError::NotWhisper(_))
    ));
    let mut method = good.clone();
    method[3] = 9;
    let refusal = WhisperFile::parse(method).unwrap_err();
    assert_eq!(refusal.as_str(), "not_whisper");
    assert!(
        refusal.to_string().contains("aggregation type 9"),
        "{refusal}"
    );
    // A coarser archive whose step is no multiple of the finer one's.
    let odd = build(1, 0.5, &[(60, 5), (90, 10)], &[]);
    assert!(WhisperFile::parse(odd).is_err());
}

#[test]
fn aggregation_follows_whisper_and_its_x_files_factor() {
    let known = [1.0, -4.0, 3.0];
    assert_eq!(Aggregation::Average.aggregate(&known, 4, 0.5), Some(0.0));
    assert_eq!(Aggregation::Sum.aggregate(&known, 4, 0.5), Some(0.0));
    assert_eq!(Aggregation::Last.aggregate(&known, 4, 0.5), Some(3.0));
    assert_eq!(Aggregation::Max.aggregate(&known, 4, 0.5), Some(3.0));
    assert_eq!(Aggregation::Min.aggregate(&known, 4, 0.5), Some(-4.0));
    assert_eq!(Aggregation::AvgZero.aggregate(&known, 4, 0.5), Some(0.0));
    assert_eq!(Aggregation::AbsMax.aggregate(&known, 4, 0.5), Some(-4.0));
    assert_eq!(Aggregation::AbsMin.aggregate(&known, 4, 0.5), Some(1.0));
    // 3 of 4 known: enough for 0.75, not for 0.76.
    assert!(Aggregation::Average.aggregate(&known, 4, 0.75).is_some());
    assert_eq!(Aggregation::Average.aggregate(&known, 4, 0.76), None);
}

#[test]
fn no_damage_or_cut_makes_the_reader_panic() {
    let good = build(
        4,
        0.5,
        &[(60, 4), (120, 6)],
        &[(0, 1_000_020, 1.0), (0, 999_960, 2.0), (1, 999_840, 3.0)],
    );
    for len in 0..good.len() {
        assert!(
            WhisperFile::parse(good[..len].to_vec()).is_err(),
            "cut at {len}"
        );
    }
    for at in 0..good.len() {
        for bits in [0x01u8, 0x80, 0xff] {
            let mut bytes = good.clone();
            bytes[at] ^= bits;
            if let Ok(file) = WhisperFile::parse(bytes) {
                for now in [0, 1_000_020, i64::from(u32::MAX) + 7] {
                    let _ = file.archives(now);
                }
            }
        }
    }
}

#[test]
fn an_average_file_fills_each_tier_from_its_finest_archive_as_whisper_rolls_up() {
    use crate::ingest::archive::{fill_tier, propagate};
    // 1m for 2 h, 5m for 4 h, 1h for a day; xFilesFactor 0.3: a 5m interval needs 2 of its 5
    // minutes, an hour 4 of its 12 five-minute points.
    let t: u32 = 1_000_800; // an hour boundary: now
    let h = t - 3600; // the hour the 1m archive covers whole
    let bytes = build(
        1,
        0.3,
        &[(60, 120), (300, 48), (3600, 24)],
        &[
            // h: five minutes known, mean 3.
            (0, h, 1.0),
            (0, h + 60, 2.0),
            (0, h + 120, 3.0),
            (0, h + 180, 4.0),
            (0, h + 240, 5.0),
            // h+300: three, mean 20.
            (0, h + 300, 10.0),
            (0, h + 360, 20.0),
            (0, h + 420, 30.0),
            // h+600: one minute, under the xFilesFactor; the 5m archive holds 50 there.
            (0, h + 600, 100.0),
            (1, h + 600, 50.0),
            // h+900: no minute; the 5m archive holds 7 there.
            (1, h + 900, 7.0),
            // h+1200: one minute and no 5m point: empty.
            (0, h + 1200, 1000.0),
            // Written into the coarser archives where the 1m archive has enough: not taken.
            (1, h, 99.0),
            (2, h, 999.0),
            // Before the 1m archive's coverage: the 5m archive's own point.
            (1, h - 3900, 42.0),
        ],
    );
    let file = WhisperFile::parse(bytes).unwrap();
    let now = i64::from(t);
    let levels = propagate(file.archives(now).archives, &file.fold());
    let tier = |resolution: i64| {
        let fill = fill_tier(resolution, (0, now), &levels, &file.fold());
        let buckets: Vec<(i64, u64, f64, f64, f64)> = (fill.buckets.iter())
            .map(|(ts, b)| (*ts - i64::from(h), b.count, b.total, b.min, b.max))
            .collect();
        (buckets, fill.folded_away)
    };
    // 5m: the minutes' count, sum, min and max where they pass; the 5m archive's own point
    // where they do not or there are none.
    let (five, emptied) = tier(300);
    assert_eq!(
        five,
        [
            (-3900, 1, 42.0, 42.0, 42.0),
            (0, 5, 15.0, 1.0, 5.0),
            (300, 3, 60.0, 10.0, 30.0),
            (600, 1, 50.0, 50.0, 50.0),
            (900, 1, 7.0, 7.0, 7.0),
        ]
    );
    assert_eq!(emptied, 1, "h+1200 is left empty by the xFilesFactor");
    // 1h: whisper's average of the four 5m values (3, 20, 50, 7: 20), each one sample, with
    // the min and max of the minutes under them (1 and 50), not the 999 written into the 1h
    // archive. The hour before: its one 5m point (42) is under the xFilesFactor of 4 of 12.
    let (hour, emptied) = tier(3600);
    assert_eq!(hour, [(0, 4, 80.0, 1.0, 50.0)]);
    assert_eq!(emptied, 1);
}

#[test]
fn points_after_now_and_the_minutes_they_wrote_over_are_not_rolled_up() {
    use crate::ingest::archive::{fill_tier, propagate};
    // 1m x 10 and 5m x 10, `average`, xFilesFactor 0.5; now is 3 minutes into a 5m interval.
    // After the ten minutes up to now, a clock ahead wrote 1_000_440 and 1_000_560, over
    // 999_840 and 999_960.
    let now: u32 = 1_000_380;
    let mut points: Vec<(usize, u32, f64)> = (0..10)
        .map(|k| (0, 999_840 + 60 * k, f64::from(k + 1)))
        .collect();
    points.extend([
        (0, 1_000_440, 100.0),
        (0, 1_000_560, 200.0),
        // What whisper rolled up into the 5m archive when it held those intervals' minutes.
        (1, 999_900, 55.0),
        (1, 1_000_200, 77.0),
    ]);
    let file = WhisperFile::parse(build(1, 0.5, &[(60, 10), (300, 10)], &points)).unwrap();
    let now = i64::from(now);
    let minutes: Vec<i64> = file.points(0, now).iter().map(|p| p.0).collect();
    let held: Vec<i64> = (1..10)
        .map(|k| 999_840 + 60 * k)
        .filter(|&t| t != 999_960)
        .collect();
    assert_eq!(minutes, held);
    let read = file.archives(now);
    assert_eq!(
        read.archives[0].not_held,
        [999_840, 999_960, 1_000_440, 1_000_560]
    );
    assert!(read.archives[1].not_held.is_empty());
    // 999_900 holds four of its five minutes, 1_000_200 the four up to now of its five: both
    // over the xFilesFactor, yet both take the 5m archive's point, as graphite-web shows it.
    let levels = propagate(read.archives, &file.fold());
    let fill = fill_tier(300, (0, now), &levels, &file.fold());
    let got: Vec<(i64, u64, f64)> = (fill.buckets.iter())
        .map(|(t, b)| (*t, b.count, b.total))
        .collect();
    assert_eq!(got, [(999_900, 1, 55.0), (1_000_200, 1, 77.0)]);
    assert_eq!(fill.folded_away, 0);
}

#[test]
fn points_that_are_their_intervals_last_sample_keep_it_as_the_buckets_latest() {
    use crate::bucket::Last;
    use crate::ingest::archive::{fill_tier, propagate};
    // 1m for 2 h, 5m for 4 h, 1h for a day, xFilesFactor 0.3; two minutes known in each of
    // the first four 5m intervals of the hour h (enough for whisper's 5m rollup, and four
    // 5m points enough for its hourly one), and a 5m point before the minutes' coverage.
    let t: u32 = 1_000_800;
    let h = t - 3600;
    let minutes: [(i64, f64); 8] = [
        (0, 1.0),
        (240, 5.0),
        (300, 6.0),
        (360, 7.0),
        (600, 8.0),
        (840, 9.0),
        (900, 10.0),
        (960, 11.0),
    ];
    let mut points: Vec<(usize, u32, f64)> = (minutes.iter())
        .map(|&(dt, v)| (0, h + dt as u32, v))
        .collect();
    points.push((1, h - 3900, 42.0));
    let at = |dt: i64, value: f64| Some(Last::new(value, i64::from(h) + dt));
    // Per method (whisper's type), the latest samples of the 5m tier at h - 3900, h, h + 300,
    // h + 600, h + 900, and of the 1h tier at h.
    let last_5m = [at(240, 5.0), at(360, 7.0), at(840, 9.0), at(960, 11.0)];
    for (method, own_5m, rolled_5m, hour) in [
        // average: rollups of the minutes keep the latest minute; the 5m archive's own
        // point is an average.
        (1, None, last_5m.map(Some), at(960, 11.0)),
        // last: every point is its interval's last sample, the own point at its stamp.
        (3, at(-3900, 42.0), last_5m.map(Some), at(960, 11.0)),
        // max: a rollup is the largest minute, not a sample.
        (4, None, [None; 4], None),
    ] {
        let bytes = build(method, 0.3, &[(60, 120), (300, 48), (3600, 24)], &points);
        let file = WhisperFile::parse(bytes).unwrap();
        let now = i64::from(t);
        let levels = propagate(file.archives(now).archives, &file.fold());
        let lasts = |resolution: i64| -> Vec<(i64, Option<Last>)> {
            let fill = fill_tier(resolution, (0, now), &levels, &file.fold());
            (fill.buckets.iter())
                .map(|(ts, b)| (*ts - i64::from(h), b.last))
                .collect()
        };
        // The 1m tier: every minute is the last sample written into its slot.
        let want: Vec<_> = (minutes.iter()).map(|&(dt, v)| (dt, at(dt, v))).collect();
        assert_eq!(lasts(60), want, "type {method}: 1m");
        let mut want = vec![(-3900, own_5m)];
        want.extend(
            [0, 300, 600, 900]
                .into_iter()
                .zip(rolled_5m.map(|l| l.flatten())),
        );
        assert_eq!(lasts(300), want, "type {method}: 5m");
        assert_eq!(lasts(3600), [(0, hour)], "type {method}: 1h");
    }
}
