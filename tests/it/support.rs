//! Support code shared by the integration tests: child processes ([`process`]), a minimal
//! HTTP/1.1 client ([`http`]), a server in the test process ([`server`]) and small helpers.

pub(crate) mod http;
pub(crate) mod process;
pub(crate) mod server;
pub(crate) mod tls;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in unix seconds.
pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// Creates (or truncates) `path`, for a child's stdout or stderr.
pub(crate) fn file(path: &Path) -> std::fs::File {
    std::fs::File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()))
}
