//! The raw tier (issue 16): exact points in 4 KiB segments, the neighbours outside a range,
//! out-of-order refusals and dedupe, drops on expiry and reopen, each checked against a naive
//! model (a sorted list of the points the tier should hold); a writer killed mid-append; and
//! foreign or corrupt raw files refused by name.

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use tierdb::testing::storage::raw::SEGMENT_POINTS;
use tierdb::{
    Engine, Error, ManualClock, Query, RawTierSpec, Sample, SeriesId, Span, TiersConfig, Timestamp,
};

use crate::common::{open_driven, scratch_dir, small_tiers, NOW};
use crate::support::process::run_child_until_it_kills_itself;

const HOUR: i64 = 3_600;

/// Small rollup tiers and a raw tier of 1h periods kept 12h, so a few hundred points cross
/// segment and period boundaries.
fn raw_tiers(dedupe: bool) -> TiersConfig {
    let mut config = small_tiers();
    config.raw = Some(RawTierSpec {
        name: "raw".to_string(),
        period: Span::from_secs(HOUR as u64),
        retention: Span::from_secs(12 * HOUR as u64),
        create_ahead: 1,
        dedupe_unchanged: dedupe,
    });
    config
}

/// What the raw tier should hold for one series: the points stored, in time order.
#[derive(Default, Clone)]
struct Model {
    points: Vec<(Timestamp, f64)>,
}

impl Model {
    /// Applies one accepted sample as the raw tier must; returns whether it was stored.
    fn offer(&mut self, ts: Timestamp, value: f64, dedupe: bool, window: Timestamp) -> bool {
        if ts < window {
            return false;
        }
        match self.points.last() {
            Some(&(last, _)) if ts <= last => false,
            Some(&(_, v)) if dedupe && v.to_bits() == value.to_bits() => false,
            _ => {
                self.points.push((ts, value));
                true
            }
        }
    }

    /// What a read of `[from, to)` must answer, seeing nothing before `window`.
    #[allow(clippy::type_complexity)]
    fn read(
        &self,
        from: Timestamp,
        to: Timestamp,
        window: Timestamp,
    ) -> (
        Option<(Timestamp, f64)>,
        Vec<(Timestamp, Option<f64>)>,
        Option<(Timestamp, f64)>,
    ) {
        let held: Vec<_> = self.points.iter().filter(|p| p.0 >= window).collect();
        let before = held.iter().rev().find(|p| p.0 < from).map(|p| **p);
        let inside = held
            .iter()
            .filter(|p| p.0 >= from && p.0 < to)
            .map(|p| (p.0, Some(p.1)))
            .collect();
        let after = held.iter().find(|p| p.0 >= to).map(|p| **p);
        (before, inside, after)
    }
}

fn check_reads(engine: &Engine, name: &str, model: &Model, ranges: &[(Timestamp, Timestamp)]) {
    let window = engine
        .config()
        .raw
        .as_ref()
        .unwrap()
        .window_start(engine.now());
    for &(from, to) in ranges {
        let result = engine
            .query(&Query::new(name, from, to).tier("raw"))
            .unwrap();
        let (before, points, after) = model.read(from, to, window);
        assert_eq!(result.tier, "raw");
        assert_eq!(result.points, points, "{name} [{from}, {to}) points");
        assert_eq!(result.before, before, "{name} [{from}, {to}) before");
        assert_eq!(result.after, after, "{name} [{from}, {to}) after");
    }
}

