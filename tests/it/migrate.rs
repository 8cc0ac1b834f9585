//! Moving in from Graphite and RRDtool, checked against the real tools (issue #29):
//!
//! - whisper files written by Debian's python3-whisper (three archives, gaps, each of
//!   whisper's eight aggregation methods), imported with `tierdb import --format whisper`
//!   into the tiers `tierdb tiers --from-storage-schemas` made from the same schema: `/render`
//!   of every series equals what Debian's graphite-web renders from the original files (run
//!   in python through Django's test client), over ranges that read each archive, value for
//!   value; a second import changes nothing and renders the same; corrupt, truncated and
//!   foreign files in the tree are refused by name while the rest imports;
//! - files written as carbon writes them, one minute at a time, by a clock ahead of the
//!   importer's: a 7-day `/render` equals graphite-web's at the 1m archive's retention edge,
//!   where the newest minutes wrote over minutes the importer's clock still counts (#56);
//! - a tier no archive has (5m over files of 1m and 1h archives) holds, for each method,
//!   exactly what whisper itself writes into a 5m archive from the same 1m points, under the
//!   same xFilesFactor (python3-whisper's fetch of that archive of a twin file);
//! - RRD files written by Debian's `rrdtool create` / `update` (a GAUGE and a COUNTER data
//!   source; AVERAGE, MIN, MAX and LAST archives of three steps): `tierdb query` of each
//!   series equals librrd's fetch of the same archive (`rrdtool fetch`, through
//!   python3-rrdtool, since the command prints 11 digits): gauges bit for bit; a counter's
//!   rate, stored as rate x step and read back as per_sec, to 1e-12 relative, since
//!   `(r * s) / s` may round; at the 1m archives' retention edge too (their oldest rows, and
//!   the 5m tier across it).
//!
//! Needs /usr/bin/python3 with the whisper and graphite modules and /usr/bin/rrdtool, which
//! `scripts/test.sh` installs; when missing, the test fails naming the install script.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::http::get_json;
use crate::support::process::{ensure_programs, Proc};
use crate::support::unix_now;

pub(crate) const PYTHON: &str = "/usr/bin/python3";
const GRAPHITE_WEB: &str = "/usr/lib/python3/dist-packages/graphite/render/views.py";
const WHISPER_PY: &str = "/usr/lib/python3/dist-packages/whisper.py";
const RRDTOOL: &str = "/usr/bin/rrdtool";

/// The schema of every test whisper file: carbon's three-archive shape, shortened.
pub(crate) const SCHEMAS: &str = "[default]\npattern = .*\nretentions = 1m:2d,5m:10d,1h:60d\n";

/// Writes one whisper file per aggregation method under `tree/migrate/<method>.wsp` with
/// python3-whisper: 1m points for the last two days, 5m points from 2 to 10 days back and
/// 1h points from 10 to 60 days back, each with gaps (a run missing, and scattered points),
/// so the coarser archives' xFilesFactor (0.4) drops some of whisper's own rollups.
const WRITE_WHISPER: &str = r#"
import random, sys, time, whisper
tree, now = sys.argv[1], int(sys.argv[2])
random.seed(29)
methods = ["average", "sum", "last", "max", "min", "avg_zero", "absmax", "absmin"]
for method in methods:
    path = f"{tree}/migrate/{method}.wsp"
    whisper.create(path, [(60, 2 * 1440), (300, 10 * 288), (3600, 60 * 24)],
                   xFilesFactor=0.4, aggregationMethod=method)
    def points(step, newest, oldest):
        out = []
        t = now - now % step - newest
        while t > now - oldest:
            k = t // step
            if k % 97 < 9 or random.random() < 0.15:
                t -= step
                continue
            out.append((t, round(random.uniform(-50, 150), random.choice([0, 1, 3, 7]))))
            t -= step
        return out
    # Oldest first, so that each update_many lands in the archive of its age.
    whisper.update_many(path, points(3600, 10 * 86400 + 3600, 59 * 86400), now=now)
    whisper.update_many(path, points(300, 2 * 86400 + 300, 10 * 86400 - 3600), now=now)
    whisper.update_many(path, points(60, 0, 2 * 86400 - 300), now=now)
"#;

