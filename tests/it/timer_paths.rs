//! StatsD timer paths over a real socket: `/render` of `<name>.<stat>` and
//! `stats.timers.<name>.<stat>` answered from a distribution series at the 1m, 5m and 1h
//! tiers and consolidated to `maxDataPoints`, and `/metrics/find` listing them.
//!
//! The rule checked: each point's stat is statsd's own definition (lib/process_metrics.js:
//! `n = round(0.9 × count)`, `upper_90` the sample of rank `n`, `sum_90` the sum of the `n`
//! lowest, the median the middle sample or the mean of the middle two) over the raw values
//! of the point (of the whole consolidated window, never an average of the points'
//! stats): `count`, `count_ps`, `sum`, `mean`, `upper`, `lower` and `count_90` exact;
//! `median` and `upper_90` within the histogram's relative error of the sample they stand
//! for; `sum_90` and `mean_90` (estimates) within that error too, the samples being of one
//! sign. Values span 60 to 240 ms, two octaves, so no stored histogram is reduced below the
//! default scale and the error stays 0.55%. graphite-web is not compared: statsd computes its
//! stats per flush and Graphite then averages them per archive, which is what this answer
//! does not do.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use serde_json::Value;
use tierdb::histogram::{relative_error, DEFAULT_SCALE};
use tierdb::server::Limits;
use tierdb::{Sample, SeriesKind};

use crate::common::NOW;
use crate::support::server::TestServer;

const TIMER: &str = "svc.api.time";
/// Three days of samples, one every 10 s, up to NOW.
const FROM: i64 = NOW - 3 * 86_400;

/// The stats checked, as statsd names them.
const STATS: [&str; 11] = [
    "count", "count_ps", "sum", "mean", "upper", "lower", "median", "upper_90", "count_90",
    "sum_90", "mean_90",
];

/// Writes the timer (a distribution, as StatsD timers are declared) and returns its raw
/// samples.
fn feed(server: &TestServer) -> Vec<(i64, f64)> {
    let engine = &server.engine;
    let id = engine.series(TIMER).unwrap();
    engine.declare_kind(id, SeriesKind::Distribution).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(53);
    let raw: Vec<(i64, f64)> = (FROM..NOW)
        .step_by(10)
        .map(|ts| {
            let u: f64 = rng.gen();
            (ts, (60.0 * 4f64.powf(u) * 1000.0).round() / 1000.0)
        })
        .collect();
    for chunk in raw.chunks(5000) {
        let batch: Vec<Sample> = chunk.iter().map(|&(t, v)| Sample::new(id, t, v)).collect();
        let report = engine.record_batch(&batch).unwrap();
        assert_eq!(report.accepted as usize, batch.len(), "{report:?}");
    }
    raw
}

/// statsd's stats of one flush of `values` (threshold 90), for a window `width` seconds wide.
fn statsd(values: &[f64], width: i64) -> BTreeMap<&'static str, f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let count = v.len();
    let total: f64 = v.iter().sum();
    let n = match count {
        1 => 1,
        _ => (0.9 * count as f64 + 0.5).floor() as usize,
    };
    let mid = count / 2;
    let median = match count % 2 {
        1 => v[mid],
        _ => (v[mid - 1] + v[mid]) / 2.0,
    };
    let sum_90: f64 = v[..n].iter().sum();
    BTreeMap::from([
        ("count", count as f64),
        ("count_ps", count as f64 / width as f64),
        ("sum", total),
        ("mean", total / count as f64),
        ("upper", v[count - 1]),
        ("lower", v[0]),
        ("median", median),
        ("upper_90", v[n - 1]),
        ("count_90", n as f64),
        ("sum_90", sum_90),
        ("mean_90", sum_90 / n as f64),
    ])
}

