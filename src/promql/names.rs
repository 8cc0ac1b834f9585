//! What PromQL calls series whose names it cannot write (docs/promql.md, "Graphite paths and
//! Influx fields"):
//! a Graphite path or an Influx `measurement.field` keeps its name where Prometheus drops it
//! ([`super::Labels::name_dropped`]), and is also reachable by its PromQL form, each
//! character PromQL does not allow in a metric name read as `_` (`cpu.usage_user` as
//! `cpu_usage_user`, as Telegraf's Prometheus output and VictoriaMetrics' Influx import name
//! it), when a selector finds nothing under the name as written.

use std::borrow::Cow;

use promql_parser::label::{MatchOp, Matcher};

use super::labels::{MatcherSet, NAME};
use super::source::{Selected, Source};
use crate::error::Result;
use crate::read::budget::ReadBudget;

/// True for a character PromQL allows in a metric name (after the first).
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// True when `name` is a metric name PromQL can write bare (`[a-zA-Z_:][a-zA-Z0-9_:]*`), as
/// every name Prometheus scrapes is.
pub(crate) fn is_promql_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(name_char)
}

/// The PromQL form of a stored name: each character PromQL does not allow in a metric name
/// read as `_`.
pub(crate) fn promql_name(name: &str) -> Cow<'_, str> {
    if name.chars().all(name_char) {
        return Cow::Borrowed(name);
    }
    Cow::Owned(
        name.chars()
            .map(|c| if name_char(c) { c } else { '_' })
            .collect(),
    )
}

/// `sets` with each `__name__="a_b"` matcher (a PromQL name with a `_`) widened to the
/// stored names whose PromQL form it is (each `_` may be any character PromQL does not allow
/// in a name); `None` when no set has such a matcher.
fn widened(sets: &[MatcherSet]) -> Option<Vec<MatcherSet>> {
    let mut any = false;
    let variants = (sets.iter())
        .map(|set| {
            (set.iter())
                .map(|m| match m.op {
                    MatchOp::Equal
                        if m.name == NAME && m.value.contains('_') && is_promql_name(&m.value) =>
                    {
                        let parts: Vec<String> = m.value.split('_').map(regex::escape).collect();
                        let pattern = format!("^(?:{})$", parts.join("(?:_|[^A-Za-z0-9_:])"));
                        match regex::Regex::new(&pattern) {
                            Ok(re) => {
                                any = true;
                                Matcher::new(MatchOp::Re(re), NAME, &pattern)
                            }
                            Err(_) => m.clone(),
                        }
                    }
                    _ => m.clone(),
                })
                .collect()
        })
        .collect();
    any.then_some(variants)
}

/// The series of `sets`, in label order. When they find none, the series whose names'
/// PromQL form a `__name__="a_b"` matcher names (Influx's `a.b`), each answering with that
/// form as its `__name__`. A selector that finds series under the name as written reads
/// those only: that is the rule when both exist.
///
/// # Errors
/// The source's (the budget's refusal); the second scan is charged as the first.
pub(crate) fn select(
    source: &dyn Source,
    sets: &[MatcherSet],
    budget: &ReadBudget,
) -> Result<Vec<Selected>> {
    let found = source.select(sets, budget)?;
    if !found.is_empty() {
        return Ok(found);
    }
    let Some(variants) = widened(sets) else {
        return Ok(found);
    };
    let mut found = source.select(&variants, budget)?;
    for s in &mut found {
        let name = promql_name(s.labels.get(NAME)).into_owned();
        s.labels.set(NAME, name);
    }
    found.sort_by(|a, b| a.labels.cmp(&b.labels));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::{is_promql_name, promql_name};

    #[test]
    fn promql_names_are_prometheus_metric_names() {
        for name in ["up", "node_cpu_seconds_total", "job:rate5m", "_x", ":a"] {
            assert!(is_promql_name(name), "{name}");
        }
        for name in ["", "cpu.usage_user", "1min", "a-b", "servers.web1.cpu", "é"] {
            assert!(!is_promql_name(name), "{name}");
        }
        assert_eq!(promql_name("cpu.usage_user"), "cpu_usage_user");
        assert_eq!(promql_name("docker.container-cpu"), "docker_container_cpu");
        assert_eq!(promql_name("température.x"), "temp_rature_x");
        assert_eq!(promql_name("up"), "up");
    }
}
