//! Distribution series end to end on a real data directory: seeded log-normal latencies
//! (three decades wide) into 100 series, and every p50, p90 and p99 at 1m, 5m, 1h and 1d,
//! for one series and merged over all, within the relative error the answer states of the
//! exact nearest-rank quantile of the raw values; through a reopen and maintenance passes.

use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};
use tierdb::histogram::Histogram;
use tierdb::{DistributionPoint, Engine, Sample, SeriesId, SeriesKind, Span, Timestamp};

use crate::common::{engine_at, open, quiet_engine_at, NOW};

const SERIES: usize = 100;
/// Samples per series per minute.
const PER_MINUTE: i64 = 5;
/// Six hours of history up to NOW.
const FROM: Timestamp = NOW - 6 * 3600;

/// Every series' raw values with their times.
fn feed(engine: &Engine) -> (Vec<SeriesId>, Vec<Vec<(Timestamp, f64)>>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(53);
    let latency = LogNormal::new(3.0, 1.05).expect("valid");
    let ids: Vec<SeriesId> = (0..SERIES)
        .map(|i| {
            let id = engine.series(&format!("req.time{{host=h{i:03}}}")).unwrap();
            engine.declare_kind(id, SeriesKind::Distribution).unwrap();
            id
        })
        .collect();
    let mut raw = vec![Vec::new(); SERIES];
    let mut batch = Vec::new();
    for minute in 0..(NOW - FROM) / 60 {
        for (s, &id) in ids.iter().enumerate() {
            for k in 0..PER_MINUTE {
                let ts = FROM + minute * 60 + k * (60 / PER_MINUTE);
                let v: f64 = latency.sample(&mut rng);
                raw[s].push((ts, v));
                batch.push(Sample::new(id, ts, v));
            }
        }
        if batch.len() > 20_000 {
            let report = engine.record_batch(&batch).unwrap();
            assert_eq!(report.rejected_total(), 0, "{report:?}");
            batch.clear();
        }
    }
    let report = engine.record_batch(&batch).unwrap();
    assert_eq!(report.rejected_total(), 0, "{report:?}");
    (ids, raw)
}

