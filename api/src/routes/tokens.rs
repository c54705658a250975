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
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// A token's name (or an enrolment token's): 1 to 128 characters, not all blank.
pub(crate) fn token_name() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(128))
        .pattern(Some(drover_core::openapi::NOT_BLANK_PATTERN))
        .description(Some(
            "What the token is for (`ci`, `laptop`, `rack-3`): 1 to 128 characters, not all blank.",
        ))
        .into()
}

/// A lifetime as the API documents it: one number and one unit, each match between 1 s and 10
/// years (`drover_service::tokens::expiry`, which also reads humantime's longer forms).
pub(crate) const LIFETIME_PATTERN: &str = "^([1-9][0-9]{0,7}(s|sec|secs|second|seconds)|[1-9][0-9]{0,5}(m|min|mins|minute|minutes)|[1-9][0-9]{0,3}(h|hr|hrs|hour|hours)|([1-9][0-9]{0,2}|[12][0-9]{3}|3[0-5][0-9]{2}|36[0-4][0-9]|3650)(d|day|days)|[1-9][0-9]?(w|wk|wks|week|weeks)|[1-9][0-9]?(M|month|months)|[1-9](y|yr|yrs|year|years))$";

/// A token's lifetime (`null`: no expiry).
fn token_lifetime() -> Schema {
    lifetime(
        "Lifetime in human form (`30d`, `12h`), 1 s to 10 years; no expiry when absent or `null`. Never past the expiry of the token that mints it.",
    )
}

/// A lifetime in human form, or `null`.
pub(crate) fn lifetime(description: &str) -> Schema {
    ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::Array(vec![
            Type::String,
            Type::Null,
        ]))
        .pattern(Some(LIFETIME_PATTERN))
        .description(Some(format!(
            "{description} One number and a unit: `s`, `m`, `h`, `d`, `w`, `M` (months) or `y` \
             (or their long names); the server also reads humantime's longer forms (`1h 30m`)."
        )))
        .into()
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    #[schema(schema_with = token_name)]
    pub name: String,
    /// Whose token; the caller's when absent. A token for someone else is how a new user gets their
    /// first one (Drover has no passwords): cluster administrators may mint one for anyone, tenant
    /// admins for the members and viewers of their tenant, nobody else.
    #[serde(default)]
    pub user_id: Option<uuid::Uuid>,
    #[serde(default)]
    #[schema(schema_with = token_lifetime)]
    pub expires_in: Option<String>,
}

/// Create a token.
#[utoipa::path(
    post, path = "/api/v1/tokens", tag = "tokens", request_body = CreateToken,
    responses((status = 201, body = TokenCreated),
              (status = 403, description = "`user_id` holds as much privilege as the caller or more", body = ErrorBody),
              (status = 404, description = "No such user (`user_id`) the caller manages", body = ErrorBody),
              (status = 422, body = ErrorBody)),
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
    params(("user_id" = Option<String>, Query, format = Uuid, description = "Whose tokens; the caller's when absent")),
    responses((status = 200, body = TokenList),
              (status = 403, description = "`user_id` holds as much privilege as the caller or more", body = ErrorBody),
              (status = 404, description = "No such user (`user_id`) the caller manages", body = ErrorBody)),
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
    params(("id" = String, Path, format = Uuid, description = "The token's id")),
    responses((status = 200, body = TokenEnvelope),
              (status = 403, description = "The token's user holds as much privilege as the caller or more", body = ErrorBody),
              (status = 404, description = "No such token the caller manages (a malformed id is none)", body = ErrorBody)),
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
