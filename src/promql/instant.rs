//! An instant selector's value from buckets: Prometheus answers a series' latest sample at or
//! before the evaluation time `t` and after `t - 5m` (the lookback), which the buckets'
//! latest samples give exactly ([`exact_value`]) wherever the buckets that could hold it keep
//! theirs. Otherwise the caller falls back to the bucket's average (a gauge) or increase (a
//! counter) and says the answer is approximate.

use crate::bucket::Bucket;

/// Buckets of one series, `res_ms` wide, the first starting at `first_ms`.
pub(crate) struct Buckets<'a> {
    pub(crate) buckets: &'a [Bucket],
    pub(crate) first_ms: i64,
    pub(crate) res_ms: i64,
}

/// The series' value at `t` (ms) by Prometheus' rule, its latest sample in
/// `(t - lookback_ms, t]`: `Some(None)` when it has none there, `Some(Some(v))` its value
/// (a counter's raw value: what its buckets keep as their latest), and `None` when the
/// buckets cannot say exactly: a bucket that may hold that sample does not know its latest
/// one, or the bucket holding `t` has several samples, its latest after `t` (one of the
/// others may be at or before `t`).
pub(crate) fn exact_value(series: &Buckets<'_>, t: i64, lookback_ms: i64) -> Option<Option<f64>> {
    let Buckets {
        buckets,
        first_ms,
        res_ms,
    } = *series;
    // From the bucket holding t down to the first that ends after t - lookback.
    let mut k = (t - first_ms).div_euclid(res_ms);
    while k >= 0 && first_ms + (k + 1) * res_ms > t - lookback_ms {
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
        let at = last.ts * 1000;
        if at <= t {
            return Some((at > t - lookback_ms).then_some(last.value));
        }
        // Its latest sample is after t: with one sample, none at or before t lies here.
        if bucket.count > 1 {
            return None;
        }
    }
    Some(None)
}

#[cfg(test)]
mod tests;
