//! StatsD timer paths over real sockets: timers sent over UDP to a server, then `/render`
//! of `<name>.<stat>` and `stats.timers.<name>.<stat>` answered from the distribution series
//! at the 1m, 5m, 1h and 1d tiers and consolidated to `maxDataPoints`, `/metrics/find` and
//! the tag API listing them.
//!
//! The rule checked: each point's stat is statsd's own definition (lib/process_metrics.js:
//! `n = round(0.9 × count)`, `upper_90` the sample of rank `n`, `sum_90` the sum of the `n`
//! lowest, the median the middle sample or the mean of the middle two) over the raw values
//! of the point (of the whole consolidated window, never an average of the points'
//! stats): `count`, `count_ps`, `sum`, `mean`, `upper`, `lower` and `count_90` exact;
//! `median` and `upper_90` within the relative error the answer states (its
//! `x-tierdb-relative-error` header) of the sample they stand for; `sum_90` and `mean_90`
//! (estimates) within that error too, the samples being of one sign. An answer of exact
//! stats states no error. graphite-web is not compared: statsd computes its stats per flush
//! and Graphite then averages them per archive, which is what this answer does not do.

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde_json::Value;
use tierdb::histogram::{relative_error, DEFAULT_SCALE};
use tierdb::{Display, Sample, SeriesKind, TiersConfig, Timestamp};

use crate::common::NOW;
use crate::support::http::get_with_header;
use crate::support::server::TestServer;

const TIMER: &str = "svc.api.time";

/// The stats checked, as statsd names them.
const STATS: [&str; 11] = [
    "count", "count_ps", "sum", "mean", "upper", "lower", "median", "upper_90", "count_90",
    "sum_90", "mean_90",
];

/// The stats answered from the histogram, within the stated error.
const ESTIMATED: [&str; 4] = ["median", "upper_90", "sum_90", "mean_90"];

/// The seconds the server's clock stands at while a datagram of the timer is sent: every
/// 97 minutes over three days, then every 3 minutes over the last two hours (never two in
/// one minute).
fn moments() -> Vec<Timestamp> {
    let history = (NOW - 3 * 86_400 + 17..NOW - 2 * 3600).step_by(97 * 60);
    let recent = (NOW - 2 * 3600 + 23..NOW - 60).step_by(3 * 60);
    history.chain(recent).collect()
}