/// One generated series: gaps between arrivals (some zero or negative: out of order), and
/// values from a small set so dedupe has repeats.
fn arrivals() -> impl Strategy<Value = Vec<(i64, u8)>> {
    prop::collection::vec((-30i64..400, 0u8..4), 1..700)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random non-periodic series written in random batches read back as the model says,
    /// for random ranges (segment and period edges included), before and after a reopen,
    /// and after the clock moves on and expired periods are dropped.
    #[test]
    fn raw_tier_matches_a_naive_model(
        series in prop::collection::vec(arrivals(), 1..4),
        batch in 1usize..300,
        dedupe in any::<bool>(),
        cuts in prop::collection::vec((0i64..12 * HOUR, 0i64..3 * HOUR), 1..12),
    ) {
        let dir = scratch_dir();
        let clock = Arc::new(ManualClock::new(NOW));
        let config = raw_tiers(dedupe);
        let start = NOW - 11 * HOUR;
        let mut models = vec![Model::default(); series.len()];
        let mut samples = Vec::new();
        let mut names = Vec::new();
        {
            let engine = open_driven(dir.path(), &clock, config.clone());
            let window = config.raw.as_ref().unwrap().window_start(NOW);
            for (s, arrivals) in series.iter().enumerate() {
                let name = format!("actoboard.followers{{source={s}}}");
                let id = engine.series(&name).unwrap();
                names.push(name);
                let mut ts = start;
                for &(gap, v) in arrivals {
                    ts = (ts + gap).min(NOW);
                    samples.push((s, Sample::new(id, ts, f64::from(v) * 1.5)));
                }
            }
            // Interleave series the way an agent's batches would.
            samples.sort_by_key(|(s, sample)| (sample.ts / 600, *s));
            let mut stored = 0;
            let mut out_of_order_or_same = 0;
            for part in samples.chunks(batch) {
                let batch: Vec<Sample> = part.iter().map(|(_, s)| *s).collect();
                let report = engine.record_batch(&batch).unwrap();
                prop_assert_eq!(report.accepted, batch.len() as u64);
                for (s, sample) in part {
                    if models[*s].offer(sample.ts, sample.value, dedupe, window) {
                        stored += 1;
                    } else {
                        out_of_order_or_same += 1;
                    }
                }
                prop_assert_eq!(report.raw.stored + report.raw.out_of_order + report.raw.unchanged, batch.len() as u64);
            }
            let stats = engine.stats();
            prop_assert_eq!(stats.raw.stored, stored);
            prop_assert_eq!(stats.raw.out_of_order + stats.raw.unchanged, out_of_order_or_same);
            if !dedupe {
                prop_assert_eq!(stats.raw.unchanged, 0);
            }
            let ranges: Vec<(Timestamp, Timestamp)> = cuts
                .iter()
                .map(|&(at, len)| (start + at, start + at + len + 1))
                .chain(segment_and_period_edges(&models))
                .collect();
            for (name, model) in names.iter().zip(&models) {
                check_reads(&engine, name, model, &ranges);
            }
            // Every accepted sample still folds into the rollups: the 1h tier counts them.
            let total: f64 = names
                .iter()
                .map(|n| {
                    engine
                        .query(&Query::new(n.as_str(), start - HOUR, NOW + 1).tier("1h").display(tierdb::Display::Count))
                        .unwrap()
                        .points
                        .iter()
                        .filter_map(|p| p.1)
                        .sum::<f64>()
                })
                .sum();
            prop_assert_eq!(total as usize, samples.len());
            engine.close().unwrap();
        }
        // Reopened: the same points, and appends go on after them.
        let engine = open_driven(dir.path(), &clock, config.clone());
        let ranges = [(start - HOUR, NOW + 1), (start + 3 * HOUR, start + 5 * HOUR)];
        for (name, model) in names.iter().zip(&models) {
            check_reads(&engine, name, model, &ranges);
        }
        let id = engine.series(&names[0]).unwrap();
        let next = models[0].points.last().map_or(NOW, |p| p.0) + 1;
        clock.set(next.max(NOW));
        let window = config.raw.as_ref().unwrap().window_start(engine.now());
        engine.record_batch(&[Sample::new(id, next, 1e9)]).unwrap();
        models[0].offer(next, 1e9, dedupe, window);
        check_reads(&engine, &names[0], &models[0], &[(start - HOUR, next + 10)]);
        // Seven hours on, the periods before the window are dropped whole.
        clock.set(next.max(NOW) + 7 * HOUR);
        let before = engine.stats().tiers.last().unwrap().disk.files;
        let report = engine.maintain().unwrap();
        let after = engine.stats().tiers.last().unwrap().disk.files;
        prop_assert!(report.dropped > 0);
        prop_assert!(after < before + report.created);
        for (name, model) in names.iter().zip(&models) {
            check_reads(&engine, name, model, &[(start - HOUR, NOW + 8 * HOUR)]);
        }
        engine.close().unwrap();
    }
}

