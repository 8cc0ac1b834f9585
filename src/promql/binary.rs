//! PromQL's binary operators: arithmetic, comparisons (filtering, or 0/1 with `bool`) and
//! the set operators `and`, `or`, `unless`, between scalars and vectors, with Prometheus'
//! vector matching (`on`, `ignoring`, `group_left`, `group_right`), point by point.

use std::collections::HashMap;

use promql_parser::parser::{BinaryExpr, LabelModifier, VectorMatchCardinality};

use super::error::QueryError;
use super::eval::{Evaluator, Grid};
use super::labels::{Labels, NAME};
use super::value::{Series, Value};

/// Evaluates `bin` over `grid`.
///
/// # Errors
/// `bad_data` for operands of the wrong type; `execution` for a match Prometheus refuses
/// (duplicate series on the "one" side).
pub(crate) fn binary(
    ev: &mut Evaluator<'_>,
    bin: &BinaryExpr,
    grid: &Grid,
) -> Result<Value, QueryError> {
    let op = bin.op.to_string();
    let return_bool = bin.modifier.as_ref().is_some_and(|m| m.return_bool);
    let lhs = ev.eval(&bin.lhs, grid)?;
    let rhs = ev.eval(&bin.rhs, grid)?;
    ev.check_deadline()?;
    let comparison = is_comparison(&op);
    match (lhs, rhs) {
        (Value::Scalar(l), Value::Scalar(r)) => Ok(Value::Scalar(
            (l.iter().zip(&r))
                .map(|(&a, &b)| match apply(&op, a, b) {
                    Some(v) if comparison => bool_value(v.is_some()),
                    Some(v) => v.unwrap_or(f64::NAN),
                    None => f64::NAN,
                })
                .collect(),
        )),
        (Value::Vector(v), Value::Scalar(s)) => {
            Ok(Value::Vector(with_scalar(&op, v, &s, false, return_bool)?))
        }
        (Value::Scalar(s), Value::Vector(v)) => {
            Ok(Value::Vector(with_scalar(&op, v, &s, true, return_bool)?))
        }
        (Value::Vector(l), Value::Vector(r)) => {
            let matching = bin.modifier.as_ref().and_then(|m| m.matching.clone());
            let card = (bin.modifier.as_ref())
                .map(|m| m.card.clone())
                .unwrap_or(VectorMatchCardinality::OneToOne);
            match op.as_str() {
                "and" | "or" | "unless" => Ok(Value::Vector(set_op(&op, l, r, &matching))),
                _ => vectors(&op, l, r, &matching, &card, return_bool).map(Value::Vector),
            }
        }
        (Value::Histograms(_), _) | (_, Value::Histograms(_)) => {
            Err(QueryError::bad_data(format!(
                "operator {op:?} of histograms (distribution series) is not evaluated by tierdb's \
             PromQL; histogram_quantile, histogram_count, histogram_sum, histogram_avg and \
             histogram_fraction turn them into numbers first"
            )))
        }
        _ => Err(QueryError::bad_data(format!(
            "operator {op:?} is not defined between a string and another value"
        ))),
    }
}

fn is_comparison(op: &str) -> bool {
    matches!(op, "==" | "!=" | ">" | "<" | ">=" | "<=")
}

fn bool_value(keep: bool) -> f64 {
    if keep {
        1.0
    } else {
        0.0
    }
}

/// `a op b`: for arithmetic `Some(Some(value))`; for a comparison `Some(Some(a))` when it
/// holds and `Some(None)` when not; `None` for an unknown operator.
fn apply(op: &str, a: f64, b: f64) -> Option<Option<f64>> {
    Some(match op {
        "+" => Some(a + b),
        "-" => Some(a - b),
        "*" => Some(a * b),
        "/" => Some(a / b),
        "%" => Some(a % b),
        "^" => Some(a.powf(b)),
        "atan2" => Some(a.atan2(b)),
        "==" => (a == b).then_some(a),
        "!=" => (a != b).then_some(a),
        ">" => (a > b).then_some(a),
        "<" => (a < b).then_some(a),
        ">=" => (a >= b).then_some(a),
        "<=" => (a <= b).then_some(a),
        _ => return None,
    })
}

