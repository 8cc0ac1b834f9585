//! Reads: one series at a zoom level (a named tier or `auto`), over a range, in one of the MMS
//! displays, with an optional coarser step that merges buckets exactly. Reads take no lock on
//! bucket memory and never see a torn bucket (see [`crate::storage::bucket::BucketCell`]).

use std::str::FromStr;

use crate::engine::{window_start, Engine};
use crate::registry::SeriesId;
use crate::storage::bucket::Bucket;
use crate::time::{Span, Timestamp};
use crate::{Error, Result};

/// Most points one query may return; protects the process from a typo'd range.
pub const MAX_QUERY_POINTS: u64 = 1_000_000;

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

/// Which tier a query reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TierChoice {
    /// The finest tier whose window covers the range within the point budget.
    Auto,
    /// The tier of this name.
    Named(String),
}

impl From<&str> for TierChoice {
    /// `auto`, or the name of a tier (checked when the query runs).
    fn from(s: &str) -> TierChoice {
        if s == "auto" {
            TierChoice::Auto
        } else {
            TierChoice::Named(s.to_string())
        }
    }
}

/// A read of one series.
#[derive(Clone, Debug, PartialEq)]
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
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct QueryResult {
    /// The series in canonical text form.
    pub series: String,
    /// The tier read.
    pub tier: String,
    /// How values are shown.
    pub display: Display,
    /// Width of each point.
    #[serde(skip)]
    pub step: Span,
    /// `(start, value)`, value `None` for a bucket without samples.
    pub points: Vec<(Timestamp, Option<f64>)>,
}

impl Engine {
    /// Answers `query`.
    ///
    /// # Errors
    /// [`Error::UnknownSeries`], [`Error::UnknownTier`], [`Error::InvalidSeries`], or
    /// [`Error::InvalidQuery`] for an empty or oversized range or a step that is not a
    /// multiple of the tier's resolution.
    pub fn query(&self, query: &Query) -> Result<QueryResult> {
        let registry = &self.shared.registry;
        let id = registry
            .lookup(&query.series)?
            .ok_or_else(|| Error::UnknownSeries(query.series.clone()))?;
        let tier = match &query.tier {
            TierChoice::Auto => self.auto_tier(
                query.from,
                query.to,
                query
                    .max_points
                    .unwrap_or(self.shared.config.engine.max_points),
            ),
            TierChoice::Named(name) => self
                .shared
                .config
                .tier_index(name)
                .ok_or_else(|| Error::UnknownTier(name.clone()))?,
        };
        let spec = &self.shared.config.tiers[tier];
        let step = query.step.unwrap_or(spec.resolution);
        let (first, buckets) = self.merged_buckets(id, tier, query.from, query.to, step)?;
        let step_secs = step.secs() as i64;
        Ok(QueryResult {
            series: registry
                .key(id)
                .map(|k| k.to_string())
                .unwrap_or_else(|| query.series.clone()),
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
        })
    }

    /// The finest tier whose window reaches back to `from` and whose buckets over
    /// `[from, to)` number at most `max_points`; failing that, the tier reaching back
    /// furthest among those within the budget; failing that, the coarsest tier.
    pub fn auto_tier(&self, from: Timestamp, to: Timestamp, max_points: u32) -> usize {
        let now = self.shared.clock.now();
        let tiers = &self.shared.config.tiers;
        let mut order: Vec<usize> = (0..tiers.len()).collect();
        order.sort_by_key(|&t| tiers[t].resolution);
        let span = to.saturating_sub(from).max(0) as u64;
        let fits = |t: usize| span / tiers[t].resolution.secs() <= u64::from(max_points);
        let reaches = |t: usize| window_start(now, tiers[t].retention, tiers[t].period) <= from;
        if let Some(&t) = order.iter().find(|&&t| fits(t) && reaches(t)) {
            return t;
        }
        order
            .iter()
            .copied()
            .filter(|&t| fits(t))
            .min_by_key(|&t| window_start(now, tiers[t].retention, tiers[t].period))
            .or_else(|| order.last().copied())
            .unwrap_or(0)
    }

