//! InfluxDB line protocol, one line at a time, as the v1 `/write` and v2 `/api/v2/write`
//! endpoints receive it:
//!
//! ```text
//! measurement[,tag_key=tag_value...] field_key=field_value[,field_key=field_value...] [timestamp]
//! ```
//!
//! Every numeric field (float `1.5`, integer `1i`, unsigned `1u`) becomes one point of the
//! series `measurement.field` with the line's tags; string and boolean fields are reported as
//! skipped, since a rollup of them means nothing.
//!
//! Escapes, as the line protocol reference gives them: a backslash escapes `,` and space in
//! the measurement; `,`, `=` and space in tag keys, tag values and field keys; `"` and `\` in
//! string field values. `\\` stands for one backslash everywhere, and a backslash before any
//! other character is literal. Scanning pairs a backslash with whatever byte follows it, so
//! an escaped character never ends an element.
//!
//! Beyond the grammar, a line is refused when a name, key or value is empty or holds a
//! control character (what [`SeriesKey`] refuses), or when a tag key repeats (as InfluxDB
//! does). A repeated field key keeps its last value (later fields win, as in InfluxDB).

#[cfg(test)]
mod tests;

use std::borrow::Cow;

use crate::registry::SeriesKey;
use crate::time::Timestamp;

/// Longest line accepted, in bytes, not counting the line ending; longer lines are refused
/// with [`InfluxError::LineTooLong`].
pub const MAX_LINE: usize = 65536;

/// Unit of the timestamps in a write request (`precision=` of the write endpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Nanoseconds, the protocol's default.
    Nanoseconds,
    /// Microseconds.
    Microseconds,
    /// Milliseconds.
    Milliseconds,
    /// Seconds.
    Seconds,
    /// Minutes (v1 only).
    Minutes,
    /// Hours (v1 only).
    Hours,
}

impl Precision {
    /// Parses v1 `/write?precision=`: `ns` (also `n`), `u` (also `us`), `ms`, `s`, `m`, `h`.
    /// An empty value means the default, nanoseconds, as in InfluxDB.
    ///
    /// # Errors
    ///
    /// A message naming the accepted values when `s` is none of them.
    pub fn parse_v1(s: &str) -> Result<Precision, String> {
        match s {
            "" | "ns" | "n" => Ok(Precision::Nanoseconds),
            "u" | "us" => Ok(Precision::Microseconds),
            "ms" => Ok(Precision::Milliseconds),
            "s" => Ok(Precision::Seconds),
            "m" => Ok(Precision::Minutes),
            "h" => Ok(Precision::Hours),
            _ => Err(format!(
                "unknown precision {s:?}; expected one of ns, u, ms, s, m, h"
            )),
        }
    }

    /// Parses v2 `/api/v2/write?precision=`: `ns`, `us`, `ms`, `s`. An empty value means the
    /// default, nanoseconds.
    ///
    /// # Errors
    ///
    /// A message naming the accepted values when `s` is none of them.
    pub fn parse_v2(s: &str) -> Result<Precision, String> {
        match s {
            "" | "ns" => Ok(Precision::Nanoseconds),
            "us" => Ok(Precision::Microseconds),
            "ms" => Ok(Precision::Milliseconds),
            "s" => Ok(Precision::Seconds),
            _ => Err(format!(
                "unknown precision {s:?}; expected one of ns, us, ms, s"
            )),
        }
    }

    /// Converts a timestamp in this unit to unix seconds, flooring (so -1 ns is second -1);
    /// `None` when minutes or hours overflow an `i64` of seconds.
    pub fn to_seconds(self, ts: i64) -> Option<Timestamp> {
        match self {
            Precision::Nanoseconds => Some(ts.div_euclid(1_000_000_000)),
            Precision::Microseconds => Some(ts.div_euclid(1_000_000)),
            Precision::Milliseconds => Some(ts.div_euclid(1_000)),
            Precision::Seconds => Some(ts),
            Precision::Minutes => ts.checked_mul(60),
            Precision::Hours => ts.checked_mul(3_600),
        }
    }
}

