//! Range-vector functions (`rate`, `increase`, `*_over_time`, ...) over a window per
//! evaluation time, from one of two inputs:
//! - **buckets** of a rollup tier: a window at `t` of range `d` reads the buckets that lie
//!   whole in `[t - d, t]` (exact when `t` and `d` are multiples of the resolution; a window
//!   narrower than a bucket reads the buckets it overlaps, and the tier choice warns);
//! - **points**: the raw tier's samples, or a subquery's values, in `[t - d, t]` as in
//!   Prometheus 2.
//!
//! What each function reads from buckets: `sum`, `count`, `min`, `max`, `avg` and
//! `present_over_time` merge count/total/min/max exactly; `increase`, `rate` and `delta`
//! of a counter are the sum of its stored increases (no extrapolation), `rate` divided by
//! the seconds the buckets cover. `last_over_time` is the latest sample in the window from
//! the buckets' latest samples ([`super::instant::latest_sample`]), exact wherever they say
//! it, for windows of any width and a counter's running total too. Functions that need the
//! samples themselves read the raw tier when it holds the window; without it, `irate` (the
//! last bucket's rate), `delta`, `deriv` and `predict_linear` of a gauge (bucket averages at
//! bucket middles) are approximations named in the answer's warnings, and `idelta`,
//! `changes`, `resets`, `quantile_over_time`, `stddev_over_time`, `stdvar_over_time` are
//! refused with `bad_data`.
//!
//! A counter's raw points are its increases: `increase` sums them, `irate` divides the last
//! by the time since the one before it, `changes` counts the non-zero ones; `resets` is
//! refused, since a reset stores the count since it and leaves no other trace.

use std::sync::atomic::{AtomicBool, Ordering};

use super::error::QueryError;
use super::instant;
use super::labels::Labels;
use super::source::{Selected, Source};
use super::value::Series;
use crate::bucket::Bucket;
use crate::read::budget::ReadBudget;
use crate::time::Timestamp;

/// A range vector: per series, its labels and kind, and its data, with the evaluation times
/// (after `@` and `offset`) and the range.
pub(crate) struct RangeInput {
    pub series: Vec<RangeSeries>,
    pub times: Vec<i64>,
    pub range_ms: i64,
    pub data: WindowData,
    /// The series are distributions, read as histograms
    /// ([`super::histograms::over_windows`]).
    pub histograms: bool,
}

/// One series of a range vector.
pub(crate) struct RangeSeries {
    pub labels: Labels,
    /// Stored as increases (its points, if raw, are increases).
    pub counter: bool,
}

/// Where the windows' values come from.
pub(crate) enum WindowData {
    /// A tier's buckets from `first_ms`, each `res_ms` wide, per series.
    Buckets {
        first_ms: i64,
        res_ms: i64,
        buckets: Vec<Vec<Bucket>>,
    },
    /// A tier's buckets not read yet: [`apply`] reads them series by series as it windows
    /// them ([`Source::map_buckets`]), [`RangeInput::read`] all at once.
    Stored(StoredRead),
    /// Points `(ms, value)` per series, in time order. `increases`: a counter series'
    /// points are its increases (the raw tier), not its values (a subquery).
    Points {
        increases: bool,
        points: Vec<Vec<(i64, f64)>>,
    },
}

/// A read of a tier's buckets of `selected` in `[from, to)`, from `first_ms`, each `res_ms`
/// wide: what a range selector over stored series reads, fixed before it is read.
pub(crate) struct StoredRead {
    pub(crate) selected: Vec<Selected>,
    pub(crate) tier: usize,
    pub(crate) from: Timestamp,
    pub(crate) to: Timestamp,
    pub(crate) first_ms: i64,
    pub(crate) res_ms: i64,
}

impl StoredRead {
    /// Every series' buckets, charged to `budget` ([`Source::buckets`]).
    ///
    /// # Errors
    /// The read's.
    pub(crate) fn buckets(
        &self,
        source: &dyn Source,
        budget: &ReadBudget,
    ) -> Result<Vec<Vec<Bucket>>, QueryError> {
        Ok(source.buckets(&self.selected, self.tier, self.from, self.to, budget)?)
    }
}