/// Ranges that start or end exactly on a segment's first or last point and on period starts.
fn segment_and_period_edges(models: &[Model]) -> Vec<(Timestamp, Timestamp)> {
    let mut edges = Vec::new();
    if let Some(model) = models.first() {
        for chunk in model.points.chunks(SEGMENT_POINTS) {
            let (first, last) = (chunk[0].0, chunk[chunk.len() - 1].0);
            // A segment of one point has no range short of its last point.
            if last > first {
                edges.push((first, last));
            }
            edges.push((first, last + 1));
            edges.push((last, last + 1));
            edges.push((first + 1, first + 2));
        }
    }
    for k in 0..12 {
        let p = NOW - NOW % HOUR - k * HOUR;
        edges.push((p, p + HOUR));
        edges.push((p - 1, p + 1));
    }
    edges
}

#[test]
fn raw_reads_keep_the_neighbours_outside_the_range_and_refuse_steps() {
    let dir = scratch_dir();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open_driven(dir.path(), &clock, raw_tiers(true));
    let id = engine.series("followers").unwrap();
    // A value that changes once: pushed every ten minutes, stored twice with dedupe.
    let batch: Vec<Sample> = (0..12)
        .map(|i| Sample::new(id, NOW - 7_200 + i * 600, if i < 6 { 10.0 } else { 11.0 }))
        .collect();
    let report = engine.record_batch(&batch).unwrap();
    assert_eq!(report.raw.stored, 2);
    assert_eq!(report.raw.unchanged, 10);
    let late = engine
        .record_batch(&[Sample::new(id, NOW - 7_200, 3.0)])
        .unwrap();
    assert_eq!((late.accepted, late.raw.out_of_order), (1, 1));
    // The last hour has no point of its own, yet a chart has the value to draw.
    let result = engine
        .query(&Query::new("followers", NOW - 1_800, NOW).tier("raw"))
        .unwrap();
    assert!(result.points.is_empty());
    assert_eq!(result.before, Some((NOW - 7_200 + 3_600, 11.0)));
    assert_eq!(result.after, None);
    assert_eq!(
        result.csv(),
        format!("ts,value,outside\n{},11,before\n", NOW - 3_600)
    );
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["before"], serde_json::json!([NOW - 3_600, 11.0]));
    let step = engine.query(
        &Query::new("followers", NOW - 1_800, NOW)
            .tier("raw")
            .step(Span::from_secs(60)),
    );
    assert!(matches!(step, Err(Error::InvalidQuery(_))), "{step:?}");
    // `auto` never picks the raw tier.
    let auto = engine
        .query(&Query::new("followers", NOW - 600, NOW))
        .unwrap();
    assert_eq!(auto.tier, "1m");
    let stats = engine.stats();
    let raw = stats.tiers.iter().find(|t| t.name == "raw").unwrap();
    assert_eq!(raw.kind, "raw");
    assert!(raw.disk.files >= 1 && raw.disk.bytes == raw.disk.files as u64 * (4096 + 256 * 4096));
}

/// Set to the data directory, the test runs as the child that gets killed.
const CHILD_DIR: &str = "TIERDB_IT_RAW_CRASH_CHILD_DIR";
const CRASH_TEST: &str = "raw::a_writer_killed_mid_append_leaves_no_torn_point";
/// Points acknowledged before the kill: more than one segment's worth, so the killed append
/// lands in the series' second segment.
const ACKED: i64 = 300;
const VICTIM: u32 = 1;

fn open_crash(dir: &Path) -> Engine {
    Engine::builder(dir)
        .tiers(raw_tiers(false))
        .clock(Arc::new(ManualClock::new(NOW)))
        .writer_threads(2)
        .background_maintenance(false)
        .open()
        .expect("open engine")
}

fn point(i: i64) -> Sample {
    Sample::new(SeriesId(VICTIM), NOW - 2 * HOUR + i * 10, i as f64)
}

