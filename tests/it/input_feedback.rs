//! What a writer learns about refused input (#31): an Influx write in the wrong timestamp
//! unit is told which unit its timestamps look like, as `tierdb import` says it; refused
//! Graphite input is logged by the server, at most one line per reason a minute.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;
use tierdb::server::Limits;

use crate::common::NOW;
use crate::support::process::Proc;
use crate::support::server::TestServer;

#[test]
fn an_influx_write_in_the_wrong_unit_is_told_the_unit_its_timestamps_look_like() {
    let server = TestServer::start(None, Limits::default());
    let write = |path: &str, body: String| {
        let (status, text) = server.request("POST", path, &[], body.as_bytes());
        let answer: Value = serde_json::from_str(&text).unwrap_or_default();
        (status, answer)
    };
    // Seconds, read as the default nanoseconds: all too old.
    let (status, answer) = write("/write?db=x", format!("cpu,host=a usage=1 {NOW}\n"));
    assert_eq!(status, 400, "{answer}");
    let hint = answer["hint"].as_str().unwrap_or_default();
    assert!(
        hint.starts_with("the timestamps look like seconds (the first, read as nanoseconds, is 1970-01-01T00:00:01Z)")
            && hint.ends_with("add precision=s to the URL"),
        "{answer}"
    );
    assert!(
        answer["error"].as_str().unwrap().ends_with(hint),
        "{answer}"
    );
    // Milliseconds read as seconds (Influx 2.x): all too far ahead.
    let (_, answer) = write(
        "/api/v2/write?bucket=x&precision=s",
        format!("cpu,host=a usage=1 {}\n", NOW * 1000),
    );
    assert!(
        answer["hint"]
            .as_str()
            .is_some_and(|h| h.contains("look like milliseconds")
                && h.ends_with("add precision=ms to the URL")),
        "{answer}"
    );
    // Followed, the hint lands the sample; a write where something landed, or that was
    // refused for another reason too, gets no hint.
    let (status, _) = write(
        "/write?db=x&precision=s",
        format!("cpu,host=a usage=1 {NOW}\n"),
    );
    assert_eq!(status, 204);
    let (status, answer) = write(
        "/write?db=x",
        format!("cpu,host=a usage=1 {NOW}000000000\ncpu,host=a usage=2 {NOW}\n"),
    );
    assert_eq!((status, answer.get("hint")), (400, None), "{answer}");
}

/// Lines of `log` that contain `text`.
fn lines_with(log: &std::path::Path, text: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(text))
        .map(str::to_owned)
        .collect()
}

#[test]
fn refused_graphite_input_is_logged_once_per_reason_a_minute_with_peer_and_example() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let mut server = Proc::tierdb("serve", &dir.path().join("data"), log.clone());
    let addrs = server.wait_ready();
    let now = chrono::Utc::now().timestamp();
    // Two connections, each sending 50 lines of each of two refusals and a good line.
    for _ in 0..2 {
        let mut stream = TcpStream::connect(addrs.graphite_tcp).unwrap();
        let mut text = String::new();
        for i in 0..50 {
            text.push_str(&format!("bad.value{i} notanumber {now}\n"));
            text.push_str(&format!("old.sample{i} 1 1000000\n"));
        }
        text.push_str(&format!("good.sample 1 {now}\n"));
        stream.write_all(text.as_bytes()).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines_with(&log, "refused graphite input").len() < 2 {
        assert!(
            Instant::now() < deadline,
            "no warning logged:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let warned = lines_with(&log, "refused graphite input");
    // One line per reason, each naming the peer and an example line, however many lines
    // and connections were refused within the minute.
    assert_eq!(warned.len(), 2, "{warned:#?}");
    let value = warned.iter().find(|l| l.contains("invalid_value")).unwrap();
    assert!(
        value.contains("peer=127.0.0.1:") && value.contains("bad.value0 notanumber"),
        "{value}"
    );
    let old = warned.iter().find(|l| l.contains("too_old")).unwrap();
    assert!(old.contains("old.sample0 1 1000000"), "{old}");
    assert!(server.terminate(Duration::from_secs(60)).success());
}

/// The same over UDP: the warning names the datagram's sender and a refused line.
#[test]
fn refused_graphite_udp_input_is_logged_with_its_sender_and_example() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let mut server = Proc::tierdb("serve", &dir.path().join("data"), log.clone());
    let addrs = server.wait_ready();
    let now = chrono::Utc::now().timestamp();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sender = socket.local_addr().unwrap();
    for i in 0..20 {
        let datagram = format!("udp.bad{i} notanumber {now}\nudp.good 1 {now}\n");
        socket
            .send_to(datagram.as_bytes(), addrs.graphite_udp)
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines_with(&log, "refused graphite input").is_empty() {
        assert!(
            Instant::now() < deadline,
            "no warning logged:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        // Datagrams can be lost; send again until one is refused and warned about.
        let datagram = format!("udp.bad0 notanumber {now}\n");
        socket
            .send_to(datagram.as_bytes(), addrs.graphite_udp)
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let warned = lines_with(&log, "refused graphite input");
    assert_eq!(warned.len(), 1, "one line a minute per reason: {warned:#?}");
    assert!(
        warned[0].contains("invalid_value")
            && warned[0].contains(&format!("peer={sender}"))
            && warned[0].contains("notanumber"),
        "{}",
        warned[0]
    );
    assert!(server.terminate(Duration::from_secs(60)).success());
}
