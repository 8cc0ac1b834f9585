//! `--display pNN` and `--display hist` of `query` and `aggregate`: a distribution read
//! (StatsD timers, native and OTLP histograms), printed as a table, CSV, or the HTTP API's
//! JSON.

use std::fmt::Write;

use super::output::{format_value, json, point_rows};
use super::{print, window_range, OutputFormat, Points};
use crate::engine::Engine;
use crate::read::budget::ReadBudget;
use crate::read::distribution::{DistributionQuery, DistributionResult, DistributionTarget, Shown};
use crate::read::tier_choice::TierChoice;
use crate::read::value_text::group_tags;
use crate::time::Span;

/// The distribution display `--display` names, if it names one.
///
/// # Errors
/// A `p…` display that is not a quantile from 0 to 100.
pub(super) fn shown(points: &Points) -> Result<Option<Shown>, Box<dyn std::error::Error>> {
    let text = &points.window.display;
    if !Shown::is_distribution_display(text) {
        return Ok(None);
    }
    Ok(Some(text.parse()?))
}

/// Reads `target` as `shown` over the window of `points` and prints it.
pub(super) fn run(
    engine: &Engine,
    target: DistributionTarget,
    shown: Shown,
    points: &Points,
    whole_range: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let (from, to) = window_range(engine, &points.window)?;
    let query = DistributionQuery {
        target,
        shown,
        tier: TierChoice::parse(engine.config(), &points.window.tier)
            .map_err(|e| format!("--tier: {e}"))?,
        from,
        to,
        step: points.step,
        max_points: None,
        whole_range,
    };
    let result = engine
        .reader()
        .distribution_query(&query, &ReadBudget::unlimited())?;
    if let Some(note) = &result.note {
        eprintln!("tierdb: note: {note}");
    }
    let text = match (points.format, shown) {
        (OutputFormat::Json, _) => match result.into_series() {
            Ok(series) => json(&series) + "\n",
            Err(result) => json(&result) + "\n",
        },
        (_, Shown::Histogram) => {
            return Err("--display hist prints with --format json (a histogram a point)".into())
        }
        (OutputFormat::Table, _) => table(&result),
        (OutputFormat::Csv, _) => result.csv().unwrap_or_default(),
    };
    print(&text)?;
    Ok(())
}

/// The group's label: the series read, or `N series {k=v,...}`.
fn label(result: &DistributionResult, group: usize) -> String {
    if let Some(series) = &result.series {
        return series.clone();
    }
    let group = &result.groups[group];
    let tags = group_tags(&group.tags);
    if tags.is_empty() {
        format!("{} series", group.series)
    } else {
        format!("{} series {{{}}}", group.series, tags.join(","))
    }
}

/// One table per group: a heading with the tier, the display and its error bound, then a
/// row per point; an empty point is blank, the one still filling marked.
fn table(result: &DistributionResult) -> String {
    if result.groups.is_empty() {
        return "no distribution series matched\n".to_string();
    }
    let explicit = if result.explicit_buckets > 0 {
        "; explicit buckets: within a bucket's width"
    } else {
        ""
    };
    let bound = result
        .relative_error
        .map(|e| format!("  (within {}%{explicit})", format_value(e * 100.0)))
        .unwrap_or_default();
    let mut out = String::new();
    for (g, group) in result.groups.iter().enumerate() {
        let points = group.points.as_deref().unwrap_or_default();
        if g > 0 {
            out.push('\n');
        }
        let step = Span::from_secs(result.step.unsigned_abs());
        let _ = writeln!(
            out,
            "{}  tier {} ({step} points)  {}{bound}",
            label(result, g),
            result.tier,
            result.display
        );
        point_rows(&mut out, &result.display, points, result.partial_from);
    }
    out
}
