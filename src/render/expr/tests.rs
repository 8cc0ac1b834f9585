//! Tests of the target parser: paths with globs and tags, nesting, both quote styles and
//! escapes, numbers, booleans, Grafana's aliasSub wrapping, and errors that point at the fault.

use super::{parse_target, Expr};

fn path(p: &str) -> Expr {
    Expr::Path(p.to_owned())
}

fn string(s: &str) -> Expr {
    Expr::Str(s.to_owned())
}

fn args(target: &str) -> (String, Vec<Expr>) {
    match parse_target(target).unwrap() {
        Expr::Call { name, args, .. } => (name, args),
        other => panic!("{target}: {other:?}"),
    }
}

fn error(target: &str) -> String {
    parse_target(target).unwrap_err().to_string()
}

#[test]
fn paths_keep_globs_braces_and_tags() {
    for p in [
        "a.b.c",
        "a.{b,c}.[a-z]*",
        "cpu.load;host=a;dc!=x",
        "a-b_c:d.e?[!x]",
    ] {
        assert_eq!(parse_target(p).unwrap(), path(p));
    }
    assert_eq!(parse_target("  a.b  ").unwrap(), path("a.b"));
}

#[test]
fn grafana_alias_sub_wrapping() {
    let (name, a) = args(r#"aliasSub(a.b.c, "(^.*$)", "\1 A")"#);
    assert_eq!(name, "aliasSub");
    assert_eq!(a, [path("a.b.c"), string("(^.*$)"), string(r"\1 A")]);
}

#[test]
fn nesting_numbers_strings_and_booleans() {
    let (name, a) =
        args("sumSeries( scale(a.{x,y}, -2.5) ,b.*, 'it\\'s', \"q\\\"\", 1e3, 7, true,false)");
    assert_eq!(name, "sumSeries");
    let Expr::Call {
        name,
        args: inner,
        text,
        ..
    } = &a[0]
    else {
        panic!("{a:?}")
    };
    assert_eq!(
        (name.as_str(), text.as_str()),
        ("scale", "scale(a.{x,y}, -2.5)")
    );
    assert_eq!(inner, &[path("a.{x,y}"), Expr::Number(-2.5)]);
    assert_eq!(
        &a[1..],
        [
            path("b.*"),
            string("it's"),
            string("q\""),
            Expr::Number(1000.0),
            Expr::Int(7),
            Expr::Bool(true),
            Expr::Bool(false),
        ]
    );
    assert_eq!(args("constantLine()").1, []);
    assert_eq!(
        args(r"f('a\\b', '\d+')").1,
        [string(r"a\\b"), string(r"\d+")]
    );
    assert_eq!(
        args("f(1.2.3, inf, INF, None, NONE, True, FALSE, info, nonesuch)").1,
        [
            path("1.2.3"),
            Expr::Number(f64::INFINITY),
            Expr::Number(f64::INFINITY),
            Expr::None,
            Expr::None,
            Expr::Bool(true),
            Expr::Bool(false),
            path("info"),
            path("nonesuch"),
        ]
    );
    // A target is a path or a call, whatever its name.
    assert_eq!(parse_target("none").unwrap(), path("none"));
    assert_eq!(parse_target("true").unwrap(), path("true"));
    assert_eq!(parse_target("5").unwrap(), path("5"));
    assert_eq!(parse_target(" 1.5 ").unwrap(), path("1.5"));
}

#[test]
fn errors_point_at_the_fault() {
    let cases = [
        (
            "sumSeries(a.b",
            "missing `)` to close `sumSeries(` at column 14",
        ),
        (
            "scale(a.b 2)",
            "expected `,` or `)`, found `2` at column 11",
        ),
        ("alias(a, 'x)", "unterminated string at column 10"),
        ("a.b)", "unexpected `)` at column 4"),
        ("f(,a)", "expected an expression, found `,` at column 3"),
        ("a.b(c)", "`a.b` is not a function name at column 1"),
        ("", "expected an expression, found the end at column 1"),
        ("f(a) g", "unexpected `g` at column 6"),
    ];
    for (target, message) in cases {
        let err = error(target);
        assert!(err.contains(message), "{target}: {err}");
        assert!(err.contains(&format!("{target:?}")), "{err}");
    }
    let deep = format!("{}a{}", "f(".repeat(100), ")".repeat(100));
    assert!(error(&deep).contains("nested too deeply"));
}

#[test]
fn keyword_arguments_follow_positional_ones() {
    let Expr::Call {
        args: positional,
        kwargs,
        ..
    } = parse_target(r#"summarize(a.b, "1h", func = "max", alignToFrom=true)"#).unwrap()
    else {
        panic!()
    };
    assert_eq!(positional, [path("a.b"), string("1h")]);
    assert_eq!(
        kwargs,
        [
            ("func".to_owned(), string("max")),
            ("alignToFrom".to_owned(), Expr::Bool(true))
        ]
    );
    // A tagged path is positional: it does not start with a name and `=`.
    let (_, a) = args("sumSeries(cpu;host=a, x.y)");
    assert_eq!(a, [path("cpu;host=a"), path("x.y")]);
    assert!(error(r#"alias(newName="a", x.y)"#)
        .contains("a positional argument after keyword arguments at column 20"));
    assert!(error(r#"alias(x, n="a", n="b")"#).contains("keyword argument `n` given twice"));
}
