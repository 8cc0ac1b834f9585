//! A distribution read in parts: the plan the asker fixes ([`DistributionPlan`]), each
//! engine's part over its own series ([`PartialDistribution`]: per group and point, the merged
//! bucket and histogram, before any quantile is taken), the exact merge of parts over disjoint
//! series (counts add), and the finish that takes the quantiles. A single node's read is its
//! one part, finished; a cluster node merges the parts of its partitions' owners, so a
//! quantile over series of many partitions is taken from their merged histograms, never from
//! per-partition quantiles.

use std::collections::BTreeMap;

use super::{
    fold_members, placed_from_explicit_buckets, DistributionGroup, DistributionPoint,
    DistributionQuery, DistributionResult, DistributionTarget, HistogramShown, Matched, Shown,
};
use crate::bucket::{Bucket, ExactF64};
use crate::config::TiersConfig;
use crate::counter::SeriesKind;
use crate::error::{Error, Result};
use crate::histogram::Histogram;
use crate::read::budget::ReadBudget;
use crate::read::query::{still_filling, PointGrid};
use crate::read::reader::{join_notes, Member, Reader, SetPartial};
use crate::registry::SeriesId;
use crate::time::{Span, Timestamp};

/// What a distribution read reads once the asker has fixed it: the target, the tier by name,
/// the grid of points and the first second the tier's window holds at the asker's clock.
/// Every engine given the plan reads the same buckets, so parts of engines with different
/// clocks merge point by point. Serializable: a cluster node sends it to its partitions'
/// owners.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DistributionPlan {
    target: DistributionTarget,
    shown: Shown,
    /// The tier, by name: tier indexes are one node's configuration order.
    tier: String,
    from: Timestamp,
    to: Timestamp,
    /// Width of a point; `None` for one point over the whole range.
    step: Option<Span>,
    /// First second the tier held at the asker's clock: nothing older is read, anywhere.
    window: Timestamp,
    /// The points, as the asker's tier gives them.
    grid: PointGrid,
    /// The first point still filling at the asker's clock (the answer's `partial_from`).
    partial_from: Option<Timestamp>,
}

impl DistributionPlan {
    /// The plan of `query` with `tiers` at `now`: the tier chosen (`auto` now), the grid and
    /// the tier's window fixed.
    ///
    /// # Errors
    /// [`Error::UnknownTier`], or [`Error::InvalidQuery`] for an empty range, a step that is
    /// not a multiple of the tier's resolution, or more than `MAX_QUERY_POINTS` points.
    pub fn new(
        tiers: &TiersConfig,
        now: Timestamp,
        query: &DistributionQuery,
    ) -> Result<DistributionPlan> {
        let tier = query
            .tier
            .resolve(tiers, query.from, query.to, query.max_points, now)?;
        let spec = &tiers.tiers[tier];
        let step = (!query.whole_range).then(|| query.step.unwrap_or(spec.resolution));
        DistributionPlan::on(query, spec, (step, spec.window_start(now)), now)
    }

    /// The plan of `query` reading tier `spec` at points `step` wide (one over the range for
    /// `None`) from `window` on, at `now`.
    ///
    /// # Errors
    /// As [`PointGrid::of`].
    pub(crate) fn on(
        query: &DistributionQuery,
        spec: &crate::config::TierSpec,
        (step, window): (Option<Span>, Timestamp),
        now: Timestamp,
    ) -> Result<DistributionPlan> {
        let grid = PointGrid::of(spec, query.from, query.to, step)?;
        Ok(DistributionPlan {
            target: query.target.clone(),
            shown: query.shown,
            tier: spec.name.clone(),
            from: query.from,
            to: query.to,
            step,
            window,
            partial_from: still_filling(grid.first, grid.step, grid.points, now),
            grid,
        })
    }

    /// The series' key for a one-series read; `None` for a read of a selector.
    pub fn series(&self) -> Option<&str> {
        match &self.target {
            DistributionTarget::Series(key) => Some(key),
            DistributionTarget::Select { .. } => None,
        }
    }

    /// The `group_by` tags: none for a one-series read.
    fn group_by(&self) -> &[String] {
        match &self.target {
            DistributionTarget::Series(_) => &[],
            DistributionTarget::Select { group_by, .. } => group_by,
        }
    }
}