/// The value of `l op r` for a vector element: arithmetic, a filtered comparison keeping
/// `kept`, or 0/1 with `bool`.
fn element(
    op: &str,
    l: f64,
    r: f64,
    kept: f64,
    return_bool: bool,
) -> Result<Option<f64>, QueryError> {
    let Some(result) = apply(op, l, r) else {
        return Err(QueryError::bad_data(format!(
            "operator {op:?} is not supported"
        )));
    };
    Ok(if is_comparison(op) {
        if return_bool {
            Some(bool_value(result.is_some()))
        } else {
            result.map(|_| kept)
        }
    } else {
        result
    })
}

/// Whether `op` drops the metric name from its result.
fn drops_name(op: &str, return_bool: bool) -> bool {
    return_bool || !is_comparison(op)
}

/// A vector against a scalar (`swapped`: the scalar is on the left).
fn with_scalar(
    op: &str,
    vector: Vec<Series>,
    scalar: &[f64],
    swapped: bool,
    return_bool: bool,
) -> Result<Vec<Series>, QueryError> {
    if matches!(op, "and" | "or" | "unless") {
        return Err(QueryError::bad_data(format!(
            "set operator {op:?} not allowed between a vector and a scalar"
        )));
    }
    let mut out = Vec::with_capacity(vector.len());
    for s in vector {
        let mut values = Vec::with_capacity(s.values.len());
        for (k, v) in s.values.iter().enumerate() {
            values.push(match *v {
                None => None,
                Some(v) => {
                    let (l, r) = if swapped {
                        (scalar[k], v)
                    } else {
                        (v, scalar[k])
                    };
                    element(op, l, r, v, return_bool)?
                }
            });
        }
        let labels = if drops_name(op, return_bool) {
            s.labels.name_dropped()
        } else {
            s.labels
        };
        out.push(Series { labels, values });
    }
    Ok(out)
}

/// The labels two series are matched on.
fn signature(labels: &Labels, matching: &Option<LabelModifier>) -> Labels {
    match matching {
        Some(LabelModifier::Include(on)) => labels.project(&on.labels, true),
        Some(LabelModifier::Exclude(ignoring)) => {
            let mut names = ignoring.labels.clone();
            names.push(NAME.to_owned());
            labels.project(&names, false)
        }
        None => labels.clone().without_name(),
    }
}

/// `and`, `or`, `unless` point by point.
fn set_op(
    op: &str,
    lhs: Vec<Series>,
    rhs: Vec<Series>,
    matching: &Option<LabelModifier>,
) -> Vec<Series> {
    let steps = lhs.first().or(rhs.first()).map_or(0, |s| s.values.len());
    let presence = |side: &[Series]| {
        let mut by: HashMap<Labels, Vec<bool>> = HashMap::new();
        for s in side {
            let present = by
                .entry(signature(&s.labels, matching))
                .or_insert_with(|| vec![false; steps]);
            for (p, v) in present.iter_mut().zip(&s.values) {
                *p |= v.is_some();
            }
        }
        by
    };
    let right = presence(&rhs);
    let left = presence(&lhs);
    let none = vec![false; steps];
    let mut out = Vec::new();
    for s in lhs {
        let other = right.get(&signature(&s.labels, matching)).unwrap_or(&none);
        let values = match op {
            "and" => (s.values.iter().zip(other))
                .map(|(v, &o)| v.filter(|_| o))
                .collect(),
            "unless" => (s.values.iter().zip(other))
                .map(|(v, &o)| v.filter(|_| !o))
                .collect(),
            _ => s.values,
        };
        out.push(Series {
            labels: s.labels,
            values,
        });
    }
    if op == "or" {
        for s in rhs {
            let other = left.get(&signature(&s.labels, matching)).unwrap_or(&none);
            let values = (s.values.iter().zip(other))
                .map(|(v, &o)| v.filter(|_| !o))
                .collect();
            out.push(Series {
                labels: s.labels,
                values,
            });
        }
    }
    out.retain(|s| s.values.iter().any(Option::is_some));
    out
}

