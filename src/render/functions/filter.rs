//! graphite-web's Filter Series, Filter Data and Sorting families: functions that keep,
//! drop or order whole series by a value of each (`highest*`, `*Above`/`*Below`, `limit`,
//! `sortBy*`, ...) or null out some of their points (`removeAbove/BelowValue`,
//! `removeAbove/BelowPercentile`). Orders are stable, and a series whose value is null sorts
//! as minus infinity, as graphite-web's keyFunc has it.

use super::calculate::series_percentile;
use super::combine::{percentile, python_slice_end};
use super::{g, regex, Args, Context};
use crate::error::Result;
use crate::render::aggfunc::AggFunc;
use crate::render::expr::Expr;
use crate::render::series::Series;

/// graphite-web's `keyFunc`: the value, or minus infinity when there is none.
fn key(value: Option<f64>) -> f64 {
    value.unwrap_or(f64::NEG_INFINITY)
}

/// `list` sorted by `agg` of each series' values, descending when `reverse`, stably
/// (equal keys keep their order either way, as Python's sort does).
fn sort_by_agg(list: &mut Vec<Series>, agg: AggFunc, reverse: bool) {
    let mut keyed: Vec<(f64, Series)> = (list.drain(..))
        .map(|s| (key(agg.reduce(&s.values)), s))
        .collect();
    keyed.sort_by(|x, y| match reverse {
        false => x.0.total_cmp(&y.0),
        true => y.0.total_cmp(&x.0),
    });
    list.extend(keyed.into_iter().map(|(_, s)| s));
}

/// The first `n` of `list` (Python's `list[:n]`, so a negative `n` drops from the end).
fn first(mut list: Vec<Series>, n: i64) -> Vec<Series> {
    let stop = python_slice_end(n, list.len());
    list.truncate(stop);
    list
}

/// `highest(seriesList, n=1, func="average")` and `lowest`, and their shorthands.
pub(super) fn extreme(
    a: &Args<'_>,
    cx: &Context<'_>,
    agg: Option<AggFunc>,
    highest: bool,
) -> Result<Vec<Series>> {
    // `seriesList[:int(n)]`: a number with a fraction is cut (`2.5` keeps 2).
    let n = a.truncated_or(1, 1)?;
    let agg = match agg {
        Some(agg) => agg,
        None => a.agg_or(2, AggFunc::Average)?,
    };
    let mut list = a.series(0, cx)?;
    sort_by_agg(&mut list, agg, highest);
    Ok(first(list, n))
}

/// A comparison of `filterSeries`, with graphite-web's treatment of a null value: kept by
/// `!=`, `<` and `<=`, dropped by the others.
#[derive(Clone, Copy)]
pub(super) enum Operator {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Operator {
    fn parse(text: &str) -> Option<Operator> {
        Some(match text {
            "=" => Operator::Eq,
            "!=" => Operator::Ne,
            ">" => Operator::Gt,
            ">=" => Operator::Ge,
            "<" => Operator::Lt,
            "<=" => Operator::Le,
            _ => return None,
        })
    }

    fn holds(self, value: Option<f64>, threshold: f64) -> bool {
        match (self, value) {
            (Operator::Ne | Operator::Lt | Operator::Le, None) => true,
            (_, None) => false,
            (Operator::Eq, Some(v)) => v == threshold,
            (Operator::Ne, Some(v)) => v != threshold,
            (Operator::Gt, Some(v)) => v > threshold,
            (Operator::Ge, Some(v)) => v >= threshold,
            (Operator::Lt, Some(v)) => v < threshold,
            (Operator::Le, Some(v)) => v <= threshold,
        }
    }
}

/// The series whose `agg` compares to `threshold` by `operator` (`currentAbove` and kin).
pub(super) fn keep_where(
    a: &Args<'_>,
    cx: &Context<'_>,
    agg: AggFunc,
    operator: Operator,
) -> Result<Vec<Series>> {
    let threshold = a.number(1)?;
    let mut list = a.series(0, cx)?;
    list.retain(|s| operator.holds(agg.reduce(&s.values), threshold));
    Ok(list)
}

/// `filterSeries(seriesList, func, operator, threshold)`. A threshold that graphite-web hands
/// on as a string or `None` (`'abc'`) equals no number: `=` keeps no series and `!=` every
/// one, as Python's `==` answers; the other operators are refused, as Python fails to order
/// a number and a string.
pub(super) fn filter_series(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let agg = a.agg(1)?;
    let op_text = a.string(2)?;
    let operator = Operator::parse(op_text).ok_or_else(|| {
        a.wrong(
            2,
            &format!("is {op_text:?}, not one of =, !=, >, >=, <, <="),
        )
    })?;
    let threshold = match a.number(3) {
        Ok(threshold) => threshold,
        Err(e) => {
            return match (a.expr(3), operator) {
                (Expr::Str(_) | Expr::None, Operator::Eq) => Ok(Vec::new()),
                (Expr::Str(_) | Expr::None, Operator::Ne) => a.series(0, cx),
                _ => Err(e),
            };
        }
    };
    let mut list = a.series(0, cx)?;
    list.retain(|s| operator.holds(agg.reduce(&s.values), threshold));
    Ok(list)
}

/// `limit(seriesList, n)`; `n` of `None` keeps every series (Python's `[0:None]`).
pub(super) fn limit(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let n = count_or_all(a, 1)?;
    Ok(first(a.series(0, cx)?, n))
}

/// A count of series to keep, argument `i`: `None` keeps all of them, as graphite-web's
/// `seriesList[:n]` does with the `None` its validation hands on.
fn count_or_all(a: &Args<'_>, i: usize) -> Result<i64> {
    if a.is_none_arg(i) {
        Ok(i64::MAX)
    } else {
        a.int(i)
    }
}

/// `exclude(seriesList, pattern)` and `grep(seriesList, pattern)`: by a regex search of the
/// name.
pub(super) fn grep(a: &Args<'_>, cx: &Context<'_>, keep_matches: bool) -> Result<Vec<Series>> {
    let regex = regex(a, 1)?;
    let mut list = a.series(0, cx)?;
    list.retain(|s| regex.is_match(&s.name) == keep_matches);
    Ok(list)
}

/// `removeAboveValue` and `removeBelowValue`: points above (below, or null) `n` become null.
pub(super) fn remove_value(a: &Args<'_>, cx: &Context<'_>, above: bool) -> Result<Vec<Series>> {
    let n = a.number(1)?;
    let func = if above {
        "removeAboveValue"
    } else {
        "removeBelowValue"
    };
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let name = format!("{func}({}, {})", s.name, g(n));
            s.mapped(name, |v| match above {
                true => v.filter(|&v| v <= n),
                false => v.filter(|&v| v >= n),
            })
        })
        .collect())
}

