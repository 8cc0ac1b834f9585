//! Tests of the Graphite plaintext parser: fields and whitespace, line endings, values and
//! timestamps, tags to canonical text, every refusal, and no panic on any input.

use std::borrow::Cow;

use proptest::prelude::*;

use super::{parse_line, GraphiteError, GraphiteLine, MAX_LINE};
use crate::registry::SeriesKey;

fn parse(line: &str) -> Result<Option<GraphiteLine<'_>>, GraphiteError> {
    parse_line(line.as_bytes())
}

fn ok(line: &str) -> GraphiteLine<'_> {
    parse(line)
        .unwrap_or_else(|e| panic!("{line:?}: {e}"))
        .unwrap_or_else(|| panic!("{line:?}: no line"))
}

fn err(line: &str) -> GraphiteError {
    match parse(line) {
        Err(e) => e,
        Ok(parsed) => panic!("{line:?} parsed as {parsed:?}"),
    }
}

/// The series text of a line with this path.
fn series(path: &str) -> String {
    ok(&format!("{path} 1 2")).series.into_owned()
}

#[test]
fn plain_line() {
    let line = ok("servers.a.cpu 0.42 1700000000");
    assert_eq!(
        line,
        GraphiteLine {
            series: Cow::Borrowed("servers.a.cpu"),
            value: 0.42,
            ts: Some(1_700_000_000),
        }
    );
}

#[test]
fn untagged_plain_path_is_borrowed() {
    let input = b"servers.a.cpu 1 1700000000";
    let line = parse_line(input).unwrap().unwrap();
    match line.series {
        Cow::Borrowed(s) => assert_eq!(s.as_ptr(), input.as_ptr()),
        Cow::Owned(s) => panic!("allocated {s:?}"),
    }
    // Non-ASCII without anything to escape is borrowed too.
    assert!(matches!(
        ok("température.salle 1 1").series,
        Cow::Borrowed(_)
    ));
}

#[test]
fn blanks_and_line_endings() {
    let want = ok("a.b 1 2");
    for line in [
        "a.b 1 2\r",
        "a.b\t1\t2",
        "a.b  \t 1 \t\t2",
        "   a.b 1 2   ",
        "\ta.b 1 2\t\r",
    ] {
        assert_eq!(ok(line), want, "{line:?}");
    }
    for blank in ["", "\r", "   ", " \t \r", "\t"] {
        assert_eq!(parse(blank), Ok(None), "{blank:?}");
    }
}

#[test]
fn values() {
    let cases: &[(&str, f64)] = &[
        ("1", 1.0),
        ("-1", -1.0),
        ("+2.5", 2.5),
        ("1e3", 1000.0),
        ("-1.5E-3", -0.0015),
        (".5", 0.5),
        ("5.", 5.0),
        ("inf", f64::INFINITY),
        ("-inf", f64::NEG_INFINITY),
        ("Infinity", f64::INFINITY),
    ];
    for (text, want) in cases {
        let line = format!("m {text} 1");
        assert_eq!(ok(&line).value, *want, "{line:?}");
    }
    assert!(ok("m nan 1").value.is_nan());
    assert!(ok("m NaN 1").value.is_nan());
}

#[test]
fn timestamps() {
    let cases: &[(&str, Option<i64>)] = &[
        ("1700000000", Some(1_700_000_000)),
        ("0", Some(0)),
        ("-1", None),
        ("-1.0", None),
        ("-2", Some(-2)),
        ("1700000000.5", Some(1_700_000_000)),
        ("1700000000.999", Some(1_700_000_000)),
        ("-1.5", Some(-2)),
        ("-0.5", Some(-1)),
        ("1.7e9", Some(1_700_000_000)),
        ("9223372036854775807", Some(i64::MAX)),
        ("-9223372036854775808", Some(i64::MIN)),
    ];
    for (text, want) in cases {
        let line = format!("m 1 {text}");
        assert_eq!(ok(&line).ts, *want, "{line:?}");
    }
}

