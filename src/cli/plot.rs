//! `tierdb plot`: one or more series drawn on one chart, written as PNG or SVG.

use std::path::PathBuf;

use clap::Args;

use super::{build_query, note_not_retained, open_reader, print, Location, TagFilters, Window};

/// Draws one or more series on one chart, as PNG or SVG (by the --out extension).
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tierdb plot 'cpu.user{host=web-1}' --range 1d --out cpu.png\n  tierdb plot cpu.user --tag host=web-1 --from -6h --out cpu.svg\n  tierdb plot 'cpu.user{host=web-1}' 'cpu.user{host=db-1}' --range 7d --tier 1h --display max --out cpu.svg"
)]
pub struct PlotArgs {
    /// The series: `name`, `name{k=v,...}` or Graphite's `name;k=v;...`; several for
    /// several lines.
    #[arg(required = true)]
    series: Vec<String>,
    #[command(flatten)]
    filters: TagFilters,
    #[command(flatten)]
    window: Window,
    /// The image to write: a .png or .svg path.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    location: Location,
}

/// Queries each series over the window and draws them into `--out`.
pub(super) fn run(args: PlotArgs) -> Result<(), Box<dyn std::error::Error>> {
    let engine = open_reader(&args.location)?;
    let results = args
        .series
        .into_iter()
        .map(|name| {
            let query = build_query(&engine, &name, &args.filters, &args.window)?;
            let result = engine.query(&query)?;
            note_not_retained(&engine, &result);
            Ok(result)
        })
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
    let title = format!(
        "{} ({}, {})",
        results[0].display.as_str(),
        results[0].tier,
        args.location.data_dir.display()
    );
    crate::plot::render(&results, &args.out, &title)?;
    print(&format!("wrote {}\n", args.out.display()))?;
    Ok(())
}
