//! `tierdb tiers`: a tiers file checked, its tiers printed as a table, then its `[engine]`
//! settings and `[counters]` rules.

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

/// Prints one row per tier (name, resolution, period, retention, periods created ahead),
/// then the `[engine]` settings and the `[counters]` rules in force, defaults included, so
/// what decides whether a series is a counter is in one place.
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
    let engine = &config.engine;
    out.push_str(&format!(
        "\n[engine]\nfuture_bound = {}\nseries_per_chunk = {}\nmax_points = {}\n",
        engine.future_bound, engine.series_per_chunk, engine.max_points
    ));
    let counters = &config.counters;
    out.push_str("\n[counters]\n");
    if counters.is_empty() {
        out.push_str(
            "# no rule: a series is a gauge unless a write declares it a counter (kind)\n",
        );
    }
    if !counters.names.is_empty() {
        let names: Vec<String> = counters.names.iter().map(|n| format!("{n:?}")).collect();
        out.push_str(&format!("names = [{}]\n", names.join(", ")));
    }
    if !counters.tags.is_empty() {
        let tags: Vec<String> = (counters.tags.iter())
            .map(|(k, v)| format!("{:?}", format!("{k}={v}")))
            .collect();
        out.push_str(&format!("tags = [{}]\n", tags.join(", ")));
    }
    print(&out)?;
    Ok(())
}
