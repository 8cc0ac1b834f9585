//! A PromQL evaluation's failure, typed as the Prometheus API types its errors
//! (`errorType`), so the HTTP side answers the envelope Grafana reads without guessing.

use crate::error::Error;

/// Prometheus' `errorType` of a failed query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request or the PromQL is wrong, or asks what the tiers cannot answer (HTTP 400).
    BadData,
    /// The query is valid but could not be run within the server's limits (HTTP 422).
    Execution,
    /// The query ran past the server's query timeout (HTTP 503).
    Timeout,
    /// The server cannot answer now: a cluster node reaches no owner of some partition
    /// (HTTP 503).
    Unavailable,
    /// The server failed; the detail is logged (HTTP 500).
    Internal,
}

impl ErrorKind {
    /// The `errorType` text.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::BadData => "bad_data",
            ErrorKind::Execution => "execution",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Internal => "internal",
        }
    }
}

/// A failed evaluation: its kind and a sentence saying what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryError {
    /// Prometheus' error type.
    pub kind: ErrorKind,
    /// What went wrong, naming the function, argument or limit.
    pub message: String,
}

impl QueryError {
    /// A `bad_data` error.
    pub fn bad_data(message: impl Into<String>) -> QueryError {
        QueryError {
            kind: ErrorKind::BadData,
            message: message.into(),
        }
    }

    /// An `execution` error.
    pub fn execution(message: impl Into<String>) -> QueryError {
        QueryError {
            kind: ErrorKind::Execution,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

/// An engine error met while reading: a refused read budget is `execution` (the query is
/// fine, the server's limit is not), a query the read side refuses is `bad_data`, a cluster
/// that cannot reach an owner of some partition is `unavailable`, anything else is internal.
impl From<Error> for QueryError {
    fn from(e: Error) -> QueryError {
        match e {
            Error::InvalidQuery(m) if m.starts_with("read budget:") => {
                QueryError::execution(format!("{m}; the server's limit is --max-read-values"))
            }
            Error::InvalidQuery(_) | Error::UnknownTier(_) | Error::InvalidSeries { .. } => {
                QueryError::bad_data(e.to_string())
            }
            Error::Cluster(m) => QueryError {
                kind: ErrorKind::Unavailable,
                message: m,
            },
            other => QueryError {
                kind: ErrorKind::Internal,
                message: other.to_string(),
            },
        }
    }
}
