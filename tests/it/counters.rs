//! Counters: stored as increases, so every tier's total is the increase within the bucket
//! and per_sec the rate; resets count from zero; the last raw value survives a restart;
//! out-of-order counter samples are refused; kinds come from rules or from writes; a delta
//! counter (StatsD's) stores its increases as they come and reads as a counter.

use std::sync::Arc;

use tierdb::{
    Display, Engine, ManualClock, Query, RejectReason, Sample, SeriesId, SeriesKind, TiersConfig,
    Timestamp,
};

use crate::common::{engine_at, open, NOW};
use crate::support::process::run_child_until_it_kills_itself;

const HOUR: i64 = 3600;

fn counters_config(names: &[&str], tags: &[(&str, &str)]) -> TiersConfig {
    let mut config = TiersConfig::default();
    config.counters.names = names.iter().map(|s| s.to_string()).collect();
    config.counters.tags = tags
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    config
}

/// Every point of `series` in `tier` over `[from, to)` shown as `display`.
fn points(
    engine: &Engine,
    series: &str,
    tier: &str,
    from: Timestamp,
    to: Timestamp,
    display: Display,
) -> Vec<(Timestamp, Option<f64>)> {
    engine
        .query(&Query::new(series, from, to).tier(tier).display(display))
        .unwrap()
        .points
}

#[test]
fn a_steady_counter_reads_as_its_rate_at_every_tier() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open(dir.path(), &clock, counters_config(&["*.octets"], &[]));
    let id = engine.series("eth0.octets").unwrap();
    assert_eq!(engine.series_kind(id), SeriesKind::Counter);
    // 2 hours before an hour boundary, every 10 s, +50 each: 5 per second. The raw value
    // starts high, as a real interface counter does.
    let start = NOW - NOW % HOUR - 2 * HOUR;
    let samples: Vec<Sample> = (0..=720)
        .map(|i| Sample::new(id, start + i * 10, 1.0e9 + 50.0 * i as f64))
        .collect();
    let report = engine.record_batch(&samples).unwrap();
    assert_eq!(report.accepted, 721);
    for (tier, res) in [("1m", 60), ("5m", 300), ("1h", 3600)] {
        let rates = points(
            &engine,
            "eth0.octets",
            tier,
            start,
            start + 2 * HOUR,
            Display::PerSec,
        );
        let totals = points(
            &engine,
            "eth0.octets",
            tier,
            start,
            start + 2 * HOUR,
            Display::Total,
        );
        for ((ts, rate), (_, total)) in rates.iter().zip(&totals) {
            // The baseline sample at `start` stores nothing, so the first bucket holds one
            // increase fewer than the others.
            let increases = if *ts == start { res / 10 - 1 } else { res / 10 };
            assert_eq!(
                *total,
                Some(50.0 * increases as f64),
                "{tier} total at {ts}"
            );
            assert_eq!(
                *rate,
                Some(50.0 * increases as f64 / res as f64),
                "{tier} rate at {ts}"
            );
        }
        assert_eq!(
            rates[1].1,
            Some(5.0),
            "{tier}: a full bucket's rate is the true rate"
        );
    }
}

#[test]
fn a_reset_counts_from_zero_and_never_goes_negative() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open(
        dir.path(),
        &clock,
        counters_config(&[], &[("type", "counter")]),
    );
    let id = engine.series("requests{type=counter}").unwrap();
    let other = engine.series("requests{type=gauge}").unwrap();
    assert_eq!(engine.series_kind(other), SeriesKind::Gauge);
    let t = NOW - NOW % HOUR - HOUR;
    let values = [100.0, 110.0, 120.0, 5.0, 15.0];
    let samples: Vec<Sample> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| Sample::new(id, t + i as i64 * 60, v))
        .collect();
    engine.record_batch(&samples).unwrap();
    let totals = points(
        &engine,
        "requests{type=counter}",
        "1m",
        t,
        t + 300,
        Display::Total,
    );
    assert_eq!(
        totals,
        vec![
            (t, None),
            (t + 60, Some(10.0)),
            (t + 120, Some(10.0)),
            (t + 180, Some(5.0)),
            (t + 240, Some(10.0))
        ]
    );
    let hour = points(
        &engine,
        "requests{type=counter}",
        "1h",
        t,
        t + HOUR,
        Display::Total,
    );
    assert_eq!(hour, vec![(t, Some(35.0))]);
    let min = points(
        &engine,
        "requests{type=counter}",
        "1h",
        t,
        t + HOUR,
        Display::Min,
    );
    assert_eq!(min, vec![(t, Some(5.0))], "no negative increase");
}

