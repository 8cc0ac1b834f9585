//! Disk per series: the bytes a data directory really allocates (`st_blocks` x 512, the
//! preallocation of hot files included), measured, not computed from sizes.
//!
//! - `new`: a brand-new directory with one full chunk (256 series) and one sample each: what
//!   a series costs until its periods fill; and a directory holding 10 series.
//! - `steady`: one chunk of 256 series sampled every 10 s for `DAYS` days (default 400) of a
//!   `ManualClock` with the default tiers, maintenance run every simulated 10 minutes (it
//!   creates periods ahead, compacts closed ones, drops expired ones). Reported: bytes per
//!   series at the end, and the most seen at any hourly look over the last half of the run.
//!   One run per kind of value, because what lossless compression achieves depends on it:
//!   `constant`; `integer` (a random walk of whole numbers, like bytes used or a queue
//!   length); `decimal` (a random walk rounded to 2 decimals, like a percentage an agent
//!   prints); `random` (uniform full-precision floats: incompressible, the worst case).
//!   `delta`, only when `KINDS` names it: StatsD counters (delta counters, whose buckets
//!   keep no latest sample), each sample a whole count from 0 to 99.
//!
//! The 1d tier keeps 1,825 days; 400 days hold 400 of its buckets, not 1,825. The steady
//! figure therefore also gives a projection for the full five years: the 1d tier's measured
//! compacted bytes per bucket times the 1,825 (+ one period) buckets it would hold.
//!
//! `cargo bench --bench disk [-- new|steady] ` with `DAYS=N` and `KINDS=constant,integer,...`
//! to narrow it. Runs under `TIERDB_BENCH_DIR` (or the temp dir); needs ~2 GB.

use std::path::Path;
use std::sync::Arc;

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use tierdb::{Engine, ManualClock, Sample, SeriesId, TiersConfig};

const SERIES: u32 = 256;
const CADENCE: i64 = 10;
/// 2024-01-01T00:00:00Z.
const START: i64 = 1_704_067_200;
const KINDS: [&str; 4] = ["constant", "integer", "decimal", "random"];

/// Bytes the files under `dir` allocate, and how many files there are, per tier directory
/// (`""` for files at the top).
fn allocated(dir: &Path) -> std::collections::BTreeMap<String, (u64, usize)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, tier)) = stack.pop() {
        for entry in std::fs::read_dir(&path).expect("read dir").flatten() {
            let meta = entry.metadata().expect("stat");
            if meta.is_dir() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let tier = if name == "tiers" { String::new() } else { name };
                stack.push((entry.path(), tier));
            } else {
                let slot = out.entry(tier.clone()).or_insert((0, 0));
                slot.0 += meta.blocks() * 512;
                slot.1 += 1;
            }
        }
    }
    out
}

/// Bytes the period files of chunk `chunk` allocate, all tiers together.
fn chunk_bytes(dir: &Path, chunk: u32) -> u64 {
    std::fs::read_dir(dir.join("tiers"))
        .expect("tiers")
        .flatten()
        .map(|tier| tier_chunk_bytes(dir, &tier.file_name().to_string_lossy(), chunk))
        .sum()
}

/// Bytes the period files of chunk `chunk` allocate in tier `tier`.
fn tier_chunk_bytes(dir: &Path, tier: &str, chunk: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let suffix = format!("-c{chunk:05}.");
    std::fs::read_dir(dir.join("tiers").join(tier))
        .expect("tier")
        .flatten()
        .filter(|file| file.file_name().to_string_lossy().contains(&suffix))
        .map(|file| file.metadata().expect("stat").blocks() * 512)
        .sum()
}

fn total(map: &std::collections::BTreeMap<String, (u64, usize)>) -> u64 {
    map.values().map(|v| v.0).sum()
}

fn open(dir: &Path, clock: &Arc<ManualClock>) -> Engine {
    Engine::builder(dir)
        .tiers(TiersConfig::default())
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .expect("open")
}

fn register(engine: &Engine, count: u32) -> Vec<SeriesId> {
    (0..count)
        .map(|i| {
            engine
                .series(&format!("host{:03}.metric.{i:03}{{dc=eu}}", i % 40))
                .expect("series")
        })
        .collect()
}

fn new_series() {
    let clock = Arc::new(ManualClock::new(START + 3_600));
    for count in [SERIES, 10] {
        let dir = support::bench_dir();
        let engine = open(dir.path(), &clock);
        let ids = register(&engine, count);
        while engine.maintain().expect("maintenance").pending > 0 {}
        let batch: Vec<Sample> = ids
            .iter()
            .map(|&id| Sample::new(id, START + 3_600, 1.0))
            .collect();
        engine.record_batch(&batch).expect("batch");
        engine.close().expect("close");
        let bytes = total(&allocated(dir.path()));
        if count == SERIES {
            let chunk0 = chunk_bytes(dir.path(), 0);
            println!(
                "new: one full chunk of {count} new series allocates {chunk0} bytes in its \
                 files: {:.1} KiB per series; the whole directory {:.1} MiB (with the next \
                 chunk, created ahead for the series to come, and the registry)",
                chunk0 as f64 / f64::from(count) / 1024.0,
                bytes as f64 / 1048576.0
            );
        } else {
            println!(
                "new: a directory holding {count} series allocates {:.1} MiB",
                bytes as f64 / 1048576.0
            );
        }
    }
}

