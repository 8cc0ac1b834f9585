//! Evaluation of a parsed target: fetches for paths and the supported Graphite functions,
//! with graphite-web's names and semantics except where stored buckets allow an exact answer.
//! Names follow graphite-web 1.1's functions.py: functions that rename a series use its
//! name, sumSeries and kin the distinct path expressions of their inputs.

use regex::Regex;

use super::expr::Expr;
use super::path::PathPattern;
use super::python::{format_g, round_6, str_float};
use super::series::Series;
use super::Source;
use crate::bucket::Bucket;
use crate::read::query::MAX_QUERY_POINTS;
use crate::time::parse_interval;
use crate::{Aggregation, Error, ReadBudget, Result};

/// What evaluation reads from: the source and the request's range.
pub(crate) struct Context<'a> {
    pub(crate) source: &'a dyn Source,
    pub(crate) from: i64,
    pub(crate) until: i64,
    /// The request's read budget (its paths are charged before evaluation; summarize
    /// windows as they are made).
    pub(crate) budget: &'a ReadBudget,
}

/// How a set of values becomes one (series aggregates and summarize windows).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Agg {
    Sum,
    Avg,
    Max,
    Min,
    Last,
}

impl Agg {
    fn parse(name: &str) -> Option<Agg> {
        Some(match name {
            "sum" | "total" => Agg::Sum,
            "avg" | "average" => Agg::Avg,
            "max" => Agg::Max,
            "min" => Agg::Min,
            "last" => Agg::Last,
            _ => return None,
        })
    }

    /// `None` for no values.
    fn reduce(self, values: &[f64]) -> Option<f64> {
        let (&last, _) = values.split_last()?;
        let fold = |f: fn(f64, f64) -> f64| values.iter().copied().reduce(f);
        match self {
            Agg::Sum => Some(values.iter().sum()),
            Agg::Avg => Some(values.iter().sum::<f64>() / values.len() as f64),
            Agg::Max => fold(f64::max),
            Agg::Min => fold(f64::min),
            Agg::Last => Some(last),
        }
    }
}

/// Evaluates one expression into its series.
///
/// # Errors
///
/// [`Error::InvalidQuery`] for an unknown function, a wrong argument count or type, a bad
/// regex, interval or path; any error of the source.
pub(crate) fn eval(expr: &Expr, cx: &Context<'_>) -> Result<Vec<Series>> {
    match expr {
        Expr::Path(path) => {
            let pattern = PathPattern::parse(path)?;
            let fetched = cx.source.fetch(&pattern, cx.from, cx.until)?;
            let series = |f| Series::fetched(f, path);
            Ok(fetched.into_iter().map(series).collect())
        }
        Expr::Call { name, args, .. } => call(name, &Args { name, args }, cx),
        other => Err(Error::InvalidQuery(format!(
            "expected a path or a function call, found {}",
            other.text()
        ))),
    }
}

