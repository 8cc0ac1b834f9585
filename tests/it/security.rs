//! `tierdb serve` on a network: tokens by role (read, write, admin) from files and the
//! environment, 401 and 403 counted in `/metrics` and the secrets never logged; TLS on the
//! HTTP port with certificates made here (a client trusting only the test CA), plain HTTP
//! refused on it, wrong and expired certificates refused, and a reload picked up; CIDR
//! allowlists on the Graphite, StatsD and HTTP listeners, the HTTPS one included.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::file;
use crate::support::http::request;
use crate::support::process::{tierdb_command, Proc};

const READ: [&str; 2] = ["read-token-1", "read-token-2"];
const WRITE: &str = "write-token-from-env";
const ADMIN: &str = "admin-token-xyz";

/// `tierdb serve` on `dir` with `args` and `env`, its log at debug level in `<dir>.log`.
fn serve(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Proc {
    serve_with(tierdb_command("serve", dir), dir, args, env)
}

/// [`serve`] with HTTP on `http`.
fn serve_on(http: &str, dir: &Path, args: &[&str]) -> Proc {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tierdb"));
    command.arg("serve").arg("--data-dir").arg(dir);
    command.args(["--http", http, "--graphite", "127.0.0.1:0"]);
    serve_with(command, dir, args, &[])
}

fn serve_with(mut command: Command, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let log = dir.with_extension("log");
    command
        .args(args)
        .env("RUST_LOG", "debug")
        .env_remove("TIERDB_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(file(&log));
    for (k, v) in env {
        command.env(k, v);
    }
    Proc::spawn("tierdb serve", &mut command, vec![log], false)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[test]
fn each_roles_token_reaches_only_its_endpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let (read_file, admin_file) = (
        tmp.path().join("read.tokens"),
        tmp.path().join("admin.token"),
    );
    std::fs::write(&read_file, format!("{}\n{}\n", READ[0], READ[1])).unwrap();
    std::fs::write(&admin_file, format!("{ADMIN}\n")).unwrap();
    let dir = tmp.path().join("data");
    let mut server = serve(
        &dir,
        &[
            "--read-token-file",
            read_file.to_str().unwrap(),
            "--admin-token-file",
            admin_file.to_str().unwrap(),
        ],
        &[("TIERDB_WRITE_TOKEN", WRITE)],
    );
    let addr = server.wait_ready().http;
    let call = |method: &str, path: &str, token: Option<&str>, body: &[u8]| {
        let auth = token.map(bearer);
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        request(addr, method, path, &headers, body)
    };
    let now = crate::support::unix_now();
    let line = format!("cpu,host=a value=1 {now}");
    let write = |token| call("POST", "/write?precision=s", token, line.as_bytes());

    // Write: only the write and admin tokens.
    assert_eq!(write(Some(WRITE)).0, 204);
    assert_eq!(write(Some(ADMIN)).0, 204);
    let (status, text) = write(Some(READ[0]));
    assert_eq!(status, 403, "{text}");
    assert_eq!(
        text,
        r#"{"error":"the token sent does not grant write: this endpoint needs a write token or an admin token"}"#
    );
    let (status, text) = write(None);
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("needs a write token"), "{text}");
    let (status, text) = write(Some("not-a-token"));
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("not one this server knows"), "{text}");

    // Read: either read token (one a line of the file) and admin; not the write token.
    for token in [READ[0], READ[1], ADMIN] {
        for path in [
            "/api/v1/query?series=cpu.value{host=a}&from=-1h",
            "/render?target=cpu.value&format=json",
            "/metrics/find?query=*",
            "/api/v1/series?match=*",
            "/metrics",
        ] {
            let (status, text) = call("GET", path, Some(token), b"");
            assert_eq!(status, 200, "{path} with {token}: {text}");
        }
    }
    // The scheme's case does not matter (RFC 9110): `bearer` is `Bearer`.
    let lower = format!("bearer {}", READ[0]);
    let (status, text) = request(addr, "GET", "/metrics", &[("Authorization", &lower)], b"");
    assert_eq!(status, 200, "{text}");
    let (status, text) = call("GET", "/api/v1/series?match=*", Some(WRITE), b"");
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("does not grant read"), "{text}");

    // Admin: deletes and the internal endpoints; the route answers only past the check.
    let (status, text) = call("DELETE", "/api/v1/series?match=cpu", Some(WRITE), b"");
    assert_eq!(status, 403, "{text}");
    assert_eq!(
        text,
        r#"{"error":"the token sent does not grant admin: this endpoint needs an admin token"}"#
    );
    assert_eq!(
        call("POST", "/internal/v1/partial", Some(READ[0]), b"{}").0,
        403
    );
    let (status, _) = call("POST", "/internal/v1/partial", Some(ADMIN), b"{}");
    assert!(status != 401 && status != 403, "admin refused: {status}");

    // The dashboard's page is open; its API calls work with a read token.
    let (status, page) = call("GET", "/?token=x", None, b"");
    assert_eq!(status, 200);
    assert!(
        page.contains("<html") || page.contains("<!doctype"),
        "{page}"
    );
    for path in ["/api/v1/tiers", "/api/v1/series?match=cpu*", "/metrics"] {
        assert_eq!(call("GET", path, Some(READ[1]), b"").0, 200, "{path}");
    }

    // Refusals counted by role and reason.
    let (_, metrics) = call("GET", "/metrics", Some(READ[0]), b"");
    for (labels, n) in [
        ("role=\"write\",reason=\"wrong_role\"", 1),
        ("role=\"write\",reason=\"missing\"", 1),
        ("role=\"write\",reason=\"unknown\"", 1),
        ("role=\"read\",reason=\"wrong_role\"", 1),
        ("role=\"admin\",reason=\"wrong_role\"", 2),
    ] {
        let sample = format!("tierdb_http_auth_refused_total{{{labels}}} {n}\n");
        assert!(metrics.contains(&sample), "no {sample:?} in\n{metrics}");
    }

    server.terminate(std::time::Duration::from_secs(30));
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    assert!(
        log.contains("request refused"),
        "the debug log shows no refusal:\n{log}"
    );
    for secret in [READ[0], READ[1], WRITE, ADMIN] {
        assert!(!log.contains(secret), "the log shows a token:\n{log}");
    }
}

