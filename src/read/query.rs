//! Reads: one series at a zoom level (a named tier or `auto`), over a range, in one of the MMS
//! displays, with an optional coarser step that merges buckets exactly. Reads take no lock on
//! bucket memory and never see a torn bucket (see [`crate::storage::mapped_cell::BucketCell`]).

use std::str::FromStr;

use crate::bucket::Bucket;
use crate::config::{TierSpec, TiersConfig};
use crate::error::Error;
use crate::error::Result;
use crate::read::budget::ReadBudget;
use crate::read::reader::Reader;
use crate::read::tier_choice::TierChoice;
use crate::registry::SeriesId;
pub(crate) use crate::storage::period_file::Latest;
use crate::storage::HeldPeriod;
use crate::time::{Span, Timestamp};

#[cfg(test)]
mod tests;

/// Most points one query may return; protects the process from a typo'd range.
pub(crate) const MAX_QUERY_POINTS: u64 = 1_000_000;

/// How a bucket is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Display {
    /// Mean of the samples: total / count.
    Avg,
    /// The MMS "avg/sec": total / bucket seconds. For counters stored as increases, a rate.
    PerSec,
    /// Sum of the samples.
    Total,
    /// Largest sample.
    Max,
    /// Smallest sample.
    Min,
    /// Number of samples.
    Count,
}

impl Display {
    /// Every display, in documentation order.
    pub const ALL: [Display; 6] = [
        Display::Avg,
        Display::PerSec,
        Display::Total,
        Display::Max,
        Display::Min,
        Display::Count,
    ];

    /// The value shown for `bucket`, `None` when the bucket saw no sample (empty is not zero).
    #[inline]
    pub fn value(self, bucket: &Bucket, seconds: u64) -> Option<f64> {
        if bucket.count == 0 {
            return None;
        }
        Some(match self {
            Display::Avg => bucket.total / bucket.count as f64,
            Display::PerSec => bucket.total / seconds as f64,
            Display::Total => bucket.total,
            Display::Max => bucket.max,
            Display::Min => bucket.min,
            Display::Count => bucket.count as f64,
        })
    }

    /// The name used in APIs: `avg`, `per_sec`, `total`, `max`, `min`, `count`.
    pub fn as_str(self) -> &'static str {
        match self {
            Display::Avg => "avg",
            Display::PerSec => "per_sec",
            Display::Total => "total",
            Display::Max => "max",
            Display::Min => "min",
            Display::Count => "count",
        }
    }
}

impl FromStr for Display {
    type Err = Error;

    fn from_str(s: &str) -> Result<Display> {
        Display::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| {
                Error::InvalidQuery(format!(
                    "unknown display {s:?} (expected avg, per_sec, total, max, min or count)"
                ))
            })
    }
}

/// A read of one series.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Query {
    /// The series in text form, `name` or `name{k=v,...}`.
    pub series: String,
    /// The tier to read.
    pub tier: TierChoice,
    /// First second of the range (inclusive).
    pub from: Timestamp,
    /// End of the range (exclusive).
    pub to: Timestamp,
    /// How buckets are shown.
    pub display: Display,
    /// Width of one point: a multiple of the tier's resolution; `None` for the resolution.
    pub step: Option<Span>,
    /// Point budget for `auto`; `None` for the configured `max_points`.
    pub max_points: Option<u32>,
}

impl Query {
    /// Averages of `series` over `[from, to)` from the `auto` tier.
    pub fn new(series: impl Into<String>, from: Timestamp, to: Timestamp) -> Query {
        Query {
            series: series.into(),
            tier: TierChoice::Auto,
            from,
            to,
            display: Display::Avg,
            step: None,
            max_points: None,
        }
    }

    /// Reads the tier named `name`.
    pub fn tier(mut self, name: &str) -> Query {
        self.tier = TierChoice::from(name);
        self
    }

    /// Shows buckets as `display`.
    pub fn display(mut self, display: Display) -> Query {
        self.display = display;
        self
    }

