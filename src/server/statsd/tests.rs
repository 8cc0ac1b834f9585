//! The StatsD aggregator without sockets: sums, gauges, sets, intervals and bounds.

use super::{Aggregator, GAUGE_MEMORY, MAX_SERIES, MAX_SET_MEMBERS};
use crate::ingest::statsd::{parse_line, MetricType};
use crate::time::Span;

/// Feeds `lines` at `now`; returns the refusals' reasons.
fn feed(aggregator: &mut Aggregator, now: i64, lines: &[&str]) -> Vec<&'static str> {
    aggregator.begin(now);
    let mut values = Vec::new();
    let mut refused = Vec::new();
    for line in lines {
        let parsed = parse_line(line.as_bytes(), &mut values).unwrap().unwrap();
        if let Err(reason) = aggregator.add(&parsed.series, parsed.kind, parsed.rate, &values, now)
        {
            refused.push(reason);
        }
    }
    refused
}

fn take(aggregator: &mut Aggregator) -> (i64, Vec<(String, f64)>) {
    let (start, samples) = aggregator.take().expect("an interval");
    let mut samples: Vec<(String, f64)> = samples
        .into_iter()
        .map(|(series, _, value)| (series.into(), value))
        .collect();
    samples.sort_by(|a, b| a.0.cmp(&b.0));
    (start, samples)
}

#[test]
fn an_interval_sums_counters_exactly_and_counts_distinct_members() {
    let mut aggregator = Aggregator::new(Span::from_secs(10));
    assert!(aggregator.take().is_none(), "nothing arrived");
    let mut lines = vec!["views:1|c|@0.1"; 7];
    lines.extend([
        "views:2|c",
        "views:1|c|@0.5",
        "users:a|s",
        "users:b|s",
        "users:a|s",
    ]);
    lines.extend(["temp:20|g", "temp:+5|g", "temp:-2|g", "other:1|c|#k:v"]);
    lines.extend(["tenths:3|c|@0.1", "tenths:7|c|@0.1", "hundredths:3|c|@0.01"]);
    assert!(feed(&mut aggregator, 1_000_003, &lines).is_empty());
    assert!(!aggregator.ended(1_000_009));
    assert!(aggregator.ended(1_000_010));
    let (start, samples) = take(&mut aggregator);
    assert_eq!(start, 1_000_000, "stamped with the interval's start");
    assert_eq!(
        samples,
        [
            ("hundredths".into(), 300.0),
            ("other{k=v}".into(), 1.0),
            ("temp".into(), 23.0),
            ("tenths".into(), 100.0),
            ("users".into(), 2.0),
            ("views".into(), 7.0 * 10.0 + 2.0 + 2.0),
        ]
    );
    assert!(aggregator.take().is_none(), "the interval was taken whole");
}

#[test]
fn gauges_keep_their_value_for_relative_updates_and_report_only_when_touched() {
    let mut aggregator = Aggregator::new(Span::from_secs(10));
    feed(&mut aggregator, 100, &["temp:20|g", "idle:1|g"]);
    take(&mut aggregator);
    feed(&mut aggregator, 110, &["temp:+5|g"]);
    assert_eq!(take(&mut aggregator).1, [("temp".into(), 25.0)]);
    feed(&mut aggregator, 120, &["fresh:-3|g"]);
    assert_eq!(
        take(&mut aggregator).1,
        [("fresh".into(), -3.0)],
        "a new gauge moves from 0"
    );
    // Untouched for GAUGE_MEMORY: forgotten, so a relative update starts from 0 again.
    let later = 120 + GAUGE_MEMORY + 10;
    feed(&mut aggregator, later, &["x:1|c"]);
    take(&mut aggregator);
    feed(&mut aggregator, later + 10, &["temp:+1|g"]);
    assert_eq!(take(&mut aggregator).1, [("temp".into(), 1.0)]);
}

#[test]
fn series_and_set_members_are_bounded() {
    let mut aggregator = Aggregator::new(Span::from_secs(10));
    aggregator.begin(0);
    for i in 0..MAX_SERIES {
        aggregator
            .add(&format!("c{i}"), MetricType::Counter, 1.0, &[], 0)
            .unwrap();
    }
    assert_eq!(
        feed(&mut aggregator, 0, &["new:1|c", "newg:1|g", "news:a|s"]),
        ["statsd_series_limit"; 3]
    );
    assert!(
        feed(&mut aggregator, 0, &["c1:1|c"]).is_empty(),
        "held ones go on"
    );
    take(&mut aggregator);
    assert!(
        feed(&mut aggregator, 10, &["new:1|c"]).is_empty(),
        "room again"
    );
    take(&mut aggregator);

    for i in 0..MAX_SET_MEMBERS {
        let member = i.to_string();
        let values = [crate::ingest::statsd::StatsdValue::Member(&member)];
        aggregator
            .add("big", MetricType::Set, 1.0, &values, 20)
            .unwrap();
    }
    assert_eq!(
        feed(&mut aggregator, 20, &["big:x|s"]),
        ["statsd_set_limit"]
    );
    assert!(
        feed(&mut aggregator, 20, &["big:1|s"]).is_empty(),
        "a member held"
    );
    let (_, samples) = take(&mut aggregator);
    assert_eq!(samples, [("big".into(), MAX_SET_MEMBERS as f64)]);
}
