//! Pieces the benchmarks share: where their data goes, and a fleet of 100k series.

use tierdb::{Engine, SeriesId};

/// A fresh data directory under `TIERDB_BENCH_DIR`, or the system temp dir.
pub fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("TIERDB_BENCH_DIR") {
        Some(parent) => tempfile::tempdir_in(parent),
        None => tempfile::tempdir(),
    }
    .expect("temp dir")
}

/// Registers `count` series named like a fleet (`host042.metric317`), then runs maintenance
/// until every file of the current and ahead periods exists (it paces future files), as
/// they would after a day of uptime.
pub fn register_fleet(engine: &Engine, count: u32) -> Vec<SeriesId> {
    let ids = (0..count)
        .map(|i| {
            engine
                .series(&format!("host{:03}.metric{:03}", i / 1000, i % 1000))
                .expect("register series")
        })
        .collect();
    while engine.maintain().expect("maintenance").pending > 0 {}
    ids
}
