//! What PromQL evaluates to: during evaluation, values over the whole step grid at once
//! ([`Value`]); at the end, the answer in Prometheus' four result types ([`ResultValue`])
//! with the warnings that flag an approximation, written as the HTTP API's `data`.

use std::collections::HashMap;

use rayon::prelude::*;

use super::error::QueryError;
use super::histograms::{FloatHistogram, HistogramSeries};
use super::labels::Labels;
use super::number::{push_time, push_value};

/// One series of an instant vector over the grid: a value per evaluation time, `None`
/// where the series has no sample.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Series {
    pub labels: Labels,
    pub values: Vec<Option<f64>>,
}

/// Prometheus' rule for what it evaluates step by step (a function without a range
/// argument, an aggregation, a binary operator): no two series may share a label set at one
/// evaluation time, and series that share one at different times are one series (as
/// `-a or -b` is one `{}`).
///
/// # Errors
/// `execution` for two series with the same labels at one time.
pub(crate) fn unique_per_step(mut series: Vec<Series>) -> Result<Vec<Series>, QueryError> {
    if first_shared(&series).is_none() {
        return Ok(series);
    }
    // A series without values is none of Prometheus' (nor joins one): it would put the
    // series it joins where it stands, not where Prometheus meets the values.
    series.retain(|s| s.values.iter().any(Option::is_some));
    let mut out: Vec<Series> = Vec::with_capacity(series.len());
    let mut index: HashMap<Labels, usize> = HashMap::with_capacity(series.len());
    for s in series {
        let Some(&at) = index.get(&s.labels) else {
            index.insert(s.labels.clone(), out.len());
            out.push(s);
            continue;
        };
        let into = &mut out[at];
        for (mine, theirs) in into.values.iter_mut().zip(s.values) {
            if let Some(v) = theirs {
                if mine.is_some() {
                    return Err(same_labelset(&s.labels));
                }
                *mine = Some(v);
            }
        }
    }
    Ok(out)
}

/// Prometheus' rule for a range function's result and a unary minus, which it checks over
/// the whole evaluation rather than per step: no two series with values may share a label
/// set. Series without a value are dropped.
///
/// # Errors
/// `execution` for two series with values and the same labels.
pub(crate) fn unique_over_range(mut series: Vec<Series>) -> Result<Vec<Series>, QueryError> {
    series.retain(|s| s.values.iter().any(Option::is_some));
    match first_shared(&series) {
        Some(labels) => Err(same_labelset(labels)),
        None => Ok(series),
    }
}

/// The first label set two of `series` share.
fn first_shared(series: &[Series]) -> Option<&Labels> {
    first_shared_of(series.iter().map(|s| &s.labels))
}

/// The first label set `labels` lists twice.
pub(crate) fn first_shared_of<'a>(
    labels: impl ExactSizeIterator<Item = &'a Labels>,
) -> Option<&'a Labels> {
    let mut seen = std::collections::HashSet::with_capacity(labels.len());
    labels.into_iter().find(|l| !seen.insert(*l))
}

/// [`unique_over_range`] for histograms (a range function's result).
///
/// # Errors
/// `execution` for two series with the same labels.
pub(crate) fn unique_histograms(
    series: Vec<HistogramSeries>,
) -> Result<Vec<HistogramSeries>, QueryError> {
    match first_shared_of(series.iter().map(|s| &s.labels)) {
        Some(labels) => Err(same_labelset(labels)),
        None => Ok(series),
    }
}

/// Prometheus' error for two series with one label set, naming the set.
pub(crate) fn same_labelset(labels: &Labels) -> QueryError {
    QueryError::execution(format!(
        "vector cannot contain metrics with the same labelset (two series would be {labels})"
    ))
}

/// An expression's value over the grid.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// A number per evaluation time.
    Scalar(Vec<f64>),
    /// A string literal.
    String(String),
    /// An instant vector: series with a value per evaluation time.
    Vector(Vec<Series>),
    /// An instant vector of histograms (distribution series, and what `rate`, `sum` and
    /// the like make of them).
    Histograms(Vec<HistogramSeries>),
}

/// A query's result in one of Prometheus' result types; times in unix milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub enum ResultValue {
    /// `scalar`: time and value.
    Scalar(i64, f64),
    /// `string`: time and text.
    String(i64, String),
    /// `vector`: one sample per series at the query's time.
    Vector(Vec<(Labels, i64, f64)>),
    /// `matrix`: points per series (a range query, or an instant query of a range vector).
    Matrix(Vec<(Labels, Vec<(i64, f64)>)>),
    /// `vector` of histograms: one per series at the query's time, written in each
    /// sample's `histogram` member.
    HistogramVector(Vec<(Labels, i64, FloatHistogram)>),
    /// `matrix` of histograms: points per series, written in each series' `histograms`.
    HistogramMatrix(Vec<(Labels, Vec<(i64, FloatHistogram)>)>),
}

/// A query's answer: the result and what a person should know to read it right (a
/// documented approximation taken).
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The result.
    pub result: ResultValue,
    /// Prometheus' `warnings`: each approximation the evaluation had to make, once.
    pub warnings: Vec<String>,
}