/// When a range function wants the raw tier rather than buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawNeed {
    /// Buckets answer it exactly.
    Never,
    /// Buckets answer counters exactly; gauges need raw points.
    ForGauges,
    /// It needs samples.
    Always,
    /// The latest sample of each window (`last_over_time`): the buckets' latest samples
    /// answer it wherever they keep them, read from the finest tier that reaches back;
    /// gauges read raw points where the raw tier holds the window.
    Latest,
    /// A range vector shown for itself (an instant query of `x[3m]`): the finest tier's
    /// buckets, whose one-sample buckets are the samples; never raw points.
    Shown,
}

/// What the function `name` needs from storage, `None` for a name that is not a range
/// function tierdb evaluates.
pub(crate) fn raw_need(name: &str) -> Option<RawNeed> {
    Some(match name {
        "sum_over_time" | "count_over_time" | "min_over_time" | "max_over_time"
        | "avg_over_time" | "present_over_time" | "absent_over_time" => RawNeed::Never,
        "rate" | "increase" | "delta" => RawNeed::ForGauges,
        "last_over_time" => RawNeed::Latest,
        "irate" | "idelta" | "changes" | "resets" | "quantile_over_time" | "stddev_over_time"
        | "stdvar_over_time" | "deriv" | "predict_linear" => RawNeed::Always,
        _ => return None,
    })
}

impl RangeInput {
    /// An input of `labels` with no data yet.
    pub(crate) fn new(
        labels: Vec<Labels>,
        counters: Vec<bool>,
        times: Vec<i64>,
        range_ms: i64,
    ) -> RangeInput {
        RangeInput {
            series: (labels.into_iter().zip(counters))
                .map(|(labels, counter)| RangeSeries { labels, counter })
                .collect(),
            times,
            range_ms,
            data: WindowData::Points {
                increases: false,
                points: Vec::new(),
            },
            histograms: false,
        }
    }

    /// This input with a [`WindowData::Stored`] read whole, for the callers that look at
    /// windows one by one ([`RangeInput::points_in_window`]).
    ///
    /// # Errors
    /// The read's.
    pub(crate) fn read(
        mut self,
        source: &dyn Source,
        budget: &ReadBudget,
    ) -> Result<RangeInput, QueryError> {
        if let WindowData::Stored(read) = &self.data {
            self.data = WindowData::Buckets {
                first_ms: read.first_ms,
                res_ms: read.res_ms,
                buckets: read.buckets(source, budget)?,
            };
        }
        Ok(self)
    }

    /// The samples of series `i` in the window `[t - range, t]` of time `k`, as an instant
    /// query of a range vector shows them, and whether they are exactly the samples: points
    /// as they are; from buckets, a bucket of one sample whose latest is known gives that
    /// sample at its time (a counter's raw value), and a bucket of several (or whose latest
    /// is not known) lying whole in the window gives a point at its start, its average or, for
    /// a counter, its increase: not exact, nor is a window whose edge bucket of several
    /// samples may hold some inside it.
    pub(crate) fn points_in_window(&self, i: usize, k: usize) -> (Vec<(i64, f64)>, bool) {
        let t = self.times[k];
        match &self.data {
            WindowData::Points { points, .. } => {
                (window_points(&points[i], t, self.range_ms).to_vec(), true)
            }
            // Callers read a stored input first (`RangeInput::read`).
            WindowData::Stored(_) => {
                debug_assert!(false, "points_in_window of buckets not read");
                (Vec::new(), true)
            }
            WindowData::Buckets {
                first_ms,
                res_ms,
                buckets,
            } => {
                let (first, res, buckets) = (*first_ms, *res_ms, &buckets[i]);
                let from = t - self.range_ms;
                let (lo, hi) = bucket_range(first, res, buckets.len(), t, self.range_ms);
                // Every bucket overlapping the window: [from, t] is closed.
                let overlapping = (from - first).div_euclid(res).max(0)
                    ..((t - first).div_euclid(res) + 1).min(buckets.len() as i64);
                let mut exact = true;
                let mut out = Vec::new();
                for j in overlapping.map(|j| j as usize) {
                    let b = &buckets[j];
                    if b.count == 0 {
                        continue;
                    }
                    if let Some(sample) = super::instant::one_sample(b) {
                        let at = sample.ts() * 1000;
                        if (from..=t).contains(&at) {
                            out.push((at, sample.value));
                        }
                        continue;
                    }
                    if (lo..hi).contains(&j) {
                        exact = false;
                        let v = if self.series[i].counter {
                            b.total
                        } else {
                            b.total / b.count as f64
                        };
                        out.push((first + j as i64 * res, v));
                    } else if b.last.is_none_or(|last| last.ts() * 1000 >= from) {
                        // An edge bucket that may hold samples inside the window.
                        exact = false;
                    }
                }
                (out, exact)
            }
        }
    }
}

