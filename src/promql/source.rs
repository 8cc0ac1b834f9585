//! Where PromQL reads series from: the [`Source`] trait (select by matchers, read a tier's
//! buckets or the raw tier's points) and [`StoredSource`], the one over an engine's
//! [`Reader`]. The evaluator never names the engine, so another storage side (a cluster
//! node's fan-out) can answer the same calls.

use rayon::prelude::*;

use super::labels::{key_labels, KeyFilter, Labels, MatcherSet};
use crate::bucket::Bucket;
use crate::config::TiersConfig;
use crate::counter::SeriesKind;
use crate::error::{Error, Result};
use crate::histogram::Histogram;
use crate::read::aggregate::SPAN_BUCKETS;
use crate::read::budget::ReadBudget;
use crate::read::query::{Latest, PointGrid};
use crate::read::reader::Reader;
use crate::registry::SeriesId;
use crate::time::{Span, Timestamp};

/// One series' raw points, `(unix seconds, value)` in time order.
pub type RawPoints = Vec<(Timestamp, f64)>;

/// What [`Source::map_buckets`] makes of one series' buckets (its index and buckets): a
/// value per evaluation time.
pub type BucketReduce<'a> = dyn Fn(usize, &[Bucket]) -> Vec<Option<f64>> + Sync + 'a;

/// What [`Source::visit_histograms`] does with one series' bucket histograms (its index
/// and the histograms, one per bucket).
pub type HistogramVisit<'a> = dyn Fn(usize, &[Option<BucketHistogram>]) + Sync + 'a;

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
}

/// One bucket of a distribution series as PromQL reads it: the histogram of its
/// observations and their sum.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketHistogram {
    /// The observations' buckets.
    pub histogram: Histogram,
    /// The observations' sum.
    pub sum: f64,
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

/// Charges `series` times the buckets [`Source::buckets`] reads of tier `tier` from `from`
/// (aligned down to its resolution) to before `to` to `budget`, before anything is read;
/// returns the buckets per series.
///
/// # Errors
/// The budget's refusal, naming the read.
pub(crate) fn charge_buckets(
    tiers: &TiersConfig,
    series: usize,
    tier: usize,
    from: Timestamp,
    to: Timestamp,
    budget: &ReadBudget,
) -> Result<usize> {
    let spec = &tiers.tiers[tier];
    let step = spec.resolution.secs() as i64;
    let first = from.div_euclid(step) * step;
    let points = ((to - first).max(0) as u64).div_ceil(step as u64);
    if series == 0 || points == 0 {
        return Ok(points as usize);
    }
    budget.charge(u128::from(points) * series as u128, || {
        format!("{series} series x {points} buckets of tier {}", spec.name)
    })?;
    Ok(points as usize)
}

impl StoredSource<'_> {
    /// The histograms of `series`' `points` buckets of tier `tier` from `from` (aligned down
    /// to the resolution), complete ones only ([`Source::visit_histograms`]).
    fn series_histograms(
        &self,
        series: &Selected,
        tier: usize,
        from: Timestamp,
        points: usize,
    ) -> Result<Vec<Option<BucketHistogram>>> {
        let mut out = vec![None; points];
        if points == 0 {
            return Ok(out);
        }
        let step = self.reader.config().tiers[tier].resolution.secs() as i64;
        let first = from.div_euclid(step) * step;
        let end = first + points as i64 * step;
        let read = (self.reader).distribution(
            SeriesId(series.id),
            tier,
            first,
            end,
            Span::from_secs(step as u64),
        )?;
        for point in read.into_iter().filter(|p| p.is_complete()) {
            let at = (point.ts - first).div_euclid(step);
            if let (Some(slot), Some(histogram)) = (
                usize::try_from(at).ok().and_then(|at| out.get_mut(at)),
                point.histogram,
            ) {
                *slot = Some(BucketHistogram {
                    histogram,
                    sum: point.bucket.total,
                });
            }
        }
        Ok(out)
    }
}

