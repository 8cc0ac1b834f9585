//! The security flags of `serve` and `demo` (part of [`crate::cli::Listen`]): tokens by role,
//! read from files or the environment so they never show in `ps`, and what they make of
//! them for the server.

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Args;

use std::sync::Arc;

#[cfg(feature = "cluster")]
use crate::cluster::nats_connect::NatsAuth;
#[cfg(feature = "cluster")]
use crate::error::Error;
use crate::error::Result;
use crate::server::allowlist::{Allowlist, Allowlists};
use crate::server::auth::{Credentials, Role};
use crate::server::tls::{ServerTls, TlsFiles};

/// Environment variables holding one token each, by role (`None`: every role).
const TOKEN_VARIABLES: [(Option<Role>, &str); 3] = [
    (Some(Role::Read), "TIERDB_READ_TOKEN"),
    (Some(Role::Write), "TIERDB_WRITE_TOKEN"),
    (Some(Role::Admin), "TIERDB_ADMIN_TOKEN"),
];

/// Tokens by role, TLS and allowlists.
#[derive(Args, Debug, Clone, Default)]
pub struct SecurityArgs {
    /// A file of tokens granting every role, one a line (as --token, without showing it in
    /// `ps`).
    #[arg(long, env = "TIERDB_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// A file of read tokens, one a line: queries, render, find, PromQL, /metrics, the
    /// dashboard. Or one token in TIERDB_READ_TOKEN.
    #[arg(long, env = "TIERDB_READ_TOKEN_FILE", value_name = "FILE")]
    pub read_token_file: Option<PathBuf>,
    /// A file of write tokens, one a line: every ingest endpoint. Or one token in
    /// TIERDB_WRITE_TOKEN.
    #[arg(long, env = "TIERDB_WRITE_TOKEN_FILE", value_name = "FILE")]
    pub write_token_file: Option<PathBuf>,
    /// A file of admin tokens, one a line: deletes and the cluster's internal endpoints, and
    /// reads and writes too (cluster nodes send it to each other). Or one token in
    /// TIERDB_ADMIN_TOKEN.
    #[arg(long, env = "TIERDB_ADMIN_TOKEN_FILE", value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Serve HTTP over TLS with this certificate chain (PEM, leaf first); needs --tls-key.
    /// Reloaded on SIGHUP and when the file changes. TLS 1.2 and 1.3 only.
    #[arg(
        long,
        env = "TIERDB_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        env = "TIERDB_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Require every HTTP client to present a certificate signed by a CA of this PEM file
    /// (mTLS). In a cluster, nodes present their --tls-cert to each other.
    #[arg(
        long,
        env = "TIERDB_TLS_CLIENT_CA",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,
    /// Cluster mode: reach the other nodes over HTTPS, trusting the CAs of this PEM file
    /// (needed when the nodes serve --tls-cert).
    #[arg(long, env = "TIERDB_PEER_CA", value_name = "FILE")]
    pub peer_ca: Option<PathBuf>,
    /// Admit Graphite senders (TCP and UDP) only from these networks (CIDRs or addresses,
    /// comma-separated: 10.0.0.0/8,192.168.1.7). Graphite has no authentication; without
    /// this, anyone who reaches the port can write.
    #[arg(
        long,
        env = "TIERDB_GRAPHITE_ALLOW",
        value_name = "CIDRS",
        value_delimiter = ','
    )]
    pub graphite_allow: Vec<String>,
    /// Admit StatsD senders only from these networks (as --graphite-allow).
    #[arg(
        long,
        env = "TIERDB_STATSD_ALLOW",
        value_name = "CIDRS",
        value_delimiter = ','
    )]
    pub statsd_allow: Vec<String>,
    /// Admit HTTP clients only from these networks (as --graphite-allow), before TLS and
    /// tokens.
    #[arg(
        long,
        env = "TIERDB_HTTP_ALLOW",
        value_name = "CIDRS",
        value_delimiter = ','
    )]
    pub http_allow: Vec<String>,
}

impl SecurityArgs {
    /// The server's credentials: `token` (`--token`, every role), the token files, and the
    /// `TIERDB_{READ,WRITE,ADMIN}_TOKEN` variables.
    ///
    /// # Errors
    /// [`crate::error::Error::Io`] or [`crate::error::Error::Security`] naming the file or
    /// variable at fault.
    pub fn credentials(&self, token: Option<&str>) -> Result<Credentials> {
        let mut credentials = Credentials::none();
        if let Some(token) = token {
            credentials.add(None, token, "--token (TIERDB_TOKEN)")?;
        }
        let files = [
            (None, &self.token_file),
            (Some(Role::Read), &self.read_token_file),
            (Some(Role::Write), &self.write_token_file),
            (Some(Role::Admin), &self.admin_token_file),
        ];
        for (role, file) in files {
            if let Some(path) = file {
                credentials.add_file(role, path)?;
            }
        }
        for (role, variable) in TOKEN_VARIABLES {
            if let Ok(token) = std::env::var(variable) {
                credentials.add(role, token.trim(), variable)?;
            }
        }
        Ok(credentials)
    }
}

