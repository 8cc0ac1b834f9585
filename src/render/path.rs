//! Graphite paths: the path of a series key (`name`, or `name;k=v;k2=v2` in the Graphite 1.1
//! tagged form), the parse back, and [`PathPattern`], the glob form with which targets and
//! find queries select series.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crate::error::Error;
use crate::error::Result;
use crate::registry::glob::{segments_match, Glob};
use crate::registry::KeyView;
use crate::registry::SeriesKey;

/// The Graphite path of `key`: its name, followed by `;k=v` per tag in key order.
pub fn graphite_path(key: KeyView<'_>) -> String {
    let mut path = key.name().into_owned();
    for (k, v) in key.tags() {
        path.push(';');
        path.push_str(&k);
        path.push('=');
        path.push_str(&v);
    }
    path
}

/// Parses a Graphite path (`name` or `name;k=v;...`) back into its series key. A tag given
/// twice keeps its last value, as carbon (and our plaintext ingest) does.
///
/// # Errors
///
/// [`Error::InvalidQuery`] when a tag has no `=` or the key is refused by [`SeriesKey::new`].
pub fn parse_graphite_path(path: &str) -> Result<SeriesKey> {
    let mut parts = path.split(';');
    let name = parts.next().unwrap_or_default();
    let mut tags = BTreeMap::new();
    for tag in parts {
        let (k, v) = tag
            .split_once('=')
            .ok_or_else(|| Error::InvalidQuery(format!("tag {tag:?} in {path:?} has no `=`")))?;
        tags.insert(k, v);
    }
    SeriesKey::new(name, tags).map_err(|e| Error::InvalidQuery(e.to_string()))
}

/// A selection of series: `namepattern[;k=v;k!=v...]`.
///
/// The name pattern is split at `.`; a name matches when it has as many segments and each
/// matches its glob (`*`, `?`, `[a-z]`, `[!a-z]`/`[^a-z]`, `{a,b*}`, literal text), so a `*`
/// never crosses a dot. Without tag expressions every tag set matches: `cpu.load` selects
/// `cpu.load` and each `cpu.load;host=...`. `k=v` keeps series whose tag `k` matches the glob
/// `v`; `k!=v` keeps those without tag `k` or whose value does not match. An empty `v` stands
/// for "no such tag", as in Graphite: `k=` keeps series without `k`, `k!=` those with it.
///
/// A pattern is also graphite-web's `seriesByTag('tag=value', ...)` call, as written: the
/// series whose tags (`name` for the name) satisfy every expression (`TagQuery`).
#[derive(Clone, Debug)]
pub struct PathPattern {
    /// The text as given; names results such as `sumSeries(...)` and error messages.
    text: String,
    segments: Vec<Glob>,
    filters: Vec<TagExpr>,
    /// The expressions of a `seriesByTag` call, which then select instead of the segments
    /// and filters.
    query: Option<Vec<TagQuery>>,
}

/// One expression of `seriesByTag`, as graphite-web's tag database evaluates it on the tag's
/// value (the empty string for a series without the tag): `=` and `!=` compare the value,
/// `=~` and `!=~` match a regex anchored at the value's start.
#[derive(Clone, Debug)]
struct TagQuery {
    key: String,
    op: TagOp,
}

#[derive(Clone, Debug)]
enum TagOp {
    Eq(String),
    Ne(String),
    Match(regex::Regex),
    NotMatch(regex::Regex),
}

impl TagOp {
    fn holds(&self, value: &str) -> bool {
        match self {
            TagOp::Eq(v) => value == v,
            TagOp::Ne(v) => value != v,
            TagOp::Match(re) => re.is_match(value),
            TagOp::NotMatch(re) => !re.is_match(value),
        }
    }
}

