//! graphite-web's Combine family: functions that make one series of many, point by point
//! (sumSeries and kin, `aggregate`, the `*WithWildcards`, `groupByNode(s)`, `divideSeries`,
//! `asPercent`, `percentileOfSeries`, `countSeries`, the `*SeriesLists`), and `group` and
//! `applyByNode`. Series of different steps are first consolidated to their least common
//! multiple, as graphite-web's `normalize` does.

use super::{agg_key, distinct, Args, Context, Node};
use crate::error::Result;
use crate::read::aggregate::Aggregation;
use crate::read::query::MAX_QUERY_POINTS;
use crate::render::aggfunc::AggFunc;
use crate::render::expr::{parse_target, Expr};
use crate::render::path::PathPattern;
use crate::render::python::format_g;
use crate::render::series::{enough_known, Series};
use crate::time::lcm;

/// The grid of a combined series: start, end and step.
type Grid = (i64, i64, i64);

/// sumSeries and kin (`name` is graphite-web's, such as `sumSeries`): every argument a series
/// list, `agg` of their values point by point, nulls skipped, named after the distinct path
/// expressions of the series. Over plain paths the source may answer in one pass
/// ([`crate::render::Source::combine`]).
pub(super) fn series_function(
    name: &str,
    agg: AggFunc,
    a: &Args<'_>,
    cx: &Context<'_>,
) -> Result<Vec<Series>> {
    // The source's one pass knows no xFilesFactor.
    if a.request_xff() == 0.0 {
        if let Some(combined) = combine_stored(name, agg, a, cx)? {
            return Ok(combined);
        }
    }
    let list = a.series_from(0, cx)?;
    aggregate(name, agg, list, a)
}

/// `aggregate(seriesList, func, xFilesFactor)`: as the `<func>Series` function, `func`
/// written with or without its `Series` suffix.
pub(super) fn aggregate_call(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let (name, agg) = agg_named(a, 1)?;
    let list = a.series(0, cx)?;
    let xff = a.opt_number(2)?.unwrap_or(a.request_xff());
    aggregate_xff(&name, agg, list, a, xff)
}

/// The aggregation an argument names, and the name of its result (`sumSeries` for `sum` and
/// `sumSeries`, `avgSeries` for `avg`, as graphite-web names it).
fn agg_named(a: &Args<'_>, i: usize) -> Result<(String, AggFunc)> {
    let raw = a.string(i)?;
    let func = raw.strip_suffix("Series").unwrap_or(raw);
    let agg = AggFunc::parse(func).ok_or_else(|| a.unknown_agg(i, raw))?;
    Ok((format!("{func}Series"), agg))
}

/// graphite-web's `aggregate` over `list`: nothing for no series, else one series named
/// `name(path expressions)`. A counter only when every input is one and `agg` keeps
/// increases (sum, average, max, min). The request's xFilesFactor decides how many of a
/// point's series must be known.
pub(super) fn aggregate(
    name: &str,
    agg: AggFunc,
    list: Vec<Series>,
    a: &Args<'_>,
) -> Result<Vec<Series>> {
    aggregate_xff(name, agg, list, a, a.request_xff())
}

/// [`aggregate`] where a point is null unless at least `xff` of its row (the share of the
/// series with a value there) is known, as graphite-web's xFilesFactor argument asks.
fn aggregate_xff(
    name: &str,
    agg: AggFunc,
    list: Vec<Series>,
    a: &Args<'_>,
    xff: f64,
) -> Result<Vec<Series>> {
    if list.is_empty() {
        return Ok(Vec::new());
    }
    let counter = list.iter().all(|s| s.counter)
        && matches!(
            agg,
            AggFunc::Sum | AggFunc::Average | AggFunc::Max | AggFunc::Min
        );
    let expressions = distinct(list.iter().map(|s| s.path_expression.as_str())).join(",");
    let (grid, values) = rows(list, a, |row| {
        let known = row.iter().flatten().count();
        (enough_known(known, row.len() as f64, xff))
            .then(|| agg.reduce(row))
            .flatten()
    })?;
    let mut series = Series::new(format!("{name}({expressions})"), grid, values);
    series.counter = counter;
    Ok(vec![series])
}

