//! Graphite plaintext protocol: one line `path value timestamp` parsed into a series, a value
//! and a timestamp.
//!
//! The path is a dotted metric name, optionally with Graphite 1.1 tags `name;k=v;k2=v2`,
//! which become the series `name{k=v,k2=v2}` (tags sorted, as [`SeriesKey`] keeps them; a
//! tag given twice keeps its last value, as carbon does). A path without tags and without
//! any character the canonical text escapes is returned borrowed from the input, so the
//! common line costs no allocation.

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::ops::Range;

use crate::registry::split_graphite_tags;
use crate::registry::SeriesKey;
use crate::time::Timestamp;

/// Longest line accepted, in bytes, not counting the line ending; longer lines are refused
/// with [`GraphiteError::LineTooLong`].
pub const MAX_LINE: usize = 4096;

/// One parsed plaintext line: `path value timestamp`.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphiteLine<'a> {
    /// The series' canonical text (see [`SeriesKey`]). Borrowed from the input when the path
    /// has no tags and nothing to escape (the common case), owned otherwise.
    pub series: Cow<'a, str>,
    /// The value as sent; `nan` and `inf` parse too (the engine refuses non-finite values
    /// itself and counts them under its own reason).
    pub value: f64,
    /// Unix seconds, fractions floored; `None` when the line says `-1`, Graphite's "now".
    pub ts: Option<Timestamp>,
}

/// Why a line was refused. Each has a stable snake_case name ([`GraphiteError::as_str`]) for
/// counters and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GraphiteError {
    /// The line has a path but nothing after it.
    #[error("missing value: expected `path value timestamp`")]
    MissingValue,
    /// The line has a path and a value but no timestamp.
    #[error("missing timestamp: expected `path value timestamp`")]
    MissingTimestamp,
    /// The line has more than three fields.
    #[error("too many fields: expected `path value timestamp`")]
    TooManyFields,
    /// The value is not a number.
    #[error("value is not a number")]
    InvalidValue,
    /// The timestamp is not a number of unix seconds that fits an `i64`.
    #[error("timestamp is not a number of unix seconds")]
    InvalidTimestamp,
    /// The path is not a usable series name: empty name, empty tag key or value, a tag
    /// without `=`, a control character, or bytes that are not UTF-8.
    #[error(
        "invalid metric path (empty name or tag, tag without `=`, control character or not UTF-8)"
    )]
    InvalidName,
    /// The line is longer than [`MAX_LINE`] bytes.
    #[error("line longer than {MAX_LINE} bytes")]
    LineTooLong,
}

impl GraphiteError {
    /// Every reason, for callers that set up one counter per reason.
    #[cfg(test)]
    pub const ALL: [GraphiteError; 7] = [
        GraphiteError::MissingValue,
        GraphiteError::MissingTimestamp,
        GraphiteError::TooManyFields,
        GraphiteError::InvalidValue,
        GraphiteError::InvalidTimestamp,
        GraphiteError::InvalidName,
        GraphiteError::LineTooLong,
    ];

    /// The reason's stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            GraphiteError::MissingValue => "missing_value",
            GraphiteError::MissingTimestamp => "missing_timestamp",
            GraphiteError::TooManyFields => "too_many_fields",
            GraphiteError::InvalidValue => "invalid_value",
            GraphiteError::InvalidTimestamp => "invalid_timestamp",
            GraphiteError::InvalidName => "invalid_name",
            GraphiteError::LineTooLong => "line_too_long",
        }
    }
}

/// Parses one line given without its `\n`. A trailing `\r` is accepted (collectd sends
/// `\r\n`). Fields are separated by one or more spaces or tabs; leading and trailing ones are
/// ignored.
///
/// Returns `Ok(None)` for an empty or whitespace-only line.
///
/// # Errors
///
/// A [`GraphiteError`] naming the first problem found: the line's length, then the number of
/// fields, then the path, the value and the timestamp in that order.
pub fn parse_line(line: &[u8]) -> Result<Option<GraphiteLine<'_>>, GraphiteError> {
    let line = match line {
        [rest @ .., b'\r'] => rest,
        _ => line,
    };
    if line.len() > MAX_LINE {
        return Err(GraphiteError::LineTooLong);
    }
    // The path is scanned byte by byte anyway, so its classes are gathered on the way.
    let start = skip_blanks(line, 0);
    if start == line.len() {
        return Ok(None);
    }
    let mut path_end = start;
    let mut class = 0;
    while let Some(&b) = line.get(path_end) {
        let c = CLASS[usize::from(b)];
        if c & BLANK != 0 {
            break;
        }
        class |= c;
        path_end += 1;
    }
    let value = next_field(line, path_end).ok_or(GraphiteError::MissingValue)?;
    let ts = next_field(line, value.end).ok_or(GraphiteError::MissingTimestamp)?;
    if next_field(line, ts.end).is_some() {
        return Err(GraphiteError::TooManyFields);
    }
    // One UTF-8 check for the whole line, the usual case; a line that is not UTF-8 is checked
    // field by field so the refusal names the field at fault. Fields start and end at ASCII
    // blanks or the line's ends, so they are character boundaries.
    let whole = std::str::from_utf8(line).ok();
    let field = |range: Range<usize>| match whole {
        Some(text) => text.get(range),
        None => std::str::from_utf8(&line[range]).ok(),
    };
    let path = field(start..path_end).ok_or(GraphiteError::InvalidName)?;
    Ok(Some(GraphiteLine {
        series: series(path, class)?,
        value: parse_value(field(value))?,
        ts: parse_timestamp(field(ts))?,
    }))
}

