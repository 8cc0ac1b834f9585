//! Errors of the HTTP API: [`ApiError`], how the engine's [`Error`] maps onto it, and
//! `blocking`, which runs a long read off the async workers and answers its failure as one.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::error::Error;
use crate::error::Result;

/// An error answer: client errors say what was wrong with the request; internal errors are
/// logged and answered generically.
#[derive(Debug)]
pub enum ApiError {
    /// 400, naming the parameter or input at fault.
    BadRequest(String),
    /// 404.
    NotFound(String),
    /// 413: a body past the server's limit (as sent, or once inflated).
    PayloadTooLarge(String),
    /// 415: a body in an encoding the endpoint does not read.
    UnsupportedMediaType(String),
    /// 500; the detail goes to the log only.
    Internal(String),
    /// 503: a cluster node could not get an answer from the owners it needed (or serves no
    /// such thing in cluster mode); the message says which.
    Unavailable(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, m),
            ApiError::PayloadTooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, m),
            ApiError::UnsupportedMediaType(m) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, m),
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, m),
            ApiError::Internal(detail) => {
                tracing::error!(%detail, "internal error answering a request");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; see the server log".to_string(),
                )
            }
        };
        (status, Json(serde_json::json!({ "error": message }))).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::UnknownSeries(_) | Error::UnknownSeriesAsYet { .. } => {
                ApiError::NotFound(e.to_string())
            }
            Error::UnknownTier(_) => ApiError::BadRequest(format!("tier: {e}")),
            Error::InvalidQuery(_) | Error::InvalidSeries { .. } => {
                ApiError::BadRequest(e.to_string())
            }
            Error::Cluster(_) => ApiError::Unavailable(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// Runs a read on the blocking pool: a render or aggregate over many series reads (in
/// parallel) for longer than an async worker should be held.
pub(crate) async fn blocking<T: Send + 'static>(
    read: impl FnOnce() -> Result<T> + Send + 'static,
) -> std::result::Result<T, ApiError> {
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| ApiError::Internal(format!("read task failed: {e}")))?
        .map_err(ApiError::from)
}
