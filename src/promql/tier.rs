//! Which tier a PromQL selector reads. A step and a range are exact over a tier whose
//! resolution divides them both: every window then covers whole buckets. So:
//! - the *grain* of a selector is the largest width that its evaluation times (their
//!   start and the query's step, a subquery's own inside it) and, for a range selector, its
//!   range are all multiples of: what the buckets must divide;
//! - of the tiers whose resolution divides the grain, the coarsest whose window still
//!   reaches back to the earliest second the selector reads (fewest buckets, still exact);
//! - when none does (a range older than the fine tiers keep, or a step that is not a
//!   multiple of any resolution), the finest tier that reaches back, and the answer warns
//!   that its windows are approximate; when no tier reaches back, the one reaching furthest.
//! - An instant selector, `last_over_time` and a range vector asked for itself read the
//!   finest tier that reaches back, whatever the step: their answers are samples, exact
//!   where the bucket holding each time holds one or none, which fine buckets most often do.

use crate::config::TiersConfig;
use crate::time::Timestamp;

/// The tier chosen for a read, and the warning to give when its windows are not exact.
pub(crate) struct Choice {
    pub tier: usize,
    pub warning: Option<String>,
}

use crate::time::gcd;

/// The grain of a selector: the width that its evaluation times (from `anchor_ms`, the
/// first one, shifted by the selector's offset) step by (`step_ms`) and its windows span
/// (`range_ms`) are all multiples of; `None` for one instant with no window.
pub(crate) fn grain(anchor_ms: i64, step_ms: Option<i64>, range_ms: Option<i64>) -> Option<i64> {
    let widths = [step_ms, range_ms];
    let widths: Vec<i64> = widths
        .iter()
        .flatten()
        .copied()
        .filter(|&w| w > 0)
        .collect();
    if widths.is_empty() {
        return None;
    }
    Some(widths.iter().fold(anchor_ms, |g, &w| gcd(g, w)))
}

/// The tier a selector of `grain` reading back to `earliest` (unix seconds) reads at `now`.
pub(crate) fn choose(
    tiers: &TiersConfig,
    now: Timestamp,
    grain_ms: Option<i64>,
    earliest: Timestamp,
) -> Choice {
    let reaches = |i: usize| tiers.tiers[i].window_start(now) <= earliest;
    let resolution_ms = |i: usize| tiers.tiers[i].resolution.secs() as i64 * 1000;
    let mut by_resolution: Vec<usize> = (0..tiers.tiers.len()).collect();
    by_resolution.sort_by_key(|&i| resolution_ms(i));
    if let Some(grain) = grain_ms {
        let exact =
            (by_resolution.iter().rev()).find(|&&i| grain % resolution_ms(i) == 0 && reaches(i));
        if let Some(&tier) = exact {
            return Choice {
                tier,
                warning: None,
            };
        }
    }
    let reaching = by_resolution.iter().find(|&&i| reaches(i)).copied();
    let tier = reaching.unwrap_or_else(|| {
        (0..tiers.tiers.len())
            .min_by_key(|&i| tiers.tiers[i].window_start(now))
            .unwrap_or(0)
    });
    let warning = grain_ms.map(|grain| {
        format!(
            "approximate: windows and steps of {} are not whole buckets of tier {} \
             (resolution {}s) that holds the range; each window reads the buckets lying whole \
             in it, or the ones it overlaps when it is narrower than a bucket",
            show_ms(grain),
            tiers.tiers[tier].name,
            tiers.tiers[tier].resolution.secs()
        )
    });
    Choice { tier, warning }
}

/// A width in ms as a PromQL duration (`90s`, `1500ms`).
pub(crate) fn show_ms(ms: i64) -> String {
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}
