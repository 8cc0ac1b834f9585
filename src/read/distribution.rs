//! Reads of distribution series: per point, the merged bucket and the merged histogram of
//! the tier's buckets inside it, and the quantiles taken from them. Histograms merge exactly
//! (counts add), so a point of any width, in any tier, answers a quantile within the
//! relative error its histogram's scale states.

mod partial;

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::budget::ReadBudget;
use super::query::{HeldFiles, PointGrid};
use super::reader::{Member, Reader};
use super::tier_choice::TierChoice;
use crate::bucket::{Bucket, ExactF64};
use crate::error::{Error, Result};
use crate::histogram::{lower_bound, upper_bound, Accumulator, Histogram, EXPLICIT_BUCKETS_TAG};
use crate::registry::{KeyView, Selector, SeriesId};
use crate::storage::histogram_cell::CellBuffer;
use crate::storage::HeldPeriod;
use crate::time::{Span, Timestamp};

/// For the render API's timer paths, which a cluster's owners send.
#[cfg(feature = "server")]
pub(crate) use partial::exact_points;
pub use partial::{DistributionPlan, PartialDistribution};

/// One point of a distribution read.
#[derive(Clone, Debug, PartialEq)]
pub struct DistributionPoint {
    /// Start of the point.
    pub ts: Timestamp,
    /// Count, total, min and max of every sample in it.
    pub bucket: Bucket,
    /// The merged histogram of its samples; `None` when none of its buckets holds one.
    pub histogram: Option<Histogram>,
}

impl DistributionPoint {
    /// True when the histogram holds every sample the bucket counts: only then is a
    /// quantile answered. A bucket without one holds samples written before the series
    /// became a distribution, or in a file an older build compacted.
    pub fn is_complete(&self) -> bool {
        self.bucket.count > 0
            && self.histogram.as_ref().map(Histogram::count) == Some(self.bucket.count)
    }

    /// The `q` quantile of the point's samples (nearest rank, within
    /// [`DistributionPoint::relative_error`] of the sample it stands for, and within the
    /// exact min and max); `None` for an empty or incomplete point or a `q` outside `[0, 1]`.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if !self.is_complete() {
            return None;
        }
        self.histogram
            .as_ref()?
            .quantile(q, Some((self.bucket.min, self.bucket.max)))
    }

    /// The largest relative error of the point's quantiles: its histogram's scale's.
    pub fn relative_error(&self) -> Option<f64> {
        self.histogram.as_ref().map(Histogram::relative_error)
    }

    /// Folds another point of the same interval in: buckets and histograms merge exactly
    /// (render's consolidation of a timer path's points, and the merge of partial reads).
    pub(crate) fn merge(&mut self, other: &DistributionPoint) {
        self.bucket.merge(&other.bucket);
        if let Some(histogram) = &other.histogram {
            match &mut self.histogram {
                Some(merged) => merged.merge(histogram),
                None => self.histogram = Some(histogram.clone()),
            }
        }
    }

    /// The sample of `rank` (1-based) in ascending order: exact for the first and the last
    /// (the bucket's min and max), else within [`DistributionPoint::relative_error`] of it;
    /// `None` for a rank outside `1..=count`, or between them in an incomplete point.
    pub fn value_at_rank(&self, rank: u64) -> Option<f64> {
        let (count, min, max) = (self.bucket.count, self.bucket.min, self.bucket.max);
        match rank {
            _ if rank == 0 || rank > count => None,
            1 => Some(min),
            _ if rank == count => Some(max),
            _ if !self.is_complete() => None,
            _ => self
                .histogram
                .as_ref()?
                .value_at_rank(rank, Some((min, max))),
        }
    }

    /// The sum of the samples of ranks `first..=last` (1-based, ascending): exact when they
    /// are all of them (the bucket's total), the first and the last sample exact, every other
    /// one its bucket's geometric middle, so within `relative_error` × the sum of their
    /// magnitudes; `None` for ranks outside `1..=count`, or short of all of them in an
    /// incomplete point.
    pub fn sum_of_ranks(&self, first: u64, last: u64) -> Option<f64> {
        let count = self.bucket.count;
        if first == 0 || first > last || last > count {
            return None;
        }
        if (first, last) == (1, count) {
            return Some(self.bucket.total);
        }
        if !self.is_complete() {
            return None;
        }
        let extremes = Some((self.bucket.min, self.bucket.max));
        let mut sum = 0.0;
        let (mut inner_first, mut inner_last) = (first, last);
        if first == 1 {
            sum += self.bucket.min;
            inner_first = 2;
        }
        if last == count {
            sum += self.bucket.max;
            inner_last = count - 1;
        }
        if inner_first <= inner_last {
            sum += (self.histogram.as_ref()?).sum_of_ranks((inner_first, inner_last), extremes)?;
        }
        Some(sum)
    }
}

