//! Tests of the line protocol parser: every escaping rule, every field type, precisions and
//! flooring, comments and blank lines, every refusal, and no panic on any input.

use proptest::prelude::*;

use super::{parse_line, InfluxError, InfluxPoint, LineParser, Precision, SkippedField, MAX_LINE};
use crate::registry::SeriesKey;

/// Parses with nanosecond precision; the points and skips pushed.
fn parse(line: &str) -> Result<(Vec<InfluxPoint>, Vec<SkippedField>), InfluxError> {
    parse_with(line, Precision::Nanoseconds)
}

fn parse_with(
    line: &str,
    precision: Precision,
) -> Result<(Vec<InfluxPoint>, Vec<SkippedField>), InfluxError> {
    let (mut points, mut skipped) = (Vec::new(), Vec::new());
    parse_line(line, precision, &mut points, &mut skipped)?;
    Ok((points, skipped))
}

fn points(line: &str) -> Vec<InfluxPoint> {
    let (points, skipped) = parse(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    assert!(skipped.is_empty(), "{line:?}: skipped {skipped:?}");
    points
}

/// The one point of a line.
fn point(line: &str) -> InfluxPoint {
    let mut all = points(line);
    assert_eq!(all.len(), 1, "{line:?}: {all:?}");
    all.remove(0)
}

fn series(line: &str) -> String {
    point(line).series
}

fn err(line: &str) -> InfluxError {
    match parse(line) {
        Err(e) => e,
        Ok(parsed) => panic!("{line:?} parsed as {parsed:?}"),
    }
}

fn p(series: &str, value: f64, ts: Option<i64>) -> InfluxPoint {
    InfluxPoint {
        series: series.to_owned(),
        value,
        ts,
    }
}

#[test]
fn one_point_per_numeric_field() {
    let got = points("cpu,host=a,dc=eu user=0.5,system=2i,irq=3u 1700000000000000000");
    let ts = Some(1_700_000_000);
    assert_eq!(
        got,
        [
            p("cpu.user{dc=eu,host=a}", 0.5, ts),
            p("cpu.system{dc=eu,host=a}", 2.0, ts),
            p("cpu.irq{dc=eu,host=a}", 3.0, ts),
        ]
    );
    assert_eq!(points("mem used=1"), [p("mem.used", 1.0, None)]);
}

#[test]
fn floats() {
    let cases: &[(&str, f64)] = &[
        ("1", 1.0),
        ("1.5", 1.5),
        ("-1e3", -1000.0),
        ("-1.234456e+78", -1.234456e78),
        ("1E-2", 0.01),
        ("0", 0.0),
        ("-0.5", -0.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("1.7976931348623157e308", f64::MAX),
    ];
    for (text, want) in cases {
        assert_eq!(point(&format!("m v={text}")).value, *want, "{text}");
    }
}

#[test]
fn integers_and_unsigned() {
    let cases: &[(&str, f64)] = &[
        ("1i", 1.0),
        ("-12485903i", -12_485_903.0),
        ("0i", 0.0),
        ("9223372036854775807i", i64::MAX as f64),
        ("-9223372036854775808i", i64::MIN as f64),
        ("0u", 0.0),
        ("12485903u", 12_485_903.0),
        ("18446744073709551615u", u64::MAX as f64),
    ];
    for (text, want) in cases {
        assert_eq!(point(&format!("m v={text}")).value, *want, "{text}");
    }
}

#[test]
fn strings_and_booleans_are_skipped() {
    for text in [
        "t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE",
    ] {
        let line = format!("m v={text}");
        assert_eq!(
            parse(&line),
            Ok((vec![], vec![SkippedField::Boolean])),
            "{line}"
        );
    }
    for text in [
        r#""""#,
        r#""plain""#,
        r#""with spaces, commas, = signs""#,
        r#""escaped \" quote""#,
        r#""escaped \\ backslash""#,
        r#""ends in a backslash \\""#,
        r#""other \n escapes \t stay""#,
        r#""🚀 emoji""#,
        r##""# not a comment""##,
    ] {
        let line = format!("m v={text}");
        assert_eq!(
            parse(&line),
            Ok((vec![], vec![SkippedField::String])),
            "{line}"
        );
    }
    // Mixed: numeric fields still land, in line order, around the skipped ones.
    let (got, skipped) = parse(r#"m,h=a s="x y,z=1",a=1,b=true,c=2i,d="q\"" 60000000000"#).unwrap();
    assert_eq!(
        got,
        [p("m.a{h=a}", 1.0, Some(60)), p("m.c{h=a}", 2.0, Some(60))]
    );
    assert_eq!(
        skipped,
        [
            SkippedField::String,
            SkippedField::Boolean,
            SkippedField::String
        ]
    );
    assert_eq!(SkippedField::String.as_str(), "string_field");
    assert_eq!(SkippedField::Boolean.as_str(), "boolean_field");
}

#[test]
fn measurement_escapes() {
    assert_eq!(series(r"my\ cpu v=1"), "my cpu.v");
    assert_eq!(series(r"cpu\,01 v=1"), r"cpu\,01.v");
    assert_eq!(series(r"cpu\,01,host=a v=1"), r"cpu\,01.v{host=a}");
    // `=` needs no escape in a measurement, and `\=` is not an escape there.
    assert_eq!(series(r"a=b v=1"), r"a\=b.v");
    assert_eq!(series(r"a\=b v=1"), r"a\\\=b.v");
    // A backslash before another character is literal.
    assert_eq!(series(r"a\b v=1"), r"a\\b.v");
    assert_eq!(series(r"a\ b\,c\d v=1"), r"a b\,c\\d.v");
    // Quotes are part of the name.
    assert_eq!(series(r#""q"'s' v=1"#), r#""q"'s'.v"#);
    assert_eq!(series("mesure\u{e9} v=1"), "mesure\u{e9}.v");
}

#[test]
fn backslash_runs() {
    // The reference's table: `\\` is one backslash, a lone one is literal.
    let cases: &[(&str, &str)] = &[
        (r"\", r"\"),
        (r"\\", r"\"),
        (r"\\\", r"\\"),
        (r"\\\\", r"\\"),
        (r"\\\\\", r"\\\"),
        (r"\\\\\\", r"\\\"),
    ];
    for (raw, want) in cases {
        for line in [
            format!("a{raw}b v=1"),
            format!("m,k=a{raw}b v=1"),
            format!("m a{raw}b=1"),
        ] {
            let key = SeriesKey::parse(&series(&line)).unwrap();
            let got = if line.starts_with("m,") {
                key.tag("k").unwrap().into_owned()
            } else if line.starts_with("m ") {
                key.name().trim_start_matches("m.").to_owned()
            } else {
                key.name().trim_end_matches(".v").to_owned()
            };
            assert_eq!(got, format!("a{want}b"), "{line}");
        }
    }
    // An escaped backslash does not escape what follows it.
    assert_eq!(series(r"a\\,k=v f=1"), r"a\\.f{k=v}");
    assert_eq!(series(r"m,k=v\\ f=1"), r"m.f{k=v\\}");
}

#[test]
fn tag_and_field_key_escapes() {
    assert_eq!(
        series(r"m,tag\ key=tag\ value f=1"),
        r"m.f{tag key=tag value}"
    );
    assert_eq!(series(r"m,a\,b=c\,d f=1"), r"m.f{a\,b=c\,d}");
    assert_eq!(series(r"m,a\=b=c\=d f=1"), r"m.f{a\=b=c\=d}");
    assert_eq!(series(r"m,k=\{x\} f=1"), r"m.f{k=\\\{x\\\}}");
    assert_eq!(series(r"m,k={x} f=1"), r"m.f{k=\{x\}}");
    assert_eq!(series(r"m field\ key=1"), r"m.field key");
    assert_eq!(series(r"m field\,key=1"), r"m.field\,key");
    assert_eq!(series(r"m field\=key=1"), r"m.field\=key");
    assert_eq!(series(r"m fie\ld=1"), r"m.fie\\ld");
    assert_eq!(series("m,k=🍭 f=1"), "m.f{k=🍭}");
    // Quotes in keys and values are literal.
    assert_eq!(series(r#"m,k="v" "f"=1"#), r#"m."f"{k="v"}"#);
    // The texts parse back to what was written.
    let key = SeriesKey::parse(&series(r"m\ x,a\ b=c\,d\=e f\=g=1")).unwrap();
    assert_eq!(key.name(), "m x.f=g");
    assert_eq!(key.tag("a b").as_deref(), Some("c,d=e"));
}

#[test]
fn tags_are_sorted() {
    assert_eq!(series("m,z=1,a=2,m=3 f=1"), "m.f{a=2,m=3,z=1}");
    assert_eq!(series("m,z=1,a=2 f=1"), series("m,a=2,z=1 f=1"));
}

#[test]
fn repeated_field_key_keeps_the_last() {
    assert_eq!(
        points("m a=1,b=2,a=3"),
        [p("m.b", 2.0, None), p("m.a", 3.0, None)]
    );
    assert_eq!(
        parse(r#"m a=1,a="s""#),
        Ok((vec![], vec![SkippedField::String]))
    );
    assert_eq!(points(r#"m a="s",a=2"#), [p("m.a", 2.0, None)]);
}

#[test]
fn blanks_comments_and_line_endings() {
    for line in [
        "",
        "   ",
        "\t",
        "\r",
        " \t \r",
        "# a comment",
        "#",
        "   # indented comment with m v=1 1",
        "#m v=1",
    ] {
        assert_eq!(parse(line), Ok((vec![], vec![])), "{line:?}");
    }
    let want = point("m,k=v f=1 1000000000");
    for line in [
        "m,k=v f=1 1000000000\r",
        "  m,k=v f=1 1000000000  ",
        "\tm,k=v f=1 1000000000\t\r",
        "m,k=v   f=1   1000000000",
    ] {
        assert_eq!(point(line), want, "{line:?}");
    }
    assert_eq!(point("m f=1 \r").ts, None);
}

#[test]
fn precisions() {
    use Precision::*;
    let cases: &[(Precision, i64, i64)] = &[
        (Nanoseconds, 1_700_000_000_999_999_999, 1_700_000_000),
        (Microseconds, 1_700_000_000_500_000, 1_700_000_000),
        (Milliseconds, 1_700_000_000_999, 1_700_000_000),
        (Seconds, 1_700_000_000, 1_700_000_000),
        (Minutes, 28_333_333, 1_699_999_980),
        (Hours, 472_222, 1_699_999_200),
        // Negative timestamps floor towards the past.
        (Nanoseconds, -1, -1),
        (Nanoseconds, -1_000_000_000, -1),
        (Nanoseconds, -1_000_000_001, -2),
        (Microseconds, -1, -1),
        (Milliseconds, -1_500, -2),
        (Seconds, -5, -5),
        (Minutes, -1, -60),
        (Hours, -1, -3_600),
        (Nanoseconds, 0, 0),
        (Nanoseconds, i64::MAX, i64::MAX / 1_000_000_000),
        (Nanoseconds, i64::MIN, -9_223_372_037),
        (Seconds, i64::MIN, i64::MIN),
    ];
    for &(precision, ts, want) in cases {
        let line = format!("m v=1 {ts}");
        let got = parse_with(&line, precision).unwrap().0;
        assert_eq!(got[0].ts, Some(want), "{precision:?} {ts}");
    }
    for (precision, ts) in [
        (Minutes, i64::MAX / 60 + 1),
        (Minutes, i64::MIN / 60 - 1),
        (Hours, i64::MAX / 3_600 + 1),
    ] {
        let line = format!("m v=1 {ts}");
        assert_eq!(
            parse_with(&line, precision),
            Err(InfluxError::InvalidTimestamp),
            "{precision:?} {ts}"
        );
    }
}

#[test]
fn precision_names() {
    use Precision::*;
    for (text, want) in [
        ("", Nanoseconds),
        ("ns", Nanoseconds),
        ("n", Nanoseconds),
        ("u", Microseconds),
        ("us", Microseconds),
        ("ms", Milliseconds),
        ("s", Seconds),
        ("m", Minutes),
        ("h", Hours),
    ] {
        assert_eq!(Precision::parse_v1(text), Ok(want), "{text:?}");
    }
    for (text, want) in [
        ("", Nanoseconds),
        ("ns", Nanoseconds),
        ("us", Microseconds),
        ("ms", Milliseconds),
        ("s", Seconds),
    ] {
        assert_eq!(Precision::parse_v2(text), Ok(want), "{text:?}");
    }
    for text in ["x", "NS", "sec", "µs", "rfc3339"] {
        let e = Precision::parse_v1(text).unwrap_err();
        assert!(e.contains("ns, u, ms, s, m, h"), "{e}");
    }
    for text in ["n", "u", "m", "h", "x"] {
        let e = Precision::parse_v2(text).unwrap_err();
        assert!(e.contains("ns, us, ms, s"), "{e}");
    }
}

#[test]
fn refusals() {
    use InfluxError::*;
    let cases: &[(&str, InfluxError)] = &[
        ("m", MissingFields),
        ("m   ", MissingFields),
        ("m,k=v", MissingFields),
        ("m,k=v ", MissingFields),
        (r"m\ v=1", MissingFields),
        (",k=v f=1", InvalidMeasurement),
        ("m\u{1}x f=1", InvalidMeasurement),
        ("m\u{85} f=1", InvalidMeasurement),
        ("m, f=1", InvalidTag),
        ("m,k f=1", InvalidTag),
        ("m,=v f=1", InvalidTag),
        ("m,k= f=1", InvalidTag),
        ("m,k=v, f=1", InvalidTag),
        ("m,k=v=w f=1", InvalidTag),
        ("m,k=v,,j=w f=1", InvalidTag),
        ("m,k=v,k=w f=1", InvalidTag),
        ("m,k=v,j=1,k=v f=1", InvalidTag),
        ("m,k=v\u{7f} f=1", InvalidTag),
        ("m,k\u{0}=v f=1", InvalidTag),
        ("m f", InvalidField),
        ("m f 1", InvalidField),
        ("m =1", InvalidField),
        ("m f=1,", InvalidField),
        ("m f=1,,g=2", InvalidField),
        ("m f=1,g", InvalidField),
        ("m f\u{1b}=1", InvalidField),
        ("m f=", InvalidFieldValue),
        ("m f= 1", InvalidFieldValue),
        ("m f=,g=1", InvalidFieldValue),
        ("m f=abc", InvalidFieldValue),
        ("m f=1x", InvalidFieldValue),
        ("m f=1.5i", InvalidFieldValue),
        ("m f=1.5u", InvalidFieldValue),
        ("m f=i", InvalidFieldValue),
        ("m f=-u", InvalidFieldValue),
        ("m f=-1u", InvalidFieldValue),
        ("m f=+1", InvalidFieldValue),
        ("m f=+1i", InvalidFieldValue),
        ("m f=1e", InvalidFieldValue),
        ("m f=1e+", InvalidFieldValue),
        ("m f=.", InvalidFieldValue),
        ("m f=-", InvalidFieldValue),
        ("m f=1.2.3", InvalidFieldValue),
        ("m f=0x10", InvalidFieldValue),
        ("m f=nan", InvalidFieldValue),
        ("m f=NaN", InvalidFieldValue),
        ("m f=inf", InvalidFieldValue),
        ("m f=-Infinity", InvalidFieldValue),
        ("m f=1e400", InvalidFieldValue),
        ("m f=yes", InvalidFieldValue),
        ("m f=tRUE", InvalidFieldValue),
        ("m f='s'", InvalidFieldValue),
        ("m f=9223372036854775808i", InvalidFieldValue),
        ("m f=-9223372036854775809i", InvalidFieldValue),
        ("m f=18446744073709551616u", InvalidFieldValue),
        (r#"m f="a"b"#, InvalidFieldValue),
        (r#"m f="a""b""#, InvalidFieldValue),
        ("m f=1\t2", InvalidFieldValue),
        (r#"m f=""#, UnterminatedString),
        (r#"m f="abc"#, UnterminatedString),
        (r#"m f="abc\""#, UnterminatedString),
        (r#"m f="abc\"#, UnterminatedString),
        (r#"m f="a,g=1 123"#, UnterminatedString),
        ("m f=1 x", InvalidTimestamp),
        ("m f=1 1.5", InvalidTimestamp),
        ("m f=1 1e9", InvalidTimestamp),
        ("m f=1 +1", InvalidTimestamp),
        ("m f=1 -", InvalidTimestamp),
        ("m f=1 1 2", InvalidTimestamp),
        ("m f=1 1\t2", InvalidTimestamp),
        ("m f=1 9223372036854775808", InvalidTimestamp),
    ];
    for (line, want) in cases {
        assert_eq!(err(line), *want, "{line:?}");
    }
}

#[test]
fn a_refused_line_pushes_nothing() {
    let (mut points, mut skipped) = (vec![p("before", 1.0, None)], vec![SkippedField::String]);
    for line in [
        r#"m a=1,s="x",b=true,c=2 bad"#,
        r#"m a=1,s="x",c=2,d"#,
        r#"m a=1,s="x",c=2,d="#,
    ] {
        assert!(parse_line(line, Precision::Seconds, &mut points, &mut skipped).is_err());
        assert_eq!(points, [p("before", 1.0, None)]);
        assert_eq!(skipped, [SkippedField::String]);
    }
    // A series key refused while emitting (the first fields already built) is undone too.
    let long_field = "f".repeat(SeriesKey::MAX_LEN);
    let line = format!("m a=1,s=\"x\",{long_field}=2");
    assert_eq!(
        parse_line(&line, Precision::Seconds, &mut points, &mut skipped),
        Err(InfluxError::InvalidSeries)
    );
    assert_eq!(points, [p("before", 1.0, None)]);
    assert_eq!(skipped, [SkippedField::String]);
    // And a good line appends.
    parse_line("m a=1 7", Precision::Seconds, &mut points, &mut skipped).unwrap();
    assert_eq!(points, [p("before", 1.0, None), p("m.a", 1.0, Some(7))]);
}

#[test]
fn series_length_limits() {
    // Exactly at the limit is accepted, one byte more is refused.
    let name = "m".repeat(SeriesKey::MAX_LEN - 2);
    assert_eq!(series(&format!("{name} f=1")).len(), SeriesKey::MAX_LEN);
    let name = "m".repeat(SeriesKey::MAX_LEN - 1);
    assert_eq!(err(&format!("{name} f=1")), InfluxError::InvalidSeries);
    let value = "v".repeat(SeriesKey::MAX_LEN);
    assert_eq!(err(&format!("m,k={value} f=1")), InfluxError::InvalidSeries);
    // Only string fields: no series is built, so nothing is too long.
    assert_eq!(
        parse(&format!("{name} f=\"s\"")),
        Ok((vec![], vec![SkippedField::String]))
    );
}

#[test]
fn line_length_limit() {
    let head = "m f=\"";
    let fits = format!("{head}{}\"", "x".repeat(MAX_LINE - head.len() - 1));
    assert_eq!(fits.len(), MAX_LINE);
    assert_eq!(parse(&fits), Ok((vec![], vec![SkippedField::String])));
    assert!(parse(&format!("{fits}\r")).is_ok());
    let long = format!("{head}{}\"", "x".repeat(MAX_LINE - head.len()));
    assert_eq!(err(&long), InfluxError::LineTooLong);
}

#[test]
fn reasons_are_stable() {
    let names: Vec<&str> = InfluxError::ALL.iter().map(|e| e.as_str()).collect();
    assert_eq!(
        names,
        [
            "missing_fields",
            "invalid_measurement",
            "invalid_tag",
            "invalid_field",
            "invalid_field_value",
            "invalid_timestamp",
            "unterminated_string",
            "line_too_long",
            "invalid_series",
        ]
    );
    for e in InfluxError::ALL {
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn snapshot_of_a_telegraf_batch() {
    let body = "\
# telegraf output
cpu,cpu=cpu-total,host=web\\ 1 usage_user=1.5,usage_system=0.5,usage_idle=98 1700000000000000000
mem,host=web\\ 1 used=123456789i,available_percent=41.2,swap=\"off\" 1700000000000000000

disk,host=web\\ 1,path=/var\\,log,fstype=ext4 free=1024u,inodes_free=77i,readonly=false 1700000000000000000
";
    let mut rows = Vec::new();
    for line in body.lines() {
        let (mut points, mut skipped) = (Vec::new(), Vec::new());
        let result = parse_line(line, Precision::Nanoseconds, &mut points, &mut skipped);
        rows.push(serde_json::json!({
            "line": line,
            "result": result.map_err(|e| e.as_str()),
            "points": points
                .iter()
                .map(|p| serde_json::json!([p.series, p.value, p.ts]))
                .collect::<Vec<_>>(),
            "skipped": skipped.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        }));
    }
    insta::with_settings!({ description => body }, {
        insta::assert_json_snapshot!("telegraf_batch", rows);
    });
}

/// Lines with more fields and tags than the parser handles on its short paths: repeated
/// field keys among many fields keep the last, many tags are sorted, a repeated tag among
/// many is refused.
#[test]
fn many_fields_and_tags() {
    let fields: Vec<String> = (0..20).map(|i| format!("f{:02}={i}", i % 7)).collect();
    let line = format!("m {} 5", fields.join(","));
    let got: Vec<(String, f64)> = points(&line)
        .into_iter()
        .map(|p| (p.series, p.value))
        .collect();
    // f00..f06 repeat every 7 fields; each keeps its last value, in the line order of it.
    let want: Vec<(String, f64)> = (13..20)
        .map(|i| (format!("m.f{:02}", i % 7), i as f64))
        .collect();
    assert_eq!(got, want);

    let tags: Vec<String> = (0..12).rev().map(|i| format!("t{i:02}=v{i}")).collect();
    let sorted: Vec<String> = (0..12).map(|i| format!("t{i:02}=v{i}")).collect();
    let line = format!("m,{} a=1", tags.join(","));
    assert_eq!(series(&line), format!("m.a{{{}}}", sorted.join(",")));
    let line = format!("m,{},t05=again a=1", tags.join(","));
    assert_eq!(err(&line), InfluxError::InvalidTag);
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(line in "[ -~\t\r\\\\\"é🍭]{0,60}") {
        let _ = parse(&line);
    }

    #[test]
    fn arbitrary_strings_never_panic(line in any::<String>()) {
        let _ = parse(&line);
    }

    /// Whatever is accepted gives series texts that `SeriesKey` parses back unchanged, and a
    /// refusal pushes nothing.
    #[test]
    fn accepted_series_are_canonical(
        line in "[mkvf0-9 ,=\\\\\"ti.u-]{0,40}",
        precision in prop_oneof![
            Just(Precision::Nanoseconds),
            Just(Precision::Seconds),
            Just(Precision::Hours),
        ],
    ) {
        let (mut points, mut skipped) = (Vec::new(), Vec::new());
        match parse_line(&line, precision, &mut points, &mut skipped) {
            Ok(()) => {
                for point in &points {
                    let key = SeriesKey::parse(&point.series);
                    prop_assert!(key.is_ok(), "{:?} gave {:?}", line, point.series);
                    prop_assert_eq!(key.unwrap().to_string(), point.series.clone());
                }
            }
            Err(_) => {
                prop_assert!(points.is_empty());
                prop_assert!(skipped.is_empty());
            }
        }
    }

    /// One parser reused across lines gives for each what a fresh one gives: nothing of a
    /// line, accepted or refused, is left for the next.
    #[test]
    fn a_reused_parser_forgets_the_last_line(
        lines in proptest::collection::vec(
            "[mkv\\\\ ,=]{1,6}(,[kt\\\\ ,=]{1,3}=[v\\\\ ,=]{1,3}){0,3} ([fg\\\\,=]{1,3}=(1|2i|\"s\"|t|x),){0,3}[fg]=3u( 7)?",
            1..12,
        ),
    ) {
        let mut parser = LineParser::default();
        for line in &lines {
            let (mut points, mut skipped) = (Vec::new(), Vec::new());
            let fresh = parse_line(line, Precision::Seconds, &mut points, &mut skipped);
            let reused = parser.parse(line, Precision::Seconds);
            prop_assert_eq!(reused, fresh, "{:?}", line);
            let got: Vec<InfluxPoint> = parser
                .points()
                .map(|(series, value)| p(series, value, parser.ts()))
                .collect();
            prop_assert_eq!(got, points, "{:?}", line);
            prop_assert_eq!(parser.skipped(), &skipped[..], "{:?}", line);
        }
    }

    /// The thread's memo of series parts changes nothing: each line, parsed where its
    /// series part may be remembered (lines of the same series part and other fields, good
    /// or bad, came before), gives what it gives on a thread that never parsed a line.
    #[test]
    fn the_series_memo_gives_what_parsing_gives(
        series in proptest::collection::vec(
            "[mkv\\\\ ,=]{1,6}(,[kt\\\\ ,=]{1,3}=[v\\\\ ,=]{1,3}){0,3}", 1..4),
        rests in proptest::collection::vec(
            " ([fg\\\\,=]{1,3}=(1|2i|\"s\"|t|x),){0,3}[fg]=3u( 7)?", 1..4),
    ) {
        let on_a_new_thread = |line: String| std::thread::spawn(move || parse(&line)).join().unwrap();
        for series in &series {
            for rest in &rests {
                let line = format!("{series}{rest}");
                let cold = on_a_new_thread(line.clone());
                prop_assert_eq!(parse(&line), cold.clone(), "{:?}", line);
                prop_assert_eq!(parse(&line), cold, "{:?}, again", line);
            }
        }
    }

    /// A line written with the protocol's escapes parses back to its parts.
    #[test]
    fn escaped_lines_round_trip(
        measurement in "[a-z ,=\\\\{}é]{1,8}",
        tags in proptest::collection::btree_map("[a-z ,=\\\\{}]{1,6}", "[a-z ,=\\\\{}é]{1,6}", 0..4),
        field in "[a-z ,=\\\\{}]{1,6}",
        value in any::<i64>(),
        ts in any::<i64>(),
    ) {
        let escape = |s: &str, specials: &[char]| {
            let mut out = String::new();
            for c in s.chars() {
                if c == '\\' || specials.contains(&c) {
                    out.push('\\');
                }
                out.push(c);
            }
            out
        };
        let mut line = escape(&measurement, &[',', ' ']);
        for (k, v) in &tags {
            line.push(',');
            line.push_str(&escape(k, &[',', '=', ' ']));
            line.push('=');
            line.push_str(&escape(v, &[',', '=', ' ']));
        }
        line.push_str(&format!(" {}={value}i {ts}", escape(&field, &[',', '=', ' '])));
        let (points, skipped) = parse(&line).unwrap();
        prop_assert!(skipped.is_empty());
        prop_assert_eq!(points.len(), 1);
        let key = SeriesKey::new(
            format!("{measurement}.{field}"),
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ).unwrap();
        prop_assert_eq!(&points[0].series, &key.to_string());
        prop_assert_eq!(points[0].value, value as f64);
        prop_assert_eq!(points[0].ts, Some(ts.div_euclid(1_000_000_000)));
    }
}
