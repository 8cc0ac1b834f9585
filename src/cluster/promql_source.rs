//! A cluster node's [`Store`]: every primitive fans out to the partitions' owners
//! ([`super::fanout::fan_out`]). The node evaluates a PromQL query or a Graphite render
//! itself, as a single node does, through the same [`crate::promql::StoredSource`] or
//! [`crate::render::StoredSource`]; only the store's leaf reads travel: the
//! series a filter keeps (each owner lists the keys of its partitions' series that match,
//! its registry scans charged, with their kinds and sets), then their buckets, a
//! distribution's histograms (per bucket) or raw points (each owner reads the keys of its
//! own partitions, on the tier and range the asker chose). The asker charges the request's
//! budget as one engine would (the owners' scans and raw points as they report them; the
//! buckets are charged above the store, before anything is read), so `--max-read-values`,
//! `--max-query-series` and `--query-timeout` hold as on a single node. A read taken from a
//! replica behind the log is recorded in the request's
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
use super::promql_read::{self, PromAnswer, PromRead};
use crate::bucket::Bucket;
use crate::config::{TierSpec, TiersConfig};
use crate::counter::SeriesKind;
use crate::error::{Error, Result};
use crate::read::aggregate::Fold;
use crate::read::budget::ReadBudget;
use crate::read::query::Display;
use crate::read::store::{
    bucket_span, Found, HistogramVisit, RawPoints, Selection, SeriesFilter, SeriesRef, Store,
};
use crate::registry::SeriesKey;
use crate::server::backend::ReadOptions;
use crate::time::Timestamp;

/// Where a [`ClusterStore`]'s leaf reads go: the partitions' owners, and the tiers and clock
/// of the asking node.
pub(crate) trait Owners: Send + Sync {
    /// The asking node's tiers.
    fn tiers(&self) -> &TiersConfig;

    /// The asking node's clock.
    fn now(&self) -> Timestamp;

    /// Every partition's owner's answer to `read`, each read within `budget` values.
    ///
    /// # Errors
    /// An owner that cannot be reached or refuses.
    fn ask(&self, read: PromRead, budget: u64) -> Result<Vec<PromAnswer>>;
}

/// A cluster node's owners, asked over the transport ([`fanout::fan_out`]).
struct NodeOwners {
    node: Arc<Node>,
    /// The runtime the fan-outs run on, from the request's handler: the evaluator and
    /// render call the store synchronously, on the blocking pool. Those threads are not the
    /// runtime's workers and run no async task, so blocking one on a fan-out starves no
    /// task, and `Handle::block_on` is allowed there (it panics only on a thread already
    /// driving a runtime). The fan-out itself runs on the runtime's workers; the asker's own
    /// partitions are read on another blocking-pool thread.
    runtime: tokio::runtime::Handle,
    /// How the request asks to be read, and where the fan-outs record a lag.
    options: ReadOptions,
}

impl Owners for NodeOwners {
    fn tiers(&self) -> &TiersConfig {
        self.node.tiers()
    }

    fn now(&self) -> Timestamp {
        self.node.now()
    }

    fn ask(&self, read: PromRead, budget: u64) -> Result<Vec<PromAnswer>> {
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
}

/// A cluster node's [`Store`]: every read fans out to the partitions' owners.
pub(crate) struct ClusterStore<'a> {
    owners: Box<dyn Owners + 'a>,
    /// The canonical key of each series selected so far: a [`Found`]'s id is its index.
    keys: Mutex<Vec<String>>,
}