/// The points of `points` in `[t - range, t]` (Prometheus 2's closed range, which the
/// version tierdb follows, 2.42, uses).
fn window_points(points: &[(i64, f64)], t: i64, range: i64) -> &[(i64, f64)] {
    let lo = points.partition_point(|p| p.0 < t - range);
    let hi = points.partition_point(|p| p.0 <= t);
    &points[lo..hi.max(lo)]
}

/// The buckets (indices `[lo, hi)`) of a window `[t - range, t]`: those lying whole in it,
/// or when none does, those overlapping it.
pub(crate) fn bucket_range(first: i64, res: i64, len: usize, t: i64, range: i64) -> (usize, usize) {
    let clamp = |k: i64| k.clamp(0, len as i64) as usize;
    let ceil_div = |a: i64, b: i64| -(-a).div_euclid(b);
    let mut lo = ceil_div(t - range - first, res);
    let mut hi = (t - first).div_euclid(res);
    if lo >= hi {
        lo = (t - range - first).div_euclid(res);
        hi = ceil_div(t - first, res);
    }
    (clamp(lo), clamp(hi))
}

/// Applies the range function `name` (with `param`, per evaluation time, for
/// `quantile_over_time` and `predict_linear`) to `input`, reading stored buckets through
/// `source` within `budget`. Approximations taken are pushed on `warnings`.
///
/// # Errors
/// `bad_data` when the function needs samples the input does not have; the read's errors.
pub(crate) fn apply(
    name: &str,
    input: RangeInput,
    param: Option<&[f64]>,
    (source, budget): (&dyn Source, &ReadBudget),
    warnings: &mut Vec<String>,
) -> Result<Vec<Series>, QueryError> {
    use rayon::prelude::*;
    let RangeInput {
        series,
        times,
        range_ms,
        data,
        ..
    } = input;
    // Buckets, stored or already read, answer by one rule; points answer everything.
    if !matches!(data, WindowData::Points { .. }) {
        for s in &series {
            if let Some(warning) = bucket_rule(name, s, range_ms)? {
                push_once(warnings, warning);
            }
        }
    }
    // Where `last_over_time`'s buckets did not say some window's latest sample, per series.
    let fell_back: Vec<LastFallback> = series.iter().map(|_| LastFallback::default()).collect();
    let values: Vec<Vec<Option<f64>>> = match &data {
        WindowData::Stored(read) => {
            let len = stored_len(read.from, read.to, read.res_ms);
            let windows = bucket_windows(read.first_ms, read.res_ms, len, &times, range_ms);
            let reduce = |i: usize, buckets: &[Bucket]| {
                let at = (read.first_ms, read.res_ms);
                over_buckets(
                    name,
                    series[i].counter,
                    buckets,
                    at,
                    (&times, &windows, range_ms),
                    param,
                    &fell_back[i],
                )
            };
            source.map_buckets(
                &read.selected,
                read.tier,
                read.from,
                read.to,
                budget,
                &reduce,
            )?
        }
        WindowData::Buckets {
            first_ms,
            res_ms,
            buckets,
        } => {
            let len = buckets.first().map_or(0, Vec::len);
            let windows = bucket_windows(*first_ms, *res_ms, len, &times, range_ms);
            (buckets.par_iter().zip(&series).zip(&fell_back))
                .map(|((buckets, s), fell_back)| {
                    let at = (*first_ms, *res_ms);
                    let times = (&times[..], &windows[..], range_ms);
                    over_buckets(name, s.counter, buckets, at, times, param, fell_back)
                })
                .collect()
        }
        WindowData::Points { increases, points } => (series.par_iter().zip(points))
            .map(|(s, points)| {
                let increases = *increases && s.counter;
                over_points(name, s, points, increases, (&times, range_ms), param)
            })
            .collect::<Result<_, QueryError>>()?,
    };
    for (s, fell_back) in series.iter().zip(&fell_back) {
        for warning in fell_back.warnings(s) {
            push_once(warnings, warning);
        }
    }
    let keep_name = name == "last_over_time";
    Ok((series.into_iter().zip(values))
        .map(|(s, values)| Series {
            labels: if keep_name {
                s.labels
            } else {
                s.labels.name_dropped()
            },
            values,
        })
        .collect())
}