/// One numeric field of one line.
#[derive(Debug, Clone, PartialEq)]
pub struct InfluxPoint {
    /// Canonical text of the series `measurement.field` with the line's tags.
    pub series: String,
    /// The field's value; integers beyond 2^53 lose precision in the conversion.
    pub value: f64,
    /// Unix seconds (floored); `None` when the line has no timestamp, which means "now".
    pub ts: Option<Timestamp>,
}

/// Why a line was refused. Each has a stable snake_case name ([`InfluxError::as_str`]) for
/// counters and error responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InfluxError {
    /// The line ends before its field set (`measurement` or `measurement,tag=v` alone).
    #[error("missing field set")]
    MissingFields,
    /// The measurement is empty or holds a control character.
    #[error("invalid measurement (empty or holds a control character)")]
    InvalidMeasurement,
    /// A tag lacks its `=`, has an empty key or value, an unescaped `=` in its value, a
    /// control character, or repeats a key.
    #[error("invalid tag (missing `=`, empty key or value, unescaped `=`, control character or repeated key)")]
    InvalidTag,
    /// A field lacks its `=`, or its key is empty or holds a control character.
    #[error("invalid field (missing `=`, empty key or control character)")]
    InvalidField,
    /// A field value is none of float, integer (`i`), unsigned (`u`), string or boolean, an
    /// integer is out of range, or a float is not finite.
    #[error(
        "invalid field value (not a float, integer, unsigned, string or boolean, or out of range)"
    )]
    InvalidFieldValue,
    /// The timestamp is not an integer, overflows once converted to seconds, or is followed
    /// by more text.
    #[error("invalid timestamp (not an integer in range, or followed by more text)")]
    InvalidTimestamp,
    /// A string field value has no closing `"`.
    #[error("unterminated string field value")]
    UnterminatedString,
    /// The line is longer than [`MAX_LINE`] bytes.
    #[error("line longer than {MAX_LINE} bytes")]
    LineTooLong,
    /// A series built from the line is refused by [`SeriesKey`] although each part is
    /// acceptable; in practice its canonical text is longer than [`SeriesKey::MAX_LEN`].
    #[error(
        "series key refused (canonical text longer than {} bytes)",
        SeriesKey::MAX_LEN
    )]
    InvalidSeries,
}

impl InfluxError {
    /// Every reason, for callers that set up one counter per reason.
    #[cfg(test)]
    pub const ALL: [InfluxError; 9] = [
        InfluxError::MissingFields,
        InfluxError::InvalidMeasurement,
        InfluxError::InvalidTag,
        InfluxError::InvalidField,
        InfluxError::InvalidFieldValue,
        InfluxError::InvalidTimestamp,
        InfluxError::UnterminatedString,
        InfluxError::LineTooLong,
        InfluxError::InvalidSeries,
    ];

    /// The reason's stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            InfluxError::MissingFields => "missing_fields",
            InfluxError::InvalidMeasurement => "invalid_measurement",
            InfluxError::InvalidTag => "invalid_tag",
            InfluxError::InvalidField => "invalid_field",
            InfluxError::InvalidFieldValue => "invalid_field_value",
            InfluxError::InvalidTimestamp => "invalid_timestamp",
            InfluxError::UnterminatedString => "unterminated_string",
            InfluxError::LineTooLong => "line_too_long",
            InfluxError::InvalidSeries => "invalid_series",
        }
    }
}

/// Why one field of an otherwise good line was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkippedField {
    /// A string field (`"..."`).
    String,
    /// A boolean field (`t`, `true`, `F`, ...).
    Boolean,
}

impl SkippedField {
    /// The reason's stable snake_case name: `string_field` or `boolean_field`.
    pub fn as_str(self) -> &'static str {
        match self {
            SkippedField::String => "string_field",
            SkippedField::Boolean => "boolean_field",
        }
    }
}