fn call(name: &str, a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    Ok(match name {
        "alias" => {
            a.count(2, 2)?;
            let alias = a.string(1)?;
            let rename = |s: Series| Series {
                name: alias.to_owned(),
                ..s
            };
            a.series(0, cx)?.into_iter().map(rename).collect()
        }
        "aliasSub" => {
            a.count(3, 3)?;
            let regex = Regex::new(a.string(1)?)
                .map_err(|e| Error::InvalidQuery(format!("aliasSub: bad regex: {e}")))?;
            let replacement = replacement(a.string(2)?);
            let mut list = a.series(0, cx)?;
            for s in &mut list {
                s.name = regex
                    .replace_all(&s.name, replacement.as_str())
                    .into_owned();
            }
            list
        }
        "sumSeries" | "sum" => combine("sumSeries", Agg::Sum, a, cx)?,
        "averageSeries" | "avg" => combine("averageSeries", Agg::Avg, a, cx)?,
        "maxSeries" => combine("maxSeries", Agg::Max, a, cx)?,
        "minSeries" => combine("minSeries", Agg::Min, a, cx)?,
        "scale" => {
            a.count(2, 2)?;
            let factor = a.number(1)?;
            let scale = |s: Series| {
                let name = format!("scale({},{})", s.name, format_g(factor));
                Series {
                    path_expression: name.clone(),
                    name,
                    values: s.values.iter().map(|v| v.map(|v| v * factor)).collect(),
                    buckets: None,
                    ..s
                }
            };
            a.series(0, cx)?.into_iter().map(scale).collect()
        }
        "perSecond" | "nonNegativeDerivative" => {
            a.count(1, 2)?;
            let max_value = if a.args.len() > 1 {
                Some(a.number(1)?)
            } else {
                None
            };
            let per_second = name == "perSecond";
            let derive = |s| derivative(s, name, per_second, max_value);
            a.series(0, cx)?.into_iter().map(derive).collect()
        }
        "summarize" => {
            a.count(2, 4)?;
            let interval_text = a.string(1)?;
            let interval = parse_interval(interval_text).map_err(Error::InvalidQuery)?;
            let func = if a.args.len() > 2 {
                a.string(2)?
            } else {
                "sum"
            };
            let agg = Agg::parse(func).ok_or_else(|| {
                Error::InvalidQuery(format!("summarize: unknown function {func:?}"))
            })?;
            let align = a.args.len() > 3 && a.boolean(3)?;
            let tail = if align { ", true" } else { "" };
            let list = a.series(0, cx)?;
            let counts: Vec<u64> = (list.iter())
                .map(|s| windows(s, interval, align).1)
                .collect();
            if let Some(&count) = counts
                .iter()
                .max()
                .filter(|&&count| count > MAX_QUERY_POINTS)
            {
                return Err(a.invalid(&format!(
                    "{count} windows of {interval}s in one series; at most {MAX_QUERY_POINTS} \
                     (use a longer interval or a shorter range)"
                )));
            }
            let total = counts.iter().map(|&c| u128::from(c)).sum();
            cx.budget.charge(total, || {
                format!(
                    "summarize's windows of {interval}s over {} series",
                    list.len()
                )
            })?;
            let window = |s: Series| {
                let name = format!(
                    "summarize({}, \"{interval_text}\", \"{func}\"{tail})",
                    s.name
                );
                Series {
                    path_expression: name.clone(),
                    name,
                    ..summarize(s, interval, agg, align)
                }
            };
            list.into_iter().map(window).collect()
        }
        "constantLine" => {
            a.count(1, 1)?;
            let value = a.number(0)?;
            // graphite-web takes the value as a float and names the line `str(value)`.
            vec![Series {
                name: str_float(value),
                path_expression: format!("constantLine({})", str_float(value)),
                start: cx.from,
                end: cx.until,
                step: (cx.until.saturating_sub(cx.from) / 2).max(1),
                values: vec![Some(value); 3],
                buckets: None,
                counter: false,
            }]
        }
        _ => return Err(Error::InvalidQuery(format!("unknown function {name:?}"))),
    })
}

/// A function's arguments, with typed access and errors that name the function.
struct Args<'a> {
    name: &'a str,
    args: &'a [Expr],
}

impl Args<'_> {
    fn count(&self, min: usize, max: usize) -> Result<()> {
        let n = self.args.len();
        if (min..=max).contains(&n) {
            return Ok(());
        }
        let expected = if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        Err(self.invalid(&format!("takes {expected} arguments, got {n}")))
    }

    fn invalid(&self, what: &str) -> Error {
        Error::InvalidQuery(format!("{}: {what}", self.name))
    }

    fn wrong(&self, i: usize, what: &str) -> Error {
        self.invalid(&format!("argument {} must be {what}", i + 1))
    }

    fn series(&self, i: usize, cx: &Context<'_>) -> Result<Vec<Series>> {
        match &self.args[i] {
            e @ (Expr::Path(_) | Expr::Call { .. }) => eval(e, cx),
            _ => Err(self.wrong(i, "a series list (a path or a function call)")),
        }
    }

    fn number(&self, i: usize) -> Result<f64> {
        match self.args[i] {
            Expr::Number(n) => Ok(n),
            _ => Err(self.wrong(i, "a number")),
        }
    }

    fn string(&self, i: usize) -> Result<&str> {
        match &self.args[i] {
            Expr::Str(s) => Ok(s),
            _ => Err(self.wrong(i, "a quoted string")),
        }
    }

    fn boolean(&self, i: usize) -> Result<bool> {
        match self.args[i] {
            Expr::Bool(b) => Ok(b),
            _ => Err(self.wrong(i, "true or false")),
        }
    }
}

/// A Python-style replacement (`\1` backreferences) in the regex crate's syntax (`${1}`, `$$`
/// for a literal `$`, `\\` for a backslash).
fn replacement(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' => out.push_str("$$"),
            '\\' if chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push_str("${");
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    out.push(d);
                }
                out.push('}');
            }
            '\\' if chars.peek() == Some(&'\\') => {
                chars.next();
                out.push('\\');
            }
            c => out.push(c),
        }
    }
    out
}

