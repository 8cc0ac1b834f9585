//! Which whisper archive fills a tier bucket, checked on files written by Debian's
//! python3-whisper and against Debian's graphite-web: a bucket the finer archive covers is
//! rolled up from the finer archive as whisper rolls up (its method and xFilesFactor, 1m to
//! 5m to 1h), so that
//!
//! - the `average` render of the 5m and 1h tiers still equals graphite-web's render of the 5m
//!   and 1h archives, value for value;
//! - the 5m and 1h buckets keep the true max and min of the 1m points under them (graphite-web's
//!   `summarize(..., "max")` of the 1m archive), which whisper's averaged points lost;
//! - a 5m interval whose known minutes are under the xFilesFactor stays empty (whisper leaves
//!   its point unwritten), while the 1m tier holds those minutes;
//! - where the 1m archive has no point, or too few, and the 5m archive holds one (written into
//!   it directly, as a fill tool or a clock ahead does), that point fills the bucket, as
//!   graphite-web shows it;
//! - where the 1m archive holds enough points and the 5m archive another value written into it
//!   directly, tierdb differs from graphite-web by design: it keeps the rollup of the minutes
//!   (what whisper's next propagation of that interval would write again), not the other value.

use std::collections::HashMap;
use std::process::Command;

use serde_json::Value;

use crate::migrate::{assert_same_render, datapoints, graphite_web, graphite_web_installed};
use crate::migrate::{import_whisper, query, run, tiers_from_schemas, PYTHON};
use crate::support::http::get_json;
use crate::support::process::Proc;
use crate::support::unix_now;

const HOUR: i64 = 3600;

/// Writes `rich/average.wsp` (1m:1d, 5m:2d, 1h:30d, `average`, xFilesFactor 0.5) at argv[2]
/// (an hour boundary): 1h points 2 to 29 days back and 5m points 1 to 2 days back, where no
/// finer archive reaches; 1m points for the last 20 hours, a tenth missing at random, and
/// intervals made on purpose (below); 5m points written into the 5m archive directly in the
/// hour before the 1m points (covered by the 1m archive, without a point of it) and into one
/// interval of two known minutes. Then `rich/override.wsp`, a copy with one more 5m point
/// written directly over an interval of five known minutes. Prints the intervals made.
const WRITE_RICH: &str = r#"
import json, random, shutil, sys, whisper
tree, now = sys.argv[1], int(sys.argv[2])
H = 3600
random.seed(2931)
path = f"{tree}/rich/average.wsp"
whisper.create(path, [(60, 1440), (300, 576), (3600, 720)], xFilesFactor=0.5,
               aggregationMethod="average")
def value():
    return round(random.uniform(-50, 150), random.choice([0, 1, 3, 7]))
def every(step, newest, oldest):
    out, t = [], now - newest
    while t > now - oldest:
        if random.random() > 0.1:
            out.append((t, value()))
        t -= step
    return out
whisper.update_many(path, every(3600, 2 * 86400 + H, 29 * 86400), now=now)
whisper.update_many(path, every(300, 86400 + H, 2 * 86400 - H), now=now)
xff_empty = now - 3 * H   # one minute known, and nothing in the 5m archive
under_xff = now - 4 * H   # two minutes known, and a 5m point written directly
conflict = now - 6 * H    # five minutes known; override.wsp gets another 5m point directly
made = {xff_empty: [xff_empty + 120], under_xff: [under_xff, under_xff + 240]}
minutes = []
for t in range(now - 20 * H, now, 60):
    start = t - t % 300
    if start in made:
        keep = t in made[start]
    else:
        keep = start == conflict or random.random() > 0.1
    if keep:
        minutes.append((t, value()))
whisper.update_many(path, minutes, now=now)
def into_5m(path, points):
    # whisper picks the archive by a point's age before `now`: a day and a minute is past
    # the 1m archive's day, so the point goes into the 5m archive.
    for t, v in points:
        whisper.update_many(path, [(t, v)], now=t + 86400 + 60)