/// The nearest-rank quantile: the value of rank max(1, ceil(q n)).
fn exact(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// Checks every point of `points` against the raw values inside it; returns the worst
/// relative error seen and the largest bound stated.
fn check(points: &[DistributionPoint], raw: &[(Timestamp, f64)], step: i64) -> (f64, f64) {
    let (mut worst, mut bound) = (0f64, 0f64);
    for point in points {
        let mut inside: Vec<f64> = raw
            .iter()
            .filter(|(ts, _)| (point.ts..point.ts + step).contains(ts))
            .map(|&(_, v)| v)
            .collect();
        assert_eq!(
            point.bucket.count as usize,
            inside.len(),
            "count at {}",
            point.ts
        );
        if inside.is_empty() {
            continue;
        }
        assert!(
            point.is_complete(),
            "histogram holds every sample at {}",
            point.ts
        );
        let stated = point.relative_error().expect("a histogram");
        bound = bound.max(stated);
        for q in [0.5, 0.9, 0.99] {
            let want = exact(&mut inside, q);
            let got = point.quantile(q).expect("answered");
            let err = (got - want).abs() / want;
            worst = worst.max(err);
            assert!(
                err <= stated + 1e-12,
                "p{} at {} step {step}: {got} vs exact {want} ({err:.5} > {stated:.5})",
                q * 100.0,
                point.ts
            );
        }
    }
    (worst, bound)
}

fn read(
    engine: &Engine,
    id: SeriesId,
    tier: &str,
    from: Timestamp,
    to: Timestamp,
    step: i64,
) -> Vec<DistributionPoint> {
    let reader = engine.reader();
    let tier = engine
        .config()
        .tiers
        .iter()
        .position(|t| t.name == tier)
        .unwrap();
    reader
        .distribution(id, tier, from, to, Span::from_secs(step as u64))
        .unwrap()
}

/// Every tier, one series and all merged.
fn check_all(engine: &Engine, ids: &[SeriesId], raw: &[Vec<(Timestamp, f64)>]) {
    let day = NOW - NOW % 86_400;
    let reads = [
        ("1m", NOW - 1800, NOW, 60),
        ("5m", FROM, NOW, 300),
        ("1h", FROM, NOW, 3600),
        ("1d", day, day + 86_400, 86_400),
    ];
    for (tier, from, to, step) in reads {
        let (worst, bound) = check(&read(engine, ids[7], tier, from, to, step), &raw[7], step);
        eprintln!("one series, {tier}: worst relative error {worst:.5}, bound {bound:.5}");
        // Merged over all series, as an aggregate merges them.
        let mut merged: Vec<DistributionPoint> = Vec::new();
        for &id in ids {
            for (i, point) in read(engine, id, tier, from, to, step)
                .into_iter()
                .enumerate()
            {
                match merged.get_mut(i) {
                    None => merged.push(point),
                    Some(m) => {
                        m.bucket.merge(&point.bucket);
                        let h = point.histogram.unwrap_or_default();
                        m.histogram.get_or_insert_with(Histogram::default).merge(&h);
                    }
                }
            }
        }
        let all: Vec<(Timestamp, f64)> = raw.iter().flatten().copied().collect();
        let (worst, bound) = check(&merged, &all, step);
        eprintln!("all series, {tier}: worst relative error {worst:.5}, bound {bound:.5}");
    }
}

#[test]
fn quantiles_hold_at_every_tier_through_a_reopen_and_maintenance() {
    let (dir, engine, clock) = engine_at(NOW);
    let (ids, raw) = feed(&engine);
    check_all(&engine, &ids, &raw);
    // A minute's point holds a few samples: the histogram keeps the default scale.
    let minute = read(&engine, ids[0], "1m", NOW - 60, NOW, 60);
    assert!(minute[0].relative_error().unwrap() < 0.0055);

    // The 1m period that closed at 12:00 is past its grace after 12:20: maintenance
    // compacts it, histograms and all, and every point reads as it did hot.
    let hot = closed_period_points(&engine, &ids);
    clock.set(NOW + 1800);
    engine.maintain().unwrap();
    clock.set(NOW + 1900);
    engine.maintain().unwrap();
    assert_eq!(tier_files(dir.path(), "1m", CLOSED), [".tdc"], "compacted");
    assert_same_points(&closed_period_points(&engine, &ids), &hot);
    check_all(&engine, &ids, &raw);
    engine.close().unwrap();
    let engine = open(dir.path(), &clock, tierdb::TiersConfig::default());
    assert_eq!(engine.series_kind(ids[0]), SeriesKind::Distribution);
    assert_eq!(tier_files(dir.path(), "1m", CLOSED), [".tdc"]);
    assert_same_points(&closed_period_points(&engine, &ids), &hot);
    check_all(&engine, &ids, &raw);
}

/// Every series' points over the 1m tier's period that closes at [`NOW`], a minute and an
/// hour wide.
fn closed_period_points(engine: &Engine, ids: &[SeriesId]) -> Vec<Vec<DistributionPoint>> {
    ids.iter()
        .flat_map(|&id| [60, 3600].map(|step| read(engine, id, "1m", CLOSED, NOW, step)))
        .collect()
}

/// The points of `found` are those of `want`: buckets, histograms and quantiles exactly.
fn assert_same_points(found: &[Vec<DistributionPoint>], want: &[Vec<DistributionPoint>]) {
    assert_eq!(found.len(), want.len());
    for (f, w) in found.iter().flatten().zip(want.iter().flatten()) {
        assert!(
            w.is_complete(),
            "every point holds its histogram at {}",
            w.ts
        );
        assert_eq!(f, w, "the point at {}", w.ts);
        for q in [0.5, 0.9, 0.99, 0.999] {
            assert_eq!(
                f.quantile(q).map(f64::to_bits),
                w.quantile(q).map(f64::to_bits),
                "p{} at {}",
                q * 100.0,
                w.ts
            );
        }
    }
}

/// Start of the 1m tier's period (6 h) that closes at [`NOW`]: the one the feed fills.
const CLOSED: Timestamp = FROM;

/// The suffixes of the files of tier `tier` for the period starting at `start`, chunk 0.
fn tier_files(dir: &std::path::Path, tier: &str, start: Timestamp) -> Vec<String> {
    let stem = tierdb::testing::storage::format::file_name(start, 0);
    let stem = stem.strip_suffix(".tdb").expect("a hot file name");
    let mut found: Vec<String> = std::fs::read_dir(dir.join("tiers").join(tier))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            Some(name.strip_prefix(stem)?.to_string())
        })
        .collect();
    found.sort();
    found
}

/// A late sample into a compacted period makes it hot again with every histogram, and it
/// compacts again with them; quantiles hold at every step, and after a reopen.
#[test]
fn a_late_sample_into_a_compacted_period_keeps_every_histogram() {
    let (dir, engine, clock) = engine_at(NOW);
    let (ids, mut raw) = feed(&engine);
    clock.set(NOW + 1800);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(tier_files(dir.path(), "1m", CLOSED), [".tdc"], "compacted");

    let late = NOW - 90;
    let report = engine
        .record_batch(&[Sample::new(ids[7], late, 4321.0)])
        .unwrap();
    assert_eq!(report.rejected_total(), 0, "{report:?}");
    raw[7].push((late, 4321.0));
    assert_eq!(tier_files(dir.path(), "1m", CLOSED), [".tdb"], "hot again");
    check_all(&engine, &ids, &raw);

    clock.set(NOW + 3600);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(
        tier_files(dir.path(), "1m", CLOSED),
        [".tdc"],
        "compacted again"
    );
    check_all(&engine, &ids, &raw);
    engine.close().unwrap();
    let engine = open(dir.path(), &clock, tierdb::TiersConfig::default());
    check_all(&engine, &ids, &raw);
}

