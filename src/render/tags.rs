//! graphite-web's tag API over the registry's keys, as Grafana's tag editor calls it: the
//! tags (`/tags`), a tag's values (`/tags/<tag>`), the series a set of `seriesByTag`
//! expressions selects (`/tags/findSeries`), and the completions of tags and values
//! (`/tags/autoComplete/tags`, `/tags/autoComplete/values`). Every series takes part, its name
//! as the tag `name`; graphite-web's answers are sorted and cut at `limit` the same way.
//!
//! Each question is a [`TagRead`]: every registry holding some of the series answers its
//! [`TagPart`], and the parts merge into the answer, so a single node (one registry) and a
//! cluster node (its owners' partitions) answer through the same code, with the same bytes.
//!
//! A single node's StatsD timer paths (`super::timer_paths`) take part as series of their
//! own ([`TagRead::timer_paths`]), but in the values of a tag other than `name`, whose
//! counts stay those of stored series.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::{graphite_path, PathPattern};
use crate::error::Error;
use crate::error::Result;
use crate::read::budget::ReadBudget;
use crate::read::reader::Reader;
use crate::registry::{KeyView, Registry, SeriesKey};

/// graphite-web's default for the completions' `limit` (`TAGDB_AUTOCOMPLETE_LIMIT`).
pub const AUTOCOMPLETE_LIMIT: usize = 100;

/// Every `(tag, value)` of `key`, the name as `name` first.
fn tags_of(key: KeyView<'_>) -> Vec<(String, String)> {
    let mut tags = vec![("name".to_owned(), key.name().into_owned())];
    tags.extend(key.tags().map(|(k, v)| (k.to_string(), v.to_string())));
    tags
}

/// A filter regex anchored at the start, as graphite-web anchors `filter`.
fn anchored(filter: &str) -> Result<regex::Regex> {
    let pattern = match filter.starts_with('^') {
        true => filter.to_owned(),
        false => format!("^(?:{filter})"),
    };
    regex::Regex::new(&pattern)
        .map_err(|e| Error::InvalidQuery(format!("filter: {filter:?} is not a valid regex: {e}")))
}

/// The query of `exprs` (`tag=value`, ...) as a `seriesByTag` pattern.
fn query(exprs: &[String]) -> Result<PathPattern> {
    let quoted: Vec<String> = (exprs.iter())
        .map(|e| format!("'{}'", e.replace('\'', "\\'")))
        .collect();
    PathPattern::series_by_tag(&format!("seriesByTag({})", quoted.join(",")))
}

/// One question of the tag API, answered over one registry or over several holding
/// disjoint series (a cluster's partitions): each registry gives its [`TagPart`], and the
/// parts merged give the answer one registry holding every series gives.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum TagRead {
    /// `/tags`: the tags matching `filter`.
    Tags {
        /// A regex anchored at the start.
        filter: Option<String>,
        /// The most tags answered (default: all).
        limit: Option<usize>,
    },
    /// `/tags/<tag>`: the values of `tag` matching `filter`, with their series counts.
    Values {
        /// The tag (`name` for the series' names).
        tag: String,
        /// A regex anchored at the start.
        filter: Option<String>,
        /// The most values answered (default: all).
        limit: Option<usize>,
    },
    /// `/tags/findSeries`: the paths of the series the expressions select.
    FindSeries {
        /// `seriesByTag`'s expressions (`tag=value`, `tag!=~regex`, ...).
        exprs: Vec<String>,
    },
    /// `/tags/autoComplete/tags`: the tags starting with `prefix` of the series the
    /// expressions select (every series without expressions).
    CompleteTags {
        /// `seriesByTag`'s expressions.
        exprs: Vec<String>,
        /// The start every tag answered has.
        prefix: Option<String>,
        /// The most tags answered (default [`AUTOCOMPLETE_LIMIT`]).
        limit: Option<usize>,
    },
    /// `/tags/autoComplete/values`: the values of `tag` starting with `prefix` among the
    /// series the expressions select (every series without expressions).
    CompleteValues {
        /// `seriesByTag`'s expressions.
        exprs: Vec<String>,
        /// The tag whose values are completed.
        tag: String,
        /// The start every value answered has.
        prefix: Option<String>,
        /// The most values answered (default [`AUTOCOMPLETE_LIMIT`]).
        limit: Option<usize>,
    },
}

