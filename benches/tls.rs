//! What TLS costs on the HTTP listener: `tierdb serve` twice, plain and with `--tls-cert`
//! (a certificate made here with rcgen), asked from this process. Measures a request on a
//! new connection (plain; TLS with a full handshake; TLS resuming a session, as a client
//! that keeps its configuration does) and the upload rate of 16 MiB Influx bodies.
//!
//! `cargo bench --bench tls`. Prints figures.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Instant;

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

#[path = "server_support.rs"]
#[allow(dead_code)]
mod server_support;

const REQUESTS: usize = 300;
const BODY_BYTES: usize = 16 << 20;
const BODIES: usize = 4;

/// A CA and a certificate for 127.0.0.1 in `dir`: (CA, cert chain, key) paths.
fn certificates(dir: &std::path::Path) -> [std::path::PathBuf; 3] {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    let paths = ["ca.pem", "cert.pem", "key.pem"].map(|name| dir.join(name));
    std::fs::write(&paths[0], ca.pem()).unwrap();
    std::fs::write(&paths[1], cert.pem() + &ca.pem()).unwrap();
    std::fs::write(&paths[2], key.serialize_pem()).unwrap();
    paths
}

fn client(ca: &std::path::Path, resume: bool) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(ca).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    if !resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    Arc::new(config)
}

/// One request on a new connection (TLS with `tls`); the answer's status line.
fn exchange(
    addr: SocketAddr,
    tls: Option<&Arc<rustls::ClientConfig>>,
    head: &str,
    body: &[u8],
) -> String {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut answer = Vec::new();
    match tls {
        None => {
            let mut s = tcp;
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(body).unwrap();
            s.read_to_end(&mut answer).unwrap();
        }
        Some(config) => {
            let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
            let conn = rustls::ClientConnection::new(Arc::clone(config), name).unwrap();
            let mut s = rustls::StreamOwned::new(conn, tcp);
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(body).unwrap();
            let _ = s.read_to_end(&mut answer);
        }
    }
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let [ca, cert, key] = certificates(certs.path());
    let plain = server_support::start();
    let tls = server_support::start_with(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let (full, resumed) = (client(&ca, false), client(&ca, true));
    let get = "GET /api/v1/tiers HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n";
    for (what, addr, config) in [
        ("plain", plain.http, None),
        ("TLS, full handshake", tls.http, Some(&full)),
        ("TLS, resumed session", tls.http, Some(&resumed)),
    ] {
        assert!(exchange(addr, config, get, b"").contains("200"));
        let started = Instant::now();
        for _ in 0..REQUESTS {
            exchange(addr, config, get, b"");
        }
        let each = started.elapsed().as_secs_f64() / REQUESTS as f64;
        println!(
            "GET /api/v1/tiers on a new connection, {what}: {:.0} µs",
            each * 1e6
        );
    }

    let now = chrono::Utc::now().timestamp();
    let mut body = Vec::with_capacity(BODY_BYTES);
    let mut i = 0usize;
    while body.len() < BODY_BYTES {
        writeln!(body, "bench,host=h{} value={i} {now}", i % 100).unwrap();
        i += 1;
    }
    let head = format!(
        "POST /write?precision=s HTTP/1.1\r\nHost: b\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    for (what, addr, config) in [
        ("plain", plain.http, None),
        ("TLS", tls.http, Some(&resumed)),
    ] {
        let status = exchange(addr, config, &head, &body);
        assert!(status.contains("204"), "{status}");
        let started = Instant::now();
        for _ in 0..BODIES {
            exchange(addr, config, &head, &body);
        }
        let secs = started.elapsed().as_secs_f64();
        let mb = (BODIES * body.len()) as f64 / 1e6;
        println!(
            "POST /write, 16 MiB bodies of {} lines, {what}: {:.0} MB/s ({:.2} s a body)",
            i,
            mb / secs,
            secs / BODIES as f64
        );
    }
}
