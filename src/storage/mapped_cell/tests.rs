//! The seqlock against crash leftovers: a write heals an update-in-flight bit, a read returns
//! at once when no live writer holds it and waits when one does, and readers racing a writer
//! that heals never see a torn bucket.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::*;

/// The name writers publish for the cell under test.
const CELL: Publication = Publication { file: 1, cell: 7 };
/// Another cell's.
const OTHER: Publication = Publication { file: 1, cell: 8 };

/// A cell holding `count` samples of `value`, with the update-in-flight bit set when `busy`.
fn cell(count: u64, value: f64, busy: bool) -> BucketCell {
    BucketCell {
        count: AtomicU64::new(count | if busy { BUSY } else { 0 }),
        total: AtomicU64::new((count as f64 * value).to_bits()),
        min: AtomicU64::new(value.to_bits()),
        max: AtomicU64::new(value.to_bits()),
    }
}

/// This process's writers, with their `writers.state` in a directory that lives as long as
/// they do.
struct InProcess {
    writers: Writers,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for InProcess {
    type Target = Writers;
    fn deref(&self) -> &Writers {
        &self.writers
    }
}

fn in_process() -> InProcess {
    let dir = tempfile::tempdir().unwrap();
    InProcess {
        writers: Writers::open_in_process(dir.path(), vec!["t".into()]).unwrap(),
        _dir: dir,
    }
}

fn register(writers: &Writers) -> WriterSlot {
    writers.register().unwrap().expect("in-process writers")
}

/// Loads `cell` (named `CELL`), collecting what the read reports.
fn load(cell: &BucketCell, writers: &Writers) -> (Bucket, Vec<Stuck>) {
    let stuck = std::sync::Mutex::new(Vec::new());
    let bucket = loop {
        if let Some(bucket) = cell.record(None, 0).try_load() {
            break bucket;
        }
        if let Some(bucket) = cell
            .record(None, 0)
            .load_waiting(writers, CELL, &|s| stuck.lock().unwrap().push(s))
        {
            break bucket;
        }
    };
    (bucket, stuck.into_inner().unwrap())
}

/// What `add` does before its field stores, as the writer owning `slot`: publish the cell,
/// then set the bit on the count it holds.
fn begin_update(cell: &BucketCell, slot: &WriterSlot) {
    slot.publisher().publish(CELL);
    let count = cell.count.load(Ordering::Relaxed) & !BUSY;
    cell.count.store(count | BUSY, Ordering::Release);
    fence(Ordering::Release);
}

/// Writers of which the one has begun to update `cell`.
fn mid_update(cell: &BucketCell) -> (InProcess, WriterSlot) {
    let writers = in_process();
    let slot = register(&writers);
    begin_update(cell, &slot);
    (writers, slot)
}

fn samples(count: u64, value: f64) -> Bucket {
    Bucket {
        count,
        total: count as f64 * value,
        min: value,
        max: value,
        last: None,
    }
}

#[test]
fn a_write_heals_a_stale_bit() {
    let writers = in_process();
    let slot = register(&writers);
    let cell = cell(3, 2.0, true);
    cell.record(None, 0).add(2.0, None, slot.publisher(), CELL);
    assert_eq!(
        cell.count.load(Ordering::Relaxed),
        4,
        "count + 1, bit cleared"
    );
    assert_eq!(load(&cell, &writers), (samples(4, 2.0), vec![]));
}

#[test]
fn a_stale_bit_no_writer_holds_is_read_at_once_and_reported() {
    let writers = in_process();
    let other = cell(0, 0.0, false);
    let slot = register(&writers);
    other
        .record(None, 0)
        .add(1.0, None, slot.publisher(), OTHER); // a live writer that published another cell
    let stale = cell(3, 2.0, true);
    let started = Instant::now();
    assert_eq!(
        load(&stale, &writers),
        (samples(3, 2.0), vec![Stuck::Stale])
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    // Nothing was written: the next read finds the bit again.
    assert_eq!(stale.count.load(Ordering::Relaxed), 3 | BUSY);
}

#[test]
fn a_read_only_reader_without_a_writing_process_reads_a_stale_bit_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let writers = Writers::OtherProcess {
        marker: dir.path().join("OPEN"),
    };
    assert!(
        writers.register().unwrap().is_none(),
        "no writer threads here"
    );
    let started = Instant::now();
    let stale = cell(3, 2.0, true);
    assert_eq!(
        load(&stale, &writers),
        (samples(3, 2.0), vec![Stuck::Stale])
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// A writer healing a stale cell is mid-update: it published the cell, stored the same
/// `count | BUSY` the crash left and some new fields. The reader waits for the update to
/// finish and returns it, never the count from before it with the fields of the update (a
/// reader that re-checked only `count` could not tell this from the leftover).
#[test]
fn a_bit_a_live_writer_holds_is_waited_for() {
    let cell = cell(3, 2.0, true);
    let (writers, slot) = mid_update(&cell);
    // Further into the healing `add` of 2.0: one field stored.
    cell.total.store(8.0f64.to_bits(), Ordering::Relaxed);
    let started = Barrier::new(2);
    let read = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            started.wait();
            load(&cell, &writers)
        });
        started.wait();
        // Long enough for the reader to be past its spins and asking the writers, most of
        // the time; a slower reader only makes the test weaker, never wrong.
        std::thread::sleep(Duration::from_millis(50));
        cell.count.store(4, Ordering::Release);
        slot.clear();
        reader.join().unwrap()
    });
    assert_eq!(read, (samples(4, 2.0), vec![]));
}

