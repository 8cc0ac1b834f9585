//! The one read interface the query languages stand on (PromQL and Graphite's render):
//! [`Store`], a storage side's primitives (the clock and the tiers, series selected or
//! counted by a [`SeriesFilter`], the buckets of selected series on a tier's grid, a
//! distribution's histograms, the raw tier's points, and where the store has one, a
//! one-pass fold of series).
//! An engine's [`Reader`](super::reader::Reader) is one (`store/reader.rs`); a cluster node's
//! fan-out to the partitions' owners is another (src/cluster/promql_source.rs), each owner
//! answering its part through its engines' readers. What both share sits here once, above
//! the trait: the tiers a read of series of several tier sets chooses among
//! ([`tiers_for`]) and the charge of a bucket read to the request's budget
//! ([`charge_buckets`]).
//!
//! Partial answers merge exactly: series live on one engine each (a partition's), so a
//! cluster's answer is the union of its owners' answers, each series' buckets, histograms
//! and points bit for bit as its engine read them; a one-pass fold's per-point [`Fold`]s
//! merge exactly (counts add, extremes compare; a sum's additions come in another order).
//!
//! The render cache ([`cache`]) is a decorator of the engine's store: a single node renders
//! through it, and a cluster's owners answer the bucket reads of a render's grid through
//! it.

pub(crate) mod cache;
mod reader;

#[cfg(feature = "server")]
use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::aggregate::Fold;
use super::budget::ReadBudget;
use super::query::Display;
use crate::bucket::Bucket;
use crate::config::{TierSpec, TiersConfig};
use crate::counter::SeriesKind;
use crate::error::Result;
use crate::histogram::Histogram;
use crate::registry::{KeyView, SeriesKey};
use crate::time::Timestamp;

/// One series' raw points, `(unix seconds, value)` in time order.
pub type RawPoints = Vec<(Timestamp, f64)>;

/// What [`Store::map_buckets`] makes of one series' buckets (its index and buckets): a
/// value per evaluation time.
pub type BucketReduce<'a> = dyn Fn(usize, &[Bucket]) -> Vec<Option<f64>> + Sync + 'a;

/// What [`Store::visit_histograms`] does with one series' bucket histograms (its index and
/// the histograms, one per bucket).
pub type HistogramVisit<'a> = dyn Fn(usize, &[Option<BucketHistogram>]) + Sync + 'a;

/// One bucket of a distribution series as a read of its histograms sees it: the histogram
/// of its observations and their sum.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketHistogram {
    /// The observations' buckets.
    pub histogram: Histogram,
    /// The observations' sum.
    pub sum: f64,
}

/// A series a [`Store::select`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The store's handle of the series, which its reads take back ([`SeriesRef::id`]): an
    /// engine's series id, a cluster node's index among the keys it selected.
    pub id: u32,
    /// Its key.
    pub key: SeriesKey,
    /// How it stores samples.
    pub kind: SeriesKind,
    /// Its tier set (0 without `[[set]]`s).
    pub set: usize,
}

impl Found {
    /// The handle a read of the series takes.
    pub fn series(&self) -> SeriesRef {
        SeriesRef {
            id: self.id,
            set: self.set,
        }
    }
}

/// A series as a read names it: the handle its [`Store::select`] gave and its tier set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeriesRef {
    /// [`Found::id`].
    pub id: u32,
    /// [`Found::set`].
    pub set: usize,
}

/// One matcher of a [`Selection::Matchers`]: a label, an operator and a value, as text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabelMatcher {
    /// `=`, `!=`, `=~` or `!~`.
    pub op: String,
    /// The label (`__name__` for the name).
    pub name: String,
    /// The value as written (`=`, `!=`) or the regex's anchored source (`=~`, `!~`).
    pub value: String,
}

/// What a [`SeriesFilter`] keeps, as data: what travels to another node, which compiles it
/// into a filter of its own (the query language's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Selection {
    /// PromQL's matcher sets: a series is kept when every matcher of at least one set holds.
    Matchers(Vec<Vec<LabelMatcher>>),
    /// Graphite path patterns (render's `PathPattern`s, as written): a series is kept when
    /// at least one matches its key.
    Paths(Vec<String>),
    /// The series with a StatsD timer path (`<name>.upper_90`, `stats.timers.<name>.mean`)
    /// the Graphite path pattern selects: the distributions among them are the timers
    /// render answers the pattern's timer paths from.
    TimerPaths(String),
}

