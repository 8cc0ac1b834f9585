//! StatsD lines with DogStatsD tags, one at a time, as a datagram carries them:
//!
//! ```text
//! name:value[:value...]|type[|@sample_rate][|#tag:value,tag2:value2]
//! ```
//!
//! Types: `c` (counter), `g` (gauge; a value with a leading `+` or `-` is relative), `ms`
//! (timer), `h` and `d` (histogram and DogStatsD distribution, both taken as histograms),
//! `s` (set: the text after the `:` is one member, colons and all). Several values in one
//! line (`name:1:2:3|ms`) are DogStatsD's packing of as many lines. The sample rate
//! (`@0.1`, in (0, 1]) scales counter increments; a timer or histogram value is one sample
//! whatever its rate, since a bucket's count cannot hold a tenth of a sample. Other
//! DogStatsD sections (`|c:container`, `|T<timestamp>`) are ignored. Tags become the
//! series' tags (`name{k=v}`); a tag without `:value` is refused, as a key needs a value.
//!
//! Aggregating lines per flush interval is the server's (`server/statsd.rs`); this module
//! only says what a line means.

#[cfg(test)]
mod tests;

use std::borrow::Cow;

use crate::registry::write_canonical;

/// What a line's `|type` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricType {
    /// `c`: increments, summed per flush interval.
    Counter,
    /// `g`: the last value (or the value moved by relative updates) per flush interval.
    Gauge,
    /// `ms`, `h`, `d`: every value a sample.
    Timer,
    /// `s`: distinct members counted per flush interval.
    Set,
}

/// One value of a line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StatsdValue<'a> {
    /// A number: a counter's increment (not yet scaled), a gauge's new value, a timer's
    /// sample.
    Number(f64),
    /// A gauge's relative update (`+3`, `-2.5`).
    Delta(f64),
    /// A set's member.
    Member(&'a str),
}

/// A parsed line; its values go into the caller's vector (see [`parse_line`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StatsdLine<'a> {
    /// Canonical text of the series: the name with the line's tags. Borrowed when there is
    /// nothing to escape and no tag.
    pub series: Cow<'a, str>,
    /// The type.
    pub kind: MetricType,
    /// The sample rate, 1 when absent.
    pub rate: f64,
}

/// Why a line was refused. Each has a stable snake_case name ([`StatsdError::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StatsdError {
    /// No `:` after the name.
    #[error("missing value (no `:` after the name)")]
    MissingValue,
    /// No `|type` after the value.
    #[error("missing type (no `|` after the value)")]
    MissingType,
    /// A type other than c, g, ms, h, d, s.
    #[error("unknown type (expected c, g, ms, h, d or s)")]
    UnknownType,
    /// A value that is not a finite number (or an empty set member).
    #[error("invalid value (not a finite number)")]
    InvalidValue,
    /// A sample rate that is not a number in (0, 1].
    #[error("invalid sample rate (expected @ and a number in (0, 1])")]
    InvalidSampleRate,
    /// A tag without `:value`, or with an empty key or value.
    #[error("invalid tag (expected key:value)")]
    InvalidTag,
    /// An empty name, a control character, a line that is not UTF-8, or a series key
    /// refused for its length.
    #[error("invalid name (empty, control character, not UTF-8 or too long)")]
    InvalidName,
}

impl StatsdError {
    /// Every reason, for callers that set up one counter per reason.
    #[cfg(test)]
    pub const ALL: [StatsdError; 7] = [
        StatsdError::MissingValue,
        StatsdError::MissingType,
        StatsdError::UnknownType,
        StatsdError::InvalidValue,
        StatsdError::InvalidSampleRate,
        StatsdError::InvalidTag,
        StatsdError::InvalidName,
    ];

    /// The reason's stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            StatsdError::MissingValue => "missing_value",
            StatsdError::MissingType => "missing_type",
            StatsdError::UnknownType => "unknown_type",
            StatsdError::InvalidValue => "invalid_value",
            StatsdError::InvalidSampleRate => "invalid_sample_rate",
            StatsdError::InvalidTag => "invalid_tag",
            StatsdError::InvalidName => "invalid_name",
        }
    }
}