/// The buckets a [`WindowData::Stored`] read of `[from, to)` gives each series, the first
/// starting at `from` aligned down to the resolution.
fn stored_len(from: Timestamp, to: Timestamp, res_ms: i64) -> usize {
    let res = res_ms / 1000;
    let first = from.div_euclid(res) * res;
    ((to - first).max(0) as u64).div_ceil(res as u64) as usize
}

/// Each evaluation time's window over `len` buckets: every series' buckets share one grid,
/// so the windows are computed once for all.
fn bucket_windows(
    first_ms: i64,
    res_ms: i64,
    len: usize,
    times: &[i64],
    range_ms: i64,
) -> Vec<(usize, usize)> {
    (times.iter())
        .map(|&t| bucket_range(first_ms, res_ms, len, t, range_ms))
        .collect()
}

/// The refusal of `name` over buckets, with what answers instead: an `*_over_time`
/// function for a gauge, `rate()` or `increase()` for a counter.
fn needs_raw(name: &str, series: &RangeSeries, why: &str) -> QueryError {
    let instead = if series.counter {
        "rate() or increase()"
    } else {
        "an *_over_time function"
    };
    QueryError::bad_data(format!(
        "{name}({}[...]): {why}; the rollup tiers keep only count, total, min and max per \
         bucket and the raw tier does not hold this range (configure a `kind = \"raw\"` tier \
         for exact samples, or use {instead})",
        series.labels.get(super::labels::NAME)
    ))
}

/// The refusal of `rate` or `increase` of a gauge over buckets. A gauge of counts per
/// interval (a StatsD counter an earlier build stored) lands here, and what the user wants
/// is its sum over the window.
fn gauge_rate(name: &str, series: &RangeSeries, range_ms: i64) -> QueryError {
    let metric = series.labels.get(super::labels::NAME);
    let range = promql_parser::util::duration::display_duration(&std::time::Duration::from_millis(
        range_ms.max(0) as u64,
    ));
    let selector = if metric.contains('.') {
        format!("{{__name__={metric:?}}}[{range}]")
    } else {
        format!("{metric}[{range}]")
    };
    let seconds = range_ms as f64 / 1000.0;
    QueryError::bad_data(format!(
        "{name}({metric}[...]): {metric} is stored as a gauge (its values as they came), and \
         the rollup tiers do not hold a gauge's samples for {name}() to treat as a running \
         total. If its values are counts per interval (as earlier builds stored StatsD \
         counters), \
         sum_over_time({selector}) is its increase and sum_over_time({selector}) / {seconds} \
         its per-second rate; a running total is stored as a counter when written with \
         \"kind\": \"counter\" or matched by a [counters] rule in tiers.toml"
    ))
}

/// Where `last_over_time`'s answer for one series is not the latest sample's at some time.
#[derive(Default)]
struct LastFallback {
    /// The latest sample before a bucket holding the time with several samples, the latest
    /// after the time.
    unsure: AtomicBool,
    /// The last bucket's average (a gauge) or no value (a counter): its latest sample not
    /// kept.
    average: AtomicBool,
}

impl LastFallback {
    /// The warnings of `last_over_time` over `series` for what it fell back to.
    fn warnings(&self, series: &RangeSeries) -> Vec<String> {
        let metric = series.labels.get(super::labels::NAME);
        let mut out = Vec::new();
        if self.unsure.load(Ordering::Relaxed) {
            out.push(format!(
                "approximate: last_over_time({metric}[...]) where the bucket holding the time \
                 has several samples, the latest after the time, is the latest sample before \
                 that bucket: exact unless another of its samples lies at or before the time \
                 (at a bucket's start, one taken at that very second)"
            ));
        }
        if self.average.load(Ordering::Relaxed) {
            let instead = if series.counter {
                "has no value (a counter's buckets hold its increases, not its value)"
            } else {
                "is the average of the last bucket with samples"
            };
            out.push(format!(
                "approximate: last_over_time({metric}[...]) {instead} where the buckets do not \
                 keep their latest sample (written before they kept it, imported, a delta \
                 counter's); elsewhere it is the latest sample, from buckets"
            ));
        }
        out
    }
}