    /// The merged buckets of series `id` in tier `tier`: one per `step`-aligned interval
    /// whose start lies in `[from, to)`, each folding the tier's buckets inside it. Buckets
    /// before the tier's window or in periods without a file are empty.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] when `from >= to`, `step` is not a multiple of the tier's
    /// resolution, or the answer would exceed [`MAX_QUERY_POINTS`].
    pub fn read_buckets(
        &self,
        id: SeriesId,
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        step: Span,
    ) -> Result<Vec<(Timestamp, Bucket)>> {
        let (first, buckets) = self.merged_buckets(id, tier, from, to, step)?;
        let step = step.secs() as i64;
        Ok(buckets
            .into_iter()
            .enumerate()
            .map(|(i, b)| (first + i as i64 * step, b))
            .collect())
    }

    /// [`Engine::read_buckets`] without the timestamps: the first point's start and the
    /// merged buckets, one per step.
    fn merged_buckets(
        &self,
        id: SeriesId,
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        step: Span,
    ) -> Result<(Timestamp, Vec<Bucket>)> {
        let spec = &self.shared.config.tiers[tier];
        let res = spec.resolution.secs() as i64;
        let period = spec.period.secs() as i64;
        if from >= to {
            return Err(Error::InvalidQuery(format!(
                "from ({from}) must be before to ({to})"
            )));
        }
        if step.secs() == 0 || step.secs() as i64 % res != 0 {
            return Err(Error::InvalidQuery(format!(
                "step {step} is not a multiple of tier {}'s resolution {}",
                spec.name, spec.resolution
            )));
        }
        // Range arithmetic in i128: clients may send any i64 for from, to and step.
        let step_secs = i128::from(step.secs());
        let (from_wide, to_wide) = (i128::from(from), i128::from(to));
        let first = (from_wide + step_secs - 1).div_euclid(step_secs) * step_secs;
        let points = if first >= to_wide {
            0
        } else {
            (to_wide - first + step_secs - 1) / step_secs
        };
        if points > i128::from(MAX_QUERY_POINTS) {
            return Err(Error::InvalidQuery(format!(
                "{points} points requested; at most {MAX_QUERY_POINTS} (use a coarser step or tier)"
            )));
        }
        // Every point starts before `to`, so `first` fits; the end may not and is clamped.
        let first = first as Timestamp;
        let step_secs = step_secs as i64;
        let mut acc = vec![Bucket::EMPTY; points as usize];
        let end =
            (i128::from(first) + points * i128::from(step_secs)).min(i128::from(i64::MAX)) as i64;
        let window = window_start(self.shared.clock.now(), spec.retention, spec.period);
        let start = first.max(window);
        let slots = self.shared.storage.slots();
        let (chunk, slot) = (id.0 / slots, id.0 % slots);
        let per_point = step_secs / res;
        // Only periods that have a file: the walk is bounded by the files held, not by the
        // width of the range.
        for (period_start, file) in self.shared.storage.files_of_chunk(tier, chunk, start, end) {
            let lo = start.max(period_start);
            let hi = end.min(period_start.saturating_add(period));
            let global = (lo - first) / res;
            let buckets = ((lo - period_start) / res) as u32..((hi - period_start) / res) as u32;
            if per_point == 1 {
                let out = &mut acc[global as usize..global as usize + buckets.len()];
                for (slot_out, bucket) in out.iter_mut().zip(buckets) {
                    *slot_out = file.cell(bucket, slot).load();
                }
            } else {
                let (mut point, mut within) = ((global / per_point) as usize, global % per_point);
                for bucket in buckets {
                    acc[point].merge(&file.cell(bucket, slot).load());
                    within += 1;
                    if within == per_point {
                        within = 0;
                        point += 1;
                    }
                }
            }
        }
        Ok((first, acc))
    }
}
