//! graphite-web's Transform family: functions that rewrite each series' values on their own
//! (scale, offset, derivatives, integrals, null handling, summarize, hitcount) or read them
//! from another range (timeShift, timeStack). Values are rewritten in place; a series keeps
//! its stored buckets only where its values are still theirs (renamed or restamped).

use super::{g, Args, Context, Window};
use crate::error::Result;
use crate::read::query::MAX_QUERY_POINTS;
use crate::render::aggfunc::AggFunc;
use crate::render::python::{round_6, round_to};
use crate::render::series::bucket_value;
use crate::render::series::{enough_known, ConsolidateBy, Series};

/// A function of each value alone, named `func(name)` or with an argument; the result keeps
/// nothing of the buckets.
fn each(
    a: &Args<'_>,
    cx: &Context<'_>,
    name: impl Fn(&str) -> String,
    f: impl Fn(f64) -> Option<f64> + Copy,
) -> Result<Vec<Series>> {
    // `f` is `Copy` so that each series maps with its own copy.
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let name = name(&s.name);
            s.mapped(name, |v| v.and_then(f))
        })
        .collect())
}

/// A float result, null where graphite-web's math raises (NaN, overflow).
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// `scale(seriesList, factor)`. A counter stays one: scaled increases are increases.
pub(super) fn scale(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let factor = a.number(1)?;
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let counter = s.counter;
            let name = format!("scale({},{})", s.name, g(factor));
            Series {
                counter,
                ..s.mapped(name, |v| v.map(|v| v * factor))
            }
        })
        .collect())
}

pub(super) fn offset(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let factor = a.number(1)?;
    each(
        a,
        cx,
        |n| format!("offset({n},{})", g(factor)),
        |v| Some(v + factor),
    )
}

pub(super) fn add(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let constant = a.number(1)?;
    // `%d` of the constant: its whole part.
    let whole = constant.trunc() as i64;
    each(
        a,
        cx,
        |n| format!("add({n},{whole})"),
        |v| Some(v + constant),
    )
}

pub(super) fn absolute(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    each(a, cx, |n| format!("absolute({n})"), |v| Some(v.abs()))
}

pub(super) fn pow(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let factor = a.number(1)?;
    each(
        a,
        cx,
        |n| format!("pow({n},{})", g(factor)),
        |v| finite(v.powf(factor)),
    )
}

pub(super) fn square_root(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    each(
        a,
        cx,
        |n| format!("squareRoot({n})"),
        |v| finite(v.powf(0.5)),
    )
}

pub(super) fn invert(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    each(a, cx, |n| format!("invert({n})"), |v| finite(v.powf(-1.0)))
}

pub(super) fn exp(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    each(a, cx, |n| format!("exp({n})"), |v| finite(v.exp()))
}

pub(super) fn sigmoid(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    each(
        a,
        cx,
        |n| format!("sigmoid({n})"),
        |v| finite(1.0 / (1.0 + (-v).exp())),
    )
}

pub(super) fn logit(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let logit = |v: f64| match v / (1.0 - v) {
        q if q > 0.0 && q.is_finite() => Some(q.ln()),
        _ => None,
    };
    each(a, cx, |n| format!("logit({n})"), logit)
}

/// `log(seriesList, base=10)`: null for values of zero or less, as graphite-web's.
pub(super) fn log(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let base = a.number_or(1, 10.0)?;
    let base_text = if a.has(1) { a.py_str(1) } else { "10".into() };
    let ln_base = base.ln();
    each(
        a,
        cx,
        |n| format!("log({n}, {base_text})"),
        |v| (v > 0.0).then(|| v.ln() / ln_base),
    )
}

/// `round(seriesList, precision)`; a precision of `None` is none given, as in graphite-web.
pub(super) fn round(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let precision = if a.has(1) && !a.is_none_arg(1) {
        Some(a.int(1)?)
    } else {
        None
    };
    let name = |n: &str| match precision {
        None => format!("round({n})"),
        Some(p) => format!("round({n},{p})"),
    };
    each(a, cx, name, |v| Some(round_to(v, precision.unwrap_or(0))))
}

/// `scaleToSeconds(seriesList, seconds)`: each value times `seconds / step`, rounded to six
/// decimals.
pub(super) fn scale_to_seconds(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let seconds = a.number(1)?;
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let factor = seconds / s.step as f64;
            let name = format!("scaleToSeconds({},{})", s.name, seconds.trunc() as i64);
            s.mapped(name, |v| v.map(|v| round_6(v * factor)))
        })
        .collect())
}