fn push_once(warnings: &mut Vec<String>, warning: String) {
    if !warnings.contains(&warning) {
        warnings.push(warning);
    }
}

/// Whether `name` may read the buckets of `series`, and the warning it then gives.
///
/// # Errors
/// `bad_data` when buckets cannot answer it, or `name` is not a range function.
fn bucket_rule(
    name: &str,
    series: &RangeSeries,
    range_ms: i64,
) -> Result<Option<String>, QueryError> {
    let metric = series.labels.get(super::labels::NAME);
    let counter = series.counter;
    let approx = |what: &str| {
        Some(format!(
            "approximate: {name}({metric}[...]) {what}, from buckets (no raw samples for the \
             range)"
        ))
    };
    Ok(match name {
        "rate" | "increase" if !counter => return Err(gauge_rate(name, series, range_ms)),
        "predict_linear" if counter => {
            return Err(needs_raw(
                name,
                series,
                "a counter's running total is not stored",
            ))
        }
        "idelta" | "changes" | "resets" | "quantile_over_time" | "stddev_over_time"
        | "stdvar_over_time" => {
            return Err(needs_raw(name, series, "it needs each sample"));
        }
        "irate" if !counter => {
            return Err(needs_raw(name, series, "it needs each sample"));
        }
        "irate" => approx("is the rate over the last bucket with samples"),
        // Exact where the buckets keep their latest sample; `apply` warns where they do not.
        "last_over_time" => None,
        "delta" if counter => None,
        "delta" | "deriv" | "predict_linear" => approx("is fitted to bucket averages"),
        "rate" | "increase" | "present_over_time" => None,
        "sum_over_time" | "count_over_time" | "min_over_time" | "max_over_time"
        | "avg_over_time"
            if counter =>
        {
            Some(format!(
                "{name}({metric}[...]): {metric} is a counter stored as increases; the \
                 function reads its increases, not its running total"
            ))
        }
        "sum_over_time" | "count_over_time" | "min_over_time" | "max_over_time"
        | "avg_over_time" => None,
        other => {
            return Err(QueryError::bad_data(format!(
                "{other} is not a range function"
            )))
        }
    })
}

