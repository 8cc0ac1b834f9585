//! StatsD timer paths: the Graphite paths statsd's graphite backend writes for a timer
//! (`stats.timers.<name>.upper_90`, ...), answered for every distribution series from its
//! buckets and histograms instead of being stored. A point of any width, at any tier,
//! carries the merged bucket and histogram of its samples, so a wider point (a coarser tier,
//! `maxDataPoints`, a common step) shows the stat of all its samples: a percentile is taken
//! from merged histograms, never averaged.
//!
//! Paths of a distribution series `<name>` (tags kept as `;k=v`), under two prefixes: none
//! (`<name>.<stat>`) and statsd's default `stats.timers.` (`stats.timers.<name>.<stat>`,
//! what its default `legacyNamespace`, and `globalPrefix = "stats"` with `prefixTimer =
//! "timers"` without it, both give). A stored series whose key is a timer path wins: that
//! path reads the stored series.
//!
//! Stats, as statsd's `lib/process_metrics.js` defines them for one flush, here for one
//! point (`n = round(NN/100 × count)`, every sample for a count of 1):
//! - exact (the bucket's count, total, min and max): `count`, `count_ps` (count per second
//!   of the point's width), `sum`, `mean`, `upper`, `lower`, `count_NN`;
//! - within the histogram's relative error (0.55% at the default scale): `median` (the
//!   middle sample, or the mean of the middle two), `upper_NN` (the sample of rank `n`),
//!   `lower_topNN` (rank `count - n + 1`); the first and last rank are exact;
//! - estimates, each sample counted at its bucket's geometric middle (the first and last
//!   rank exact), so within the relative error times the sum of the magnitudes summed (of
//!   the sum itself for samples of one sign): `sum_NN`, `mean_NN`, `sum_topNN`,
//!   `mean_topNN`; exact when `n` is every sample.
//!
//! `std`, `sum_squares` and `sum_squares_NN` need the sum of squares, which no bucket
//! keeps, and `histogram.bin_*` needs statsd's configured bins: none of them is answered.
//! Find and globs list the thresholds of statsd's default `percentThreshold` (90); any other
//! `NN` (`upper_99`, `upper_99_9`) is answered where a path names it.
//!
//! Render reads them above the store, once for every store: a pattern's timer paths
//! select their distribution series ([`TimerFilter`], `Selection::TimerPaths`), whose
//! buckets and histograms are read on the render's grid and made the points the stats are
//! taken from ([`read`]). A point whose histogram does not hold every sample (samples
//! written before the series became a distribution) is read without it, so such points
//! state no relative error; their stats are the same.
//!
//! A render fetching estimates states their bound ([`super::Rendered::relative_error`],
//! the server's `x-tierdb-relative-error` header). Find ([`add_to_finder`]) and the tag API
//! ([`keys`]) list the paths beside stored series (`listed`, over an engine's registry). On
//! a cluster, each partition's owner adds its timers' paths to its part of a find or tag
//! read ([`TimerPoints`] stays serializable, points exact), so a cluster node answers them as
//! one node.

mod listed;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Mutex;

pub(crate) use listed::{add_to_finder, keys};

use super::{Fetched, PathPattern, RenderGrid};
use crate::config::TierSpec;
use crate::counter::SeriesKind;
use crate::error::Result;
use crate::read::budget::ReadBudget;
use crate::read::distribution::DistributionPoint;
use crate::read::store::{Selection, SeriesFilter, SeriesRef, Store};
use crate::registry::{KeyView, SeriesKey};
use crate::time::Timestamp;

/// What goes before a timer's name in its paths: nothing, and statsd's default namespace.
pub(crate) const PREFIXES: [&str; 2] = ["", "stats.timers."];

/// The percent thresholds whose stats find and globs list: statsd's default
/// `percentThreshold`.
pub(crate) const LISTED_THRESHOLDS: [f64; 1] = [90.0];

