//! The server's own counters, beyond the engine's: refusals by protocol-level reason, lines
//! received, reads refused over budget, the write batch latency histogram that `/metrics`
//! exports, and what every connection's sink shares: the name caches' byte budget and the
//! series limit's lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Upper bounds (seconds) of the batch latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Counters shared by every connection and request.
#[derive(Default)]
pub struct ServerStats {
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    latency_sum_nanos: AtomicU64,
    batches: AtomicU64,
    batch_samples: AtomicU64,
    over_budget: AtomicU64,
    /// Bytes all connections' name caches hold together, drawn from
    /// [`super::Limits::name_cache_bytes`].
    name_cache_bytes: AtomicUsize,
    /// Times a connection emptied its name cache because it, or the shared budget, was full.
    name_cache_clears: AtomicU64,
    /// Held while a new series is checked against the series limit and registered, so
    /// connections registering at the same time cannot overshoot the limit.
    series_gate: Mutex<()>,
}

/// A copy of the batch latency histogram.
#[derive(Clone, Debug, Default)]
pub struct LatencyHistogram {
    /// Cumulative counts per bucket of [`LATENCY_BUCKETS`].
    pub cumulative: Vec<u64>,
    /// Sum of all latencies, seconds.
    pub sum: f64,
    /// Batches observed.
    pub count: u64,
}

impl ServerStats {
    /// Counts `n` refusals under `reason`.
    pub fn count_rejected(&self, reason: &'static str, n: u64) {
        *self
            .rejected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(reason)
            .or_default() += n;
    }

    /// Records one engine batch's latency.
    pub fn observe_batch(&self, took: Duration, samples: usize) {
        let secs = took.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS.iter().position(|&b| secs <= b) {
            self.latency_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.latency_sum_nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batch_samples
            .fetch_add(samples as u64, Ordering::Relaxed);
    }

    /// Counts a read refused for going past its request's read budget.
    pub fn count_over_budget(&self) {
        self.over_budget.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads refused for going past their request's read budget.
    pub fn over_budget(&self) -> u64 {
        self.over_budget.load(Ordering::Relaxed)
    }

    /// Draws `bytes` from the name caches' shared `budget`; false (and nothing drawn) when
    /// that would overspend it.
    pub fn draw_name_cache(&self, bytes: usize, budget: usize) -> bool {
        self.name_cache_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes).filter(|&after| after <= budget)
            })
            .is_ok()
    }

    /// Gives `bytes` a name cache drew back to the budget.
    pub fn return_name_cache(&self, bytes: usize) {
        self.name_cache_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Counts a name cache emptied for want of room.
    pub fn count_name_cache_clear(&self) {
        self.name_cache_clears.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes all name caches hold together.
    pub fn name_cache_bytes(&self) -> usize {
        self.name_cache_bytes.load(Ordering::Relaxed)
    }

    /// Name caches emptied for want of room, since start.
    pub fn name_cache_clears(&self) -> u64 {
        self.name_cache_clears.load(Ordering::Relaxed)
    }

    /// The series limit's lock: held from the check of the limit until the new series is
    /// registered.
    pub fn series_gate(&self) -> MutexGuard<'_, ()> {
        // It guards no data: a panic while it was held leaves nothing half-done.
        self.series_gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Protocol-level refusals by reason.
    pub fn rejected(&self) -> BTreeMap<&'static str, u64> {
        self.rejected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The batch latency histogram.
    pub fn latency(&self) -> LatencyHistogram {
        let mut running = 0;
        let cumulative = self
            .latency_buckets
            .iter()
            .map(|b| {
                running += b.load(Ordering::Relaxed);
                running
            })
            .collect();
        LatencyHistogram {
            cumulative,
            sum: self.latency_sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            count: self.batches.load(Ordering::Relaxed),
        }
    }
}
