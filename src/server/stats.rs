//! The server's own counters, beyond the engine's: refusals by protocol-level reason, lines
//! received, connections open, refused, evicted and timed out per protocol, reads refused over
//! budget, the write batch latency histogram that `/metrics` exports, and what every
//! connection's sink shares: the name caches' byte budget and the series limit's lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::ingest::name_cache::NameBudget;
use crate::ingest::report::Tally;
use crate::ingest::sink::SinkShared;

/// Upper bounds (seconds) of the batch latency histogram's buckets.
pub(crate) const LATENCY_BUCKETS: [f64; 12] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// A protocol that holds connections open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Graphite plaintext over TCP.
    Graphite,
    /// The HTTP API.
    Http,
}

impl Protocol {
    /// Both, in the order `/metrics` lists them.
    pub const ALL: [Protocol; 2] = [Protocol::Graphite, Protocol::Http];

    /// The `protocol` label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Graphite => "graphite",
            Protocol::Http => "http",
        }
    }

    /// The timeouts that can close a connection of this protocol.
    pub fn timeouts(self) -> &'static [Timeout] {
        match self {
            Protocol::Graphite => &[Timeout::Idle],
            Protocol::Http => &[Timeout::Idle, Timeout::Header, Timeout::Body],
        }
    }
}

/// Why the server closed a connection its client had not finished with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// Nothing received for the idle timeout while no request was in progress.
    Idle,
    /// An HTTP request's headers did not arrive in full within the header timeout.
    Header,
    /// An HTTP request's body did not arrive in full within the body timeout.
    Body,
}

impl Timeout {
    /// The `timeout` label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Timeout::Idle => "idle",
            Timeout::Header => "header",
            Timeout::Body => "body",
        }
    }
}

/// Connection counters of one protocol.
#[derive(Default)]
struct ConnectionCounters {
    open: AtomicU64,
    refused: AtomicU64,
    /// Closed at the limit to make room for a new connection.
    evicted: AtomicU64,
    /// Indexed by `Timeout as usize`.
    timed_out: [AtomicU64; 3],
}

/// Counts a connection as open until it is dropped ([`ServerStats::open_connection`]).
pub struct OpenConnection {
    stats: Arc<ServerStats>,
    protocol: Protocol,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.stats
            .connections(self.protocol)
            .open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counters shared by every connection and request.
#[derive(Default)]
pub struct ServerStats {
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    graphite: ConnectionCounters,
    http: ConnectionCounters,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    latency_sum_nanos: AtomicU64,
    batches: AtomicU64,
    batch_samples: AtomicU64,
    over_budget: AtomicU64,
    /// What all connections' name caches hold together, within
    /// [`super::Limits::name_cache_bytes`].
    pub(crate) name_budget: Arc<NameBudget>,
    /// When each reason of refused Graphite input was last logged.
    pub(crate) refusal_log: super::refusal_log::RefusalLog,
    /// Held while a new series is checked against the series limit and registered, so
    /// connections registering at the same time cannot overshoot the limit.
    series_gate: Arc<Mutex<()>>,
    /// HTTP requests refused for their credential, by role needed and reason.
    pub auth: super::auth::AuthCounters,
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

    fn connections(&self, protocol: Protocol) -> &ConnectionCounters {
        match protocol {
            Protocol::Graphite => &self.graphite,
            Protocol::Http => &self.http,
        }
    }

    /// Counts a connection of `protocol` as open until the guard is dropped.
    pub fn open_connection(self: &Arc<Self>, protocol: Protocol) -> OpenConnection {
        self.connections(protocol)
            .open
            .fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            stats: Arc::clone(self),
            protocol,
        }
    }

    /// Counts a connection refused because `protocol`'s connection limit was reached.
    pub fn count_refused(&self, protocol: Protocol) {
        self.connections(protocol)
            .refused
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed, at `protocol`'s connection limit, to make room for a new
    /// one.
    pub fn count_evicted(&self, protocol: Protocol) {
        self.connections(protocol)
            .evicted
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Connections of `protocol` closed at the connection limit to make room for a new one.
    pub fn evicted(&self, protocol: Protocol) -> u64 {
        self.connections(protocol).evicted.load(Ordering::Relaxed)
    }

    /// Counts a connection closed by `timeout`.
    pub fn count_timed_out(&self, protocol: Protocol, timeout: Timeout) {
        self.connections(protocol).timed_out[timeout as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Connections of `protocol` open now.
    pub fn open(&self, protocol: Protocol) -> u64 {
        self.connections(protocol).open.load(Ordering::Relaxed)
    }

    /// Connections of `protocol` refused at the connection limit.
    pub fn refused(&self, protocol: Protocol) -> u64 {
        self.connections(protocol).refused.load(Ordering::Relaxed)
    }

    /// Connections of `protocol` closed by `timeout`.
    pub fn timed_out(&self, protocol: Protocol, timeout: Timeout) -> u64 {
        self.connections(protocol).timed_out[timeout as usize].load(Ordering::Relaxed)
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

    /// Bytes all name caches hold together.
    pub fn name_cache_bytes(&self) -> usize {
        self.name_budget.bytes()
    }

    /// Name caches emptied for want of room, since start.
    pub fn name_cache_clears(&self) -> u64 {
        self.name_budget.clears()
    }

    /// What this server's sinks share, within `limits`: these counters, the name caches'
    /// budget and the series limit with its lock.
    pub(crate) fn sink_shared(self: &Arc<Self>, limits: &super::Limits) -> SinkShared {
        SinkShared {
            tally: Arc::clone(self) as Arc<dyn Tally>,
            name_budget: Arc::clone(&self.name_budget),
            name_cache_bytes: limits.name_cache_bytes,
            max_series: limits.max_series,
            series_gate: Arc::clone(&self.series_gate),
        }
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

impl Tally for ServerStats {
    fn count_rejected(&self, reason: &'static str, n: u64) {
        ServerStats::count_rejected(self, reason, n);
    }

    fn observe_batch(&self, took: Duration, samples: usize) {
        ServerStats::observe_batch(self, took, samples);
    }
}