/// The histogram cells of `slot` in the hot file of tier `tier` for the period starting at
/// `start` (chunk 0), read from the file's bytes: each cell's words, whether zero or not.
fn histogram_cells(
    engine: &Engine,
    dir: &std::path::Path,
    tier: &str,
    start: Timestamp,
    slot: u32,
) -> Vec<bool> {
    use tierdb::testing::storage::format::{cell_index, CellLayout, PeriodMeta};
    let spec = engine
        .config()
        .tiers
        .iter()
        .find(|t| t.name == tier)
        .unwrap();
    let expected = PeriodMeta {
        tier: tier.to_string(),
        resolution: spec.resolution,
        period: spec.period,
        period_start: start,
        slots: engine.config().engine.series_per_chunk,
        chunk: 0,
        histogram_cells: CellLayout::new_file(spec.resolution),
    };
    let path = dir.join("tiers").join(tier).join(expected.file_name());
    let bytes = std::fs::read(&path).unwrap();
    // The cells as the file's header records them (192 bytes a new file's, 256 in a period
    // made hot again), the 16 cells of a run interleaved word by word.
    let meta = PeriodMeta::decode(&bytes, &path).unwrap();
    assert!(meta.histogram_cells.interleaved);
    let words = meta.histogram_cell_len() / 8;
    let area = &bytes[meta.histogram_offset() as usize..];
    (0..meta.buckets())
        .map(|b| {
            let index = cell_index(b, slot, meta.slots);
            let run = (index - index % 16) * words;
            (0..words).any(|j| {
                let at = (run + 16 * j + index % 16) * 8;
                area[at..at + 8].iter().any(|&x| x != 0)
            })
        })
        .collect()
}

/// Deleting a distribution empties its histogram cells in hot files, and in a compacted
/// period (made hot again to clear it, as its records are, and compacted again without
/// them); the other series keep theirs.
#[test]
fn deleting_a_distribution_empties_its_histograms_hot_and_compacted() {
    let (dir, engine, clock) = engine_at(NOW);
    let (ids, raw) = feed(&engine);
    clock.set(NOW + 1800);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(tier_files(dir.path(), "1m", CLOSED), [".tdc"], "compacted");
    let day = NOW - NOW % 86_400;
    let (victim, kept) = (ids[3].0, ids[4].0);
    assert!(histogram_cells(&engine, dir.path(), "5m", day, victim).contains(&true));

    let deleted = engine.delete_series(&[ids[3]]).unwrap();
    assert_eq!(deleted.series.len(), 1);
    for tier in ["5m", "1h", "1d"] {
        let start = match tier {
            "5m" => day,
            _ => {
                let period = engine
                    .config()
                    .tiers
                    .iter()
                    .find(|t| t.name == tier)
                    .unwrap()
                    .period
                    .secs() as i64;
                NOW - NOW.rem_euclid(period)
            }
        };
        assert!(
            !histogram_cells(&engine, dir.path(), tier, start, victim).contains(&true),
            "{tier}: the deleted series' histograms are zero"
        );
        assert!(
            histogram_cells(&engine, dir.path(), tier, start, kept).contains(&true),
            "{tier}: the others keep theirs"
        );
    }
    // The compacted period was made hot again to clear the slot.
    assert_eq!(tier_files(dir.path(), "1m", CLOSED), [".tdb"]);
    assert!(!histogram_cells(&engine, dir.path(), "1m", CLOSED, victim).contains(&true));
    assert!(histogram_cells(&engine, dir.path(), "1m", CLOSED, kept).contains(&true));

    // Compacted again: the slot holds nothing, the others their histograms.
    clock.set(NOW + 3600);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(
        tier_files(dir.path(), "1m", CLOSED),
        [".tdc"],
        "compacted again"
    );
    let spec = &engine.config().tiers[0];
    let meta = tierdb::testing::storage::format::PeriodMeta {
        tier: "1m".to_string(),
        resolution: spec.resolution,
        period: spec.period,
        period_start: CLOSED,
        slots: engine.config().engine.series_per_chunk,
        chunk: 0,
        histogram_cells: tierdb::testing::storage::format::CellLayout::new_file(spec.resolution),
    };
    let name = tierdb::testing::storage::compact::CompactFile::file_name(&meta);
    let path = dir.path().join("tiers").join("1m").join(name);
    let compacted = tierdb::testing::storage::compact::CompactFile::new(path, meta.clone());
    let reader = compacted.open_reader().unwrap();
    let gone = reader
        .read_slot_distributions(victim, 0..meta.buckets())
        .unwrap();
    assert!(gone.iter().all(|(b, h)| b.is_empty() && h.is_none()));
    let other = reader
        .read_slot_distributions(kept, 0..meta.buckets())
        .unwrap();
    assert!(other
        .iter()
        .any(|(b, h)| b.count > 0 && h.as_ref().map(Histogram::count) == Some(b.count)));
    let rest: Vec<SeriesId> = ids.iter().copied().filter(|&id| id != ids[3]).collect();
    let rest_raw: Vec<Vec<(Timestamp, f64)>> = raw
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != 3)
        .map(|(_, r)| r.clone())
        .collect();
    check_all(&engine, &rest, &rest_raw);
}

