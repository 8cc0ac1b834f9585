//! Tests for tiers.toml parsing and validation.

use super::*;

/// Parses `text` as `test.toml` and returns the refusal, failing if it was accepted.
fn refusal(text: &str) -> Error {
    match TiersConfig::from_toml_str(text, "test.toml") {
        Ok(config) => panic!("accepted: {config:?}\n{text}"),
        Err(err) => err,
    }
}

/// Asserts that `text` is refused at `line` about `field`, with `words` in the message.
#[track_caller]
fn assert_refused(text: &str, line: usize, field: &str, words: &str) {
    let err = refusal(text);
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("test.toml:{line}: {field}: ")),
        "wanted line {line} and field {field}, got: {shown}"
    );
    assert!(shown.contains(words), "wanted {words:?} in: {shown}");
    match err {
        Error::Config {
            file,
            line: got,
            field: got_field,
            ..
        } => {
            assert_eq!(file, "test.toml");
            assert_eq!(got, Some(line));
            assert_eq!(got_field, field);
        }
        other => panic!("not a config error: {other:?}"),
    }
}

/// A valid one-tier file; tests replace one line to break it. Line numbers:
/// 1 [engine], 2 future_bound, 3 series_per_chunk, 4 max_points, 5 blank, 6 [[tier]],
/// 7 name, 8 resolution, 9 period, 10 retention, 11 create_ahead.
const ONE_TIER: &str = r#"[engine]
future_bound = "1h"
series_per_chunk = 256
max_points = 1500

[[tier]]
name = "1m"
resolution = "1m"
period = "1d"
retention = "48h"
create_ahead = 1
"#;

fn one_tier_with(from: &str, to: &str) -> String {
    assert!(ONE_TIER.contains(from), "{from}");
    ONE_TIER.replacen(from, to, 1)
}

#[test]
fn shipped_toml_equals_the_default() {
    let shipped = TiersConfig::from_toml_str(TiersConfig::SHIPPED_TOML, "tiers.toml").unwrap();
    assert_eq!(shipped, TiersConfig::default());
}

#[test]
fn shipped_file_on_disk_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tiers.toml");
    assert_eq!(TiersConfig::load(&path).unwrap(), TiersConfig::default());
}

#[test]
fn default_is_valid_and_as_documented() {
    let config = TiersConfig::default();
    config.validate().unwrap();
    let summary: Vec<(String, String, String, String, u32, u32)> = config
        .tiers
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.resolution.to_string(),
                t.period.to_string(),
                t.retention.to_string(),
                t.create_ahead,
                t.buckets_per_period(),
            )
        })
        .collect();
    let expected = [
        ("1m", "1m", "6h", "2d", 1, 360),
        ("5m", "5m", "1d", "14d", 1, 288),
        ("1h", "1h", "10d", "90d", 1, 240),
        ("1d", "1d", "73d", "1825d", 1, 73),
    ]
    .map(|(n, r, p, k, c, b)| (n.into(), r.into(), p.into(), k.into(), c, b));
    assert_eq!(summary, expected);
    assert_eq!(config.engine.future_bound, Span::from_secs(3_600));
    assert_eq!(config.engine.series_per_chunk, 256);
    assert_eq!(config.engine.max_points, 1_500);
}

#[test]
fn tier_index_finds_by_name() {
    let config = TiersConfig::default();
    assert_eq!(config.tier_index("1m"), Some(0));
    assert_eq!(config.tier_index("1d"), Some(3));
    assert_eq!(config.tier_index("1w"), None);
}

#[test]
fn engine_table_and_create_ahead_are_optional() {
    let text = r#"
[[tier]]
name = "1m"
resolution = "1m"
period = "1d"
retention = "2d"
"#;
    let config = TiersConfig::from_toml_str(text, "<string>").unwrap();
    assert_eq!(config.engine, EngineSettings::default());
    assert_eq!(config.tiers[0].create_ahead, DEFAULT_CREATE_AHEAD);

    let partial = format!("[engine]\nmax_points = 10\n{text}");
    let config = TiersConfig::from_toml_str(&partial, "<string>").unwrap();
    assert_eq!(config.engine.max_points, 10);
    assert_eq!(config.engine.series_per_chunk, DEFAULT_SERIES_PER_CHUNK);
}

