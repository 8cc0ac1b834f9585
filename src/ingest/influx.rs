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

mod series_memo;
#[cfg(test)]
mod tests;

use crate::registry::{write_canonical, SeriesKey};
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
/// `precision`: [`LineParser::parse`] for a caller that parses one line, its points handed
/// out as owned [`InfluxPoint`]s.
///
/// Pushes one [`InfluxPoint`] per numeric field onto `points` and one [`SkippedField`] per
/// string or boolean field onto `skipped`, both in line order.
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
    let mut parser = LineParser::default();
    parser.parse(line, precision)?;
    let ts = parser.ts();
    points.extend(parser.points().map(|(series, value)| InfluxPoint {
        series: series.to_owned(),
        value,
        ts,
    }));
    skipped.extend_from_slice(parser.skipped());
    Ok(())
}

/// Parses lines one after another into buffers it keeps, so a body of lines costs no
/// allocation per line once the buffers have grown to its longest line: the parts of a line
/// are kept as places in the line (or, when they held escapes, in one buffer of unescaped
/// text), and the series texts of its points are printed one after another into one string.
#[derive(Debug, Default)]
pub struct LineParser {
    /// The unescaped text of the elements that held a backslash.
    unescaped: String,
    /// The line's tags, in line order until checked, then sorted by key.
    tags: Vec<(Text, Text)>,
    /// The line's fields, in line order.
    fields: Vec<(Text, Value)>,
    /// For each field, whether a later field of the same key replaces it; empty when no key
    /// repeats.
    superseded: Vec<bool>,
    /// Field indexes sorted by key, to find repeated keys among many fields.
    order: Vec<u32>,
    /// The canonical text of the measurement.
    prefix: String,
    /// The canonical text of the field key being printed.
    field: String,
    /// `x` and the canonical tag part `{k=v,...}` (empty without tags), as `SeriesKey`
    /// prints it after a one-character placeholder name.
    tag_part: String,
    /// The series texts of the line's points, one after another.
    series: String,
    /// The line's points: (end of its series text in `series`, value).
    points: Vec<(usize, f64)>,
    /// The line's string and boolean fields.
    skipped: Vec<SkippedField>,
    /// The line's timestamp in seconds; `None`: none given.
    ts: Option<Timestamp>,
}

/// Where an element's unescaped text is: a range of the line (it held no backslash, the
/// usual case) or of [`LineParser::unescaped`].
#[derive(Debug, Clone, Copy)]
enum Text {
    Line(usize, usize),
    Unescaped(usize, usize),
}

impl Text {
    fn get<'a>(self, line: &'a str, unescaped: &'a str) -> &'a str {
        match self {
            Text::Line(start, end) => &line[start..end],
            Text::Unescaped(start, end) => &unescaped[start..end],
        }
    }
}

/// A line's measurement and tags, as [`LineParser::take_apart`] found them.
#[derive(Debug, Clone, Copy)]
enum SeriesPart {
    /// Taken apart: the measurement, and the tags in [`LineParser::tags`], which end at
    /// `written` in the line; `place` is where the memo keeps that part.
    Parsed {
        measurement: Text,
        written: usize,
        place: series_memo::Place,
    },
    /// From this thread's memo: their canonical texts are in [`LineParser::prefix`] and
    /// [`LineParser::tag_part`] already.
    Recalled,
}

/// A field value, reduced to what tierdb does with it.
#[derive(Debug, Clone, Copy)]
enum Value {
    Number(f64),
    Skipped(SkippedField),
}

/// The characters a backslash escapes in the measurement, besides `\` itself.
const MEASUREMENT_ESCAPES: &[u8] = b", ";
/// The characters a backslash escapes in tag keys, tag values and field keys, besides `\`.
const KEY_ESCAPES: &[u8] = b",= ";
/// Fields a line may have before repeated keys are found by sorting rather than by
/// comparing each field with the later ones.
const FEW_FIELDS: usize = 16;
/// Tags whose sorted pairs are gathered on the stack rather than in a vector.
const FEW_TAGS: usize = 8;

