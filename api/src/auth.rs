//! Who is calling, as HTTP carries it: a bearer token in `Authorization`, or the dashboard's session
//! cookie with its CSRF token on requests that change something. The rules themselves (what a
//! principal may do) are `drover_service::auth`'s.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use drover_service::auth::Principal;
use sha2::{Digest, Sha256};

/// The dashboard's session cookie: an API token of its own, minted at login and revoked at logout.
pub const SESSION_COOKIE: &str = "drover_session";
/// The header (or form field `_csrf`) a cookie-authenticated request that changes something must carry.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The CSRF token of a session: derived from its secret, so a page can carry it and another site,
/// which cannot read the cookie, cannot compute it.
pub fn csrf_token(session: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"drover csrf\0")
        .chain_update(session.as_bytes())
        .finalize();
    hex::encode(&digest[..16])
}

/// The session token a request's cookies carry, if any.
pub fn session_cookie(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == SESSION_COOKIE && !value.is_empty()).then_some(value)
        })
}

/// Whether `given` is the session's CSRF token (compared in constant time).
pub fn csrf_matches(session: &str, given: &str) -> bool {
    let expected = csrf_token(session);
    expected.len() == given.len()
        && expected
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    /// A bearer token, or the dashboard's session cookie; a cookie-authenticated request that
    /// changes something must also carry the session's CSRF token in `X-CSRF-Token`.
    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Some(header) = parts.headers.get(header::AUTHORIZATION) else {
            let Some(session) = session_cookie(&parts.headers) else {
                return Err(ApiError::unauthenticated(
                    "missing `Authorization: Bearer <token>` header",
                ));
            };
            if !parts.method.is_safe() {
                let given = parts
                    .headers
                    .get(CSRF_HEADER)
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default();
                if !csrf_matches(session, given) {
                    return Err(ApiError::forbidden(
                        "a request with the session cookie must carry the session's `X-CSRF-Token`",
                    ));
                }
            }
            return Ok(Principal::from_token(state, session).await?);
        };
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|token| !token.is_empty())
            .ok_or_else(|| {
                ApiError::unauthenticated("the Authorization header must be `Bearer <token>`")
            })?;
        Ok(Principal::from_token(state, token).await?)
    }
}
