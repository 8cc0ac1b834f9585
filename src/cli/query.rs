//! `tierdb query`: one series at a zoom level, as a table, CSV or the HTTP API's JSON.

use clap::Args;

use super::{
    build_query, note_not_retained, open_reader, output, percentile, print, resolve_series,
    Location, OutputFormat, Points, TagFilters,
};
use crate::read::distribution::DistributionTarget;

/// Queries one series at a zoom level.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tierdb query 'cpu.user{host=web-1}' --range 6h\n  tierdb query 'cpu.user;host=web-1' --from -6h\n  tierdb query cpu.user --tag host=web-1 --tier 1h --range 7d --display max --format csv\n  tierdb query 'http.requests{host=web-1}' --from 2025-11-20 --to now --display per_sec --step 1h\n  tierdb query req.time --display p99 --range 6h"
)]
pub struct QueryArgs {
    /// The series: `name`, `name{k=v,...}` or Graphite's `name;k=v;...`. A name (with some
    /// of its tags) that only one series has names that series.
    series: String,
    #[command(flatten)]
    filters: TagFilters,
    #[command(flatten)]
    points: Points,
    #[command(flatten)]
    location: Location,
}

/// Prints the series over the window in the chosen format.
pub(super) fn run(args: QueryArgs) -> Result<(), Box<dyn std::error::Error>> {
    let engine = open_reader(&args.location)?;
    if let Some(shown) = percentile::shown(&args.points)? {
        let series = resolve_series(&engine, &args.series, &args.filters)?;
        let target = DistributionTarget::Series(series);
        return percentile::run(&engine, target, shown, &args.points, false);
    }
    let mut query = build_query(&engine, &args.series, &args.filters, &args.points.window)?;
    query.step = args.points.step;
    let result = engine.query(&query)?;
    note_not_retained(&engine, &result);
    if let Some(note) = &result.note {
        eprintln!("tierdb: note: {note}");
    }
    let text = match args.points.format {
        OutputFormat::Table => output::table(&result),
        OutputFormat::Csv => result.csv(),
        OutputFormat::Json => output::json(&result) + "\n",
    };
    print(&text)?;
    Ok(())
}