/// graphite-web's `normalize` and row-wise reduction: every series consolidated to the least
/// common multiple of the steps, then `reduce` of each row (one value per series, null where
/// a series has none) from the earliest start; the grid ends where normalize ends it.
fn rows(
    list: Vec<Series>,
    a: &Args<'_>,
    mut reduce: impl FnMut(&[Option<f64>]) -> Option<f64>,
) -> Result<(Grid, Vec<Option<f64>>)> {
    let step = (list.iter())
        .try_fold(1, |l, s| lcm(l, s.step))
        .ok_or_else(|| {
            a.invalid("the series' steps have no common multiple that fits in 64 bits")
        })?;
    let list: Vec<Series> = (list.into_iter())
        .map(|s| s.consolidate_to(step))
        .collect::<Result<_>>()?;
    let start = list.iter().map(|s| s.start).min().unwrap_or(0);
    let end = list.iter().map(|s| s.end).max().unwrap_or(start);
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
    let mut row = Vec::with_capacity(list.len());
    let values = (0..slots as i64)
        .map(|i| {
            let at = start + i * step;
            row.clear();
            row.extend(list.iter().map(|s| value_at(s, at)));
            reduce(&row)
        })
        .collect();
    Ok(((start, end - (end - start).rem_euclid(step), step), values))
}

/// The value of `s` at stamp `at`; null off its grid.
fn value_at(s: &Series, at: i64) -> Option<f64> {
    let offset = at - s.start;
    if offset < 0 || offset % s.step != 0 {
        return None;
    }
    s.values.get((offset / s.step) as usize).copied().flatten()
}

/// sumSeries and kin answered by the source in one pass, when every argument is a plain
/// path and the source can; `None` to fetch and combine instead.
fn combine_stored(
    name: &str,
    agg: AggFunc,
    a: &Args<'_>,
    cx: &Context<'_>,
) -> Result<Option<Vec<Series>>> {
    let aggregation = match agg {
        AggFunc::Sum => Aggregation::Sum,
        AggFunc::Average => Aggregation::Avg,
        AggFunc::Max => Aggregation::Max,
        AggFunc::Min => Aggregation::Min,
        _ => return Ok(None),
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
    let name = format!("{name}({})", expressions.join(","));
    let mut series = Series::new(name, (start, end, step), combined.values);
    series.counter = combined.counter;
    Ok(Some(vec![series]))
}

/// `countSeries(*seriesLists)`: how many series there are, at every point; a constant line
/// of 0 named `0.0` without arguments.
pub(super) fn count_series(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    if a.len() == 0 {
        let mut zero = super::special::constant(0.0, cx);
        zero.path_expression = "countSeries()".to_owned();
        return Ok(vec![zero]);
    }
    let list = a.series_from(0, cx)?;
    if list.is_empty() {
        return Ok(Vec::new());
    }
    let count = list.len() as f64;
    let expressions = distinct(list.iter().map(|s| s.path_expression.as_str())).join(",");
    let (grid, values) = rows(list, a, |_| Some(count))?;
    Ok(vec![Series::new(
        format!("countSeries({expressions})"),
        grid,
        values,
    )])
}

/// `percentileOfSeries(seriesList, n, interpolate)`: the n-th percentile of the series'
/// values at each point, named after the first series' path expression.
pub(super) fn percentile_of_series(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let n = a.number(1)?;
    if n <= 0.0 {
        return Err(a.wrong(1, "must be greater than 0"));
    }
    let interpolate = a.boolean_or(2, false)?;
    let list = a.series(0, cx)?;
    let Some(first) = list.first() else {
        return Ok(Vec::new());
    };
    let name = format!(
        "percentileOfSeries({},{})",
        first.path_expression,
        format_g(n)
    );
    let mut sorted = Vec::new();
    let (grid, values) = rows(list, a, |row| {
        sorted.clear();
        sorted.extend(row.iter().flatten());
        sorted.sort_by(f64::total_cmp);
        percentile(&sorted, n, interpolate)
    })?;
    Ok(vec![Series::new(name, grid, values)])
}

/// graphite-web's `_getPercentile` of already sorted known values: the value at rank
/// `ceil(n / 100 * (len + 1))`, or with `interpolate` between the two ranks around it.
pub(super) fn percentile(sorted: &[f64], n: f64, interpolate: bool) -> Option<f64> {
    let (&first, &last) = (sorted.first()?, sorted.last()?);
    let fractional = n / 100.0 * (sorted.len() + 1) as f64;
    let mut rank = fractional as usize;
    let fraction = fractional - rank as f64;
    if !interpolate {
        rank += fraction.ceil() as usize;
    }
    let mut value = match rank {
        0 => first,
        r if r > sorted.len() => last,
        r => sorted[r - 1],
    };
    if interpolate && rank != sorted.len() {
        if let Some(&next) = sorted.get(rank) {
            value += fraction * (next - value);
        }
    }
    Some(value)
}

/// `sumSeriesWithWildcards` and kin, and `aggregateWithWildcards`: series grouped by their
/// names without the nodes at `positions`, each group aggregated and named by that key. A
/// position that is no whole number (`'abc'`, `2.5`, `None`, or a quoted `'1'` that
/// graphite-web's validation leaves a string) removes no node: graphite-web tests each
/// node's index with `in positions`, which Python's `==` answers.
pub(super) fn with_wildcards(
    func: &str,
    agg: AggFunc,
    a: &Args<'_>,
    cx: &Context<'_>,
    first_position: usize,
) -> Result<Vec<Series>> {
    let positions: Vec<i64> = (first_position..a.len())
        .filter_map(|i| match a.expr(i) {
            Expr::Number(n) if n.fract() != 0.0 => None,
            _ => a.int(i).ok(),
        })
        .collect();
    let list = a.series(0, cx)?;
    let groups = group_by(list, |s| {
        (s.name.split('.').enumerate())
            .filter(|(i, _)| !positions.contains(&(*i as i64)))
            .map(|(_, node)| node)
            .collect::<Vec<_>>()
            .join(".")
    });
    let mut out = Vec::new();
    for (key, group) in groups {
        for mut series in aggregate(func, agg, group, a)? {
            series.name = key.clone();
            out.push(series);
        }
    }
    Ok(out)
}

/// `aggregateWithWildcards(seriesList, func, *positions)`.
pub(super) fn aggregate_with_wildcards(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let (name, agg) = agg_named(a, 1)?;
    with_wildcards(&name, agg, a, cx, 2)
}

/// `list` grouped by `key`, groups in order of their first series.
fn group_by(
    list: Vec<Series>,
    mut key: impl FnMut(&Series) -> String,
) -> Vec<(String, Vec<Series>)> {
    let mut groups: Vec<(String, Vec<Series>)> = Vec::new();
    for series in list {
        let k = key(&series);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(series),
            None => groups.push((k, vec![series])),
        }
    }
    groups
}

