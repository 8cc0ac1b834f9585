//! The one reader of request parameters, for every endpoint: the query string, and where an
//! endpoint takes a POST of its parameters (Graphite's render, find and tag API,
//! Prometheus' queries and listings, InfluxDB's `/query`) also a form-encoded body after
//! it, which handlers take as the [`FormParams`] extractor.
//!
//! The rule, everywhere: a key given more than once takes its last value, Graphite's
//! form-POST rule (graphite-web reads parameters with Django's `QueryDict.get`), so a body
//! value wins over the query string's. Repeatable parameters (`target`, `tag`, `group_by`)
//! are read with [`Params::all`], every value in order.

#[cfg(test)]
mod tests;

use std::marker::PhantomData;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::backend::ReadOptions;
use super::error::ApiError;
use super::State;

/// A request's parameters in the order they were sent, repeated keys kept.
pub(super) struct Params(Vec<(String, String)>);

/// A handler's parameters where a form-encoded body may carry them too (Graphite's and
/// Prometheus' POSTs): [`Params::query_and_form`] as an extractor, so each handler names
/// what it reads and not how parameters arrive. It reads the body, so it comes last among
/// the handler's arguments. `R` is how the endpoint refuses a body it cannot read as a form:
/// an [`ApiError`], or the Prometheus API's own envelope. A body past the server's limit is
/// refused as axum's `Bytes` refuses it.
pub(super) struct FormParams<R = ApiError>(pub(super) Params, pub(super) PhantomData<fn() -> R>);

impl<S, R> FromRequest<S> for FormParams<R>
where
    S: Send + Sync,
    R: From<ApiError> + IntoResponse,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let raw = request.uri().query().map(str::to_owned);
        let content_type = request.headers().get(header::CONTENT_TYPE).cloned();
        let body = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        match Params::query_and_form(raw.as_deref(), content_type.as_ref(), &body) {
            Ok(params) => Ok(FormParams(params, PhantomData)),
            Err(refused) => Err(R::from(refused).into_response()),
        }
    }
}

impl Params {
    /// The query string's parameters (`raw` as axum's `RawQuery` gives it).
    pub(super) fn query(raw: Option<&str>) -> Params {
        Params(
            form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }

    /// The query string's parameters followed by the body's, read as
    /// `application/x-www-form-urlencoded` (Grafana POSTs its parameters that way) unless
    /// its declared `content_type` is another.
    ///
    /// # Errors
    /// [`ApiError::BadRequest`] for a non-empty body of another declared `Content-Type`.
    pub(super) fn query_and_form(
        raw: Option<&str>,
        content_type: Option<&HeaderValue>,
        body: &[u8],
    ) -> Result<Params, ApiError> {
        let mut params = Params::query(raw);
        if body.is_empty() {
            return Ok(params);
        }
        if let Some(kind) = content_type {
            let kind = kind.to_str().unwrap_or_default();
            let essence = kind.split(';').next().unwrap_or_default().trim();
            if !essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
                return Err(ApiError::BadRequest(format!(
                    "body: Content-Type {kind:?} is not application/x-www-form-urlencoded"
                )));
            }
        }
        params.0.extend(form_urlencoded::parse(body).into_owned());
        Ok(params)
    }

    /// The last value of `key` (see the module docs for why the last).
    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Checks that `format`, when given, is `only`: the one answer format an endpoint has.
    ///
    /// # Errors
    /// [`ApiError::BadRequest`] naming the format asked for and the one supported.
    pub(super) fn require_format(&self, only: &str) -> Result<(), ApiError> {
        match self.get("format") {
            Some(other) if other != only => Err(ApiError::BadRequest(format!(
                "format: {other:?} is not supported; only {only}"
            ))),
            _ => Ok(()),
        }
    }

    /// Every value of `key`, in the order sent.
    pub(super) fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> {
        self.0
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// How the request asks to be read: `consistency=strong` (a cluster read waits until
    /// the owners have applied every write the log held when the read began) or `eventual`
    /// (the default: what they applied; a single node is always strong), and the token the
    /// node sends its peers (an admin one: their internal endpoints need it).
    pub(super) fn read_options(&self, state: &State) -> Result<ReadOptions, ApiError> {
        Ok(ReadOptions {
            strong: self.either("consistency", "eventual", "strong")?,
            token: state.credentials.internal_token(),
            report: Default::default(),
        })
    }

    /// A parameter that takes one of two words: false for `default` (or when absent), true
    /// for `other`; anything else is refused naming both.
    pub(super) fn either(&self, key: &str, default: &str, other: &str) -> Result<bool, ApiError> {
        match self.get(key) {
            None => Ok(false),
            Some(word) if word == default => Ok(false),
            Some(word) if word == other => Ok(true),
            Some(word) => Err(ApiError::BadRequest(format!(
                "{key}: {word:?} is not {default} or {other}"
            ))),
        }
    }
}
