//! Child processes for the end-to-end tests: [`Proc`] spawns one with its log files, reads its
//! stdout on a thread, parses what `tierdb serve` and `tierdb demo` announce, stops it
//! gracefully on request and kills it (its process group too) on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, kill_process_group, Pid, Signal};

use super::file;

/// How long `tierdb serve` or `tierdb demo` (which backfills first) may take to print
/// `tierdb: ready`.
pub(crate) const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The addresses `tierdb serve` and `tierdb demo` announce on stdout.
#[derive(Debug)]
pub(crate) struct Addrs {
    pub http: SocketAddr,
    pub graphite_tcp: SocketAddr,
    pub graphite_udp: SocketAddr,
    /// The StatsD address, when started with `--statsd`.
    pub statsd: Option<SocketAddr>,
    /// The dashboard's URL (`http://127.0.0.1:PORT/`), when printed.
    pub dashboard: Option<String>,
}

/// Checks that the programs at `paths` exist for an end-to-end test of `what`. `cargo test`
/// installs nothing (the test command, `scripts/test.sh`, installs them first), so a missing
/// one fails the test with the way to install it, unless `TIERDB_SKIP_E2E=1` says to skip
/// the test: then this says so and returns false. CI cannot pass without running it.
pub(crate) fn ensure_programs(paths: &[&Path], what: &str) -> bool {
    let Some(path) = paths.iter().find(|path| !path.exists()) else {
        return true;
    };
    if std::env::var("TIERDB_SKIP_E2E").as_deref() == Ok("1") {
        eprintln!(
            "{what} e2e test skipped: TIERDB_SKIP_E2E=1 and {} is missing",
            path.display()
        );
        return false;
    }
    panic!(
        "{}, or set TIERDB_SKIP_E2E=1 to skip the collectd, Prometheus, graphite-web and \
         Chromium tests",
        missing_program(path, what)
    );
}

/// The failure of a test whose program is missing: what is missing and how to install it.
pub(crate) fn missing_program(path: &Path, what: &str) -> String {
    format!(
        "{} not found: this end-to-end test needs {what}. Run the tests with `scripts/test.sh`, \
         or install the test programs once with `bash scripts/install-test-deps.sh` (as root or \
         with sudo)",
        path.display()
    )
}

/// The command line of `tierdb <subcommand>` (`serve` or `demo`) on `data_dir`, listening on
/// ephemeral loopback ports.
pub(crate) fn tierdb_command(subcommand: &str, data_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tierdb"));
    command
        .arg(subcommand)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--http", "127.0.0.1:0", "--graphite", "127.0.0.1:0"]);
    command
}

/// Runs `tierdb <args> --data-dir <data_dir>` to its end, without the environment's
/// `TIERDB_DATA_DIR` and `TIERDB_TIERS`.
pub(crate) fn run_tierdb(args: &[&str], data_dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("TIERDB_DATA_DIR")
        .env_remove("TIERDB_TIERS")
        .output()
        .expect("run tierdb")
}