/// What a `groupByNode` callback does with each group.
enum Callback {
    /// `aggregate` with this function, its result named `<name>(...)` until renamed.
    Aggregate(String, AggFunc),
    /// countSeries: the number of series.
    Count,
    /// multiplySeries, which hands a lone series back unchanged.
    Multiply,
}

/// A callback argument: an aggregation name (`sum`, `average`, ...) or a series function
/// that aggregates (`sumSeries`, `countSeries`, ...).
fn callback(a: &Args<'_>, i: usize) -> Result<Callback> {
    let name = a.string(i)?;
    match name {
        "countSeries" => return Ok(Callback::Count),
        "multiplySeries" => return Ok(Callback::Multiply),
        _ => {}
    }
    let series_function = match name.strip_suffix("Series") {
        Some(func @ ("sum" | "average" | "min" | "max" | "diff" | "stddev" | "rangeOf")) => {
            Some(func)
        }
        _ => None,
    };
    let func = series_function.unwrap_or(name);
    match AggFunc::parse(func) {
        Some(agg) if series_function.is_some() || !name.ends_with("Series") => {
            Ok(Callback::Aggregate(format!("{func}Series"), agg))
        }
        _ => Err(a.wrong(
            i,
            &format!(
                "is {name:?}: tierdb groups with an aggregation function ({}) or sumSeries, \
                 averageSeries, minSeries, maxSeries, diffSeries, stddevSeries, \
                 rangeOfSeries, multiplySeries or countSeries",
                crate::render::aggfunc::AGG_FUNC_NAMES.join(", ")
            ),
        )),
    }
}

/// `groupByNode(seriesList, nodeNum, callback)` and `groupByNodes(seriesList, callback,
/// *nodes)`: series grouped by the nodes (or tags) of their first path, each group combined
/// by the callback and named by the key.
pub(super) fn group_by_nodes(
    a: &Args<'_>,
    cx: &Context<'_>,
    nodes: Vec<Node>,
    callback_at: Option<usize>,
) -> Result<Vec<Series>> {
    let callback = match callback_at {
        Some(i) => callback(a, i)?,
        None => Callback::Aggregate("averageSeries".into(), AggFunc::Average),
    };
    if let Some(out) = group_by_node_stored(a, cx, &nodes, &callback)? {
        return Ok(out);
    }
    let list = a.series(0, cx)?;
    let groups = group_by(list, |s| agg_key(s, &nodes));
    let mut out = Vec::new();
    for (key, group) in groups {
        let combined = combine_group(&callback, group, a, |group| {
            let expressions = distinct(group.iter().map(|s| s.path_expression.as_str()));
            format!("countSeries({})", expressions.join(","))
        })?;
        out.extend(combined.map(|mut s| {
            s.name = key.clone();
            s
        }));
    }
    Ok(out)
}