/// `name` over the buckets of one series (a counter's when `counter`), per evaluation time
/// of `times`, its window of `windows` (whole buckets) and the range; [`bucket_rule`] said
/// it may. `last_over_time` is the latest sample in `[t - range, t]` where the buckets say it
/// ([`instant::latest_sample`]); where the bucket holding the time has several samples, the
/// latest after it, the latest sample before that bucket; where the buckets do not keep
/// their latest sample, the last bucket's average (a gauge) or nothing (a counter, whose
/// increases are not its value). `fell_back` records the last two.
fn over_buckets(
    name: &str,
    counter: bool,
    buckets: &[Bucket],
    (first, res): (i64, i64),
    (times, windows, range_ms): (&[i64], &[(usize, usize)], i64),
    param: Option<&[f64]>,
    fell_back: &LastFallback,
) -> Vec<Option<f64>> {
    let res_secs = res as f64 / 1000.0;
    if name == "last_over_time" {
        let series = instant::Buckets {
            buckets,
            first_ms: first,
            res_ms: res,
        };
        return (times.iter().zip(windows))
            .map(|(&t, &(lo, hi))| {
                if let Some(found) = instant::latest_sample(&series, t, range_ms) {
                    if !found.exact {
                        fell_back.unsure.store(true, Ordering::Relaxed);
                    }
                    return found.last.map(|last| last.value);
                }
                fell_back.average.store(true, Ordering::Relaxed);
                let hi = hi.min(buckets.len());
                let last = buckets[lo.min(hi)..hi].iter().rev().find(|b| b.count > 0);
                last.filter(|_| !counter).map(|b| b.total / b.count as f64)
            })
            .collect();
    }
    // The functions of count and total alone (the rate of every dashboard): a window's sums,
    // without folding min and max.
    let sums_only = matches!(
        name,
        "sum_over_time" | "count_over_time" | "avg_over_time" | "increase" | "rate"
    );
    if sums_only || (name == "delta" && counter) {
        // The name is matched once, not per window.
        let of_sums: fn(f64, u64, f64) -> f64 = match name {
            "count_over_time" => |_, count, _| count as f64,
            "avg_over_time" => |total, count, _| total / count as f64,
            "rate" => |total, _, seconds| total / seconds,
            _ => |total, _, _| total,
        };
        return (windows.iter())
            .map(|&(lo, hi)| {
                let hi = hi.min(buckets.len());
                let lo = lo.min(hi);
                let (mut total, mut count) = (0.0, 0);
                for b in &buckets[lo..hi] {
                    total += b.total;
                    count += b.count;
                }
                (count > 0).then(|| of_sums(total, count, (hi - lo) as f64 * res_secs))
            })
            .collect();
    }
    let mut values = Vec::with_capacity(times.len());
    for (k, (&t, &(lo, hi))) in times.iter().zip(windows).enumerate() {
        let hi = hi.min(buckets.len());
        let lo = lo.min(hi);
        let window = &buckets[lo..hi];
        let mut merged = Bucket::EMPTY;
        for b in window {
            merged.merge(b);
        }
        if merged.count == 0 {
            values.push(None);
            continue;
        }
        let mid = |j: usize| (first + (lo + j) as i64 * res) as f64 / 1000.0 + res_secs / 2.0;
        let value = match name {
            "min_over_time" => Some(merged.min),
            "max_over_time" => Some(merged.max),
            "present_over_time" => Some(1.0),
            "irate" => {
                let last = window.iter().rev().find(|b| b.count > 0);
                Some(last.map_or(0.0, |b| b.total / res_secs))
            }
            "delta" | "deriv" | "predict_linear" => {
                let mut running = 0.0;
                let points: Vec<(f64, f64)> = (window.iter().enumerate())
                    .filter(|(_, b)| b.count > 0)
                    .map(|(j, b)| {
                        if counter {
                            running += b.total;
                            (mid(j) + res_secs / 2.0, running)
                        } else {
                            (mid(j), b.total / b.count as f64)
                        }
                    })
                    .collect();
                match name {
                    "delta" => Some(points[points.len() - 1].1 - points[0].1),
                    _ if points.len() < 2 => None,
                    "deriv" => Some(linear_regression(&points, t as f64 / 1000.0).0),
                    _ => {
                        let (slope, intercept) = linear_regression(&points, t as f64 / 1000.0);
                        let ahead = param.map_or(0.0, |p| p[k]);
                        Some(slope * ahead + intercept)
                    }
                }
            }
            // Refused by `bucket_rule` before any read.
            _ => None,
        };
        values.push(value);
    }
    values
}

