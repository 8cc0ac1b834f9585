//! Which series a rule list (`[counters]`, a `[[set]]`) picks.

use super::glob::glob_match;
use super::KeyView;
use crate::config::SeriesRules;

/// True when `rules` pick `key`: its name matches one of the name globs, or it carries one
/// of the tags.
pub(crate) fn matches_rules(rules: &SeriesRules, key: KeyView<'_>) -> bool {
    (rules.names.iter()).any(|glob| glob_match(glob, &key.name()))
        || (rules.tags.iter()).any(|(k, v)| key.tag(k).as_deref() == Some(v.as_str()))
}
