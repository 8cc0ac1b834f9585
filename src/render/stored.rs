//! Render's [`Source`] over stored series: the grid a render path is read on (the tier, its
//! points and the tier's window, [`RenderGrid`]), chosen from the tiers and a clock as
//! graphite-web's whisper reader chooses an archive, and the engine's [`Reader`] reading on
//! such a grid: path by path, or for sumSeries and kin in the aggregate's one pass.
//!
//! A single node chooses the grid from its own engine's tiers and clock and reads on it
//! ([`Source`] for [`Reader`]). A cluster node has no engine: it chooses the grid the same
//! way from its tiers and clock and has each partition's owner read its series on that grid
//! ([`Reader::render_fetch`], src/cluster/partial.rs), so every owner's series share start and
//! step and their union, sorted, is what one engine holding every series fetches.

#[cfg(test)]
mod tests;

use rayon::prelude::*;

use super::{graphite_path, timer_paths, Combined, Fetched, PathPattern, Source};
use crate::config::TiersConfig;
use crate::counter::SeriesKind;
use crate::error::Error;
use crate::error::Result;
use crate::read::aggregate::Aggregation;
use crate::read::budget::ReadBudget;
use crate::read::query::{Display, PointGrid, MAX_QUERY_POINTS};
use crate::read::reader::Reader;
use crate::time::{Span, Timestamp};

/// The points every series of one render path is read on, fixed by whoever answers the
/// render, so that every engine reading a part of it reads the same points.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RenderGrid {
    /// The tier, by name: tier indexes are one node's configuration order.
    pub tier: String,
    /// The tier's resolution, seconds, and the step of the points: an engine whose tier of
    /// that name has another refuses the grid rather than read other points.
    pub resolution: i64,
    /// Stamp (bucket start) of the first point: the first multiple of the resolution after
    /// `from`.
    pub first: Timestamp,
    /// Number of points, one per bucket, up to the one holding `until`.
    pub points: u64,
    /// First second the tier held at the chooser's clock: nothing older is read, whatever
    /// the reading engine's own clock says.
    pub window: Timestamp,
}

