//! Render's [`Source`] over a [`Store`]: the grid a render path is read on (the tier, its
//! points and the tier's window, [`RenderGrid`]), chosen from the store's tiers and clock as
//! graphite-web's whisper reader chooses an archive, and the store read on such a grid: path
//! by path, StatsD timer paths added (`super::timer_paths`), or for sumSeries and kin in the
//! store's one pass where it has one ([`Store::fold`]).
//!
//! A single node's store is its engine's reader; a cluster node's fans each read out to the
//! partitions' owners (src/cluster/promql_source.rs). Either way the grid is chosen once,
//! from the store's tiers and clock, and its window travels with the bucket reads, so every
//! owner reads the points one engine reads and their union, sorted, is what one engine
//! holding every series fetches.

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::HashSet;

use super::{graphite_path, timer_paths, Combined, Fetched, PathPattern, Source};
use crate::bucket::Bucket;
use crate::config::{TierSpec, TiersConfig};
use crate::counter::SeriesKind;
use crate::error::Error;
use crate::error::Result;
use crate::read::aggregate::Aggregation;
use crate::read::budget::ReadBudget;
use crate::read::query::{Display, MAX_QUERY_POINTS};
use crate::read::store::{Found, Selection, SeriesFilter, SeriesRef, Store};
use crate::registry::KeyView;
use crate::time::Timestamp;

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

    /// The tier of the grid's name among `tiers` and the grid's range there (its first
    /// point to after its last), so that every store reads the same buckets.
    ///
    /// # Errors
    /// [`Error::UnknownTier`] when `tiers` has no tier of the grid's name;
    /// [`Error::InvalidQuery`] when its tier of that name has another resolution.
    pub(super) fn on(&self, tiers: &TiersConfig) -> Result<(TierSpec, (Timestamp, Timestamp))> {
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
        Ok((spec.clone(), (self.first, end)))
    }
}

/// Render's [`Source`] over a [`Store`]: an engine's [`crate::Reader`] or a cluster node's
/// fan-out to its partitions' owners. It chooses each path's grid from the store's tiers and
/// clock (with `[[set]]`s, each set's), selects the path's series through the store and
/// reads their buckets on that grid, adds the StatsD timer paths of its distribution series
/// (`super::timer_paths`), and folds sumSeries and kin in the store's one pass where it has
/// one ([`Store::fold`]).
#[derive(Clone, Copy)]
pub struct StoredSource<S> {
    store: S,
}

/// A budget for the selections a fetch makes again: what it reads was charged before
/// ([`Source::charge`]).
fn charged_before() -> ReadBudget {
    ReadBudget::unlimited()
}

impl<S: Store> StoredSource<S> {
    /// Render's view of `store`.
    pub fn new(store: S) -> StoredSource<S> {
        StoredSource { store }
    }