#[test]
fn kinds_stay_fixed() {
    let (_dir, engine, _clock) = engine_at(NOW);
    let gauge = engine.series("temp{room=a}").unwrap();
    engine.declare_kind(gauge, SeriesKind::Gauge).unwrap();
    // A series fixed as a gauge stays one (StatsD timers were declared gauges before).
    engine
        .declare_kind(gauge, SeriesKind::Distribution)
        .unwrap();
    assert_eq!(engine.series_kind(gauge), SeriesKind::Gauge);
    let counter = engine.series("hits").unwrap();
    engine.declare_kind(counter, SeriesKind::Counter).unwrap();
    assert!(engine
        .declare_kind(counter, SeriesKind::Distribution)
        .is_err());
    let timer = engine.series("req.time").unwrap();
    engine
        .declare_kind(timer, SeriesKind::Distribution)
        .unwrap();
    assert!(engine.declare_kind(timer, SeriesKind::Gauge).is_err());
    assert_eq!(
        engine.stats().counters,
        1,
        "a distribution is not a counter"
    );

    // A gauge's buckets hold no histogram; a distribution's every sample.
    engine
        .record_batch(&[
            Sample::new(gauge, NOW - 30, 1.0),
            Sample::new(timer, NOW - 30, 250.0),
        ])
        .unwrap();
    let g = read(&engine, gauge, "1m", NOW - 60, NOW, 60);
    assert_eq!((g[0].bucket.count, g[0].histogram.is_none()), (1, true));
    let t = read(&engine, timer, "1m", NOW - 60, NOW, 60);
    assert!(t[0].is_complete());
    let p99 = t[0].quantile(0.99).unwrap();
    assert_eq!(p99, 250.0, "clamped to the exact min and max of one sample");
}

/// Set to the data directory, the crash test runs as the child that gets killed.
const CHILD_DIR: &str = "TIERDB_IT_DISTRIBUTION_CRASH_CHILD_DIR";
/// The crash test's name, for the child to run it alone.
const CRASH_TEST: &str = "distributions::a_histogram_torn_by_a_kill_is_put_back";
/// The timer whose update is interrupted.
const VICTIM: u32 = 5;

fn open_quiet(dir: &std::path::Path) -> Engine {
    Engine::builder(dir)
        .tiers(crate::common::small_tiers())
        .clock(std::sync::Arc::new(tierdb::ManualClock::new(NOW)))
        .writer_threads(2)
        .background_maintenance(false)
        .open()
        .expect("open engine")
}

