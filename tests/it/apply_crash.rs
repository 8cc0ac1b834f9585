//! An engine killed with SIGKILL while applying a log ([`Engine::apply`], as a cluster
//! partition applies its log), and the exactly-once guarantee across the restarts. A child
//! process (this test binary, run again for one test) opens the engine's directory and applies a fixed stream of groups from its applied
//! sequence on; it is killed at chosen steps (the fault hook `TIERDB_FAULT_KILL_MID_APPLY`:
//! after the undo record, after the first message, after every store, after a checkpoint's
//! flush, and
//! halfway through the recovery at open), halfway through a bucket update (the writer's
//! `TIERDB_FAULT_KILL_MID_UPDATE`) and at random times. After each kill, a copy of the
//! directory is opened and must equal, bit for bit, an engine that applied the same prefix of
//! the stream without crashing; at the end the directory itself is opened, the rest of the
//! stream re-delivered, and the whole compared. The engine has a raw tier, so its appends
//! are checked the same way: every point once, none of a rolled-back group left behind; and
//! distribution series, whose buckets' histograms are compared too.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use tierdb::testing::fault::{KILL_MID_APPLY, KILL_MID_UPDATE};
use tierdb::time::{window_start, Span};
use tierdb::{Checkpoints, Engine, KeyIndex, ManualClock, SampleBatch, SeriesId, SeriesKind};
use tierdb::{RawTierSpec, TiersConfig};

use crate::common::{copy_dir, scratch_dir, small_tiers, NOW};

/// Set to the partition directory, the test runs as the child that gets killed.
const CHILD_DIR: &str = "TIERDB_IT_APPLY_CHILD_DIR";
const TEST: &str = "apply_crash::an_engine_killed_at_any_step_applies_every_message_exactly_once";
/// Enough that a child killed at a random time is usually still applying.
const GROUPS: u64 = 600;
const MESSAGES: u64 = 3;
const SERIES: u64 = 24;

/// The small tiers, and a raw tier holding the whole stream (two days of 1h periods).
fn tiers() -> TiersConfig {
    let mut tiers = small_tiers();
    tiers.raw = Some(RawTierSpec {
        name: "raw".to_string(),
        period: Span::from_secs(3_600),
        retention: Span::from_secs(48 * 3_600),
        create_ahead: 1,
        dedupe_unchanged: false,
    });
    tiers
}

/// The engine checkpoints every second group (never by time, so the kill steps fall where
/// the runs below name them): a crash rolls back one or two groups.
fn open(dir: &Path) -> Engine {
    Engine::builder(dir)
        .tiers(tiers())
        .clock(Arc::new(ManualClock::new(NOW)))
        .writer_threads(2)
        .background_maintenance(false)
        .checkpoints(Checkpoints {
            interval: std::time::Duration::MAX,
            groups: 2,
            samples: usize::MAX,
        })
        .open()
        .expect("open an engine")
}

/// splitmix64: the stream is the same in the parent and in every child.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The partition's log: `GROUPS` groups of `MESSAGES` messages, stream sequences with gaps.
/// Every fourth series is declared a counter (rising, with a reset now and then), and the
/// ones after them distributions (a timer's latencies); samples
/// march a minute per message from 32 hours before now, with late ones a day back (refused for counters)
/// and a few too old for every tier.
fn stream() -> Vec<Vec<(u64, SampleBatch)>> {
    let mut rng = 7u64;
    let mut counters = vec![0.0f64; SERIES as usize];
    let mut seq = 0;
    (0..GROUPS)
        .map(|g| {
            (0..MESSAGES)
                .map(|m| {
                    let mut batch = SampleBatch::default();
                    let mut index = KeyIndex::default();
                    for k in 0..20 {
                        let series = (next(&mut rng) % SERIES) as usize;
                        let key = format!("node.s{series}{{dc=d{}}}", series % 3);
                        let base = NOW - 32 * 3_600 + (g * MESSAGES + m) as i64 * 60 + k;
                        let ts = match next(&mut rng) % 20 {
                            0 => NOW - 26 * 3_600 + k,
                            1 => NOW - 4_000 * 86_400,
                            _ => base,
                        };
                        let (kind, value) = if series % 4 == 1 {
                            // A timer's latencies, over three decades.
                            let ms = 1.0 + (next(&mut rng) % 100_000) as f64 / 100.0;
                            (Some(SeriesKind::Distribution), ms)
                        } else if series.is_multiple_of(4) {
                            let step = (next(&mut rng) % 1_000) as f64 / 7.0;
                            counters[series] = if next(&mut rng).is_multiple_of(30) {
                                step
                            } else {
                                counters[series] + step
                            };
                            (Some(SeriesKind::Counter), counters[series])
                        } else {
                            (None, (next(&mut rng) % 10_000) as f64 / 3.0 - 1_000.0)
                        };
                        batch.push(&mut index, &key, kind, ts, value);
                    }
                    seq += 1 + next(&mut rng) % 4;
                    (seq, batch)
                })
                .collect()
        })
        .collect()
}

