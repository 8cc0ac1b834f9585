//! PromQL on a cluster node: the evaluator's [`Source`] over the partitions' owners. The
//! node evaluates the query itself, as a single node does; only the leaf reads fan out
//! ([`super::fanout::fan_out`]): the series a selector picks (each owner lists the keys of
//! its partitions' series that match, its registry scans charged, with their kinds), then
//! their buckets, a distribution's histograms (per bucket, for `histogram_quantile` and
//! kin) or raw points (each owner reads the keys of its own partitions, on the tier and
//! range the asker chose). The asker charges the request's budget as one engine would (the owners'
//! scans as they report them, the series times the buckets before anything is read), so
//! `--max-read-values`, `--max-query-series` and `--query-timeout` hold as on a single node.
//! A read taken from a replica behind the log is recorded in the request's
//! [`crate::server::read_report::ReadReport`], which the Prometheus handler turns into a
//! `warnings` entry.
//!
//! The reads and their answers on the wire, and how an owner answers them, are
//! [`super::promql_read`]'s.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use super::fanout::{self, PartialAnswer, PartialRead};
use super::node::Node;
use super::partial;
use super::promql_read::{PromAnswer, PromRead, WireMatcher};
use crate::bucket::Bucket;
use crate::config::TiersConfig;
use crate::error::{Error, Result};
use crate::promql::HistogramVisit;
use crate::promql::{self, key_labels, MatcherSet, RawPoints, Selected, Source};
use crate::read::budget::ReadBudget;
use crate::registry::SeriesKey;
use crate::server::backend::ReadOptions;
use crate::time::Timestamp;
/// PromQL's [`Source`] on a cluster node: every read fans out to the partitions' owners.
pub(crate) struct ClusterSource {
    node: Arc<Node>,
    /// The runtime the fan-outs run on, from the request's handler: the evaluator calls the
    /// source synchronously, on the blocking pool (as render's source, see
    /// [`fanout::RenderSource`]).
    runtime: tokio::runtime::Handle,
    /// How the request asks to be read, and where the fan-outs record a lag.
    options: ReadOptions,
    /// The canonical key of each series selected so far: a [`Selected`]'s id is its index.
    keys: Mutex<Vec<String>>,
    /// With `[[set]]`s, the tier set of each series selected so far, by the same index.
    sets: Mutex<Vec<usize>>,
}

impl ClusterSource {
    /// A source reading through `node`'s owners, fanning out on `runtime`.
    pub(crate) fn new(
        node: Arc<Node>,
        runtime: tokio::runtime::Handle,
        options: ReadOptions,
    ) -> ClusterSource {
        ClusterSource {
            node,
            runtime,
            options,
            keys: Mutex::new(Vec::new()),
            sets: Mutex::new(Vec::new()),
        }
    }

    /// With `[[set]]`s, the tier's resolution a leaf read sends (see
    /// [`PromRead::Buckets`]); `None` without.
    fn resolution(&self, tiers: &TiersConfig, tier: usize) -> Option<u64> {
        (!self.tiers().sets.is_empty()).then(|| tiers.tiers[tier].resolution.secs())
    }

    /// Fans `read` out to every partition's owner within `budget` values, and waits.
    fn fan_out(&self, read: PromRead, budget: u64) -> Result<Vec<PromAnswer>> {
        let answers = self.runtime.block_on(fanout::fan_out(
            &self.node,
            PartialRead::Promql(read),
            None,
            budget,
            &self.options,
        ))?;
        (answers.into_iter())
            .map(|answer| match answer {
                PartialAnswer::Promql(answer) => Ok(answer),
                _ => Err(Error::Cluster(
                    "an owner answered another kind of read".into(),
                )),
            })
            .collect()
    }

    /// The keys of `series`, as this source named them.
    fn keys_of(&self, series: &[Selected]) -> Result<Vec<String>> {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        (series.iter())
            .map(|s| {
                keys.get(s.id as usize).cloned().ok_or_else(|| {
                    Error::InvalidQuery(format!("series {} was not selected here", s.id))
                })
            })
            .collect()
    }
}

fn other_answer() -> Error {
    Error::Cluster("an owner answered another PromQL read than asked".into())
}

impl Source for ClusterSource {
    fn tiers(&self) -> &TiersConfig {
        self.node.tiers()
    }

