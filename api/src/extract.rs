//! Request extractors whose failures speak the API's error format (axum's own answer in plain text).

use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// The raw body, bounded by the server's limit.
#[derive(Debug)]
pub struct Body(pub Bytes);

impl FromRequest<AppState> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        Bytes::from_request(req, state)
            .await
            .map(Body)
            .map_err(|rejection| body_rejection(rejection, state))
    }
}

fn body_rejection(rejection: BytesRejection, state: &AppState) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body exceeds {} bytes", state.max_body_bytes),
        )
    } else {
        ApiError::new(rejection.status(), "bad_body", rejection.body_text())
    }
}

/// A JSON body parsed strictly; errors name the field.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let Body(bytes) = Body::from_request(req, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Reads a JSON body strictly, as [`ApiJson`] does, for a handler that reads its body itself: bytes
/// that are not JSON are a 400 (`malformed_body`), JSON of the wrong shape (a wrong type, an unknown
/// field) a 422 naming the field.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Read as JSON Schema reads it (`drover_core::json`): `2.0` is an integer, keys are unique.
    let named = |path: String, err: serde_json::Error| {
        let path = path.trim_end_matches(".?").to_owned();
        let field = if matches!(path.as_str(), "." | "?" | "") {
            "(body)".to_owned()
        } else {
            path
        };
        (field, err)
    };
    let parsed = drover_core::json::read(bytes)
        .map_err(|err| named(err.path, err.error))
        .and_then(|tree| {
            serde_path_to_error::deserialize(tree)
                .map_err(|err| named(err.path().to_string(), err.into_inner()))
        });
    let (field, err) = match parsed {
        Ok(value) => {
            refuse_nul_in_json(bytes)?;
            return Ok(value);
        }
        Err(failure) => failure,
    };
    Err(if err.is_data() {
        ApiError::invalid(&field, err.to_string())
    } else {
        ApiError::new(StatusCode::BAD_REQUEST, "malformed_body", err.to_string()).with_field(field)
    })
}

/// A JSON body that parsed may still carry `\u0000`, which no database column takes (Postgres refuses
/// NUL in text). The escape is rare, so the body is re-read as a tree only when it appears.
fn refuse_nul_in_json(bytes: &[u8]) -> Result<(), ApiError> {
    let escaped = bytes
        .windows(6)
        .any(|w| w[0] == b'\\' && w[1] == b'u' && w[2..].iter().all(|&b| b == b'0'));
    if !escaped {
        return Ok(());
    }
    let tree: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|err| ApiError::bad_request("(body)", err.to_string()))?;
    match drover_core::text::find_nul(&tree) {
        Some(path) => Err(ApiError::invalid(
            if path.is_empty() { "(body)" } else { &path },
            drover_core::text::NUL_REASON,
        )),
        None => Ok(()),
    }
}

/// Refuses a NUL character in a path segment or a query parameter.
fn refuse_nul(field: &str, value: &str) -> Result<(), ApiError> {
    if value.contains('\0') {
        Err(ApiError::bad_request(field, drover_core::text::NUL_REASON))
    } else {
        Ok(())
    }
}

/// A path segment, parsed by the handler (so a malformed id is a 404 with a JSON body, not axum's text).
#[derive(Debug)]
pub struct PathParam(pub String);

impl FromRequestParts<AppState> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(value) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(path_rejection)?;
        refuse_nul("(path)", &value)?;
        Ok(PathParam(value))
    }
}

/// Two path segments (`/jobs/{id}/checkpoints/{checkpoint}/…`), with the same JSON errors.
#[derive(Debug)]
pub struct PathPair(pub String, pub String);

impl FromRequestParts<AppState> for PathPair {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let axum::extract::Path((first, second)) =
            axum::extract::Path::<(String, String)>::from_request_parts(parts, state)
                .await
                .map_err(path_rejection)?;
        refuse_nul("(path)", &first)?;
        refuse_nul("(path)", &second)?;
        Ok(PathPair(first, second))
    }
}

/// axum answers a badly encoded segment (`%FF`) in plain text; the API answers in its own format.
fn path_rejection(rejection: axum::extract::rejection::PathRejection) -> ApiError {
    ApiError::bad_request("(path)", rejection.body_text())
}

/// The query string as ordered pairs (repeated keys allowed).
#[derive(Debug, Default)]
pub struct QueryPairs(pub Vec<(String, String)>);

impl FromRequestParts<AppState> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).map_err(|err| {
            ApiError::bad_request("(query)", format!("malformed query string: {err}"))
        })?;
        for (key, value) in &pairs {
            refuse_nul("(query)", key)?;
            refuse_nul(key, value)?;
        }
        Ok(QueryPairs(pairs))
    }
}

impl QueryPairs {
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn get<'a>(&'a self, key: &'a str) -> Option<&'a str> {
        self.all(key).last()
    }

    /// Rejects parameters the endpoint does not know, so a typo is not silently ignored.
    pub fn only(&self, known: &[&str]) -> Result<(), ApiError> {
        match self.0.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            Some((k, _)) => Err(ApiError::bad_request(
                k,
                format!(
                    "unknown query parameter `{k}` (expected one of: {})",
                    known.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    /// A numeric `cursor` (`meta.next_cursor` of a list keyed by row id), when given.
    pub fn id_cursor(&self) -> Result<Option<i64>, ApiError> {
        self.get("cursor")
            .map(|raw| {
                raw.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(
                        "cursor",
                        "not a cursor this server issued; pass meta.next_cursor unchanged",
                    )
                })
            })
            .transpose()
    }

    /// An `offset` into a list: 0 when absent, at most `max`.
    pub fn offset(&self, max: u32) -> Result<u32, ApiError> {
        match self.get("offset") {
            None => Ok(0),
            Some(raw) => match raw.parse::<u32>() {
                Ok(n) if n <= max => Ok(n),
                _ => Err(ApiError::bad_request(
                    "offset",
                    format!("must be an integer between 0 and {max}"),
                )),
            },
        }
    }

    /// A page size: `default` when absent, at most `max`.
    pub fn limit(&self, default: u32, max: u32) -> Result<u32, ApiError> {
        match self.get("limit") {
            None => Ok(default),
            Some(raw) => match raw.parse::<u32>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(ApiError::bad_request(
                    "limit",
                    format!("must be an integer between 1 and {max}"),
                )),
            },
        }
    }
}
