//! `/api/v1/tokens`: API tokens. The secret is returned once, at creation; only its hash is kept.

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, PathParam, QueryPairs};
use crate::paging::ListMeta;
use crate::state::AppState;
use crate::views::{TokenCreated, TokenEnvelope, TokenList, TokenView};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use drover_core::UserId;
use drover_service::auth::Principal;
use drover_service::tokens;
use serde::Deserialize;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// What the token is for, e.g. `ci` or `laptop`.
    pub name: String,
    /// Whose token; the caller's when absent. A token for someone else is how a new user gets their
    /// first one (Drover has no passwords): cluster administrators may mint one for anyone, tenant
    /// admins for the members and viewers of their tenant, nobody else.
    #[serde(default)]
    pub user_id: Option<uuid::Uuid>,
    /// Lifetime in human form (`30d`, `12h`); no expiry when absent.
    #[serde(default)]
    pub expires_in: Option<String>,
}

/// Create a token.
#[utoipa::path(
    post, path = "/api/v1/tokens", tag = "tokens", request_body = CreateToken,
    responses((status = 201, body = TokenCreated), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<CreateToken>,
) -> ApiResult<(StatusCode, Json<TokenCreated>)> {
    let (token, secret) = tokens::create(
        &state,
        &principal,
        body.name,
        body.user_id.map(UserId),
        body.expires_in.as_deref(),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(TokenCreated {
            token: token.into(),
            secret,
        }),
    ))
}

/// List a user's tokens (the caller's by default), without their secrets.
#[utoipa::path(
    get, path = "/api/v1/tokens", tag = "tokens",
    params(("user_id" = Option<String>, Query)),
    responses((status = 200, body = TokenList), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
    query: QueryPairs,
) -> ApiResult<Json<TokenList>> {
    query.only(&["user_id"])?;
    let user_id =
        match query.get("user_id") {
            None => None,
            Some(raw) => Some(raw.parse::<UserId>().map_err(|_| {
                ApiError::not_found(format!("no user `{raw}`")).with_field("user_id")
            })?),
        };
    let tokens = tokens::list(&state, &principal, user_id).await?;
    Ok(Json(TokenList {
        tokens: tokens.into_iter().map(TokenView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

/// Revoke a token. Revoking twice is harmless.
#[utoipa::path(
    delete, path = "/api/v1/tokens/{id}", tag = "tokens",
    params(("id" = String, Path)),
    responses((status = 200, body = TokenEnvelope), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn revoke(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<TokenEnvelope>> {
    let token = tokens::revoke(&state, &principal, &id).await?;
    Ok(Json(TokenEnvelope {
        token: token.into(),
    }))
}