/// `name` over the points of one series, per evaluation time, as Prometheus computes it
/// from samples, without extrapolation. `increases`: the points are a counter's increases.
fn over_points(
    name: &str,
    series: &RangeSeries,
    points: &[(i64, f64)],
    increases: bool,
    (times, range_ms): (&[i64], i64),
    param: Option<&[f64]>,
) -> Result<Vec<Option<f64>>, QueryError> {
    if increases && matches!(name, "resets" | "predict_linear" | "last_over_time") {
        return Err(QueryError::bad_data(format!(
            "{name}({}[...]): a counter is stored as increases; its running total and its \
             resets are not kept",
            series.labels.get(super::labels::NAME)
        )));
    }
    let range_secs = range_ms as f64 / 1000.0;
    let mut values = Vec::with_capacity(times.len());
    for (k, &t) in times.iter().enumerate() {
        let w = window_points(points, t, range_ms);
        let n = w.len();
        let value = if n == 0 {
            None
        } else {
            let vals = || w.iter().map(|p| p.1);
            match name {
                "sum_over_time" => Some(vals().sum()),
                "count_over_time" => Some(n as f64),
                "min_over_time" => vals().reduce(f64::min),
                "max_over_time" => vals().reduce(f64::max),
                "avg_over_time" => Some(vals().sum::<f64>() / n as f64),
                "present_over_time" => Some(1.0),
                "last_over_time" => Some(w[n - 1].1),
                "quantile_over_time" => {
                    let mut v: Vec<f64> = vals().collect();
                    Some(quantile(param.map_or(f64::NAN, |p| p[k]), &mut v))
                }
                "stddev_over_time" | "stdvar_over_time" => {
                    let mean = vals().sum::<f64>() / n as f64;
                    let var = vals().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
                    Some(if name == "stddev_over_time" {
                        var.sqrt()
                    } else {
                        var
                    })
                }
                "increase" | "rate" | "delta" if increases => {
                    let sum: f64 = vals().sum();
                    Some(if name == "rate" {
                        sum / range_secs
                    } else {
                        sum
                    })
                }
                "increase" | "rate" | "delta" if n < 2 => None,
                "delta" => Some(w[n - 1].1 - w[0].1),
                "increase" | "rate" => {
                    let mut total = w[n - 1].1 - w[0].1;
                    for pair in w.windows(2) {
                        if pair[1].1 < pair[0].1 {
                            total += pair[0].1;
                        }
                    }
                    Some(if name == "rate" {
                        total / range_secs
                    } else {
                        total
                    })
                }
                "irate" | "idelta" if n < 2 => None,
                "irate" | "idelta" => {
                    let (prev, last) = (w[n - 2], w[n - 1]);
                    // A counter's raw point is its increase; a drop in values is a reset
                    // for irate (the value since it), a change for idelta.
                    let reset = name == "irate" && last.1 < prev.1;
                    let change = if increases || reset {
                        last.1
                    } else {
                        last.1 - prev.1
                    };
                    Some(if name == "irate" {
                        change / ((last.0 - prev.0) as f64 / 1000.0)
                    } else {
                        change
                    })
                }
                "changes" => Some(if increases {
                    w[1..].iter().filter(|p| p.1 != 0.0).count() as f64
                } else {
                    w.windows(2).filter(|p| p[1].1 != p[0].1).count() as f64
                }),
                "resets" => Some(w.windows(2).filter(|p| p[1].1 < p[0].1).count() as f64),
                "deriv" | "predict_linear" if n < 2 => None,
                "deriv" | "predict_linear" => {
                    let mut running = 0.0;
                    let xy: Vec<(f64, f64)> = (w.iter())
                        .map(|&(ts, v)| {
                            running += v;
                            (ts as f64 / 1000.0, if increases { running } else { v })
                        })
                        .collect();
                    let (slope, intercept) = linear_regression(&xy, t as f64 / 1000.0);
                    Some(if name == "deriv" {
                        slope
                    } else {
                        slope * param.map_or(0.0, |p| p[k]) + intercept
                    })
                }
                other => {
                    return Err(QueryError::bad_data(format!(
                        "{other} is not a range function"
                    )))
                }
            }
        };
        values.push(value);
    }
    Ok(values)
}

/// Least-squares slope and the line's value at `at`, over `(x, y)` with x in seconds
/// (Prometheus' `linearRegression`, with x taken relative to `at` for precision).
fn linear_regression(points: &[(f64, f64)], at: f64) -> (f64, f64) {
    let n = points.len() as f64;
    let (mut sx, mut sy, mut sxy, mut sxx) = (0.0, 0.0, 0.0, 0.0);
    let constant_y = points.iter().all(|p| p.1 == points[0].1);
    for &(x, y) in points {
        let x = x - at;
        sx += x;
        sy += y;
        sxy += x * y;
        sxx += x * x;
    }
    if constant_y {
        return (0.0, points[0].1);
    }
    let cov = sxy - sx * sy / n;
    let var = sxx - sx * sx / n;
    let slope = cov / var;
    let intercept = sy / n - slope * sx / n;
    (slope, intercept)
}

/// Prometheus' `quantile`: the φ-quantile of `values` by linear interpolation between the
/// closest ranks; -Inf below 0, +Inf above 1, NaN for NaN or no values.
pub(crate) fn quantile(phi: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() || phi.is_nan() {
        return f64::NAN;
    }
    if phi < 0.0 {
        return f64::NEG_INFINITY;
    }
    if phi > 1.0 {
        return f64::INFINITY;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len() as f64;
    let rank = phi * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}
