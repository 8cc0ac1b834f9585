//! The tiers configuration a data directory keeps of itself (`<data dir>/tiers.toml`, read
//! and written by [`crate::storage::stored_tiers`]): its canonical TOML form, and how a
//! given configuration differs from it, so a directory never meets tiers its files were not
//! made with (docs/file-format.md, "Stored tiers").

use std::fmt::Write as _;
use std::path::Path;

use super::{SeriesRules, TiersConfig};
use crate::error::Error;
use crate::error::Result;

/// One field in which two configurations differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Difference {
    /// The field, as a person names it: `tier "1m" period`, `engine.series_per_chunk`.
    pub field: String,
    /// Its value in the stored configuration (`absent` when it has no such tier).
    pub stored: String,
    /// Its value in the given one.
    pub given: String,
    /// True when the files depend on it (a tier's resolution, earlier periods other than
    /// the directory records, the raw tier's period, the series per chunk): such a
    /// difference cannot be applied to existing data. A rollup tier's period can: an open
    /// records the old one for the files cut with it (docs/file-format.md, "Period changes").
    pub layout: bool,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} in the directory, {} given",
            self.field, self.stored, self.given
        )
    }
}

/// Every field in which `given` differs from `stored`, the stored order of tiers first.
pub(crate) fn differences(stored: &TiersConfig, given: &TiersConfig) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut field = |field: String, old: String, new: String, layout: bool| {
        if old != new {
            out.push(Difference {
                field,
                stored: old,
                given: new,
                layout,
            });
        }
    };
    let (a, b) = (&stored.engine, &given.engine);
    let engine = [
        (
            "series_per_chunk",
            a.series_per_chunk.to_string(),
            b.series_per_chunk.to_string(),
            true,
        ),
        (
            "future_bound",
            a.future_bound.to_string(),
            b.future_bound.to_string(),
            false,
        ),
        (
            "max_points",
            a.max_points.to_string(),
            b.max_points.to_string(),
            false,
        ),
    ];
    for (what, x, y, layout) in engine {
        field(format!("engine.{what}"), x, y, layout);
    }
    for ((what, old), (_, new)) in rule_lists(&stored.counters)
        .into_iter()
        .zip(rule_lists(&given.counters))
    {
        field(format!("counters.{what}"), old, new, false);
    }
    let absent = || "absent".to_owned();
    tier_differences("", &stored.tiers, &given.tiers, &mut field);
    for (at, old) in stored.sets.iter().enumerate() {
        let Some(new) = given.sets.get(at) else {
            // Its series' recorded set would name nothing.
            field(
                format!("set {:?}", old.name),
                "present".into(),
                absent(),
                true,
            );
            continue;
        };
        field(
            format!("set[{at}] name"),
            old.name.clone(),
            new.name.clone(),
            true,
        );
        let prefix = format!("set {:?} ", old.name);
        for ((what, x), (_, y)) in rule_lists(&old.series)
            .into_iter()
            .zip(rule_lists(&new.series))
        {
            field(format!("{prefix}{what}"), x, y, false);
        }
        tier_differences(&prefix, &old.tiers, &new.tiers, &mut field);
    }
    for new in given.sets.iter().skip(stored.sets.len()) {
        field(
            format!("set {:?}", new.name),
            absent(),
            "present".into(),
            false,
        );
    }
    match (&stored.raw, &given.raw) {
        (Some(old), Some(new)) => {
            let name = &old.name;
            let rows = [
                ("name", old.name.clone(), new.name.clone(), false),
                (
                    "period",
                    old.period.to_string(),
                    new.period.to_string(),
                    true,
                ),
                (
                    "retention",
                    old.retention.to_string(),
                    new.retention.to_string(),
                    false,
                ),
                (
                    "create_ahead",
                    old.create_ahead.to_string(),
                    new.create_ahead.to_string(),
                    false,
                ),
                (
                    "dedupe_unchanged",
                    old.dedupe_unchanged.to_string(),
                    new.dedupe_unchanged.to_string(),
                    false,
                ),
            ];
            for (what, x, y, layout) in rows {
                field(format!("raw tier {name:?} {what}"), x, y, layout);
            }
        }
        (Some(old), None) => field(
            format!("raw tier {:?}", old.name),
            "present".into(),
            absent(),
            false,
        ),
        (None, Some(new)) => field(
            format!("raw tier {:?}", new.name),
            absent(),
            "present".into(),
            false,
        ),
        (None, None) => {}
    }
    out
}

/// Every field in which the tier list `given` differs from `stored`, by tier name, each field
/// named after `prefix` (`set "short" ` for a set's tiers).
fn tier_differences(
    prefix: &str,
    stored: &[super::TierSpec],
    given: &[super::TierSpec],
    field: &mut dyn FnMut(String, String, String, bool),
) {
    let absent = || "absent".to_owned();
    for old in stored {
        let name = &old.name;
        match given.iter().find(|t| &t.name == name) {
            None => field(
                format!("{prefix}tier {name:?}"),
                "present".into(),
                absent(),
                false,
            ),
            Some(new) => {
                // A tiers file a person writes has no earlier periods: it takes the
                // directory's, and a new period is recorded after them. A directory's own
                // file must hold them, the change it recorded last at most added.
                let recorded = new.earlier_periods.is_empty()
                    || new.earlier_periods == old.earlier_periods
                    || (new.earlier_periods.split_last()).is_some_and(|(last, before)| {
                        before == old.earlier_periods.as_slice() && last.period == old.period
                    });
                let takes_period = recorded && old.resolution == new.resolution;
                let spans = [
                    ("resolution", old.resolution, new.resolution, true),
                    ("period", old.period, new.period, !takes_period),
                    ("retention", old.retention, new.retention, false),
                ];
                for (what, x, y, layout) in spans {
                    field(
                        format!("{prefix}tier {name:?} {what}"),
                        x.to_string(),
                        y.to_string(),
                        layout,
                    );
                }
                field(
                    format!("{prefix}tier {name:?} create_ahead"),
                    old.create_ahead.to_string(),
                    new.create_ahead.to_string(),
                    false,
                );
                if !new.earlier_periods.is_empty() {
                    field(
                        format!("{prefix}tier {name:?} earlier_periods"),
                        earlier_text(&old.earlier_periods),
                        earlier_text(&new.earlier_periods),
                        !recorded,
                    );
                }
            }
        }
    }
    for new in given {
        if !stored.iter().any(|t| t.name == new.name) {
            field(
                format!("{prefix}tier {:?}", new.name),
                absent(),
                "present".into(),
                false,
            );
        }
    }
}