/// One target rendered as JSON: its name and `(value, stamp)` points.
fn render(
    server: &TestServer,
    target: &str,
    (from, until): (i64, i64),
    max_points: Option<u32>,
) -> (String, Vec<(Option<f64>, i64)>) {
    let max = max_points.map_or(String::new(), |m| format!("&maxDataPoints={m}"));
    let answer = server.json(&format!(
        "/render?target={target}&from={from}&until={until}&format=json{max}"
    ));
    let list = answer.as_array().expect("a list");
    assert_eq!(list.len(), 1, "{target}: {answer}");
    let points = serde_json::from_value(list[0]["datapoints"].clone()).unwrap();
    (list[0]["target"].as_str().unwrap().to_owned(), points)
}

/// Every stat of the timer over `range`, read at the tier of resolution `resolution`
/// (consolidated when `max_points` asks), against statsd's stats of the raw values of each
/// point. Returns the number of points checked.
fn check(
    server: &TestServer,
    raw: &[(i64, f64)],
    range: (i64, i64),
    resolution: i64,
    max_points: Option<u32>,
) -> usize {
    let e = relative_error(DEFAULT_SCALE);
    let mut checked = 0;
    for stat in STATS {
        let (target, points) = render(server, &format!("{TIMER}.{stat}"), range, max_points);
        assert_eq!(target, format!("{TIMER}.{stat}"));
        assert!(points.len() > 2, "{stat}: {points:?}");
        let step = points[1].1 - points[0].1;
        // A consolidated point's window starts one original point before its stamp
        // (graphite-web's nudge); an original point holds its bucket from its stamp.
        let lead = if step == resolution { 0 } else { resolution };
        if max_points.is_some() {
            assert!(step > resolution, "{stat}: consolidated ({step})");
        } else {
            assert_eq!(step, resolution, "{stat}: the tier's resolution");
        }
        for &(got, stamp) in &points {
            let window = (stamp - lead)..(stamp - lead + step);
            let inside: Vec<f64> = (raw.iter())
                .filter(|(t, _)| window.contains(t))
                .map(|&(_, v)| v)
                .collect();
            if inside.is_empty() {
                assert_eq!(got, None, "{stat} at {stamp}: no samples");
                continue;
            }
            let want = statsd(&inside, step)[stat];
            let got = got.unwrap_or_else(|| panic!("{stat} at {stamp} answered"));
            let exact = !matches!(stat, "median" | "upper_90" | "sum_90" | "mean_90");
            let bound = if exact {
                1e-9 * want.abs()
            } else {
                e * want.abs()
            };
            assert!(
                (got - want).abs() <= bound,
                "{stat} at {stamp} (step {step}): {got} vs statsd's {want} over {} samples",
                inside.len()
            );
            checked += 1;
        }
    }
    checked
}