impl RenderGrid {
    /// The grid of a render over `from`..`until` with `tiers` at `now`, by whisper's rules
    /// (graphite-web reads whisper files): nothing (`None`) when `from` is after `now` or
    /// `until` before every tier's window; else `from` raised to the oldest window and
    /// `until` lowered to `now`, the finest tier whose retention reaches back to `from` (else
    /// the one reaching furthest), and its buckets stamped after `from` up to and including
    /// the one holding `until` (the bucket after `from`'s when that leaves none). Whisper
    /// picks the archive by its retention: a tier's window, whole periods, may reach further
    /// back, and choosing by it would read a finer tier than graphite-web for part of each
    /// period. Consolidation to `maxDataPoints` comes later, on the rendered series (see
    /// [`crate::render::render`]), as graphite-web does it.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] when the grid has more than `MAX_QUERY_POINTS` points (a
    /// tier whose retention holds that many buckets).
    pub fn choose(
        tiers: &TiersConfig,
        from: Timestamp,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<Option<RenderGrid>> {
        let specs = &tiers.tiers;
        let window = |t: usize| specs[t].window_start(now);
        let Some(oldest) = (0..specs.len()).map(window).min() else {
            return Ok(None);
        };
        if from > now || until < oldest {
            return Ok(None);
        }
        let (from, until) = (from.max(oldest), until.min(now));
        let mut order: Vec<usize> = (0..specs.len()).collect();
        order.sort_by_key(|&t| specs[t].resolution);
        let retained = |t: usize| now.saturating_sub(specs[t].retention.secs() as i64);
        let reaching = order.iter().copied().find(|&t| retained(t) <= from);
        let Some(tier) = reaching.or_else(|| order.iter().copied().min_by_key(|&t| retained(t)))
        else {
            return Ok(None);
        };
        let resolution = specs[tier].resolution.secs() as i64;
        let first = from - from.rem_euclid(resolution) + resolution;
        let mut end = until - until.rem_euclid(resolution) + resolution;
        if end == first {
            end += resolution;
        }
        let points = ((end - first) / resolution) as u64;
        if points > MAX_QUERY_POINTS {
            return Err(Error::InvalidQuery(format!(
                "{points} points of tier {} requested; at most {MAX_QUERY_POINTS} \
                 (use a shorter range)",
                specs[tier].name
            )));
        }
        Ok(Some(RenderGrid {
            tier: specs[tier].name.clone(),
            resolution,
            first,
            points,
            window: window(tier),
        }))
    }

    /// The tier's index on an engine with `tiers` and the grid's points there, so that
    /// every engine reads the same buckets.
    ///
    /// # Errors
    /// [`Error::UnknownTier`] when `tiers` has no tier of the grid's name;
    /// [`Error::InvalidQuery`] when its tier of that name has another resolution.
    pub(super) fn on(&self, tiers: &TiersConfig) -> Result<(usize, PointGrid)> {
        let tier =
            (tiers.tier_index(&self.tier)).ok_or_else(|| Error::UnknownTier(self.tier.clone()))?;
        let spec = &tiers.tiers[tier];
        let resolution = spec.resolution.secs() as i64;
        if resolution != self.resolution || self.points == 0 {
            return Err(Error::InvalidQuery(format!(
                "tier {} has a resolution of {resolution} s here, and a render grid of \
                 {} points of {} s cannot be read on it",
                self.tier, self.points, self.resolution
            )));
        }
        let end = (self.points as i64)
            .checked_mul(resolution)
            .and_then(|width| width.checked_add(self.first))
            .ok_or_else(|| Error::InvalidQuery("a render grid past the year 9999".into()))?;
        let grid = PointGrid::new(spec, self.first, end, spec.resolution)?;
        Ok((tier, grid))
    }
}

/// An engine's [`Reader`] as render reads it: the grid a render path is read on, and the
/// series of a path read on it, one by one or combined in one pass. A cluster node's owners
/// answer its fan-out through the same calls (src/cluster/partial.rs).
#[derive(Clone, Copy)]
pub struct StoredSource<'a> {
    reader: Reader<'a>,
}

impl<'a> StoredSource<'a> {
    /// Render's view of `reader`.
    pub fn new(reader: Reader<'a>) -> StoredSource<'a> {
        StoredSource { reader }
    }

    /// With `[[set]]`s on the engine's reader, a source per set, each reading its set's
    /// series through its set's tiers; `None` otherwise.
    fn per_set(&self) -> Option<Vec<StoredSource<'a>>> {
        self.reader.spans_sets().then(|| {
            (0..self.reader.whole_config().set_count())
                .map(|set| StoredSource::new(self.reader.for_set(set)))
                .collect()
        })
    }

    /// The grid a render over `from`..`until` reads on this engine: [`RenderGrid::choose`]
    /// with its tiers and clock.
    ///
    /// # Errors
    /// As [`RenderGrid::choose`].
    pub fn grid(&self, from: i64, until: i64) -> Result<Option<RenderGrid>> {
        RenderGrid::choose(self.reader.config(), from, until, self.reader.now())
    }

    /// Charges the registry scan (a value per key) to `budget`, then counts the series
    /// `pattern` matches (nothing cloned).
    ///
    /// # Errors
    /// The budget's refusal of the scan.
    pub fn count(&self, pattern: &PathPattern, budget: &ReadBudget) -> Result<usize> {
        budget.charge_scan(self.reader.registry().len())?;
        Ok((self.reader)
            .select(|_, key| pattern.matches(key).then_some(()))
            .len())
    }