/// `removeAbovePercentile` and `removeBelowPercentile`: as the value functions, at the n-th
/// percentile of each series; a series without values is only renamed.
pub(super) fn remove_percentile(
    a: &Args<'_>,
    cx: &Context<'_>,
    above: bool,
) -> Result<Vec<Series>> {
    let n = a.number(1)?;
    if n == 0.0 {
        return Err(a.wrong(1, "must be greater than 0"));
    }
    let func = if above {
        "removeAbovePercentile"
    } else {
        "removeBelowPercentile"
    };
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let name = format!("{func}({}, {})", s.name, g(n));
            let points = ((s.end - s.start) as f64 / s.step as f64) as usize;
            match series_percentile(&s, n).filter(|_| points > 0) {
                None => {
                    let mut s = s;
                    s.path_expression = name.clone();
                    s.name = name;
                    s
                }
                Some(p) => s.mapped(name, |v| match above {
                    true => v.filter(|&v| v <= p),
                    false => v.filter(|&v| v >= p),
                }),
            }
        })
        .collect())
}

/// `removeEmptySeries(seriesList, xFilesFactor=0)`: the series with a known value (and at
/// least `xFilesFactor` of their points known).
pub(super) fn remove_empty_series(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let xff = a.opt_number(1)?.unwrap_or(0.0);
    let mut list = a.series(0, cx)?;
    list.retain(|s| {
        let known = s.values.iter().flatten().count();
        known > 0 && known as f64 / s.values.len() as f64 >= xff
    });
    Ok(list)
}

/// `mostDeviant(seriesList, n)`: the `n` series of the largest variance of their known
/// values; `n` of `None` keeps them all, sorted.
pub(super) fn most_deviant(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let n = count_or_all(a, 1)?;
    let mut list: Vec<Series> = Vec::new();
    let mut sigmas = Vec::new();
    for s in a.series(0, cx)? {
        let Some(mean) = AggFunc::Average.reduce(&s.values) else {
            continue;
        };
        let squares = s
            .values
            .iter()
            .flatten()
            .fold(0.0, |acc, v| acc + (v - mean).powi(2));
        let known = s.values.iter().flatten().count();
        if known == 0 {
            continue;
        }
        sigmas.push(squares / known as f64);
        list.push(s);
    }
    let mut keyed: Vec<(f64, Series)> = sigmas.into_iter().zip(list).collect();
    keyed.sort_by(|x, y| y.0.total_cmp(&x.0));
    Ok(first(keyed.into_iter().map(|(_, s)| s).collect(), n))
}

/// `sortBy(seriesList, func="average", reverse=false)`.
pub(super) fn sort_by(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let agg = a.agg_or(1, AggFunc::Average)?;
    let reverse = a.sort_reverse_or(2, false)?;
    let mut list = a.series(0, cx)?;
    sort_by_agg(&mut list, agg, reverse);
    Ok(list)
}

/// `sortByTotal` (sum, descending) and `sortByMaxima` (max, descending).
pub(super) fn sort_descending(a: &Args<'_>, cx: &Context<'_>, agg: AggFunc) -> Result<Vec<Series>> {
    let mut list = a.series(0, cx)?;
    sort_by_agg(&mut list, agg, true);
    Ok(list)
}