/// One group combined by `callback`: the first series of the result; a count is named by
/// `count_name` of the group.
fn combine_group(
    callback: &Callback,
    group: Vec<Series>,
    a: &Args<'_>,
    count_name: impl FnOnce(&[Series]) -> String,
) -> Result<Option<Series>> {
    let combined = match callback {
        Callback::Aggregate(name, agg) => aggregate(name, *agg, group, a)?,
        Callback::Multiply if group.len() == 1 => group,
        Callback::Multiply => aggregate("multiplySeries", AggFunc::Multiply, group, a)?,
        Callback::Count => {
            let count = group.len() as f64;
            let name = count_name(&group);
            let (grid, values) = rows(group, a, |_| Some(count))?;
            vec![Series::new(name, grid, values)]
        }
    };
    Ok(combined.into_iter().next())
}

/// groupByNode by one name node over a plain path with sum, average, max or min, answered
/// by the source without fetching: the matched names split into groups by the node, each
/// group (the path with that node's value in place of its glob) folded in the aggregate's
/// one pass ([`crate::render::Source::combine`]). `None` to fetch and group instead: another
/// form, or a source that cannot list names or fold a group (a cluster node, counters mixed
/// with gauges).
fn group_by_node_stored(
    a: &Args<'_>,
    cx: &Context<'_>,
    nodes: &[Node],
    callback: &Callback,
) -> Result<Option<Vec<Series>>> {
    let (Callback::Aggregate(name, agg), [Node::Index(index)], Expr::Path(path)) =
        (callback, nodes, a.expr(0))
    else {
        return Ok(None);
    };
    // The source's one pass knows no xFilesFactor.
    if a.request_xff() != 0.0 {
        return Ok(None);
    }
    let aggregation = match agg {
        AggFunc::Sum => Aggregation::Sum,
        AggFunc::Average => Aggregation::Avg,
        AggFunc::Max => Aggregation::Max,
        AggFunc::Min => Aggregation::Min,
        _ => return Ok(None),
    };
    let pattern = PathPattern::parse(path)?;
    let depth = pattern.depth() as i64;
    let index = if *index < 0 { depth + index } else { *index };
    let Ok(index) = usize::try_from(index) else {
        return Ok(None);
    };
    let Some(names) = cx.source.names(&pattern)? else {
        return Ok(None);
    };
    let mut keys: Vec<&str> = Vec::new();
    for name in &names {
        let bare = name.split(';').next().unwrap_or_default();
        let Some(key) = bare.split('.').nth(index) else {
            return Ok(None);
        };
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let Some(group) = pattern.with_segment(index, key) else {
            return Ok(None);
        };
        let Some(combined) = (cx.source).combine(&[group], aggregation, cx.from, cx.until)? else {
            return Ok(None);
        };
        if combined.values.is_empty() {
            // Nothing to read in the range (after the clock, before every tier).
            continue;
        }
        let (start, step) = (combined.start, combined.step.max(1));
        let end = start + combined.values.len() as i64 * step;
        let mut series = Series::new(key.to_owned(), (start, end, step), combined.values);
        series.path_expression = format!("{name}({path})");
        series.counter = combined.counter;
        out.push(series);
    }
    Ok(Some(out))
}

/// `groupByNode(seriesList, nodeNum, callback="average")`.
pub(super) fn group_by_node(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let nodes = vec![a.node(1)?];
    let callback = a.has(2).then_some(2);
    group_by_nodes(a, cx, nodes, callback)
}

/// `groupByNodes(seriesList, callback, *nodes)`.
pub(super) fn group_by_nodes_call(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let nodes = a.nodes_from(2)?;
    group_by_nodes(a, cx, nodes, Some(1))
}

/// Two series zipped point by point after consolidating both to a common step, as
/// divideSeries, asPercent and the `*SeriesLists` do: by position from each one's start, the
/// grid from the earlier start to the later end, named `func(x,y)`.
fn zip_pair(
    func: &str,
    x: Series,
    y: Series,
    a: &Args<'_>,
    f: impl Fn(Option<f64>, Option<f64>) -> Option<f64>,
) -> Result<Series> {
    let name = format!("{func}({},{})", x.name, y.name);
    let step = lcm(x.step, y.step).ok_or_else(|| {
        a.invalid("the series' steps have no common multiple that fits in 64 bits")
    })?;
    let (x, y) = (x.consolidate_to(step)?, y.consolidate_to(step)?);
    let start = x.start.min(y.start);
    let end = x.end.max(y.end);
    let len = x.values.len().max(y.values.len());
    let at = |s: &Series, i: usize| s.values.get(i).copied().flatten();
    let values = (0..len).map(|i| f(at(&x, i), at(&y, i))).collect();
    let grid: Grid = (start, end - (end - start).rem_euclid(step), step);
    Ok(Series::new(name, grid, values))
}