/// A distribution read's answer before quantiles are taken: each group's tag values, its
/// distribution series and per point the merged bucket and histogram, over the series of some
/// engines. Parts over disjoint sets of series [`merge`](PartialDistribution::merge) exactly
/// into the part over their union (buckets merge, histogram counts add);
/// [`finish`](PartialDistribution::finish) takes the quantiles (or shows the histograms).
///
/// Serializable: floats survive JSON bit for bit, histograms travel in their stored encoding.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartialDistribution {
    plan: DistributionPlan,
    /// The series read, in canonical form, for a one-series read that found it.
    series: Option<String>,
    /// Selected series that are not distributions (left out, and said so in the note).
    not_distributions: usize,
    /// Distribution series whose values were placed from explicit buckets.
    explicit_buckets: usize,
    /// Sorted by tag values, each value list once.
    groups: Vec<PartialGroup>,
}

/// One group of a [`PartialDistribution`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct PartialGroup {
    /// The value of each `group_by` tag, in the plan's order.
    tags: Vec<Option<String>>,
    /// Distribution series in the group.
    series: usize,
    /// One point per point of the plan's grid.
    #[serde(with = "exact_points")]
    points: Vec<DistributionPoint>,
}

impl PartialDistribution {
    /// The part over no series: what merging starts from.
    pub fn empty(plan: DistributionPlan) -> PartialDistribution {
        PartialDistribution {
            plan,
            series: None,
            not_distributions: 0,
            explicit_buckets: 0,
            groups: Vec::new(),
        }
    }

    /// Folds `other`, a part over other series, in: every point's bucket and histogram merge
    /// exactly ([`DistributionPoint::merge`]), so the merged part does not depend on the
    /// order of merging.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] when `other` answers another plan, or its groups do not match
    /// the plan's points (a part garbled on its way); `self` is unchanged then.
    pub fn merge(&mut self, other: PartialDistribution) -> Result<()> {
        if other.plan != self.plan {
            return Err(Error::InvalidQuery(
                "partial distribution reads of different plans cannot be merged".into(),
            ));
        }
        other.check_shape()?;
        self.series = self.series.take().or(other.series);
        self.not_distributions += other.not_distributions;
        self.explicit_buckets += other.explicit_buckets;
        let mut groups: BTreeMap<Vec<Option<String>>, PartialGroup> = (self.groups.drain(..))
            .map(|group| (group.tags.clone(), group))
            .collect();
        for group in other.groups {
            match groups.get_mut(&group.tags) {
                Some(mine) => {
                    mine.series += group.series;
                    for (point, other) in mine.points.iter_mut().zip(&group.points) {
                        point.merge(other);
                    }
                }
                None => {
                    groups.insert(group.tags.clone(), group);
                }
            }
        }
        self.groups = groups.into_values().collect();
        Ok(())
    }

    /// The answer: per group and point, the plan's quantile of the merged histogram (or the
    /// histogram itself), with the largest relative error of the quantiles answered and notes
    /// for what is left out or null.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] for a garbled part (see [`PartialDistribution::merge`]).
    pub fn finish(self) -> Result<DistributionResult> {
        self.check_shape()?;
        let plan = self.plan;
        let mut relative_error: Option<f64> = None;
        let mut incomplete = 0usize;
        let groups = self
            .groups
            .into_iter()
            .map(|group| {
                let row = &group.points;
                for point in row {
                    if point.bucket.count > 0 && !point.is_complete() {
                        incomplete += 1;
                    } else if let Some(e) = point.relative_error() {
                        relative_error = Some(relative_error.map_or(e, |r: f64| r.max(e)));
                    }
                }
                let (points, histograms) = match plan.shown {
                    Shown::Quantile(q) => (
                        Some(row.iter().map(|p| (p.ts, p.quantile(q))).collect()),
                        None,
                    ),
                    Shown::Histogram => (
                        None,
                        Some(row.iter().map(|p| (p.ts, HistogramShown::of(p))).collect()),
                    ),
                };
                DistributionGroup {
                    tags: plan.group_by().iter().cloned().zip(group.tags).collect(),
                    series: group.series,
                    points,
                    histograms,
                }
            })
            .collect();
        let mut notes = Vec::new();
        let (not_distributions, explicit_buckets) = (self.not_distributions, self.explicit_buckets);
        if not_distributions > 0 {
            notes.push(format!(
                "{not_distributions} selected series are not distributions (no histograms) and are left out"
            ));
        }
        if incomplete > 0 {
            notes.push(format!(
                "{incomplete} points hold samples without a histogram (written before the series was a distribution) and are null"
            ));
        }
        if explicit_buckets > 0 {
            notes.push(format!(
                "{explicit_buckets} series hold OTLP explicit-bucket histograms: a quantile of their values is within the width of the explicit bucket holding it (half of it between two bounds), not within relative_error"
            ));
        }
        Ok(DistributionResult {
            series: self.series,
            tier: plan.tier,
            display: match plan.shown {
                Shown::Quantile(q) => format!("p{}", q * 100.0),
                Shown::Histogram => "hist".to_string(),
            },
            step: plan.grid.step,
            relative_error,
            explicit_buckets,
            groups,
            partial_from: plan.partial_from,
            note: (!notes.is_empty()).then(|| notes.join("; ")),
        })
    }

