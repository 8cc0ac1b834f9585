//! StatsD over UDP (`--statsd ADDR`): datagrams of lines ([`crate::ingest::statsd`]),
//! aggregated per flush interval into one sample per series, written through the server's
//! [`Sink`] like every other protocol (so a cluster node publishes them to the log).
//!
//! Intervals are whole multiples of the flush interval since the epoch, by the server's
//! clock, and a line counts in the interval it arrived in; each interval's samples are
//! stamped with its start. With a flush interval that divides a minute, no interval
//! straddles a 1m bucket, so the 1m tier's `total` of a counter is exactly the increments
//! of that minute.
//!
//! - Counters: the sum of increments scaled by their sample rates, one sample per interval.
//!   As in Etsy's StatsD, an increment counts `value × (1 / rate)`; for the rates clients
//!   use (0.5, 0.1, 0.01, ...) that is a whole multiple, so whole increments sum exactly.
//! - Gauges: the value at the end of the interval, for gauges set or moved in it. Relative
//!   updates (`+3`, `-2`) move the last value, which is kept across intervals (from 0 for a
//!   gauge not seen before), and forgotten once untouched for [`GAUGE_MEMORY`].
//! - Sets: the number of distinct members seen in the interval.
//! - Timers and histograms: every value is a sample at the second it arrived, of a
//!   distribution series ([`SeriesKind::Distribution`]): the buckets keep the timer's count,
//!   total, min and max, and a histogram of its values, so its percentiles are answered at
//!   every tier.
//!
//! Each series' kind is declared when written, whatever `[counters]` rules say: a counter's
//! is [`SeriesKind::DeltaCounter`], so its counts (increases already) are stored as they
//! come and it reads as a counter (`rate()`, `increase()` and `per_sec` exact); a timer's is
//! a distribution; every other series is a gauge. A series an earlier build fixed as a gauge
//! stays one.
//!
//! Bounds: at most [`MAX_SERIES`] counters, gauges and sets held at once (a line of a new
//! one past it is refused as `statsd_series_limit`), and [`MAX_SET_MEMBERS`] members of all
//! sets in one interval (past it a new member is refused as `statsd_set_limit`; members are
//! held as 64-bit hashes, so two members colliding would count once).

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashSet;
use tokio::net::UdpSocket;
use tokio::sync::watch;

use super::udp::{Datagram, UdpReader};
use super::State;
use crate::counter::SeriesKind;
use crate::error::Error;
use crate::error::Result;
use crate::ingest::sink::Sink;
use crate::ingest::statsd::{parse_line, MetricType, StatsdValue};
use crate::time::{align_down, Span, Timestamp};

/// Counters, gauges and sets held at once.
pub(crate) const MAX_SERIES: usize = 100_000;
/// Members of all sets together in one interval.
pub(crate) const MAX_SET_MEMBERS: usize = 1_000_000;
/// A gauge not set or moved for this long is forgotten.
pub(crate) const GAUGE_MEMORY: i64 = 3600;
/// How often an idle listener checks whether its interval has ended.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// A bound StatsD socket and its flush interval.
pub struct StatsdListener {
    socket: UdpSocket,
    flush: Span,
}

impl StatsdListener {
    /// Binds `addr` (UDP) with intervals of `flush` (whole seconds, at least one).
    ///
    /// # Errors
    /// [`Error::Io`] naming the address; [`Error::InvalidQuery`] for a flush interval
    /// under a second.
    pub async fn bind(addr: SocketAddr, flush: Duration) -> Result<StatsdListener> {
        if flush.as_secs() == 0 {
            return Err(Error::InvalidQuery(
                "the StatsD flush interval must be at least 1s".into(),
            ));
        }
        let socket = UdpSocket::bind(addr)
            .await
            .map_err(|e| Error::io(format!("listen address {addr}"), e))?;
        Ok(StatsdListener {
            socket,
            flush: Span::from_secs(flush.as_secs()),
        })
    }

