//! Damaged, foreign and leftover files, a second opener, and unclean shutdowns.
//!
//! A period file whose header is damaged, truncated, of another format version or not ours
//! makes `Engine::open` fail with `Error::CorruptFile` naming the file (never a panic), and
//! leaves the file as it was; a `.tmp` left by a creation cut short is removed; a second
//! opener is refused with `Error::Locked` naming the holder; a directory left open by a
//! process that died opens again with its data intact and interrupted bucket updates cleared.
//!
//! The tests at the end are regressions for gaps the first version of that repair had: tiers
//! orphaned at an unclean open were never repaired, and a stale update-in-flight bit without
//! the marker made readers spin forever, then stall 2 s on every read, since no write cleared
//! it.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierdb::testing::storage::format::RECORD_SIZE;
use tierdb::testing::storage::format::{cell_index, file_name, HEADER_LEN};
use tierdb::testing::storage::mapped_cell::STALE_AFTER;
use tierdb::time::align_down;
use tierdb::{
    Bucket, Engine, Error, ManualClock, Result, Sample, SeriesId, Span, TiersConfig, Timestamp,
};

use crate::common::{copy_dir, open, tier, NOW};

const DAY: i64 = 86_400;
/// Series slots per chunk file in these tests.
const SLOTS: u32 = 16;
/// Where the test data goes: half an hour before NOW, in today's 1m period.
const TS: Timestamp = NOW - 1_800;
/// Bytes 0..96 of a header are covered by the checksum stored at 96.
const CHECKSUM_OFFSET: usize = 96;
const VERSION_OFFSET: usize = 8;
const RESOLUTION_OFFSET: usize = 24;
const HISTOGRAM_CELL_OFFSET: usize = 100;

/// Small files: 1m/1d and 1h/30d tiers, 16 series per chunk.
fn small_tiers() -> TiersConfig {
    let mut config = TiersConfig::default();
    config.engine.series_per_chunk = SLOTS;
    config.tiers = vec![
        tier("1m", 60, 86_400, 2 * 86_400),
        tier("1h", 3_600, 30 * 86_400, 90 * 86_400),
    ];
    config
}

fn today() -> Timestamp {
    align_down(NOW, Span::from_secs(DAY as u64))
}

/// The 1m file of the day starting at `day`, chunk 0.
fn minute_file(dir: &Path, day: Timestamp) -> PathBuf {
    dir.join("tiers").join("1m").join(file_name(day, 0))
}

/// A directory with two series written (three samples of 1.0, 2.0, 3.0 for `a`, one 5.0 for
/// `b{k=v}`, all at [`TS`]), closed cleanly.
fn written_dir() -> (tempfile::TempDir, Arc<ManualClock>) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open(dir.path(), &clock, small_tiers());
    write_samples(&engine);
    engine.close().unwrap();
    (dir, clock)
}

fn write_samples(engine: &Engine) {
    let a = engine.series("a").unwrap();
    let b = engine.series("b{k=v}").unwrap();
    assert_eq!((a, b), (SeriesId(0), SeriesId(1)));
    let report = engine
        .record_batch(&[
            Sample::new(a, TS, 1.0),
            Sample::new(a, TS, 2.0),
            Sample::new(a, TS, 3.0),
            Sample::new(b, TS, 5.0),
        ])
        .unwrap();
    assert_eq!(report.accepted, 4);
}

/// The bucket of `a`'s three samples, in each tier.
const SAMPLES_OF_A: Bucket = Bucket {
    count: 3,
    total: 6.0,
    min: 1.0,
    max: 3.0,
    // The three arrive at one second: the last to arrive is the latest.
    last: Some(tierdb::Last::new(3.0, TS)),
};

/// The 1m bucket of `id` at [`TS`].
fn minute_of(engine: &Engine, id: SeriesId) -> Vec<(Timestamp, Bucket)> {
    engine
        .reader()
        .read_buckets(id, 0, TS, TS + 60, Span::from_secs(60))
        .unwrap()
}

