//! Helpers shared by the integration tests.

use std::path::Path;
use std::sync::Arc;

use tierdb::{Engine, ManualClock, Span, TierSpec, TiersConfig, Timestamp};

/// 2025-11-21T12:00:00Z, a Friday: a fixed "now" for tests.
pub(crate) const NOW: Timestamp = 1_763_726_400;

/// An engine on a fresh temporary directory with a manual clock at `now`.
pub(crate) fn engine_at(now: Timestamp) -> (tempfile::TempDir, Engine, Arc<ManualClock>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(now));
    let engine = open(dir.path(), &clock, TiersConfig::default());
    (dir, engine, clock)
}

/// [`engine_at`] without background maintenance: only the test's own passes run, so what a
/// pass does (the next block's pages reserved as the current block's are) does not depend on
/// when a background pass ran.
pub(crate) fn quiet_engine_at(now: Timestamp) -> (tempfile::TempDir, Engine, Arc<ManualClock>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(now));
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(clock.clone())
        .writer_threads(2)
        .background_maintenance(false)
        .open()
        .expect("open engine");
    (dir, engine, clock)
}

/// Opens `dir` with `tiers` and `clock`, two writer threads.
pub(crate) fn open(dir: &std::path::Path, clock: &Arc<ManualClock>, tiers: TiersConfig) -> Engine {
    Engine::builder(dir)
        .tiers(tiers)
        .clock(clock.clone())
        .writer_threads(2)
        .open()
        .expect("open engine")
}

/// A tier with `create_ahead` 1, spans in seconds.
pub(crate) fn tier(name: &str, resolution: u64, period: u64, retention: u64) -> TierSpec {
    TierSpec {
        name: name.to_string(),
        resolution: Span::from_secs(resolution),
        period: Span::from_secs(period),
        retention: Span::from_secs(retention),
        create_ahead: 1,
        earlier_periods: Vec::new(),
    }
}

/// Small files (16 series per chunk), so a test spends its time on reads and writes rather
/// than on preallocation, and a new chunk of files comes every 12 new series: 1m/1d, 1h/30d,
/// 1d/365d.
pub(crate) fn small_tiers() -> TiersConfig {
    let mut config = TiersConfig::default();
    config.engine.series_per_chunk = 16;
    config.tiers = vec![
        tier("1m", 60, 86_400, 2 * 86_400),
        tier("1h", 3_600, 30 * 86_400, 90 * 86_400),
        tier("1d", 86_400, 365 * 86_400, 1_825 * 86_400),
    ];
    config
}

/// A fresh directory for one case, on tmpfs when there is one: each case creates some fifty
/// period files, and the fsyncs of their creation and of close would otherwise make up most of
/// the run time (about 28 s instead of 7 s for the 24 cases on a small ext4 VM). What this test
/// checks does not depend on the file system.
pub(crate) fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("temp dir")
}

/// Opens `dir` with `tiers` and `clock`, two writer threads and no background maintenance:
/// the test decides when passes run.
pub(crate) fn open_driven(
    dir: &std::path::Path,
    clock: &Arc<ManualClock>,
    tiers: TiersConfig,
) -> Engine {
    Engine::builder(dir)
        .tiers(tiers)
        .clock(clock.clone())
        .writer_threads(2)
        .background_maintenance(false)
        .open()
        .expect("open engine")
}

/// Copies `from` into `to` recursively, as a file copy reads them (a killed process's
/// writes included: the copy reads through the page cache).
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