/// What some registries answer of a [`TagRead`]: texts (tags, values or paths) and, for
/// `/tags/<tag>`, each value's series count. A part is cut at the read's limit, which keeps
/// merging exact: a text among the first `limit` of all registries together is among the
/// first `limit` of every registry holding it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TagPart {
    /// The texts found, sorted.
    texts: BTreeSet<String>,
    /// Per value of `/tags/<tag>`, its series.
    counts: BTreeMap<String, u64>,
    /// True when a series has the tag of `/tags/<tag>`, even if no value passed the filter
    /// (graphite-web answers `null` only when none has it).
    has_tag: bool,
}

impl TagPart {
    /// Adds `other`, a part of registries holding other series.
    pub fn merge(&mut self, other: TagPart) {
        self.texts.extend(other.texts);
        for (value, count) in other.counts {
            *self.counts.entry(value).or_default() += count;
        }
        self.has_tag |= other.has_tag;
    }

    /// The part cut to its first `limit` texts and counts.
    fn cut(mut self, limit: usize) -> TagPart {
        if self.texts.len() > limit {
            self.texts = self.texts.into_iter().take(limit).collect();
        }
        if self.counts.len() > limit {
            self.counts = self.counts.into_iter().take(limit).collect();
        }
        self
    }
}

impl TagRead {
    /// The endpoint asking it, for messages.
    pub fn endpoint(&self) -> &'static str {
        match self {
            TagRead::Tags { .. } => "/tags",
            TagRead::Values { .. } => "/tags/<tag>",
            TagRead::FindSeries { .. } => "/tags/findSeries",
            TagRead::CompleteTags { .. } => "/tags/autoComplete/tags",
            TagRead::CompleteValues { .. } => "/tags/autoComplete/values",
        }
    }

    /// The most texts the answer holds: graphite-web's default for the completions
    /// ([`AUTOCOMPLETE_LIMIT`]), no bound for the listings.
    fn limit(&self) -> usize {
        match self {
            TagRead::Tags { limit, .. } | TagRead::Values { limit, .. } => {
                limit.unwrap_or(usize::MAX)
            }
            TagRead::FindSeries { .. } => usize::MAX,
            TagRead::CompleteTags { limit, .. } | TagRead::CompleteValues { limit, .. } => {
                limit.unwrap_or(AUTOCOMPLETE_LIMIT)
            }
        }
    }

    /// The filter regex of a listing, if any.
    fn filter(&self) -> Result<Option<regex::Regex>> {
        match self {
            TagRead::Tags { filter, .. } | TagRead::Values { filter, .. } => filter
                .as_deref()
                .filter(|f| !f.is_empty())
                .map(anchored)
                .transpose(),
            _ => Ok(None),
        }
    }

    /// The `seriesByTag` query of the expressions, if any.
    fn pattern(&self) -> Result<Option<PathPattern>> {
        match self {
            TagRead::FindSeries { exprs } if exprs.is_empty() => Err(Error::InvalidQuery(
                "expr: no tag expressions specified (expr=name=cpu.load)".into(),
            )),
            TagRead::FindSeries { exprs }
            | TagRead::CompleteTags { exprs, .. }
            | TagRead::CompleteValues { exprs, .. } => {
                (!exprs.is_empty()).then(|| query(exprs)).transpose()
            }
            _ => Ok(None),
        }
    }

    /// Checks the read's filter and expressions, so a bad one is refused before any
    /// registry is read (or any owner asked).
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] for a bad filter, no expression for findSeries, or a bad one.
    pub fn check(&self) -> Result<()> {
        self.filter()?;
        self.pattern()?;
        Ok(())
    }

    /// `registry`'s part of the answer, its scan (a value per key) charged to `budget`.
    ///
    /// # Errors
    /// As [`TagRead::check`]; the budget's refusal of the scan.
    pub fn part(&self, registry: &Registry, budget: &ReadBudget) -> Result<TagPart> {
        self.part_with(registry, &[], budget)
    }

    /// The keys of the timer paths of `reader`'s distribution series that take part in
    /// the read: those its expressions select (any threshold a `name=` names), or every one
    /// find lists; none for the values of a tag other than `name`.
    ///
    /// # Errors
    /// As [`TagRead::check`].
    pub(crate) fn timer_paths(&self, reader: &Reader<'_>) -> Result<Vec<SeriesKey>> {
        if matches!(self, TagRead::Values { tag, .. } if tag != "name") {
            return Ok(Vec::new());
        }
        let pattern = self.pattern()?;
        super::timer_paths::keys(reader, pattern.as_ref())
    }

    /// [`TagRead::part`] of `registry`'s keys and `extra` ones (a single node's timer paths,
    /// [`TagRead::timer_paths`]), the scan of both charged to `budget`.
    ///
    /// # Errors
    /// As [`TagRead::part`].
    pub(crate) fn part_with(
        &self,
        registry: &Registry,
        extra: &[SeriesKey],
        budget: &ReadBudget,
    ) -> Result<TagPart> {
        let filter = self.filter()?;
        let pattern = self.pattern()?;
        budget.charge_scan(registry.len() + extra.len())?;
        // `pick` of every key, the registry's then `extra`'s.
        let each = |pick: &(dyn Fn(KeyView<'_>) -> Option<Vec<String>> + Sync)| {
            let mut out = registry.select(|_, key| pick(key));
            out.extend(extra.iter().filter_map(|k| pick(k.view())));
            out.into_iter().flatten()
        };
        let selected = |key: KeyView<'_>| pattern.as_ref().is_none_or(|p| p.matches(key));
        let passes = |text: &str| filter.as_ref().is_none_or(|f| f.is_match(text));
        let tags = |key: KeyView<'_>| tags_of(key).into_iter().map(|(tag, _)| tag).collect();
        let mut part = TagPart::default();
        match self {
            TagRead::Tags { .. } => {
                part.texts = each(&|key| Some(tags(key))).filter(|t| passes(t)).collect();
            }
            TagRead::Values { tag, .. } => {
                let values: Vec<String> =
                    each(&|key| value_of(key, tag).map(|v| vec![v])).collect();
                part.has_tag = !values.is_empty();
                for value in values.into_iter().filter(|v| passes(v)) {
                    *part.counts.entry(value).or_default() += 1;
                }
            }
            TagRead::FindSeries { .. } => {
                part.texts = each(&|key| selected(key).then(|| vec![graphite_path(key)])).collect();
            }
            TagRead::CompleteTags { exprs, prefix, .. } => {
                let prefix = prefix.as_deref().unwrap_or("");
                let searched: BTreeSet<&str> = (exprs.iter())
                    .map(|e| e.split(['!', '=']).next().unwrap_or(""))
                    .collect();
                part.texts = each(&|key| selected(key).then(|| tags(key)))
                    .filter(|tag| tag.starts_with(prefix) && !searched.contains(tag.as_str()))
                    .collect();
            }
            TagRead::CompleteValues { tag, prefix, .. } => {
                let prefix = prefix.as_deref().unwrap_or("");
                let value = |key: KeyView<'_>| selected(key).then(|| value_of(key, tag)).flatten();
                part.texts = each(&|key| value(key).map(|v| vec![v]))
                    .filter(|v| v.starts_with(prefix))
                    .collect();
            }
        }
        Ok(part.cut(self.limit()))
    }

    /// The answer, as graphite-web writes it, from the parts of registries holding disjoint
    /// series:
    /// - `/tags`: `[{"tag": ...}, ...]`, sorted, at most `limit`;
    /// - `/tags/<tag>`: `{"tag", "values": [{"value", "count"}, ...]}`, sorted by value, at
    ///   most `limit`; `null` when no series has the tag;
    /// - `/tags/findSeries`: the paths (`name;k=v`), sorted;
    /// - the completions: the tags (less those the expressions name) or values, sorted, at
    ///   most `limit` (100 by default).
    pub fn answer(&self, parts: impl IntoIterator<Item = TagPart>) -> Value {
        let mut all = TagPart::default();
        for part in parts {
            all.merge(part);
        }
        let all = all.cut(self.limit());
        match self {
            TagRead::Tags { .. } => Value::Array(
                (all.texts.into_iter())
                    .map(|tag| json!({"tag": tag}))
                    .collect(),
            ),
            TagRead::Values { .. } if !all.has_tag => Value::Null,
            TagRead::Values { tag, .. } => {
                let values: Vec<Value> = (all.counts.into_iter())
                    .map(|(value, count)| json!({"value": value, "count": count}))
                    .collect();
                json!({"tag": tag, "values": values})
            }
            TagRead::FindSeries { .. }
            | TagRead::CompleteTags { .. }
            | TagRead::CompleteValues { .. } => json!(all.texts.into_iter().collect::<Vec<_>>()),
        }
    }
}

