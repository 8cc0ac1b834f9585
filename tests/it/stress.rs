//! Concurrent readers and writers never see a torn bucket.
//!
//! Every series `s` only ever receives the value `c(s) = s + 1`, so a consistent bucket has
//! `total == count * c`, `min == max == c` (or is empty, all zero). A reader that mixed fields
//! of two updates (a new count with an old total, or a first count with unwritten min/max)
//! breaks that. Counts only grow, so each reader also checks that no bucket's count ever
//! goes down between its successive reads. The work is bounded by iteration counts, never by
//! wall-clock time, and the threads start together on a barrier so they overlap.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use tierdb::{
    Bucket, Display, Engine, Last, ManualClock, Query, Sample, SeriesId, Span, Timestamp,
};

use crate::common::{open, small_tiers, NOW};

/// Series written concurrently.
const SERIES: u32 = 8;
/// `record_batch` calls per writer thread.
const BATCHES: i64 = 150;
/// Caller threads writing (the engine has its own two writer threads behind them).
const WRITERS: usize = 2;
/// Reads every reader makes at least, even when the writers are already done.
const MIN_READS: u64 = 50;
/// Start of the hour the samples go to (NOW is on an hour boundary).
const HOUR: Timestamp = NOW - 3_600;
/// Start of a minute of yesterday: its 1m period file does not exist until a batch needs it,
/// so the first batches of both writing threads race to create it on demand.
const YESTERDAY: Timestamp = NOW - 86_400 - 1_800;
/// Minutes of `HOUR` written (one sample per series and minute per batch).
const MINUTES: i64 = 10;
/// Minutes of `YESTERDAY` written.
const OLD_MINUTES: i64 = 3;

/// The only value series `id` ever receives.
fn constant(id: SeriesId) -> f64 {
    f64::from(id.0 + 1)
}

/// One writer's batch number `round`: every series once in each written minute, at a second
/// that moves with the round so successive batches hit the same buckets at other instants.
fn batch(ids: &[SeriesId], round: i64) -> Vec<Sample> {
    let second = round % 60;
    let minutes = (0..MINUTES)
        .map(|m| HOUR + m * 60)
        .chain((0..OLD_MINUTES).map(|m| YESTERDAY + m * 60));
    minutes
        .flat_map(|minute| {
            ids.iter()
                .map(move |&id| Sample::new(id, minute + second, constant(id)))
        })
        .collect()
}

/// Checks one bucket against the invariant; `what` says where it came from.
fn check_consistent(bucket: &Bucket, c: f64, what: &dyn Fn() -> String) {
    if bucket.count == 0 {
        assert_eq!(*bucket, Bucket::EMPTY, "{}: empty but not zero", what());
        return;
    }
    assert_eq!(
        bucket.total,
        bucket.count as f64 * c,
        "{}: torn bucket {bucket:?} (value is always {c})",
        what()
    );
    assert_eq!(bucket.min, c, "{}: torn bucket {bucket:?}", what());
    assert_eq!(bucket.max, c, "{}: torn bucket {bucket:?}", what());
}

/// The ranges readers read, per tier index: every bucket the writers touch and some around.
fn ranges() -> [(usize, Timestamp, Timestamp); 4] {
    let day = NOW - NOW % 86_400;
    [
        (0, HOUR - 120, HOUR + (MINUTES + 2) * 60),
        (0, YESTERDAY - 60, YESTERDAY + (OLD_MINUTES + 1) * 60),
        (1, HOUR - 3_600, HOUR + 3_600),
        (2, day - 86_400, day + 86_400),
    ]
}

