//! Tests of Graphite paths and patterns: the tagged path form both ways, every glob form per
//! segment, dots never crossed, and tag filters.

use super::{graphite_path, parse_graphite_path, PathPattern};
use crate::registry::SeriesKey;

fn key(text: &str) -> SeriesKey {
    parse_graphite_path(text).unwrap()
}

fn selects(pattern: &str, path: &str) -> bool {
    PathPattern::parse(pattern)
        .unwrap()
        .matches(key(path).view())
}

#[test]
fn paths_round_trip_with_tags_sorted() {
    let k = SeriesKey::new("cpu.load", [("z", "1"), ("host", "a")]).unwrap();
    assert_eq!(graphite_path(k.view()), "cpu.load;host=a;z=1");
    assert_eq!(key("cpu.load;z=1;host=a"), k);
    assert_eq!(graphite_path(key("cpu.load").view()), "cpu.load");
    assert_eq!(key("m;a=1;a=2").tag("a").as_deref(), Some("2"));
    assert!(parse_graphite_path("m;novalue").is_err());
    assert!(parse_graphite_path("").is_err());
}

#[test]
fn each_glob_form_matches_within_one_segment() {
    let cases = [
        ("a.*.c", "a.bbb.c", true),
        ("a.*.c", "a..c", true),
        ("a.*", "a.b.c", false), // `*` never crosses a dot
        ("*", "a.b", false),
        ("a.b*", "a.b", true),
        ("a.?", "a.x", true),
        ("a.?", "a.xy", false),
        ("a.[xyz]", "a.y", true),
        ("a.[xyz]", "a.w", false),
        ("a.[a-c]1", "a.b1", true),
        ("a.[a-c]1", "a.d1", false),
        ("a.[!a-c]", "a.d", true),
        ("a.[!a-c]", "a.b", false),
        ("a.[^a-c]", "a.d", true),
        ("a.{x,yy}", "a.yy", true),
        ("a.{x,yy}", "a.y", false),
        ("a.{b*,c}", "a.bcd", true),
        ("a.{b*,c}", "a.c", true),
        ("a.{b*,c}", "a.cd", false),
        ("a.x{1,2}y", "a.x2y", true),
        ("a.{x,{y,z}w}", "a.zw", true),
        ("a.{x,y}{1,2}", "a.y1", true),
        ("a.[z", "a.[z", true), // unclosed: literal
        ("a.{z", "a.{z", true),
        ("a.b+c", "a.b+c", true), // regex characters are literal
        ("a.b+c", "a.bbc", false),
        ("a.b", "a.b.c", false),
        ("a.b.c", "a.b", false),
    ];
    for (pattern, path, expected) in cases {
        assert_eq!(selects(pattern, path), expected, "{pattern} vs {path}");
    }
}

#[test]
fn tag_filters() {
    assert!(selects("cpu.load", "cpu.load;host=a"));
    assert!(selects("cpu.load", "cpu.load"));
    assert!(selects("cpu.load;host=a", "cpu.load;dc=x;host=a"));
    assert!(!selects("cpu.load;host=a", "cpu.load;host=b"));
    assert!(!selects("cpu.load;host=a", "cpu.load"));
    assert!(selects("cpu.load;host={a,b*}", "cpu.load;host=bx"));
    assert!(selects("cpu.load;host=*", "cpu.load;host=a.b")); // a tag value has no segments
    assert!(!selects("cpu.load;host=*", "cpu.load"));
    assert!(selects("cpu.load;host!=a", "cpu.load;host=b"));
    assert!(selects("cpu.load;host!=a", "cpu.load"));
    assert!(!selects("cpu.load;host!=a*", "cpu.load;host=ab"));
    assert!(selects("cpu.*;host=a;dc!=x", "cpu.idle;dc=y;host=a"));
    assert!(selects("cpu.load;host=", "cpu.load"));
    assert!(!selects("cpu.load;host=", "cpu.load;host=a"));
    assert!(selects("cpu.load;host!=", "cpu.load;host=a"));
}

#[test]
fn text_and_refusals() {
    let exact = PathPattern::parse("cpu.load;host=a").unwrap();
    assert_eq!(exact.as_str(), "cpu.load;host=a");
    // 2048 alternatives.
    let bomb = format!("a.{}", "{x,y}".repeat(11));
    // One alternative, but one level of recursion per group: refused before expanding.
    let deep = format!("a.{}", "{x}".repeat(10_000));
    let nested = format!("a.{}x{}", "{".repeat(10_000), "}".repeat(10_000));
    let tag_bomb = format!("a;host={}", "{x}".repeat(33));
    for bad in [
        "",
        ";host=a",
        "a;host",
        "a;=b",
        "a;host=~x.*",
        &bomb,
        &deep,
        &nested,
        &tag_bomb,
    ] {
        let err = PathPattern::parse(bad).unwrap_err().to_string();
        assert!(err.contains(&format!("{bad:?}")), "{err}");
    }
    assert!(PathPattern::parse(&format!("a.{}", "{x}".repeat(32))).is_ok());
    let err = PathPattern::parse(&deep).unwrap_err().to_string();
    assert!(
        err.contains("10000 `{` in one segment or tag value; at most 32"),
        "{err}"
    );
    let err = PathPattern::parse(&bomb).unwrap_err().to_string();
    assert!(err.contains("more than 1024 alternatives"), "{err}");
}