    /// Every stored series matching `pattern`, read on `grid`, sorted by Graphite path as
    /// graphite-web's finders list them (then by key). A series matched but without data in
    /// range has only empty buckets (null points). No timer paths: what the render cache
    /// keeps (a single node and a cluster's owners add the timer paths after it,
    /// `super::timer_paths::with_timer_paths`).
    ///
    /// # Errors
    /// [`Error::UnknownTier`] when this engine has no tier of the grid's name;
    /// [`Error::InvalidQuery`] when its tier of that name has another resolution or the grid
    /// has too many points; a period file that cannot be read.
    pub fn fetch_on(&self, pattern: &PathPattern, grid: &RenderGrid) -> Result<Vec<Fetched>> {
        let (tier, points) = grid.on(self.reader.config())?;
        // One scan under the registry's read lock, even for a literal name: the pattern also
        // selects the name's tagged variants, and the registry has no index by bare name.
        let mut matched = self.reader.select(|id, key| {
            pattern
                .matches(key)
                .then(|| (graphite_path(key), id, key.to_key()))
        });
        // By path, then by key: two keys share a path only when a name holds a `;` that
        // reads like a tag, and the key orders those the same way on every engine.
        matched.sort_unstable_by(|a, b| (&a.0, &a.2).cmp(&(&b.0, &b.2)));
        let ids: Vec<_> = matched.iter().map(|m| m.1).collect();
        let kinds = self.reader.series_kinds(&ids);
        let step = Span::from_secs(grid.resolution as u64);
        matched
            .into_par_iter()
            .zip(kinds)
            .map(|((_, id, key), kind)| {
                let (start, buckets) = self.reader.merged_buckets(
                    id,
                    tier,
                    points.first,
                    points.end,
                    step,
                    grid.window,
                )?;
                Ok(Fetched {
                    key,
                    start,
                    step: grid.resolution,
                    buckets,
                    counter: kind == SeriesKind::Counter,
                    timer: None,
                })
            })
            .collect()
    }

    /// `aggregation` of the shown values of every series the `patterns` match (a series
    /// matched by two patterns counts twice, as graphite-web fetches it twice), point by
    /// point on `grid`, in the aggregate's one chunk-wise pass (`Reader::fold_series`).
    /// `None` when the series mix counters and gauges, whose values are shown differently.
    ///
    /// # Errors
    /// As [`StoredSource::fetch_on`].
    pub fn combine_on(
        &self,
        patterns: &[PathPattern],
        aggregation: Aggregation,
        grid: &RenderGrid,
    ) -> Result<Option<Combined>> {
        let (tier, points) = grid.on(self.reader.config())?;
        let hits = self.reader.select(|id, key| {
            let hits: Vec<bool> = patterns.iter().map(|p| p.matches(key)).collect();
            hits.contains(&true).then_some((id, hits))
        });
        let ids: Vec<_> = (hits.iter())
            .flat_map(|(id, hits)| hits.iter().filter(|&&hit| hit).map(move |_| *id))
            .collect();
        let kinds = self.reader.series_kinds(&ids);
        let counter = kinds.first() == Some(&SeriesKind::Counter);
        if kinds.iter().any(|&k| (k == SeriesKind::Counter) != counter) {
            return Ok(None);
        }
        let matched = (0..patterns.len())
            .map(|p| hits.iter().any(|(_, hits)| hits[p]))
            .collect();
        let display = if counter {
            Display::Total
        } else {
            Display::Avg
        };
        let values = match ids.is_empty() {
            true => Vec::new(),
            false => (self
                .reader
                .fold_series(tier, &points, (display, grid.window), &ids)?)
            .iter()
            .map(|fold| fold.of_series(aggregation))
            .collect(),
        };
        Ok(Some(Combined {
            start: grid.first,
            step: grid.resolution,
            values,
            counter,
            matched,
        }))
    }
}

