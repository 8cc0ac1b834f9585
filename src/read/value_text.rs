//! How tierdb's own answers (the JSON and CSV of `/api/v1/query` and `/api/v1/aggregate`,
//! the command line's tables) write a value that is not a finite number: a total that
//! overflowed is `+Inf` or `-Inf`, and a sum of both is `NaN`, Prometheus' spellings. JSON
//! has no number for them, so the JSON answers carry them as those strings (as Prometheus'
//! API does for every value); `null` stays what it always meant, a bucket without samples.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// `+Inf`, `-Inf` or `NaN` for a value that is not finite; `None` for a finite one.
pub(crate) fn non_finite(v: f64) -> Option<&'static str> {
    if v.is_nan() {
        Some("NaN")
    } else if v == f64::INFINITY {
        Some("+Inf")
    } else if v == f64::NEG_INFINITY {
        Some("-Inf")
    } else {
        None
    }
}

/// One value in a JSON answer: a number, or [`non_finite`]'s string.
struct JsonValue(f64);

impl Serialize for JsonValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match non_finite(self.0) {
            Some(text) => s.serialize_str(text),
            None => s.serialize_f64(self.0),
        }
    }
}

impl<'de> Deserialize<'de> for JsonValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JsonValue, D::Error> {
        struct Value;
        impl Visitor<'_> for Value {
            type Value = JsonValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number, \"+Inf\", \"-Inf\" or \"NaN\"")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<JsonValue, E> {
                Ok(JsonValue(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<JsonValue, E> {
                Ok(JsonValue(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<JsonValue, E> {
                Ok(JsonValue(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<JsonValue, E> {
                match v {
                    "+Inf" => Ok(JsonValue(f64::INFINITY)),
                    "-Inf" => Ok(JsonValue(f64::NEG_INFINITY)),
                    "NaN" => Ok(JsonValue(f64::NAN)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(Value)
    }
}

/// `#[serde(with = "...")]` for a list of `(start, value)` points, a value `None` for an
/// empty bucket: `[[ts, 1.5], [ts, null], [ts, "+Inf"]]`.
pub(crate) mod points {
    use super::*;

    /// Writes the points, non-finite values as strings.
    ///
    /// # Errors
    /// The serializer's.
    pub(crate) fn serialize<S: Serializer>(
        points: &[(Timestamp, Option<f64>)],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(points.iter().map(|&(ts, v)| (ts, v.map(JsonValue))))
    }

    /// Reads what [`serialize`] writes.
    ///
    /// # Errors
    /// The deserializer's, and a string value other than the three spellings.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(Timestamp, Option<f64>)>, D::Error> {
        let points: Vec<(Timestamp, Option<JsonValue>)> = Deserialize::deserialize(d)?;
        Ok(points
            .into_iter()
            .map(|(ts, v)| (ts, v.map(|v| v.0)))
            .collect())
    }
}

/// `v` as a CSV field or table cell: Rust's shortest round-trip text, or [`non_finite`]'s.
pub(crate) fn csv_value(v: f64) -> String {
    non_finite(v).map_or_else(|| v.to_string(), str::to_owned)
}

/// A group's `k=v` pairs, `(none)` for series without the tag: how tables and CSV name it.
pub(crate) fn group_tags(tags: &BTreeMap<String, Option<String>>) -> Vec<String> {
    tags.iter()
        .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("(none)")))
        .collect()
}

/// The CSV of grouped points: `group,ts,value` rows, the group its `k=v` pairs joined by
/// `,` and quoted (empty without `group_by`), an empty bucket's value empty.
pub(crate) fn groups_csv<'a>(
    groups: impl Iterator<
        Item = (
            &'a BTreeMap<String, Option<String>>,
            &'a [(Timestamp, Option<f64>)],
        ),
    >,
) -> String {
    let mut out = String::from("group,ts,value\n");
    for (tags, points) in groups {
        let label = group_tags(tags).join(",").replace('"', "\"\"");
        for (ts, value) in points {
            let value = value.map(csv_value).unwrap_or_default();
            let _ = writeln!(out, "\"{label}\",{ts},{value}");
        }
    }
    out
}