/// The written buckets, read back through both tiers.
fn check_samples(engine: &Engine) {
    check_samples_torn(engine, &[]);
}

/// [`check_samples`] after `a`'s cell in each of `torn` (tier names) was left mid-update
/// (its update-in-flight bit set): its latest sample is then unknown, every other field
/// as written.
fn check_samples_torn(engine: &Engine, torn: &[&str]) {
    let hour = Span::from_secs(3_600);
    let of_tier = |tier: &str| {
        if torn.contains(&tier) {
            Bucket {
                last: None,
                ..SAMPLES_OF_A
            }
        } else {
            SAMPLES_OF_A
        }
    };
    assert_eq!(minute_of(engine, SeriesId(0)), vec![(TS, of_tier("1m"))]);
    let h = align_down(TS, hour);
    let a = engine
        .reader()
        .read_buckets(SeriesId(0), 1, h, h + 3_600, hour)
        .unwrap();
    assert_eq!(a, vec![(h, of_tier("1h"))]);
    let b = minute_of(engine, SeriesId(1));
    let expected_b = Bucket {
        count: 1,
        total: 5.0,
        min: 5.0,
        max: 5.0,
        last: Some(tierdb::Last::new(5.0, TS)),
    };
    assert_eq!(b, vec![(TS, expected_b)]);
    assert_eq!(
        engine.registry().lookup("b{k=v}").unwrap(),
        Some(SeriesId(1))
    );
}

/// Opens `dir` with the small tiers, turning a panic into a test failure that says so.
fn try_open(dir: &Path, clock: &Arc<ManualClock>, case: &str) -> Result<Engine> {
    let builder = Engine::builder(dir)
        .tiers(small_tiers())
        .clock(clock.clone())
        .writer_threads(2);
    match std::panic::catch_unwind(AssertUnwindSafe(|| builder.open())) {
        Ok(result) => result,
        Err(_) => panic!("{case}: Engine::open panicked instead of returning an error"),
    }
}

/// Damages the directory with `damage`, which returns the file it damaged or planted, and
/// checks that opening is refused with `CorruptFile` naming that file and containing
/// `reason`, twice (the failed open released the lock), without changing the file. Then
/// `repair` undoes the damage and the directory opens with its data intact.
fn assert_refused(
    case: &str,
    reason: &str,
    damage: impl FnOnce(&Path) -> PathBuf,
    repair: impl FnOnce(&Path),
) {
    let (dir, clock) = written_dir();
    let victim = damage(dir.path());
    let damaged = std::fs::read(&victim).unwrap();
    for attempt in 0..2 {
        let err = match try_open(dir.path(), &clock, case) {
            Ok(_) => panic!("{case}: opened a damaged directory"),
            Err(e) => e,
        };
        let Error::CorruptFile { path, reason: why } = &err else {
            panic!("{case}, attempt {attempt}: expected CorruptFile, got {err:?}");
        };
        assert_eq!(path, &victim, "{case}: {err}");
        let message = err.to_string();
        assert!(
            message.contains(&victim.display().to_string()),
            "{case}: the message does not name the file: {message}"
        );
        assert!(
            why.contains(reason),
            "{case}: expected a reason containing {reason:?}, got {message}"
        );
    }
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        damaged,
        "{case}: the refused file was changed"
    );
    repair(dir.path());
    let engine = try_open(dir.path(), &clock, case).unwrap();
    check_samples(&engine);
    engine.close().unwrap();
}

/// Damages today's 1m file (which holds the data) in place by `edit`, and restores it after.
fn assert_header_refused(case: &str, reason: &str, edit: impl FnOnce(&mut Vec<u8>)) {
    let original = std::cell::RefCell::new(Vec::new());
    assert_refused(
        case,
        reason,
        |dir| {
            let path = minute_file(dir, today());
            let mut bytes = std::fs::read(&path).unwrap();
            *original.borrow_mut() = bytes.clone();
            edit(&mut bytes);
            std::fs::write(&path, &bytes).unwrap();
            path
        },
        |dir| std::fs::write(minute_file(dir, today()), &*original.borrow()).unwrap(),
    );
}

