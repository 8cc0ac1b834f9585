//! Series selectors: a name glob plus tag filters, the way queries and listings name many
//! series at once. Text form: `glob` or `glob{k=v,k!=v,...}`, e.g.
//! `host*.cpu.load{location=1,host!=b}`; a tag value may be a glob (`host=web-*`).

use std::fmt;

use super::glob::glob_match;
use super::key::parse_parts;
use super::view::KeyView;
use crate::error::Error;
use crate::error::Result;

/// One condition on a tag. A value holding a glob character (`*`, `?`, `[`) is a glob over
/// the tag's value (`host=web-*`), as in `/render`'s tagged paths; any other value is
/// compared as text.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TagFilter {
    /// The series carries tag `key` with this value (or one the glob matches).
    Eq(String, String),
    /// The series does not carry tag `key` with this value (or one the glob matches); a
    /// series without the tag passes, as in Prometheus.
    NotEq(String, String),
}

/// True when the tag value `value` is what the filter's `wanted` names: the same text, or
/// matched by it when it is a glob.
fn value_matches(wanted: &str, value: Option<&str>) -> bool {
    match value {
        None => false,
        Some(value) if is_glob(wanted) => glob_match(wanted, value),
        Some(value) => value == wanted,
    }
}

/// True when `text` holds a glob character.
pub(crate) fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

impl TagFilter {
    /// Parses `k=v` or `k!=v`.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] when there is no `=` or the key is empty.
    pub fn parse(text: &str) -> Result<TagFilter> {
        let (key, value) = text.split_once('=').ok_or_else(|| {
            Error::InvalidQuery(format!("tag filter {text:?} is not k=v or k!=v"))
        })?;
        TagFilter::from_parts(key, value)
            .ok_or_else(|| Error::InvalidQuery(format!("tag filter {text:?} has no key")))
    }

    /// `key=value`, or `key!=value` when `key` ends in `!`; `None` for an empty key.
    fn from_parts(key: &str, value: &str) -> Option<TagFilter> {
        let filter = match key.strip_suffix('!') {
            Some(key) => TagFilter::NotEq(key.to_owned(), value.to_owned()),
            None => TagFilter::Eq(key.to_owned(), value.to_owned()),
        };
        let (TagFilter::Eq(k, _) | TagFilter::NotEq(k, _)) = &filter;
        (!k.is_empty()).then_some(filter)
    }

    /// True when `key` passes.
    pub fn accepts(&self, key: KeyView<'_>) -> bool {
        match self {
            TagFilter::Eq(k, v) => value_matches(v, key.tag(k).as_deref()),
            TagFilter::NotEq(k, v) => !value_matches(v, key.tag(k).as_deref()),
        }
    }
}

impl fmt::Display for TagFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TagFilter::Eq(k, v) => write!(f, "{k}={v}"),
            TagFilter::NotEq(k, v) => write!(f, "{k}!={v}"),
        }
    }
}

/// Which series a query or listing covers: a name glob (`*`, `?`, `[a-z]`, `[!a-z]`; see
/// `glob_match`) and tag filters that must all pass.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Selector {
    /// Glob over the metric name.
    pub pattern: String,
    /// Every filter must accept the series.
    pub filters: Vec<TagFilter>,
}

impl Selector {
    /// Every series whose name matches `pattern`.
    pub fn new(pattern: impl Into<String>) -> Selector {
        Selector {
            pattern: pattern.into(),
            filters: Vec::new(),
        }
    }

    /// Adds a filter.
    pub fn with(mut self, filter: TagFilter) -> Selector {
        self.filters.push(filter);
        self
    }

    /// Parses `glob` or `glob{k=v,k!=v}`. Inside the braces, `\,` `\=` `\{` `\}` `\\` stand
    /// for the literal character, as in series keys. Graphite's tagged form,
    /// `glob;k=v;k!=v`, is read as the same selector.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] naming the text when it does not follow that form.
    pub fn parse(text: &str) -> Result<Selector> {
        let invalid = |reason: String| Error::InvalidQuery(format!("selector {text:?}: {reason}"));
        let (pattern, tags) = match parse_parts(text) {
            Ok(parts) => parts,
            Err(reason) => match graphite_form(text) {
                Some(selector) => return selector.map_err(|e| invalid(e.to_string())),
                None => return Err(invalid(reason)),
            },
        };
        if pattern.is_empty() {
            return Err(invalid(
                "the name pattern is empty (use * for every name)".into(),
            ));
        }
        let filters = tags
            .iter()
            .map(|(k, v)| {
                TagFilter::from_parts(k, v).ok_or_else(|| invalid("a tag filter has no key".into()))
            })
            .collect::<Result<_>>()?;
        Ok(Selector { pattern, filters })
    }

