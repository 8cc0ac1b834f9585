//! PromQL function calls: the range functions go to [`super::windows`] with their input read
//! (buckets, raw points or a subquery's values); the instant ones (`abs`, `clamp`,
//! `histogram_quantile`, `label_replace`, `absent`, `sort`, ...) are here, evaluated point
//! by point over the grid.

use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{Call, Expr};

use super::calendar;
use super::error::QueryError;
use super::eval::{strip_parens, Evaluator, Grid};
use super::histograms::{self, HistogramSeries};
use super::labels::{selector_sets, Labels, GRAPHITE, NAME};
use super::value::{unique_histograms, unique_over_range, Series, Value};
use super::windows::{self, RangeInput, RawNeed};

/// Evaluates `call` over `grid`.
///
/// # Errors
/// `bad_data` for a function tierdb does not evaluate (naming it), or a wrong argument.
pub(crate) fn call(ev: &mut Evaluator<'_>, call: &Call, grid: &Grid) -> Result<Value, QueryError> {
    let name = call.func.name;
    let args: Vec<&Expr> = call.args.args.iter().map(|a| a.as_ref()).collect();
    if let Some(need) = windows::raw_need(name) {
        let (range_arg, param) = match name {
            "quantile_over_time" => (args[1], Some(scalar_arg(ev, args[0], grid, name)?)),
            "predict_linear" => (args[0], Some(scalar_arg(ev, args[1], grid, name)?)),
            _ => (args[0], None),
        };
        let takes_histograms = matches!(name, "rate" | "increase");
        let input = range_input(ev, range_arg, grid, need, takes_histograms)?;
        if name == "absent_over_time" {
            let input = input.read(ev.source, ev.budget())?;
            return Ok(absent(range_arg, grid, |k| {
                (0..input.series.len()).all(|i| input.points_in_window(i, k).0.is_empty())
            }));
        }
        return apply_range(ev, name, input, param.as_deref());
    }
    let math: Option<fn(f64) -> f64> = match name {
        "abs" => Some(f64::abs),
        "ceil" => Some(f64::ceil),
        "floor" => Some(f64::floor),
        "exp" => Some(f64::exp),
        "ln" => Some(f64::ln),
        "log2" => Some(f64::log2),
        "log10" => Some(f64::log10),
        "sqrt" => Some(f64::sqrt),
        "sin" => Some(f64::sin),
        "cos" => Some(f64::cos),
        "tan" => Some(f64::tan),
        "asin" => Some(f64::asin),
        "acos" => Some(f64::acos),
        "atan" => Some(f64::atan),
        "sinh" => Some(f64::sinh),
        "cosh" => Some(f64::cosh),
        "tanh" => Some(f64::tanh),
        "asinh" => Some(f64::asinh),
        "acosh" => Some(f64::acosh),
        "atanh" => Some(f64::atanh),
        "deg" => Some(f64::to_degrees),
        "rad" => Some(f64::to_radians),
        "sgn" => Some(|v: f64| {
            if v == 0.0 || v.is_nan() {
                v
            } else {
                v.signum()
            }
        }),
        _ => None,
    };
    if let Some(f) = math {
        let series = vector_arg(ev, args[0], grid, name)?;
        return Ok(Value::Vector(map_values(series, |_, v| Some(f(v)))));
    }
    if let Some(field) = calendar::date_field(name) {
        let Some(arg) = args.first() else {
            let values = (grid.times.iter())
                .map(|&t| Some(calendar::of_secs(field, (t / 1000) as f64)))
                .collect();
            return Ok(Value::Vector(vec![Series {
                labels: Labels::default(),
                values,
            }]));
        };
        let series = vector_arg(ev, arg, grid, name)?;
        return Ok(Value::Vector(map_values(series, |_, v| {
            Some(calendar::of_secs(field, v))
        })));
    }
    match name {
        "pi" => Ok(Value::Scalar(vec![std::f64::consts::PI; grid.len()])),
        "timestamp" => {
            // Of a selector, when the sample it answers was taken, as Prometheus answers it.
            if let Expr::VectorSelector(vs) = strip_parens(args[0]) {
                return match ev.selector_timestamps(vs, grid)? {
                    Value::Vector(series) => Ok(Value::Vector(map_values(series, |_, v| Some(v)))),
                    _ => Err(QueryError::bad_data(format!(
                        "timestamp({vs}): histograms (distribution series) are not evaluated \
                         by this function"
                    ))),
                };
            }
            let series = vector_arg(ev, args[0], grid, name)?;
            Ok(Value::Vector(map_values(series, |k, _| {
                Some(grid.times[k] as f64 / 1000.0)
            })))
        }
        "round" => {
            let series = vector_arg(ev, args[0], grid, name)?;
            let to = match args.get(1) {
                Some(arg) => scalar_arg(ev, arg, grid, name)?,
                None => vec![1.0; grid.len()],
            };
            Ok(Value::Vector(map_values(series, |k, v| {
                let inverse = 1.0 / to[k];
                Some((v * inverse + 0.5).floor() / inverse)
            })))
        }
        "clamp" | "clamp_min" | "clamp_max" => {
            let series = vector_arg(ev, args[0], grid, name)?;
            let first = scalar_arg(ev, args[1], grid, name)?;
            let second = match args.get(2) {
                Some(arg) => Some(scalar_arg(ev, arg, grid, name)?),
                None => None,
            };
            Ok(Value::Vector(map_values(series, |k, v| match name {
                "clamp_min" => Some(v.max(first[k])),
                "clamp_max" => Some(v.min(first[k])),
                _ => {
                    let (lo, hi) = (first[k], second.as_ref().map_or(f64::NAN, |s| s[k]));
                    (lo <= hi).then(|| v.max(lo).min(hi))
                }
            })))
        }
        "time" => Ok(Value::Scalar(
            grid.times.iter().map(|&t| t as f64 / 1000.0).collect(),
        )),
        "vector" => {
            let values = scalar_arg(ev, args[0], grid, name)?;
            Ok(Value::Vector(vec![Series {
                labels: Labels::default(),
                values: values.into_iter().map(Some).collect(),
            }]))
        }
        "scalar" => {
            let series = vector_arg(ev, args[0], grid, name)?;
            Ok(Value::Scalar(
                (0..grid.len())
                    .map(|k| {
                        let mut present = series.iter().filter_map(|s| s.values[k]);
                        match (present.next(), present.next()) {
                            (Some(v), None) => v,
                            _ => f64::NAN,
                        }
                    })
                    .collect(),
            ))
        }
        "absent" => {
            let series = vector_arg(ev, args[0], grid, name)?;
            Ok(absent(args[0], grid, |k| {
                series.iter().all(|s| s.values[k].is_none())
            }))
        }
        "sort" | "sort_desc" => {
            let mut series = vector_arg(ev, args[0], grid, name)?;
            let key = |s: &Series| s.values.first().copied().flatten().unwrap_or(f64::NAN);
            series.sort_by(|a, b| {
                let (a, b) = (key(a), key(b));
                // NaN last either way, as Prometheus sorts.
                match (a.is_nan(), b.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ if name == "sort" => a.total_cmp(&b),
                    _ => b.total_cmp(&a),
                }
            });
            Ok(Value::Vector(series))
        }
        "label_replace" => {
            let series = vector_arg(ev, args[0], grid, name)?;
            let dst = string_arg(args[1], name)?;
            let replacement = string_arg(args[2], name)?;
            let src = string_arg(args[3], name)?;
            let pattern = string_arg(args[4], name)?;
            let regex = regex::Regex::new(&format!("^(?s:{pattern})$")).map_err(|e| {
                QueryError::bad_data(format!(
                    "label_replace: invalid regular expression {pattern:?}: {e}"
                ))
            })?;
            check_label_name(&dst, name)?;
            let out = (series.into_iter())
                .map(|mut s| {
                    let value = s.labels.get(&src).to_owned();
                    if let Some(caps) = regex.captures(&value) {
                        let mut expanded = String::new();
                        caps.expand(&replacement, &mut expanded);
                        s.labels.set(&dst, expanded);
                    }
                    s
                })
                .collect();
            Ok(Value::Vector(out))
        }
        "label_join" => {
            let series = vector_arg(ev, args[0], grid, name)?;
            let dst = string_arg(args[1], name)?;
            let separator = string_arg(args[2], name)?;
            let sources: Vec<String> = (args[3..].iter())
                .map(|a| string_arg(a, name))
                .collect::<Result<_, _>>()?;
            check_label_name(&dst, name)?;
            let out = (series.into_iter())
                .map(|mut s| {
                    let joined: Vec<&str> = sources.iter().map(|l| s.labels.get(l)).collect();
                    let joined = joined.join(&separator);
                    s.labels.set(&dst, joined);
                    s
                })
                .collect();
            Ok(Value::Vector(out))
        }
        "histogram_quantile" => {
            let phi = scalar_arg(ev, args[0], grid, name)?;
            match ev.eval(args[1], grid)? {
                Value::Vector(series) => {
                    Ok(Value::Vector(histogram_quantile(&phi, series, grid.len())))
                }
                Value::Histograms(series) => Ok(of_histograms(name, series, &[phi])),
                _ => Err(QueryError::bad_data(format!(
                    "{name}: expected an instant vector argument"
                ))),
            }
        }
        "histogram_count" | "histogram_sum" | "histogram_avg" | "histogram_fraction" => {
            let (params, arg) = match name {
                "histogram_fraction" => (
                    vec![
                        scalar_arg(ev, args[0], grid, name)?,
                        scalar_arg(ev, args[1], grid, name)?,
                    ],
                    args[2],
                ),
                _ => (Vec::new(), args[0]),
            };
            match ev.eval(arg, grid)? {
                Value::Histograms(series) => Ok(of_histograms(name, series, &params)),
                // As Prometheus: a float sample has no histogram to read.
                Value::Vector(_) => Ok(Value::Vector(Vec::new())),
                _ => Err(QueryError::bad_data(format!(
                    "{name}: expected an instant vector argument"
                ))),
            }
        }
        other => Err(QueryError::bad_data(format!(
            "function {other:?} is not supported by tierdb's PromQL (docs/promql.md lists the \
             functions it evaluates)"
        ))),
    }
}

