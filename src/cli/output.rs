//! How query results look on a terminal (an aligned table with human times, empty buckets
//! blank) and to scripts (CSV, or JSON in exactly the HTTP API's shape). One series' CSV is
//! [`QueryResult::csv`] and an aggregate's [`AggregateResult::csv`], the same writers as the HTTP
//! API's.

use std::fmt::Write;

use crate::read::aggregate::AggregateResult;
use crate::read::query::QueryResult;
use crate::read::value_text::{group_tags, non_finite};
use crate::time::{format_ts, Span, Timestamp};

/// The HTTP API's JSON of a query or aggregate result.
pub fn json(result: &impl serde::Serialize) -> String {
    serde_json::to_string(result).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// A table for people: a heading naming the series, tier, display and window, then one
/// row per point with its UTC start time, empty buckets left blank. The point whose bucket
/// is still filling is marked so, and any later one as in the future, so a low last value
/// does not read as a drop.
pub fn table(result: &QueryResult) -> String {
    if result.step.secs() == 0 {
        return raw_table(result);
    }
    let mut out = String::new();
    let window = match (result.points.first(), result.points.last()) {
        (Some((first, _)), Some((last, _))) => format!(
            "{} .. {}",
            format_ts(*first),
            format_ts(last + result.step.secs() as i64)
        ),
        _ => "no points".to_string(),
    };
    let _ = writeln!(
        out,
        "{}  tier {} ({} buckets)  {}  {window}",
        result.series,
        result.tier,
        Span::from_secs(result.step.secs()),
        result.display.as_str()
    );
    point_rows(
        &mut out,
        result.display.as_str(),
        &result.points,
        result.partial_from,
    );
    out
}

/// A table's rows of points under a `time (UTC)` heading over `label`: each point's UTC
/// start and value, empty ones blank. The point starting at `partial_from` is marked as
/// still filling and any later one as in the future, so a low last value does not read as
/// a drop.
pub(super) fn point_rows(
    out: &mut String,
    label: &str,
    points: &[(Timestamp, Option<f64>)],
    partial_from: Option<Timestamp>,
) {
    let values: Vec<String> = (points.iter())
        .map(|(_, v)| v.map(format_value).unwrap_or_default())
        .collect();
    let width = values.iter().map(String::len).max().unwrap_or(0).max(5);
    let _ = writeln!(out, "{:<20}  {:>width$}", "time (UTC)", label);
    for ((ts, _), value) in points.iter().zip(&values) {
        let mark = match partial_from {
            Some(from) if *ts == from => "  (still filling)",
            Some(from) if *ts > from => "  (future)",
            _ => "",
        };
        let _ = writeln!(out, "{:<20}  {:>width$}{mark}", format_ts(*ts), value);
    }
}

/// A raw read's table: its exact points, with the neighbours outside the range marked.
fn raw_table(result: &QueryResult) -> String {
    let rows: Vec<(i64, String, &str)> = (result.before.iter().map(|&(ts, v)| (ts, v, "before")))
        .chain((result.points.iter()).filter_map(|&(ts, v)| v.map(|v| (ts, v, ""))))
        .chain(result.after.iter().map(|&(ts, v)| (ts, v, "after")))
        .map(|(ts, v, mark)| (ts, format_value(v), mark))
        .collect();
    let width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(5);
    let mut out = format!(
        "{}  tier {} (exact points)  {} in range\n{:<20}  {:>width$}\n",
        result.series,
        result.tier,
        result.points.len(),
        "time (UTC)",
        "value"
    );
    for (ts, value, mark) in rows {
        let mark = if mark.is_empty() {
            String::new()
        } else {
            format!("  ({mark} the range)")
        };
        let _ = writeln!(out, "{:<20}  {:>width$}{mark}", format_ts(ts), value);
    }
    out
}

/// Up to six significant decimals, no trailing zeros, no exponent for everyday magnitudes.
pub fn format_value(v: f64) -> String {
    if let Some(text) = non_finite(v) {
        return text.to_owned();
    }
    if v != 0.0 && (v.abs() >= 1e15 || v.abs() < 1e-6) {
        return format!("{v:e}");
    }
    let text = format!("{v:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// One table per group, headed by the group's tag values.
pub fn aggregate_table(result: &AggregateResult) -> String {
    if result.groups.is_empty() {
        return "no series matched\n".to_string();
    }
    group_results(result)
        .iter()
        .map(table)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each group as a query result named `agg{k=v,...}`, for the single-series renderers.
fn group_results(result: &AggregateResult) -> Vec<QueryResult> {
    result
        .groups
        .iter()
        .map(|group| {
            let tags = group_tags(&group.tags);
            let label = if tags.is_empty() {
                format!("{} of {} series", result.aggregation.as_str(), group.series)
            } else {
                format!(
                    "{} of {} series {{{}}}",
                    result.aggregation.as_str(),
                    group.series,
                    tags.join(",")
                )
            };
            QueryResult {
                series: label,
                tier: result.tier.clone(),
                display: result.display,
                step: Span::from_secs(result.step as u64),
                points: group.points.clone(),
                before: None,
                after: None,
                not_retained: None,
                partial_from: result.partial_from,
                note: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::query::Display;

    fn sample() -> QueryResult {
        QueryResult {
            series: "cpu{host=a}".into(),
            tier: "1m".into(),
            display: Display::Avg,
            step: Span::from_secs(60),
            points: vec![
                (1_763_726_400, Some(1.5)),
                (1_763_726_460, None),
                (1_763_726_520, Some(12.25)),
            ],
            before: None,
            after: None,
            not_retained: None,
            partial_from: None,
            note: None,
        }
    }

    #[test]
    fn the_three_formats() {
        insta::with_settings!({description => "cpu{host=a}, tier 1m, avg, three minutes from 2025-11-21T12:00Z: 1.5, empty, 12.25"}, {
            insta::assert_snapshot!("table", table(&sample()));
            insta::assert_snapshot!("csv", sample().csv());
            insta::assert_snapshot!("json", json(&sample()));
        });
    }

    #[test]
    fn values_read_naturally() {
        assert_eq!(format_value(f64::INFINITY), "+Inf", "an overflowed total");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(2.0), "2");
        assert_eq!(format_value(0.125), "0.125");
        assert_eq!(format_value(-0.0), "0");
        assert_eq!(format_value(1.0 / 3.0), "0.333333");
        assert_eq!(format_value(1e20), "1e20");
    }
}