#[test]
fn the_last_value_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let config = counters_config(&["bytes"], &[]);
    let t = NOW - NOW % HOUR - HOUR;
    {
        let engine = open(dir.path(), &clock, config.clone());
        engine.record("bytes", t, 1000.0).unwrap();
        engine.record("bytes", t + 60, 1600.0).unwrap();
        engine.close().unwrap();
    }
    let engine = open(dir.path(), &clock, config);
    // The first sample after the restart is an increase over the stored last value, not a
    // new baseline.
    engine.record("bytes", t + 120, 2200.0).unwrap();
    engine.sync().unwrap();
    // And a sample older than the stored last one is refused, even after the restart.
    let id = engine.series("bytes").unwrap();
    let report = engine
        .record_batch(&[Sample::new(id, t + 90, 1800.0)])
        .unwrap();
    assert_eq!(report.rejected(RejectReason::CounterOutOfOrder), 1);
    engine.sync().unwrap();
    let totals = points(&engine, "bytes", "1m", t, t + 180, Display::Total);
    assert_eq!(
        totals,
        vec![(t, None), (t + 60, Some(600.0)), (t + 120, Some(600.0))]
    );
}

/// Set to the data directory, the crash test runs as the child that gets killed.
const CHILD_DIR: &str = "TIERDB_IT_COUNTERS_CHILD_DIR";

/// A writer killed in the middle of a batch of two counters' increases (`kill -9`), the
/// first counter's stored and the second's half stored: the next open rolls the batch back
/// from its `counters.journal` record, every bucket and counter state as before it, so the
/// batch, not acknowledged and sent again, stores each increase once. (The repair of the
/// half-stored cell alone would leave the first counter's increase stored, its state not
/// advanced, and the batch sent again would store it twice.)
#[test]
fn a_counter_batch_killed_mid_store_is_rolled_back_and_stored_once_when_sent_again() {
    let clock = Arc::new(ManualClock::new(NOW));
    let config = counters_config(&["*.bytes"], &[]);
    let t = NOW - NOW % HOUR - HOUR;
    let ids = |engine: &Engine| ["a.bytes", "b.bytes"].map(|name| engine.series(name).unwrap());
    let batch = |ids: [SeriesId; 2], ts, value| ids.map(|id| Sample::new(id, ts, value));
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        let engine = open(std::path::Path::new(&dir), &clock, config);
        let _ = engine.record_batch(&batch(ids(&engine), t + 60, 1600.0));
        unreachable!("the fault hook kills the process in the writer");
    }
    let dir = tempfile::tempdir().unwrap();
    let [first, second] = {
        let engine = open(dir.path(), &clock, config.clone());
        let ids = ids(&engine);
        engine.record_batch(&batch(ids, t, 1000.0)).unwrap();
        engine.close().unwrap();
        ids
    };
    assert_eq!(
        first.0 / 8,
        second.0 / 8,
        "one writer stores both, in order"
    );
    let victim = second.0.to_string();
    run_child_until_it_kills_itself(
        "counters::a_counter_batch_killed_mid_store_is_rolled_back_and_stored_once_when_sent_again",
        &[
            (CHILD_DIR, dir.path().as_os_str()),
            (tierdb::testing::fault::KILL_MID_UPDATE, victim.as_ref()),
        ],
    );
    let engine = open(dir.path(), &clock, config);
    let totals = |name| points(&engine, name, "1m", t, t + 120, Display::Total);
    for name in ["a.bytes", "b.bytes"] {
        assert_eq!(
            totals(name),
            vec![(t, None), (t + 60, None)],
            "{name} rolled back"
        );
    }
    let report = engine
        .record_batch(&batch([first, second], t + 60, 1600.0))
        .unwrap();
    assert_eq!(
        report.accepted, 2,
        "the counters' states are as before the batch"
    );
    for name in ["a.bytes", "b.bytes"] {
        assert_eq!(
            totals(name),
            vec![(t, None), (t + 60, Some(600.0))],
            "{name}"
        );
    }
}

