//! An engine's [`Reader`] as a [`Store`]: selection in one parallel registry scan, buckets
//! merged per series or folded run by run in file order, a distribution's histograms, raw
//! points. With `[[set]]`s, each series is read through its set's reader and its set's tier
//! of the asked tier's resolution.

use rayon::prelude::*;

use super::{
    bucket_span, BucketHistogram, BucketReduce, Found, HistogramVisit, RawPoints, SeriesFilter,
    SeriesRef, Store,
};
use crate::bucket::Bucket;
use crate::config::{TierSpec, TiersConfig};
use crate::error::{Error, Result};
use crate::read::aggregate::SPAN_BUCKETS;
use crate::read::budget::ReadBudget;
use crate::read::query::{Latest, PointGrid};
use crate::read::reader::Reader;
use crate::registry::SeriesId;
use crate::time::{Span, Timestamp};

/// Series of one chunk file [`Store::map_buckets`] reads as one task: enough to share the
/// period files' lookup and stream spans of adjacent slots, few enough that two workers
/// share the series of one chunk and that a day of minute buckets of the run (1.5 MB) stays
/// in a core's cache.
const RUN_SERIES: usize = 32;

/// Where the `j`th series of a part of a read is in the read's series
/// ([`Reader::per_set`]).
type PartIndex<'a> = dyn Fn(usize) -> usize + Sync + 'a;

/// The series of one tier set in a read ([`Reader::by_set`]).
struct SetPart<'a> {
    reader: Reader<'a>,
    /// The set's tier read, by index.
    tier: usize,
    series: Vec<SeriesRef>,
    /// Where each of `series` is in the read's list.
    indexes: Vec<usize>,
}

impl<'a> Reader<'a> {
    /// The index of `tier` among this reader's tiers (by name).
    ///
    /// # Errors
    /// [`Error::UnknownTier`] when it has none of that name.
    fn tier_named(&self, tier: &TierSpec) -> Result<usize> {
        (self.config().tier_index(&tier.name)).ok_or_else(|| Error::UnknownTier(tier.name.clone()))
    }

    /// The name of series `id`, for a message.
    fn name_of(&self, id: u32) -> String {
        (self.registry().key(SeriesId(id))).map_or_else(|| id.to_string(), |k| k.name().into())
    }

