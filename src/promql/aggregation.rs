//! PromQL's aggregation operators (`sum`, `avg`, `min`, `max`, `count`, `group`, `stddev`,
//! `stdvar`, `topk`, `bottomk`, `quantile`, `count_values`) with `by` and `without`, per
//! evaluation time over the series present at it.

use std::collections::HashMap;

use promql_parser::parser::{AggregateExpr, Expr, LabelModifier, MatrixSelector};
use rayon::prelude::*;

use super::error::QueryError;
use super::eval::{strip_parens, Evaluator, Grid};
use super::histograms;
use super::labels::{Labels, NAME};
use super::value::{Series, Value};
use super::windows;
use super::windows::quantile;

/// Evaluates `agg` over `grid`.
///
/// # Errors
/// `bad_data` for a wrong parameter or an operator tierdb does not evaluate.
pub(crate) fn aggregate(
    ev: &mut Evaluator<'_>,
    agg: &AggregateExpr,
    grid: &Grid,
) -> Result<Value, QueryError> {
    let op = agg.op.to_string();
    let param = match &agg.param {
        Some(p) if op == "count_values" => match strip_parens(p) {
            Expr::StringLiteral(s) => Param::Label(s.val.clone()),
            _ => {
                return Err(QueryError::bad_data(
                    "count_values: expected a string parameter",
                ))
            }
        },
        Some(p) => match ev.eval(p, grid)? {
            Value::Scalar(v) => Param::Number(v),
            _ => {
                return Err(QueryError::bad_data(format!(
                    "{op}: expected a scalar parameter"
                )))
            }
        },
        None => Param::None,
    };
    let value = match rate_of_selector(&agg.expr) {
        // `sum by (...) (rate(x[5m]))` of distributions: folded as each series is read.
        Some((name, m)) if matches!(op.as_str(), "sum" | "avg") => {
            let range_ms = m.range.as_millis() as i64;
            let need = windows::raw_need(name).unwrap_or(windows::RawNeed::Never);
            let input = ev.range_of_selector(&m.vs, range_ms, grid, need, true)?;
            if input.histograms {
                let modifier = agg.modifier.as_ref();
                let group_of = |labels: &Labels| group_key(labels, modifier);
                let (source, budget) = (ev.source, ev.budget());
                let folded =
                    histograms::aggregate_windows(&op, name, input, &group_of, source, budget)?;
                return Ok(Value::Histograms(folded));
            }
            super::functions::apply_range(ev, name, input, None)?
        }
        _ => ev.eval(&agg.expr, grid)?,
    };
    let series = match value {
        // Only series with values: groups are met in the order Prometheus meets them, over
        // the samples at each step, which an instant query answers in.
        Value::Vector(mut series) => {
            series.retain(|s| s.values.iter().any(Option::is_some));
            series
        }
        Value::Histograms(series) => {
            ev.check_deadline()?;
            let groups = groups(series.iter().map(|s| &s.labels), agg.modifier.as_ref());
            return histograms::aggregate(&op, groups, &series, grid.len()).map(Value::Histograms);
        }
        _ => {
            return Err(QueryError::bad_data(format!(
                "{op}: expected an instant vector to aggregate"
            )))
        }
    };
    ev.check_deadline()?;
    let groups = groups(series.iter().map(|s| &s.labels), agg.modifier.as_ref());
    let steps = grid.len();
    let mut out = Vec::new();
    match (op.as_str(), &param) {
        ("topk" | "bottomk", Param::Number(k)) => {
            // Prometheus 2.42 takes k as an int64 at every step, series or not.
            let want: Vec<usize> = (k.iter())
                .map(|&k| {
                    if !(k >= i64::MIN as f64 && k <= i64::MAX as f64) {
                        return Err(QueryError::execution(format!(
                            "Scalar value {} overflows int64",
                            go_float(k)
                        )));
                    }
                    Ok(k.max(0.0) as usize)
                })
                .collect::<Result<_, _>>()?;
            let mut kept: Vec<Vec<Option<f64>>> = vec![vec![None; steps]; series.len()];
            // An instant query answers in Prometheus' order: group by group (in the order
            // the groups were met), each ranked by value.
            let mut ranked: Vec<usize> = Vec::new();
            for (_, members) in &groups {
                for (step, &want) in want.iter().enumerate() {
                    let mut present: Vec<(usize, f64)> = (members.iter())
                        .filter_map(|&i| series[i].values[step].map(|v| (i, v)))
                        .collect();
                    present.sort_by(|a, b| match op.as_str() {
                        "topk" => nan_low(b.1).total_cmp(&nan_low(a.1)),
                        _ => nan_high(a.1).total_cmp(&nan_high(b.1)),
                    });
                    for &(i, v) in present.iter().take(want) {
                        kept[i][step] = Some(v);
                        if steps == 1 {
                            ranked.push(i);
                        }
                    }
                }
            }
            if steps != 1 {
                ranked = (0..series.len()).collect();
            }
            let mut series: Vec<Option<Series>> = series.into_iter().map(Some).collect();
            for i in ranked {
                let values = std::mem::take(&mut kept[i]);
                if let Some(s) = series[i]
                    .take()
                    .filter(|_| values.iter().any(Option::is_some))
                {
                    out.push(Series {
                        labels: s.labels,
                        values,
                    });
                }
            }
        }
        ("count_values", Param::Label(label)) => {
            // Prometheus' rule: the value label is set first, then the series grouped, `by`
            // keeping the value label too; groups in the order their first sample is met.
            let mut names = match agg.modifier.as_ref() {
                Some(LabelModifier::Include(by)) => by.labels.clone(),
                Some(LabelModifier::Exclude(without)) => without.labels.clone(),
                None => Vec::new(),
            };
            let without = matches!(agg.modifier, Some(LabelModifier::Exclude(_)));
            if without {
                names.push(NAME.to_owned());
            } else {
                names.push(label.clone());
            }
            // Each series' labels as grouped; the value label is set on them unless
            // `without` drops it.
            let kept: Vec<Labels> = (series.iter())
                .map(|s| s.labels.project(&names, !without))
                .collect();
            let value_kept = !without || !names.contains(label);
            let mut counted: Vec<(Labels, Vec<Option<f64>>)> = Vec::new();
            let mut index: HashMap<Labels, usize> = HashMap::new();
            for step in 0..steps {
                for (s, kept) in series.iter().zip(&kept) {
                    let Some(v) = s.values[step] else {
                        continue;
                    };
                    let mut key = kept.clone();
                    if value_kept {
                        key.set(label, super::number::fixed_text(v));
                    }
                    let at = *index.entry(key.clone()).or_insert_with(|| {
                        counted.push((key, vec![None; steps]));
                        counted.len() - 1
                    });
                    let slot = &mut counted[at].1[step];
                    *slot = Some(slot.unwrap_or(0.0) + 1.0);
                }
            }
            out = (counted.into_iter())
                .map(|(labels, values)| Series { labels, values })
                .collect();
        }
        ("sum" | "avg" | "count" | "group" | "min" | "max", _) => {
            // One pass over each member's values into per-step accumulators; the operator
            // is matched once, not per value. f64::min/max keep the number over a NaN, as
            // Prometheus does.
            let fold_extreme: Option<fn(f64, f64) -> f64> = match op.as_str() {
                "min" => Some(f64::min),
                "max" => Some(f64::max),
                _ => None,
            };
            // Groups in parallel (each its own accumulators), in the order they were found.
            out = (groups.into_par_iter())
                .map(|(labels, members)| {
                    let mut total = vec![0.0; steps];
                    let mut seen = vec![0u32; steps];
                    let mut extreme: Vec<f64> = vec![f64::NAN; steps];
                    for &i in &members {
                        let values = series[i].values.iter().zip(&mut total).zip(&mut seen);
                        for ((v, total), seen) in values {
                            let Some(v) = *v else { continue };
                            *total += v;
                            *seen += 1;
                        }
                        if let Some(fold) = fold_extreme {
                            for (v, extreme) in series[i].values.iter().zip(&mut extreme) {
                                if let Some(v) = *v {
                                    *extreme = fold(*extreme, v);
                                }
                            }
                        }
                    }
                    let values = (0..steps)
                        .map(|k| {
                            (seen[k] > 0).then(|| match op.as_str() {
                                "sum" => total[k],
                                "avg" => total[k] / f64::from(seen[k]),
                                "count" => f64::from(seen[k]),
                                "group" => 1.0,
                                _ => extreme[k],
                            })
                        })
                        .collect();
                    Series { labels, values }
                })
                .collect();
        }
        _ => {
            for (labels, members) in groups {
                let values = (0..steps)
                    .map(|step| {
                        let mut present: Vec<f64> = members
                            .iter()
                            .filter_map(|&i| series[i].values[step])
                            .collect();
                        if present.is_empty() {
                            return Ok(None);
                        }
                        let n = present.len() as f64;
                        let mean = || present.iter().sum::<f64>() / n;
                        let variance = || {
                            let m = mean();
                            present.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n
                        };
                        Ok(Some(match op.as_str() {
                            "stddev" => variance().sqrt(),
                            "stdvar" => variance(),
                            "quantile" => match &param {
                                Param::Number(phi) => quantile(phi[step], &mut present),
                                _ => f64::NAN,
                            },
                            other => {
                                return Err(QueryError::bad_data(format!(
                                    "aggregation {other:?} is not supported by tierdb's PromQL"
                                )))
                            }
                        }))
                    })
                    .collect::<Result<Vec<_>, QueryError>>()?;
                out.push(Series { labels, values });
            }
        }
    }
    Ok(Value::Vector(out))
}