/// graphite-web's render of each query (argv[2:]) over the whisper tree argv[1], as JSON
/// lines, through Django's test client on graphite-web's own settings.
const GRAPHITE_RENDER: &str = r#"
import json, os, sys, warnings
warnings.simplefilter("ignore")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "graphite.settings")
from django.conf import settings
import django
settings.STANDARD_DIRS = [sys.argv[1]]
settings.STORAGE_FINDERS = ("graphite.finders.standard.StandardFinder",)
settings.TAGDB = None
django.setup()
from django.test import Client
client = Client()
for query in sys.argv[2:]:
    params = dict(part.split("=", 1) for part in query.split("&"))
    response = client.get("/render", params)
    assert response.status_code == 200, (query, response.status_code, response.content[:500])
    print(response.content.decode())
"#;

pub(crate) fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn tierdb(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tierdb"));
    command.args(args);
    command
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `[(ts, value)]` of a render answer's only series (graphite-web's `[value, ts]` pairs).
pub(crate) fn datapoints(answer: &Value, what: &str) -> Vec<(i64, Option<f64>)> {
    let series = answer
        .as_array()
        .unwrap_or_else(|| panic!("{what}: {answer}"));
    assert_eq!(series.len(), 1, "{what}: one series expected: {answer}");
    (series[0]["datapoints"].as_array().unwrap().iter())
        .map(|p| (p[1].as_i64().unwrap(), p[0].as_f64()))
        .collect()
}

/// True when python3-whisper and graphite-web are here (the deps script runs when not).
pub(crate) fn graphite_web_installed() -> bool {
    let programs = [
        Path::new(PYTHON),
        Path::new(GRAPHITE_WEB),
        Path::new(WHISPER_PY),
    ];
    ensure_programs(&programs, "python3-whisper and graphite-web")
}

/// `dir/tiers.toml`, made by `tierdb tiers --from-storage-schemas` from `schemas` (the text
/// of a storage-schemas.conf).
pub(crate) fn tiers_from_schemas(dir: &Path, schemas: &str) -> PathBuf {
    let conf = dir.join("storage-schemas.conf");
    std::fs::write(&conf, schemas).unwrap();
    let tiers = dir.join("tiers.toml");
    let made = run(tierdb(&["tiers", "--from-storage-schemas"]).arg(&conf));
    std::fs::write(&tiers, &made.stdout).unwrap();
    tiers
}

/// `tierdb import --format whisper TREE` into `data` with `tiers`: the summary it prints.
pub(crate) fn import_whisper(tree: &Path, data: &Path, tiers: &Path) -> String {
    stdout(&run(tierdb(&["import", "--format", "whisper"])
        .arg(tree)
        .arg("--data-dir")
        .arg(data)
        .arg("--tiers")
        .arg(tiers)))
}

/// graphite-web's answers to render `queries` over the whisper tree `tree`, one per query.
pub(crate) fn graphite_web(tree: &Path, queries: &[String]) -> Vec<Value> {
    let rendered = run(Command::new(PYTHON)
        .args(["-c", GRAPHITE_RENDER])
        .arg(tree)
        .args(queries));
    let answers: Vec<Value> = (stdout(&rendered).lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), queries.len());
    answers
}

/// Asserts that tierdb's render answer `ours` to `query` equals graphite-web's `expected`:
/// the same step, times and values bit for bit, except at the times `by_design` names,
/// where they must differ. Gives tierdb's points and how many known points were compared.
pub(crate) fn assert_same_render(
    ours: &Value,
    expected: &Value,
    query: &str,
    by_design: impl Fn(i64) -> bool,
) -> (Vec<(i64, Option<f64>)>, usize) {
    let want = datapoints(expected, query);
    let got = datapoints(ours, query);
    let step = |points: &[(i64, Option<f64>)]| points[1].0 - points[0].0;
    assert_eq!(step(&got), step(&want), "{query}: another archive read");
    assert_eq!(got.len(), want.len(), "{query}");
    let mut compared = 0;
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.0, w.0, "{query}");
        if by_design(g.0) {
            assert_ne!(g.1, w.1, "{query} at {}: differs by design", g.0);
            continue;
        }
        match (g.1, w.1) {
            (Some(a), Some(b)) => assert_eq!(a.to_bits(), b.to_bits(), "{query} at {}", g.0),
            (a, b) => assert_eq!(a, b, "{query} at {}", g.0),
        }
        compared += usize::from(w.1.is_some());
    }
    (got, compared)
}

