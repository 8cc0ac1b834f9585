//! The evaluator: an expression over the whole grid of evaluation times at once (a range
//! query's steps, or one time), so a selector reads its buckets once for every step. Leaf
//! reads go through the [`Source`]; functions, aggregations and binary operators have files
//! of their own.
//!
//! An instant selector at time `t` answers the series' latest sample in `[t - 5m, t]`, read
//! from the finest tier's buckets, which keep their latest sample, wherever they say it
//! exactly ([`instant::latest_sample`]); elsewhere the latest bucket that ends at or before
//! `t` within the lookback (5 minutes, or one bucket when buckets are wider): its average
//! for a gauge (flagged `approximate` unless it is Prometheus' latest sample: see
//! `latest_of_selector`), its increase (flagged) for a counter.

use std::time::Instant;

use promql_parser::parser::{AtModifier, Expr, Offset, SubqueryExpr, VectorSelector};

use super::error::{ErrorKind, QueryError};
use super::histograms::{kept_per_series, FloatHistogram, HistogramSeries};
use super::labels::{check_graphite, selector_sets, Labels};
use super::source::{BucketHistogram, Selected, Source};
use super::tier;
use super::value::{unique_over_range, unique_per_step, Answer, ResultValue, Series, Value};
use super::windows::{RangeInput, RawNeed, StoredRead, WindowData};
use super::{instant, Query, QueryLimits, LOOKBACK_MS};
use crate::histogram::EXPLICIT_BUCKETS_TAG;
use crate::time::Timestamp;

/// What [`Evaluator::latest_of_selector`] answers of a series' latest sample: its value (an
/// instant selector) or its time (`timestamp()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Of {
    Value,
    Time,
}

/// Why an instant selector's answer for a series is not Prometheus' at some time.
#[derive(Clone, Copy, Debug, Default)]
struct Fallback {
    /// A counter's increase within a bucket, its latest sample not kept.
    increase: bool,
    /// A gauge's bucket average (or no time), its latest sample not kept.
    average: bool,
    /// The latest sample before a bucket holding the time with several samples.
    unsure: bool,
}

/// Most evaluation times one query or subquery may have (Prometheus' 11,000 points per
/// series).
pub(crate) const MAX_STEPS: usize = 11_000;

/// An evaluation in progress: the source, the limits, the query's own times for `@ start()`
/// and `@ end()`, and what it has selected and warned so far.
pub(crate) struct Evaluator<'a> {
    pub source: &'a dyn Source,
    limits: &'a QueryLimits,
    start_ms: i64,
    end_ms: i64,
    selected: usize,
    warnings: Vec<String>,
}

/// The evaluation times of an expression, unix milliseconds, and the step between them
/// (`None` for one instant of an instant query).
#[derive(Clone, Debug)]
pub(crate) struct Grid {
    pub times: Vec<i64>,
    pub step_ms: Option<i64>,
}

