//! Hostile writes against the real `tierdb serve` binary on loopback: a 60 MB JSON body,
//! valid or broken at its end.
//!
//! The bug: a JSON write was parsed whole into `Vec<serde_json::Value>` before any of it was
//! written, about 15 bytes of heap per byte of body (a 64 MiB body cost about 1 GB of RSS),
//! and a body broken anywhere landed nothing.

use std::time::Duration;

use crate::support::http;
use crate::support::process::Proc;
use crate::support::unix_now;

const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A process's peak resident set so far, bytes (`VmHWM` of `/proc/<pid>/status`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = (status.lines())
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap_or_else(|| panic!("no VmHWM in {status}"));
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// A JSON array of at least `bytes` bytes of samples over 100 series in the last hour.
/// Returns the body and its element count.
fn body_of(bytes: usize) -> (Vec<u8>, u64) {
    let now = unix_now();
    let mut body = Vec::with_capacity(bytes + 200);
    body.push(b'[');
    let mut n = 0u64;
    while body.len() < bytes {
        if n > 0 {
            body.push(b',');
        }
        let element = format!(
            r#"{{"series":"hostile.s{}","tags":{{"host":"h{}"}},"ts":{},"value":{}.5}}"#,
            n % 100,
            n % 7,
            now - 60 - (n % 3000) as i64,
            n % 1000
        );
        body.extend_from_slice(element.as_bytes());
        n += 1;
    }
    body.push(b']');
    (body, n)
}

fn accepted_total(addr: std::net::SocketAddr) -> u64 {
    let (status, metrics) = http::request(addr, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    let line = (metrics.lines())
        .find(|l| l.starts_with("tierdb_samples_accepted_total "))
        .unwrap_or_else(|| panic!("no accepted counter in {metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_60_mb_json_write_costs_a_fraction_of_its_size_and_a_broken_one_says_what_landed() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Proc::tierdb("serve", &tmp.path().join("data"), tmp.path().join("log"));
    let addrs = server.wait_ready();
    // Every series exists before the measurement, and the first request's one-time costs
    // are paid.
    let (warm, warm_n) = body_of(100_000);
    let (status, answer) = http::request(addrs.http, "POST", "/api/v1/write", &[], &warm);
    assert_eq!(status, 204, "{answer}");

    let (body, n) = body_of(60_000_000);
    let before = peak_rss(server.id());
    let (status, answer) = http::request(addrs.http, "POST", "/api/v1/write", &[], &body);
    assert_eq!(status, 204, "{answer}");
    let after = peak_rss(server.id());
    let grew = after.saturating_sub(before);
    eprintln!(
        "valid {} byte body: peak RSS {before} -> {after} bytes (+{grew}, {:.3}x the body)",
        body.len(),
        grew as f64 / body.len() as f64
    );
    assert!(
        grew <= 4 * body.len() as u64,
        "peak RSS grew by {grew} bytes for a {} byte body",
        body.len()
    );
    assert_eq!(accepted_total(addrs.http), warm_n + n);
    drop(body);

    // The same body cut inside its last element: everything before the cut lands, and the
    // answer says so.
    let (mut broken, n) = body_of(60_000_000);
    broken.truncate(broken.len() - 20);
    let before = peak_rss(server.id());
    let (status, answer) = http::request(addrs.http, "POST", "/api/v1/write", &[], &broken);
    let after = peak_rss(server.id());
    assert_eq!(status, 400, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["accepted"], n - 1, "{answer}");
    assert_eq!(answer["rejected_by_reason"]["invalid_json"], 1, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("not a JSON array after element {}", n - 1)),
        "{error}"
    );
    assert!(
        error.contains("EOF while parsing an object at byte"),
        "{error}"
    );
    assert_eq!(accepted_total(addrs.http), warm_n + n + n - 1);
    let grew = after.saturating_sub(before);
    assert!(grew <= 4 * broken.len() as u64, "peak RSS grew by {grew}");
    assert!(server.terminate(STOP_TIMEOUT).success());
}

/// A JSON body past the body limit: refused unread when its length says so up front, and
/// answered with what landed when a chunked one crosses the limit midway.
#[test]
fn a_json_body_past_the_limit_is_refused_with_what_landed() {
    use std::io::{Read, Write};

    use tierdb::server::Limits;

    use crate::common::NOW;
    use crate::support::server::TestServer;

    let limits = Limits {
        max_body: 4096,
        ..Limits::default()
    };
    let server = TestServer::start(None, limits);
    let element = format!(r#"{{"series":"big","ts":{},"value":1}}"#, NOW - 60);
    let elements = |n: usize| vec![element.as_str(); n].join(",");
    let (status, answer) = server.request(
        "POST",
        "/api/v1/write",
        &[],
        format!("[{}]", elements(200)).as_bytes(),
    );
    assert_eq!(status, 413, "{answer}");
    assert!(
        answer.contains("larger than the limit of 4096 bytes"),
        "{answer}"
    );

    // Chunked: 50 elements in the first chunk, 100 more in a second that crosses the limit.
    let mut stream = std::net::TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = "POST /api/v1/write HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    let first = format!("[{},", elements(50));
    let second = elements(100);
    let chunk = |data: &str| format!("{:x}\r\n{data}\r\n", data.len());
    let request = format!("{head}{}{}0\r\n\r\n", chunk(&first), chunk(&second));
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    let _ = stream.read_to_string(&mut raw);
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    let body = &raw[raw.find("\r\n\r\n").unwrap() + 4..];
    let answer: serde_json::Value = serde_json::from_str(body).unwrap();
    // The first chunk landed; how much of the second did depends on how the socket read
    // split it, but never all of it, and the answer counts exactly what landed.
    let landed = server.engine.stats().accepted;
    assert!((50..150).contains(&landed), "{landed} landed");
    assert_eq!(answer["accepted"], landed, "{answer}");
}