    /// Merges buckets into points `step` wide.
    pub fn step(mut self, step: Span) -> Query {
        self.step = Some(step);
        self
    }

    /// Sets the point budget for `auto`.
    pub fn max_points(mut self, max_points: u32) -> Query {
        self.max_points = Some(max_points);
        self
    }
}

/// A query's answer: one point per bucket (or step) whose start lies in `[from, to)`,
/// stamped with that start in unix seconds.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueryResult {
    /// The series in canonical text form.
    pub series: String,
    /// The tier read.
    pub tier: String,
    /// How values are shown.
    pub display: Display,
    /// Width of each point. Not in the JSON answer; a cluster node that forwards a query
    /// sends it beside the answer (src/cluster/fanout.rs).
    #[serde(skip, default = "no_step")]
    pub step: Span,
    /// `(start, value)`, value `None` for a bucket without samples. From the raw tier: the
    /// exact points in `[from, to)`, each `(ts, Some(value))`. In JSON, a value that is not
    /// finite (an overflowed total) is `"+Inf"`, `"-Inf"` or `"NaN"` ([`super::value_text`]).
    #[serde(with = "super::value_text::points")]
    pub points: Vec<(Timestamp, Option<f64>)>,
    /// Raw tier only: the last point before `from`, outside the range, so a chart draws its
    /// line to the left edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<(Timestamp, f64)>,
    /// Raw tier only: the first point at or after `to`, outside the range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<(Timestamp, f64)>,
    /// The part of the range before the tier's window, which the tier no longer holds (its
    /// periods were dropped past the retention): its points are empty whatever was written.
    /// Absent when the tier holds the whole range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_retained: Option<NotRetained>,
    /// The start of the first point whose end is still to come at the clock's now: its
    /// bucket is still filling (it holds the samples so far, so a total, count or per-second
    /// rate reads low until it ends), and any later point lies in the future. Absent when
    /// every point has ended, and on the raw tier, whose points are exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_from: Option<Timestamp>,
    /// What a person should know to read the values right: set when `per_sec` is asked of
    /// a gauge, whose per-second figure is a rate only if each sample was an increase (a
    /// counter sent over Graphite is a gauge unless a rule or the write says otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The [`QueryResult::note`] of `per_sec` read of the gauge `series`.
pub(crate) fn per_sec_of_gauge(series: &str) -> String {
    format!(
        "{series} is a gauge: per_sec is the sum of its samples per second of bucket, a rate \
         only if each sample is an increase; if it is a counter (a running total), name it in \
         the [counters] rules of tiers.toml or write it with kind=counter, and per_sec is its rate"
    )
}

/// A span `[from, to)` of a query's range that the tier read no longer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NotRetained {
    /// First second not held (the query's `from`).
    pub from: Timestamp,
    /// End of it: the start of the tier's window, or the query's `to` when that is earlier.
    pub to: Timestamp,
}

impl NotRetained {
    /// The part of `[from, to)` before `window` (the first second a tier holds), if any.
    pub fn of(from: Timestamp, to: Timestamp, window: Timestamp) -> Option<NotRetained> {
        (from < window && from < to).then(|| NotRetained {
            from,
            to: window.min(to),
        })
    }
}

/// The start of the first of `points` points, `step` seconds wide from `first`, that ends
/// after `now` ([`QueryResult::partial_from`]); `None` when all have ended.
pub(crate) fn still_filling(
    first: Timestamp,
    step: i64,
    points: usize,
    now: Timestamp,
) -> Option<Timestamp> {
    if points == 0 || step <= 0 {
        return None;
    }
    // Points ending at or before `now`: those that start at or before `now - step`.
    let ended = if now < first.saturating_add(step) {
        0
    } else {
        (i128::from(now) - i128::from(first) - i128::from(step)) / i128::from(step) + 1
    };
    (ended < points as i128).then(|| (i128::from(first) + ended * i128::from(step)) as Timestamp)
}

/// The step of a [`QueryResult`] read from JSON, which does not carry it.
fn no_step() -> Span {
    Span::from_secs(0)
}

