//! Which tier a read of a range uses: the one named, or for `auto` the finest whose window
//! reaches back far enough within the point budget. It depends only on the tiers and a
//! clock's now, so a cluster node that holds no engine chooses the tier an engine would
//! (src/cluster/fanout.rs, src/cluster/partial.rs).

use crate::config::TiersConfig;
use crate::error::Error;
use crate::error::Result;
use crate::time::Timestamp;

/// Which tier a query reads.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TierChoice {
    /// The finest tier whose window covers the range within the point budget.
    Auto,
    /// The tier of this name.
    Named(String),
}

impl From<&str> for TierChoice {
    /// `auto`, or the name of a tier (checked when the query runs).
    fn from(s: &str) -> TierChoice {
        if s == "auto" {
            TierChoice::Auto
        } else {
            TierChoice::Named(s.to_string())
        }
    }
}

impl TierChoice {
    /// The tier choice `text` names: `auto`, a rollup tier of some set (a read of one set's
    /// series then needs it in that set) or the raw tier.
    ///
    /// # Errors
    /// For a name no tier has, a message listing the configured ones (the command line's and
    /// the HTTP API's refusal).
    pub fn parse(tiers: &TiersConfig, text: &str) -> std::result::Result<TierChoice, String> {
        let choice = TierChoice::from(text);
        if let TierChoice::Named(name) = &choice {
            let in_a_set = tiers.all_tiers().any(|(_, t)| &t.name == name);
            if !in_a_set && !tiers.is_raw(name) {
                let mut known: Vec<&str> = Vec::new();
                let names = (tiers.all_tiers().map(|(_, t)| t.name.as_str()))
                    .chain(tiers.raw.iter().map(|r| r.name.as_str()));
                for name in names {
                    if !known.contains(&name) {
                        known.push(name);
                    }
                }
                return Err(format!(
                    "unknown tier {name:?} (configured: {}, or auto)",
                    known.join(", ")
                ));
            }
        }
        Ok(choice)
    }

    /// The tier a read of `[from, to)` uses: the one named, or for `auto` the one
    /// `auto_tier` picks at `now` (`max_points` defaulting to the engine's).
    ///
    /// # Errors
    /// [`Error::UnknownTier`] for a name no tier has.
    pub fn resolve(
        &self,
        tiers: &TiersConfig,
        from: Timestamp,
        to: Timestamp,
        max_points: Option<u32>,
        now: Timestamp,
    ) -> Result<usize> {
        match self {
            TierChoice::Auto => Ok(auto_tier(
                tiers,
                from,
                to,
                max_points.unwrap_or(tiers.engine.max_points),
                now,
            )),
            TierChoice::Named(name) => tiers
                .tier_index(name)
                .ok_or_else(|| Error::UnknownTier(name.clone())),
        }
    }
}

/// The finest tier whose window at `now` reaches back to `from` and whose buckets over
/// `[from, to)` number at most `max_points`; failing that, the tier reaching back
/// furthest among those within the budget; failing that, the coarsest tier.
pub(crate) fn auto_tier(
    tiers: &TiersConfig,
    from: Timestamp,
    to: Timestamp,
    max_points: u32,
    now: Timestamp,
) -> usize {
    let specs = &tiers.tiers;
    let window = |t: usize| specs[t].window_start(now);
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by_key(|&t| specs[t].resolution);
    let span = to.saturating_sub(from).max(0) as u64;
    let fits = |t: usize| span / specs[t].resolution.secs() <= u64::from(max_points);
    let reaches = |t: usize| window(t) <= from;
    if let Some(&t) = order.iter().find(|&&t| fits(t) && reaches(t)) {
        return t;
    }
    order
        .iter()
        .copied()
        .filter(|&t| fits(t))
        .min_by_key(|&t| window(t))
        .or_else(|| order.last().copied())
        .unwrap_or(0)
}