#[test]
fn out_of_order_counter_samples_are_refused_with_their_reason() {
    let (_dir, engine, _clock) = engine_at(NOW);
    let id = engine.series("hits").unwrap();
    engine.declare_kind(id, SeriesKind::Counter).unwrap();
    let t = NOW - 600;
    let report = engine
        .record_batch(&[
            Sample::new(id, t, 1.0),
            Sample::new(id, t + 60, 4.0),
            Sample::new(id, t + 30, 2.0),
            Sample::new(id, t + 60, 4.0),
            Sample::new(id, t + 120, 9.0),
        ])
        .unwrap();
    assert_eq!(report.accepted, 3);
    assert_eq!(report.rejected(RejectReason::CounterOutOfOrder), 2);
    assert_eq!(
        report.first_rejections,
        vec![
            (2, RejectReason::CounterOutOfOrder),
            (3, RejectReason::CounterOutOfOrder)
        ]
    );
    let stats = engine.stats();
    assert_eq!(stats.counters, 1);
    assert!(
        stats.rejected.contains(&("counter_out_of_order", 2)),
        "{:?}",
        stats.rejected
    );
    let total = points(
        &engine,
        "hits",
        "1h",
        t - t % HOUR,
        t - t % HOUR + 2 * HOUR,
        Display::Total,
    );
    assert_eq!(total.iter().filter_map(|p| p.1).sum::<f64>(), 8.0);
}

/// A delta counter's samples are increases already (StatsD's counts per flush interval):
/// stored as they come, in any order (two processes around a restart may write one
/// interval twice), so its rate is exact from its first sample; it reads as a counter,
/// across a restart too. A series already fixed as a gauge stays one; a counter of running
/// totals is another kind.
#[test]
fn a_delta_counter_stores_its_increases_as_they_come() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let config = counters_config(&["page.*"], &[]);
    let t = NOW - NOW % HOUR - HOUR;
    let engine = open(dir.path(), &clock, config.clone());
    let views = engine.series("page.views").unwrap();
    engine
        .declare_kind(views, SeriesKind::DeltaCounter)
        .unwrap();
    assert_eq!(engine.series_kind(views), SeriesKind::Counter);
    let report = engine
        .record_batch(&[
            Sample::new(views, t, 50.0),
            Sample::new(views, t + 10, 5.0),
            Sample::new(views, t + 70, 3.0),
            Sample::new(views, t + 10, 2.0),
        ])
        .unwrap();
    assert_eq!(report.accepted, 4);
    engine.close().unwrap();
    let engine = open(dir.path(), &clock, config);
    assert_eq!(engine.series_kind(views), SeriesKind::Counter);
    engine
        .declare_kind(views, SeriesKind::DeltaCounter)
        .unwrap();
    engine.record("page.views", t + 70, 1.0).unwrap();
    engine.sync().unwrap();
    assert_eq!(
        points(&engine, "page.views", "1m", t, t + 120, Display::Total),
        vec![(t, Some(57.0)), (t + 60, Some(4.0))]
    );
    assert_eq!(
        points(&engine, "page.views", "1m", t, t + 120, Display::PerSec),
        vec![(t, Some(57.0 / 60.0)), (t + 60, Some(4.0 / 60.0))]
    );
    for (series, fixed, outcome) in [
        ("old.statsd.count", SeriesKind::Gauge, Ok(SeriesKind::Gauge)),
        ("bytes.sent", SeriesKind::Counter, Err(())),
    ] {
        let id = engine.series(series).unwrap();
        engine.declare_kind(id, fixed).unwrap();
        let declared = engine.declare_kind(id, SeriesKind::DeltaCounter);
        match outcome {
            Ok(kind) => {
                declared.unwrap();
                assert_eq!(engine.series_kind(id), kind, "{series}");
            }
            Err(()) => assert!(
                matches!(
                    declared,
                    Err(tierdb::Error::Rejected(RejectReason::KindMismatch))
                ),
                "{series}: {declared:?}"
            ),
        }
    }
    // And the other way: a delta counter declared a counter of running totals, or a gauge.
    for other in [SeriesKind::Counter, SeriesKind::Gauge] {
        assert!(
            matches!(
                engine.declare_kind(views, other),
                Err(tierdb::Error::Rejected(RejectReason::KindMismatch))
            ),
            "{other:?}"
        );
    }
    // page.views and bytes.sent.
    assert_eq!(engine.stats().counters, 2);
}

