//! Who may call which HTTP endpoint: credentials by role (read, write, admin), the role each
//! route needs ([`required_role`], one table to extend when a route is added), the check
//! that answers 401 or 403, and the refusals counted for `/metrics`.
//!
//! - **read**: queries, aggregates, listings, Graphite's render and find, PromQL under
//!   `/prometheus`, `/metrics` and the dashboard's API calls.
//! - **write**: every ingest endpoint, and InfluxDB's `/query` (only `CREATE DATABASE`).
//! - **admin**: every `DELETE`, and the cluster's internal endpoints (`/internal/...`). An
//!   admin token also reads and writes: it is the operator's key and the one cluster nodes use
//!   between themselves.
//!
//! Once any token is configured, every API endpoint needs a credential that grants its role
//! (the dashboard's page and assets, `/ping` and `/health` stay open; they hold no data). A
//! role without a token of its own is reached only with the admin or the all-roles
//! (`--token`) token. Each role may hold several tokens (one per line of its file), so a
//! token can be rotated without a gap.
//!
//! Tokens are compared in constant time ([`subtle`]), every configured token against the
//! presented one without stopping at a match, so neither which token matched nor where two
//! tokens first differ shows in the time taken (a token's length may: use long random
//! tokens). No token is ever logged or printed: [`Credentials`]'
//! `Debug` shows only how many tokens each role holds.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use subtle::ConstantTimeEq;

use crate::error::{Error, Result};

/// What a credential may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Queries, render, find, PromQL, `/metrics`, the dashboard.
    Read,
    /// Ingest endpoints.
    Write,
    /// Deletes and the cluster's internal endpoints; grants read and write too.
    Admin,
}

impl Role {
    /// Every role, in the order `/metrics` lists them.
    pub const ALL: [Role; 3] = [Role::Read, Role::Write, Role::Admin];

    /// "a read token", "an admin token": the role in a sentence.
    fn token_phrase(self) -> &'static str {
        match self {
            Role::Read => "a read token",
            Role::Write => "a write token",
            Role::Admin => "an admin token",
        }
    }

    /// The role's name, as flags, messages and the `role` label spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }
}

/// Paths that take writes (any method: a route answers 405 for a method it does not serve).
/// `/query` is among them: it answers only `CREATE DATABASE`, which Telegraf sends with its
/// write credential before writing.
const WRITE_PATHS: &[&str] = &[
    "/write",
    "/query",
    "/api/v2/write",
    "/api/v1/write",
    "/api/v1/prom/write",
    "/v1/metrics",
];

/// Path prefixes reserved to admin credentials, whatever the method.
const ADMIN_PREFIXES: &[&str] = &["/internal/"];