pub(super) fn offset_to_zero(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let min = AggFunc::Min.reduce(&s.values);
            let name = format!("offsetToZero({})", s.name);
            s.mapped(name, |v| Some(v? - min?))
        })
        .collect())
}

/// `minMax(seriesList)`: values scaled to 0..1 between the series' min and max (0 when
/// they are equal).
pub(super) fn min_max(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let min = AggFunc::Min.reduce(&s.values).unwrap_or(0.0);
            let max = AggFunc::Max.reduce(&s.values).unwrap_or(0.0);
            let name = format!("minMax({})", s.name);
            s.mapped(name, |v| {
                v.map(|v| match max - min {
                    0.0 => 0.0,
                    range => (v - min) / range,
                })
            })
        })
        .collect())
}

pub(super) fn is_non_null(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let name = format!("isNonNull({})", s.name);
            s.mapped(name, |v| Some(if v.is_some() { 1.0 } else { 0.0 }))
        })
        .collect())
}

/// `changed(seriesList)`: 1 where the value differs from the last known one, else 0.
pub(super) fn changed(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    Ok((a.series(0, cx)?.into_iter())
        .map(|mut s| {
            let mut previous: Option<f64> = None;
            for v in &mut s.values {
                let value = *v;
                *v = Some(match (previous, value) {
                    (None, _) => {
                        previous = value;
                        0.0
                    }
                    (Some(p), Some(x)) if p != x => {
                        previous = value;
                        1.0
                    }
                    _ => 0.0,
                });
            }
            let name = format!("changed({})", s.name);
            s.mapped(name, |v| v)
        })
        .collect())
}

/// `transformNull(seriesList, default=0, referenceSeries)`: nulls become `default`; with a
/// reference list, only where some reference series has a value.
pub(super) fn transform_null(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let default = a.number_or(1, 0.0)?;
    let reference = match a.has(2) && !a.is_none_arg(2) {
        true => Some(a.series(2, cx)?),
        false => None,
    };
    let defaults: Option<Vec<Option<f64>>> = reference.filter(|r| !r.is_empty()).map(|r| {
        let width = r.iter().map(|s| s.values.len()).max().unwrap_or(0);
        (0..width)
            .map(|i| {
                let any = r
                    .iter()
                    .any(|s| s.values.get(i).copied().flatten().is_some());
                any.then_some(default)
            })
            .collect()
    });
    let suffix = if defaults.is_some() {
        ",referenceSeries"
    } else {
        ""
    };
    Ok((a.series(0, cx)?.into_iter())
        .map(|mut s| {
            let name = format!("transformNull({},{}{suffix})", s.name, g(default));
            match &defaults {
                None => s.values.iter_mut().for_each(|v| *v = v.or(Some(default))),
                Some(defaults) => {
                    if defaults.len() > s.values.len() {
                        s.values.resize(defaults.len(), None);
                    }
                    for (i, v) in s.values.iter_mut().enumerate() {
                        *v = v.or(defaults.get(i).copied().flatten());
                    }
                }
            }
            s.mapped(name, |v| v)
        })
        .collect())
}

/// A `limit` argument that may be absent (unbounded) or a number of points.
fn limit(a: &Args<'_>, i: usize) -> Result<f64> {
    if !a.has(i) || a.is_none_arg(i) {
        return Ok(f64::INFINITY);
    }
    match a.expr(i) {
        crate::render::expr::Expr::Path(p) if p == "Infinity" => Ok(f64::INFINITY),
        crate::render::expr::Expr::Str(s) if s == "Infinity" => Ok(f64::INFINITY),
        _ => a.number(i),
    }
}

/// `keepLastValue(seriesList, limit=inf)`: runs of at most `limit` nulls after a value take
/// that value, including a run at the end.
pub(super) fn keep_last_value(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let limit = limit(a, 1)?;
    Ok((a.series(0, cx)?.into_iter())
        .map(|mut s| {
            let mut nulls = 0usize;
            let mut last: Option<f64> = None;
            let len = s.values.len();
            for i in 0..=len {
                match s.values.get(i).copied() {
                    Some(None) => nulls += 1,
                    value => {
                        if nulls > 0 && nulls as f64 <= limit {
                            if let Some(last) = last {
                                s.values[i - nulls..i].fill(Some(last));
                            }
                        }
                        nulls = 0;
                        if let Some(Some(v)) = value {
                            last = Some(v);
                        }
                    }
                }
            }
            let name = format!("keepLastValue({})", s.name);
            s.mapped(name, |v| v)
        })
        .collect())
}