/// graphite-web's `safeDiv`: null for a null dividend or a null or zero divisor.
fn safe_div(x: Option<f64>, y: Option<f64>) -> Option<f64> {
    match (x, y) {
        (Some(x), Some(y)) if y != 0.0 => Some(x / y),
        _ => None,
    }
}

/// `divideSeries(dividendSeriesList, divisorSeries)`: each dividend over the one divisor;
/// every value null, named `divideSeries(name,MISSING)`, when the divisor matched nothing.
pub(super) fn divide_series(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let dividends = a.series(0, cx)?;
    let mut divisors = a.series(1, cx)?;
    if divisors.is_empty() {
        return Ok((dividends.into_iter())
            .map(|s| {
                let name = format!("divideSeries({},MISSING)", s.name);
                s.mapped(name, |_| None)
            })
            .collect());
    }
    if divisors.len() > 1 {
        return Err(a.wrong(
            1,
            &format!("must reference exactly 1 series (got {})", divisors.len()),
        ));
    }
    let divisor = divisors.remove(0);
    (dividends.into_iter())
        .map(|dividend| zip_pair("divideSeries", dividend, divisor.clone(), a, safe_div))
        .collect()
}

/// `divideSeriesLists(dividendSeriesList, divisorSeriesList)`: pairwise, in order.
pub(super) fn divide_series_lists(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let (xs, ys) = equal_lists(a, cx)?;
    (xs.into_iter().zip(ys))
        .map(|(x, y)| zip_pair("divideSeries", x, y, a, safe_div))
        .collect()
}

/// The two series-list arguments of a `*SeriesLists` function, of equal length.
fn equal_lists(a: &Args<'_>, cx: &Context<'_>) -> Result<(Vec<Series>, Vec<Series>)> {
    let (xs, ys) = (a.series(0, cx)?, a.series(1, cx)?);
    if xs.len() != ys.len() {
        return Err(a.invalid(&format!(
            "the two series lists must have equal length (got {} and {})",
            xs.len(),
            ys.len()
        )));
    }
    Ok((xs, ys))
}

/// `sumSeriesLists`, `diffSeriesLists`, `multiplySeriesLists` and `aggregateSeriesLists`:
/// `agg` of each pair, named `<func>Series(first,second)`.
pub(super) fn series_lists(
    name: &str,
    agg: AggFunc,
    a: &Args<'_>,
    cx: &Context<'_>,
) -> Result<Vec<Series>> {
    series_lists_xff(name, agg, a, cx, None)
}

/// [`series_lists`] with an xFilesFactor, the request's when `None`.
fn series_lists_xff(
    name: &str,
    agg: AggFunc,
    a: &Args<'_>,
    cx: &Context<'_>,
    xff: Option<f64>,
) -> Result<Vec<Series>> {
    let (xs, ys) = equal_lists(a, cx)?;
    let xff = xff.unwrap_or(a.request_xff());
    let mut out = Vec::new();
    for (x, y) in xs.into_iter().zip(ys) {
        let pair_name = format!("{name}({},{})", x.name, y.name);
        for mut series in aggregate_xff(name, agg, vec![x, y], a, xff)? {
            series.name = pair_name.clone();
            out.push(series);
        }
    }
    Ok(out)
}

/// `aggregateSeriesLists(first, second, func, xFilesFactor)`.
pub(super) fn aggregate_series_lists(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let (name, agg) = agg_named(a, 2)?;
    let xff = a.opt_number(3)?;
    series_lists_xff(&name, agg, a, cx, xff)
}

/// `group(*seriesLists)`: the lists joined.
pub(super) fn group(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    a.series_from(0, cx)
}

/// graphite-web's `safeMul(safeDiv(value, total), 100)`.
fn percent(value: Option<f64>, total: Option<f64>) -> Option<f64> {
    safe_div(value, total).map(|q| q * 100.0)
}

