//! Tests of the step that keeps a render's grid within its point budget, and of the values
//! a path charges to its request's read budget.

use super::{charge_points, step_within};
use crate::query::PointGrid;
use crate::render::PathPattern;
use crate::ReadBudget;

#[test]
fn step_keeps_every_grid_within_the_budget() {
    for (from, until, resolution, max) in [
        (0, 3600, 60, 60),
        (0, 3600, 60, 7),
        (30, 3630, 60, 60),
        (1, 86_400 * 3 - 1, 86_400, 2),
        (-5_000, 5_000, 60, 1),
        (1_763_726_400 - 21_600, 1_763_726_400, 60, 1234),
    ] {
        let step = step_within(from, until, resolution, max).unwrap();
        assert_eq!(step % resolution, 0, "{from}..{until} at {resolution}");
        let points = PointGrid::span(from, until, i128::from(step)).1;
        assert!(
            points <= i128::from(max),
            "{from}..{until}: {points} > {max}"
        );
    }
    assert_eq!(step_within(0, 3600, 60, 1500).unwrap(), 60);
    assert_eq!(step_within(0, 3600, 60, 7).unwrap(), 540);
}

#[test]
fn an_absurd_range_is_refused_rather_than_overflowing() {
    assert!(step_within(i64::MIN / 2 - 10, i64::MAX / 2, 60, 1).is_err());
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
