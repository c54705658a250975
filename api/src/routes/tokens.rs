//! `/api/v1/tokens`: API tokens. The secret is returned once, at creation; only its hash is kept.

use crate::auth::{Principal, display_prefix, generate_token, hash_token};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, PathParam, QueryPairs};
use crate::state::AppState;
use crate::store::{NewToken, Scope, TokenInfo};
use crate::views::{ListMeta, TokenCreated, TokenEnvelope, TokenList, TokenView};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::Utc;
use drover_core::{TokenId, UserId};
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

/// When a secret given `expires_in` (human form: `30d`, `12h`) expires; between 1 s and 10 years.
pub(super) fn expiry(raw: &str) -> ApiResult<chrono::DateTime<Utc>> {
    let duration = humantime::parse_duration(raw).map_err(|err| {
        ApiError::invalid("expires_in", format!("`{raw}` is not a duration ({err})"))
    })?;
    let duration = chrono::Duration::from_std(duration)
        .ok()
        .filter(|d| *d > chrono::Duration::zero() && *d <= chrono::Duration::days(3650))
        .ok_or_else(|| ApiError::invalid("expires_in", "must be between 1s and 10 years"))?;
    Ok(Utc::now() + duration)
}

/// The user a token call is about: the caller, or one the caller may manage.
async fn target_user(
    state: &AppState,
    principal: &Principal,
    user_id: Option<UserId>,
) -> ApiResult<UserId> {
    let Some(user_id) = user_id.filter(|id| *id != principal.user.id) else {
        return Ok(principal.user.id);
    };
    let user = state
        .store
        .get_user(Scope::Cluster, user_id)
        .await
        .map_err(|err| {
            ApiError::from_store(err, || format!("no user `{user_id}`")).with_field("user_id")
        })?;
    if !principal.can_manage_users_of(user.tenant_id) {
        return Err(ApiError::not_found(format!("no user `{user_id}`")).with_field("user_id"));
    }
    if !principal.may_manage_tokens_of(&user) {
        return Err(more_privileged(&user).with_field("user_id"));
    }
    Ok(user.id)
}

/// The refusal for a user the caller can see but holds less privilege than.
fn more_privileged(user: &crate::store::User) -> ApiError {
    ApiError::forbidden(format!(
        "`{}` holds as much privilege as you or more: only a cluster administrator manages their tokens",
        user.name
    ))
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
    if body.name.trim().is_empty() || body.name.len() > 128 {
        return Err(ApiError::invalid("name", "must be 1-128 characters"));
    }
    // A token never outlives the one that made it: a stolen short-lived token cannot mint a
    // lasting one.
    let asked = body.expires_in.as_deref().map(expiry).transpose()?;
    let expires_at = match (asked, principal.token_expires_at) {
        (Some(asked), Some(own)) => Some(asked.min(own)),
        (asked, own) => asked.or(own),
    };
    let user_id = target_user(&state, &principal, body.user_id.map(UserId)).await?;
    let secret = generate_token();
    let token = state
        .store
        .create_token(&NewToken {
            user_id,
            name: body.name,
            token_hash: hash_token(&secret),
            prefix: display_prefix(&secret),
            expires_at,
        })
        .await?;
    tracing::info!(token.id = %token.id, user.id = %user_id, "token created");
    crate::audit::record(
        state.store.as_ref(),
        &principal,
        crate::audit::Action::TokenCreate,
        format!("token {} ({})", token.id, token.name),
        format!("for user {user_id}"),
    )
    .await;
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
    let user_id = target_user(&state, &principal, user_id).await?;
    let tokens = state.store.list_tokens(user_id).await?;
    Ok(Json(TokenList {
        tokens: tokens.into_iter().map(TokenView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

async fn visible_token(state: &AppState, principal: &Principal, raw: &str) -> ApiResult<TokenInfo> {
    let not_found = || ApiError::not_found(format!("no token `{raw}`"));
    let id: TokenId = raw.parse().map_err(|_| not_found())?;
    let token = state
        .store
        .get_token(id)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no token `{raw}`")))?;
    if token.user_id == principal.user.id {
        return Ok(token);
    }
    let owner = state.store.get_user(Scope::Cluster, token.user_id).await?;
    if !principal.can_manage_users_of(owner.tenant_id) {
        return Err(not_found());
    }
    if !principal.may_manage_tokens_of(&owner) {
        return Err(more_privileged(&owner));
    }
    Ok(token)
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
    let token = visible_token(&state, &principal, &id).await?;
    let token = state.store.revoke_token(token.id).await?;
    state.tokens.forget_all();
    tracing::info!(token.id = %token.id, "token revoked");
    crate::audit::record(
        state.store.as_ref(),
        &principal,
        crate::audit::Action::TokenRevoke,
        format!("token {} ({})", token.id, token.name),
        format!("of user {}", token.user_id),
    )
    .await;
    Ok(Json(TokenEnvelope {
        token: token.into(),
    }))
}
