//! Tests for durations and the timestamp lookup.

use proptest::prelude::*;

use super::*;
use crate::config::{TierSpec, TiersConfig};

fn tier(name: &str, resolution: u64, period: u64) -> TierSpec {
    TierSpec {
        name: name.to_owned(),
        resolution: Span::from_secs(resolution),
        period: Span::from_secs(period),
        retention: Span::from_secs(period * 2),
        create_ahead: 1,
        earlier_periods: Vec::new(),
    }
}

#[test]
fn span_parses_each_unit() {
    let cases = [
        ("0s", 0),
        ("10s", 10),
        ("1m", 60),
        ("5m", 300),
        ("1h", 3_600),
        ("48h", 172_800),
        ("1d", 86_400),
        ("14d", 1_209_600),
        ("1825d", 157_680_000),
        ("2w", 1_209_600),
    ];
    for (text, secs) in cases {
        assert_eq!(Span::parse(text), Ok(Span::from_secs(secs)), "{text}");
        assert_eq!(text.parse::<Span>(), Ok(Span::from_secs(secs)), "{text}");
    }
}

#[test]
fn span_displays_in_largest_even_unit() {
    let cases = [
        (0, "0s"),
        (1, "1s"),
        (90, "90s"),
        (60, "1m"),
        (300, "5m"),
        (3_600, "1h"),
        (5_400, "90m"),
        (86_400, "1d"),
        (172_800, "2d"),
        (1_209_600, "14d"),
        (90_000, "25h"),
    ];
    for (secs, text) in cases {
        assert_eq!(Span::from_secs(secs).to_string(), text, "{secs}");
    }
}

#[test]
fn span_display_parses_back() {
    for secs in [
        0,
        1,
        59,
        60,
        61,
        3_599,
        3_600,
        86_399,
        86_400,
        604_800,
        157_680_000,
    ] {
        let span = Span::from_secs(secs);
        assert_eq!(Span::parse(&span.to_string()), Ok(span));
    }
    // Weeks parse but display in days.
    assert_eq!(
        Span::parse("2w").map(|s| s.to_string()),
        Ok("14d".to_owned())
    );
}

#[test]
fn span_refuses_malformed_text() {
    for text in [
        "", "s", "5", "5x", "5M", "5 m", " 5m", "5m ", "+5m", "-5m", "1.5h", "1h30m", "1e3s", "५m",
        "m5",
    ] {
        let err = Span::parse(text).expect_err(text);
        assert!(!err.is_empty(), "{text}");
    }
    assert!(Span::parse("5x").unwrap_err().contains("unit"));
}

#[test]
fn span_refuses_overflow() {
    assert!(Span::parse("99999999999999999999s")
        .unwrap_err()
        .contains("too large"));
    // Fits in a u64 of seconds but not in a timestamp.
    assert!(Span::parse("9223372036854775808s")
        .unwrap_err()
        .contains("too large"));
    assert!(Span::parse("9223372036854775807s").is_ok());
    assert!(Span::parse("106751991167301d").is_err());
}

