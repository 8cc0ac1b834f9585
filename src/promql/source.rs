//! Where PromQL reads series from: the [`Source`] trait (select by matchers, read a tier's
//! buckets or the raw tier's points), which the evaluator reads through, and
//! [`StoredSource`], the one over any [`Store`]: an engine's [`crate::read::reader::Reader`]
//! or a cluster node's fan-out. What PromQL makes of a store's answers (labels, their
//! order, the tiers a selection reads, the budget's charge) is written here once.

use std::borrow::Cow;

use super::labels::{key_labels, KeyFilter, Labels, MatcherSet};
use crate::bucket::Bucket;
use crate::config::TiersConfig;
use crate::counter::SeriesKind;
use crate::error::{Error, Result};
use crate::read::budget::ReadBudget;
use crate::read::store::{charge_buckets, tiers_for, SeriesRef, Store};
pub use crate::read::store::{BucketHistogram, BucketReduce, HistogramVisit, RawPoints};
use crate::time::Timestamp;

/// A series a selector picked: where to read it, its labels and how it stores samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Selected {
    /// The source's handle of the series (an engine's series id).
    pub id: u32,
    /// Its labels, `__name__` included.
    pub labels: Labels,
    /// True for a counter, stored as increases since the previous sample.
    pub counter: bool,
    /// True for a distribution: each bucket keeps the histogram of the observations in it
    /// (a native histogram's increases), read through [`Source::visit_histograms`].
    pub distribution: bool,
    /// Its tier set (0 without `[[set]]`s).
    pub set: usize,
}

impl Selected {
    /// The series as its store's reads name it.
    fn series(&self) -> SeriesRef {
        SeriesRef {
            id: self.id,
            set: self.set,
        }
    }
}

/// A storage side PromQL reads through.
pub trait Source: Sync {
    /// The tiers the source holds.
    fn tiers(&self) -> &TiersConfig;

    /// The tiers a read of `series` chooses among: [`Source::tiers`], unless the series keep
    /// `[[set]]`s' tiers; then the tiers of the resolutions every one of their sets has, each
    /// holding from the latest of the sets' windows. [`Source::buckets`] and its kin take
    /// their `tier` as an index into these.
    ///
    /// # Errors
    /// [`crate::Error::InvalidQuery`] naming the sets when they have no resolution in common.
    fn tiers_of(&self, series: &[Selected]) -> Result<std::borrow::Cow<'_, TiersConfig>> {
        let _ = series;
        Ok(std::borrow::Cow::Borrowed(self.tiers()))
    }

    /// The source clock's now, unix seconds.
    fn now(&self) -> Timestamp;

    /// Every series matching all matchers of at least one of `sets`, in label order,
    /// charging the registry scan (a value per key) to `budget` first.
    ///
    /// # Errors
    /// The budget's refusal.
    fn select(&self, sets: &[MatcherSet], budget: &ReadBudget) -> Result<Vec<Selected>>;

    /// The buckets of each of `series` in tier `tier`, one per resolution step from
    /// `from` (aligned to the resolution) to before `to`, empty ones included, charging
    /// series times buckets to `budget` before anything is read.
    ///
    /// # Errors
    /// The budget's refusal; a period file that cannot be read.
    fn buckets(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Vec<Vec<Bucket>>>;

    /// [`Source::buckets`] handed to `reduce` one series at a time (its index in `series`
    /// and its buckets) instead of returned, so a range function windows each series'
    /// buckets as they are read and no series' buckets outlive its windows; what `reduce`
    /// made of each, in the order of `series`. Charged as [`Source::buckets`]. This default
    /// reads every series first.
    ///
    /// # Errors
    /// As [`Source::buckets`].
    fn map_buckets(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
        reduce: &BucketReduce<'_>,
    ) -> Result<Vec<Vec<Option<f64>>>> {
        let all = self.buckets(series, tier, from, to, budget)?;
        Ok((all.iter().enumerate())
            .map(|(i, b)| reduce(i, b))
            .collect())
    }

    /// The histograms of each of `series` (distributions) in tier `tier`, one per bucket as
    /// [`Source::buckets`] reads them, handed to `visit` one series at a time (its index in
    /// `series` and its histograms) so that no series' histograms outlive its windows: `None`
    /// for a bucket without observations or whose histogram does not hold every one of them
    /// (samples written before the series became a distribution). Charged as
    /// [`Source::buckets`]. This default is for a source that keeps no histograms.
    ///
    /// # Errors
    /// `InvalidQuery` from this default; otherwise as [`Source::buckets`].
    fn visit_histograms(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
        visit: &HistogramVisit<'_>,
    ) -> Result<()> {
        let _ = (tier, from, to, budget, visit);
        if series.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidQuery(
            "this source keeps no histograms, so PromQL cannot read a distribution's".into(),
        ))
    }

    /// The raw tier's points of each of `series` in `[from, to)` (a counter's points are
    /// its increases), charging each point to `budget`; `None` when there is no raw tier or
    /// its window does not reach back to `from`.
    ///
    /// # Errors
    /// The budget's refusal.
    fn raw(
        &self,
        series: &[Selected],
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Option<Vec<RawPoints>>>;
}