/// One stat of a timer, the last segment of its path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Stat {
    /// `count`: samples in the point.
    Count,
    /// `count_ps`: samples per second of the point's width.
    CountPs,
    /// `sum`: their total.
    Sum,
    /// `mean`: total over count.
    Mean,
    /// `upper`: the largest sample.
    Upper,
    /// `lower`: the smallest sample.
    Lower,
    /// `median`: the middle sample, or the mean of the middle two.
    Median,
    /// A stat of the samples within a percent threshold (`upper_90`, `mean_top10`, ...).
    Threshold(Part, Threshold),
}

/// Which stat of the samples within a threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Part {
    /// `count_NN`: how many.
    Count,
    /// `sum_NN`: their sum.
    Sum,
    /// `mean_NN`: their mean.
    Mean,
    /// `upper_NN` (the largest of the lowest `NN`%) or `lower_topNN` (the smallest of the
    /// highest).
    Bound,
}

/// statsd's percent threshold: the lowest `percent`% of the samples, or with `top` (a
/// negative `percentThreshold`, named `topNN`) the highest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Threshold {
    percent: f64,
    top: bool,
}

impl Threshold {
    /// statsd's `numInThreshold` of `count` samples: every one for a single sample, else
    /// JavaScript's `Math.round(percent / 100 × count)`; `None` when that is none (statsd
    /// then writes no stat).
    fn samples(self, count: u64) -> Option<u64> {
        let n = match count {
            0 => 0,
            1 => 1,
            _ => (self.percent / 100.0 * count as f64 + 0.5).floor() as u64,
        };
        (n > 0).then_some(n.min(count))
    }

    /// The ranks (1-based, ascending) of the samples within the threshold.
    fn ranks(self, count: u64) -> Option<(u64, u64)> {
        let n = self.samples(count)?;
        Some(match self.top {
            true => (count - n + 1, count),
            false => (1, n),
        })
    }

    /// statsd's `clean_pct`: `90`, `99_9`, `top10`.
    fn text(self) -> String {
        let number = self.percent.to_string().replacen('.', "_", 1);
        match self.top {
            true => format!("top{number}"),
            false => number,
        }
    }
}

