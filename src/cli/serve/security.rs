//! The security flags of `serve` and `demo` (part of [`crate::cli::Listen`]): tokens by role,
//! read from files or the environment so they never show in `ps`, and what they make of
//! them for the server.

use std::path::PathBuf;

use clap::Args;

use std::sync::Arc;

use crate::error::Result;
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

    /// The scheme of the HTTP listener's URLs.
    pub fn scheme(&self) -> &'static str {
        if self.tls_cert.is_some() {
            "https"
        } else {
            "http"
        }
    }
}
