//! A `tierdb serve` process for the server benchmarks: started on ephemeral loopback ports
//! over a data directory, stopped with SIGTERM on drop, read through plain HTTP/1.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};

/// A running `tierdb serve`.
pub(crate) struct Server {
    child: Child,
    /// The HTTP address.
    pub http: SocketAddr,
    /// The Graphite plaintext address (TCP).
    pub graphite: SocketAddr,
    /// The data directory, removed once the server has stopped.
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// Starts `tierdb serve` on a fresh data directory ([`super::support::bench_dir`]) and waits
/// for `tierdb: ready`.
pub(crate) fn start() -> Server {
    start_with(&[])
}

/// [`start`] with more flags.
pub(crate) fn start_with(args: &[&str]) -> Server {
    let dir = super::support::bench_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--graphite",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path())
        .args(args)
        .stdout(Stdio::piped())
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
    std::thread::spawn(move || for _ in lines {});
    Server {
        child,
        http: http.expect("http address"),
        graphite: graphite.expect("graphite address"),
        _dir: dir,
    }
}

/// `GET path` on a new connection; the body.
pub(crate) fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// The value of the unlabelled metric `name` in `/metrics` (0 when absent).
pub(crate) fn metric(server: &Server, name: &str) -> u64 {
    get(server.http, "/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
