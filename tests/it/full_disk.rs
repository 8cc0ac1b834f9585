//! A full disk at restart. The regression: the maintenance pass at open failed (it could
//! not create the current period's files) and failed the whole open, so a full disk stopped
//! even the queries. Now the engine opens, serves what it holds, refuses the writes that
//! need a missing file as `storage_unavailable`, reports the failing pass (stats and
//! `/metrics`), and a later pass with room succeeds.
//!
//! The disk is real: a small tmpfs mounted for the test (needs root, as CI runs).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use tierdb::{Display, Engine, ManualClock, Query, RejectReason, Sample, TiersConfig};

/// 2025-11-21T12:00:00Z, on the hour.
const T0: i64 = 1_763_726_400;
const HOUR: i64 = 3_600;

const TIERS: &str = r#"
[engine]
series_per_chunk = 16

[[tier]]
name = "1m"
resolution = "1m"
period = "1h"
retention = "12h"
"#;

/// A tmpfs mounted on a temporary directory, unmounted on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .ok()?;
        status.success().then_some(Tmpfs(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

/// A small ext4 filesystem in a file, loop-mounted on a temporary directory, unmounted on
/// drop: period files are sparse on a disk filesystem (on tmpfs they are written whole).
struct LoopExt4 {
    image: tempfile::TempDir,
    mount: tempfile::TempDir,
}

impl LoopExt4 {
    fn mount(bytes: u64) -> Option<LoopExt4> {
        let image = tempfile::tempdir().ok()?;
        let mount = tempfile::tempdir().ok()?;
        let file = image.path().join("ext4.img");
        std::fs::File::create(&file).ok()?.set_len(bytes).ok()?;
        let ok = |command: &mut Command| command.status().is_ok_and(|s| s.success());
        let made = ok(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(&file)
            .stdout(std::process::Stdio::null()));
        (made
            && ok(Command::new("mount")
                .arg("-o")
                .arg("loop")
                .arg(&file)
                .arg(mount.path())))
        .then_some(LoopExt4 { image, mount })
    }

    fn path(&self) -> &Path {
        self.mount.path()
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.mount.path())
            .status();
        let _ = &self.image;
    }
}

/// Writes zeros into `path` until the filesystem has no room left.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 * 1024];
    while file.write_all(&block).is_ok() {}
    let _ = file.flush();
    // The last blocks a write could not take, taken a page at a time (ext4 keeps a few
    // that fallocate may still use).
    let mut len = file.metadata().unwrap().len();
    while rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), len, 4096).is_ok() {
        len += 4096;
    }
}

fn open(dir: &Path, clock: &Arc<ManualClock>) -> Engine {
    Engine::builder(dir)
        .tiers(TiersConfig::from_toml_str(TIERS, "full_disk.rs").unwrap())
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .expect("the engine opens even when its maintenance pass cannot create files")
}

#[test]
fn a_full_disk_at_restart_serves_reads_and_refuses_only_what_needs_new_files() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("full-disk test skipped: mounting a tmpfs needs root");
        return;
    }
    let disk = Tmpfs::mount("4m").expect("mount a 4 MiB tmpfs");
    let dir = disk.path().join("data");
    let clock = Arc::new(ManualClock::new(T0));
    let engine = open(&dir, &clock);
    engine.record("a", T0 + 10, 5.0).unwrap();
    engine.sync().unwrap();
    engine.close().unwrap();

    let filler = disk.path().join("filler");
    fill(&filler);
    // Three hours later the current and next periods need new files, and there is no room.
    clock.set(T0 + 3 * HOUR);
    let engine = open(&dir, &clock);
    let stats = engine.stats();
    assert_eq!(stats.maintenance_failures, 1);
    let error = stats
        .maintenance_error
        .clone()
        .expect("the failing pass is reported");
    assert!(
        error.contains("No space left") || error.contains("os error 28"),
        "{error}"
    );
    let metrics = tierdb::server::render_metrics(&stats, &Default::default());
    assert!(
        metrics.contains("tierdb_maintenance_failing 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tierdb_maintenance_failures_total 1"),
        "{metrics}"
    );

    // What the disk holds is served.
    let old = Query::new("a", T0, T0 + HOUR)
        .tier("1m")
        .display(Display::Total);
    assert_eq!(engine.query(&old).unwrap().points[0], (T0, Some(5.0)));
    // A write into the missing period is refused with its reason; one into a period whose
    // file exists still lands.
    let id = engine.series("a").unwrap();
    let now = T0 + 3 * HOUR + 10;
    let report = engine
        .record_batch(&[Sample::new(id, now, 7.0), Sample::new(id, T0 + 20, 1.0)])
        .unwrap();
    assert_eq!(report.accepted, 1);
    assert_eq!(report.rejected(RejectReason::StorageUnavailable), 1);

    // Room again: the next pass succeeds and writes land.
    std::fs::remove_file(&filler).unwrap();
    engine.maintain().unwrap();
    let stats = engine.stats();
    assert_eq!(stats.maintenance_error, None);
    assert_eq!(stats.maintenance_failures, 1);
    assert_eq!(
        engine
            .record_batch(&[Sample::new(id, now, 7.0)])
            .unwrap()
            .accepted,
        1
    );
    let new = Query::new("a", T0 + 3 * HOUR, T0 + 4 * HOUR)
        .tier("1m")
        .display(Display::Total);
    assert_eq!(
        engine.query(&new).unwrap().points[0],
        (T0 + 3 * HOUR, Some(7.0))
    );
    assert_eq!(engine.query(&old).unwrap().points[0], (T0, Some(6.0)));
    engine.close().unwrap();
}

