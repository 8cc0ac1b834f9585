//! Tests of the one time grammar (CLI, HTTP and render alike): every accepted form and the
//! refusals.

use super::{parse_interval, parse_time};

const NOW: i64 = 1_700_000_000;

fn t(text: &str) -> i64 {
    parse_time(text, NOW).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn now_seconds_and_dates() {
    assert_eq!(t("now"), NOW);
    assert_eq!(t("1600000000"), 1_600_000_000);
    assert_eq!(t("0"), 0);
    assert_eq!(t("20231114"), 1_699_920_000);
    assert_eq!(t("22:13_20231114"), 1_700_000_000 - 20);
    assert_eq!(t("00:00_19700101"), 0);
    // Eight digits that are no date (month 13) are seconds, as in graphite-web.
    assert_eq!(t("20231314"), 20_231_314);
}

#[test]
fn rfc3339_and_dates_without_a_zone() {
    assert_eq!(t("2023-11-14T22:13:20Z"), NOW);
    assert_eq!(t("2023-11-14T23:13:20+01:00"), NOW);
    // Without a zone: UTC.
    assert_eq!(t("2023-11-14T22:13:20"), NOW);
    assert_eq!(t("2023-11-14 22:13:20"), NOW);
    assert_eq!(t("2023-11-14 22:13"), NOW - 20);
    assert_eq!(t("2023-11-14T22:13"), NOW - 20);
    assert_eq!(t("2023-11-14"), 1_699_920_000);
    assert_eq!(t(" now "), NOW);
}

#[test]
fn relative_offsets_in_every_unit() {
    let cases = [
        ("-30s", -30),
        ("-30sec", -30),
        ("-1second", -1),
        ("-2seconds", -2),
        ("-5min", -300),
        ("-5m", -300),
        ("-1minute", -60),
        ("-2minutes", -120),
        ("-6h", -21_600),
        ("-1hour", -3_600),
        ("-2hours", -7_200),
        ("-7d", -604_800),
        ("-1day", -86_400),
        ("-2days", -172_800),
        ("-1w", -604_800),
        ("-2weeks", -1_209_600),
        ("-1mon", -2_592_000),
        ("-2months", -5_184_000),
        ("-1y", -31_536_000),
        ("-1year", -31_536_000),
        ("-2years", -63_072_000),
        ("+1h", 3_600),
        ("now-6h", -21_600),
        ("now+30s", 30),
        ("-1d-6h", -108_000),
    ];
    for (text, offset) in cases {
        assert_eq!(t(text), NOW + offset, "{text}");
    }
}

#[test]
fn refusals_name_the_text() {
    for bad in [
        "",
        "yesterday",
        "-6",
        "-6x",
        "6h",
        "now-",
        "25:00_20231114",
        "12:00_2023111",
    ] {
        let err = parse_time(bad, NOW).unwrap_err().to_string();
        assert!(err.contains(&format!("{bad:?}")), "{err}");
        assert!(err.contains("RFC 3339"), "{err}");
    }
    // A bare negative number is an offset missing its unit, not a second before 1970.
    assert!(parse_time("-1", NOW).is_err());
    assert!(parse_time("2023-13-14", NOW).is_err());
}

#[test]
fn intervals() {
    assert_eq!(parse_interval("1h").unwrap(), 3_600);
    assert_eq!(parse_interval("5min").unwrap(), 300);
    assert_eq!(parse_interval("30s").unwrap(), 30);
    assert_eq!(parse_interval("1d").unwrap(), 86_400);
    for bad in ["0h", "-1h", "h", "1", ""] {
        assert!(parse_interval(bad).is_err(), "{bad}");
    }
}