/// Reads every range of every series through `read_buckets` until the writers are done (and
/// at least `MIN_READS` times), checking each bucket and that counts never go down.
fn bucket_reader(engine: &Engine, ids: &[SeriesId], done: &AtomicBool, reads: &AtomicU64) {
    let mut seen: HashMap<(SeriesId, usize, Timestamp), u64> = HashMap::new();
    let mut round = 0u64;
    while round < MIN_READS || !done.load(Ordering::Acquire) {
        for &id in ids {
            let c = constant(id);
            for (tier, from, to) in ranges() {
                let step = engine.config().tiers[tier].resolution;
                let buckets = engine
                    .reader()
                    .read_buckets(id, tier, from, to, step)
                    .unwrap();
                for (ts, bucket) in &buckets {
                    check_consistent(bucket, c, &|| {
                        format!("series {id} tier {tier} bucket {ts} read {round}")
                    });
                    let last = seen.entry((id, tier, *ts)).or_insert(0);
                    assert!(
                        bucket.count >= *last,
                        "series {id} tier {tier} bucket {ts}: count went from {last} to {}",
                        bucket.count
                    );
                    *last = bucket.count;
                }
            }
        }
        round += 1;
    }
    reads.fetch_add(round, Ordering::Relaxed);
}

/// Reads through `Engine::query`, merged 10 minutes at a time: the average of any point must
/// be exactly the series' constant, and min and max too.
fn query_reader(engine: &Engine, ids: &[SeriesId], done: &AtomicBool, reads: &AtomicU64) {
    let mut round = 0u64;
    while round < MIN_READS || !done.load(Ordering::Acquire) {
        for &id in ids {
            let name = engine.registry().key(id).unwrap().to_string();
            for display in [Display::Avg, Display::Min, Display::Max] {
                let result = engine
                    .query(
                        &Query::new(name.as_str(), HOUR, HOUR + 3_600)
                            .tier("1m")
                            .step(Span::from_secs(600))
                            .display(display),
                    )
                    .unwrap();
                for (ts, value) in result.points {
                    if let Some(value) = value {
                        assert_eq!(
                            value,
                            constant(id),
                            "{name} {} at {ts}, read {round}: torn merged bucket",
                            display.as_str()
                        );
                    }
                }
            }
        }
        round += 1;
    }
    reads.fetch_add(round, Ordering::Relaxed);
}