/// Which series a [`Store::select`] keeps, by key.
pub trait SeriesFilter: Sync {
    /// Whether the series of `key` is kept.
    fn matches(&self, key: &KeyView<'_>) -> bool;

    /// The filter as data, for a store that selects elsewhere.
    fn selection(&self) -> Selection;
}

/// A storage side the query languages read through: an engine's reader, or a cluster
/// node's fan-out to its partitions' owners.
///
/// Reads take series by the handles [`Store::select`] gave, and a tier as a [`TierSpec`] of
/// [`tiers_for`] those series: without `[[set]]`s the tier of that name, with them each
/// series' set's tier of its resolution. Bucket reads are charged before they are made, by
/// the caller ([`charge_buckets`]), so a store reads them unchecked.
pub trait Store: Sync {
    /// The tiers the store holds, every set's.
    fn tiers(&self) -> &TiersConfig;

    /// The store clock's now, unix seconds.
    fn now(&self) -> Timestamp;

    /// Every series `filter` keeps, each once, in no particular order, charging the
    /// registry scans (a value per key) to `budget` first.
    ///
    /// # Errors
    /// The budget's refusal; a store's failure to reach its storage.
    fn select(&self, filter: &dyn SeriesFilter, budget: &ReadBudget) -> Result<Vec<Found>>;

    /// How many series `filter` keeps, per tier set (one entry per set of
    /// [`Store::tiers`], one without `[[set]]`s), charging the registry scans as
    /// [`Store::select`] does, without handing the series over. This default selects them.
    ///
    /// # Errors
    /// As [`Store::select`].
    fn count(&self, filter: &dyn SeriesFilter, budget: &ReadBudget) -> Result<Vec<usize>> {
        let mut counts = vec![0; self.tiers().set_count()];
        for found in self.select(filter, budget)? {
            if let Some(count) = counts.get_mut(found.set) {
                *count += 1;
            }
        }
        Ok(counts)
    }

    /// The buckets of each of `series` in `tier`, one per resolution step over `range`:
    /// from `from` (aligned down to the resolution) to before `to`, empty ones included; an empty list
    /// for each when that range holds no step, without a read. Nothing before `window` is
    /// read (the tier's window at the clock of whoever chose the range: render's grid,
    /// so that every store reading a part of it reads the same points); without one, nothing
    /// before the tier's window at the store's clock.
    ///
    /// # Errors
    /// A tier the store does not hold; a period file that cannot be read.
    fn buckets(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        range: (Timestamp, Timestamp),
        window: Option<Timestamp>,
    ) -> Result<Vec<Vec<Bucket>>>;

    /// [`Store::buckets`] handed to `reduce` one series at a time (its index in `series`
    /// and its buckets) instead of returned, so that no series' buckets outlive what
    /// `reduce` makes of them; what `reduce` made of each, in the order of `series`. This
    /// default reads every series first.
    ///
    /// # Errors
    /// As [`Store::buckets`].
    fn map_buckets(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        from: Timestamp,
        to: Timestamp,
        reduce: &BucketReduce<'_>,
    ) -> Result<Vec<Vec<Option<f64>>>> {
        let all = self.buckets(series, tier, (from, to), None)?;
        Ok((all.iter().enumerate())
            .map(|(i, b)| reduce(i, b))
            .collect())
    }

    /// The histograms of each of `series` in `tier`, one per bucket as [`Store::buckets`]
    /// reads them, handed to `visit` one series at a time (its index in `series` and its
    /// histograms): `None` for a bucket without observations or whose histogram does not
    /// hold every one of them (samples written before the series became a distribution),
    /// every one `None` for a series that is no distribution. `window` as for
    /// [`Store::buckets`].
    ///
    /// # Errors
    /// As [`Store::buckets`].
    fn visit_histograms(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        range: (Timestamp, Timestamp),
        window: Option<Timestamp>,
        visit: &HistogramVisit<'_>,
    ) -> Result<()>;