/// `asPercent(seriesList, total, *nodes)`: each series as a percentage of the total, which
/// is the sum of the series, a number, one series, or one series per series (matched by
/// name); with nodes, of the total of the series sharing those nodes.
pub(super) fn as_percent(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let list = a.series(0, cx)?;
    let total_arg = a.has(1) && !a.is_none_arg(1);
    if a.len() > 2 {
        let nodes = a.nodes_from(2)?;
        let totals = match total_arg {
            true => Some(a.series(1, cx)?),
            false => None,
        };
        return as_percent_by_nodes(a, list, totals, &nodes);
    }
    if list.is_empty() {
        return Ok(Vec::new());
    }
    enum Total {
        Values(Vec<Option<f64>>, String),
        Number(f64, String),
    }
    let total = match a.arg(1) {
        // `true` too, which is 1 and named `True`, as graphite-web's validation hands it on.
        Some(Expr::Int(_) | Expr::Number(_) | Expr::Bool(_)) => {
            Total::Number(a.number(1)?, a.python_str(1)?)
        }
        Some(_) if total_arg => {
            let mut totals = a.series(1, cx)?;
            if totals.len() == list.len() {
                return matched_percent(a, list, totals);
            }
            if totals.len() != 1 {
                return Err(a.wrong(
                    1,
                    &format!(
                        "must be missing, a number, one series or as many series as the first \
                         argument ({}); it has {}",
                        list.len(),
                        totals.len()
                    ),
                ));
            }
            // graphite-web normalizes the series and the total together first.
            let step = (list.iter().chain(&totals))
                .try_fold(1, |l, s| lcm(l, s.step))
                .ok_or_else(|| a.invalid("steps have no common multiple in 64 bits"))?;
            let total = totals.remove(0);
            let name = total.name.clone();
            let total = total.consolidate_to(step)?;
            let list = (list.into_iter())
                .map(|s| s.consolidate_to(step))
                .collect::<Result<_>>()?;
            return Ok(against(list, &total.values, &name));
        }
        _ => {
            let expressions = distinct(list.iter().map(|s| s.path_expression.as_str())).join(",");
            let width = list.iter().map(|s| s.values.len()).max().unwrap_or(0);
            let mut row = Vec::with_capacity(list.len());
            let sums = (0..width)
                .map(|i| {
                    row.clear();
                    row.extend(list.iter().map(|s| s.values.get(i).copied().flatten()));
                    AggFunc::Sum.reduce(&row)
                })
                .collect();
            Total::Values(sums, format!("sumSeries({expressions})"))
        }
    };
    Ok(match total {
        Total::Values(values, name) => against(list, &values, &name),
        Total::Number(n, text) => (list.into_iter())
            .map(|s| {
                let name = format!("asPercent({},{text})", s.name);
                s.mapped(name, |v| percent(v, Some(n)))
            })
            .collect(),
    })
}

/// Each series of `list` as a percentage of `totals`, point by point by position.
fn against(list: Vec<Series>, totals: &[Option<f64>], total_name: &str) -> Vec<Series> {
    (list.into_iter())
        .map(|s| {
            let name = format!("asPercent({},{total_name})", s.name);
            let len = s.values.len().max(totals.len());
            let values = (0..len)
                .map(|i| {
                    percent(
                        s.values.get(i).copied().flatten(),
                        totals.get(i).copied().flatten(),
                    )
                })
                .collect();
            s.derived(name, values)
        })
        .collect()
}

/// asPercent with one total per series: the two lists sorted by name and paired.
fn matched_percent(
    a: &Args<'_>,
    mut list: Vec<Series>,
    mut totals: Vec<Series>,
) -> Result<Vec<Series>> {
    list.sort_by(|x, y| x.name.cmp(&y.name));
    totals.sort_by(|x, y| x.name.cmp(&y.name));
    (list.into_iter().zip(totals))
        .map(|(x, y)| zip_pair("asPercent", x, y, a, percent))
        .collect()
}

