//! A borrowed series key: its canonical text, read for name and tags on demand. The registry
//! keeps every key only as text, and matches selectors against this view of it rather than
//! building a [`SeriesKey`] per series and scan.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

use super::key::SeriesKey;

/// A series key as its canonical text (the form [`SeriesKey`] prints), borrowed from the
/// registry or from a [`SeriesKey`]. Name and tag parts come back unescaped, borrowed from
/// the text unless they hold an escaped syntax character.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyView<'a> {
    /// Canonical text; only ever built from text known to be canonical, which is what lets
    /// the readers below skip every check.
    text: &'a str,
}

impl<'a> KeyView<'a> {
    /// Wraps `text`, which the caller knows to be canonical.
    pub(super) fn new(text: &'a str) -> KeyView<'a> {
        KeyView { text }
    }

    /// The canonical text.
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    /// The metric name, unescaped.
    pub fn name(&self) -> Cow<'a, str> {
        part(self.text, 0).0
    }

    /// The tags, unescaped, sorted by key.
    pub fn tags(&self) -> Tags<'a> {
        let end = part_end(self.text, 0);
        Tags {
            text: self.text,
            // Past the `{`, or at the end when there are no tags.
            pos: (end + 1).min(self.text.len()),
        }
    }

    /// The value of tag `key`, if the key has it.
    pub fn tag(&self, key: &str) -> Option<Cow<'a, str>> {
        for (k, v) in self.tags() {
            match (*k).cmp(key) {
                Ordering::Less => {}
                Ordering::Equal => return Some(v),
                // Sorted: the key cannot come later.
                Ordering::Greater => return None,
            }
        }
        None
    }

    /// An owned copy.
    pub fn to_key(&self) -> SeriesKey {
        SeriesKey::from_canonical(self.text.into())
    }
}

impl fmt::Display for KeyView<'_> {
    /// Writes the canonical text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}

/// The tags of a [`KeyView`], in key order.
#[derive(Clone, Debug)]
pub struct Tags<'a> {
    text: &'a str,
    /// Start of the next tag's key; the text's length when none is left.
    pos: usize,
}

impl<'a> Iterator for Tags<'a> {
    type Item = (Cow<'a, str>, Cow<'a, str>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.text.len() {
            return None;
        }
        let (key, eq) = part(self.text, self.pos);
        let (value, end) = part(self.text, eq + 1);
        self.pos = match self.text.as_bytes().get(end) {
            Some(b',') => end + 1,
            _ => self.text.len(),
        };
        Some((key, value))
    }
}

/// The unescaped part of canonical `text` that starts at `start`, and where it ends (at its
/// terminator, or the end of the text).
fn part(text: &str, start: usize) -> (Cow<'_, str>, usize) {
    let end = part_end(text, start);
    let raw = &text[start..end];
    let part = match raw.contains('\\') {
        false => Cow::Borrowed(raw),
        true => {
            let mut out = String::with_capacity(raw.len());
            let mut escape = false;
            for c in raw.chars() {
                if escape || c != '\\' {
                    out.push(c);
                }
                escape = !escape && c == '\\';
            }
            Cow::Owned(out)
        }
    };
    (part, end)
}

/// Where the part of canonical `text` that starts at `start` ends: its unescaped terminator,
/// or the end of the text.
fn part_end(text: &str, start: usize) -> usize {
    let bytes = text.as_bytes();
    let mut i = start;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\\' => i += 2,
            b',' | b'=' | b'{' | b'}' => return i,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The bytes of a raw canonical part with its escapes resolved: in canonical text every
/// backslash escapes the byte after it.
fn unescaped(raw: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut escape = false;
    raw.iter().copied().filter(move |&b| {
        let keep = escape || b != b'\\';
        escape = !escape && b == b'\\';
        keep
    })
}

/// Whether `text` is exactly what [`SeriesKey`] prints for some key: the check that opening
/// the series log makes of every record, in one pass over the text instead of a parse and a
/// print.
pub(super) fn is_canonical(text: &str) -> bool {
    text.len() <= SeriesKey::MAX_LEN && canonical_tags(text.as_bytes()).is_some()
}

/// `Some` when `bytes` is a valid name followed by no tags or by a tag set sorted by key.
fn canonical_tags(bytes: &[u8]) -> Option<()> {
    let name_end = valid_part(bytes, 0)?;
    match bytes.get(name_end) {
        None => return Some(()),
        Some(b'{') => {}
        Some(_) => return None,
    }
    let mut pos = name_end + 1;
    let mut previous: Option<&[u8]> = None;
    loop {
        let key_end = valid_part(bytes, pos)?;
        if bytes.get(key_end) != Some(&b'=') {
            return None;
        }
        let key = &bytes[pos..key_end];
        // Strictly increasing: sorted, and no key twice.
        if previous.is_some_and(|p| unescaped(p).cmp(unescaped(key)) != Ordering::Less) {
            return None;
        }
        previous = Some(key);
        let value_end = valid_part(bytes, key_end + 1)?;
        match bytes.get(value_end) {
            Some(b',') => pos = value_end + 1,
            Some(b'}') => return (value_end + 1 == bytes.len()).then_some(()),
            _ => return None,
        }
    }
}

/// Where the part starting at `start` ends, when it is a part [`SeriesKey`] accepts and
/// prints that way: not empty, no control character, only syntax characters escaped.
fn valid_part(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\\' => match bytes.get(i + 1) {
                Some(b'\\' | b',' | b'=' | b'{' | b'}') => i += 2,
                _ => return None,
            },
            b',' | b'=' | b'{' | b'}' => break,
            // C0 controls and DEL, and C1 controls (U+0080..=U+009F, `C2 80..=9F` in UTF-8):
            // what `char::is_control` refuses.
            0..=0x1f | 0x7f => return None,
            0xc2 if matches!(bytes.get(i + 1), Some(0x80..=0x9f)) => return None,
            _ => i += 1,
        }
    }
    (i > start).then_some(i)
}