/// The role a request needs: admin for every `DELETE` and the internal endpoints, write for
/// the ingest endpoints, read for everything else (reads, `/metrics`, unknown paths, which
/// then answer 404 only to a caller allowed to read).
pub fn required_role(method: &Method, path: &str) -> Role {
    if method == Method::DELETE || ADMIN_PREFIXES.iter().any(|p| path.starts_with(p)) {
        Role::Admin
    } else if WRITE_PATHS.contains(&path) {
        Role::Write
    } else {
        Role::Read
    }
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization` header the server reads (401).
    Missing,
    /// A token no role holds (401).
    Unknown,
    /// A known token whose roles do not include the one needed (403).
    WrongRole,
}

impl Refusal {
    /// Every reason, in the order `/metrics` lists them.
    pub const ALL: [Refusal; 3] = [Refusal::Missing, Refusal::Unknown, Refusal::WrongRole];

    /// The `reason` label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Unknown => "unknown",
            Refusal::WrongRole => "wrong_role",
        }
    }
}

/// The tokens of each role. Empty: no authentication (every endpoint open).
#[derive(Clone, Default)]
pub struct Credentials {
    /// Tokens granting every role (`--token`).
    all: Vec<Vec<u8>>,
    read: Vec<Vec<u8>>,
    write: Vec<Vec<u8>>,
    admin: Vec<Vec<u8>>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Counts only: a token must never reach a log.
        f.debug_struct("Credentials")
            .field("all_roles_tokens", &self.all.len())
            .field("read_tokens", &self.read.len())
            .field("write_tokens", &self.write.len())
            .field("admin_tokens", &self.admin.len())
            .finish()
    }
}

impl Credentials {
    /// No tokens: every endpoint open.
    pub fn none() -> Credentials {
        Credentials::default()
    }

    /// One token granting every role (the `--token` of before roles), or none.
    pub fn all_roles(token: Option<String>) -> Credentials {
        let mut credentials = Credentials::default();
        if let Some(token) = token {
            credentials.all.push(token.into_bytes());
        }
        credentials
    }

    /// Adds `token` to `role`'s tokens (`None`: to the all-roles tokens).
    ///
    /// # Errors
    /// [`Error::Security`] for an empty token or one with whitespace or control
    /// characters inside (it could not be sent in a header as given).
    pub fn add(&mut self, role: Option<Role>, token: &str, source: &str) -> Result<()> {
        if token.is_empty() {
            return Err(Error::Security(format!("{source}: the token is empty")));
        }
        if token
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(Error::Security(format!(
                "{source}: a token may not hold spaces or control characters"
            )));
        }
        let list = match role {
            None => &mut self.all,
            Some(Role::Read) => &mut self.read,
            Some(Role::Write) => &mut self.write,
            Some(Role::Admin) => &mut self.admin,
        };
        list.push(token.as_bytes().to_vec());
        Ok(())
    }

    /// Adds every non-empty line of the file at `path` (trimmed) to `role`'s tokens.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file; [`Error::Security`] when it holds no token.
    pub fn add_file(&mut self, role: Option<Role>, path: &Path) -> Result<()> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let source = path.display().to_string();
        let mut added = 0;
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            self.add(role, line, &source)?;
            added += 1;
        }
        if added == 0 {
            return Err(Error::Security(format!("{source}: holds no token")));
        }
        Ok(())
    }

    /// Whether any token is configured (then every API endpoint needs one).
    pub fn enabled(&self) -> bool {
        [&self.all, &self.read, &self.write, &self.admin]
            .iter()
            .any(|tokens| !tokens.is_empty())
    }

    /// The token a node sends its peers: an admin token, else an all-roles one.
    pub fn internal_token(&self) -> Option<String> {
        (self.admin.first().or(self.all.first()))
            .map(|token| String::from_utf8_lossy(token).into_owned())
    }

    /// The roles `given` grants (read, write, admin), compared with every token in constant
    /// time; `None` when no role holds it.
    fn grants(&self, given: &[u8]) -> Option<[bool; 3]> {
        let holds = |tokens: &[Vec<u8>]| {
            let mut found = subtle::Choice::from(0);
            for token in tokens {
                found |= token.as_slice().ct_eq(given);
            }
            bool::from(found)
        };
        let (all, read, write, admin) = (
            holds(&self.all),
            holds(&self.read),
            holds(&self.write),
            holds(&self.admin),
        );
        let any = all || read || write || admin;
        any.then_some([all || admin || read, all || admin || write, all || admin])
    }

    /// Checks a request's credential against the role its path needs: `Ok` to serve it, or
    /// the refusal.
    pub fn check(&self, method: &Method, path: &str, headers: &HeaderMap) -> Result<(), Denied> {
        let needed = required_role(method, path);
        if !self.enabled() {
            return Ok(());
        }
        let denied = |reason| Denied { needed, reason };
        let Some(given) = presented(headers) else {
            return Err(denied(Refusal::Missing));
        };
        let Some(granted) = self.grants(given.as_bytes()) else {
            return Err(denied(Refusal::Unknown));
        };
        let index = match needed {
            Role::Read => 0,
            Role::Write => 1,
            Role::Admin => 2,
        };
        if granted[index] {
            Ok(())
        } else {
            Err(denied(Refusal::WrongRole))
        }
    }
}

/// The token a request presents: `Authorization: Bearer <token>`, or InfluxDB's
/// `Token <token>`. The scheme's case does not matter (RFC 9110: `bearer` is `Bearer`), and
/// any run of spaces or tabs may separate it from the token.
fn presented(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim_start().split_once([' ', '\t'])?;
    let known = ["Bearer", "Token"]
        .iter()
        .any(|known| scheme.eq_ignore_ascii_case(known));
    known.then(|| token.trim())
}

/// A refused request: the role it needed and why it was refused.
#[derive(Clone, Copy, Debug)]
pub struct Denied {
    /// The role the endpoint needs.
    pub needed: Role,
    /// Why the credential did not do.
    pub reason: Refusal,
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        let (role, token) = (self.needed.as_str(), self.needed.token_phrase());
        let (status, message) = match self.reason {
            Refusal::Missing => (
                StatusCode::UNAUTHORIZED,
                format!(
                    "no credential: this endpoint needs {token}; send Authorization: Bearer \
                     <token>"
                ),
            ),
            Refusal::Unknown => (
                StatusCode::UNAUTHORIZED,
                format!("the token sent is not one this server knows; this endpoint needs {token}"),
            ),
            Refusal::WrongRole => {
                // An admin token grants every role, so it is the other way in, unless the
                // endpoint needs admin itself.
                let or_admin = if self.needed == Role::Admin {
                    ""
                } else {
                    " or an admin token"
                };
                (
                    StatusCode::FORBIDDEN,
                    format!(
                        "the token sent does not grant {role}: this endpoint needs \
                         {token}{or_admin}"
                    ),
                )
            }
        };
        let mut response = (status, Json(serde_json::json!({ "error": message }))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"tierdb\""),
            );
        }
        response
    }
}

/// Requests refused, by the role needed and the reason.
#[derive(Default)]
pub struct AuthCounters {
    /// Indexed `[role as usize][reason as usize]`.
    refused: [[AtomicU64; 3]; 3],
}

impl AuthCounters {
    /// Counts one refusal.
    pub fn count(&self, denied: Denied) {
        self.refused[denied.needed as usize][denied.reason as usize]
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Refusals of requests needing `role` for `reason`.
    pub fn refused(&self, role: Role, reason: Refusal) -> u64 {
        self.refused[role as usize][reason as usize].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(token: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(token) = token {
            headers.insert(
                header::AUTHORIZATION,
                format!("Bearer {token}").parse().unwrap(),
            );
        }
        headers
    }

    #[test]
    fn routes_are_classified_by_role() {
        assert_eq!(required_role(&Method::POST, "/write"), Role::Write);
        assert_eq!(required_role(&Method::POST, "/query"), Role::Write);
        assert_eq!(
            required_role(&Method::POST, "/api/v1/prom/write"),
            Role::Write
        );
        assert_eq!(required_role(&Method::GET, "/render"), Role::Read);
        assert_eq!(
            required_role(&Method::GET, "/prometheus/api/v1/query"),
            Role::Read
        );
        assert_eq!(
            required_role(&Method::DELETE, "/api/v1/series"),
            Role::Admin
        );
        assert_eq!(
            required_role(&Method::POST, "/internal/v1/partial"),
            Role::Admin
        );
        assert_eq!(
            required_role(&Method::GET, "/internal/v1/snapshot/3"),
            Role::Admin
        );
    }

    #[test]
    fn each_token_reaches_its_roles_and_refusals_say_401_or_403() {
        let mut credentials = Credentials::none();
        assert!(credentials
            .check(&Method::POST, "/write", &headers(None))
            .is_ok());
        credentials.add(Some(Role::Read), "r-1", "test").unwrap();
        credentials.add(Some(Role::Read), "r-2", "test").unwrap();
        credentials.add(Some(Role::Write), "w", "test").unwrap();
        credentials.add(Some(Role::Admin), "a", "test").unwrap();
        let check = |method: Method, path: &str, token: Option<&str>| {
            credentials
                .check(&method, path, &headers(token))
                .map_err(|d| d.reason)
        };
        assert_eq!(check(Method::GET, "/render", Some("r-1")), Ok(()));
        assert_eq!(check(Method::GET, "/render", Some("r-2")), Ok(()));
        assert_eq!(
            check(Method::GET, "/render", Some("w")),
            Err(Refusal::WrongRole)
        );
        assert_eq!(
            check(Method::POST, "/write", Some("r-1")),
            Err(Refusal::WrongRole)
        );
        assert_eq!(check(Method::POST, "/write", Some("w")), Ok(()));
        assert_eq!(
            check(Method::DELETE, "/api/v1/series", Some("w")),
            Err(Refusal::WrongRole)
        );
        for path in ["/write", "/render", "/internal/v1/partial"] {
            assert_eq!(check(Method::POST, path, Some("a")), Ok(()), "{path}");
        }
        assert_eq!(check(Method::GET, "/render", None), Err(Refusal::Missing));
        assert_eq!(
            check(Method::GET, "/render", Some("r-")),
            Err(Refusal::Unknown)
        );
        assert_eq!(
            check(Method::GET, "/render", Some("r-1x")),
            Err(Refusal::Unknown)
        );
        // The scheme is case-insensitive (RFC 9110); only the token itself must match.
        for value in ["bearer r-1", "BEARER  r-1", "token r-1", "Bearer\tr-1"] {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            assert_eq!(
                credentials
                    .check(&Method::GET, "/render", &headers)
                    .map_err(|d| d.reason),
                Ok(()),
                "{value}"
            );
        }
        for value in ["Basic r-1", "Bearerr-1", "bearer R-1", "r-1"] {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            assert!(
                credentials
                    .check(&Method::GET, "/render", &headers)
                    .is_err(),
                "{value} accepted"
            );
        }
        assert_eq!(credentials.internal_token().as_deref(), Some("a"));
        let shown = format!("{credentials:?}");
        assert!(
            !shown.contains("r-1") && shown.contains("read_tokens: 2"),
            "{shown}"
        );
    }

    #[test]
    fn token_files_take_one_token_a_line_and_refuse_an_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("read.token");
        std::fs::write(&path, "one\n\n  two  \n").unwrap();
        let mut credentials = Credentials::none();
        credentials.add_file(Some(Role::Read), &path).unwrap();
        assert_eq!(credentials.read.len(), 2);
        std::fs::write(&path, "\n").unwrap();
        let e = credentials.add_file(Some(Role::Read), &path).unwrap_err();
        assert!(e.to_string().contains("holds no token"), "{e}");
        assert!(credentials.add(None, "a b", "x").is_err());
    }
}