    /// The store read through.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The tiers of set `set` (all of them without `[[set]]`s).
    fn set_tiers(&self, set: usize) -> Cow<'_, TiersConfig> {
        let tiers = self.store.tiers();
        match tiers.sets.is_empty() {
            true => Cow::Borrowed(tiers),
            false => Cow::Owned(tiers.set_view(set)),
        }
    }

    /// Where the series of tier set `set` are read: that set, or without `[[set]]`s in the
    /// store's tiers (a store of one set's series, say) the one grid of all.
    fn set_index(&self, set: usize) -> usize {
        match self.store.tiers().sets.is_empty() {
            true => 0,
            false => set,
        }
    }

    /// The grid a render over `from`..`until` reads the series of set `set` on:
    /// [`RenderGrid::choose`] with the set's tiers and the store's clock.
    ///
    /// # Errors
    /// As [`RenderGrid::choose`].
    pub fn grid(&self, set: usize, from: i64, until: i64) -> Result<Option<RenderGrid>> {
        RenderGrid::choose(&self.set_tiers(set), from, until, self.store.now())
    }

    /// Each set's grid of a render over `from`..`until` (set 0's alone without `[[set]]`s),
    /// the sets whose range holds no data left out.
    fn grids(&self, from: i64, until: i64) -> Result<Vec<(usize, RenderGrid)>> {
        let mut grids = Vec::new();
        for set in 0..self.store.tiers().set_count() {
            if let Some(grid) = self.grid(set, from, until)? {
                grids.push((set, grid));
            }
        }
        Ok(grids)
    }

    /// The buckets of `series` (all of set `set`) on `grid`.
    fn read_on(
        &self,
        series: &[SeriesRef],
        set: usize,
        grid: &RenderGrid,
    ) -> Result<Vec<Vec<Bucket>>> {
        let (spec, range) = grid.on(&self.set_tiers(set))?;
        (self.store).buckets(series, &spec, range, Some(grid.window))
    }

    /// The stored series of set `set` that `pattern` matches, read on `grid`, sorted by
    /// Graphite path as graphite-web's finders list them (then by key). A series matched
    /// but without data in range has only empty buckets (null points). No timer paths: what
    /// the render cache keeps ([`StoredSource::with_timer_paths`] adds them).
    ///
    /// # Errors
    /// [`Error::UnknownTier`] when the store has no tier of the grid's name;
    /// [`Error::InvalidQuery`] when its tier of that name has another resolution or the grid
    /// has too many points; a period file that cannot be read.
    pub fn fetch_on(
        &self,
        pattern: &PathPattern,
        set: usize,
        grid: &RenderGrid,
    ) -> Result<Vec<Fetched>> {
        let found = self.store.select(pattern, &charged_before())?;
        self.read_found(&found, set, grid)
    }

    /// Those of `found` of set `set`, read on `grid`, sorted by Graphite path then key.
    fn read_found(&self, found: &[Found], set: usize, grid: &RenderGrid) -> Result<Vec<Fetched>> {
        let mut found: Vec<(String, Found)> = (found.iter())
            .filter(|f| self.set_index(f.set) == set)
            .map(|f| (graphite_path(f.key.view()), f.clone()))
            .collect();
        // By path, then by key: two keys share a path only when a name holds a `;` that
        // reads like a tag, and the key orders those the same way in every store.
        found.sort_unstable_by(|a, b| (&a.0, &a.1.key).cmp(&(&b.0, &b.1.key)));
        let refs: Vec<SeriesRef> = found.iter().map(|(_, f)| f.series()).collect();
        let read = match refs.is_empty() {
            true => Vec::new(),
            false => self.read_on(&refs, set, grid)?,
        };
        Ok((found.into_iter().zip(read))
            .map(|((_, f), buckets)| Fetched {
                key: f.key,
                start: grid.first,
                step: grid.resolution,
                buckets,
                counter: f.kind == SeriesKind::Counter,
                timer: None,
            })
            .collect())
    }

    /// `stored` (the series of set `set` that `pattern` matches, read on `grid`) with the
    /// StatsD timer paths it selects among the set's distribution series read on the same
    /// grid, sorted by Graphite path then key as a fetch is; `held` is the keys of every
    /// stored series `pattern` matches, whose paths are theirs.
    ///
    /// # Errors
    /// As [`StoredSource::fetch_on`].
    pub fn with_timer_paths(
        &self,
        (pattern, held): (&PathPattern, &[&str]),
        set: usize,
        grid: &RenderGrid,
        stored: Vec<Fetched>,
    ) -> Result<Vec<Fetched>> {
        let selected: Vec<timer_paths::Selected> =
            (timer_paths::select(&self.store, pattern, held)?)
                .into_iter()
                .filter(|s| self.set_index(s.series.set) == set)
                .collect();
        if selected.is_empty() {
            return Ok(stored);
        }
        let (spec, range) = grid.on(&self.set_tiers(set))?;
        let timers = timer_paths::read(&self.store, selected, &spec, range, grid)?;
        let mut keyed: Vec<(String, Fetched)> = (stored.into_iter().chain(timers))
            .map(|f| (graphite_path(f.key.view()), f))
            .collect();
        keyed.sort_unstable_by(|a, b| (&a.0, &a.1.key).cmp(&(&b.0, &b.1.key)));
        Ok(keyed.into_iter().map(|(_, f)| f).collect())
    }

    /// `aggregation` of the shown values of every series the `patterns` match (a series
    /// matched by two patterns counts twice, as graphite-web fetches it twice), point by
    /// point on `grid`, in the store's one pass ([`Store::fold`]). `None` when the store has
    /// none, when the series mix counters and gauges, whose values are shown differently,
    /// or keep the tiers of several sets.
    ///
    /// # Errors
    /// As [`StoredSource::fetch_on`].
    pub fn combine_on(
        &self,
        patterns: &[PathPattern],
        aggregation: Aggregation,
        grid: &RenderGrid,
    ) -> Result<Option<Combined>> {
        let found = self
            .store
            .select(&AnyPath(Cow::Borrowed(patterns)), &charged_before())?;
        // Every series found matches a pattern: with one pattern, no key is matched again.
        let hits: Vec<Vec<bool>> = match patterns {
            [_] => vec![vec![true]; found.len()],
            _ => (found.iter())
                .map(|f| patterns.iter().map(|p| p.matches(f.key.view())).collect())
                .collect(),
        };
        let series: Vec<SeriesRef> = (found.iter().zip(&hits))
            .flat_map(|(f, hits)| hits.iter().filter(|&&hit| hit).map(|_| f.series()))
            .collect();
        let counter = found.first().map(|f| f.kind) == Some(SeriesKind::Counter);
        if (found.iter()).any(|f| (f.kind == SeriesKind::Counter) != counter) {
            return Ok(None);
        }
        let set = found.first().map_or(0, |f| self.set_index(f.set));
        if found.iter().any(|f| self.set_index(f.set) != set) {
            return Ok(None);
        }
        let matched = (0..patterns.len())
            .map(|p| hits.iter().any(|hits| hits[p]))
            .collect();
        let display = match counter {
            true => Display::Total,
            false => Display::Avg,
        };
        let values = match series.is_empty() {
            true => Vec::new(),
            false => {
                let (spec, range) = grid.on(&self.set_tiers(set))?;
                let window = Some(grid.window);
                match (self.store).fold(&series, &spec, range, window, display)? {
                    Some(folds) => folds.iter().map(|f| f.of_series(aggregation)).collect(),
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(Combined {
            start: grid.first,
            step: grid.resolution,
            values,
            counter,
            matched,
        }))
    }

    /// The one set of the series the `patterns` match (0 when none does); `None` when they
    /// keep the tiers of several sets.
    fn set_of(&self, patterns: &[PathPattern]) -> Result<Option<usize>> {
        if self.store.tiers().sets.is_empty() {
            return Ok(Some(0));
        }
        let counts = self
            .store
            .count(&AnyPath(Cow::Borrowed(patterns)), &charged_before())?;
        let mut sets = (counts.iter().enumerate()).filter(|(_, &n)| n > 0);
        Ok(match (sets.next(), sets.next()) {
            (None, _) => Some(0),
            (Some((set, _)), None) => Some(set),
            (Some(_), Some(_)) => None,
        })
    }
}

/// Every stored series of a store and the StatsD timer paths of its distribution series.
/// Every fetch of a render reads one tier on one grid per tier set, so all the series of a
/// set share start and step, which functions combining series rely on.
impl<S: Store> Source for StoredSource<S> {
    /// Charges the registry scan, then per set the series and timer paths `pattern`
    /// matches at the set's grid's points.
    fn charge(
        &self,
        pattern: &PathPattern,
        from: i64,
        until: i64,
        budget: &ReadBudget,
    ) -> Result<()> {
        let grids = self.grids(from, until)?;
        if grids.is_empty() {
            return Ok(());
        }
        let mut counts = self.store.count(pattern, budget)?;
        let mut timers = timer_paths::select(&self.store, pattern, &[])?;
        if !timers.is_empty() {
            // The timer paths a stored series holds are that series: the keys are needed.
            let stored = self.store.select(pattern, &charged_before())?;
            let held: HashSet<&str> = stored.iter().map(|f| f.key.as_str()).collect();
            timers.retain(|timer| !held.contains(timer.key.as_str()));
        }
        for timer in timers {
            if let Some(count) = counts.get_mut(self.set_index(timer.series.set)) {
                *count += 1;
            }
        }
        for (set, grid) in grids {
            let series = counts.get(set).copied().unwrap_or(0);
            charge_points(budget, pattern, series, grid.points)?;
        }
        Ok(())
    }

    /// [`StoredSource::fetch_on`] on [`StoredSource::grid`], timer paths added. With
    /// `[[set]]`s, each set's series on its own set's grid, as graphite-web reads each
    /// whisper file at its own archive's step; the functions that combine series bring
    /// their steps to a common one, as graphite-web's do.
    fn fetch(&self, pattern: &PathPattern, from: i64, until: i64) -> Result<Vec<Fetched>> {
        let grids = self.grids(from, until)?;
        if grids.is_empty() {
            return Ok(Vec::new());
        }
        let found = self.store.select(pattern, &charged_before())?;
        let keys: Vec<String> = found.iter().map(|f| f.key.as_str().to_owned()).collect();
        let held: Vec<&str> = keys.iter().map(String::as_str).collect();
        let several = grids.len() > 1;
        let mut all = Vec::new();
        for (set, grid) in grids {
            let stored = self.read_found(&found, set, &grid)?;
            all.extend(self.with_timer_paths((pattern, &held), set, &grid, stored)?);
        }
        if several {
            all.sort_by_cached_key(|f| (graphite_path(f.key.view()), f.key.clone()));
        }
        Ok(all)
    }

    /// The resolution of [`StoredSource::grid`]'s tier; `None` with `[[set]]`s, whose
    /// series come at their own set's step.
    fn step(&self, from: i64, until: i64) -> Result<Option<Option<i64>>> {
        if !self.store.tiers().sets.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.grid(0, from, until)?.map(|grid| grid.resolution)))
    }

    /// The matched keys' Graphite paths and the timer paths'.
    fn names(&self, pattern: &PathPattern) -> Result<Option<Vec<String>>> {
        let stored = self.store.select(pattern, &charged_before())?;
        let held: Vec<&str> = stored.iter().map(|f| f.key.as_str()).collect();
        let timers = timer_paths::select(&self.store, pattern, &held)?;
        let mut names: Vec<String> = (stored.iter().map(|f| &f.key))
            .chain(timers.iter().map(|t| &t.key))
            .map(|key| graphite_path(key.view()))
            .collect();
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
        if timer_paths::any_selected(&self.store, patterns)? {
            return Ok(None);
        }
        let Some(set) = self.set_of(patterns)? else {
            return Ok(None);
        };
        match self.grid(set, from, until)? {
            Some(grid) => self.combine_on(patterns, aggregation, &grid),
            None => Ok(Some(Combined::nothing(patterns.len()))),
        }
    }
}

/// The series any of some path patterns matches: what sumSeries and kin fold.
pub(crate) struct AnyPath<'a>(pub(crate) Cow<'a, [PathPattern]>);

impl SeriesFilter for AnyPath<'_> {
    fn matches(&self, key: &KeyView<'_>) -> bool {
        self.0.iter().any(|p| p.matches(*key))
    }

    fn selection(&self) -> Selection {
        Selection::Paths(self.0.iter().map(|p| p.as_str().to_owned()).collect())
    }
}

/// A path pattern selects the series it matches, in any store.
impl SeriesFilter for PathPattern {
    fn matches(&self, key: &KeyView<'_>) -> bool {
        PathPattern::matches(self, *key)
    }

    fn selection(&self) -> Selection {
        Selection::Paths(vec![self.as_str().to_owned()])
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