/// PromQL's view of a [`Store`]: the one [`Source`] over storage, a single node's engine
/// (`StoredSource::new(reader)`) or a cluster node's fan-out alike.
#[derive(Clone, Copy)]
pub struct StoredSource<S> {
    store: S,
}

impl<S: Store> StoredSource<S> {
    /// PromQL's view of `store`.
    pub fn new(store: S) -> StoredSource<S> {
        StoredSource { store }
    }

    /// The handles of `series`.
    fn refs(series: &[Selected]) -> Vec<SeriesRef> {
        series.iter().map(Selected::series).collect()
    }

    /// The tier `tier` of [`Source::tiers_of`] `series`, a read of it from `from` to before
    /// `to` charged to `budget`.
    fn charged(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<crate::config::TierSpec> {
        let spec = self.tiers_of(series)?.tiers[tier].clone();
        charge_buckets(&spec, series.len(), from, to, budget)?;
        Ok(spec)
    }
}

impl<S: Store> Source for StoredSource<S> {
    fn tiers(&self) -> &TiersConfig {
        self.store.tiers()
    }

    /// [`tiers_for`] the sets of `series`.
    fn tiers_of(&self, series: &[Selected]) -> Result<Cow<'_, TiersConfig>> {
        let tiers = self.store.tiers();
        if tiers.sets.is_empty() {
            return Ok(Cow::Borrowed(tiers));
        }
        let mut sets: Vec<usize> = series.iter().map(|s| s.set).collect();
        sets.sort_unstable();
        sets.dedup();
        tiers_for(tiers, &sets, self.store.now())
    }

    fn now(&self) -> Timestamp {
        self.store.now()
    }

    /// The store's series, labelled and sorted by labels.
    fn select(&self, sets: &[MatcherSet], budget: &ReadBudget) -> Result<Vec<Selected>> {
        let filter = KeyFilter::new(sets)?;
        let mut found: Vec<Selected> = (self.store.select(&filter, budget)?.into_iter())
            .map(|found| Selected {
                id: found.id,
                labels: key_labels(&found.key.view()),
                counter: found.kind == SeriesKind::Counter,
                distribution: found.kind == SeriesKind::Distribution,
                set: found.set,
            })
            .collect();
        found.sort_unstable_by(|a, b| a.labels.cmp(&b.labels));
        Ok(found)
    }

    fn buckets(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Vec<Vec<Bucket>>> {
        let spec = self.charged(series, tier, from, to, budget)?;
        (self.store).buckets(&Self::refs(series), &spec, (from, to), None)
    }

    fn map_buckets(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
        reduce: &BucketReduce<'_>,
    ) -> Result<Vec<Vec<Option<f64>>>> {
        let spec = self.charged(series, tier, from, to, budget)?;
        (self.store).map_buckets(&Self::refs(series), &spec, from, to, reduce)
    }

    fn visit_histograms(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
        visit: &HistogramVisit<'_>,
    ) -> Result<()> {
        let spec = self.charged(series, tier, from, to, budget)?;
        (self.store).visit_histograms(&Self::refs(series), &spec, (from, to), None, visit)
    }

    fn raw(
        &self,
        series: &[Selected],
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Option<Vec<RawPoints>>> {
        if !self.store.raw_reaches(from) {
            return Ok(None);
        }
        self.store.raw(&Self::refs(series), from, to, budget)
    }
}
