//! graphite-web's tag API over the registry's keys, as Grafana's tag editor calls it: the
//! tags (`/tags`), a tag's values (`/tags/<tag>`), the series a set of `seriesByTag`
//! expressions selects (`/tags/findSeries`), and the completions of tags and values
//! (`/tags/autoComplete/tags`, `/tags/autoComplete/values`). Every series takes part, its name
//! as the tag `name`; graphite-web's answers are sorted and cut at `limit` the same way.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::{graphite_path, PathPattern};
use crate::error::Error;
use crate::error::Result;
use crate::read::budget::ReadBudget;
use crate::registry::Registry;

/// graphite-web's default for the completions' `limit` (`TAGDB_AUTOCOMPLETE_LIMIT`).
pub const AUTOCOMPLETE_LIMIT: usize = 100;

/// Every `(tag, value)` of `key`, the name as `name` first.
fn tags_of(key: crate::registry::KeyView<'_>) -> Vec<(String, String)> {
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

/// Charges a scan of the registry (a value per key) to `budget`.
fn scan(registry: &Registry, budget: &ReadBudget) -> Result<()> {
    budget.charge_scan(registry.len())
}

/// `/tags`: `[{"tag": ...}, ...]`, sorted, those matching `filter` (a regex anchored at the
/// start), at most `limit`.
///
/// # Errors
/// [`Error::InvalidQuery`] for a bad filter; the budget's refusal of the scan.
pub fn list_tags(
    registry: &Registry,
    filter: Option<&str>,
    limit: Option<usize>,
    budget: &ReadBudget,
) -> Result<Value> {
    let filter = filter.filter(|f| !f.is_empty()).map(anchored).transpose()?;
    scan(registry, budget)?;
    let names: BTreeSet<String> = (registry.select(|_, key| Some(tags_of(key))).into_iter())
        .flatten()
        .map(|(tag, _)| tag)
        .filter(|tag| filter.as_ref().is_none_or(|f| f.is_match(tag)))
        .collect();
    let limit = limit.unwrap_or(usize::MAX);
    Ok(Value::Array(
        names
            .into_iter()
            .take(limit)
            .map(|tag| json!({"tag": tag}))
            .collect(),
    ))
}

/// `/tags/<tag>`: `{"tag", "values": [{"value", "count"}, ...]}` with each value's number of
/// series, sorted by value, those matching `filter`, at most `limit`; `null` when no series
/// has the tag.
///
/// # Errors
/// As [`list_tags`].
pub fn tag_values(
    registry: &Registry,
    tag: &str,
    filter: Option<&str>,
    limit: Option<usize>,
    budget: &ReadBudget,
) -> Result<Value> {
    let filter = filter.filter(|f| !f.is_empty()).map(anchored).transpose()?;
    scan(registry, budget)?;
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let values = registry.select(|_, key| {
        (tags_of(key).into_iter())
            .find(|(k, _)| k == tag)
            .map(|(_, v)| v)
    });
    if values.is_empty() {
        return Ok(Value::Null);
    }
    for value in values {
        if filter.as_ref().is_none_or(|f| f.is_match(&value)) {
            *counts.entry(value).or_default() += 1;
        }
    }
    let limit = limit.unwrap_or(usize::MAX);
    let values: Vec<Value> = (counts.into_iter())
        .take(limit)
        .map(|(value, count)| json!({"value": value, "count": count}))
        .collect();
    Ok(json!({"tag": tag, "values": values}))
}

/// The tagged paths (`name;k=v`) of the series `exprs` select, sorted.
fn find_paths(registry: &Registry, exprs: &[String], budget: &ReadBudget) -> Result<Vec<String>> {
    let pattern = query(exprs)?;
    scan(registry, budget)?;
    let mut paths = registry.select(|_, key| pattern.matches(key).then(|| graphite_path(key)));
    paths.sort_unstable();
    paths.dedup();
    Ok(paths)
}

/// `/tags/findSeries`: the paths of the series the expressions select, sorted.
///
/// # Errors
/// [`Error::InvalidQuery`] for no expression or a bad one (as `seriesByTag` refuses it); the
/// budget's refusal of the scan.
pub fn find_series(registry: &Registry, exprs: &[String], budget: &ReadBudget) -> Result<Value> {
    if exprs.is_empty() {
        return Err(Error::InvalidQuery(
            "expr: no tag expressions specified (expr=name=cpu.load)".into(),
        ));
    }
    Ok(json!(find_paths(registry, exprs, budget)?))
}

/// `/tags/autoComplete/tags`: the tags, sorted, starting with `prefix`, of the series the
/// expressions select (of every series without expressions), less the tags the expressions
/// name; at most `limit` (100 by default).
///
/// # Errors
/// As [`find_series`], an empty list of expressions aside.
pub fn complete_tags(
    registry: &Registry,
    exprs: &[String],
    prefix: Option<&str>,
    limit: Option<usize>,
    budget: &ReadBudget,
) -> Result<Value> {
    let prefix = prefix.unwrap_or("");
    let pattern = (!exprs.is_empty()).then(|| query(exprs)).transpose()?;
    let searched: BTreeSet<&str> = (exprs.iter())
        .map(|e| e.split(['!', '=']).next().unwrap_or(""))
        .collect();
    scan(registry, budget)?;
    let tags: BTreeSet<String> = (registry.select(|_, key| {
        let selected = pattern.as_ref().is_none_or(|p| p.matches(key));
        selected.then(|| tags_of(key))
    }))
    .into_iter()
    .flatten()
    .map(|(tag, _)| tag)
    .filter(|tag| tag.starts_with(prefix) && !searched.contains(tag.as_str()))
    .collect();
    let limit = limit.unwrap_or(AUTOCOMPLETE_LIMIT);
    Ok(json!(tags.into_iter().take(limit).collect::<Vec<_>>()))
}

/// `/tags/autoComplete/values`: the values of `tag`, sorted, starting with `prefix`, among
/// the series the expressions select (every series without expressions); at most `limit`
/// (100 by default).
///
/// # Errors
/// As [`complete_tags`].
pub fn complete_values(
    registry: &Registry,
    exprs: &[String],
    tag: &str,
    prefix: Option<&str>,
    limit: Option<usize>,
    budget: &ReadBudget,
) -> Result<Value> {
    let prefix = prefix.unwrap_or("");
    let pattern = (!exprs.is_empty()).then(|| query(exprs)).transpose()?;
    scan(registry, budget)?;
    let values: BTreeSet<String> = (registry.select(|_, key| {
        if !pattern.as_ref().is_none_or(|p| p.matches(key)) {
            return None;
        }
        (tags_of(key).into_iter())
            .find(|(k, _)| k == tag)
            .map(|(_, v)| v)
    }))
    .into_iter()
    .filter(|v| v.starts_with(prefix))
    .collect();
    let limit = limit.unwrap_or(AUTOCOMPLETE_LIMIT);
    Ok(json!(values.into_iter().take(limit).collect::<Vec<_>>()))
}