/// `interpolate(seriesList, limit=inf)`: runs of at most `limit` nulls between two values
/// are filled on the straight line between them; leading and trailing nulls stay.
pub(super) fn interpolate(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let limit = limit(a, 1)?;
    Ok((a.series(0, cx)?.into_iter())
        .map(|mut s| {
            let mut nulls = 0usize;
            for i in 1..s.values.len() {
                match s.values[i] {
                    None => nulls += 1,
                    Some(_) if nulls == 0 => {}
                    Some(value) => {
                        let before = i - nulls - 1;
                        if let Some(from) = s.values[before] {
                            if nulls as f64 <= limit {
                                for index in i - nulls..i {
                                    s.values[index] = Some(
                                        from + (index - before) as f64 * (value - from)
                                            / (nulls + 1) as f64,
                                    );
                                }
                            }
                        }
                        nulls = 0;
                    }
                }
            }
            let name = format!("interpolate({})", s.name);
            s.mapped(name, |v| v)
        })
        .collect())
}

/// `derivative(seriesList)`: each value minus the one before; null after a null.
pub(super) fn derivative(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    Ok((a.series(0, cx)?.into_iter())
        .map(|mut s| {
            let mut prev: Option<f64> = None;
            for v in &mut s.values {
                let value = *v;
                *v = match (prev, value) {
                    (Some(p), Some(x)) => Some(x - p),
                    _ => None,
                };
                prev = value;
            }
            let name = format!("derivative({})", s.name);
            s.mapped(name, |v| v)
        })
        .collect())
}

/// `integral(seriesList)`: the running sum of the values; nulls stay null.
pub(super) fn integral(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let name = format!("integral({})", s.name);
            let mut current = 0.0;
            s.mapped(name, |v| {
                v.map(|v| {
                    current += v;
                    current
                })
            })
        })
        .collect())
}

/// `integralByInterval(seriesList, intervalUnit)`: the running sum, restarting at every
/// multiple of the interval counted from the request's `from`; a null repeats the sum.
pub(super) fn integral_by_interval(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let (interval, text) = a.interval(1)?;
    Ok((a.series(0, cx)?.into_iter())
        .map(|mut s| {
            let mut current = 0.0;
            for (i, v) in s.values.iter_mut().enumerate() {
                let t = s.start + i as i64 * s.step - cx.from;
                if t.div_euclid(interval) != (t - s.step).div_euclid(interval) {
                    current = 0.0;
                }
                if let Some(x) = *v {
                    current += x;
                }
                *v = Some(current);
            }
            let name = format!("integralByInterval({},'{text}')", s.name);
            s.mapped(name, |v| v)
        })
        .collect())
}

/// `delay(seriesList, steps)`: the values moved `steps` points later (earlier when
/// negative), nulls filling the gap; `delay(x, 0)` leaves no values, as graphite-web's
/// `series[:-0]` does.
pub(super) fn delay(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let steps = a.int(1)?;
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let len = s.values.len();
            let shift = (steps.unsigned_abs() as usize).min(len);
            let values = if steps < 0 {
                let mut v = s.values[shift..].to_vec();
                v.resize(len, None);
                v
            } else if steps == 0 {
                Vec::new()
            } else {
                let mut v = vec![None; shift];
                v.extend_from_slice(&s.values[..len - shift]);
                v
            };
            let name = format!("delay({},{steps})", s.name);
            s.derived(name, values)
        })
        .collect())
}