into_5m(path, [(under_xff, 777.0)])
no_minutes = now - 21 * H
into_5m(path, [(no_minutes + k * 300, float(k * 11 - 20)) for k in range(12) if k not in (3, 4)])
shutil.copy(path, f"{tree}/rich/override.wsp")
into_5m(f"{tree}/rich/override.wsp", [(conflict, -555.0)])
print(json.dumps({"xff_empty": xff_empty, "under_xff": under_xff, "conflict": conflict,
                  "no_minutes": no_minutes}))
"#;

/// `ts -> value` of an answer's only series, known values only.
fn known(answer: &Value, what: &str) -> HashMap<i64, f64> {
    (datapoints(answer, what).into_iter())
        .filter_map(|(ts, v)| Some((ts, v?)))
        .collect()
}

#[test]
fn finer_archives_fill_coarser_tiers_with_their_true_min_and_max() {
    if !graphite_web_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("whisper");
    std::fs::create_dir_all(tree.join("rich")).unwrap();
    // An hour boundary at least an hour back: the hours below are whole, and the 1m archive
    // (a day before the import's now) still covers the hour 21 hours before it.
    let now = unix_now() / HOUR * HOUR - HOUR;
    let written = run(Command::new(PYTHON)
        .args(["-c", WRITE_RICH])
        .arg(&tree)
        .arg(now.to_string()));
    let made: HashMap<String, i64> = serde_json::from_slice(&written.stdout).unwrap();
    let (xff_empty, under_xff) = (made["xff_empty"], made["under_xff"]);
    let (conflict, no_minutes) = (made["conflict"], made["no_minutes"]);

    let tiers = tiers_from_schemas(
        tmp.path(),
        "[default]\npattern = .*\nretentions = 1m:1d,5m:2d,1h:30d\n",
    );
    let data = tmp.path().join("data");
    let import = || import_whisper(&tree, &data, &tiers);
    let first = import();
    assert!(first.starts_with("imported 2 files"), "{first}");
    assert!(
        first.contains("left empty by the file's xFilesFactor"),
        "{first}"
    );
    let second = import();
    assert!(second.contains(", 0 of them changed"), "{second}");

    // The 1m archive as graphite-web reads it, and its true max and min per 5 minutes and
    // per hour (graphite-web's summarize, buckets aligned to the interval).
    let (from_1m, until_1m) = (now - 19 * HOUR, now);
    let range_1m = format!("format=json&from={from_1m}&until={until_1m}");
    let mut queries = vec![format!("target=rich.average&{range_1m}")];
    for (interval, func) in [
        ("5min", "max"),
        ("5min", "min"),
        ("1hour", "max"),
        ("1hour", "min"),
    ] {
        queries.push(format!(
            "target=summarize(rich.average,\"{interval}\",\"{func}\")&{range_1m}"
        ));
    }
    let graphite = graphite_web(&tree, &queries);
    let minutes = known(&graphite[0], "1m");
    // Known minutes per 5m interval: whisper rolled up those with 3 of 5 (xFilesFactor 0.5).
    let mut per_interval: HashMap<i64, usize> = HashMap::new();
    for ts in minutes.keys() {
        *per_interval.entry(ts - ts.rem_euclid(300)).or_default() += 1;
    }
    let rolled_up = |start: i64| per_interval.get(&start).is_some_and(|&n| n >= 3);
    let hour_rolled_up = |start: i64| (0..12).all(|k| rolled_up(start + k * 300));

    // tierdb's 5m and 1h buckets, read as avg, max and min.
    let read =
        |tier: &str, display: &str| query(&data, "rich.average", tier, display, from_1m, until_1m);
    let mut compared = 0;
    let mut richer = 0;
    for (tier, step, index_max, index_min) in [("5m", 300, 1, 2), ("1h", HOUR, 3, 4)] {
        let (avg, max, min) = (read(tier, "avg"), read(tier, "max"), read(tier, "min"));
        let true_max = known(&graphite[index_max], "summarize max");
        let true_min = known(&graphite[index_min], "summarize min");
        for (&ts, &value) in &avg {
            let whole = if step == 300 {
                rolled_up(ts)
            } else {
                hour_rolled_up(ts)
            };
            let Some(value) = value else { continue };
            if !whole || ts < from_1m || ts + step > until_1m {
                continue;
            }
            let (got_max, got_min) = (max[&ts].unwrap(), min[&ts].unwrap());
            let what = format!("{tier} at {ts}");
            assert_eq!(got_max.to_bits(), true_max[&ts].to_bits(), "max {what}");
            assert_eq!(got_min.to_bits(), true_min[&ts].to_bits(), "min {what}");
            assert!(
                got_min <= value && value <= got_max,
                "{what}: {got_min} {value} {got_max}"
            );
            compared += 1;
            richer += usize::from(got_max > value && got_min < value);
        }
    }
    assert!(compared > 150, "{compared} buckets compared");
    assert!(
        richer > 150,
        "{richer} buckets whose max and min are not the mean"
    );

    // Under the xFilesFactor: one minute known, the 1m tier has it, the 5m bucket is empty.
    let one_minute = query(
        &data,
        "rich.average",
        "1m",
        "avg",
        xff_empty,
        xff_empty + 300,
    );
    assert_eq!(one_minute.values().flatten().count(), 1, "{one_minute:?}");
    let five = query(
        &data,
        "rich.average",
        "5m",
        "avg",
        xff_empty,
        xff_empty + 300,
    );
    assert_eq!(five.get(&xff_empty).copied().flatten(), None);
    // The 5m archive's own points where the minutes are too few or none.
    let five = query(
        &data,
        "rich.average",
        "5m",
        "avg",
        under_xff,
        under_xff + 300,
    );
    assert_eq!(five.get(&under_xff).copied().flatten(), Some(777.0));
    let five = query(
        &data,
        "rich.average",
        "5m",
        "avg",
        no_minutes,
        no_minutes + HOUR,
    );
    assert_eq!(five.get(&no_minutes).copied().flatten(), Some(-20.0));
    assert_eq!(five.get(&(no_minutes + 900)).copied().flatten(), None);

    // The average render equals graphite-web's over ranges that read each archive; for
    // override.wsp, except where its 5m point (and so its hour) was written over five known
    // minutes: there tierdb has the minutes' rollup, which is average.wsp's.
    let ranges = [
        (60, now - 19 * HOUR + 7, now - 600),
        (300, now - 44 * HOUR, now - 1800),
        (HOUR, now - 28 * 86_400, now),
    ];
    let mut queries = Vec::new();
    for series in ["rich.average", "rich.override"] {
        for (_, from, until) in ranges {
            queries.push(format!(
                "target={series}&format=json&from={from}&until={until}"
            ));
        }
    }
    let graphite = graphite_web(&tree, &queries);
    let log = tmp.path().join("serve.log");
    let mut server = Proc::tierdb("serve", &data, log);
    let addrs = server.wait_ready();
    let mut rendered = HashMap::new();
    let mut points = 0;
    for (k, (query, expected)) in queries.iter().zip(&graphite).enumerate() {
        let ours = get_json(addrs.http, &format!("/render?{query}"))
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        let step = ranges[k % ranges.len()].0;
        let by_design = |ts: i64| query.contains("override") && step > 60 && ts == conflict;
        let (got, known) = assert_same_render(&ours, expected, query, by_design);
        assert_eq!(got[1].0 - got[0].0, step, "{query}: another tier read");
        points += known;
        rendered.insert(query.clone(), got);
    }
    drop(server);
    assert!(points > 2000, "{points} points compared");
    // override.wsp's conflicting 5m point and hour are average.wsp's: the minutes' rollup.
    for (step, from, until) in &ranges[1..] {
        let at = |series: &str| {
            let key = format!("target={series}&format=json&from={from}&until={until}");
            let series = &rendered[&key];
            series.iter().find(|p| p.0 == conflict).unwrap().1
        };
        let (ours, rollup) = (at("rich.override"), at("rich.average"));
        assert!(rollup.is_some(), "{step} s at {conflict}");
        assert_eq!(ours, rollup, "{step} s at {conflict}");
    }
    eprintln!("{first}compared {compared} max/min buckets with summarize, {points} render points");
}
