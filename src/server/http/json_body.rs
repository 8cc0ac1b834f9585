//! A JSON write's body, read as it arrives: [`ArraySplitter`] cuts the top-level array into
//! its elements without holding the body, and [`sample`] turns one element into a sample or
//! a refusal, so a bad element is refused with its number and the rest go on. Memory is one
//! element (at most [`MAX_ELEMENT`] bytes) and one network read, whatever the body's size.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::counter::SeriesKind;
use crate::registry::SeriesKey;
use crate::time::{parse_time, Timestamp};

/// Largest element of a JSON write, bytes (as the longest Influx line): a series key and its
/// tags fit many times over, and no element is ever buffered beyond it.
pub(super) const MAX_ELEMENT: usize = 64 * 1024;

/// Where the splitter is in the array.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// The `[` that opens the body.
    Open,
    /// The first element, or `]` for an empty array.
    FirstOrClose,
    /// An element after a `,`.
    Element,
    /// A `,` or the `]` after an element.
    CommaOrClose,
    /// Nothing but blanks after the `]`.
    End,
}

/// What made a body unreadable, and where.
#[derive(Debug, PartialEq)]
pub(super) struct BodyError {
    /// Elements read whole before the problem.
    pub(super) elements: usize,
    /// What was wrong, with its byte offset in the body.
    pub(super) message: String,
}

/// Cuts a JSON array body into its elements as the body arrives.
pub(super) struct ArraySplitter {
    /// Received bytes not yet consumed, from `start`.
    buf: Vec<u8>,
    start: usize,
    /// Bytes of the body before `buf[0]`.
    offset: usize,
    expect: Expect,
    elements: usize,
    ended: bool,
    /// Held bytes at which to try the element at `start` again: twice what the last attempt
    /// found incomplete, so a client trickling one element a byte per frame costs parsing
    /// work linear in its size, not quadratic.
    retry_at: usize,
    /// Parse attempts so far, for the test of the above.
    #[cfg(test)]
    attempts: usize,
}

impl ArraySplitter {
    pub(super) fn new() -> ArraySplitter {
        ArraySplitter {
            buf: Vec::new(),
            start: 0,
            offset: 0,
            expect: Expect::Open,
            elements: 0,
            ended: false,
            retry_at: 0,
            #[cfg(test)]
            attempts: 0,
        }
    }

    /// Adds the body's next bytes.
    pub(super) fn feed(&mut self, data: &[u8]) {
        self.buf.drain(..self.start);
        self.offset += self.start;
        self.start = 0;
        self.buf.extend_from_slice(data);
    }

    /// Marks the end of the body: what is held must now be whole.
    pub(super) fn end(&mut self) {
        self.ended = true;
    }

    /// Whether [`ArraySplitter::end`] was called.
    pub(super) fn ended(&self) -> bool {
        self.ended
    }

    /// Elements returned so far.
    pub(super) fn elements(&self) -> usize {
        self.elements
    }

    /// The next whole element; `None` when more of the body is needed, or (after
    /// [`ArraySplitter::end`]) when the array is complete.
    ///
    /// # Errors
    /// A [`BodyError`] when the body is not a JSON array (or is cut short, once ended), or
    /// holds an element larger than [`MAX_ELEMENT`]; the splitter is then done.
    pub(super) fn next(&mut self) -> Result<Option<Value>, BodyError> {
        loop {
            let blanks = self.buf[self.start..]
                .iter()
                .take_while(|b| b" \t\r\n".contains(b))
                .count();
            self.start += blanks;
            let Some(&byte) = self.buf.get(self.start) else {
                return match (self.ended, self.expect) {
                    (false, _) | (true, Expect::End) => Ok(None),
                    (true, Expect::Open) => Err(self.error(self.start, "the body is empty")),
                    (true, _) => {
                        Err(self.error(self.start, "the body ends before the array closes"))
                    }
                };
            };
            match (self.expect, byte) {
                (Expect::Open, b'[') => self.expect = Expect::FirstOrClose,
                (Expect::Open, _) => return Err(self.unexpected("`[`")),
                (Expect::FirstOrClose | Expect::CommaOrClose, b']') => self.expect = Expect::End,
                (Expect::CommaOrClose, b',') => self.expect = Expect::Element,
                (Expect::CommaOrClose, _) => return Err(self.unexpected("`,` or `]`")),
                (Expect::Element, b']') => return Err(self.unexpected("an element after `,`")),
                (Expect::FirstOrClose | Expect::Element, _) => return self.element(),
                (Expect::End, _) => return Err(self.unexpected("nothing after the array")),
            }
            self.start += 1;
        }
    }