/// `sortByMinima(seriesList)`: the series with a maximum above 0, by their minimum.
pub(super) fn sort_by_minima(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let mut list = a.series(0, cx)?;
    list.retain(|s| AggFunc::Max.reduce(&s.values).unwrap_or(0.0) > 0.0);
    sort_by_agg(&mut list, AggFunc::Min, false);
    Ok(list)
}

/// `sortByName(seriesList, natural=false, reverse=false)`: by name, numbers compared as
/// numbers when `natural`.
pub(super) fn sort_by_name(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let natural = a.boolean_or(1, false)?;
    let reverse = a.sort_reverse_or(2, false)?;
    let mut list = a.series(0, cx)?;
    let digits = regex::Regex::new(r"\d+").expect("a valid regex");
    let natural_key = |name: &str| {
        digits
            .replace_all(name, |c: &regex::Captures<'_>| {
                let n: u128 = c[0].parse().unwrap_or(u128::MAX);
                format!("{n:010}")
            })
            .into_owned()
    };
    let mut keyed: Vec<(String, Series)> = (list.drain(..))
        .map(|s| {
            let k = if natural {
                natural_key(&s.name)
            } else {
                s.name.clone()
            };
            (k, s)
        })
        .collect();
    keyed.sort_by(|x, y| match reverse {
        false => x.0.cmp(&y.0),
        true => y.0.cmp(&x.0),
    });
    Ok(keyed.into_iter().map(|(_, s)| s).collect())
}

/// `unique(*seriesLists)`: the first series of each name.
pub(super) fn unique(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let mut seen = std::collections::HashSet::new();
    let mut list = a.series_from(0, cx)?;
    list.retain(|s| seen.insert(s.name.clone()));
    Ok(list)
}

/// `fallbackSeries(seriesList, fallback)`: the list, or the fallback when it is empty.
pub(super) fn fallback_series(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let list = a.series(0, cx)?;
    if list.is_empty() {
        a.series(1, cx)
    } else {
        Ok(list)
    }
}

/// `averageOutsidePercentile(seriesList, n)`: the series whose average is outside the n-th
/// and (100-n)-th percentiles of the averages.
pub(super) fn average_outside_percentile(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let mut n = a.number(1)?;
    if n < 50.0 {
        n = 100.0 - n;
    }
    let list = a.series(0, cx)?;
    let averages: Vec<Option<f64>> = list
        .iter()
        .map(|s| AggFunc::Average.reduce(&s.values))
        .collect();
    let mut sorted: Vec<f64> = averages.iter().flatten().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let (Some(low), Some(high)) = (
        percentile(&sorted, 100.0 - n, false),
        percentile(&sorted, n, false),
    ) else {
        return Ok(list);
    };
    Ok((list.into_iter().zip(averages))
        .filter(|(_, avg)| !avg.is_some_and(|avg| low < avg && avg < high))
        .map(|(s, _)| s)
        .collect())
}

/// `removeBetweenPercentile(seriesList, n)`: the series with a point outside the n-th and
/// (100-n)-th percentiles of the values at that point across the series.
pub(super) fn remove_between_percentile(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let mut n = a.number(1)?;
    if n < 50.0 {
        n = 100.0 - n;
    }
    let mut list = a.series(0, cx)?;
    let width = list.iter().map(|s| s.values.len()).min().unwrap_or(0);
    let mut column = Vec::new();
    let bounds: Vec<(Option<f64>, Option<f64>)> = (0..width)
        .map(|i| {
            column.clear();
            column.extend(list.iter().filter_map(|s| s.values[i]));
            column.sort_by(f64::total_cmp);
            (
                percentile(&column, 100.0 - n, false),
                percentile(&column, n, false),
            )
        })
        .collect();
    list.retain(|s| {
        (s.values.iter().zip(&bounds)).any(|(v, (low, high))| match (v, low, high) {
            (Some(v), Some(low), Some(high)) => !(low < v && v < high),
            _ => true,
        })
    });
    Ok(list)
}

/// `useSeriesAbove(seriesList, value, search, replace)`: for each series whose maximum is
/// above `value`, the series named by replacing `search` in its name, fetched.
pub(super) fn use_series_above(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let value = a.number(1)?;
    let search = regex(a, 2)?;
    let replace = super::replacement(a.string(3)?);
    let names: Vec<String> = (a.series(0, cx)?.iter())
        .filter(|s| {
            AggFunc::Max
                .reduce(&s.values)
                .is_some_and(|max| max > value)
        })
        .map(|s| search.replace_all(&s.name, replace.as_str()).into_owned())
        .collect();
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let target = format!("group({})", names.join(","));
    let expr = crate::render::expr::parse_target(&target)
        .map_err(|e| a.wrong(3, &format!("makes {target:?}, which does not parse: {e}")))?;
    let mut list = super::eval(&expr, cx)?;
    list.retain(|s| !s.values.is_empty());
    Ok(list)
}