    /// Adds a filter for each `k=v` or `k!=v` text: the HTTP API's `tag=` parameters and the
    /// command line's `--tag` options, read by the one grammar of [`TagFilter::parse`].
    ///
    /// # Errors
    /// As [`TagFilter::parse`], for the first text that is not a filter.
    pub fn with_tags<'a>(mut self, tags: impl IntoIterator<Item = &'a str>) -> Result<Selector> {
        for tag in tags {
            self.filters.push(TagFilter::parse(tag)?);
        }
        Ok(self)
    }

    /// True when this selector takes every series whatever its name: a name glob of only
    /// `*` and `.` and no tag filter. A deletion asks for an explicit word (`--all`,
    /// `all=true`) before it takes all.
    pub fn takes_every_name(&self) -> bool {
        self.filters.is_empty() && self.pattern.chars().all(|c| c == '*' || c == '.')
    }

    /// True when `key` is selected.
    pub fn matches(&self, key: KeyView<'_>) -> bool {
        glob_match(&self.pattern, &key.name()) && self.filters.iter().all(|f| f.accepts(key))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)?;
        if !self.filters.is_empty() {
            let filters: Vec<String> = self.filters.iter().map(ToString::to_string).collect();
            write!(f, "{{{}}}", filters.join(","))?;
        }
        Ok(())
    }
}

/// The selector Graphite's tagged form `glob;k=v;k2!=v2` names, when `text` has that form:
/// a `;` and no braces.
fn graphite_form(text: &str) -> Option<Result<Selector>> {
    if !text.contains(';') || text.contains('{') {
        return None;
    }
    let mut parts = text.split(';');
    let pattern = parts.next().unwrap_or_default();
    if pattern.is_empty() {
        return None;
    }
    Some(Selector::new(pattern).with_tags(parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::SeriesKey;

    fn matches(selector: &Selector, text: &str) -> bool {
        selector.matches(SeriesKey::parse(text).unwrap().view())
    }

    #[test]
    fn selectors_filter_by_name_and_tags() {
        let s = Selector::parse("host*.cpu.load{location=1,host!=b}").unwrap();
        assert_eq!(s.pattern, "host*.cpu.load");
        assert_eq!(s.to_string(), "host*.cpu.load{location=1,host!=b}");
        assert!(matches(&s, "host1.cpu.load{host=a,location=1}"));
        assert!(!matches(&s, "host1.cpu.load{host=b,location=1}"));
        assert!(!matches(&s, "host1.cpu.load{host=a,location=2}"));
        assert!(!matches(&s, "host1.cpu.load"));
        assert!(!matches(&s, "db.cpu.load{location=1}"));
        // `!=` passes a series that lacks the tag.
        let s = Selector::parse("*{host!=b}").unwrap();
        assert!(matches(&s, "m"));
        assert!(matches(&s, "m{host=a}"));
        assert!(!matches(&s, "m{host=b}"));
        // Tag values take globs, as /render's tagged paths do.
        let s = Selector::parse("cpu.user{host=web-*}").unwrap();
        assert!(matches(&s, "cpu.user{host=web-1}"));
        assert!(!matches(&s, "cpu.user{host=db-1}"));
        assert!(!matches(&s, "cpu.user"));
        let s = Selector::parse("cpu.user;host!=web-[12]").unwrap();
        assert!(matches(&s, "cpu.user{host=web-3}"));
        assert!(!matches(&s, "cpu.user{host=web-2}"));
        assert!(matches(&s, "cpu.user"));
    }

    #[test]
    fn bad_selectors_are_refused_with_the_reason() {
        for bad in ["", "m{", "m{=1}", "m{!=1}", "m{a}", "{a=1}"] {
            let err = Selector::parse(bad).unwrap_err().to_string();
            assert!(err.contains("selector"), "{bad}: {err}");
        }
        assert!(TagFilter::parse("nokey").is_err());
        assert_eq!(
            TagFilter::parse("host!=b").unwrap(),
            TagFilter::NotEq("host".into(), "b".into())
        );
    }
}
