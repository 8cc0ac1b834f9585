//! `tierdb serve` as a process: addresses printed at start and written into the data
//! directory, a second server on the same data directory refused with the holder named,
//! `import` pointed at the server's real addresses, SIGTERM draining what was received before
//! a clean exit, and a busy port failing before anything is created.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use crate::support::http;
use crate::support::process::{tierdb_command, Addrs, Proc};

/// How long `tierdb serve` may take to exit after SIGTERM. What bounds a stop: the wait for
/// open connections (`tierdb::server::SHUTDOWN_GRACE`, 15 s, reached only by a connection
/// that stays open; these tests close theirs), the background maintenance and chunk creator
/// passes stopping at their next file (a pass at nice 19 is not waited for whole), and the
/// final flush. The rest of the 30 s is room for a loaded machine.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// `tierdb serve` on `tmp`/data, its stderr in `tmp`/`log`, once it is ready.
fn serve(tmp: &Path, log: &str) -> (Proc, Addrs) {
    let mut server = Proc::tierdb("serve", &tmp.join("data"), tmp.join(log));
    let addrs = server.wait_ready();
    (server, addrs)
}

/// The body of `GET path`, whatever the status.
fn get(addr: std::net::SocketAddr, path: &str) -> String {
    http::request(addr, "GET", path, &[], b"").1
}