#[test]
fn concurrent_readers_never_see_a_torn_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open(dir.path(), &clock, small_tiers());
    let ids: Vec<SeriesId> = (0..SERIES)
        .map(|i| engine.series(&format!("stress{{n={i}}}")).unwrap())
        .collect();
    let done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let accepted = AtomicU64::new(0);
    let start = Barrier::new(WRITERS + 3);

    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (engine, ids, start, accepted) = (&engine, &ids, &start, &accepted);
                s.spawn(move || {
                    start.wait();
                    for round in 0..BATCHES {
                        let samples = batch(ids, round * WRITERS as i64 + w as i64);
                        let report = engine.record_batch(&samples).unwrap();
                        assert_eq!(report.rejected_total(), 0, "{report:?}");
                        accepted.fetch_add(report.accepted, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for _ in 0..2 {
            let (engine, ids, start, done, reads) = (&engine, &ids, &start, &done, &reads);
            s.spawn(move || {
                start.wait();
                bucket_reader(engine, ids, done, reads);
            });
        }
        let (engine, ids, start, done, reads) = (&engine, &ids, &start, &done, &reads);
        s.spawn(move || {
            start.wait();
            query_reader(engine, ids, done, reads);
        });
        for writer in writers {
            writer.join().unwrap();
        }
        done.store(true, Ordering::Release);
    });

    // Exact final state: every series got one sample per written minute per batch.
    let per_bucket = BATCHES as u64 * WRITERS as u64;
    let per_series = per_bucket * (MINUTES + OLD_MINUTES) as u64;
    assert_eq!(
        accepted.load(Ordering::Relaxed),
        per_series * u64::from(SERIES)
    );
    assert_eq!(engine.stats().accepted, per_series * u64::from(SERIES));
    for &id in &ids {
        let c = constant(id);
        let minute = Span::from_secs(60);
        let recent = engine
            .reader()
            .read_buckets(id, 0, HOUR, HOUR + MINUTES * 60, minute)
            .unwrap();
        let old = engine
            .reader()
            .read_buckets(id, 0, YESTERDAY, YESTERDAY + OLD_MINUTES * 60, minute)
            .unwrap();
        for (ts, bucket) in recent.iter().chain(&old) {
            // Round r writes second r % 60 of every minute: the latest is the last second.
            let expected = Bucket {
                count: per_bucket,
                total: per_bucket as f64 * c,
                min: c,
                max: c,
                last: Some(Last::new(c, ts + (per_bucket as Timestamp - 1).min(59))),
            };
            assert_eq!(*bucket, expected, "series {id} minute {ts}");
        }
        let hour = engine
            .reader()
            .read_buckets(id, 1, HOUR, HOUR + 3_600, Span::from_secs(3_600))
            .unwrap();
        assert_eq!(hour[0].1.count, per_bucket * MINUTES as u64, "series {id}");
        assert_eq!(hour[0].1.total, (per_bucket * MINUTES as u64) as f64 * c);
        let day = NOW - NOW % 86_400;
        let days = engine
            .reader()
            .read_buckets(id, 2, day - 86_400, day + 86_400, Span::from_secs(86_400))
            .unwrap();
        let counts: Vec<u64> = days.iter().map(|(_, b)| b.count).collect();
        assert_eq!(
            counts,
            vec![per_bucket * OLD_MINUTES as u64, per_bucket * MINUTES as u64],
            "series {id}: yesterday and today in the 1d tier"
        );
    }
    assert!(reads.load(Ordering::Relaxed) >= 3 * MIN_READS);
    engine.close().unwrap();
}

/// Series registered while other series are written and read: new chunk files get created
/// (16 series per chunk, so 40 series need three chunks) under a reader that reads every
/// series registered so far, and no read of a fresh slot shows anything but empty or
/// consistent buckets.
#[test]
fn new_series_and_chunks_under_concurrent_reads() {
    const NEW_SERIES: u32 = 40;
    const ROUNDS: i64 = 5;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open(dir.path(), &clock, small_tiers());
    let registered = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let start = Barrier::new(2);

    std::thread::scope(|s| {
        let (engine_ref, registered_ref, done_ref, start_ref) =
            (&engine, &registered, &done, &start);
        s.spawn(move || {
            start_ref.wait();
            let mut rounds = 0u64;
            while rounds < MIN_READS || !done_ref.load(Ordering::Acquire) {
                let known = registered_ref.load(Ordering::Acquire) as u32;
                for id in (0..known).map(SeriesId) {
                    let buckets = engine_ref
                        .reader()
                        .read_buckets(id, 0, HOUR, HOUR + 300, Span::from_secs(60))
                        .unwrap();
                    for (ts, bucket) in &buckets {
                        check_consistent(bucket, constant(id), &|| {
                            format!("series {id} bucket {ts} read {rounds}")
                        });
                    }
                }
                rounds += 1;
            }
        });
        start.wait();
        for i in 0..NEW_SERIES {
            let id = engine.series(&format!("fresh.{i}")).unwrap();
            assert_eq!(id, SeriesId(i));
            registered.store(u64::from(i) + 1, Ordering::Release);
            let ids: Vec<SeriesId> = (0..=i).map(SeriesId).collect();
            for round in 0..ROUNDS {
                let samples: Vec<Sample> = ids
                    .iter()
                    .map(|&id| Sample::new(id, HOUR + round * 60, constant(id)))
                    .collect();
                let report = engine.record_batch(&samples).unwrap();
                assert_eq!(report.accepted, samples.len() as u64);
            }
        }
        done.store(true, Ordering::Release);
    });

    // Series i was written in the batches of rounds i..NEW_SERIES: NEW_SERIES - i per minute.
    for i in 0..NEW_SERIES {
        let id = SeriesId(i);
        let buckets = engine
            .reader()
            .read_buckets(id, 0, HOUR, HOUR + ROUNDS * 60, Span::from_secs(60))
            .unwrap();
        for (ts, bucket) in buckets {
            let n = u64::from(NEW_SERIES - i);
            assert_eq!(bucket.count, n, "series {id} minute {ts}");
            assert_eq!(
                bucket.total,
                n as f64 * constant(id),
                "series {id} minute {ts}"
            );
        }
    }
    // New chunks' files come from the chunk creator's thread; a pass waits for any it is
    // making and creates the rest. At noon tomorrow's files are not due yet: they come in
    // the second half of the day.
    engine.maintain().unwrap();
    assert_eq!(engine.stats().tiers[0].disk.files, 3, "today, three chunks");
    engine.close().unwrap();
}
