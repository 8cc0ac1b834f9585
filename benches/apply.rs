//! Apply throughput of an engine fed a log, as a cluster partition is (`Engine::apply` with its default
//! checkpoints: the pre-images a group is the first since the last checkpoint to touch, read
//! and appended to the undo chain, fsynced; the messages stored through one `record_batch`;
//! at each checkpoint, a flush and the applied sequence fsynced) against the same samples through
//! plain `record_batch` in the same run (the control), and through `record_batch` plus one
//! `Engine::flush` per group (what a durable commit of every group would cost). The
//! partition's engine has the writers a node opens it with (`PARTITION_WRITERS`: one, so the
//! applying thread stores the samples itself); the control, a single node's (one per core).
//!
//! 1,000 gauge series, one message per 10 s instant holding a sample of each (1,000
//! samples), groups of 1, 10 and 100 messages (1k, 10k and 100k samples; a cluster node
//! applies groups of about the first size under load), default tiers, simulated
//! time inside the files created ahead. `cargo bench --bench apply`; `TIERDB_BENCH_DIR`
//! chooses the file system (fsync costs differ widely: tmpfs makes them free).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use tierdb::testing::cluster::apply::PARTITION_WRITERS;
use tierdb::{
    Engine, EngineBuilder, KeyIndex, ManualClock, Sample, SampleBatch, SeriesId, TiersConfig,
};

const SERIES: u32 = 1_000;
const STEP: i64 = 10;
/// 2011-12-22T00:00:00Z: a multiple of every default period.
const BOUNDARY: i64 = 1_324_512_000;
/// Groups prepared per size; the run cycles through them.
const GROUPS: usize = 8;

fn key(i: u32) -> String {
    format!("host{:03}.metric{:03}", i / 100, i % 100)
}

fn builder(dir: &std::path::Path, clock: &Arc<ManualClock>) -> EngineBuilder {
    Engine::builder(dir)
        .tiers(TiersConfig::default())
        .clock(clock.clone())
}

/// One group as `Engine::apply` takes it: messages with their stream sequences.
type WireGroup = Vec<(u64, SampleBatch)>;
/// The same group as the control writes it: one batch of resolved samples per message.
type PlainGroup = Vec<Vec<Sample>>;

/// `GROUPS` groups of `messages` messages, each an instant of every series, instants
/// following each other; with the ids the control engine gave the series.
fn prepare(messages: usize, ids: &[SeriesId], start: i64) -> (Vec<WireGroup>, Vec<PlainGroup>) {
    let mut wire = Vec::new();
    let mut plain = Vec::new();
    let mut ts = start;
    for _ in 0..GROUPS {
        let mut group = Vec::new();
        let mut samples = Vec::new();
        for _ in 0..messages {
            let mut batch = SampleBatch::default();
            let mut index = KeyIndex::default();
            let mut message = Vec::with_capacity(SERIES as usize);
            for (i, &id) in ids.iter().enumerate() {
                let value = ((ts / STEP) % 600) as f64 + i as f64 / 7.0;
                batch.push(&mut index, &key(i as u32), None, ts, value);
                message.push(Sample::new(id, ts, value));
            }
            group.push((0, batch));
            samples.push(message);
            ts += STEP;
        }
        wire.push(group);
        plain.push(samples);
    }
    (wire, plain)
}

fn apply(c: &mut Criterion) {
    let start = BOUNDARY - 1_800;
    let (plain_dir, store_dir) = (support::bench_dir(), support::bench_dir());
    let plain_clock = Arc::new(ManualClock::new(start));
    let store_clock = Arc::new(ManualClock::new(start));
    let plain = builder(plain_dir.path(), &plain_clock)
        .open()
        .expect("open");
    let store = (builder(store_dir.path(), &store_clock).writer_threads(PARTITION_WRITERS))
        .open()
        .expect("open");
    let ids: Vec<SeriesId> = (0..SERIES)
        .map(|i| plain.series(&key(i)).expect("series"))
        .collect();
    for i in 0..SERIES {
        store.series(&key(i)).expect("series");
    }
    for engine in [&plain, &store] {
        while engine.maintain().expect("maintenance").pending > 0 {}
    }
    let mut seq = 0u64;
    let mut group = c.benchmark_group("apply");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(10));
    for messages in [1usize, 10, 100] {
        let samples = messages as u64 * u64::from(SERIES);
        let (mut wire, batches) = prepare(messages, &ids, start);
        group.throughput(Throughput::Elements(samples));
        let name = format!("{}k_samples", samples / 1_000);
        let mut round = 0;
        group.bench_function(format!("{name}/record_batch"), |b| {
            b.iter_custom(|iters| {
                let begin = Instant::now();
                for _ in 0..iters {
                    let g = &batches[round % GROUPS];
                    round += 1;
                    plain_clock.set(g[0][0].ts);
                    for message in g {
                        let report = plain.record_batch(message).expect("batch");
                        assert_eq!(report.accepted, u64::from(SERIES));
                    }
                }
                begin.elapsed()
            })
        });
        group.bench_function(format!("{name}/record_batch_and_flush"), |b| {
            b.iter_custom(|iters| {
                let begin = Instant::now();
                for _ in 0..iters {
                    let g = &batches[round % GROUPS];
                    round += 1;
                    plain_clock.set(g[0][0].ts);
                    for message in g {
                        plain.record_batch(message).expect("batch");
                    }
                    plain.flush().expect("flush");
                }
                begin.elapsed()
            })
        });
        group.bench_function(format!("{name}/partition_apply"), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let g = &mut wire[round % GROUPS];
                    round += 1;
                    for (s, _) in g.iter_mut() {
                        seq += 1;
                        *s = seq;
                    }
                    store_clock.set(g[0].1.samples[0].ts);
                    let begin = Instant::now();
                    let report = store.apply(g).expect("apply");
                    took += begin.elapsed();
                    assert_eq!(report.samples.accepted, samples);
                }
                took
            })
        });
    }
    group.finish();
    store.close().expect("close");
    plain.close().expect("close");
}

criterion_group!(benches, apply);
criterion_main!(benches);