/// The engine's read view as a single node's render source: its stored series and the
/// StatsD timer paths of its distribution series (`super::timer_paths`), which a cluster's
/// owners add to what they fetch as well. Every fetch of a render
/// reads one tier on one grid, so all the series it returns share start and step, which
/// functions combining series rely on.
impl Source for StoredSource<'_> {
    /// Charges the registry scan, then the series and timer paths `pattern` matches at the
    /// grid's points.
    fn charge(
        &self,
        pattern: &PathPattern,
        from: i64,
        until: i64,
        budget: &ReadBudget,
    ) -> Result<()> {
        if let Some(sets) = self.per_set() {
            return (sets.iter()).try_for_each(|set| set.charge(pattern, from, until, budget));
        }
        let Some(grid) = self.grid(from, until)? else {
            return Ok(());
        };
        let series = self.count(pattern, budget)? + timer_paths::count(&self.reader, pattern);
        charge_points(budget, pattern, series, grid.points)
    }

    /// [`StoredSource::fetch_on`] on [`StoredSource::grid`], timer paths added. With
    /// `[[set]]`s, each set's series on its own set's grid, as graphite-web reads each
    /// whisper file at its own archive's step; the functions that combine series bring
    /// their steps to a common one, as graphite-web's do.
    fn fetch(&self, pattern: &PathPattern, from: i64, until: i64) -> Result<Vec<Fetched>> {
        if let Some(sets) = self.per_set() {
            let mut all = Vec::new();
            for set in sets {
                all.extend(set.fetch(pattern, from, until)?);
            }
            all.sort_by_cached_key(|f| (graphite_path(f.key.view()), f.key.clone()));
            return Ok(all);
        }
        match self.grid(from, until)? {
            Some(grid) => {
                let stored = self.fetch_on(pattern, &grid)?;
                timer_paths::with_timer_paths(&self.reader, pattern, &grid, stored)
            }
            None => Ok(Vec::new()),
        }
    }

    /// The resolution of [`StoredSource::grid`]'s tier.
    fn step(&self, from: i64, until: i64) -> Result<Option<Option<i64>>> {
        if self.per_set().is_some() {
            // Each set's series come at their own set's step.
            return Ok(None);
        }
        Ok(Some(self.grid(from, until)?.map(|grid| grid.resolution)))
    }

    /// The matched keys' Graphite paths, from one registry scan, and the timer paths'.
    fn names(&self, pattern: &PathPattern) -> Result<Option<Vec<String>>> {
        let mut names = (self.reader.registry())
            .select(|_, key| pattern.matches(key).then(|| graphite_path(key)));
        names.extend(timer_paths::names(&self.reader, pattern));
        names.sort_unstable();
        Ok(Some(names))
    }

    /// [`StoredSource::combine_on`] on [`StoredSource::grid`]; `None` (fetch and combine)
    /// when a pattern selects timer paths, which the one pass does not read.
    fn combine(
        &self,
        patterns: &[PathPattern],
        aggregation: Aggregation,
        from: i64,
        until: i64,
    ) -> Result<Option<Combined>> {
        if (patterns.iter()).any(|p| timer_paths::count(&self.reader, p) > 0) {
            return Ok(None);
        }
        if self.reader.spans_sets() {
            // One pass reads one tier: only when every matched series keeps one set's.
            let ids = (self.reader)
                .select(|id, key| patterns.iter().any(|p| p.matches(key)).then_some(id));
            return match self.reader.sets_of(ids).as_slice() {
                &[set] => StoredSource::new(self.reader.for_set(set)).combine(
                    patterns,
                    aggregation,
                    from,
                    until,
                ),
                _ => Ok(None),
            };
        }
        match self.grid(from, until)? {
            Some(grid) => self.combine_on(patterns, aggregation, &grid),
            None => Ok(Some(Combined::nothing(patterns.len()))),
        }
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
    points: u64,
) -> Result<()> {
    let points = points.max(1);
    let values = u128::from(points) * series as u128;
    budget.charge(values, || {
        format!(
            "{:?} matches {series} series x {points} points",
            pattern.as_str()
        )
    })
}
