//! Counters through `kill -9`. A counter's state (its last raw value) and the increases
//! stored in its buckets must agree after any process crash: `tierdb import` of counter
//! samples is killed at a random point, the same file is imported again to the end (samples
//! at or before a counter's last one are refused as `counter_out_of_order`, as a retrying
//! client's would be), and every counter's stored increases must then add up to exactly its
//! last value minus its first.
//!
//! The regression: the state advanced before the writers stored the increase, so a kill in
//! between lost that increase for good (and the retry was refused).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tierdb::{Display, Engine, Query, TiersConfig};

const SERIES: usize = 200;
const SAMPLES: i64 = 1_500;
const CADENCE: i64 = 10;
const FIRST_RAW: f64 = 1_000.0;
const STEP: f64 = 7.0;

const TIERS: &str = r#"
[counters]
names = ["*.requests"]

[[tier]]
name = "1h"
resolution = "1h"
period = "1d"
retention = "7d"
"#;

fn import(dir: &Path, tiers: &Path, input: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .arg("import")
        .arg(input)
        .arg("--data-dir")
        .arg(dir)
        .arg("--tiers")
        .arg(tiers)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run tierdb import")
}

/// Sum of the stored increases of `series` over the whole import.
fn stored_increase(engine: &Engine, series: &str, from: i64, to: i64) -> f64 {
    engine
        .query(
            &Query::new(series, from, to)
                .tier("1h")
                .display(Display::Total),
        )
        .unwrap()
        .points
        .iter()
        .filter_map(|(_, v)| *v)
        .sum()
}

#[test]
fn a_counter_killed_mid_import_and_imported_again_stores_its_increase_exactly_once() {
    let work = tempfile::tempdir().unwrap();
    let tiers = work.path().join("tiers.toml");
    std::fs::write(&tiers, TIERS).unwrap();
    let now = chrono::Utc::now().timestamp();
    let start = now - now % 3600 - SAMPLES * CADENCE;
    // Instant by instant, every series once per instant, as an agent sends them.
    let mut lines = String::new();
    for k in 0..SAMPLES {
        for s in 0..SERIES {
            let raw = FIRST_RAW + STEP * k as f64;
            lines.push_str(&format!("host{s}.requests {raw} {}\n", start + k * CADENCE));
        }
    }
    let input = work.path().join("counters.txt");
    std::fs::write(&input, lines).unwrap();

    // A kill somewhere in the import (a dozen rounds with the kill at spread-out points, so
    // some land while a batch is being applied), then the whole file imported again.
    for (round, delay_ms) in (0..12u64).map(|i| 30 + 70 * i).enumerate() {
        let dir = work.path().join(format!("data{round}"));
        let mut child = import(&dir, &tiers, &input);
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        let status = import(&dir, &tiers, &input).wait().unwrap();
        assert!(status.success(), "round {round}: the second import failed");

        let engine = Engine::builder(&dir)
            .tiers(TiersConfig::load(&tiers).unwrap())
            .open()
            .unwrap();
        let expected = STEP * (SAMPLES - 1) as f64;
        let to = start + SAMPLES * CADENCE + 3600;
        let wrong: Vec<(usize, f64)> = (0..SERIES)
            .map(|s| {
                let got = stored_increase(&engine, &format!("host{s}.requests"), start - 3600, to);
                (s, got)
            })
            .filter(|&(_, got)| got != expected)
            .collect();
        assert!(
            wrong.is_empty(),
            "round {round} (killed after {delay_ms} ms): {} of {SERIES} counters store another \
             increase than {expected}: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
        engine.close().unwrap();
    }
}