impl QueryResult {
    /// `ts,value` rows under a `ts,value` heading, an empty value for an empty bucket: the
    /// HTTP API's `format=csv` and the command line's `--format csv`. A raw read's
    /// neighbours outside the range come first and last, with `outside` set to `before` or
    /// `after` in a third column (present only when the answer has such a neighbour).
    pub fn csv(&self) -> String {
        use std::fmt::Write;
        let outside = self.before.is_some() || self.after.is_some();
        let mut out = String::from(if outside {
            "ts,value,outside\n"
        } else {
            "ts,value\n"
        });
        if let Some((ts, v)) = self.before {
            let _ = writeln!(out, "{ts},{v},before");
        }
        let tail = if outside { "," } else { "" };
        for (ts, value) in &self.points {
            let _ = match value {
                Some(v) => writeln!(out, "{ts},{}{tail}", super::value_text::csv_value(*v)),
                None => writeln!(out, "{ts},{tail}"),
            };
        }
        if let Some((ts, v)) = self.after {
            let _ = writeln!(out, "{ts},{v},after");
        }
        out
    }
}

/// The one-series reads.
impl Reader<'_> {
    /// Answers `query`.
    ///
    /// # Errors
    /// [`crate::error::Error::UnknownSeries`], [`crate::error::Error::UnknownTier`],
    /// [`crate::error::Error::InvalidSeries`], or [`crate::error::Error::InvalidQuery`] for an
    /// empty or oversized range or a step that is not a multiple of the tier's resolution.
    pub fn query(&self, query: &Query) -> Result<QueryResult> {
        let registry = self.registry();
        let id = registry
            .lookup(&query.series)?
            .ok_or_else(|| Error::UnknownSeries(query.series.clone()))?;
        if matches!(&query.tier, TierChoice::Named(name) if self.config().is_raw(name)) {
            return query_raw(self, query, id);
        }
        let reader = self.for_series(id);
        let tier = reader.choose_tier(&query.tier, query.from, query.to, query.max_points)?;
        let spec = &reader.config().tiers[tier];
        let step = query.step.unwrap_or(spec.resolution);
        let window = reader.window_start(tier, self.now());
        let (first, buckets) =
            reader.merged_buckets(id, tier, query.from, query.to, step, window)?;
        let step_secs = step.secs() as i64;
        let series = registry
            .key(id)
            .map(|k| k.to_string())
            .unwrap_or_else(|| query.series.clone());
        Ok(QueryResult {
            series: series.clone(),
            tier: spec.name.clone(),
            display: query.display,
            step,
            points: buckets
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    (
                        first + i as i64 * step_secs,
                        query.display.value(b, step.secs()),
                    )
                })
                .collect(),
            before: None,
            after: None,
            not_retained: NotRetained::of(query.from, query.to, window),
            partial_from: still_filling(first, step_secs, buckets.len(), self.now()),
            note: (query.display == Display::PerSec
                && self.series_kind(id) == crate::counter::SeriesKind::Gauge)
                .then(|| per_sec_of_gauge(&series)),
        })
    }

    /// The merged buckets of series `id` in tier `tier`: one per `step`-aligned interval
    /// whose start lies in `[from, to)`, each folding the tier's buckets inside it. Buckets
    /// before the tier's window or in periods without a file are empty.
    ///
    /// # Errors
    /// [`crate::error::Error::InvalidQuery`] when `from >= to`, `step` is not a multiple of the
    /// tier's resolution, or the answer would exceed `MAX_QUERY_POINTS`.
    pub fn read_buckets(
        &self,
        id: SeriesId,
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        step: Span,
    ) -> Result<Vec<(Timestamp, Bucket)>> {
        let window = self.window_start(tier, self.now());
        let (first, buckets) = self.merged_buckets(id, tier, from, to, step, window)?;
        let step = step.secs() as i64;
        Ok(buckets
            .into_iter()
            .enumerate()
            .map(|(i, b)| (first + i as i64 * step, b))
            .collect())
    }

    /// [`Reader::read_buckets`] without the timestamps, seeing the tier from `window` on
    /// (the first second its window holds at the clock of whoever chose the read; nothing
    /// older is read): the first point's start and the merged buckets, one per step.
    pub(crate) fn merged_buckets(
        &self,
        id: SeriesId,
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        step: Span,
        window: Timestamp,
    ) -> Result<(Timestamp, Vec<Bucket>)> {
        let grid = PointGrid::new(&self.config().tiers[tier], from, to, step)?;
        let mut acc = vec![Bucket::EMPTY; grid.points];
        let (chunk, slot) = self.cells_of(id)?;
        let files = self.files_for(tier, &grid, chunk, window)?;
        let span = grid.first..grid.end;
        grid.fold_span(&files, slot, span, 0, &mut acc, Latest::Read)?;
        Ok((grid.first, acc))
    }

    /// The files of `chunk` in `tier` that hold part of `grid` from `window` (the first
    /// second of the tier's window the read sees) on, oldest first. Only periods that have a
    /// file: the walk is bounded by the files held, not by the width of the range.
    ///
    /// # Errors
    /// [`crate::error::Error::CorruptFile`] or [`crate::error::Error::Io`] naming a compacted
    /// file that cannot be read.
    pub(crate) fn files_for(
        &self,
        tier: usize,
        grid: &PointGrid,
        chunk: u32,
        window: Timestamp,
    ) -> Result<HeldFiles> {
        let read_from = grid.first.max(window);
        Ok(HeldFiles {
            read_from,
            files: self.period_files(tier, chunk, read_from..grid.end)?,
        })
    }
}

