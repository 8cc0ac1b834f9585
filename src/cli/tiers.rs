//! `tierdb tiers`: a tiers file checked, its tiers printed as a table (one per tier set,
//! with the set's rules), then its `[engine]` settings and `[counters]` rules; with
//! `--data-dir`, the tiers a data directory stores and how a given or edited file differs
//! from them; or a tiers.toml made from carbon's storage-schemas.conf
//! (`crate::config::carbon`).

use std::path::{Path, PathBuf};

use clap::Args;

use super::{edited_tiers, load_tiers, print, stored_tiers, EditedTiers};
use crate::config::carbon;
use crate::config::{rule_lists, TierSpec, TiersConfig};

/// Checks a tiers file and prints its tiers, or makes one from carbon's storage-schemas.conf.
///
/// With --from-storage-schemas, prints a tiers.toml that keeps each metric's archives as
/// carbon does: a tier set per storage-schemas section.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tierdb tiers\n  tierdb tiers --tiers ./tiers.toml\n  tierdb tiers --from-storage-schemas /etc/carbon/storage-schemas.conf > tiers.toml"
)]
pub struct TiersArgs {
    /// The tiers file (default: ./tiers.toml when present, else the built-in default). With
    /// --data-dir: the file compared with the stored tiers.
    #[arg(long, env = "TIERDB_TIERS", conflicts_with = "from_storage_schemas")]
    tiers: Option<PathBuf>,
    /// Print the tiers this data directory stores (those it was created with, and the
    /// changes accepted since), and on stderr how --tiers, or the tiers.toml beside the
    /// directory, differs from them.
    // Not read from TIERDB_DATA_DIR: `tierdb tiers --tiers FILE` checks the file wherever
    // it runs.
    #[arg(long, conflicts_with = "from_storage_schemas")]
    data_dir: Option<PathBuf>,
    /// Print a tiers.toml with each section of carbon's storage-schemas.conf as a tier set,
    /// in carbon's order, its pattern as name globs and its archives as tiers; the catch-all
    /// section (`.*`) is the top-level tiers. A pattern with no exact glob form is refused,
    /// naming its section.
    #[arg(long, value_name = "STORAGE_SCHEMAS_CONF")]
    from_storage_schemas: Option<PathBuf>,
    /// With --from-storage-schemas: carbon's storage-aggregation.conf, whose rules the file
    /// notes with the display that reads each.
    #[arg(
        long,
        value_name = "STORAGE_AGGREGATION_CONF",
        requires = "from_storage_schemas"
    )]
    aggregation: Option<PathBuf>,
}

/// Prints one row per tier (name, resolution, period, retention, periods created ahead),
/// the default set's, then each `[[set]]` with its rules and its tiers, then the `[engine]`
/// settings and the `[counters]` rules in force, defaults included, so what decides whether
/// a series is a counter is in one place; or the tiers.toml made from storage-schemas.conf.
pub(super) fn run(args: TiersArgs) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(schemas) = &args.from_storage_schemas {
        return from_storage_schemas(schemas, args.aggregation.as_deref());
    }
    let config = match &args.data_dir {
        Some(dir) => stored(dir, args.tiers.as_deref())?,
        None => load_tiers(args.tiers.as_deref())?,
    };
    let mut out = String::new();
    if !config.sets.is_empty() {
        // A new series keeps the tiers of the first set whose rules pick it, else these.
        out.push_str("set \"default\": the series no [[set]] below picks\n");
    }
    out.push_str(&tier_table(&config.tiers));
    for set in &config.sets {
        let [(_, names), (_, tags)] = rule_lists(&set.series);
        out.push_str(&format!(
            "\nset {:?}: names = {names}, tags = {tags}\n{}",
            set.name,
            tier_table(&set.tiers)
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

/// One row per tier (name, resolution, period, retention, periods created ahead).
fn tier_table(tiers: &[TierSpec]) -> String {
    let mut out = format!(
        "{:<8} {:>10} {:>8} {:>10} {:>12}\n",
        "tier", "resolution", "period", "retention", "create_ahead"
    );
    for t in tiers {
        out.push_str(&format!(
            "{:<8} {:>10} {:>8} {:>10} {:>12}\n",
            t.name,
            t.resolution.to_string(),
            t.period.to_string(),
            t.retention.to_string(),
            t.create_ahead
        ));
    }
    out
}

/// The tiers `dir` stores; notes on stderr how `given` (else the tiers.toml beside `dir`)
/// differs from them, and what applies the difference.
fn stored(dir: &Path, given: Option<&Path>) -> Result<TiersConfig, Box<dyn std::error::Error>> {
    let stored = stored_tiers(dir)?;
    let edited = match given {
        Some(path) => EditedTiers::compare(path, &stored)?,
        None => edited_tiers(dir)?,
    };
    if let Some(edited) = edited {
        eprintln!("tierdb: note: {}", edited.not_applied(dir));
    }
    Ok(stored)
}

/// Reads the carbon files, prints the tiers.toml (checked as any tiers file is), and notes
/// on stderr the sections carbon never uses, which it leaves out.
fn from_storage_schemas(
    schemas: &std::path::Path,
    aggregation: Option<&std::path::Path>,
) -> Result<(), Box<dyn std::error::Error>> {
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).map_err(|e| crate::error::Error::io(path, e))
    };
    let origin = schemas.display().to_string();
    let parsed = carbon::parse_schemas(&read(schemas)?, &origin)?;
    let rules = match aggregation {
        Some(path) => carbon::parse_aggregation(&read(path)?, &path.display().to_string())?,
        None => Vec::new(),
    };
    let converted = carbon::tiers_toml(&parsed, &rules, &origin)?;
    TiersConfig::from_toml_str(&converted.toml, "the tiers made from storage-schemas.conf")?;
    print(&converted.toml)?;
    for note in &converted.notes {
        eprintln!("tierdb: note: {note}");
    }
    Ok(())
}
