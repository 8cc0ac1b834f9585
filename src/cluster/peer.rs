//! Asking another node: one HTTP/1.1 request with a JSON body to a peer's internal endpoint,
//! answered with JSON, or a download of a partition's files into a local file. A fresh
//! connection per request keeps it simple; peers are few and a fan-out sends one request to
//! each. When the nodes serve HTTPS, the connection is TLS through the node's connector
//! (trusting `--peer-ca`, presenting the node's certificate when peers require one).

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{header, Method, Request, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::error::Error;
use crate::error::Result;

/// How a node reaches its peers' HTTP: plain, or TLS with this client configuration.
pub(crate) type PeerTls = Option<std::sync::Arc<rustls::ClientConfig>>;

/// The internal endpoint every cluster node serves for its peers' fan-out reads.
pub(crate) const PARTIAL_PATH: &str = "/internal/v1/partial";

/// The internal endpoint a partition's files are copied from: `GET <this>/<partition>`
/// ([`super::snapshot`]).
pub(crate) const SNAPSHOT_PATH: &str = "/internal/v1/snapshot";

/// What a peer answered that was not a success: its status and its error text.
#[derive(Debug)]
pub(crate) struct PeerRefusal {
    /// The HTTP status.
    pub status: StatusCode,
    /// The `error` field of its JSON answer, or the raw body.
    pub message: String,
}

/// Posts `body` as JSON to `path` on the node at `addr` (host:port), with the cluster's
/// bearer `token` if there is one, and decodes its JSON answer; a refusal (an error status)
/// comes back as [`PeerRefusal`].
///
/// # Errors
/// [`Error::Cluster`] naming the peer when it cannot be reached within `timeout`, or answers
/// something that is not the expected JSON.
pub(crate) async fn ask<T: DeserializeOwned>(
    addr: &str,
    path: &str,
    body: &impl Serialize,
    token: Option<&str>,
    tls: &PeerTls,
    timeout: Duration,
) -> Result<std::result::Result<T, PeerRefusal>> {
    let payload = serde_json::to_vec(body)
        .map_err(|e| Error::Cluster(format!("encoding a request to {addr}: {e}")))?;
    exchange(Method::POST, addr, path, payload, (token, tls), timeout).await
}

/// `GET path` on the node at `addr`, decoded as [`ask`] decodes.
///
/// # Errors
/// As [`ask`].
pub(crate) async fn get<T: DeserializeOwned>(
    addr: &str,
    path: &str,
    token: Option<&str>,
    tls: &PeerTls,
    timeout: Duration,
) -> Result<std::result::Result<T, PeerRefusal>> {
    exchange(Method::GET, addr, path, Vec::new(), (token, tls), timeout).await
}

/// `GET path` on the node at `addr`, its body written to the file `dest` (created or
/// truncated) as it arrives, so that a large body never sits in memory; returns the bytes
/// written. A refusal comes back as [`PeerRefusal`] and leaves `dest` empty.
///
/// # Errors
/// [`Error::Cluster`] naming the peer when it cannot be reached, or the body is not whole
/// within `timeout`; [`Error::Io`] naming `dest`.
pub(crate) async fn download(
    addr: &str,
    path: &str,
    (token, tls): (Option<&str>, &PeerTls),
    timeout: Duration,
    dest: &Path,
) -> Result<std::result::Result<u64, PeerRefusal>> {
    let mut file = tokio::fs::File::create(dest)
        .await
        .map_err(|e| Error::io(dest, e))?;
    let transfer = async {
        let (response, _connection) = send(Method::GET, addr, path, Vec::new(), (token, tls))
            .await
            .map_err(|e| Error::Cluster(format!("asking the node at {addr}: {e}")))?;
        let status = response.status();
        let mut body = response.into_body();
        if !status.is_success() {
            let bytes = body
                .collect()
                .await
                .map_err(|e| Error::Cluster(format!("reading the node at {addr}: {e}")))?
                .to_bytes();
            return Ok(Err(refusal(status, &bytes)));
        }
        let mut written = 0u64;
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| Error::Cluster(format!("reading the node at {addr}: {e}")))?;
            if let Ok(data) = frame.into_data() {
                file.write_all(&data)
                    .await
                    .map_err(|e| Error::io(dest, e))?;
                written += data.len() as u64;
            }
        }
        file.sync_all().await.map_err(|e| Error::io(dest, e))?;
        Ok(Ok(written))
    };
    tokio::time::timeout(timeout, transfer).await.map_err(|_| {
        Error::Cluster(format!(
            "node at {addr} did not send {path} within {timeout:?}"
        ))
    })?
}

/// The name a peer's certificate must carry: the host of `addr` (`host:port`, `[v6]:port`).
fn server_name(addr: &str) -> std::io::Result<rustls::pki_types::ServerName<'static>> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| std::io::Error::other(format!("{host:?} is not a TLS server name: {e}")))
}

/// A hyper HTTP/1 client connection over `io`; its task is aborted when dropped.
async fn client<S>(io: S) -> std::io::Result<(SendRequest, AbortOnDrop)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(std::io::Error::other)?;
    Ok((sender, AbortOnDrop(tokio::spawn(connection))))
}

/// The sending half of a peer connection.
type SendRequest = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Opens a connection to `addr` (TLS when `tls` is set) and sends one request; the
/// response, and the connection's task, which is aborted when dropped, so no socket to a
/// hung peer outlives its request.
async fn send(
    method: Method,
    addr: &str,
    path: &str,
    payload: Vec<u8>,
    (token, tls): (Option<&str>, &PeerTls),
) -> std::io::Result<(hyper::Response<hyper::body::Incoming>, AbortOnDrop)> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut sender, connection) = match tls {
        Some(config) => {
            let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::clone(config));
            let stream = connector.connect(server_name(addr)?, stream).await?;
            client(stream).await?
        }
        None => client(stream).await?,
    };
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, addr)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Full::new(Bytes::from(payload)))
        .map_err(std::io::Error::other)?;
    let response = sender
        .send_request(request)
        .await
        .map_err(std::io::Error::other)?;
    Ok((response, connection))
}

async fn exchange<T: DeserializeOwned>(
    method: Method,
    addr: &str,
    path: &str,
    payload: Vec<u8>,
    access: (Option<&str>, &PeerTls),
    timeout: Duration,
) -> Result<std::result::Result<T, PeerRefusal>> {
    let exchange = async {
        let (response, connection) = send(method, addr, path, payload, access).await?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        drop(connection);
        std::io::Result::Ok((status, bytes))
    };
    let (status, bytes) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| Error::Cluster(format!("node at {addr} did not answer within {timeout:?}")))?
        .map_err(|e| Error::Cluster(format!("asking the node at {addr}: {e}")))?;
    if !status.is_success() {
        return Ok(Err(refusal(status, &bytes)));
    }
    serde_json::from_slice(&bytes)
        .map(Ok)
        .map_err(|e| Error::Cluster(format!("the node at {addr} answered unreadable JSON: {e}")))
}

/// A refusal from its status and body: the `error` field of a JSON body, or the raw body.
fn refusal(status: StatusCode, bytes: &[u8]) -> PeerRefusal {
    let message = serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(bytes).into_owned());
    PeerRefusal { status, message }
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<std::result::Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
