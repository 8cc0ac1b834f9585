//! The write path and reads end to end on a real data directory.

use tierdb::{Display, Query, RejectReason, Sample};

use crate::common::{engine_at, NOW};

#[test]
fn samples_fan_out_to_every_tier() {
    let (_dir, engine, _clock) = engine_at(NOW);
    let hour = NOW - NOW % 3600 - 3600;
    let id = engine.series("cpu.load{host=a}").unwrap();
    let samples: Vec<Sample> = (0..360)
        .map(|i| Sample::new(id, hour + i * 10, (i % 6) as f64))
        .collect();
    let report = engine.record_batch(&samples).unwrap();
    assert_eq!(report.accepted, 360);
    assert_eq!(report.rejected_total(), 0);

    let minute = engine
        .query(
            &Query::new("cpu.load{host=a}", hour, hour + 120)
                .tier("1m")
                .display(Display::Count),
        )
        .unwrap();
    assert_eq!(
        minute.points,
        vec![(hour, Some(6.0)), (hour + 60, Some(6.0))]
    );

    let five = engine
        .query(
            &Query::new("cpu.load{host=a}", hour, hour + 300)
                .tier("5m")
                .display(Display::Total),
        )
        .unwrap();
    assert_eq!(five.points, vec![(hour, Some(75.0))]);

    let h = engine
        .query(
            &Query::new("cpu.load{host=a}", hour, hour + 3600)
                .tier("1h")
                .display(Display::PerSec),
        )
        .unwrap();
    assert_eq!(h.points, vec![(hour, Some(900.0 / 3600.0))]);
    let max = engine
        .query(
            &Query::new("cpu.load{host=a}", hour, hour + 3600)
                .tier("1d")
                .display(Display::Max),
        )
        .unwrap();
    assert_eq!(max.points.len(), 0, "the 1d bucket starts before `from`");
    let day = NOW - NOW % 86_400;
    let max = engine
        .query(
            &Query::new("cpu.load{host=a}", day, day + 86_400)
                .tier("1d")
                .display(Display::Max),
        )
        .unwrap();
    assert_eq!(max.points, vec![(day, Some(5.0))]);
}

#[test]
fn refusals_are_counted_by_reason() {
    let (_dir, engine, _clock) = engine_at(NOW);
    let id = engine.series("x").unwrap();
    let batch = [
        Sample::new(id, NOW, f64::NAN),
        Sample::new(id, NOW + 86_400, 1.0),
        Sample::new(id, NOW - 10 * 365 * 86_400, 1.0),
        Sample::new(tierdb::SeriesId(99), NOW, 1.0),
        Sample::new(id, NOW, 1.0),
    ];
    let report = engine.record_batch(&batch).unwrap();
    assert_eq!(report.accepted, 1);
    for reason in [
        RejectReason::NotFinite,
        RejectReason::TooFarInFuture,
        RejectReason::TooOld,
        RejectReason::UnknownSeries,
    ] {
        assert_eq!(report.rejected(reason), 1, "{reason}");
    }
    let stats = engine.stats();
    assert_eq!(stats.accepted, 1);
    assert_eq!(
        stats.rejected.iter().map(|(_, n)| n).sum::<u64>(),
        4,
        "{:?}",
        stats.rejected
    );
}