/// [`WRITE_WHISPER`]'s files under `dir/whisper`: the tree and the files' clock, a minute
/// boundary a few minutes back, so that every range the tests read is far from an archive's
/// retention edge at any time they read it.
pub(crate) fn write_whisper_tree(dir: &Path) -> (PathBuf, i64) {
    let tree = dir.join("whisper");
    std::fs::create_dir_all(tree.join("migrate")).unwrap();
    let now = unix_now() / 60 * 60 - 300;
    run(Command::new(PYTHON)
        .args(["-c", WRITE_WHISPER])
        .arg(&tree)
        .arg(now.to_string()));
    (tree, now)
}

#[test]
fn whisper_files_render_as_graphite_web_renders_them() {
    if !graphite_web_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (tree, now) = write_whisper_tree(tmp.path());

    // Refused files beside the good ones: cut short, a damaged header, not whisper at all.
    let good = std::fs::read(tree.join("migrate/average.wsp")).unwrap();
    let bad = tree.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("truncated.wsp"), &good[..good.len() - 100]).unwrap();
    let mut damaged = good.clone();
    damaged[3] = 42; // aggregation type 42
    std::fs::write(bad.join("damaged.wsp"), damaged).unwrap();
    std::fs::write(
        bad.join("foreign.wsp"),
        b"#!/bin/sh\necho not a whisper file\n",
    )
    .unwrap();

    let tiers = tiers_from_schemas(tmp.path(), SCHEMAS);
    let data = tmp.path().join("data");
    let import = || import_whisper(&tree, &data, &tiers);
    let first = import();
    assert!(first.starts_with("imported 8 files"), "{first}");
    for (name, why) in [
        ("truncated.wsp", "truncated"),
        ("damaged.wsp", "aggregation type 42"),
        ("foreign.wsp", "not a whisper file"),
    ] {
        let line = (first.lines())
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{name} not named: {first}"));
        assert!(line.contains(why), "{line}");
    }
    let second = import();
    assert!(
        second.contains(", 0 of them changed"),
        "a second import changes nothing: {second}"
    );

    // Ranges reading each archive: graphite-web picks the finest archive whose retention
    // holds `from`, and tierdb's render the finest tier whose retention does.
    let ranges = [
        ("1m", now - 86_400 + 7, now - 3_600 + 11),
        ("5m", now - 8 * 86_400 + 13, now - 3 * 86_400),
        ("1h", now - 50 * 86_400 - 17, now - 12 * 86_400),
        ("1h", now - 59 * 86_400, now),
    ];
    let methods = [
        "average", "sum", "last", "max", "min", "avg_zero", "absmax", "absmin",
    ];
    let mut queries = Vec::new();
    for method in methods {
        for (_, from, until) in ranges {
            queries.push(format!(
                "target=migrate.{method}&format=json&from={from}&until={until}"
            ));
        }
    }
    let graphite = graphite_web(&tree, &queries);

    let log = tmp.path().join("serve.log");
    let mut server = Proc::tierdb("serve", &data, log);
    let addrs = server.wait_ready();
    let mut compared = 0;
    for (query, expected) in queries.iter().zip(&graphite) {
        let ours = get_json(addrs.http, &format!("/render?{query}"))
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        let (got, known) = assert_same_render(&ours, expected, query, |_| false);
        assert!(known > got.len() / 3, "{query}: the range holds data");
        compared += known;
    }
    // The first import's numbers, the second one's, and what was compared, for the log.
    eprintln!("{first}{second}compared {compared} points with graphite-web");
    // Nothing to check in its shutdown: dropping the server kills it.
    drop(server);
}

/// Writes `edge/<method>.wsp` (1m:1d, 10m:30d, xFilesFactor 0.5) for `average` and `last` as
/// carbon writes them, one `update_many` a minute at that minute, for the eight days up to
/// argv[2]: a clock ahead of the test's, so the last minutes written over the first minutes
/// of the 1m ring that the test's clock still counts as current.
const WRITE_AHEAD: &str = r#"
import random, sys, whisper
tree, newest = sys.argv[1], int(sys.argv[2])
random.seed(56)
for method in ["average", "last"]:
    path = f"{tree}/edge/{method}.wsp"
    whisper.create(path, [(60, 1440), (600, 30 * 144)], xFilesFactor=0.5,
                   aggregationMethod=method)
    t = newest - 8 * 86400
    while t <= newest:
        value = round(random.uniform(-50, 150), random.choice([0, 1, 3, 7]))
        whisper.update_many(path, [(t, value)], now=t)
        t += 60