/// One point's sum while a read folds into it: the merged bucket and the histograms added
/// into dense counts.
#[derive(Clone, Debug)]
struct PointSum {
    bucket: Bucket,
    histograms: Accumulator,
    /// Set when a histogram could not be added whole (a damaged cell): the point then
    /// answers no quantile.
    damaged: bool,
}

impl Default for PointSum {
    fn default() -> PointSum {
        PointSum {
            bucket: Bucket::EMPTY,
            histograms: Accumulator::default(),
            damaged: false,
        }
    }
}

impl PointSum {
    /// Back to empty, keeping the histograms' room.
    fn clear(&mut self) {
        self.bucket = Bucket::EMPTY;
        self.histograms.clear();
        self.damaged = false;
    }

    fn merge(&mut self, other: &PointSum) {
        self.bucket.merge(&other.bucket);
        self.histograms.merge(&other.histograms);
        self.damaged |= other.damaged;
    }

    /// Adds a hot bucket and its histogram's encoding.
    #[inline]
    fn add_encoded(&mut self, bucket: &Bucket, histogram: Option<&[u8]>) {
        if bucket.count > 0 {
            self.bucket.merge(bucket);
            if let Some(body) = histogram {
                self.damaged |= self.histograms.add_encoded(body).is_err();
            }
        }
    }

    /// Adds a compacted bucket and its histogram.
    fn add(&mut self, bucket: &Bucket, histogram: Option<&Histogram>) {
        if bucket.count > 0 {
            self.bucket.merge(bucket);
            if let Some(histogram) = histogram {
                self.histograms.add(histogram);
            }
        }
    }

    /// The point starting at `ts`: the sum's histogram made sparse (the dense counts go
    /// when the sum is dropped).
    fn finish(&self, ts: Timestamp) -> DistributionPoint {
        DistributionPoint {
            ts,
            bucket: self.bucket,
            histogram: (!self.histograms.is_empty() && !self.damaged)
                .then(|| self.histograms.to_histogram()),
        }
    }
}

/// Buckets a tile of points covers (at most; at least one point): as many as a block of
/// the file's layout holds (16 buckets of a slot side by side, then the next slot's), so
/// a tile read for every member of a chunk walks the file in order, and the tile's
/// accumulators stay in cache while every member adds to them.
const TILE_BUCKETS: i64 = 16;