    /// The address bound.
    ///
    /// # Errors
    /// The OS's.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

/// Receives datagrams until `shutdown` flips, then writes the interval in progress. A task
/// reads the socket into a bounded queue ([`UdpReader`]), so reading never waits for a
/// write; each datagram counts in the interval it arrived in.
pub(crate) async fn serve(
    listener: StatsdListener,
    state: Arc<State>,
    shutdown: watch::Receiver<bool>,
) {
    let StatsdListener {
        socket,
        flush: every,
    } = listener;
    let mut reader = UdpReader::start(
        socket,
        Arc::clone(&state),
        shutdown,
        super::allowlist::Listener::Statsd,
    );
    let mut sink = state.sink();
    let mut aggregator = Aggregator::new(every);
    let mut taken = Vec::new();
    // When the idle check last wrote an interval: a datagram that arrived before it but
    // was taken after it counts in the interval the check moved to, so no interval is
    // written twice.
    let mut checked = Timestamp::MIN;
    let mut check = tokio::time::interval(CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Queued datagrams first, so the check rarely runs ahead of them.
            biased;
            more = reader.next(&mut taken) => {
                if !more {
                    break;
                }
                for Datagram { arrived, bytes, .. } in taken.drain(..) {
                    let now = arrived.max(checked);
                    if aggregator.ended(now) {
                        write_interval(&mut aggregator, &mut sink).await;
                    }
                    datagram(&bytes, now, &mut aggregator, &mut sink).await;
                }
                flush(&mut sink).await;
            }
            _ = check.tick() => {
                let now = sink.now();
                if aggregator.ended(now) {
                    write_interval(&mut aggregator, &mut sink).await;
                    flush(&mut sink).await;
                    checked = now;
                }
            }
        }
    }
    reader.finish().await;
    write_interval(&mut aggregator, &mut sink).await;
    if let Err(e) = sink.finish().await {
        tracing::error!(error = %e, "statsd write failed");
    }
}

/// Takes one datagram's lines into the interval (timer values straight into the sink).
async fn datagram(bytes: &[u8], now: Timestamp, aggregator: &mut Aggregator, sink: &mut Sink) {
    aggregator.begin(now);
    let mut values = Vec::new();
    for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let number = index + 1;
        let parsed = match parse_line(line, &mut values) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => continue,
            Err(e) => {
                sink.reject(number, e.as_str(), e.to_string());
                continue;
            }
        };
        if parsed.kind == MetricType::Timer {
            for value in &values {
                if let StatsdValue::Number(v) = value {
                    let full = sink.push_declared(
                        &parsed.series,
                        Some(SeriesKind::Distribution),
                        now,
                        *v,
                        number,
                    );
                    if full {
                        flush(sink).await;
                    }
                }
            }
            continue;
        }
        if let Err(reason) = aggregator.add(&parsed.series, parsed.kind, parsed.rate, &values, now)
        {
            sink.reject(number, reason, format!("{}: {reason}", parsed.series));
        }
    }
}

/// Writes the interval's samples, stamped with its start, and starts the next one empty.
async fn write_interval(aggregator: &mut Aggregator, sink: &mut Sink) {
    let Some((start, samples)) = aggregator.take() else {
        return;
    };
    for (series, kind, value) in samples {
        if sink.push_declared(&series, Some(kind), start, value, 0) {
            flush(sink).await;
        }
    }
}

async fn flush(sink: &mut Sink) {
    if let Err(e) = sink.flush().await {
        tracing::error!(error = %e, "statsd write failed");
    }
}

/// A gauge's last value.
struct Gauge {
    value: f64,
    /// Set or moved in the interval in progress.
    touched: bool,
    /// When it was last set or moved.
    seen: Timestamp,
}

/// An ended interval: its start and its samples (series, the kind it declares, value).
type Interval = (Timestamp, Vec<(Box<str>, SeriesKind, f64)>);

/// Set members are hashed with std's SipHash under fixed keys, so an interval's count does
/// not depend on the process.
type MemberHasher = BuildHasherDefault<DefaultHasher>;

/// The state of one flush interval (and the gauges' values, which outlive it).
struct Aggregator {
    flush: Span,
    /// The interval in progress; `None` before the first line.
    start: Option<Timestamp>,
    counters: HashMap<Box<str>, f64>,
    gauges: HashMap<Box<str>, Gauge>,
    sets: HashMap<Box<str>, FxHashSet<u64>>,
    /// Members of all sets in the interval.
    members: usize,
}

