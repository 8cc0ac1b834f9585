//! Series keys: a metric name plus a canonically ordered tag set, and their one text form.
//!
//! The canonical text is `name` with no tags, else `name{k=v,k2=v2}` with tags sorted by key.
//! The five characters that carry syntax (`\`, `,`, `=`, `{`, `}`) are written with a
//! backslash in front wherever they appear as data (name, keys and values), so every key
//! round-trips through its text. The parser is strict about that: an unescaped syntax
//! character where it has no meaning is refused rather than guessed at.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use super::view::{KeyView, Tags};
use crate::error::Error;
use crate::error::Result;

/// The characters that carry syntax in the canonical text and are escaped when they are data.
const SPECIAL: [char; 5] = ['\\', ',', '=', '{', '}'];

/// A metric name plus its tags, kept sorted by tag key so that one series has one key.
///
/// `cpu.load{host=a}` and `cpu.load{host=b}` are two series; `m{a=1,b=2}` and `m{b=2,a=1}`
/// are the same one. Held as its canonical text, which is what the registry stores and
/// looks up; name and tags are read from it ([`KeyView`]). Ordered by name, then tags.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    /// The canonical text: one string to hash, compare and store, and the text form to
    /// print without formatting.
    text: Box<str>,
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
        Self::build(name, tags).map_err(|(input, reason)| Error::InvalidSeries { input, reason })
    }

    /// Parses the canonical text form `name` or `name{k=v,k2=v2}`; tags may come in any
    /// order and are sorted. `\\`, `\,`, `\=`, `\{` and `\}` stand for the literal character
    /// anywhere in the name, keys and values. Text that is not of that form but is Graphite's
    /// tagged path (`name;k=v;k2=v2`, how Graphite senders write tags) is read as that
    /// path's series.
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
        let (name, tags) = match parse_parts(text) {
            Ok(parts) => parts,
            // Graphite's tagged form, as the series was sent: `name;k=v;k2=v2`.
            Err(reason) => match graphite_form(text) {
                Some(key) => return Ok(key),
                None => return Err(invalid(reason)),
            },
        };
        Self::build(name, tags).map_err(|(_, reason)| invalid(reason))
    }

    /// Wraps text known to be canonical.
    pub(super) fn from_canonical(text: Box<str>) -> SeriesKey {
        SeriesKey { text }
    }

    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The key borrowed as a [`KeyView`], the form selectors and patterns match.
    pub fn view(&self) -> KeyView<'_> {
        KeyView::new(&self.text)
    }

    /// The metric name, unescaped.
    pub fn name(&self) -> Cow<'_, str> {
        self.view().name()
    }

    /// The tags, unescaped, sorted by key.
    pub fn tags(&self) -> Tags<'_> {
        self.view().tags()
    }

    /// The value of tag `key`, if the key has it.
    pub fn tag(&self, key: &str) -> Option<Cow<'_, str>> {
        self.view().tag(key)
    }

    /// Sorts, validates and prints the canonical text; on refusal returns the parts as text
    /// (for the error's input) with the reason.
    fn build(
        name: String,
        mut tags: Vec<(String, String)>,
    ) -> std::result::Result<SeriesKey, (String, String)> {
        tags.sort_by(|a, b| a.0.cmp(&b.0));
        let mut text = String::new();
        match write_canonical(&name, &tags, &mut text) {
            Ok(()) => Ok(SeriesKey {
                text: text.into_boxed_str(),
            }),
            Err(reason) => Err((raw_text(&name, &tags), reason)),
        }
    }
}

/// Writes the canonical text of `name` with `tags` (already sorted by key) into `out`,
/// replacing what it held, after the checks [`SeriesKey::new`] makes: the one printer of
/// keys, which hot ingest paths call with borrowed parts and a reused buffer. One pass over
/// each part checks and escapes it.
///
/// # Errors
///
/// Why the parts make no key (empty or control characters, a repeated tag key, too long);
/// `out` is then left empty.
pub(crate) fn write_canonical<K: AsRef<str>, V: AsRef<str>>(
    name: &str,
    tags: &[(K, V)],
    out: &mut String,
) -> std::result::Result<(), String> {
    out.clear();
    let written = print(name, tags, out);
    if written.is_err() {
        out.clear();
    }
    written
}

fn print<K: AsRef<str>, V: AsRef<str>>(
    name: &str,
    tags: &[(K, V)],
    out: &mut String,
) -> std::result::Result<(), String> {
    if let Some(pair) = tags.windows(2).find(|w| w[0].0.as_ref() == w[1].0.as_ref()) {
        return Err(format!(
            "tag key {:?} appears more than once",
            pair[0].0.as_ref()
        ));
    }
    push_part(out, name, || "name".into())?;
    for (i, (k, v)) in tags.iter().enumerate() {
        let k = k.as_ref();
        out.push(if i == 0 { '{' } else { ',' });
        push_part(out, k, || "tag key".into())?;
        out.push('=');
        push_part(out, v.as_ref(), || format!("value of tag {k:?}"))?;
    }
    if !tags.is_empty() {
        out.push('}');
    }
    if out.len() > SeriesKey::MAX_LEN {
        return Err(format!(
            "canonical text is {} bytes, longer than the limit of {}",
            out.len(),
            SeriesKey::MAX_LEN
        ));
    }
    Ok(())
}