/// perSecond and nonNegativeDerivative with graphite-web's `_nonNegativeDelta`. A counter's
/// values are already increases, so the answer is the value (divided by the step for
/// perSecond); a negative increase (a reset as stored) is null and the bounds do not apply.
/// Otherwise, on consecutive values: the delta when both are known and the value grew, null
/// after a null or for the first point; when it shrank, `max + 1 + value - prev - min`
/// with `maxValue`, `value - min` with only `minValue`, else null; values above `maxValue`
/// or below `minValue` are null and forget the previous value. perSecond rounds its rates to
/// six decimals, as graphite-web's does (`round(delta / step, 6)`).
pub(super) fn non_negative(
    a: &Args<'_>,
    cx: &Context<'_>,
    per_second: bool,
) -> Result<Vec<Series>> {
    let max_value = a.opt_number(1)?;
    let min_value = a.opt_number(2)?;
    let func = if per_second {
        "perSecond"
    } else {
        "nonNegativeDerivative"
    };
    Ok((a.series(0, cx)?.into_iter())
        .map(|mut s| {
            let step = s.step as f64;
            let rate = |delta: f64| match per_second {
                true => round_6(delta / step),
                false => delta,
            };
            if s.counter {
                s.values
                    .iter_mut()
                    .for_each(|v| *v = v.filter(|v| *v >= 0.0).map(rate));
            } else {
                let mut prev: Option<f64> = None;
                for v in &mut s.values {
                    let value = *v;
                    let out_of_bounds = value.is_some_and(|x| {
                        max_value.is_some_and(|max| x > max) || min_value.is_some_and(|min| x < min)
                    });
                    if out_of_bounds {
                        prev = None;
                        *v = None;
                        continue;
                    }
                    let delta = match (prev, value) {
                        (Some(p), Some(x)) if x >= p => Some(x - p),
                        (Some(p), Some(x)) => match (max_value, min_value) {
                            (Some(max), min) => Some(max + 1.0 + x - p - min.unwrap_or(0.0)),
                            (None, Some(min)) => Some(x - min),
                            (None, None) => None,
                        },
                        _ => None,
                    };
                    prev = value;
                    *v = delta.map(rate);
                }
            }
            let name = format!("{func}({})", s.name);
            s.mapped(name, |v| v)
        })
        .collect())
}

/// `timeShift(seriesList, timeShift, resetEnd=true)`: the argument read again over the range
/// moved by the offset (backwards when unsigned, as graphite-web reads `"1d"`), stamped on
/// the first series' points. The values are the stored ones, buckets kept.
pub(super) fn time_shift(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let text = a.string(1)?;
    let shift_text = signed_back(text);
    let delta = a.offset_of(1, &shift_text)?;
    let reset_end = a.boolean_or(2, true)?;
    let list = a.series(0, cx)?;
    let Some(first) = list.first() else {
        return Ok(Vec::new());
    };
    let (start, end) = (first.start, first.end);
    let shifted = a.series(0, &cx.over(cx.from + delta, cx.until + delta))?;
    Ok((shifted.into_iter())
        .map(|mut s| {
            s.name = format!("timeShift({}, \"{shift_text}\")", s.name);
            s.end = if reset_end {
                end
            } else {
                s.end - s.start + start
            };
            s.start = start;
            s
        })
        .collect())
}

/// graphite-web's default for time shifts: an offset written without a sign goes back.
fn signed_back(text: &str) -> String {
    if text.starts_with(|c: char| c.is_ascii_digit()) {
        format!("-{text}")
    } else {
        text.to_owned()
    }
}

/// `timeStack(seriesList, timeShiftUnit="1d", timeShiftStart=0, timeShiftEnd=7)`: the
/// argument read at each shift from start to end (exclusive), each stamped on the first
/// series' points and named `timeShift(name, unit, shift)`; start and end are Python's
/// `int()` of what is given (`2.5` is 2).
pub(super) fn time_stack(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let unit = signed_back(a.string_or(1, "1d")?);
    let delta = a.offset_of(1, &unit)?;
    let (from, to) = (a.truncated_or(2, 0)?, a.truncated_or(3, 7)?);
    if to.saturating_sub(from) > 1000 || from.unsigned_abs().max(to.unsigned_abs()) > 1000 {
        return Err(a.wrong(3, "asks for shifts beyond 1000"));
    }
    let list = a.series(0, cx)?;
    let Some(first) = list.first() else {
        return Ok(Vec::new());
    };
    let (start, end) = (first.start, first.end);
    let mut out = Vec::new();
    for shift in from..to {
        let moved = delta.saturating_mul(shift);
        for mut s in a.series(0, &cx.over(cx.from + moved, cx.until + moved))? {
            s.name = format!("timeShift({}, {unit}, {shift})", s.name);
            s.path_expression = s.name.clone();
            s.start = start;
            s.end = end;
            out.push(s);
        }
    }
    Ok(out)
}