/// sumSeries and its kin over every series of every argument, point by point, nulls skipped,
/// named after the distinct path expressions of the series (graphite-web's aggregate).
/// Series of different steps are first consolidated to the least common multiple. The result
/// is a counter when every input is one: sums and averages of increases are increases of the
/// sum and average, and the max or min of increases is that of the busiest or idlest series.
/// Over plain paths the source may answer in one pass ([`Source::combine`]).
fn combine(func: &str, agg: Agg, a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    if a.args.is_empty() {
        return Err(a.invalid("takes at least one series list"));
    }
    if let Some(combined) = combine_stored(func, agg, a, cx)? {
        return Ok(combined);
    }
    let mut list = Vec::new();
    for i in 0..a.args.len() {
        list.extend(a.series(i, cx)?);
    }
    let Some(start) = list.iter().map(|s| s.start).min() else {
        return Ok(Vec::new());
    };
    let step = (list.iter())
        .try_fold(1, |l, s| lcm(l, s.step))
        .ok_or_else(|| {
            a.invalid("the series' steps have no common multiple that fits in 64 bits")
        })?;
    let list: Vec<Series> = (list.into_iter())
        .map(|s| {
            let k = (step / s.step) as usize;
            s.consolidate(k)
        })
        .collect();
    let last = (list.iter())
        .map(|s| s.at(s.values.len()))
        .max()
        .unwrap_or(start);
    let slots = (i128::from(last) - i128::from(start) + i128::from(step) - 1) / i128::from(step);
    if slots > i128::from(MAX_QUERY_POINTS) {
        return Err(a.invalid(&format!(
            "{slots} points at a common step of {step}s; at most {MAX_QUERY_POINTS}"
        )));
    }
    let mut slots = vec![Vec::new(); slots as usize];
    for s in &list {
        for (i, v) in s.values.iter().enumerate() {
            if let Some(v) = v {
                slots[((s.at(i) - start) / step) as usize].push(*v);
            }
        }
    }
    let expressions = distinct(list.iter().map(|s| s.path_expression.as_str()));
    let end = list.iter().map(|s| s.end).max().unwrap_or(start);
    Ok(vec![combined_series(
        func,
        &expressions,
        (start, end, step),
        slots.iter().map(|slot| agg.reduce(slot)).collect(),
        list.iter().all(|s| s.counter),
    )])
}

/// [`combine`] answered by the source in one pass, when every argument is a plain path and
/// the source can; `None` to fetch and combine instead.
fn combine_stored(
    func: &str,
    agg: Agg,
    a: &Args<'_>,
    cx: &Context<'_>,
) -> Result<Option<Vec<Series>>> {
    let aggregation = match agg {
        Agg::Sum => Aggregation::Sum,
        Agg::Avg => Aggregation::Avg,
        Agg::Max => Aggregation::Max,
        Agg::Min => Aggregation::Min,
        Agg::Last => return Ok(None),
    };
    let mut paths = Vec::new();
    for arg in a.args {
        match arg {
            Expr::Path(path) => paths.push(path.as_str()),
            _ => return Ok(None),
        }
    }
    let patterns: Vec<PathPattern> = (paths.iter())
        .map(|path| PathPattern::parse(path))
        .collect::<Result<_>>()?;
    let Some(combined) = (cx.source).combine(&patterns, aggregation, cx.from, cx.until)? else {
        return Ok(None);
    };
    let hits = paths.iter().zip(&combined.matched).filter(|(_, &hit)| hit);
    let expressions = distinct(hits.map(|(path, _)| *path));
    if expressions.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let (start, step) = (combined.start, combined.step.max(1));
    let end = start + combined.values.len() as i64 * step;
    Ok(Some(vec![combined_series(
        func,
        &expressions,
        (start, end, step),
        combined.values,
        combined.counter,
    )]))
}

/// Each of `expressions` once, in order of first appearance (graphite-web's
/// formatPathExpressions).
fn distinct<'a>(expressions: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = Vec::new();
    for expression in expressions {
        if !seen.contains(&expression) {
            seen.push(expression);
        }
    }
    seen
}

/// The series sumSeries and kin answer: named `func(expressions)`, its own path expression,
/// ending where graphite-web's normalize ends it (the inputs' last end, less what a partial
/// last step leaves).
fn combined_series(
    func: &str,
    expressions: &[&str],
    (start, end, step): (i64, i64, i64),
    values: Vec<Option<f64>>,
    counter: bool,
) -> Series {
    let name = format!("{func}({})", expressions.join(","));
    Series {
        path_expression: name.clone(),
        name,
        start,
        end: end - (end - start).rem_euclid(step),
        step,
        values,
        buckets: None,
        counter,
    }
}

/// Start of the `interval` window holding `ts`, windows aligned to `origin`.
fn summarize_window_start(ts: i64, interval: i64, origin: i64) -> i64 {
    ts - (ts - origin).rem_euclid(interval)
}

