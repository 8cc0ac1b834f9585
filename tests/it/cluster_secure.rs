//! A cluster secured end to end: three NATS servers requiring users with passwords or an
//! nkey, and TLS with client certificates (configuration files written by the test, the
//! certificates made here with rcgen); three `tierdb serve --cluster` nodes with those
//! credentials, serving HTTPS with client certificates required (mTLS), tokens by role,
//! and asking each other over TLS with the admin token. A write through one node is read
//! through the others; a node with a wrong password, or without the CA, is refused at start
//! with an error saying why.
//!
//! Then each other way a node logs in to NATS, one server each, over TLS with only the CA
//! given (`--nats-ca`, servers that ask for no client certificate): a token
//! (`--nats-token-file`), an nkey seed (`--nats-nkey-file`) and a creds file
//! (`--nats-creds`, operator mode with JWTs made here by [`NatsOperator`]). A node so logged
//! in takes a write and reads it back; one with another token, seed or account's creds is
//! refused at start, saying so.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::cluster::{eventually, wait_served_at};
use crate::nats::{NatsAuthorization, NatsCluster, NatsLogin, NatsOperator, NatsSecurity};
use crate::support::file;
use crate::support::http::{get_json, request};
use crate::support::process::{tierdb_command, Proc};
use crate::support::tls::{client_config, https, Issued, TestCa, Validity};

const READ: &str = "cluster-read-token";
const WRITE: &str = "cluster-write-token";
const ADMIN: &str = "cluster-admin-token";

