//! PromQL's histogram values: what a distribution series (a native histogram's, a StatsD
//! timer's) evaluates to, and what reads them: `rate` and `increase` over its buckets, `sum`
//! and `avg` across series, and `histogram_quantile`, `histogram_count`, `histogram_sum`,
//! `histogram_avg` and `histogram_fraction`, each following Prometheus 2.42's rules.
//!
//! A stored bucket keeps the histogram of the observations in it (a counter histogram's
//! increase), with integer counts that merge exactly. Evaluation turns a window's merge into
//! a [`FloatHistogram`] (counts divided by seconds for `rate`), as Prometheus' engine does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::error::QueryError;
use super::labels::Labels;
use super::number::push_value;
use super::source::{BucketHistogram, HistogramVisit, Selected, Source};
use super::value::{first_shared_of, same_labelset};
use super::windows::{bucket_range, RangeInput, StoredRead, WindowData};
use crate::histogram::{lower_bound, reduced_index, upper_bound};
use crate::read::budget::ReadBudget;
use crate::time::Timestamp;

/// A histogram with float counts: Prometheus' `FloatHistogram` in the numbering of
/// [`crate::histogram`] (bucket `i` of a positive value holds `(base^(i-1), base^i]`).
#[derive(Clone, Debug, PartialEq)]
pub struct FloatHistogram {
    /// Base `2^(2^-schema)`.
    pub schema: i8,
    /// Observations at most this far from zero count in the zero bucket.
    pub zero_threshold: f64,
    /// The zero bucket's count.
    pub zero_count: f64,
    /// Observations in all buckets.
    pub count: f64,
    /// Their sum.
    pub sum: f64,
    /// Positive buckets, `(index, count)` by ascending index, none empty.
    pub positive: Vec<(i32, f64)>,
    /// Negative buckets, by ascending index of the magnitude, none empty.
    pub negative: Vec<(i32, f64)>,
}

/// One bucket in ascending order of value, with Prometheus' bounds and their inclusion.
struct Span {
    lower: f64,
    upper: f64,
    count: f64,
    /// Prometheus' `boundary_rule` in the HTTP API: 0 open left, 1 open right, 3 closed.
    rule: u8,
}

impl FloatHistogram {
    /// The merged observations `stored`, every count and the sum multiplied by `factor`
    /// (`1 / seconds` for a rate).
    pub(crate) fn scaled(stored: &BucketHistogram, factor: f64) -> FloatHistogram {
        let h = &stored.histogram;
        let scale =
            |list: &[(i32, u64)]| list.iter().map(|&(i, c)| (i, c as f64 * factor)).collect();
        FloatHistogram {
            schema: h.scale(),
            zero_threshold: h.zero_threshold(),
            zero_count: h.zero_count() as f64 * factor,
            count: h.count() as f64 * factor,
            sum: stored.sum * factor,
            positive: scale(h.positive()),
            negative: scale(h.negative()),
        }
    }

    /// Adds `other` as Prometheus' `FloatHistogram.Add` does: the result takes the coarser
    /// schema and the wider zero threshold (a bucket wholly inside it moves to the zero
    /// bucket), and counts and sums add.
    pub(crate) fn add(&mut self, other: &FloatHistogram) {
        let schema = self.schema.min(other.schema);
        let threshold = self.zero_threshold.max(other.zero_threshold);
        self.count += other.count;
        self.sum += other.sum;
        self.zero_count += other.zero_count;
        let deltas = (
            (self.schema - schema) as u32,
            (other.schema - schema) as u32,
        );
        let mut zero = 0.0;
        for (mine, theirs) in [
            (&mut self.positive, &other.positive),
            (&mut self.negative, &other.negative),
        ] {
            zero += merge_buckets(mine, theirs, deltas, schema, threshold);
        }
        self.zero_count += zero;
        self.schema = schema;
        self.zero_threshold = threshold;
    }

