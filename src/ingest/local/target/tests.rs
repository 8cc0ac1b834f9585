use std::sync::{Arc, Mutex};

use super::*;
use crate::clock::ManualClock;
use crate::config::TiersConfig;
use crate::ingest::name_cache::NameBudget;
use crate::ingest::report::Tally;
use crate::ingest::sink::Sink;

/// Counts nothing beyond each sink's own report.
struct NoTotals;

impl Tally for NoTotals {
    fn count_rejected(&self, _: &'static str, _: u64) {}
}

const START: Timestamp = 1_763_726_400;

/// What the sinks of a test share: no totals, no series limit.
fn shared() -> SinkShared {
    SinkShared {
        tally: Arc::new(NoTotals),
        name_budget: Arc::new(NameBudget::default()),
        name_cache_bytes: 1 << 20,
        max_series: None,
        series_gate: Arc::new(Mutex::new(())),
    }
}

/// A connection whose every sample was refused, then flushed with nothing queued, takes
/// the clock afresh: after the clock moved on by more than the future bound (an hour), a
/// sample stamped with the new time lands rather than being refused as too far ahead.
#[tokio::test]
async fn a_flush_with_nothing_queued_takes_the_time_bounds_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(clock.clone())
        .writer_threads(1)
        .background_maintenance(false)
        .open()
        .unwrap();
    let shared = shared();
    let engine = Arc::new(engine);
    let mut sink = Sink::new(LocalTarget::new(Arc::clone(&engine), &shared), &shared);

    sink.push("a", START, f64::NAN, 1);
    sink.flush().await.unwrap();
    assert_eq!(sink.report().rejected_total(), 1);

    clock.advance(2 * 3600);
    sink.push("a", START + 2 * 3600, 1.0, 2);
    sink.flush().await.unwrap();
    let report = sink.finish().await.unwrap();
    assert_eq!(
        (report.accepted, report.rejected_total()),
        (1, 1),
        "{:?}",
        report.errors
    );
}

/// Observations whose extremes are not finite (an OTLP point's max of +Inf), of a sum that
/// is, are refused as `not_finite` with their line before a series is registered for them,
/// as a cluster node's edge refused them: the single node used to register the series (a
/// distribution) at the flush and only then refuse the observations, leaving a series with
/// no data in the listings.
#[tokio::test]
async fn observations_with_extremes_not_finite_register_no_series() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(Engine::open(dir.path()).unwrap());
    let shared = shared();
    let mut sink = Sink::new(LocalTarget::new(Arc::clone(&engine), &shared), &shared);
    let mut observed = Observed::one(2.0);
    observed.extremes = Some((2.0, f64::INFINITY));
    sink.push_histogram("latency", engine.now(), observed, 7);
    sink.push_histogram("other", engine.now(), Observed::one(3.0), 8);
    let report = sink.finish().await.unwrap();

    assert_eq!(report.accepted, 1, "{:?}", report.errors);
    let refused: Vec<(usize, &str)> = (report.errors.iter()).map(|e| (e.line, e.reason)).collect();
    assert_eq!(refused, [(7, "not_finite")]);
    assert_eq!(engine.registry().get("latency"), None);
    assert!(engine.registry().get("other").is_some());
}