fn skip_blanks(line: &[u8], from: usize) -> usize {
    line[from..]
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .map_or(line.len(), |n| from + n)
}

/// The range of the next field at or after `from`: a maximal run of bytes other than space
/// and tab.
fn next_field(line: &[u8], from: usize) -> Option<Range<usize>> {
    let start = skip_blanks(line, from);
    if start == line.len() {
        return None;
    }
    let end = line[start..]
        .iter()
        .position(|&b| b == b' ' || b == b'\t')
        .map_or(line.len(), |n| start + n);
    Some(start..end)
}

// Byte classes (bit flags) of a path, OR-ed together over the whole path while it is scanned,
// so the common path is decided with a single branch.

/// A control character (other than tab, which is blank).
const CONTROL: u8 = 1;
/// A character the canonical text escapes: `\`, `,`, `=`, `{`, `}`. Kept equal to
/// `SeriesKey`'s set by the tests, which compare the fast path with `SeriesKey`'s output.
const ESCAPED: u8 = 2;
/// `;`, which starts Graphite tags.
const TAGS: u8 = 4;
/// Part of a multi-byte UTF-8 sequence (or not UTF-8 at all).
const NON_ASCII: u8 = 8;
/// Space or tab: ends the field.
const BLANK: u8 = 16;

/// The class of every byte value.
const CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = match i as u8 {
            b' ' | b'\t' => BLANK,
            0x00..=0x1f | 0x7f => CONTROL,
            b'\\' | b',' | b'=' | b'{' | b'}' => ESCAPED,
            b';' => TAGS,
            0x80..=0xff => NON_ASCII,
            _ => 0,
        };
        i += 1;
    }
    table
};

/// The series' canonical text for a path (never empty: it is a field) whose bytes' classes
/// OR-ed together are `class`.
fn series(text: &str, class: u8) -> Result<Cow<'_, str>, GraphiteError> {
    if class & CONTROL != 0 {
        return Err(GraphiteError::InvalidName);
    }
    // C1 control characters (U+0080..U+009F) are multi-byte; `SeriesKey` refuses them too.
    if class & NON_ASCII != 0 && text.chars().any(char::is_control) {
        return Err(GraphiteError::InvalidName);
    }
    if class & (ESCAPED | TAGS) == 0 {
        return Ok(Cow::Borrowed(text));
    }
    let key = if class & TAGS == 0 {
        SeriesKey::new(text, std::iter::empty::<(&str, &str)>())
    } else {
        let (name, tags) = split_graphite_tags(text).ok_or(GraphiteError::InvalidName)?;
        SeriesKey::new(name, tags)
    };
    // Only the length limit is left for `SeriesKey` to refuse, and a path that fits in
    // MAX_LINE cannot reach it; mapped anyway rather than trusted.
    key.map(|key| Cow::Owned(key.to_string()))
        .map_err(|_| GraphiteError::InvalidName)
}

/// The value field (`None` when it is not UTF-8).
fn parse_value(field: Option<&str>) -> Result<f64, GraphiteError> {
    field
        .and_then(|text| text.parse::<f64>().ok())
        .ok_or(GraphiteError::InvalidValue)
}

/// The timestamp field (`None` when it is not UTF-8): whole seconds, or a fraction floored;
/// `-1` (also written `-1.0`) is "now".
fn parse_timestamp(field: Option<&str>) -> Result<Option<Timestamp>, GraphiteError> {
    let text = field.ok_or(GraphiteError::InvalidTimestamp)?;
    if let Ok(ts) = text.parse::<i64>() {
        return Ok((ts != -1).then_some(ts));
    }
    let ts = text
        .parse::<f64>()
        .map_err(|_| GraphiteError::InvalidTimestamp)?;
    if ts == -1.0 {
        return Ok(None);
    }
    let floored = ts.floor();
    // i64::MIN is exactly representable; i64::MAX rounds up to 2^63, which is out of range.
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&floored) {
        return Err(GraphiteError::InvalidTimestamp);
    }
    Ok(Some(floored as i64))
}