/// A read of the raw tier: the exact points in `[from, to)`, and the neighbours just
/// outside in `before` and `after`. Raw points have no step and no display but their
/// value.
fn query_raw(reader: &Reader<'_>, query: &Query, id: SeriesId) -> Result<QueryResult> {
    check_range(query.from, query.to)?;
    if let Some(step) = query.step {
        return Err(Error::InvalidQuery(format!(
            "step {step} does not apply to the raw tier, which returns exact points"
        )));
    }
    if query.display != Display::Avg {
        return Err(Error::InvalidQuery(format!(
            "display {} does not apply to the raw tier, which returns exact values",
            query.display.as_str()
        )));
    }
    let read = reader
        .raw_points(id, query.from, query.to, MAX_QUERY_POINTS as usize)
        .unwrap_or_default();
    if read.points.len() as u64 > MAX_QUERY_POINTS {
        return Err(Error::InvalidQuery(format!(
            "more than {MAX_QUERY_POINTS} raw points in the range (use a shorter range or a rollup tier)"
        )));
    }
    let registry = reader.registry();
    Ok(QueryResult {
        series: registry
            .key(id)
            .map(|k| k.to_string())
            .unwrap_or_else(|| query.series.clone()),
        tier: reader
            .config()
            .raw
            .as_ref()
            .map(|r| r.name.clone())
            .unwrap_or_default(),
        display: query.display,
        step: Span::from_secs(0),
        points: read.points.iter().map(|&(ts, v)| (ts, Some(v))).collect(),
        before: read.before,
        after: read.after,
        not_retained: (reader.config().raw.as_ref())
            .and_then(|raw| NotRetained::of(query.from, query.to, raw.window_start(reader.now()))),
        partial_from: None,
        note: None,
    })
}

/// The files one chunk holds for a read, each with its period start, and the first second
/// the tier's window lets the read see.
pub(crate) struct HeldFiles {
    read_from: Timestamp,
    files: Vec<(Timestamp, HeldPeriod)>,
}

impl HeldFiles {
    /// True when no file holds any of the read.
    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// True when some period of the read is compacted: its slots are decoded whole, so a
    /// read should take each slot's range in one piece rather than span by span.
    pub(crate) fn has_compacted(&self) -> bool {
        self.files
            .iter()
            .any(|(_, held)| matches!(held, HeldPeriod::Compacted(_)))
    }
}

