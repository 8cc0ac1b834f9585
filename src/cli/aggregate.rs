//! `tierdb aggregate`: many series folded into one line per group, as a table per group,
//! CSV or the HTTP API's JSON.

use crate::read::tier_choice::TierChoice;
use clap::Args;

use super::{
    open_reader, output, percentile, print, window_range, Location, OutputFormat, Points,
    TagFilters,
};
use crate::read::aggregate::AggregateQuery;
use crate::read::distribution::DistributionTarget;

/// Folds many series into one line per group: sum, avg, min, max or count across every
/// series a selector picks.
#[derive(Args, Debug)]
#[command(mut_arg("tags", |arg| arg.help(
    "Only series with this tag (k=v), or without it (k!=v); repeatable; the value may be a glob (host=web-*)"
)))]
#[command(
    after_help = "Examples:\n  tierdb aggregate 'cpu.user' --agg avg --group-by dc --range 6h\n  tierdb aggregate 'http.requests{dc=eu,host!=db-1}' --display per_sec --range 7d --tier 1h\n  tierdb aggregate butterflies --tag scientist=perpetua --group-by location --display total --range 365d --whole-range\n  tierdb aggregate 'api.*.time' --group-by host --display p90 --range 365d --whole-range"
)]
pub struct AggregateArgs {
    /// A name glob with optional tag filters: `cpu.*{dc=eu,host!=db-1}`.
    selector: String,
    /// sum, avg, min, max or count (count: series with a sample in the point).
    #[arg(long = "agg", default_value = "sum")]
    aggregation: String,
    /// Tag keys whose values split the series into groups; comma-separated or repeated.
    #[arg(long = "group-by", value_delimiter = ',')]
    group_by: Vec<String>,
    #[command(flatten)]
    filters: TagFilters,
    /// Fold the whole range into one value per group.
    #[arg(long)]
    whole_range: bool,
    #[command(flatten)]
    points: Points,
    #[command(flatten)]
    location: Location,
}

/// Prints the groups the selector's series fold into over the window.
pub(super) fn run(args: AggregateArgs) -> Result<(), Box<dyn std::error::Error>> {
    let engine = open_reader(&args.location)?;
    let selector = args.filters.selector(&args.selector)?;
    if let Some(shown) = percentile::shown(&args.points)? {
        let group_by = args.group_by;
        let target = DistributionTarget::Select { selector, group_by };
        return percentile::run(&engine, target, shown, &args.points, args.whole_range);
    }
    let (from, to) = window_range(&engine, &args.points.window)?;
    let query = AggregateQuery {
        selector,
        group_by: args.group_by,
        aggregation: args.aggregation.parse()?,
        display: args.points.window.display.parse()?,
        tier: TierChoice::parse(engine.config(), &args.points.window.tier)
            .map_err(|e| format!("--tier: {e}"))?,
        from,
        to,
        step: args.points.step,
        max_points: None,
        whole_range: args.whole_range,
    };
    let result = engine.aggregate(&query)?;
    if let Some(note) = &result.note {
        eprintln!("tierdb: note: {note}");
    }
    let text = match args.points.format {
        OutputFormat::Table => output::aggregate_table(&result),
        OutputFormat::Csv => result.csv(),
        OutputFormat::Json => output::json(&result) + "\n",
    };
    print(&text)?;
    Ok(())
}