/// asPercent with nodes: series and totals grouped by the nodes; a group's total is its one
/// series or the sum of them; a key with no series or no total gives nulls named `MISSING`.
fn as_percent_by_nodes(
    a: &Args<'_>,
    list: Vec<Series>,
    totals: Option<Vec<Series>>,
    nodes: &[Node],
) -> Result<Vec<Series>> {
    let Some(first) = list.first() else {
        return Ok(Vec::new());
    };
    let grid = (first.start, first.end, first.step);
    let groups = group_by(list, |s| agg_key(s, nodes));
    let mut keys: Vec<String> = groups.iter().map(|(k, _)| k.clone()).collect();
    let total_groups = match totals {
        None => groups.iter().map(|(k, g)| (k.clone(), g.clone())).collect(),
        Some(totals) => {
            let grouped = group_by(totals, |s| agg_key(s, nodes));
            for (k, _) in &grouped {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
            grouped
        }
    };
    let mut total_by_key = Vec::new();
    for (key, group) in total_groups {
        let total = if group.len() == 1 {
            group.into_iter().next().expect("one series")
        } else {
            let expressions = distinct(group.iter().map(|s| s.path_expression.as_str())).join(",");
            let (grid, values) = rows(group, a, |row| AggFunc::Sum.reduce(row))?;
            Series::new(format!("sumSeries({expressions})"), grid, values)
        };
        total_by_key.push((key, total));
    }
    let mut out = Vec::new();
    for key in keys {
        let total = total_by_key.iter().find(|(k, _)| *k == key).map(|(_, t)| t);
        let members = groups.iter().find(|(k, _)| *k == key).map(|(_, g)| g);
        match (members, total) {
            (None, Some(total)) => {
                let name = format!("asPercent(MISSING,{})", total.name);
                out.push(Series::new(name, grid, vec![None; total.values.len()]));
            }
            (Some(members), None) => out.extend(members.iter().map(|s| {
                let name = format!("asPercent({},MISSING)", s.name);
                s.clone().mapped(name, |_| None)
            })),
            (Some(members), Some(total)) => {
                for s in members {
                    out.push(zip_pair("asPercent", s.clone(), total.clone(), a, percent)?);
                }
            }
            (None, None) => {}
        }
    }
    Ok(out)
}

/// `applyByNode(seriesList, nodeNum, templateFunction, newName)`: for each distinct prefix
/// of the names up to node `nodeNum`, the template with `%` replaced by it, evaluated; named
/// `newName` with `%` replaced, when given and true by Python's truth (`None` and `0` are no
/// name, as graphite-web tests it with `if newName:`).
pub(super) fn apply_by_node(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let node = a.int(1)?;
    let template = a.string(2)?;
    let new_name = if a.is_true(3) {
        Some(a.string(3)?)
    } else {
        None
    };
    let list = a.series(0, cx)?;
    let Some(last) = list.last() else {
        return Ok(Vec::new());
    };
    let (start, end) = (last.start, last.end);
    let mut prefixes: Vec<String> = (list.iter())
        .map(|s| {
            let parts: Vec<&str> = s.name.split('.').collect();
            let stop = python_slice_end(node.saturating_add(1), parts.len());
            parts[..stop].join(".")
        })
        .collect();
    prefixes.sort();
    prefixes.dedup();
    let mut out = Vec::new();
    for prefix in prefixes {
        let target = template.replace('%', &prefix);
        let expr = parse_target(&target)
            .map_err(|e| a.wrong(2, &format!("gives {target:?}, which does not parse: {e}")))?;
        for mut series in super::eval(&expr, cx)? {
            if let Some(new_name) = new_name {
                series.name = new_name.replace('%', &prefix);
            }
            series.path_expression = prefix.clone();
            series.start = start;
            series.end = end;
            out.push(series);
        }
    }
    Ok(out)
}

/// Python's `list[:stop]` bound for a list of `len`: negative from the end, clamped.
pub(super) fn python_slice_end(stop: i64, len: usize) -> usize {
    let len = len as i64;
    let stop = if stop < 0 {
        (len + stop).max(0)
    } else {
        stop.min(len)
    };
    stop as usize
}

/// `powSeries(*seriesLists)`: at each point the first series' value raised to the second's,
/// that to the third's, and so on; null where any is (or where the power has no real value).
pub(super) fn pow_series(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let list = a.series_from(0, cx)?;
    if list.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = list.iter().map(|s| s.name.as_str()).collect();
    let name = format!("powSeries({})", names.join(","));
    let (grid, values) = rows(list, a, |row| {
        let (first, rest) = row.split_first()?;
        rest.iter().try_fold((*first)?, |acc, v| {
            let p = acc.powf((*v)?);
            p.is_finite().then_some(p)
        })
    })?;
    Ok(vec![Series::new(name, grid, values)])
}

/// `weightedAverage(seriesListAvg, seriesListWeight, *nodes)`: the sum of value × weight over
/// the sum of the weights, series paired by their nodes.
pub(super) fn weighted_average(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let (averages, weights) = (a.series(0, cx)?, a.series(1, cx)?);
    if averages.len() != weights.len() {
        return Err(a.invalid(&format!(
            "takes as many series to average as weights (got {} and {})",
            averages.len(),
            weights.len()
        )));
    }
    let nodes = a.nodes_from(2)?;
    let mut pairs: Vec<(String, Option<&Series>, Option<&Series>)> = Vec::new();
    let mut slot = |key: String| -> usize {
        match pairs.iter().position(|(k, _, _)| *k == key) {
            Some(i) => i,
            None => {
                pairs.push((key, None, None));
                pairs.len() - 1
            }
        }
    };
    let mut placed = Vec::new();
    for (avg, weight) in averages.iter().zip(&weights) {
        placed.push((slot(agg_key(avg, &nodes)), true, avg));
        placed.push((slot(agg_key(weight, &nodes)), false, weight));
    }
    for (i, is_avg, s) in placed {
        if is_avg {
            pairs[i].1 = Some(s);
        } else {
            pairs[i].2 = Some(s);
        }
    }
    let products: Vec<Series> = (pairs.iter())
        .filter_map(|(_, avg, weight)| Some((avg.as_ref()?, weight.as_ref()?)))
        .map(|(avg, weight)| {
            let len = avg.values.len().max(weight.values.len());
            let at = |s: &Series, i: usize| s.values.get(i).copied().flatten();
            let values = (0..len)
                .map(|i| Some(at(avg, i)? * at(weight, i)?))
                .collect();
            Series::new(
                format!("product({},{})", weight.name, avg.name),
                (avg.start, avg.end, avg.step),
                values,
            )
        })
        .collect();
    if products.is_empty() {
        return Ok(Vec::new());
    }
    let sorted_expressions = |list: &[Series]| {
        let mut expressions: Vec<&str> = list.iter().map(|s| s.path_expression.as_str()).collect();
        expressions.sort_unstable();
        expressions.dedup();
        expressions.join(",")
    };
    let node_text: Vec<String> = (nodes.iter())
        .map(|n| match n {
            Node::Index(i) => i.to_string(),
            Node::Tag(t) => t.clone(),
        })
        .collect();
    let name = format!(
        "weightedAverage({}, {}, {})",
        sorted_expressions(&averages),
        sorted_expressions(&weights),
        node_text.join(",")
    );
    let sum = |list: Vec<Series>| -> Result<Series> {
        let mut out = aggregate("sumSeries", AggFunc::Sum, list, a)?;
        Ok(out.remove(0))
    };
    let (products, weights) = (sum(products)?, sum(weights)?);
    let len = products.values.len().max(weights.values.len());
    let at = |s: &Series, i: usize| s.values.get(i).copied().flatten();
    let values = (0..len)
        .map(|i| safe_div(at(&products, i), at(&weights, i)))
        .collect();
    Ok(vec![Series::new(
        name,
        (products.start, products.end, products.step),
        values,
    )])
}

/// The tags of a series as graphite-web keeps them: `name` and each `;k=v` of the first path
/// in its name.
fn tags_of(series: &Series) -> Vec<(String, String)> {
    let path = super::first_path_expression(&series.name);
    let mut parts = path.split(';');
    let mut tags = vec![(
        "name".to_owned(),
        parts.next().unwrap_or_default().to_owned(),
    )];
    tags.extend(parts.filter_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        Some((k.to_owned(), v.to_owned()))
    }));
    tags
}