/// The value of series `s` at step `n`, for `kind`; `state` carries each series' walk.
fn value(kind: &str, state: &mut [f64], rng: &mut u64, s: usize) -> f64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let unit = (*rng >> 11) as f64 / (1u64 << 53) as f64;
    match kind {
        "constant" => 42.0 + s as f64,
        "integer" => {
            state[s] = (state[s] + ((unit * 9.0).floor() - 4.0) * 4096.0).max(0.0);
            state[s]
        }
        "decimal" => {
            state[s] = (((state[s] + unit - 0.5) * 100.0).round() / 100.0).clamp(0.0, 100.0);
            state[s]
        }
        "delta" => (unit * 100.0).floor(),
        _ => unit * 100.0,
    }
}

fn steady(kind: &str, days: i64) {
    let clock = Arc::new(ManualClock::new(START));
    let dir = support::bench_dir();
    let engine = open(dir.path(), &clock);
    let ids = register(&engine, SERIES);
    if kind == "delta" {
        for &id in &ids {
            (engine.declare_kind(id, tierdb::SeriesKind::DeltaCounter)).expect("declare");
        }
    }
    let mut state: Vec<f64> = (0..SERIES)
        .map(|s| {
            if kind == "integer" {
                1e9 + f64::from(s)
            } else {
                50.0
            }
        })
        .collect();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut batch = Vec::with_capacity(SERIES as usize * 60);
    let mut peak = 0u64;
    let end = START + days * 86_400;
    let started = std::time::Instant::now();
    let mut ts = START;
    while ts < end {
        // Ten minutes of samples per batch, then a maintenance pass.
        batch.clear();
        for step in 0..60 {
            for (s, &id) in ids.iter().enumerate() {
                let v = value(kind, &mut state, &mut rng, s);
                batch.push(Sample::new(id, ts + step * CADENCE, v));
            }
        }
        clock.set(ts + 600);
        engine.record_batch(&batch).expect("batch");
        engine.maintain().expect("maintenance");
        ts += 600;
        if ts % 3_600 == 0 && ts - START > days * 86_400 / 2 {
            peak = peak.max(chunk_bytes(dir.path(), 0));
        }
    }
    // Two more passes with the clock past the grace, so the last closed periods compact.
    clock.set(end + 900);
    engine.maintain().expect("maintenance");
    engine.maintain().expect("maintenance");
    engine.close().expect("close");
    let map = allocated(dir.path());
    // The series' own cost: the files of their chunk, and the files at the top (registry,
    // counter state). The next chunk, created ahead for series to come, is reported apart:
    // with many chunks it is one of them, here it would double the figure.
    let top = map.get("").map_or(0, |v| v.0);
    let bytes = chunk_bytes(dir.path(), 0) + top;
    let ahead = chunk_bytes(dir.path(), 1);
    let per = |b: u64| b as f64 / f64::from(SERIES) / 1024.0;
    let tiers: Vec<String> = map
        .iter()
        .map(|(tier, (b, n))| {
            format!(
                "{}: {n} files {:.1} KiB",
                if tier.is_empty() { "top" } else { tier },
                per(*b)
            )
        })
        .collect();
    // Projection of the 1d tier to its full retention: its compacted files hold `days`
    // buckets per series; at five years it holds 1,825 plus one period of 73.
    let day_tier = tier_chunk_bytes(dir.path(), "1d", 0);
    let day_hot = (2 * 80 * 32 * u64::from(SERIES) + 2 * 4096).min(day_tier);
    let day_compacted = day_tier.saturating_sub(day_hot);
    let projected =
        bytes - day_tier + day_hot + (day_compacted as f64 * (1_825.0 + 73.0) / days as f64) as u64;
    println!(
        "steady {kind}: after {days} days {:.1} KiB per series (peak over the last half \
         {:.1} KiB), projected at five years {:.1} KiB; the next chunk, created ahead, {:.1} \
         MiB; whole directory by tier (both chunks): {} [{:.0} s]",
        per(bytes),
        per(peak + top),
        per(projected),
        ahead as f64 / 1048576.0,
        tiers.join(", "),
        started.elapsed().as_secs_f64()
    );
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let days: i64 = std::env::var("DAYS")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(400);
    let kinds: Vec<String> = std::env::var("KINDS")
        .map(|k| k.split(',').map(str::to_owned).collect())
        .unwrap_or_else(|_| KINDS.iter().map(|k| k.to_string()).collect());
    if wants("new") {
        new_series();
    }
    if wants("steady") {
        for kind in &kinds {
            steady(kind, days);
        }
    }
}