/// Series of one chunk file [`StoredSource::map_buckets`] reads as one task: enough to share
/// the period files' lookup and stream spans of adjacent slots, few enough that two workers
/// share the series of one chunk and that a day of minute buckets of the run (1.5 MB) stays
/// in a core's cache.
const RUN_SERIES: usize = 32;

/// An engine's [`Reader`] as PromQL reads it.
#[derive(Clone, Copy)]
pub struct StoredSource<'a> {
    reader: Reader<'a>,
}

impl<'a> StoredSource<'a> {
    /// PromQL's view of `reader`.
    pub fn new(reader: Reader<'a>) -> StoredSource<'a> {
        StoredSource { reader }
    }

    /// With `[[set]]`s on the engine's reader, `series` by tier set: each set's source,
    /// the set's tier of tier `tier`'s resolution (tiers are chosen from the default
    /// set's), and the indexes in `series` of the set's series; `None` without sets.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] naming a series whose set has no tier of that resolution.
    fn by_set(&self, series: &[Selected], tier: usize) -> Result<Option<Vec<SetPart<'a>>>> {
        if !self.reader.spans_sets() {
            return Ok(None);
        }
        let resolution = self.tiers_of(series)?.tiers[tier].resolution;
        let places = (self.reader.registry()).placements(series.iter().map(|s| SeriesId(s.id)));
        let mut parts: Vec<SetPart<'a>> = Vec::new();
        for (i, place) in places.into_iter().enumerate() {
            let at = match parts
                .iter()
                .position(|p| p.source.reader.set() == place.set())
            {
                Some(at) => at,
                None => {
                    let reader = self.reader.for_set(place.set());
                    let tiers = &reader.config().tiers;
                    let Some(tier) = tiers.iter().position(|t| t.resolution == resolution) else {
                        return Err(Error::InvalidQuery(format!(
                            "series {} keeps the tiers of set {:?}, which has no tier of {} \
                             resolution; a PromQL selector reads its series at one resolution",
                            series[i].labels.get(super::labels::NAME),
                            reader.whole_config().set_name(place.set()),
                            resolution
                        )));
                    };
                    parts.push(SetPart {
                        source: StoredSource::new(reader),
                        tier,
                        series: Vec::new(),
                        indexes: Vec::new(),
                    });
                    parts.len() - 1
                }
            };
            parts[at].series.push(series[i].clone());
            parts[at].indexes.push(i);
        }
        Ok(Some(parts))
    }
}

