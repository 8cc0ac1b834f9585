//! A writer killed in the middle of a bucket update, and the repair at the next open. A child
//! process (this test binary, run again for one test) opens the data directory and writes one
//! sample with the writer's fault hook armed: it kills itself with SIGKILL between setting
//! the cell's update-in-flight bit and finishing the update. The next open must clear the
//! bit, leave the count as it was before the sample, report one interrupted update, and read
//! no period file other than those that may hold slots of unregistered series.
//!
//! The regression: the repair at an unclean open read every cell of every period file (149 s
//! at 100k series after a `kill -9` with a cold page cache), whatever was being written.

use std::path::Path;
use std::sync::Arc;

use tierdb::testing::storage::format::{
    cell_index, file_name, PeriodMeta, HEADER_LEN, LATEST_SIZE, RECORD_SIZE,
};
use tierdb::testing::storage::writer_state::WriterStateFile;
use tierdb::{Engine, ManualClock, Sample, SeriesId};

use crate::common::{small_tiers, NOW};
use crate::support::process::run_child_until_it_kills_itself;

/// Set to the data directory, the test runs as the child that gets killed.
const CHILD_DIR: &str = "TIERDB_IT_CRASH_CHILD_DIR";
/// The test's name, for the child to run it alone.
const TEST: &str = "crash_recovery::a_writer_killed_mid_update_is_repaired_from_its_publication";
/// Series slots per chunk in `small_tiers`.
const SLOTS: u32 = 16;
/// The series whose update is interrupted, in chunk 0.
const VICTIM: u32 = 5;
const BUSY: u64 = 1 << 63;
/// Set in a record's word 5 when its latest sample is known.
const LAST_KNOWN: u64 = 1 << 63;

fn open(dir: &Path) -> Engine {
    Engine::builder(dir)
        .tiers(small_tiers())
        .clock(Arc::new(ManualClock::new(NOW)))
        .writer_threads(2)
        .background_maintenance(false)
        .open()
        .expect("open engine")
}

/// The minute the samples land in, and its bucket in the 1m tier's day file.
fn minute() -> (i64, u32) {
    let minute = NOW - NOW % 60 - 600;
    (minute, ((minute % 86_400) / 60) as u32)
}

/// The victim's cell in the 1m file of chunk 0: (count word, total) as on disk.
fn raw_cell(dir: &Path) -> (u64, f64) {
    let words = raw_words(dir);
    (words[0], f64::from_bits(words[1]))
}

/// The victim's 1m record's four words, then its latest area entry's two, as the file
/// holds them.
fn raw_words(dir: &Path) -> Vec<u64> {
    let (minute, bucket) = minute();
    let path = dir
        .join("tiers/1m")
        .join(file_name(minute - minute % 86_400, 0));
    let bytes = std::fs::read(&path).unwrap();
    let meta = PeriodMeta::decode(&bytes, &path).unwrap();
    let index = cell_index(bucket, VICTIM, SLOTS);
    let record = HEADER_LEN + index * RECORD_SIZE;
    let latest = meta.latest_offset(index) as usize;
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    (0..RECORD_SIZE / 8)
        .map(|i| word(record + 8 * i))
        .chain((0..LATEST_SIZE / 8).map(|i| word(latest + 8 * i)))
        .collect()
}

/// The victim's latest sample as its latest area entry holds it: its value's bits, and the
/// known bit with its offset in the bucket.
fn raw_latest(dir: &Path) -> (u64, u64) {
    let words = raw_words(dir);
    (words[4], words[5])
}

/// The victim's 1m bucket as a read sees it.
fn victim_bucket(engine: &Engine) -> tierdb::Bucket {
    let (minute, _) = minute();
    let found = engine
        .reader()
        .read_buckets(
            SeriesId(VICTIM),
            0,
            minute,
            minute + 60,
            tierdb::Span::from_secs(60),
        )
        .unwrap();
    found[0].1
}

/// Runs the child: one sample of `VICTIM`, with the fault hook armed on it. The cell holds
/// `total` before.
fn kill_a_writer_mid_update(dir: &Path, total: f64) {
    let victim = VICTIM.to_string();
    run_child_until_it_kills_itself(
        TEST,
        &[
            (CHILD_DIR, dir.as_os_str()),
            (tierdb::testing::fault::KILL_MID_UPDATE, victim.as_ref()),
        ],
    );
    assert_eq!(
        raw_cell(dir),
        (3 | BUSY, total + 100.0),
        "the child left the cell torn: bit set, the sample in its total only"
    );
}