impl Stat {
    /// The stat a path's last segment names, in statsd's spelling only (`upper_90`, not
    /// `upper_090`); `None` for anything else, the stats not answered included.
    pub(crate) fn parse(text: &str) -> Option<Stat> {
        let plain = match text {
            "count" => Some(Stat::Count),
            "count_ps" => Some(Stat::CountPs),
            "sum" => Some(Stat::Sum),
            "mean" => Some(Stat::Mean),
            "upper" => Some(Stat::Upper),
            "lower" => Some(Stat::Lower),
            "median" => Some(Stat::Median),
            _ => None,
        };
        if plain.is_some() {
            return plain;
        }
        let (part, threshold) = text.split_once('_')?;
        let part = match part {
            "count" => Part::Count,
            "sum" => Part::Sum,
            "mean" => Part::Mean,
            "upper" | "lower" => Part::Bound,
            _ => return None,
        };
        let (top, number) = match threshold.strip_prefix("top") {
            Some(number) => (true, number),
            None => (false, threshold),
        };
        if !number.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
            return None;
        }
        let percent: f64 = number.replacen('_', ".", 1).parse().ok()?;
        if !(percent > 0.0 && percent <= 100.0) {
            return None;
        }
        let stat = Stat::Threshold(part, Threshold { percent, top });
        // One spelling per stat (`upper_top10` and `lower_90` are not statsd's).
        (stat.name() == text).then_some(stat)
    }

    /// The stat's path segment, as statsd names it.
    pub(crate) fn name(self) -> String {
        match self {
            Stat::Count => "count".into(),
            Stat::CountPs => "count_ps".into(),
            Stat::Sum => "sum".into(),
            Stat::Mean => "mean".into(),
            Stat::Upper => "upper".into(),
            Stat::Lower => "lower".into(),
            Stat::Median => "median".into(),
            Stat::Threshold(part, t) => {
                let part = match part {
                    Part::Count => "count",
                    Part::Sum => "sum",
                    Part::Mean => "mean",
                    Part::Bound if t.top => "lower",
                    Part::Bound => "upper",
                };
                format!("{part}_{}", t.text())
            }
        }
    }

    /// The stats find and globs offer: every stat answered, thresholds of
    /// [`LISTED_THRESHOLDS`].
    fn listed() -> Vec<Stat> {
        let mut stats = vec![
            Stat::Count,
            Stat::CountPs,
            Stat::Sum,
            Stat::Mean,
            Stat::Upper,
            Stat::Lower,
            Stat::Median,
        ];
        for percent in LISTED_THRESHOLDS {
            let t = Threshold {
                percent,
                top: false,
            };
            stats.extend(
                [Part::Count, Part::Sum, Part::Mean, Part::Bound]
                    .map(|part| Stat::Threshold(part, t)),
            );
        }
        stats
    }

    /// True for the stats taken from the histogram (`median`, `upper_NN`, `lower_topNN`,
    /// `sum_NN`, `mean_NN`, ...), which are within its relative error of statsd's; false for
    /// those the bucket's count, total, min and max answer exactly.
    pub(crate) fn estimates(self) -> bool {
        match self {
            Stat::Median => true,
            Stat::Threshold(part, _) => part != Part::Count,
            _ => false,
        }
    }

    /// The stat of `point`, `step` seconds wide; `None` for an empty point, and for a stat
    /// that needs the histogram where the point has none for some of its samples.
    pub(crate) fn value(self, point: &DistributionPoint, step: i64) -> Option<f64> {
        let bucket = &point.bucket;
        let count = bucket.count;
        if count == 0 {
            return None;
        }
        match self {
            Stat::Count => Some(count as f64),
            Stat::CountPs => Some(count as f64 / step.max(1) as f64),
            Stat::Sum => Some(bucket.total),
            Stat::Mean => Some(bucket.total / count as f64),
            Stat::Upper => Some(bucket.max),
            Stat::Lower => Some(bucket.min),
            Stat::Median => {
                let mid = count / 2;
                match count % 2 {
                    1 => point.value_at_rank(mid + 1),
                    _ => Some((point.value_at_rank(mid)? + point.value_at_rank(mid + 1)?) / 2.0),
                }
            }
            Stat::Threshold(part, t) => {
                let (first, last) = t.ranks(count)?;
                let n = last - first + 1;
                match part {
                    Part::Count => Some(n as f64),
                    Part::Bound if t.top => point.value_at_rank(first),
                    Part::Bound => point.value_at_rank(last),
                    Part::Sum => point.sum_of_ranks(first, last),
                    Part::Mean => Some(point.sum_of_ranks(first, last)? / n as f64),
                }
            }
        }
    }
}

/// A timer path's points while its values are still the stat of each point: what lets a
/// render merge points (histograms and all) and take the stat of the merge. Serializable, as
/// a cluster's owners send it with the path they fetched: the stat as its path segment, the
/// points exact ([`crate::read::distribution::exact_points`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TimerPoints {
    /// The stat shown.
    #[serde(with = "stat_name")]
    pub(crate) stat: Stat,
    /// One point per value.
    #[serde(with = "crate::read::distribution::exact_points")]
    pub(crate) points: Vec<DistributionPoint>,
}

/// A [`Stat`] on the wire: its path segment (`upper_90`), parsed back.
mod stat_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Stat;

    pub(super) fn serialize<S: Serializer>(stat: &Stat, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&stat.name())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Stat, D::Error> {
        let name = String::deserialize(deserializer)?;
        Stat::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("{name:?} is no timer stat")))
    }
}

impl TimerPoints {
    /// The stat of every point, `step` seconds wide.
    pub(crate) fn values(&self, step: i64) -> Vec<Option<f64>> {
        (self.points.iter())
            .map(|p| self.stat.value(p, step))
            .collect()
    }