#[test]
fn timer_paths_answer_statsd_stats_at_every_tier_and_zoom() {
    let server = TestServer::start(None, Limits::default());
    let raw = feed(&server);

    // The last hour at 1m; a day two days back, from the 5m tier; fifteen days, from 1h.
    let minute = check(&server, &raw, (NOW - 3600, NOW - 60), 60, None);
    let day = check(
        &server,
        &raw,
        (NOW - 3 * 86_400, NOW - 2 * 86_400),
        300,
        None,
    );
    let hours = check(&server, &raw, (NOW - 15 * 86_400, NOW - 3600), 3600, None);
    // Six hours at 1m into at most 30 points: 12-minute windows, histograms merged.
    let zoomed = check(&server, &raw, (NOW - 6 * 3600, NOW - 60), 60, Some(30));
    eprintln!("points checked: 1m {minute}, 5m {day}, 1h {hours}, consolidated {zoomed}");
    assert!(minute >= 11 * 59 && day >= 11 * 288 && hours >= 11 * 71 && zoomed >= 11 * 29);

    // statsd's default namespace answers the same points under its own name.
    let range = (NOW - 3600, NOW - 60);
    for stat in ["upper_90", "count"] {
        let bare = render(&server, &format!("{TIMER}.{stat}"), range, None);
        let statsd = render(
            &server,
            &format!("stats.timers.{TIMER}.{stat}"),
            range,
            None,
        );
        assert_eq!(statsd.0, format!("stats.timers.{TIMER}.{stat}"));
        assert_eq!(statsd.1, bare.1, "{stat}");
    }
    // Any threshold a path names is answered; one glob lists statsd's default one.
    let (_, p99) = render(&server, &format!("{TIMER}.upper_99"), range, None);
    let (_, p90) = render(&server, &format!("{TIMER}.upper_90"), range, None);
    assert!((p99.iter().zip(&p90)).all(|(a, b)| a.0.unwrap() >= b.0.unwrap()));
    let answer = server.json(&format!(
        "/render?target={TIMER}.*&from={}&until={}&format=json",
        range.0, range.1
    ));
    let mut targets: Vec<&str> = (answer.as_array().unwrap().iter())
        .map(|s| s["target"].as_str().unwrap())
        .collect();
    targets.sort_unstable();
    let mut listed: Vec<String> = STATS.iter().map(|s| format!("{TIMER}.{s}")).collect();
    listed.sort_unstable();
    assert_eq!(targets, listed);

    // consolidateBy's average merges histograms too; max takes the largest point's value.
    let merged = render(
        &server,
        &format!("consolidateBy({TIMER}.upper_90,'average')"),
        (NOW - 6 * 3600, NOW - 60),
        Some(30),
    );
    let plain = render(
        &server,
        &format!("{TIMER}.upper_90"),
        (NOW - 6 * 3600, NOW - 60),
        Some(30),
    );
    assert_eq!(merged.1, plain.1);
    let max = render(
        &server,
        &format!("consolidateBy({TIMER}.upper_90,'max')"),
        (NOW - 6 * 3600, NOW - 60),
        Some(30),
    );
    let minutes = render(
        &server,
        &format!("{TIMER}.upper_90"),
        (NOW - 6 * 3600, NOW - 60),
        None,
    );
    let largest = (minutes.1.iter())
        .filter_map(|p| p.0)
        .fold(f64::MIN, f64::max);
    assert_eq!(
        max.1.iter().filter_map(|p| p.0).fold(f64::MIN, f64::max),
        largest
    );

    // Find lists the stats under the timer, and the namespace's branches.
    let find = |query: &str| -> Vec<(String, u64)> {
        let nodes: Value = server.json(&format!("/metrics/find?query={query}"));
        (nodes.as_array().unwrap().iter())
            .map(|n| {
                (
                    n["id"].as_str().unwrap().to_owned(),
                    n["leaf"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let leaves = find(&format!("{TIMER}.*"));
    assert_eq!(
        leaves,
        listed.iter().map(|id| (id.clone(), 1)).collect::<Vec<_>>()
    );
    assert_eq!(find("stats.*"), [("stats.timers".to_owned(), 0)]);
    assert_eq!(
        find("stats.timers.svc.api.*"),
        [(format!("stats.timers.{TIMER}"), 0)]
    );
    assert_eq!(
        find(&format!("stats.timers.{TIMER}.upper_9*")),
        [(format!("stats.timers.{TIMER}.upper_90"), 1)]
    );
    assert!(
        find(&format!("{TIMER}.std")).is_empty(),
        "no sum of squares is kept"
    );

    // A stored series whose key is a timer path wins.
    let gauge = server.engine.series(&format!("{TIMER}.upper")).unwrap();
    server
        .engine
        .record_batch(&[Sample::new(gauge, NOW - 120, 7.0)])
        .unwrap();
    let (_, points) = render(&server, &format!("{TIMER}.upper"), range, None);
    assert_eq!(
        points[points.len() - 2],
        (Some(7.0), NOW - 120),
        "the stored series"
    );
    assert_eq!(points.iter().filter(|p| p.0.is_some()).count(), 1);
}