/// The points a read covers in one tier: `points` intervals `step` seconds wide from
/// `first`, each folding the tier's buckets whose start lies inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PointGrid {
    /// Start of the first point; a multiple of the tier's resolution.
    pub first: Timestamp,
    /// Width of a point in seconds; a multiple of the tier's resolution.
    pub step: i64,
    /// Number of points.
    pub points: usize,
    /// End of the last point (clamped to `i64::MAX`).
    pub end: Timestamp,
    /// The tier's resolution, in seconds. (Each file's period is its own: see
    /// [`HeldPeriod::end`].)
    res: i64,
}

impl PointGrid {
    /// The points of a read of `spec` over `[from, to)`: `step` wide, or one over the whole
    /// range for `None`.
    ///
    /// # Errors
    /// As [`PointGrid::new`] and [`PointGrid::whole`].
    pub(crate) fn of(
        spec: &TierSpec,
        from: Timestamp,
        to: Timestamp,
        step: Option<Span>,
    ) -> Result<PointGrid> {
        match step {
            Some(step) => PointGrid::new(spec, from, to, step),
            None => PointGrid::whole(spec, from, to),
        }
    }

    /// Refuses to merge the parts of a read across tier sets (`tiers`, as the answer names
    /// them) whose points differ.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] naming the tiers.
    pub(crate) fn same_points(&self, other: &PointGrid, tiers: &str) -> Result<()> {
        if (self.first, self.step, self.points) == (other.first, other.step, other.points) {
            return Ok(());
        }
        Err(Error::InvalidQuery(format!(
            "the tiers {tiers} give points on different grids"
        )))
    }

    /// The index of this engine's tier `tier`, the tier a plan names, once it is checked to
    /// give the plan's grid (`planned`) of `[from, to)` on (`step` as [`PointGrid::of`] takes
    /// it): an engine whose tier of that name has another layout refuses rather than answer
    /// on another grid.
    ///
    /// # Errors
    /// [`Error::UnknownTier`] when `tiers` has no tier of that name; as [`PointGrid::of`],
    /// and [`Error::InvalidQuery`] when the grids differ.
    pub(crate) fn planned_tier(
        tiers: &TiersConfig,
        tier: &str,
        from: Timestamp,
        to: Timestamp,
        step: Option<Span>,
        planned: &PointGrid,
    ) -> Result<usize> {
        let index = tiers
            .tier_index(tier)
            .ok_or_else(|| Error::UnknownTier(tier.to_string()))?;
        let spec = &tiers.tiers[index];
        if PointGrid::of(spec, from, to, step)? == *planned {
            return Ok(index);
        }
        Err(Error::InvalidQuery(format!(
            "tier {} ({} buckets in periods of {}) gives another grid than the plan's",
            spec.name, spec.resolution, spec.period
        )))
    }

    /// One point per `step`-aligned interval whose start lies in `[from, to)`.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] when `from >= to`, `step` is not a multiple of the tier's
    /// resolution, or the answer would exceed `MAX_QUERY_POINTS`.
    pub(crate) fn new(
        spec: &TierSpec,
        from: Timestamp,
        to: Timestamp,
        step: Span,
    ) -> Result<PointGrid> {
        check_range(from, to)?;
        let res = spec.resolution.secs() as i64;
        if step.secs() == 0 || step.secs() as i64 % res != 0 {
            return Err(Error::InvalidQuery(format!(
                "step {step} is not a multiple of tier {}'s resolution {}",
                spec.name, spec.resolution
            )));
        }
        let step_secs = i128::from(step.secs());
        let (first, points) = PointGrid::span(from, to, step_secs);
        if points > i128::from(MAX_QUERY_POINTS) {
            return Err(Error::InvalidQuery(format!(
                "{points} points requested; at most {MAX_QUERY_POINTS} (use a coarser step or tier)"
            )));
        }
        // Every point starts before `to`, so `first` fits; the end may not and is clamped.
        let end = (first + points * step_secs).min(i128::from(i64::MAX)) as i64;
        Ok(PointGrid {
            first: first as Timestamp,
            step: step_secs as i64,
            points: points as usize,
            end,
            res,
        })
    }