/// Parses one line given without its `\n` (a trailing `\r` and surrounding blanks are
/// tolerated). Pushes the line's values onto `values` (cleared first); a blank line gives
/// `Ok(None)`.
///
/// # Errors
/// A [`StatsdError`] naming the first problem found; `values` is then empty.
pub fn parse_line<'a>(
    line: &'a [u8],
    values: &mut Vec<StatsdValue<'a>>,
) -> Result<Option<StatsdLine<'a>>, StatsdError> {
    values.clear();
    let line = std::str::from_utf8(line).map_err(|_| StatsdError::InvalidName)?;
    let line = line.trim_matches(|c| matches!(c, ' ' | '\t' | '\r'));
    if line.is_empty() {
        return Ok(None);
    }
    let parsed = parse(line, values);
    if parsed.is_err() {
        values.clear();
    }
    parsed.map(Some)
}

fn parse<'a>(
    line: &'a str,
    values: &mut Vec<StatsdValue<'a>>,
) -> Result<StatsdLine<'a>, StatsdError> {
    let (name, rest) = line.split_once(':').ok_or(StatsdError::MissingValue)?;
    let mut sections = rest.split('|');
    let raw_values = sections.next().unwrap_or_default();
    let kind = match sections.next().ok_or(StatsdError::MissingType)? {
        "c" => MetricType::Counter,
        "g" => MetricType::Gauge,
        "ms" | "h" | "d" => MetricType::Timer,
        "s" => MetricType::Set,
        _ => return Err(StatsdError::UnknownType),
    };
    let mut rate = 1.0;
    let mut tags: Vec<(&str, &str)> = Vec::new();
    for section in sections {
        if let Some(text) = section.strip_prefix('@') {
            rate = text
                .parse::<f64>()
                .ok()
                .filter(|r| *r > 0.0 && *r <= 1.0)
                .ok_or(StatsdError::InvalidSampleRate)?;
        } else if let Some(text) = section.strip_prefix('#') {
            for tag in text.split(',').filter(|t| !t.is_empty()) {
                match tag.split_once(':') {
                    Some((k, v)) if !k.is_empty() && !v.is_empty() => tags.push((k, v)),
                    _ => return Err(StatsdError::InvalidTag),
                }
            }
        }
    }
    if kind == MetricType::Set {
        if raw_values.is_empty() {
            return Err(StatsdError::InvalidValue);
        }
        values.push(StatsdValue::Member(raw_values));
    } else {
        for text in raw_values.split(':') {
            values.push(number(text, kind)?);
        }
    }
    Ok(StatsdLine {
        series: series(name, tags)?,
        kind,
        rate,
    })
}

/// One value of a counter, gauge or timer line.
fn number(text: &str, kind: MetricType) -> Result<StatsdValue<'static>, StatsdError> {
    let value = text
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or(StatsdError::InvalidValue)?;
    let relative = kind == MetricType::Gauge && text.starts_with(['+', '-']);
    Ok(if relative {
        StatsdValue::Delta(value)
    } else {
        StatsdValue::Number(value)
    })
}

/// The canonical series of `name` with `tags` (in line order; a repeated key keeps its last
/// value, as Graphite tags do).
fn series<'a>(name: &'a str, mut tags: Vec<(&str, &str)>) -> Result<Cow<'a, str>, StatsdError> {
    let plain = |c: char| !c.is_control() && !matches!(c, '\\' | ',' | '=' | '{' | '}');
    let short = name.len() <= crate::registry::SeriesKey::MAX_LEN;
    if tags.is_empty() && short && !name.is_empty() && name.chars().all(plain) {
        return Ok(Cow::Borrowed(name));
    }
    crate::registry::sort_tags_last_wins(&mut tags);
    let mut text = String::new();
    write_canonical(name, &tags, &mut text).map_err(|_| StatsdError::InvalidName)?;
    Ok(Cow::Owned(text))
}
