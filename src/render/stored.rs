//! Render's [`Source`] over stored series: the grid a render path is read on (the tier, the
//! step and the tier's window, [`RenderGrid`]), chosen from the tiers and a clock, and the
//! engine's [`Reader`] reading on such a grid.
//!
//! A single node chooses the grid from its own engine's tiers and clock and reads on it
//! ([`Source`] for [`Reader`]). A cluster node has no engine: it chooses the grid the same
//! way from its tiers and clock and has each partition's owner read its series on that grid
//! ([`Reader::render_fetch`], src/cluster/partial.rs), so every owner's series share start and
//! step and their union, sorted, is what one engine holding every series fetches.

#[cfg(test)]
mod tests;

use rayon::prelude::*;

use super::{graphite_path, Fetched, PathPattern, Source};
use crate::config::TiersConfig;
use crate::counter::SeriesKind;
use crate::query::{PointGrid, MAX_QUERY_POINTS};
use crate::time::{Span, Timestamp};
use crate::{Error, ReadBudget, Reader, Result};

/// The points every series of one render path is read on, fixed by whoever answers the
/// render, so that every engine reading a part of it reads the same points.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RenderGrid {
    /// The tier, by name: tier indexes are one node's configuration order.
    pub tier: String,
    /// The tier's resolution, seconds: an engine whose tier of that name has another refuses
    /// the grid rather than read other points.
    pub resolution: i64,
    /// Seconds per point: the resolution, or a multiple of it that keeps the points within
    /// the render's budget.
    pub step: i64,
    /// First second the tier held at the chooser's clock: nothing older is read, whatever
    /// the reading engine's own clock says.
    pub window: Timestamp,
}

impl RenderGrid {
    /// The grid of a fetch over [from, until) within `max_points` (capped at
    /// [`MAX_QUERY_POINTS`]) with `tiers` at `now`: the `auto` tier for the range and
    /// budget, its resolution as the step or a multiple of it when even that tier has more
    /// buckets in the range (see `step_within`), and the tier's window at `now`.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] when the step does not fit in an i64 (a range of centuries
    /// squeezed into a handful of points).
    pub fn choose(
        tiers: &TiersConfig,
        from: Timestamp,
        until: Timestamp,
        max_points: u32,
        now: Timestamp,
    ) -> Result<RenderGrid> {
        let max_points = max_points.clamp(1, MAX_QUERY_POINTS as u32);
        let tier = tiers.auto_tier(from, until, max_points, now);
        let spec = &tiers.tiers[tier];
        let resolution = spec.resolution.secs() as i64;
        Ok(RenderGrid {
            tier: spec.name.clone(),
            resolution,
            step: step_within(from, until, resolution, max_points)?,
            window: spec.window_start(now),
        })
    }

    /// How many points a fetch over [from, until) on this grid charges per series (the
    /// points whose start lies in the range; the fetch reads one when none does).
    pub fn points(&self, from: Timestamp, until: Timestamp) -> i128 {
        PointGrid::span(from, until, i128::from(self.step)).1
    }
}