    /// Every populated bucket in ascending order of value, the zero bucket in its place
    /// (Prometheus' `AllBucketIterator`).
    fn ascending(&self) -> impl Iterator<Item = Span> + '_ {
        let schema = self.schema;
        let negative = (self.negative.iter().rev()).map(move |&(i, count)| Span {
            lower: -upper_bound(i, schema),
            upper: -lower_bound(i, schema),
            count,
            rule: 1,
        });
        let zero = (self.zero_count > 0.0).then_some(Span {
            lower: -self.zero_threshold,
            upper: self.zero_threshold,
            count: self.zero_count,
            rule: 3,
        });
        let positive = (self.positive.iter()).map(move |&(i, count)| Span {
            lower: lower_bound(i, schema),
            upper: upper_bound(i, schema),
            count,
            rule: 0,
        });
        negative.chain(zero).chain(positive)
    }

    /// The zero bucket's bounds as Prometheus takes them for an estimate: from 0 when every
    /// other bucket is positive, to 0 when every other one is negative.
    fn estimate_bounds(&self, span: &Span) -> (f64, f64) {
        if span.lower < 0.0 && span.upper > 0.0 {
            if self.negative.is_empty() && !self.positive.is_empty() {
                return (0.0, span.upper);
            }
            if self.positive.is_empty() && !self.negative.is_empty() {
                return (span.lower, 0.0);
            }
        }
        (span.lower, span.upper)
    }

    /// `histogram_quantile(q, h)` as Prometheus 2.42 answers it: the bucket where the rank
    /// `q × count` falls, interpolated linearly within it; NaN without observations or for a
    /// NaN `q`, -Inf below 0, +Inf above 1.
    pub(crate) fn quantile(&self, q: f64) -> f64 {
        if q < 0.0 {
            return f64::NEG_INFINITY;
        }
        if q > 1.0 {
            return f64::INFINITY;
        }
        if self.count == 0.0 || q.is_nan() {
            return f64::NAN;
        }
        let rank = q * self.count;
        let mut seen = 0.0;
        let mut found = None;
        for span in self.ascending() {
            seen += span.count;
            let reached = seen >= rank;
            found = Some(span);
            if reached {
                break;
            }
        }
        let Some(span) = found else {
            return f64::NAN;
        };
        let (lower, upper) = self.estimate_bounds(&span);
        let seen = seen.min(self.count);
        if seen < rank {
            return upper;
        }
        let rank = rank - (seen - span.count);
        lower + (upper - lower) * (rank / span.count)
    }

    /// `histogram_fraction(lower, upper, h)` as Prometheus 2.42 answers it: the share of
    /// observations between the bounds, interpolated linearly within the buckets they cut.
    pub(crate) fn fraction(&self, lower: f64, upper: f64) -> f64 {
        if self.count == 0.0 || lower.is_nan() || upper.is_nan() {
            return f64::NAN;
        }
        if lower >= upper {
            return 0.0;
        }
        let (mut rank, mut lower_rank, mut upper_rank) = (0.0, None, None);
        for span in self.ascending() {
            let (b_lower, b_upper) = self.estimate_bounds(&span);
            if lower_rank.is_none() && b_lower >= lower {
                lower_rank = Some(rank);
            }
            if upper_rank.is_none() && b_lower >= upper {
                upper_rank = Some(rank);
            }
            let within = |v: f64| rank + span.count * (v - b_lower) / (b_upper - b_lower);
            if lower_rank.is_none() && b_lower < lower && b_upper > lower {
                lower_rank = Some(within(lower));
            }
            if upper_rank.is_none() && b_lower < upper && b_upper > upper {
                upper_rank = Some(within(upper));
            }
            if lower_rank.is_some() && upper_rank.is_some() {
                break;
            }
            rank += span.count;
        }
        let lower_rank = lower_rank.unwrap_or(self.count).min(self.count);
        let upper_rank = upper_rank.unwrap_or(self.count).min(self.count);
        (upper_rank - lower_rank) / self.count
    }

    /// The histogram as Prometheus' HTTP API writes it: `{"count", "sum", "buckets"}`, each
    /// bucket `[boundary_rule, lower, upper, count]`, numbers as strings.
    pub(crate) fn push_json(&self, out: &mut String) {
        out.push_str("{\"count\":\"");
        push_value(out, self.count);
        out.push_str("\",\"sum\":\"");
        push_value(out, self.sum);
        out.push('"');
        let mut first = true;
        for span in self.ascending() {
            out.push_str(if first { ",\"buckets\":[[" } else { ",[" });
            first = false;
            out.push(char::from(b'0' + span.rule));
            for v in [span.lower, span.upper, span.count] {
                out.push_str(",\"");
                push_value(out, v);
                out.push('"');
            }
            out.push(']');
        }
        if !first {
            out.push(']');
        }
        out.push('}');
    }
}