    /// The largest relative error of the histograms behind the values, for a stat that
    /// estimates ([`Stat::estimates`]); `None` when every value is exact. Merging keeps the
    /// coarser scale of its inputs, so this bounds consolidated points too.
    pub(crate) fn relative_error(&self) -> Option<f64> {
        if !self.stat.estimates() {
            return None;
        }
        (self.points.iter())
            .filter_map(DistributionPoint::relative_error)
            .reduce(f64::max)
    }

    /// Each `k` consecutive points merged into one.
    pub(crate) fn merged(&self, k: usize) -> TimerPoints {
        let points = (self.points.chunks(k.max(1)))
            .map(|chunk| {
                let mut merged = chunk[0].clone();
                chunk[1..].iter().for_each(|p| merged.merge(p));
                merged
            })
            .collect();
        TimerPoints {
            stat: self.stat,
            points,
        }
    }
}

/// One timer path a pattern selects.
pub(crate) struct Selected {
    /// The distribution series behind it, as its store names it.
    pub(crate) series: SeriesRef,
    /// The path as a key: the series' tags, the path as the name.
    pub(crate) key: SeriesKey,
    stat: Stat,
}

/// Segments a prefix adds before the name.
fn prefix_depth(prefix: &str) -> usize {
    prefix.matches('.').count()
}

/// The stats worth trying against `pattern`: the listed ones, and those its last segment
/// names outright (`upper_99`).
fn candidates(pattern: &PathPattern) -> Vec<Stat> {
    let mut stats = Stat::listed();
    for text in pattern.last_segment_literals() {
        if let Some(stat) = Stat::parse(text).filter(|s| !stats.contains(s)) {
            stats.push(stat);
        }
    }
    stats
}

/// The timer paths of `key` for `stats`, each as its path and its key.
fn paths_of(key: &SeriesKey, stats: &[Stat]) -> Vec<(String, SeriesKey, Stat)> {
    let name = key.name();
    let mut out = Vec::with_capacity(PREFIXES.len() * stats.len());
    for prefix in PREFIXES {
        for &stat in stats {
            let path = format!("{prefix}{name}.{}", stat.name());
            // A path past the longest key is no path.
            if let Ok(timer) = SeriesKey::new(path.clone(), key.tags()) {
                out.push((path, timer, stat));
            }
        }
    }
    out
}

/// The series with a timer path a pattern selects ([`Selection::TimerPaths`]): those
/// whose name has the depth of one, and one of whose paths of the stats the pattern's last
/// segment may be the pattern matches. Whether they are distributions is the store's to
/// say (the kind of what it found).
pub(crate) struct TimerFilter {
    pattern: PathPattern,
    /// The stats the pattern's last segment may be.
    stats: Vec<Stat>,
}

impl TimerFilter {
    /// The filter of the timer paths `pattern` selects.
    pub(crate) fn new(pattern: PathPattern) -> TimerFilter {
        let stats = (candidates(&pattern).into_iter())
            .filter(|s| pattern.last_segment_may_be(&s.name()))
            .collect();
        TimerFilter { pattern, stats }
    }

    /// False when the pattern can select no timer path (its last segment is no stat), so
    /// that most stored paths (`a.*.cpu`) cost no scan.
    fn may_select(&self) -> bool {
        !self.stats.is_empty()
    }
}

impl SeriesFilter for TimerFilter {
    fn matches(&self, key: &KeyView<'_>) -> bool {
        let name = key.name();
        let depth = self.pattern.depth();
        let by_tags = self.pattern.is_tag_query();
        let segments = name.split('.').count();
        (PREFIXES.iter()).any(|prefix| {
            (by_tags || prefix_depth(prefix) + segments + 1 == depth)
                && (self.stats.iter()).any(|stat| {
                    let path = format!("{prefix}{name}.{}", stat.name());
                    self.pattern.matches_as(&path, *key)
                })
        })
    }

    fn selection(&self) -> Selection {
        Selection::TimerPaths(self.pattern.as_str().to_owned())
    }
}

