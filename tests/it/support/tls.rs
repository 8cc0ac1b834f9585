//! TLS for the end-to-end tests: a certificate authority made in the test with `rcgen`, the
//! certificates it issues written as PEM files, and a one-request HTTPS client that trusts
//! only the CA it is given.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A test certificate authority writing its files under `dir`.
pub(crate) struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    /// The CA's certificate, PEM: what clients and servers trust.
    pub cert: PathBuf,
}

/// A certificate and key the CA issued, as PEM files.
#[derive(Clone, Debug)]
pub(crate) struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How long an issued certificate is valid.
#[derive(Clone, Copy)]
pub(crate) enum Validity {
    /// From 2020 to 2100.
    Current,
    /// 2000 to 2001: expired.
    Expired,
}

impl TestCa {
    /// A new CA named `name`, its certificate written to `<dir>/<name>-ca.pem`.
    pub(crate) fn new(dir: &Path, name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let cert = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&cert, issuer.pem()).unwrap();
        TestCa {
            issuer,
            dir: dir.to_path_buf(),
            cert,
        }
    }

    /// Issues a certificate for 127.0.0.1 and localhost, good for servers and clients, to
    /// `<dir>/<name>.pem` and `<dir>/<name>.key`.
    pub(crate) fn issue(&self, name: &str, validity: Validity) -> Issued {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let (from, to) = match validity {
            Validity::Current => ((2020, 1, 1), (2100, 1, 1)),
            Validity::Expired => ((2000, 1, 1), (2001, 1, 1)),
        };
        params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
        params.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let issued = Issued {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
        };
        // The chain: the leaf, then the CA.
        std::fs::write(&issued.cert, cert.pem() + &self.issuer.pem()).unwrap();
        std::fs::write(&issued.key, key.serialize_pem()).unwrap();
        issued
    }
}

/// A client configuration trusting only `ca`, presenting `identity` when given.
pub(crate) fn client_config(ca: &Path, identity: Option<&Issued>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    Arc::new(match identity {
        Some(issued) => {
            let chain = CertificateDer::pem_file_iter(&issued.cert)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(&issued.key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    })
}

/// One HTTPS request to `addr` (as 127.0.0.1) with `config`: the status and body, or the
/// error that stopped it (a refused handshake, say).
pub(crate) fn https(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String), String> {
    let tcp =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    https_over(tcp, addr, config, method, path, headers, body)
}

/// [`https`] over `tcp`, a connection to `addr` already open (from another local address,
/// say).
pub(crate) fn https_over(
    tcp: TcpStream,
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String), String> {
    let name = ServerName::IpAddress(addr.ip().into());
    let connection =
        rustls::ClientConnection::new(Arc::clone(config), name).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let head = super::http::request_head(addr, method, path, headers, body.len());
    stream
        .write_all(head.as_bytes())
        .map_err(|e| e.to_string())?;
    stream.write_all(body).map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    match stream.read_to_end(&mut answer) {
        Ok(_) => {}
        // A server closing without close_notify after a complete answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    let (status, _, body) = super::http::parse_answer(&answer)?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}
