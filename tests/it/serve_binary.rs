//! `tierdb serve` as a process: addresses printed at start, a second server on the same data
//! directory refused with the holder named, and SIGTERM draining what was received before a
//! clean exit.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `tierdb serve`, killed on drop if the test did not stop it.
pub struct Serve {
    pub child: Child,
    pub http: SocketAddr,
    pub graphite: SocketAddr,
}

impl Serve {
    pub fn start(data_dir: &std::path::Path) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tierdb"))
            .args([
                "serve",
                "--http",
                "127.0.0.1:0",
                "--graphite",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tierdb serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut http, mut graphite) = (None, None);
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(addr) = line.strip_prefix("tierdb: http listening on ") {
                http = addr.parse().ok();
            } else if let Some(addr) = line.strip_prefix("tierdb: graphite tcp listening on ") {
                graphite = addr.parse().ok();
            } else if line == "tierdb: ready" {
                break;
            }
        }
        Serve {
            child,
            http: http.expect("http address printed"),
            graphite: graphite.expect("graphite address printed"),
        }
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("tierdb serve did not exit within 30 s of SIGTERM");
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn sigterm_drains_and_exits_cleanly_and_a_second_server_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Serve::start(dir.path());

    let second = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--graphite",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("in use by another tierdb process")
            && stderr.contains(&format!("pid {}", server.child.id())),
        "{stderr}"
    );

    let now = chrono::Utc::now().timestamp();
    let minute = now - now % 60 - 60;
    let mut stream = TcpStream::connect(server.graphite).unwrap();
    for i in 0..1000 {
        writeln!(stream, "drain.test {i} {minute}").unwrap();
    }
    stream.flush().unwrap();
    // Wait until the server has read the stream (accepted or still batching), then stop it.
    for _ in 0..200 {
        if get(server.http, "/api/v1/series").contains("drain.test") {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    drop(stream);
    let status = server.terminate();
    assert!(status.success(), "exit status {status}");

    // Everything sent is there after a restart.
    let mut server = Serve::start(dir.path());
    let answer = get(
        server.http,
        &format!(
            "/api/v1/query?series=drain.test&tier=1m&from={minute}&to={}&display=count",
            minute + 60
        ),
    );
    assert!(answer.contains(&format!("[[{minute},1000.0]]")), "{answer}");
    assert!(server.terminate().success());
}