/// Every timer path `pattern` selects among `store`'s distribution series, but those a
/// stored series holds: `held`, the keys of the stored series `pattern` matches (a stored
/// series whose key is a timer path the pattern selects is one of them).
///
/// # Errors
/// A store's failure to reach its storage.
pub(crate) fn select<S: Store + ?Sized>(
    store: &S,
    pattern: &PathPattern,
    held: &[&str],
) -> Result<Vec<Selected>> {
    let filter = TimerFilter::new(pattern.clone());
    if !filter.may_select() {
        return Ok(Vec::new());
    }
    // Not charged: a timer path is charged as a series it selects is ([`Stat`]'s count).
    let found = store.select(&filter, &ReadBudget::unlimited())?;
    let held: HashSet<&str> = held.iter().copied().collect();
    let mut selected = Vec::new();
    for f in found.iter().filter(|f| f.kind == SeriesKind::Distribution) {
        for (path, timer, stat) in paths_of(&f.key, &filter.stats) {
            if pattern.matches_as(&path, f.key.view()) && !held.contains(&timer.as_str()) {
                selected.push(Selected {
                    series: f.series(),
                    key: timer,
                    stat,
                });
            }
        }
    }
    Ok(selected)
}

/// True when any of `patterns` selects a timer path in `store`.
///
/// # Errors
/// As [`select`].
pub(crate) fn any_selected<S: Store + ?Sized>(store: &S, patterns: &[PathPattern]) -> Result<bool> {
    for pattern in patterns {
        let mut selected = select(store, pattern, &[])?;
        if selected.is_empty() {
            continue;
        }
        let stored = store.select(pattern, &ReadBudget::unlimited())?;
        let held: HashSet<&str> = stored.iter().map(|f| f.key.as_str()).collect();
        selected.retain(|s| !held.contains(s.key.as_str()));
        if !selected.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The timer paths `selected` (of one tier set) read in `tier` over `range` on `grid`, as
/// fetched series: each distribution series' buckets and histograms read once through the
/// store, whatever number of its stats are selected, and made the points the stats are
/// taken from.
///
/// # Errors
/// As [`Store::buckets`].
pub(crate) fn read<S: Store + ?Sized>(
    store: &S,
    selected: Vec<Selected>,
    tier: &TierSpec,
    range: (Timestamp, Timestamp),
    grid: &RenderGrid,
) -> Result<Vec<Fetched>> {
    let mut series: Vec<SeriesRef> = selected.iter().map(|s| s.series).collect();
    series.sort_unstable_by_key(|s| (s.id, s.set));
    series.dedup();
    let window = Some(grid.window);
    let buckets = store.buckets(&series, tier, range, window)?;
    let histograms = Mutex::new(vec![Vec::new(); series.len()]);
    store.visit_histograms(&series, tier, range, window, &|i, h| {
        histograms.lock().unwrap_or_else(|e| e.into_inner())[i] = h.to_vec();
    })?;
    let histograms = histograms.into_inner().unwrap_or_else(|e| e.into_inner());
    let points: Vec<Vec<DistributionPoint>> = (buckets.into_iter().zip(histograms))
        .map(|(buckets, histograms)| {
            (buckets.into_iter().enumerate())
                .map(|(k, bucket)| DistributionPoint {
                    ts: grid.first + k as i64 * grid.resolution,
                    bucket,
                    histogram: histograms.get(k).cloned().flatten().map(|h| h.histogram),
                })
                .collect()
        })
        .collect();
    Ok((selected.into_iter())
        .map(|s| {
            let at = series.binary_search_by_key(&(s.series.id, s.series.set), |r| (r.id, r.set));
            let points = at.map(|at| points[at].clone()).unwrap_or_default();
            Fetched {
                key: s.key,
                start: grid.first,
                step: grid.resolution,
                buckets: points.iter().map(|p| p.bucket).collect(),
                counter: false,
                timer: Some(TimerPoints {
                    stat: s.stat,
                    points,
                }),
            }
        })
        .collect())
}
