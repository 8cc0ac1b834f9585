//! graphite-web's tag API (`/tags`, `/tags/<tag>`, `/tags/findSeries`,
//! `/tags/autoComplete/tags`, `/tags/autoComplete/values`), as Grafana's tag editor calls it,
//! answered by [`crate::render::tags`] over the registry, through the server's
//! [`super::Backend`]. A cluster node, which has no registry of its own, answers 503 naming
//! the endpoint.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as AxumState};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::params::Params;
use super::render_api::over_budget;
use super::State;
use crate::error::Error;
use crate::read::budget::ReadBudget;
use crate::registry::Registry;
use crate::render::tags;

/// The request's parameters: the query string, and a form body for the POSTs graphite-web
/// also takes.
fn params(raw: Option<&str>, headers: &HeaderMap, body: &Bytes) -> Result<Params, ApiError> {
    Params::query_and_form(raw, headers, body)
}

/// `limit`, a whole number when given.
fn limit(params: &Params) -> Result<Option<usize>, ApiError> {
    match params.get("limit").filter(|l| !l.is_empty()) {
        None => Ok(None),
        Some(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| ApiError::BadRequest(format!("limit: {text:?} is not a whole number"))),
    }
}

/// The `expr` parameters (also written `expr[]`).
fn exprs(params: &Params) -> Vec<String> {
    let plain: Vec<String> = params.all("expr").map(str::to_owned).collect();
    match plain.is_empty() {
        true => params.all("expr[]").map(str::to_owned).collect(),
        false => plain,
    }
}

/// Runs `answer` over the engine's registry on the blocking pool, within the request's read
/// budget; 503 on a cluster node.
async fn over_registry(
    state: Arc<State>,
    endpoint: &'static str,
    answer: impl FnOnce(&Registry, &ReadBudget) -> Result<serde_json::Value, Error> + Send + 'static,
) -> Result<Response, ApiError> {
    let budget = Arc::new(ReadBudget::new(state.limits.max_read_values));
    let value = (state.backend)
        .over_registry(endpoint, Arc::clone(&budget), Box::new(answer))
        .await;
    let value = over_budget(&state, &budget, value)?;
    Ok(Json(value).into_response())
}

/// `GET /tags`: `filter` (a regex anchored at the start), `limit`.
pub(super) async fn list(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = params(raw.as_deref(), &headers, &body)?;
    let filter = params.get("filter").map(str::to_owned);
    let limit = limit(&params)?;
    over_registry(state, "/tags", move |registry, budget| {
        tags::list_tags(registry, filter.as_deref(), limit, budget)
    })
    .await
}

/// `GET /tags/<tag>`: `filter`, `limit`.
pub(super) async fn values(
    AxumState(state): AxumState<Arc<State>>,
    Path(tag): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = params(raw.as_deref(), &headers, &body)?;
    let filter = params.get("filter").map(str::to_owned);
    let limit = limit(&params)?;
    over_registry(state, "/tags/<tag>", move |registry, budget| {
        tags::tag_values(registry, &tag, filter.as_deref(), limit, budget)
    })
    .await
}

/// `GET|POST /tags/findSeries`: `expr` (repeatable).
pub(super) async fn find_series(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = params(raw.as_deref(), &headers, &body)?;
    let exprs = exprs(&params);
    over_registry(state, "/tags/findSeries", move |registry, budget| {
        tags::find_series(registry, &exprs, budget)
    })
    .await
}

/// `GET|POST /tags/autoComplete/tags`: `expr` (repeatable), `tagPrefix`, `limit`.
pub(super) async fn complete_tags(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = params(raw.as_deref(), &headers, &body)?;
    let exprs = exprs(&params);
    let prefix = params.get("tagPrefix").map(str::to_owned);
    let limit = limit(&params)?;
    over_registry(state, "/tags/autoComplete/tags", move |registry, budget| {
        tags::complete_tags(registry, &exprs, prefix.as_deref(), limit, budget)
    })
    .await
}

/// `GET|POST /tags/autoComplete/values`: `tag`, `expr` (repeatable), `valuePrefix`, `limit`.
pub(super) async fn complete_values(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = params(raw.as_deref(), &headers, &body)?;
    let exprs = exprs(&params);
    let tag = match params.get("tag").filter(|t| !t.is_empty()) {
        Some(tag) => tag.to_owned(),
        None => {
            return Err(ApiError::BadRequest(
                "tag: no tag specified (tag=host)".into(),
            ))
        }
    };
    let prefix = params.get("valuePrefix").map(str::to_owned);
    let limit = limit(&params)?;
    over_registry(
        state,
        "/tags/autoComplete/values",
        move |registry, budget| {
            tags::complete_values(registry, &exprs, &tag, prefix.as_deref(), limit, budget)
        },
    )
    .await
}