/// `groupByTags(seriesList, callback, *tags)`: series grouped by the values of the tags,
/// each group combined by the callback and named as a tagged series: the common `name` (or
/// the callback's name when the names differ, unless `name` is one of the tags) and
/// `;tag=value` for each tag, sorted.
pub(super) fn group_by_tags(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let callback_name = a.string(1)?;
    let callback = callback(a, 1)?;
    let tags: Vec<&str> = (2..a.len()).map(|i| a.string(i)).collect::<Result<_>>()?;
    let list = a.series(0, cx)?;
    let value = |s: &Series, tag: &str| {
        (tags_of(s).into_iter())
            .find(|(k, _)| k == tag)
            .map_or_else(String::new, |(_, v)| v)
    };
    let by_name = tags.contains(&"name");
    let mut names: Vec<String> = list.iter().map(|s| value(s, "name")).collect();
    names.sort();
    names.dedup();
    let common = match names.as_slice() {
        [one] => one.clone(),
        _ => callback_name.to_owned(),
    };
    let groups = group_by(list, |s| {
        let mut pairs: Vec<String> = (tags.iter())
            .filter(|t| **t != "name")
            .map(|t| format!("{t}={}", value(s, t)))
            .collect();
        pairs.sort();
        let head = if by_name {
            value(s, "name")
        } else {
            common.clone()
        };
        std::iter::once(head)
            .chain(pairs)
            .collect::<Vec<_>>()
            .join(";")
    });
    let mut out = Vec::new();
    for (key, group) in groups {
        let combined = combine_group(&callback, group, a, |_| key.clone())?;
        out.extend(combined.map(|mut s| {
            s.name = key.clone();
            s.path_expression = key.clone();
            s
        }));
    }
    Ok(out)
}