/// Parses one `seriesByTag` expression (graphite-web's `^([^;!=]+)(!?=~?)([^;]*)$`).
fn tag_query(spec: &str) -> std::result::Result<TagQuery, String> {
    let invalid = || {
        format!("{spec:?} is not a tag expression (tag=value, tag!=value, tag=~regex, tag!=~regex)")
    };
    let at = spec.find(['!', '=']).ok_or_else(invalid)?;
    let (key, rest) = spec.split_at(at);
    if key.is_empty() || key.contains(';') {
        return Err(invalid());
    }
    let (operator, value) = ["!=~", "!=", "=~", "="]
        .into_iter()
        .find_map(|op| rest.strip_prefix(op).map(|v| (op, v)))
        .ok_or_else(invalid)?;
    if value.contains(';') {
        return Err(invalid());
    }
    let regex = || {
        regex::Regex::new(&format!("^(?:{value})"))
            .map_err(|e| format!("{spec:?}: invalid regex: {e}"))
    };
    let op = match operator {
        "=" => TagOp::Eq(value.to_owned()),
        "!=" => TagOp::Ne(value.to_owned()),
        "=~" => TagOp::Match(regex()?),
        _ => TagOp::NotMatch(regex()?),
    };
    Ok(TagQuery {
        key: key.to_owned(),
        op,
    })
}

/// A pattern travels as its text (a cluster node sends it to the partitions' owners).
impl serde::Serialize for PathPattern {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

/// Reads the text, parsed as [`PathPattern::parse`] parses it.
impl<'de> serde::Deserialize<'de> for PathPattern {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<PathPattern, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        PathPattern::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One `;k=v` or `;k!=v` of a pattern: Graphite's tag expression, whose value is a glob and
/// whose empty value means "no such tag" (unlike [`crate::registry::TagFilter`], which
/// compares exact values).
#[derive(Clone, Debug)]
struct TagExpr {
    key: String,
    value: Glob,
    negate: bool,
}

impl PathPattern {
    /// Parses `namepattern[;tagexpr...]`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidQuery`] for an empty name, a tag expression without `=` or `!=`, a
    /// regex tag match (`=~`, not supported), more than 32 brace groups, or braces that
    /// expand to more than 1024 alternatives, in one segment or tag value; for a
    /// `seriesByTag(...)` call, as [`PathPattern::series_by_tag`].
    pub fn parse(text: &str) -> Result<PathPattern> {
        if text.starts_with("seriesByTag(") {
            return PathPattern::series_by_tag(text);
        }
        let invalid = |why: &str| Error::InvalidQuery(format!("invalid path {text:?}: {why}"));
        let mut parts = text.split(';');
        let name = parts.next().unwrap_or_default();
        if name.is_empty() {
            return Err(invalid("the name is empty"));
        }
        let segments = name
            .split('.')
            .map(Glob::parse)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|why| invalid(&why))?;
        let mut filters = Vec::new();
        for expr in parts {
            let (key, value) = expr
                .split_once('=')
                .ok_or_else(|| invalid("a tag expression needs `=` or `!=`"))?;
            let (key, negate) = match key.strip_suffix('!') {
                Some(key) => (key, true),
                None => (key, false),
            };
            if key.is_empty() {
                return Err(invalid("a tag expression has an empty key"));
            }
            if value.starts_with('~') {
                return Err(invalid("regex tag matches (`=~`) are not supported"));
            }
            let value = Glob::parse(value).map_err(|why| invalid(&why))?;
            let key = key.to_owned();
            filters.push(TagExpr { key, value, negate });
        }
        Ok(PathPattern {
            text: text.to_owned(),
            segments,
            filters,
            query: None,
        })
    }

