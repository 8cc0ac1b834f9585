//! A tier's period change that an existing data directory takes (docs/file-format.md,
//! "Period changes"): given tiers whose period differs from the stored one keep the stored
//! tier's earlier periods and add the old period, up to a boundary after every file cut
//! with it.

use super::{TierSpec, TiersConfig};
use crate::error::Result;
use crate::time::{PeriodChange, Timestamp};

/// A period change [`record_period_changes`] made: which tier, and what it recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// The set's name and the tier's, as messages name them.
    pub set: String,
    /// The tier's name.
    pub tier: String,
    /// The old period and where it ends.
    pub change: PeriodChange,
    /// The new period.
    pub period: crate::time::Span,
}

/// Gives each tier of `given` the earlier periods of the same tier in `stored` (same set,
/// same name) when `given` names none or the same ones, as a tiers file a person writes does;
/// where the period changed (the resolution kept), adds the stored period, ending at
/// `boundary(set, stored tier)`: the first instant after every file of that tier, on its
/// grid; or, when that is the start of the stored period's own range (it has no file yet),
/// lets the new period take that range instead. Tiers whose resolution changed, or whose given earlier periods differ from the
/// stored ones, are left for [`super::check_given`] to refuse. Returns the changes it added.
///
/// # Errors
/// What `boundary` returns.
pub(crate) fn record_period_changes(
    stored: &TiersConfig,
    given: &mut TiersConfig,
    boundary: &mut dyn FnMut(usize, &TierSpec) -> Result<Timestamp>,
) -> Result<Vec<Recorded>> {
    let mut recorded = Vec::new();
    for set in 0..given.set_count().min(stored.set_count()) {
        if stored.set_name(set) != given.set_name(set) {
            continue;
        }
        let set_name = given.set_name(set).to_owned();
        let tiers = match set {
            0 => &mut given.tiers,
            _ => &mut given.sets[set - 1].tiers,
        };
        for tier in tiers.iter_mut() {
            let Some(old) = stored.set_tiers(set).iter().find(|t| t.name == tier.name) else {
                continue;
            };
            let inherits =
                tier.earlier_periods.is_empty() || tier.earlier_periods == old.earlier_periods;
            if !inherits {
                continue;
            }
            tier.earlier_periods.clone_from(&old.earlier_periods);
            if tier.period == old.period || tier.resolution != old.resolution {
                continue;
            }
            let change = PeriodChange {
                until: boundary(set, old)?,
                period: old.period,
            };
            match old.earlier_periods.last() {
                // No file was cut with the stored period (it was recorded, and changed
                // again, before its range began): the new period takes that range whole.
                Some(last) if change.until <= last.until => {}
                _ => tier.earlier_periods.push(change),
            }
            recorded.push(Recorded {
                set: set_name.clone(),
                tier: tier.name.clone(),
                change,
                period: tier.period,
            });
        }
    }
    Ok(recorded)
}

/// The boundary of a change of `old`'s period, given the start of its newest file (`None`
/// when it has none) and the latest instant a sample may have been accepted at (the clock's
/// now plus the future bound): the end of the later of that file and the period holding that
/// instant. Both are on the old grid; the new period's grid starts there.
pub(crate) fn boundary(
    old: &TierSpec,
    newest_file: Option<Timestamp>,
    latest: Timestamp,
) -> Timestamp {
    let current = old.period_end(old.period_start(latest));
    match newest_file {
        Some(start) => current.max(old.period_end(start)),
        None => current,
    }
}

#[cfg(test)]
mod tests;
