//! The series that functions pass along: values at a fixed step, plus the stored buckets
//! while they still describe the values exactly, so that later steps can merge them exactly.

use super::aggfunc::AggFunc;
use super::timer_paths::TimerPoints;
use super::{Fetched, RenderedSeries};
use crate::bucket::Bucket;
use crate::error::{Error, Result};

/// One series during evaluation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Series {
    /// The name rendered as `target`.
    pub(crate) name: String,
    /// What graphite-web calls the series' path expression: the path a fetched series was
    /// selected by, or the name given by the last function that renamed it (aliases keep it).
    /// sumSeries and kin are named after the distinct path expressions of their inputs.
    pub(crate) path_expression: String,
    /// Timestamp of the first point.
    pub(crate) start: i64,
    /// Where the series ends, as graphite-web's `end`: just past the last point for a fetched
    /// series, `until` for constantLine. Points are rendered at stamps up to and including it,
    /// and the request's consolidation is sized by the span of every series' start to end.
    pub(crate) end: i64,
    /// Seconds between points; always positive.
    pub(crate) step: i64,
    /// One value per point, `None` where nothing is known.
    pub(crate) values: Vec<Option<f64>>,
    /// The buckets behind `values`, one per point, while each value is still the bucket's
    /// value (fetched, renamed, or consolidated by exact merges); `None` once a function
    /// changed the values, after which only the values count.
    pub(crate) buckets: Option<Vec<Bucket>>,
    /// For a StatsD timer path, its stat and the distribution point behind each value, while
    /// each value is still that stat of its point (kept and dropped with `buckets`, which a
    /// timer path does not have): consolidating then merges points, histograms and all, and
    /// takes the stat of the merge, so a percentile is never averaged.
    pub(crate) timer: Option<TimerPoints>,
    /// True while each value is an increase within its point (a counter as stored, or after
    /// functions that keep that meaning: renames, scale, series aggregates of counters,
    /// summarize by sum). Rates then come from the value itself, not from the difference of
    /// consecutive values, and consolidation adds increases instead of averaging them.
    pub(crate) counter: bool,
    /// What `consolidateBy` chose for joining points when the series is consolidated (to
    /// `maxDataPoints`, or to a common step): `None` for the default, which merges buckets
    /// exactly while there are any and averages the values (sums a counter's) otherwise.
    pub(crate) consolidate_by: Option<ConsolidateBy>,
    /// graphite-web's `xFilesFactor` of the series: the share of a window's points that must
    /// be known for consolidation (maxDataPoints, a common step), summarize and the moving
    /// windows to give it a value. `None` until evaluation sets it to the request's (then
    /// kept through the functions that copy the series, as graphite-web's `copy` keeps it).
    pub(crate) x_files_factor: Option<f64>,
}

/// A `consolidateBy` choice: graphite-web's `consolidationFunc`, which takes any name and
/// fails only when a series so named has to be consolidated.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ConsolidateBy {
    /// The name as given (`avg`, `sum`, or one that names nothing, such as Ceph's dashboards'
    /// `maxSeries`); the pickle format writes it.
    pub(crate) name: String,
    /// The function it names; `None` for a name that names none.
    pub(crate) func: Option<AggFunc>,
}

/// graphite-web's `xff(nonNull, total, xFilesFactor)`: whether `known` of `total` points are
/// enough for a value (none known is never enough).
pub(crate) fn enough_known(known: usize, total: f64, x_files_factor: f64) -> bool {
    known > 0 && total > 0.0 && known as f64 / total >= x_files_factor
}

/// The value of a stored bucket: the average for a gauge, the increase for a counter.
pub(crate) fn bucket_value(bucket: &Bucket, counter: bool) -> Option<f64> {
    match (bucket.is_empty(), counter) {
        (true, _) => None,
        (false, true) => Some(bucket.total),
        (false, false) => Some(bucket.total / bucket.count as f64),
    }
}

/// What `consolidateBy('last')` shows of a stored gauge bucket: its latest sample where the
/// bucket keeps it, else (a bucket written before buckets kept it, imported from a point
/// that is an aggregate, or read from a cluster owner of a build before the wire carried
/// it) its average, the value graphite-web shows of a whisper point holding one sample.
pub(crate) fn bucket_latest(bucket: &Bucket) -> Option<f64> {
    match bucket.last {
        Some(last) if !bucket.is_empty() => Some(last.value),
        _ => bucket_value(bucket, false),
    }
}

