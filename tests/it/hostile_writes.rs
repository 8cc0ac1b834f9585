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