#[test]
fn a_token_file_without_a_token_is_refused_at_start_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty.token");
    std::fs::write(&empty, "\n").unwrap();
    let out = crate::support::process::run_tierdb(
        &[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--graphite",
            "127.0.0.1:0",
            "--write-token-file",
            empty.to_str().unwrap(),
        ],
        &tmp.path().join("data"),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("empty.token: holds no token"), "{stderr}");
    assert!(
        !tmp.path().join("data").exists(),
        "the data directory was created"
    );
}

/// Issue 56 items 6 and 7: `--http 0.0.0.0:...` without a token started in silence though
/// every endpoint, deletes included, was open to the network; tokens over plain HTTP to
/// other machines, and a token file anyone could read, went unsaid too. The open port here
/// admits only 127.0.0.1 (`--http-allow`), so nothing else can reach it meanwhile.
#[test]
fn an_open_port_clear_text_tokens_and_a_token_file_anyone_can_read_are_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let warnings = |dir: &Path, http: &str, args: &[&str]| {
        let mut server = serve_on(http, dir, args);
        // Not `wait_ready`, which takes only loopback addresses.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while server.next_line(deadline, "`tierdb: ready`") != "tierdb: ready" {}
        assert!(server
            .terminate(std::time::Duration::from_secs(30))
            .success());
        let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
        log.lines()
            .filter(|l| l.starts_with("tierdb: warning: "))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let local_only = ["--http-allow", "127.0.0.1/32"];

    let open = warnings(&tmp.path().join("open"), "0.0.0.0:0", &local_only);
    assert_eq!(open.len(), 1, "{open:?}");
    for part in ["--http 0.0.0.0:", "no token", "delete", "--token-file"] {
        assert!(open[0].contains(part), "{part:?} not in {}", open[0]);
    }

    let token = tmp.path().join("write.token");
    std::fs::write(&token, format!("{WRITE}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut args = local_only.to_vec();
    args.extend(["--write-token-file", token.to_str().unwrap()]);
    let clear = warnings(&tmp.path().join("clear"), "0.0.0.0:0", &args);
    assert_eq!(clear.len(), 2, "{clear:?}");
    assert!(
        clear[0].contains("clear text") && clear[0].contains("--tls-cert"),
        "{}",
        clear[0]
    );
    assert!(
        clear[1].contains(&format!("--write-token-file {}", token.display()))
            && clear[1].contains("mode 0644")
            && clear[1].contains("chmod 600"),
        "{}",
        clear[1]
    );

    // On loopback, with the file private: nothing to warn about.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let args = ["--write-token-file", token.to_str().unwrap()];
    let quiet = warnings(&tmp.path().join("quiet"), "127.0.0.1:0", &args);
    assert!(quiet.is_empty(), "{quiet:?}");
}

mod tls {
    use std::time::{Duration, Instant};

    use rustix::process::Signal;

    use super::serve;
    use crate::support::http::request;
    use crate::support::tls::{client_config, https, TestCa, Validity};

    /// Polls `check` every 200 ms until it holds, for at most 30 s.
    fn eventually(what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !check() {
            assert!(Instant::now() < deadline, "{what}: not within 30 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The value of the `/metrics` sample `name{labels}` over TLS.
    fn metric(
        addr: std::net::SocketAddr,
        config: &std::sync::Arc<rustls::ClientConfig>,
        sample: &str,
    ) -> u64 {
        let (status, text) = https(addr, config, "GET", "/metrics", &[], b"").unwrap();
        assert_eq!(status, 200, "{text}");
        text.lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no {sample} in\n{text}"))
    }

    #[test]
    fn https_only_with_the_test_ca_plain_http_refused_and_a_new_certificate_picked_up() {
        let tmp = tempfile::tempdir().unwrap();
        let (ca, other_ca) = (
            TestCa::new(tmp.path(), "first"),
            TestCa::new(tmp.path(), "second"),
        );
        let issued = ca.issue("server", Validity::Current);
        let (cert, key) = (issued.cert.to_str().unwrap(), issued.key.to_str().unwrap());
        let dir = tmp.path().join("data");
        let mut server = serve(&dir, &["--tls-cert", cert, "--tls-key", key], &[]);
        let addrs = server.wait_ready();
        let addr = addrs.http;
        assert!(addrs.dashboard.unwrap().starts_with("https://"));
        // The TLS listener announces itself as https (issue 56 item 10).
        let announced = format!("tierdb: https listening on {addr}");
        assert!(server.seen().contains(&announced), "{:?}", server.seen());
        let (trusts_first, trusts_second) = (
            client_config(&ca.cert, None),
            client_config(&other_ca.cert, None),
        );

        let (status, text) = https(addr, &trusts_first, "GET", "/api/v1/tiers", &[], b"").unwrap();
        assert_eq!(status, 200, "{text}");
        let refused = https(addr, &trusts_second, "GET", "/api/v1/tiers", &[], b"").unwrap_err();
        assert!(
            refused.contains("UnknownIssuer") || refused.contains("invalid peer certificate"),
            "{refused}"
        );
        let (status, text) = request(addr, "GET", "/api/v1/tiers", &[], b"");
        assert_eq!(status, 400, "{text}");
        assert!(text.contains("use https://"), "{text}");
        assert_eq!(
            metric(
                addr,
                &trusts_first,
                "tierdb_tls_handshakes_refused_total{reason=\"plain_http\"}"
            ),
            1
        );
        assert!(
            metric(
                addr,
                &trusts_first,
                "tierdb_tls_handshakes_refused_total{reason=\"handshake\"}"
            ) >= 1
        );

        // A key that is not PEM: the reload is refused and the certificate in force stays.
        std::fs::write(&issued.key, "not a key\n").unwrap();
        eventually("the broken reload counted", || {
            metric(
                addr,
                &trusts_first,
                "tierdb_tls_reloads_total{result=\"failed\"}",
            ) >= 1
        });
        // A certificate from the other CA written over the files: picked up without a signal.
        let renewed = other_ca.issue("server-renewed", Validity::Current);
        std::fs::copy(&renewed.key, &issued.key).unwrap();
        std::fs::copy(&renewed.cert, &issued.cert).unwrap();
        eventually("the renewed certificate served", || {
            https(addr, &trusts_second, "GET", "/api/v1/tiers", &[], b"").is_ok()
        });
        assert!(https(addr, &trusts_first, "GET", "/api/v1/tiers", &[], b"").is_err());
        // SIGHUP reloads with no file changed.
        let before = metric(
            addr,
            &trusts_second,
            "tierdb_tls_reloads_total{result=\"ok\"}",
        );
        server.signal(Signal::HUP);
        eventually("SIGHUP's reload counted", || {
            metric(
                addr,
                &trusts_second,
                "tierdb_tls_reloads_total{result=\"ok\"}",
            ) == before + 1
        });
        let status = server.terminate(Duration::from_secs(30));
        assert!(status.success(), "{status}");
    }

    #[test]
    fn an_expired_certificate_is_refused_and_mtls_takes_only_the_cas_current_certificates() {
        let tmp = tempfile::tempdir().unwrap();
        let (ca, other_ca) = (
            TestCa::new(tmp.path(), "nodes"),
            TestCa::new(tmp.path(), "stranger"),
        );
        let trusts_ca = client_config(&ca.cert, None);

        let expired = ca.issue("expired-server", Validity::Expired);
        let mut old = serve(
            &tmp.path().join("old"),
            &[
                "--tls-cert",
                expired.cert.to_str().unwrap(),
                "--tls-key",
                expired.key.to_str().unwrap(),
            ],
            &[],
        );
        let refused = https(
            old.wait_ready().http,
            &trusts_ca,
            "GET",
            "/api/v1/tiers",
            &[],
            b"",
        )
        .unwrap_err();
        assert!(
            refused.contains("Expired") || refused.contains("expired"),
            "{refused}"
        );
        drop(old);

        let issued = ca.issue("server", Validity::Current);
        let mut server = serve(
            &tmp.path().join("data"),
            &[
                "--tls-cert",
                issued.cert.to_str().unwrap(),
                "--tls-key",
                issued.key.to_str().unwrap(),
                "--tls-client-ca",
                ca.cert.to_str().unwrap(),
            ],
            &[],
        );
        let addr = server.wait_ready().http;
        let client = ca.issue("client", Validity::Current);
        let with_client = client_config(&ca.cert, Some(&client));
        let (status, text) = https(addr, &with_client, "GET", "/api/v1/tiers", &[], b"").unwrap();
        assert_eq!(status, 200, "{text}");
        let stranger = other_ca.issue("stranger-client", Validity::Current);
        let expired_client = ca.issue("expired-client", Validity::Expired);
        for (what, config) in [
            ("no client certificate", trusts_ca.clone()),
            (
                "another CA's certificate",
                client_config(&ca.cert, Some(&stranger)),
            ),
            (
                "an expired certificate",
                client_config(&ca.cert, Some(&expired_client)),
            ),
        ] {
            let answer = https(addr, &config, "GET", "/api/v1/tiers", &[], b"");
            assert!(answer.is_err(), "{what} was served: {answer:?}");
        }
        assert!(
            metric(
                addr,
                &with_client,
                "tierdb_tls_handshakes_refused_total{reason=\"handshake\"}"
            ) >= 3
        );
    }
}

mod allowlists {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream, UdpSocket};
    use std::time::{Duration, Instant};

    use super::serve;
    use crate::support::http::request;
    use crate::support::tls::{client_config, https_over, TestCa, Validity};

    /// A loopback address other than 127.0.0.1 (Linux routes all of 127/8 to `lo`).
    const OTHER: &str = "127.0.0.2";

    /// A TCP connection to `to` from `from` (port chosen by the system).
    fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
            let stream = socket.connect(to).await.unwrap();
            let stream = stream.into_std().unwrap();
            stream.set_nonblocking(false).unwrap();
            stream
        })
    }

    /// Whether the server closed `stream` without answering within 10 s.
    fn closed_unanswered(mut stream: TcpStream) -> bool {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 64];
        match crate::support::http::read_uninterrupted(&mut stream, &mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }

    fn udp_from(from: &str, to: SocketAddr, datagram: &str) {
        let socket = UdpSocket::bind(format!("{from}:0")).unwrap();
        socket.send_to(datagram.as_bytes(), to).unwrap();
    }

    #[test]
    fn graphite_and_statsd_admit_only_their_networks_and_count_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let mut server = serve(
            &dir,
            &[
                "--graphite-allow",
                &format!("{OTHER}/32"),
                "--statsd",
                "127.0.0.1:0",
                "--statsd-allow",
                OTHER,
                "--statsd-flush",
                "1s",
            ],
            &[],
        );
        let addrs = server.wait_ready();
        let statsd = addrs.statsd.unwrap();
        let now = crate::support::unix_now();

        let mut refused = connect_from("127.0.0.1", addrs.graphite_tcp);
        let _ = refused.write_all(format!("refused.tcp 1 {now}\n").as_bytes());
        assert!(closed_unanswered(refused), "a refused peer was not closed");
        let mut admitted = connect_from(OTHER, addrs.graphite_tcp);
        admitted
            .write_all(format!("admitted.tcp 1 {now}\n").as_bytes())
            .unwrap();
        drop(admitted);
        udp_from(
            "127.0.0.1",
            addrs.graphite_udp,
            &format!("refused.udp 1 {now}\n"),
        );
        udp_from(
            OTHER,
            addrs.graphite_udp,
            &format!("admitted.udp 1 {now}\n"),
        );
        udp_from("127.0.0.1", statsd, "refused.statsd:1|c");
        udp_from(OTHER, statsd, "admitted.statsd:1|c");

        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, listed) = request(addrs.http, "GET", "/api/v1/series?match=*", &[], b"");
            let all = ["admitted.tcp", "admitted.udp", "admitted.statsd"];
            if all.iter().all(|name| listed.contains(name)) {
                assert!(!listed.contains("refused."), "{listed}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the admitted samples did not land: {listed}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let (_, metrics) = request(addrs.http, "GET", "/metrics", &[], b"");
        for listener in ["graphite_tcp", "graphite_udp", "statsd"] {
            let sample = format!("tierdb_peers_refused_total{{listener=\"{listener}\"}} 1\n");
            assert!(metrics.contains(&sample), "no {sample:?} in\n{metrics}");
        }
        server.terminate(Duration::from_secs(30));
    }

    #[test]
    fn http_admits_only_its_networks_and_a_bad_entry_is_refused_at_start() {
        let tmp = tempfile::tempdir().unwrap();
        let mut server = serve(&tmp.path().join("data"), &["--http-allow", OTHER], &[]);
        let http = server.wait_ready().http;
        let mut stream = connect_from("127.0.0.1", http);
        let _ = stream.write_all(b"GET /api/v1/tiers HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            closed_unanswered(stream),
            "a refused HTTP peer was answered"
        );
        let mut stream = connect_from(OTHER, http);
        stream
            .write_all(b"GET /api/v1/tiers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        drop(server);

        let out = crate::support::process::run_tierdb(
            &[
                "serve",
                "--http",
                "127.0.0.1:0",
                "--graphite",
                "127.0.0.1:0",
                "--graphite-allow",
                "10.0.0.0/8,10.0.0.0/33",
            ],
            &tmp.path().join("other"),
        );
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--graphite-allow: \"10.0.0.0/33\": the prefix length must be 0 to 32"),
            "{stderr}"
        );
    }

    /// `--http-allow` on a TLS port: a refused peer is closed before the handshake (and
    /// before the plain-HTTP answer the TLS port gives), an admitted one is served.
    #[test]
    fn https_admits_only_its_networks_before_the_handshake() {
        let tmp = tempfile::tempdir().unwrap();
        let ca = TestCa::new(tmp.path(), "allow");
        let issued = ca.issue("server", Validity::Current);
        let (cert, key) = (issued.cert.to_str().unwrap(), issued.key.to_str().unwrap());
        let args = ["--tls-cert", cert, "--tls-key", key, "--http-allow", OTHER];
        let mut server = serve(&tmp.path().join("data"), &args, &[]);
        let http = server.wait_ready().http;
        let client = client_config(&ca.cert, None);
        let get = |from: &str, path: &str| {
            https_over(
                connect_from(from, http),
                http,
                &client,
                "GET",
                path,
                &[],
                b"",
            )
        };

        let refused = get("127.0.0.1", "/api/v1/tiers");
        assert!(refused.is_err(), "a refused peer was served: {refused:?}");
        let mut plain = connect_from("127.0.0.1", http);
        let _ = plain.write_all(b"GET /api/v1/tiers HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(closed_unanswered(plain), "a refused peer was answered");
        let (status, text) = get(OTHER, "/api/v1/tiers").unwrap();
        assert_eq!(status, 200, "{text}");

        // Both refusals are the allowlist's: no handshake was tried, no plain HTTP answered.
        let (status, metrics) = get(OTHER, "/metrics").unwrap();
        assert_eq!(status, 200, "{metrics}");
        for sample in [
            "tierdb_peers_refused_total{listener=\"http\"} 2\n",
            "tierdb_tls_handshakes_refused_total{reason=\"handshake\"} 0\n",
            "tierdb_tls_handshakes_refused_total{reason=\"plain_http\"} 0\n",
        ] {
            assert!(metrics.contains(sample), "no {sample:?} in\n{metrics}");
        }
        server.terminate(Duration::from_secs(30));
    }
}
