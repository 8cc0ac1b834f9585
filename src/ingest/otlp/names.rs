//! The names Prometheus' OTLP receiver gives (its default translation,
//! `UnderscoreEscapingWithSuffixes`, as in Prometheus 3 and the OpenTelemetry Collector's
//! `prometheusremotewrite` translator): metric names with their unit and `_total` suffixes,
//! attribute keys as label names, attribute values as text. docs/otlp.md lists the rules.

use std::fmt::Write as _;

use base64::Engine as _;

use super::proto::{AnyValue, Value};

/// UCUM units to the words Prometheus names them with; another unit is kept as written.
const UNITS: [(&str, &str); 26] = [
    ("d", "days"),
    ("h", "hours"),
    ("min", "minutes"),
    ("s", "seconds"),
    ("ms", "milliseconds"),
    ("us", "microseconds"),
    ("ns", "nanoseconds"),
    ("By", "bytes"),
    ("KiBy", "kibibytes"),
    ("MiBy", "mebibytes"),
    ("GiBy", "gibibytes"),
    ("TiBy", "tibibytes"),
    ("KBy", "kilobytes"),
    ("MBy", "megabytes"),
    ("GBy", "gigabytes"),
    ("TBy", "terabytes"),
    ("m", "meters"),
    ("V", "volts"),
    ("A", "amperes"),
    ("J", "joules"),
    ("W", "watts"),
    ("g", "grams"),
    ("Cel", "celsius"),
    ("Hz", "hertz"),
    ("1", ""),
    ("%", "percent"),
];

/// The units of a "per" unit (`By/s`: per second).
const PER_UNITS: [(&str, &str); 7] = [
    ("s", "second"),
    ("m", "minute"),
    ("h", "hour"),
    ("d", "day"),
    ("w", "week"),
    ("mo", "month"),
    ("y", "year"),
];

/// What kind of metric a name is built for: it decides the `_total` and `_ratio` suffixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    /// A gauge: `_ratio` when its unit is `1`.
    Gauge,
    /// A monotonic sum: `_total`.
    MonotonicSum,
    /// Anything else (a non-monotonic sum, a histogram, a summary): no type suffix.
    Other,
}

fn lookup<'a>(table: &[(&'a str, &'a str)], unit: &'a str) -> &'a str {
    table
        .iter()
        .find(|(from, _)| *from == unit)
        .map_or(unit, |(_, to)| to)
}

/// A Prometheus metric name character (after the first): `[a-zA-Z0-9:]` splits nothing.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == ':'
}

/// The unit's word, cleaned as a name part: characters outside `[a-zA-Z0-9:]` become `_`,
/// runs of `_` one `_`, and a leading `_` goes.
fn clean_unit(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    for c in unit.chars() {
        let c = if name_char(c) { c } else { '_' };
        if !(c == '_' && (out.is_empty() || out.ends_with('_'))) {
            out.push(c);
        }
    }
    out
}

/// The unit suffixes of `unit`: the main unit's word and `per_` with the "per" unit's, each
/// empty when absent, blank, or an annotation in braces (`{request}`).
fn unit_suffixes(unit: &str) -> (String, String) {
    let (main, per) = match unit.split_once('/') {
        Some((main, per)) => (main, Some(per)),
        None => (unit, None),
    };
    let main = main.trim();
    let mut main_suffix = if !main.is_empty() && !main.contains(['{', '}']) {
        clean_unit(lookup(&UNITS, main))
    } else {
        String::new()
    };
    let mut per_suffix = String::new();
    if let Some(per) = per.map(str::trim) {
        if !per.is_empty() && !per.contains(['{', '}']) {
            per_suffix = format!("per_{}", lookup(&PER_UNITS, per));
        }
    }
    if !per_suffix.is_empty() {
        while main_suffix.ends_with('_') {
            main_suffix.pop();
        }
    }
    (main_suffix, per_suffix)
}

/// The Prometheus name of a metric named `name` with unit `unit`, of kind `kind`: the name
/// split at every character outside `[a-zA-Z0-9:]`, the unit's word and its "per" unit added
/// unless already a part, `total` moved to the end of a monotonic sum, `ratio` to the end of
/// a gauge of unit `1`, joined with `_`, and `_` before a leading digit. Empty when the name
/// has no such character and no suffix applies.
pub fn metric_name(name: &str, unit: &str, kind: NameKind) -> String {
    let mut parts: Vec<&str> = name
        .split(|c: char| !name_char(c))
        .filter(|p| !p.is_empty())
        .collect();
    let (main, per) = unit_suffixes(unit);
    if !main.is_empty() && !parts.contains(&main.as_str()) {
        parts.push(&main);
    }
    if !per.is_empty() && !parts.contains(&per.as_str()) {
        parts.push(&per);
    }
    match kind {
        NameKind::MonotonicSum => {
            parts.retain(|p| *p != "total");
            parts.push("total");
        }
        NameKind::Gauge if unit == "1" => {
            parts.retain(|p| *p != "ratio");
            parts.push("ratio");
        }
        _ => {}
    }
    let joined = parts.join("_");
    if joined.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{joined}")
    } else {
        joined
    }
}

/// The label name of attribute key `key`: each character outside `[a-zA-Z0-9_]` as `_`,
/// `key_` before a leading digit, `key` before a single leading `_` (not before `__`).
pub fn label_name(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        out.push(if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        });
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "key_");
    } else if out.starts_with('_') && !out.starts_with("__") {
        out.insert_str(0, "key");
    }
    out
}

/// An attribute's value as a tag value: text as it is, booleans `true`/`false`, integers in
/// decimal, floats as Rust prints them (shortest text that reads back the same, no exponent),
/// bytes in base64, lists and maps as JSON. Empty for an empty value.
pub(super) fn value_text(value: Option<&AnyValue>) -> String {
    let mut out = String::new();
    if let Some(value) = value {
        write_value(value, &mut out);
    }
    out
}

fn write_value(value: &AnyValue, out: &mut String) {
    match &value.value {
        None => {}
        Some(Value::StringValue(s)) => out.push_str(s),
        Some(Value::BoolValue(b)) => out.push_str(if *b { "true" } else { "false" }),
        Some(Value::IntValue(i)) => {
            let _ = write!(out, "{i}");
        }
        Some(Value::DoubleValue(f)) => {
            let _ = write!(out, "{f}");
        }
        Some(Value::BytesValue(b)) => {
            base64::engine::general_purpose::STANDARD.encode_string(b, out);
        }
        Some(Value::ArrayValue(_) | Value::KvlistValue(_)) => {
            out.push_str(&json(value).to_string());
        }
    }
}

/// A list or map attribute as JSON, as Prometheus writes it (`["a",1]`, `{"k":"v"}`).
fn json(value: &AnyValue) -> serde_json::Value {
    use serde_json::Value as Json;
    match &value.value {
        None => Json::Null,
        Some(Value::StringValue(s)) => Json::from(s.as_str()),
        Some(Value::BoolValue(b)) => Json::from(*b),
        Some(Value::IntValue(i)) => Json::from(*i),
        Some(Value::DoubleValue(f)) => Json::from(*f),
        Some(Value::BytesValue(b)) => {
            Json::from(base64::engine::general_purpose::STANDARD.encode(b))
        }
        Some(Value::ArrayValue(list)) => Json::Array(list.values.iter().map(json).collect()),
        Some(Value::KvlistValue(map)) => Json::Object(
            (map.values.iter())
                .map(|kv| (kv.key.clone(), kv.value.as_ref().map_or(Json::Null, json)))
                .collect(),
        ),
    }
}