/// Parses one line given without its `\n` (a trailing `\r` is tolerated), with timestamps in
/// `precision`.
///
/// Pushes one [`InfluxPoint`] per numeric field onto `points` and one [`SkippedField`] per
/// string or boolean field onto `skipped`, both in line order; a line whose fields are all
/// strings or booleans is accepted and pushes only its skips. Blank lines and comments (first
/// non-blank character `#`) push nothing. Leading and trailing spaces and tabs are ignored,
/// and sections may be separated by more than one space.
///
/// # Errors
///
/// An [`InfluxError`] naming the first problem found; a refused line pushes nothing.
pub fn parse_line(
    line: &str,
    precision: Precision,
    points: &mut Vec<InfluxPoint>,
    skipped: &mut Vec<SkippedField>,
) -> Result<(), InfluxError> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.len() > MAX_LINE {
        return Err(InfluxError::LineTooLong);
    }
    let line = line.trim_matches(is_blank);
    if line.is_empty() || line.starts_with('#') {
        return Ok(());
    }
    let parsed = Line::parse(line, precision)?;
    let (points_before, skipped_before) = (points.len(), skipped.len());
    let emitted = parsed.emit(points, skipped);
    if emitted.is_err() {
        points.truncate(points_before);
        skipped.truncate(skipped_before);
    }
    emitted
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// A line taken apart, its elements unescaped but no series built yet.
struct Line<'a> {
    measurement: Cow<'a, str>,
    tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    fields: Vec<(Cow<'a, str>, Value)>,
    ts: Option<Timestamp>,
}

/// A field value, reduced to what tierdb does with it.
enum Value {
    Number(f64),
    Skipped(SkippedField),
}

/// The characters a backslash escapes in the measurement, besides `\` itself.
const MEASUREMENT_ESCAPES: &[u8] = b", ";
/// The characters a backslash escapes in tag keys, tag values and field keys, besides `\`.
const KEY_ESCAPES: &[u8] = b",= ";