    /// Refuses a part whose groups are not sorted and distinct, or not one point per point
    /// of the grid at its starts and one tag value per `group_by` key: only a part that came
    /// over the wire can be so.
    fn check_shape(&self) -> Result<()> {
        let grid = &self.plan.grid;
        let keys = self.plan.group_by().len();
        let sorted = self.groups.windows(2).all(|w| w[0].tags < w[1].tags);
        let shaped = self.groups.iter().all(|g| {
            g.tags.len() == keys
                && g.points.len() == grid.points
                && (g.points.iter().enumerate()).all(|(i, p)| p.ts == grid.start_of(i))
        });
        if sorted && shaped {
            Ok(())
        } else {
            Err(Error::InvalidQuery(
                "a partial distribution read's groups do not match its plan".into(),
            ))
        }
    }
}

impl SetPartial for PartialDistribution {
    type Plan = DistributionPlan;
    type Answer = DistributionResult;

    fn empty(plan: DistributionPlan) -> PartialDistribution {
        PartialDistribution::empty(plan)
    }

    fn merge(&mut self, other: PartialDistribution) -> Result<()> {
        PartialDistribution::merge(self, other)
    }

    fn merge_set(&mut self, mut part: PartialDistribution, tiers: &str) -> Result<()> {
        self.plan.grid.same_points(&part.plan.grid, tiers)?;
        part.plan = self.plan.clone();
        PartialDistribution::merge(self, part)
    }

    fn finish_across(mut self, tiers: &str, note: &Option<String>) -> Result<DistributionResult> {
        self.plan.tier = tiers.to_owned();
        let mut result = self.finish()?;
        result.note = join_notes(result.note.take(), note);
        Ok(result)
    }

    fn finish_alone(self) -> Result<DistributionResult> {
        self.finish()
    }
}

