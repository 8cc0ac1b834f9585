//! OTLP/JSON's scalars, as protobuf's JSON mapping writes them and the OTLP specification
//! narrows it: 64-bit integers as decimal strings (numbers accepted too), 32-bit ones as
//! numbers (strings accepted too), floats as numbers or `"NaN"`, `"Infinity"`,
//! `"-Infinity"`, bytes as base64, enums as integers, and `null` as the field's default.
//! Each function is a serde `deserialize_with` for one field type of [`super::proto`].

use std::fmt;

use base64::Engine as _;
use serde::de::{self, Deserialize, Deserializer, Visitor};

use super::proto::{
    ArrayValue, Data, ExponentialHistogram, Gauge, Histogram, KeyValueList, NumberValue, Sum,
    Summary, Value,
};

/// A JSON scalar as written, before it is read as the field's type.
enum Raw<'a> {
    Null,
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Text(std::borrow::Cow<'a, str>),
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number, a string, a boolean or null")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Raw<'de>, E> {
        Ok(Raw::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Raw<'de>, E> {
        Ok(Raw::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Raw<'de>, E> {
        Ok(Raw::Bool(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Raw<'de>, E> {
        Ok(Raw::Unsigned(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Raw<'de>, E> {
        Ok(Raw::Signed(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Raw<'de>, E> {
        Ok(Raw::Float(v))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Raw<'de>, E> {
        Ok(Raw::Text(v.into()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Raw<'de>, E> {
        Ok(Raw::Text(v.to_owned().into()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Raw<'de>, E> {
        Ok(Raw::Text(v.into()))
    }
}

fn raw<'de, D: Deserializer<'de>>(d: D) -> Result<Raw<'de>, D::Error> {
    d.deserialize_any(RawVisitor)
}

/// An integer field of `what` (`u64`, `i64`, ...), from a number without a fraction or a
/// decimal string; `null` is 0.
fn integer<'de, T, D>(d: D, what: &str) -> Result<T, D::Error>
where
    T: TryFrom<u64> + TryFrom<i64> + std::str::FromStr + Default,
    D: Deserializer<'de>,
{
    let out_of_range = || de::Error::custom(format!("integer out of range for {what}"));
    match raw(d)? {
        Raw::Null => Ok(T::default()),
        Raw::Unsigned(v) => T::try_from(v).map_err(|_| out_of_range()),
        Raw::Signed(v) => T::try_from(v).map_err(|_| out_of_range()),
        Raw::Float(v) if v.fract() == 0.0 && v.abs() < 9.007_199_254_740_992e15 => {
            // Exact below 2^53: a JSON writer may print a whole number as `5.0`.
            T::try_from(v as i64).map_err(|_| out_of_range())
        }
        Raw::Text(s) => s
            .trim()
            .parse()
            .map_err(|_| de::Error::custom(format!("{s:?} is not an integer ({what})"))),
        _ => Err(de::Error::custom(format!("expected an integer ({what})"))),
    }
}

pub(super) fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    integer(d, "uint64")
}

pub(super) fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    integer(d, "int64")
}

pub(super) fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    integer(d, "uint32")
}

pub(super) fn i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    integer(d, "int32")
}

pub(super) fn f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match raw(d)? {
        Raw::Null => Ok(0.0),
        Raw::Unsigned(v) => Ok(v as f64),
        Raw::Signed(v) => Ok(v as f64),
        Raw::Float(v) => Ok(v),
        Raw::Text(s) => match &*s {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => other
                .trim()
                .parse()
                .map_err(|_| de::Error::custom(format!("{other:?} is not a number"))),
        },
        Raw::Bool(_) => Err(de::Error::custom("expected a number, found a boolean")),
    }
}

pub(super) fn opt_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    // A field that is present, even as 0, is set; `null` is unset.
    struct Opt;
    impl<'de> Visitor<'de> for Opt {
        type Value = Option<f64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number or null")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Option<f64>, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Option<f64>, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<f64>, D::Error> {
            f64(d).map(Some)
        }
    }
    d.deserialize_option(Opt)
}

pub(super) fn bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match raw(d)? {
        Raw::Null => Ok(false),
        Raw::Bool(v) => Ok(v),
        _ => Err(de::Error::custom("expected true or false")),
    }
}

pub(super) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Option::<String>::deserialize(d).map(Option::unwrap_or_default)
}

/// Base64, standard or URL-safe alphabet, padded or not (protobuf's JSON mapping accepts
/// either).
pub(super) fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = string(d)?;
    let text = text.trim_end_matches('=');
    let engine = if text.contains(['-', '_']) {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
    } else {
        base64::engine::general_purpose::STANDARD_NO_PAD
    };
    engine
        .decode(text)
        .map_err(|e| de::Error::custom(format!("bytes value is not base64: {e}")))
}