"#;

/// A regression test (issue #56, item 5): a Graphite host whose clock ran a few minutes ahead
/// (or clients stamping points ahead, which carbon's `update_many` takes) leaves whisper
/// files whose newest minutes lie after the importer's now. Each of them was written over
/// the slot of a minute one retention earlier, which the importer's clock still counts as
/// inside the 1m archive's retention. The import built the 10m bucket over such a minute
/// from the minutes left (and the bucket holding now from the minutes up to now), where
/// graphite-web shows the 10m archive's point, rolled up when all the minutes were there:
/// 1 point of the 1,008 of a 7-day render differed. The rule now counts only what the 1m
/// archive still holds, and the render equals graphite-web's everywhere.
#[test]
fn whisper_files_from_a_clock_ahead_render_as_graphite_web_at_the_retention_edge() {
    if !graphite_web_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("whisper");
    std::fs::create_dir_all(tree.join("edge")).unwrap();
    let now = unix_now();
    // The writer's clock: 3 to 13 minutes ahead, at 2 minutes into a 10m interval, so that
    // the three minutes it wrote over in the 1m ring open a 10m interval wholly inside the
    // 1m archive's retention by the importer's clock, whose other seven (over the
    // xFilesFactor) are still held.
    let mut newest = (now + 180) / 60 * 60 + 60;
    while newest % 600 != 120 {
        newest += 60;
    }
    run(Command::new(PYTHON)
        .args(["-c", WRITE_AHEAD])
        .arg(&tree)
        .arg(newest.to_string()));
    let tiers = tiers_from_schemas(
        tmp.path(),
        "[default]\npattern = .*\nretentions = 1m:1d,10m:30d\n",
    );
    let data = tmp.path().join("data");
    let summary = import_whisper(&tree, &data, &tiers);
    assert!(summary.starts_with("imported 2 files"), "{summary}");
    let edge = newest - 120 - 86_400;
    assert!(
        unix_now() < edge + 86_400,
        "the import ran after the 10m interval at {edge} left the 1m archive's retention"
    );

    let queries: Vec<String> = ["average", "last"]
        .iter()
        .map(|method| {
            format!(
                "target=edge.{method}&format=json&from={}&until={now}",
                now - 7 * 86_400
            )
        })
        .collect();
    let graphite = graphite_web(&tree, &queries);
    let log = tmp.path().join("serve.log");
    let mut server = Proc::tierdb("serve", &data, log);
    let addrs = server.wait_ready();
    for (query, expected) in queries.iter().zip(&graphite) {
        let ours = get_json(addrs.http, &format!("/render?{query}"))
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        let (got, known) = assert_same_render(&ours, expected, query, |_| false);
        assert_eq!(got.len(), 1_008, "{query}");
        assert!(got.iter().any(|p| p.0 == edge), "{query}: {edge} rendered");
        assert!(known > 1_000, "{query}: {known} points compared");
    }
    drop(server);
}

/// librrd's fetch (`rrdtool fetch FILE CF -r STEP -s FROM -e UNTIL`, through python3-rrdtool
/// for exact floats) as `(row end, [value per DS])`, NaN for unknown.
fn rrd_fetch(file: &Path, cf: &str, step: i64, from: i64, until: i64) -> Vec<(i64, Vec<f64>)> {
    let script = "import json, sys, rrdtool\n\
        (start, end, step), names, rows = rrdtool.fetch(*sys.argv[1:])\n\
        print(json.dumps([[start + (i + 1) * step, [v if v is not None else 'nan' \\
        for v in row]] for i, row in enumerate(rows)]))";
    let out = run(Command::new(PYTHON)
        .args(["-c", script])
        .arg(file)
        .args([cf, "-r", &step.to_string(), "-s", &from.to_string()])
        .args(["-e", &until.to_string()]));
    let rows: Vec<(i64, Vec<Value>)> = serde_json::from_slice(&out.stdout).unwrap();
    (rows.into_iter())
        .map(|(end, values)| {
            let values = (values.iter())
                .map(|v| v.as_f64().unwrap_or(f64::NAN))
                .collect();
            (end, values)
        })
        .collect()
}