/// [`run_tierdb`], which must succeed; returns its stdout.
pub(crate) fn tierdb_ok(args: &[&str], data_dir: &Path) -> String {
    let out = run_tierdb(args, data_dir);
    assert!(
        out.status.success(),
        "tierdb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A child process killed (SIGKILL) and reaped on drop, its whole process group with it when
/// it leads one, so a failing test leaves nothing running; [`Proc::terminate`] is the
/// graceful way.
pub(crate) struct Proc {
    name: String,
    child: Child,
    /// The child leads a process group of its own (its pid is the group's id).
    group: bool,
    /// Files with the child's diagnostics.
    logs: Vec<PathBuf>,
    /// Lines the child printed on stdout, when piped.
    stdout: Option<mpsc::Receiver<String>>,
    /// The stdout lines read so far.
    seen: Vec<String>,
    /// The child was waited for (its pid may be reused from then on).
    reaped: bool,
}

impl Proc {
    /// Spawns `command` (in a process group of its own when `group`); `logs` are the files
    /// [`Proc::diagnostics`] shows. A piped stdout is drained on a thread for as long as the
    /// child runs, so it never blocks on a full pipe.
    pub(crate) fn spawn(
        name: &str,
        command: &mut Command,
        logs: Vec<PathBuf>,
        group: bool,
    ) -> Proc {
        if group {
            command.process_group(0);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let stdout = child.stdout.take().map(|out| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    let _ = tx.send(line);
                }
            });
            rx
        });
        Proc {
            name: name.to_string(),
            child,
            group,
            logs,
            stdout,
            seen: Vec::new(),
            reaped: false,
        }
    }

    /// `tierdb <subcommand>` (`serve` or `demo`) on `data_dir` and ephemeral loopback ports,
    /// stdout piped for [`Proc::wait_ready`], stderr into `log`.
    pub(crate) fn tierdb(subcommand: &str, data_dir: &Path, log: PathBuf) -> Proc {
        Proc::spawn(
            &format!("tierdb {subcommand}"),
            tierdb_command(subcommand, data_dir)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(file(&log)),
            vec![log],
            false,
        )
    }

    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// The stdout lines read so far ([`Proc::next_line`], [`Proc::wait_ready`]).
    pub(crate) fn seen(&self) -> &[String] {
        &self.seen
    }

    /// The next stdout line, or a panic past `deadline`.
    pub(crate) fn next_line(&mut self, deadline: Instant, waiting_for: &str) -> String {
        let left = deadline.saturating_duration_since(Instant::now());
        let rx = self.stdout.as_ref().expect("stdout piped");
        match rx.recv_timeout(left) {
            Ok(line) => {
                self.seen.push(line.clone());
                line
            }
            Err(e) => panic!(
                "{}: no {waiting_for} ({e:?})\n{}",
                self.name,
                self.diagnostics()
            ),
        }
    }

    /// Reads stdout until `tierdb: ready` (at most [`STARTUP_TIMEOUT`]), taking the addresses
    /// announced before it.
    pub(crate) fn wait_ready(&mut self) -> Addrs {
        self.wait_ready_within(STARTUP_TIMEOUT)
    }

    /// [`Proc::wait_ready`], waiting at most `timeout`.
    pub(crate) fn wait_ready_within(&mut self, timeout: Duration) -> Addrs {
        let deadline = Instant::now() + timeout;
        let (mut http, mut tcp, mut udp, mut dashboard) = (None, None, None, None);
        let mut statsd = None;
        loop {
            let line = self.next_line(deadline, "`tierdb: ready`");
            let addr = |prefix: &str| {
                line.strip_prefix(prefix).map(|a| {
                    a.trim()
                        .parse::<SocketAddr>()
                        .unwrap_or_else(|e| panic!("{line:?}: bad address: {e}"))
                })
            };
            if let Some(a) =
                addr("tierdb: http listening on ").or_else(|| addr("tierdb: https listening on "))
            {
                http = Some(a);
            } else if let Some(a) = addr("tierdb: graphite tcp listening on ") {
                tcp = Some(a);
            } else if let Some(a) = addr("tierdb: graphite udp listening on ") {
                udp = Some(a);
            } else if let Some(a) = addr("tierdb: statsd udp listening on ") {
                statsd = Some(a);
            } else if let Some(url) = line.strip_prefix("tierdb: dashboard at ") {
                let url = url.trim();
                assert!(
                    (url.starts_with("http://127.0.0.1:") || url.starts_with("https://127.0.0.1:"))
                        && url.ends_with('/'),
                    "{line:?}: not a local page address"
                );
                dashboard = Some(url.to_string());
            } else if line.trim() == "tierdb: ready" {
                let missing = |what: &str| -> SocketAddr {
                    panic!(
                        "`tierdb: ready` before the {what} address; stdout: {:?}",
                        self.seen
                    )
                };
                return Addrs {
                    http: http.unwrap_or_else(|| missing("http")),
                    graphite_tcp: tcp.unwrap_or_else(|| missing("graphite tcp")),
                    graphite_udp: udp.unwrap_or_else(|| missing("graphite udp")),
                    statsd,
                    dashboard,
                };
            }
        }
    }

    /// Panics (with the diagnostics) if the child has exited.
    pub(crate) fn assert_running(&mut self) {
        if let Some(status) = self.try_wait() {
            panic!(
                "{} exited early with {status}\n{}",
                self.name,
                self.diagnostics()
            );
        }
    }

    /// Sends `signal` to the child, or to its group when it leads one.
    pub(crate) fn signal(&self, signal: Signal) {
        let pid = Pid::from_child(&self.child);
        let sent = if self.group {
            kill_process_group(pid, signal)
        } else {
            kill_process(pid, signal)
        };
        // ESRCH: already gone (a group whose members all exited).
        if let Err(e) = sent {
            if e != rustix::io::Errno::SRCH {
                panic!("signal {signal:?} to {} ({pid:?}): {e}", self.name);
            }
        }
    }

    /// Waits for the child without blocking: its exit status once it exited. What is left of
    /// its group is killed then (the group's id cannot be reused while a member lives).
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        let status = self.child.try_wait().expect("try_wait")?;
        if !self.reaped {
            self.reaped = true;
            self.kill_group();
        }
        Some(status)
    }

    fn kill_group(&self) {
        if self.group {
            let _ = kill_process_group(Pid::from_child(&self.child), Signal::KILL);
        }
    }

    /// SIGTERM, then waits up to `timeout` for the exit (SIGKILL, on drop, and a panic past
    /// it).
    pub(crate) fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(status) = self.try_wait() {
            return status;
        }
        self.signal(Signal::TERM);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "{} still running {timeout:?} after SIGTERM\n{}",
                    self.name,
                    self.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The child's stdout so far (when piped) and its logs, for failure messages.
    pub(crate) fn diagnostics(&self) -> String {
        let mut out = String::new();
        if self.stdout.is_some() {
            out.push_str(&format!("--- {}: stdout ---\n", self.name));
            for line in &self.seen {
                out.push_str(line);
                out.push('\n');
            }
        }
        for path in &self.logs {
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({e})\n"));
            out.push_str(&format!(
                "--- {}: {} ---\n{text}",
                self.name,
                path.display()
            ));
        }
        out
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        // The group first, while its leader is not reaped: Chromium's processes outlive a
        // killed chromedriver otherwise.
        self.kill_group();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the test `test` of this test binary alone in a child process, with `env` set (its
/// data directory, a fault hook), and checks that the child killed itself with SIGKILL, as
/// the crash tests' fault hooks do at the step they name.
pub(crate) fn run_child_until_it_kills_itself(test: &str, env: &[(&str, &std::ffi::OsStr)]) {
    use std::os::unix::process::ExitStatusExt;
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let status = command.status().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the child {test} should have killed itself: {status:?}"
    );
}
