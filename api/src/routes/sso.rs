//! `/api/v1/auth/sso`: single sign-on for the CLI. What the server's identity provider is (so
//! `drover login --sso` can run the device flow against it), and the exchange of the ID token the
//! CLI got there for a short-lived Drover token. Both are open to anonymous callers: they are how a
//! caller gets a credential. The dashboard's sign-in is the browser flow in `drover-web`.

use crate::error::{ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use drover_service::sso::{self, Exchanged, SsoDescription};
use serde::Deserialize;
use utoipa::ToSchema;

/// The identity provider this server signs users in with.
#[utoipa::path(
    get, path = "/api/v1/auth/sso", tag = "tokens",
    responses((status = 200, body = SsoDescription),
              (status = 404, description = "Single sign-on is not configured", body = ErrorBody))
)]
pub async fn describe(State(state): State<AppState>) -> ApiResult<Json<SsoDescription>> {
    let sso = state.sso.as_ref().ok_or_else(|| {
        crate::error::ApiError::not_found(
            "single sign-on is not configured on this server (--oidc-issuer)",
        )
    })?;
    Ok(Json(sso.describe()))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExchangeRequest {
    /// An ID token the provider issued to the CLI's client (`cli_client_id`), unexpired.
    #[schema(min_length = 1, max_length = 16384)]
    pub id_token: String,
}

/// Trade an ID token from the provider for a Drover token that lives until the next refresh.
#[utoipa::path(
    post, path = "/api/v1/auth/sso/token", tag = "tokens", request_body = ExchangeRequest,
    responses((status = 200, body = Exchanged),
              (status = 401, description = "The ID token is not valid here (signature, issuer, audience, expiry)", body = ErrorBody),
              (status = 403, description = "No group of the caller's gives access to a tenant", body = ErrorBody),
              (status = 404, description = "Single sign-on is not configured", body = ErrorBody),
              (status = 422, body = ErrorBody))
)]
pub async fn exchange(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ExchangeRequest>,
) -> ApiResult<Json<Exchanged>> {
    if body.id_token.is_empty() || body.id_token.len() > 16384 {
        return Err(crate::error::ApiError::invalid(
            "id_token",
            "must be an ID token (1 to 16384 characters)",
        ));
    }
    Ok(Json(sso::exchange(&state, &body.id_token).await?))
}