    /// With `[[set]]`s on the engine's reader, `series` by tier set: each set's reader, the
    /// set's tier of `tier`'s resolution, and the indexes in `series` of the set's series;
    /// `None` without sets.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] naming a series whose set has no tier of that resolution.
    fn by_set(&self, series: &[SeriesRef], tier: &TierSpec) -> Result<Option<Vec<SetPart<'a>>>> {
        if !self.spans_sets() {
            return Ok(None);
        }
        let mut parts: Vec<SetPart<'a>> = Vec::new();
        for (i, s) in series.iter().enumerate() {
            let at = match parts.iter().position(|p| p.reader.set() == s.set) {
                Some(at) => at,
                None => {
                    let reader = self.for_set(s.set);
                    let tiers = &reader.config().tiers;
                    let Some(index) = tiers.iter().position(|t| t.resolution == tier.resolution)
                    else {
                        return Err(Error::InvalidQuery(format!(
                            "series {} keeps the tiers of set {:?}, which has no tier of {} \
                             resolution; a PromQL selector reads its series at one resolution",
                            self.name_of(s.id),
                            reader.whole_config().set_name(s.set),
                            tier.resolution
                        )));
                    };
                    parts.push(SetPart {
                        reader,
                        tier: index,
                        series: Vec::new(),
                        indexes: Vec::new(),
                    });
                    parts.len() - 1
                }
            };
            parts[at].series.push(*s);
            parts[at].indexes.push(i);
        }
        Ok(Some(parts))
    }

    /// `read` of `series` in `tier`: without `[[set]]`s one read of all through this reader
    /// (the tier by name); with them one read per set, through the set's reader and tier
    /// ([`Reader::by_set`]), the results put back in the order of `series`. `read` gets the
    /// reader, its series, the tier's index and where each of its series is in `series`.
    ///
    /// # Errors
    /// As [`Reader::by_set`]; what `read` returns.
    fn per_set<T: Default>(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        read: impl Fn(&Reader<'a>, &[SeriesRef], usize, &PartIndex<'_>) -> Result<Vec<T>>,
    ) -> Result<Vec<T>> {
        let Some(parts) = self.by_set(series, tier)? else {
            return read(self, series, self.tier_named(tier)?, &|j| j);
        };
        let mut out: Vec<T> = std::iter::repeat_with(T::default)
            .take(series.len())
            .collect();
        for part in parts {
            let indexes = &part.indexes;
            let read = read(&part.reader, &part.series, part.tier, &|j| indexes[j])?;
            for (&i, value) in indexes.iter().zip(read) {
                out[i] = value;
            }
        }
        Ok(out)
    }

    /// The buckets of `series` in tier `tier` (an index) from `from` (aligned down) to
    /// before `to`, each merged on its own, nothing before `window` (else the tier's window
    /// at the reader's clock) read.
    fn buckets_in(
        &self,
        series: &[SeriesRef],
        tier: usize,
        (from, to): (Timestamp, Timestamp),
        window: Option<Timestamp>,
    ) -> Result<Vec<Vec<Bucket>>> {
        let spec = &self.config().tiers[tier];
        let step = spec.resolution.secs() as i64;
        let (first, points) = bucket_span(spec, from, to);
        if series.is_empty() || points == 0 {
            return Ok(vec![Vec::new(); series.len()]);
        }
        let window = window.unwrap_or_else(|| self.window_start(tier, self.now()));
        let end = first + points as i64 * step;
        series
            .par_iter()
            .map(|s| {
                let (start, buckets) = self.merged_buckets(
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
    fn map_buckets_in(
        &self,
        series: &[SeriesRef],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        reduce: &BucketReduce<'_>,
    ) -> Result<Vec<Vec<Option<f64>>>> {
        let spec = &self.config().tiers[tier];
        let step = spec.resolution.secs() as i64;
        let (first, points) = bucket_span(spec, from, to);
        if series.is_empty() || points == 0 {
            return Ok((0..series.len()).map(|i| reduce(i, &[])).collect());
        }
        let grid = PointGrid::new(spec, first, first + points as i64 * step, spec.resolution)?;
        let window = self.window_start(tier, self.now());
        let cells: Vec<(u32, u32)> = (series.iter())
            .map(|s| self.cells_of(SeriesId(s.id)))
            .collect::<Result<_>>()?;
        let chunk = |i: usize| cells[i].0;
        let mut order: Vec<usize> = (0..series.len()).collect();
        order.sort_unstable_by_key(|&i| cells[i]);
        let runs: Vec<&[usize]> = (order.chunk_by(|&a, &b| chunk(a) == chunk(b)))
            .flat_map(|run| run.chunks(RUN_SERIES))
            .collect();
        let reduced = (runs.par_iter())
            .map_init(Vec::new, |run_buckets: &mut Vec<Bucket>, run| {
                let held = self.files_for(tier, &grid, chunk(run[0]), window)?;
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

    /// The histograms of series `id`'s `points` buckets of tier `tier` (an index) from
    /// `first` (aligned to the resolution), complete ones only ([`Store::visit_histograms`]),
    /// nothing before `window` (else the tier's window at the reader's clock) read.
    fn series_histograms(
        &self,
        id: u32,
        tier: usize,
        (first, points): (Timestamp, usize),
        window: Option<Timestamp>,
    ) -> Result<Vec<Option<BucketHistogram>>> {
        let mut out = vec![None; points];
        if points == 0 {
            return Ok(out);
        }
        let spec = &self.config().tiers[tier];
        let step = spec.resolution.secs() as i64;
        let end = first + points as i64 * step;
        let grid = PointGrid::new(spec, first, end, spec.resolution)?;
        let window = window.unwrap_or_else(|| self.window_start(tier, self.now()));
        let read = self.distribution_on(SeriesId(id), tier, &grid, window)?;
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

    /// The histograms of `series` in tier `tier` (an index), each visited.
    fn visit_histograms_in(
        &self,
        series: &[SeriesRef],
        tier: usize,
        (from, to): (Timestamp, Timestamp),
        window: Option<Timestamp>,
        visit: &HistogramVisit<'_>,
    ) -> Result<()> {
        let span = bucket_span(&self.config().tiers[tier], from, to);
        (series.par_iter().enumerate()).try_for_each(|(i, s)| {
            visit(i, &self.series_histograms(s.id, tier, span, window)?);
            Ok(())
        })
    }
}

impl Store for Reader<'_> {
    fn tiers(&self) -> &TiersConfig {
        self.config()
    }

    fn now(&self) -> Timestamp {
        Reader::now(self)
    }

    fn select(&self, filter: &dyn SeriesFilter, budget: &ReadBudget) -> Result<Vec<Found>> {
        let registry = self.registry();
        budget.charge_scan(registry.len())?;
        let found = Reader::select(self, |id, key| {
            filter.matches(&key).then(|| (id, key.to_key()))
        });
        let ids: Vec<SeriesId> = found.iter().map(|f| f.0).collect();
        let kinds = self.series_kinds(&ids);
        let places = registry.placements(ids);
        Ok((found.into_iter().zip(kinds).zip(places))
            .map(|(((id, key), kind), place)| Found {
                id: id.0,
                key,
                kind,
                set: place.set(),
            })
            .collect())
    }

    /// Counted in the registry's scan, each kept series' set looked up only with `[[set]]`s.
    fn count(&self, filter: &dyn SeriesFilter, budget: &ReadBudget) -> Result<Vec<usize>> {
        let registry = self.registry();
        budget.charge_scan(registry.len())?;
        let mut counts = vec![0; self.config().set_count()];
        if !self.spans_sets() {
            counts[0] = Reader::select(self, |_, key| filter.matches(&key).then_some(())).len();
            return Ok(counts);
        }
        let ids = Reader::select(self, |id, key| filter.matches(&key).then_some(id));
        for place in registry.placements(ids) {
            if let Some(count) = counts.get_mut(place.set()) {
                *count += 1;
            }
        }
        Ok(counts)
    }

    fn buckets(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        range: (Timestamp, Timestamp),
        window: Option<Timestamp>,
    ) -> Result<Vec<Vec<Bucket>>> {
        self.per_set(series, tier, |reader, part, tier, _| {
            reader.buckets_in(part, tier, range, window)
        })
    }

    fn map_buckets(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        from: Timestamp,
        to: Timestamp,
        reduce: &BucketReduce<'_>,
    ) -> Result<Vec<Vec<Option<f64>>>> {
        self.per_set(series, tier, |reader, part, tier, index| {
            let reduce_part = |j: usize, buckets: &[Bucket]| reduce(index(j), buckets);
            reader.map_buckets_in(part, tier, from, to, &reduce_part)
        })
    }

    fn visit_histograms(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        range: (Timestamp, Timestamp),
        window: Option<Timestamp>,
        visit: &HistogramVisit<'_>,
    ) -> Result<()> {
        let visited = self.per_set(series, tier, |reader, part, tier, index| {
            let visit_part = |j: usize, h: &[Option<BucketHistogram>]| visit(index(j), h);
            reader.visit_histograms_in(part, tier, range, window, &visit_part)?;
            Ok(vec![(); part.len()])
        });
        visited.map(|_| ())
    }

    /// The aggregate's chunk-wise pass (`Reader::fold_series`), through the series' set's
    /// reader with `[[set]]`s; `None` for series of several sets.
    #[cfg(feature = "server")]
    fn fold(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        (from, to): (Timestamp, Timestamp),
        window: Option<Timestamp>,
        display: crate::read::query::Display,
    ) -> Result<Option<Vec<crate::read::aggregate::Fold>>> {
        let (reader, tier) = match self.by_set(series, tier)? {
            None => (*self, self.tier_named(tier)?),
            Some(parts) => match <[SetPart<'_>; 1]>::try_from(parts) {
                Ok([part]) => (part.reader, part.tier),
                Err(_) => return Ok(None),
            },
        };
        let spec = &reader.config().tiers[tier];
        let (first, points) = bucket_span(spec, from, to);
        if series.is_empty() || points == 0 {
            return Ok(Some(Vec::new()));
        }
        let end = first + points as i64 * spec.resolution.secs() as i64;
        let grid = PointGrid::new(spec, first, end, spec.resolution)?;
        let window = window.unwrap_or_else(|| reader.window_start(tier, reader.now()));
        let ids: Vec<SeriesId> = series.iter().map(|s| SeriesId(s.id)).collect();
        Ok(Some(reader.fold_series(
            tier,
            &grid,
            (display, window),
            &ids,
        )?))
    }

    fn raw(
        &self,
        series: &[SeriesRef],
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Option<Vec<RawPoints>>> {
        let mut all = Vec::with_capacity(series.len());
        for s in series {
            let left = budget.limit().saturating_sub(budget.used()) as usize;
            let Some(read) = self.raw_points(SeriesId(s.id), from, to, left) else {
                return Ok(None);
            };
            let name = || format!("the raw points of {}", self.name_of(s.id));
            budget.charge(read.points.len() as u128, name)?;
            all.push(read.points);
        }
        Ok(Some(all))
    }
}