    /// With `[[set]]`s, the tiers of the selected series' sets as one engine chooses them
    /// ([`promql::common_tiers`]), from the sets their owners reported.
    fn tiers_of(&self, series: &[Selected]) -> Result<std::borrow::Cow<'_, TiersConfig>> {
        use std::borrow::Cow;
        let whole = self.tiers();
        if whole.sets.is_empty() {
            return Ok(Cow::Borrowed(whole));
        }
        let mut sets: Vec<usize> = {
            let known = self.sets.lock().unwrap_or_else(|e| e.into_inner());
            (series.iter())
                .map(|s| known.get(s.id as usize).copied().unwrap_or(0))
                .collect()
        };
        sets.sort_unstable();
        sets.dedup();
        match sets.as_slice() {
            [] => Ok(Cow::Owned(whole.set_view(0))),
            &[set] => Ok(Cow::Owned(whole.set_view(set))),
            sets => Ok(Cow::Owned(promql::common_tiers(whole, sets, self.now())?)),
        }
    }

    fn now(&self) -> Timestamp {
        self.node.now()
    }

    /// Each owner lists its matching keys, its scans charged to what the request may still
    /// read; the asker charges their reports, labels them and sorts them by labels.
    fn select(&self, sets: &[MatcherSet], budget: &ReadBudget) -> Result<Vec<Selected>> {
        let wire = (sets.iter())
            .map(|set| set.iter().map(WireMatcher::of).collect())
            .collect();
        let owner_budget = partial::owner_budget(budget).limit();
        let mut found: Vec<(String, bool, bool, usize)> = Vec::new();
        let read = match self.tiers().sets.is_empty() {
            true => PromRead::Select(wire),
            false => PromRead::SelectSets(wire),
        };
        for answer in self.fan_out(read, owner_budget)? {
            match answer {
                PromAnswer::Selected(charged) => found.extend(
                    (charged.take(budget)?.into_iter())
                        .map(|(key, counter, distribution)| (key, counter, distribution, 0)),
                ),
                PromAnswer::SelectedSets(charged) => found.extend(charged.take(budget)?),
                _ => return Err(other_answer()),
            }
        }
        let mut labelled = (found.into_iter())
            .map(|(key, counter, distribution, set)| {
                let labels = key_labels(&SeriesKey::parse(&key)?.view());
                Ok((labels, key, counter, distribution, set))
            })
            .collect::<Result<Vec<_>>>()?;
        labelled.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        // Partitions hold disjoint series; a key listed twice (an owner answered for a
        // partition twice after a retry) is one series.
        labelled.dedup_by(|a, b| a.1 == b.1);
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let mut key_sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        key_sets.resize(keys.len(), 0);
        Ok((labelled.into_iter())
            .map(|(labels, key, counter, distribution, set)| {
                keys.push(key);
                key_sets.push(set);
                Selected {
                    id: (keys.len() - 1) as u32,
                    labels,
                    counter,
                    distribution,
                }
            })
            .collect())
    }

    /// Charged here as one engine charges (series times buckets, before anything is read);
    /// the owners read without a budget of their own.
    fn buckets(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Vec<Vec<Bucket>>> {
        let tiers = self.tiers_of(series)?;
        let points = promql::charge_buckets(&tiers, series.len(), tier, from, to, budget)?;
        if series.is_empty() || points == 0 {
            return Ok(vec![Vec::new(); series.len()]);
        }
        let read = PromRead::Buckets {
            keys: self.keys_of(series)?,
            tier: tiers.tiers[tier].name.clone(),
            from,
            to,
            resolution: self.resolution(&tiers, tier),
        };
        let mut out = vec![vec![Bucket::EMPTY; points]; series.len()];
        let mut seen = BTreeSet::new();
        for answer in self.fan_out(read, u64::MAX)? {
            let PromAnswer::Buckets(parts) = answer else {
                return Err(other_answer());
            };
            for part in parts {
                let slot = out.get_mut(part.index as usize).ok_or_else(other_answer)?;
                if part.buckets.len() != points || !seen.insert(part.index) {
                    return Err(Error::Cluster(format!(
                        "an owner answered {} buckets of a series where {points} were asked",
                        part.buckets.len()
                    )));
                }
                *slot = part.into_buckets()?;
            }
        }
        Ok(out)
    }

    /// Charged here as one engine charges (series times buckets, before anything is read);
    /// each owner reads the histograms of its distributions without a budget of their own,
    /// and each series is visited as its owner's answer arrives (a series no owner holds,
    /// with no histogram).
    fn visit_histograms(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
        visit: &HistogramVisit<'_>,
    ) -> Result<()> {
        let tiers = self.tiers_of(series)?;
        let points = promql::charge_buckets(&tiers, series.len(), tier, from, to, budget)?;
        if series.is_empty() {
            return Ok(());
        }
        let read = PromRead::Histograms {
            keys: self.keys_of(series)?,
            tier: tiers.tiers[tier].name.clone(),
            from,
            to,
            resolution: self.resolution(&tiers, tier),
        };
        let mut seen = BTreeSet::new();
        for answer in self.fan_out(read, u64::MAX)? {
            let PromAnswer::Histograms(parts) = answer else {
                return Err(other_answer());
            };
            for part in parts {
                let index = part.index as usize;
                let histograms = part.decode()?;
                if index >= series.len() || histograms.len() != points || !seen.insert(index) {
                    return Err(Error::Cluster(format!(
                        "an owner answered {} histograms of a series where {points} were asked",
                        histograms.len()
                    )));
                }
                visit(index, &histograms);
            }
        }
        let none = vec![None; points];
        (0..series.len())
            .filter(|i| !seen.contains(i))
            .for_each(|i| visit(i, &none));
        Ok(())
    }

    /// Each owner reads its series' points within what the request may still read; `None`
    /// when any owner's raw tier does not hold the range.
    fn raw(
        &self,
        series: &[Selected],
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Option<Vec<RawPoints>>> {
        let Some(spec) = &self.tiers().raw else {
            return Ok(None);
        };
        if spec.window_start(self.now()) > from {
            return Ok(None);
        }
        let read = PromRead::Raw {
            keys: self.keys_of(series)?,
            from,
            to,
        };
        let owner_budget = partial::owner_budget(budget).limit();
        let mut out = vec![Vec::new(); series.len()];
        for answer in self.fan_out(read, owner_budget)? {
            let PromAnswer::Raw(charged) = answer else {
                return Err(other_answer());
            };
            let Some(parts) = charged.take(budget)? else {
                return Ok(None);
            };
            for part in parts {
                let slot = out.get_mut(part.index as usize).ok_or_else(other_answer)?;
                *slot = part.points.into_iter().map(|(t, v)| (t, v.0)).collect();
            }
        }
        Ok(Some(out))
    }
}
