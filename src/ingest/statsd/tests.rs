//! Tests of the StatsD parser: every type, sample rates, relative gauges, DogStatsD tags and
//! multi-value lines, every refusal, and no panic on any bytes.

use std::borrow::Cow;

use proptest::prelude::*;

use super::{parse_line, MetricType, StatsdError, StatsdLine, StatsdValue};
use crate::registry::SeriesKey;

fn ok(line: &str) -> (StatsdLine<'_>, Vec<StatsdValue<'_>>) {
    let mut values = Vec::new();
    let parsed = parse_line(line.as_bytes(), &mut values)
        .unwrap_or_else(|e| panic!("{line:?}: {e}"))
        .unwrap_or_else(|| panic!("{line:?}: no line"));
    (parsed, values)
}

fn err(line: &str) -> StatsdError {
    let mut values = Vec::new();
    match parse_line(line.as_bytes(), &mut values) {
        Err(e) => {
            assert!(values.is_empty(), "{line:?}: values left behind");
            e
        }
        Ok(parsed) => panic!("{line:?} parsed as {parsed:?}"),
    }
}

#[test]
fn counter_with_sample_rate() {
    let (line, values) = ok("page.views:1|c|@0.1");
    assert_eq!(line.series, "page.views");
    assert!(matches!(line.series, Cow::Borrowed(_)));
    assert_eq!(line.kind, MetricType::Counter);
    assert_eq!(line.rate, 0.1);
    assert_eq!(values, [StatsdValue::Number(1.0)]);
    let (line, values) = ok("page.views:3|c\r");
    assert_eq!((line.rate, values), (1.0, vec![StatsdValue::Number(3.0)]));
}

#[test]
fn gauges_absolute_and_relative() {
    assert_eq!(ok("temp:42|g").1, [StatsdValue::Number(42.0)]);
    assert_eq!(ok("temp:+3|g").1, [StatsdValue::Delta(3.0)]);
    assert_eq!(ok("temp:-2.5|g").1, [StatsdValue::Delta(-2.5)]);
    // Only gauges are relative: a signed counter increment is just a number.
    assert_eq!(ok("errors:-1|c").1, [StatsdValue::Number(-1.0)]);
}

#[test]
fn timers_histograms_distributions_and_packed_values() {
    for ty in ["ms", "h", "d"] {
        let text = format!("req.time:320:100.5|{ty}|@0.5");
        let (line, values) = ok(&text);
        assert_eq!(line.kind, MetricType::Timer, "{ty}");
        assert_eq!(
            values,
            [StatsdValue::Number(320.0), StatsdValue::Number(100.5)]
        );
    }
}

#[test]
fn sets_take_the_whole_member() {
    let (line, values) = ok("users:10.0.0.1:8080|s");
    assert_eq!(line.kind, MetricType::Set);
    assert_eq!(values, [StatsdValue::Member("10.0.0.1:8080")]);
}

#[test]
fn dogstatsd_tags_become_sorted_tags() {
    let (line, _) = ok("page.views:1|c|#route:/home,env:prod|c:abc123");
    assert_eq!(line.series, "page.views{env=prod,route=/home}");
    // Sections in either order; a repeated key keeps its last value; escaping as SeriesKey.
    let (line, _) = ok("a=b:1|g|#k:1,k:2|@1");
    assert_eq!(
        line.series,
        SeriesKey::new("a=b", [("k", "2")]).unwrap().as_str()
    );
    let (line, _) = ok("lat:1|ms|#url:http://x/a");
    assert_eq!(
        line.series, "lat{url=http://x/a}",
        "a value keeps its colons"
    );
}

#[test]
fn blank_lines_are_nothing() {
    let mut values = Vec::new();
    assert_eq!(parse_line(b"", &mut values), Ok(None));
    assert_eq!(parse_line(b"  \r", &mut values), Ok(None));
}

#[test]
fn every_refusal() {
    assert_eq!(err("page.views"), StatsdError::MissingValue);
    assert_eq!(err("page.views:1"), StatsdError::MissingType);
    assert_eq!(err("page.views:1|x"), StatsdError::UnknownType);
    assert_eq!(err("page.views:abc|c"), StatsdError::InvalidValue);
    assert_eq!(err("page.views:|c"), StatsdError::InvalidValue);
    assert_eq!(err("page.views:1:|ms"), StatsdError::InvalidValue);
    assert_eq!(err("page.views:inf|c"), StatsdError::InvalidValue);
    assert_eq!(err("page.views:NaN|g"), StatsdError::InvalidValue);
    assert_eq!(err("users:|s"), StatsdError::InvalidValue);
    assert_eq!(err("page.views:1|c|@0"), StatsdError::InvalidSampleRate);
    assert_eq!(err("page.views:1|c|@1.5"), StatsdError::InvalidSampleRate);
    assert_eq!(err("page.views:1|c|@x"), StatsdError::InvalidSampleRate);
    assert_eq!(err("page.views:1|c|#prod"), StatsdError::InvalidTag);
    assert_eq!(err("page.views:1|c|#:x"), StatsdError::InvalidTag);
    assert_eq!(err(":1|c"), StatsdError::InvalidName);
    assert_eq!(err("a\u{1}b:1|c"), StatsdError::InvalidName);
    let mut values = Vec::new();
    assert_eq!(
        parse_line(b"caf\xe9:1|c", &mut values),
        Err(StatsdError::InvalidName)
    );
    let long = format!("{}:1|c", "n".repeat(SeriesKey::MAX_LEN + 1));
    assert_eq!(err(&long), StatsdError::InvalidName);
    let names: std::collections::HashSet<_> = StatsdError::ALL.iter().map(|e| e.as_str()).collect();
    assert_eq!(names.len(), StatsdError::ALL.len());
}

proptest! {
    #[test]
    fn no_panic_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut values = Vec::new();
        let _ = parse_line(&bytes, &mut values);
    }

    #[test]
    fn statsd_shaped_lines_give_a_key_that_parses(
        line in "[a-z.=,{}]{0,8}(:[-+0-9.a-z]{0,5}){0,3}(\\|[a-z@#:,.0-9]{0,8}){0,4}"
    ) {
        let mut values = Vec::new();
        if let Ok(Some(parsed)) = parse_line(line.as_bytes(), &mut values) {
            let key = SeriesKey::parse(&parsed.series).unwrap();
            prop_assert_eq!(key.as_str(), &*parsed.series);
            prop_assert!(!values.is_empty());
        }
    }
}