/// Per series, its labels and its histograms stamped in unix milliseconds: a matrix.
pub(crate) type HistogramPoints = Vec<(Labels, Vec<(i64, FloatHistogram)>)>;

/// One series of an instant vector of histograms over the grid.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HistogramSeries {
    pub labels: Labels,
    pub values: Vec<Option<FloatHistogram>>,
}

/// `rate` or `increase` (`name`) of distribution series over their stored buckets: per
/// evaluation time, the merge of the buckets lying whole in the window (as for a counter:
/// exact when the times and the range are multiples of the resolution, no extrapolation),
/// divided by the seconds they cover for `rate`. Each series' histograms kept for the
/// answer are charged to `budget` (a value per bucket), since they outlive the read.
///
/// # Errors
/// `bad_data` for an input that is not a stored selection; the read's and the budget's.
pub(crate) fn over_windows(
    name: &str,
    input: RangeInput,
    source: &dyn Source,
    budget: &ReadBudget,
) -> Result<Vec<HistogramSeries>, QueryError> {
    let (stored, labels) = stored_windows(name, input)?;
    let kept = stored.keep(source, budget, &|buckets| stored.windows(name, buckets))?;
    Ok((labels.into_iter().zip(kept))
        .map(|(labels, values)| HistogramSeries {
            labels: labels.name_dropped(),
            values,
        })
        .filter(|s| s.values.iter().any(Option::is_some))
        .collect())
}

/// `sum` or `avg` (`op`) per group of `rate` or `increase` (`name`) of distribution
/// series, folded as each series is read, so that only the groups' histograms are held
/// (`sum by (job) (rate(x[5m]))` over a day of a thousand series keeps a histogram per
/// group and step, not per series and step). `group_of` gives a series' group from its
/// labels (the function's result's: its name dropped). As Prometheus, two series with values
/// whose results share labels are refused.
///
/// # Errors
/// As [`over_windows`] and [`unique_histograms`]'s.
pub(crate) fn aggregate_windows(
    op: &str,
    name: &str,
    input: RangeInput,
    group_of: &(dyn Fn(&Labels) -> Labels + Sync),
    source: &dyn Source,
    budget: &ReadBudget,
) -> Result<Vec<HistogramSeries>, QueryError> {
    let steps = input.times.len();
    let (stored, labels) = stored_windows(name, input)?;
    let labels: Vec<Labels> = labels.into_iter().map(Labels::name_dropped).collect();
    let mut groups: Vec<Labels> = Vec::new();
    let mut group_index: std::collections::HashMap<Labels, usize> = Default::default();
    let member_of: Vec<usize> = (labels.iter())
        .map(|l| {
            let key = group_of(l);
            *group_index.entry(key.clone()).or_insert_with(|| {
                groups.push(key);
                groups.len() - 1
            })
        })
        .collect();
    // Per group and step, the sum so far and the series present in it.
    let sums: Vec<Mutex<Vec<GroupSum>>> = groups
        .iter()
        .map(|_| Mutex::new(vec![None; steps]))
        .collect();
    let with_values: Vec<AtomicBool> = labels.iter().map(|_| AtomicBool::new(false)).collect();
    let visit = |i: usize, buckets: &[Option<BucketHistogram>]| {
        let values = stored.windows(name, buckets);
        if values.iter().all(Option::is_none) {
            return;
        }
        with_values[i].store(true, Ordering::Relaxed);
        let mut group = lock(&sums[member_of[i]]);
        for (sum, h) in group.iter_mut().zip(values) {
            if let Some(h) = h {
                add_into(sum, h);
            }
        }
    };
    stored.read(source, budget, &visit)?;
    let present: Vec<Labels> = (labels.into_iter().zip(&with_values))
        .filter(|(_, with)| with.load(Ordering::Relaxed))
        .map(|(labels, _)| labels)
        .collect();
    if let Some(labels) = first_shared_of(present.iter()) {
        return Err(same_labelset(labels));
    }
    Ok((groups.into_iter().zip(sums))
        .filter_map(|(labels, sums)| {
            finished(
                op,
                labels,
                sums.into_inner().unwrap_or_else(|e| e.into_inner()),
            )
        })
        .collect())
}

/// Adds `h` into one group's sum at one step, counting the series present.
fn add_into(sum: &mut GroupSum, h: FloatHistogram) {
    match sum {
        Some((sum, present)) => {
            sum.add(&h);
            *present += 1.0;
        }
        None => *sum = Some((h, 1.0)),
    }
}