/// The range function `name` (with `param` per evaluation time, for `quantile_over_time`
/// and `predict_linear`) over `input`, read: histograms for distributions read as such,
/// else floats, under Prometheus' rule for a range function's result.
///
/// # Errors
/// What [`windows::apply`] and [`histograms::over_windows`] refuse; two result series with
/// one label set.
pub(crate) fn apply_range(
    ev: &mut Evaluator<'_>,
    name: &str,
    input: RangeInput,
    param: Option<&[f64]>,
) -> Result<Value, QueryError> {
    if input.histograms {
        let read = histograms::over_windows(name, input, ev.source, ev.budget())?;
        return unique_histograms(read).map(Value::Histograms);
    }
    let mut warnings = Vec::new();
    let read = (ev.source, ev.budget());
    let out = windows::apply(name, input, param, read, &mut warnings)?;
    for warning in warnings {
        ev.warn(warning);
    }
    unique_over_range(out).map(Value::Vector)
}

/// The float values the `histogram_*` function `name` takes of each histogram of `series`,
/// with its scalar arguments per evaluation time (`params`).
fn of_histograms(name: &str, series: Vec<HistogramSeries>, params: &[Vec<f64>]) -> Value {
    Value::Vector(
        (series.into_iter())
            .map(|s| Series {
                labels: s.labels.name_dropped(),
                values: (s.values.iter().enumerate())
                    .map(|(k, h)| {
                        let mut args = [0.0; 2];
                        for (arg, param) in args.iter_mut().zip(params) {
                            *arg = param[k];
                        }
                        histograms::function(name, h.as_ref()?, &args)
                    })
                    .collect(),
            })
            .collect(),
    )
}