impl<'a> Line<'a> {
    /// Takes apart a line already stripped of surrounding blanks and known not to be a
    /// comment.
    fn parse(line: &'a str, precision: Precision) -> Result<Line<'a>, InfluxError> {
        let bytes = line.as_bytes();
        let end = scan(bytes, 0, b", ");
        let measurement =
            element(line, 0, end, MEASUREMENT_ESCAPES).ok_or(InfluxError::InvalidMeasurement)?;
        let mut pos = end;

        let mut tags = Vec::new();
        while bytes.get(pos) == Some(&b',') {
            let key_end = scan(bytes, pos + 1, b",= ");
            if bytes.get(key_end) != Some(&b'=') {
                return Err(InfluxError::InvalidTag);
            }
            let key =
                element(line, pos + 1, key_end, KEY_ESCAPES).ok_or(InfluxError::InvalidTag)?;
            let value_end = scan(bytes, key_end + 1, b",= ");
            if bytes.get(value_end) == Some(&b'=') {
                return Err(InfluxError::InvalidTag);
            }
            let value = element(line, key_end + 1, value_end, KEY_ESCAPES)
                .ok_or(InfluxError::InvalidTag)?;
            tags.push((key, value));
            pos = value_end;
        }
        if has_repeated_key(&tags) {
            return Err(InfluxError::InvalidTag);
        }

        pos = skip_spaces(bytes, pos);
        if pos == bytes.len() {
            return Err(InfluxError::MissingFields);
        }
        let mut fields = Vec::new();
        loop {
            let key_end = scan(bytes, pos, b",= ");
            if bytes.get(key_end) != Some(&b'=') {
                return Err(InfluxError::InvalidField);
            }
            let key = element(line, pos, key_end, KEY_ESCAPES).ok_or(InfluxError::InvalidField)?;
            let (value, value_end) = field_value(line, key_end + 1)?;
            fields.push((key, value));
            pos = value_end;
            if bytes.get(pos) != Some(&b',') {
                break;
            }
            pos += 1;
        }

        // A field value ends at a space or the end, so what is left is blanks and maybe a
        // timestamp (the line's trailing blanks are already gone).
        pos = skip_spaces(bytes, pos);
        let ts = if pos == bytes.len() {
            None
        } else {
            let text = &line[pos..];
            let ts = integer(text, true)
                .and_then(|digits| digits.parse::<i64>().ok())
                .and_then(|ts| precision.to_seconds(ts))
                .ok_or(InfluxError::InvalidTimestamp)?;
            Some(ts)
        };
        Ok(Line {
            measurement,
            tags,
            fields,
            ts,
        })
    }

    /// Pushes the line's points and skips; on error the caller truncates what was pushed.
    fn emit(
        self,
        points: &mut Vec<InfluxPoint>,
        skipped: &mut Vec<SkippedField>,
    ) -> Result<(), InfluxError> {
        let superseded = superseded(&self.fields);
        // Canonical text is escaped character by character, so the text of
        // `measurement.field{tags}` is the escaped measurement, `.`, the escaped field key
        // and the tag part, each produced by `SeriesKey` itself, the first and last once.
        let numeric = self
            .fields
            .iter()
            .any(|(_, value)| matches!(value, Value::Number(_)));
        let (prefix, tag_part) = if numeric {
            (escaped(&self.measurement)?, self.tag_part()?)
        } else {
            (String::new(), String::new())
        };
        for (i, (key, value)) in self.fields.iter().enumerate() {
            if superseded.get(i) == Some(&true) {
                continue;
            }
            let value = match *value {
                Value::Number(value) => value,
                Value::Skipped(why) => {
                    skipped.push(why);
                    continue;
                }
            };
            let field = escaped(key)?;
            let len = prefix.len() + 1 + field.len() + tag_part.len();
            if len > SeriesKey::MAX_LEN {
                return Err(InfluxError::InvalidSeries);
            }
            let mut series = String::with_capacity(len);
            series.push_str(&prefix);
            series.push('.');
            series.push_str(&field);
            series.push_str(&tag_part);
            points.push(InfluxPoint {
                series,
                value,
                ts: self.ts,
            });
        }
        Ok(())
    }

    /// The canonical text's tag part, `{k=v,...}` sorted and escaped, or empty.
    fn tag_part(&self) -> Result<String, InfluxError> {
        if self.tags.is_empty() {
            return Ok(String::new());
        }
        // A one-character placeholder name that needs no escaping; the rest is the tag part.
        let tags = self.tags.iter().map(|(k, v)| (k.as_ref(), v.as_ref()));
        let text = SeriesKey::new("x", tags)
            .map_err(|_| InfluxError::InvalidSeries)?
            .to_string();
        Ok(text[1..].to_owned())
    }
}

/// `part` as it appears in canonical text (syntax characters escaped), as `SeriesKey`
/// writes it.
fn escaped(part: &str) -> Result<String, InfluxError> {
    SeriesKey::new(part, std::iter::empty::<(&str, &str)>())
        .map(|key| key.to_string())
        .map_err(|_| InfluxError::InvalidSeries)
}

/// Index of the first byte at or after `start` that is one of `stops` and not escaped (a
/// backslash pairs with whatever byte follows it), or the length of `bytes`.
fn scan(bytes: &[u8], start: usize, stops: &[u8]) -> usize {
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b if stops.contains(&b) => return i,
            _ => i += 1,
        }
    }
    bytes.len()
}

fn skip_spaces(bytes: &[u8], mut pos: usize) -> usize {
    while bytes.get(pos) == Some(&b' ') {
        pos += 1;
    }
    pos
}

/// The unescaped element `line[start..end]`, or `None` when it is empty or holds a control
/// character. `start` and `end` sit on ASCII bytes or the line's end, so they are character
/// boundaries.
fn element<'a>(line: &'a str, start: usize, end: usize, escapes: &[u8]) -> Option<Cow<'a, str>> {
    let raw = &line[start..end.min(line.len())];
    if raw.is_empty() || raw.chars().any(char::is_control) {
        return None;
    }
    Some(unescape(raw, escapes))
}

