//! `/metrics/find`: the next level of the metric tree under a query, as graphite-web's
//! treejson nodes, for Grafana's query editor and template variables.

#[cfg(test)]
mod tests;

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use super::path::{graphite_path, PathPattern};
use crate::error::Result;
use crate::read::budget::ReadBudget;
use crate::registry::SeriesKey;
use crate::registry::{KeyView, Registry};

/// One node of the metric tree, serialized exactly as graphite-web's treejson:
/// `{"text", "id", "leaf", "expandable", "allowChildren"}` with 0/1 flags.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FindNode {
    /// The last segment (with `;k=v...` for a tagged leaf): what a tree shows.
    pub text: String,
    /// The full path: a target that selects exactly this node.
    pub id: String,
    /// 1 for a series, 0 for a branch.
    pub leaf: u8,
    /// 1 for a branch (it has children to expand), 0 for a leaf.
    pub expandable: u8,
    /// Same as `expandable`; graphite-web sends both and clients read either.
    #[serde(rename = "allowChildren")]
    pub allow_children: u8,
}

/// Answers a find query over `keys`: [`Finder`] fed every key.
///
/// # Errors
///
/// [`crate::Error::InvalidQuery`] when the query is not a valid [`PathPattern`].
pub fn find<'a>(
    query: &str,
    keys: impl IntoIterator<Item = &'a SeriesKey>,
) -> Result<Vec<FindNode>> {
    let mut finder = Finder::new(query)?;
    for key in keys {
        finder.add(key.view());
    }
    Ok(finder.nodes())
}

/// A find query's answer, built one key at a time, so keys can be fed while borrowed (under
/// the registry's lock) and the answer's size charged as it grows.
///
/// The query's N segments are matched against the first N segments of each name, and its tag
/// expressions filter as in [`PathPattern`]. A name of exactly N segments gives a leaf per
/// series (id `a.b.c` or the tagged path `a.b.c;host=x`); a longer one gives the branch of its
/// first N segments, once however many series share it. The result is sorted by id, a branch
/// before a leaf of the same id.
pub struct Finder {
    /// The query as given, for the budget's refusal.
    query: String,
    pattern: PathPattern,
    depth: usize,
    /// Keyed by (id, is leaf): dedups branches and orders a branch before its twin leaf.
    nodes: BTreeMap<(String, bool), String>,
}

impl Finder {
    /// A finder for `query`, holding no node yet.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidQuery`] when the query is not a valid [`PathPattern`], or is a
    /// `seriesByTag` call, which has no levels to browse.
    pub fn new(query: &str) -> Result<Finder> {
        let pattern = PathPattern::parse(query)?;
        if pattern.is_tag_query() {
            return Err(crate::error::Error::InvalidQuery(format!(
                "query {query:?}: find browses path levels; use /tags/findSeries for seriesByTag"
            )));
        }
        let depth = pattern.depth();
        Ok(Finder {
            query: query.to_owned(),
            pattern,
            depth,
            nodes: BTreeMap::new(),
        })
    }

    /// Adds `key`'s node when the query selects it; true when that node is new.
    pub fn add(&mut self, key: KeyView<'_>) -> bool {
        let depth = self.depth;
        let name = key.name();
        let segments: Vec<&str> = name.split('.').collect();
        if segments.len() < depth
            || !self.pattern.matches_segments(&segments[..depth])
            || !self.pattern.matches_tags(key)
        {
            return false;
        }
        let last = segments[depth - 1];
        if segments.len() == depth {
            let id = graphite_path(key);
            let text = format!("{last}{}", &id[name.len()..]);
            return self.nodes.insert((id, true), text).is_none();
        }
        match self.nodes.entry((segments[..depth].join("."), false)) {
            Entry::Vacant(node) => {
                node.insert(last.to_owned());
                true
            }
            Entry::Occupied(_) => false,
        }
    }

    /// Adds the nodes of every key in `registry`, if the scan (a value per key, charged
    /// first) and each new node (a value each) fit in `budget`. Keys are borrowed under the
    /// registry's read lock, not cloned: what the finder holds is its answer.
    ///
    /// # Errors
    /// [`crate::Error::InvalidQuery`] when `budget` refuses the scan or a node.
    pub fn add_registry(&mut self, registry: &Registry, budget: &ReadBudget) -> Result<()> {
        budget.charge_scan(registry.len())?;
        let mut charged = Ok(());
        registry.for_each_from(0, |_, key| {
            if charged.is_ok() && self.add(key) {
                charged = budget.charge(1, || format!("{:?} has more nodes than that", self.query));
            }
        });
        charged
    }

    /// The query's pattern.
    pub(super) fn pattern(&self) -> &PathPattern {
        &self.pattern
    }

    /// The nodes found, sorted by id, a branch before a leaf of the same id.
    pub fn nodes(self) -> Vec<FindNode> {
        tree_nodes(self.nodes)
    }
}

/// The answer over the union of the keys of several finders' answers (finders of one query
/// over disjoint keys, such as a cluster's partitions): each node once, sorted as
/// [`Finder::nodes`] sorts, so it equals the answer of one finder fed every key.
pub fn merge_nodes(answers: impl IntoIterator<Item = Vec<FindNode>>) -> Vec<FindNode> {
    let mut nodes = BTreeMap::new();
    for node in answers.into_iter().flatten() {
        // A branch is the same node whichever keys found it; a leaf is one series, found once.
        nodes.entry((node.id, node.leaf == 1)).or_insert(node.text);
    }
    tree_nodes(nodes)
}

/// Nodes keyed by (id, is leaf), in that key's order, as treejson nodes.
fn tree_nodes(nodes: BTreeMap<(String, bool), String>) -> Vec<FindNode> {
    nodes
        .into_iter()
        .map(|((id, leaf), text)| {
            let branch = u8::from(!leaf);
            FindNode {
                text,
                id,
                leaf: u8::from(leaf),
                expandable: branch,
                allow_children: branch,
            }
        })
        .collect()
}