/// A writer killed halfway through storing a timer's histogram (the record's
/// update-in-flight bit set, half the new histogram's words stored): the next open puts the
/// histogram back from the image its writer held in `writers.state`, so the bucket and its
/// histogram agree again, as before the unacknowledged sample. Neither the update, nor the
/// kill, nor the repair stores into the timer's entry of the latest area, whose page no
/// batch reserved: it stays a hole.
#[test]
fn a_histogram_torn_by_a_kill_is_put_back() {
    let minute = NOW - NOW % 60 - 600;
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        let engine = open_quiet(std::path::Path::new(&dir));
        let _ = engine.record_batch(&[Sample::new(SeriesId(VICTIM), minute + 59, 12345.0)]);
        unreachable!("the fault hook kills the process in the writer");
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let point = |engine: &Engine| {
        let tier = engine
            .config()
            .tiers
            .iter()
            .position(|t| t.name == "1m")
            .unwrap();
        engine
            .reader()
            .distribution(
                SeriesId(VICTIM),
                tier,
                minute,
                minute + 60,
                Span::from_secs(60),
            )
            .unwrap()
            .remove(0)
    };
    let before = {
        let engine = open_quiet(dir);
        for s in 0..16 {
            engine.series(&format!("svc{s}.time")).unwrap();
        }
        engine
            .declare_kind(SeriesId(VICTIM), SeriesKind::Distribution)
            .unwrap();
        let samples: Vec<Sample> = (0..50)
            .map(|i| {
                Sample::new(
                    SeriesId(VICTIM),
                    minute + i,
                    1.0 + f64::from(i as u32).powi(3),
                )
            })
            .collect();
        assert_eq!(engine.record_batch(&samples).unwrap().accepted, 50);
        let before = point(&engine);
        assert!(before.is_complete());
        engine.close().unwrap();
        before
    };
    let victim = VICTIM.to_string();
    crate::support::process::run_child_until_it_kills_itself(
        CRASH_TEST,
        &[
            (CHILD_DIR, dir.as_os_str()),
            (tierdb::testing::fault::KILL_MID_UPDATE, victim.as_ref()),
        ],
    );
    let engine = open_quiet(dir);
    let recovery = engine.recovery().expect("an unclean open").clone();
    assert_eq!(recovery.full_scan, None, "{recovery:?}");
    assert_eq!(recovery.interrupted, 1, "{recovery:?}");
    let after = point(&engine);
    assert_eq!(after.bucket.count, 50, "the count as before the sample");
    assert_eq!(
        after.histogram, before.histogram,
        "the histogram put back whole"
    );
    assert!(after.is_complete());
    // The next write heals the rest: the bucket takes it, histogram and all.
    engine
        .record_batch(&[Sample::new(SeriesId(VICTIM), minute + 59, 7.0)])
        .unwrap();
    let healed = point(&engine);
    assert_eq!(healed.bucket.count, 51);
    assert!(healed.is_complete());
    assert_eq!(latest_pages_with_data(&engine, dir, minute, 1), [false]);
}

