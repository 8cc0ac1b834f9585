//! Tests for recording a tier's period change, and for the lookup across it.

use super::*;
use crate::config::{check_given, differences};
use crate::time::{place, Span};

const HOUR: i64 = 3_600;
const DAY: i64 = 24 * HOUR;

/// 2025-11-21T12:00:00Z.
const NOW: Timestamp = 1_763_726_400;

fn with_periods(periods: [i64; 4]) -> TiersConfig {
    let mut config = TiersConfig::default();
    for (tier, period) in config.tiers.iter_mut().zip(periods) {
        tier.period = Span::from_secs(period as u64);
    }
    config
}

fn shipped() -> TiersConfig {
    with_periods([6 * HOUR, DAY, 10 * DAY, 73 * DAY])
}

fn shorter() -> TiersConfig {
    with_periods([HOUR, 6 * HOUR, 2 * DAY, 16 * DAY])
}

#[test]
fn the_boundary_is_the_end_of_the_newest_file_or_of_the_period_samples_may_reach() {
    let old = &shipped().tiers[0];
    // Files up to the period after the current one (created ahead): its end.
    let current = NOW - NOW.rem_euclid(6 * HOUR);
    assert_eq!(
        boundary(old, Some(current + 6 * HOUR), NOW),
        current + 12 * HOUR
    );
    // No file after now: the end of the period that holds the latest acceptable sample.
    assert_eq!(boundary(old, Some(current - DAY), NOW), current + 6 * HOUR);
    assert_eq!(boundary(old, None, current + 6 * HOUR), current + 12 * HOUR);
}

#[test]
fn a_changed_period_records_the_old_one_up_to_the_boundary_and_passes_the_check() {
    let stored = shipped();
    let mut given = shorter();
    let recorded = record_period_changes(&stored, &mut given, &mut |_, old| {
        Ok(boundary(old, None, NOW))
    })
    .unwrap();
    assert_eq!(recorded.len(), 4);
    for (tier, old) in given.tiers.iter().zip(&stored.tiers) {
        assert_eq!(
            tier.earlier_periods,
            [PeriodChange {
                until: boundary(old, None, NOW),
                period: old.period,
            }],
            "{}",
            tier.name
        );
    }
    given.validate().unwrap();
    check_given(std::path::Path::new("tiers.toml"), &stored, &given).unwrap();
    // The directory's file round-trips the ranges.
    let text = given.to_toml();
    assert!(text.contains("earlier_periods = [{ until = "), "{text}");
    assert_eq!(TiersConfig::from_toml_str(&text, "stored").unwrap(), given);
    // The layout fingerprint the journals record is the old one: no recorded placement
    // changes meaning.
    assert_eq!(given.layout_fingerprint(), stored.layout_fingerprint());

    // Reopened with the shorter periods again: the ranges are kept, nothing more recorded.
    let mut again = shorter();
    let more = record_period_changes(&given, &mut again, &mut |_, _| panic!("no change")).unwrap();
    assert!(more.is_empty());
    assert_eq!(again, given);
    // Reopened with the directory's own file (which holds them): the same.
    let mut own = TiersConfig::from_toml_str(&text, "own").unwrap();
    assert!(
        record_period_changes(&given, &mut own, &mut |_, _| panic!())
            .unwrap()
            .is_empty()
    );
    assert_eq!(own, given);

    // A second change (back to the shipped periods) adds a second range after the first.
    let mut back = shipped();
    let later = NOW + 30 * DAY;
    let second = record_period_changes(&given, &mut back, &mut |_, old| {
        Ok(boundary(old, None, later))
    })
    .unwrap();
    assert_eq!(second.len(), 4);
    back.validate().unwrap();
    check_given(std::path::Path::new("tiers.toml"), &given, &back).unwrap();
    let minute = &back.tiers[0];
    assert_eq!(minute.earlier_periods.len(), 2);
    let [first, then] = [minute.earlier_periods[0], minute.earlier_periods[1]];
    assert_eq!(
        (first.period, then.period),
        (Span::from_secs(6 * 3_600), Span::from_secs(3_600))
    );
    // Each time finds its file by the range it falls in.
    assert_eq!(
        place(0, minute, first.until - 1).period_start,
        first.until - 6 * HOUR
    );
    assert_eq!(place(0, minute, first.until).period_start, first.until);
    assert_eq!(
        place(0, minute, first.until + HOUR + 5).period_start,
        first.until + HOUR
    );
    assert_eq!(
        place(0, minute, then.until - 1).period_start,
        then.until - HOUR
    );
    assert_eq!(
        place(0, minute, then.until + 7 * HOUR).period_start,
        then.until + 6 * HOUR
    );
}