impl Series {
    /// A fetched series, named by its Graphite path, selected by `path_expression`. A step
    /// below one second (a storage bug) is taken as one rather than dividing by zero later.
    pub(crate) fn fetched(fetched: Fetched, path_expression: &str) -> Series {
        let counter = fetched.counter;
        let step = fetched.step.max(1);
        let (values, buckets) = match &fetched.timer {
            Some(timer) => (timer.values(step), None),
            None => {
                let values = (fetched.buckets.iter())
                    .map(|b| bucket_value(b, counter))
                    .collect();
                (values, Some(fetched.buckets))
            }
        };
        Series {
            name: super::graphite_path(fetched.key.view()),
            path_expression: path_expression.to_owned(),
            start: fetched.start,
            end: fetched.start + values.len() as i64 * step,
            step,
            values,
            buckets,
            timer: fetched.timer,
            counter,
            consolidate_by: None,
            x_files_factor: None,
        }
    }

    /// A series of `values` on the grid `(start, end, step)`, named `name` (its path
    /// expression too), with graphite-web's default consolidation.
    pub(crate) fn new(
        name: String,
        (start, end, step): (i64, i64, i64),
        values: Vec<Option<f64>>,
    ) -> Series {
        Series {
            path_expression: name.clone(),
            name,
            start,
            end,
            step: step.max(1),
            values,
            buckets: None,
            timer: None,
            counter: false,
            consolidate_by: None,
            x_files_factor: None,
        }
    }

    /// graphite-web's `series.copy(name=..., values=...)`: the same grid, a new name that is
    /// also the path expression, and values that are no longer the buckets' (nor increases).
    pub(crate) fn derived(self, name: String, values: Vec<Option<f64>>) -> Series {
        Series {
            path_expression: name.clone(),
            name,
            values,
            buckets: None,
            timer: None,
            counter: false,
            ..self
        }
    }

    /// The series renamed `name` (its path expression too) with each value mapped by `f` in
    /// place, as graphite-web's functions that rewrite `series[i]` do.
    pub(crate) fn mapped(
        mut self,
        name: String,
        mut f: impl FnMut(Option<f64>) -> Option<f64>,
    ) -> Series {
        self.values.iter_mut().for_each(|v| *v = f(*v));
        Series {
            path_expression: name.clone(),
            name,
            buckets: None,
            timer: None,
            counter: false,
            ..self
        }
    }

    /// The series' xFilesFactor: its own, else graphite-web's default of 0.
    pub(crate) fn xff(&self) -> f64 {
        self.x_files_factor.unwrap_or(0.0)
    }

    /// Timestamp of point `i`.
    pub(crate) fn at(&self, i: usize) -> i64 {
        self.start + i as i64 * self.step
    }

    /// The series as graphite-web's json renderer consolidates it for `max_points` points
    /// when the request's series span `time_range` seconds: unchanged when
    /// `time_range / step` points fit; else `k = ceil(points / max_points)` points into one,
    /// the start moved to the first multiple of `k * step` after it (graphite-web's nudge),
    /// the points before the one preceding the new start dropped, and the rest joined `k` at
    /// a time ([`Series::consolidate`]; a counter's increases averaged,
    /// [`Series::averaged`]). With one point allowed, every point into one. A stored gauge
    /// that `consolidateBy('last')` names shows its buckets' latest samples, consolidated or
    /// not ([`Series::latest_samples`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidQuery`] when the series must be consolidated and `consolidateBy` gave
    /// it a name that names no function, where graphite-web fails too.
    pub(crate) fn fit(self, max_points: u32, time_range: i64) -> Result<Series> {
        let series = self.latest_samples();
        let len = series.values.len();
        if max_points == 1 {
            return if series.counter && len > 1 {
                series.check_consolidation(len)?;
                Ok(series.averaged(len))
            } else {
                series.consolidate(len)
            };
        }
        let points = time_range as f64 / series.step as f64;
        if f64::from(max_points) >= points {
            return Ok(series);
        }
        let k = (points / f64::from(max_points)).ceil() as i64;
        let wide = k.saturating_mul(series.step);
        let nudge = wide + series.start.rem_euclid(series.step) - series.start.rem_euclid(wide);
        let lose = ((nudge / series.step - 1).max(0) as usize).min(len);
        let start = series.start + nudge;
        let mut values = series.values;
        values.drain(..lose);
        let buckets = series.buckets.map(|mut buckets| {
            buckets.drain(..lose);
            buckets
        });
        let timer = series.timer.map(|mut timer| {
            timer.points.drain(..lose);
            timer
        });
        let kept = Series {
            values,
            buckets,
            timer,
            ..series
        };
        let consolidated = if kept.counter {
            kept.check_consolidation(k as usize)?;
            kept.averaged(k as usize)
        } else {
            kept.consolidate(k as usize)?
        };
        Ok(Series {
            start,
            ..consolidated
        })
    }