impl SecurityArgs {
    /// The HTTP listener's TLS, when --tls-cert is given.
    ///
    /// # Errors
    /// [`crate::error::Error::Security`] naming the file at fault.
    pub fn tls(&self) -> Result<Option<Arc<ServerTls>>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
        };
        Ok(Some(Arc::new(ServerTls::load(files)?)))
    }

    /// How a cluster node reaches its peers: TLS trusting --peer-ca, presenting --tls-cert
    /// when the nodes require client certificates (--tls-client-ca).
    ///
    /// # Errors
    /// [`Error::Security`] when the node serves HTTPS without --peer-ca, or naming the file
    /// at fault.
    #[cfg(feature = "cluster")]
    pub(crate) fn peer_tls(&self) -> Result<crate::cluster::peer::PeerTls> {
        let Some(ca) = &self.peer_ca else {
            if self.tls_cert.is_some() {
                return Err(Error::Security(
                    "--tls-cert in cluster mode: the nodes reach each other over HTTPS, so say \
                     with --peer-ca which CA signs their certificates"
                        .into(),
                ));
            }
            return Ok(None);
        };
        let identity = match (&self.tls_client_ca, &self.tls_cert, &self.tls_key) {
            (Some(_), Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            _ => None,
        };
        let config = crate::server::tls::client_config(ca, identity)?;
        Ok(Some(Arc::new(config)))
    }

    /// The listeners' allowlists.
    ///
    /// # Errors
    /// [`crate::error::Error::Security`] naming the flag and the entry that is not a network.
    pub fn allowlists(&self) -> Result<Allowlists> {
        let list = |flag: &str, entries: &[String]| {
            (!entries.is_empty())
                .then(|| Allowlist::parse(flag, entries))
                .transpose()
        };
        let mut allowlists = Allowlists::default();
        allowlists.graphite = list("--graphite-allow", &self.graphite_allow)?;
        allowlists.statsd = list("--statsd-allow", &self.statsd_allow)?;
        allowlists.http = list("--http-allow", &self.http_allow)?;
        Ok(allowlists)
    }

    /// What to warn about at start, in plain words, each naming the flag that fixes it: an
    /// HTTP listener (`http`, as bound) that other machines can reach with no token, or with
    /// tokens but no TLS (they cross the network in clear text); and a token file or TLS key
    /// every user of the machine can read (`readable_by_all`).
    pub fn startup_warnings(&self, http: SocketAddr, credentials: &Credentials) -> Vec<String> {
        let mut warnings = Vec::new();
        if !http.ip().is_loopback() {
            let who = if self.http_allow.is_empty() {
                "anyone who reaches it"
            } else {
                "anyone in the networks --http-allow admits"
            };
            let local = format!("--http 127.0.0.1:{}", http.port());
            if !credentials.enabled() {
                warnings.push(format!(
                    "--http {http} is reachable from other machines and no token is set: \
                     {who} can read, write and delete every series. Set tokens with \
                     --token-file (or --read-token-file, --write-token-file and \
                     --admin-token-file, or TIERDB_TOKEN), or listen only here with {local}"
                ));
            } else if self.tls_cert.is_none() {
                warnings.push(format!(
                    "--http {http} is reachable from other machines over plain HTTP: the \
                     tokens cross the network in clear text, for anyone on the way to copy. \
                     Serve HTTPS with --tls-cert and --tls-key, or listen only here with \
                     {local} behind a TLS proxy"
                ));
            }
        }
        let files = [
            ("--token-file", &self.token_file),
            ("--read-token-file", &self.read_token_file),
            ("--write-token-file", &self.write_token_file),
            ("--admin-token-file", &self.admin_token_file),
            ("--tls-key", &self.tls_key),
        ];
        warnings.extend(readable_by_all_of(&files));
        warnings
    }

    /// The scheme of the HTTP listener's URLs.
    pub fn scheme(&self) -> &'static str {
        if self.tls_cert.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// What the NATS servers of a cluster require: credentials and TLS. Secrets come from files
/// or the environment, never from the command line.
#[cfg(feature = "cluster")]
#[derive(Args, Debug, Clone, Default)]
pub struct NatsArgs {
    /// NATS user name; its password from --nats-password-file or TIERDB_NATS_PASSWORD.
    #[arg(long, env = "TIERDB_NATS_USER", value_name = "NAME")]
    pub nats_user: Option<String>,
    /// A file holding the password of --nats-user.
    #[arg(long, env = "TIERDB_NATS_PASSWORD_FILE", value_name = "FILE")]
    pub nats_password_file: Option<PathBuf>,
    /// A file holding the NATS token (or TIERDB_NATS_TOKEN).
    #[arg(long, env = "TIERDB_NATS_TOKEN_FILE", value_name = "FILE")]
    pub nats_token_file: Option<PathBuf>,
    /// A file holding an nkey seed (SU...) whose public key the servers know (or
    /// TIERDB_NATS_NKEY).
    #[arg(long, env = "TIERDB_NATS_NKEY_FILE", value_name = "FILE")]
    pub nats_nkey_file: Option<PathBuf>,
    /// A NATS creds file (a user JWT and its seed, from `nsc`).
    #[arg(long, env = "TIERDB_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// Connect to NATS over TLS, trusting the CAs of this PEM file.
    #[arg(long, env = "TIERDB_NATS_CA", value_name = "FILE")]
    pub nats_ca: Option<PathBuf>,
    /// A client certificate (PEM) for NATS servers that verify clients; needs --nats-key.
    #[arg(
        long,
        env = "TIERDB_NATS_CERT",
        value_name = "FILE",
        requires = "nats_key"
    )]
    pub nats_cert: Option<PathBuf>,
    /// The private key of --nats-cert.
    #[arg(
        long,
        env = "TIERDB_NATS_KEY",
        value_name = "FILE",
        requires = "nats_cert"
    )]
    pub nats_key: Option<PathBuf>,
    /// Refuse NATS servers that do not speak TLS (implied by --nats-ca and --nats-cert).
    #[arg(long, env = "TIERDB_NATS_TLS")]
    pub nats_tls: bool,
}

