//! The guides in docs/ run as written (#31 item 11): the systemd unit passes
//! `systemd-analyze verify` and its `ExecStart` serves and stops cleanly; the storage-schemas
//! example's command prints the tiers.toml the guide shows; a stopped server's directory
//! copied with `cp -a` serves every sample from the copy.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::http::{percent_encode, request};
use crate::support::process::{run_tierdb, Proc};

/// How long a stop may take (see serve_binary's STOP_TIMEOUT for what bounds it).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

fn doc(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The unit's `ExecStart` words: the program and its arguments.
fn exec_start(unit: &str) -> Vec<String> {
    let line = unit
        .lines()
        .find_map(|line| line.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart");
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_systemd_unit_verifies_and_its_exec_start_serves_and_stops_cleanly() {
    let unit = doc("docs/systemd/tierdb.service");
    let words = exec_start(&unit);
    assert_eq!(words[0], "/usr/bin/tierdb");
    let tierdb = env!("CARGO_BIN_EXE_tierdb");
    let work = tempfile::tempdir().unwrap();

    // systemd's own check, on the unit with the program at the path of this build (verify
    // refuses a program that is not there). Any message is a finding: verify exits 0 on an
    // unknown key or a bad value, and only says so.
    let analyze = Path::new("/usr/bin/systemd-analyze");
    if analyze.exists() {
        let copy = work.path().join("tierdb.service");
        std::fs::write(&copy, unit.replace("/usr/bin/tierdb", tierdb)).unwrap();
        let out = Command::new(analyze)
            .arg("verify")
            .arg(&copy)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && said.trim().is_empty(), "{said}");
    } else {
        eprintln!("systemd-analyze not found: checking the ExecStart line only");
    }

    // The command line itself, with the data directory and the ports moved to the test's, and
    // the tiers the package installs as /etc/tierdb/tiers.toml (tests/it/deb.rs runs the
    // installed one).
    let mut args = words[1..].to_vec();
    for (flag, value) in [
        (
            "--data-dir",
            work.path().join("data").to_string_lossy().into_owned(),
        ),
        (
            "--tiers",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tiers.toml")
                .to_string_lossy()
                .into_owned(),
        ),
        ("--http", "127.0.0.1:0".to_owned()),
        ("--graphite", "127.0.0.1:0".to_owned()),
    ] {
        let at = args.iter().position(|a| a == flag).expect(flag);
        args[at + 1] = value;
    }
    let log = work.path().join("serve.log");
    let mut command = Command::new(tierdb);
    command
        .args(&args)
        .env_remove("TIERDB_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut server = Proc::spawn("the unit's ExecStart", &mut command, vec![log], false);
    server.wait_ready();
    let status = server.terminate(STOP_TIMEOUT);
    assert!(
        status.success(),
        "a SIGTERM (KillSignal) stops it cleanly: {status}"
    );
}

/// The fenced block after the marker `<!-- what -->` in `text`.
fn block_after(text: &str, what: &str) -> String {
    let marker = format!("<!-- {what} -->");
    let rest = &text[text.find(&marker).unwrap_or_else(|| panic!("no {marker}"))..];
    let open = rest.find("```").unwrap();
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_owned()
}

#[test]
fn the_storage_schemas_example_prints_the_tiers_toml_the_guide_shows() {
    let guide = doc("docs/carbon-schemas.md");
    let work = tempfile::tempdir().unwrap();
    for name in ["storage-schemas.conf", "storage-aggregation.conf"] {
        std::fs::write(
            work.path().join(name),
            block_after(&guide, &format!("file: {name}")),
        )
        .unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .current_dir(work.path())
        .args(["tiers", "--from-storage-schemas", "storage-schemas.conf"])
        .args(["--aggregation", "storage-aggregation.conf"])
        .env_remove("TIERDB_TIERS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(printed, block_after(&guide, "output: tiers.toml"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("keep different archives"));

    // The file is a tiers.toml tierdb takes.
    let tiers = work.path().join("tiers.toml");
    std::fs::write(&tiers, printed).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(["tiers", "--tiers"])
        .arg(&tiers)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    for row in [
        "1m               1m       1d        90d",
        "1h               1h      73d       365d",
    ] {
        assert!(table.contains(row), "{table}");
    }
}

/// `tierdb serve` on `data`, ready.
fn serve(data: &Path, log: PathBuf) -> (Proc, crate::support::process::Addrs) {
    let mut server = Proc::tierdb("serve", data, log);
    let addrs = server.wait_ready();
    (server, addrs)
}

#[test]
fn a_stopped_servers_directory_copied_with_cp_serves_every_sample_from_the_copy() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let (mut server, addrs) = serve(&data, work.path().join("first.log"));
    let now = chrono::Utc::now().timestamp();
    let minute = now - now % 60 - 600;
    let mut stream = TcpStream::connect(addrs.graphite_tcp).unwrap();
    for host in 0..20 {
        for i in 0..10 {
            writeln!(stream, "backup.host{host}.load {i} {}", minute + i * 60).unwrap();
        }
    }
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(60);
    while request(addrs.http, "GET", "/api/v1/series", &[], b"")
        .1
        .matches("backup.")
        .count()
        < 20
    {
        assert!(Instant::now() < deadline, "the samples never landed");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The guide: stop, copy, (start again).
    assert!(server.terminate(STOP_TIMEOUT).success());
    let copy = work.path().join("backup");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&data)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    std::fs::remove_dir_all(&data).unwrap();

    let (mut restored, addrs) = serve(&copy, work.path().join("restored.log"));
    let log = std::fs::read_to_string(work.path().join("restored.log")).unwrap();
    assert!(
        !log.contains("did not close this data directory cleanly"),
        "{log}"
    );
    for host in 0..20 {
        let series = percent_encode(&format!("backup.host{host}.load"));
        let path = format!(
            "/api/v1/query?series={series}&tier=1m&from={minute}&to={}&display=total",
            minute + 600
        );
        let (status, body) = request(addrs.http, "GET", &path, &[], b"");
        assert_eq!(status, 200, "{body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        let points: Vec<f64> = answer["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[1].as_f64().unwrap_or(f64::NAN))
            .collect();
        assert_eq!(points, (0..10).map(f64::from).collect::<Vec<_>>(), "{body}");
    }
    assert!(restored.terminate(STOP_TIMEOUT).success());
    let listed = run_tierdb(&["series"], &copy);
    assert_eq!(String::from_utf8_lossy(&listed.stdout).lines().count(), 20);
}
