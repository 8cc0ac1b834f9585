use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use super::*;

/// Refusals counted into the server's totals, and the batches timed.
#[derive(Default)]
struct Totals {
    rejected: Mutex<Vec<(&'static str, u64)>>,
    batches: Mutex<Vec<usize>>,
}

impl Tally for Totals {
    fn count_rejected(&self, reason: &'static str, n: u64) {
        self.rejected.lock().unwrap().push((reason, n));
    }

    fn observe_batch(&self, _: std::time::Duration, samples: usize) {
        self.batches.lock().unwrap().push(samples);
    }
}

/// A target over the shipped tiers whose clock reads `now` (100 unless set), that refuses a
/// negative time (`too_old`) and the name `bad` (`invalid_series`, saying why), is full at two
/// samples, and lands all but the sample valued 13 (refused as `write_failed` at the flush).
#[derive(Default)]
struct Target {
    queued: Vec<(String, f64, usize)>,
    tally: Option<Arc<dyn Tally>>,
    tiers: TiersConfig,
    now: Option<Arc<AtomicI64>>,
}

impl Target {
    fn check(at: Parsed<'_>) -> std::result::Result<(), Refused> {
        if at.ts < 0 {
            return Err(RejectReason::TooOld.into());
        }
        if at.series == "bad" {
            return Err(Refused {
                reason: RejectReason::InvalidSeries,
                message: Some("`bad` is no series".into()),
            });
        }
        Ok(())
    }
}

impl WriteTarget for Target {
    fn now(&self) -> Timestamp {
        self.now
            .as_ref()
            .map_or(100, |now| now.load(Ordering::Relaxed))
    }

    fn tiers(&self) -> &TiersConfig {
        &self.tiers
    }

    fn push(&mut self, at: Parsed<'_>, _: Option<SeriesKind>, value: f64) -> Queued {
        Target::check(at)?;
        self.queued.push((at.series.into(), value, at.line));
        Ok(self.queued.len() >= 2)
    }

    fn push_histogram(&mut self, at: Parsed<'_>, observed: Observed) -> Queued {
        self.push(at, Some(SeriesKind::Distribution), observed.sum)
    }

    fn flush<'a>(&'a mut self, report: &'a mut IngestReport) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let tally = self.tally.clone().unwrap();
            tally.observe_batch(std::time::Duration::ZERO, self.queued.len());
            for (_, value, line) in self.queued.drain(..) {
                if value == 13.0 {
                    report.refuse(&*tally, line, "write_failed", || "no".into());
                } else {
                    report.accepted += 1;
                }
            }
            Ok(())
        })
    }
}

/// What every sink of a test shares, counting into `totals`.
fn shared(totals: &Arc<Totals>) -> SinkShared {
    SinkShared {
        tally: Arc::clone(totals) as Arc<dyn Tally>,
        name_budget: Arc::default(),
        name_cache_bytes: 1024,
        max_series: None,
        series_gate: Arc::default(),
    }
}

/// The sink keeps the one report: what the target refused as it queued (with the reason's
/// message, or the target's own), what the handler refused, and what the flush landed or
/// refused, each counted into the server's totals too, with its line.
#[test]
fn a_sink_reports_what_its_target_refused_and_landed_by_line() {
    let totals = Arc::new(Totals::default());
    let shared = shared(&totals);
    let target = Target {
        tally: Some(Arc::clone(&shared.tally)),
        ..Target::default()
    };
    let mut sink = Sink::new(target, &shared);
    assert_eq!(sink.now(), 100);
    assert!(!sink.push("a", 10, 1.0, 1));
    assert!(!sink.push("a", -1, 2.0, 2));
    assert!(!sink.push("bad", 10, 3.0, 3));
    assert!(!sink.push_histogram("h", -5, Observed::one(4.0), 4));
    sink.reject(5, "invalid_value", "line 5".into());
    assert!(
        sink.push_histogram("h", 10, Observed::one(13.0), 6),
        "full at two"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(sink.flush()).unwrap();
    assert!(!sink.push("a", 20, 7.0, 7));
    let report = runtime.block_on(sink.finish()).unwrap();

    assert_eq!(report.accepted, 2);
    let errors: Vec<(usize, &str, &str)> = (report.errors.iter())
        .map(|e| (e.line, e.reason, e.message.as_str()))
        .collect();
    assert_eq!(
        errors,
        [
            (2, "too_old", "sample refused: too_old"),
            (3, "invalid_series", "`bad` is no series"),
            (4, "too_old", "histogram refused: too_old"),
            (5, "invalid_value", "line 5"),
            (6, "write_failed", "no"),
        ]
    );
    let mut counted = totals.rejected.lock().unwrap().clone();
    counted.sort_unstable();
    assert_eq!(
        counted,
        [
            ("invalid_series", 1),
            ("invalid_value", 1),
            ("too_old", 1),
            ("too_old", 1),
            ("write_failed", 1)
        ]
    );
    assert_eq!(*totals.batches.lock().unwrap(), [2, 1]);
}

/// The sink checks a sample's value and time before its target sees it, for every target
/// alike, against bounds taken at the target's clock and tiers; and takes them afresh at
/// every flush, whether the flush waits for the batch to land or not, and whether anything
/// was queued or not: a long-lived socket whose samples were all refused does not judge new
/// ones by the clock of its first.
#[test]
fn a_sink_checks_the_time_bounds_and_takes_them_afresh_at_every_flush() {
    const START: Timestamp = 1_763_726_400;
    let hour = 3600;
    let totals = Arc::new(Totals::default());
    let shared = shared(&totals);
    let clock = Arc::new(AtomicI64::new(START));
    let target = Target {
        tally: Some(Arc::clone(&shared.tally)),
        now: Some(Arc::clone(&clock)),
        ..Target::default()
    };
    let mut sink = Sink::new(target, &shared);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();

    sink.push("a", START, f64::NAN, 1);
    sink.push("a", START + 2 * hour, 1.0, 2);
    let observed = Observed::one(f64::INFINITY);
    sink.push_histogram("h", START, observed, 3);
    sink.push("a", START - 20 * 365 * 24 * hour, 1.0, 4);
    runtime.block_on(sink.flush_behind()).unwrap();
    clock.store(START + 2 * hour, Ordering::Relaxed);
    sink.push("a", START + 2 * hour, 5.0, 5);
    runtime.block_on(sink.flush()).unwrap();
    clock.store(START + 4 * hour, Ordering::Relaxed);
    sink.push("a", START + 4 * hour, 6.0, 6);
    runtime.block_on(sink.flush_behind()).unwrap();
    let report = runtime.block_on(sink.finish()).unwrap();

    assert_eq!(report.accepted, 2);
    let errors: Vec<(usize, &str)> = (report.errors.iter()).map(|e| (e.line, e.reason)).collect();
    assert_eq!(
        errors,
        [
            (1, "not_finite"),
            (2, "too_far_in_future"),
            (3, "not_finite"),
            (4, "too_old"),
        ]
    );
    assert_eq!(*totals.batches.lock().unwrap(), [0, 1, 1, 0]);
}
