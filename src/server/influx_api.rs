//! What InfluxDB 1.x clients and load balancers ask besides `/write`: `/ping` and `/health`
//! (open, as InfluxDB leaves them: a probe carries no token), and `/query` for the one
//! statement a writer sends, Telegraf's `CREATE DATABASE "telegraf"` at start. tierdb keeps
//! one store whatever the database, so that statement is answered as InfluxDB answers it for
//! a database that exists; any other statement is refused saying where reads go.

#[cfg(test)]
mod tests;

use axum::extract::RawQuery;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::params::{FormParams, Params};

/// The InfluxDB version `/ping` and `/health` report: the 1.x API whose `/write` and `/query`
/// (`CREATE DATABASE`) tierdb answers. Clients read the major version to pick the 1.x or
/// 2.x API; tierdb's own version goes in `X-Tierdb-Version`.
pub(crate) const INFLUX_VERSION: &str = "1.8.10";

/// The headers InfluxDB 1.x puts on every answer that say what it is (its build, `OSS`, and
/// version, which client libraries read from `/ping`), with tierdb's version.
fn version_headers() -> [(HeaderName, HeaderValue); 3] {
    [
        (
            HeaderName::from_static("x-influxdb-build"),
            HeaderValue::from_static("OSS"),
        ),
        (
            HeaderName::from_static("x-influxdb-version"),
            HeaderValue::from_static(INFLUX_VERSION),
        ),
        (
            HeaderName::from_static("x-tierdb-version"),
            HeaderValue::from_static(env!("CARGO_PKG_VERSION")),
        ),
    ]
}

/// `GET|HEAD /ping`: 204 with the version headers, as InfluxDB answers; `verbose=true`
/// answers 200 with the version in JSON.
pub(super) async fn ping(RawQuery(raw): RawQuery) -> Response {
    let params = Params::query(raw.as_deref());
    let verbose = params
        .get("verbose")
        .is_some_and(|v| !matches!(v, "" | "0" | "false"));
    if verbose {
        let body = serde_json::json!({ "version": INFLUX_VERSION });
        return (version_headers(), Json(body)).into_response();
    }
    (StatusCode::NO_CONTENT, version_headers()).into_response()
}

/// `GET /health`: 200 and InfluxDB's health document, for load balancers and clients that
/// probe before writing. The server answering is the check: a write refused for a server
/// fault answers 503 on its own.
pub(super) async fn health() -> Response {
    let body = serde_json::json!({
        "name": "tierdb",
        "message": "ready for queries and writes",
        "status": "pass",
        "checks": [],
        "version": env!("CARGO_PKG_VERSION"),
    });
    (version_headers(), Json(body)).into_response()
}

/// `GET|POST /query`: `q` from the query string or a form body (Telegraf POSTs it as a form),
/// one statement or several separated by `;`. Every one must be a `CREATE DATABASE`, each
/// answered `{"statement_id": i}`; anything else is refused with 400 naming the statement.
pub(super) async fn query(FormParams(params, _): FormParams) -> Result<Response, ApiError> {
    let q = params
        .get("q")
        .ok_or_else(|| ApiError::BadRequest("q: missing (q=CREATE DATABASE name)".into()))?;
    let statements = statements(q);
    if statements.is_empty() {
        return Err(ApiError::BadRequest("q: no statement".into()));
    }
    let mut results = Vec::with_capacity(statements.len());
    for (id, statement) in statements.iter().enumerate() {
        if !creates_database(statement) {
            return Err(ApiError::BadRequest(format!(
                "q: {statement:?}: tierdb's /query answers only CREATE DATABASE (one store \
                 holds every database's writes); read with /render, /api/v1/query or PromQL \
                 under /prometheus"
            )));
        }
        results.push(serde_json::json!({ "statement_id": id }));
    }
    Ok((
        version_headers(),
        Json(serde_json::json!({ "results": results })),
    )
        .into_response())
}

/// The statements of `q`: split on `;` outside quotes, trimmed, empty ones dropped.
fn statements(q: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quote, mut escaped) = (0, None, false);
    for (i, c) in q.char_indices() {
        match (quote, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(open), c) if c == open => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, ';') => {
                out.push(&q[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&q[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Whether `statement` is `CREATE DATABASE <name> [WITH ...]` (keywords in any case, the
/// name bare or double-quoted).
fn creates_database(statement: &str) -> bool {
    let mut words = statement.split_whitespace();
    let keywords = [words.next(), words.next()];
    matches!(keywords, [Some(create), Some(database)]
        if create.eq_ignore_ascii_case("create") && database.eq_ignore_ascii_case("database"))
        && words.next().is_some()
}