/// The child: applies the whole stream (what is applied already is skipped), one group per
/// call, as a consumer would after a restart.
fn apply_all(store: &Engine, stream: &[Vec<(u64, SampleBatch)>]) {
    for group in stream {
        store.apply(group).expect("apply");
    }
}

fn run_child(dir: &Path, env: &[(&str, String)]) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .env_remove(KILL_MID_APPLY)
        .env_remove(KILL_MID_UPDATE)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    command.spawn().unwrap()
}

/// Every bucket of every tier in its window, every raw point, every series' kind and counter
/// state: equal bit for bit, series matched by key. `other` may also hold series a
/// rolled-back group registered (registration is idempotent and not undone): those must
/// hold nothing.
fn assert_same(clean: &Engine, other: &Engine, what: &str) {
    let (a, b) = (clean.registry(), other.registry());
    let now = clean.now();
    let raw = |engine: &Engine, id: SeriesId| -> Vec<(i64, u64)> {
        let read = (engine.reader())
            .raw_points(id, 0, now + 3_600, 1_000_000)
            .expect("a raw tier");
        assert!(read.before.is_none() && read.after.is_none());
        read.points
            .iter()
            .map(|&(ts, v)| (ts, v.to_bits()))
            .collect()
    };
    let nothing = |engine: &Engine, id: SeriesId, key: &str| {
        assert_eq!(
            tierdb::testing::counter_state(engine, id),
            [0; 3],
            "{what}: {key}"
        );
        assert_eq!(raw(engine, id), [], "{what}: raw points of {key}");
        for (tier, spec) in engine.config().tiers.iter().enumerate() {
            let from = window_start(now, spec.retention, spec);
            let to = now + 2 * spec.resolution.secs() as i64;
            let buckets = engine
                .reader()
                .read_buckets(id, tier, from, to, spec.resolution)
                .unwrap();
            assert!(
                buckets
                    .iter()
                    .all(|(_, b)| b.count == 0 && b.total.to_bits() == 0),
                "{what}: {key} was only registered by a rolled-back group, yet holds data"
            );
        }
    };
    for i in 0..b.len() {
        let id = SeriesId(i as u32);
        let key = b.key(id).unwrap();
        if a.get(key.as_str()).is_none() {
            nothing(other, id, key.as_str());
        }
    }
    for i in 0..a.len() {
        let id = SeriesId(i as u32);
        let key = a.key(id).unwrap();
        let other_id = b.get(key.as_str()).expect("registered on both");
        assert_eq!(
            clean.series_kind(id),
            other.series_kind(other_id),
            "{what}: {key}"
        );
        assert_eq!(
            tierdb::testing::counter_state(clean, id),
            tierdb::testing::counter_state(other, other_id),
            "{what}: counter state of {key}"
        );
        assert_eq!(
            raw(clean, id),
            raw(other, other_id),
            "{what}: raw points of {key}"
        );
        for (tier, spec) in clean.config().tiers.iter().enumerate() {
            let from = window_start(now, spec.retention, spec);
            let to = now + 2 * spec.resolution.secs() as i64;
            let read = |engine: &Engine, id| {
                engine
                    .reader()
                    .read_buckets(id, tier, from, to, spec.resolution)
                    .unwrap()
            };
            for ((ts, p), (_, q)) in read(clean, id).iter().zip(read(other, other_id)) {
                assert_eq!(
                    [p.count, p.total.to_bits(), p.min.to_bits(), p.max.to_bits()],
                    [q.count, q.total.to_bits(), q.min.to_bits(), q.max.to_bits()],
                    "{what}: {key} tier {} at {ts}: {p:?} vs {q:?}",
                    spec.name
                );
            }
            if clean.series_kind(id) == SeriesKind::Distribution {
                let histograms = |engine: &Engine, id| -> Vec<_> {
                    (engine.reader())
                        .distribution(id, tier, from, to, spec.resolution)
                        .unwrap()
                        .into_iter()
                        .map(|point| {
                            assert!(
                                point.bucket.count == 0 || point.is_complete(),
                                "{what}: {key} tier {} at {}: the histogram does not count \
                                 what the bucket does: {point:?}",
                                spec.name,
                                point.ts
                            );
                            (point.ts, point.histogram)
                        })
                        .collect()
                };
                assert!(
                    histograms(clean, id) == histograms(other, other_id),
                    "{what}: histograms of {key} in tier {}",
                    spec.name
                );
            }
        }
    }
}

