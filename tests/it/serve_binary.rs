//! `tierdb serve` as a process: addresses printed at start, a second server on the same data
//! directory refused with the holder named, and SIGTERM draining what was received before a
//! clean exit.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use crate::support::http;
use crate::support::process::{tierdb_command, Addrs, Proc};

/// How long `tierdb serve` may take to exit after SIGTERM.
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

    let second = tierdb_command("serve", &data).output().unwrap();
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("in use by another tierdb process")
            && stderr.contains(&format!("pid {}", server.id())),
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
