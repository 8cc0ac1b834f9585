//! Reads across partitions: what the owner of some partitions answers for its part of a read
//! (a partial answer over its engines, one per partition it holds) and how the asking node
//! merges the parts into the answer one engine holding every series would give.
//!
//! A series lives in exactly one partition, so partitions hold disjoint series and each
//! answer covers its own. These reads fan out:
//! - aggregates: the asker fixes the tier, the grid and the tier's window from its own clock
//!   ([`crate::Reader::plan_aggregate`]); each owner folds its series on that plan
//!   ([`aggregate_over`]); the asker merges the [`PartialAggregate`]s and finishes them
//!   ([`merge_aggregates`]);
//! - distribution reads (quantiles, `hist`): the asker fixes the plan as for an aggregate
//!   ([`crate::read::distribution::DistributionPlan`]); each owner merges its series'
//!   histograms per group and point ([`distribution_over`]); the asker merges the parts
//!   (counts add) and only then takes the quantiles ([`merge_distributions`]). A one-series
//!   read goes to one owner of the series' partition;
//! - `/metrics/find`: each owner's nodes ([`find_over`]), merged with each node once
//!   ([`merge_find`]);
//! - the series listing: each owner's keys ([`series_over`]), merged in key order
//!   ([`merge_series`]);
//! - Graphite's `/render` and PromQL are not partial reads of their own: the asker evaluates
//!   them on a [`crate::read::store::Store`] whose leaf reads fan out
//!   (src/cluster/promql_source.rs, [`super::promql_read`]).
//!
//! A one-series query has nothing to merge: the asker sends it, with the tier it chose
//! pinned ([`pinned_query`]), to one owner of the series' partition and answers with that.
//!
//! Budgets: the asker sends each owner what its request may still read ([`owner_budget`]);
//! the owner charges its part against that as one engine would (its registries' scans, its
//! cells, its nodes) and reports what it charged ([`Charged`]), or its [`Refusal`]; the asker
//! charges each report to the request's budget as it merges ([`Charged::take`]), so the
//! request as a whole reads no more than its budget says, and a refusal by an owner's budget
//! counts as the request's ([`Refusal::into_error`]). Nothing here sends anything: the
//! transport carries these types as JSON.

#[cfg(test)]
mod tests;

use crate::config::{TierSpec, TiersConfig};
use crate::error::Result;
use crate::read::aggregate::{AggregatePlan, AggregateResult, PartialAggregate};
use crate::read::budget::ReadBudget;
use crate::read::distribution::{DistributionPlan, DistributionResult, PartialDistribution};
use crate::read::query::Query;
use crate::read::reader::{across_sets_plan, AcrossPlan, Reader, SetPartial};
use crate::read::tier_choice::TierChoice;
use crate::registry::Selector;
use crate::render::add_timer_paths;
use crate::render::tags::{TagPart, TagRead};
use crate::render::{merge_nodes, FindNode, Finder};
use crate::time::{Span, Timestamp};

/// An owner's answer with the values it charged for it, so the asker can charge them to the
/// request's budget.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Charged<T> {
    /// The partial answer.
    pub answer: T,
    /// Values the owner charged for it (what its [`ReadBudget`] used).
    pub read: u64,
}

impl<T> Charged<T> {
    /// `answer`, and what `budget` (the owner's, made for this request alone) has used.
    pub(crate) fn new(answer: T, budget: &ReadBudget) -> Charged<T> {
        Charged {
            answer,
            read: budget.used(),
        }
    }

    /// The answer, once what it read is charged to the request's `budget`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidQuery`] when the request's budget refuses it.
    pub(crate) fn take(self, budget: &ReadBudget) -> Result<T> {
        budget.charge(u128::from(self.read), || {
            format!("an owner's part of {} values", self.read)
        })?;
        Ok(self.answer)
    }
}

/// An owner's failure to answer its part, as the asker receives it: what went wrong, and
/// whether it was the owner's budget (what the request had left) that refused.
///
/// The transport does not carry it yet: an owner's refusal reaches the asker as an HTTP 400
/// (`fanout::ask_owner`), so only the merge model of the tests uses it.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Refusal {
    /// The owner's error, as text.
    pub message: String,
    /// True when the owner's budget refused the read.
    pub over_budget: bool,
}