/// `consolidateBy(seriesList, consolidationFunc)`: how the series' points are joined when
/// it is consolidated to `maxDataPoints` (or to a common step).
pub(super) fn consolidate_by(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    // graphite-web takes any name here and fails only if the series must be consolidated
    // ([`Series::fit`]); Ceph's dashboards pass "maxSeries" under a series function that
    // does not keep it. A bare value (`5`, `None`) is such a name too, written as Python's
    // `str` of it.
    let func_name = a.python_str(1)?;
    consolidated(a, cx, AggFunc::parse_consolidation(&func_name), &func_name)
}

/// `cumulative(seriesList)`: consolidateBy `sum`.
pub(super) fn cumulative(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    consolidated(a, cx, Some(AggFunc::Sum), "sum")
}

fn consolidated(
    a: &Args<'_>,
    cx: &Context<'_>,
    func: Option<AggFunc>,
    func_name: &str,
) -> Result<Vec<Series>> {
    Ok((a.series(0, cx)?.into_iter())
        .map(|mut s| {
            s.name = format!("consolidateBy({},\"{func_name}\")", s.name);
            s.path_expression = s.name.clone();
            s.consolidate_by = Some(ConsolidateBy {
                name: func_name.to_owned(),
                func,
            });
            s
        })
        .collect())
}

/// `hitcount(seriesList, intervalString, alignToInterval=false)`: each value taken as a
/// rate per second over its step and spread over the intervals the step overlaps, the
/// intervals laid back from the series' end.
pub(super) fn hitcount(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let (interval, text) = a.interval(1)?;
    let align = a.boolean_or(2, false)?;
    let list = if align {
        let unit = if interval >= 86_400 {
            86_400
        } else if interval >= 3_600 {
            3_600
        } else if interval >= 60 {
            60
        } else {
            1
        };
        let from = cx.from - cx.from.rem_euclid(unit);
        let mut list = a.series(0, &cx.over(from, cx.until))?;
        for s in &mut list {
            let count = (s.end - s.start).div_euclid(interval);
            s.end = s.start + count * interval + interval;
        }
        list
    } else {
        a.series(0, cx)?
    };
    let tail = if align { ", true" } else { "" };
    let mut out = Vec::with_capacity(list.len());
    for s in list {
        let count = ((s.end - s.start) as f64 / interval as f64).ceil().max(0.0) as i64;
        if count as u64 > MAX_QUERY_POINTS {
            return Err(a.wrong(
                1,
                &format!("makes {count} intervals; at most {MAX_QUERY_POINTS}"),
            ));
        }
        let count = count as usize;
        let new_start = s.end - count as i64 * interval;
        let mut sums: Vec<Option<f64>> = vec![None; count];
        let mut add = |bucket: usize, x: f64| {
            let slot = &mut sums[bucket];
            *slot = Some(slot.unwrap_or(0.0) + x);
        };
        for (i, value) in s.values.iter().enumerate() {
            let Some(value) = *value else { continue };
            let start_time = s.start + i as i64 * s.step;
            let (start_bucket, start_mod) = (
                (start_time - new_start).div_euclid(interval),
                (start_time - new_start).rem_euclid(interval),
            );
            let end_time = start_time + s.step;
            let (mut end_bucket, mut end_mod) = (
                (end_time - new_start).div_euclid(interval),
                (end_time - new_start).rem_euclid(interval),
            );
            if end_bucket >= count as i64 {
                end_bucket = count as i64 - 1;
                end_mod = interval;
            }
            if start_bucket == end_bucket {
                if start_bucket >= 0 {
                    add(start_bucket as usize, value * (end_mod - start_mod) as f64);
                }
            } else {
                if start_bucket >= 0 {
                    add(start_bucket as usize, value * (interval - start_mod) as f64);
                }
                for j in (start_bucket + 1).max(0)..end_bucket {
                    add(j as usize, value * interval as f64);
                }
                if end_mod > 0 && end_bucket >= 0 {
                    add(end_bucket as usize, value * end_mod as f64);
                }
            }
        }
        let name = format!("hitcount({}, \"{text}\"{tail})", s.name);
        out.push(Series {
            start: new_start,
            step: interval,
            ..s.derived(name, sums)
        });
    }
    Ok(out)
}