/// A group's sums per step as `op` answers them (`sum`, or `avg`: divided by the series
/// present); `None` for a group with none.
fn finished(op: &str, labels: Labels, sums: Vec<GroupSum>) -> Option<HistogramSeries> {
    let values: Vec<_> = (sums.into_iter())
        .map(|sum| {
            let (mut h, present) = sum?;
            if op == "avg" {
                h.divide(present);
            }
            Some(h)
        })
        .collect();
    values
        .iter()
        .any(Option::is_some)
        .then_some(HistogramSeries { labels, values })
}

/// Merges the buckets `theirs` into `mine`, both by ascending index, the first brought down
/// `deltas.0` scales and the second `deltas.1` to `schema` (a reduction keeps the order, so
/// one pass merges them). Buckets whose upper bound is within `threshold` go to the zero
/// bucket instead: their counts are returned. Ascending, those are a prefix, so the bound is
/// computed only until the first bucket beyond it.
fn merge_buckets(
    mine: &mut Vec<(i32, f64)>,
    theirs: &[(i32, f64)],
    deltas: (u32, u32),
    schema: i8,
    threshold: f64,
) -> f64 {
    if theirs.is_empty() && deltas.0 == 0 && threshold <= 0.0 {
        return 0.0;
    }
    // The merge goes into a buffer kept per thread, which then trades places with `mine`:
    // a sum adds millions of histograms, and an allocation per add took about a fifth of a
    // 1,000-series query's time (allocator and its locks, `perf record`).
    thread_local! {
        static MERGED: std::cell::RefCell<Vec<(i32, f64)>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    MERGED.with_borrow_mut(|merged| {
        merged.clear();
        let mut zero = 0.0;
        let mut within = threshold > 0.0;
        let mut push = |index: i32, count: f64| {
            if within {
                if upper_bound(index, schema) <= threshold {
                    zero += count;
                    return;
                }
                within = false;
            }
            match merged.last_mut() {
                Some((last, c)) if *last == index => *c += count,
                _ => merged.push((index, count)),
            }
        };
        let reduce = |&(i, c): &(i32, f64), delta: u32| (reduced_index(i, delta), c);
        let mut left = mine.iter().map(|b| reduce(b, deltas.0)).peekable();
        let mut right = theirs.iter().map(|b| reduce(b, deltas.1)).peekable();
        loop {
            let next = match (left.peek(), right.peek()) {
                (Some(l), Some(r)) if l.0 <= r.0 => left.next(),
                (Some(_), Some(_)) => right.next(),
                (Some(_), None) => left.next(),
                (None, _) => right.next(),
            };
            let Some((index, count)) = next else { break };
            push(index, count);
        }
        std::mem::swap(mine, merged);
        zero
    })
}

/// One group's sum at one step, and how many series were present in it (for `avg`).
type GroupSum = Option<(FloatHistogram, f64)>;

/// A [`WindowData::Stored`] input's read and windows.
struct StoredWindows {
    read: StoredRead,
    times: Vec<i64>,
    range_ms: i64,
}

/// `input` as a stored selection to window, and its series' labels.
///
/// # Errors
/// `bad_data` for an input that is not a stored selection.
fn stored_windows(
    name: &str,
    input: RangeInput,
) -> Result<(StoredWindows, Vec<Labels>), QueryError> {
    let RangeInput {
        series,
        times,
        range_ms,
        data,
        ..
    } = input;
    let WindowData::Stored(read) = data else {
        return Err(QueryError::bad_data(format!(
            "{name}() of histograms reads a selector's stored buckets"
        )));
    };
    let labels = series.into_iter().map(|s| s.labels).collect();
    let stored = StoredWindows {
        read,
        times,
        range_ms,
    };
    Ok((stored, labels))
}

impl StoredWindows {
    /// What `keep` makes of each series' histograms, kept for the answer
    /// ([`kept_per_series`]).
    fn keep(
        &self,
        source: &dyn Source,
        budget: &ReadBudget,
        keep: &KeepHistograms<'_>,
    ) -> Result<Vec<Vec<Option<FloatHistogram>>>, QueryError> {
        let read = &self.read;
        let read = (&read.selected[..], read.tier, read.from, read.to);
        kept_per_series(source, read, budget, keep)
    }

    /// Reads every series, handing each to `visit`.
    fn read(
        &self,
        source: &dyn Source,
        budget: &ReadBudget,
        visit: &HistogramVisit<'_>,
    ) -> Result<(), QueryError> {
        let StoredRead {
            selected,
            tier,
            from,
            to,
            ..
        } = &self.read;
        source.visit_histograms(selected, *tier, *from, *to, budget, visit)?;
        Ok(())
    }

    /// One series' `rate` or `increase` (`name`) per evaluation time from its bucket
    /// histograms.
    fn windows(
        &self,
        name: &str,
        buckets: &[Option<BucketHistogram>],
    ) -> Vec<Option<FloatHistogram>> {
        let (first_ms, res_ms) = (self.read.first_ms, self.read.res_ms);
        let res_secs = res_ms as f64 / 1000.0;
        (self.times.iter())
            .map(|&t| {
                let (lo, hi) = bucket_range(first_ms, res_ms, buckets.len(), t, self.range_ms);
                let mut merged: Option<BucketHistogram> = None;
                for b in buckets[lo..hi].iter().flatten() {
                    match &mut merged {
                        Some(m) => {
                            m.histogram.merge(&b.histogram);
                            m.sum += b.sum;
                        }
                        None => merged = Some(b.clone()),
                    }
                }
                let factor = match name {
                    "rate" => 1.0 / ((hi - lo) as f64 * res_secs),
                    _ => 1.0,
                };
                merged.map(|m| FloatHistogram::scaled(&m, factor))
            })
            .collect()
    }
}

/// An instant query of a range selector of distributions (`x[5m]`): per series, the
/// histogram of each bucket in the window at the one evaluation time, stamped with the
/// bucket's start (as the floats of a range vector are), in label order.
///
/// # Errors
/// As [`over_windows`].
pub(crate) fn points_in_window(
    input: RangeInput,
    source: &dyn Source,
    budget: &ReadBudget,
) -> Result<HistogramPoints, QueryError> {
    let (stored, labels) = stored_windows("a range selector", input)?;
    let Some(&t) = stored.times.first() else {
        return Ok(Vec::new());
    };
    // Each bucket's histogram in the window, none outside it.
    let in_window = |buckets: &[Option<BucketHistogram>]| {
        let (lo, hi) = bucket_range(
            stored.read.first_ms,
            stored.read.res_ms,
            buckets.len(),
            t,
            stored.range_ms,
        );
        (buckets.iter().enumerate())
            .map(|(j, b)| {
                let b = b.as_ref().filter(|_| (lo..hi).contains(&j))?;
                Some(FloatHistogram::scaled(b, 1.0))
            })
            .collect()
    };
    let kept = stored.keep(source, budget, &in_window)?;
    let stamp = |j: usize| stored.read.first_ms + j as i64 * stored.read.res_ms;
    let mut series: HistogramPoints = (labels.into_iter().zip(kept))
        .map(|(labels, kept)| {
            let points = (kept.into_iter().enumerate())
                .filter_map(|(j, h)| Some((stamp(j), h?)))
                .collect();
            (labels, points)
        })
        .filter(|(_, points): &(Labels, Vec<_>)| !points.is_empty())
        .collect();
    series.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(series)
}

/// What an answer keeps of one series' bucket histograms: a histogram per evaluation time,
/// or per bucket.
pub(crate) type KeepHistograms<'a> =
    dyn Fn(&[Option<BucketHistogram>]) -> Vec<Option<FloatHistogram>> + Sync + 'a;

/// The histograms an answer keeps of each of `selected`, read in tier `tier` over
/// `[from, to)`: what `keep` makes of each series' bucket histograms, one list per series in
/// order. Each list is charged to `budget` as it is kept, a value per bucket (the zero
/// bucket's included), since it outlives the read.
///
/// # Errors
/// The read's; the budget's refusal.
pub(crate) fn kept_per_series(
    source: &dyn Source,
    (selected, tier, from, to): (&[Selected], usize, Timestamp, Timestamp),
    budget: &ReadBudget,
    keep: &KeepHistograms<'_>,
) -> Result<Vec<Vec<Option<FloatHistogram>>>, QueryError> {
    let kept: Vec<Mutex<Vec<Option<FloatHistogram>>>> =
        selected.iter().map(|_| Mutex::new(Vec::new())).collect();
    let refused = Mutex::new(None);
    let visit = |i: usize, buckets: &[Option<BucketHistogram>]| {
        let values = keep(buckets);
        let size: usize = values.iter().flatten().map(|h| h.populated() + 1).sum();
        let charged = budget.charge(size as u128, || {
            format!(
                "{} histograms kept per series, of {size} buckets",
                values.len()
            )
        });
        match charged {
            Ok(()) => *lock(&kept[i]) = values,
            Err(e) => *lock(&refused) = Some(e),
        }
    };
    source.visit_histograms(selected, tier, from, to, budget, &visit)?;
    if let Some(e) = lock(&refused).take() {
        return Err(e.into());
    }
    Ok((kept.into_iter())
        .map(|values| values.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect())
}

/// `mutex`'s value, whether or not a holder panicked.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The aggregation `op` (`sum` or `avg`) of histogram series per group (`groups`: each
/// group's labels and members), per evaluation time over the members present at it.
///
/// # Errors
/// `bad_data` for another operator: Prometheus 2.42 aggregates histograms with these two.
pub(crate) fn aggregate(
    op: &str,
    groups: Vec<(Labels, Vec<usize>)>,
    series: &[HistogramSeries],
    steps: usize,
) -> Result<Vec<HistogramSeries>, QueryError> {
    if !matches!(op, "sum" | "avg") {
        return Err(QueryError::bad_data(format!(
            "{op}: histograms are aggregated by sum and avg only (as in Prometheus 2.42)"
        )));
    }
    Ok((groups.into_iter())
        .filter_map(|(labels, members)| {
            let mut sums: Vec<GroupSum> = vec![None; steps];
            for &i in &members {
                for (sum, h) in sums.iter_mut().zip(&series[i].values) {
                    if let Some(h) = h {
                        add_into(sum, h.clone());
                    }
                }
            }
            finished(op, labels, sums)
        })
        .collect())
}

impl FloatHistogram {
    /// Populated buckets, the zero bucket not counted.
    fn populated(&self) -> usize {
        self.positive.len() + self.negative.len()
    }

    /// Every count and the sum divided by `n`.
    fn divide(&mut self, n: f64) {
        self.count /= n;
        self.sum /= n;
        self.zero_count /= n;
        for (_, c) in self.positive.iter_mut().chain(self.negative.iter_mut()) {
            *c /= n;
        }
    }
}

/// The `histogram_*` function `name` of one histogram, with its scalar arguments at that
/// time (`histogram_quantile`'s q, `histogram_fraction`'s bounds); `None` for a name that is
/// not one.
pub(crate) fn function(name: &str, h: &FloatHistogram, args: &[f64]) -> Option<f64> {
    Some(match name {
        "histogram_count" => h.count,
        "histogram_sum" => h.sum,
        "histogram_avg" => h.sum / h.count,
        "histogram_quantile" => h.quantile(args[0]),
        "histogram_fraction" => h.fraction(args[0], args[1]),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::Histogram;

    fn stored(values: &[f64], scale: i8) -> BucketHistogram {
        let mut histogram = Histogram::new(scale);
        for &v in values {
            histogram.record(v);
        }
        BucketHistogram {
            histogram,
            sum: values.iter().sum(),
        }
    }

    /// Prometheus' `FloatHistogram.Add` as the reference does it: every bucket of both
    /// brought to the coarser schema, sorted, those within the wider zero threshold moved to
    /// the zero bucket, equal indices summed.
    fn added_by_sorting(a: &FloatHistogram, b: &FloatHistogram) -> FloatHistogram {
        let schema = a.schema.min(b.schema);
        let threshold = a.zero_threshold.max(b.zero_threshold);
        let mut out = FloatHistogram {
            schema,
            zero_threshold: threshold,
            zero_count: a.zero_count + b.zero_count,
            count: a.count + b.count,
            sum: a.sum + b.sum,
            positive: Vec::new(),
            negative: Vec::new(),
        };
        for (to, from) in [
            (&mut out.positive, [&a.positive, &b.positive]),
            (&mut out.negative, [&a.negative, &b.negative]),
        ] {
            let mut all: Vec<(i32, f64)> = Vec::new();
            for (list, h) in from.into_iter().zip([a, b]) {
                let delta = (h.schema - schema) as u32;
                all.extend(list.iter().map(|&(i, c)| (reduced_index(i, delta), c)));
            }
            all.sort_by_key(|b| b.0);
            for (index, count) in all {
                if upper_bound(index, schema) <= threshold {
                    out.zero_count += count;
                } else if to.last().is_some_and(|(last, _)| *last == index) {
                    to.last_mut().unwrap().1 += count;
                } else {
                    to.push((index, count));
                }
            }
        }
        out
    }

    fn float_histogram() -> impl proptest::strategy::Strategy<Value = FloatHistogram> {
        use proptest::prelude::*;
        type Buckets = Vec<(i32, f64)>;
        let buckets = || {
            proptest::collection::btree_map(-40i32..40, 1u32..1000, 0..12).prop_map(
                |m| -> Buckets { m.into_iter().map(|(i, c)| (i, f64::from(c))).collect() },
            )
        };
        (
            -2i8..=8,
            prop_oneof![Just(0.0), Just(1e-3), Just(0.5)],
            buckets(),
            buckets(),
        )
            .prop_map(|(schema, zero_threshold, positive, negative)| {
                let count = positive.iter().chain(&negative).map(|b| b.1).sum::<f64>() + 3.0;
                FloatHistogram {
                    schema,
                    zero_threshold,
                    zero_count: 3.0,
                    count,
                    sum: 17.5,
                    positive,
                    negative,
                }
            })
    }

    proptest::proptest! {
        /// The one-pass merge gives what sorting every bucket gives, whatever the schemas and
        /// zero thresholds of the two.
        #[test]
        fn adding_merges_as_sorting_every_bucket_does(a in float_histogram(), b in float_histogram()) {
            let mut sum = a.clone();
            sum.add(&b);
            proptest::prop_assert_eq!(sum, added_by_sorting(&a, &b));
        }
    }

    #[test]
    fn a_quantile_interpolates_linearly_in_its_bucket_as_prometheus_does() {
        // Scale 0: buckets (0.5, 1], (1, 2], (2, 4], (4, 8].
        let h = FloatHistogram::scaled(&stored(&[1.0, 1.5, 3.0, 3.5, 6.0], 0), 1.0);
        assert_eq!(h.count, 5.0);
        // Rank 2.5 of 5: the bucket (2, 4] holds ranks 2 < r ≤ 4, so 2 + 2 × 0.5/2.
        assert_eq!(h.quantile(0.5), 2.5);
        // Rank 5 falls at the top of (4, 8].
        assert_eq!(h.quantile(1.0), 8.0);
        // Rank 0: the first bucket's lower bound.
        assert_eq!(h.quantile(0.0), 0.5);
        assert!(h.quantile(f64::NAN).is_nan());
        assert_eq!(h.quantile(-1.0), f64::NEG_INFINITY);
        assert_eq!(h.quantile(2.0), f64::INFINITY);
    }

    #[test]
    fn a_fraction_cuts_buckets_linearly() {
        let h = FloatHistogram::scaled(&stored(&[1.5, 3.0, 3.5, 6.0], 0), 1.0);
        // Up to 3: all of (1, 2] and half of (2, 4]: 1 + 1 of 4.
        assert_eq!(h.fraction(f64::NEG_INFINITY, 3.0), 0.5);
        assert_eq!(h.fraction(0.0, f64::INFINITY), 1.0);
        assert_eq!(h.fraction(4.0, 8.0), 0.25);
        assert_eq!(h.fraction(5.0, 5.0), 0.0);
    }

    #[test]
    fn adding_takes_the_coarser_schema_and_keeps_every_count() {
        let mut a = FloatHistogram::scaled(&stored(&[1.1, 1.3, 3.0], 2), 1.0);
        let b = FloatHistogram::scaled(&stored(&[1.2, 5.0], 0), 0.5);
        a.add(&b);
        assert_eq!(a.schema, 0);
        assert_eq!(a.count, 4.0);
        assert_eq!(a.positive, vec![(1, 2.5), (2, 1.0), (3, 0.5)]);
        assert_eq!(a.sum, 1.1 + 1.3 + 3.0 + (1.2 + 5.0) / 2.0);
    }

    #[test]
    fn the_json_lists_buckets_with_prometheus_boundary_rules() {
        let h = FloatHistogram::scaled(&stored(&[-1.5, 0.0, 3.0], 0), 1.0);
        let mut text = String::new();
        h.push_json(&mut text);
        assert_eq!(
            text,
            "{\"count\":\"3\",\"sum\":\"1.5\",\"buckets\":[[1,\"-2\",\"-1\",\"1\"],\
             [3,\"-0\",\"0\",\"1\"],[0,\"2\",\"4\",\"1\"]]}"
        );
    }
}