#[test]
fn create_ahead_zero_is_allowed() {
    let text = one_tier_with("create_ahead = 1", "create_ahead = 0");
    let config = TiersConfig::from_toml_str(&text, "test.toml").unwrap();
    assert_eq!(config.tiers[0].create_ahead, 0);
}

#[test]
fn five_tiers_with_a_ten_second_tier() {
    // The shipped file with the 10s tier its comments describe put first (finest first).
    let shipped = TiersConfig::SHIPPED_TOML;
    let first_tier = shipped.find("\n[[tier]]\n").unwrap();
    let ten_seconds = r#"
[[tier]]
name = "10s"
resolution = "10s"
period = "1h"
retention = "24h"
create_ahead = 1
"#;
    let text = format!(
        "{}{ten_seconds}{}",
        &shipped[..first_tier],
        &shipped[first_tier..]
    );
    let config = TiersConfig::from_toml_str(&text, "five.toml").unwrap();
    let names: Vec<&str> = config.tiers.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["10s", "1m", "5m", "1h", "1d"]);
    assert_eq!(config.tiers[1..], TiersConfig::default().tiers[..]);
    let ten = &config.tiers[0];
    assert_eq!(ten.resolution, Span::from_secs(10));
    assert_eq!(ten.period, Span::from_secs(3_600));
    assert_eq!(ten.buckets_per_period(), 360);
    assert_eq!(config.tier_index("10s"), Some(0));
    assert_eq!(config.tier_index("1d"), Some(4));
    config.validate().unwrap();

    // 06:00:25 on the first day: the seventh 1h period, third 10s bucket; the second 6h
    // period of the 1m tier, its first bucket.
    let placements = crate::time::locate(&config.tiers, 21_600 + 25);
    assert_eq!(placements.len(), 5);
    assert_eq!(placements[0].period_start, 21_600);
    assert_eq!(placements[0].bucket, 2);
    assert_eq!(placements[1].period_start, 21_600);
    assert_eq!(placements[1].bucket, 0);
}

#[test]
fn refuses_a_config_without_tiers() {
    let err = refusal("[engine]\nmax_points = 10\n");
    assert_eq!(
        err.to_string(),
        "test.toml: tier: at least one [[tier]] is needed, or samples have nowhere to go"
    );
    let err = TiersConfig::from_toml_str("", "empty.toml").unwrap_err();
    assert!(err.to_string().starts_with("empty.toml: tier: "), "{err}");
    assert_refused("\n\ntier = []\n", 3, "tier", "at least one [[tier]]");
}

