//! The timer paths find and the tag API list beside an engine's keys, read from the
//! engine's registry as the rest of find and the tag API is.

use super::{candidates, paths_of, prefix_depth, select, Stat, PREFIXES};
use crate::counter::SeriesKind;
use crate::error::Result;
use crate::read::budget::ReadBudget;
use crate::read::reader::Reader;
use crate::read::store::Store;
use crate::registry::{SeriesId, SeriesKey};
use crate::render::{Finder, PathPattern};

/// The ids of the distribution series among those `keep` picks, from one registry scan.
fn distributions(
    reader: &Reader<'_>,
    keep: impl Fn(usize) -> bool + Sync,
) -> Vec<(SeriesId, SeriesKey)> {
    let picked =
        reader.select(|id, key| keep(key.name().split('.').count()).then(|| (id, key.to_key())));
    let ids: Vec<SeriesId> = picked.iter().map(|(id, _)| *id).collect();
    let kinds = reader.series_kinds(&ids);
    (picked.into_iter().zip(kinds))
        .filter(|(_, kind)| *kind == SeriesKind::Distribution)
        .map(|(picked, _)| picked)
        .collect()
}

/// The keys of the timer paths `pattern` selects, or without one every timer path find
/// lists (statsd's default thresholds), but those a stored series holds: what the tag API
/// adds to the registry's keys.
///
/// # Errors
/// As [`select`].
pub(crate) fn keys(reader: &Reader<'_>, pattern: Option<&PathPattern>) -> Result<Vec<SeriesKey>> {
    if let Some(pattern) = pattern {
        let stored = Store::select(reader, pattern, &ReadBudget::unlimited())?;
        let held: Vec<&str> = stored.iter().map(|f| f.key.as_str()).collect();
        return Ok((select(reader, pattern, &held)?.into_iter())
            .map(|s| s.key)
            .collect());
    }
    let registry = reader.registry();
    let stats = Stat::listed();
    let mut keys = Vec::new();
    for (_, key) in distributions(reader, |_| true) {
        keys.extend(
            (paths_of(&key, &stats).into_iter())
                .filter(|(_, timer, _)| registry.get(timer.as_str()).is_none())
                .map(|(_, timer, _)| timer),
        );
    }
    Ok(keys)
}

/// Adds to `finder` the nodes of the timer paths of `reader`'s distribution series, each
/// new node charged to `budget` as [`Finder::add_registry`] charges one.
///
/// # Errors
/// [`crate::Error::InvalidQuery`] when `budget` refuses a node.
pub(crate) fn add_to_finder(
    reader: &Reader<'_>,
    finder: &mut Finder,
    budget: &ReadBudget,
) -> Result<()> {
    let depth = finder.pattern().depth();
    let stats = candidates(finder.pattern());
    let fits = |segments: usize| (PREFIXES.iter()).any(|p| prefix_depth(p) + segments + 1 >= depth);
    for (_, key) in distributions(reader, fits) {
        for (_, timer, _) in paths_of(&key, &stats) {
            if finder.add(timer.view()) {
                budget.charge(1, || {
                    format!("{:?} has more nodes than that", finder.pattern().as_str())
                })?;
            }
        }
    }
    Ok(())
}