fn put_u32(bytes: &mut [u8], offset: usize, v: u32) {
    bytes[offset..offset + 4].copy_from_slice(&v.to_le_bytes());
}

/// Recomputes the header checksum after an edit, so only the edited field is wrong: of the
/// bytes before it and the histogram cell's length after it (format version 2).
fn reseal(bytes: &mut [u8]) {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes[..CHECKSUM_OFFSET]);
    crc.update(&bytes[HISTOGRAM_CELL_OFFSET..HISTOGRAM_CELL_OFFSET + 4]);
    let crc = crc.finalize();
    put_u32(bytes, CHECKSUM_OFFSET, crc);
}

#[test]
fn a_flipped_magic_byte_is_refused() {
    assert_header_refused("magic", "bad magic", |b| b[0] ^= 0x20);
    assert_header_refused("magic, last byte", "bad magic", |b| b[7] ^= 0x01);
}

#[test]
fn a_flipped_checksummed_byte_is_refused() {
    // header length, resolution, period start, slots, tier name, the checksum itself and
    // the histogram cell's length
    for offset in [
        12,
        RESOLUTION_OFFSET,
        40,
        52,
        64,
        CHECKSUM_OFFSET,
        HISTOGRAM_CELL_OFFSET,
    ] {
        assert_header_refused(
            &format!("byte {offset} flipped"),
            "checksum mismatch",
            |b| b[offset] ^= 0x04,
        );
    }
}

#[test]
fn a_truncated_file_is_refused() {
    assert_header_refused("truncated to half", "truncated", |b| {
        let half = b.len() / 2;
        b.truncate(half);
    });
    assert_header_refused("one byte short", "truncated", |b| {
        b.pop();
    });
    assert_header_refused("truncated to 10 bytes", "truncated header", |b| {
        b.truncate(10)
    });
    assert_header_refused("empty", "truncated header", Vec::clear);
}

#[test]
fn another_format_version_is_refused() {
    assert_header_refused("version 4", "format version 4", |b| {
        put_u32(b, VERSION_OFFSET, 4);
        reseal(b);
    });
    assert_header_refused("version 0", "format version 0", |b| {
        put_u32(b, VERSION_OFFSET, 0);
        reseal(b);
    });
}

#[test]
fn a_sealed_but_impossible_header_is_refused() {
    assert_header_refused("resolution 0", "impossible layout", |b| {
        b[RESOLUTION_OFFSET..RESOLUTION_OFFSET + 8].copy_from_slice(&0u64.to_le_bytes());
        reseal(b);
    });
    assert_header_refused("resolution 2m", "bucket count disagrees", |b| {
        b[RESOLUTION_OFFSET..RESOLUTION_OFFSET + 8].copy_from_slice(&120u64.to_le_bytes());
        reseal(b);
    });
    for cell in [0, 100, 2048] {
        assert_header_refused(
            &format!("histogram cell {cell}"),
            &format!("histogram cell of {cell} bytes"),
            |b| {
                put_u32(b, HISTOGRAM_CELL_OFFSET, cell);
                reseal(b);
            },
        );
    }
}

#[test]
fn a_foreign_file_named_like_a_period_file_is_refused() {
    // Deterministic noise (xorshift), 64 KiB, where yesterday's 1m file would be.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..65_536)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    assert_refused(
        "random bytes",
        "bad magic",
        |dir| {
            let path = minute_file(dir, today() - DAY);
            std::fs::write(&path, &noise).unwrap();
            path
        },
        |dir| std::fs::remove_file(minute_file(dir, today() - DAY)).unwrap(),
    );
}

#[test]
fn another_tiers_file_under_a_period_name_is_refused() {
    // A sound header, but of the 1h tier, copied to where yesterday's 1m file would be.
    assert_refused(
        "1h file in the 1m directory",
        "cannot change",
        |dir| {
            let hour_dir = dir.join("tiers").join("1h");
            let hour_file = std::fs::read_dir(&hour_dir)
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .path();
            let path = minute_file(dir, today() - DAY);
            std::fs::copy(hour_file, &path).unwrap();
            path
        },
        |dir| std::fs::remove_file(minute_file(dir, today() - DAY)).unwrap(),
    );
}

