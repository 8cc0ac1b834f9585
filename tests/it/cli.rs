//! The `tierdb` command line, run as a process: every subcommand's output (insta snapshots,
//! times redacted since the data is written relative to now), `--help`, and the error paths
//! with their exit codes.

use std::path::Path;
use std::process::{Command, Output};

const DAY: i64 = 86_400;

fn tierdb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(args)
        .env_remove("TIERDB_DATA_DIR")
        .env_remove("TIERDB_TIERS")
        .output()
        .expect("run tierdb")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn assert_stderr_has(output: &Output, text: &str) {
    let err = stderr(output);
    assert!(err.contains(text), "no {text:?} in: {err}");
}

/// Redacts what depends on when the test runs.
macro_rules! snapshot {
    ($name:expr, $value:expr, $description:expr) => {
        insta::with_settings!({
            description => $description,
            filters => vec![
                (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "[time]"),
                (r"\b1[0-9]{9}\b", "[unix]"),
                (r"/tmp/\S+", "[dir]"),
                (r"in \S+: \S+ M lines/s \(\S+ of", "in [elapsed]: [rate] M lines/s ([sync] of"),
                (r"\s+\d+\s+[\d.]+ [KMG]iB( +[\d.]+ [KMG]iB)?\n", "  [files] [bytes]$1\n"),
                (r"space: [\d.]+ [KMG]iB", "space: [bytes]"),
            ],
        }, {
            insta::assert_snapshot!($name, $value);
        });
    };
}

