//! Prometheus labels over tierdb's series keys, both ways: a key `name{k=v,...}` is the label
//! set `{__name__="name", k="v", ...}` (a Graphite name with dots is just a `__name__` with
//! dots, selected as `{__name__="a.b.c"}`, by regex, or by Graphite glob with the
//! `__graphite__` pseudo-label), and a label set written by remote write becomes the same
//! key (src/ingest/prom_remote.rs). A label with an empty value is absent, as in Prometheus,
//! so `k=""` selects series without `k`.

use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{Expr, VectorSelector};

use super::error::QueryError;
use super::names::is_promql_name;
use crate::error::Error;
use crate::read::store::{LabelMatcher, Selection, SeriesFilter};
use crate::registry::glob::{segments_match, Glob};
use crate::registry::KeyView;

/// The name Prometheus gives a series' metric name.
pub(crate) const NAME: &str = "__name__";

/// The pseudo-label that selects series by Graphite glob (VictoriaMetrics' convention):
/// `{__graphite__="servers.*.cpu"}` selects the names render's `servers.*.cpu` selects. It is
/// never a label of an answer.
pub(crate) const GRAPHITE: &str = "__graphite__";

/// A series' labels, sorted by name, no two with the same name, no empty value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    /// The labels of `pairs`, sorted; a later pair of the same name wins; empty values are
    /// dropped.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Labels {
        let mut labels = Labels::default();
        for (name, value) in pairs {
            labels.set(&name, value);
        }
        labels
    }

    /// The value of label `name`, `""` when absent (Prometheus' rule).
    pub fn get(&self, name: &str) -> &str {
        match self.0.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(at) => &self.0[at].1,
            Err(_) => "",
        }
    }

    /// Sets `name` to `value`; an empty value removes it.
    pub fn set(&mut self, name: &str, value: String) {
        match self.0.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(at) if value.is_empty() => {
                self.0.remove(at);
            }
            Ok(at) => self.0[at].1 = value,
            Err(_) if value.is_empty() => {}
            Err(at) => self.0.insert(at, (name.to_owned(), value)),
        }
    }

    /// These labels without `__name__`: what two series are matched on.
    pub fn without_name(mut self) -> Labels {
        self.set(NAME, String::new());
        self
    }

    /// What a function or operator that changes the value's meaning returns: these labels
    /// without `__name__`, as Prometheus drops it, except a name PromQL cannot write as a
    /// metric name (a Graphite path, an Influx `measurement.field`), which stays. Such series
    /// often carry no other label, and the name is then all that tells them apart
    /// (docs/promql.md, "Graphite paths and Influx fields").
    pub fn name_dropped(self) -> Labels {
        if is_promql_name(self.get(NAME)) {
            self.without_name()
        } else {
            self
        }
    }

    /// The labels named in `names` only (`keep`) or all but them (`!keep`).
    pub fn project(&self, names: &[String], keep: bool) -> Labels {
        Labels(
            (self.0.iter())
                .filter(|(n, _)| names.iter().any(|k| k == n) == keep)
                .cloned()
                .collect(),
        )
    }

    /// `(name, value)` pairs in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// As Prometheus' JSON writes a `metric`: an object of names to values.
    pub fn to_json(&self) -> serde_json::Value {
        let map = (self.0.iter())
            .map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone())))
            .collect();
        serde_json::Value::Object(map)
    }
}

/// As Prometheus prints a label set in an error: `{job="api", instance="a"}`.
impl std::fmt::Display for Labels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pairs: Vec<String> = self.iter().map(|(n, v)| format!("{n}={v:?}")).collect();
        write!(f, "{{{}}}", pairs.join(", "))
    }
}

/// The labels of a stored series' key: `__name__` and its tags.
pub fn key_labels(key: &KeyView<'_>) -> Labels {
    let mut pairs = vec![(NAME.to_owned(), key.name().into_owned())];
    pairs.extend(key.tags().map(|(k, v)| (k.into_owned(), v.into_owned())));
    Labels::from_pairs(pairs)
}

/// Matchers that must all hold for a series to be selected.
pub type MatcherSet = Vec<Matcher>;