    /// The series as `consolidateBy('last')` shows it: a stored gauge whose values are still
    /// its buckets' averages takes each bucket's latest sample instead ([`bucket_latest`]),
    /// and its buckets are dropped (the values are no longer their averages). The last of a
    /// window of such values is then the latest sample of the window's latest bucket, what
    /// graphite-web shows over whisper points that each hold the last sample of their
    /// interval (a finest archive's, or any archive's of a file whose aggregationMethod is
    /// `last`), and a point of a tier coarser than the samples is the latest sample of its
    /// bucket rather than their average. Any other series is returned as it is: a counter's
    /// points are increases (its latest sample is the raw running total, not a point's
    /// value), and a timer path or a series a function changed has no buckets.
    fn latest_samples(self) -> Series {
        let last = (self.consolidate_by.as_ref()).is_some_and(|by| by.func == Some(AggFunc::Last));
        match &self.buckets {
            Some(buckets) if last && !self.counter => Series {
                values: buckets.iter().map(bucket_latest).collect(),
                buckets: None,
                ..self
            },
            _ => self,
        }
    }

    /// Refuses joining `k > 1` points of a series whose `consolidateBy` names no function,
    /// with graphite-web's list of the names it does consolidate by.
    fn check_consolidation(&self, k: usize) -> Result<()> {
        match &self.consolidate_by {
            Some(ConsolidateBy { name, func: None }) if k > 1 => Err(Error::InvalidQuery(format!(
                "{}: cannot join {k} points into one by {name:?}, which is not a consolidation \
                 function (average, avg, avg_zero, sum, max, min, first, last); graphite-web \
                 fails here too",
                self.name
            ))),
            _ => Ok(()),
        }
    }

    /// Joins each `k` consecutive points into the average of their known values, as
    /// graphite-web's json renderer consolidates by default. [`Series::fit`] does this for a
    /// counter, whose points are increases: a point then stays the increase per original
    /// step at every zoom, and the last point, whose window the range cuts short (or whose
    /// bucket is still filling), does not read as a drop, as a sum of fewer increases would.
    fn averaged(self, k: usize) -> Series {
        let xff = self.xff();
        let values = (self.values.chunks(k))
            .map(|chunk| {
                let known: Vec<f64> = chunk.iter().flatten().copied().collect();
                enough_known(known.len(), k as f64, xff)
                    .then(|| known.iter().sum::<f64>() / known.len() as f64)
            })
            .collect();
        Series {
            step: self.step * k as i64,
            values,
            buckets: None,
            timer: None,
            counter: false,
            ..self
        }
    }

    /// The series consolidated to `step`, a multiple of its own ([`Series::consolidate`]).
    ///
    /// # Errors
    ///
    /// As [`Series::consolidate`].
    pub(crate) fn consolidate_to(self, step: i64) -> Result<Series> {
        let k = (step / self.step).max(1) as usize;
        self.consolidate(k)
    }

