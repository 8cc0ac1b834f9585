//! Imported whisper files keep the latest samples their points are, checked on files written
//! by Debian's python3-whisper and against Debian's graphite-web:
//!
//! - a file whose aggregationMethod is `last` holds, in every archive, the last sample of each
//!   interval, so a PromQL instant selector, `timestamp()` and `last_over_time` of the imported
//!   series answer the file's points exactly, without `approximate`, at times read from the
//!   1m, 5m and 1h tiers (each point taken as a sample at its stamp: whisper keeps no finer
//!   time); before, they answered a bucket's average, the one before, flagged `approximate`;
//! - a finest-archive point of any file is the last sample written into its slot, so the
//!   `average` file's minutes answer exactly too, while its 5m and 1h points (averages) are
//!   flagged `approximate`;
//! - `consolidateBy('last')` renders of the `last` file, consolidated to `maxDataPoints` or
//!   not, equal graphite-web's, value for value.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;

use crate::migrate::SCHEMAS;
use crate::migrate::{assert_same_render, graphite_web, graphite_web_installed};
use crate::migrate::{import_whisper, run, tiers_from_schemas, write_whisper_tree, PYTHON};
use crate::support::http::{get_json, percent_encode};
use crate::support::process::Proc;

const DAY: i64 = 86_400;
/// Prometheus' lookback, which tierdb's instant selector keeps.
const LOOKBACK: i64 = 300;

/// Every archive's known points of the whisper file argv[1] at the clock argv[2], as JSON:
/// `{"<seconds per point>": [[stamp, value], ...]}`, read by python3-whisper's own fetch.
const DUMP_ARCHIVES: &str = r#"
import json, sys, whisper
path, now = sys.argv[1], int(sys.argv[2])
out = {}
for a in whisper.info(path)["archives"]:
    step = a["secondsPerPoint"]
    (start, _, s), values = whisper.fetch(path, now - a["retention"], now, now=now,
                                          archiveToSelect=step)
    out[str(step)] = [[start + i * s, v] for i, v in enumerate(values) if v is not None]
print(json.dumps(out))
"#;

/// The known points of each archive of `file` (by seconds per point) at `now`.
fn archives(file: &std::path::Path, now: i64) -> BTreeMap<i64, Vec<(i64, f64)>> {
    let out = run(Command::new(PYTHON)
        .args(["-c", DUMP_ARCHIVES])
        .arg(file)
        .arg(now.to_string()));
    let dump: BTreeMap<String, Vec<(i64, f64)>> = serde_json::from_slice(&out.stdout).unwrap();
    (dump.into_iter())
        .map(|(step, points)| (step.parse().unwrap(), points))
        .collect()
}

/// The latest point of `points` stamped in `[from, until]`, closed at both ends as
/// Prometheus selects: `(stamp, value)`.
fn latest_in(points: &[(i64, f64)], from: i64, until: i64) -> Option<(i64, f64)> {
    (points.iter().rev())
        .find(|&&(t, _)| t >= from && t <= until)
        .copied()
}

