//! Asking another node: one HTTP/1.1 request with a JSON body to a peer's internal endpoint,
//! answered with JSON. A fresh connection per request keeps it simple; peers are few and a
//! fan-out sends one request to each.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{header, Method, Request, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::TcpStream;

use crate::{Error, Result};

/// The internal endpoint every cluster node serves for its peers' fan-out reads.
pub const PARTIAL_PATH: &str = "/internal/v1/partial";

/// What a peer answered that was not a success: its status and its error text.
#[derive(Debug)]
pub struct PeerRefusal {
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
pub async fn ask<T: DeserializeOwned>(
    addr: &str,
    path: &str,
    body: &impl Serialize,
    token: Option<&str>,
    timeout: Duration,
) -> Result<std::result::Result<T, PeerRefusal>> {
    let payload = serde_json::to_vec(body)
        .map_err(|e| Error::Cluster(format!("encoding a request to {addr}: {e}")))?;
    exchange(Method::POST, addr, path, payload, token, timeout).await
}

/// `GET path` on the node at `addr`, decoded as [`ask`] decodes.
///
/// # Errors
/// As [`ask`].
pub async fn get<T: DeserializeOwned>(
    addr: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<std::result::Result<T, PeerRefusal>> {
    exchange(Method::GET, addr, path, Vec::new(), token, timeout).await
}

async fn exchange<T: DeserializeOwned>(
    method: Method,
    addr: &str,
    path: &str,
    payload: Vec<u8>,
    token: Option<&str>,
    timeout: Duration,
) -> Result<std::result::Result<T, PeerRefusal>> {
    let exchange = async {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(std::io::Error::other)?;
        // Aborted when the exchange ends, answered or timed out, so no socket to a hung
        // peer outlives its request.
        let connection = AbortOnDrop(tokio::spawn(connection));
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
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        return Ok(Err(PeerRefusal { status, message }));
    }
    serde_json::from_slice(&bytes)
        .map(Ok)
        .map_err(|e| Error::Cluster(format!("the node at {addr} answered unreadable JSON: {e}")))
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<std::result::Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
