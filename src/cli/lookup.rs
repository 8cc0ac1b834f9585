//! `tierdb lookup`: where a sample at a given time lands in each tier, the period file and
//! the bucket, without opening any data: by a tiers file, or by the tiers a data directory
//! stores.

use std::path::PathBuf;

use clap::Args;

use super::{load_tiers, print, stored_tiers};
use crate::time::parse_time;

/// Prints where a sample at TS lands: for each tier, the period file and the bucket.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tierdb lookup 1763726400\n  tierdb lookup 2025-11-21T12:00:00Z"
)]
pub struct LookupArgs {
    /// The time: unix seconds, RFC 3339, now, or -6h style.
    ts: String,
    /// The tiers file (default: ./tiers.toml when present, else the built-in default).
    #[arg(long, env = "TIERDB_TIERS")]
    tiers: Option<PathBuf>,
    /// Where the sample lands in this data directory: by the tiers it stores.
    // Not read from TIERDB_DATA_DIR, as `tiers --data-dir`: `lookup TS --tiers FILE` reads
    // the file wherever it runs.
    #[arg(long, conflicts_with = "tiers")]
    data_dir: Option<PathBuf>,
}

/// Prints one line per tier: the period's start and file name, the bucket and its start.
pub(super) fn run(args: LookupArgs) -> Result<(), Box<dyn std::error::Error>> {
    let config = match &args.data_dir {
        Some(dir) => stored_tiers(dir)?,
        None => load_tiers(args.tiers.as_deref())?,
    };
    let ts =
        parse_time(&args.ts, chrono::Utc::now().timestamp()).map_err(|e| format!("TS: {e}"))?;
    let mut out = String::new();
    for set in 0..config.set_count() {
        let tiers = config.set_tiers(set);
        for p in crate::time::locate(tiers, ts) {
            let tier = &tiers[p.tier];
            out.push_str(&format!(
                "{:<8} period {} ({}) bucket {} ({})\n",
                config.tier_label(set, &tier.name),
                crate::time::format_ts(p.period_start),
                crate::storage::format::file_name(p.period_start, 0),
                p.bucket,
                crate::time::format_ts(
                    p.period_start + i64::from(p.bucket) * tier.resolution.secs() as i64
                )
            ));
        }
    }
    print(&out)?;
    Ok(())
}
