//! Tests of `/metrics/find`: each glob form, branches against leaves, dedup, tagged leaves,
//! tag filters and the exact treejson.

use super::{find, FindNode};
use crate::registry::SeriesKey;
use crate::render::parse_graphite_path;

fn keys() -> Vec<SeriesKey> {
    [
        "servers.web1.cpu",
        "servers.web1.mem",
        "servers.web2.cpu",
        "servers.db1.cpu",
        "servers.db1",
        "servers.web1.cpu;core=0",
        "servers.web1.cpu;core=1",
        "apps.x",
    ]
    .iter()
    .map(|p| parse_graphite_path(p).unwrap())
    .collect()
}

/// `(id, leaf)` of each node.
fn ids(query: &str) -> Vec<(String, u8)> {
    let keys = keys();
    let nodes = find(query, &keys).unwrap();
    nodes.into_iter().map(|n| (n.id, n.leaf)).collect()
}

fn owned(nodes: &[(&str, u8)]) -> Vec<(String, u8)> {
    nodes
        .iter()
        .map(|&(id, leaf)| (id.to_owned(), leaf))
        .collect()
}

#[test]
fn branches_are_deduplicated_and_sorted() {
    assert_eq!(ids("*"), owned(&[("apps", 0), ("servers", 0)]));
    let second = owned(&[
        ("servers.db1", 0),
        ("servers.db1", 1),
        ("servers.web1", 0),
        ("servers.web2", 0),
    ]);
    assert_eq!(ids("servers.*"), second);
}

#[test]
fn tagged_series_are_one_leaf_each() {
    let keys = keys();
    let nodes = find("servers.web1.cpu", &keys).unwrap();
    let texts: Vec<(&str, &str)> = nodes
        .iter()
        .map(|n| (n.id.as_str(), n.text.as_str()))
        .collect();
    assert_eq!(
        texts,
        [
            ("servers.web1.cpu", "cpu"),
            ("servers.web1.cpu;core=0", "cpu;core=0"),
            ("servers.web1.cpu;core=1", "cpu;core=1"),
        ]
    );
    assert_eq!(
        ids("servers.web1.cpu;core=1"),
        owned(&[("servers.web1.cpu;core=1", 1)])
    );
    assert_eq!(
        ids("servers.web1.cpu;core!=1"),
        owned(&[("servers.web1.cpu", 1), ("servers.web1.cpu;core=0", 1)])
    );
}

#[test]
fn every_glob_form() {
    let leaves = |ids: &[&str]| ids.iter().map(|&id| (id.to_owned(), 1)).collect::<Vec<_>>();
    assert_eq!(ids("servers.web?.mem"), leaves(&["servers.web1.mem"]));
    assert_eq!(ids("servers.[a-w]*1.mem"), leaves(&["servers.web1.mem"]));
    assert_eq!(
        ids("servers.[!w]*"),
        owned(&[("servers.db1", 0), ("servers.db1", 1)])
    );
    assert_eq!(
        ids("servers.{db1,web2}.cpu"),
        leaves(&["servers.db1.cpu", "servers.web2.cpu"])
    );
    assert_eq!(
        ids("servers.{d*,web2}.c?u;core!=*"),
        leaves(&["servers.db1.cpu", "servers.web2.cpu"])
    );
    assert_eq!(ids("nothing.*"), vec![]);
    assert_eq!(ids("servers.web1.cpu.more"), vec![]);
}

#[test]
fn treejson_is_exact() {
    let keys = keys();
    let json = serde_json::to_string(&find("servers.db1", &keys).unwrap()).unwrap();
    assert_eq!(
        json,
        r#"[{"text":"db1","id":"servers.db1","leaf":0,"expandable":1,"allowChildren":1},{"text":"db1","id":"servers.db1","leaf":1,"expandable":0,"allowChildren":0}]"#
    );
    let leaf: FindNode = find("apps.x", &keys).unwrap().remove(0);
    assert_eq!((leaf.leaf, leaf.expandable, leaf.allow_children), (1, 0, 0));
    assert!(find("", &keys).is_err());
}