/// Writes `text` to `<dir>/<name>`; returns the path as a string.
fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// `tierdb serve --cluster urls` as `name` on `root/<name>`, with `args`.
fn node(root: &Path, name: &str, urls: &str, args: &[String]) -> Proc {
    let log = root.join(format!("{name}.log"));
    let mut command = tierdb_command("serve", &root.join(name));
    command
        .args(["--cluster", urls, "--node", name])
        .args(["--log-max-bytes", "268435456"])
        .args(args)
        .env("RUST_LOG", "tierdb=info")
        .env_remove("TIERDB_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(file(&log));
    Proc::spawn(&format!("tierdb {name}"), &mut command, vec![log], false)
}

/// Waits for `proc` to exit (at most 60 s) and returns its log.
fn refused_at_start(mut proc: Proc, log: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = proc.try_wait() {
            assert!(!status.success(), "a refused node exited 0");
            return std::fs::read_to_string(log).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "a node with bad credentials kept running\n{}",
            proc.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_authenticated_encrypted_cluster_writes_and_reads_and_refuses_bad_credentials() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let ca = TestCa::new(dir, "cluster");
    let issued = |name: &str| ca.issue(name, Validity::Current);
    let (server, harness) = (issued("nats-server"), issued("harness"));
    let node_password = "node-password-1";
    let nkey = nkeys::KeyPair::new_user();
    let security = NatsSecurity {
        cert: server.cert.clone(),
        key: server.key.clone(),
        ca: ca.cert.clone(),
        authorization: NatsAuthorization::Users {
            users: vec![
                ("harness".into(), "harness-password".into()),
                ("tierdb".into(), node_password.into()),
            ],
            nkeys: vec![nkey.public_key()],
        },
        client_cert: Some((harness.cert.clone(), harness.key.clone())),
        client_login: NatsLogin::Password("harness".into(), "harness-password".into()),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = runtime.block_on(NatsCluster::start_secured(3, security));
    let urls = nats.urls().join(",");
    assert!(urls.starts_with("tls://"), "{urls}");

    let password = write(dir, "nats.password", &format!("{node_password}\n"));
    let seed = write(dir, "nats.nkey", &nkey.seed().unwrap());
    let ca_path = ca.cert.display().to_string();
    let tokens = [
        ("--read-token-file", write(dir, "read.token", READ)),
        ("--write-token-file", write(dir, "write.token", WRITE)),
        ("--admin-token-file", write(dir, "admin.token", ADMIN)),
    ];
    let args_of = |cert: &Issued, nats_auth: Vec<String>| -> Vec<String> {
        let (cert, key) = (
            cert.cert.display().to_string(),
            cert.key.display().to_string(),
        );
        let mut args: Vec<String> = vec![
            "--nats-ca".into(),
            ca_path.clone(),
            "--nats-cert".into(),
            cert.clone(),
            "--nats-key".into(),
            key.clone(),
            "--tls-cert".into(),
            cert,
            "--tls-key".into(),
            key,
            "--tls-client-ca".into(),
            ca_path.clone(),
            "--peer-ca".into(),
            ca_path.clone(),
        ];
        for (flag, path) in &tokens {
            args.extend([flag.to_string(), path.clone()]);
        }
        args.extend(nats_auth);
        args
    };
    let by_password = || {
        vec![
            "--nats-user".into(),
            "tierdb".into(),
            "--nats-password-file".into(),
            password.clone(),
        ]
    };
    let by_nkey = || vec!["--nats-nkey-file".into(), seed.clone()];
    let mut nodes = Vec::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for (i, auth) in [by_password(), by_nkey(), by_password()]
        .into_iter()
        .enumerate()
    {
        let name = format!("node{i}");
        let mut proc = node(dir, &name, &urls, &args_of(&issued(&name), auth));
        addrs.push(proc.wait_ready().http);
        nodes.push(proc);
    }

    let client = client_config(&ca.cert, Some(&issued("client")));
    let read = format!("Bearer {READ}");
    let get = |addr: SocketAddr, path: &str| -> Result<serde_json::Value, String> {
        let (status, text) = https(addr, &client, "GET", path, &[("Authorization", &read)], b"")?;
        if status != 200 {
            return Err(format!("{status}: {text}"));
        }
        serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
    };
    for &addr in &addrs {
        eventually("every partition served", || {
            let status = get(addr, "/api/v1/cluster")?;
            let served = (status["partitions"]
                .as_array()
                .ok_or("no partitions")?
                .iter())
            .filter(|p| p["serving"].as_str().is_some())
            .count();
            (served == 16)
                .then_some(())
                .ok_or(format!("{served} of 16 served"))
        });
    }

    // Twenty series written through node0 over HTTPS with the write token...
    let now = crate::support::unix_now();
    let lines: String = (0..20)
        .map(|i| format!("secure,host=h{i} value={i} {now}\n"))
        .collect();
    let (status, text) = https(
        addrs[0],
        &client,
        "POST",
        "/write?precision=s",
        &[("Authorization", &format!("Bearer {WRITE}"))],
        lines.as_bytes(),
    )
    .unwrap();
    assert_eq!(status, 204, "{text}");
    // ...are listed and read through the other two, whose fan-out asks every owner over TLS.
    for &addr in &addrs[1..] {
        eventually("the write listed everywhere", || {
            let listed = get(addr, "/api/v1/series?match=secure.*")?;
            let n = listed["series"].as_array().map_or(0, Vec::len);
            (n == 20)
                .then_some(())
                .ok_or(format!("{n} of 20: {listed}"))
        });
        let answer = get(
            addr,
            &format!(
                "/api/v1/query?series=secure.value{{host=h7}}&tier=1m&from={}&to={}",
                now - 60,
                now + 60
            ),
        )
        .unwrap();
        let values: Vec<f64> = (answer["points"].as_array().unwrap().iter())
            .filter_map(|p| p["value"].as_f64().or_else(|| p[1].as_f64()))
            .collect();
        assert_eq!(values, vec![7.0], "{answer}");
    }
    // `tierdb cluster status` through the same NATS and HTTPS, with a client certificate.
    let status_client = issued("status");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(["cluster", "status", "--cluster", &urls, "--format", "json"])
        .args(["--nats-user", "tierdb", "--nats-password-file", &password])
        .args(["--nats-ca", &ca_path, "--peer-ca", &ca_path])
        .args(["--nats-cert", status_client.cert.to_str().unwrap()])
        .args(["--nats-key", status_client.key.to_str().unwrap()])
        .args(["--client-cert", status_client.cert.to_str().unwrap()])
        .args(["--client-key", status_client.key.to_str().unwrap()])
        .env("TIERDB_TOKEN", READ)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && shown.contains("node2"),
        "{shown}{}",
        String::from_utf8_lossy(&status.stderr)
    );

    // A client without a certificate is refused by the nodes; a read token cannot write.
    let anonymous = client_config(&ca.cert, None);
    assert!(https(addrs[1], &anonymous, "GET", "/api/v1/tiers", &[], b"").is_err());
    let (status, _) = https(
        addrs[1],
        &client,
        "POST",
        "/write",
        &[("Authorization", &read)],
        b"x v=1",
    )
    .unwrap();
    assert_eq!(status, 403);

    // A wrong password: refused at start, saying so.
    let wrong = write(dir, "wrong.password", "not-the-password");
    let auth = vec![
        "--nats-user".into(),
        "tierdb".into(),
        "--nats-password-file".into(),
        wrong,
    ];
    let log = refused_at_start(
        node(dir, "wrong", &urls, &args_of(&issued("wrong"), auth)),
        &dir.join("wrong.log"),
    );
    assert!(log.contains("refused this node's credentials"), "{log}");
    // Without the CA the servers' certificates are not trusted.
    let mut args = args_of(&issued("noca"), by_password());
    let at = args.iter().position(|a| a == "--nats-ca").unwrap();
    args.drain(at..at + 2);
    let log = refused_at_start(node(dir, "noca", &urls, &args), &dir.join("noca.log"));
    assert!(log.contains("TLS failed"), "{log}");

    drop(nodes);
    drop(nats);
}

/// One NATS server requiring `authorization` over TLS and asking for no client certificate,
/// the harness logged in with `harness`. A node started with `login` (and `--nats-ca`) takes
/// a write and reads it back; one started with `refused` instead is refused at start,
/// saying its credentials were.
fn a_node_logs_in(
    dir: &Path,
    authorization: NatsAuthorization,
    harness: NatsLogin,
    login: Vec<String>,
    refused: Vec<String>,
) {
    let ca = TestCa::new(dir, "nats");
    let server = ca.issue("nats-server", Validity::Current);
    let security = NatsSecurity {
        cert: server.cert,
        key: server.key,
        ca: ca.cert.clone(),
        authorization,
        client_cert: None,
        client_login: harness,
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = runtime.block_on(NatsCluster::start_secured(1, security));
    let urls = nats.urls().join(",");
    let with_ca = |mut args: Vec<String>| {
        args.extend(["--nats-ca".into(), ca.cert.display().to_string()]);
        args
    };
    let mut logged_in = node(dir, "node0", &urls, &with_ca(login));
    let http = logged_in.wait_ready().http;
    wait_served_at(http);
    let now = crate::support::unix_now();
    let line = format!("login value=7 {now}\n");
    let (status, text) = request(http, "POST", "/write?precision=s", &[], line.as_bytes());
    assert_eq!(status, 204, "{text}");
    let path = format!(
        "/api/v1/query?series=login.value&tier=1m&from={}&to={}",
        now - 60,
        now + 60
    );
    eventually("the write read back", || {
        let answer = get_json(http, &path)?;
        let values: Vec<f64> = (answer["points"].as_array().ok_or("no points")?.iter())
            .filter_map(|p| p[1].as_f64())
            .collect();
        (values == [7.0]).then_some(()).ok_or(format!("{answer}"))
    });

    let log = refused_at_start(
        node(dir, "refused", &urls, &with_ca(refused)),
        &dir.join("refused.log"),
    );
    assert!(log.contains("refused this node's credentials"), "{log}");
    drop(logged_in);
    drop(nats);
}

#[test]
fn a_node_logs_in_to_nats_with_a_token() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let token = "nats-token-56";
    let (good, other) = (
        write(dir, "nats.token", &format!("{token}\n")),
        write(dir, "other.token", "not-the-token"),
    );
    a_node_logs_in(
        dir,
        NatsAuthorization::Token(token.into()),
        NatsLogin::Token(token.into()),
        vec!["--nats-token-file".into(), good],
        vec!["--nats-token-file".into(), other],
    );
}

#[test]
fn a_node_logs_in_to_nats_with_an_nkey_seed() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let (nkey, stranger) = (nkeys::KeyPair::new_user(), nkeys::KeyPair::new_user());
    let (good, other) = (
        write(dir, "nats.nkey", &nkey.seed().unwrap()),
        write(dir, "other.nkey", &stranger.seed().unwrap()),
    );
    a_node_logs_in(
        dir,
        NatsAuthorization::Users {
            users: vec![("harness".into(), "harness-password".into())],
            nkeys: vec![nkey.public_key()],
        },
        NatsLogin::Password("harness".into(), "harness-password".into()),
        vec!["--nats-nkey-file".into(), good],
        vec!["--nats-nkey-file".into(), other],
    );
}

#[test]
fn a_node_logs_in_to_nats_with_a_creds_file() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let (operator, stranger) = (NatsOperator::new(), NatsOperator::new());
    let (harness, good, other) = (
        dir.join("harness.creds"),
        dir.join("node.creds"),
        dir.join("other.creds"),
    );
    operator.creds(&harness, "harness");
    operator.creds(&good, "node");
    // A user of an account the servers do not know, under an operator they do not trust.
    stranger.creds(&other, "stranger");
    a_node_logs_in(
        dir,
        NatsAuthorization::Operator(operator),
        NatsLogin::Creds(harness),
        vec!["--nats-creds".into(), good.display().to_string()],
        vec!["--nats-creds".into(), other.display().to_string()],
    );
}