#[test]
fn tags_become_canonical_text() {
    assert_eq!(series("cpu;host=a"), "cpu{host=a}");
    assert_eq!(series("cpu;host=a;dc=eu"), "cpu{dc=eu,host=a}");
    assert_eq!(
        series("disk.used;mount=/var;host=a"),
        "disk.used{host=a,mount=/var}"
    );
    // A repeated tag keeps its last value, as carbon does.
    assert_eq!(series("m;k=1;j=0;k=2"), "m{j=0,k=2}");
    // A value may hold `=` (only the first one splits) and the other escaped characters.
    assert_eq!(series("m;expr=a=b"), "m{expr=a\\=b}");
    assert_eq!(series("m;q={x,y}"), "m{q=\\{x\\,y\\}}");
    assert_eq!(series("m;path=C:\\x"), "m{path=C:\\\\x}");
    assert_eq!(series("a{b};k=v"), "a\\{b\\}{k=v}");
    for line in ["cpu;host=a;dc=eu 1 2", "m;q={x,y} 1 2", "a=b;k=v 1 2"] {
        let text = ok(line).series.into_owned();
        assert!(matches!(ok(line).series, Cow::Owned(_)));
        let key = SeriesKey::parse(&text).unwrap();
        assert_eq!(key.to_string(), text, "{line:?}");
    }
    let key = SeriesKey::parse(&series("m;expr=a=b;b=,")).unwrap();
    assert_eq!(key.name(), "m");
    assert_eq!(key.tag("expr").as_deref(), Some("a=b"));
    assert_eq!(key.tag("b").as_deref(), Some(","));
}

#[test]
fn untagged_paths_with_syntax_characters_are_escaped() {
    assert_eq!(series("a=b"), "a\\=b");
    assert_eq!(series("a,b"), "a\\,b");
    assert_eq!(series("a{b}"), "a\\{b\\}");
    assert_eq!(series("a\\b"), "a\\\\b");
    assert!(matches!(ok("a=b 1 1").series, Cow::Owned(_)));
    assert_eq!(
        SeriesKey::parse(&series("a,b=c{d}")).unwrap().name(),
        "a,b=c{d}"
    );
}

#[test]
fn refusals() {
    let cases: &[(&str, GraphiteError)] = &[
        ("a.b", GraphiteError::MissingValue),
        ("  a.b  \r", GraphiteError::MissingValue),
        ("a.b 1", GraphiteError::MissingTimestamp),
        ("a.b 1\t ", GraphiteError::MissingTimestamp),
        ("a.b 1 2 3", GraphiteError::TooManyFields),
        ("a.b 1 2 x", GraphiteError::TooManyFields),
        ("a.b one 2", GraphiteError::InvalidValue),
        ("a.b 1,5 2", GraphiteError::InvalidValue),
        ("a.b 0x10 2", GraphiteError::InvalidValue),
        ("a.b 1 now", GraphiteError::InvalidTimestamp),
        ("a.b 1 nan", GraphiteError::InvalidTimestamp),
        ("a.b 1 inf", GraphiteError::InvalidTimestamp),
        ("a.b 1 1e30", GraphiteError::InvalidTimestamp),
        ("a.b 1 -1e30", GraphiteError::InvalidTimestamp),
        ("a.b 1 1_000", GraphiteError::InvalidTimestamp),
        (";k=v 1 2", GraphiteError::InvalidName),
        ("a; 1 2", GraphiteError::InvalidName),
        ("a;k 1 2", GraphiteError::InvalidName),
        ("a;=v 1 2", GraphiteError::InvalidName),
        ("a;k= 1 2", GraphiteError::InvalidName),
        ("a;k=v; 1 2", GraphiteError::InvalidName),
        ("a;;k=v 1 2", GraphiteError::InvalidName),
        ("a\u{0}b 1 2", GraphiteError::InvalidName),
        ("a\u{1b}b 1 2", GraphiteError::InvalidName),
        ("a\u{7f}b 1 2", GraphiteError::InvalidName),
        ("a\u{85}b 1 2", GraphiteError::InvalidName),
        ("a;k=v\u{1} 1 2", GraphiteError::InvalidName),
        ("a\u{b}b 1 2", GraphiteError::InvalidName),
    ];
    for (line, want) in cases {
        assert_eq!(err(line), *want, "{line:?}");
    }
    assert_eq!(parse_line(b"a\xffb 1 2"), Err(GraphiteError::InvalidName));
    assert_eq!(parse_line(b"a.b \xff 2"), Err(GraphiteError::InvalidValue));
    assert_eq!(
        parse_line(b"a.b 1 \xff"),
        Err(GraphiteError::InvalidTimestamp)
    );
}