/// The matcher sets of one selection, ready to test keys with: each `__graphite__` glob
/// parsed once, not once per key.
pub(crate) struct KeyFilter {
    sets: Vec<Vec<KeyMatcher>>,
    /// The matchers as data, for a store that selects on another node.
    wire: Vec<Vec<LabelMatcher>>,
}

enum KeyMatcher {
    /// A label's (or `__name__`'s) matcher.
    Label(Matcher),
    /// `__graphite__="glob"` (or `!=`): the name's segments against the glob's.
    Graphite { segments: Vec<Glob>, negate: bool },
}

impl KeyFilter {
    /// The filter of `sets`.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] for a `__graphite__` matcher that is a regex, holds a `;` or
    /// whose glob is refused (see [`check_graphite`]).
    pub(crate) fn new(sets: &[MatcherSet]) -> Result<KeyFilter, Error> {
        let compiled = (sets.iter())
            .map(|set| {
                (set.iter())
                    .map(|m| match m.name.as_str() {
                        GRAPHITE => graphite_matcher(m).map_err(Error::InvalidQuery),
                        _ => Ok(KeyMatcher::Label(m.clone())),
                    })
                    .collect()
            })
            .collect::<Result<_, Error>>()?;
        let wire = (sets.iter())
            .map(|set| set.iter().map(wire_matcher).collect())
            .collect();
        Ok(KeyFilter {
            sets: compiled,
            wire,
        })
    }

    /// The filter of a [`Selection::Matchers`] another node sent.
    ///
    /// # Errors
    /// A regex that does not compile, an unknown operator; as [`KeyFilter::new`].
    #[cfg(feature = "cluster")]
    pub(crate) fn of_matchers(wire: &[Vec<LabelMatcher>]) -> Result<KeyFilter, Error> {
        let sets: Vec<MatcherSet> = (wire.iter())
            .map(|set| set.iter().map(matcher_of).collect())
            .collect::<Result<_, Error>>()?;
        KeyFilter::new(&sets)
    }

    /// Whether every matcher of at least one set holds for the series `key` (an absent label
    /// reads `""`).
    pub(crate) fn matches(&self, key: &KeyView<'_>) -> bool {
        self.sets.iter().any(|set| {
            set.iter().all(|m| match m {
                KeyMatcher::Graphite { segments, negate } => {
                    segments_match(segments, &key.name()) != *negate
                }
                KeyMatcher::Label(m) => {
                    let value = if m.name == NAME {
                        Some(key.name())
                    } else {
                        key.tag(&m.name)
                    };
                    m.is_match(value.as_deref().unwrap_or(""))
                }
            })
        })
    }
}

impl SeriesFilter for KeyFilter {
    fn matches(&self, key: &KeyView<'_>) -> bool {
        KeyFilter::matches(self, key)
    }

    fn selection(&self) -> Selection {
        Selection::Matchers(self.wire.clone())
    }
}

/// `matcher` as data: a regex's anchored source, since the parser's types do not
/// deserialize.
fn wire_matcher(matcher: &Matcher) -> LabelMatcher {
    let value = match &matcher.op {
        MatchOp::Re(re) | MatchOp::NotRe(re) => re.as_str().to_owned(),
        MatchOp::Equal | MatchOp::NotEqual => matcher.value.clone(),
    };
    LabelMatcher {
        op: matcher.op.to_string(),
        name: matcher.name.clone(),
        value,
    }
}

/// The matcher `wire` describes.
///
/// # Errors
/// [`Error::InvalidQuery`] for a regex that does not compile or an unknown operator.
#[cfg(feature = "cluster")]
fn matcher_of(wire: &LabelMatcher) -> Result<Matcher, Error> {
    let regex = || {
        regex::Regex::new(&wire.value)
            .map_err(|e| Error::InvalidQuery(format!("matcher {:?}: {e}", wire.value)))
    };
    let op = match wire.op.as_str() {
        "=" => MatchOp::Equal,
        "!=" => MatchOp::NotEqual,
        "=~" => MatchOp::Re(regex()?),
        "!~" => MatchOp::NotRe(regex()?),
        other => {
            return Err(Error::InvalidQuery(format!(
                "unknown matcher operator {other:?}"
            )))
        }
    };
    Ok(Matcher::new(op, &wire.name, &wire.value))
}