#[cfg_attr(not(test), allow(dead_code))]
impl Refusal {
    /// The refusal of `error`, raised by an owner reading within `budget`.
    pub(crate) fn new(error: &crate::error::Error, budget: &ReadBudget) -> Refusal {
        Refusal {
            message: error.to_string(),
            over_budget: budget.exceeded(),
        }
    }

    /// The request's error: [`crate::Error::InvalidQuery`] with the owner's message, the
    /// request's `budget` marked exceeded when the owner's budget refused.
    pub(crate) fn into_error(self, budget: &ReadBudget) -> crate::error::Error {
        if self.over_budget {
            budget.note_exceeded();
        }
        crate::error::Error::InvalidQuery(self.message)
    }
}

/// The budget an owner reads its part within: what the request may still read.
pub(crate) fn owner_budget(request: &ReadBudget) -> ReadBudget {
    ReadBudget::new(request.limit().saturating_sub(request.used()))
}

/// An owner's part of an aggregate: `plan` over the series of every engine in `readers`
/// (one per partition it was asked for), merged, each engine's reads charged to `budget`.
///
/// # Errors
/// As [`crate::Reader::aggregate_partial`] on any engine.
pub(crate) fn aggregate_over(
    readers: &[Reader<'_>],
    plan: &AggregatePlan,
    budget: &ReadBudget,
) -> Result<PartialAggregate> {
    let mut merged = PartialAggregate::empty(plan.clone());
    for reader in readers {
        merged.merge(reader.aggregate_partial(plan, budget)?)?;
    }
    Ok(merged)
}

/// An owner's part of a read over tier sets: the sets of the series `selector` picks in
/// every engine in `readers`, each once, in set order, each engine's scan charged to
/// `budget` as one engine's is ([`Reader::sets_selected`]).
///
/// # Errors
/// [`crate::Error::InvalidQuery`] when `budget` refuses a scan.
pub(crate) fn sets_over(
    readers: &[Reader<'_>],
    selector: &Selector,
    budget: &ReadBudget,
) -> Result<Vec<usize>> {
    let mut sets = Vec::new();
    for reader in readers {
        sets.extend(reader.sets_selected(selector, budget)?);
    }
    sets.sort_unstable();
    sets.dedup();
    Ok(sets)
}

/// An owner's part of a read with `[[set]]`s (aggregates, distribution reads): per
/// `(set, plan)`, `read` of that plan over the set's series of every engine in `readers`
/// (through each engine's reader of the set), in the order of `plans`.
///
/// # Errors
/// The first of `read`'s.
pub(crate) fn per_set_over<Plan, P>(
    readers: &[Reader<'_>],
    plans: &[(usize, Plan)],
    read: impl Fn(&[Reader<'_>], &Plan) -> Result<P>,
) -> Result<Vec<P>> {
    (plans.iter())
        .map(|(set, plan)| {
            let of_set: Vec<Reader<'_>> = readers.iter().map(|r| r.for_set(*set)).collect();
            read(&of_set, plan)
        })
        .collect()
}

/// Each set's plan of a read with `[[set]]`s, and, across several sets, their line-up.
pub(crate) type SetPlans<P> = (Vec<(usize, P)>, Option<AcrossPlan>);

/// The plans of a read with `[[set]]`s over the series of `sets` (as the owners found them),
/// as one engine makes them at `now`: with one set (or none: the default set), that set's
/// plan alone (`alone`, from the set's view of `tiers`); with several, each set's plan on
/// its tier, on the grid and window every set holds (`on`, from [`across_sets_plan`]), and
/// that line-up, which the merge needs.
///
/// # Errors
/// As [`across_sets_plan`], `alone` and `on`.
pub(crate) fn set_plans<P>(
    (tiers, now, sets): (&TiersConfig, Timestamp, &[usize]),
    (choice, from, to): (&TierChoice, Timestamp, Timestamp),
    shape: (Option<u32>, Option<Span>, bool),
    alone: impl Fn(&TiersConfig) -> Result<P>,
    on: impl Fn(&TierSpec, (Option<Span>, Timestamp)) -> Result<P>,
) -> Result<SetPlans<P>> {
    if let [] | [_] = sets {
        let set = sets.first().copied().unwrap_or(0);
        return Ok((vec![(set, alone(&tiers.set_view(set))?)], None));
    }
    let across = across_sets_plan(tiers, now, sets, choice, (from, to), shape)?;
    let plans = (across.parts.iter())
        .map(|(set, spec)| Ok((*set, on(spec, (across.step, across.window))?)))
        .collect::<Result<Vec<_>>>()?;
    Ok((plans, Some(across)))
}

/// An owner's answer to which set the one series `key` keeps, in the engine of `reader`.
///
/// # Errors
/// [`crate::Error::UnknownSeries`] when the engine does not have it; as
/// [`crate::registry::Registry::lookup`].
pub(crate) fn set_of_series(reader: &Reader<'_>, key: &str) -> Result<Vec<usize>> {
    let id = (reader.registry().lookup(key)?)
        .ok_or_else(|| crate::error::Error::UnknownSeries(key.to_owned()))?;
    Ok(reader.sets_of([id]))
}

/// The asker's answer from the owners' parts of a read with `[[set]]`s (each part a
/// partial per plan of `plans`: aggregates, distribution reads): each set's parts merged,
/// then, when `across` lines up several sets, the sets merged on its grid as one engine
/// merges them ([`crate::Reader::aggregate_within`]), the answer naming every set's tier
/// and carrying the note.
///
/// # Errors
/// [`crate::Error::InvalidQuery`] when a part answers other plans or is garbled.
pub(crate) fn merge_sets<P: SetPartial>(
    plans: &[(usize, P::Plan)],
    across: Option<&AcrossPlan>,
    parts: impl IntoIterator<Item = Vec<P>>,
) -> Result<P::Answer> {
    let mut per_set: Vec<P> = (plans.iter())
        .map(|(_, plan)| P::empty(plan.clone()))
        .collect();
    for part in parts {
        if part.len() != per_set.len() {
            return Err(crate::error::Error::InvalidQuery(format!(
                "an owner answered {} tier sets of {}",
                part.len(),
                per_set.len()
            )));
        }
        for (merged, part) in per_set.iter_mut().zip(part) {
            merged.merge(part)?;
        }
    }
    let mut sets = per_set.into_iter();
    let mut merged = sets
        .next()
        .ok_or_else(|| crate::error::Error::InvalidQuery("an aggregate over no tier set".into()))?;
    let Some(across) = across else {
        return merged.finish_alone();
    };
    for part in sets {
        merged.merge_set(part, &across.tiers)?;
    }
    merged.finish_across(&across.tiers, &across.note)
}

/// An owner's part of a distribution read: `plan` over the series of every engine in
/// `readers` (one per partition it was asked for), their histograms merged per group and
/// point, each engine's reads charged to `budget`.
///
/// # Errors
/// As [`crate::Reader::distribution_partial`] on any engine.
pub(crate) fn distribution_over(
    readers: &[Reader<'_>],
    plan: &DistributionPlan,
    budget: &ReadBudget,
) -> Result<PartialDistribution> {
    let mut merged = PartialDistribution::empty(plan.clone());
    for reader in readers {
        merged.merge(reader.distribution_partial(plan, budget)?)?;
    }
    Ok(merged)
}

/// The asker's answer from the owners' parts of a distribution read's `plan` (in any order):
/// the quantiles of the histograms merged across every partition, equal to what one engine
/// holding every partition's series answers.
///
/// # Errors
/// [`crate::Error::InvalidQuery`] when a part answers another plan or is garbled.
pub(crate) fn merge_distributions(
    plan: DistributionPlan,
    parts: impl IntoIterator<Item = PartialDistribution>,
) -> Result<DistributionResult> {
    let mut merged = PartialDistribution::empty(plan);
    for part in parts {
        merged.merge(part)?;
    }
    merged.finish()
}

/// The asker's answer from the owners' parts of `plan` (in any order): equal to what one
/// engine holding every partition's series answers for the query the plan was made from.
///
/// # Errors
/// [`crate::Error::InvalidQuery`] when a part answers another plan or is garbled, or the
/// merged groups × points exceed [`crate::read::query::MAX_QUERY_POINTS`].
pub(crate) fn merge_aggregates(
    plan: AggregatePlan,
    parts: impl IntoIterator<Item = PartialAggregate>,
) -> Result<AggregateResult> {
    let mut merged = PartialAggregate::empty(plan);
    for part in parts {
        merged.merge(part)?;
    }
    merged.finish()
}

/// An owner's part of `/metrics/find`: the nodes `query` finds among the keys and StatsD
/// timer paths of every engine in `readers`, each node once, charged to `budget` as one
/// engine's find is.
///
/// # Errors
/// [`crate::Error::InvalidQuery`] for a query that is not a path pattern, or when `budget`
/// refuses a scan or a node.
pub(crate) fn find_over(
    readers: &[Reader<'_>],
    query: &str,
    budget: &ReadBudget,
) -> Result<Vec<FindNode>> {
    let mut finder = Finder::new(query)?;
    for reader in readers {
        finder.add_registry(reader.registry(), budget)?;
        add_timer_paths(reader, &mut finder, budget)?;
    }
    Ok(finder.nodes())
}

/// The asker's `/metrics/find` answer from the owners' parts: each node once, sorted by id,
/// a branch before a leaf of the same id, as one engine answers.
pub(crate) fn merge_find(parts: impl IntoIterator<Item = Vec<FindNode>>) -> Vec<FindNode> {
    merge_nodes(parts)
}

/// An owner's part of a tag API answer: `read` over every engine's registry in `readers` and
/// its StatsD timer paths, each scan charged to `budget` as one engine's is.
///
/// # Errors
/// As [`TagRead::part`].
pub(crate) fn tags_over(
    readers: &[Reader<'_>],
    read: &TagRead,
    budget: &ReadBudget,
) -> Result<TagPart> {
    let mut merged = TagPart::default();
    for reader in readers {
        let timer_paths = read.timer_paths(reader)?;
        merged.merge(read.part_with(reader.registry(), &timer_paths, budget)?);
    }
    Ok(merged)
}

/// An owner's part of the series listing: the keys `selector` picks in every engine in
/// `readers`, sorted.
pub(crate) fn series_over(readers: &[Reader<'_>], selector: &Selector) -> Vec<String> {
    let mut keys: Vec<String> = readers
        .iter()
        .flat_map(|reader| reader.series_keys(selector))
        .collect();
    keys.sort_unstable();
    keys
}

/// The asker's series listing from the owners' parts: every key once, sorted by its
/// canonical text. One engine lists in id order, which is the order series first arrived at
/// that engine; no node of a cluster has that order, so the cluster lists by key.
pub(crate) fn merge_series(parts: impl IntoIterator<Item = Vec<String>>) -> Vec<String> {
    let mut keys: Vec<String> = parts.into_iter().flatten().collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// With `[[set]]`s, per tier set of `tiers`, the tier [`pinned_query`] pins `query` to for a
/// series of that set (`None` where the set has no tier of the name `query` gives: the
/// owner then refuses the query as one engine would). The asker does not know the series'
/// set; the owner that has it picks ([`pinned_for_series`]).
pub(crate) fn pinned_in_sets(
    tiers: &TiersConfig,
    now: Timestamp,
    query: &Query,
) -> Vec<Option<TierChoice>> {
    (0..tiers.set_count())
        .map(|set| {
            let pinned = pinned_query(&tiers.set_view(set), now, query).ok()?;
            Some(pinned.tier)
        })
        .collect()
}

/// `query` with the tier of `pinned` ([`pinned_in_sets`]) that is its series' set's, in the
/// engine of `reader`; as it is when the engine does not have the series (the query then
/// answers that) or the set's entry is `None`.
///
/// # Errors
/// [`crate::Error::InvalidQuery`] for a series that is not a valid key; [`crate::Error::Io`].
pub(crate) fn pinned_for_series(
    reader: &Reader<'_>,
    query: Query,
    pinned: &[Option<TierChoice>],
) -> Result<Query> {
    let Some(id) = reader.registry().lookup(&query.series)? else {
        return Ok(query);
    };
    let set = reader.registry().placement(id).set();
    Ok(match pinned.get(set).cloned().flatten() {
        Some(tier) => Query { tier, ..query },
        None => query,
    })
}

/// `query` with the tier the asker's clock chooses for it (with `tiers` at `now`) named, so
/// the owner it is sent to reads that tier whatever its own clock says (`auto` depends on
/// the time: which tiers still reach back to `from`). A query naming the raw tier goes as it
/// is: `auto` never picks it.
///
/// # Errors
/// [`crate::Error::UnknownTier`] for a tier name the asker does not have.
pub(crate) fn pinned_query(tiers: &TiersConfig, now: Timestamp, query: &Query) -> Result<Query> {
    if matches!(&query.tier, TierChoice::Named(name) if tiers.is_raw(name)) {
        return Ok(query.clone());
    }
    let tier = query
        .tier
        .resolve(tiers, query.from, query.to, query.max_points, now)?;
    Ok(Query {
        tier: TierChoice::Named(tiers.tiers[tier].name.clone()),
        ..query.clone()
    })
}