/// The group of a series with `labels` under `by` or `without` (`modifier`): the labels
/// kept.
fn group_key(labels: &Labels, modifier: Option<&LabelModifier>) -> Labels {
    match modifier {
        Some(LabelModifier::Include(by)) => labels.project(&by.labels, true),
        Some(LabelModifier::Exclude(without)) => {
            let mut names = without.labels.clone();
            names.push(NAME.to_owned());
            labels.project(&names, false)
        }
        None => Labels::default(),
    }
}

/// `rate(x[d])` or `increase(x[d])` (in parentheses or not): the function's name and its
/// range selector.
fn rate_of_selector(expr: &Expr) -> Option<(&'static str, &MatrixSelector)> {
    let Expr::Call(call) = strip_parens(expr) else {
        return None;
    };
    let name = call.func.name;
    if !matches!(name, "rate" | "increase") {
        return None;
    }
    match call.args.args.first().map(|a| strip_parens(a)) {
        Some(Expr::MatrixSelector(m)) => Some((name, m)),
        _ => None,
    }
}

/// The groups of `by` or `without` (`modifier`) over series with `labels`: each group's
/// labels and its members' indexes, in the order groups are met.
fn groups<'a>(
    labels: impl Iterator<Item = &'a Labels>,
    modifier: Option<&LabelModifier>,
) -> Vec<(Labels, Vec<usize>)> {
    let mut groups: Vec<(Labels, Vec<usize>)> = Vec::new();
    let mut index: HashMap<Labels, usize> = HashMap::new();
    for (i, labels) in labels.enumerate() {
        let key = group_key(labels, modifier);
        let at = *index.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[at].1.push(i);
    }
    groups
}

/// An aggregation's parameter.
enum Param {
    None,
    Number(Vec<f64>),
    Label(String),
}

/// `v` as Go's `%v` writes it (Prometheus' error text): `NaN`, `+Inf`, `-Inf`, or, for
/// the magnitudes past an int64 this is used for, the shortest digits in `e` form
/// (`1e+19`).
fn go_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        (if v > 0.0 { "+Inf" } else { "-Inf" }).into()
    } else {
        let text = format!("{v:e}");
        match text.split_once('e') {
            Some((digits, exp)) if !exp.starts_with('-') => format!("{digits}e+{exp:0>2}"),
            Some((digits, exp)) => format!("{digits}e-{:0>2}", &exp[1..]),
            None => text,
        }
    }
}

fn nan_low(v: f64) -> f64 {
    if v.is_nan() {
        f64::NEG_INFINITY
    } else {
        v
    }
}

fn nan_high(v: f64) -> f64 {
    if v.is_nan() {
        f64::INFINITY
    } else {
        v
    }
}