#[test]
fn a_declared_kind_is_fixed_and_wins_over_rules() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let config = counters_config(&["*.count"], &[]);
    let engine = open(dir.path(), &clock, config.clone());
    let declared_gauge = engine.series("queue.count").unwrap();
    assert_eq!(
        engine.series_kind(declared_gauge),
        SeriesKind::Counter,
        "by rule"
    );
    engine
        .declare_kind(declared_gauge, SeriesKind::Gauge)
        .unwrap();
    assert_eq!(
        engine.series_kind(declared_gauge),
        SeriesKind::Gauge,
        "declared wins"
    );
    let err = engine
        .declare_kind(declared_gauge, SeriesKind::Counter)
        .unwrap_err();
    assert!(
        matches!(err, tierdb::Error::Rejected(RejectReason::KindMismatch)),
        "{err}"
    );
    engine
        .declare_kind(declared_gauge, SeriesKind::Gauge)
        .unwrap();
    let counter = engine.series("temperature").unwrap();
    engine.declare_kind(counter, SeriesKind::Counter).unwrap();
    engine.close().unwrap();
    let engine = open(dir.path(), &clock, config);
    assert_eq!(engine.series_kind(declared_gauge), SeriesKind::Gauge);
    assert_eq!(engine.series_kind(counter), SeriesKind::Counter);
    // A reader beside the writer sees the same kinds.
    let reader = Engine::builder(dir.path()).read_only().open().unwrap();
    assert_eq!(reader.series_kind(counter), SeriesKind::Counter);
    assert_eq!(reader.stats().counters, 1);
}

#[test]
fn gauges_are_untouched_beside_counters() {
    let (_dir, engine, _clock) = engine_at(NOW);
    let counter = engine.series("c").unwrap();
    engine.declare_kind(counter, SeriesKind::Counter).unwrap();
    let gauge = engine.series("g").unwrap();
    let t = NOW - NOW % 60 - 60;
    engine
        .record_batch(&[
            Sample::new(gauge, t, 7.0),
            Sample::new(counter, t, 7.0),
            Sample::new(gauge, t + 1, 3.0),
            Sample::new(counter, t + 1, 10.0),
        ])
        .unwrap();
    assert_eq!(
        points(&engine, "g", "1m", t, t + 60, Display::Total),
        vec![(t, Some(10.0))]
    );
    assert_eq!(
        points(&engine, "c", "1m", t, t + 60, Display::Total),
        vec![(t, Some(3.0))]
    );
}

/// The regression: after an unclean stop that lost the registry's last record (power loss
/// before its fsync), the next new series got that id back and read as the lost series'
/// counter, because `counters.state` still held its record.
#[test]
fn an_id_handed_out_again_after_a_lost_registration_does_not_inherit_a_counter() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let log = dir.path().join("series.log");
    let engine = open(dir.path(), &clock, TiersConfig::default());
    engine.series("a").unwrap();
    let kept_len = std::fs::metadata(&log).unwrap().len();
    let lost = engine.series("lost.requests").unwrap();
    engine.declare_kind(lost, SeriesKind::Counter).unwrap();
    engine
        .record_batch(&[
            Sample::new(lost, NOW - 20, 100.0),
            Sample::new(lost, NOW - 10, 150.0),
        ])
        .unwrap();
    engine.close().unwrap();
    // Power loss: the log's last record never reached the disk, the state file's did, and
    // the OPEN marker says the stop was unclean.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(kept_len)
        .unwrap();
    std::fs::write(dir.path().join("OPEN"), "4242").unwrap();

    let engine = open(dir.path(), &clock, TiersConfig::default());
    let fresh = engine.series("fresh.temperature").unwrap();
    assert_eq!(fresh, lost, "the lost id is handed out again");
    assert_eq!(engine.series_kind(fresh), SeriesKind::Gauge);
    engine
        .record_batch(&[Sample::new(fresh, NOW - 5, 21.5)])
        .unwrap();
    assert_eq!(
        points(
            &engine,
            "fresh.temperature",
            "1m",
            NOW - 60,
            NOW,
            Display::Avg
        ),
        vec![(NOW - 60, Some(21.5))]
    );
}

/// `counters.state` is created whole: written under a temporary name, then renamed. A
/// leftover temporary file (a crash before the rename) is not mistaken for the state.
#[test]
fn the_counter_state_file_is_created_whole() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("counters.state.tmp"), b"TIERDB").unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open(dir.path(), &clock, TiersConfig::default());
    let id = engine.series("c").unwrap();
    engine.declare_kind(id, SeriesKind::Counter).unwrap();
    engine.close().unwrap();
    assert!(!dir.path().join("counters.state.tmp").exists());
    let state = std::fs::read(dir.path().join("counters.state")).unwrap();
    assert_eq!(&state[..8], b"TIERDBCS");
}