/// A writer thread that died (its slot cleared by the writer's guard) holds nothing.
#[test]
fn a_bit_a_dead_writer_published_is_stale() {
    let cell = cell(3, 2.0, false);
    let (writers, slot) = mid_update(&cell);
    slot.clear();
    assert_eq!(load(&cell, &writers), (samples(3, 2.0), vec![Stuck::Stale]));
}

/// Rounds of: a writer dies mid-update of the cell (publish, set the bit, slot cleared), then
/// another heals it with the next sample while a reader reads it over and over. Every value
/// is the same, so a consistent bucket has `total == count * value`; a reader that took a
/// leftover bit for stale while the healing write was in flight would mix the healing
/// write's fields with the count from before it. Bounded by rounds, not time.
#[test]
fn readers_racing_a_writer_that_heals_never_see_a_torn_bucket() {
    const ROUNDS: u64 = 20_000;
    const VALUE: f64 = 3.0;
    let writers = in_process();
    let dying = register(&writers);
    let healer = register(&writers);
    let cell = cell(0, VALUE, false);
    let done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 0..ROUNDS {
                begin_update(&cell, &dying);
                dying.clear();
                // Let readers reach their cold path on the leftover bit now and then.
                for _ in 0..(round % 7) * 50 {
                    std::hint::spin_loop();
                }
                cell.record(None, 0)
                    .add(VALUE, None, healer.publisher(), CELL);
                healer.clear();
            }
            done.store(true, Ordering::Release);
        });
        s.spawn(|| {
            let mut last = 0;
            let mut n = 0u64;
            while !done.load(Ordering::Acquire) || n < 1_000 {
                let (bucket, _) = load(&cell, &writers);
                assert_eq!(
                    bucket.total,
                    bucket.count as f64 * VALUE,
                    "torn bucket {bucket:?}"
                );
                assert!(bucket.count >= last, "count went back");
                last = bucket.count;
                n += 1;
            }
            reads.store(n, Ordering::Relaxed);
        });
    });
    assert_eq!(load(&cell, &writers).0, samples(ROUNDS, VALUE));
    assert!(reads.load(Ordering::Relaxed) >= 1_000);
}

#[test]
fn the_open_marker_says_whether_a_writing_process_is_alive() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("OPEN");
    assert!(!marker_names_a_live_process(&marker), "no marker");
    std::fs::write(&marker, std::process::id().to_string()).unwrap();
    assert!(marker_names_a_live_process(&marker), "this process");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    std::fs::write(&marker, gone.to_string()).unwrap();
    assert!(
        !marker_names_a_live_process(&marker),
        "a process that exited"
    );
    std::fs::write(&marker, "not a pid").unwrap();
    assert!(
        marker_names_a_live_process(&marker),
        "unreadable: wait, as for a live writer"
    );
}

/// A writer's handle is cheap to clone; a clone publishes in the same record.
#[test]
fn a_writer_slot_clone_publishes_in_the_same_place() {
    let writers = in_process();
    let slot = register(&writers);
    let clone = slot.clone();
    let cell = cell(0, 0.0, false);
    cell.record(None, 0).add(1.0, None, clone.publisher(), CELL);
    assert!(writers.may_hold(CELL));
    assert!(!writers.may_hold(OTHER));
    slot.clear();
    assert!(!writers.may_hold(CELL));
}

/// What a kill leaves: the cell's name published, its bit set, one field of the new sample
/// stored; the repair clears the bit and the count is as before the sample.
#[test]
fn a_publication_names_the_cell_a_killed_writer_left_busy() {
    let writers = in_process();
    let slot = register(&writers);
    let cell = cell(3, 2.0, false);
    begin_update(&cell, &slot);
    cell.total.store(10.0f64.to_bits(), Ordering::Relaxed);
    let state = writers.state().unwrap();
    assert_eq!(state.publications(), vec![(CELL, None)]);
    assert!(cell.record(None, 0).repair(), "the bit was set");
    assert_eq!(cell.count.load(Ordering::Relaxed), 3);
    assert!(!cell.record(None, 0).repair(), "repaired once");
}