impl Answer {
    /// The `data` member of Prometheus' success envelope as JSON text, written directly:
    /// a range query's answer holds a point per series and step (144,000 for 100 series over
    /// a day at 60 s), and a `serde_json::Value` per point cost more than the evaluation.
    /// The same text as [`Answer::data_json`]'s.
    pub fn data_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let (kind, samples) = match &self.result {
            ResultValue::Scalar(..) => ("scalar", 0),
            ResultValue::String(..) => ("string", 0),
            ResultValue::Vector(samples) => ("vector", samples.len()),
            ResultValue::Matrix(series) => ("matrix", series.iter().map(|s| s.1.len()).sum()),
            ResultValue::HistogramVector(samples) => ("vector", samples.len() * 8),
            ResultValue::HistogramMatrix(series) => {
                ("matrix", series.iter().map(|s| s.1.len() * 8).sum())
            }
        };
        // A point is 34 bytes with a 16-digit value; room for most points and for the envelope
        // the HTTP answer puts around the text in place, so that neither copies megabytes
        // (what is reserved and not written is never touched).
        out.reserve(128 + samples * 40);
        let _ = write!(out, "{{\"resultType\":\"{kind}\",\"result\":");
        let point = |out: &mut String, t: i64, v: f64| {
            out.push('[');
            push_time(out, t);
            out.push_str(",\"");
            push_value(out, v);
            out.push_str("\"]");
        };
        match &self.result {
            ResultValue::Scalar(t, v) => point(&mut out, *t, *v),
            ResultValue::String(t, text) => {
                out.push('[');
                push_time(&mut out, *t);
                out.push(',');
                out.push_str(&serde_json::Value::from(text.as_str()).to_string());
                out.push(']');
            }
            ResultValue::Vector(samples) => {
                out.push('[');
                for (i, (labels, t, v)) in samples.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{{\"metric\":{},\"value\":", labels.to_json());
                    point(&mut out, *t, *v);
                    out.push('}');
                }
                out.push(']');
            }
            ResultValue::Matrix(series) => {
                // Each series' text on its own, in parallel (a day of a hundred series is
                // milliseconds of text), then joined in order.
                let texts: Vec<String> = (series.par_iter())
                    .map(|(labels, points)| {
                        let mut text = String::with_capacity(64 + points.len() * 40);
                        let _ = write!(text, "{{\"metric\":{},\"values\":[", labels.to_json());
                        for (j, (t, v)) in points.iter().enumerate() {
                            if j > 0 {
                                text.push(',');
                            }
                            point(&mut text, *t, *v);
                        }
                        text.push_str("]}");
                        text
                    })
                    .collect();
                out.push('[');
                for (i, text) in texts.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(text);
                }
                out.push(']');
            }
            ResultValue::HistogramVector(samples) => {
                out.push('[');
                for (i, (labels, t, h)) in samples.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{{\"metric\":{},\"histogram\":[", labels.to_json());
                    push_time(&mut out, *t);
                    out.push(',');
                    h.push_json(&mut out);
                    out.push_str("]}");
                }
                out.push(']');
            }
            ResultValue::HistogramMatrix(series) => {
                out.push('[');
                for (i, (labels, points)) in series.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{{\"metric\":{},\"histograms\":[", labels.to_json());
                    for (j, (t, h)) in points.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        out.push('[');
                        push_time(&mut out, *t);
                        out.push(',');
                        h.push_json(&mut out);
                        out.push(']');
                    }
                    out.push_str("]}");
                }
                out.push(']');
            }
        }
        out.push('}');
        out
    }

    /// The `data` member of Prometheus' success envelope: `resultType` and `result`.
    pub fn data_json(&self) -> serde_json::Value {
        use serde_json::json;
        let (kind, result) = match &self.result {
            ResultValue::Scalar(t, v) => ("scalar", json!([time_json(*t), number_text(*v)])),
            ResultValue::String(t, s) => ("string", json!([time_json(*t), s])),
            ResultValue::Vector(samples) => (
                "vector",
                (samples.iter())
                    .map(|(labels, t, v)| {
                        json!({"metric": labels.to_json(), "value": [time_json(*t), number_text(*v)]})
                    })
                    .collect(),
            ),
            ResultValue::Matrix(series) => (
                "matrix",
                (series.iter())
                    .map(|(labels, points)| {
                        let values: Vec<_> = (points.iter())
                            .map(|(t, v)| json!([time_json(*t), number_text(*v)]))
                            .collect();
                        json!({"metric": labels.to_json(), "values": values})
                    })
                    .collect(),
            ),
            ResultValue::HistogramVector(samples) => (
                "vector",
                (samples.iter())
                    .map(|(labels, t, h)| {
                        json!({"metric": labels.to_json(), "histogram": [time_json(*t), histogram_json(h)]})
                    })
                    .collect(),
            ),
            ResultValue::HistogramMatrix(series) => (
                "matrix",
                (series.iter())
                    .map(|(labels, points)| {
                        let points: Vec<_> = (points.iter())
                            .map(|(t, h)| json!([time_json(*t), histogram_json(h)]))
                            .collect();
                        json!({"metric": labels.to_json(), "histograms": points})
                    })
                    .collect(),
            ),
        };
        json!({"resultType": kind, "result": result})
    }
}

/// A time as Prometheus writes it: unix seconds, with milliseconds only when there are any.
pub(crate) fn time_json(ms: i64) -> serde_json::Value {
    if ms % 1000 == 0 {
        serde_json::Value::from(ms / 1000)
    } else {
        serde_json::Value::from(ms as f64 / 1000.0)
    }
}

/// A histogram as Prometheus writes it ([`FloatHistogram::push_json`]'s text, parsed).
fn histogram_json(h: &FloatHistogram) -> serde_json::Value {
    let mut text = String::new();
    h.push_json(&mut text);
    serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
}

/// A value as Prometheus writes it (a string): see [`push_value`].
fn number_text(v: f64) -> String {
    let mut text = String::new();
    push_value(&mut text, v);
    text
}