/// The windows [`summarize`] makes of `s`, as graphite-web's summarize lays them out: the
/// first window's start, how many there are and where they end. With `align`, from the
/// series start until the windows cover its end; else aligned to the epoch, from the window
/// holding the start to the one after the window holding the end. Callers refuse a
/// summarize too large to hold by the count before [`summarize`] allocates.
fn windows(s: &Series, interval: i64, align: bool) -> (i64, u64, i64) {
    let (start, end) = if align {
        let count = ((s.end - s.start).max(0) + interval - 1) / interval;
        (s.start, s.start + count * interval)
    } else {
        let start = summarize_window_start(s.start, interval, 0);
        (start, summarize_window_start(s.end, interval, 0) + interval)
    };
    (start, ((end - start) / interval).max(0) as u64, end)
}

/// Least common multiple of two positive steps; `None` when it overflows.
fn lcm(a: i64, b: i64) -> Option<i64> {
    let gcd = |mut a: i64, mut b: i64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    (a / gcd(a, b)).checked_mul(b)
}

/// perSecond and nonNegativeDerivative. A counter's values are already increases, so the
/// answer is the value (divided by the step for perSecond); a negative increase (a reset as
/// stored) is null and `max_value` does not apply. Otherwise graphite-web's rule on
/// consecutive values: the delta when both are known and the value grew, null after a null or
/// for the first point, a wrapped `max_value + 1 + value - prev` when it shrank and
/// `max_value` is given (null otherwise), and null for a value above `max_value`. perSecond
/// rounds its rates to six decimals, as graphite-web's does (`round(delta / step, 6)`).
fn derivative(s: Series, func: &str, per_second: bool, max_value: Option<f64>) -> Series {
    let step = s.step as f64;
    let rate = |delta: f64| match per_second {
        true => round_6(delta / step),
        false => delta,
    };
    let values = if s.counter {
        (s.values.iter())
            .map(|v| v.filter(|v| *v >= 0.0).map(rate))
            .collect()
    } else {
        let mut prev: Option<f64> = None;
        (s.values.iter())
            .map(|&value| {
                if max_value.is_some_and(|max| value.is_some_and(|v| v > max)) {
                    prev = None;
                    return None;
                }
                let delta = match (prev, value) {
                    (Some(p), Some(v)) if v >= p => Some(v - p),
                    (Some(p), Some(v)) => max_value.map(|max| max + 1.0 + v - p),
                    _ => None,
                };
                prev = value;
                delta.map(rate)
            })
            .collect()
    };
    let name = format!("{func}({})", s.name);
    Series {
        path_expression: name.clone(),
        name,
        values,
        buckets: None,
        counter: false,
        ..s
    }
}

/// One value per `interval` window, windows aligned to the epoch or, with `align`, to the
/// series start (graphite-web's alignToFrom). A gauge that still has its buckets, with windows
/// that are whole buckets, is answered from merged buckets: the true average of the samples,
/// and their true max and min. Everything else reduces the point values; `sum` of a counter
/// stays a counter (the increase within the window).
///
/// The caller checks [`windows`] first: this allocates one slot per window.
fn summarize(s: Series, interval: i64, agg: Agg, align: bool) -> Series {
    let origin = if align { s.start } else { 0 };
    let window = |ts: i64| summarize_window_start(ts, interval, origin);
    let (start, count, end) = windows(&s, interval, align);
    let count = count as usize;
    let exact = !s.counter && interval % s.step == 0 && (s.start - origin) % s.step == 0;
    let buckets = s.buckets.as_ref().filter(|_| exact);
    let mut values = vec![Vec::new(); count];
    // Merged buckets only when they give the answer; empty otherwise.
    let mut merged = vec![Bucket::EMPTY; if buckets.is_some() { count } else { 0 }];
    for (i, value) in s.values.iter().enumerate() {
        let w = ((window(s.at(i)) - start) / interval) as usize;
        // graphite-web reads no point past the last window (a series ending before its
        // last value's stamp: sumSeries of series of different ends).
        if w >= count {
            break;
        }
        values[w].extend(*value);
        if let Some(buckets) = buckets {
            merged[w].merge(&buckets[i]);
        }
    }
    let reduce = |(w, values): (usize, &Vec<f64>)| match (merged.get(w), agg) {
        (Some(bucket), Agg::Avg | Agg::Max | Agg::Min) if bucket.is_empty() => None,
        (Some(bucket), Agg::Avg) => Some(bucket.total / bucket.count as f64),
        (Some(bucket), Agg::Max) => Some(bucket.max),
        (Some(bucket), Agg::Min) => Some(bucket.min),
        _ => agg.reduce(values),
    };
    Series {
        start,
        end,
        step: interval,
        values: values.iter().enumerate().map(reduce).collect(),
        buckets: None,
        counter: s.counter && agg == Agg::Sum,
        ..s
    }
}
