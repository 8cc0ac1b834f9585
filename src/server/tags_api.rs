//! graphite-web's tag API (`/tags`, `/tags/<tag>`, `/tags/findSeries`,
//! `/tags/autoComplete/tags`, `/tags/autoComplete/values`), as Grafana's tag editor calls it,
//! answered by [`crate::render::tags`] through the server's [`super::Backend`]: over a single
//! node's registry, or over a cluster's owners, with the same answer for the same series.

use std::sync::Arc;

use axum::extract::{Path, State as AxumState};
use axum::response::Response;

use super::error::ApiError;
use super::params::{FormParams, Params};
use super::render_api::over_budget;
use super::State;
use crate::read::budget::ReadBudget;
use crate::render::tags::TagRead;

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

/// Answers `read` through the backend (a single node's registry, or a cluster's owners),
/// within the request's read budget, read as `params` asks (`consistency`).
async fn answer(state: Arc<State>, params: &Params, read: TagRead) -> Result<Response, ApiError> {
    read.check()?;
    let budget = Arc::new(ReadBudget::new(state.limits.max_read_values));
    let options = params.read_options(&state)?;
    let report = options.report.clone();
    let value = (state.backend)
        .tags(read, Arc::clone(&budget), options)
        .await;
    let value = over_budget(&state, &budget, value)?;
    Ok(report.json(value))
}

/// `GET /tags`: `filter` (a regex anchored at the start), `limit`.
pub(super) async fn list(
    AxumState(state): AxumState<Arc<State>>,
    FormParams(params, _): FormParams,
) -> Result<Response, ApiError> {
    let filter = params.get("filter").map(str::to_owned);
    let limit = limit(&params)?;
    answer(state, &params, TagRead::Tags { filter, limit }).await
}

/// `GET /tags/<tag>`: `filter`, `limit`.
pub(super) async fn values(
    AxumState(state): AxumState<Arc<State>>,
    Path(tag): Path<String>,
    FormParams(params, _): FormParams,
) -> Result<Response, ApiError> {
    let filter = params.get("filter").map(str::to_owned);
    let limit = limit(&params)?;
    answer(state, &params, TagRead::Values { tag, filter, limit }).await
}

/// `GET|POST /tags/findSeries`: `expr` (repeatable).
pub(super) async fn find_series(
    AxumState(state): AxumState<Arc<State>>,
    FormParams(params, _): FormParams,
) -> Result<Response, ApiError> {
    let exprs = exprs(&params);
    answer(state, &params, TagRead::FindSeries { exprs }).await
}

/// `GET|POST /tags/autoComplete/tags`: `expr` (repeatable), `tagPrefix`, `limit`.
pub(super) async fn complete_tags(
    AxumState(state): AxumState<Arc<State>>,
    FormParams(params, _): FormParams,
) -> Result<Response, ApiError> {
    let exprs = exprs(&params);
    let prefix = params.get("tagPrefix").map(str::to_owned);
    let limit = limit(&params)?;
    answer(
        state,
        &params,
        TagRead::CompleteTags {
            exprs,
            prefix,
            limit,
        },
    )
    .await
}

/// `GET|POST /tags/autoComplete/values`: `tag`, `expr` (repeatable), `valuePrefix`, `limit`.
pub(super) async fn complete_values(
    AxumState(state): AxumState<Arc<State>>,
    FormParams(params, _): FormParams,
) -> Result<Response, ApiError> {
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
    answer(
        state,
        &params,
        TagRead::CompleteValues {
            exprs,
            tag,
            prefix,
            limit,
        },
    )
    .await
}