#[test]
fn a_tdb_file_with_a_foreign_name_is_refused() {
    assert_refused(
        "backup.tdb",
        "file name is not",
        |dir| {
            let path = dir.join("tiers").join("1m").join("backup.tdb");
            std::fs::write(&path, b"not ours").unwrap();
            path
        },
        |dir| std::fs::remove_file(dir.join("tiers").join("1m").join("backup.tdb")).unwrap(),
    );
}

#[test]
fn leftover_temporary_files_are_removed_at_open() {
    let (dir, clock) = written_dir();
    let yesterday = file_name(today() - DAY, 0);
    // As `PeriodFile::create` names them: the final name plus `.tmp`, here half written.
    let leftovers = [
        dir.path().join("tiers/1m").join(format!("{yesterday}.tmp")),
        dir.path()
            .join("tiers/1h")
            .join(format!("{}.tmp", file_name(0, 3))),
    ];
    for path in &leftovers {
        std::fs::write(path, [0xAB; 1000]).unwrap();
    }
    // Other files tierdb did not write are left alone.
    let note = dir.path().join("tiers/1m/README");
    std::fs::write(&note, "mine").unwrap();

    let engine = open(dir.path(), &clock, small_tiers());
    for path in &leftovers {
        assert!(!path.exists(), "{} is still there", path.display());
    }
    assert!(!minute_file(dir.path(), today() - DAY).exists());
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "mine");
    // At noon tomorrow's file is not due yet (it comes in the second half of today).
    assert_eq!(engine.stats().tiers[0].disk.files, 1, "today");
    check_samples(&engine);
    engine.close().unwrap();
}

#[test]
fn a_second_open_of_an_open_directory_is_refused() {
    let (dir, clock) = written_dir();
    let engine = open(dir.path(), &clock, small_tiers());
    for _ in 0..2 {
        let err = match try_open(dir.path(), &clock, "second open") {
            Ok(_) => panic!("a second engine opened the same directory"),
            Err(e) => e,
        };
        let Error::Locked { path, holder } = &err else {
            panic!("expected Locked, got {err:?}");
        };
        assert_eq!(path, &dir.path().join("LOCK"));
        let pid = format!("pid {}", std::process::id());
        assert_eq!(holder, &pid);
        let message = err.to_string();
        assert!(message.contains(&pid), "{message}");
        assert!(
            message.contains(&dir.path().display().to_string()),
            "{message}"
        );
    }
    // The refused opener changed nothing: the first engine works on, and its marker and lock
    // are intact.
    check_samples(&engine);
    let report = engine
        .record_batch(&[Sample::new(SeriesId(1), TS, 5.0)])
        .unwrap();
    assert_eq!(report.accepted, 1);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("OPEN")).unwrap(),
        std::process::id().to_string()
    );
    engine.close().unwrap();

    let engine = open(dir.path(), &clock, small_tiers());
    let b = engine
        .reader()
        .read_buckets(SeriesId(1), 0, TS, TS + 60, Span::from_secs(60))
        .unwrap();
    assert_eq!(b[0].1.count, 2);
    engine.close().unwrap();
}

#[test]
fn a_directory_left_open_by_a_dead_process_opens_with_its_data() {
    // A copy taken while the engine is open is what a crash leaves: the OPEN marker, the lock
    // file (without the lock, which died with its holder), and every synced write.
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open(dir.path(), &clock, small_tiers());
    write_samples(&engine);
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), crashed.path());
    assert!(crashed.path().join("OPEN").exists());
    engine.close().unwrap();

    let engine = open(crashed.path(), &clock, small_tiers());
    check_samples(&engine);
    let id = engine.series("c").unwrap();
    assert_eq!(id, SeriesId(2), "ids go on after the crashed process's");
    engine.close().unwrap();
    assert!(!crashed.path().join("OPEN").exists());

    // The same with the marker written by hand after a clean close.
    let (dir, clock) = written_dir();
    std::fs::write(dir.path().join("OPEN"), "12345").unwrap();
    let engine = open(dir.path(), &clock, small_tiers());
    check_samples(&engine);
    engine.close().unwrap();
    assert!(!dir.path().join("OPEN").exists());
}