    /// Joins each `k` consecutive points into one stamped with the first one's time (as
    /// graphite-web joins series of different steps for sumSeries and kin): by the function
    /// `consolidateBy` named (`last` of a stored gauge's latest samples,
    /// [`Series::latest_samples`]), else buckets merged exactly while present, otherwise the
    /// sum of the known values for a counter (the increase within the wider point) and their
    /// average for a gauge.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidQuery`] when `consolidateBy` named no function
    /// ([`Series::check_consolidation`]).
    pub(crate) fn consolidate(self, k: usize) -> Result<Series> {
        if k <= 1 {
            return Ok(self);
        }
        self.check_consolidation(k)?;
        let named = self.consolidate_by.as_ref().and_then(|by| by.func);
        // A timer path merges its points where an average was asked for (the default):
        // that is what averaging a percentile means to say. max, min, sum, first and last
        // of its values are answered as named (the worst minute's p90 is a question too).
        let averaged = named.is_none_or(|f| matches!(f, AggFunc::Average | AggFunc::AvgZero));
        if self.timer.is_some() && averaged {
            return Ok(self.merged(k));
        }
        if let Some(func) = named {
            // graphite-web's consolidating generator: avg_zero counts nulls as zeros, every
            // other function sees the known values; nothing known is null.
            let series = self.latest_samples();
            let xff = series.xff();
            let values = (series.values.chunks(k))
                .map(|chunk| {
                    let known = chunk.iter().flatten().count();
                    enough_known(known, k as f64, xff)
                        .then(|| func.reduce(chunk))
                        .flatten()
                })
                .collect();
            return Ok(Series {
                step: series.step * k as i64,
                values,
                buckets: None,
                timer: None,
                ..series
            });
        }
        let counter = self.counter;
        let values = self.values.chunks(k).map(|chunk| {
            let known: Vec<f64> = chunk.iter().flatten().copied().collect();
            let sum: f64 = known.iter().sum();
            match (known.len(), counter) {
                (0, _) => None,
                (_, true) => Some(sum),
                (n, false) => Some(sum / n as f64),
            }
        });
        let buckets = self.buckets.as_ref().map(|buckets| {
            buckets
                .chunks(k)
                .map(|chunk| {
                    let mut merged = Bucket::EMPTY;
                    chunk.iter().for_each(|b| merged.merge(b));
                    merged
                })
                .collect::<Vec<_>>()
        });
        let values: Vec<Option<f64>> = match &buckets {
            Some(buckets) => buckets.iter().map(|b| bucket_value(b, counter)).collect(),
            None => values.collect(),
        };
        let (values, buckets) = match self.nulled_by_xff(&values, k) {
            // Values the xFilesFactor nulls are no longer their buckets'.
            Some(values) => (values, None),
            None => (values, buckets),
        };
        Ok(Series {
            step: self.step * k as i64,
            values,
            buckets,
            ..self
        })
    }

    /// A timer path's points joined `k` at a time: each the merge of its points (counts and
    /// histograms add), its value the stat of the merge, so a percentile of a wider point is
    /// the percentile of all its samples, never an average of percentiles. The xFilesFactor
    /// nulls a window with too few known points, as [`Series::consolidate`] does.
    fn merged(self, k: usize) -> Series {
        let Some(timer) = &self.timer else {
            return self;
        };
        let step = self.step * k as i64;
        let timer = timer.merged(k);
        let values = timer.values(step);
        let (values, timer) = match self.nulled_by_xff(&values, k) {
            Some(values) => (values, None),
            None => (values, Some(timer)),
        };
        Series {
            step,
            values,
            timer,
            ..self
        }
    }

    /// `joined`, one value per `k` of this series' points, with the values of windows too
    /// few of whose points are known for the xFilesFactor made null; `None` at the default
    /// factor, 0, where the joined values stand as they are.
    fn nulled_by_xff(&self, joined: &[Option<f64>], k: usize) -> Option<Vec<Option<f64>>> {
        let xff = self.xff();
        (xff > 0.0).then(|| {
            (joined.iter().zip(self.values.chunks(k)))
                .map(|(v, chunk)| {
                    let known = chunk.iter().flatten().count();
                    v.filter(|_| enough_known(known, k as f64, xff))
                })
                .collect()
        })
    }

    /// The series as rendered: `[value, timestamp]` pairs up to the stamp of
    /// [`Series::end`] (graphite-web zips the values with the stamps from start to end,
    /// inclusive), NaN as null (graphite-web's json writes NaN so); an infinity stays, each
    /// format writes it as graphite-web does.
    pub(crate) fn rendered(&self) -> RenderedSeries {
        RenderedSeries {
            target: self.name.clone(),
            datapoints: (self.values.iter().enumerate())
                .map(|(i, v)| (v.filter(|v| !v.is_nan()), self.at(i)))
                .take_while(|&(_, at)| at <= self.end)
                .collect(),
            start: self.start,
            end: self.end,
            step: self.step,
            path_expression: self.path_expression.clone(),
            consolidation: (self.consolidate_by.as_ref())
                .map_or_else(|| "average".to_owned(), |by| by.name.clone()),
            x_files_factor: self.xff(),
        }
    }
}
