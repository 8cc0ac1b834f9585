//! Cumulative OTLP histogram streams: each stream's last point, so that a cumulative point
//! writes what a delta point would, its increase since the stream's previous point.
//!
//! - A stream is a series (name and tags); its last point's counts and sum are kept in
//!   memory, within [`MAX_STREAM_BYTES`]: past it the least recently written streams are
//!   forgotten.
//! - A reset, seen as a new `start_time_unix_nano`, any count lower than the last point's,
//!   or other explicit bounds, has the point counted whole.
//! - A stream's first point is counted whole when the stream started after every stream
//!   that may have been counted before: after this process started and after the last
//!   stream was forgotten. Otherwise (tierdb restarted, or the stream was forgotten) it is
//!   a baseline that writes nothing, so no value is counted twice; the values between the
//!   stream's last point before and its first point after are lost.
//! - A point not later than its stream's last is refused, since its increase cannot be told.
//! - A cumulative point's min and max are since its start: an increase carries one only
//!   when it is new (a lower min or higher max than the last point's is the increase's).

use std::collections::{BTreeMap, HashMap};

use super::distribution::{observed, Counts, Extremes};
use super::histogram::{Distribution, HistogramError, Temporality};
use crate::histogram::Observed;
use crate::ingest::cumulative::Unwritten;
use crate::time::Timestamp;

/// Bytes of stream state kept at most: a stream of a 20-bucket explicit histogram with a
/// 200-byte series takes about 900 bytes, one of a 160-bucket exponential histogram about
/// 3,100, so 64 MiB keep some 70,000 or 20,000 streams: more than one server's histogram
/// series usually are.
pub const MAX_STREAM_BYTES: usize = 64 << 20;

/// What one stream's entry costs beside its series text and counts: the map's and the
/// use order's entries.
const ENTRY_BYTES: usize = 160;

/// The last point of one cumulative stream.
#[derive(Debug)]
struct Last {
    /// Its `start_time_unix_nano`.
    start: u64,
    /// Its `time_unix_nano`.
    time: u64,
    counts: Counts,
    sum: f64,
    /// Its min and max (since the start): a later point's lower min or higher max is a
    /// value of its increase.
    extremes: Extremes,
    /// When it was written, in [`Streams::tick`]s: its key in [`Streams::by_use`].
    used: u64,
}

/// A cumulative stream's last point before a step of [`Streams::observe`] (none for a
/// stream first seen), and the time the step set.
#[derive(Debug)]
pub struct StreamStep {
    taken_at: u64,
    before: Option<Last>,
}

/// The cumulative streams seen, bounded by bytes.
#[derive(Debug)]
pub struct Streams {
    last: HashMap<String, Last>,
    /// Series by last write, oldest first: the order streams are forgotten in.
    by_use: BTreeMap<u64, String>,
    tick: u64,
    bytes: usize,
    max_bytes: usize,
    /// A stream first seen counts whole only when it started after this (unix seconds): the
    /// process's start, raised to the time a stream is forgotten.
    whole_after: Timestamp,
}

impl Streams {
    /// No streams yet, for a process started at `started`, keeping at most `max_bytes`.
    pub fn new(started: Timestamp, max_bytes: usize) -> Streams {
        Streams {
            last: HashMap::new(),
            by_use: BTreeMap::new(),
            tick: 0,
            bytes: 0,
            max_bytes,
            whole_after: started,
        }
    }

    /// Streams kept.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// True when no stream is kept.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }

    /// What the histogram `point` of series `stream` writes: a delta point's values, or a
    /// cumulative point's increase since the stream's last point (the point whole after a
    /// reset); `None` when there is nothing to write (a baseline, or no new value). `now`
    /// (unix seconds) is when a stream forgotten now was last possibly counted.
    ///
    /// A step that writes is noted in `unwritten` until the caller knows it landed
    /// ([`Unwritten::landed`]) or failed ([`Streams::undo`]).
    ///
    /// # Errors
    /// The point's [`HistogramError`]: a sum missing, a scale too coarse, no bounds, or a
    /// cumulative point not later than its stream's last.
    pub fn observe(
        &mut self,
        stream: &str,
        point: &Distribution,
        now: Timestamp,
        unwritten: &mut Unwritten<StreamStep>,
    ) -> Result<Option<Observed>, HistogramError> {
        let counts = Counts::of(point)?;
        let sum = match point.sum {
            Some(sum) => sum,
            None if point.count == 0 => 0.0,
            None => return Err(HistogramError::MissingSum(point.count)),
        };
        let own = (point.min, point.max);
        let whole = |counts: &Counts| (counts.count() > 0).then(|| observed(counts, sum, own, own));
        if point.temporality == Temporality::Delta {
            return Ok(whole(&counts));
        }
        let taken = match self.last.get(stream) {
            Some(last) if point.time != 0 && point.time <= last.time => {
                return Err(HistogramError::OutOfOrder {
                    time: point.time,
                    last: last.time,
                })
            }
            Some(last) if last.start == point.start => match counts.increase_since(&last.counts) {
                Some(increase) => (increase.count() > 0).then(|| {
                    let new = (
                        point
                            .min
                            .filter(|&min| last.extremes.0.is_some_and(|m| min < m)),
                        point
                            .max
                            .filter(|&max| last.extremes.1.is_some_and(|m| max > m)),
                    );
                    observed(&increase, sum - last.sum, own, new)
                }),
                None => whole(&counts),
            },
            Some(_) => whole(&counts),
            None if point.start != 0 && started_after(point.start, self.whole_after) => {
                whole(&counts)
            }
            None => None,
        };
        let before = self.keep(stream, point, counts, sum, now);
        if taken.is_some() {
            let taken_at = point.time;
            unwritten.note(stream, StreamStep { taken_at, before });
        }
        Ok(taken)
    }

    /// Takes back the steps of `unwritten`, latest first, whose writes failed: each stream
    /// returns to its last point before them (or to none), unless a later point moved it on
    /// since, which then stands.
    pub fn undo(&mut self, unwritten: &mut Unwritten<StreamStep>) {
        for (stream, step) in unwritten.latest_first() {
            if self.last.get(&stream).map(|last| last.time) != Some(step.taken_at) {
                continue;
            }
            self.forget(&stream);
            if let Some(before) = step.before {
                self.bytes += entry_bytes(&stream, &before.counts);
                self.by_use.insert(before.used, stream.clone());
                self.last.insert(stream, before);
            }
        }
    }

    /// Keeps `point` as the last of `stream`, then forgets the least recently written
    /// streams while the state is over its bytes. Returns the stream's point before, kept
    /// by the caller for an undo ([`Streams::undo`]).
    fn keep(
        &mut self,
        stream: &str,
        point: &Distribution,
        counts: Counts,
        sum: f64,
        now: Timestamp,
    ) -> Option<Last> {
        self.tick += 1;
        let used = self.tick;
        let before = self.forget(stream);
        self.bytes += entry_bytes(stream, &counts);
        let entry = Last {
            start: point.start,
            time: point.time,
            counts,
            sum,
            extremes: (point.min, point.max),
            used,
        };
        self.last.insert(stream.to_string(), entry);
        self.by_use.insert(used, stream.to_string());
        while self.bytes > self.max_bytes {
            let Some((_, oldest)) = self.by_use.first_key_value() else {
                break;
            };
            let oldest = oldest.clone();
            self.forget(&oldest);
            self.whole_after = self.whole_after.max(now);
        }
        before
    }

    /// Forgets `stream`'s last point, and returns it.
    fn forget(&mut self, stream: &str) -> Option<Last> {
        let gone = self.last.remove(stream)?;
        self.by_use.remove(&gone.used);
        self.bytes -= entry_bytes(stream, &gone.counts);
        Some(gone)
    }
}

/// What one stream's entry costs: its series text (in the map and in the use order), its
/// counts and the entries themselves.
fn entry_bytes(stream: &str, counts: &Counts) -> usize {
    ENTRY_BYTES + 2 * stream.len() + counts.heap_bytes()
}

/// True when `start_unix_nano` lies in a later second than `after` (unix seconds).
fn started_after(start_unix_nano: u64, after: Timestamp) -> bool {
    i64::try_from(start_unix_nano / 1_000_000_000).is_ok_and(|start| start > after)
}

#[cfg(test)]
mod tests;