/// The child (this test, run again with [`CHILD_DIR`] set) gets `ACKED` points of the victim
/// acknowledged in batches of 50, then sends one more batch; the fault hook kills its writer
/// after storing that batch's first point's time and value, before publishing it. The next
/// open must show exactly the acknowledged points, and appends go on over the torn slot.
#[test]
fn a_writer_killed_mid_append_leaves_no_torn_point() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        let engine = open_crash(Path::new(&dir));
        engine.series("other").unwrap();
        engine.series("victim").unwrap();
        for part in (0..ACKED).collect::<Vec<_>>().chunks(50) {
            let batch: Vec<Sample> = part.iter().map(|&i| point(i)).collect();
            let report = engine.record_batch(&batch).unwrap();
            assert_eq!(report.raw.stored, batch.len() as u64);
        }
        let _ = engine.record_batch(&[point(ACKED), point(ACKED + 1)]);
        unreachable!("the fault hook kills the process in the writer");
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let fault = format!("{VICTIM}:{ACKED}");
    run_child_until_it_kills_itself(
        CRASH_TEST,
        &[
            (CHILD_DIR, dir.as_os_str()),
            (tierdb::testing::fault::KILL_MID_RAW_APPEND, fault.as_ref()),
        ],
    );
    // The torn point's time is on disk, unpublished.
    let file = dir
        .join("raw/raw")
        .join(tierdb::testing::storage::raw::segment::file_name(
            point(ACKED).ts - point(ACKED).ts.rem_euclid(HOUR),
            0,
        ));
    let bytes = std::fs::read(&file).unwrap();
    let torn = point(ACKED).ts.to_le_bytes();
    assert!(
        bytes.windows(8).any(|w| w == torn),
        "the child died before storing the torn point's time"
    );
    let engine = open_crash(dir);
    let all = |engine: &Engine| {
        engine
            .query(&Query::new("victim", NOW - 3 * HOUR, NOW + 1).tier("raw"))
            .unwrap()
    };
    let expected: Vec<(Timestamp, Option<f64>)> =
        (0..ACKED).map(|i| (point(i).ts, Some(i as f64))).collect();
    assert_eq!(
        all(&engine).points,
        expected,
        "every acknowledged point, and no torn one"
    );
    // Appends go on where the acknowledged ones ended, over the unpublished slot.
    let report = engine.record_batch(&[point(ACKED + 1)]).unwrap();
    assert_eq!(report.raw.stored, 1);
    let result = all(&engine);
    assert_eq!(result.points.len() as i64, ACKED + 1);
    assert_eq!(
        result.points.last(),
        Some(&(point(ACKED + 1).ts, Some((ACKED + 1) as f64)))
    );
    engine.close().unwrap();
    let engine = open_crash(dir);
    assert_eq!(all(&engine).points.len() as i64, ACKED + 1);
}

