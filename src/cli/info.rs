//! `tierdb info`: the tiers, the window each holds, files and bytes on disk, how the space
//! is used, and the series count, as a table for people or the engine's stats as JSON.

use clap::Args;

use super::{open_reader, print, Location};
use crate::engine::Engine;

/// Shows the tiers, the window each holds, files and bytes on disk, how the space is used
/// (hot file size per chunk, chunks in use, series per chunk), and series count.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  tierdb info\n  tierdb info --data-dir /var/lib/tierdb --json")]
pub struct InfoArgs {
    /// Print the engine's stats as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    location: Location,
}

/// Prints the data directory's stats.
pub(super) fn run(args: InfoArgs) -> Result<(), Box<dyn std::error::Error>> {
    let engine = open_reader(&args.location)?;
    let stats = engine.stats();
    if args.json {
        print(&(serde_json::to_string_pretty(&stats)? + "\n"))?;
    } else {
        print(&info_table(&engine))?;
    }
    Ok(())
}

/// `info` for people: one row per tier with its window and disk use, then totals.
fn info_table(engine: &Engine) -> String {
    let stats = engine.stats();
    let slots = engine.config().engine.series_per_chunk;
    let mut out = format!(
        "data directory {}\nseries {} ({} counters)\n\n{:<6} {:>10} {:>8} {:>10}  {:<20}  {:<20}  {:>6} {:>11} {:>11}\n",
        engine.dir().display(),
        stats.series,
        stats.counters,
        "tier",
        "resolution",
        "period",
        "retention",
        "holds from",
        "newest period",
        "files",
        "bytes",
        "hot file"
    );
    for tier in &stats.tiers {
        let held_from = tier
            .disk
            .oldest_period
            .map(|p| crate::time::format_ts(p.max(tier.window_start)))
            .unwrap_or_else(|| "-".into());
        let newest = tier
            .disk
            .newest_period
            .map(crate::time::format_ts)
            .unwrap_or_else(|| "-".into());
        let config = engine.config();
        let hot_file = (config.all_tiers())
            .find(|(set, spec)| config.tier_label(*set, &spec.name) == tier.name)
            .map_or("-".to_owned(), |(_, spec)| {
                human_bytes(hot_file_len(spec, slots))
            });
        out.push_str(&format!(
            "{:<6} {:>10} {:>8} {:>10}  {:<20}  {:<20}  {:>6} {:>11} {:>11}\n",
            tier.name,
            // The raw tier keeps exact points: no bucket width to show.
            if tier.kind == "raw" {
                "exact".to_string()
            } else {
                tier.resolution.to_string()
            },
            tier.period.to_string(),
            tier.retention.to_string(),
            held_from,
            newest,
            tier.disk.files,
            human_bytes(tier.disk.bytes),
            hot_file
        ));
    }
    let chunks = stats.series.div_ceil(slots as usize);
    let free = chunks * slots as usize - stats.series;
    let total: u64 = stats.tiers.iter().map(|t| t.disk.bytes).sum();
    out.push_str(&format!(
        "\nspace: {} in period files. A hot file holds one period of one chunk of {slots} \
         series slots (series_per_chunk), and takes disk only for what was written: 4 KiB \
         per 8 series per 16 buckets, 4 KiB of their latest samples per 16 series, plus a 4 \
         KiB header. {} series use {chunks} \
         chunk{} ({free} slots free). Ended periods are compacted to a few bytes per bucket \
         written.\n",
        human_bytes(total),
        stats.series,
        if chunks == 1 { "" } else { "s" },
    ));
    if !stats.orphaned_tiers.is_empty() {
        out.push_str(&format!(
            "\ntier directories no longer configured (left in place): {}\n",
            stats.orphaned_tiers.join(", ")
        ));
    }
    out.push_str(
        "\nrejected samples are counted by the process that received them: see a running \
         server's /metrics (tierdb_samples_rejected_total)\n",
    );
    out
}

/// Bytes of one hot period file of `tier` with `slots` series slots.
fn hot_file_len(tier: &crate::config::TierSpec, slots: u32) -> u64 {
    crate::storage::format::PeriodMeta {
        tier: tier.name.clone(),
        resolution: tier.resolution,
        period: tier.period,
        period_start: 0,
        slots,
        chunk: 0,
        histogram_cells: crate::storage::format::CellLayout::new_file(tier.resolution),
    }
    .file_len()
}

fn human_bytes(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}