/// Replaces `\c` by `c` for `c` in `escapes` or `c == '\'`; other backslashes stay.
fn unescape<'a>(raw: &'a str, escapes: &[u8]) -> Cow<'a, str> {
    if !raw.contains('\\') {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let mut lookahead = chars.clone();
        match lookahead.next() {
            Some(next) if next == '\\' || (next.is_ascii() && escapes.contains(&(next as u8))) => {
                out.push(next);
                chars = lookahead;
            }
            _ => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

/// Whether two tags share a key.
fn has_repeated_key(tags: &[(Cow<'_, str>, Cow<'_, str>)]) -> bool {
    if tags.len() < 2 {
        return false;
    }
    let mut keys: Vec<&str> = tags.iter().map(|(k, _)| k.as_ref()).collect();
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

/// For each field, whether a later field of the same key replaces it (empty when no key
/// repeats, the usual case, which then costs no allocation beyond the check).
fn superseded(fields: &[(Cow<'_, str>, Value)]) -> Vec<bool> {
    if fields.len() < 2 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..fields.len()).collect();
    // Stable: equal keys stay in line order, so all but the last of a run are replaced.
    order.sort_by(|&a, &b| fields[a].0.cmp(&fields[b].0));
    if order.windows(2).all(|w| fields[w[0]].0 != fields[w[1]].0) {
        return Vec::new();
    }
    let mut superseded = vec![false; fields.len()];
    for w in order.windows(2) {
        if fields[w[0]].0 == fields[w[1]].0 {
            superseded[w[0]] = true;
        }
    }
    superseded
}

/// Parses the field value starting at `start`; returns it and the index just past it, which
/// is a `,`, a space or the end of the line.
fn field_value(line: &str, start: usize) -> Result<(Value, usize), InfluxError> {
    let bytes = line.as_bytes();
    if bytes.get(start) == Some(&b'"') {
        let mut i = start + 1;
        loop {
            match bytes.get(i) {
                None => return Err(InfluxError::UnterminatedString),
                Some(b'\\') => i += 2,
                Some(b'"') => break,
                Some(_) => i += 1,
            }
        }
        let end = i + 1;
        return match bytes.get(end) {
            None | Some(b',' | b' ') => Ok((Value::Skipped(SkippedField::String), end)),
            Some(_) => Err(InfluxError::InvalidFieldValue),
        };
    }
    let end = bytes[start.min(bytes.len())..]
        .iter()
        .position(|&b| b == b',' || b == b' ')
        .map_or(bytes.len(), |n| start + n);
    let text = &line[start.min(line.len())..end];
    Ok((scalar(text).ok_or(InfluxError::InvalidFieldValue)?, end))
}

/// An unquoted field value: float, integer `i`, unsigned `u` or boolean.
fn scalar(text: &str) -> Option<Value> {
    if let Some(digits) = text.strip_suffix('i') {
        let value = integer(digits, true)?.parse::<i64>().ok()?;
        return Some(Value::Number(value as f64));
    }
    if let Some(digits) = text.strip_suffix('u') {
        let value = integer(digits, false)?.parse::<u64>().ok()?;
        return Some(Value::Number(value as f64));
    }
    match text {
        "t" | "T" | "true" | "True" | "TRUE" | "f" | "F" | "false" | "False" | "FALSE" => {
            return Some(Value::Skipped(SkippedField::Boolean))
        }
        _ => {}
    }
    if !is_float(text.as_bytes()) {
        return None;
    }
    let value = text.parse::<f64>().ok()?;
    value.is_finite().then_some(Value::Number(value))
}

/// `text` when it is a non-empty run of ASCII digits, after one `-` if `signed` (std's
/// parsers would also take a `+`, which the protocol does not).
fn integer(text: &str, signed: bool) -> Option<&str> {
    let digits = match text.strip_prefix('-') {
        Some(rest) if signed => rest,
        _ => text,
    };
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(text)
}

/// `-?digits[.digits][(e|E)[+-]digits]` with at least one mantissa digit on either side of
/// the point; no `inf`, `nan` or `+` (std's parser takes those, the protocol does not).
fn is_float(bytes: &[u8]) -> bool {
    let mut i = usize::from(bytes.first() == Some(&b'-'));
    let digits_from = |i: usize| bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
    let mut mantissa = digits_from(i);
    i += mantissa;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        let fraction = digits_from(i);
        mantissa += fraction;
        i += fraction;
    }
    if mantissa == 0 {
        return false;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exponent = digits_from(i);
        if exponent == 0 {
            return false;
        }
        i += exponent;
    }
    i == bytes.len()
}