/// A data directory with two series: `web.requests{host=a}` every 10 s over the last two
/// hours (value = 10 per sample) and `load` with one sample a minute ago.
fn data_dir() -> (tempfile::TempDir, i64) {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp();
    let hour = now - now % 3600;
    let mut lines = String::new();
    for i in 0..720 {
        lines.push_str(&format!(
            "web.requests;host=a 10 {}\n",
            hour - 7200 + i * 10
        ));
    }
    lines.push_str(&format!("load 0.5 {}\n", now - 60));
    lines.push_str("this line is broken\n");
    let input = dir.path().join("in.txt");
    std::fs::write(&input, lines).unwrap();
    let data = dir.path().join("data");
    let out = tierdb(&[
        "import",
        input.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    (dir, hour)
}

fn data(dir: &Path) -> String {
    dir.join("data").to_str().unwrap().to_string()
}

#[test]
fn import_reports_what_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.lp");
    let now = chrono::Utc::now().timestamp();
    std::fs::write(
        &input,
        format!(
            "# telegraf\ncpu,host=a usage=1.5,label=\"x\" {ns}\ncpu,host=a usage=2.5 {ns}\nbad line\n",
            ns = (now - 60) * 1_000_000_000
        ),
    )
    .unwrap();
    let out = tierdb(&[
        "import",
        input.to_str().unwrap(),
        "--data-dir",
        &data(dir.path()),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    snapshot!(
        "import_summary",
        stdout(&out),
        "tierdb import of 4 Influx lines: a comment, a line with a string field, a good line, a broken line"
    );
}

#[test]
fn query_prints_a_table_csv_and_the_http_json() {
    let (dir, hour) = data_dir();
    let from = (hour - 7200).to_string();
    let to = (hour - 7200 + 300).to_string();
    let base = [
        "query",
        "web.requests{host=a}",
        "--tier",
        "1m",
        "--from",
        &from,
        "--to",
        &to,
        "--data-dir",
    ];
    let d = data(dir.path());
    for (format, display) in [("table", "total"), ("csv", "per_sec"), ("json", "count")] {
        let mut args = base.to_vec();
        args.extend([d.as_str(), "--format", format, "--display", display]);
        let out = tierdb(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        snapshot!(
            format!("query_{format}"),
            stdout(&out),
            format!("web.requests{{host=a}} 10 every 10 s; 1m tier, 5 minutes, display {display}, --format {format}")
        );
    }
    // The JSON is exactly the HTTP API's shape.
    let mut args = base.to_vec();
    args.extend([d.as_str(), "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&tierdb(&args).stdout).unwrap();
    let keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["display", "points", "series", "tier"],
        "the HTTP API's keys, no more"
    );
    // Relative ranges and the auto tier.
    let out = tierdb(&[
        "query",
        "web.requests{host=a}",
        "--range",
        "1d",
        "--display",
        "total",
        "--data-dir",
        &d,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("tier 1m"), "{}", stdout(&out));
}

#[test]
fn aggregate_prints_one_table_per_group() {
    let (dir, hour) = data_dir();
    let d = data(dir.path());
    let from = (hour - 7200).to_string();
    let to = (hour - 7200 + 180).to_string();
    let window = [
        "--tier",
        "1m",
        "--from",
        &from,
        "--to",
        &to,
        "--data-dir",
        &d,
    ];
    let mut args = vec![
        "aggregate",
        "*{host!=b}",
        "--group-by",
        "host",
        "--display",
        "total",
    ];
    args.extend(window);
    let out = tierdb(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    snapshot!(
        "aggregate_table",
        stdout(&out),
        "sum of totals of every series but host=b, by host; 1m tier, 3 minutes"
    );
    let mut args = vec![
        "aggregate",
        "web.*",
        "--agg",
        "count",
        "--whole-range",
        "--format",
        "csv",
    ];
    args.extend(window);
    let out = tierdb(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("group,ts,value\n\"\",{from},1\n"));
    // per_sec of gauges says so (#31 item 3), as query does.
    let mut args = vec!["aggregate", "web.*", "--display", "per_sec"];
    args.extend(window);
    let out = tierdb(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_stderr_has(&out, "tierdb: note: the series is a gauge: per_sec");
}

#[test]
fn series_and_info() {
    let (dir, _) = data_dir();
    let d = data(dir.path());
    let out = tierdb(&["series", "--data-dir", &d]);
    assert_eq!(stdout(&out), "web.requests{host=a}\nload\n");
    let out = tierdb(&["series", "web.*", "--tag", "host=a", "--data-dir", &d]);
    assert_eq!(stdout(&out), "web.requests{host=a}\n");
    // Tag values take globs, as in /render (#31); nothing matching fails and says what
    // was near.
    let out = tierdb(&["series", "web.requests{host=*}", "--data-dir", &d]);
    assert_eq!(stdout(&out), "web.requests{host=a}\n");
    let out = tierdb(&["series", "web.*;host=[ab]", "--data-dir", &d]);
    assert_eq!(stdout(&out), "web.requests{host=a}\n");
    let out = tierdb(&["series", "nothing.*", "--data-dir", &d]);
    assert_eq!((stdout(&out).as_str(), out.status.code()), ("", Some(1)));
    assert_stderr_has(&out, "no series match 'nothing.*'");
    let out = tierdb(&["series", "web.requests{host=web-*}", "--data-dir", &d]);
    assert!(!out.status.success());
    assert_stderr_has(
        &out,
        "no series match 'web.requests{host=web-*}'; 1 series has a matching name but other tags: 'web.requests{host=a}'",
    );
    let out = tierdb(&["series", "web.request", "--data-dir", &d]);
    assert_stderr_has(&out, "series with a near name: 'web.requests{host=a}'");
    let out = tierdb(&["info", "--data-dir", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    snapshot!(
        "info",
        stdout(&out),
        "tierdb info on a directory with two series under the default tiers"
    );
    let out = tierdb(&["info", "--json", "--data-dir", &d]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["series"], 2);
}

#[test]
fn user_errors_exit_non_zero_with_one_line() {
    let (dir, _) = data_dir();
    let d = data(dir.path());
    let bad_tiers = dir.path().join("bad.toml");
    std::fs::write(
        &bad_tiers,
        "[[tier]]\nname = \"1m\"\nresolution = \"7m\"\nperiod = \"1d\"\nretention = \"2d\"\n",
    )
    .unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["query", "nope", "--data-dir", &d], "unknown series"),
        (
            vec!["query", "load", "--from", "someday", "--data-dir", &d],
            "--from",
        ),
        (
            vec!["query", "load", "--display", "median", "--data-dir", &d],
            "display",
        ),
        (
            vec!["query", "load", "--tier", "2m", "--data-dir", &d],
            "unknown tier",
        ),
        (
            vec!["query", "load", "--data-dir", "/nonexistent/tierdb"],
            "/nonexistent/tierdb",
        ),
        (
            vec!["tiers", "--tiers", bad_tiers.to_str().unwrap()],
            "bad.toml:3",
        ),
        (
            vec!["import", "/nonexistent/file.txt", "--data-dir", &d],
            "/nonexistent/file.txt",
        ),
    ];
    for (args, expected) in cases {
        let out = tierdb(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.starts_with("tierdb: ") && err.lines().count() == 1,
            "{args:?}: {err}"
        );
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A usage error is clap's: exit 2.
    assert_eq!(tierdb(&["query"]).status.code(), Some(2));
    assert_eq!(tierdb(&["frobnicate"]).status.code(), Some(2));
}

#[test]
fn every_subcommand_has_help_with_examples() {
    let top = tierdb(&["--help"]);
    snapshot!("help", stdout(&top), "tierdb --help");
    for sub in [
        "serve",
        "demo",
        "import",
        "query",
        "aggregate",
        "series",
        "delete",
        "retype",
        "info",
        "plot",
        "tiers",
        "lookup",
        "cluster",
    ] {
        let out = tierdb(&[sub, "--help"]);
        assert!(out.status.success());
        let text = stdout(&out);
        assert!(text.contains("Examples:"), "{sub}: {text}");
        snapshot!(format!("help_{sub}"), text, format!("tierdb {sub} --help"));
    }
}

/// `demo --help` lists what a demo user needs (#31 item 12: it listed fifteen server
/// tuning flags); the tuning flags are `serve`'s, and the demo still takes them.
#[test]
fn demo_help_lists_no_server_tuning_flags() {
    let demo = stdout(&tierdb(&["demo", "--help"]));
    let serve = stdout(&tierdb(&["serve", "--help"]));
    for tuning in [
        "--max-series",
        "--name-cache",
        "--max-read-values",
        "--statsd-flush",
        "--graphite-max-connections",
        "--graphite-idle-timeout",
        "--http-max-connections",
        "--http-header-timeout",
        "--http-body-timeout",
        "--http-idle-timeout",
    ] {
        assert!(!demo.contains(tuning), "demo --help lists {tuning}");
        assert!(serve.contains(tuning), "serve --help lacks {tuning}");
    }
    let options = demo
        .lines()
        .filter(|l| l.trim_start().starts_with("--"))
        .count();
    assert_eq!(
        options, 7,
        "data-dir, tiers, days, http, graphite, statsd, token: {demo}"
    );
    // Still taken: a bad value is refused by the flag's parser.
    let out = tierdb(&["demo", "--http-idle-timeout", "0s"]);
    assert_eq!(out.status.code(), Some(2));
    assert_stderr_has(&out, "--http-idle-timeout");
}

#[test]
fn lookup_and_tiers() {
    let out = tierdb(&["lookup", "2024-02-29T23:59:59Z"]);
    snapshot!(
        "lookup",
        stdout(&out),
        "tierdb lookup 2024-02-29T23:59:59Z (a leap day's last second) with the default tiers"
    );
    let out = tierdb(&["tiers"]);
    assert!(stdout(&out).contains("1825d"));
    // The [engine] settings and [counters] rules in force are printed too (#31).
    assert!(
        stdout(&out)
            .contains("[engine]\nfuture_bound = 1h\nseries_per_chunk = 256\nmax_points = 1500\n"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("[counters]\n# no rule"),
        "{}",
        stdout(&out)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiers.toml");
    std::fs::write(
        &file,
        "[counters]\nnames = [\"*.requests.count\"]\ntags = [\"type=counter\"]\n\n[[tier]]\nname = \"1m\"\nresolution = \"1m\"\nperiod = \"1d\"\nretention = \"7d\"\n",
    )
    .unwrap();
    let out = tierdb(&["tiers", "--tiers", file.to_str().unwrap()]);
    assert!(
        stdout(&out)
            .contains("[counters]\nnames = [\"*.requests.count\"]\ntags = [\"type=counter\"]\n"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let _ = DAY;
}

#[test]
fn plot_writes_png_and_svg() {
    let (dir, _) = data_dir();
    let d = data(dir.path());
    for ext in ["png", "svg"] {
        let out_path = dir.path().join(format!("chart.{ext}"));
        let out = tierdb(&[
            "plot",
            "web.requests{host=a}",
            "load",
            "--range",
            "1d",
            "--display",
            "max",
            "--out",
            out_path.to_str().unwrap(),
            "--data-dir",
            &d,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let bytes = std::fs::read(&out_path).unwrap();
        match ext {
            "png" => assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n"),
            _ => {
                let text = String::from_utf8(bytes).unwrap();
                assert!(text.contains("<svg") && text.contains("web.requests{host=a}"));
            }
        }
    }
    let out = tierdb(&["plot", "load", "--out", "chart.gif", "--data-dir", &d]);
    assert_eq!(out.status.code(), Some(1));
    assert_stderr_has(&out, "gif");
}

/// Tiers of ten seconds and an hour: not the default, so a reader that forgets them shows.
const CUSTOM_TIERS: &str = "[[tier]]\nname = \"10s\"\nresolution = \"10s\"\nperiod = \"1h\"\nretention = \"1d\"\n\n[[tier]]\nname = \"1h\"\nresolution = \"1h\"\nperiod = \"10d\"\nretention = \"90d\"\n";

/// Issue #15: a directory created with a custom tiers.toml and read without `--tiers` showed
/// empty default tiers (with a warning in raw colour codes) and refused `--tier 10s`. It now
/// stores its tiers at creation and every opener uses them.
#[test]
fn a_data_directory_keeps_its_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = dir.path().join("custom.toml");
    std::fs::write(&tiers, CUSTOM_TIERS).unwrap();
    let now = chrono::Utc::now().timestamp();
    let ts = now - now % 10 - 60;
    let input = dir.path().join("in.txt");
    std::fs::write(&input, format!("cpu 1 {ts}\ncpu 3 {}\n", ts + 1)).unwrap();
    let d = data(dir.path());
    let tiers_flag = tiers.to_str().unwrap();
    let out = tierdb(&[
        "import",
        input.to_str().unwrap(),
        "--data-dir",
        &d,
        "--tiers",
        tiers_flag,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stored = Path::new(&d).join("tiers.toml");
    let text = std::fs::read_to_string(&stored).expect("the tiers are stored at creation");
    let parsed = tierdb::TiersConfig::from_toml_str(&text, "stored").unwrap();
    assert_eq!(parsed, tierdb::TiersConfig::load(&tiers).unwrap());

    // Read back without --tiers: the stored tiers, no warning.
    let out = tierdb(&[
        "query",
        "cpu",
        "--tier",
        "10s",
        "--range",
        "-5m",
        "--format",
        "csv",
        "--data-dir",
        &d,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(",2\n"), "{}", stdout(&out));
    let out = tierdb(&["info", "--data-dir", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("\n10s "), "{}", stdout(&out));
    assert_eq!(
        stderr(&out),
        "",
        "no warning for a directory read with its own tiers"
    );

    // An unknown tier lists the configured ones.
    let out = tierdb(&["query", "cpu", "--tier", "1m", "--data-dir", &d]);
    assert_eq!(out.status.code(), Some(1));
    assert_stderr_has(&out, r#"unknown tier "1m" (configured: 10s, 1h, or auto)"#);

    // A --tiers that changes a resolution is refused, the difference spelled out; nothing
    // changes. (A changed period is taken: tests/it/period_change.rs.)
    // An import with the custom tiers changed by `edit`, and the file it wrote them to.
    let import_with = |name: &str, edit: (&str, &str)| {
        let path = dir.path().join(name);
        std::fs::write(&path, CUSTOM_TIERS.replacen(edit.0, edit.1, 1)).unwrap();
        let out = tierdb(&[
            "import",
            input.to_str().unwrap(),
            "--data-dir",
            &d,
            "--tiers",
            path.to_str().unwrap(),
        ]);
        (out, path)
    };
    let (out, _) = import_with(
        "conflicting.toml",
        ("resolution = \"10s\"", "resolution = \"20s\""),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("tiers.toml records the tiers"), "{err}");
    assert!(
        err.contains(r#"tier "10s" resolution: 10s in the directory, 20s given"#),
        "{err}"
    );
    assert!(err.contains("conflicting.toml differs from them"), "{err}");
    assert!(
        err.contains(&format!("`tierdb tiers --data-dir {d}` prints them")),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&stored).unwrap(), text);

    // A changed retention is accepted and stored by a writable open.
    let longer_retention = ("retention = \"1d\"", "retention = \"2d\"");
    let (out, longer) = import_with("longer.toml", longer_retention);
    assert!(out.status.success(), "{}", stderr(&out));
    let changed = std::fs::read_to_string(&stored).unwrap();
    assert_eq!(
        tierdb::TiersConfig::from_toml_str(&changed, "stored").unwrap(),
        tierdb::TiersConfig::load(&longer).unwrap()
    );

    // A damaged stored file is refused by name and line.
    std::fs::write(
        &stored,
        changed.replace("period = \"1h\"", "period = \"1 hour\""),
    )
    .unwrap();
    let out = tierdb(&["info", "--data-dir", &d]);
    assert_eq!(out.status.code(), Some(1));
    assert_stderr_has(&out, "tiers.toml:");

    // A directory without the file (made before tiers were stored) opens as before, checked
    // against its files, and a writable open with tiers its files accept stores them.
    std::fs::remove_file(&stored).unwrap();
    let out = tierdb(&["info", "--data-dir", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains('\u{1b}'),
        "colour codes in piped logs: {}",
        stderr(&out)
    );
    assert!(!stored.exists(), "a read-only open writes nothing");
    let (out, _) = import_with("longer.toml", longer_retention);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stored.exists(),
        "a writable open stores the tiers its files accepted"
    );
}

/// Issue #15: `query app.requests` answered `unknown series` beside
/// `app.requests{dc=eu,host=web1}`, the Graphite form the data was sent in was refused, and
/// `query` had no `--tag`.
#[test]
fn a_series_is_found_by_its_graphite_form_part_of_its_tags_or_a_near_name() {
    let (dir, _) = data_dir();
    let d = data(dir.path());
    let query = |args: &[&str]| {
        tierdb(&[&["query"], args, &["--format", "csv", "--data-dir", &d]].concat())
    };
    // The Graphite form, here and in selectors.
    let out = query(&["web.requests;host=a"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let out = tierdb(&["series", "web.*;host=a", "--data-dir", &d]);
    assert_eq!(stdout(&out), "web.requests{host=a}\n");
    // --tag adds tags to the series named.
    let out = query(&["web.requests", "--tag", "host=a"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    // The only series with the name is used, and said so.
    let out = query(&["web.requests"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_stderr_has(&out, "reading web.requests{host=a}, the only series");
    // Near names are suggested.
    for typo in ["web.requets", "requests"] {
        let out = query(&[typo]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains("near name: 'web.requests{host=a}'"),
            "{typo}: {}",
            stderr(&out)
        );
    }
    // Two series with the name: both listed, none chosen.
    let more = dir.path().join("more.txt");
    let now = chrono::Utc::now().timestamp();
    std::fs::write(&more, format!("web.requests;host=b 1 {now}\n")).unwrap();
    let out = tierdb(&["import", more.to_str().unwrap(), "--data-dir", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = query(&["web.requests"]);
    assert_eq!(out.status.code(), Some(1));
    assert_stderr_has(
        &out,
        "2 series have that name and those tags: 'web.requests{host=a}', 'web.requests{host=b}'",
    );
    let out = query(&["web.requests", "--tag", "host!=a"]);
    assert_stderr_has(&out, "reading web.requests{host=b}");
}

/// Issue #15: an Influx file with second timestamps and no `--precision` reported
/// `0 samples accepted, 1 rejected` and exited 0.
#[test]
fn an_import_that_lands_nothing_fails_with_the_unit_its_timestamps_look_like() {
    let dir = tempfile::tempdir().unwrap();
    let d = data(dir.path());
    let now = chrono::Utc::now().timestamp();
    let input = dir.path().join("in.lp");
    std::fs::write(
        &input,
        format!("cpu,host=a usage=1 {now}\ncpu,host=a usage=2 {}\n", now + 1),
    )
    .unwrap();
    let out = tierdb(&["import", input.to_str().unwrap(), "--data-dir", &d]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("timestamps look like seconds")
            && stderr(&out).contains("try --precision s"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("  line 2: too_old: "),
        "{}",
        stdout(&out)
    );
    let out = tierdb(&[
        "import",
        input.to_str().unwrap(),
        "--precision",
        "s",
        "--data-dir",
        &d,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Graphite in milliseconds.
    let input = dir.path().join("in.txt");
    std::fs::write(&input, format!("cpu 1 {now}000\n")).unwrap();
    let out = tierdb(&["import", input.to_str().unwrap(), "--data-dir", &d]);
    assert_eq!(out.status.code(), Some(1));
    assert_stderr_has(&out, "look like milliseconds");
}

/// Issue #15: `--range 30d --tier 1m` printed 43,202 mostly empty rows without a word that
/// the tier keeps two days.
#[test]
fn a_range_past_the_tiers_retention_is_said() {
    let (dir, _) = data_dir();
    let d = data(dir.path());
    let out = tierdb(&[
        "query",
        "load",
        "--range",
        "30d",
        "--tier",
        "1m",
        "--format",
        "json",
        "--data-dir",
        &d,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let gone = &json["not_retained"];
    let (from, to) = (gone["from"].as_i64().unwrap(), gone["to"].as_i64().unwrap());
    let now = chrono::Utc::now().timestamp();
    assert!((now - 30 * DAY - from).abs() < 60, "{gone}");
    // The 1m tier holds 48h and the period in progress (6h periods).
    assert!(to > now - 3 * DAY && to <= now - 2 * DAY, "{gone}");
    assert_stderr_has(&out, "tier 1m, retention 2d no longer holds");
    let out = tierdb(&[
        "query",
        "load",
        "--range",
        "1h",
        "--tier",
        "1m",
        "--format",
        "json",
        "--data-dir",
        &d,
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json.get("not_retained").is_none(), "{json}");
    assert_eq!(stderr(&out), "");
}

/// Issue #54 item 3: an edited `./tiers.toml` beside the data directory was ignored without
/// a word on a restart without `--tiers` (`info` kept `2d` while `tierdb tiers` showed
/// `12h`), and `tierdb tiers --data-dir DIR` was refused. Now a reader says what differs and
/// what applies it, a writing command applies what the files allow and refuses the rest with
/// each difference, and `tiers --data-dir` prints the stored tiers.
#[test]
fn an_edited_tiers_file_beside_the_directory_is_never_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let custom = dir.path().join("custom.toml");
    std::fs::write(&custom, CUSTOM_TIERS).unwrap();
    let now = chrono::Utc::now().timestamp();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, format!("cpu 1 {}\n", now - now % 10 - 60)).unwrap();
    let d = data(dir.path());
    let import = |extra: &[&str]| {
        let mut args = vec!["import", input.to_str().unwrap(), "--data-dir", &d];
        args.extend(extra);
        tierdb(&args)
    };
    let out = import(&["--tiers", custom.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stored_tiers = || {
        let out = tierdb(&["tiers", "--data-dir", &d]);
        assert!(out.status.success(), "{}", stderr(&out));
        (stdout(&out), stderr(&out))
    };
    let (printed, note) = stored_tiers();
    assert!(
        printed.contains("\n10s ") && printed.contains(" 1d "),
        "{printed}"
    );
    assert_eq!(note, "", "nothing beside the directory yet");

    // The file beside the data directory shortens a retention: a reader keeps the stored
    // tiers and says so; a writing command applies it.
    let beside = dir.path().join("tiers.toml");
    std::fs::write(
        &beside,
        CUSTOM_TIERS.replacen("retention = \"1d\"", "retention = \"12h\"", 1),
    )
    .unwrap();
    let change = r#"tier "10s" retention: 1d in the directory, 12h given"#;
    let out = tierdb(&["info", "--data-dir", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_stderr_has(&out, change);
    assert_stderr_has(
        &out,
        "a command that writes applies them (`tierdb serve --data-dir",
    );
    let (printed, note) = stored_tiers();
    assert!(printed.contains(" 1d "), "{printed}");
    assert!(note.contains(change), "{note}");
    let out = import(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_stderr_has(&out, "differs from the tiers stored in");
    let (printed, note) = stored_tiers();
    assert!(
        printed.contains(" 12h ") && !printed.contains(" 1d "),
        "{printed}"
    );
    assert_eq!(note, "", "applied: the file and the directory agree");

    // A change the files cannot take is refused by a writer, each difference named, and a
    // reader says it cannot be applied.
    std::fs::write(
        &beside,
        CUSTOM_TIERS.replacen("resolution = \"10s\"", "resolution = \"20s\"", 1),
    )
    .unwrap();
    let out = import(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_stderr_has(
        &out,
        r#"tier "10s" resolution: 10s in the directory, 20s given"#,
    );
    assert_stderr_has(&out, "start a new --data-dir");
    // Refused as the file it is, with the directory's own command, and never announced as
    // applied first.
    assert_stderr_has(&out, &format!("and {} differs from them", beside.display()));
    assert_stderr_has(&out, &format!("`tierdb tiers --data-dir {d}` prints them"));
    assert!(!stderr(&out).contains("applying it"), "{}", stderr(&out));
    let out = tierdb(&["info", "--data-dir", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_stderr_has(&out, "cannot be applied");
    let (printed, _) = stored_tiers();
    assert!(printed.contains(" 12h "), "nothing changed: {printed}");

    // A changed period is taken by a writer, as a package upgrade's tiers.toml with shorter
    // periods must be: the directory records the old period for the files it has.
    std::fs::write(
        &beside,
        CUSTOM_TIERS.replacen("period = \"1h\"", "period = \"2h\"", 1),
    )
    .unwrap();
    let out = import(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stored = std::fs::read_to_string(Path::new(&d).join("tiers.toml")).unwrap();
    assert!(
        stored.contains("period = \"2h\"") && stored.contains("earlier_periods = [{ until = "),
        "{stored}"
    );
    let out = tierdb(&["info", "--data-dir", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Issue #54 item 3, at creation: a new data directory beside a `tiers.toml` was created
/// with `./tiers.toml` of the working directory (or the default), the file beside it left
/// unread; every later open then compared that file with the stored tiers and refused it,
/// and "start a new --data-dir" made the same directory again. A new directory takes the
/// file beside it, as every later open reads it.
#[test]
fn a_new_directory_takes_the_tiers_file_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tiers.toml"), CUSTOM_TIERS).unwrap();
    let now = chrono::Utc::now().timestamp();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, format!("cpu 1 {}\n", now - now % 10 - 60)).unwrap();
    let d = data(dir.path());
    let import = || tierdb(&["import", input.to_str().unwrap(), "--data-dir", &d]);
    let out = import();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = tierdb(&["tiers", "--data-dir", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = stdout(&out);
    assert!(
        printed.contains("\n10s ") && !printed.contains("\n1m "),
        "created with the file beside it: {printed}"
    );
    assert_eq!(stderr(&out), "", "the file and the directory agree");
    let out = import();
    assert!(out.status.success(), "a second run: {}", stderr(&out));
    // `lookup` takes --data-dir too, as the README says every such subcommand does: where a
    // sample lands by the directory's tiers.
    let out = tierdb(&["lookup", "now", "--data-dir", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("10s "), "{}", stdout(&out));
}

/// Issue #54 item 1, through the command line: a `[counters]` rule added to the tiers of an
/// existing directory changes no stored minute, and the writing command says in plain words
/// (not a Rust debug print) which existing series it leaves as they were.
#[test]
fn a_new_counters_rule_names_the_series_it_leaves_alone() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp();
    let t = now - now % 3600 - 3600;
    let lines: String = (0..30)
        .map(|i| format!("servers.web2.nginx.requests {} {}\n", 6 + i % 3, t + i * 10))
        .collect();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, lines).unwrap();
    let d = data(dir.path());
    let out = tierdb(&["import", input.to_str().unwrap(), "--data-dir", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (from, to) = (t.to_string(), (t + 300).to_string());
    let per_sec = || {
        let out = tierdb(&[
            "query",
            "servers.web2.nginx.requests",
            "--tier",
            "1m",
            "--from",
            &from,
            "--to",
            &to,
            "--display",
            "per_sec",
            "--format",
            "csv",
            "--data-dir",
            &d,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let before = per_sec();
    assert!(before.contains(",0.7\n"), "{before}");
    let rules = dir.path().join("rules.toml");
    let shipped = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tiers.toml"));
    std::fs::write(
        &rules,
        shipped
            .unwrap()
            .replacen("names = []", "names = [\"*.nginx.requests\"]", 1),
    )
    .unwrap();
    let other = dir.path().join("other.txt");
    std::fs::write(&other, format!("servers.web3.load 5 {}\n", t + 600)).unwrap();
    let out = tierdb(&[
        "import",
        other.to_str().unwrap(),
        "--data-dir",
        &d,
        "--tiers",
        rules.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(r#"the [counters] rules changed (names [] before, ["*.nginx.requests"] now)"#),
        "{err}"
    );
    assert!(
        err.contains("1 existing series keep the kind they were created with, which the new rules would have changed: servers.web2.nginx.requests (a gauge; the new rules would make it a counter)"),
        "{err}"
    );
    assert!(!err.contains("SeriesRules"), "a debug print: {err}");
    assert_eq!(per_sec(), before);
}

/// Issue #54 item 2: a second `tierdb demo` into the same `--data-dir` wrote its three days of
/// backfill again: `aggregate http.requests --display per_sec` went from 875.80 to 1751.60,
/// while averages did not move. The agent now resumes after the last sample the directory
/// holds: the stored minutes read the same after a second run, and the minutes the demo was
/// stopped for are filled once.
#[test]
fn a_second_demo_run_adds_only_what_is_new() {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use tierdb::cli::demo;
    use tierdb::{AggregateQuery, Aggregation, Display, Engine, ManualClock, Selector};

    let dir = tempfile::tempdir().unwrap();
    let now = 1_763_726_400 + 25; // Mid-minute, off the agent's 10 s grid.
    let clock = Arc::new(ManualClock::new(now));
    let run = || {
        let engine = Arc::new(
            Engine::builder(dir.path())
                .clock(clock.clone())
                .writer_threads(2)
                .background_maintenance(false)
                .open()
                .unwrap(),
        );
        let (stop, agent) = demo::start(&engine, 3).unwrap();
        stop.store(true, Ordering::Relaxed);
        agent.join().unwrap();
        Arc::into_inner(engine).unwrap().close().unwrap();
    };
    let read = |to: i64, tier: &str| {
        let engine = (Engine::builder(dir.path()).clock(clock.clone()))
            .read_only()
            .open()
            .unwrap();
        let query = AggregateQuery::new(
            Selector::new("http.requests"),
            Aggregation::Sum,
            now - DAY,
            to,
        )
        .tier(tier)
        .display(Display::PerSec);
        engine.aggregate(&query).unwrap().groups[0].points.clone()
    };
    run();
    // Every minute that ended before now: the live agent's first sample lands in the last.
    let ended = now - now % 60;
    let first = read(ended, "1m");
    let empty: Vec<_> = first.iter().filter(|(_, v)| v.is_none()).collect();
    assert!(
        empty.is_empty(),
        "a full backfill: {} empty of {}, first {:?}, from {}",
        empty.len(),
        first.len(),
        empty.first(),
        now - DAY
    );
    let hours = read(ended - ended % 3600, "1h");
    // Stopped for an hour and a half, then run again on the same directory.
    clock.advance(5400);
    run();
    let again = read(ended, "1m");
    let changed = (first.iter().zip(&again)).filter(|(a, b)| a != b).count();
    assert_eq!(
        changed,
        0,
        "minutes written twice, first {:?}",
        first.iter().zip(&again).find(|(a, b)| a != b)
    );
    assert!(
        read(ended - ended % 3600, "1h") == hours,
        "hours written twice"
    );
    let later = now + 5400;
    let filled = read(later - later % 60, "1m");
    assert!(
        filled.iter().all(|(_, v)| v.is_some()),
        "the stopped minutes are filled"
    );
    // Each of them holds its six samples once: the rate of a full minute is the sum of the
    // hosts' requests over it, over 60 s, never twice that.
    let gap = &filled[filled.len() - 60..];
    let ts = gap[0].0;
    let want: f64 = (0..6)
        .flat_map(|i| (0..4).map(move |h| demo::value("http.requests", h, ts + i * 10)))
        .sum::<f64>()
        / 60.0;
    assert!(
        (gap[0].1.unwrap() - want).abs() < 1e-9,
        "{:?} against {want}",
        gap[0]
    );
}

/// `--display pNN` on query and aggregate reads distribution series (as StatsD timers are):
/// a table with the error bound, CSV, and the HTTP API's JSON; `hist` only as JSON.
#[test]
fn query_and_aggregate_show_percentiles_of_distributions() {
    use tierdb::{Engine, Sample, SeriesKind};
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp();
    let minute = now - now % 60 - 600;
    {
        let engine = Engine::open(dir.path().join("data")).unwrap();
        let mut samples = Vec::new();
        for (h, host) in ["a", "b"].iter().enumerate() {
            let id = engine.series(&format!("req.time{{host={host}}}")).unwrap();
            engine.declare_kind(id, SeriesKind::Distribution).unwrap();
            // host a: 1..=100 ms in the minute, host b: 101..=200.
            for v in 1..=100 {
                let value = f64::from(v + 100 * h as u32);
                samples.push(Sample::new(id, minute + i64::from(v % 60), value));
            }
        }
        let report = engine.record_batch(&samples).unwrap();
        assert_eq!(report.rejected_total(), 0, "{report:?}");
        engine.close().unwrap();
    }
    let d = data(dir.path());
    let (from, to) = (minute.to_string(), (minute + 60).to_string());
    let window = [
        "--tier",
        "1m",
        "--from",
        &from,
        "--to",
        &to,
        "--data-dir",
        &d,
    ];
    let run = |head: &[&str], tail: &[&str]| {
        let mut args = head.to_vec();
        args.extend(window);
        args.extend(tail);
        let out = tierdb(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let within = |got: f64, want: f64| (got - want).abs() / want <= 0.0055;

    let table = run(&["query", "req.time{host=a}", "--display", "p90"], &[]);
    assert!(
        table.contains("p90") && table.contains("within 0.5"),
        "{table}"
    );
    let csv = run(
        &["query", "req.time{host=a}", "--display", "p90"],
        &["--format", "csv"],
    );
    let row = csv.lines().nth(1).expect("one point");
    let value: f64 = row.split(',').nth(1).unwrap().parse().unwrap();
    assert!(within(value, 90.0), "{csv}");

    let json = run(
        &["query", "req.time{host=a}", "--display", "p50"],
        &["--format", "json"],
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["series"], "req.time{host=a}", "{json}");
    assert!(
        within(json["points"][0][1].as_f64().unwrap(), 50.0),
        "{json}"
    );

    // Merged over both hosts: the p99 of 1..=200 is 198; per host, 99 and 199.
    let all = run(
        &["aggregate", "req.time", "--display", "p99"],
        &["--format", "csv"],
    );
    let value: f64 = all
        .lines()
        .nth(1)
        .unwrap()
        .rsplit(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(within(value, 198.0), "{all}");
    let per_host = run(
        &[
            "aggregate",
            "req.time",
            "--group-by",
            "host",
            "--display",
            "p99",
        ],
        &[],
    );
    assert!(
        per_host.contains("{host=a}") && per_host.contains("{host=b}"),
        "{per_host}"
    );

    let hist = run(
        &["query", "req.time{host=b}", "--display", "hist"],
        &["--format", "json"],
    );
    let hist: serde_json::Value = serde_json::from_str(&hist).unwrap();
    assert_eq!(hist["histograms"][0][1]["count"], 100, "{hist}");
    let mut args = vec!["query", "req.time{host=b}", "--display", "hist"];
    args.extend(window);
    let out = tierdb(&args);
    assert!(!out.status.success());
    assert_stderr_has(&out, "--format json");
    let mut args = vec!["query", "req.time{host=b}", "--display", "p101"];
    args.extend(window);
    assert_stderr_has(&tierdb(&args), "distribution display");
}