/// The range vector a range function reads: a range selector (its distributions read as
/// histograms when the function `takes_histograms`) or a subquery.
fn range_input(
    ev: &mut Evaluator<'_>,
    arg: &Expr,
    grid: &Grid,
    need: RawNeed,
    takes_histograms: bool,
) -> Result<RangeInput, QueryError> {
    match strip_parens(arg) {
        Expr::MatrixSelector(m) => ev.range_of_selector(
            &m.vs,
            m.range.as_millis() as i64,
            grid,
            need,
            takes_histograms,
        ),
        Expr::Subquery(sq) => ev.range_of_subquery(sq, grid),
        _ => Err(QueryError::bad_data("expected a range vector argument")),
    }
}

/// A scalar argument's value per evaluation time.
fn scalar_arg(
    ev: &mut Evaluator<'_>,
    arg: &Expr,
    grid: &Grid,
    function: &str,
) -> Result<Vec<f64>, QueryError> {
    match ev.eval(arg, grid)? {
        Value::Scalar(v) => Ok(v),
        _ => Err(QueryError::bad_data(format!(
            "{function}: expected a scalar argument"
        ))),
    }
}

/// An instant-vector argument's series.
fn vector_arg(
    ev: &mut Evaluator<'_>,
    arg: &Expr,
    grid: &Grid,
    function: &str,
) -> Result<Vec<Series>, QueryError> {
    match ev.eval(arg, grid)? {
        Value::Vector(v) => Ok(v),
        Value::Histograms(_) => Err(QueryError::bad_data(format!(
            "{function}: histograms (distribution series) are not evaluated by this function; \
             histogram_quantile, histogram_count, histogram_sum, histogram_avg and \
             histogram_fraction read them"
        ))),
        _ => Err(QueryError::bad_data(format!(
            "{function}: expected an instant vector argument"
        ))),
    }
}

/// A string literal argument.
fn string_arg(arg: &Expr, function: &str) -> Result<String, QueryError> {
    match strip_parens(arg) {
        Expr::StringLiteral(s) => Ok(s.val.clone()),
        _ => Err(QueryError::bad_data(format!(
            "{function}: expected a string argument"
        ))),
    }
}

fn check_label_name(label: &str, function: &str) -> Result<(), QueryError> {
    let mut chars = label.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(QueryError::bad_data(format!(
            "{function}: invalid destination label name {label:?}"
        )))
    }
}