/// StatsD timers over real UDP into a server, read back over HTTP: every `p50`, `p90` and
/// `p99` of one series per minute, and of all series merged over the whole range, within
/// the relative error the answer states of the exact nearest-rank quantile; `hist` holds
/// every sample.
#[test]
fn statsd_timers_answer_percentiles_over_http() {
    use crate::support::server::TestServer;
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    const TIMERS: usize = 20;
    const PER_MINUTE: usize = 30;
    const MINUTES: i64 = 3;
    let server = TestServer::with_statsd(tierdb::TiersConfig::default(), Duration::from_secs(10));
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let latency = LogNormal::new(3.0, 1.05).expect("valid");
    // values[timer][minute]
    let mut values = vec![vec![Vec::new(); MINUTES as usize]; TIMERS];
    let start = NOW - NOW % 60;
    for minute in 0..MINUTES {
        server.clock.set(start + minute * 60);
        for (t, timer) in values.iter_mut().enumerate() {
            let lines: Vec<String> = (0..PER_MINUTE)
                .map(|_| {
                    // Whole microseconds, as a client's millisecond timer with 3 decimals.
                    let v: f64 =
                        (Distribution::<f64>::sample(&latency, &mut rng) * 1000.0).round() / 1000.0;
                    timer[minute as usize].push(v);
                    format!("svc.h{t:02}.time:{v}|ms")
                })
                .collect();
            socket
                .send_to(lines.join("\n").as_bytes(), server.statsd.unwrap())
                .unwrap();
        }
        // Every value of the minute lands before the clock moves on.
        let started = Instant::now();
        while (0..TIMERS).any(|t| {
            server
                .engine
                .registry()
                .get(&format!("svc.h{t:02}.time"))
                .is_none()
                || server.minute(
                    &format!("svc.h{t:02}.time"),
                    start + minute * 60,
                    tierdb::Display::Count,
                ) != Some(PER_MINUTE as f64)
        }) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "timer values never landed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    server.clock.set(start + MINUTES * 60);
    let id = server.engine.registry().get("svc.h07.time").unwrap();
    assert_eq!(server.engine.series_kind(id), SeriesKind::Distribution);

    for q in [50, 90, 99] {
        let answer = server.json(&format!(
            "/api/v1/query?series=svc.h07.time&display=p{q}&tier=1m&from={start}&to={}",
            start + MINUTES * 60
        ));
        let stated = answer["relative_error"].as_f64().expect("stated");
        assert!(stated < 0.0055, "{answer}");
        assert_eq!(answer["series"], "svc.h07.time", "{answer}");
        let points = answer["points"].as_array().unwrap();
        assert_eq!(points.len(), MINUTES as usize, "{answer}");
        for (minute, point) in points.iter().enumerate() {
            let want = exact(&mut values[7][minute].clone(), f64::from(q) / 100.0);
            let got = point[1].as_f64().unwrap();
            assert!(
                (got - want).abs() / want <= stated,
                "p{q} minute {minute}: {got} vs {want}"
            );
        }
        // All timers merged, the whole range in one point, from the 1h tier.
        let answer = server.json(&format!(
            "/api/v1/aggregate?match=svc.*.time&display=p{q}&tier=1h&range=whole&from={}&to={}",
            start - start % 3600,
            start - start % 3600 + 3600
        ));
        let stated = answer["relative_error"].as_f64().expect("stated");
        let mut all: Vec<f64> = values.iter().flatten().flatten().copied().collect();
        let want = exact(&mut all, f64::from(q) / 100.0);
        let got = answer["groups"][0]["points"][0][1].as_f64().unwrap();
        assert_eq!(answer["groups"][0]["series"], TIMERS, "{answer}");
        assert!(
            (got - want).abs() / want <= stated,
            "all p{q}: {got} vs {want} ({answer})"
        );
    }
    let hist = server.json(&format!(
        "/api/v1/query?series=svc.h07.time&display=hist&tier=1m&range=whole&from={start}&to={}",
        start + 60 * MINUTES
    ));
    // range=whole folds the minutes into one point.
    assert_eq!(hist["histograms"].as_array().unwrap().len(), 1, "{hist}");
    let shown = &hist["histograms"][0][1];
    let counted: u64 = shown["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[2].as_u64().unwrap())
        .sum();
    assert_eq!(counted, (PER_MINUTE as u64) * MINUTES as u64, "{hist}");
    assert_eq!(shown["count"], counted, "{hist}");
    // Bad displays are refused with the rule.
    let (status, body) = server.get("/api/v1/query?series=svc.h07.time&display=p101");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("pNN"), "{body}");
}

/// Observations that arrive bucketed (as a native histogram or an OTLP point does) at their
/// own scales: every tier's count and sum are exact, its histogram the exact merge of
/// what arrived (at the coarsest scale among them), its quantiles within that scale's
/// error of the raw values; min and max are the bucket bounds that hold every value when
/// the source sends none. A series that is not a distribution refuses them, counted.
#[test]
fn bucketed_observations_merge_exactly_at_their_own_scale() {
    use tierdb::histogram::Observed;
    use tierdb::ObservedSample;
    let (dir, engine, clock) = engine_at(NOW);
    let id = engine.series("rpc.seconds{job=api}").unwrap();
    engine.declare_kind(id, SeriesKind::Distribution).unwrap();
    let gauge = engine.series("temp").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    let latency = LogNormal::new(-3.0, 1.05).expect("valid");
    let mut raw: Vec<(Timestamp, f64)> = Vec::new();
    let mut samples = Vec::new();
    // One histogram every 15 s for two hours, alternately at scale 3 and 8 (the finer one
    // is reduced as it merges), half of them with the sender's exact extremes.
    for (k, ts) in (NOW - 7200..NOW).step_by(15).enumerate() {
        let values: Vec<f64> = (0..40).map(|_| latency.sample(&mut rng)).collect();
        let mut histogram = Histogram::new(if k % 2 == 0 { 3 } else { 8 });
        values.iter().for_each(|&v| histogram.record(v));
        let extremes = (k % 4 < 2).then(|| {
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            (min, values.iter().copied().fold(0.0, f64::max))
        });
        raw.extend(values.iter().map(|&v| (ts, v)));
        let sum = values.iter().sum();
        let observed = Observed {
            histogram,
            sum,
            extremes,
        };
        samples.push(ObservedSample {
            series: id,
            ts,
            observed,
        });
    }
    samples.push(ObservedSample {
        series: gauge,
        ts: NOW - 60,
        observed: samples[0].observed.clone(),
    });
    let report = engine.record_observed(&samples).unwrap();
    assert_eq!(report.accepted as usize, samples.len() - 1, "{report:?}");
    assert_eq!(report.rejected_total(), 1, "{report:?}");
    assert_eq!(report.rejected(tierdb::RejectReason::KindMismatch), 1);

    let check_tiers = |engine: &Engine| {
        for (tier, step) in [("1m", 60), ("5m", 300), ("1h", 3600)] {
            let points = read(engine, id, tier, NOW - 7200, NOW, step);
            for point in &points {
                let mut inside: Vec<f64> = (raw.iter())
                    .filter(|(ts, _)| (point.ts..point.ts + step).contains(ts))
                    .map(|&(_, v)| v)
                    .collect();
                assert_eq!(
                    point.bucket.count as usize,
                    inside.len(),
                    "{tier} {}",
                    point.ts
                );
                let sum: f64 = inside.iter().sum();
                assert!((point.bucket.total - sum).abs() <= 1e-9 * sum, "{tier} sum");
                assert!(point.is_complete());
                let h = point.histogram.as_ref().unwrap();
                assert_eq!(h.scale(), 3, "the coarsest scale that arrived");
                let (min, max) = (point.bucket.min, point.bucket.max);
                let lowest = inside.iter().copied().fold(f64::INFINITY, f64::min);
                let highest = inside.iter().copied().fold(0.0, f64::max);
                assert!(
                    min <= lowest && max >= highest,
                    "{tier}: bounds hold every value"
                );
                let stated = point.relative_error().unwrap();
                assert!(stated <= tierdb::histogram::relative_error(3) + 1e-12);
                for q in [0.5, 0.9, 0.99] {
                    let want = exact(&mut inside, q);
                    let got = point.quantile(q).unwrap();
                    let err = (got - want).abs() / want;
                    assert!(err <= stated + 1e-12, "{tier} p{q}: {got} vs {want}");
                }
            }
        }
    };
    check_tiers(&engine);
    engine.close().unwrap();
    let engine = open(dir.path(), &clock, tierdb::TiersConfig::default());
    check_tiers(&engine);
}

/// Whether each page of the latest area (the entries of 16 slots' runs of a block) holds
/// data, not a hole, in the 1m tier's hot file holding `ts`, chunk 0, for the block holding
/// `ts`: the first `pages` of them.
fn latest_pages_with_data(
    engine: &Engine,
    dir: &std::path::Path,
    ts: Timestamp,
    pages: u32,
) -> Vec<bool> {
    use rustix::fs::{seek, SeekFrom};
    use tierdb::testing::storage::format::{cell_index, file_name, PeriodMeta, LATEST_SIZE};
    let spec = (engine.config().tiers.iter())
        .find(|t| t.name == "1m")
        .unwrap();
    let (period, resolution) = (spec.period.secs() as i64, spec.resolution.secs() as i64);
    let start = ts - ts.rem_euclid(period);
    let bucket = ((ts - start) / resolution) as u32;
    let path = dir.join("tiers").join("1m").join(file_name(start, 0));
    let bytes = std::fs::read(&path).unwrap();
    let meta = PeriodMeta::decode(&bytes, &path).unwrap();
    assert!(meta.keeps_last());
    let file = std::fs::File::open(&path).unwrap();
    let block = bucket - bucket % 16;
    (0..pages)
        .map(|page| {
            let from = meta.latest_offset(cell_index(block, page * 16, meta.slots));
            let to = from + (16 * 16 * LATEST_SIZE) as u64;
            match seek(&file, SeekFrom::Data(from)) {
                Ok(data) => data < to,
                Err(rustix::io::Errno::NXIO) => false,
                Err(e) => panic!("{}: {e}", path.display()),
            }
        })
        .collect()
}

/// Asserts which of the first four pages of the latest area hold data in the block holding
/// `NOW`, then, after a maintenance pass, in the next block, whose pages the pass reserves
/// ahead as the block being written has them.
fn latest_pages_now_and_ahead(engine: &Engine, dir: &std::path::Path, written: [bool; 4]) {
    assert_eq!(latest_pages_with_data(engine, dir, NOW, 4), written, "now");
    engine.maintain().unwrap();
    assert_eq!(
        latest_pages_with_data(engine, dir, NOW + 16 * 60, 4),
        written,
        "the next block"
    );
}

/// A chunk of gauges and distributions: a page of the latest area takes disk only where a
/// series of its 16 slots keeps a latest sample (a gauge, or a series written as one before
/// it became a distribution); one of distributions alone stays a hole, as written, in the
/// next block the maintenance pass reserves ahead, and in the period made hot again after
/// its compaction. Every gauge keeps its latest sample and every distribution its quantiles.
#[test]
fn the_latest_area_takes_disk_only_where_a_series_keeps_a_latest_sample() {
    let (dir, engine, clock) = quiet_engine_at(NOW + 12 * 60);
    // Slots 0..16 gauges, 16..48 distributions, 48..64 distributions but slot 50, a gauge
    // until it becomes a distribution.
    let ids: Vec<SeriesId> = (0..64)
        .map(|i| engine.series(&format!("m{i:02}")).unwrap())
        .collect();
    assert!(ids.iter().enumerate().all(|(i, id)| id.0 as usize == i));
    const CONVERTED: usize = 50;
    let is_gauge = |i: usize| i < 16;
    for &id in ids.iter().filter(|id| !is_gauge(id.0 as usize)) {
        if id.0 as usize != CONVERTED {
            engine.declare_kind(id, SeriesKind::Distribution).unwrap();
        }
    }
    let gauge_value = |i: usize, minute: i64| (i as i64 * 100 + minute) as f64;
    let converted = ids[CONVERTED];
    let first = [Sample::new(converted, NOW + 17, 5.0)];
    assert_eq!(engine.record_batch(&first).unwrap().rejected_total(), 0);
    engine
        .declare_kind(converted, SeriesKind::Distribution)
        .unwrap();
    let mut batch = Vec::new();
    for minute in 0..6 {
        for (i, &id) in ids.iter().enumerate() {
            let ts = NOW + minute * 60 + 17;
            match is_gauge(i) {
                true => batch.push(Sample::new(id, ts, gauge_value(i, minute))),
                false => batch.extend((0..10).map(|k| Sample::new(id, ts, 1.0 + (k * i) as f64))),
            }
        }
    }
    let report = engine.record_batch(&batch).unwrap();
    assert_eq!(report.rejected_total(), 0, "{report:?}");
    latest_pages_now_and_ahead(&engine, dir.path(), [true, false, false, true]);

    let check = |engine: &Engine, converted_last: bool| {
        let reader = engine.reader();
        for (i, &id) in ids.iter().enumerate() {
            let buckets = reader
                .read_buckets(id, 0, NOW, NOW + 6 * 60, Span::from_secs(60))
                .unwrap();
            assert_eq!(buckets.len(), 6, "slot {i}");
            for (minute, (ts, bucket)) in buckets.iter().enumerate() {
                let last = bucket.last.map(|l| (l.ts(), l.value));
                match is_gauge(i) {
                    true => assert_eq!(
                        last,
                        Some((ts + 17, gauge_value(i, minute as i64))),
                        "slot {i}"
                    ),
                    false if i == CONVERTED && minute == 0 && converted_last => {
                        assert_eq!(bucket.count, 11, "slot {i}")
                    }
                    false => {
                        assert_eq!((bucket.count, last), (10, None), "slot {i} minute {minute}")
                    }
                }
            }
            if !is_gauge(i) {
                let points = read(engine, id, "1m", NOW + 60, NOW + 2 * 60, 60);
                let histogram = points[0].histogram.as_ref().expect("a histogram");
                assert_eq!(histogram.count(), 10, "slot {i}");
            }
        }
    };
    check(&engine, true);
    engine.close().unwrap();
    let engine = open(dir.path(), &clock, tierdb::TiersConfig::default());
    check(&engine, true);

    // Compacted, then made hot again by a late sample: the runs of distributions write no
    // entry back, and the converted series' buckets now keep none either.
    clock.set(NOW + 6 * 3600 + 1800);
    engine.maintain().unwrap();
    engine.maintain().unwrap();
    assert_eq!(tier_files(dir.path(), "1m", NOW), [".tdc"], "compacted");
    let late = Sample::new(ids[20], NOW + 7 * 60, 3.0);
    assert_eq!(engine.record_batch(&[late]).unwrap().rejected_total(), 0);
    assert_eq!(tier_files(dir.path(), "1m", NOW), [".tdb"], "hot again");
    assert_eq!(
        latest_pages_with_data(&engine, dir.path(), NOW, 4),
        [true, false, false, false]
    );
    check(&engine, true);
}

/// A delta counter (a StatsD counter) keeps no latest sample either: no write carries its
/// running total. A page of the latest area whose 16 slots are delta counters stays a hole,
/// as written and in the next block reserved ahead; one shared with a gauge takes disk.
/// Each counter's increases and each gauge's latest sample read back.
#[test]
fn a_delta_counters_latest_pages_stay_holes() {
    let (dir, engine, _clock) = quiet_engine_at(NOW + 12 * 60);
    // Slots 0..32 delta counters, 32..48 gauges, 48..64 delta counters but slot 60, a gauge.
    let ids: Vec<SeriesId> = (0..64)
        .map(|i| engine.series(&format!("c{i:02}")).unwrap())
        .collect();
    let is_gauge = |i: usize| (32..48).contains(&i) || i == 60;
    for (i, &id) in ids.iter().enumerate() {
        if !is_gauge(i) {
            engine.declare_kind(id, SeriesKind::DeltaCounter).unwrap();
        }
    }
    let value = |i: usize, minute: i64| (i as i64 + minute) as f64;
    let batch: Vec<Sample> = (0..6)
        .flat_map(|minute| {
            let ids = &ids;
            (0..64).map(move |i| Sample::new(ids[i], NOW + minute * 60 + 17, value(i, minute)))
        })
        .collect();
    let report = engine.record_batch(&batch).unwrap();
    assert_eq!(report.rejected_total(), 0, "{report:?}");
    latest_pages_now_and_ahead(&engine, dir.path(), [false, false, true, true]);
    let reader = engine.reader();
    for (i, &id) in ids.iter().enumerate() {
        let buckets = reader
            .read_buckets(id, 0, NOW, NOW + 6 * 60, Span::from_secs(60))
            .unwrap();
        assert_eq!(buckets.len(), 6, "slot {i}");
        for (minute, (ts, bucket)) in buckets.iter().enumerate() {
            let v = value(i, minute as i64);
            let last = bucket.last.map(|l| (l.ts(), l.value));
            let want = is_gauge(i).then_some((ts + 17, v));
            assert_eq!((bucket.count, bucket.total, last), (1, v, want), "slot {i}");
        }
    }
}