/// The points of the buckets of `tier` on `grid`, from `window` on, of every member (sorted
/// by chunk and slot), one row per group: `groups` rows of `grid.points`, one after another.
/// Buckets merge, histograms merge into dense counts, made sparse once a point is whole.
///
/// The work is split by points, not by series: tile after tile of [`TILE_BUCKETS`], each
/// folding every member and finishing its points, the tiles spread over rayon's pool. Each
/// point is then folded by one worker only and no histogram is merged twice; folding
/// series by series instead spread one point's sum over every worker, merged at the end,
/// and walked a whole day of accumulators (megabytes) per series. Where a period is
/// compacted (a slot decodes whole per read) or the grid has one tile, the members are
/// spread instead, each read whole, and the workers' sums merged.
fn fold_members(
    reader: &Reader<'_>,
    tier: usize,
    grid: &PointGrid,
    window: Timestamp,
    members: &[Member],
    groups: usize,
) -> Result<Vec<DistributionPoint>> {
    let points = grid.points;
    let runs = members
        .chunk_by(|a, b| a.chunk == b.chunk)
        .map(|run| Ok((run, reader.files_for(tier, grid, run[0].chunk, window)?)))
        .collect::<Result<Vec<(&[Member], HeldFiles)>>>()?;
    let compacted = runs.iter().any(|(_, held)| held.has_compacted());
    let tile = if compacted {
        points.max(1)
    } else {
        (TILE_BUCKETS / grid.buckets_per_point()).max(1) as usize
    };
    let tiles: Vec<std::ops::Range<usize>> = (0..points)
        .step_by(tile)
        .map(|first| first..(first + tile).min(points))
        .collect();
    if tiles.len() > 1 {
        let runs: Vec<(&[Member], &HeldFiles)> =
            runs.iter().map(|(run, held)| (*run, held)).collect();
        // Each worker keeps its sums from tile to tile, cleared: their dense lists are
        // allocated once, not per point.
        let mut folded = tiles
            .par_iter()
            .map_init(
                || (Box::<CellBuffer>::default(), Vec::new()),
                |(buffer, sums), tile| {
                    let n = tile.len();
                    sums.iter_mut().for_each(PointSum::clear);
                    sums.resize_with(groups * n, PointSum::default);
                    fold_tile(grid, tile, &runs, sums, buffer)?;
                    Ok((sums.iter().enumerate())
                        .map(|(k, sum)| sum.finish(grid.start_of(tile.start + k % n)))
                        .collect::<Vec<_>>())
                },
            )
            .collect::<Result<Vec<_>>>()?;
        // Each tile's points are group after group: the first `n` left are the next group's.
        let mut rows = Vec::with_capacity(groups * points);
        for _ in 0..groups {
            for (tile, folded) in tiles.iter().zip(&mut folded) {
                rows.extend(folded.drain(..tile.len()));
            }
        }
        return Ok(rows);
    }
    let empty = || vec![PointSum::default(); groups * points];
    let Some(tile) = tiles.first() else {
        return Ok(Vec::new());
    };
    let each: Vec<(&[Member], &HeldFiles)> = runs
        .iter()
        .flat_map(|(run, held)| run.chunks(1).map(move |member| (member, held)))
        .collect();
    let fold = |(mut sums, mut buffer): (Vec<PointSum>, Box<CellBuffer>),
                &(member, held): &(&[Member], &HeldFiles)| {
        fold_tile(grid, tile, &[(member, held)], &mut sums, &mut buffer)?;
        Ok((sums, buffer))
    };
    let sums = if each.len() <= 1 {
        (each.iter().try_fold((empty(), Box::default()), fold)).map(|(sums, _)| sums)?
    } else {
        each.par_iter()
            .try_fold(|| (empty(), Box::default()), fold)
            .map(|folded| folded.map(|(sums, _)| sums))
            .try_reduce_with(|mut a, b| {
                a.iter_mut().zip(&b).for_each(|(a, b)| a.merge(b));
                Ok(a)
            })
            .unwrap_or_else(|| Ok(empty()))?
    };
    Ok((sums.par_iter().enumerate())
        .map(|(k, sum)| sum.finish(grid.start_of(k % points)))
        .collect())
}