/// A full disk while writing into pages never written before. Period files are sparse: a
/// page of one gets its disk space when a batch first stores into it. The regression this
/// guards against is a store through the mapping into a hole on a full disk, which raises
/// SIGBUS and kills the process with everything it had not acknowledged yet; the space is
/// now reserved (`fallocate`) by the batch before its writers store, so only the samples
/// bound for those pages are refused, with their reason, and land once there is room.
///
/// The disk is a small ext4 image, loop-mounted (needs root and a loop device).
#[test]
fn a_full_disk_refuses_writes_into_fresh_pages_and_takes_them_once_space_returns() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("full-disk test skipped: loop-mounting an ext4 image needs root");
        return;
    }
    let Some(disk) = LoopExt4::mount(8 << 20) else {
        eprintln!("full-disk test skipped: making or loop-mounting an ext4 image failed");
        return;
    };
    let dir = disk.path().join("data");
    let clock = Arc::new(ManualClock::new(T0 + 10 * 60));
    let engine = open(&dir, &clock);
    // Series 0..7 share one page of a block (8 slots of 16 buckets), series 8 starts the
    // next; the 1m tier's block is 16 minutes.
    let ids: Vec<_> = (0..9)
        .map(|i| engine.series(&format!("s{i}")).unwrap())
        .collect();
    let first = engine
        .record_batch(&[Sample::new(ids[0], T0 + 10, 1.0)])
        .unwrap();
    assert_eq!(first.accepted, 1);

    let filler = disk.path().join("filler");
    fill(&filler);
    let report = engine
        .record_batch(&[
            // Into the page written before: it has its space.
            Sample::new(ids[1], T0 + 20, 2.0),
            Sample::new(ids[0], T0 + 70, 3.0),
            // Into fresh pages: series 8's page, and the next block of series 0.
            Sample::new(ids[8], T0 + 30, 4.0),
            Sample::new(ids[0], T0 + 17 * 60, 5.0),
        ])
        .expect("a full disk refuses samples, it does not fail the batch");
    assert_eq!(report.accepted, 2);
    assert_eq!(report.rejected(RejectReason::StorageUnavailable), 2);
    let stats = engine.stats();
    assert!(
        stats
            .rejected
            .contains(&(RejectReason::StorageUnavailable.as_str(), 2)),
        "{:?}",
        stats.rejected
    );

    // What was acknowledged survives a close and an open, while the disk is still full.
    engine.close().unwrap();
    let engine = open(&dir, &clock);
    let read = |engine: &Engine, name: &str, from: i64| {
        let query = Query::new(name, T0 + from, T0 + from + 60)
            .tier("1m")
            .display(Display::Total);
        engine.query(&query).unwrap().points[0].1
    };
    assert_eq!(read(&engine, "s0", 0), Some(1.0));
    assert_eq!(read(&engine, "s1", 0), Some(2.0));
    assert_eq!(read(&engine, "s0", 60), Some(3.0));
    assert_eq!(read(&engine, "s8", 0), None);

    // Room again: the same writes land.
    std::fs::remove_file(&filler).unwrap();
    let report = engine
        .record_batch(&[
            Sample::new(ids[8], T0 + 30, 4.0),
            Sample::new(ids[0], T0 + 17 * 60, 5.0),
        ])
        .unwrap();
    assert_eq!(report.accepted, 2);
    assert_eq!(read(&engine, "s8", 0), Some(4.0));
    assert_eq!(read(&engine, "s0", 17 * 60), Some(5.0));
    engine.close().unwrap();
}