/// The value of `tag` in `key` (`name` is the series' name).
fn value_of(key: KeyView<'_>, tag: &str) -> Option<String> {
    (tags_of(key).into_iter())
        .find(|(k, _)| k == tag)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry holding `keys`.
    fn registry(dir: &std::path::Path, keys: &[&str]) -> Registry {
        std::fs::create_dir_all(dir).unwrap();
        let registry = Registry::open(dir).unwrap();
        for key in keys {
            registry.resolve(key).unwrap();
        }
        registry
    }

    /// Every read's answer over two registries holding halves of the series is the answer
    /// over one registry holding all of them, limits included.
    #[test]
    fn parts_of_disjoint_registries_merge_into_the_answer_of_one() {
        let keys = [
            "cpu;dc=east;host=a",
            "cpu;dc=west;host=b",
            "cpu;dc=east;host=c",
            "mem;dc=west;host=a;rack=r1",
            "disk;dc=north;host=d",
            "plain.path.one",
            "cpu;dc=south;host=e",
        ];
        let dir = tempfile::tempdir().unwrap();
        let whole = registry(&dir.path().join("whole"), &keys);
        let left = registry(&dir.path().join("left"), &keys[..3]);
        let right = registry(&dir.path().join("right"), &keys[3..]);
        let exprs = |e: &[&str]| e.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let reads = [
            TagRead::Tags {
                filter: None,
                limit: None,
            },
            TagRead::Tags {
                filter: Some("d|h".into()),
                limit: Some(2),
            },
            TagRead::Values {
                tag: "dc".into(),
                filter: None,
                limit: Some(3),
            },
            TagRead::Values {
                tag: "dc".into(),
                filter: Some("^zz".into()),
                limit: None,
            },
            TagRead::Values {
                tag: "nothing".into(),
                filter: None,
                limit: None,
            },
            TagRead::FindSeries {
                exprs: exprs(&["name=cpu", "dc!=west"]),
            },
            TagRead::CompleteTags {
                exprs: exprs(&["dc=west"]),
                prefix: None,
                limit: None,
            },
            TagRead::CompleteTags {
                exprs: vec![],
                prefix: Some("r".into()),
                limit: Some(1),
            },
            TagRead::CompleteValues {
                exprs: exprs(&["name=cpu"]),
                tag: "host".into(),
                prefix: None,
                limit: Some(2),
            },
        ];
        for read in reads {
            let budget = ReadBudget::new(u64::MAX);
            let one = read.answer([read.part(&whole, &budget).unwrap()]);
            let parts = [&left, &right].map(|r| read.part(r, &budget).unwrap());
            assert_eq!(read.answer(parts), one, "{read:?}");
            assert_ne!(one, json!([]), "{read:?} finds something");
        }
    }
}