/// The tiers a PromQL read of series of several tier sets `sets` of `whole` chooses among at
/// `now`: per resolution of the first set that every set has, the tier of the set whose
/// window starts last (the one that decides what all of them hold). A single node's source
/// and a cluster node's choose from the same.
///
/// # Errors
/// [`Error::InvalidQuery`] naming the sets when they have no resolution in common.
pub(crate) fn common_tiers(
    whole: &TiersConfig,
    sets: &[usize],
    now: Timestamp,
) -> Result<TiersConfig> {
    // Per resolution of the first set, the tier of every set with that resolution whose
    // window starts last: the one that decides what all of them hold.
    let common: Vec<crate::config::TierSpec> = (whole.set_tiers(sets[0]).iter())
        .filter_map(|first| {
            let of_each: Option<Vec<&crate::config::TierSpec>> = (sets.iter())
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
        return Err(Error::InvalidQuery(format!(
            "the selected series keep the tiers of sets {}, which have no resolution in \
             common; select the series of one set, or give the sets a tier of one \
             resolution",
            (sets.iter())
                .map(|&set| format!("{:?}", whole.set_name(set)))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(TiersConfig {
        tiers: common,
        sets: Vec::new(),
        ..whole.clone()
    })
}

/// The series of one tier set in a PromQL read ([`StoredSource::by_set`]).
struct SetPart<'a> {
    source: StoredSource<'a>,
    /// The set's tier read.
    tier: usize,
    series: Vec<Selected>,
    /// Where each of `series` is in the read's list.
    indexes: Vec<usize>,
}

impl Source for StoredSource<'_> {
    fn tiers(&self) -> &TiersConfig {
        self.reader.config()
    }

    fn tiers_of(&self, series: &[Selected]) -> Result<std::borrow::Cow<'_, TiersConfig>> {
        use std::borrow::Cow;
        if !self.reader.spans_sets() {
            return Ok(Cow::Borrowed(self.reader.config()));
        }
        let sets = self.reader.sets_of(series.iter().map(|s| SeriesId(s.id)));
        if let &[set] = sets.as_slice() {
            return Ok(Cow::Borrowed(self.reader.for_set(set).config()));
        }
        common_tiers(self.reader.whole_config(), &sets, self.reader.now()).map(Cow::Owned)
    }

    fn now(&self) -> Timestamp {
        self.reader.now()
    }

    fn select(&self, sets: &[MatcherSet], budget: &ReadBudget) -> Result<Vec<Selected>> {
        let filter = KeyFilter::new(sets)?;
        let registry = self.reader.registry();
        budget.charge_scan(registry.len())?;
        let mut found =
            registry.select(|id, key| filter.matches(&key).then(|| (id, key_labels(&key))));
        found.sort_unstable_by(|a, b| a.1.cmp(&b.1));
        let ids: Vec<SeriesId> = found.iter().map(|f| f.0).collect();
        let kinds = self.reader.series_kinds(&ids);
        Ok((found.into_iter().zip(kinds))
            .map(|((id, labels), kind)| Selected {
                id: id.0,
                labels,
                counter: kind == SeriesKind::Counter,
                distribution: kind == SeriesKind::Distribution,
            })
            .collect())
    }

    fn buckets(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Vec<Vec<Bucket>>> {
        if let Some(parts) = self.by_set(series, tier)? {
            let mut out = vec![Vec::new(); series.len()];
            for part in parts {
                let read = (part.source).buckets(&part.series, part.tier, from, to, budget)?;
                for (i, buckets) in part.indexes.into_iter().zip(read) {
                    out[i] = buckets;
                }
            }
            return Ok(out);
        }
        let points = charge_buckets(self.reader.config(), series.len(), tier, from, to, budget)?;
        if series.is_empty() || points == 0 {
            return Ok(vec![Vec::new(); series.len()]);
        }
        let step = self.reader.config().tiers[tier].resolution.secs() as i64;
        let first = from.div_euclid(step) * step;
        let spec = &self.reader.config().tiers[tier];
        let window = self.reader.window_start(tier, self.reader.now());
        let end = first + points as i64 * step;
        series
            .par_iter()
            .map(|s| {
                let (start, buckets) = self.reader.merged_buckets(
                    SeriesId(s.id),
                    tier,
                    first,
                    end,
                    Span::from_secs(step as u64),
                    window,
                )?;
                if start != first {
                    return Err(Error::InvalidQuery(format!(
                        "tier {} read from {start}, not {first}",
                        spec.name
                    )));
                }
                Ok(buckets)
            })
            .collect()
    }

    /// One pass per run of series: their buckets folded into a buffer each worker reuses
    /// and reduced there, while they are in cache. Series go in file order, in runs of at
    /// most `RUN_SERIES` of one chunk file, whose period files are looked up once per run
    /// and read span by span across the run, as the aggregate reads a chunk.
    fn map_buckets(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
        reduce: &BucketReduce<'_>,
    ) -> Result<Vec<Vec<Option<f64>>>> {
        if let Some(parts) = self.by_set(series, tier)? {
            let mut out = vec![Vec::new(); series.len()];
            for part in parts {
                let indexes = &part.indexes;
                let reduce_part = |j: usize, buckets: &[Bucket]| reduce(indexes[j], buckets);
                let read = (part.source).map_buckets(
                    &part.series,
                    part.tier,
                    from,
                    to,
                    budget,
                    &reduce_part,
                )?;
                for (&i, values) in indexes.iter().zip(read) {
                    out[i] = values;
                }
            }
            return Ok(out);
        }
        let points = charge_buckets(self.reader.config(), series.len(), tier, from, to, budget)?;
        if series.is_empty() || points == 0 {
            return Ok((0..series.len()).map(|i| reduce(i, &[])).collect());
        }
        let spec = &self.reader.config().tiers[tier];
        let step = spec.resolution.secs() as i64;
        let first = from.div_euclid(step) * step;
        let grid = PointGrid::new(spec, first, first + points as i64 * step, spec.resolution)?;
        let window = self.reader.window_start(tier, self.reader.now());
        let cells: Vec<(u32, u32)> = (series.iter())
            .map(|s| self.reader.cells_of(SeriesId(s.id)))
            .collect::<Result<_>>()?;
        let chunk = |i: usize| cells[i].0;
        let mut order: Vec<usize> = (0..series.len()).collect();
        order.sort_unstable_by_key(|&i| cells[i]);
        let runs: Vec<&[usize]> = (order.chunk_by(|&a, &b| chunk(a) == chunk(b)))
            .flat_map(|run| run.chunks(RUN_SERIES))
            .collect();
        let reduced = (runs.par_iter())
            .map_init(Vec::new, |run_buckets: &mut Vec<Bucket>, run| {
                let held = self.reader.files_for(tier, &grid, chunk(run[0]), window)?;
                run_buckets.clear();
                run_buckets.resize(run.len() * points, Bucket::EMPTY);
                if !held.is_empty() {
                    // As the aggregate reads a chunk: a span of every series of the run
                    // before the next span, the series two ahead prefetched; a compacted
                    // period decodes a slot whole, so then each series in one piece.
                    let span = if held.has_compacted() {
                        i64::MAX
                    } else {
                        SPAN_BUCKETS * step
                    };
                    let mut from = grid.first;
                    while from < grid.end {
                        let to = grid.end.min(from.saturating_add(span));
                        let outs = run.iter().zip(run_buckets.chunks_exact_mut(points));
                        for (k, (&i, out)) in outs.enumerate() {
                            if let Some(&next) = run.get(k + 2) {
                                let slot = cells[next].1;
                                grid.prefetch_span(&held, slot, from..to, Latest::Read);
                            }
                            let slot = cells[i].1;
                            grid.fold_span(&held, slot, from..to, 0, out, Latest::Read)?;
                        }
                        from = to;
                    }
                }
                Ok((run.iter().zip(run_buckets.chunks_exact(points)))
                    .map(|(&i, buckets)| (i, reduce(i, buckets)))
                    .collect::<Vec<_>>())
            })
            .collect::<Result<Vec<_>>>()?;
        let mut out = vec![Vec::new(); series.len()];
        for (i, values) in reduced.into_iter().flatten() {
            out[i] = values;
        }
        Ok(out)
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
        if let Some(parts) = self.by_set(series, tier)? {
            for part in parts {
                let indexes = &part.indexes;
                let visit_part = |j: usize, h: &[Option<BucketHistogram>]| visit(indexes[j], h);
                (part.source).visit_histograms(
                    &part.series,
                    part.tier,
                    from,
                    to,
                    budget,
                    &visit_part,
                )?;
            }
            return Ok(());
        }
        let points = charge_buckets(self.reader.config(), series.len(), tier, from, to, budget)?;
        (series.par_iter().enumerate()).try_for_each(|(i, s)| {
            visit(i, &self.series_histograms(s, tier, from, points)?);
            Ok(())
        })
    }

    fn raw(
        &self,
        series: &[Selected],
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Option<Vec<RawPoints>>> {
        let Some(spec) = &self.reader.config().raw else {
            return Ok(None);
        };
        if spec.window_start(self.reader.now()) > from {
            return Ok(None);
        }
        let mut all = Vec::with_capacity(series.len());
        for s in series {
            let left = budget.limit().saturating_sub(budget.used()) as usize;
            let Some(read) = self.reader.raw_points(SeriesId(s.id), from, to, left) else {
                return Ok(None);
            };
            let name = || format!("the raw points of {}", s.labels.get(super::labels::NAME));
            budget.charge(read.points.len() as u128, name)?;
            all.push(read.points);
        }
        Ok(Some(all))
    }
}