/// Regression: the read walked every period between `from` and `to` one at a time, so a
/// huge range with a huge step (few points) spun for hours, and extreme timestamps
/// overflowed. Now it walks only the files held, in range arithmetic that cannot overflow.
#[test]
fn extreme_ranges_answer_at_once_without_overflow() {
    let (_dir, engine, _clock) = engine_at(NOW);
    engine.record("x", NOW - 60, 1.0).unwrap();
    engine.sync().unwrap();
    let started = std::time::Instant::now();
    let huge_step = tierdb::Span::from_secs(115_740_740_740 * 86_400);
    let cases = [
        (NOW - 3600, 9_200_000_000_000_000_000, Some(huge_step)),
        (i64::MAX - 10, i64::MAX, None),
        (i64::MIN, i64::MIN + 120, None),
        (
            i64::MIN,
            i64::MAX,
            Some(tierdb::Span::from_secs(i64::MAX as u64)),
        ),
        (
            NOW - 3600,
            NOW,
            Some(tierdb::Span::from_secs(i64::MAX as u64 / 60 * 60)),
        ),
    ];
    for (from, to, step) in cases {
        let mut q = Query::new("x", from, to).tier("1m");
        q.step = step;
        match engine.query(&q) {
            Ok(result) => assert!(result.points.len() <= 1_000_000),
            Err(e) => assert!(matches!(e, tierdb::Error::InvalidQuery(_)), "{e}"),
        }
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// Regression: a batch created the files of every (period, chunk) pairing it touched, so
/// one old sample of chunk 0 next to live samples of chunks 1 and 2 created three past
/// files where one was needed.
#[test]
fn a_backfill_creates_only_the_files_its_samples_land_in() {
    let dir = tempfile::tempdir().unwrap();
    let clock = std::sync::Arc::new(tierdb::ManualClock::new(NOW));
    let mut tiers = tierdb::TiersConfig::default();
    tiers.engine.series_per_chunk = 16;
    let engine = crate::common::open(dir.path(), &clock, tiers);
    let ids: Vec<_> = (0..40)
        .map(|i| engine.series(&format!("s{i}")).unwrap())
        .collect();
    // New chunks' files are made by the chunk creator's thread; a pass waits for any it is
    // making and creates the rest, so the count below is settled.
    engine.maintain().unwrap();
    let yesterday = NOW - NOW % 86_400 - 86_400 + 600;
    let minute_files =
        |dir: &std::path::Path| std::fs::read_dir(dir.join("tiers/1m")).unwrap().count();
    let before = minute_files(dir.path());
    let batch = [
        Sample::new(ids[0], yesterday, 1.0),
        Sample::new(ids[20], NOW + 60, 1.0),
        Sample::new(ids[35], NOW + 60, 1.0),
    ];
    assert_eq!(engine.record_batch(&batch).unwrap().accepted, 3);
    assert_eq!(
        minute_files(dir.path()),
        before + 1,
        "only yesterday's chunk 0"
    );
    assert_eq!(engine.stats().tiers[0].disk.on_demand_creations, 1);
}

/// A sample whose file cannot be created is refused whole (it lands in no tier); the rest
/// of the batch lands.
#[test]
fn a_file_that_cannot_be_created_refuses_only_the_samples_that_need_it() {
    let (dir, engine, _clock) = engine_at(NOW);
    let id = engine.series("x").unwrap();
    let yesterday = NOW - NOW % 86_400 - 86_400 + 600;
    // A directory where the temporary file must go makes the creation fail.
    let name = tierdb::testing::storage::format::file_name(yesterday - yesterday % 86_400, 0);
    std::fs::create_dir(dir.path().join("tiers/1m").join(format!("{name}.tmp"))).unwrap();
    let report = engine
        .record_batch(&[
            Sample::new(id, yesterday, 5.0),
            Sample::new(id, NOW - 60, 7.0),
        ])
        .unwrap();
    assert_eq!(report.accepted, 1);
    assert_eq!(report.rejected(RejectReason::StorageUnavailable), 1);
    assert_eq!(
        report.first_rejections,
        vec![(0, RejectReason::StorageUnavailable)]
    );
    // The refused sample is in no tier, not even the ones whose files exist.
    let hour = yesterday - yesterday % 3600;
    let q = Query::new("x", hour, hour + 3600)
        .tier("1h")
        .display(Display::Count);
    assert_eq!(engine.query(&q).unwrap().points, vec![(hour, None)]);
    let day = NOW - NOW % 86_400;
    let q = Query::new("x", day - 86_400, day + 86_400)
        .tier("1d")
        .display(Display::Total);
    assert_eq!(
        engine.query(&q).unwrap().points,
        vec![(day - 86_400, None), (day, Some(7.0))]
    );
}

/// The regression: `record` writes the buffer when it fills, and threw that write's report
/// away, so refusals in it never reached anyone (the caller that filled the buffer got `Ok`,
/// the next `sync` reported only what it wrote itself). Now `sync` reports every buffered
/// sample written since the previous `sync`.
#[test]
fn refusals_in_a_buffer_that_record_wrote_reach_the_next_sync() {
    let (dir, engine, _clock) = engine_at(NOW);
    let yesterday = NOW - NOW % 86_400 - 86_400 + 600;
    // The 1m file of yesterday cannot be created: samples needing it are refused.
    let name = tierdb::testing::storage::format::file_name(yesterday - yesterday % 86_400, 0);
    std::fs::create_dir(dir.path().join("tiers/1m").join(format!("{name}.tmp"))).unwrap();
    engine.record("x", yesterday, 1.0).unwrap();
    // Fill the buffer (4096 samples): the last `record` writes it.
    for i in 1..4096 {
        engine.record("x", NOW - 3600 + i % 3600, 1.0).unwrap();
    }
    engine.record("x", NOW - 1, 2.0).unwrap();
    let report = engine.sync().unwrap();
    assert_eq!(report.accepted, 4096);
    assert_eq!(report.rejected(RejectReason::StorageUnavailable), 1);
    assert_eq!(
        report.first_rejections,
        vec![(0, RejectReason::StorageUnavailable)]
    );
    // The next sync starts afresh.
    assert_eq!(engine.sync().unwrap(), tierdb::BatchReport::default());
}