/// Period files on disk holding slots of chunks from `first_chunk` on.
fn files_from_chunk(dir: &Path, first_chunk: u32) -> usize {
    let mut n = 0;
    for tier in std::fs::read_dir(dir.join("tiers")).unwrap() {
        for file in std::fs::read_dir(tier.unwrap().path()).unwrap() {
            let name = file.unwrap().file_name().into_string().unwrap();
            if tierdb::testing::storage::format::parse_file_name(&name)
                .is_some_and(|(_, c)| c >= first_chunk)
            {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn a_writer_killed_mid_update_is_repaired_from_its_publication() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        let engine = open(Path::new(&dir));
        let (minute, _) = minute();
        let _ = engine.record_batch(&[Sample::new(SeriesId(VICTIM), minute + 40, 100.0)]);
        unreachable!("the fault hook kills the process in the writer");
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    // A whole chunk of series (so chunk 0 holds no unregistered slot), three samples of the
    // victim in one minute, closed cleanly.
    {
        let engine = open(dir);
        let (minute, _) = minute();
        for s in 0..SLOTS {
            assert_eq!(engine.series(&format!("host{s}.cpu")).unwrap(), SeriesId(s));
        }
        let samples: Vec<Sample> = (1..=3)
            .map(|i| Sample::new(SeriesId(VICTIM), minute + i, i as f64))
            .collect();
        assert_eq!(engine.record_batch(&samples).unwrap().accepted, 3);
        engine.close().unwrap();
    }
    assert_eq!(raw_cell(dir), (3, 6.0));
    assert_eq!(
        raw_latest(dir),
        (3.0f64.to_bits(), LAST_KNOWN | 3),
        "the latest sample: 3 at 3 s into the minute"
    );

    kill_a_writer_mid_update(dir, 6.0);
    assert_eq!(
        raw_latest(dir),
        (100.0f64.to_bits(), LAST_KNOWN | 3),
        "the latest sample torn too: the new value beside the old time"
    );
    let engine = open(dir);
    let repaired = victim_bucket(&engine);
    assert_eq!(
        (repaired.count, repaired.last),
        (3, None),
        "the repaired bucket's latest sample is unknown, never the torn one"
    );
    let recovery = engine.recovery().expect("an unclean open").clone();
    assert_eq!(recovery.full_scan, None, "{recovery:?}");
    assert_eq!(recovery.interrupted, 1, "{recovery:?}");
    assert_eq!(
        recovery.published, 1,
        "only the victim's writer had a cell: {recovery:?}"
    );
    assert_eq!(recovery.cleared, 0, "{recovery:?}");
    assert_eq!(
        recovery.files_scanned,
        files_from_chunk(dir, 1),
        "only files of chunks past the registered series are read: {recovery:?}"
    );
    assert!(files_from_chunk(dir, 0) > recovery.files_scanned);
    engine.close().unwrap();
    assert_eq!(
        raw_cell(dir),
        (3, 106.0),
        "bit cleared, the count as before the sample (its total may hold it)"
    );

    // Without a trustworthy writers.state, the open reads everything and still finds it.
    kill_a_writer_mid_update(dir, 106.0);
    std::fs::remove_file(dir.join(WriterStateFile::FILE_NAME)).unwrap();
    let engine = open(dir);
    let recovery = engine.recovery().expect("an unclean open").clone();
    assert!(recovery.full_scan.is_some(), "{recovery:?}");
    assert_eq!(recovery.interrupted, 1, "{recovery:?}");
    assert_eq!(
        recovery.files_scanned,
        files_from_chunk(dir, 0),
        "{recovery:?}"
    );
    engine.close().unwrap();
    assert_eq!(raw_cell(dir), (3, 206.0));

    // A changed tiers layout does not trust the publications either.
    kill_a_writer_mid_update(dir, 206.0);
    let mut other = small_tiers();
    other.tiers.truncate(2);
    let engine = Engine::builder(dir)
        .tiers(other)
        .clock(Arc::new(ManualClock::new(NOW)))
        .background_maintenance(false)
        .open()
        .unwrap();
    let recovery = engine.recovery().expect("an unclean open").clone();
    assert!(
        recovery
            .full_scan
            .as_deref()
            .is_some_and(|why| why.contains("layout")),
        "{recovery:?}"
    );
    assert_eq!(recovery.interrupted, 1, "{recovery:?}");
    engine.close().unwrap();
    assert_eq!(raw_cell(dir), (3, 306.0));
}