/// A warning when the secret file `path` (given with `flag`) can be read by every user of
/// the machine (mode `o+r`, such as 0644): whoever reads it holds the secret. ssh and
/// PostgreSQL refuse such key files; a warning lets a running setup start while saying what
/// to fix. A file readable by its group (0640) is the usual way to share it with the server's
/// group, and is not warned about.
pub(crate) fn readable_by_all(flag: &str, path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o004 != 0).then(|| {
        format!(
            "{flag} {}: every user of this machine can read it (mode {mode:04o}); make it \
             private with chmod 600 (or 640, owned by a group the server runs in)",
            path.display()
        )
    })
}

/// [`readable_by_all`]'s warnings for those of `files` (each with its flag) that are given.
fn readable_by_all_of(files: &[(&str, &Option<PathBuf>)]) -> Vec<String> {
    files
        .iter()
        .filter_map(|(flag, path)| readable_by_all(flag, path.as_ref()?))
        .collect()
}

/// A secret from `file` (its content, trimmed) or else the variable `variable`.
#[cfg(feature = "cluster")]
fn secret(file: &Option<PathBuf>, flag: &str, variable: &str) -> Result<Option<String>> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let text = text.trim();
        if text.is_empty() {
            return Err(Error::Security(format!(
                "{flag} {}: the file is empty",
                path.display()
            )));
        }
        return Ok(Some(text.to_owned()));
    }
    Ok(std::env::var(variable)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty()))
}

#[cfg(feature = "cluster")]
impl NatsArgs {
    /// The secret files of these flags that every user of the machine can read
    /// ([`readable_by_all`]).
    pub(crate) fn file_warnings(&self) -> Vec<String> {
        let files = [
            ("--nats-password-file", &self.nats_password_file),
            ("--nats-token-file", &self.nats_token_file),
            ("--nats-nkey-file", &self.nats_nkey_file),
            ("--nats-creds", &self.nats_creds),
            ("--nats-key", &self.nats_key),
        ];
        readable_by_all_of(&files)
    }

    /// The credentials and TLS these flags give.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Security`] naming the file at fault.
    pub(crate) fn auth(&self) -> Result<NatsAuth> {
        Ok(NatsAuth {
            user: self.nats_user.clone(),
            password: secret(
                &self.nats_password_file,
                "--nats-password-file",
                "TIERDB_NATS_PASSWORD",
            )?,
            token: secret(
                &self.nats_token_file,
                "--nats-token-file",
                "TIERDB_NATS_TOKEN",
            )?,
            nkey_seed: secret(&self.nats_nkey_file, "--nats-nkey-file", "TIERDB_NATS_NKEY")?,
            creds: self.nats_creds.clone(),
            ca: self.nats_ca.clone(),
            client_cert: self.nats_cert.clone().zip(self.nats_key.clone()),
            require_tls: self.nats_tls,
        })
    }
}