    /// One point folding every bucket of the tier whose start lies in `[from, to)`; no
    /// point when no bucket starts there.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] when `from >= to`.
    pub(crate) fn whole(spec: &TierSpec, from: Timestamp, to: Timestamp) -> Result<PointGrid> {
        check_range(from, to)?;
        let res = i128::from(spec.resolution.secs());
        let (first, buckets) = PointGrid::span(from, to, res);
        let width = buckets * res;
        let last = first + width;
        Ok(PointGrid {
            first: first.min(i128::from(i64::MAX)) as Timestamp,
            step: width.clamp(res, i128::from(i64::MAX)) as i64,
            points: usize::from(width > 0),
            end: last.min(i128::from(i64::MAX)) as i64,
            res: res as i64,
        })
    }

    /// The `step`-aligned grid over `[from, to)`: the first `step`-aligned instant at or after
    /// `from`, and how many `step`-aligned points start in `[from, to)` (0 when none does).
    /// In i128, as clients may send any i64 for from, to and step; `step` must be positive.
    ///
    /// The one copy of this arithmetic: [`PointGrid::new`], [`PointGrid::whole`] and the
    /// render API's grid (`render/stored.rs`, which sizes it before it reads) call it.
    pub(crate) fn span(from: Timestamp, to: Timestamp, step: i128) -> (i128, i128) {
        let (from, to) = (i128::from(from), i128::from(to));
        let first = (from + step - 1).div_euclid(step) * step;
        let points = if first >= to {
            0
        } else {
            (to - first + step - 1) / step
        };
        (first, points)
    }

    /// Start of point `index`.
    pub(crate) fn start_of(&self, index: usize) -> Timestamp {
        self.first + index as i64 * self.step
    }

    /// Buckets per point.
    pub(crate) fn buckets_per_point(&self) -> i64 {
        self.step / self.res
    }

    /// The tier's resolution in seconds.
    pub(crate) fn resolution(&self) -> i64 {
        self.res
    }

    /// Charges to `budget`, before any is read, the buckets of the grid's resolution that
    /// `series` series hold in `held` (from the first second the tier's window lets the
    /// read see to the end of the read), in a refusal naming tier `tier`.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] when `budget` refuses the read.
    pub(crate) fn charge_held(
        &self,
        budget: &ReadBudget,
        held: (Timestamp, Timestamp),
        series: usize,
        tier: &str,
    ) -> Result<()> {
        let buckets = PointGrid::span(held.0, held.1, i128::from(self.resolution()))
            .1
            .max(0);
        budget.charge(buckets.unsigned_abs() * series as u128, || {
            format!("{series} series x {buckets} buckets of {tier}")
        })
    }

    /// Start of point `index`, or the grid's end for `index == points`.
    pub(crate) fn boundary(&self, index: usize) -> Timestamp {
        if index >= self.points {
            self.end
        } else {
            self.start_of(index)
        }
    }

    /// Starts loading the cache lines [`PointGrid::fold_span`] will read for `slot` over
    /// `span` (the latest samples' too when `latest` reads them), so a cross-series read
    /// overlaps one series' misses with the previous one's work.
    pub(crate) fn prefetch_span(
        &self,
        held: &HeldFiles,
        slot: u32,
        span: std::ops::Range<Timestamp>,
        latest: Latest,
    ) {
        for (period_start, period) in &held.files {
            let (period_start, HeldPeriod::Hot(file)) = (*period_start, period) else {
                continue;
            };
            let lo = held.read_from.max(period_start).max(span.start);
            let hi = span.end.min(period.end(period_start));
            let mut bucket = (lo - period_start) / self.res;
            let end = (hi - period_start) / self.res;
            // Two 32-byte cells per 64-byte line.
            while bucket < end {
                file.prefetch(bucket as u32, slot, latest);
                bucket += 2;
            }
        }
    }