impl LineParser {
    /// Parses one line given without its `\n` (a trailing `\r` is tolerated), with
    /// timestamps in `precision`, replacing what the last line left.
    ///
    /// Afterwards [`LineParser::points`] gives one point per numeric field and
    /// [`LineParser::skipped`] one [`SkippedField`] per string or boolean field, both in
    /// line order; a line whose fields are all strings or booleans is accepted with only its
    /// skips. Blank lines and comments (first non-blank character `#`) give nothing. Leading
    /// and trailing spaces and tabs are ignored, and sections may be separated by more than
    /// one space.
    ///
    /// # Errors
    ///
    /// An [`InfluxError`] naming the first problem found; a refused line gives nothing.
    pub fn parse(&mut self, line: &str, precision: Precision) -> Result<(), InfluxError> {
        self.clear();
        let parsed = self.parse_kept(line, precision);
        if parsed.is_err() {
            self.clear();
        }
        parsed
    }

    /// The last line's points: the canonical text of the series `measurement.field` with the
    /// line's tags, and the field's value (integers beyond 2^53 lose precision).
    pub fn points(&self) -> impl Iterator<Item = (&str, f64)> + '_ {
        let mut start = 0;
        self.points.iter().map(move |&(end, value)| {
            let series = &self.series[start..end];
            start = end;
            (series, value)
        })
    }

    /// Whether the last line gave points.
    pub fn has_points(&self) -> bool {
        !self.points.is_empty()
    }

    /// The last line's string and boolean fields, in line order.
    pub fn skipped(&self) -> &[SkippedField] {
        &self.skipped
    }

    /// The last line's timestamp in unix seconds (floored); `None` when it has none, which
    /// means "now".
    pub fn ts(&self) -> Option<Timestamp> {
        self.ts
    }

    fn clear(&mut self) {
        self.unescaped.clear();
        self.tags.clear();
        self.fields.clear();
        self.superseded.clear();
        self.series.clear();
        self.points.clear();
        self.skipped.clear();
        self.ts = None;
    }

    fn parse_kept(&mut self, line: &str, precision: Precision) -> Result<(), InfluxError> {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.len() > MAX_LINE {
            return Err(InfluxError::LineTooLong);
        }
        let line = line.trim_matches(is_blank);
        if line.is_empty() || line.starts_with('#') {
            return Ok(());
        }
        let series = self.take_apart(line, precision)?;
        self.emit(line, series)
    }

    /// Takes apart a line already stripped of surrounding blanks and known not to be a
    /// comment into `tags` (sorted by key), `fields` and `ts`; returns its series part.
    /// When this thread's memo knows the series part as written, it is not taken apart:
    /// `prefix` and `tag_part` are set from the memo instead.
    fn take_apart(&mut self, line: &str, precision: Precision) -> Result<SeriesPart, InfluxError> {
        let bytes = line.as_bytes();
        // The measurement and tags as written: up to the first unescaped space.
        let written = &line[..scan(bytes, 0, b" ")];
        let place = series_memo::Place::of(written);
        let series = if series_memo::recall(place, written, &mut self.prefix, &mut self.tag_part) {
            SeriesPart::Recalled
        } else {
            let (measurement, end) = self.take_series_apart(line)?;
            debug_assert_eq!(
                end,
                written.len(),
                "the tags end at the first unescaped space"
            );
            SeriesPart::Parsed {
                measurement,
                written: end,
                place,
            }
        };
        let mut pos = skip_spaces(bytes, written.len());
        if pos == bytes.len() {
            return Err(InfluxError::MissingFields);
        }
        loop {
            let key_end = scan(bytes, pos, b",= ");
            if bytes.get(key_end) != Some(&b'=') {
                return Err(InfluxError::InvalidField);
            }
            let key = element(line, pos, key_end, KEY_ESCAPES, &mut self.unescaped)
                .ok_or(InfluxError::InvalidField)?;
            let (value, value_end) = field_value(line, key_end + 1)?;
            self.fields.push((key, value));
            pos = value_end;
            if bytes.get(pos) != Some(&b',') {
                break;
            }
            pos += 1;
        }

        // A field value ends at a space or the end, so what is left is blanks and maybe a
        // timestamp (the line's trailing blanks are already gone).
        pos = skip_spaces(bytes, pos);
        if pos < bytes.len() {
            let text = &line[pos..];
            let ts = integer(text, true)
                .and_then(|digits| digits.parse::<i64>().ok())
                .and_then(|ts| precision.to_seconds(ts))
                .ok_or(InfluxError::InvalidTimestamp)?;
            self.ts = Some(ts);
        }
        Ok(series)
    }

    /// Takes apart the measurement and tags at the start of `line` into `tags` (sorted by
    /// key); returns the measurement and where the tags end (the first unescaped space, or
    /// the line's end).
    fn take_series_apart(&mut self, line: &str) -> Result<(Text, usize), InfluxError> {
        let bytes = line.as_bytes();
        let end = scan(bytes, 0, b", ");
        let measurement = element(line, 0, end, MEASUREMENT_ESCAPES, &mut self.unescaped)
            .ok_or(InfluxError::InvalidMeasurement)?;
        let mut pos = end;

        while bytes.get(pos) == Some(&b',') {
            let key_end = scan(bytes, pos + 1, b",= ");
            if bytes.get(key_end) != Some(&b'=') {
                return Err(InfluxError::InvalidTag);
            }
            let key = element(line, pos + 1, key_end, KEY_ESCAPES, &mut self.unescaped)
                .ok_or(InfluxError::InvalidTag)?;
            let value_end = scan(bytes, key_end + 1, b",= ");
            if bytes.get(value_end) == Some(&b'=') {
                return Err(InfluxError::InvalidTag);
            }
            let value = element(
                line,
                key_end + 1,
                value_end,
                KEY_ESCAPES,
                &mut self.unescaped,
            )
            .ok_or(InfluxError::InvalidTag)?;
            self.tags.push((key, value));
            pos = value_end;
        }
        if self.sort_tags_finding_repeats(line) {
            return Err(InfluxError::InvalidTag);
        }

        Ok((measurement, pos))
    }

    /// Sorts `tags` by key; whether two share a key.
    fn sort_tags_finding_repeats(&mut self, line: &str) -> bool {
        let LineParser {
            tags, unescaped, ..
        } = self;
        if tags.len() < 2 {
            return false;
        }
        let unescaped: &str = unescaped;
        let key = |tag: &(Text, Text)| tag.0.get(line, unescaped);
        tags.sort_unstable_by(|a, b| key(a).cmp(key(b)));
        tags.windows(2).any(|w| key(&w[0]) == key(&w[1]))
    }

    /// Prints the points of the taken-apart line and gathers its skips.
    fn emit(&mut self, line: &str, part: SeriesPart) -> Result<(), InfluxError> {
        self.find_superseded(line);
        let LineParser {
            unescaped,
            tags,
            fields,
            superseded,
            prefix,
            field,
            tag_part,
            series,
            points,
            skipped,
            ..
        } = self;
        let unescaped = unescaped.as_str();
        // Canonical text is escaped character by character, so the text of
        // `measurement.field{tags}` is the escaped measurement, `.`, the escaped field key
        // and the tag part, each printed by `write_canonical`, the first and last once.
        let numeric = fields
            .iter()
            .any(|(_, value)| matches!(value, Value::Number(_)));
        if let (
            true,
            SeriesPart::Parsed {
                measurement,
                written,
                place,
            },
        ) = (numeric, part)
        {
            let measurement = measurement.get(line, unescaped);
            write_canonical(measurement, NO_TAGS, prefix)
                .map_err(|_| InfluxError::InvalidSeries)?;
            write_tag_part(tags, line, unescaped, tag_part)?;
            series_memo::remember(place, &line[..written], prefix, tag_part);
        }
        for (i, &(key, value)) in fields.iter().enumerate() {
            if superseded.get(i) == Some(&true) {
                continue;
            }
            let value = match value {
                Value::Number(value) => value,
                Value::Skipped(why) => {
                    skipped.push(why);
                    continue;
                }
            };
            write_canonical(key.get(line, unescaped), NO_TAGS, field)
                .map_err(|_| InfluxError::InvalidSeries)?;
            let tags = &tag_part[1..];
            let len = prefix.len() + 1 + field.len() + tags.len();
            if len > SeriesKey::MAX_LEN {
                return Err(InfluxError::InvalidSeries);
            }
            series.push_str(prefix);
            series.push('.');
            series.push_str(field);
            series.push_str(tags);
            points.push((series.len(), value));
        }
        Ok(())
    }

    /// Marks in `superseded` each field a later field of the same key replaces (left empty
    /// when no key repeats, the usual case).
    fn find_superseded(&mut self, line: &str) {
        let LineParser {
            fields,
            superseded,
            order,
            unescaped,
            ..
        } = self;
        let (fields, unescaped): (&[(Text, Value)], &str) = (fields, unescaped);
        let key = |i: usize| fields[i].0.get(line, unescaped);
        let n = fields.len();
        if n < 2 {
            return;
        }
        if n <= FEW_FIELDS {
            for i in 0..n - 1 {
                if (i + 1..n).any(|j| key(i) == key(j)) {
                    superseded.resize(n, false);
                    superseded[i] = true;
                }
            }
            return;
        }
        order.clear();
        order.extend(0..n as u32);
        // Stable: equal keys stay in line order, so all but the last of a run are replaced.
        order.sort_by(|&a, &b| key(a as usize).cmp(key(b as usize)));
        for w in order.windows(2) {
            if key(w[0] as usize) == key(w[1] as usize) {
                superseded.resize(n, false);
                superseded[w[0] as usize] = true;
            }
        }
    }
}