impl Grid {
    /// The times from `start` to `end` by `step`.
    ///
    /// # Errors
    /// `bad_data` for more than [`MAX_STEPS`] times.
    pub(crate) fn new(start: i64, end: i64, step: i64) -> Result<Grid, QueryError> {
        let count = (end - start) / step + 1;
        if count > MAX_STEPS as i64 {
            return Err(QueryError::bad_data(format!(
                "exceeded maximum resolution of {MAX_STEPS} points per timeseries: try \
                 decreasing the query resolution (?step=XX)"
            )));
        }
        Ok(Grid {
            times: (0..count.max(0)).map(|i| start + i * step).collect(),
            step_ms: Some(step),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.times.len()
    }
}

/// Evaluates `expr` for `query` (see [`super::evaluate`]).
pub(crate) fn evaluate(
    source: &dyn Source,
    expr: &Expr,
    query: &Query,
    limits: &QueryLimits,
) -> Result<Answer, QueryError> {
    let mut ev = Evaluator {
        source,
        limits,
        start_ms: query.start_ms,
        end_ms: query.end_ms,
        selected: 0,
        warnings: Vec::new(),
    };
    let result =
        match query.step_ms {
            None => ev.instant_answer(expr, query.start_ms)?,
            Some(step) => {
                if step <= 0 {
                    return Err(QueryError::bad_data(
                        "zero or negative query resolution step widths are not accepted; try a \
                     positive integer",
                    ));
                }
                if query.end_ms < query.start_ms {
                    return Err(QueryError::bad_data(
                        "end timestamp must not be before start time",
                    ));
                }
                let grid = Grid::new(query.start_ms, query.end_ms, step)?;
                match ev.eval(expr, &grid)? {
                    Value::String(_) => return Err(QueryError::bad_data(
                        "invalid expression type \"string\" for range query, must be Scalar or \
                         instant Vector",
                    )),
                    Value::Scalar(values) => ResultValue::Matrix(vec![(
                        Labels::default(),
                        grid.times.iter().copied().zip(values).collect(),
                    )]),
                    Value::Vector(series) => ResultValue::Matrix(to_matrix(
                        series.into_iter().map(|s| (s.labels, s.values)),
                        &grid,
                    )),
                    Value::Histograms(series) => ResultValue::HistogramMatrix(to_matrix(
                        series.into_iter().map(|s| (s.labels, s.values)),
                        &grid,
                    )),
                }
            }
        };
    Ok(Answer {
        result,
        warnings: ev.warnings,
    })
}

/// The points of each series (labels and a value per time of `grid`) that has any, sorted
/// by labels.
fn to_matrix<T>(
    series: impl Iterator<Item = (Labels, Vec<Option<T>>)>,
    grid: &Grid,
) -> Vec<(Labels, Vec<(i64, T)>)> {
    let mut out: Vec<_> = series
        .map(|(labels, values)| {
            let points: Vec<_> = (grid.times.iter().zip(values))
                .filter_map(|(&t, v)| v.map(|v| (t, v)))
                .collect();
            (labels, points)
        })
        .filter(|(_, points)| !points.is_empty())
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

impl<'a> Evaluator<'a> {
    /// Records `warning` once.
    pub(crate) fn warn(&mut self, warning: String) {
        if !self.warnings.contains(&warning) {
            self.warnings.push(warning);
        }
    }

    /// The request's read budget.
    pub(crate) fn budget(&self) -> &crate::read::budget::ReadBudget {
        &self.limits.budget
    }

    /// Fails with `timeout` once the deadline has passed.
    pub(crate) fn check_deadline(&self) -> Result<(), QueryError> {
        if Instant::now() >= self.limits.deadline {
            return Err(QueryError {
                kind: ErrorKind::Timeout,
                message: "query timed out in query execution; the server's limit is \
                          --query-timeout"
                    .into(),
            });
        }
        Ok(())
    }

    /// Warns that `expr`, a range selector answered for itself, was read from buckets that
    /// do not give each sample: a bucket of several samples (or whose latest is not known) is
    /// a point at its start, not Prometheus' samples at their times (issue 54 item 9).
    fn warn_of_range_from_buckets(&mut self, expr: &Expr) {
        if let Expr::MatrixSelector(m) = strip_parens(expr) {
            self.warn(format!(
                "approximate: {}[...] is read from buckets: a bucket of one sample gives it at \
                 its time, but a bucket of several (or whose latest sample is not kept) gives \
                 a point stamped at the bucket's start, holding what the bucket keeps (a \
                 gauge's average, a counter's increase, a distribution's histogram), not each \
                 sample at its time",
                m.vs
            ));
        }
    }

    /// The instant query's answer at `time`: a vector, scalar, string or (for a range
    /// vector) matrix.
    fn instant_answer(&mut self, expr: &Expr, time: i64) -> Result<ResultValue, QueryError> {
        let grid = Grid {
            times: vec![time],
            step_ms: None,
        };
        let range = match strip_parens(expr) {
            Expr::MatrixSelector(m) => Some(self.range_of_selector(
                &m.vs,
                m.range.as_millis() as i64,
                &grid,
                RawNeed::Shown,
                true,
            )?),
            Expr::Subquery(sq) => Some(self.range_of_subquery(sq, &grid)?),
            _ => None,
        };
        if let Some(input) = range {
            if input.histograms {
                let read = super::histograms::points_in_window(input, self.source, self.budget())?;
                if !read.is_empty() {
                    self.warn_of_range_from_buckets(expr);
                }
                return Ok(ResultValue::HistogramMatrix(read));
            }
            let input = input.read(self.source, &self.limits.budget)?;
            let mut exact = true;
            let mut out: Vec<_> = (0..input.series.len())
                .map(|i| {
                    let (points, all_samples) = input.points_in_window(i, 0);
                    exact &= all_samples;
                    (input.series[i].labels.clone(), points)
                })
                .filter(|(_, p)| !p.is_empty())
                .collect();
            out.sort_by(|a, b| a.0.cmp(&b.0));
            if !exact {
                self.warn_of_range_from_buckets(expr);
            }
            return Ok(ResultValue::Matrix(out));
        }
        Ok(match self.eval(expr, &grid)? {
            Value::Scalar(v) => ResultValue::Scalar(time, v[0]),
            Value::String(s) => ResultValue::String(time, s),
            // In the order of evaluation, as Prometheus answers an instant query (it sorts
            // only a range query's answer): selectors in label order, then each operator's
            // own order, so `topk`, `sort` and what wraps them (`topk(3, x) * 2`) keep
            // theirs.
            Value::Vector(series) => ResultValue::Vector(
                (series.into_iter())
                    .filter_map(|s| s.values[0].map(|v| (s.labels, time, v)))
                    .collect(),
            ),
            Value::Histograms(series) => {
                let mut out: Vec<_> = (series.into_iter())
                    .filter_map(|mut s| s.values[0].take().map(|h| (s.labels, time, h)))
                    .collect();
                out.sort_by(|a, b| a.0.cmp(&b.0));
                ResultValue::HistogramVector(out)
            }
        })
    }

    /// `expr`'s value over `grid`.
    pub(crate) fn eval(&mut self, expr: &Expr, grid: &Grid) -> Result<Value, QueryError> {
        self.check_deadline()?;
        match expr {
            Expr::NumberLiteral(n) => Ok(Value::Scalar(vec![n.val; grid.len()])),
            Expr::StringLiteral(s) => Ok(Value::String(s.val.clone())),
            Expr::Paren(p) => self.eval(&p.expr, grid),
            Expr::Unary(u) => match self.eval(&u.expr, grid)? {
                Value::Scalar(v) => Ok(Value::Scalar(v.into_iter().map(|x| -x).collect())),
                Value::Vector(series) => unique_over_range(
                    (series.into_iter())
                        .map(|s| Series {
                            labels: s.labels.name_dropped(),
                            values: s.values.into_iter().map(|v| v.map(|x| -x)).collect(),
                        })
                        .collect(),
                )
                .map(Value::Vector),
                Value::String(_) => Err(QueryError::bad_data("unary minus of a string")),
                Value::Histograms(_) => Err(QueryError::bad_data(
                    "unary minus of histograms is not evaluated by tierdb's PromQL",
                )),
            },
            Expr::VectorSelector(vs) => self.instant_selector(vs, grid),
            Expr::MatrixSelector(_) | Expr::Subquery(_) => Err(QueryError::bad_data(
                "a range vector is only allowed as a function's argument or as an instant \
                 query's whole expression",
            )),
            // Series that share labels: Prometheus checks a range function's result over
            // the whole evaluation (`functions::apply_range`), what it evaluates step by step
            // per step.
            Expr::Call(call) => match super::functions::call(self, call, grid)? {
                value if super::windows::raw_need(call.func.name).is_some() => Ok(value),
                value => per_step(value),
            },
            Expr::Aggregate(agg) => per_step(super::aggregation::aggregate(self, agg, grid)?),
            Expr::Binary(bin) => per_step(super::binary::binary(self, bin, grid)?),
            Expr::Extension(_) => Err(QueryError::bad_data(
                "extension expressions are not supported",
            )),
        }
    }

    /// The evaluation times of a selector or subquery with `at` and `offset`: each time of
    /// `grid` (or the `@` time for all), moved back by the offset.
    fn shifted_times(
        &self,
        grid: &Grid,
        at: &Option<AtModifier>,
        offset: &Option<Offset>,
    ) -> Vec<i64> {
        let offset_ms = match offset {
            Some(Offset::Pos(d)) => d.as_millis() as i64,
            Some(Offset::Neg(d)) => -(d.as_millis() as i64),
            None => 0,
        };
        let fixed = at.as_ref().map(|at| match at {
            AtModifier::Start => self.start_ms,
            AtModifier::End => self.end_ms,
            AtModifier::At(time) => system_time_ms(*time),
        });
        (grid.times.iter())
            .map(|&t| fixed.unwrap_or(t) - offset_ms)
            .collect()
    }

    /// Selects the series of `vs` (by their PromQL names too, [`super::names::select`]),
    /// counting them against the query's series cap.
    pub(crate) fn select(&mut self, vs: &VectorSelector) -> Result<Vec<Selected>, QueryError> {
        let sets = selector_sets(vs);
        check_graphite(&sets)?;
        let found = super::names::select(self.source, &sets, &self.limits.budget)?;
        self.selected += found.len();
        if self.selected > self.limits.max_series {
            return Err(QueryError::execution(format!(
                "the query selects {} series or more (the selector {vs} adds {}); a query may \
                 select at most {} (the server's --max-query-series)",
                self.selected,
                found.len(),
                self.limits.max_series
            )));
        }
        Ok(found)
    }

    /// An instant selector over `grid`: per time, the series' latest sample within the
    /// lookback where the buckets say it exactly ([`instant::latest_sample`]), else the
    /// latest bucket ending at or before it within the lookback. Distribution series answer
    /// their histograms when the selector picks nothing else, and are left out (with a
    /// warning) when it does.
    fn instant_selector(&mut self, vs: &VectorSelector, grid: &Grid) -> Result<Value, QueryError> {
        self.latest_of_selector(vs, grid, Of::Value)
    }

    /// `timestamp(vs)` over `grid`: per time, when the sample the instant selector answers
    /// was taken, by the instant selector's rule; where the buckets do not keep their latest
    /// sample, no value. Both flagged `approximate` where not exact.
    pub(crate) fn selector_timestamps(
        &mut self,
        vs: &VectorSelector,
        grid: &Grid,
    ) -> Result<Value, QueryError> {
        self.latest_of_selector(vs, grid, Of::Time)
    }

    /// The series of `vs` and, per time of `grid`, `of` their latest sample within the
    /// lookback (see [`Evaluator::instant_selector`]).
    fn latest_of_selector(
        &mut self,
        vs: &VectorSelector,
        grid: &Grid,
        of: Of,
    ) -> Result<Value, QueryError> {
        let times = self.shifted_times(grid, &vs.at, &vs.offset);
        let mut selected = self.select(vs)?;
        let histograms = self.keep_one_kind(&mut selected, vs);
        if selected.is_empty() || times.is_empty() {
            return Ok(Value::Vector(Vec::new()));
        }
        let (lo, hi) = min_max(&times);
        // Floats: the finest tier that reaches back, whatever the step: the latest sample is
        // exact where the bucket holding the time has one sample or none, which a coarser
        // bucket (five minutes or an hour of scrapes) seldom has. Histograms answer a
        // bucket's increase, so the bucket of the step's grain.
        let step = if vs.at.is_some() { None } else { grid.step_ms };
        let grain = histograms
            .then(|| tier::grain(times[0], step, None))
            .flatten();
        let tiers = self.source.tiers_of(&selected)?;
        let choice = tier::choose(
            &tiers,
            self.source.now(),
            grain,
            floor_secs(lo - LOOKBACK_MS),
        );
        let spec = &tiers.tiers[choice.tier];
        let res_ms = spec.resolution.secs() as i64 * 1000;
        let lookback = LOOKBACK_MS.max(res_ms);
        let from = floor_secs(lo - lookback);
        // Up to the end of the bucket holding the last time: a sample at or before it there
        // is the answer ([`instant::latest_sample`]), and where the buckets cannot say,
        // whether samples follow the bucket answered decides whether the average is exact.
        let to = ceil_secs(hi) + res_ms / 1000;
        let first_ms = from.div_euclid(res_ms / 1000) * res_ms;
        // The latest of `len` buckets ending at or before t, within the lookback, that
        // `holds` data: index k ends at first + (k + 1) * res.
        let latest = |t: i64, len: usize, holds: &dyn Fn(usize) -> bool| {
            let mut k = (t - first_ms).div_euclid(res_ms) - 1;
            while k >= 0 && first_ms + (k + 1) * res_ms > t - lookback {
                if (k as usize) < len && holds(k as usize) {
                    return Some(k as usize);
                }
                k -= 1;
            }
            None
        };
        if histograms {
            let names = kind_names(&selected, |s| s.distribution);
            self.warn(format!(
                "{names}: a distribution keeps the observations of each bucket, so its instant \
                 value is the histogram of the bucket read (the increase within it), not the \
                 running total; use rate() or increase() over a range"
            ));
            let latest_histograms = |buckets: &[Option<BucketHistogram>]| {
                (times.iter())
                    .map(|&t| {
                        let k = latest(t, buckets.len(), &|k| buckets[k].is_some())?;
                        (buckets[k].as_ref()).map(|b| FloatHistogram::scaled(b, 1.0))
                    })
                    .collect()
            };
            let read = (&selected[..], choice.tier, from, to);
            let kept = kept_per_series(self.source, read, self.budget(), &latest_histograms)?;
            let out = (selected.into_iter().zip(kept))
                .map(|(s, values)| HistogramSeries {
                    labels: s.labels,
                    values,
                })
                .collect();
            return Ok(Value::Histograms(out));
        }
        let buckets = self
            .source
            .buckets(&selected, choice.tier, from, to, &self.limits.budget)?;
        // Where the bucket holding the time has several samples, the latest after it, the
        // latest sample before that bucket (`unsure`). Where the buckets do not keep their
        // latest sample, a counter's value is the increase within the bucket read, a
        // gauge's the bucket's average (`average`), Prometheus' answer only when that bucket
        // holds one sample, wholly within the lookback, and none follows it up to the time;
        // a time is not answered there (`average` too).
        let mut flags = vec![Fallback::default(); selected.len()];
        let mut rows = Vec::with_capacity(selected.len());
        for ((s, buckets), flags) in selected.iter().zip(&buckets).zip(&mut flags) {
            self.check_deadline()?;
            let series = instant::Buckets {
                buckets,
                first_ms,
                res_ms,
            };
            let values = (times.iter())
                .map(|&t| {
                    if let Some(found) = instant::latest_sample(&series, t, LOOKBACK_MS) {
                        flags.unsure |= !found.exact;
                        return found.last.map(|last| match of {
                            Of::Value => last.value,
                            Of::Time => last.ts() as f64,
                        });
                    }
                    let k = latest(t, buckets.len(), &|k| buckets[k].count > 0)?;
                    let b = &buckets[k];
                    if of == Of::Time {
                        flags.average = true;
                        return None;
                    }
                    if s.counter {
                        flags.increase = true;
                        return Some(b.total);
                    }
                    let holding_t = (t - first_ms).div_euclid(res_ms) as usize;
                    flags.average |= b.count > 1
                        || first_ms + k as i64 * res_ms < t - LOOKBACK_MS
                        || buckets.get(holding_t).is_some_and(|b| b.count > 0);
                    Some(b.total / b.count as f64)
                })
                .collect::<Vec<_>>();
            rows.push(values);
        }
        let names_where = |flag: fn(&Fallback) -> bool| {
            let mut flags = flags.iter();
            let names = kind_names(&selected, |_| flags.next().is_some_and(flag));
            (!names.is_empty()).then_some(names)
        };
        if let Some(names) = names_where(|f| f.increase) {
            self.warn(format!(
                "{names}: a counter is stored as increases, and where its buckets do not keep \
                 their latest sample (written before they kept it, imported, or a delta \
                 counter's), its instant value is the increase within the bucket read, not the \
                 running total; use rate() or increase() over a range"
            ));
        }
        if let Some(names) = names_where(|f| f.average) {
            self.warn(match of {
                Of::Value => format!(
                    "approximate: {names}: where the buckets do not keep their latest sample \
                     (written before they kept it, imported), an instant value is the \
                     average of the latest bucket ending by the time: exact only where that \
                     bucket holds one sample and none follows it up to the time"
                ),
                Of::Time => format!(
                    "approximate: timestamp({names}) has no value where the buckets do not \
                     keep their latest sample (written before they kept it, imported)"
                ),
            });
        }
        if let Some(names) = names_where(|f| f.unsure) {
            let what = match of {
                Of::Value => format!("{names}: an instant value"),
                Of::Time => format!("timestamp({names})"),
            };
            self.warn(format!(
                "approximate: {what} where the bucket holding the time has several samples, \
                 the latest after the time, is the latest sample before that bucket: exact \
                 unless another of its samples lies at or before the time (at a bucket's \
                 start, one taken at that very second)"
            ));
        }
        let out = (selected.into_iter().zip(rows))
            .map(|(s, values)| Series {
                labels: s.labels,
                values,
            })
            .collect();
        Ok(Value::Vector(out))
    }

    /// True when `selected` are all distributions (read as histograms); when they are a
    /// mix, the distributions are left out with a warning, since one vector holds floats or
    /// histograms, not both.
    fn keep_one_kind(&mut self, selected: &mut Vec<Selected>, vs: &VectorSelector) -> bool {
        let distributions = selected.iter().filter(|s| s.distribution).count();
        if distributions == 0 {
            return false;
        }
        if distributions == selected.len() {
            self.warn_of_explicit_buckets(selected, vs);
            return true;
        }
        let names = kind_names(selected, |s| s.distribution);
        self.warn(format!(
            "{vs} picks distribution series ({names}) and others: the distributions are left \
             out, since one vector holds floats or histograms (select them on their own)"
        ));
        selected.retain(|s| !s.distribution);
        false
    }

    /// Warns when the distributions `selected` include series whose values were placed from
    /// explicit buckets (tagged [`EXPLICIT_BUCKETS_TAG`]): their schema does not bound their
    /// quantiles' error, the explicit buckets' widths do.
    fn warn_of_explicit_buckets(&mut self, selected: &[Selected], vs: &VectorSelector) {
        let (tag, value) = EXPLICIT_BUCKETS_TAG;
        let explicit = (selected.iter())
            .filter(|s| s.labels.get(tag) == value)
            .count();
        if explicit > 0 {
            self.warn(format!(
                "{vs} reads {explicit} OTLP explicit-bucket histograms ({tag}={value}): each \
                 bucket's count is placed at one value inside it, so their quantiles and \
                 fractions are within the explicit bucket's width, not within a bucket of \
                 their schema"
            ));
        }
    }

    /// A range selector `vs[range]` as a function's argument over `grid`: the buckets of the
    /// chosen tier (read when the function windows them, [`super::windows::apply`]), or the
    /// raw tier's points when `need` asks for them and it holds the range.
    pub(crate) fn range_of_selector(
        &mut self,
        vs: &VectorSelector,
        range_ms: i64,
        grid: &Grid,
        need: RawNeed,
        takes_histograms: bool,
    ) -> Result<RangeInput, QueryError> {
        let times = self.shifted_times(grid, &vs.at, &vs.offset);
        let mut selected = self.select(vs)?;
        // A function that takes histograms reads a distribution's; any other reads its
        // buckets' count, total, min and max, as a gauge's.
        let histograms = takes_histograms && self.keep_one_kind(&mut selected, vs);
        let (lo, hi) = min_max(&times);
        let from = floor_secs(lo - range_ms);
        let to = ceil_secs(hi) + 1;
        let series: Vec<_> = selected.iter().map(|s| s.labels.clone()).collect();
        let counters: Vec<bool> = selected.iter().map(|s| s.counter).collect();
        let mut input = RangeInput::new(series, counters, times.clone(), range_ms);
        input.histograms = histograms;
        if selected.is_empty() {
            return Ok(input);
        }
        let want_raw = !histograms
            && match need {
                RawNeed::Never | RawNeed::Shown => false,
                RawNeed::ForGauges | RawNeed::Latest => selected.iter().any(|s| !s.counter),
                RawNeed::Always => true,
            };
        if want_raw {
            if let Some(points) = (self.source).raw(&selected, from, to, &self.limits.budget)? {
                input.data = WindowData::Points {
                    increases: true,
                    points: (points.into_iter())
                        .map(|p| p.into_iter().map(|(ts, v)| (ts * 1000, v)).collect())
                        .collect(),
                };
                return Ok(input);
            }
        }
        let step = if vs.at.is_some() { None } else { grid.step_ms };
        // Latest samples and one-sample buckets are exact whatever the window's edges, and
        // more often the finer the buckets: the finest tier that reaches back. Histograms
        // are a bucket's increase, read at the grain.
        let grain = match need {
            RawNeed::Latest | RawNeed::Shown if !histograms => None,
            _ => tier::grain(times[0], step, Some(range_ms)),
        };
        let tiers = self.source.tiers_of(&selected)?;
        let choice = tier::choose(&tiers, self.source.now(), grain, from);
        let res = tiers.tiers[choice.tier].resolution.secs() as i64;
        drop(tiers);
        if let Some(warning) = choice.warning {
            self.warn(warning);
        }
        input.data = WindowData::Stored(StoredRead {
            selected,
            tier: choice.tier,
            from,
            to,
            first_ms: from.div_euclid(res) * res * 1000,
            res_ms: res * 1000,
        });
        Ok(input)
    }

    /// A subquery `expr[range:step]` over `grid`: the inner expression evaluated at every
    /// multiple of its step in the windows, as points.
    pub(crate) fn range_of_subquery(
        &mut self,
        sq: &SubqueryExpr,
        grid: &Grid,
    ) -> Result<RangeInput, QueryError> {
        let times = self.shifted_times(grid, &sq.at, &sq.offset);
        let range_ms = sq.range.as_millis() as i64;
        // Without a step, Prometheus' default evaluation interval: one minute.
        let step_ms = match sq.step {
            Some(step) if !step.is_zero() => step.as_millis() as i64,
            _ => 60_000,
        };
        let (lo, hi) = min_max(&times);
        // Prometheus' inner times: the multiples of the step in [lo - range, hi].
        let first = -(-(lo - range_ms)).div_euclid(step_ms) * step_ms;
        let inner = Grid::new(first, hi.div_euclid(step_ms) * step_ms, step_ms)?;
        let series = match self.eval(&sq.expr, &inner)? {
            Value::Vector(series) => series,
            Value::Scalar(values) => vec![Series {
                labels: Labels::default(),
                values: values.into_iter().map(Some).collect(),
            }],
            Value::String(_) => {
                return Err(QueryError::bad_data("a subquery of a string"));
            }
            Value::Histograms(_) => {
                return Err(QueryError::bad_data(
                    "a subquery of histograms is not evaluated by tierdb's PromQL",
                ));
            }
        };
        let labels = series.iter().map(|s| s.labels.clone()).collect();
        let counters = vec![false; series.len()];
        let mut input = RangeInput::new(labels, counters, times, range_ms);
        input.data = WindowData::Points {
            increases: false,
            points: (series.into_iter())
                .map(|s| {
                    (inner.times.iter().zip(s.values))
                        .filter_map(|(&t, v)| v.map(|v| (t, v)))
                        .collect()
                })
                .collect(),
        };
        Ok(input)
    }
}

/// A vector evaluated step by step, under [`unique_per_step`].
fn per_step(value: Value) -> Result<Value, QueryError> {
    match value {
        Value::Vector(series) => unique_per_step(series).map(Value::Vector),
        other => Ok(other),
    }
}

/// `expr` without enclosing parentheses.
pub(crate) fn strip_parens(expr: &Expr) -> &Expr {
    match expr {
        Expr::Paren(p) => strip_parens(&p.expr),
        other => other,
    }
}

/// The names of the series among `selected` that are `of_kind`, for a warning.
pub(crate) fn kind_names(
    selected: &[Selected],
    mut of_kind: impl FnMut(&Selected) -> bool,
) -> String {
    let mut names: Vec<&str> = (selected.iter())
        .filter(|s| of_kind(s))
        .map(|s| s.labels.get(super::labels::NAME))
        .collect();
    names.dedup();
    names.truncate(3);
    names.join(", ")
}

fn min_max(times: &[i64]) -> (i64, i64) {
    let lo = times.iter().copied().min().unwrap_or(0);
    let hi = times.iter().copied().max().unwrap_or(0);
    (lo, hi)
}

/// Unix seconds of `ms`, rounded down.
pub(crate) fn floor_secs(ms: i64) -> Timestamp {
    ms.div_euclid(1000)
}

/// Unix seconds of `ms`, rounded up.
pub(crate) fn ceil_secs(ms: i64) -> Timestamp {
    -(-ms).div_euclid(1000)
}

/// Unix milliseconds of `time` (before the epoch too).
pub(crate) fn system_time_ms(time: std::time::SystemTime) -> i64 {
    match time.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}