    /// Folds the buckets of `slot` in `held` whose start lies in `span` into `out`, where
    /// `out[0]` is point `first_point`. `span` must be bucket-aligned and inside the points
    /// `out` covers. Reading a span of every series of a chunk before the next span walks
    /// the file in order, which is what makes cross-series reads stream. Hot buckets' latest
    /// samples are read as `latest` says.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] or [`Error::Io`] naming a compacted file that cannot be read.
    pub(crate) fn fold_span(
        &self,
        held: &HeldFiles,
        slot: u32,
        span: std::ops::Range<Timestamp>,
        first_point: usize,
        out: &mut [Bucket],
        latest: Latest,
    ) -> Result<()> {
        let mut decoded = Vec::new();
        for (stored, buckets, global) in self.periods_in(held, span) {
            match stored {
                // One loop for each choice, so `load_taking` is inlined with it fixed.
                HeldPeriod::Hot(file) => match latest {
                    Latest::Read => self.fold_buckets(global, first_point, buckets, out, |b| {
                        file.load_taking(b, slot, Latest::Read)
                    }),
                    Latest::Skip => self.fold_buckets(global, first_point, buckets, out, |b| {
                        file.load_taking(b, slot, Latest::Skip)
                    }),
                },
                HeldPeriod::Compacted(file) => {
                    decoded.clear();
                    decoded.resize(buckets.len(), Bucket::EMPTY);
                    file.read_slot_taking(slot, buckets.clone(), latest, &mut decoded)?;
                    let first = buckets.start;
                    self.fold_buckets(global, first_point, buckets, out, |b| {
                        decoded[(b - first) as usize]
                    });
                }
            }
        }
        Ok(())
    }

    /// The periods of `held` with buckets starting in `span` (bucket-aligned) that the read
    /// sees: each file, those buckets of it, and the grid's bucket index of the first (its
    /// point is that over [`PointGrid::buckets_per_point`]).
    pub(crate) fn periods_in<'a>(
        &'a self,
        held: &'a HeldFiles,
        span: std::ops::Range<Timestamp>,
    ) -> impl Iterator<Item = (&'a HeldPeriod, std::ops::Range<u32>, i64)> + 'a {
        held.files.iter().filter_map(move |(period_start, stored)| {
            let period_start = *period_start;
            let lo = held.read_from.max(period_start).max(span.start);
            let hi = span.end.min(stored.end(period_start));
            if lo >= hi {
                return None;
            }
            let global = (lo - self.first) / self.res;
            let buckets =
                ((lo - period_start) / self.res) as u32..((hi - period_start) / self.res) as u32;
            Some((stored, buckets, global))
        })
    }

    /// Folds `buckets` of one period (the first of which is the grid's bucket `global`) into
    /// `out`, where `out[0]` is point `first_point`, each as `load` gives it.
    #[inline(always)]
    fn fold_buckets(
        &self,
        global: i64,
        first_point: usize,
        buckets: std::ops::Range<u32>,
        out: &mut [Bucket],
        load: impl Fn(u32) -> Bucket,
    ) {
        let per_point = self.buckets_per_point();
        if per_point == 1 {
            let at = global as usize - first_point;
            for (slot_out, bucket) in out[at..at + buckets.len()].iter_mut().zip(buckets) {
                *slot_out = load(bucket);
            }
        } else {
            let mut point = (global / per_point) as usize - first_point;
            let mut within = global % per_point;
            for bucket in buckets {
                out[point].merge(&load(bucket));
                within += 1;
                if within == per_point {
                    within = 0;
                    point += 1;
                }
            }
        }
    }
}

fn check_range(from: Timestamp, to: Timestamp) -> Result<()> {
    if from >= to {
        return Err(Error::InvalidQuery(format!(
            "from ({}) must be before to ({})",
            crate::time::format_ts(from),
            crate::time::format_ts(to)
        )));
    }
    Ok(())
}