    /// The values of `series` (each shown as `display` shows a bucket; a series listed
    /// twice counts twice) folded point by point over the buckets [`Store::buckets`] reads,
    /// nulls skipped, in one pass that keeps no series' buckets: per point a [`Fold`]
    /// (count, sum, extremes of the series' values), which [`Fold::of_series`] makes
    /// sumSeries and kin's value and partial folds of disjoint series merge into exactly.
    /// `None` when the store has no such pass (the caller then reads the buckets and folds
    /// them), which is the default, or when the series keep the tiers of several sets.
    ///
    /// # Errors
    /// As [`Store::buckets`].
    fn fold(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        range: (Timestamp, Timestamp),
        window: Option<Timestamp>,
        display: Display,
    ) -> Result<Option<Vec<Fold>>> {
        let _ = (series, tier, range, window, display);
        Ok(None)
    }

    /// The raw tier's points of each of `series` in `[from, to)` (a counter's points are its
    /// increases), charging each point to `budget`; `None` when the store's raw tier does
    /// not hold them. The caller checks first that the raw tier's window reaches back to
    /// `from` ([`Store::raw_reaches`]).
    ///
    /// # Errors
    /// The budget's refusal.
    fn raw(
        &self,
        series: &[SeriesRef],
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Option<Vec<RawPoints>>>;

    /// Whether the raw tier's window reaches back to `from` at the store's clock (false
    /// without a raw tier).
    fn raw_reaches(&self, from: Timestamp) -> bool {
        (self.tiers().raw.as_ref()).is_some_and(|spec| spec.window_start(self.now()) <= from)
    }
}

/// The tiers a read of series of tier sets `sets` (each once, in set order) of `whole`
/// chooses among at `now`: `whole` without `[[set]]`s; one set's tiers; for several, per
/// resolution of the first set that every set has, the tier of the set whose window starts
/// last (the one that decides what all of them hold). Every store's read chooses from
/// these.
///
/// # Errors
/// [`crate::error::Error::InvalidQuery`] naming the sets when they have no resolution in common.
#[cfg(feature = "server")]
pub(crate) fn tiers_for<'a>(
    whole: &'a TiersConfig,
    sets: &[usize],
    now: Timestamp,
) -> Result<Cow<'a, TiersConfig>> {
    if whole.sets.is_empty() {
        return Ok(Cow::Borrowed(whole));
    }
    let sets = match sets {
        [] => return Ok(Cow::Owned(whole.set_view(0))),
        &[set] => return Ok(Cow::Owned(whole.set_view(set))),
        sets => sets,
    };
    let common: Vec<TierSpec> = (whole.set_tiers(sets[0]).iter())
        .filter_map(|first| {
            let of_each: Option<Vec<&TierSpec>> = (sets.iter())
                .map(|&set| {
                    (whole.set_tiers(set).iter()).find(|t| t.resolution == first.resolution)
                })
                .collect();
            of_each?
                .into_iter()
                .max_by_key(|t| t.window_start(now))
                .cloned()
        })
        .collect();
    if common.is_empty() {
        return Err(crate::error::Error::InvalidQuery(format!(
            "the selected series keep the tiers of sets {}, which have no resolution in \
             common; select the series of one set, or give the sets a tier of one \
             resolution",
            (sets.iter())
                .map(|&set| format!("{:?}", whole.set_name(set)))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(Cow::Owned(TiersConfig {
        tiers: common,
        sets: Vec::new(),
        ..whole.clone()
    }))
}

/// Charges `series` times the buckets [`Store::buckets`] reads of `tier` from `from`
/// (aligned down to its resolution) to before `to` to `budget`, before anything is read.
///
/// # Errors
/// The budget's refusal, naming the read.
#[cfg(feature = "server")]
pub(crate) fn charge_buckets(
    tier: &TierSpec,
    series: usize,
    from: Timestamp,
    to: Timestamp,
    budget: &ReadBudget,
) -> Result<()> {
    let (_, points) = bucket_span(tier, from, to);
    if series == 0 || points == 0 {
        return Ok(());
    }
    budget.charge(points as u128 * series as u128, || {
        format!("{series} series x {points} buckets of tier {}", tier.name)
    })
}

/// The buckets a [`Store::buckets`] of `tier` from `from` to before `to` reads per series:
/// the first one's start (`from` aligned down to the resolution) and how many.
pub fn bucket_span(tier: &TierSpec, from: Timestamp, to: Timestamp) -> (Timestamp, usize) {
    let step = tier.resolution.secs() as i64;
    let first = from.div_euclid(step) * step;
    let points = ((to - first).max(0) as u64).div_ceil(step as u64);
    (first, points as usize)
}
