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
        // graphite-web's parseTimeOffset: one sign for every term, units by their start.
        ("-1d6h", -108_000),
        ("-1h30min", -5_400),
        ("-1d+6h", -64_800),
        ("-2hr", -7_200),
        ("-2hrs", -7_200),
        ("-1wk", -604_800),
        ("-1yr", -31_536_000),
        ("-3mins", -180),
        // Blanks and case, which graphite-web drops from from/until.
        ("-1D", -86_400),
        ("now - 6H", -21_600),
        ("NOW-1d", -86_400),
    ];
    for (text, offset) in cases {
        assert_eq!(t(text), NOW + offset, "{text}");
    }
}

/// graphite-web's words, each with the time graphite-web 1.1.8's `parseATTime` gives at NOW
/// (Tuesday 2023-11-14 22:13:20 UTC) in UTC, quirks included (`12am` is noon, `mar2025` is
/// March 25th, `1/2/24` is in 2024).
#[test]
fn graphite_web_words_as_graphite_web_reads_them() {
    let cases = [
        ("yesterday", 1_699_833_600),
        ("today", 1_699_920_000),
        ("tomorrow", 1_700_006_400),
        ("midnight", 1_699_920_000),
        ("noon", 1_699_963_200),
        ("teatime", 1_699_977_600),
        ("noon yesterday", 1_699_876_800),
        ("6pm", 1_699_984_800),
        ("6am", 1_699_941_600),
        ("12am", 1_699_963_200),
        ("12pm", 1_699_920_000),
        ("13pm", 1_699_923_600),
        ("14:30", 1_699_972_200),
        ("2:30pm", 1_699_972_200),
        ("2:30am", 1_699_929_000),
        ("3:5", 1_699_931_100),
        ("monday", 1_699_833_600),
        ("tuesday", 1_699_920_000),
        ("wed", 1_699_401_600),
        ("sunday", 1_699_747_200),
        ("jan1", 1_672_531_200),
        ("january5", 1_672_876_800),
        ("dec25", 1_703_462_400),
        ("mar2025", 1_679_702_400),
        ("01/31/2025", 1_738_281_600),
        ("1/2/24", 1_704_153_600),
        ("1/2/70", 86_400),
        ("12/31/99", 946_598_400),
        ("yesterday-6h", 1_699_812_000),
        ("midnight+1d", 1_700_006_400),
        ("today-1mon", 1_697_328_000),
        ("noon_tomorrow", 1_700_049_600),
        ("YESTERDAY", 1_699_833_600),
        ("Noon, Tomorrow", 1_700_049_600),
        ("6pmyesterday", 1_699_898_400),
        ("16:00today", 1_699_977_600),
        ("noonmonday", 1_699_876_800),
        ("midnight monday", 1_699_833_600),
        ("00:00 20231114", 1_699_920_000),
    ];
    for (text, at) in cases {
        assert_eq!(t(text), at, "{text}");
    }
    // What graphite-web refuses too.
    for bad in ["feb30", "jan", "25:00", "bogus", "1:3am", "someday"] {
        assert!(parse_time(bad, NOW).is_err(), "{bad}");
    }
}

#[test]
fn refusals_name_the_text() {
    for bad in [
        "",
        "yesterday-6",
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
    assert_eq!(parse_interval("1h30min").unwrap(), 5_400);
    assert_eq!(parse_interval("2hrs").unwrap(), 7_200);
    // graphite-web's getUnitString refuses these too.
    for bad in ["0h", "-1h", "h", "1", "", "1mth", "5ms", "1x", "1H"] {
        assert!(parse_interval(bad).is_err(), "{bad}");
    }
}
