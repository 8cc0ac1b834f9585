//! graphite-web's Alias family and its name-only Special functions: they rename series and
//! leave their values (and stored buckets) alone. `alias` and `aliasByNode` keep the path
//! expression, as graphite-web's do, so sumSeries over them still names the paths.

use super::{agg_key, regex, replacement, Args, Context, Node};
use crate::error::Result;
use crate::render::aggfunc::AggFunc;
use crate::render::python::{percent_format, str_float};
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

/// `alias(seriesList, newName)`. An unquoted name (`alias(x, 5)`) is Python's `str` of it,
/// as graphite-web's raw, csv and pickle answers write it (its json writes the bare value:
/// `"target": 5` where tierdb writes `"5"`).
pub(super) fn alias(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let alias = a.python_str(1)?;
    renamed(a, cx, |_| alias.clone())
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

/// `aliasQuery(seriesList, search, replace, newName)`: each series named by `newName`
/// (Python `%` formatting, such as `"Channel %d MHz"`) of the last known value of the first
/// series the target `search`/`replace` makes of its name selects, over the same range.
pub(super) fn alias_query(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let search = regex(a, 1)?;
    let replace = replacement(a.string(2)?);
    let new_name = a.string(3)?;
    let mut list = a.series(0, cx)?;
    for s in &mut list {
        let query = search.replace_all(&s.name, replace.as_str()).into_owned();
        let target = crate::render::expr::parse_target(&query)
            .map_err(|e| a.wrong(2, &format!("makes the query {query:?}, which fails: {e}")))?;
        let found = super::eval(&target, cx)?;
        let first = found
            .first()
            .ok_or_else(|| a.invalid(&format!("no series found with query {query:?}")))?;
        let current = AggFunc::Last.reduce(&first.values).ok_or_else(|| {
            a.invalid(&format!(
                "cannot get the last value of {} (query {query:?}): it has none in the range",
                first.name
            ))
        })?;
        s.name = percent_format(new_name, current).map_err(|e| a.wrong(3, &e))?;
    }
    Ok(list)
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
/// for the end) of the innermost path in the name; Python's `int()` of each (`2.5` is 2).
pub(super) fn substr(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let start = a.truncated_or(1, 0)?;
    let stop = a.truncated_or(2, 0)?;
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

/// A unit system of graphite-web's (`si`: powers of 1000, `binary`: of 1024), as legends
/// write values in it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum UnitSystem {
    Si,
    Binary,
}

impl UnitSystem {
    fn parse(text: &str) -> Option<UnitSystem> {
        match text {
            "si" => Some(UnitSystem::Si),
            "binary" => Some(UnitSystem::Binary),
            _ => None,
        }
    }

    /// graphite-web's `format_units(v, system=...)`: `v` divided by the largest prefix's
    /// size it reaches in absolute value, with that prefix (`k`, `M`, ... or `Ki`, `Mi`, ...),
    /// whole when it is within 1e-11 above a whole number and `v` is above 1.
    fn format(self, v: f64) -> (f64, &'static str) {
        const SI: [(&str, f64); 5] = [("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)];
        const BINARY: [(&str, f64); 5] = [
            ("Pi", 1_125_899_906_842_624.0),
            ("Ti", 1_099_511_627_776.0),
            ("Gi", 1_073_741_824.0),
            ("Mi", 1_048_576.0),
            ("Ki", 1024.0),
        ];
        let prefixes = match self {
            UnitSystem::Si => &SI,
            UnitSystem::Binary => &BINARY,
        };
        let whole = |x: f64| {
            if x - x.floor() < 1e-11 && v > 1.0 {
                x.floor()
            } else {
                x
            }
        };
        match prefixes.iter().find(|(_, size)| v.abs() >= *size) {
            Some((prefix, size)) => (whole(v / size), prefix),
            None => (whole(v), ""),
        }
    }
}

/// `legendValue(seriesList, *valueTypes)`: ` (type: value)` appended to each name per type;
/// `(?)` for a type that is not an aggregation. When the last type is a unit system (`si`,
/// `binary`), each type is instead appended in columns (`%-20s%-5s%-10s`), the value to two
/// decimals in that system (`1.50k`), as graphite-web writes it. A bare value (`5`, `None`)
/// is a type written as Python's `str` of it, not an aggregation.
pub(super) fn legend_value(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let mut types: Vec<String> = (1..a.len())
        .map(|i| a.python_str(i))
        .collect::<Result<_>>()?;
    let system = types.last().and_then(|t| UnitSystem::parse(t));
    if system.is_some() {
        types.pop();
    }
    renamed(a, cx, |s| {
        let mut name = s.name.clone();
        for t in &types {
            let agg = AggFunc::parse(t);
            let value = agg.map(|agg| agg.reduce(&s.values));
            match system {
                None => {
                    let value = match (agg, value) {
                        (Some(agg), Some(value)) => py_value(agg, value),
                        _ => "(?)".into(),
                    };
                    name.push_str(&format!(" ({t}: {value})"));
                }
                Some(system) => {
                    let formatted = match value {
                        None => "(?)".to_owned(),
                        Some(None) => "None".to_owned(),
                        Some(Some(v)) => {
                            let (v, prefix) = system.format(v);
                            format!("{v:.2}{prefix}")
                        }
                    };
                    name = format!("{name:<20}{t:<5}{formatted:<10}");
                }
            }
        }
        name
    })
}

/// `cactiStyle(seriesList, system, units)`: names padded to columns with the current, max
/// and min value to two decimals, in the `si` or `binary` unit system when one is given
/// (`1.50k`), and `units` after them. Each is used only when true by Python's truth (a
/// system of `0` is none), as graphite-web tests them; units given bare (`5`) are written as
/// Python's `str` of them.
pub(super) fn cacti_style(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let system =
        if a.is_true(1) {
            let text = a.string(1)?;
            Some(UnitSystem::parse(text).ok_or_else(|| {
                a.wrong(1, &format!("is {text:?}, not a unit system (si or binary)"))
            })?)
        } else {
            None
        };
    let units = if a.is_true(2) {
        Some(a.python_str(2)?)
    } else {
        None
    };
    let units = units.as_deref();
    let fmt = |x: f64| match (system, units) {
        (Some(system), Some(u)) => {
            let (v, prefix) = system.format(x);
            format!("{v:.2} {prefix}{u}")
        }
        (Some(system), None) => {
            let (v, prefix) = system.format(x);
            format!("{v:.2}{prefix}")
        }
        (None, Some(u)) => format!("{x:.2} {u}"),
        (None, None) => format!("{x:.2}"),
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