/// `summarize(seriesList, intervalString, func="sum", alignToFrom=false)`.
pub(super) fn summarize_call(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let (interval, interval_text) = a.interval(1)?;
    let func = a.string_or(2, "sum")?;
    let agg = a.agg_or(2, AggFunc::Sum)?;
    let align = a.boolean_or(3, false)?;
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
    Ok(list.into_iter().map(window).collect())
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

/// One value per `interval` window, windows aligned to the epoch or, with `align`, to the
/// series start (graphite-web's alignToFrom). A gauge that still has its buckets, with windows
/// that are whole buckets, is answered from merged buckets: the true average of the samples,
/// and their true max and min. Everything else reduces the point values; `sum` of a counter
/// stays a counter (the increase within the window).
///
/// The caller checks [`windows`] first: this allocates one slot per window.
fn summarize(s: Series, interval: i64, agg: AggFunc, align: bool) -> Series {
    let origin = if align { s.start } else { 0 };
    let window = |ts: i64| summarize_window_start(ts, interval, origin);
    let (start, count, end) = windows(&s, interval, align);
    let count = count as usize;
    let exact = !s.counter && interval % s.step == 0 && (s.start - origin) % s.step == 0;
    let buckets = s.buckets.as_ref().filter(|_| exact);
    // The points of each window, as index ranges into the values.
    let mut ranges = vec![(0usize, 0usize); count];
    let mut merged = vec![crate::bucket::Bucket::EMPTY; if buckets.is_some() { count } else { 0 }];
    for i in 0..s.values.len() {
        let w = ((window(s.at(i)) - start) / interval) as usize;
        // graphite-web reads no point past the last window (a series ending before its
        // last value's stamp: sumSeries of series of different ends).
        if w >= count {
            break;
        }
        if ranges[w].1 == ranges[w].0 {
            ranges[w] = (i, i);
        }
        ranges[w].1 = i + 1;
        if let Some(buckets) = buckets {
            merged[w].merge(&buckets[i]);
        }
    }
    // graphite-web's xFilesFactor: the window's known points against the points it spans.
    let xff = s.xff();
    let points_per_window = interval as f64 / s.step as f64;
    let enough = |w: usize| {
        let known = s.values[ranges[w].0..ranges[w].1].iter().flatten().count();
        xff == 0.0 || enough_known(known, points_per_window, xff)
    };
    let values = (0..count)
        .map(|w| match (merged.get(w), agg) {
            _ if !enough(w) => None,
            (Some(bucket), AggFunc::Average | AggFunc::Max | AggFunc::Min) if bucket.is_empty() => {
                None
            }
            (Some(bucket), AggFunc::Average) => bucket_value(bucket, false),
            (Some(bucket), AggFunc::Max) => Some(bucket.max),
            (Some(bucket), AggFunc::Min) => Some(bucket.min),
            _ => agg.reduce(&s.values[ranges[w].0..ranges[w].1]),
        })
        .collect();
    Series {
        start,
        end,
        step: interval,
        values,
        buckets: None,
        timer: None,
        counter: s.counter && agg == AggFunc::Sum,
        ..s
    }
}

/// A window argument's seconds for a series list: an interval as given, or a number of
/// points times the largest step (graphite-web's preview for the moving windows).
pub(super) fn window_seconds(window: &Window, list: &[Series]) -> i64 {
    match window {
        Window::Seconds(seconds, _) => *seconds,
        Window::Points(n, _) => list
            .iter()
            .map(|s| s.step)
            .max()
            .unwrap_or(1)
            .saturating_mul(*n),
    }
}

/// graphite-web's `_summarizeValues`: windows of `interval` from `start` while before `end`;
/// each window's value is `agg` of the points from the last one stamped at or before the
/// window's start up to the window's end, null when none stamped inside it is known. Returns
/// the values and where the last window ends.
fn summarize_values(s: &Series, agg: AggFunc, interval: i64) -> (Vec<Option<f64>>, i64) {
    let mut values = Vec::new();
    let mut i = 0;
    let mut t = s.start;
    while t < s.end {
        let mut first = i;
        let mut known = 0;
        while i < s.values.len() && s.at(i) < t + interval {
            if s.at(i) <= t {
                first = i;
            }
            if s.at(i) >= t && s.values[i].is_some() {
                known += 1;
            }
            i += 1;
        }
        values.push(
            enough_known(known, interval as f64 / s.step as f64, s.xff())
                .then(|| agg.reduce(&s.values[first..i]))
                .flatten(),
        );
        t += interval;
    }
    (values, t)
}

/// The start of the `unit` (seconds, minutes, hours, days, weeks with an optional ISO
/// weekday digit, months, years: graphite-web's `alignTo`) holding `from`, in UTC.
fn align_start(a: &Args<'_>, i: usize, unit: &str, from: i64) -> Result<i64> {
    use chrono::{Datelike, NaiveDate, NaiveTime, Timelike};
    let t = chrono::DateTime::from_timestamp(from, 0)
        .ok_or_else(|| a.wrong(i, "aligns a time outside the calendar"))?
        .naive_utc();
    let midnight = |d: NaiveDate| d.and_time(NaiveTime::MIN).and_utc().timestamp();
    let date = t.date();
    Ok(if unit.starts_with('s') {
        from
    } else if unit.starts_with("min") {
        from - i64::from(t.second())
    } else if unit.starts_with('h') {
        from - i64::from(t.minute() * 60 + t.second())
    } else if unit.starts_with('d') {
        midnight(date)
    } else if unit.starts_with('w') {
        let target = unit
            .chars()
            .last()
            .and_then(|c| c.to_digit(10))
            .unwrap_or(1);
        let back =
            (i64::from(date.weekday().number_from_monday()) - i64::from(target)).rem_euclid(7);
        midnight(date) - back * 86_400
    } else if unit.starts_with("mon") {
        midnight(date.with_day(1).unwrap_or(date))
    } else if unit.starts_with('y') {
        midnight(NaiveDate::from_ymd_opt(date.year(), 1, 1).unwrap_or(date))
    } else {
        return Err(a.wrong(
            i,
            &format!("is {unit:?}, not one of seconds, minutes, hours, days, weeks, months, years"),
        ));
    })
}

/// `smartSummarize(seriesList, intervalString, func="sum", alignTo)`: one value per
/// interval from the series' start, which `alignTo` first moves back to the start of its
/// unit (the argument read again from there).
pub(super) fn smart_summarize(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let (interval, text) = a.interval(1)?;
    let func = a.string_or(2, "sum")?;
    let agg = a.agg_or(2, AggFunc::Sum)?;
    let list = match a.arg(3) {
        Some(crate::render::expr::Expr::Str(unit)) => {
            let from = align_start(a, 3, unit, cx.from)?;
            a.series(0, &cx.over(from, cx.until))?
        }
        _ => a.series(0, cx)?,
    };
    let mut out = Vec::with_capacity(list.len());
    for s in list {
        let count = (s.end - s.start).max(0) / interval;
        if count as u64 > MAX_QUERY_POINTS {
            return Err(a.wrong(
                1,
                &format!("makes {count} windows; at most {MAX_QUERY_POINTS}"),
            ));
        }
        let (values, end) = summarize_values(&s, agg, interval);
        let name = format!("smartSummarize({}, \"{text}\", \"{func}\")", s.name);
        out.push(Series {
            end,
            step: interval,
            ..s.derived(name, values)
        });
    }
    Ok(out)
}

/// A `date` argument (graphite-web's `parseATTime`) in unix seconds, relative times counted
/// from the request's clock, in the forms of [`crate::time::parse_time`].
pub(super) fn date(a: &Args<'_>, i: usize, cx: &Context<'_>) -> Result<i64> {
    let text = a.string(i)?;
    let at = crate::time::parse_time(text, cx.now).map_err(|e| a.wrong(i, &e))?;
    if !crate::render::RENDER_TIMES.contains(&at) {
        return Err(a.wrong(i, &format!("is {text:?}, outside the years 0 to 9999")));
    }
    Ok(at)
}

/// `timeSlice(seriesList, startSliceAt, endSliceAt="now")`: the values outside
/// `start..=end` nulled, named `timeSlice(name, start, end)`. As graphite-web does, point `i`
/// is judged at the request's `from` plus `i` steps (not at its own stamp, one step later).
pub(super) fn time_slice(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let start = date(a, 1, cx)?;
    let end = if a.has(2) { date(a, 2, cx)? } else { cx.now };
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let name = format!("timeSlice({}, {start}, {end})", s.name);
            let (step, counter) = (s.step, s.counter);
            let mut at = cx.from - step;
            // A counter's increases stay increases where they are kept.
            Series {
                counter,
                ..s.mapped(name, |v| {
                    at += step;
                    v.filter(|_| (start..=end).contains(&at))
                })
            }
        })
        .collect())
}