/// Sends the timer over UDP, 12 to 18 values at each of [`moments`] with the clock there
/// (waiting for each to land before the clock moves on), leaves the clock at NOW and
/// returns the raw samples.
fn feed(server: &TestServer) -> Vec<(Timestamp, f64)> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(53);
    let mut raw = Vec::new();
    for (i, at) in moments().into_iter().enumerate() {
        server.clock.set(at);
        // 60 to 240 ms with 3 decimals, as a client's millisecond timer.
        let values: Vec<f64> = (0..12 + i % 7)
            .map(|_| (60.0 * 4f64.powf(rng.gen::<f64>()) * 1000.0).round() / 1000.0)
            .collect();
        let lines: Vec<String> = values.iter().map(|v| format!("{TIMER}:{v}|ms")).collect();
        socket
            .send_to(lines.join("\n").as_bytes(), server.statsd.unwrap())
            .unwrap();
        raw.extend(values.iter().map(|&v| (at, v)));
        let minute = at - at.rem_euclid(60);
        let started = Instant::now();
        while server.engine.registry().get(TIMER).is_none()
            || server.minute(TIMER, minute, Display::Count) != Some(values.len() as f64)
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the values sent at {at} never landed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    server.clock.set(NOW);
    let id = server.engine.registry().get(TIMER).unwrap();
    assert_eq!(server.engine.series_kind(id), SeriesKind::Distribution);
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

/// One render of `target`.
struct Answer {
    /// The target's name.
    name: String,
    /// `(value, stamp)` points.
    points: Vec<(Option<f64>, i64)>,
    /// The relative error the answer states (`x-tierdb-relative-error`), if it does.
    stated: Option<f64>,
}

/// One target rendered as JSON.
fn render(
    server: &TestServer,
    target: &str,
    (from, until): (i64, i64),
    max_points: Option<u32>,
) -> Answer {
    let max = max_points.map_or(String::new(), |m| format!("&maxDataPoints={m}"));
    let path = format!("/render?target={target}&from={from}&until={until}&format=json{max}");
    let (status, stated, body) = get_with_header(server.http, &path, "x-tierdb-relative-error");
    assert_eq!(status, 200, "{path}: {body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let list = answer.as_array().expect("a list");
    assert_eq!(list.len(), 1, "{target}: {answer}");
    Answer {
        name: list[0]["target"].as_str().unwrap().to_owned(),
        points: serde_json::from_value(list[0]["datapoints"].clone()).unwrap(),
        stated: stated.map(|s| s.parse().expect("a number")),
    }
}

/// Every stat of the timer over `range`, read at the tier of resolution `resolution`
/// (consolidated when `max_points` asks), against statsd's stats of the raw values of each
/// point. Returns the number of points with samples checked.
fn check(
    server: &TestServer,
    raw: &[(i64, f64)],
    range: (i64, i64),
    resolution: i64,
    max_points: Option<u32>,
) -> usize {
    let mut checked = 0;
    for stat in STATS {
        let answer = render(server, &format!("{TIMER}.{stat}"), range, max_points);
        assert_eq!(answer.name, format!("{TIMER}.{stat}"));
        let points = &answer.points;
        assert!(points.len() > 2, "{stat}: {points:?}");
        let estimated = ESTIMATED.contains(&stat);
        let bound = match estimated {
            true => {
                let stated = answer.stated.unwrap_or_else(|| panic!("{stat}: stated"));
                // The recorded scale's error or a coarser one's, never finer.
                let recorded = relative_error(DEFAULT_SCALE);
                assert!(stated >= recorded && stated < 0.1, "{stat}: {stated}");
                stated
            }
            false => {
                assert_eq!(answer.stated, None, "{stat} is exact");
                1e-9
            }
        };
        let step = points[1].1 - points[0].1;
        // A consolidated point's window starts one original point before its stamp
        // (graphite-web's nudge); an original point holds its bucket from its stamp.
        let lead = if step == resolution { 0 } else { resolution };
        if max_points.is_some() {
            assert!(step > resolution, "{stat}: consolidated ({step})");
        } else {
            assert_eq!(step, resolution, "{stat}: the tier's resolution");
        }
        for &(got, stamp) in points {
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
            assert!(
                (got - want).abs() <= bound * want.abs(),
                "{stat} at {stamp} (step {step}): {got} vs statsd's {want} over {} samples \
                 (bound {bound})",
                inside.len()
            );
            checked += 1;
        }
    }
    checked
}

#[test]
fn timer_paths_answer_statsd_stats_at_every_tier_and_zoom() {
    let server = TestServer::with_statsd(TiersConfig::default(), Duration::from_secs(10));
    let raw = feed(&server);

    // The last hour at 1m; a day two days back, from the 5m tier (past the 1m tier's
    // retention); fifteen days, from 1h; a hundred days, from 1d.
    let minute = check(&server, &raw, (NOW - 3600, NOW - 60), 60, None);
    let day = check(
        &server,
        &raw,
        (NOW - 3 * 86_400, NOW - 2 * 86_400),
        300,
        None,
    );
    let hours = check(&server, &raw, (NOW - 15 * 86_400, NOW - 3600), 3600, None);
    let days = check(&server, &raw, (NOW - 100 * 86_400, NOW), 86_400, None);
    // Two hours at 1m into at most 10 points: 12-minute windows, histograms merged.
    let zoomed = check(&server, &raw, (NOW - 2 * 3600, NOW - 60), 60, Some(10));
    eprintln!(
        "points checked: 1m {minute}, 5m {day}, 1h {hours}, 1d {days}, consolidated {zoomed}"
    );
    // Every stat of every point with samples: 20 minutes, 15 five-minute buckets, 46
    // hours, 4 days, 10 windows (one of each may fall outside the range's edge).
    let n = STATS.len();
    assert!(
        minute >= n * 19 && day >= n * 14 && hours >= n * 45,
        "{minute} {day} {hours}"
    );
    assert!(days >= n * 4 && zoomed >= n * 9, "{days} {zoomed}");

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
        assert_eq!(statsd.name, format!("stats.timers.{TIMER}.{stat}"));
        assert_eq!(statsd.points, bare.points, "{stat}");
    }
    // Any threshold a path names is answered; one glob lists statsd's default one.
    let p99 = render(&server, &format!("{TIMER}.upper_99"), range, None).points;
    let p90 = render(&server, &format!("{TIMER}.upper_90"), range, None).points;
    assert!((p99.iter().zip(&p90)).all(|(a, b)| a.0 >= b.0));
    assert!(p99.iter().filter(|p| p.0.is_some()).count() >= 19);
    // statsd's spelling of a fractional threshold: upper_99_9.
    let p999 = render(&server, &format!("{TIMER}.upper_99_9"), range, None).points;
    assert!((p999.iter().zip(&p99)).all(|(a, b)| a.0 >= b.0));
    // A function over an estimate keeps the answer's statement.
    let scaled = render(&server, &format!("scale({TIMER}.median,2)"), range, None);
    assert!(scaled.stated.is_some());
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
        (NOW - 2 * 3600, NOW - 60),
        Some(10),
    );
    let plain = render(
        &server,
        &format!("{TIMER}.upper_90"),
        (NOW - 2 * 3600, NOW - 60),
        Some(10),
    );
    assert_eq!(merged.points, plain.points);
    let max = render(
        &server,
        &format!("consolidateBy({TIMER}.upper_90,'max')"),
        (NOW - 2 * 3600, NOW - 60),
        Some(10),
    );
    let minutes = render(
        &server,
        &format!("{TIMER}.upper_90"),
        (NOW - 2 * 3600, NOW - 60),
        None,
    );
    let largest = (minutes.points.iter())
        .filter_map(|p| p.0)
        .fold(f64::MIN, f64::max);
    assert_eq!(
        (max.points.iter())
            .filter_map(|p| p.0)
            .fold(f64::MIN, f64::max),
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

    // The tag API lists them as series of their own: those the expressions select, any
    // threshold a name names, and the completions of names.
    let strings =
        |path: &str| -> Vec<String> { serde_json::from_value(server.json(path)).unwrap() };
    assert_eq!(
        strings(&format!("/tags/findSeries?expr=name=~{TIMER}.")),
        listed
    );
    assert_eq!(
        strings(&format!(
            "/tags/findSeries?expr=name=stats.timers.{TIMER}.upper_99_9"
        )),
        [format!("stats.timers.{TIMER}.upper_99_9")]
    );
    assert_eq!(
        strings(&format!(
            "/tags/autoComplete/values?tag=name&valuePrefix={TIMER}.upper"
        )),
        [format!("{TIMER}.upper"), format!("{TIMER}.upper_90")]
    );
    let names = server.json("/tags/name?filter=svc");
    assert_eq!(
        names["values"].as_array().unwrap().len(),
        1 + STATS.len(),
        "{names}"
    );

    // A stored series whose key is a timer path wins.
    let gauge = server.engine.series(&format!("{TIMER}.upper")).unwrap();
    server
        .engine
        .record_batch(&[Sample::new(gauge, NOW - 120, 7.0)])
        .unwrap();
    let points = render(&server, &format!("{TIMER}.upper"), range, None).points;
    assert_eq!(
        points[points.len() - 2],
        (Some(7.0), NOW - 120),
        "the stored series"
    );
    assert_eq!(points.iter().filter(|p| p.0.is_some()).count(), 1);

    // DogStatsD tags follow the path, as statsd's Graphite backend writes them.
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let lines =
        "svc.db.time:4|ms|#env:prod\nsvc.db.time:8|ms|#env:prod\nsvc.db.time:6|ms|#env:prod";
    socket
        .send_to(lines.as_bytes(), server.statsd.unwrap())
        .unwrap();
    let key = "svc.db.time{env=prod}";
    let started = Instant::now();
    while server.engine.registry().get(key).is_none()
        || server.minute(key, NOW - NOW % 60, Display::Count) != Some(3.0)
    {
        assert!(started.elapsed() < Duration::from_secs(30), "never landed");
        std::thread::sleep(Duration::from_millis(5));
    }
    for (stat, want) in [("upper", 8.0), ("count", 3.0), ("median", 6.0)] {
        let path = format!("stats.timers.svc.db.time.{stat};env=prod");
        let answer = render(&server, &path, (NOW - 120, NOW), None);
        assert_eq!(answer.name, path);
        let &(got, stamp) = answer.points.last().unwrap();
        assert_eq!(stamp, NOW);
        // The median an estimate within the stated error, the others exact.
        let bound = answer.stated.unwrap_or(0.0) * want;
        assert!((got.unwrap() - want).abs() <= bound, "{path}: {got:?}");
        assert_eq!(answer.stated.is_some(), stat == "median", "{path}");
    }
    assert_eq!(
        strings("/tags/findSeries?expr=env=prod&expr=name=~svc.db.time.upper"),
        [
            "svc.db.time.upper;env=prod",
            "svc.db.time.upper_90;env=prod"
        ]
    );
}