/// The file of tier `tier` ("1m" or "1h" of [`small_tiers`]) holding [`TS`], chunk 0, and
/// the byte offset of the count of series `slot`'s cell at [`TS`] in it.
fn cell_at(dir: &Path, tier: &str, slot: u32) -> (PathBuf, usize) {
    let (resolution, period) = match tier {
        "1m" => (60, DAY),
        "1h" => (3_600, 30 * DAY),
        _ => unreachable!("{tier}"),
    };
    let start = align_down(TS, Span::from_secs(period as u64));
    let path = dir.join("tiers").join(tier).join(file_name(start, 0));
    let bucket = ((TS - start) / resolution) as u32;
    (
        path,
        HEADER_LEN + cell_index(bucket, slot, SLOTS) * RECORD_SIZE,
    )
}

fn read_count(dir: &Path, tier: &str, slot: u32) -> u64 {
    let (path, at) = cell_at(dir, tier, slot);
    let bytes = std::fs::read(path).unwrap();
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Sets the update-in-flight bit of series 0's cell at [`TS`] in `tier`, as a process that
/// died between the first and last store of an update leaves it.
fn set_busy_bit(dir: &Path, tier: &str) {
    let (path, at) = cell_at(dir, tier, 0);
    assert_eq!(read_count(dir, tier, 0), 3, "the three samples of `a`");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at + 7] |= 0x80;
    std::fs::write(&path, bytes).unwrap();
}

/// Runs `read` on another thread and fails the test if it does not return within a few
/// seconds (a reader spinning on an update-in-flight bit that nobody clears would hang
/// the suite otherwise; the stuck thread is left behind).
fn within_seconds<T: Send + 'static>(what: &str, read: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(read());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what}: the read did not return"))
}

/// Writes a fourth sample (4.0) of `a` at [`TS`] and checks that its minute bucket counts it
/// on from the three before.
fn write_a_fourth_sample(engine: &Engine) {
    engine
        .record_batch(&[Sample::new(SeriesId(0), TS, 4.0)])
        .unwrap();
    let mut four = SAMPLES_OF_A;
    four.add(4.0);
    assert_eq!(minute_of(engine, SeriesId(0)), vec![(TS, four)]);
}

/// Leaves the marker of a process that died with `dir` open.
fn mark_unclean(dir: &Path) {
    std::fs::write(dir.join("OPEN"), "12345").unwrap();
}

#[test]
fn an_interrupted_bucket_update_is_cleared_after_an_unclean_shutdown() {
    let (dir, clock) = written_dir();
    set_busy_bit(dir.path(), "1m");
    set_busy_bit(dir.path(), "1h");
    mark_unclean(dir.path());

    let engine = open(dir.path(), &clock, small_tiers());
    let engine = within_seconds("repaired cells", move || {
        check_samples_torn(&engine, &["1m", "1h"]);
        engine
    });
    // Writes to the repaired cell go on from the count it had.
    write_a_fourth_sample(&engine);
    engine.close().unwrap();
    assert_eq!(read_count(dir.path(), "1m", 0), 4);
    assert_eq!(read_count(dir.path(), "1h", 0), 4);
}

