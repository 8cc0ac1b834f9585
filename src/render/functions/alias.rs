//! graphite-web's Alias family and its name-only Special functions: they rename series and
//! leave their values (and stored buckets) alone. `alias` and `aliasByNode` keep the path
//! expression, as graphite-web's do, so sumSeries over them still names the paths.

use super::{agg_key, regex, replacement, Args, Context, Node};
use crate::error::Result;
use crate::render::aggfunc::AggFunc;
use crate::render::python::str_float;
use crate::render::series::Series;

/// The series of argument 0 with each name rewritten by `rename`.
fn renamed(
    a: &Args<'_>,
    cx: &Context<'_>,
    mut rename: impl FnMut(&Series) -> String,
) -> Result<Vec<Series>> {
    Ok((a.series(0, cx)?.into_iter())
        .map(|mut s| {
            s.name = rename(&s);
            s
        })
        .collect())
}

/// `alias(seriesList, newName)`.
pub(super) fn alias(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let alias = a.string(1)?;
    renamed(a, cx, |_| alias.to_owned())
}

/// `aliasSub(seriesList, search, replace)`: a regex replacement in each name, `\1` and
/// kin referring to groups.
pub(super) fn alias_sub(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let regex = regex(a, 1)?;
    let replacement = replacement(a.string(2)?);
    renamed(a, cx, |s| {
        regex
            .replace_all(&s.name, replacement.as_str())
            .into_owned()
    })
}

/// `aliasByNode(seriesList, *nodes)` and `aliasByTags(seriesList, *tags)`: the name made of
/// the given nodes (or tags) of the first path in it.
pub(super) fn alias_by_node(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let nodes: Vec<Node> = a.nodes_from(1)?;
    renamed(a, cx, |s| agg_key(s, &nodes))
}

/// `aliasByMetric(seriesList)`: the last node of the innermost path in the name.
pub(super) fn alias_by_metric(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    renamed(a, cx, |s| substr_name(&s.name, -1, 0))
}

/// `substr(seriesList, start=0, stop=0)`: the nodes `start..stop` (Python slice bounds, 0
/// for the end) of the innermost path in the name.
pub(super) fn substr(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let start = a.int_or(1, 0)?;
    let stop = a.int_or(2, 0)?;
    renamed(a, cx, |s| substr_name(&s.name, start, stop))
}

/// graphite-web's substr on one name: the text between the last `(` and the first `)`, its
/// nodes sliced, anything from a `,` on dropped.
fn substr_name(name: &str, start: i64, stop: i64) -> String {
    let left = name.rfind('(').map_or(0, |i| i + 1);
    let right = name.find(')').unwrap_or(name.len());
    let clean = if left <= right {
        &name[left..right]
    } else {
        ""
    };
    let nodes: Vec<&str> = clean.split('.').collect();
    let len = nodes.len() as i64;
    let bound = |i: i64| (if i < 0 { len + i } else { i }).clamp(0, len) as usize;
    let (from, to) = (
        bound(start),
        if stop == 0 { nodes.len() } else { bound(stop) },
    );
    let joined = if from < to {
        nodes[from..to].join(".")
    } else {
        String::new()
    };
    match joined.find(',') {
        Some(comma) => joined[..comma].to_owned(),
        None => joined,
    }
}

/// Python's `%s` of an aggregation's answer: `None`, a count as a whole number, else
/// `str(float)`.
fn py_value(agg: AggFunc, value: Option<f64>) -> String {
    match value {
        None => "None".into(),
        Some(v) if agg == AggFunc::Count => format!("{}", v as i64),
        Some(v) => str_float(v),
    }
}

/// `legendValue(seriesList, *valueTypes)`: ` (type: value)` appended to each name per type;
/// `(?)` for a type that is not an aggregation. The `si` and `binary` unit systems are
/// refused.
pub(super) fn legend_value(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let types: Vec<&str> = (1..a.len()).map(|i| a.string(i)).collect::<Result<_>>()?;
    if let Some(i) = types.iter().position(|t| matches!(*t, "si" | "binary")) {
        return Err(a.wrong(
            i + 1,
            "is a unit system, which tierdb does not format legends in",
        ));
    }
    renamed(a, cx, |s| {
        let mut name = s.name.clone();
        for t in &types {
            let value = match AggFunc::parse(t) {
                Some(agg) => py_value(agg, agg.reduce(&s.values)),
                None => "(?)".into(),
            };
            name.push_str(&format!(" ({t}: {value})"));
        }
        name
    })
}

/// `cactiStyle(seriesList, system, units)`: names padded to columns with the current, max
/// and min value to two decimals, and `units` after them. The `si` and `binary` systems
/// are refused.
pub(super) fn cacti_style(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    if a.has(1) && !a.path_is_none(1) {
        return Err(a.wrong(
            1,
            "is a unit system, which tierdb does not format legends in",
        ));
    }
    let units = if a.has(2) { Some(a.string(2)?) } else { None };
    let fmt = |x: f64| match units {
        Some(u) => format!("{x:.2} {u}"),
        None => format!("{x:.2}"),
    };
    let list = a.series(0, cx)?;
    // graphite-web sizes each column by the whole parts of the values (3 when missing or 0).
    let width = |agg: AggFunc| {
        (list.iter())
            .map(|s| {
                let v = agg.reduce(&s.values).filter(|v| *v != 0.0).unwrap_or(3.0);
                fmt(v.trunc()).len()
            })
            .max()
            .unwrap_or(0)
            + 3
    };
    let name_len = list.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let (last_len, max_len, min_len) = (
        width(AggFunc::Last),
        width(AggFunc::Max),
        width(AggFunc::Min),
    );
    let cell = |agg: AggFunc, s: &Series| agg.reduce(&s.values).map_or("nan".into(), fmt);
    Ok((list.iter())
        .map(|s| {
            let name = format!(
                "{:<name_len$} Current:{:<last_len$} Max:{:<max_len$} Min:{:<min_len$} ",
                s.name,
                cell(AggFunc::Last, s),
                cell(AggFunc::Max, s),
                cell(AggFunc::Min, s),
            );
            Series { name, ..s.clone() }
        })
        .collect())
}

/// Graph styling that only sets an option in graphite-web (color, alpha, lineWidth): the
/// series unchanged.
pub(super) fn unchanged(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    a.series(0, cx)
}

/// Graph styling that also renames (`secondYAxis(name)`, `drawAsInfinite(name)`), keeping
/// the path expression.
pub(super) fn styled(a: &Args<'_>, cx: &Context<'_>, func: &str) -> Result<Vec<Series>> {
    renamed(a, cx, |s| format!("{func}({})", s.name))
}

/// `dashed(seriesList, dashLength=5)`: renamed `dashed(name, length)`.
pub(super) fn dashed(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let length = a.number_or(1, 5.0)?;
    renamed(a, cx, |s| {
        format!(
            "dashed({}, {})",
            s.name,
            crate::render::python::format_g(length)
        )
    })
}

/// `areaBetween(seriesList)`: exactly two series, both named `areaBetween(path)` after the
/// second's path expression (graphite-web draws the area between them).
pub(super) fn area_between(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let mut list = a.series(0, cx)?;
    if list.len() != 2 {
        return Err(a.wrong(
            0,
            &format!("must hold exactly 2 series, not {}", list.len()),
        ));
    }
    let name = format!("areaBetween({})", list[1].path_expression);
    for s in &mut list {
        s.name = name.clone();
    }
    Ok(list)
}