/// `f(k, value)` over every present value, labels without `__name__`.
fn map_values(series: Vec<Series>, f: impl Fn(usize, f64) -> Option<f64>) -> Vec<Series> {
    (series.into_iter())
        .map(|s| Series {
            labels: s.labels.name_dropped(),
            values: (s.values.into_iter().enumerate())
                .map(|(k, v)| v.and_then(|v| f(k, v)))
                .collect(),
        })
        .collect()
}

/// `absent` and `absent_over_time`: 1 where `empty(k)`, labelled with the selector's
/// equality matchers (other than the name and a Graphite glob) when the argument is a plain
/// selector.
fn absent(arg: &Expr, grid: &Grid, empty: impl Fn(usize) -> bool) -> Value {
    let selector = match strip_parens(arg) {
        Expr::VectorSelector(vs) => Some(vs),
        Expr::MatrixSelector(m) => Some(&m.vs),
        _ => None,
    };
    let mut labels = Labels::default();
    if let Some(vs) = selector {
        let sets = selector_sets(vs);
        if let [set] = sets.as_slice() {
            let mut seen = std::collections::HashMap::new();
            let labelled = |m: &&Matcher| m.name != NAME && m.name != GRAPHITE;
            for m in set.iter().filter(labelled) {
                *seen.entry(m.name.as_str()).or_insert(0) += 1;
            }
            for m in set.iter().filter(labelled) {
                if m.op == MatchOp::Equal && seen[m.name.as_str()] == 1 {
                    labels.set(&m.name, m.value.clone());
                }
            }
        }
    }
    Value::Vector(vec![Series {
        labels,
        values: (0..grid.len()).map(|k| empty(k).then_some(1.0)).collect(),
    }])
}

/// `histogram_quantile(phi, buckets)`: the series grouped by their labels without `le`
/// (and the name), each group's cumulative buckets interpolated as Prometheus does.
fn histogram_quantile(phi: &[f64], series: Vec<Series>, steps: usize) -> Vec<Series> {
    // Per group: its labels, and each bucket's upper bound and values.
    type Buckets = Vec<(f64, Vec<Option<f64>>)>;
    let mut groups: Vec<(Labels, Buckets)> = Vec::new();
    for s in series {
        let Ok(le) = parse_le(s.labels.get("le")) else {
            continue;
        };
        let labels = s.labels.project(&["le".to_owned(), NAME.to_owned()], false);
        match groups.iter_mut().find(|g| g.0 == labels) {
            Some(group) => group.1.push((le, s.values)),
            None => groups.push((labels, vec![(le, s.values)])),
        }
    }
    (groups.into_iter())
        .map(|(labels, buckets)| Series {
            labels,
            values: (0..steps)
                .map(|k| {
                    let mut at: Vec<(f64, f64)> = (buckets.iter())
                        .filter_map(|(le, values)| values[k].map(|v| (*le, v)))
                        .collect();
                    (!at.is_empty()).then(|| bucket_quantile(phi[k], &mut at))
                })
                .collect(),
        })
        .collect()
}

fn parse_le(text: &str) -> Result<f64, ()> {
    match text {
        "+Inf" | "Inf" | "+inf" | "inf" => Ok(f64::INFINITY),
        _ => text.parse().map_err(|_| ()),
    }
}

/// Prometheus' `bucketQuantile` over `(upper bound, cumulative count)`.
fn bucket_quantile(phi: f64, buckets: &mut [(f64, f64)]) -> f64 {
    if phi.is_nan() {
        return f64::NAN;
    }
    if phi < 0.0 {
        return f64::NEG_INFINITY;
    }
    if phi > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return f64::NAN;
    }
    // Coalesce equal bounds and make the counts monotonic, as Prometheus does.
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for &(le, count) in buckets.iter() {
        match merged.last_mut() {
            Some(last) if last.0 == le => last.1 += count,
            _ => merged.push((le, count)),
        }
    }
    let mut max = f64::NEG_INFINITY;
    for b in &mut merged {
        max = max.max(b.1);
        b.1 = max;
    }
    if merged.len() < 2 {
        return f64::NAN;
    }
    let observations = merged[merged.len() - 1].1;
    if observations == 0.0 {
        return f64::NAN;
    }
    let mut rank = phi * observations;
    let b = merged.partition_point(|x| x.1 < rank).min(merged.len() - 1);
    if b == merged.len() - 1 {
        return merged[merged.len() - 2].0;
    }
    if b == 0 && merged[0].0 <= 0.0 {
        return merged[0].0;
    }
    let (mut start, end, mut count) = (0.0, merged[b].0, merged[b].1);
    if b > 0 {
        start = merged[b - 1].0;
        count -= merged[b - 1].1;
        rank -= merged[b - 1].1;
    }
    start + (end - start) * (rank / count)
}
