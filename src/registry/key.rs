//! Series keys: a metric name plus a canonically ordered tag set, and their one text form.
//!
//! The canonical text is `name` with no tags, else `name{k=v,k2=v2}` with tags sorted by key.
//! The five characters that carry syntax (`\`, `,`, `=`, `{`, `}`) are written with a
//! backslash in front wherever they appear as data (name, keys and values), so every key
//! round-trips through its text. The parser is strict about that: an unescaped syntax
//! character where it has no meaning is refused rather than guessed at.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// The characters that carry syntax in the canonical text and are escaped when they are data.
const SPECIAL: [char; 5] = ['\\', ',', '=', '{', '}'];

/// A metric name plus its tags, kept sorted by tag key so that one series has one key.
///
/// `cpu.load{host=a}` and `cpu.load{host=b}` are two series; `m{a=1,b=2}` and `m{b=2,a=1}`
/// are the same one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    /// The metric name; never empty.
    name: String,
    /// Tags sorted by key, keys unique; the sort is what makes the text form canonical.
    tags: Vec<(String, String)>,
}

impl SeriesKey {
    /// Longest accepted canonical text, in bytes. It keeps one log record small and bounds
    /// what a client can make the registry hold per series.
    pub const MAX_LEN: usize = 8192;

    /// Builds a key from a name and tags given in any order; the tags are sorted by key.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSeries`] when the name, a tag key or a tag value is empty or contains
    /// a control character, when two tags share a key, or when the canonical text would be
    /// longer than [`SeriesKey::MAX_LEN`].
    pub fn new<N: Into<String>, K: Into<String>, V: Into<String>>(
        name: N,
        tags: impl IntoIterator<Item = (K, V)>,
    ) -> Result<SeriesKey> {
        let name = name.into();
        let tags: Vec<(String, String)> = tags
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Self::build(name, tags).map_err(|(key, reason)| Error::InvalidSeries {
            input: raw_text(&key.name, &key.tags),
            reason,
        })
    }

    /// Parses the canonical text form `name` or `name{k=v,k2=v2}`; tags may come in any
    /// order and are sorted. `\\`, `\,`, `\=`, `\{` and `\}` stand for the literal character
    /// anywhere in the name, keys and values.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSeries`] (carrying `text`) when the text does not follow that grammar
    /// (unescaped syntax character, unknown escape, missing `}`, text after `}`, `{}` with no
    /// tags) or when the key it describes is refused by [`SeriesKey::new`].
    pub fn parse(text: &str) -> Result<SeriesKey> {
        let invalid = |reason: String| Error::InvalidSeries {
            input: text.to_owned(),
            reason,
        };
        let (name, tags) = parse_parts(text).map_err(invalid)?;
        Self::build(name, tags).map_err(|(_, reason)| invalid(reason))
    }

    /// The metric name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tags, sorted by key.
    pub fn tags(&self) -> &[(String, String)] {
        &self.tags
    }

    /// The value of tag `key`, if the key has it.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| self.tags[i].1.as_str())
    }

    /// Sorts and validates; on refusal hands the parts back (for the error's input text)
    /// with the reason.
    fn build(
        name: String,
        mut tags: Vec<(String, String)>,
    ) -> std::result::Result<SeriesKey, (SeriesKey, String)> {
        tags.sort_by(|a, b| a.0.cmp(&b.0));
        let key = SeriesKey { name, tags };
        match key.problem() {
            None => Ok(key),
            Some(reason) => Err((key, reason)),
        }
    }

    /// What makes this (sorted) key unacceptable, if anything.
    fn problem(&self) -> Option<String> {
        if let Some(reason) = part_problem("name", &self.name) {
            return Some(reason);
        }
        for (k, v) in &self.tags {
            if let Some(reason) = part_problem("tag key", k) {
                return Some(reason);
            }
            if let Some(reason) = part_problem(&format!("value of tag {k:?}"), v) {
                return Some(reason);
            }
        }
        if let Some(pair) = self.tags.windows(2).find(|w| w[0].0 == w[1].0) {
            return Some(format!("tag key {:?} appears more than once", pair[0].0));
        }
        let len = self.canonical_len();
        if len > Self::MAX_LEN {
            return Some(format!(
                "canonical text is {len} bytes, longer than the limit of {}",
                Self::MAX_LEN
            ));
        }
        None
    }

    /// Length in bytes of the canonical text, without building it.
    fn canonical_len(&self) -> usize {
        let tags: usize = self
            .tags
            .iter()
            .map(|(k, v)| escaped_len(k) + 1 + escaped_len(v))
            .sum();
        let punctuation = if self.tags.is_empty() {
            0
        } else {
            // `{`, `}` and the commas between tags.
            2 + self.tags.len() - 1
        };
        escaped_len(&self.name) + tags + punctuation
    }
}

