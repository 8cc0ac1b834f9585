//! `tierdb tiers`: a tiers file checked and its tiers printed as a table.

use std::path::PathBuf;

use clap::Args;

use super::{load_tiers, print};

/// Checks a tiers file and prints the tiers it defines.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  tierdb tiers\n  tierdb tiers --tiers ./tiers.toml")]
pub struct TiersArgs {
    /// The tiers file (default: ./tiers.toml when present, else the built-in default).
    #[arg(long, env = "TIERDB_TIERS")]
    tiers: Option<PathBuf>,
}

/// Prints one row per tier: name, resolution, period, retention, periods created ahead.
pub(super) fn run(args: TiersArgs) -> Result<(), Box<dyn std::error::Error>> {
    let config = load_tiers(args.tiers.as_deref())?;
    let mut out = format!(
        "{:<8} {:>10} {:>8} {:>10} {:>12}\n",
        "tier", "resolution", "period", "retention", "create_ahead"
    );
    for t in &config.tiers {
        out.push_str(&format!(
            "{:<8} {:>10} {:>8} {:>10} {:>12}\n",
            t.name,
            t.resolution.to_string(),
            t.period.to_string(),
            t.retention.to_string(),
            t.create_ahead
        ));
    }
    print(&out)?;
    Ok(())
}