impl Aggregator {
    fn new(flush: Span) -> Aggregator {
        Aggregator {
            flush,
            start: None,
            counters: HashMap::new(),
            gauges: HashMap::new(),
            sets: HashMap::new(),
            members: 0,
        }
    }

    /// True when `now` lies outside the interval in progress.
    fn ended(&self, now: Timestamp) -> bool {
        self.start
            .is_some_and(|start| align_down(now, self.flush) != start)
    }

    /// Makes the interval holding `now` the one in progress (call [`Aggregator::take`] first
    /// when [`Aggregator::ended`]).
    fn begin(&mut self, now: Timestamp) {
        self.start = Some(align_down(now, self.flush));
    }

    fn held(&self) -> usize {
        self.counters.len() + self.gauges.len() + self.sets.len()
    }

    /// Folds one counter, gauge or set line in.
    ///
    /// # Errors
    /// The reason the line is refused: a bound reached.
    fn add(
        &mut self,
        series: &str,
        kind: MetricType,
        rate: f64,
        values: &[StatsdValue<'_>],
        now: Timestamp,
    ) -> std::result::Result<(), &'static str> {
        let full = self.held() >= MAX_SERIES;
        match kind {
            MetricType::Counter => {
                let sum = match self.counters.get_mut(series) {
                    Some(sum) => sum,
                    None if full => return Err("statsd_series_limit"),
                    None => self.counters.entry(series.into()).or_insert(0.0),
                };
                for value in values {
                    if let StatsdValue::Number(v) = value {
                        *sum += v * (1.0 / rate);
                    }
                }
            }
            MetricType::Gauge => {
                let gauge = match self.gauges.get_mut(series) {
                    Some(gauge) => gauge,
                    None if full => return Err("statsd_series_limit"),
                    None => self.gauges.entry(series.into()).or_insert(Gauge {
                        value: 0.0,
                        touched: false,
                        seen: now,
                    }),
                };
                for value in values {
                    match value {
                        StatsdValue::Number(v) => gauge.value = *v,
                        StatsdValue::Delta(d) => gauge.value += d,
                        StatsdValue::Member(_) => {}
                    }
                }
                gauge.touched = true;
                gauge.seen = now;
            }
            MetricType::Set => {
                let members = match self.sets.get_mut(series) {
                    Some(members) => members,
                    None if full => return Err("statsd_series_limit"),
                    None => self.sets.entry(series.into()).or_default(),
                };
                for value in values {
                    if let StatsdValue::Member(member) = value {
                        let mut hasher = MemberHasher::default().build_hasher();
                        hasher.write(member.as_bytes());
                        let hash = hasher.finish();
                        if !members.contains(&hash) {
                            if self.members >= MAX_SET_MEMBERS {
                                return Err("statsd_set_limit");
                            }
                            members.insert(hash);
                            self.members += 1;
                        }
                    }
                }
            }
            MetricType::Timer => {}
        }
        Ok(())
    }

    /// The interval's start and samples (counter sums, touched gauges' values, set sizes),
    /// leaving it empty; `None` when no line arrived since the last take. Gauges untouched
    /// for [`GAUGE_MEMORY`] are forgotten.
    fn take(&mut self) -> Option<Interval> {
        let start = self.start.take()?;
        let mut samples: Vec<(Box<str>, SeriesKind, f64)> = (self.counters.drain())
            .map(|(series, sum)| (series, SeriesKind::DeltaCounter, sum))
            .collect();
        samples.extend(
            (self.sets.drain())
                .map(|(series, members)| (series, SeriesKind::Gauge, members.len() as f64)),
        );
        self.members = 0;
        for (series, gauge) in &mut self.gauges {
            if std::mem::take(&mut gauge.touched) {
                samples.push((series.clone(), SeriesKind::Gauge, gauge.value));
            }
        }
        self.gauges
            .retain(|_, gauge| start - gauge.seen < GAUGE_MEMORY);
        self.counters.shrink_to(1024);
        self.sets.shrink_to(1024);
        Some((start, samples))
    }
}

#[cfg(test)]
mod tests;