impl fmt::Display for SeriesKey {
    /// Writes the canonical text: `name`, or `name{k=v,...}` with tags sorted and syntax
    /// characters escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, &self.name)?;
        if self.tags.is_empty() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, (k, v)) in self.tags.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write_escaped(f, k)?;
            f.write_str("=")?;
            write_escaped(f, v)?;
        }
        f.write_str("}")
    }
}

impl FromStr for SeriesKey {
    type Err = Error;

    fn from_str(text: &str) -> Result<SeriesKey> {
        SeriesKey::parse(text)
    }
}

/// Why one part (name, key or value) is refused, if it is.
fn part_problem(what: &str, part: &str) -> Option<String> {
    if part.is_empty() {
        return Some(format!("{what} is empty"));
    }
    part.chars()
        .find(|c| c.is_control())
        .map(|c| format!("{what} contains the control character {c:?}"))
}

fn escaped_len(part: &str) -> usize {
    part.len() + part.chars().filter(|c| SPECIAL.contains(c)).count()
}

fn write_escaped(f: &mut fmt::Formatter<'_>, part: &str) -> fmt::Result {
    // Write runs of plain characters in one call; only syntax characters are split out.
    let mut start = 0;
    for (i, c) in part.char_indices() {
        if SPECIAL.contains(&c) {
            f.write_str(&part[start..i])?;
            f.write_str("\\")?;
            start = i;
        }
    }
    f.write_str(&part[start..])
}

/// An unescaped, human-oriented rendering for error messages about keys built by parts.
fn raw_text(name: &str, tags: &[(String, String)]) -> String {
    if tags.is_empty() {
        return name.to_owned();
    }
    let tags: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{name}{{{}}}", tags.join(","))
}

/// Splits canonical-form text into its unescaped name and tags (not yet sorted or checked).
pub(crate) fn parse_parts(
    text: &str,
) -> std::result::Result<(String, Vec<(String, String)>), String> {
    let mut chars = text.chars();
    let (name, end) = read_part(&mut chars)?;
    match end {
        None => return Ok((name, Vec::new())),
        Some('{') => {}
        Some(c) => return Err(unescaped(c, "the name")),
    }
    let mut tags = Vec::new();
    loop {
        let (key, end) = read_part(&mut chars)?;
        match end {
            Some('=') => {}
            Some('}') if key.is_empty() && tags.is_empty() => {
                return Err("empty tag set `{}`; write the name alone".to_owned())
            }
            Some(c) => return Err(format!("expected `=` after tag key {key:?}, found `{c}`")),
            None => {
                return Err(format!(
                    "tag key {key:?} has no `=value` and `}}` is missing"
                ))
            }
        }
        let (value, end) = read_part(&mut chars)?;
        tags.push((key, value));
        match end {
            Some(',') => {}
            Some('}') => break,
            Some(c) => {
                let key = &tags[tags.len() - 1].0;
                return Err(unescaped(c, &format!("the value of tag {key:?}")));
            }
            None => return Err("missing closing `}`".to_owned()),
        }
    }
    let rest: String = chars.collect();
    if rest.is_empty() {
        Ok((name, tags))
    } else {
        Err(format!("unexpected text {rest:?} after the closing `}}`"))
    }
}

fn unescaped(c: char, place: &str) -> String {
    format!("unescaped `{c}` in {place} (write `\\{c}` for a literal one)")
}

/// Reads unescaped text up to the next unescaped syntax character, which is returned as
/// the terminator (`None` at the end of the input).
fn read_part(
    chars: &mut std::str::Chars<'_>,
) -> std::result::Result<(String, Option<char>), String> {
    let mut out = String::new();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e) if SPECIAL.contains(&e) => out.push(e),
                Some(e) => {
                    return Err(format!(
                        "unknown escape `\\{e}` (only \\\\ \\, \\= \\{{ \\}} are escapes)"
                    ))
                }
                None => return Err("trailing `\\` escapes nothing".to_owned()),
            }
        } else if SPECIAL.contains(&c) {
            return Ok((out, Some(c)));
        } else {
            out.push(c);
        }
    }
    Ok((out, None))
}
