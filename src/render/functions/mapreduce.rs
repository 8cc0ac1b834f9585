//! graphite-web's `mapSeries` and `reduceSeries`: split a list into groups by nodes, then
//! call a function on the members of each group that match given node values, as graphite-web
//! does to compute `asPercent(used, total)` per server. A group's members stay in one flat
//! list here (graphite-web passes a list of lists), which `reduceSeries` walks as
//! graphite-web walks its lists.

use super::{agg_key, eval, Args, Context, Node};
use crate::error::Result;
use crate::render::expr::Expr;
use crate::render::series::Series;

/// `mapSeries(seriesList, *mapNodes)` (short form `map`): the series grouped by the values
/// of the given nodes (or tags), groups in the order their first member comes, each group's
/// members in their order.
pub(super) fn map_series(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let nodes: Vec<Node> = a.nodes_from(1)?;
    let mut keys: Vec<String> = Vec::new();
    let mut groups: Vec<Vec<Series>> = Vec::new();
    for s in a.series(0, cx)? {
        let key = agg_key(&s, &nodes);
        match keys.iter().position(|k| *k == key) {
            Some(at) => groups[at].push(s),
            None => {
                keys.push(key);
                groups.push(vec![s]);
            }
        }
    }
    Ok(groups.into_iter().flatten().collect())
}

/// `reduceSeries(seriesLists, reduceFunction, reduceNode, *reduceMatchers)` (short form
/// `reduce`): the series keyed by the nodes before `reduceNode` and `.reduce.<function>`;
/// in each key, the series whose node `reduceNode` is one of the matchers are handed to
/// `reduceFunction`, one list per matcher in the matchers' order, and its first series is
/// named by the key.
pub(super) fn reduce_series(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let function = a.string(1)?;
    let node = a.int(2)?;
    let matchers: Vec<&str> = (3..a.len()).map(|i| a.string(i)).collect::<Result<_>>()?;
    let mut keys: Vec<String> = Vec::new();
    let mut slots: Vec<Vec<Option<Series>>> = Vec::new();
    for s in a.series(0, cx)? {
        let nodes: Vec<&str> = s.name.split('.').collect();
        let len = nodes.len() as i64;
        let at = if node < 0 { len + node } else { node };
        let Some(value) = usize::try_from(at).ok().and_then(|at| nodes.get(at)) else {
            return Err(a.wrong(
                2,
                &format!("is {node}, beyond the {len} nodes of {}", s.name),
            ));
        };
        let Some(matcher) = matchers.iter().position(|m| m == value) else {
            continue;
        };
        let prefix = nodes[..at as usize].join(".");
        let key = format!("{prefix}.reduce.{function}");
        let slot = match keys.iter().position(|k| *k == key) {
            Some(slot) => slot,
            None => {
                keys.push(key);
                slots.push(vec![None; matchers.len()]);
                slots.len() - 1
            }
        };
        slots[slot][matcher] = Some(s);
    }
    let mut out = Vec::with_capacity(keys.len());
    for (key, members) in keys.into_iter().zip(slots) {
        let mut args = Vec::with_capacity(members.len());
        for (member, matcher) in members.into_iter().zip(&matchers) {
            let member = member.ok_or_else(|| {
                a.invalid(&format!(
                    "{key} has no series whose node {node} is {matcher:?} to hand to {function}"
                ))
            })?;
            args.push(Expr::Evaluated(vec![member]));
        }
        let call = Expr::Call {
            name: function.to_owned(),
            text: format!("{function}(...)"),
            args,
            kwargs: Vec::new(),
        };
        let mut reduced = eval(&call, cx)?;
        if reduced.is_empty() {
            return Err(a.invalid(&format!("{function} made no series for {key}")));
        }
        let mut first = reduced.swap_remove(0);
        first.name = key;
        out.push(first);
    }
    Ok(out)
}