/// `counters.journal` left with a batch by a stopped process is refused by name, never
/// applied blindly and never a panic: when it was written under another tiers layout (its
/// tier indexes would name other tiers), and when an entry lies outside the file it names.
/// The same for a version 1 file, as older versions wrote it, left active.
#[test]
fn an_unfinished_counter_journal_that_does_not_fit_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let config = counters_config(&["*.requests"], &[]);
    let engine = open(dir.path(), &clock, config.clone());
    engine.record("a.requests", NOW - 20, 1.0).unwrap();
    engine.close().unwrap();
    let path = dir.path().join("counters.journal");
    let reopen = || {
        Engine::builder(dir.path())
            .tiers(config.clone())
            .clock(clock.clone())
            .background_maintenance(false)
            .open()
            .err()
            .map(|e| e.to_string())
    };
    // The file as it holds one batch's entries under `layout`, in version 2 (a journal
    // record of kind 3) or version 1 (its own control entry, active).
    let write = |version: u32, layout: u64, entries: &[[u64; 8]]| {
        let mut bytes = b"TIERDBCJ".to_vec();
        bytes.extend(version.to_le_bytes());
        bytes.extend(64u32.to_le_bytes());
        let crc = crc32fast::hash(&bytes);
        bytes.extend(crc.to_le_bytes());
        bytes.resize(4096, 0);
        let body: Vec<u8> = entries
            .iter()
            .flatten()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let n = entries.len() as u64;
        // Version 1: active (1), n, layout. Version 2: sequence 1, n, layout, CRC, kind 3.
        let mut control: Vec<u8> = [1, n, layout]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        if version == 2 {
            let mut hasher = crc32fast::Hasher::new_with_initial(3);
            hasher.update(&control);
            hasher.update(&body);
            control.extend(hasher.finalize().to_le_bytes());
            control.extend(3u32.to_le_bytes());
        }
        control.resize(64, 0);
        bytes.extend(control);
        bytes.extend(body);
        bytes.resize(4096 + 64 * 64, 0);
        std::fs::write(&path, bytes).unwrap();
    };
    // A cell entry at slot 4096 of a 256-slot file: the 1m tier's file of the 6h period the
    // sample went to.
    let period = (NOW - 20) - (NOW - 20) % (6 * 3_600);
    let outside = [1 | 1 << 32, period as u64, 0, 4096, 0, 0, 0, 0];
    let state = [2, 0, 0, 0, 0, 0, 0, 0];
    for version in [2, 1] {
        write(version, config.layout_fingerprint() ^ 1, &[state]);
        let err = reopen().expect("refused");
        assert!(
            err.contains("counters.journal") && err.contains("another tiers"),
            "version {version}: {err}"
        );
        write(version, config.layout_fingerprint(), &[outside]);
        let err = reopen().expect("refused");
        assert!(
            err.contains("counters.journal") && err.contains("outside"),
            "version {version}: {err}"
        );
    }
}

/// Issue #54 item 1: a `[counters]` rule added after a series existed reinterpreted its
/// stored buckets as increases: perSecond of a gauge read 0.7/s, then 230/s once the rule
/// was added and the server restarted. A series' kind is now fixed when it is created;
/// changed rules apply to series created after them, and existing ones keep their kind
/// through later restarts too.
#[test]
fn a_counters_rule_added_later_applies_to_new_series_only() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let name = "servers.web2.nginx.requests";
    let t = NOW - NOW % HOUR - HOUR;
    let before = {
        let engine = open(dir.path(), &clock, TiersConfig::default());
        let id = engine.series(name).unwrap();
        // Requests per 10 s, as a gauge: about 7 each, so about 0.7 per second.
        let samples: Vec<Sample> = (0..60)
            .map(|i| Sample::new(id, t + i * 10, 6.0 + (i % 3) as f64))
            .collect();
        assert_eq!(engine.record_batch(&samples).unwrap().accepted, 60);
        let before = points(&engine, name, "1m", t, t + 600, Display::PerSec);
        engine.close().unwrap();
        before
    };
    assert_eq!(before[0], (t, Some(42.0 / 60.0)));
    let rules = counters_config(&["*.nginx.requests"], &[]);
    for round in 0..2 {
        let engine = open(dir.path(), &clock, rules.clone());
        let id = engine.series(name).unwrap();
        assert_eq!(engine.series_kind(id), SeriesKind::Gauge, "round {round}");
        assert_eq!(
            points(&engine, name, "1m", t, t + 600, Display::PerSec),
            before,
            "the stored minutes keep their meaning (round {round})"
        );
        // A series created under the new rule is a counter.
        let new = engine.series("servers.web3.nginx.requests").unwrap();
        assert_eq!(engine.series_kind(new), SeriesKind::Counter);
        engine.close().unwrap();
    }
    // Without the rule again, the series created under it stays a counter.
    let engine = open(dir.path(), &clock, TiersConfig::default());
    let new = engine.series("servers.web3.nginx.requests").unwrap();
    assert_eq!(engine.series_kind(new), SeriesKind::Counter);
    let old = engine.series(name).unwrap();
    assert_eq!(engine.series_kind(old), SeriesKind::Gauge);
}
