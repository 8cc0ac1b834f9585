//! A read on a cluster node: which owner answers for each partition, the request each is
//! sent (one per owner node, for all the partitions it answers for), the answer an owner
//! gives over its local partitions, and the merge.
//!
//! The asking node answers its own partitions in process and asks the other owners over
//! HTTP ([`super::peer`]), all in parallel. The partitions of an owner that fails or no
//! longer holds them are asked of another holder, up to [`READ_ATTEMPTS`] times in all; then
//! the read fails with 503 naming the last failure. `consistency=strong` makes each owner wait (up to
//! [`STRONG_WAIT`]) until it has applied the partition's last log sequence as of the read's
//! start, so a read sees every write acknowledged before it; an owner that applies nothing
//! of a partition for [`STRONG_STALL`] while another live holder has what the read needs
//! gives up, and the read asks that holder. A default read does not wait: it
//! asks the log for each partition's last sequence beside the owners, and each owner says how
//! far it had applied, so the answer says which partitions were read from a replica behind
//! the log ([`crate::server::read_report`]) rather than pass a short count for a whole one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::node::Node;
use super::ownership::{ClusterView, NodeStatus};
use super::partial::{self, Charged};
use super::peer::{self, PARTIAL_PATH};
use super::promql_read::{self, PromAnswer, PromRead};
use crate::error::Error;
use crate::error::Result;
use crate::read::aggregate::{AggregatePlan, AggregateQuery, AggregateResult, PartialAggregate};
use crate::read::budget::ReadBudget;
use crate::read::distribution::{
    DistributionPlan, DistributionQuery, DistributionResult, DistributionTarget,
    PartialDistribution,
};
use crate::read::query::{Query, QueryResult};
use crate::registry::Selector;
use crate::render::tags::{TagPart, TagRead};
use crate::render::FindNode;
use crate::server::backend::ReadOptions;
use crate::server::read_report::{Behind, PartitionLag};
use crate::time::Span;

/// How long an owner waits, for all the partitions of one request together, to have applied
/// what a strong read asks for (below [`PEER_TIMEOUT`]).
pub(crate) const STRONG_WAIT: Duration = Duration::from_secs(10);

/// How long an owner waiting for a strong read gives up early on a partition it applies
/// nothing of, once another live holder reports what the read needs: the asker then asks
/// that holder rather than wait out [`STRONG_WAIT`] on a stalled replica.
const STRONG_STALL: Duration = Duration::from_secs(2);

/// How long the asker waits for an owner's answer.
pub(crate) const PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// What an owner is asked: a read over some of its partitions.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PartialRequest {
    /// The partitions to answer for.
    pub partitions: Vec<u32>,
    /// Per partition, the log sequence the owner must have applied first (strong reads).
    pub applied_at_least: BTreeMap<u32, u64>,
    /// Values the owner's part may read.
    pub budget: u64,
    /// The read.
    pub read: PartialRead,
}

/// The reads that fan out.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum PartialRead {
    /// One series, its tier pinned by the asker.
    Query(Query),
    /// One series with `[[set]]`s: per set, the tier the asker pins it to for a series of
    /// that set ([`partial::pinned_in_sets`]).
    QueryInSets {
        /// The query as asked.
        query: Query,
        /// Per set, the pinned tier.
        pinned: Vec<Option<crate::read::tier_choice::TierChoice>>,
    },
    /// An aggregate on the asker's plan.
    Aggregate(AggregatePlan),
    /// The tier sets of the series a selector picks (`[[set]]`s), the scans charged.
    SetsSelected(Selector),
    /// An aggregate with `[[set]]`s: per set, the asker's plan for that set's series.
    AggregateSets(Vec<(usize, AggregatePlan)>),
    /// The tier set of one series, from an owner of its partition.
    SetOfSeries(String),
    /// A distribution read with `[[set]]`s: per set, the asker's plan for its series.
    DistributionSets(Vec<(usize, DistributionPlan)>),
    /// A distribution read (quantiles, `hist`) on the asker's plan.
    Distribution(DistributionPlan),
    /// The series listing.
    Series(Selector),
    /// Graphite's `/metrics/find`.
    Find(String),
    /// A leaf read of a PromQL evaluation ([`super::promql_read`]).
    Promql(PromRead),
    /// A question of graphite-web's tag API.
    Tags(TagRead),
}