/// Folds the points `tile` of every member of `runs` (each run one chunk's members, with
/// its files) into `rows`: `groups` rows of `tile.len()` points, one after another.
fn fold_tile(
    grid: &PointGrid,
    tile: &std::ops::Range<usize>,
    runs: &[(&[Member], &HeldFiles)],
    rows: &mut [PointSum],
    buffer: &mut CellBuffer,
) -> Result<()> {
    let n = tile.len();
    let span = grid.boundary(tile.start)..grid.boundary(tile.end);
    let per_point = grid.buckets_per_point();
    for (run, held) in runs {
        for (i, member) in run.iter().enumerate() {
            // The member two ahead's cells start loading while this one's are added.
            if let Some(ahead) = run.get(i + 2) {
                for (stored, buckets, _) in grid.periods_in(held, span.clone()) {
                    if let HeldPeriod::Hot(file) = stored {
                        buckets.for_each(|b| file.prefetch_distribution(b, ahead.slot));
                    }
                }
            }
            let row = &mut rows[member.group * n..][..n];
            for (stored, buckets, global) in grid.periods_in(held, span.clone()) {
                let first = buckets.start;
                let point =
                    |b: u32| ((global + i64::from(b - first)) / per_point) as usize - tile.start;
                match stored {
                    HeldPeriod::Hot(file) => {
                        // The point of each bucket counted on, not divided for: a division
                        // a bucket showed in `perf` (about 7% of this function's samples).
                        let mut at = point(first);
                        let mut within = (global % per_point) as usize;
                        for b in buckets {
                            let sum = &mut row[at];
                            file.load_distribution_into(b, member.slot, buffer, |bucket, body| {
                                sum.add_encoded(&bucket, body)
                            });
                            within += 1;
                            if within == per_point as usize {
                                (at, within) = (at + 1, 0);
                            }
                        }
                    }
                    HeldPeriod::Compacted(file) => {
                        let loaded = file.read_slot_distributions(member.slot, buckets.clone())?;
                        for (b, (bucket, histogram)) in buckets.zip(&loaded) {
                            row[point(b)].add(bucket, histogram.as_ref());
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// What a distribution read shows of each point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shown {
    /// A quantile, 0 to 1 (`p99` is 0.99).
    Quantile(f64),
    /// The merged histogram itself (`hist`).
    Histogram,
}

impl std::str::FromStr for Shown {
    type Err = Error;

    /// `pNN` with NN a percentage from 0 to 100 (`p50`, `p99`, `p99.9`), or `hist`.
    fn from_str(s: &str) -> Result<Shown> {
        if s == "hist" {
            return Ok(Shown::Histogram);
        }
        s.strip_prefix('p')
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
            .and_then(|n| n.parse::<f64>().ok())
            .filter(|p| (0.0..=100.0).contains(p))
            .map(|p| Shown::Quantile(p / 100.0))
            .ok_or_else(|| {
                Error::InvalidQuery(format!(
                    "unknown distribution display {s:?} (expected pNN, NN from 0 to 100, such as p50, p99 or p99.9, or hist)"
                ))
            })
    }
}

/// On the wire (a cluster's partial reads): the quantile as an exact float, `null` for
/// `hist`.
impl serde::Serialize for Shown {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        let quantile = match *self {
            Shown::Quantile(q) => Some(ExactF64(q)),
            Shown::Histogram => None,
        };
        serde::Serialize::serialize(&quantile, serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Shown {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Shown, D::Error> {
        let quantile: Option<ExactF64> = serde::Deserialize::deserialize(deserializer)?;
        Ok(quantile.map_or(Shown::Histogram, |q| Shown::Quantile(q.0)))
    }
}

impl Shown {
    /// True for the names this type parses: what tells a distribution read from a plain one.
    pub fn is_distribution_display(text: &str) -> bool {
        text == "hist" || text.starts_with('p') && text != "per_sec"
    }
}

/// Which series a distribution read covers.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum DistributionTarget {
    /// One series, by its key.
    Series(String),
    /// Every distribution series a selector picks, merged into one group per distinct value
    /// of the `group_by` tags.
    Select {
        /// Which series take part.
        selector: Selector,
        /// Tag keys whose values split them into groups; empty for one group.
        group_by: Vec<String>,
    },
}

/// A read of distribution series: per point, a quantile of (or the histogram of) every
/// sample of the series it covers, their histograms merged exactly.
#[derive(Clone, Debug, PartialEq)]
pub struct DistributionQuery {
    /// The series.
    pub target: DistributionTarget,
    /// What each point shows.
    pub shown: Shown,
    /// The tier to read.
    pub tier: TierChoice,
    /// First second of the range (inclusive).
    pub from: Timestamp,
    /// End of the range (exclusive).
    pub to: Timestamp,
    /// Width of one point; `None` for the tier's resolution. Ignored by a whole-range read.
    pub step: Option<Span>,
    /// Point budget for `auto`; `None` for the configured `max_points`.
    pub max_points: Option<u32>,
    /// Fold the whole range into one point per group.
    pub whole_range: bool,
}

/// The answer of a [`DistributionQuery`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DistributionResult {
    /// The series read, in canonical form, for a single series' read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<String>,
    /// The tier read.
    pub tier: String,
    /// What the points show: `p99`, `hist`, ...
    pub display: String,
    /// Width of each point in seconds.
    pub step: i64,
    /// The largest relative error of the quantiles answered (each point's histogram states
    /// its own: `2^(2^-scale / 2) - 1`); absent when none was answered. It bounds values
    /// that were recorded or sent in exponential buckets, not those of `explicit_buckets`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative_error: Option<f64>,
    /// Series read whose values were placed from explicit buckets (OTLP explicit-bucket
    /// histograms, tagged [`EXPLICIT_BUCKETS_TAG`]): a quantile of them is within the width
    /// of the explicit bucket holding it (half of it between two bounds), beyond
    /// `relative_error`. Absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub explicit_buckets: usize,
    /// One line per group (one for a single series).
    pub groups: Vec<DistributionGroup>,
    /// The start of the first point still filling at the reader's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial_from: Option<Timestamp>,
    /// Set when selected series are not distributions, or points hold samples without a
    /// histogram (written before the series became a distribution): those points are
    /// `null`, never a guess.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl DistributionResult {
    /// The quantile points as CSV: `ts,value` rows for one series, `group,ts,value` for an
    /// aggregate (as [`crate::read::aggregate::AggregateResult::csv`] writes them); `None`
    /// for `hist`, whose groups hold histograms, not points, and have no CSV columns.
    pub fn csv(&self) -> Option<String> {
        let mut groups = Vec::with_capacity(self.groups.len());
        for group in &self.groups {
            groups.push((&group.tags, group.points.as_deref()?));
        }
        if self.series.is_some() {
            use std::fmt::Write;
            let mut out = String::from("ts,value\n");
            for (ts, value) in groups.iter().flat_map(|(_, points)| points.iter()) {
                let value = value.map(super::value_text::csv_value).unwrap_or_default();
                let _ = writeln!(out, "{ts},{value}");
            }
            return Some(out);
        }
        Some(super::value_text::groups_csv(groups.into_iter()))
    }
}

/// A single series' [`DistributionResult`] shaped as the query API answers a series: its
/// one group's points (or histograms) beside the series, as a bucket display's answer has
/// them.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SeriesDistribution {
    /// The series, in canonical form.
    pub series: String,
    /// The tier read.
    pub tier: String,
    /// What the points show.
    pub display: String,
    /// Width of each point in seconds.
    pub step: i64,
    /// As [`DistributionResult::relative_error`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative_error: Option<f64>,
    /// As [`DistributionResult::explicit_buckets`].
    #[serde(skip_serializing_if = "is_zero")]
    pub explicit_buckets: usize,
    /// As [`DistributionGroup::points`].
    #[serde(skip_serializing_if = "Option::is_none", with = "quantile_points")]
    pub points: Option<Vec<(Timestamp, Option<f64>)>>,
    /// As [`DistributionGroup::histograms`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histograms: Option<Vec<(Timestamp, Option<HistogramShown>)>>,
    /// As [`DistributionResult::partial_from`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial_from: Option<Timestamp>,
    /// As [`DistributionResult::note`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl DistributionResult {
    /// The answer of a single series' read as a [`SeriesDistribution`]; the answer itself,
    /// back, for a read of a selector.
    ///
    /// # Errors
    /// `self` (boxed, it is large) when it is not a single series' answer.
    pub fn into_series(self) -> std::result::Result<SeriesDistribution, Box<DistributionResult>> {
        let Some(series) = self.series.clone() else {
            return Err(Box::new(self));
        };
        let group = self.groups.into_iter().next();
        let (points, histograms) = group.map_or((None, None), |g| (g.points, g.histograms));
        Ok(SeriesDistribution {
            series,
            tier: self.tier,
            display: self.display,
            step: self.step,
            relative_error: self.relative_error,
            explicit_buckets: self.explicit_buckets,
            points,
            histograms,
            partial_from: self.partial_from,
            note: self.note,
        })
    }
}

/// One group of a [`DistributionResult`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DistributionGroup {
    /// The group's value of each `group_by` tag; `None` for series without it.
    pub tags: BTreeMap<String, Option<String>>,
    /// Distribution series in the group.
    pub series: usize,
    /// `(start, quantile)` for a quantile display; `None` where the point is empty or
    /// incomplete.
    #[serde(skip_serializing_if = "Option::is_none", with = "quantile_points")]
    pub points: Option<Vec<(Timestamp, Option<f64>)>>,
    /// `(start, histogram)` for `hist`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histograms: Option<Vec<(Timestamp, Option<HistogramShown>)>>,
}

/// Quantile points in JSON as [`super::value_text::points`] writes values.
mod quantile_points {
    type Points = Option<Vec<(crate::time::Timestamp, Option<f64>)>>;

    pub(super) fn serialize<S: serde::Serializer>(
        points: &Points,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match points {
            Some(points) => super::super::value_text::points::serialize(points, s),
            None => s.serialize_none(),
        }
    }
}

/// A point's merged histogram as the HTTP API shows it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HistogramShown {
    /// Samples in the point.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// The smallest and largest sample, exact.
    pub min: f64,
    /// See `min`.
    pub max: f64,
    /// The scale: bucket `i` holds `(base^(i-1), base^i]` with `base = 2^(2^-scale)`.
    pub scale: i8,
    /// The largest relative error of a quantile taken from it.
    pub relative_error: f64,
    /// Samples whose magnitude is at most `zero_threshold`.
    pub zero_count: u64,
    /// See `zero_count`.
    pub zero_threshold: f64,
    /// The populated buckets, ascending: `[lower, upper, count]`, negative values first
    /// (their bounds negative), then positive ones.
    pub buckets: Vec<(f64, f64, u64)>,
}

impl HistogramShown {
    fn of(point: &DistributionPoint) -> Option<HistogramShown> {
        if !point.is_complete() {
            return None;
        }
        let h = point.histogram.as_ref()?;
        let scale = h.scale();
        let mut buckets: Vec<(f64, f64, u64)> = h
            .negative()
            .iter()
            .rev()
            .map(|&(i, c)| (-upper_bound(i, scale), -lower_bound(i, scale), c))
            .collect();
        buckets.extend(
            h.positive()
                .iter()
                .map(|&(i, c)| (lower_bound(i, scale), upper_bound(i, scale), c)),
        );
        Some(HistogramShown {
            count: point.bucket.count,
            sum: point.bucket.total,
            min: point.bucket.min,
            max: point.bucket.max,
            scale,
            relative_error: h.relative_error(),
            zero_count: h.zero_count(),
            zero_threshold: h.zero_threshold(),
            buckets,
        })
    }
}

/// A series read and its values of the `group_by` tags.
type Matched = (SeriesId, Vec<Option<String>>);

/// For serde: a count of none is left out of the answer.
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// True when the series `key` holds values placed from explicit buckets: it carries
/// [`EXPLICIT_BUCKETS_TAG`].
pub(crate) fn placed_from_explicit_buckets(key: KeyView<'_>) -> bool {
    let (tag, value) = EXPLICIT_BUCKETS_TAG;
    key.tag(tag).is_some_and(|v| v == value)
}

/// The distribution reads.
impl Reader<'_> {
    /// The points of distribution series `id` in tier `tier`: per `step`-aligned interval
    /// whose start lies in `[from, to)`, the merged bucket and histogram, from which
    /// quantiles are taken ([`DistributionPoint::quantile`]).
    ///
    /// # Errors
    /// As [`Reader::read_buckets`], and a compacted file that cannot be read.
    pub fn distribution(
        &self,
        id: SeriesId,
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        step: Span,
    ) -> Result<Vec<DistributionPoint>> {
        let spec = &self.config().tiers[tier];
        let grid = PointGrid::new(spec, from, to, step)?;
        self.distribution_on(id, tier, &grid, spec.window_start(self.now()))
    }

    /// [`Reader::distribution`] on `grid` (a render's), seeing the tier from `window` on
    /// (the first second its window holds at the clock of whoever chose the grid).
    ///
    /// # Errors
    /// A compacted file that cannot be read.
    pub(crate) fn distribution_on(
        &self,
        id: SeriesId,
        tier: usize,
        grid: &PointGrid,
        window: Timestamp,
    ) -> Result<Vec<DistributionPoint>> {
        fold_members(self, tier, grid, window, &[self.member(id, 0)?], 1)
    }

    /// Answers a distribution read: quantiles (or histograms) per point, of one series or of
    /// the series a selector picks merged per group, within `budget`.
    ///
    /// # Errors
    /// [`Error::UnknownSeries`] for a single series not registered, [`Error::UnknownTier`],
    /// [`Error::InvalidQuery`] as for [`Reader::aggregate`], and a read over `budget`.
    ///
    /// The plan, its part over this engine and the finish: the steps a cluster read takes
    /// across partitions (see [`PartialDistribution`]).
    pub fn distribution_query(
        &self,
        query: &DistributionQuery,
        budget: &ReadBudget,
    ) -> Result<DistributionResult> {
        if self.spans_sets() {
            let sets = match &query.target {
                DistributionTarget::Series(key) => {
                    let id = (self.registry().lookup(key)?)
                        .ok_or_else(|| Error::UnknownSeries(key.clone()))?;
                    self.sets_of([id])
                }
                DistributionTarget::Select { selector, .. } => {
                    self.sets_selected(selector, budget)?
                }
            };
            return match sets.as_slice() {
                [] => self.for_set(0).distribution_query(query, budget),
                &[set] => self.for_set(set).distribution_query(query, budget),
                sets => self.distribution_across_sets(query, sets, budget),
            };
        }
        let plan = DistributionPlan::new(self.config(), self.now(), query)?;
        self.distribution_partial(&plan, budget)?.finish()
    }
}