impl Ord for SeriesKey {
    /// By name, then by tags, unescaped: the order of the parts, not of the text.
    fn cmp(&self, other: &SeriesKey) -> Ordering {
        self.name()
            .cmp(&other.name())
            .then_with(|| self.tags().cmp(other.tags()))
    }
}

impl PartialOrd for SeriesKey {
    fn partial_cmp(&self, other: &SeriesKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for SeriesKey {
    /// Writes the canonical text: `name`, or `name{k=v,...}` with tags sorted and syntax
    /// characters escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for SeriesKey {
    type Err = Error;

    fn from_str(text: &str) -> Result<SeriesKey> {
        SeriesKey::parse(text)
    }
}

/// A key travels as its canonical text (the cluster's partial answers carry keys).
impl serde::Serialize for SeriesKey {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

/// Reads a key as [`SeriesKey::parse`] does: its canonical text, or Graphite's tagged form.
impl<'de> serde::Deserialize<'de> for SeriesKey {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<SeriesKey, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        SeriesKey::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A byte [`push_part`] copies as it is.
const PLAIN: u8 = 0;
/// One of the [`SPECIAL`] characters (all ASCII, so never inside a multi-byte character).
const ESCAPE: u8 = 1;
/// An ASCII control, or a non-ASCII byte, which may start a C1 control: the part's
/// characters need a look.
const LOOK: u8 = 2;
/// The class of every byte value, so one table load per byte decides.
const BYTE_CLASS: [u8; 256] = {
    let mut table = [PLAIN; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = match i as u8 {
            b'\\' | b',' | b'=' | b'{' | b'}' => ESCAPE,
            0x00..=0x1f | 0x7f..=0xff => LOOK,
            _ => PLAIN,
        };
        i += 1;
    }
    table
};

/// Appends `part` escaped, refusing it when empty or holding a control character; `what`
/// names the part, computed only for a refusal.
fn push_part(
    out: &mut String,
    part: &str,
    what: impl FnOnce() -> String,
) -> std::result::Result<(), String> {
    if part.is_empty() {
        return Err(format!("{} is empty", what()));
    }
    let mut run = 0;
    let mut looked = false;
    for (i, &b) in part.as_bytes().iter().enumerate() {
        match BYTE_CLASS[b as usize] {
            PLAIN => {}
            ESCAPE => {
                out.push_str(&part[run..i]);
                out.push('\\');
                run = i;
            }
            _ if looked => {}
            _ => {
                looked = true;
                if let Some(c) = part.chars().find(|c| c.is_control()) {
                    return Err(format!("{} contains the control character {c:?}", what()));
                }
            }
        }
    }
    out.push_str(&part[run..]);
    Ok(())
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

/// The key of Graphite's tagged path `text` (`name;k=v;...`), when it is one: the key
/// Graphite ingest stores that path under.
fn graphite_form(text: &str) -> Option<SeriesKey> {
    if text.contains('{') {
        return None;
    }
    let (name, tags) = split_graphite_tags(text)?;
    SeriesKey::new(name, tags).ok()
}

/// Splits Graphite's tagged path `name;k=v;k2=v2` into the name and its tags, sorted by key,
/// a repeated key keeping its last value; `None` for an empty name or a tag that is not
/// `k=v` with both sides non-empty. Graphite ingest and [`SeriesKey::parse`] share it.
pub(crate) fn split_graphite_tags(text: &str) -> Option<(&str, Vec<(&str, &str)>)> {
    let mut segments = text.split(';');
    let name = segments.next().unwrap_or_default();
    if name.is_empty() {
        return None;
    }
    let mut tags = segments
        .map(|segment| match segment.split_once('=') {
            Some((k, v)) if !k.is_empty() && !v.is_empty() => Some((k, v)),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    if tags.is_empty() {
        return None;
    }
    sort_tags_last_wins(&mut tags);
    Some((name, tags))
}

/// Sorts tags given in line order by key, a repeated key keeping its last value (as Graphite
/// 1.1 does with repeated tags).
pub(crate) fn sort_tags_last_wins(tags: &mut Vec<(&str, &str)>) {
    // Stable, so a repeated key's occurrences stay in line order and the last one wins.
    tags.sort_by(|a, b| a.0.cmp(b.0));
    tags.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 = later.1;
        }
        same
    });
}