/// The glob of a `__graphite__` matcher, or why it is refused.
fn graphite_matcher(m: &Matcher) -> Result<KeyMatcher, String> {
    let negate = match m.op {
        MatchOp::Equal => false,
        MatchOp::NotEqual => true,
        MatchOp::Re(_) | MatchOp::NotRe(_) => {
            return Err(format!(
                "{GRAPHITE} takes a Graphite glob with = or != (such as \
                 {{{GRAPHITE}=\"servers.*.cpu\"}}), not a regex: match the name by regex with \
                 __name__=~"
            ))
        }
    };
    if m.value.contains(';') {
        return Err(format!(
            "{GRAPHITE}={:?}: the glob selects names; select tags with matchers of their own \
             ({{{GRAPHITE}=\"servers.*.cpu\", dc=\"east\"}})",
            m.value
        ));
    }
    let glob = braced(&m.value);
    let segments = (glob.split('.'))
        .map(Glob::parse)
        .collect::<Result<_, _>>()
        .map_err(|why| format!("{GRAPHITE}={:?}: {why}", m.value))?;
    Ok(KeyMatcher::Graphite { segments, negate })
}

/// `glob` with each regex alternation `(a|b)` written as Graphite's `{a,b}`, as
/// VictoriaMetrics reads `__graphite__`: Grafana writes a multi-value template variable so
/// (`servers.$host.cpu` becomes `servers.(web1|web2).cpu`). A group without `|`, or with
/// parentheses inside, stays as written.
fn braced(glob: &str) -> std::borrow::Cow<'_, str> {
    if !glob.contains('(') {
        return std::borrow::Cow::Borrowed(glob);
    }
    let mut out = String::with_capacity(glob.len());
    let mut rest = glob;
    while let Some(open) = rest.find('(') {
        out.push_str(&rest[..open]);
        let group = &rest[open + 1..];
        match group.find([')', '(']) {
            Some(close) if group.as_bytes()[close] == b')' && group[..close].contains('|') => {
                out.push('{');
                out.push_str(&group[..close].replace('|', ","));
                out.push('}');
                rest = &group[close + 1..];
            }
            _ => {
                out.push('(');
                rest = group;
            }
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// Refuses the `__graphite__` matchers of `sets` that cannot select (a regex, a `;`, a glob
/// with too many braces), before any read.
///
/// # Errors
/// `bad_data` saying why.
pub(crate) fn check_graphite(sets: &[MatcherSet]) -> Result<(), QueryError> {
    for m in sets.iter().flatten().filter(|m| m.name == GRAPHITE) {
        graphite_matcher(m).map_err(QueryError::bad_data)?;
    }
    Ok(())
}

/// The alternatives of a selector (`{a="1" or b="2"}` has two), each with the metric name
/// as a `__name__` matcher.
pub(crate) fn selector_sets(selector: &VectorSelector) -> Vec<MatcherSet> {
    let matchers = &selector.matchers;
    let mut sets: Vec<MatcherSet> = matchers.or_matchers.clone();
    if !matchers.matchers.is_empty() || sets.is_empty() {
        sets.push(matchers.matchers.clone());
    }
    if let Some(name) = &selector.name {
        for set in &mut sets {
            set.push(Matcher::new(MatchOp::Equal, NAME, name));
        }
    }
    sets
}

/// For a query that does not parse, the hint for each Graphite-style dotted name in it
/// (`cpu.usage_user`), which PromQL's grammar cannot take as a metric name: the query with
/// each written as a `__name__` matcher (a Graphite glob such as `servers.*.cpu` as a
/// `__graphite__` one), when that parses. `None` when the text has none.
pub(crate) fn dotted_name_hint(text: &str) -> Option<String> {
    let mut rewritten = String::with_capacity(text.len() + 32);
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        // String literals are copied whole.
        if matches!(c, '"' | '\'' | '`') {
            let end = literal_end(rest, c);
            rewritten.push_str(&rest[..end]);
            rest = &rest[end..];
            continue;
        }
        let after_word = rewritten
            .chars()
            .next_back()
            .is_some_and(|p| p.is_ascii_alphanumeric() || matches!(p, '_' | ':' | '.'));
        if (c.is_ascii_alphabetic() || matches!(c, '_' | ':')) && !after_word {
            let word_len = |glob: bool| {
                rest.find(|ch: char| {
                    !(ch.is_ascii_alphanumeric()
                        || matches!(ch, '_' | ':' | '.')
                        || glob && matches!(ch, '*' | '?'))
                })
                .unwrap_or(rest.len())
            };
            let glob = is_glob_word(&rest[..word_len(true)]);
            let len = word_len(glob);
            let word = &rest[..len];
            rest = &rest[len..];
            if !word.contains('.') || word.split('.').any(str::is_empty) {
                rewritten.push_str(word);
                continue;
            }
            names.push((word, glob));
            let name = format!("{}={word:?}", if glob { GRAPHITE } else { NAME });
            match rest.strip_prefix('{') {
                Some(inner) if inner.trim_start().starts_with('}') => {
                    rewritten.push_str(&format!("{{{name}}}"));
                    rest = &inner.trim_start()[1..];
                }
                Some(inner) => {
                    rewritten.push_str(&format!("{{{name}, "));
                    rest = inner;
                }
                None => rewritten.push_str(&format!("{{{name}}}")),
            }
            continue;
        }
        rewritten.push(c);
        rest = &rest[c.len_utf8()..];
    }
    let &(first, glob) = names.first()?;
    let example = match promql_parser::parser::parse(&rewritten) {
        Ok(_) => format!(", as in {rewritten}"),
        Err(_) => String::new(),
    };
    Some(if glob {
        format!(
            "{first:?} is a Graphite glob, not PromQL: select the paths it matches with \
             {{{GRAPHITE}={first:?}}}{example}"
        )
    } else {
        format!(
            "{first:?} is not a PromQL metric name (a name with dots, as Graphite paths and \
             Influx fields are stored): select it by label, {{__name__={first:?}}} or \
             {{{GRAPHITE}={first:?}}}{example}"
        )
    })
}

/// True when `word` reads as a Graphite glob rather than a name times something: it has
/// dots and wildcards, and each `*` or `?` stands beside a dot or an end of a segment's
/// text (`servers.*.cpu`, `servers.web*.cpu`, `cpu.*`), not between two characters of a
/// name (`a.b*2` is `a.b` times 2).
fn is_glob_word(word: &str) -> bool {
    let bytes = word.as_bytes();
    let wild = |b: u8| matches!(b, b'*' | b'?');
    let edge = |i: Option<usize>| {
        i.and_then(|i| bytes.get(i))
            .is_none_or(|&b| b == b'.' || wild(b))
    };
    word.contains('.')
        && bytes.iter().any(|&b| wild(b))
        && (bytes.iter().enumerate())
            .filter(|(_, &b)| wild(b))
            .all(|(i, _)| edge(i.checked_sub(1)) || edge(Some(i + 1)))
}

/// The length of the string literal `text` starts with (quoted by `quote`), the closing
/// quote included, or all of `text` when it is not closed.
fn literal_end(text: &str, quote: char) -> usize {
    let mut escaped = false;
    for (i, c) in text.char_indices().skip(1) {
        if c == quote && !escaped {
            return i + 1;
        }
        escaped = c == '\\' && !escaped && quote != '`';
    }
    text.len()
}

/// The matcher sets of a `match[]` parameter: a PromQL series selector and nothing else.
///
/// # Errors
/// `bad_data` naming the text when it does not parse, is not a plain selector, or has no
/// matcher that excludes the empty value (Prometheus refuses `{a=~".*"}`).
pub(crate) fn parse_match(text: &str) -> Result<Vec<MatcherSet>, QueryError> {
    let bad = |why: String| QueryError::bad_data(format!("match[]: {text:?}: {why}"));
    let parsed = promql_parser::parser::parse(text).map_err(|e| match dotted_name_hint(text) {
        Some(hint) => bad(format!("{e}; {hint}")),
        None => bad(e),
    });
    match parsed? {
        Expr::VectorSelector(selector) if selector.offset.is_none() && selector.at.is_none() => {
            let sets = selector_sets(&selector);
            check_graphite(&sets).map_err(|e| bad(e.message))?;
            Ok(sets)
        }
        _ => Err(bad("not a series selector".into())),
    }
}
