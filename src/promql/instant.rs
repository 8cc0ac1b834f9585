//! What the buckets' latest samples say exactly. Each bucket keeps its latest sample (value
//! and time; a counter's raw value), so:
//! - the latest sample in a window `[t - w, t]` ([`latest_sample`]) is known wherever the
//!   buckets that could hold it keep theirs: Prometheus' instant selector (`w` the 5-minute
//!   lookback), `last_over_time(x[w])` and `timestamp(x)`;
//! - a bucket that holds one sample holds exactly its latest ([`one_sample`]): a range
//!   vector asked for itself answers that sample at its time.
//!
//! Where the buckets cannot say, the callers fall back to what a bucket's count and total
//! give (its average, a counter's increase) and say the answer is approximate.

use crate::bucket::{Bucket, Last};

/// Buckets of one series, `res_ms` wide, the first starting at `first_ms`.
pub(crate) struct Buckets<'a> {
    pub(crate) buckets: &'a [Bucket],
    pub(crate) first_ms: i64,
    pub(crate) res_ms: i64,
}

/// What the buckets say of a series' latest sample in a window ([`latest_sample`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Found {
    /// The latest sample (a counter's raw value: what its buckets keep as their latest);
    /// `None` for none in the window.
    pub(crate) last: Option<Last>,
    /// False when the bucket holding the time has several samples, the latest after it:
    /// `last` is then the latest sample before that bucket, the answer unless one of that
    /// bucket's other samples lies at or before the time (at a bucket's start, only one
    /// taken at that very second).
    pub(crate) exact: bool,
}

/// The series' latest sample in `[t - window_ms, t]` (ms; closed at both ends, as
/// Prometheus 2.42 selects both its lookback and a range), or `None` when the buckets cannot
/// say: a bucket that may hold that sample does not know its latest one.
pub(crate) fn latest_sample(series: &Buckets<'_>, t: i64, window_ms: i64) -> Option<Found> {
    let Buckets {
        buckets,
        first_ms,
        res_ms,
    } = *series;
    let from = t - window_ms;
    let mut exact = true;
    // From the bucket holding t down to the first that ends after the window's start.
    let mut k = (t - first_ms).div_euclid(res_ms);
    while k >= 0 && first_ms + (k + 1) * res_ms > from {
        let Some(bucket) = buckets.get(k as usize) else {
            // Past the buckets read: a caller reads through the bucket holding t, so only
            // a bucket it did not need.
            k -= 1;
            continue;
        };
        k -= 1;
        if bucket.count == 0 {
            continue;
        }
        let last = bucket.last?;
        let at = last.ts() * 1000;
        if at <= t {
            // The bucket's latest: every other sample of it is earlier, so none in the
            // window is later.
            let last = (at >= from).then_some(last);
            return Some(Found { last, exact });
        }
        // Its latest sample is after t (only the bucket holding t): with one sample, none
        // at or before t lies here; with several, one may.
        exact &= bucket.count == 1;
    }
    Some(Found { last: None, exact })
}

/// The sample of a bucket that holds exactly one, where its latest sample is known: that
/// sample, its value (a counter's raw value) and time.
pub(crate) fn one_sample(bucket: &Bucket) -> Option<Last> {
    (bucket.count == 1).then_some(bucket.last).flatten()
}

#[cfg(test)]
mod tests;
