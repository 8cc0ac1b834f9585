//! Carbon's storage-schemas.conf as tier sets (#55 item 2): `tierdb tiers
//! --from-storage-schemas` turns each section into its own `[[set]]`, in carbon's order, and
//! the catch-all section into the top-level tiers, so every series keeps the archives carbon
//! would have given the metric of that name; a pattern with no exact glob form is refused.

use std::process::Command;
use std::sync::Arc;

use tierdb::{ManualClock, Query, Sample, TiersConfig};

use crate::common::{open_driven, NOW};

/// Three sections as carbon reads them: its own metrics a minute apart for 90 days, `tmp.`
/// metrics at 10 s for 6 hours, and everything else (`.*`) a minute for a day, then 5
/// minutes for 30 days.
const SCHEMAS: &str = "\
# carbon's own metrics
[carbon]
pattern = ^carbon\\.
retentions = 60:90d

[short]
pattern = ^tmp\\.
retentions = 10s:6h

[default_1min_for_1day]
pattern = .*
retentions = 60s:1d,5m:30d
";

/// `tierdb tiers --from-storage-schemas` on `schemas`, written to a file: its status,
/// stdout and stderr.
fn convert(schemas: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("storage-schemas.conf");
    std::fs::write(&conf, schemas).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(["tiers", "--from-storage-schemas"])
        .arg(&conf)
        .env_remove("TIERDB_TIERS")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn each_section_is_a_set_and_each_series_lands_where_carbon_puts_it() {
    let (ok, toml, stderr) = convert(SCHEMAS);
    assert!(ok, "{stderr}");
    assert!(!toml.contains("NOT EXACT"), "{toml}");
    let config = TiersConfig::from_toml_str(&toml, "made from storage-schemas.conf").unwrap();

    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = open_driven(dir.path(), &clock, config);
    // Each name with the section carbon gives it (re.search of each pattern, in order) and
    // the tiers that section's archives are.
    let cases = [
        ("carbon.agents.a.cpu", "carbon", vec!["1m"]),
        ("tmp.scratch", "short", vec!["10s"]),
        ("servers.web1.load", "default", vec!["1m", "5m"]),
        // `^carbon\.` is anchored: a name holding `carbon.` further in is not carbon's.
        ("x.carbon.y", "default", vec!["1m", "5m"]),
    ];
    let batch: Vec<Sample> = (cases.iter())
        .map(|(name, _, _)| Sample {
            series: engine.series(name).unwrap(),
            ts: NOW,
            value: 1.0,
        })
        .collect();
    let report = engine.record_batch(&batch).unwrap();
    assert_eq!(report.accepted as usize, cases.len(), "{report:?}");

    let every_tier = ["10s", "1m", "5m"];
    for (name, section, tiers) in &cases {
        // A series is read from its set's tiers only: each tier its section has answers
        // with the sample, each other one is refused.
        for tier in every_tier {
            let read = engine.query(&Query::new(*name, NOW - 3_600, NOW + 3_600).tier(tier));
            match tiers.contains(&tier) {
                true => {
                    let result = read.unwrap_or_else(|e| panic!("{name} ({section}) {tier}: {e}"));
                    assert!(
                        result.points.iter().any(|p| p.1 == Some(1.0)),
                        "{name} ({section}) {tier}: {result:?}"
                    );
                }
                false => assert!(read.is_err(), "{name} ({section}) has no {tier} tier"),
            }
        }
    }
    let stats = engine.stats();
    let names: Vec<&str> = stats.tiers.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["1m", "5m", "carbon/1m", "short/10s"]);
    let retention = |tier: &str| {
        (stats.tiers.iter())
            .find(|t| t.name == tier)
            .map(|t| t.retention.to_string())
    };
    assert_eq!(retention("carbon/1m").as_deref(), Some("90d"));
    assert_eq!(retention("1m").as_deref(), Some("1d"));
    assert_eq!(retention("short/10s").as_deref(), Some("6h"));
}

#[test]
fn a_pattern_with_no_exact_glob_is_refused_naming_its_section() {
    let schemas =
        format!("[web]\npattern = ^servers\\.web\\d+\\.\nretentions = 10s:1d\n\n{SCHEMAS}");
    let (ok, toml, stderr) = convert(&schemas);
    assert!(!ok && toml.is_empty(), "{toml}");
    assert!(
        stderr.contains("[web] pattern = ^servers\\.web\\d+\\.: `\\d`"),
        "{stderr}"
    );
    assert!(stderr.contains("rewrite the pattern"), "{stderr}");
}