#[test]
fn span_serde_uses_the_display_string() {
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Holder {
        span: Span,
    }
    let holder = Holder {
        span: Span::from_secs(172_800),
    };
    let text = toml::to_string(&holder).unwrap();
    assert_eq!(text.trim(), r#"span = "2d""#);
    assert_eq!(toml::from_str::<Holder>(&text).unwrap(), holder);
    assert_eq!(
        toml::from_str::<Holder>(r#"span = "2w""#)
            .unwrap()
            .span
            .secs(),
        1_209_600
    );
    let err = toml::from_str::<Holder>(r#"span = "2 w""#).unwrap_err();
    assert!(err.message().contains("not a duration"), "{err}");
}

#[test]
fn align_down_rounds_towards_the_past() {
    let minute = Span::from_secs(60);
    assert_eq!(align_down(0, minute), 0);
    assert_eq!(align_down(59, minute), 0);
    assert_eq!(align_down(60, minute), 60);
    assert_eq!(align_down(-1, minute), -60);
    assert_eq!(align_down(-60, minute), -60);
    assert_eq!(align_down(-61, minute), -120);
}

#[test]
fn locate_places_a_sample_in_every_tier() {
    let tiers = TiersConfig::default().tiers;
    // 2026-11-21T10:42:30Z
    let ts = 1_795_257_750;
    let placements = locate(&tiers, ts);
    assert_eq!(
        placements,
        vec![
            // 6h file from 06:00 on 2026-11-21: 4h42m.
            Placement {
                tier: 0,
                period_start: 1_795_240_800,
                bucket: 282
            },
            // Day file of 2026-11-21: 10h40m = 128 five-minute buckets.
            Placement {
                tier: 1,
                period_start: 1_795_219_200,
                bucket: 128
            },
            // 10d file from 2026-11-13: 8 days + 10 hours.
            Placement {
                tier: 2,
                period_start: 1_794_528_000,
                bucket: 202
            },
            // 73d file from 2026-10-06: 46 days.
            Placement {
                tier: 3,
                period_start: 1_791_244_800,
                bucket: 46
            },
        ]
    );
    for placement in &placements {
        assert_eq!(
            place(placement.tier, &tiers[placement.tier], ts),
            *placement
        );
    }
}

#[test]
fn locate_handles_the_epoch_and_before() {
    let tiers = TiersConfig::default().tiers;
    assert!(locate(&tiers, 0)
        .iter()
        .all(|p| p.period_start == 0 && p.bucket == 0));
    let before = locate(&tiers, -1);
    for (placement, tier) in before.iter().zip(&tiers) {
        assert_eq!(placement.period_start, -(tier.period.secs() as i64));
        assert_eq!(placement.bucket, tier.buckets_per_period() - 1);
    }
}

#[test]
fn locate_works_for_any_number_of_tiers() {
    assert!(locate(&[], 12_345).is_empty());
    let tiers = [tier("10s", 10, 6 * 3_600), tier("1m", 60, 86_400)];
    let placements = locate(&tiers, 21_600 + 25);
    assert_eq!(
        placements[0],
        Placement {
            tier: 0,
            period_start: 21_600,
            bucket: 2
        }
    );
    assert_eq!(
        placements[1],
        Placement {
            tier: 1,
            period_start: 0,
            bucket: 360
        }
    );
}

#[test]
fn format_ts_is_rfc3339_utc() {
    assert_eq!(format_ts(0), "1970-01-01T00:00:00Z");
    assert_eq!(format_ts(-1), "1969-12-31T23:59:59Z");
    assert_eq!(format_ts(1_795_219_200), "2026-11-21T00:00:00Z");
    assert_eq!(format_ts(i64::MAX), i64::MAX.to_string());
}

/// One row of the boundary snapshot.
#[derive(serde::Serialize)]
struct Row {
    label: &'static str,
    ts: Timestamp,
    utc: String,
    placements: Vec<ShownPlacement>,
}

#[derive(serde::Serialize)]
struct ShownPlacement {
    tier: String,
    period_start: Timestamp,
    period_start_utc: String,
    bucket: u32,
}

#[test]
fn default_tier_placements_around_boundaries() {
    let tiers = TiersConfig::default().tiers;
    let table: [(&str, Timestamp); 24] = [
        ("epoch", 0),
        ("second before the epoch", -1),
        ("second before a minute boundary", 1_795_257_719),
        ("minute boundary 10:42", 1_795_257_720),
        ("second before an hour boundary", 1_795_258_799),
        ("hour boundary 11:00", 1_795_258_800),
        ("second before a day boundary", 1_795_219_199),
        ("day boundary 2026-11-21", 1_795_219_200),
        ("second before a 6h period boundary", 1_795_240_799),
        ("6h period boundary (2026-11-21 06:00)", 1_795_240_800),
        ("second before a 10d period boundary", 1_794_527_999),
        ("10d period boundary (2026-11-13)", 1_794_528_000),
        ("last second of the 10d period", 1_795_391_999),
        ("second before a 73d period boundary", 1_791_244_799),
        ("73d period boundary (2026-10-06)", 1_791_244_800),
        ("last second of 2025", 1_767_225_599),
        ("first second of 2026", 1_767_225_600),
        ("second before the leap day", 1_709_164_799),
        ("leap day 2024-02-29 start", 1_709_164_800),
        ("leap day 2024-02-29 12:34:56", 1_709_210_096),
        ("last second of the leap day", 1_709_251_199),
        ("2024-03-01 start", 1_709_251_200),
        ("last second of 2026-11-21", 1_795_305_599),
        ("a second in 1960", -315_619_199),
    ];
    let rows: Vec<Row> = table
        .iter()
        .map(|&(label, ts)| Row {
            label,
            ts,
            utc: format_ts(ts),
            placements: locate(&tiers, ts)
                .into_iter()
                .map(|p| ShownPlacement {
                    tier: tiers[p.tier].name.clone(),
                    period_start: p.period_start,
                    period_start_utc: format_ts(p.period_start),
                    bucket: p.bucket,
                })
                .collect(),
        })
        .collect();
    insta::with_settings!({
        description => "time::locate over TiersConfig::default().tiers (1m/6h, 5m/1d, 1h/10d, \
                        1d/73d) for timestamps on and one second before minute, hour, day, \
                        6h/10d/73d period and year boundaries, the epoch and the 2024 leap day; \
                        each row gives the input ts, its RFC 3339 form, and per tier the \
                        period_start (also as RFC 3339) and the bucket index",
        omit_expression => true,
    }, {
        insta::assert_json_snapshot!("default_tier_placements", rows);
    });
}

proptest! {
    #[test]
    fn placement_invariants_hold_for_default_tiers(ts in -(1i64 << 40)..(1i64 << 40)) {
        let tiers = TiersConfig::default().tiers;
        for (index, tier) in tiers.iter().enumerate() {
            let placement = place(index, tier, ts);
            let period = tier.period.secs() as i64;
            let resolution = tier.resolution.secs() as i64;
            prop_assert_eq!(placement.tier, index);
            prop_assert!(placement.period_start <= ts);
            prop_assert!(ts < placement.period_start + period);
            prop_assert_eq!(placement.period_start.rem_euclid(period), 0);
            prop_assert!(placement.bucket < tier.buckets_per_period());
            let bucket_start = placement.period_start + i64::from(placement.bucket) * resolution;
            prop_assert!(bucket_start <= ts);
            prop_assert!(ts < bucket_start + resolution);
            prop_assert_eq!(bucket_start, align_down(ts, tier.resolution));
        }
        prop_assert_eq!(
            locate(&tiers, ts),
            tiers.iter().enumerate().map(|(i, t)| place(i, t, ts)).collect::<Vec<_>>()
        );
    }
}
