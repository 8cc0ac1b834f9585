//! `DELETE /api/v1/series?match=SELECTOR`: deleting series over HTTP, with a dry run. The
//! selector is the one grammar of `GET /api/v1/series` and `tierdb series` (a name glob,
//! `{k=v,k!=v}` with value globs, Graphite's `;k=v` form, `tag=` parameters).
//!
//! Who may call it is decided in one place, the API's token check (`auth::required_role`: a
//! `DELETE` needs the admin role, or the all-roles `--token`).

use std::sync::Arc;

use axum::extract::{RawQuery, State as AxumState};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::params::Params;
use super::State;
use crate::registry::Selector;

/// What a deletion (or its dry run) answers.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DeleteAnswer {
    /// True when nothing was deleted: `series` is what would be.
    pub dry_run: bool,
    /// The series deleted (or that would be), as keys.
    pub series: Vec<String>,
    /// Bucket cells that held data and were emptied; absent on a cluster node, whose
    /// partitions' owners delete after the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cells_cleared: Option<usize>,
    /// Raw-tier points given up; absent on a cluster node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_points: Option<usize>,
}

/// `DELETE /api/v1/series`: `match` (required), `tag` (repeatable), `dry_run=true` to list
/// only, `all=true` to let a selector take every name (`*`). No series selected is a 404.
pub(super) async fn delete_series(
    AxumState(state): AxumState<Arc<State>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let params = Params::query(raw.as_deref());
    let Some(text) = params.get("match") else {
        return Err(ApiError::BadRequest(
            "match: required: the series to delete, a selector as for GET /api/v1/series \
             (add dry_run=true to list them first)"
                .into(),
        ));
    };
    let selector = Selector::parse(text)
        .map_err(|e| ApiError::BadRequest(format!("match: {e}")))?
        .with_tags(params.all("tag"))
        .map_err(|e| ApiError::BadRequest(format!("tag: {e}")))?;
    let dry_run = params.either("dry_run", "false", "true")?;
    let all = params.either("all", "false", "true")?;
    if selector.takes_every_name() && !all {
        return Err(ApiError::BadRequest(format!(
            "match: '{selector}' selects every series; add all=true to delete them all"
        )));
    }
    let read = params.read_options(&state)?;
    let answer = state
        .backend
        .delete(selector.clone(), dry_run, read)
        .await?;
    if answer.series.is_empty() {
        return Err(ApiError::NotFound(format!("no series match '{selector}'")));
    }
    Ok(Json(answer).into_response())
}