#[test]
fn data_of_a_series_whose_registration_was_lost_is_cleared_after_an_unclean_shutdown() {
    let (_dir, crashed, clock) = crash_losing_the_registration_of_c();
    assert_eq!(
        read_count(crashed.path(), "1m", 2),
        1,
        "c's sample is on disk"
    );
    assert!(crashed.path().join("OPEN").exists());

    let engine = open(crashed.path(), &clock, small_tiers());
    check_samples(&engine);
    assert_eq!(engine.registry().len(), 2);
    // The next series gets c's id and none of c's data.
    let d = engine.series("d").unwrap();
    assert_eq!(d, SeriesId(2));
    for (tier, step) in [(0, 60), (1, 3_600)] {
        let from = align_down(TS, Span::from_secs(step as u64));
        let buckets = engine
            .reader()
            .read_buckets(d, tier, from, from + step, Span::from_secs(step as u64))
            .unwrap();
        assert_eq!(buckets, vec![(from, Bucket::EMPTY)], "tier {tier}");
    }
    engine.close().unwrap();
}

/// Regression: an update-in-flight bit is cleared only when the `OPEN` marker says the last
/// process died. A cell that carries one without the marker (a flipped top bit of a count:
/// records carry no checksum) made every read of it spin forever in `BucketCell::load`; the
/// read then gave up waiting after `STALE_AFTER` (2 s) and returned the fields as they stand.
///
/// Regression (issue 12, item 9): that 2 s stall came back on every read of the cell, because
/// a write never cleared the bit (`add` stored `count + 1` with the bit still set). Now a read
/// asks whether a live writer holds the bit (in a writable engine, its writer threads; in a
/// read-only one, the process the `OPEN` marker names) and returns at once when none does, and
/// the next write heals the cell.
#[test]
fn a_stale_update_bit_is_read_at_once_and_healed_by_the_next_write() {
    let (dir, clock) = written_dir();
    set_busy_bit(dir.path(), "1m");
    assert!(
        !dir.path().join("OPEN").exists(),
        "no repair may run at open"
    );

    let reader = open_read_only(dir.path(), &clock);
    promptly("read-only engine, no writer", move || {
        check_samples_torn(&reader, &["1m"])
    });

    let engine = open(dir.path(), &clock, small_tiers());
    let engine = promptly("writable engine", move || {
        check_samples_torn(&engine, &["1m"]);
        engine
    });
    let engine = promptly("the healing write and a read", move || {
        write_a_fourth_sample(&engine);
        engine
    });
    engine.close().unwrap();
    assert_eq!(
        read_count(dir.path(), "1m", 0),
        4,
        "the bit is gone on disk"
    );
}

/// A read-only engine reads a stale bit at once when the `OPEN` marker names a process that
/// is gone (a writer that crashed), and waits for it, as for an update in flight, while the
/// marker names a live process.
#[test]
fn a_read_only_engine_waits_on_a_stale_bit_only_while_the_marker_names_a_live_process() {
    let (dir, clock) = written_dir();
    set_busy_bit(dir.path(), "1m");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    std::fs::write(dir.path().join("OPEN"), gone.to_string()).unwrap();
    let reader = open_read_only(dir.path(), &clock);
    let reader = promptly("marker of a process that is gone", move || {
        check_samples_torn(&reader, &["1m"]);
        reader
    });

    // This process is alive: a writer may hold the bit, so the read waits it out.
    std::fs::write(dir.path().join("OPEN"), std::process::id().to_string()).unwrap();
    let started = Instant::now();
    let reader = within_seconds("marker of a live process", move || {
        check_samples_torn(&reader, &["1m"]);
        reader
    });
    assert!(
        started.elapsed() >= STALE_AFTER,
        "the read did not wait for a live writer: {:?}",
        started.elapsed()
    );
    drop(reader);
}

fn open_read_only(dir: &Path, clock: &Arc<ManualClock>) -> Engine {
    Engine::builder(dir)
        .tiers(small_tiers())
        .clock(clock.clone())
        .read_only()
        .open()
        .unwrap()
}

/// Runs `read` through [`within_seconds`] and checks it took well under `STALE_AFTER`.
fn promptly<T: Send + 'static>(what: &str, read: impl FnOnce() -> T + Send + 'static) -> T {
    let started = Instant::now();
    let value = within_seconds(what, read);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "{what}: the read took {took:?}, waiting on a bit no live writer holds"
    );
    value
}

