//! Connecting a node (or `tierdb cluster status`) to NATS with what the servers require:
//! user and password, a token, an nkey seed, a creds file (JWT and seed), and TLS with a CA
//! to trust and a client certificate. A node whose credentials or certificate the servers
//! refuse fails at start with an error saying so; one that finds no server up yet keeps
//! trying, as before (nodes may start before NATS).

use std::fmt;
use std::path::PathBuf;

use async_nats::{Client, ConnectErrorKind, ConnectOptions};

use crate::error::{Error, Result};

/// How a node authenticates to NATS and secures the connection. The secrets are held, not
/// shown: `Debug` says only which are set.
#[derive(Clone, Default)]
pub(crate) struct NatsAuth {
    /// User name, with `password`.
    pub user: Option<String>,
    /// Password of `user`.
    pub password: Option<String>,
    /// A token (the servers' `authorization { token }`).
    pub token: Option<String>,
    /// An nkey seed (`SU...`), which signs the servers' nonce.
    pub nkey_seed: Option<String>,
    /// A creds file: a user JWT and its nkey seed (decentralised auth).
    pub creds: Option<PathBuf>,
    /// CA certificates (PEM) the servers' certificates must chain to; implies TLS.
    pub ca: Option<PathBuf>,
    /// A client certificate and key (PEM) for servers that verify clients; implies TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Refuse a server that does not speak TLS.
    pub require_tls: bool,
}

impl fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsAuth")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("nkey_seed", &self.nkey_seed.as_ref().map(|_| "<set>"))
            .field("creds", &self.creds)
            .field("ca", &self.ca)
            .field("client_cert", &self.client_cert)
            .field("require_tls", &self.require_tls)
            .finish()
    }
}

impl NatsAuth {
    /// Whether the connection must be TLS.
    fn tls(&self) -> bool {
        self.require_tls || self.ca.is_some() || self.client_cert.is_some()
    }

    /// Connect options named `name` carrying these credentials.
    async fn options(&self, name: &str) -> Result<ConnectOptions> {
        let mut options = ConnectOptions::new().name(name);
        if let Some(path) = &self.creds {
            options = options
                .credentials_file(path)
                .await
                .map_err(|e| Error::Security(format!("--nats-creds {}: {e}", path.display())))?;
        }
        match (&self.user, &self.password) {
            (Some(user), Some(password)) => {
                options = options.user_and_password(user.clone(), password.clone())
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::Security(
                    "NATS: --nats-user and a password (--nats-password-file or \
                     TIERDB_NATS_PASSWORD) go together"
                        .into(),
                ))
            }
            (None, None) => {}
        }
        if let Some(token) = &self.token {
            options = options.token(token.clone());
        }
        if let Some(seed) = &self.nkey_seed {
            options = options.nkey(seed.clone());
        }
        if let Some(ca) = &self.ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.client_cert {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(options.require_tls(self.tls()))
    }
}

/// Connects to the NATS servers at `urls` (comma-separated) as `name`. A first attempt
/// tries each server once: a refusal of the credentials or the TLS setup fails at once,
/// naming what to check. When no server was reachable, the client keeps trying in the
/// background (`retry` set: a node), or the error is returned (`retry` unset: a command).
///
/// # Errors
/// [`Error::Cluster`] naming the servers and the refusal.
pub(crate) async fn connect(
    urls: &str,
    name: &str,
    auth: &NatsAuth,
    retry: bool,
) -> Result<Client> {
    // async-nats builds its TLS configuration with the process's default provider: name
    // ring's, the one this crate uses, in case a build links another.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let servers: Vec<&str> = urls.split(',').map(str::trim).collect();
    let probe = auth.options(name).await?.connect(servers.clone()).await;
    let unreachable = match probe {
        Ok(client) => return Ok(client),
        Err(e) => match e.kind() {
            ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                return Err(Error::Cluster(format!(
                    "NATS at {urls} refused this node's credentials ({e}): check --nats-user \
                     and its password, --nats-token-file, --nats-nkey-file or --nats-creds \
                     against the servers' authorization"
                )))
            }
            _ if e.kind() == ConnectErrorKind::Tls || is_tls_refusal(&e) => {
                return Err(Error::Cluster(format!(
                    "NATS at {urls}: TLS failed ({e}): check --nats-ca (the CA of the servers' \
                     certificates), --nats-cert and --nats-key, and that the servers speak TLS"
                )))
            }
            _ if !retry => {
                return Err(Error::Cluster(format!("connecting to {urls}: {e}")));
            }
            _ => e,
        },
    };
    tracing::warn!(error = %unreachable, "no NATS server reachable yet; retrying");
    auth.options(name)
        .await?
        .retry_on_initial_connect()
        .connect(servers)
        .await
        .map_err(|e| Error::Cluster(format!("connecting to {urls}: {e}")))
}

/// Whether `error` comes from a TLS handshake the other side or this one refused (a
/// certificate not trusted, a client certificate refused), which async-nats reports as an
/// I/O error: retrying cannot help.
fn is_tls_refusal(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io
                .get_ref()
                .is_some_and(|inner| inner.is::<rustls::Error>())
            {
                return true;
            }
        }
        cause = e.source();
    }
    false
}