impl<'a> ClusterStore<'a> {
    /// A store reading through `node`'s owners, fanning out on `runtime`.
    pub(crate) fn new(
        node: Arc<Node>,
        runtime: tokio::runtime::Handle,
        options: ReadOptions,
    ) -> ClusterStore<'static> {
        ClusterStore::of(Box::new(NodeOwners {
            node,
            runtime,
            options,
        }))
    }

    /// A store reading through `owners`.
    pub(crate) fn of(owners: Box<dyn Owners + 'a>) -> ClusterStore<'a> {
        ClusterStore {
            owners,
            keys: Mutex::new(Vec::new()),
        }
    }

    /// With `[[set]]`s, the tier's resolution a leaf read sends (see
    /// [`PromRead::Buckets`]); `None` without.
    fn resolution(&self, tier: &TierSpec) -> Option<u64> {
        (!self.tiers().sets.is_empty()).then(|| tier.resolution.secs())
    }

    /// Fans `read` out to every partition's owner within `budget` values, and waits.
    fn fan_out(&self, read: PromRead, budget: u64) -> Result<Vec<PromAnswer>> {
        self.owners.ask(read, budget)
    }

    /// The keys of `series`, as this store named them.
    fn keys_of(&self, series: &[SeriesRef]) -> Result<Vec<String>> {
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

/// The kind a selection's answer reports.
fn kind(counter: bool, distribution: bool) -> SeriesKind {
    match (counter, distribution) {
        (true, _) => SeriesKind::Counter,
        (false, true) => SeriesKind::Distribution,
        (false, false) => SeriesKind::Gauge,
    }
}

impl Store for ClusterStore<'_> {
    fn tiers(&self) -> &TiersConfig {
        self.owners.tiers()
    }

    fn now(&self) -> Timestamp {
        self.owners.now()
    }

    /// Each owner lists its matching keys, its scans charged to what the request may still
    /// read; the asker charges their reports and names each key once.
    fn select(&self, filter: &dyn SeriesFilter, budget: &ReadBudget) -> Result<Vec<Found>> {
        let owner_budget = partial::owner_budget(budget).limit();
        let mut found: Vec<(String, bool, bool, usize)> = Vec::new();
        let read = match (filter.selection(), self.tiers().sets.is_empty()) {
            (Selection::Matchers(wire), true) => PromRead::Select(wire),
            (Selection::Matchers(wire), false) => PromRead::SelectSets(wire),
            (selection, _) => PromRead::SelectWhere(selection),
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
        // Partitions hold disjoint series; a key listed twice (an owner answered for a
        // partition twice after a retry) is one series.
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        found.dedup_by(|a, b| a.0 == b.0);
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        (found.into_iter())
            .map(|(text, counter, distribution, set)| {
                let key = SeriesKey::parse(&text)?;
                keys.push(text);
                Ok(Found {
                    id: (keys.len() - 1) as u32,
                    key,
                    kind: kind(counter, distribution),
                    set,
                })
            })
            .collect()
    }

    /// The owners read without a budget of their own: the read was charged before.
    fn buckets(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        (from, to): (Timestamp, Timestamp),
        window: Option<Timestamp>,
    ) -> Result<Vec<Vec<Bucket>>> {
        let (_, points) = bucket_span(tier, from, to);
        if series.is_empty() || points == 0 {
            return Ok(vec![Vec::new(); series.len()]);
        }
        let read = PromRead::Buckets {
            keys: self.keys_of(series)?,
            tier: tier.name.clone(),
            from,
            to,
            resolution: self.resolution(tier),
            window,
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

    /// Each owner reads the histograms of its distributions without a budget of their own
    /// (the read was charged before), and each series is visited as its owner's answer
    /// arrives (a series no owner holds, with no histogram).
    fn visit_histograms(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        (from, to): (Timestamp, Timestamp),
        window: Option<Timestamp>,
        visit: &HistogramVisit<'_>,
    ) -> Result<()> {
        if series.is_empty() {
            return Ok(());
        }
        let (_, points) = bucket_span(tier, from, to);
        let read = PromRead::Histograms {
            keys: self.keys_of(series)?,
            tier: tier.name.clone(),
            from,
            to,
            resolution: self.resolution(tier),
            window,
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

    /// Each owner folds its series on the tier and range (through its render cache when a
    /// window is given), without a budget of its own (the read was charged before); the
    /// parts, of disjoint series, merge exactly. `None` when an owner has no one-pass fold
    /// of its series.
    fn fold(
        &self,
        series: &[SeriesRef],
        tier: &TierSpec,
        (from, to): (Timestamp, Timestamp),
        window: Option<Timestamp>,
        display: Display,
    ) -> Result<Option<Vec<Fold>>> {
        let (_, points) = bucket_span(tier, from, to);
        if series.is_empty() || points == 0 {
            return Ok(Some(Vec::new()));
        }
        let read = PromRead::Fold {
            keys: self.keys_of(series)?,
            tier: tier.name.clone(),
            from,
            to,
            resolution: self.resolution(tier),
            window,
            display,
        };
        let mut merged = Vec::new();
        for answer in self.fan_out(read, u64::MAX)? {
            let PromAnswer::Fold(folds) = answer else {
                return Err(other_answer());
            };
            let Some(folds) = folds else {
                return Ok(None);
            };
            promql_read::merge_folds(&mut merged, folds)?;
        }
        if merged.is_empty() {
            merged = vec![Fold::EMPTY; points];
        }
        if merged.len() != points {
            return Err(Error::Cluster(format!(
                "the owners folded {} points where {points} were asked",
                merged.len()
            )));
        }
        Ok(Some(merged))
    }

    /// Each owner reads its series' points within what the request may still read; `None`
    /// when any owner's raw tier does not hold the range.
    fn raw(
        &self,
        series: &[SeriesRef],
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Option<Vec<RawPoints>>> {
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