#[test]
fn a_changed_resolution_or_other_earlier_periods_stay_refused() {
    let stored = {
        let mut config = shorter();
        record_period_changes(&shipped(), &mut config, &mut |_, old| {
            Ok(boundary(old, None, NOW))
        })
        .unwrap();
        config
    };
    // A resolution change is not a period change, even with the period changed too.
    let mut given = stored.clone();
    given.tiers[0].earlier_periods.clear();
    given.tiers[0].resolution = Span::from_secs(120);
    given.tiers[0].period = Span::from_secs(2 * HOUR as u64);
    assert!(
        record_period_changes(&stored, &mut given, &mut |_, _| panic!())
            .unwrap()
            .is_empty()
    );
    let err = check_given(std::path::Path::new("tiers.toml"), &stored, &given).unwrap_err();
    assert!(
        err.to_string()
            .contains(r#"tier "1m" resolution: 1m in the directory, 2m given"#),
        "{err}"
    );
    // Earlier periods other than the directory's.
    let mut given = stored.clone();
    given.tiers[1].earlier_periods[0].until += DAY;
    let err = check_given(std::path::Path::new("tiers.toml"), &stored, &given).unwrap_err();
    assert!(
        err.to_string().contains(r#"tier "5m" earlier_periods"#),
        "{err}"
    );
    // The raw tier's period.
    let mut raw = stored.clone();
    raw.raw = Some(crate::config::RawTierSpec {
        name: "raw".into(),
        period: Span::from_secs(DAY as u64),
        retention: Span::from_secs(7 * DAY as u64),
        create_ahead: 1,
        dedupe_unchanged: false,
    });
    let mut other = raw.clone();
    other.raw.as_mut().unwrap().period = Span::from_secs(6 * HOUR as u64);
    assert!(differences(&raw, &other).iter().any(|d| d.layout));
}

#[test]
fn earlier_periods_off_their_grid_or_out_of_order_are_refused() {
    let mut config = shorter();
    let tier = &mut config.tiers[0];
    tier.earlier_periods = vec![PeriodChange {
        until: NOW + 60,
        period: Span::from_secs(6 * HOUR as u64),
    }];
    let err = config.validate().unwrap_err();
    assert!(err.to_string().contains("earlier_periods"), "{err}");
    let tier = &mut config.tiers[0];
    let until = NOW - NOW.rem_euclid(6 * HOUR);
    tier.earlier_periods = vec![
        PeriodChange {
            until,
            period: Span::from_secs(6 * HOUR as u64),
        },
        PeriodChange {
            until: until - 2 * HOUR,
            period: Span::from_secs(HOUR as u64),
        },
    ];
    assert!(config.validate().is_err());
    config.tiers[0].earlier_periods.pop();
    config.validate().unwrap();
    // A raw tier has none.
    let text =
        "[[tier]]\nname = \"1m\"\nresolution = \"1m\"\nperiod = \"1h\"\nretention = \"1d\"\n\
                [[tier]]\nname = \"raw\"\nkind = \"raw\"\nperiod = \"1d\"\nretention = \"7d\"\n\
                earlier_periods = [{ until = 0, period = \"6h\" }]\n";
    let err = TiersConfig::from_toml_str(text, "t.toml").unwrap_err();
    assert!(
        err.to_string()
            .contains("raw tier's period cannot be changed"),
        "{err}"
    );
}

#[test]
fn without_a_change_the_lookup_is_the_epoch_grid() {
    let config = shipped();
    for tier in &config.tiers {
        for ts in [NOW, NOW - 1, -1, 0, 1] {
            let p = place(0, tier, ts);
            assert_eq!(p.period_start, crate::time::align_down(ts, tier.period));
            assert_eq!(
                tier.period_end(p.period_start),
                p.period_start + tier.period.secs() as i64
            );
        }
    }
}