/// An owner's answer, of the read's kind.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum PartialAnswer {
    /// The series' points, and their width (which the answer's JSON leaves out).
    Query(QueryResult, Span),
    /// Partial groups.
    Aggregate(Charged<PartialAggregate>),
    /// The tier sets selected, each once, in set order.
    SetsSelected(Charged<Vec<usize>>),
    /// Partial groups per set, in the order of the plans.
    AggregateSets(Charged<Vec<PartialAggregate>>),
    /// Partial distribution groups per set, in the order of the plans.
    DistributionSets(Charged<Vec<PartialDistribution>>),
    /// Partial groups, their histograms merged per point.
    Distribution(Charged<PartialDistribution>),
    /// Keys, sorted.
    Series(Vec<String>),
    /// Find nodes.
    Find(Charged<Vec<FindNode>>),
    /// A PromQL leaf read's part.
    Promql(PromAnswer),
    /// The owner's part of a tag API answer.
    Tags(Charged<TagPart>),
}

/// An owner's answer and, per partition it answered for, the last log sequence it had
/// applied when it read.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct OwnerAnswer {
    /// Per partition, the applied sequence the answer includes.
    pub applied: BTreeMap<u32, u64>,
    /// The answer.
    pub answer: PartialAnswer,
}

/// Answers `request` over this node's own stores of the partitions asked; waits first for
/// what a strong read needs applied.
///
/// # Errors
/// [`Error::Cluster`] when a partition is not applied here (any more) or did not catch up
/// in time; the read's own errors.
pub(crate) async fn answer_locally(
    node: &Arc<Node>,
    request: PartialRequest,
) -> Result<OwnerAnswer> {
    let mut engines = Vec::with_capacity(request.partitions.len());
    // One deadline for every partition's wait, below the asker's own timeout.
    let deadline = tokio::time::Instant::now() + STRONG_WAIT;
    for &partition in &request.partitions {
        let engine = node.local(partition).ok_or_else(|| {
            Error::Cluster(format!(
                "node {} does not hold partition {partition}",
                node.name()
            ))
        })?;
        if let Some(&needed) = request.applied_at_least.get(&partition) {
            let mut moved = (engine.applied(), tokio::time::Instant::now());
            while engine.applied() < needed {
                let now = tokio::time::Instant::now();
                if engine.applied() != moved.0 {
                    moved = (engine.applied(), now);
                }
                if now > deadline {
                    return Err(Error::Cluster(format!(
                        "node {} applied partition {partition} up to {} of {needed} within {STRONG_WAIT:?}",
                        node.name(),
                        engine.applied()
                    )));
                }
                if now - moved.1 > STRONG_STALL {
                    if let Some(holder) = holder_with(node, partition, needed) {
                        return Err(Error::Cluster(format!(
                            "node {} applied nothing of partition {partition} for {STRONG_STALL:?} \
                             (up to {} of {needed}); node {holder} has it",
                            node.name(),
                            engine.applied()
                        )));
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        engines.push(engine);
    }
    // Taken before the read: a group applied while it runs may or may not be in it, so the
    // answer claims only what it surely holds.
    let applied = (request.partitions.iter())
        .zip(&engines)
        .map(|(&partition, engine)| (partition, engine.applied()))
        .collect();
    let all = node.partitions();
    let cache = node.render_cache();
    let answer = tokio::task::spawn_blocking(move || {
        let readers: Vec<_> = engines.iter().map(|e| e.reader()).collect();
        let budget = ReadBudget::new(request.budget);
        Ok(match request.read {
            PartialRead::Query(query) => {
                let reader = readers.first().ok_or_else(|| {
                    Error::InvalidQuery("a one-series read names one partition".into())
                })?;
                let result = reader.query(&query)?;
                let step = result.step;
                PartialAnswer::Query(result, step)
            }
            PartialRead::QueryInSets { query, pinned } => {
                let reader = readers.first().ok_or_else(|| {
                    Error::InvalidQuery("a one-series read names one partition".into())
                })?;
                let result = reader.query(&partial::pinned_for_series(reader, query, &pinned)?)?;
                let step = result.step;
                PartialAnswer::Query(result, step)
            }
            PartialRead::Aggregate(plan) => PartialAnswer::Aggregate(Charged::new(
                partial::aggregate_over(&readers, &plan, &budget)?,
                &budget,
            )),
            PartialRead::SetsSelected(selector) => PartialAnswer::SetsSelected(Charged::new(
                partial::sets_over(&readers, &selector, &budget)?,
                &budget,
            )),
            PartialRead::AggregateSets(plans) => PartialAnswer::AggregateSets(Charged::new(
                partial::per_set_over(&readers, &plans, |of_set, plan| {
                    partial::aggregate_over(of_set, plan, &budget)
                })?,
                &budget,
            )),
            PartialRead::SetOfSeries(key) => {
                let reader = readers.first().ok_or_else(|| {
                    Error::InvalidQuery("a one-series read names one partition".into())
                })?;
                let set = partial::set_of_series(reader, &key)?;
                PartialAnswer::SetsSelected(Charged::new(set, &budget))
            }
            PartialRead::DistributionSets(plans) => PartialAnswer::DistributionSets(Charged::new(
                partial::per_set_over(&readers, &plans, |of_set, plan| {
                    partial::distribution_over(of_set, plan, &budget)
                })?,
                &budget,
            )),
            PartialRead::Distribution(plan) => PartialAnswer::Distribution(Charged::new(
                partial::distribution_over(&readers, &plan, &budget)?,
                &budget,
            )),
            PartialRead::Series(selector) => {
                PartialAnswer::Series(partial::series_over(&readers, &selector))
            }
            PartialRead::Find(query) => PartialAnswer::Find(Charged::new(
                partial::find_over(&readers, &query, &budget)?,
                &budget,
            )),
            PartialRead::Tags(read) => PartialAnswer::Tags(Charged::new(
                partial::tags_over(&readers, &read, &budget)?,
                &budget,
            )),
            PartialRead::Promql(read) => PartialAnswer::Promql(promql_read::answer_over(
                (&readers, &cache),
                &request.partitions,
                all,
                read,
                &budget,
            )?),
        })
    })
    .await
    .map_err(|e| Error::Poisoned(format!("read task failed: {e}")))??;
    Ok(OwnerAnswer { applied, answer })
}

/// Times a read asks again, elsewhere, for the partitions whose owner failed.
const READ_ATTEMPTS: usize = 3;

/// Pause before asking again: long enough for a view that lagged to catch up.
const READ_RETRY_PAUSE: Duration = Duration::from_millis(250);

/// Another live holder of `partition` that reports having applied it up to `needed`, if any.
fn holder_with(node: &Node, partition: u32, needed: u64) -> Option<String> {
    let view = node.view();
    let owners = view.partitions.get(partition as usize)?;
    owners
        .replicas
        .iter()
        .flatten()
        .filter(|lease| lease.alive && lease.node != node.name())
        .filter_map(|lease| view.node(&lease.node))
        .find(|n| n.alive && n.applied.get(&partition).is_some_and(|&seq| seq >= needed))
        .map(|n| n.name.clone())
}

/// Where a read of `partitions` goes: per owner node (by name), its HTTP address and the
/// partitions it answers for. For each partition, a live lease holder not in `excluded`:
/// this node when it has the partition open and applied as far as any other holder
/// reports, else the holder that applied furthest.
///
/// # Errors
/// [`Error::Cluster`] naming a partition no live node (outside `excluded`) serves.
fn route(
    node: &Node,
    partitions: &[u32],
    excluded: &BTreeSet<String>,
) -> Result<BTreeMap<String, (String, Vec<u32>)>> {
    let view = node.view();
    let mut routes: BTreeMap<String, (String, Vec<u32>)> = BTreeMap::new();
    for &partition in partitions {
        let (owner, _) = best_holder(node, &view, partition, excluded).ok_or_else(|| {
            Error::Cluster(format!(
                "no live node serves partition {partition} yet; try again shortly"
            ))
        })?;
        routes
            .entry(owner.name.clone())
            .or_insert_with(|| (owner.http_addr.clone(), Vec::new()))
            .1
            .push(partition);
    }
    Ok(routes)
}

/// The live lease holder of `partition` (outside `excluded`) a read goes to, with the
/// sequence it applied: this node when it has the partition open and applied as far as any
/// other holder reports (its own store's sequence), else the holder that applied furthest
/// (as its heartbeat last said).
fn best_holder<'v>(
    node: &Node,
    view: &'v ClusterView,
    partition: u32,
    excluded: &BTreeSet<String>,
) -> Option<(&'v NodeStatus, u64)> {
    let applied = |n: &NodeStatus| n.applied.get(&partition).copied().unwrap_or(0);
    let holders = view
        .partitions
        .get(partition as usize)
        .into_iter()
        .flat_map(|owners| owners.replicas.iter().flatten())
        .filter(|lease| lease.alive && !excluded.contains(&lease.node))
        .filter_map(|lease| view.node(&lease.node))
        .filter(|n| n.alive);
    let mut best: Option<(&NodeStatus, u64)> = None;
    let mut mine = None;
    for holder in holders {
        if holder.name == node.name() {
            // A holder that has not opened the partition yet (just started) cannot answer.
            if let Some(engine) = node.local(partition) {
                mine = Some((holder, engine.applied()));
            }
        } else if best.is_none_or(|(_, b)| applied(holder) > b) {
            best = Some((holder, applied(holder)));
        }
    }
    // This node answers in process unless another holder applied further (this one is
    // catching up after a restart): reads go to a caught-up copy.
    match (mine, best) {
        (Some(here), Some((_, there))) if here.1 >= there => Some(here),
        (Some(here), None) => Some(here),
        (_, best) => best,
    }
}

/// Sends `read` to one owner of each partition (or of `only`), in parallel, and returns
/// their answers. `options.strong`: each owner first applies what the log held when the read
/// began. Otherwise the log's last sequences are asked beside the owners, and the partitions
/// read from a replica behind them are recorded in `options.report`. The partitions of an
/// owner that fails (unreachable, or no longer applying them) are asked of another holder,
/// up to [`READ_ATTEMPTS`] times in all.
///
/// # Errors
/// [`Error::Cluster`] when no owner of some partition answers (the last failure's message
/// included); an owner's 4xx comes back as [`Error::InvalidQuery`] with its message.
pub(crate) async fn fan_out(
    node: &Arc<Node>,
    read: PartialRead,
    only: Option<u32>,
    budget: u64,
    options: &ReadOptions,
) -> Result<Vec<PartialAnswer>> {
    let partitions: Vec<u32> = match only {
        Some(p) => vec![p],
        None => (0..node.partitions()).collect(),
    };
    let token = options.token.as_deref();
    if options.strong {
        let applied_at_least = node.log().last_sequences(&partitions).await?;
        let answers = ask_owners(node, read, partitions, &applied_at_least, budget, token).await?;
        return Ok(answers.into_iter().map(|a| a.answer).collect());
    }
    let no_wait = BTreeMap::new();
    let (log_tail, answers) = tokio::join!(
        node.log().last_sequences(&partitions),
        ask_owners(node, read, partitions.clone(), &no_wait, budget, token),
    );
    let answers = answers?;
    options.report.record(behind_the_log(&answers, log_tail));
    Ok(answers.into_iter().map(|a| a.answer).collect())
}

/// The partitions `answers` read from a replica that had not applied the log's last
/// sequence (`log_tail`, or why the log could not be asked).
fn behind_the_log(answers: &[OwnerAnswer], log_tail: Result<BTreeMap<u32, u64>>) -> Behind {
    let log_tail = match log_tail {
        Ok(tail) => tail,
        Err(e) => {
            return Behind {
                partitions: Vec::new(),
                unknown: Some(format!("the log's last sequences could not be read: {e}")),
            }
        }
    };
    let mut partitions: Vec<PartitionLag> = answers
        .iter()
        .flat_map(|answer| &answer.applied)
        .filter_map(|(&partition, &applied)| {
            let log = log_tail.get(&partition).copied().unwrap_or(0);
            (applied < log).then_some(PartitionLag {
                partition,
                applied,
                log,
            })
        })
        .collect();
    partitions.sort_by_key(|lag| lag.partition);
    Behind {
        partitions,
        unknown: None,
    }
}

/// Asks one owner of each of `partitions` for `read`, in parallel, each first applying what
/// `applied_at_least` names; the partitions of an owner that fails are asked of another
/// holder, up to [`READ_ATTEMPTS`] times in all.
async fn ask_owners(
    node: &Arc<Node>,
    read: PartialRead,
    mut pending: Vec<u32>,
    applied_at_least: &BTreeMap<u32, u64>,
    budget: u64,
    token: Option<&str>,
) -> Result<Vec<OwnerAnswer>> {
    let mut excluded = BTreeSet::new();
    let mut answers = Vec::new();
    for attempt in 1..=READ_ATTEMPTS {
        let routes = route(node, &pending, &excluded)?;
        let asks = routes.into_iter().map(|(owner, (addr, partitions))| {
            let request = PartialRequest {
                applied_at_least: partitions
                    .iter()
                    .filter_map(|p| applied_at_least.get(p).map(|&s| (*p, s)))
                    .collect(),
                partitions,
                budget,
                read: read.clone(),
            };
            let node = Arc::clone(node);
            async move {
                let partitions = request.partitions.clone();
                let answer = ask_owner(&node, &owner, &addr, request, token).await;
                (owner, partitions, answer)
            }
        });
        pending.clear();
        let mut failure = None;
        for (owner, partitions, answer) in futures_util::future::join_all(asks).await {
            match answer {
                Ok(answer) => answers.push(answer),
                Err(e @ Error::Cluster(_)) if attempt < READ_ATTEMPTS => {
                    tracing::debug!(owner, error = %e, "an owner failed a read; asking another");
                    excluded.insert(owner);
                    pending.extend(partitions);
                    failure = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        if pending.is_empty() {
            return Ok(answers);
        }
        if let Some(e) = failure {
            tracing::debug!(error = %e, partitions = ?pending, "asking again");
        }
        tokio::time::sleep(READ_RETRY_PAUSE).await;
    }
    unreachable!("the last attempt returns")
}

/// One owner's answer: in process when the owner is this node, else over HTTP.
async fn ask_owner(
    node: &Arc<Node>,
    owner: &str,
    addr: &str,
    request: PartialRequest,
    token: Option<&str>,
) -> Result<OwnerAnswer> {
    if owner == node.name() {
        return answer_locally(node, request).await;
    }
    match peer::ask::<OwnerAnswer>(
        addr,
        PARTIAL_PATH,
        &request,
        token,
        node.peer_tls(),
        PEER_TIMEOUT,
    )
    .await?
    {
        Ok(answer) => Ok(answer),
        // A one-series read of a series the owner does not have: the asker answers 404 too,
        // as a single node does. (Another 404, from a peer that is no cluster node, is the
        // peer's failure, retried on another owner.)
        Err(refusal)
            if refusal.status == hyper::StatusCode::NOT_FOUND
                && refusal.message.starts_with("unknown series") =>
        {
            match request.read {
                PartialRead::Query(query) => Err(Error::UnknownSeries(query.series)),
                PartialRead::Distribution(plan) => match plan.series() {
                    Some(series) => Err(Error::UnknownSeries(series.to_string())),
                    None => Err(Error::InvalidQuery(refusal.message)),
                },
                _ => Err(Error::InvalidQuery(refusal.message)),
            }
        }
        Err(refusal) if refusal.status == hyper::StatusCode::NOT_FOUND => Err(Error::Cluster(
            format!("node {owner} ({addr}) answered 404: {}", refusal.message),
        )),
        Err(refusal) if refusal.status.is_client_error() => {
            Err(Error::InvalidQuery(refusal.message))
        }
        Err(refusal) => Err(Error::Cluster(format!(
            "node {owner} ({addr}) answered {}: {}",
            refusal.status, refusal.message
        ))),
    }
}

/// Each owner's part, as `pick` takes it out of its answer; an answer of another kind than
/// the read's (a peer of another version) is an error.
fn parts<T>(
    answers: Vec<PartialAnswer>,
    mut pick: impl FnMut(PartialAnswer) -> Option<Result<T>>,
) -> Result<Vec<T>> {
    answers
        .into_iter()
        .map(|answer| pick(answer).unwrap_or_else(|| Err(other_kind())))
        .collect()
}

fn other_kind() -> Error {
    Error::Cluster("an owner answered another kind of read".into())
}

/// A one-series query, answered by an owner of the series' partition.
///
/// # Errors
/// As [`fan_out`].
pub(crate) async fn query(
    node: &Arc<Node>,
    query: Query,
    options: &ReadOptions,
) -> Result<QueryResult> {
    let read = match node.tiers().sets.is_empty() {
        true => PartialRead::Query(partial::pinned_query(node.tiers(), node.now(), &query)?),
        false => PartialRead::QueryInSets {
            pinned: partial::pinned_in_sets(node.tiers(), node.now(), &query),
            query: query.clone(),
        },
    };
    let answers = ask_series_owner(node, &query.series, read, u64::MAX, options).await?;
    let mut results = parts(answers, |answer| match answer {
        PartialAnswer::Query(result, step) => Some(Ok(QueryResult { step, ..result })),
        _ => None,
    })?;
    results.pop().ok_or_else(other_kind)
}

/// Sends `read`, a read of the one series `series`, to an owner of the series' partition.
///
/// # Errors
/// As [`fan_out`]; for a series the owner does not have, [`Error::UnknownSeries`], or
/// [`Error::UnknownSeriesAsYet`] when a default read's replica was behind the log (see
/// [`unknown_unless_behind`]).
async fn ask_series_owner(
    node: &Arc<Node>,
    series: &str,
    read: PartialRead,
    budget: u64,
    options: &ReadOptions,
) -> Result<Vec<PartialAnswer>> {
    let key = crate::registry::SeriesKey::parse(series)?;
    let partition = super::partition_of(key.as_str(), node.partitions());
    // A default read's 404 compares this, taken before the read, with the log's end after
    // it, so a race between them errs towards saying an unknown series may be behind. A
    // strong read has applied the log first and needs neither.
    let applied_before = (!options.strong).then(|| {
        best_holder(node, &node.view(), partition, &BTreeSet::new())
            .map_or(0, |(_, applied)| applied)
    });
    let asked = fan_out(node, read, Some(partition), budget, options).await;
    match (asked, applied_before) {
        (Err(Error::UnknownSeries(series)), Some(applied)) => {
            Err(unknown_unless_behind(node, series, partition, applied).await)
        }
        (asked, _) => asked,
    }
}

/// What a default read answers for `series`, which the owner of `partition` it asked does
/// not have: [`Error::UnknownSeries`], unless the partition's most caught-up live replica
/// had applied (`applied`, as of before the read) less than the log holds of it now, or the
/// log could not be asked. Then a write of the series may be acknowledged and not applied
/// yet, and the answer says so ([`Error::UnknownSeriesAsYet`]) rather than claim the series
/// was never written.
async fn unknown_unless_behind(
    node: &Arc<Node>,
    series: String,
    partition: u32,
    applied: u64,
) -> Error {
    let log = match node.log().last_sequences(&[partition]).await {
        Ok(tail) => tail.get(&partition).copied().unwrap_or(0),
        Err(e) => {
            return Error::UnknownSeriesAsYet {
                series,
                why: format!("the log's last sequences could not be read ({e})"),
            }
        }
    };
    if applied < log {
        Error::UnknownSeriesAsYet {
            series,
            why: format!(
                "partition {partition}'s most caught-up replica is behind the log (applied \
                 sequence {applied} of {log})"
            ),
        }
    } else {
        Error::UnknownSeries(series)
    }
}

/// An aggregate over every partition.
///
/// # Errors
/// As [`fan_out`], and the merge's.
pub(crate) async fn aggregate(
    node: &Arc<Node>,
    plan: AggregatePlan,
    budget: &ReadBudget,
    options: &ReadOptions,
) -> Result<AggregateResult> {
    let owner_budget = partial::owner_budget(budget).limit();
    let answers = fan_out(
        node,
        PartialRead::Aggregate(plan.clone()),
        None,
        owner_budget,
        options,
    )
    .await?;
    let parts = parts(answers, |answer| match answer {
        PartialAnswer::Aggregate(charged) => Some(charged.take(budget)),
        _ => None,
    })?;
    partial::merge_aggregates(plan, parts)
}

/// The tier sets of the series `selector` picks in every partition, each once, in set
/// order, the owners' scans charged to `budget`.
///
/// # Errors
/// As [`fan_out`].
async fn sets_selected(
    node: &Arc<Node>,
    selector: &Selector,
    budget: &ReadBudget,
    options: &ReadOptions,
) -> Result<Vec<usize>> {
    let read = PartialRead::SetsSelected(selector.clone());
    let owner_budget = partial::owner_budget(budget).limit();
    let answers = fan_out(node, read, None, owner_budget, options).await?;
    let mut sets: Vec<usize> = parts(answers, |answer| match answer {
        PartialAnswer::SetsSelected(charged) => Some(charged.take(budget)),
        _ => None,
    })?
    .into_iter()
    .flatten()
    .collect();
    sets.sort_unstable();
    sets.dedup();
    Ok(sets)
}

/// An aggregate over every partition, when the tiers have `[[set]]`s: the owners first say
/// which sets the selected series keep; with one (or none: the default set), the plan is
/// that set's, as one engine plans it; with several, each set reads the tier it would read
/// alone, on one grid as wide as the least common multiple of their resolutions from the
/// latest of their windows on ([`across_sets_plan`]), and the answer's note says so when
/// the resolutions differ, as one engine answers ([`crate::Reader::aggregate_within`]).
///
/// # Errors
/// As [`fan_out`], the plan's, and the merge's.
pub(crate) async fn aggregate_in_sets(
    node: &Arc<Node>,
    query: AggregateQuery,
    budget: &ReadBudget,
    options: &ReadOptions,
) -> Result<AggregateResult> {
    let (tiers, now) = (node.tiers(), node.now());
    let sets = sets_selected(node, &query.selector, budget, options).await?;
    let (plans, across) = partial::set_plans(
        (tiers, now, &sets),
        (&query.tier, query.from, query.to),
        (query.max_points, query.step, query.whole_range),
        |view| AggregatePlan::new(view, now, &query),
        |spec, grid| AggregatePlan::on(&query, spec, grid, now),
    )?;
    let read = PartialRead::AggregateSets(plans.clone());
    let answers = fan_out(
        node,
        read,
        None,
        partial::owner_budget(budget).limit(),
        options,
    )
    .await?;
    let parts = parts(answers, |answer| match answer {
        PartialAnswer::AggregateSets(charged) => Some(charged.take(budget)),
        _ => None,
    })?;
    partial::merge_sets(&plans, across.as_ref(), parts)
}

/// A distribution read when the tiers have `[[set]]`s: the sets of the series read (of one
/// series, from an owner of its partition), then each set's plan as for an aggregate
/// ([`aggregate_in_sets`]), the owners' histograms merged per set and then across sets
/// before any quantile is taken, as one engine answers
/// ([`crate::Reader::distribution_query`]).
///
/// # Errors
/// As [`fan_out`] (and [`ask_series_owner`] for one series), the plan's, and the merge's.
pub(crate) async fn distribution_in_sets(
    node: &Arc<Node>,
    query: DistributionQuery,
    budget: &ReadBudget,
    options: &ReadOptions,
) -> Result<DistributionResult> {
    let (tiers, now) = (node.tiers(), node.now());
    let owner_budget = partial::owner_budget(budget).limit();
    let sets = match &query.target {
        DistributionTarget::Series(key) => {
            let read = PartialRead::SetOfSeries(key.clone());
            let answers = ask_series_owner(node, key, read, owner_budget, options).await?;
            let sets = parts(answers, |answer| match answer {
                PartialAnswer::SetsSelected(charged) => Some(charged.take(budget)),
                _ => None,
            })?;
            sets.into_iter().flatten().collect()
        }
        DistributionTarget::Select { selector, .. } => {
            sets_selected(node, selector, budget, options).await?
        }
    };
    let (plans, across) = partial::set_plans(
        (tiers, now, &sets),
        (&query.tier, query.from, query.to),
        (query.max_points, query.step, query.whole_range),
        |view| DistributionPlan::new(view, now, &query),
        |spec, grid| DistributionPlan::on(&query, spec, grid, now),
    )?;
    let read = PartialRead::DistributionSets(plans.clone());
    let answers = match &query.target {
        DistributionTarget::Series(key) => {
            ask_series_owner(node, key, read, owner_budget, options).await?
        }
        DistributionTarget::Select { .. } => {
            fan_out(node, read, None, owner_budget, options).await?
        }
    };
    let parts = parts(answers, |answer| match answer {
        PartialAnswer::DistributionSets(charged) => Some(charged.take(budget)),
        _ => None,
    })?;
    partial::merge_sets(&plans, across.as_ref(), parts)
}

/// A distribution read (quantiles, `hist`): a one-series read from an owner of the series'
/// partition, a read of a selector from every partition's owner; the owners' histograms are
/// merged per group and point before any quantile is taken
/// ([`partial::merge_distributions`]).
///
/// # Errors
/// As [`fan_out`] (and [`ask_series_owner`] for one series), and the merge's.
pub(crate) async fn distribution(
    node: &Arc<Node>,
    plan: DistributionPlan,
    budget: &ReadBudget,
    options: &ReadOptions,
) -> Result<DistributionResult> {
    let owner_budget = partial::owner_budget(budget).limit();
    let read = PartialRead::Distribution(plan.clone());
    let answers = match plan.series() {
        Some(series) => ask_series_owner(node, series, read, owner_budget, options).await?,
        None => fan_out(node, read, None, owner_budget, options).await?,
    };
    let parts = parts(answers, |answer| match answer {
        PartialAnswer::Distribution(charged) => Some(charged.take(budget)),
        _ => None,
    })?;
    partial::merge_distributions(plan, parts)
}

/// The series listing over every partition.
///
/// # Errors
/// As [`fan_out`].
pub(crate) async fn series(
    node: &Arc<Node>,
    selector: Selector,
    options: &ReadOptions,
) -> Result<Vec<String>> {
    let answers = fan_out(node, PartialRead::Series(selector), None, u64::MAX, options).await?;
    let parts = parts(answers, |answer| match answer {
        PartialAnswer::Series(keys) => Some(Ok(keys)),
        _ => None,
    })?;
    Ok(partial::merge_series(parts))
}

/// Graphite's `/metrics/find` over every partition.
///
/// # Errors
/// As [`fan_out`].
pub(crate) async fn find(
    node: &Arc<Node>,
    query: String,
    budget: &ReadBudget,
    options: &ReadOptions,
) -> Result<Vec<FindNode>> {
    let owner_budget = partial::owner_budget(budget).limit();
    let answers = fan_out(node, PartialRead::Find(query), None, owner_budget, options).await?;
    let parts = parts(answers, |answer| match answer {
        PartialAnswer::Find(charged) => Some(charged.take(budget)),
        _ => None,
    })?;
    Ok(partial::merge_find(parts))
}

/// graphite-web's tag API over every partition: each owner answers its part over its
/// partitions' registries, and the parts merge into the answer one registry holding every
/// series gives.
///
/// # Errors
/// As [`fan_out`]; the budget's refusal.
pub(crate) async fn tags(
    node: &Arc<Node>,
    read: TagRead,
    budget: &ReadBudget,
    options: &ReadOptions,
) -> Result<serde_json::Value> {
    let owner_budget = partial::owner_budget(budget).limit();
    let request = PartialRead::Tags(read.clone());
    let answers = fan_out(node, request, None, owner_budget, options).await?;
    let parts = parts(answers, |answer| match answer {
        PartialAnswer::Tags(charged) => Some(charged.take(budget)),
        _ => None,
    })?;
    Ok(read.answer(parts))
}