/// tierdb's instant query `query` at `time`: the one series' value (none for an empty
/// vector) and the answer's warnings.
fn instant(addr: SocketAddr, query: &str, time: i64) -> (Option<f64>, Vec<String>) {
    let path = format!(
        "/prometheus/api/v1/query?query={}&time={time}",
        percent_encode(query)
    );
    let answer = get_json(addr, &path).unwrap_or_else(|e| panic!("{query} at {time}: {e}"));
    assert_eq!(answer["status"], "success", "{query} at {time}: {answer}");
    let result = answer["data"]["result"].as_array().unwrap();
    assert!(result.len() <= 1, "{query} at {time}: {answer}");
    let value = result.first().map(|s| {
        assert_eq!(
            s["value"][0].as_f64(),
            Some(time as f64),
            "{query}: {answer}"
        );
        s["value"][1].as_str().unwrap().parse().unwrap()
    });
    let warnings = (answer["warnings"].as_array())
        .map(|w| w.iter().map(|w| w.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default();
    (value, warnings)
}

#[test]
fn whisper_files_keep_the_latest_samples_their_points_are() {
    if !graphite_web_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (tree, now) = write_whisper_tree(tmp.path());
    let tiers = tiers_from_schemas(tmp.path(), SCHEMAS);
    let data = tmp.path().join("data");
    let summary = import_whisper(&tree, &data, &tiers);
    assert!(summary.starts_with("imported 8 files"), "{summary}");
    let last = archives(&tree.join("migrate/last.wsp"), now);
    let average = archives(&tree.join("migrate/average.wsp"), now);

    // Evaluation times read from each tier (the finest whose window reaches back: 1m within
    // the last day, 5m 4 to 8 days back, 1h 15 to 50 days back): on the archive's grid, and
    // 130 s past it (the point before still inside the lookback).
    let times = |step: i64, newest: i64, oldest: i64, n: i64| -> Vec<i64> {
        let gap = (oldest - newest) / n;
        (0..n)
            .map(|i| now - newest - i * gap)
            .flat_map(|t| {
                let on = t - t.rem_euclid(step);
                [on, on + 130]
            })
            .collect()
    };
    let regions = [
        (60, times(60, 3_600, DAY, 40)),
        (300, times(300, 4 * DAY, 8 * DAY, 40)),
        (3600, times(3600, 15 * DAY, 50 * DAY, 40)),
    ];

    let log = tmp.path().join("serve.log");
    let mut server = Proc::tierdb("serve", &data, log);
    let addrs = server.wait_ready();
    let (mut answered, mut empty) = (0, 0);
    for (step, times) in &regions {
        let points = &last[step];
        for &t in times {
            let want = latest_in(points, t - LOOKBACK, t);
            for (query, expected) in [
                ("{__name__=\"migrate.last\"}", want.map(|p| p.1)),
                (
                    "timestamp({__name__=\"migrate.last\"})",
                    want.map(|p| p.0 as f64),
                ),
            ] {
                let (value, warnings) = instant(addrs.http, query, t);
                assert_eq!(value, expected, "{query} at {t} ({step} s archive)");
                assert!(warnings.is_empty(), "{query} at {t}: {warnings:?}");
            }
            answered += usize::from(want.is_some());
            empty += usize::from(want.is_none());
            // The latest sample of the last 20 minutes, whole buckets or not.
            let window = 1_200 + 30;
            let query = format!("last_over_time({{__name__=\"migrate.last\"}}[{window}s])");
            let (value, warnings) = instant(addrs.http, &query, t);
            let want = latest_in(points, t - window, t).map(|p| p.1);
            assert_eq!(value, want, "{query} at {t} ({step} s archive)");
            assert!(warnings.is_empty(), "{query} at {t}: {warnings:?}");
        }
    }
    assert!(
        answered > 150 && empty > 0,
        "{answered} answered, {empty} empty"
    );
    eprintln!("instant selectors: {answered} answered, {empty} empty as in the file");

    // The `average` file: its minutes are samples, exact; its 5m points are averages.
    for &t in &regions[0].1 {
        let want = latest_in(&average[&60], t - LOOKBACK, t).map(|p| p.1);
        let (value, warnings) = instant(addrs.http, "{__name__=\"migrate.average\"}", t);
        assert_eq!(value, want, "average at {t}");
        assert!(warnings.is_empty(), "average at {t}: {warnings:?}");
    }
    let flagged = (regions[1].1.iter())
        .map(|&t| instant(addrs.http, "{__name__=\"migrate.average\"}", t).1)
        .filter(|w| w.iter().any(|w| w.starts_with("approximate")))
        .count();
    assert!(
        flagged > 40,
        "the 5m points' averages are flagged: {flagged}"
    );

    // consolidateBy('last') of the `last` file renders as graphite-web renders it, over
    // ranges reading each archive, consolidated or not.
    let ranges = [
        (now - DAY + 7, now - 3_600 + 11),
        (now - 8 * DAY + 13, now - 3 * DAY),
        (now - 50 * DAY - 17, now - 12 * DAY),
    ];
    let mut queries = Vec::new();
    for (from, until) in ranges {
        for max in ["", "&maxDataPoints=100", "&maxDataPoints=7"] {
            queries.push(format!(
                "target=consolidateBy(migrate.last,'last')&format=json&from={from}&until={until}{max}"
            ));
        }
    }
    let graphite = graphite_web(&tree, &queries);
    for (query, expected) in queries.iter().zip(&graphite) {
        let path = format!("/render?{}", query.replace('\'', "%27"));
        let ours = get_json(addrs.http, &path).unwrap_or_else(|e| panic!("{query}: {e}"));
        let (got, known) = assert_same_render(&ours, expected, query, |_| false);
        assert!(known > got.len() / 3, "{query}: the range holds data");
    }
    drop(server);
}