/// A tier's earlier periods as its stored tiers file writes them:
/// `[{ until = 1765152000, period = "6h" }]`.
fn earlier_text(earlier: &[crate::time::PeriodChange]) -> String {
    let items: Vec<String> = (earlier.iter())
        .map(|c| format!("{{ until = {}, period = \"{}\" }}", c.until, c.period))
        .collect();
    format!("[{}]", items.join(", "))
}

/// `[counters]`' two lists as tiers.toml writes them, `names = ["*_total"]` and
/// `tags = ["type=counter"]`: how messages show rules.
pub(crate) fn rule_lists(rules: &SeriesRules) -> [(&'static str, String); 2] {
    let tags = rules.tags.iter().map(|(k, v)| format!("{k}={v}"));
    [
        ("names", toml_list(rules.names.iter().cloned())),
        ("tags", toml_list(tags)),
    ]
}

/// `items` as a TOML array of strings.
fn toml_list(items: impl Iterator<Item = String>) -> String {
    let quoted: Vec<String> = items.map(|s| toml::Value::String(s).to_string()).collect();
    format!("[{}]", quoted.join(", "))
}

/// Checks a given configuration against the one stored at `path`: the error names the file
/// and spells out every difference the files depend on.
///
/// # Errors
/// [`Error::TiersConflict`] when `given` changes a tier's resolution or its earlier periods,
/// the raw tier's period, or the series per chunk.
pub(crate) fn check_given(path: &Path, stored: &TiersConfig, given: &TiersConfig) -> Result<()> {
    let conflicts: Vec<String> = differences(stored, given)
        .into_iter()
        .filter(|d| d.layout)
        .map(|d| d.to_string())
        .collect();
    if conflicts.is_empty() {
        return Ok(());
    }
    Err(Error::TiersConflict {
        path: path.to_path_buf(),
        given: "the given configuration".to_owned(),
        differences: conflicts.join("; "),
    })
}

impl TiersConfig {
    /// The configuration as TOML that [`TiersConfig::from_toml_str`] reads back equal: every
    /// key written, tiers in order, the raw tier last. What a data directory stores.
    pub fn to_toml(&self) -> String {
        let quote = |text: &str| toml::Value::String(text.to_owned()).to_string();
        let mut out = String::from(
            "# The tiers of this data directory, written by tierdb when it was created. Opening\n\
             # it without --tiers uses them; a --tiers that changes a tier's resolution, the\n\
             # raw tier's period, or series_per_chunk is refused. Other changes (a tier's\n\
             # period, retention, create_ahead, tiers added or removed) are accepted, and a\n\
             # writable open writes them here; a tier's earlier_periods say which period\n\
             # the files before each `until` (Unix seconds) have. See docs/file-format.md.\n\n",
        );
        let e = &self.engine;
        let _ = write!(
            out,
            "[engine]\nfuture_bound = \"{}\"\nseries_per_chunk = {}\nmax_points = {}\n\n",
            e.future_bound, e.series_per_chunk, e.max_points
        );
        let [(_, names), (_, tags)] = rule_lists(&self.counters);
        let _ = write!(out, "[counters]\nnames = {names}\ntags = {tags}\n");
        let write_tier = |out: &mut String, table: &str, tier: &super::TierSpec| {
            let _ = write!(
                out,
                "\n[[{table}]]\nname = {}\nresolution = \"{}\"\nperiod = \"{}\"\nretention = \"{}\"\ncreate_ahead = {}\n",
                quote(&tier.name),
                tier.resolution,
                tier.period,
                tier.retention,
                tier.create_ahead
            );
            if !tier.earlier_periods.is_empty() {
                let _ = writeln!(
                    out,
                    "earlier_periods = {}",
                    earlier_text(&tier.earlier_periods)
                );
            }
        };
        for tier in &self.tiers {
            write_tier(&mut out, "tier", tier);
        }
        if let Some(raw) = &self.raw {
            let _ = write!(
                out,
                "\n[[tier]]\nname = {}\nkind = \"raw\"\nperiod = \"{}\"\nretention = \"{}\"\ncreate_ahead = {}\ndedupe_unchanged = {}\n",
                quote(&raw.name),
                raw.period,
                raw.retention,
                raw.create_ahead,
                raw.dedupe_unchanged
            );
        }
        for set in &self.sets {
            let [(_, names), (_, tags)] = rule_lists(&set.series);
            let _ = write!(
                out,
                "\n[[set]]\nname = {}\nnames = {names}\ntags = {tags}\n",
                quote(&set.name)
            );
            for tier in &set.tiers {
                write_tier(&mut out, "set.tier", tier);
            }
        }
        out
    }
}
