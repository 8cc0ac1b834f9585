//! The dispatch table against itself and the evaluator: every listed function parses its
//! signature, and names in errors are graphite-web's; arguments read as graphite-web's
//! validation leaves them.

use std::cell::Cell;

use super::table::{self, FUNCTIONS};
use super::Args;
use crate::render::expr::{parse_target, Expr};

#[test]
fn every_signature_parses_and_names_are_unique() {
    let mut names: Vec<&str> = FUNCTIONS.iter().map(|f| f.name).collect();
    let listed = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), listed, "a function is listed twice");
    for f in FUNCTIONS {
        let params = f.params();
        for (i, p) in params.iter().enumerate() {
            assert!(
                !p.name.is_empty() && !p.kind.is_empty(),
                "{}: {p:?}",
                f.name
            );
            assert!(
                !p.multiple || i + 1 == params.len(),
                "{}: only the last parameter repeats",
                f.name
            );
        }
        let required = params.iter().take_while(|p| p.required).count();
        assert!(
            params[required..].iter().all(|p| !p.required),
            "{}: required parameters come first",
            f.name
        );
    }
}

/// `f` of the arguments of the call `target`.
fn with_args<T>(target: &str, f: impl FnOnce(&Args<'_>) -> T) -> T {
    let Expr::Call {
        name, args, text, ..
    } = parse_target(target).unwrap()
    else {
        panic!("{target} is not a call");
    };
    let function = table::function(&name).unwrap();
    let x_files_factor = Cell::new(0.0);
    f(&Args::new(function, &args, &text, &x_files_factor).unwrap())
}

/// graphite-web 1.1.8's `validateParams`: which argument it refuses, if any.
#[test]
fn validation_refuses_what_graphite_web_refuses() {
    let cases = [
        ("scale(a, '2')", None),
        ("scale(a, true)", None),
        ("scale(a, 'x')", Some(1)),
        ("scale(a, b)", Some(1)),
        ("sortByName(a, 'TRUE', 0)", None),
        ("sortByName(a, 'yes')", Some(1)),
        ("sortByName(a, 2, 'false')", Some(1)),
        ("sortByName(a, false, 0.5)", Some(2)),
        ("consolidateBy(a, 'maxSeries')", Some(1)),
        ("consolidateBy(a, 'max')", None),
        // Deprecated names are not among an aggFunc's options.
        ("summarize(a, '1h', 'sumSeries')", Some(2)),
        ("summarize(a, '1h', 'avg', 'false')", None),
        ("summarize(a, 60)", Some(1)),
        ("highestMax(a, '2')", None),
        ("highestMax(a, 2.0)", Some(1)),
        ("keepLastValue(a, INF)", None),
        ("keepLastValue(a, 'inf')", None),
        ("keepLastValue(a, 2.5)", Some(1)),
        ("percentileOfSeries(a, 50, NONE)", None),
        ("movingAverage(a, 5, '0.5')", None),
        ("timeShift(a, '1h', None)", None),
        ("timeShift(a, '+1h', 'false', 'yes')", Some(3)),
    ];
    for (target, refused) in cases {
        assert_eq!(with_args(target, |a| a.refused), refused, "{target}");
    }
}

/// When graphite-web converts no argument of a call, a boolean is read by Python's truth:
/// `'false'` is a non-empty string, true.
#[test]
fn booleans_follow_graphite_webs_conversion() {
    let reset_end = |target: &str| with_args(target, |a| a.boolean_or(2, true).unwrap());
    assert!(!reset_end("timeShift(a, '+1h', 'false')"));
    assert!(!reset_end("timeShift(a, '+1h', 'False', false)"));
    assert!(reset_end("timeShift(a, '+1h', 'false', 'yes')"));
    assert!(!reset_end("timeShift(a, '+1h', None)"));
    assert!(!reset_end("timeShift(a, '+1h', '', 'yes')"));
    assert!(reset_end("timeShift(a, '+1h')"));
    let reverse = |target: &str| with_args(target, |a| a.sort_reverse_or(2, false));
    assert!(reverse("sortByName(a, true, 'true')").unwrap());
    assert!(reverse("sortByName(a, 'yes', 'true')").is_err());
    assert!(reverse("sortByName(a, 'yes', 2)").unwrap());
}