/// The distribution reads in parts.
impl Reader<'_> {
    /// A distribution read over the series of several tier sets: each set's part read
    /// through the tier that set would read alone, on one grid ([`Reader::across_sets`]),
    /// merged as engines' parts are (histogram counts add), then finished; the note says so
    /// when the sets' resolutions differ.
    ///
    /// # Errors
    /// As [`Reader::distribution_query`].
    pub(crate) fn distribution_across_sets(
        &self,
        query: &DistributionQuery,
        sets: &[usize],
        budget: &ReadBudget,
    ) -> Result<DistributionResult> {
        let now = self.now();
        let across = self.across_sets(
            sets,
            &query.tier,
            (query.from, query.to),
            (query.max_points, query.step, query.whole_range),
        )?;
        let merged = across.merge_parts(
            |reader, spec| {
                let plan = DistributionPlan::on(query, spec, (across.step, across.window), now)?;
                reader.distribution_partial(&plan, budget)
            },
            |merged: &mut PartialDistribution, part| merged.merge_set(part, &across.tiers),
        )?;
        merged.finish_across(&across.tiers, &across.note)
    }

    /// The distribution series of this engine `plan` reads, grouped, each group's histograms
    /// and buckets merged per point, if what it reads fits in `budget`: the registry's keys
    /// for a selector, then every distribution series selected times the tier's buckets in
    /// the range (within the plan's window), charged before any is read.
    ///
    /// # Errors
    /// [`Error::UnknownSeries`] for a one-series plan whose series this engine does not
    /// have, [`Error::UnknownTier`] when it has no tier of the plan's name,
    /// [`Error::InvalidQuery`] when that tier's layout differs from the plan's or `budget`
    /// refuses the read; [`Error::CorruptFile`] or [`Error::Io`] for a compacted file that
    /// cannot be read.
    pub fn distribution_partial(
        &self,
        plan: &DistributionPlan,
        budget: &ReadBudget,
    ) -> Result<PartialDistribution> {
        let tier = PointGrid::planned_tier(
            self.config(),
            &plan.tier,
            plan.from,
            plan.to,
            plan.step,
            &plan.grid,
        )?;
        let grid = &plan.grid;
        let mut series = None;
        let matched: Vec<Matched> = match &plan.target {
            DistributionTarget::Series(key) => {
                let id = self
                    .registry()
                    .lookup(key)?
                    .ok_or_else(|| Error::UnknownSeries(key.clone()))?;
                series = self.registry().key(id).map(|k| k.as_str().to_string());
                vec![(id, Vec::new())]
            }
            DistributionTarget::Select { selector, group_by } => {
                self.select_grouped(selector, group_by, budget)?
            }
        };
        let kinds = self.series_kinds(&matched.iter().map(|(id, _)| *id).collect::<Vec<_>>());
        let not_distributions = kinds
            .iter()
            .filter(|&&k| k != SeriesKind::Distribution)
            .count();
        let members: Vec<(SeriesId, &Vec<Option<String>>)> = matched
            .iter()
            .zip(&kinds)
            .filter(|(_, &k)| k == SeriesKind::Distribution)
            .map(|((id, values), _)| (*id, values))
            .collect();
        let explicit_buckets = (members.iter())
            .filter(|(id, _)| {
                (self.registry().key(*id)).is_some_and(|k| placed_from_explicit_buckets(k.view()))
            })
            .count();
        // (index, series) of each group.
        let mut groups: BTreeMap<Vec<Option<String>>, (usize, usize)> = BTreeMap::new();
        for (_, values) in &members {
            groups.entry((*values).clone()).or_default().1 += 1;
        }
        for (index, entry) in groups.values_mut().enumerate() {
            entry.0 = index;
        }
        grid.charge_held(
            budget,
            (grid.first.max(plan.window), grid.end),
            members.len(),
            &plan.tier,
        )?;
        let mut indexed: Vec<Member> = (members.iter())
            .map(|(id, values)| self.member(*id, groups[*values].0))
            .collect::<Result<_>>()?;
        indexed.sort_unstable_by_key(|m| (m.chunk, m.slot));
        let mut folded = fold_members(self, tier, grid, plan.window, &indexed, groups.len())?;
        let points = grid.points;
        // `folded` holds the groups' rows in index order, which is the map's order.
        let groups = (groups.into_iter())
            .map(|(tags, (_, series))| PartialGroup {
                tags,
                series,
                points: folded.drain(..points).collect(),
            })
            .collect();
        Ok(PartialDistribution {
            plan: plan.clone(),
            series,
            not_distributions,
            explicit_buckets,
            groups,
        })
    }
}

/// Distribution points on the wire (a part's rows, a render's timer paths): each `[start,
/// count, total, min, max, histogram]`, the floats as [`ExactF64`], the histogram its stored
/// encoding as bytes (`null` for none). For `#[serde(with = "...::exact_points")]`.
pub(crate) mod exact_points {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{Bucket, DistributionPoint, ExactF64, Histogram};

    type Wire = (i64, u64, ExactF64, ExactF64, ExactF64, Option<Vec<u8>>);

    /// Writes `points` as a sequence of `[start, count, total, min, max, histogram]`.
    ///
    /// # Errors
    /// The serializer's.
    pub(crate) fn serialize<S: Serializer>(
        points: &[DistributionPoint],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(points.iter().map(|p| {
            let b = &p.bucket;
            let histogram = p.histogram.as_ref().map(|h| {
                let mut bytes = Vec::with_capacity(h.encoded_len());
                h.encode(&mut bytes);
                bytes
            });
            let wire: Wire = (
                p.ts,
                b.count,
                ExactF64(b.total),
                ExactF64(b.min),
                ExactF64(b.max),
                histogram,
            );
            wire
        }))
    }

    /// Reads what [`serialize`] wrote.
    ///
    /// # Errors
    /// The deserializer's, a float that is not exact, or a histogram that does not decode.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<DistributionPoint>, D::Error> {
        Vec::<Wire>::deserialize(deserializer)?
            .into_iter()
            .map(|(ts, count, total, min, max, histogram)| {
                let histogram = match histogram {
                    Some(bytes) => match Histogram::decode(&bytes) {
                        Ok((histogram, used)) if used == bytes.len() => Some(histogram),
                        Ok(_) => {
                            return Err(serde::de::Error::custom("a histogram's bytes run on"))
                        }
                        Err(e) => {
                            return Err(serde::de::Error::custom(format!("a histogram: {e}")))
                        }
                    },
                    None => None,
                };
                Ok(DistributionPoint {
                    ts,
                    bucket: Bucket {
                        count,
                        total: total.0,
                        min: min.0,
                        max: max.0,
                        last: None,
                    },
                    histogram,
                })
            })
            .collect()
    }
}