    /// Parses a `seriesByTag('tag=value', ...)` call: at least one expression, each a quoted
    /// string, and at least one that the empty value does not satisfy (so that the query
    /// cannot select every series), as graphite-web requires.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidQuery`] naming the expression at fault.
    pub fn series_by_tag(text: &str) -> Result<PathPattern> {
        let invalid = |why: String| Error::InvalidQuery(format!("seriesByTag: {why}"));
        let args = match super::expr::parse_target(text)? {
            super::expr::Expr::Call { args, .. } => args,
            _ => return Err(invalid(format!("{text:?} is not a call"))),
        };
        let mut query = Vec::new();
        for (i, arg) in args.iter().enumerate() {
            let super::expr::Expr::Str(spec) = arg else {
                return Err(invalid(format!(
                    "argument {} (tagExpressions) must be a quoted string such as 'name=cpu.load'",
                    i + 1
                )));
            };
            query
                .push(tag_query(spec).map_err(|why| {
                    invalid(format!("argument {} (tagExpressions) {why}", i + 1))
                })?);
        }
        if query.iter().all(|q| q.op.holds("")) {
            return Err(invalid(
                "at least one tag expression must not match the empty value".to_owned(),
            ));
        }
        Ok(PathPattern {
            text: text.to_owned(),
            segments: Vec::new(),
            filters: Vec::new(),
            query: Some(query),
        })
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when `key` is selected: the name matches segment by segment and every tag
    /// expression holds.
    pub fn matches(&self, key: KeyView<'_>) -> bool {
        self.matches_as(&key.name(), key)
    }

    /// True when `key` named `name` instead of its own name would be selected: how a path
    /// that is not a stored key but is made from one (a timer's stat path) is matched.
    pub(super) fn matches_as(&self, name: &str, key: KeyView<'_>) -> bool {
        if let Some(query) = &self.query {
            return query.iter().all(|q| match q.key.as_str() {
                "name" => q.op.holds(name),
                tag => q.op.holds(key.tag(tag).as_deref().unwrap_or("")),
            });
        }
        segments_match(&self.segments, name) && self.matches_tags(key)
    }

    /// The texts without wildcards that the last name segment can be: each brace-free
    /// alternative of the last glob that has no `*`, `?` or `[` (`upper_95` of `a.upper_95`,
    /// both of `a.{upper_95,mean_95}`), or for a `seriesByTag` call the last segment of each
    /// `name=` value. What a pattern names that no listing would offer.
    pub(super) fn last_segment_literals(&self) -> Vec<&str> {
        match &self.query {
            Some(query) => (query.iter())
                .filter_map(|q| match (&q.op, q.key.as_str()) {
                    (TagOp::Eq(value), "name") => value.rsplit('.').next(),
                    _ => None,
                })
                .collect(),
            None => (self.segments.last()).map_or_else(Vec::new, |g| g.literal_alternatives()),
        }
    }

    /// False when no name whose last segment is `text` can match: the last glob rejects it.
    /// Always true for a `seriesByTag` call, whose name may be matched by a regex.
    pub(super) fn last_segment_may_be(&self, text: &str) -> bool {
        self.query.is_some() || (self.segments.last()).is_some_and(|g| g.matches(text))
    }

    /// The pattern with name segment `index` replaced by the literal `value`: the series it
    /// matches that have `value` there. `None` for a `seriesByTag` call, an index past the
    /// segments, or a value that reads as a glob.
    pub(super) fn with_segment(&self, index: usize, value: &str) -> Option<PathPattern> {
        if self.query.is_some()
            || index >= self.segments.len()
            || value.contains(['*', '?', '[', '{', ';'])
        {
            return None;
        }
        let mut segments: Vec<&str> = self.text.split(';').next()?.split('.').collect();
        segments[index] = value;
        let mut text = segments.join(".");
        for filter in self.text.split(';').skip(1) {
            text.push(';');
            text.push_str(filter);
        }
        PathPattern::parse(&text).ok()
    }

    /// How many name segments the pattern has.
    pub(super) fn depth(&self) -> usize {
        self.segments.len()
    }

    /// True when `segments` (exactly [`PathPattern::depth`] of them) match the name globs.
    pub(super) fn matches_segments(&self, segments: &[&str]) -> bool {
        segments.len() == self.segments.len()
            && self
                .segments
                .iter()
                .zip(segments)
                .all(|(g, s)| g.matches(s))
    }

    /// True for a `seriesByTag` call, which selects by tags rather than by name segments.
    pub(super) fn is_tag_query(&self) -> bool {
        self.query.is_some()
    }

    /// True when every tag expression holds for `key`.
    pub(super) fn matches_tags(&self, key: KeyView<'_>) -> bool {
        self.filters.iter().all(|f| {
            let hit = match key.tag(&f.key) {
                Some(value) => f.value.matches(&value),
                None => f.value.is_empty(),
            };
            hit != f.negate
        })
    }
}