/// No tags, for `write_canonical` printing one part.
const NO_TAGS: &[(&str, &str)] = &[];

/// Prints `x` and the canonical tag part of `tags` (sorted by key) into `out`.
fn write_tag_part(
    tags: &[(Text, Text)],
    line: &str,
    unescaped: &str,
    out: &mut String,
) -> Result<(), InfluxError> {
    let pair = |&(k, v): &(Text, Text)| (k.get(line, unescaped), v.get(line, unescaped));
    // A one-character placeholder name that needs no escaping; the rest is the tag part.
    let written = if tags.len() <= FEW_TAGS {
        let mut pairs = [("", ""); FEW_TAGS];
        for (slot, tag) in pairs.iter_mut().zip(tags) {
            *slot = pair(tag);
        }
        write_canonical("x", &pairs[..tags.len()], out)
    } else {
        let pairs: Vec<(&str, &str)> = tags.iter().map(pair).collect();
        write_canonical("x", &pairs, out)
    };
    written.map_err(|_| InfluxError::InvalidSeries)
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
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
/// character; unescaped into `unescaped` when it holds a backslash. `start` and `end` sit on
/// ASCII bytes or the line's end, so they are character boundaries.
fn element(
    line: &str,
    start: usize,
    end: usize,
    escapes: &[u8],
    unescaped: &mut String,
) -> Option<Text> {
    let end = end.min(line.len());
    let raw = &line[start..end];
    if raw.is_empty() || has_control(raw) {
        return None;
    }
    if !raw.contains('\\') {
        return Some(Text::Line(start, end));
    }
    let from = unescaped.len();
    unescape(raw, escapes, unescaped);
    Some(Text::Unescaped(from, unescaped.len()))
}

/// Whether `text` holds a control character; ASCII text is judged byte by byte.
fn has_control(text: &str) -> bool {
    if text.is_ascii() {
        return text.bytes().any(|b| b.is_ascii_control());
    }
    text.chars().any(char::is_control)
}

/// Appends `raw` to `out` with `\c` replaced by `c` for `c` in `escapes` or `c == '\'`;
/// other backslashes stay.
fn unescape(raw: &str, escapes: &[u8], out: &mut String) {
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
