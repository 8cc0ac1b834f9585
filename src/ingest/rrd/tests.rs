//! The RRD reader on files built here in the LP64 little-endian layout (the one RRDtool
//! writes on x86-64; tests/it/migrate.rs reads files rrdtool itself wrote).

use super::{Consolidation, DsType, RrdError, RrdFile, FLOAT_COOKIE};

/// An archive to build: CF, pdp_cnt, xff, cur_row, rows of values (one per DS), in ring
/// order (slot 0 first).
struct Archive<'a> {
    cf: &'a str,
    pdp_count: u64,
    current: u64,
    rows: Vec<Vec<f64>>,
}

fn text(out: &mut Vec<u8>, s: &str, len: usize) {
    let mut field = s.as_bytes().to_vec();
    field.resize(len, 0);
    out.extend(field);
}

fn build(step: u64, last_up: i64, sources: &[(&str, &str)], archives: &[Archive]) -> Vec<u8> {
    let mut out = b"RRD\0".to_vec();
    text(&mut out, "0003", 5);
    out.resize(16, 0);
    out.extend(FLOAT_COOKIE.to_le_bytes());
    out.extend((sources.len() as u64).to_le_bytes());
    out.extend((archives.len() as u64).to_le_bytes());
    out.extend(step.to_le_bytes());
    out.resize(128, 0);
    for (name, kind) in sources {
        text(&mut out, name, 20);
        text(&mut out, kind, 20);
        out.resize(out.len() + 80, 0);
    }
    for a in archives {
        text(&mut out, a.cf, 24);
        out.extend((a.rows.len() as u64).to_le_bytes());
        out.extend(a.pdp_count.to_le_bytes());
        out.extend(0.5f64.to_le_bytes());
        out.resize(out.len() + 72, 0);
    }
    out.extend(last_up.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.resize(
        out.len() + sources.len() * 112 + archives.len() * sources.len() * 80,
        0,
    );
    for a in archives {
        out.extend(a.current.to_le_bytes());
    }
    for a in archives {
        for row in &a.rows {
            for v in row {
                out.extend(v.to_le_bytes());
            }
        }
    }
    out
}

fn sample() -> Vec<u8> {
    let nan = f64::NAN;
    build(
        60,
        1_000_030,
        &[("temp", "GAUGE"), ("octets", "COUNTER")],
        &[
            // Ring of 3, newest in slot 1: oldest-first is slots 2, 0, 1.
            Archive {
                cf: "AVERAGE",
                pdp_count: 1,
                current: 1,
                rows: vec![vec![2.0, 20.0], vec![3.0, nan], vec![1.0, 10.0]],
            },
            Archive {
                cf: "MAX",
                pdp_count: 1,
                current: 1,
                rows: vec![vec![2.5, 21.0], vec![3.5, nan], vec![1.5, 11.0]],
            },
            // Beside the AVERAGE of step 60: the rows' latest values (slots 2, 0, 1).
            Archive {
                cf: "LAST",
                pdp_count: 1,
                current: 1,
                rows: vec![vec![2.2, 1.0], vec![nan, nan], vec![1.2, 2.0]],
            },
            Archive {
                cf: "MIN",
                pdp_count: 5,
                current: 0,
                rows: vec![vec![0.0, 0.0]],
            },
            Archive {
                cf: "LAST",
                pdp_count: 60,
                current: 0,
                rows: vec![vec![7.0, 0.5], vec![nan, nan]],
            },
        ],
    )
}

#[test]
fn rows_come_back_oldest_first_stamped_by_their_interval() {
    let file = RrdFile::parse(&sample()).unwrap();
    assert_eq!((file.step, file.last_update), (60, 1_000_030));
    assert_eq!(file.data_sources[1].kind, DsType::Rate);
    let average = &file.rras[0];
    assert_eq!(average.consolidation, Some(Consolidation::Average));
    // The newest row ends at 1_000_020 (last update aligned down to the step): its interval
    // starts a step earlier.
    assert_eq!(
        average.points(0, 2),
        [(999_840, 1.0), (999_900, 2.0), (999_960, 3.0)]
    );
    // The unknown (NaN) row is left out.
    assert_eq!(average.points(1, 2), [(999_840, 10.0), (999_900, 20.0)]);
}

#[test]
fn a_row_is_one_sample_with_min_and_max_beside_and_rates_times_the_step() {
    let file = RrdFile::parse(&sample()).unwrap();
    let temp = file.archives(0);
    // Steps 60 (AVERAGE with MAX), 3600 (LAST alone); 300 has only MIN: not imported.
    let steps: Vec<i64> = temp.archives.iter().map(|a| a.step).collect();
    assert_eq!(steps, [60, 3600]);
    assert_eq!(temp.unused_archives, ["MIN:300s"]);
    let first = temp.archives[0].points[0].1;
    assert_eq!(
        (first.count, first.total, first.min, first.max),
        (1, 1.0, 1.0, 1.5)
    );
    let octets = file.archives(1);
    let first = octets.archives[0].points[0].1;
    assert_eq!((first.total, first.max), (600.0, 660.0));
    assert_eq!(octets.archives[1].points[0].1.total, 0.5 * 3600.0);
}

#[test]
fn a_gauges_last_rows_are_its_buckets_latest_samples_and_a_rates_keep_none() {
    use crate::bucket::Last;
    let file = RrdFile::parse(&sample()).unwrap();
    let lasts = |ds: usize, archive: usize| -> Vec<(i64, Option<Last>)> {
        (file.archives(ds).archives[archive].points.iter())
            .map(|(ts, b)| (*ts, b.last))
            .collect()
    };
    let at = |value: f64, ts: i64| Some(Last::new(value, ts));
    // Step 60: the LAST archive beside the AVERAGE one, each row's at its last second, the
    // unknown row unknown.
    assert_eq!(
        lasts(0, 0),
        [
            (999_840, at(1.2, 999_899)),
            (999_900, at(2.2, 999_959)),
            (999_960, None)
        ]
    );
    // Step 3600, LAST alone: its row is the latest, taken at the row's end (997_200) as the
    // bucket's last second.
    assert_eq!(lasts(0, 1), [(993_600, at(7.0, 997_199))]);
    // A rate's rows are rates: no raw counter value to keep.
    assert!(file
        .archives(1)
        .archives
        .iter()
        .all(|a| a.points.iter().all(|p| p.1.last.is_none())));
}

#[test]
fn truncated_foreign_and_other_platform_files_are_refused_with_a_reason() {
    let good = sample();
    let cut = RrdFile::parse(&good[..good.len() - 8]).unwrap_err();
    assert!(matches!(cut, RrdError::Truncated(_)), "{cut}");
    assert!(matches!(
        RrdFile::parse(&good[..100]),
        Err(RrdError::Truncated(_))
    ));
    let mut longer = good.clone();
    longer.push(0);
    assert!(matches!(RrdFile::parse(&longer), Err(RrdError::NotRrd(_))));
    assert!(matches!(
        RrdFile::parse(b"<rrd><version>0003</version>"),
        Err(RrdError::NotRrd(_))
    ));
    // A big-endian or 32-bit file: the float cookie is not where LP64 little-endian puts it.
    let mut other = good.clone();
    other[16..24].copy_from_slice(&FLOAT_COOKIE.to_be_bytes());
    let refusal = RrdFile::parse(&other).unwrap_err();
    assert_eq!(refusal.as_str(), "other_platform");
    assert!(refusal.to_string().contains("rrdtool dump"), "{refusal}");
    let mut kind = good.clone();
    kind[148..153].copy_from_slice(b"WEIRD");
    assert!(matches!(RrdFile::parse(&kind), Err(RrdError::NotRrd(_))));
    // Counts that would make sizes from nothing.
    let mut huge = good;
    huge[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(RrdFile::parse(&huge), Err(RrdError::NotRrd(_))));
}

#[test]
fn no_damage_or_cut_makes_the_reader_panic() {
    let good = sample();
    for len in 0..good.len() {
        assert!(RrdFile::parse(&good[..len]).is_err(), "cut at {len}");
    }
    for at in 0..good.len() {
        for bits in [0x01u8, 0x80, 0xff] {
            let mut bytes = good.clone();
            bytes[at] ^= bits;
            if let Ok(file) = RrdFile::parse(&bytes) {
                for ds in 0..file.data_sources.len() {
                    let _ = file.archives(ds);
                }
            }
        }
    }
}