    /// The element at `start`, when it is whole.
    fn element(&mut self) -> Result<Option<Value>, BodyError> {
        let held = &self.buf[self.start..];
        if !self.ended && held.len() < self.retry_at && held.len() <= MAX_ELEMENT {
            return Ok(None);
        }
        #[cfg(test)]
        {
            self.attempts += 1;
        }
        let mut values = serde_json::Deserializer::from_slice(held).into_iter::<Value>();
        let too_long = |this: &Self| {
            this.error(
                this.start,
                &format!(
                    "element {} is longer than {MAX_ELEMENT} bytes",
                    this.elements + 1
                ),
            )
        };
        match values.next() {
            Some(Ok(_)) if values.byte_offset() > MAX_ELEMENT => Err(too_long(self)),
            // A value that ends where the received bytes do may go on (a number's digits).
            Some(Ok(value)) if self.ended || values.byte_offset() < held.len() => {
                self.start += values.byte_offset();
                self.elements += 1;
                self.retry_at = 0;
                self.expect = Expect::CommaOrClose;
                Ok(Some(value))
            }
            Some(Err(e)) if !e.is_eof() || self.ended => {
                let at = self.start + byte_of(held, e.line(), e.column());
                let what = e.to_string();
                let what = what
                    .rsplit_once(" at line ")
                    .map_or(what.as_str(), |(w, _)| w);
                Err(self.error(at, what))
            }
            _ if held.len() > MAX_ELEMENT => Err(too_long(self)),
            _ => {
                self.retry_at = held.len() * 2;
                Ok(None)
            }
        }
    }

    fn unexpected(&self, expected: &str) -> BodyError {
        let found = match self.buf[self.start] {
            byte if byte.is_ascii_graphic() => format!("`{}`", byte as char),
            byte => format!("byte {byte:#04x}"),
        };
        self.error(self.start, &format!("expected {expected}, found {found}"))
    }

    fn error(&self, at: usize, what: &str) -> BodyError {
        BodyError {
            elements: self.elements,
            message: format!("{what} at byte {}", self.offset + at),
        }
    }
}

/// The byte index of serde_json's 1-based `line` and `column` (0 for "before the first
/// character") in `text`.
fn byte_of(text: &[u8], line: usize, column: usize) -> usize {
    let line_start = if line <= 1 {
        0
    } else {
        (text.iter().enumerate())
            .filter(|(_, &b)| b == b'\n')
            .nth(line - 2)
            .map_or(text.len(), |(i, _)| i + 1)
    };
    (line_start + column.saturating_sub(1)).min(text.len())
}

/// One element of a JSON write.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonSample {
    series: String,
    #[serde(default)]
    tags: BTreeMap<String, String>,
    ts: Value,
    value: f64,
    #[serde(default)]
    kind: Option<SeriesKind>,
}

/// What one element asks for.
#[derive(Debug, PartialEq)]
pub(super) enum Element {
    /// A sample of the series `series` (canonical text), declared `kind` when given.
    Sample {
        series: String,
        kind: Option<SeriesKind>,
        ts: Timestamp,
        value: f64,
    },
    /// An element refused under `reason`.
    Refused {
        reason: &'static str,
        message: String,
    },
}

/// Reads one element: `{series, tags?, ts, value, kind?}`, `ts` in seconds or any form of the
/// time grammar (read at `now`), `kind` defaulting to `request_kind`.
pub(super) fn sample(item: Value, now: Timestamp, request_kind: Option<SeriesKind>) -> Element {
    let refused = |reason, message| Element::Refused { reason, message };
    let sample: JsonSample = match serde_json::from_value(item) {
        Ok(sample) => sample,
        Err(e) => return refused("invalid_sample", e.to_string()),
    };
    let ts = match &sample.ts {
        Value::Number(n) => n.as_f64().map(|f| f.floor() as i64),
        Value::String(s) => parse_time(s, now).ok(),
        _ => None,
    };
    let Some(ts) = ts else {
        return refused(
            "invalid_timestamp",
            format!("ts {} is not a time", sample.ts),
        );
    };
    let key = if sample.tags.is_empty() {
        SeriesKey::parse(&sample.series)
    } else {
        SeriesKey::new(sample.series.as_str(), sample.tags)
    };
    match key {
        Ok(key) => Element::Sample {
            series: key.to_string(),
            kind: sample.kind.or(request_kind),
            ts,
            value: sample.value,
        },
        Err(e) => refused("invalid_series", e.to_string()),
    }
}
