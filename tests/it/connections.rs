//! Connection-level limits against hostile and careless clients, over real loopback sockets:
//! idle Graphite sockets are closed so they cannot lock collectors out, HTTP clients that
//! trickle headers, stall a body or sit idle lose their slot, connections over a cap are
//! refused rather than queued, and every refusal and timeout shows in `/metrics`.
//!
//! Before these limits, an idle Graphite socket or a slowloris HTTP client held its slot for
//! as long as it liked: 1,024 of either locked everyone else out.

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tierdb::server::Limits;

use crate::common::NOW;
use crate::support::file;
use crate::support::http;
use crate::support::http::read_uninterrupted;
use crate::support::process::Proc;
use crate::support::server::TestServer;

/// How long anything the server should do promptly may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// The value of the `/metrics` sample `key` (name and labels, as printed).
fn metric(addr: SocketAddr, key: &str) -> u64 {
    let (status, text) = http::request(addr, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {key} in\n{text}"))
        .parse()
        .unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// Polls `check` every 50 ms until it holds, for at most [`PATIENCE`]; panics naming `what`.
fn wait_until(what: &str, check: impl FnMut() -> bool) {
    wait_or_explain(what, check, String::new);
}

/// [`wait_until`], its panic followed by what `explain` says then.
fn wait_or_explain(what: &str, mut check: impl FnMut() -> bool, explain: impl FnOnce() -> String) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        if Instant::now() >= deadline {
            panic!("gave up waiting for {what}{}", explain());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Who holds the TCP connections established to `port` on this machine, from the kernel's
/// tables: for each, the client's port and the process holding the client's end (its pid
/// and command line), or what is known of it. A connection the test did not open shows here.
fn clients_of(port: u16) -> Vec<String> {
    // (local port, remote port, inode) of every established IPv4 and IPv6 socket.
    let established: Vec<(u16, u16, String)> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| {
            let rows: Vec<(u16, u16, String)> = (text.lines().skip(1))
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let port =
                        |address: &str| u16::from_str_radix(address.rsplit(':').next()?, 16).ok();
                    (fields.get(3) == Some(&"01")).then_some(())?;
                    Some((
                        port(fields[1])?,
                        port(fields[2])?,
                        fields.get(9)?.to_string(),
                    ))
                })
                .collect();
            rows
        })
        .collect();
    let owner = |inode: &str| -> Option<String> {
        let socket = format!("socket:[{inode}]");
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|process| {
                // Numbered entries only (not /proc/self, which is this process again).
                let pid: u32 = process.file_name().to_str()?.parse().ok()?;
                let fds = std::fs::read_dir(process.path().join("fd")).ok()?;
                fds.flatten()
                    .any(|fd| {
                        std::fs::read_link(fd.path())
                            .is_ok_and(|link| link.as_os_str() == socket.as_str())
                    })
                    .then(|| {
                        let command =
                            std::fs::read(process.path().join("cmdline")).unwrap_or_default();
                        let command = String::from_utf8_lossy(&command).replace('\0', " ");
                        format!("pid {pid} ({})", command.trim())
                    })
            })
    };
    (established.iter())
        .filter(|(local, _, _)| *local == port)
        .map(|(_, client, _)| {
            let end = established
                .iter()
                .find(|(local, remote, _)| local == client && *remote == port);
            let held_by = end.and_then(|(_, _, inode)| owner(inode));
            format!(
                "port {client}: {}",
                held_by.unwrap_or_else(|| "held by no process seen".into())
            )
        })
        .collect()
}