/// Arithmetic and comparisons between two vectors, one-to-one or grouped.
fn vectors(
    op: &str,
    lhs: Vec<Series>,
    rhs: Vec<Series>,
    matching: &Option<LabelModifier>,
    card: &VectorMatchCardinality,
    return_bool: bool,
) -> Result<Vec<Series>, QueryError> {
    // The "many" side is walked; each of its series meets the "one" side's of its signature.
    let one_is_left = matches!(card, VectorMatchCardinality::OneToMany(_));
    let (many, one) = if one_is_left {
        (&rhs, &lhs)
    } else {
        (&lhs, &rhs)
    };
    let include = card.labels().map(|l| l.labels.clone());
    let steps = many.first().map_or(0, |s| s.values.len());
    let mut by_sig: HashMap<Labels, Vec<usize>> = HashMap::new();
    for (i, s) in one.iter().enumerate() {
        by_sig
            .entry(signature(&s.labels, matching))
            .or_default()
            .push(i);
    }
    if include.is_none() {
        // One-to-one: no two series of the left side may share a signature at a time.
        let mut left_sigs: HashMap<Labels, Vec<usize>> = HashMap::new();
        for (i, s) in many.iter().enumerate() {
            left_sigs
                .entry(signature(&s.labels, matching))
                .or_default()
                .push(i);
        }
        for (sig, members) in &left_sigs {
            if members.len() > 1 && by_sig.contains_key(sig) {
                for k in 0..steps {
                    if members
                        .iter()
                        .filter(|&&i| many[i].values[k].is_some())
                        .count()
                        > 1
                    {
                        return Err(QueryError::execution(format!(
                            "found duplicate series for the match group {} on the left hand-side \
                             of the operation: many-to-one matching must be explicit \
                             (group_left/group_right)",
                            sig
                        )));
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for m in many {
        let sig = signature(&m.labels, matching);
        let Some(candidates) = by_sig.get(&sig) else {
            continue;
        };
        if candidates.len() > 1 {
            for k in 0..steps {
                if m.values[k].is_some()
                    && candidates
                        .iter()
                        .filter(|&&i| one[i].values[k].is_some())
                        .count()
                        > 1
                {
                    let side = if one_is_left { "left" } else { "right" };
                    return Err(QueryError::execution(format!(
                        "found duplicate series for the match group {} on the {side} hand-side \
                         of the operation: many-to-many matching not allowed: matching labels \
                         must be unique on one side",
                        sig
                    )));
                }
            }
        }
        for &c in candidates {
            let o = &one[c];
            let mut values = Vec::with_capacity(steps);
            for k in 0..steps {
                values.push(match (m.values[k], o.values[k]) {
                    (Some(mv), Some(ov)) => {
                        let (l, r) = if one_is_left { (ov, mv) } else { (mv, ov) };
                        element(op, l, r, l, return_bool)?
                    }
                    _ => None,
                });
            }
            if values.iter().all(Option::is_none) {
                continue;
            }
            let mut labels = if drops_name(op, return_bool) {
                m.labels.clone().name_dropped()
            } else {
                m.labels.clone()
            };
            match &include {
                None => {
                    labels = match matching {
                        Some(LabelModifier::Include(on)) => labels.project(&on.labels, true),
                        Some(LabelModifier::Exclude(ignoring)) => {
                            labels.project(&ignoring.labels, false)
                        }
                        None => labels,
                    }
                }
                Some(names) => {
                    for name in names {
                        labels.set(name, o.labels.get(name).to_owned());
                    }
                }
            }
            out.push(Series { labels, values });
        }
    }
    Ok(out)
}