impl Reader<'_> {
    /// The grid a render's fetch over [from, until) reads at `max_points` on this engine:
    /// [`RenderGrid::choose`] with its tiers and clock.
    ///
    /// # Errors
    /// As [`RenderGrid::choose`].
    pub fn render_grid(&self, from: i64, until: i64, max_points: u32) -> Result<RenderGrid> {
        RenderGrid::choose(self.config(), from, until, max_points, self.now())
    }

    /// Charges the registry scan (a value per key) to `budget`, then counts the series
    /// `pattern` matches (nothing cloned).
    ///
    /// # Errors
    /// The budget's refusal of the scan.
    pub fn render_count(&self, pattern: &PathPattern, budget: &ReadBudget) -> Result<usize> {
        budget.charge_scan(self.registry().len())?;
        Ok((self.registry())
            .select(|_, key| pattern.matches(key).then_some(()))
            .len())
    }

    /// Every series matching `pattern`, read over [from, until) on `grid`, sorted by Graphite
    /// path as graphite-web's finders list them (then by key). Points are those whose start lies in
    /// [from, until), or the one holding `from` when no start does. A series matched but
    /// without data in range has only empty buckets (null points).
    ///
    /// # Errors
    /// [`Error::UnknownTier`] when this engine has no tier of the grid's name;
    /// [`Error::InvalidQuery`] when its tier of that name has another resolution or the grid
    /// has too many points; a period file that cannot be read.
    pub fn render_fetch(
        &self,
        pattern: &PathPattern,
        from: i64,
        until: i64,
        grid: &RenderGrid,
    ) -> Result<Vec<Fetched>> {
        let tier = (self.config().tier_index(&grid.tier))
            .ok_or_else(|| Error::UnknownTier(grid.tier.clone()))?;
        let resolution = self.config().tiers[tier].resolution.secs() as i64;
        if resolution != grid.resolution || grid.step < 1 {
            return Err(Error::InvalidQuery(format!(
                "tier {} has a resolution of {resolution} s here, and a render grid of \
                 {} s at steps of {} s cannot be read on it",
                grid.tier, grid.resolution, grid.step
            )));
        }
        let step = grid.step;
        // One scan under the registry's read lock, even for a literal name: the pattern also
        // selects the name's tagged variants, and the registry has no index by bare name.
        let mut matched = self.registry().select(|id, key| {
            pattern
                .matches(key)
                .then(|| (graphite_path(key), id, key.to_key()))
        });
        // By path, then by key: two keys share a path only when a name holds a `;` that
        // reads like a tag, and the key orders those the same way on every engine.
        matched.sort_unstable_by(|a, b| (&a.0, &a.2).cmp(&(&b.0, &b.2)));
        // A range shorter than the step may hold no point's start (two hours inside one day
        // of the 1d tier): read the one point that holds `from` rather than answer nothing.
        let from = match grid.points(from, until) {
            0 => from - from.rem_euclid(step),
            _ => from,
        };
        matched
            .into_par_iter()
            .map(|(_, id, key)| {
                let (start, buckets) = self.merged_buckets(
                    id,
                    tier,
                    from,
                    until,
                    Span::from_secs(step as u64),
                    grid.window,
                )?;
                Ok(Fetched {
                    key,
                    start,
                    step,
                    buckets,
                    counter: self.series_kind(id) == SeriesKind::Counter,
                })
            })
            .collect()
    }
}

/// The engine's read view as render's source. Every fetch of a render reads one tier on one
/// grid, so all the series it returns share start and step, which functions combining series
/// rely on.
impl Source for Reader<'_> {
    /// Charges the registry scan, then the series `pattern` matches at the points of
    /// [`Source::fetch`]'s grid.
    fn charge(
        &self,
        pattern: &PathPattern,
        from: i64,
        until: i64,
        max_points: u32,
        budget: &ReadBudget,
    ) -> Result<()> {
        let grid = self.render_grid(from, until, max_points)?;
        let series = self.render_count(pattern, budget)?;
        charge_points(budget, pattern, series, grid.points(from, until))
    }

    /// [`Reader::render_fetch`] on [`Reader::render_grid`].
    fn fetch(
        &self,
        pattern: &PathPattern,
        from: i64,
        until: i64,
        max_points: u32,
    ) -> Result<Vec<Fetched>> {
        let grid = self.render_grid(from, until, max_points)?;
        self.render_fetch(pattern, from, until, &grid)
    }
}

/// Charges a read of `series` series at `points` points each (at least one) to `budget`.
///
/// # Errors
/// [`Error::InvalidQuery`] when `budget` refuses it.
pub(crate) fn charge_points(
    budget: &ReadBudget,
    pattern: &PathPattern,
    series: usize,
    points: i128,
) -> Result<()> {
    let points = points.max(1);
    let values = points.unsigned_abs() * series as u128;
    budget.charge(values, || {
        format!(
            "{:?} matches {series} series x {points} points",
            pattern.as_str()
        )
    })
}

/// A step for [from, until) within `max_points`: `resolution` times `ceil(buckets /
/// max_points)`, where `buckets` counts the tier's buckets in the range, or times the next
/// whole number up when the grid of that step, aligned differently, still has one point too
/// many.
///
/// # Errors
///
/// [`Error::InvalidQuery`] when that step does not fit in an i64 (a range of centuries
/// squeezed into a handful of points).
fn step_within(from: i64, until: i64, resolution: i64, max_points: u32) -> Result<i64> {
    let resolution = i128::from(resolution.max(1));
    let budget = i128::from(max_points.max(1));
    let buckets = PointGrid::span(from, until, resolution).1;
    // ceil(buckets / budget) is almost always enough; an unaligned range may need one more.
    let mut k = ((buckets + budget - 1) / budget).max(1);
    while PointGrid::span(from, until, resolution * k).1 > budget {
        k += 1;
    }
    i64::try_from(resolution * k)
        .ok()
        .filter(|&step| step < i64::MAX / 2)
        .ok_or_else(|| {
            Error::InvalidQuery(format!(
                "range {from}..{until} is too wide for {max_points} points"
            ))
        })
}