pub(super) fn vec<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<Vec<T>>::deserialize(d).map(Option::unwrap_or_default)
}

/// A list of integers or floats: each element as [`u64`] or [`f64`] reads it.
macro_rules! scalar_list {
    ($name:ident, $ty:ty, $element:ident) => {
        pub(super) fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<$ty>, D::Error> {
            struct Element($ty);
            impl<'de> Deserialize<'de> for Element {
                fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Element, D::Error> {
                    $element(d).map(Element)
                }
            }
            let list = Option::<Vec<Element>>::deserialize(d)?.unwrap_or_default();
            Ok(list.into_iter().map(|e| e.0).collect())
        }
    };
}

scalar_list!(vec_u64, u64, u64);
scalar_list!(vec_f64, f64, f64);

/// An upper bound on the values a JSON text holds (each object, and each array element,
/// is one): its `{`, `[` and `,` outside strings. Decoding allocates one structure per value
/// at most, so this bounds what a body of tiny values costs, as the protobuf framing count
/// does for protobuf.
pub(super) fn values(text: &[u8]) -> usize {
    let (mut count, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' | b',' => count += 1,
                _ => {}
            }
        }
    }
    count
}

/// A protobuf `oneof` in JSON: at most one of its fields' keys, each read as its field's
/// type (a malformed one is an error, not an absent value); two set is an error.
fn one_of<T, E: de::Error>(set: Vec<Option<T>>, what: &str) -> Result<Option<T>, E> {
    let mut set = set.into_iter().flatten();
    let first = set.next();
    if set.next().is_some() {
        return Err(E::custom(format!(
            "{what}: more than one of its fields is set"
        )));
    }
    Ok(first)
}

/// A field read with one of the functions above, for the `oneof` structs below.
macro_rules! with {
    ($name:ident, $ty:ty, $read:ident) => {
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<$ty>, D::Error> {
            $read(d).map(Some)
        }
    };
}

with!(some_f64, f64, f64);
with!(some_i64, i64, i64);
with!(some_bool, bool, bool);
with!(some_string, String, string);
with!(some_bytes, Vec<u8>, bytes);

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct DataFields {
    gauge: Option<Gauge>,
    sum: Option<Sum>,
    histogram: Option<Histogram>,
    exponential_histogram: Option<ExponentialHistogram>,
    summary: Option<Summary>,
}

/// `Metric.data`: `gauge`, `sum`, `histogram`, `exponentialHistogram` or `summary`.
pub(super) fn data<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Data>, D::Error> {
    let f = DataFields::deserialize(d)?;
    one_of(
        vec![
            f.gauge.map(Data::Gauge),
            f.sum.map(Data::Sum),
            f.histogram.map(Data::Histogram),
            f.exponential_histogram.map(Data::ExponentialHistogram),
            f.summary.map(Data::Summary),
        ],
        "metric data",
    )
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct NumberFields {
    #[serde(default, deserialize_with = "some_f64")]
    as_double: Option<f64>,
    #[serde(default, deserialize_with = "some_i64")]
    as_int: Option<i64>,
}

/// `NumberDataPoint.value`: `asDouble` or `asInt`.
pub(super) fn number_value<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<NumberValue>, D::Error> {
    let f = NumberFields::deserialize(d)?;
    one_of(
        vec![
            f.as_double.map(NumberValue::AsDouble),
            f.as_int.map(NumberValue::AsInt),
        ],
        "data point value",
    )
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ValueFields {
    #[serde(default, deserialize_with = "some_string")]
    string_value: Option<String>,
    #[serde(default, deserialize_with = "some_bool")]
    bool_value: Option<bool>,
    #[serde(default, deserialize_with = "some_i64")]
    int_value: Option<i64>,
    #[serde(default, deserialize_with = "some_f64")]
    double_value: Option<f64>,
    array_value: Option<ArrayValue>,
    kvlist_value: Option<KeyValueList>,
    #[serde(default, deserialize_with = "some_bytes")]
    bytes_value: Option<Vec<u8>>,
}

/// `AnyValue.value`: one of its seven kinds.
pub(super) fn any_value<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    let f = ValueFields::deserialize(d)?;
    one_of(
        vec![
            f.string_value.map(Value::StringValue),
            f.bool_value.map(Value::BoolValue),
            f.int_value.map(Value::IntValue),
            f.double_value.map(Value::DoubleValue),
            f.array_value.map(Value::ArrayValue),
            f.kvlist_value.map(Value::KvlistValue),
            f.bytes_value.map(Value::BytesValue),
        ],
        "attribute value",
    )
}