/// `tierdb query` of `series` on `tier` with `display`, `[from, until)`, as `ts -> value`.
pub(crate) fn query(
    data: &Path,
    series: &str,
    tier: &str,
    display: &str,
    from: i64,
    until: i64,
) -> std::collections::HashMap<i64, Option<f64>> {
    let out = run(
        tierdb(&["query", series, "--tier", tier, "--display", display])
            .args(["--from", &from.to_string(), "--to", &until.to_string()])
            .args(["--format", "json", "--data-dir"])
            .arg(data),
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    (answer["points"].as_array().unwrap().iter())
        .map(|p| (p[0].as_i64().unwrap(), p[1].as_f64()))
        .collect()
}

#[test]
fn rrd_files_query_as_rrdtool_fetches_them() {
    if !ensure_programs(&[Path::new(RRDTOOL), Path::new(PYTHON)], "rrdtool") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file: PathBuf = tmp.path().join("router.rrd");
    let now = unix_now() / 3600 * 3600 - 3600;
    let start = now - 80 * 3600;
    run(Command::new(RRDTOOL)
        .arg("create")
        .arg(&file)
        .args(["--start", &start.to_string(), "--step", "60"])
        .args(["DS:temp:GAUGE:120:U:U", "DS:octets:COUNTER:120:0:U"])
        .args([
            "RRA:AVERAGE:0.5:1:1440",
            "RRA:MIN:0.5:1:1440",
            "RRA:MAX:0.5:1:1440",
        ])
        .args(["RRA:AVERAGE:0.5:5:1152", "RRA:MAX:0.5:5:1152"])
        .args(["RRA:LAST:0.5:1:1440", "RRA:LAST:0.5:60:100"]));
    // Updates every 60 s at an offset within the step, a varying gauge, a counter that
    // grows by varying amounts; an hour without updates makes a gap.
    let mut updates = Vec::new();
    let mut counter: u64 = 1_000;
    let mut t = start + 17;
    let mut k = 0u64;
    while t < now {
        k += 1;
        counter += (k * 7_919) % 5_000;
        let gap = (now - 30 * 3600..now - 29 * 3600).contains(&t);
        if !gap {
            let gauge = ((k * 37) % 200) as f64 / 8.0 - 5.0;
            updates.push(format!("{t}:{gauge}:{counter}"));
        }
        t += 60 + (k % 3) as i64 - 1;
    }
    for chunk in updates.chunks(500) {
        run(Command::new(RRDTOOL).arg("update").arg(&file).args(chunk));
    }
    // A copy cut short and a file that is no RRD, refused by name.
    let bytes = std::fs::read(&file).unwrap();
    let truncated = tmp.path().join("truncated.rrd");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let foreign = tmp.path().join("foreign.rrd");
    std::fs::write(&foreign, b"RRA:AVERAGE:0.5:1:1440\n").unwrap();

    let tiers = tmp.path().join("tiers.toml");
    std::fs::write(
        &tiers,
        "[[tier]]\nname = \"1m\"\nresolution = \"1m\"\nperiod = \"6h\"\nretention = \"2d\"\n\n\
         [[tier]]\nname = \"5m\"\nresolution = \"5m\"\nperiod = \"1d\"\nretention = \"5d\"\n\n\
         [[tier]]\nname = \"1h\"\nresolution = \"1h\"\nperiod = \"10d\"\nretention = \"10d\"\n",
    )
    .unwrap();
    let data = tmp.path().join("data");
    let import = || {
        stdout(&run(tierdb(&["import", "--format", "rrd"])
            .arg(&file)
            .arg(&truncated)
            .arg(&foreign)
            .arg("--data-dir")
            .arg(&data)
            .arg("--tiers")
            .arg(&tiers)))
    };
    let first = import();
    assert!(first.starts_with("imported 1 files"), "{first}");
    assert!(first.contains("truncated.rrd: truncated"), "{first}");
    assert!(first.contains("foreign.rrd: not an RRD file"), "{first}");
    let second = import();
    assert!(second.contains(", 0 of them changed"), "{second}");

    // The end of the 1m RRAs' oldest row: their retention edge, where the 5m RRAs alone
    // cover what came before (RRDtool consolidates each RRA from the primary points on its
    // own, so no finer RRA's rows are rolled up there, and the rows carry no stamps that a
    // clock ahead could make disagree with their place in the ring).
    let first = stdout(&run(Command::new(RRDTOOL)
        .arg("first")
        .arg(&file)
        .args(["--rraindex", "0"])));
    let first: i64 = first.trim().parse().unwrap();
    // (tier, step, from, until, [(CF, gauge display, counter display)])
    let checks = [
        (
            "1m",
            60,
            first - 60,
            first + 2 * 3600,
            vec![
                ("AVERAGE", "avg", "per_sec"),
                ("MIN", "min", "min"),
                ("MAX", "max", "max"),
            ],
        ),
        (
            "5m",
            300,
            first - 2 * 3600,
            first + 2 * 3600,
            vec![("AVERAGE", "avg", "per_sec"), ("MAX", "max", "max")],
        ),
        (
            "1m",
            60,
            now - 20 * 3600,
            now - 60,
            vec![
                ("AVERAGE", "avg", "per_sec"),
                ("MIN", "min", "min"),
                ("MAX", "max", "max"),
            ],
        ),
        (
            "5m",
            300,
            now - 70 * 3600,
            now - 3600,
            vec![("AVERAGE", "avg", "per_sec"), ("MAX", "max", "max")],
        ),
        (
            "1h",
            3600,
            now - 79 * 3600,
            now,
            vec![("LAST", "avg", "per_sec")],
        ),
    ];
    let mut compared = 0;
    for (tier, step, from, until, functions) in checks {
        for (cf, gauge_display, counter_display) in functions {
            let rows = rrd_fetch(&file, cf, step, from, until);
            assert!(rows.len() > 10, "{cf} {step}: {rows:?}");
            for (ds, series, display) in [
                (0, "router.temp", gauge_display),
                (1, "router.octets", counter_display),
            ] {
                let ours = query(&data, series, tier, display, from - step, until + step);
                for (end, values) in &rows {
                    let want = values[ds];
                    // The row ending at `end` is the bucket starting a step earlier.
                    let got = ours.get(&(end - step)).copied().flatten();
                    let what = format!("{series} {cf} {step} s at {end}");
                    match got {
                        None => assert!(want.is_nan(), "{what}: rrdtool {want}, tierdb none"),
                        // Counters: the rate was stored times the step; min and max are read
                        // as increases, so divided back here.
                        Some(got) if ds == 1 => {
                            let got = if display == "per_sec" {
                                got
                            } else {
                                got / step as f64
                            };
                            let close = (got - want).abs() <= 1e-12 * want.abs().max(1e-300);
                            assert!(close, "{what}: rrdtool {want}, tierdb {got}");
                            compared += 1;
                        }
                        Some(got) => {
                            assert_eq!(got.to_bits(), want.to_bits(), "{what}: {got} vs {want}");
                            compared += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(compared > 1000, "{compared}");

    // The gauge's LAST rows are its buckets' latest samples, each taken at its row's end: a
    // PromQL instant query at a row's end answers the latest row ending within the 5-minute
    // lookback, as rrdtool fetch shows it, without `approximate`. (A rate's rows hold no
    // raw counter value: its instant value stays an increase, flagged.)
    let rows = rrd_fetch(&file, "LAST", 60, now - 20 * 3600, now - 60);
    let log = tmp.path().join("serve.log");
    let mut server = Proc::tierdb("serve", &data, log);
    let addrs = server.wait_ready();
    let mut latest = 0;
    for &(end, _) in rows.iter().step_by(7) {
        let want = (rows.iter().rev())
            .find(|(e, v)| *e <= end && *e > end - 300 && !v[0].is_nan())
            .map(|(_, v)| v[0]);
        let path = format!(
            "/prometheus/api/v1/query?query={}&time={end}",
            crate::support::http::percent_encode("{__name__=\"router.temp\"}")
        );
        let answer = get_json(addrs.http, &path).unwrap();
        let result = answer["data"]["result"].as_array().unwrap();
        let got = result
            .first()
            .map(|s| s["value"][1].as_str().unwrap().parse::<f64>().unwrap());
        assert_eq!(got, want, "router.temp at {end}: {answer}");
        assert!(
            answer["warnings"].is_null(),
            "router.temp at {end}: {answer}"
        );
        latest += usize::from(got.is_some());
    }
    assert!(latest > 100, "{latest}");
    drop(server);
    eprintln!("{first}compared {compared} values with rrdtool fetch, {latest} latest values");
}

/// For each method: `fold/<method>.wsp` with archives 1m:1d and 1h:30d, and
/// `ref/<method>.wsp` with 1m:1d and 5m:2d, both given the same 1m points (the last 20
/// hours, with gaps); then whisper's own 5m archive of the `ref` file, fetched with
/// python3-whisper (`whisper.fetch(..., archiveToSelect=300)`), printed as JSON
/// `{method: [[ts, value or null], ...]}` over argv[3]..argv[4].
const WRITE_AND_FETCH_ROLLUPS: &str = r#"
import json, random, sys, whisper
tree, now, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
random.seed(2929)
methods = ["average", "sum", "last", "max", "min", "avg_zero", "absmax", "absmin"]
points = []
t = now - now % 60
while t > now - 20 * 3600:
    if not (t // 60 % 53 < 4 or random.random() < 0.3):
        points.append((t, round(random.uniform(-20, 80), random.choice([0, 2, 5]))))
    t -= 60
out = {}
for method in methods:
    fold = f"{tree}/fold/{method}.wsp"
    ref = f"{tree}/ref/{method}.wsp"
    whisper.create(fold, [(60, 1440), (3600, 720)], xFilesFactor=0.6, aggregationMethod=method)
    whisper.create(ref, [(60, 1440), (300, 576)], xFilesFactor=0.6, aggregationMethod=method)
    whisper.update_many(fold, points, now=now)
    whisper.update_many(ref, points, now=now)
    (first, _, step), values = whisper.fetch(ref, start, end, now=now, archiveToSelect=300)
    out[method] = [[first + i * step, v] for i, v in enumerate(values)]
print(json.dumps(out))
"#;

#[test]
fn a_tier_coarser_than_the_archive_holds_whispers_own_rollup() {
    let programs = [Path::new(PYTHON), Path::new(WHISPER_PY)];
    if !ensure_programs(&programs, "python3-whisper") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("whisper");
    for dir in ["fold", "ref"] {
        std::fs::create_dir_all(tree.join(dir)).unwrap();
    }
    let now = unix_now() / 300 * 300 - 600;
    let (start, end) = (now - 18 * 3600 + 7, now - 3600);
    let written = run(Command::new(PYTHON)
        .args(["-c", WRITE_AND_FETCH_ROLLUPS])
        .arg(&tree)
        .args([now, start, end].map(|t| t.to_string())));
    let expected: serde_json::Map<String, Value> = serde_json::from_slice(&written.stdout).unwrap();
    // A 5m tier, which no archive of the `fold` files has: it is rolled up from their 1m
    // archive by the file's method and xFilesFactor.
    let tiers = tmp.path().join("tiers.toml");
    std::fs::write(
        &tiers,
        "[[tier]]\nname = \"1m\"\nresolution = \"1m\"\nperiod = \"6h\"\nretention = \"1d\"\n\n\
         [[tier]]\nname = \"5m\"\nresolution = \"5m\"\nperiod = \"1d\"\nretention = \"2d\"\n",
    )
    .unwrap();
    let data = tmp.path().join("data");
    let summary = stdout(&run(tierdb(&["import", "--format", "whisper"])
        .arg(tree.join("fold"))
        .arg("--data-dir")
        .arg(&data)
        .arg("--tiers")
        .arg(&tiers)));
    assert!(
        summary.contains("left empty by the file's xFilesFactor"),
        "{summary}"
    );
    let mut compared = 0;
    for (method, points) in &expected {
        let ours = query(&data, method, "5m", "avg", start - 300, end + 300);
        let mut known = 0;
        for point in points.as_array().unwrap() {
            let ts = point[0].as_i64().unwrap();
            let want = point[1].as_f64();
            let got = ours.get(&ts).copied().flatten();
            match (got, want) {
                (Some(g), Some(w)) => {
                    assert_eq!(g.to_bits(), w.to_bits(), "{method} at {ts}: {g} vs {w}");
                    known += 1;
                }
                (g, w) => assert_eq!(g, w, "{method} at {ts}"),
            }
        }
        assert!(known > 50, "{method}: {known} points compared");
        compared += known;
    }
    eprintln!("{summary}compared {compared} rolled-up points with whisper's own 5m archives");
}