#[test]
fn an_engine_killed_at_any_step_applies_every_message_exactly_once() {
    let stream = stream();
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        let store = open(Path::new(&dir));
        apply_all(&store, &stream);
        store.close().unwrap();
        return;
    }
    let work = scratch_dir();
    let dir = work.path().join("applied");
    let clean_dir = work.path().join("clean");
    let clean = open(&clean_dir);
    // Applies to the clean engine every group the killed one recorded as applied.
    let catch_up = |applied: u64| {
        for group in &stream {
            if group.last().unwrap().0 <= applied {
                clean.apply(group).unwrap();
            }
        }
    };

    let mid_apply = |step: &str| vec![(KILL_MID_APPLY, step.to_string())];
    let mut runs: Vec<(String, Vec<(&str, String)>)> = Vec::new();
    for step in [
        "undo-written:2",
        "mid-apply:1",
        "applied:3",
        "flushed:2",
        "flushed:4",
    ] {
        runs.push((step.to_string(), mid_apply(step)));
    }
    // The undo chain of the checkpoint killed after its flush is in force: kill the recovery.
    runs.push(("mid-restore".into(), mid_apply("mid-restore")));
    runs.push((
        "mid-update".into(),
        vec![(KILL_MID_UPDATE, "5".to_string())],
    ));
    runs.push(("applied:1".into(), mid_apply("applied:1")));

    let mut rng = 99u64;
    let mut copies = 0;
    let mut check = |what: &str| {
        copies += 1;
        let copy = work.path().join(format!("copy{copies}"));
        copy_dir(&dir, &copy);
        let store = open(&copy);
        catch_up(store.applied());
        assert_eq!(store.applied(), clean.applied(), "{what}");
        assert_same(&clean, &store, what);
        store.close().unwrap();
        std::fs::remove_dir_all(&copy).unwrap();
    };
    for (what, env) in &runs {
        let status = run_child(&dir, env).wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "{what}: the fault hook kills the child: {status:?}"
        );
        check(what);
    }
    // At random times: the child may also get through the rest of the stream first.
    for round in 0..6 {
        let mut child = run_child(&dir, &[]);
        std::thread::sleep(std::time::Duration::from_millis(20 + next(&mut rng) % 300));
        let _ = child.kill();
        let status = child.wait().unwrap();
        assert!(
            status.signal() == Some(9) || status.success(),
            "random kill {round}: {status:?}"
        );
        check(&format!("random kill {round}"));
    }

    // The rest of the stream, re-delivered from the start, then everything compared.
    let store = open(&dir);
    apply_all(&store, &stream);
    catch_up(u64::MAX);
    let last = stream.last().unwrap().last().unwrap().0;
    assert_eq!((store.applied(), clean.applied()), (last, last));
    assert_same(&clean, &store, "the whole stream");
    store.close().unwrap();
    clean.close().unwrap();
}