/// Tiers of [`small_tiers`] without "1h".
fn without_hour() -> TiersConfig {
    let mut config = small_tiers();
    config.tiers.retain(|t| t.name != "1h");
    config
}

/// Regression: the repair after an unclean shutdown covered only the tiers configured at
/// that open. A tier that is left out of the
/// configuration for that one open (its files are orphaned, so not repaired) keeps its
/// interrupted update, and once the clean close removed the `OPEN` marker nothing repairs it:
/// bringing the tier back makes reads of that cell spin forever.
#[test]
fn an_orphaned_tier_is_repaired_when_it_comes_back() {
    let (dir, clock) = written_dir();
    set_busy_bit(dir.path(), "1h");
    mark_unclean(dir.path());
    open(dir.path(), &clock, without_hour()).close().unwrap();

    let engine = open(dir.path(), &clock, small_tiers());
    let engine = within_seconds("1h back after an unclean open without it", move || {
        check_samples_torn(&engine, &["1h"]);
        engine
    });
    engine.close().unwrap();
}

/// Regression: the same gap for slots of series whose registration was lost in the crash.
/// They were cleared in the tiers configured at the unclean open only; the next series to get
/// the id inherited the lost series' data in a tier that was orphaned then and is configured
/// again later.
#[test]
fn an_orphaned_tier_forgets_series_lost_in_a_crash() {
    let (_dir, crashed, clock) = crash_losing_the_registration_of_c();

    open(crashed.path(), &clock, without_hour())
        .close()
        .unwrap();
    let engine = open(crashed.path(), &clock, small_tiers());
    let d = engine.series("d").unwrap();
    assert_eq!(d, SeriesId(2));
    let hour = align_down(TS, Span::from_secs(3_600));
    let buckets = engine
        .reader()
        .read_buckets(d, 1, hour, hour + 3_600, Span::from_secs(3_600))
        .unwrap();
    assert_eq!(
        buckets,
        vec![(hour, Bucket::EMPTY)],
        "d inherited c's sample in 1h"
    );
    engine.close().unwrap();
}

/// A crash copy holding the registry as it was before series `c` (id 2) was registered (its
/// record never reached the disk) but the period files after `c`'s sample of 9.0 was
/// written, with the `OPEN` marker of a process that died. Returns the original directory
/// (kept alive), the crash copy and the clock.
fn crash_losing_the_registration_of_c() -> (tempfile::TempDir, tempfile::TempDir, Arc<ManualClock>)
{
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open(dir.path(), &clock, small_tiers());
    write_samples(&engine);
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), crashed.path());
    let c = engine.series("c").unwrap();
    assert_eq!(c, SeriesId(2));
    engine.record_batch(&[Sample::new(c, TS, 9.0)]).unwrap();
    let registry = std::fs::read(crashed.path().join("series.log")).unwrap();
    copy_dir(dir.path(), crashed.path());
    std::fs::write(crashed.path().join("series.log"), registry).unwrap();
    engine.close().unwrap();
    (dir, crashed, clock)
}

/// The regression: an engine closed and opened again in one process was refused as
/// `Locked` by its own pid while another thread started a process, since the child shares
/// the lock from its fork until its exec. A third of the opens were refused this way.
#[test]
fn a_directory_closed_and_opened_again_while_processes_start_is_not_refused() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (dir, clock) = written_dir();
    let stop = Arc::new(AtomicBool::new(false));
    let spawner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut started = 0;
            while !stop.load(Ordering::Relaxed) {
                std::process::Command::new("true").status().unwrap();
                started += 1;
            }
            started
        })
    };
    let mut refused = 0;
    for _ in 0..200 {
        match try_open(dir.path(), &clock, "open again") {
            Ok(engine) => engine.close().unwrap(),
            Err(Error::Locked { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let started = spawner.join().unwrap();
    assert!(started > 0);
    assert_eq!(
        refused, 0,
        "{refused} of 200 opens refused while {started} processes started"
    );
}
