//! `tierdb series`: the series keys a name glob and tag filters select, one a line.

use clap::Args;

use super::{open_reader, print, Location, TagFilters};

/// Lists series whose name matches a glob (`*`, `?`, `[a-z]`).
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tierdb series\n  tierdb series 'cpu.*'\n  tierdb series 'cpu.*' --tag host=web-1"
)]
pub struct SeriesArgs {
    /// Glob over the series name, optionally with tag filters: `cpu.*{host!=b}`.
    #[arg(default_value = "*")]
    pattern: String,
    #[command(flatten)]
    filters: TagFilters,
    #[command(flatten)]
    location: Location,
}

/// Prints every matching series key.
pub(super) fn run(args: SeriesArgs) -> Result<(), Box<dyn std::error::Error>> {
    let engine = open_reader(&args.location)?;
    let selector = args.filters.selector(&args.pattern)?;
    let mut out = String::new();
    // Matched where the keys are stored; only the answer's text is copied.
    engine.registry().for_each_from(0, |_, key| {
        if selector.matches(key) {
            out.push_str(key.as_str());
            out.push('\n');
        }
    });
    print(&out)?;
    Ok(())
}
