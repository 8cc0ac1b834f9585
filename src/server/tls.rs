//! TLS for the HTTP listener and for the requests cluster nodes send each other, with rustls
//! (ring's provider; no OpenSSL): certificates and keys read from PEM files, TLS 1.2 and 1.3
//! only, and optional client-certificate authentication (mTLS) against a CA file.
//!
//! The server's certificate is reloaded without a restart: on SIGHUP, and when the
//! certificate, key or client CA file changes (checked every [`RELOAD_POLL`]). A reload that
//! fails (a half-written file, a key that does not match) keeps the configuration in force
//! and is logged and counted; new connections take the new configuration, open ones keep
//! theirs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::sync::watch;

use crate::error::{Error, Result};

/// How often the certificate files are checked for a change.
pub const RELOAD_POLL: Duration = Duration::from_secs(2);

/// TLS 1.3 and 1.2; rustls has nothing older.
static VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// ring's provider, named rather than taken from the process default, so a program linking
/// two providers (the tests do) still builds its configurations.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The files of the HTTP listener's TLS.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The certificate chain, PEM, leaf first.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// When set, every client must present a certificate signed by a CA in this PEM file
    /// (mTLS).
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
    }
}

/// Reads the certificates of a PEM file.
///
/// # Errors
/// [`Error::Security`] naming the file when it cannot be read or holds no certificate.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::Security(format!("{}: reading certificates: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Security(format!(
            "{}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

/// Reads the private key of a PEM file.
///
/// # Errors
/// [`Error::Security`] naming the file when it cannot be read or holds no key.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        Error::Security(format!(
            "{}: reading a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}",
            path.display()
        ))
    })
}

/// The CA certificates of a PEM file, as trust roots.
///
/// # Errors
/// [`Error::Security`] naming the file when it holds no usable certificate.
pub fn read_roots(path: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots.add(cert).map_err(|e| {
            Error::Security(format!(
                "{}: not a usable CA certificate: {e}",
                path.display()
            ))
        })?;
    }
    Ok(roots)
}

/// The server configuration `files` describe, speaking HTTP/1.1 over TLS 1.2 or 1.3.
///
/// # Errors
/// [`Error::Security`] naming the file at fault, or saying the key does not match the
/// certificate.
pub fn server_config(files: &TlsFiles) -> Result<ServerConfig> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(VERSIONS)
        .map_err(|e| Error::Security(format!("TLS versions: {e}")))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(read_roots(ca)?), provider)
                    .build()
                    .map_err(|e| Error::Security(format!("{}: client CA: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(read_certs(&files.cert)?, read_key(&files.key)?)
        .map_err(|e| {
            Error::Security(format!(
                "{} with {}: {e}",
                files.cert.display(),
                files.key.display()
            ))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A client configuration trusting only the CAs of `ca`, presenting `identity` (certificate
/// chain and key files) when given, for servers that require client certificates.
///
/// # Errors
/// [`Error::Security`] naming the file at fault.
pub fn client_config(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<ClientConfig> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| Error::Security(format!("TLS versions: {e}")))?
        .with_root_certificates(read_roots(ca)?);
    match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
            .map_err(|e| {
                Error::Security(format!("{} with {}: {e}", cert.display(), key.display()))
            }),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// Handshakes and reloads of the listener's TLS, for `/metrics`.
#[derive(Default)]
pub struct TlsCounters {
    /// Connections that spoke plain HTTP to the TLS port.
    pub plain_http: AtomicU64,
    /// Handshakes that failed (a client refusing our certificate, a client certificate
    /// refused, a protocol error) or did not finish within the header timeout.
    pub handshake_failed: AtomicU64,
    /// Reloads that took effect.
    pub reloads: AtomicU64,
    /// Reloads refused; the configuration in force stayed.
    pub reload_failures: AtomicU64,
}

/// The HTTP listener's TLS: the configuration in force, reloaded from its files.
pub struct ServerTls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// The files' modification times at the last load attempt.
    stamps: Mutex<Vec<Option<SystemTime>>>,
    /// Handshake and reload counts.
    pub counters: TlsCounters,
}

impl ServerTls {
    /// Loads `files`.
    ///
    /// # Errors
    /// As [`server_config`].
    pub fn load(files: TlsFiles) -> Result<ServerTls> {
        let stamps = stamps(&files);
        let config = server_config(&files)?;
        Ok(ServerTls {
            files,
            current: RwLock::new(Arc::new(config)),
            stamps: Mutex::new(stamps),
            counters: TlsCounters::default(),
        })
    }

    /// The files it loads from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// An acceptor with the configuration in force.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let config = self.current.read().unwrap_or_else(|e| e.into_inner());
        tokio_rustls::TlsAcceptor::from(Arc::clone(&config))
    }

    /// Reads the files again and puts the new configuration in force; on failure the old
    /// one stays.
    ///
    /// # Errors
    /// As [`server_config`].
    pub fn reload(&self) -> Result<()> {
        *self.stamps.lock().unwrap_or_else(|e| e.into_inner()) = stamps(&self.files);
        match server_config(&self.files) {
            Ok(config) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
                self.counters.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                Ok(())
            }
            Err(e) => {
                self.counters
                    .reload_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "TLS reload refused; the certificate in force stays");
                Err(e)
            }
        }
    }

    /// Whether a file changed since the last load attempt.
    fn changed(&self) -> bool {
        *self.stamps.lock().unwrap_or_else(|e| e.into_inner()) != stamps(&self.files)
    }

    /// Reloads on SIGHUP and when a file changes, until `shutdown` flips.
    pub(crate) async fn watch(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(hangup) => Some(hangup),
            Err(e) => {
                tracing::warn!(error = %e, "no SIGHUP handler: TLS reloads only on file changes");
                None
            }
        };
        let mut poll = tokio::time::interval(RELOAD_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let hung_up = async {
                match &mut hangup {
                    Some(hangup) => hangup.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = hung_up => {
                    tracing::info!("SIGHUP: reloading the TLS certificate");
                    let _ = self.reload();
                }
                _ = poll.tick() => {
                    if self.changed() {
                        let _ = self.reload();
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// The modification times of `files` (`None` for one that cannot be read now).
fn stamps(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    files
        .paths()
        .map(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok())
        .collect()
}