/// What the server sends on `stream` within two seconds, or until it closes it: empty when
/// the connection was accepted and is waiting for a request.
fn first_answer(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match read_uninterrupted(stream, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Reads `stream` until the server closes it (EOF or reset), for at most [`PATIENCE`];
/// returns what it sent.
fn read_until_closed(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match read_uninterrupted(stream, &mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                assert!(
                    Instant::now() < deadline,
                    "the server never closed the socket"
                );
            }
            Err(_) => break, // reset: closed as well
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// The open files this process may have, raised to the hard limit; panics when even that
/// cannot take `needed` (the test opens both ends of every socket).
fn open_files_for(needed: u64) {
    let limit = tierdb::server::raise_open_files_limit().expect("raise the open files limit");
    assert!(
        limit.is_none_or(|limit| limit >= needed),
        "this test needs {needed} open files; the hard limit is {limit:?} (raise it with ulimit -Hn)"
    );
}

/// Sends `rounds` samples of each of `hosts` series (`collectd.host<i>.load.shortterm`, value
/// = round) on one fresh connection, a burst every 200 ms as collectd's write_graphite sends
/// them, and closes it. A write the server refuses ends the sending early: what was lost
/// shows in [`samples_landed`]. Returns the series' names and their minute.
fn collector_sends(server: &TestServer, hosts: usize, rounds: usize) -> (Vec<String>, i64) {
    let minute = NOW - NOW % 60 - 120;
    let series: Vec<String> = (0..hosts)
        .map(|i| format!("collectd.host{i}.load.shortterm"))
        .collect();
    let mut stream = TcpStream::connect(server.graphite).unwrap();
    for round in 0..rounds {
        let mut text = String::new();
        for name in &series {
            text.push_str(&format!("{name} {round} {}\n", minute + round as i64));
        }
        if stream.write_all(text.as_bytes()).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    (series, minute)
}

/// Samples of `series` stored in the 1m bucket at `minute`, all together.
fn samples_landed(server: &TestServer, series: &[String], minute: i64) -> u64 {
    series
        .iter()
        .map(|name| {
            let path = format!(
                "/api/v1/query?series={name}&tier=1m&from={minute}&to={}&display=count",
                minute + 60
            );
            let (status, body) = server.get(&path);
            let answer: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            if status != 200 {
                return 0; // not a series yet
            }
            answer["points"][0][1].as_f64().unwrap_or(0.0) as u64
        })
        .sum()
}

/// Waits until the collector's `hosts * rounds` samples have landed, for at most
/// [`PATIENCE`]; returns how many did.
fn wait_for_samples(
    server: &TestServer,
    (series, minute): &(Vec<String>, i64),
    rounds: usize,
) -> usize {
    let expected = series.len() * rounds;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let landed = samples_landed(server, series, *minute) as usize;
        if landed >= expected || Instant::now() > deadline {
            return landed;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A collector ([`collector_sends`]) on a fresh connection lands every sample.
fn collector_lands_every_sample(server: &TestServer, hosts: usize, rounds: usize) {
    let sent = collector_sends(server, hosts, rounds);
    assert_eq!(
        wait_for_samples(server, &sent, rounds),
        hosts * rounds,
        "samples landed"
    );
}

/// True when the server has not closed `stream` (nothing to read, no end of stream).
fn still_open(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    match read_uninterrupted(stream, &mut [0u8; 16]) {
        Err(e) => matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        Ok(_) => false,
    }
}

/// Set in the child process of
/// `a_test_process_stopped_and_continued_does_not_take_its_open_sockets_for_closed`, which
/// runs the check there.
const STOPPED_CHILD: &str = "TIERDB_IT_STOPPED_CHILD";

/// Issue 56 item 14: `still_open` found the newest of 1,500 idle sockets closed although
/// the server's counters showed nothing had closed it. A socket read with a timeout fails
/// with EINTR when its process is stopped and continued (job control, a debugger attaching,
/// a cgroup freezer), with no signal handler installed at all, and std does not retry it:
/// the helpers took that for the server closing the socket. The check runs in a child of
/// this binary, which a shell stops and continues while it waits on a socket nobody closes;
/// stopping this process instead would interrupt every other test's reads.
#[test]
fn a_test_process_stopped_and_continued_does_not_take_its_open_sockets_for_closed() {
    if std::env::var_os(STOPPED_CHILD).is_none() {
        let name = "connections::a_test_process_stopped_and_continued_does_not_take_its_open_sockets_for_closed";
        let output = Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(STOPPED_CHILD, "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "the child failed: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let connection = || {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (client, listener.accept().unwrap().0)
    };
    // Stopped for a tenth of a second, a little later, while the check waits in a read. (A
    // SIGCONT sent before the stop has taken hold would cancel it: hence the pause between.)
    let stop_and_continue = || {
        let pid = std::process::id();
        let script = format!("sleep 0.3; kill -STOP {pid}; sleep 0.1; kill -CONT {pid}");
        Command::new("sh").args(["-c", &script]).spawn().unwrap()
    };

    let (mut client, _server_end) = connection();
    let mut stopper = stop_and_continue();
    while stopper.try_wait().unwrap().is_none() {
        assert!(
            still_open(&mut client),
            "still_open took the stop for a close"
        );
    }
    // The server end writes and closes once the stop is over: read_until_closed must read on
    // past the stop to see it. (first_answer reads through the same read_uninterrupted.)
    let (mut client, mut server_end) = connection();
    let mut stopper = stop_and_continue();
    let writer = std::thread::spawn(move || {
        assert!(stopper.wait().unwrap().success());
        server_end.write_all(b"after").unwrap();
    });
    assert_eq!(read_until_closed(&mut client), "after", "stopped short");
    writer.join().unwrap();
}

/// At the cap, a new Graphite connection takes the slot of the one idle longest, with the
/// default idle timeout (the default cap itself is exercised by
/// `with_the_default_limits_1500_idle_graphite_sockets_do_not_lock_out_a_collector`; a cap of 4
/// keeps this one small).
#[test]
fn at_the_cap_a_new_graphite_connection_takes_the_slot_of_the_one_idle_longest() {
    let server = TestServer::start(
        None,
        Limits {
            graphite_max_connections: 4,
            ..Limits::default()
        },
    );
    let count = |key: &str| metric(server.http, &format!("tierdb_connections_{key}"));
    let open = "open{protocol=\"graphite\"}";
    let mut idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(server.graphite).unwrap())
        .collect();
    wait_until("4 open graphite connections", || count(open) == 4);

    // A fifth is over the cap: it takes the slot of the one idle longest, the first, which
    // is closed and counted. Its line lands.
    let mut fifth = TcpStream::connect(server.graphite).unwrap();
    assert_eq!(read_until_closed(&mut idle.remove(0)), "");
    assert_eq!(count("evicted_total{protocol=\"graphite\"}"), 1);
    assert_eq!(count("refused_total{protocol=\"graphite\"}"), 0);
    let minute = NOW - NOW % 60 - 60;
    fifth
        .write_all(format!("fifth.conn 7 {minute}\n").as_bytes())
        .unwrap();
    wait_until("the fifth's sample", || {
        samples_landed(&server, &["fifth.conn".to_owned()], minute) == 1
    });
    // With the default idle timeout (5 minutes) the others keep their slots meanwhile.
    for stream in &mut idle {
        assert!(still_open(stream));
    }
    assert!(still_open(&mut fifth));
}

/// Idle Graphite connections are closed by the server once the idle timeout passes, which
/// frees their slots, while a collector writing for longer than the timeout keeps its own.
/// The default timeout is 5 minutes (`Limits::GRAPHITE_IDLE_TIMEOUT`, checked below); the
/// test shortens it to 3 s so it does not wait 5 minutes: the timer is the same at any
/// value.
#[test]
fn idle_graphite_connections_are_closed_at_the_idle_timeout_and_writers_keep_theirs() {
    assert_eq!(
        Limits::default().graphite_idle_timeout,
        Duration::from_secs(300)
    );
    let server = TestServer::start(
        None,
        Limits {
            graphite_idle_timeout: Duration::from_secs(3),
            ..Limits::default()
        },
    );
    let count = |key: &str| metric(server.http, &format!("tierdb_connections_{key}"));
    let open = "open{protocol=\"graphite\"}";
    let mut idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(server.graphite).unwrap())
        .collect();
    wait_until("4 open graphite connections", || count(open) == 4);
    for stream in &mut idle {
        read_until_closed(stream);
    }
    assert_eq!(
        count("timed_out_total{protocol=\"graphite\",timeout=\"idle\"}"),
        4
    );
    // (Seen once in a full `cargo test`: the gauge stayed above 0 although the four had
    // closed and counted their timeouts. Each one's count drops in the same poll as its
    // socket closes, so something else held a connection: say who.)
    let still = std::cell::Cell::new(0);
    wait_or_explain(
        "no open graphite connections",
        || {
            still.set(count(open));
            still.get() == 0
        },
        || {
            let port = server.graphite.port();
            let clients = clients_of(port);
            format!(
                ": {} open; established to port {port}: {clients:?}",
                still.get()
            )
        },
    );

    // A collector writing for longer than the idle timeout, a burst every 200 ms, is not
    // idle: it keeps its connection and every sample lands.
    collector_lands_every_sample(&server, 3, 20);
}

/// Writes `request` to `stream` one byte per `pace` until the server closes it (or
/// [`PATIENCE`] runs out); returns how many bytes it got to send.
fn trickle(mut stream: TcpStream, request: &[u8], pace: Duration) -> usize {
    stream
        .set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    let mut buf = [0u8; 256];
    for (sent, byte) in request.iter().cycle().enumerate() {
        assert!(
            Instant::now() < deadline,
            "the server kept a trickling client"
        );
        if stream.write_all(&[*byte]).is_err() {
            return sent;
        }
        match read_uninterrupted(&mut stream, &mut buf) {
            Ok(_) => return sent + 1,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return sent + 1,
        }
        std::thread::sleep(pace);
    }
    unreachable!("cycle never ends")
}

#[test]
fn http_clients_that_trickle_stall_or_idle_lose_their_slot() {
    let server = TestServer::start(
        None,
        Limits {
            http_max_connections: 4,
            http_header_timeout: Duration::from_secs(1),
            http_body_timeout: Duration::from_secs(1),
            http_idle_timeout: Duration::from_secs(2),
            ..Limits::default()
        },
    );
    let addr = server.http;
    // Four slots taken: a connection that sends nothing, one idle after a keep-alive
    // request, one stalled in a body, one trickling its headers a byte per 100 ms (never
    // idle, but its head never ends).
    let mut silent = TcpStream::connect(addr).unwrap();
    let mut kept_alive = TcpStream::connect(addr).unwrap();
    kept_alive
        .write_all(b"GET /api/v1/tiers HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled
        .write_all(b"POST /api/v1/write HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n[")
        .unwrap();
    let slowloris = TcpStream::connect(addr).unwrap();
    let slowloris = std::thread::spawn(move || {
        trickle(
            slowloris,
            b"GET /api/v1/tiers HTTP/1.1\r\nHost: test\r\nX-Slow: aaaaaaaa",
            Duration::from_millis(100),
        )
    });

    // The server closes all four, each for its own reason.
    let stalled = read_until_closed(&mut stalled);
    assert!(stalled.contains("--http-body-timeout"), "{stalled}");
    let kept_alive = read_until_closed(&mut kept_alive);
    assert!(kept_alive.starts_with("HTTP/1.1 200"), "{kept_alive}");
    assert_eq!(read_until_closed(&mut silent), "");
    let sent = slowloris.join().unwrap();
    assert!(
        sent > 1,
        "the trickling client sent {sent} bytes before being closed"
    );

    // And counts them; the freed slots serve again.
    let count = |key: &str| metric(addr, &format!("tierdb_connections_{key}"));
    assert_eq!(count("refused_total{protocol=\"http\"}"), 0);
    assert_eq!(
        count("timed_out_total{protocol=\"http\",timeout=\"header\"}"),
        1
    );
    assert_eq!(
        count("timed_out_total{protocol=\"http\",timeout=\"body\"}"),
        1
    );
    assert_eq!(
        count("timed_out_total{protocol=\"http\",timeout=\"idle\"}"),
        2
    );
    assert_eq!(server.json("/api/v1/tiers")["tiers"][0]["name"], "1m");
}

#[test]
fn with_the_default_limits_1500_idle_graphite_sockets_do_not_lock_out_a_collector() {
    const IDLE: usize = 1500;
    const HOSTS: usize = 10;
    const ROUNDS: usize = 10;
    let cap = Limits::GRAPHITE_MAX_CONNECTIONS;
    // The attack is larger than the default cap.
    const { assert!(IDLE > Limits::GRAPHITE_MAX_CONNECTIONS) };
    open_files_for(2 * IDLE as u64 + 1000);
    let server = TestServer::start(None, Limits::default());
    let count = |key: &str| metric(server.http, &format!("tierdb_connections_{key}"));
    // No idle socket's idle timeout starts before this.
    let flood_began = Instant::now();
    let mut idle: Vec<TcpStream> = (0..IDLE)
        .map(|_| TcpStream::connect(server.graphite).unwrap())
        .collect();
    // The first `cap` take every slot; each one after them takes the slot of the one idle
    // longest, which is closed and counted.
    wait_until("every idle connection accepted", || {
        count("open{protocol=\"graphite\"}") == cap as u64
            && count("evicted_total{protocol=\"graphite\"}") == (IDLE - cap) as u64
    });

    // A collector on a fresh connection lands every sample.
    let sent = collector_sends(&server, HOSTS, ROUNDS);
    let landed = wait_for_samples(&server, &sent, ROUNDS);
    assert_eq!(
        landed,
        HOSTS * ROUNDS,
        "samples landed behind {IDLE} idle sockets"
    );
    assert_eq!(count("refused_total{protocol=\"graphite\"}"), 0);
    assert_eq!(
        count("evicted_total{protocol=\"graphite\"}"),
        (IDLE - cap + 1) as u64,
        "the collector's connection took the slot of one more idle one"
    );
    // The ones closed were the oldest; the newest still hold their slots, until their idle
    // timeout (5 minutes).
    assert_eq!(read_until_closed(&mut idle[0]), "");
    assert_eq!(read_until_closed(&mut idle[IDLE - cap]), "");
    if !still_open(&mut idle[IDLE - 1]) {
        let timed_out = count("timed_out_total{protocol=\"graphite\",timeout=\"idle\"}");
        let took = flood_began.elapsed();
        if took >= Limits::GRAPHITE_IDLE_TIMEOUT && timed_out > 0 {
            // A machine loaded enough to make this test outlast the idle timeout: the idle
            // rule closed the newest, as it should.
            eprintln!("the test took {took:?}; the idle timeout closed {timed_out} sockets");
            return;
        }
        // Issue 56 item 14's failure here was the test's own read, stopped short by a stop
        // and continue of the process (read_uninterrupted). Should the server ever close
        // one, say which of its counters moved and which sockets closed, so the failure
        // names the path that closed it.
        let closed: Vec<usize> = (IDLE - cap + 1..IDLE)
            .filter(|&i| !still_open(&mut idle[i]))
            .collect();
        let counters = ["open", "evicted_total", "refused_total"].map(|key| {
            format!(
                "{key} {}",
                count(&format!("{key}{{protocol=\"graphite\"}}"))
            )
        });
        panic!(
            "the newest idle socket was closed {took:?} after the first connected; \
             {counters:?}, idle timeouts {timed_out}; the sockets after the collector's victim \
             that are closed: {closed:?}"
        );
    }
}

#[test]
fn a_thousand_slowloris_http_clients_do_not_lock_out_a_collector_or_a_query() {
    const SLOWLORIS: usize = 1000;
    // Both ends of every socket are in this process, plus the server's own files.
    open_files_for(2 * SLOWLORIS as u64 + 1000);
    // The default connection cap holds them all; the header timeout is shortened so the test
    // does not wait out the default 30 s.
    const { assert!(SLOWLORIS + 10 < Limits::HTTP_MAX_CONNECTIONS) };
    let server = TestServer::start(
        None,
        Limits {
            http_header_timeout: Duration::from_secs(5),
            ..Limits::default()
        },
    );
    let mut slow: Vec<TcpStream> = (0..SLOWLORIS)
        .map(|_| TcpStream::connect(server.http).unwrap())
        .collect();
    // The slowloris clients send their headers one byte a second, from one thread.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickler = {
        let streams: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let head = b"GET /api/v1/tiers HTTP/1.1\r\nHost: slow\r\nX-Slow: ";
            let mut streams = streams;
            for byte in head.iter().chain(std::iter::repeat(&b'a')).take(60) {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                for stream in &mut streams {
                    let _ = stream.write(&[*byte]);
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };

    // The server holds them all and still answers HTTP.
    wait_until("every slowloris connection accepted", || {
        metric(server.http, "tierdb_connections_open{protocol=\"http\"}") > SLOWLORIS as u64
    });
    // Meanwhile a collector on a fresh connection lands every sample, and queries answer.
    collector_lands_every_sample(&server, 10, 10);

    // Then the header timeout closes every one, and says so in /metrics.
    let count = |key: &str| metric(server.http, &format!("tierdb_connections_{key}"));
    wait_until("every slowloris connection timed out", || {
        count("timed_out_total{protocol=\"http\",timeout=\"header\"}") == SLOWLORIS as u64
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickler.join().unwrap();
    assert_eq!(count("refused_total{protocol=\"http\"}"), 0);
    let last = slow.len() - 1;
    for i in [0, last] {
        read_until_closed(&mut slow[i]);
    }
}

/// A connection to `addr` whose request is being handled: its body never comes, and the
/// handler waits for it (until the body timeout, or until this end closes). Returns once
/// the server says so: its `100 Continue`, sent when the handler first reads the body.
fn stalled_request(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(
            b"POST /api/v1/write HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\
              Expect: 100-continue\r\n\r\n",
        )
        .unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"\r\n\r\n") {
        let n = read_uninterrupted(&mut stream, &mut buf).expect("100 Continue");
        assert!(n > 0, "closed before its 100 Continue");
        got.extend_from_slice(&buf[..n]);
    }
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 100"), "{got}");
    stream
}

/// At the HTTP cap, a new connection takes the slot of the one idle longest; only when every
/// one is handling a request is it answered 503, at once and never queued. A cap of 2 lets the
/// test hold every slot busy; the rule itself is the default limits' too, which
/// `with_the_default_limits_1100_clients_without_a_token_do_not_lock_out_a_user` checks at
/// the default cap of 1,024.
#[test]
fn at_the_http_cap_the_one_idle_longest_makes_room_and_503_comes_only_when_all_are_busy() {
    let server = TestServer::start(
        None,
        Limits {
            http_max_connections: 2,
            ..Limits::default()
        },
    );
    let addr = server.http;
    let busy = stalled_request(addr);
    let mut silent = TcpStream::connect(addr).unwrap();
    // A third connection: the silent one, not handling a request, makes room; the busy one,
    // though it arrived first, keeps its slot.
    let mut third = TcpStream::connect(addr).unwrap();
    assert_eq!(read_until_closed(&mut silent), "");
    third
        .write_all(b"GET /api/v1/tiers HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert!(read_until_closed(&mut third).starts_with("HTTP/1.1 200"));
    // Both slots busy: a new connection is answered 503 and closed.
    let other = stalled_request(addr);
    let refused = read_until_closed(&mut TcpStream::connect(addr).unwrap());
    assert!(
        refused.starts_with("HTTP/1.1 503") && refused.contains("--http-max-connections"),
        "{refused}"
    );
    // Their bodies sent, both requests are answered and the slots idle again; the counts
    // show the connection closed to make room and the one refused.
    for mut stalled in [busy, other] {
        stalled.write_all(&[b' '; 100]).unwrap();
        let answer = first_answer(&mut stalled);
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    }
    let count = |key: &str| metric(addr, &format!("tierdb_connections_{key}"));
    assert!(count("evicted_total{protocol=\"http\"}") >= 1);
    assert_eq!(count("refused_total{protocol=\"http\"}"), 1);
}

/// At the HTTP cap, a connection that has sent part of its first head (no request handled
/// on it yet) makes room at once when it is the one idle longest. A cap of 2 lets the test
/// pick which connection is idle longest; with the default cap, 1,024,
/// `with_the_default_limits_1100_clients_without_a_token_do_not_lock_out_a_user` checks the
/// same rule for 1,100 such clients. hyper's graceful close
/// waits for the end of a head that has begun, which a client holding the slot never sends:
/// the new connection waited for the header timeout (30 s by default) to free the slot, and
/// a client reading its answer with a 30 s timeout gave up first.
#[test]
fn at_the_http_cap_a_connection_still_sending_its_first_head_makes_room_at_once() {
    let server = TestServer::start(
        None,
        Limits {
            http_max_connections: 2,
            ..Limits::default()
        },
    );
    let addr = server.http;
    let busy = stalled_request(addr);
    let mut partial = TcpStream::connect(addr).unwrap();
    partial
        .write_all(b"GET /api/v1/tiers HTTP/1.1\r\nHost: test\r\n")
        .unwrap();
    // Time for the server to read the part sent (if it has not, the eviction below closes
    // a connection that has read nothing, which hyper's close handles too).
    std::thread::sleep(Duration::from_millis(200));
    let mut third = TcpStream::connect(addr).unwrap();
    third
        .write_all(b"GET /api/v1/tiers HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let answer = read_until_closed(&mut third);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(read_until_closed(&mut partial), "");
    let count = |key: &str| metric(addr, &format!("tierdb_connections_{key}"));
    assert_eq!(
        count("timed_out_total{protocol=\"http\",timeout=\"header\"}"),
        0,
        "the partial head was closed by its header timeout, not to make room"
    );
    // (A connection of these /metrics requests may make room in its turn.)
    assert!(count("evicted_total{protocol=\"http\"}") >= 1);
    drop(busy);
}

/// Issue 56 item 9: with tokens set, 1,024 clients without one could hold every HTTP slot
/// for the 30 s header timeout (sending part of a head, or nothing), and a real user was
/// answered 503 meanwhile. With the default limits, clients sending a head without a token
/// now lose their slots to new connections, the longest idle first, while a connection that
/// presented an accepted token keeps its slot.
#[test]
fn with_the_default_limits_1100_clients_without_a_token_do_not_lock_out_a_user() {
    const ATTACK: usize = 1100;
    const { assert!(ATTACK > Limits::HTTP_MAX_CONNECTIONS) };
    open_files_for(2 * ATTACK as u64 + 1000);
    let server = TestServer::start(Some("s3cret"), Limits::default());
    let addr = server.http;
    let auth = [("Authorization", "Bearer s3cret")];
    let count = |key: &str| {
        let (status, text) = http::request(addr, "GET", "/metrics", &auth, b"");
        assert_eq!(status, 200, "{text}");
        let key = format!("tierdb_connections_{key} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&key))
            .unwrap_or_else(|| panic!("no {key} in\n{text}"))
            .parse::<u64>()
            .unwrap()
    };
    // A user's keep-alive connection that presented its token.
    let tiers = b"GET /api/v1/tiers HTTP/1.1\r\nHost: user\r\nAuthorization: Bearer s3cret\r\n\r\n";
    let mut user = TcpStream::connect(addr).unwrap();
    let keep_alive_answer = |user: &mut TcpStream| {
        user.write_all(tiers).unwrap();
        user.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains("\"tiers\"") {
            let n = read_uninterrupted(user, &mut buf).expect("the user's connection answers");
            assert!(n > 0, "the user's connection was closed");
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    assert!(keep_alive_answer(&mut user).starts_with("HTTP/1.1 200"));

    // More clients than the cap, each sending part of a head without a token.
    let started = Instant::now();
    let mut attack: Vec<TcpStream> = (0..ATTACK)
        .map(|_| {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream
                .write_all(b"GET /api/v1/tiers HTTP/1.1\r\nHost: attacker\r\n")
                .unwrap();
            stream
        })
        .collect();
    wait_until("the cap reached and the oldest attackers closed", || {
        count("evicted_total{protocol=\"http\"}")
            >= (ATTACK + 1 - Limits::HTTP_MAX_CONNECTIONS) as u64
    });

    // A user's new connection is answered (before, 503 until a header timeout freed a slot);
    // the keep-alive one that presented its token was not the one closed.
    let (status, body) = http::request(addr, "GET", "/api/v1/tiers", &auth, b"");
    assert_eq!(status, 200, "{body}");
    assert!(keep_alive_answer(&mut user).starts_with("HTTP/1.1 200"));
    assert_eq!(count("refused_total{protocol=\"http\"}"), 0);
    // The attackers made room as they were chosen, their heads still arriving, not when
    // their header timeout ran out (which a test this long cannot tell apart).
    if started.elapsed() < Limits::HTTP_HEADER_TIMEOUT {
        assert_eq!(
            count("timed_out_total{protocol=\"http\",timeout=\"header\"}"),
            0,
            "an attacker's slot was freed by its header timeout"
        );
    }
    assert_eq!(read_until_closed(&mut attack[0]), "");
    assert!(still_open(&mut attack[ATTACK - 1]));
}

/// Reads the soft and hard "Max open files" of process `pid`.
fn open_files_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("no open files limit in {limits}"));
    let mut fields = line["Max open files".len()..].split_whitespace();
    (
        fields.next().unwrap().to_owned(),
        fields.next().unwrap().to_owned(),
    )
}

/// `tierdb serve` under a shell that first lowers the soft open files limit to 256.
fn serve_with_low_soft_limit(tmp: &Path, flags: &[&str]) -> Proc {
    let log = tmp.join("serve.stderr");
    let mut command = Command::new("sh");
    command
        .args(["-c", "ulimit -Sn 256 && exec \"$@\"", "sh"])
        .arg(env!("CARGO_BIN_EXE_tierdb"))
        .arg("serve")
        .arg("--data-dir")
        .arg(tmp.join("data"))
        .args(["--http", "127.0.0.1:0", "--graphite", "127.0.0.1:0"])
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(file(&log));
    Proc::spawn(
        "tierdb serve (ulimit -Sn 256)",
        &mut command,
        vec![log],
        false,
    )
}

#[test]
fn the_binary_raises_its_open_files_limit_and_takes_its_limits_from_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = serve_with_low_soft_limit(
        tmp.path(),
        &[
            "--graphite-idle-timeout",
            "1s",
            "--http-max-connections",
            "1",
        ],
    );
    let addrs = server.wait_ready();
    let (soft, hard) = open_files_limits(server.id());
    assert_eq!(soft, hard, "soft open files limit raised to the hard one");

    // --graphite-idle-timeout: an idle socket is closed and counted.
    read_until_closed(&mut TcpStream::connect(addrs.graphite_tcp).unwrap());
    let key = "tierdb_connections_timed_out_total{protocol=\"graphite\",timeout=\"idle\"}";
    wait_until("the idle timeout counted", || metric(addrs.http, key) == 1);
    // --http-max-connections 1: a second connection is refused while the one slot handles a
    // request (here one whose body never comes); an idle one would have made room instead.
    // Closing the held one ends its request.
    wait_until("a second connection refused while one is busy", || {
        let mut held = stalled_request(addrs.http);
        let refused = first_answer(&mut TcpStream::connect(addrs.http).unwrap());
        let kept = first_answer(&mut held).is_empty();
        refused.starts_with("HTTP/1.1 503") && refused.contains("--http-max-connections") && kept
    });
    assert!(server.terminate(PATIENCE).success());
}

#[test]
fn a_burst_of_connections_waits_in_the_listen_queue_rather_than_being_dropped() {
    // 500 clients connecting at once to a server busy elsewhere (never accepting here): each
    // handshake completes into the kernel's queue. With the default backlog of 128, the
    // 130th would be dropped and its client left retransmitting.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listeners = runtime
        .block_on(tierdb::server::Listeners::bind(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
    let (http, graphite, _) = listeners.addrs().unwrap();
    for addr in [http, graphite] {
        let queued: Vec<TcpStream> = (0..500)
            .map(|i| {
                TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                    .unwrap_or_else(|e| panic!("connection {i} to {addr}: {e}"))
            })
            .collect();
        assert_eq!(queued.len(), 500);
    }
}

#[test]
fn shutdown_closes_idle_http_connections_at_once_rather_than_waiting_out_the_grace() {
    let server = TestServer::start(None, Limits::default());
    let mut silent = TcpStream::connect(server.http).unwrap();
    let mut kept_alive = TcpStream::connect(server.http).unwrap();
    kept_alive
        .write_all(b"GET /api/v1/tiers HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    wait_until("both connections open", || {
        metric(server.http, "tierdb_connections_open{protocol=\"http\"}") == 3
    });
    // Stopping the server lets requests in progress finish; idle connections are closed at
    // once, well before tierdb::server::SHUTDOWN_GRACE (15 s).
    let started = Instant::now();
    drop(server);
    let took = started.elapsed();
    assert!(
        took < tierdb::server::SHUTDOWN_GRACE / 2,
        "shutdown took {took:?}"
    );
    assert_eq!(read_until_closed(&mut silent), "");
    let answer = read_until_closed(&mut kept_alive);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