#[test]
fn refuses_bad_names() {
    assert_refused(
        &one_tier_with(r#"name = "1m""#, r#"name = """#),
        7,
        "tier[0] name",
        "non-empty name",
    );
    assert_refused(
        &one_tier_with(r#"name = "1m""#, r#"name = "one minute""#),
        7,
        "tier[0] name",
        r#"tier name "one minute" may only contain letters, digits"#,
    );
    assert_refused(
        &one_tier_with(r#"name = "1m""#, r#"name = "a/b""#),
        7,
        "tier[0] name",
        "may only contain",
    );
    // A tier's name is a directory's: "." and ".." would name others.
    assert_refused(
        &one_tier_with(r#"name = "1m""#, r#"name = ".""#),
        7,
        "tier[0] name",
        "may only contain",
    );
}

#[test]
fn refuses_duplicate_names_at_the_second() {
    let text = format!("{ONE_TIER}\n[[tier]]\nname = \"1m\"\nresolution = \"5m\"\nperiod = \"7d\"\nretention = \"14d\"\n");
    assert_refused(
        &text,
        14,
        "tier[1] name",
        r#"tier name "1m" is already used by tier[0]"#,
    );
}

#[test]
fn refuses_zero_spans() {
    assert_refused(
        &one_tier_with(r#"resolution = "1m""#, r#"resolution = "0s""#),
        8,
        r#"tier "1m" resolution"#,
        "resolution must be more than 0s",
    );
    assert_refused(
        &one_tier_with(r#"period = "1d""#, r#"period = "0d""#),
        9,
        r#"tier "1m" period"#,
        "period must be more than 0s",
    );
    assert_refused(
        &one_tier_with(r#"retention = "48h""#, r#"retention = "0h""#),
        10,
        r#"tier "1m" retention"#,
        "retention must be more than 0s",
    );
    assert_refused(
        &one_tier_with(r#"future_bound = "1h""#, r#"future_bound = "0s""#),
        2,
        "engine.future_bound",
        "future_bound must be more than 0s",
    );
}

#[test]
fn refuses_malformed_durations() {
    assert_refused(
        &one_tier_with(r#"period = "1d""#, r#"period = "1 day""#),
        9,
        r#"tier "1m" period"#,
        "not a duration",
    );
    assert_refused(
        &one_tier_with(r#"future_bound = "1h""#, r#"future_bound = "soon""#),
        2,
        "engine.future_bound",
        "not a duration",
    );
    // The name is not usable yet, so the field falls back to the index.
    let text = one_tier_with(r#"name = "1m""#, r#"name = "a b""#);
    let text = text.replacen(r#"resolution = "1m""#, r#"resolution = "1x""#, 1);
    assert_refused(&text, 8, "tier[0] resolution", "must end in a unit");
}

#[test]
fn refuses_a_resolution_that_does_not_divide_the_period() {
    assert_refused(
        &one_tier_with(r#"resolution = "1m""#, r#"resolution = "7m""#),
        8,
        r#"tier "1m" resolution"#,
        "resolution 7m does not divide the period 1d evenly",
    );
}

#[test]
fn refuses_retention_shorter_than_a_period() {
    assert_refused(
        &one_tier_with(r#"retention = "48h""#, r#"retention = "12h""#),
        10,
        r#"tier "1m" retention"#,
        "retention 12h is shorter than one period (1d)",
    );
    // Exactly one period is enough.
    let text = one_tier_with(r#"retention = "48h""#, r#"retention = "24h""#);
    TiersConfig::from_toml_str(&text, "test.toml").unwrap();
}

#[test]
fn refuses_too_many_buckets_per_period() {
    let text = one_tier_with(r#"resolution = "1m""#, r#"resolution = "1s""#)
        .replacen(r#"period = "1d""#, r#"period = "116d""#, 1)
        .replacen(r#"retention = "48h""#, r#"retention = "116d""#, 1);
    assert_refused(
        &text,
        9,
        r#"tier "1m" period"#,
        "period 116d holds 10022400 buckets of 1s; at most 10000000",
    );
    // The limit itself is allowed.
    let text = one_tier_with(r#"resolution = "1m""#, r#"resolution = "1s""#)
        .replacen(r#"period = "1d""#, r#"period = "10000000s""#, 1)
        .replacen(r#"retention = "48h""#, r#"retention = "200d""#, 1);
    TiersConfig::from_toml_str(&text, "test.toml").unwrap();
}

#[test]
fn refuses_bad_series_per_chunk() {
    for bad in ["100", "8", "131072", "0", "-256", "4294967296"] {
        assert_refused(
            &one_tier_with(
                "series_per_chunk = 256",
                &format!("series_per_chunk = {bad}"),
            ),
            3,
            "engine.series_per_chunk",
            &format!("series_per_chunk {bad} is not a power of two between 16 and 65536"),
        );
    }
    for good in ["16", "65536", "1024"] {
        let text = one_tier_with(
            "series_per_chunk = 256",
            &format!("series_per_chunk = {good}"),
        );
        TiersConfig::from_toml_str(&text, "test.toml").unwrap();
    }
}

#[test]
fn refuses_zero_or_negative_max_points() {
    assert_refused(
        &one_tier_with("max_points = 1500", "max_points = 0"),
        4,
        "engine.max_points",
        "max_points 0 must be at least 1",
    );
    assert_refused(
        &one_tier_with("max_points = 1500", "max_points = -3"),
        4,
        "engine.max_points",
        "max_points -3 must be at least 1",
    );
}

#[test]
fn refuses_negative_create_ahead() {
    assert_refused(
        &one_tier_with("create_ahead = 1", "create_ahead = -1"),
        11,
        r#"tier "1m" create_ahead"#,
        "create_ahead -1 must be 0 or more",
    );
}

#[test]
fn refuses_unknown_keys_with_their_line() {
    assert_refused(
        &one_tier_with(
            r#"retention = "48h""#,
            "retention = \"48h\"\nretension = \"48h\"",
        ),
        11,
        "tier[0] retension",
        "unknown field `retension`",
    );
    assert_refused(
        &one_tier_with("max_points = 1500", "max_points = 1500\nthreads = 4"),
        5,
        "engine.threads",
        "unknown field `threads`",
    );
    assert_refused(
        &format!("{ONE_TIER}\n[storage]\npath = \"/tmp\"\n"),
        13,
        "storage",
        "unknown field `storage`",
    );
}

#[test]
fn refuses_wrong_types_and_syntax_with_their_line() {
    assert_refused(
        &one_tier_with(r#"period = "1d""#, "period = 86400"),
        9,
        "tier[0] period",
        "invalid type",
    );
    assert_refused(
        &one_tier_with("series_per_chunk = 256", r#"series_per_chunk = "256""#),
        3,
        "engine.series_per_chunk",
        "invalid type",
    );
    let err = refusal(&one_tier_with(r#"name = "1m""#, r#"name = "1m"#));
    assert!(err.to_string().starts_with("test.toml:7: "), "{err}");
}

#[test]
fn refuses_a_tier_missing_a_key() {
    let text = one_tier_with("retention = \"48h\"\n", "");
    let err = refusal(&text);
    let shown = err.to_string();
    assert!(shown.contains("missing field `retention`"), "{shown}");
    assert!(shown.contains("tier[0]"), "{shown}");
}

#[test]
fn validate_applies_the_same_rules_to_code_built_configs() {
    let mut config = TiersConfig::default();
    config.tiers[1].resolution = Span::from_secs(11 * 60);
    let err = config.validate().unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"<builder>: tier "5m" resolution: resolution 11m does not divide the period 1d evenly"#
    );

    let mut config = TiersConfig::default();
    config.tiers[3].name = "1m".to_owned();
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains(r#"tier[3] name: tier name "1m" is already used by tier[0]"#),
        "{err}"
    );

    let mut config = TiersConfig::default();
    config.tiers.clear();
    assert!(config.validate().is_err());

    let mut config = TiersConfig::default();
    config.engine.series_per_chunk = 48;
    assert!(config
        .validate()
        .unwrap_err()
        .to_string()
        .contains("engine.series_per_chunk"));

    let mut config = TiersConfig::default();
    config.tiers[0].period = Span::from_secs(u64::MAX);
    config.tiers[0].retention = Span::from_secs(u64::MAX);
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("longest span"), "{err}");

    // Regression: spans up to i64::MAX seconds passed, and a retention of that size wrapped
    // the window start so every file of the tier was dropped.
    let mut config = TiersConfig::default();
    config.tiers[3].retention = Span::from_secs(i64::MAX as u64);
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("retention") && err.contains("longest span"),
        "{err}"
    );
    let mut config = TiersConfig::default();
    config.tiers[3].retention = crate::config::MAX_SPAN;
    config.validate().unwrap();
}

#[test]
fn load_names_a_missing_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.toml");
    match TiersConfig::load(&path) {
        Err(Error::Io { path: got, .. }) => assert_eq!(got, path),
        other => panic!("wanted Error::Io, got {other:?}"),
    }
    let shown = TiersConfig::load(&path).unwrap_err().to_string();
    assert!(shown.contains("nope.toml"), "{shown}");
}

#[test]
fn load_names_the_file_in_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiers.toml");
    std::fs::write(
        &path,
        one_tier_with(r#"retention = "48h""#, r#"retention = "12h""#),
    )
    .unwrap();
    let shown = TiersConfig::load(&path).unwrap_err().to_string();
    assert!(
        shown.starts_with(&format!("{}:10: ", path.display())),
        "{shown}"
    );
}

#[test]
fn counter_rules_parse_and_match() {
    let text = format!(
        "[counters]\nnames = [\"*.if_octets.*\", \"*_total\"]\ntags = [\"type=counter\"]\n{}",
        one_tier_with("", "")
    );
    let config = TiersConfig::from_toml_str(&text, "<string>").unwrap();
    let rules = &config.counters;
    let matches_rules = crate::registry::matches_rules;
    let key = |text: &str| crate::registry::SeriesKey::parse(text).unwrap();
    assert!(matches_rules(rules, key("host.if_octets.rx").view()));
    assert!(matches_rules(rules, key("http_requests_total").view()));
    assert!(matches_rules(rules, key("x{type=counter}").view()));
    assert!(!matches_rules(rules, key("x{type=gauge}").view()));
    assert!(!matches_rules(rules, key("cpu.load").view()));
    assert!(TiersConfig::default().counters.is_empty());
}

#[test]
fn counter_tags_must_be_key_value() {
    let text = format!("[counters]\ntags = [\"type\"]\n{}", one_tier_with("", ""));
    assert_refused(&text, 2, "counters.tags", "is not k=v");
    let text = format!("[counters]\nglobs = []\n{}", one_tier_with("", ""));
    assert_refused(&text, 2, "counters.globs", "unknown field");
}

/// The issue's example: a raw tier beside the rollup tier, with no resolution.
const WITH_RAW: &str = r#"[[tier]]
name = "1m"
resolution = "1m"
period = "1d"
retention = "48h"

[[tier]]
name = "raw"
kind = "raw"
period = "1d"
retention = "7d"
create_ahead = 1
"#;

#[test]
fn a_raw_tier_parses_beside_the_rollups() {
    let config = TiersConfig::from_toml_str(WITH_RAW, "test.toml").unwrap();
    assert_eq!(config.tiers.len(), 1);
    assert_eq!(
        config.raw,
        Some(RawTierSpec {
            name: "raw".to_string(),
            period: Span::from_secs(DAY),
            retention: Span::from_secs(7 * DAY),
            create_ahead: 1,
            dedupe_unchanged: false,
        })
    );
    assert!(config.is_raw("raw") && !config.is_raw("1m"));
    assert_eq!(
        config.tier_index("raw"),
        None,
        "rollup indexes do not include it"
    );
    let dedupe = WITH_RAW.replace("create_ahead = 1", "dedupe_unchanged = true");
    let config = TiersConfig::from_toml_str(&dedupe, "test.toml").unwrap();
    assert!(config.raw.unwrap().dedupe_unchanged);
}

/// The commented example after the shipped file's line holding `marker`, uncommented and
/// parsed after [`ONE_TIER`].
fn shipped_example(marker: &str) -> TiersConfig {
    let example: String = TiersConfig::SHIPPED_TOML
        .lines()
        .skip_while(|l| !l.contains(marker))
        .skip(1)
        .map_while(|l| l.strip_prefix("#   "))
        .map(|l| format!("{l}\n"))
        .collect();
    TiersConfig::from_toml_str(&format!("{ONE_TIER}\n{example}"), "test.toml").unwrap()
}

#[test]
fn the_shipped_raw_example_parses_once_uncommented() {
    let config = shipped_example("Uncomment to keep 7 days");
    let raw = config.raw.expect("the example is a raw tier");
    assert_eq!(
        (raw.name.as_str(), raw.retention),
        ("raw", Span::from_secs(7 * DAY))
    );
    assert_eq!(
        TiersConfig::from_toml_str(TiersConfig::SHIPPED_TOML, "tiers.toml")
            .unwrap()
            .raw,
        None
    );
}

#[test]
fn refuses_impossible_raw_tiers() {
    let raw = |from: &str, to: &str| WITH_RAW.replacen(from, to, 1);
    assert_refused(
        &raw("kind = \"raw\"", "kind = \"raw\"\nresolution = \"1m\""),
        10,
        "tier \"raw\" resolution",
        "no resolution",
    );
    assert_refused(
        &raw("kind = \"raw\"", "kind = \"exact\""),
        9,
        "tier \"raw\" kind",
        "is not \"rollup\" or \"raw\"",
    );
    assert_refused(
        &raw("retention = \"7d\"", "retention = \"1h\""),
        11,
        "raw tier \"raw\" retention",
        "shorter than one period",
    );
    assert_refused(
        &raw("name = \"raw\"", "name = \"1m\""),
        8,
        "raw tier \"1m\" name",
        "already used",
    );
    assert_refused(
        &format!("{WITH_RAW}\n[[tier]]\nname = \"raw2\"\nkind = \"raw\"\nperiod = \"1d\"\nretention = \"7d\"\n"),
        15,
        "tier kind",
        "only one",
    );
    assert_refused(
        &one_tier_with("create_ahead = 1", "dedupe_unchanged = true"),
        11,
        "tier \"1m\" dedupe_unchanged",
        "only to a tier with kind = \"raw\"",
    );
    assert_refused(
        &one_tier_with("resolution = \"1m\"\n", ""),
        7,
        "tier \"1m\" resolution",
        "needs a resolution",
    );
}

#[test]
fn the_stored_form_reads_back_equal() {
    let mut config = TiersConfig::default();
    config.counters.names = vec!["*_total".into(), "a\"b".into()];
    config.counters.tags = vec![("type".into(), "counter".into())];
    config.engine.max_points = 700;
    config.tiers[0].create_ahead = 0;
    config.raw = Some(RawTierSpec {
        name: "raw".into(),
        period: Span::from_secs(86_400),
        retention: Span::from_secs(7 * 86_400),
        create_ahead: 2,
        dedupe_unchanged: true,
    });
    for config in [TiersConfig::default(), config] {
        let text = config.to_toml();
        assert_eq!(
            TiersConfig::from_toml_str(&text, "stored").unwrap(),
            config,
            "{text}"
        );
    }
}

#[test]
fn differences_name_the_tier_the_field_and_both_values() {
    let stored = TiersConfig::default();
    let mut given = stored.clone();
    given.tiers[0].period = Span::from_secs(86_400);
    given.tiers[1].retention = Span::from_secs(30 * 86_400);
    given.tiers.pop();
    let found: Vec<(String, bool)> = super::differences(&stored, &given)
        .iter()
        .map(|d| (d.to_string(), d.layout))
        .collect();
    assert_eq!(
        found,
        [
            // A period change is recorded by the open (docs/file-format.md, "Period
            // changes"); the files do not refuse it.
            (
                r#"tier "1m" period: 6h in the directory, 1d given"#.to_owned(),
                false
            ),
            (
                r#"tier "5m" retention: 14d in the directory, 30d given"#.to_owned(),
                false
            ),
            (
                r#"tier "1d": present in the directory, absent given"#.to_owned(),
                false
            ),
        ]
    );
    use crate::storage::stored_tiers::{read_stored, stored_path, write_stored};
    let dir = tempfile::tempdir().unwrap();
    // What the files cannot take is refused, and only that.
    super::check_given(&stored_path(dir.path()), &stored, &given).unwrap();
    let mut relaid = given.clone();
    relaid.tiers[0].resolution = Span::from_secs(120);
    let err = super::check_given(&stored_path(dir.path()), &stored, &relaid).unwrap_err();
    assert!(err
        .to_string()
        .contains(r#"tier "1m" resolution: 1m in the directory, 2m given"#));
    assert!(!err.to_string().contains("retention"), "{err}");
    assert!(err.to_string().contains("tiers.toml records"), "{err}");
    assert!(super::check_given(&stored_path(dir.path()), &stored, &stored).is_ok());
    assert!(read_stored(dir.path()).unwrap().is_none());
    write_stored(dir.path(), &given).unwrap();
    assert_eq!(read_stored(dir.path()).unwrap(), Some(given));
}

/// A default tier and one `[[set]]`; tests replace a line of the set to break it. Lines:
/// 1 [[tier]], 2-5 its keys, 6 blank, 7 [[set]], 8 name, 9 names, 10 tags, 11 blank,
/// 12 [[set.tier]], 13 name, 14 resolution, 15 period, 16 retention.
const WITH_SET: &str = r#"[[tier]]
name = "1m"
resolution = "1m"
period = "6h"
retention = "48h"

[[set]]
name = "short"
names = ["tmp.*"]
tags = ["env=dev"]

[[set.tier]]
name = "5m"
resolution = "5m"
period = "1d"
retention = "2d"
"#;

#[test]
fn a_set_parses_with_its_rules_and_tiers_and_numbers_its_tiers_after_the_default_ones() {
    let config = TiersConfig::from_toml_str(WITH_SET, "test.toml").unwrap();
    assert_eq!(config.sets.len(), 1);
    let set = &config.sets[0];
    assert_eq!(set.name, "short");
    assert_eq!(set.series.names, ["tmp.*"]);
    assert_eq!(set.series.tags, [("env".to_owned(), "dev".to_owned())]);
    assert_eq!(set.tiers[0].resolution, Span::from_secs(300));
    assert_eq!(config.set_count(), 2);
    assert_eq!(config.set_name(0), DEFAULT_SET);
    assert_eq!(config.set_index("short"), Some(1));
    assert_eq!(config.tier_range(0), 0..1);
    assert_eq!(config.tier_range(1), 1..2);
    assert_eq!(config.tier_at(1).1.name, "5m");
    assert_eq!(config.tier_count(), 2);
    // The stored form reads back equal.
    assert_eq!(
        TiersConfig::from_toml_str(&config.to_toml(), "stored").unwrap(),
        config
    );
    // A set changes the layout's fingerprint.
    let mut without = config.clone();
    without.sets.clear();
    assert_ne!(without.layout_fingerprint(), config.layout_fingerprint());
}

#[test]
fn refuses_bad_sets_with_their_line_and_field() {
    let with = |from: &str, to: &str| WITH_SET.replace(from, to);
    assert_refused(
        &with(r#"name = "short""#, r#"name = "default""#),
        8,
        "set[0] name",
        "names the top-level [[tier]]s",
    );
    assert_refused(
        &with(r#"name = "short""#, r#"name = "a/b""#),
        8,
        "set[0] name",
        "letters, digits",
    );
    assert_refused(
        &with(r#"name = "short""#, r#"name = "..""#),
        8,
        "set[0] name",
        "letters, digits",
    );
    assert_refused(
        &with("names = [\"tmp.*\"]\ntags = [\"env=dev\"]\n", ""),
        8,
        "set \"short\" names",
        "needs names or tags",
    );
    assert_refused(
        &with("tags = [\"env=dev\"]", "tags = [\"env\"]"),
        10,
        "set \"short\".tags",
        "is not k=v",
    );
    assert_refused(
        &with(r#"retention = "2d""#, r#"retention = "1h""#),
        16,
        "set \"short\" tier \"5m\" retention",
        "shorter than one period",
    );
    assert_refused(
        &with(r#"resolution = "5m""#, r#"resolution = "7m""#),
        14,
        "set \"short\" tier \"5m\" resolution",
        "does not divide",
    );
    assert_refused(
        &with(
            "[[set.tier]]\nname = \"5m\"\nresolution = \"5m\"",
            "[[set.tier]]\nname = \"5m\"\nkind = \"raw\"",
        ),
        13,
        "set \"short\" tier kind",
        "rollup tiers only",
    );
    let twice = format!("{WITH_SET}\n[[set]]\nname = \"short\"\nnames = [\"x\"]\n[[set.tier]]\nname = \"1h\"\nresolution = \"1h\"\nperiod = \"1d\"\nretention = \"1d\"\n");
    assert_refused(&twice, 19, "set[1] name", "already used by set[0]");
    let no_tiers = WITH_SET.split("[[set.tier]]").next().unwrap().to_owned();
    assert_refused(
        &no_tiers,
        8,
        "set \"short\" tier",
        "at least one [[set.tier]]",
    );
}

#[test]
fn a_sets_rules_may_change_and_sets_may_be_added_but_not_removed_or_relaid() {
    let stored = TiersConfig::from_toml_str(WITH_SET, "stored").unwrap();
    let layout = |given: &TiersConfig| -> Vec<String> {
        differences(&stored, given)
            .into_iter()
            .filter(|d| d.layout)
            .map(|d| d.field)
            .collect()
    };
    let mut rules = stored.clone();
    rules.sets[0].series.names = vec!["scratch.*".into()];
    assert!(layout(&rules).is_empty());
    assert!(!differences(&stored, &rules).is_empty());

    let mut added = stored.clone();
    let mut second = stored.sets[0].clone();
    second.name = "later".into();
    added.sets.push(second);
    assert!(layout(&added).is_empty());

    let mut removed = stored.clone();
    removed.sets.clear();
    assert_eq!(layout(&removed), ["set \"short\""]);

    // A set's tier takes a period change as a default set's does; a resolution stays.
    let mut period = stored.clone();
    period.sets[0].tiers[0].period = Span::from_secs(3_600);
    assert!(layout(&period).is_empty());
    let mut relaid = stored.clone();
    relaid.sets[0].tiers[0].resolution = Span::from_secs(60);
    assert_eq!(layout(&relaid), ["set \"short\" tier \"5m\" resolution"]);

    let mut renamed = stored.clone();
    renamed.sets[0].name = "brief".into();
    assert_eq!(layout(&renamed), ["set[0] name"]);
}

#[test]
fn the_shipped_set_example_parses_once_uncommented() {
    let config = shipped_example("Uncomment to keep test series");
    assert_eq!(config.sets.len(), 1);
    assert_eq!(config.sets[0].tiers.len(), 2);
    assert!(
        TiersConfig::from_toml_str(TiersConfig::SHIPPED_TOML, "tiers.toml")
            .unwrap()
            .sets
            .is_empty()
    );
}