#[test]
fn line_length_limit() {
    let fits = format!("{} 1 2", "a".repeat(MAX_LINE - 4));
    assert_eq!(fits.len(), MAX_LINE);
    assert_eq!(ok(&fits).series.len(), MAX_LINE - 4);
    // The `\r` does not count.
    assert!(parse(&format!("{fits}\r")).is_ok());
    let long = format!("{} 1 2", "a".repeat(MAX_LINE - 3));
    assert_eq!(err(&long), GraphiteError::LineTooLong);
    // The longest path that fits, all escaped, still makes an acceptable series key.
    assert_eq!(series(&"=".repeat(MAX_LINE - 4)).len(), 2 * (MAX_LINE - 4));
}

#[test]
fn reasons_are_stable_and_distinct() {
    let names: Vec<&str> = GraphiteError::ALL.iter().map(|e| e.as_str()).collect();
    assert_eq!(
        names,
        [
            "missing_value",
            "missing_timestamp",
            "too_many_fields",
            "invalid_value",
            "invalid_timestamp",
            "invalid_name",
            "line_too_long",
        ]
    );
    for e in GraphiteError::ALL {
        assert!(!e.to_string().is_empty());
    }
}

/// A Graphite tag key or value: printable, no space, `;` or `=` in keys (values may hold `=`).
fn tag_part(allow_eq: bool) -> impl Strategy<Value = String> {
    let pattern = if allow_eq {
        "[a-zA-Z0-9_.\\-:/=,{}\\\\é]{1,8}"
    } else {
        "[a-zA-Z0-9_.\\-:/,{}\\\\é]{1,8}"
    };
    proptest::string::string_regex(pattern).unwrap()
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = parse_line(&bytes);
    }

    #[test]
    fn arbitrary_text_never_panics_and_series_parse(line in "[ a-z0-9.;=,{}\\\\\t\r-]{0,40}") {
        if let Ok(Some(parsed)) = parse(&line) {
            let key = SeriesKey::parse(&parsed.series);
            prop_assert!(key.is_ok(), "{:?} gave {:?}", line, parsed.series);
            prop_assert_eq!(key.unwrap().to_string(), parsed.series.into_owned());
        }
    }

    /// The borrowed fast path and the escaping path agree with `SeriesKey` for any path
    /// without tags.
    #[test]
    fn untagged_series_is_series_key_text(path in "[^ \t\r\n;\\p{Cc}]{1,24}") {
        let line = format!("{path} 1 2");
        let parsed = ok(&line);
        let want = SeriesKey::new(path.as_str(), std::iter::empty::<(&str, &str)>()).unwrap();
        prop_assert_eq!(parsed.series.as_ref(), want.to_string());
    }

    #[test]
    fn valid_lines_round_trip(
        name in "[a-z][a-z0-9_.\\-]{0,15}",
        tags in proptest::collection::btree_map(tag_part(false), tag_part(true), 0..4),
        value in any::<f64>().prop_filter("finite", |v| v.is_finite()),
        ts in -1i64..=i64::MAX,
        sep in "[ \t]{1,3}",
        cr in any::<bool>(),
    ) {
        let mut path = name.clone();
        for (k, v) in &tags {
            path.push(';');
            path.push_str(k);
            path.push('=');
            path.push_str(v);
        }
        let line = format!("{path}{sep}{value}{sep}{ts}{}", if cr { "\r" } else { "" });
        let parsed = ok(&line);
        prop_assert_eq!(parsed.value, value);
        prop_assert_eq!(parsed.ts, if ts == -1 { None } else { Some(ts) });
        let key = SeriesKey::new(name.as_str(), tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap();
        prop_assert_eq!(parsed.series.as_ref(), key.to_string());
    }
}