#[test]
fn corrupt_and_foreign_raw_files_are_refused_by_name() {
    let dir = scratch_dir();
    let clock = Arc::new(ManualClock::new(NOW));
    {
        let engine = open_driven(dir.path(), &clock, raw_tiers(false));
        let id = engine.series("a").unwrap();
        engine
            .record_batch(&[
                Sample::new(id, NOW - 10, 1.0),
                Sample::new(id, NOW - 5, 2.0),
            ])
            .unwrap();
        engine.close().unwrap();
    }
    let raw_dir = dir.path().join("raw/raw");
    // The period holding the points (NOW is on the hour, so the one before it).
    let current = raw_dir.join(tierdb::testing::storage::raw::segment::file_name(
        NOW - HOUR,
        0,
    ));
    let original = std::fs::read(&current).unwrap();
    let refused = |bytes: &[u8], what: &str| {
        std::fs::write(&current, bytes).unwrap();
        let err = Engine::builder(dir.path())
            .tiers(raw_tiers(false))
            .clock(clock.clone())
            .background_maintenance(false)
            .open()
            .err()
            .unwrap_or_else(|| panic!("{what}: opened"));
        let text = err.to_string();
        assert!(matches!(err, Error::CorruptFile { .. }), "{what}: {text}");
        assert!(
            text.contains(&current.display().to_string()),
            "{what}: {text}"
        );
    };
    let mut foreign = original.clone();
    foreign[0..8].copy_from_slice(b"NOTTIER!");
    refused(&foreign, "bad magic");
    let mut other_period = original.clone();
    other_period[24] ^= 1;
    refused(&other_period, "header changed");
    refused(&original[..4096 + 4096 * 3], "truncated");
    let mut too_long = original.clone();
    too_long[4096 + 8] = 253;
    refused(&too_long, "segment length past its points");
    let mut backwards = original.clone();
    // Segment 0's second time before its first.
    backwards[4096 + 8 * 9..4096 + 8 * 10].copy_from_slice(&(NOW - 100).to_le_bytes());
    refused(&backwards, "points out of order");
    // A period of another length in the configuration: the stored tiers refuse it, and
    // without them (a directory from before they were stored) the header no longer matches.
    std::fs::write(&current, &original).unwrap();
    let mut config = raw_tiers(false);
    config.raw.as_mut().unwrap().period = Span::from_secs(2 * HOUR as u64);
    config.raw.as_mut().unwrap().retention = Span::from_secs(24 * HOUR as u64);
    let err = Engine::builder(dir.path())
        .tiers(config.clone())
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .err()
        .expect("a period change is refused");
    assert!(
        err.to_string()
            .contains(r#"raw tier "raw" period: 1h in the directory, 2h given"#),
        "{err}"
    );
    std::fs::remove_file(dir.path().join("tiers.toml")).unwrap();
    let err = Engine::builder(dir.path())
        .tiers(config)
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .err()
        .expect("a period change is refused");
    assert!(err.to_string().contains("period cannot change"), "{err}");
    assert!(
        !dir.path().join("tiers.toml").exists(),
        "tiers the raw files refused were stored"
    );
    // The original opens again.
    let engine = open_driven(dir.path(), &clock, raw_tiers(false));
    assert_eq!(
        engine
            .query(&Query::new("a", NOW - 60, NOW).tier("raw"))
            .unwrap()
            .points
            .len(),
        2
    );
}

/// A series that went quiet does not keep its last raw file mapped once the file expired:
/// the writers let go of segments in periods before the window, so expiry frees the disk.
#[test]
fn an_expired_raw_file_is_let_go_by_the_writers_of_quiet_series() {
    let dir = scratch_dir();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open_driven(dir.path(), &clock, raw_tiers(false));
    let quiet = engine.series("quiet").unwrap();
    let busy = engine.series("busy").unwrap();
    engine
        .record_batch(&[
            Sample::new(quiet, NOW - 30, 1.0),
            Sample::new(busy, NOW - 30, 1.0),
        ])
        .unwrap();
    clock.advance(14 * HOUR);
    engine.maintain().unwrap();
    engine
        .record_batch(&[Sample::new(busy, NOW + 14 * HOUR - 5, 2.0)])
        .unwrap();
    let raw_dir = dir.path().join("raw/raw").display().to_string();
    let mapped = || {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&raw_dir) && l.ends_with("(deleted)"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // The quiet series' writer lets go when it next idles (a second) or writes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !mapped().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "expired raw files still mapped: {:?}",
            mapped()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    engine.close().unwrap();
}

/// A power loss between two flushes can leave a segment's next one on disk while its own
/// last points are not: the next segment's `PREV_END` is then later than its last time. The
/// open accepts that and serves what is there; a `PREV_END` earlier than it is corruption.
#[test]
fn a_segment_that_lost_its_last_points_to_a_power_loss_still_opens() {
    let dir = scratch_dir();
    let clock = Arc::new(ManualClock::new(NOW));
    let points = SEGMENT_POINTS as i64 + 1;
    {
        let engine = open_driven(dir.path(), &clock, raw_tiers(false));
        let id = engine.series("a").unwrap();
        let samples: Vec<Sample> = (0..points)
            .map(|i| Sample::new(id, NOW - HOUR + i, i as f64))
            .collect();
        engine.record_batch(&samples).unwrap();
        engine.close().unwrap();
    }
    let file = dir
        .path()
        .join("raw/raw")
        .join(tierdb::testing::storage::raw::segment::file_name(
            NOW - HOUR,
            0,
        ));
    let original = std::fs::read(&file).unwrap();
    let len_at = |segment: usize| 4096 + 4096 * segment + 8;
    let prev_end_at = |segment: usize| 4096 + 4096 * segment + 16;
    assert_eq!(
        original[len_at(0)] as usize,
        SEGMENT_POINTS,
        "segment 0 full"
    );
    assert_eq!(original[len_at(1)], 1, "segment 1 holds the last point");
    let open = || {
        Engine::builder(dir.path())
            .tiers(raw_tiers(false))
            .clock(clock.clone())
            .background_maintenance(false)
            .open()
    };
    // Segment 0's last two points never reached the disk.
    let mut lost = original.clone();
    lost[len_at(0)..len_at(0) + 8].copy_from_slice(&(SEGMENT_POINTS as u64 - 2).to_le_bytes());
    std::fs::write(&file, &lost).unwrap();
    let engine = open().expect("opens");
    let read = engine
        .query(&Query::new("a", NOW - HOUR, NOW).tier("raw"))
        .unwrap();
    assert_eq!(read.points.len(), points as usize - 2);
    engine.close().unwrap();
    // Segment 1 says segment 0 ended earlier than its points do: refused.
    let mut earlier = original.clone();
    earlier[prev_end_at(1)..prev_end_at(1) + 8]
        .copy_from_slice(&(NOW - HOUR + SEGMENT_POINTS as i64 - 2).to_le_bytes());
    std::fs::write(&file, &earlier).unwrap();
    let err = open().err().expect("refused");
    assert!(matches!(err, Error::CorruptFile { .. }), "{err}");
}

/// Over HTTP: `tier=raw` answers the exact points and the neighbours, JSON and CSV; the
/// raw tier shows in `/api/v1/tiers` and `/metrics`; `/render` and aggregates do not read it.
#[test]
fn the_http_api_reads_the_raw_tier_and_reports_it() {
    let server = crate::support::server::TestServer::with_tiers(
        raw_tiers(false),
        None,
        tierdb::server::Limits::default(),
    );
    let id = server.engine.series("pushed.value").unwrap();
    let points = [(NOW - 5_000, 1.25), (NOW - 4_000, 2.5), (NOW - 100, -3.0)];
    let batch: Vec<Sample> = points.iter().map(|&(t, v)| Sample::new(id, t, v)).collect();
    server.engine.record_batch(&batch).unwrap();
    server
        .engine
        .record_batch(&[Sample::new(id, NOW - 4_500, 9.0)])
        .unwrap();
    let from = NOW - 4_500;
    let to = NOW - 1_000;
    let body = server.json(&format!(
        "/api/v1/query?series=pushed.value&tier=raw&from={from}&to={to}"
    ));
    assert_eq!(body["tier"], "raw");
    assert_eq!(body["points"], serde_json::json!([[NOW - 4_000, 2.5]]));
    assert_eq!(body["before"], serde_json::json!([NOW - 5_000, 1.25]));
    assert_eq!(body["after"], serde_json::json!([NOW - 100, -3.0]));
    let (status, csv) = server.get(&format!(
        "/api/v1/query?series=pushed.value&tier=raw&from={from}&to={to}&format=csv"
    ));
    assert_eq!(status, 200);
    assert_eq!(
        csv,
        format!(
            "ts,value,outside\n{},1.25,before\n{},2.5,\n{},-3,after\n",
            NOW - 5_000,
            NOW - 4_000,
            NOW - 100
        )
    );
    let (status, body) = server.get(&format!(
        "/api/v1/query?series=pushed.value&tier=raw&from={from}&to={to}&step=1m"
    ));
    assert_eq!(status, 400, "{body}");
    let tiers = server.json("/api/v1/tiers");
    let raw = tiers["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "raw")
        .expect("the raw tier is listed");
    assert_eq!(raw["kind"], "raw");
    assert!(raw["disk"]["files"].as_u64().unwrap() >= 1);
    let metrics = server.get("/metrics").1;
    assert!(
        metrics.contains("tierdb_tier_bytes{tier=\"raw\"} "),
        "{metrics}"
    );
    assert!(
        metrics.contains("tierdb_raw_points_total{outcome=\"stored\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tierdb_raw_points_total{outcome=\"raw_out_of_order\"} 1"),
        "{metrics}"
    );
    let (status, body) = server.get(&format!(
        "/api/v1/aggregate?match=pushed.*&tier=raw&from={from}&to={to}"
    ));
    assert_eq!(status, 400, "{body}");
}
