//! Tests of the grid a render path is read on (whisper's archive choice and point window,
//! with the answers graphite-web 1.1.8 gives), and of the values a path charges to its
//! request's read budget.

use super::{charge_points, RenderGrid};
use crate::config::TiersConfig;
use crate::read::budget::ReadBudget;
use crate::render::PathPattern;

/// 2025-11-21T12:00:00Z, a multiple of every default tier's period.
const NOW: i64 = 1_763_726_400;

fn grid(from: i64, until: i64) -> Option<(String, i64, i64, u64)> {
    let grid = RenderGrid::choose(&TiersConfig::default(), from, until, NOW).unwrap()?;
    Some((grid.tier, grid.resolution, grid.first, grid.points))
}

#[test]
fn the_finest_tier_holding_from_whatever_the_point_count() {
    // Grafana's "Last 7 days": graphite-web reads the 5-minute archive, 2016 points after
    // `from` up to and including `now` (then consolidates pairs for maxDataPoints=1500).
    let week = grid(NOW - 7 * 86_400, NOW).unwrap();
    assert_eq!(week, ("5m".into(), 300, NOW - 7 * 86_400 + 300, 2016));
    // "Last 6 hours": 360 minutes (four into one for maxDataPoints=100).
    let six = grid(NOW - 6 * 3600, NOW).unwrap();
    assert_eq!(six, ("1m".into(), 60, NOW - 6 * 3600 + 60, 360));
    // Past the 1m tier's window (48 h and the current period), the 5m tier.
    assert_eq!(grid(NOW - 3 * 86_400, NOW).unwrap().0, "5m");
    assert_eq!(grid(NOW - 30 * 86_400, NOW).unwrap().0, "1h");
}

#[test]
fn the_tier_is_chosen_by_its_retention_as_whisper_chooses_the_archive() {
    // Five hours into a 6 h period of the 1m tier, its window (whole periods) still holds
    // what is 52 h old, but its 48 h retention does not: whisper reads the 5m archive.
    let now = NOW + 5 * 3600;
    let at = |from: i64| {
        RenderGrid::choose(&TiersConfig::default(), from, now, now)
            .unwrap()
            .unwrap()
            .tier
    };
    assert!(TiersConfig::default().tiers[0].window_start(now) <= now - 52 * 3600);
    assert_eq!(at(now - 52 * 3600), "5m");
    assert_eq!(at(now - 48 * 3600 - 1), "5m");
    assert_eq!(at(now - 48 * 3600), "1m");
}

#[test]
fn points_after_from_up_to_and_including_until() {
    // On minute boundaries: the minute after `from` first, `until`'s own minute last.
    let (from, until) = (NOW - 3600, NOW - 1800);
    assert_eq!(grid(from, until).unwrap().2..=until, from + 60..=until);
    assert_eq!(grid(from, until).unwrap().3, 30);
    // Off the boundaries: the first stamp after `from`, the bucket holding `until`.
    let g = grid(from + 30, until + 30).unwrap();
    assert_eq!((g.2, g.3), (from + 60, 30));
    // Within one bucket: whisper's "always include the next point".
    let g = grid(from + 10, from + 20).unwrap();
    assert_eq!((g.2, g.3), (from + 60, 1));
    // `until` after the clock is the clock.
    let g = grid(NOW - 600, NOW + 3600).unwrap();
    assert_eq!((g.2, g.3), (NOW - 540, 10));
}

#[test]
fn nothing_outside_every_window() {
    assert_eq!(grid(NOW + 60, NOW + 120), None);
    assert_eq!(grid(NOW - 20 * 365 * 86_400, NOW - 19 * 365 * 86_400), None);
    // A `from` older than every tier reads the coarsest from its window on.
    let old = grid(NOW - 20 * 365 * 86_400, NOW).unwrap();
    let window = TiersConfig::default().tiers[3].window_start(NOW);
    assert_eq!(old.0, "1d");
    assert_eq!(old.2, window + 86_400);
}

#[test]
fn a_path_reading_past_the_budget_is_refused() {
    let all = PathPattern::parse("*").unwrap();
    let budget = ReadBudget::new(10_000_000);
    assert!(charge_points(&budget, &all, 10_000, 1000).is_ok());
    assert!(charge_points(&budget, &all, 0, 0).is_ok());
    let err = charge_points(&budget, &all, 1, 1000).unwrap_err();
    assert!(
        err.to_string()
            .contains("\"*\" matches 1 series x 1000 points = 1000 values on top of the 10000000"),
        "{err}"
    );
}