#[test]
fn sigterm_drains_and_exits_cleanly_and_a_second_server_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (mut server, addrs) = serve(tmp.path(), "first.stderr");

    // A second server, or a demo, on the held directory is refused before any of its
    // listeners announces itself (#31 item 12): nothing on stdout a script could take for
    // a server.
    for subcommand in ["serve", "demo"] {
        let second = tierdb_command(subcommand, &data).output().unwrap();
        assert!(!second.status.success());
        let stderr = String::from_utf8_lossy(&second.stderr);
        assert!(
            stderr.contains("in use by another tierdb process")
                && stderr.contains(&format!("pid {}", server.id())),
            "{subcommand}: {stderr}"
        );
        let stdout = String::from_utf8_lossy(&second.stdout);
        assert!(!stdout.contains("listening"), "{subcommand}: {stdout}");
    }

    // A second server on the same ports fails to bind, before the lock could name the
    // holder: the refusal names it from the SERVER file.
    let same_ports = std::process::Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(["serve", "--http", &addrs.http.to_string()])
        .args(["--graphite", &addrs.graphite_tcp.to_string(), "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!same_ports.status.success());
    let stderr = String::from_utf8_lossy(&same_ports.stderr);
    assert!(
        stderr.contains(&format!("is already served by pid {}", server.id())),
        "{stderr}"
    );

    // The server's addresses are in the directory, and `import` points at them (issue #15:
    // it said `nc 127.0.0.1 2003` whatever the server listened on).
    let announced = std::fs::read_to_string(data.join("SERVER")).unwrap();
    assert!(
        announced.contains(&format!("http {}\n", addrs.http))
            && announced.contains(&format!("graphite {}\n", addrs.graphite_tcp)),
        "{announced}"
    );
    let input = tmp.path().join("in.txt");
    std::fs::write(&input, "a.b 1 -1\n").unwrap();
    let import = std::process::Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(["import", input.to_str().unwrap(), "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(import.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&import.stderr);
    let graphite = addrs.graphite_tcp;
    assert!(
        stderr.contains(&format!("`nc {} {} < ", graphite.ip(), graphite.port()))
            && stderr.contains(&format!("http://{}/write", addrs.http)),
        "{stderr}"
    );

    let now = chrono::Utc::now().timestamp();
    let minute = now - now % 60 - 60;
    let mut stream = TcpStream::connect(addrs.graphite_tcp).unwrap();
    for i in 0..1000 {
        writeln!(stream, "drain.test {i} {minute}").unwrap();
    }
    stream.flush().unwrap();
    // Wait until the server has read the stream (accepted or still batching), then stop it.
    for _ in 0..200 {
        if get(addrs.http, "/api/v1/series").contains("drain.test") {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    drop(stream);
    let status = server.terminate(STOP_TIMEOUT);
    assert!(status.success(), "exit status {status}");
    assert!(
        !data.join("SERVER").exists(),
        "a clean stop removes the address file"
    );

    // Everything sent is there after a restart.
    let (mut server, addrs) = serve(tmp.path(), "second.stderr");
    let answer = get(
        addrs.http,
        &format!(
            "/api/v1/query?series=drain.test&tier=1m&from={minute}&to={}&display=count",
            minute + 60
        ),
    );
    assert!(answer.contains(&format!("[[{minute},1000.0]]")), "{answer}");
    assert!(server.terminate(STOP_TIMEOUT).success());
}

/// Issue #31 item 10: in a full `cargo test --release` on a busy machine the second server of
/// the test above did not exit cleanly after its SIGTERM. The cause: `tierdb: ready` was
/// printed before the SIGTERM handler was installed (it was installed when the server's
/// future first ran), so a SIGTERM soon after `ready` killed the process by the signal, its
/// last writes not flushed; a SIGTERM sent as soon as `ready` was read did so 12 times in
/// 20. The handler is installed before `ready` now. Each stop here must be clean.
#[test]
fn a_sigterm_as_soon_as_ready_is_a_clean_stop() {
    let tmp = tempfile::tempdir().unwrap();
    for round in 0..5 {
        let mut server = Proc::tierdb("serve", &tmp.path().join("data"), tmp.path().join("log"));
        server.wait_ready();
        let status = server.terminate(STOP_TIMEOUT);
        assert!(
            status.success(),
            "round {round}: exit status {status}\n{}",
            server.diagnostics()
        );
    }
}

/// Issue #15: `serve` on a busy port left a data directory of preallocated files behind. The
/// listeners are bound first now, so nothing is created.
#[test]
fn a_busy_port_leaves_no_data_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(["serve", "--graphite", "127.0.0.1:0", "--http"])
        .arg(busy.local_addr().unwrap().to_string())
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&busy.local_addr().unwrap().to_string()),
        "{stderr}"
    );
    assert!(
        !data.exists(),
        "serve created {} before binding",
        data.display()
    );
}

#[test]
fn a_taken_port_is_refused_naming_the_flag_and_port_0() {
    // #31: the error named the address only.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args([
            "serve",
            "--http",
            &addr,
            "--graphite",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .env_remove("TIERDB_DATA_DIR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("--http: listen address {addr}"))
            && stderr.contains("port 0 for any free one (--http 127.0.0.1:0"),
        "{stderr}"
    );
}

/// The value of the sample `name` (a whole name, labels included) in `/metrics` text.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Issue 56 item 10: `/metrics` had no `process_*` figures and no build, and a SIGTERM ended
/// the server without a word. The figures are this server process's own (it runs as a
/// child here), under the names Prometheus client libraries give them.
#[test]
fn metrics_show_the_process_and_its_build_and_a_stop_says_when_it_began_and_ended() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut server, addrs) = serve(tmp.path(), "serve.stderr");
    let metrics = get(addrs.http, "/metrics");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        sample(
            &metrics,
            &format!("tierdb_build_info{{version=\"{version}\"}}")
        ),
        1.0
    );
    let now = chrono::Utc::now().timestamp() as f64;
    let started = sample(&metrics, "process_start_time_seconds");
    assert!(
        (now - 600.0..=now + 5.0).contains(&started),
        "started at {started}, now {now}"
    );
    assert!(sample(&metrics, "process_resident_memory_bytes") > 1e6);
    assert!(sample(&metrics, "process_virtual_memory_bytes") > 1e6);
    assert!(sample(&metrics, "process_cpu_seconds_total") >= 0.0);
    let (open, max) = (
        sample(&metrics, "process_open_fds"),
        sample(&metrics, "process_max_fds"),
    );
    assert!(open >= 5.0 && open < max, "{open} open of {max}");
    for family in [
        "process_cpu_seconds_total counter",
        "tierdb_build_info gauge",
    ] {
        assert!(metrics.contains(&format!("# TYPE {family}\n")), "{family}");
    }

    let status = server.terminate(STOP_TIMEOUT);
    assert!(status.success(), "exit status {status}");
    let deadline = std::time::Instant::now() + STOP_TIMEOUT;
    let stopping = server.next_line(deadline, "the stop's first line");
    assert!(
        stopping.starts_with("tierdb: SIGTERM: stopping"),
        "{stopping}"
    );
    let stopped = server.next_line(deadline, "the stop's last line");
    assert!(stopped.starts_with("tierdb: stopped ("), "{stopped}");
}
