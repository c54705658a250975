//! `/api/v1/users` and `/api/v1/me`. A user belongs to one tenant with one role there.

use crate::error::{ApiResult, ErrorBody};
use crate::extract::{ApiJson, PathParam};
use crate::paging::ListMeta;
use crate::state::AppState;
use crate::views::{Me, UserEnvelope, UserList, UserView};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use drover_core::Role;
use drover_service::auth::Principal;
use drover_service::users;
use serde::Deserialize;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    /// 1–64 characters: letters, digits, `.`, `_`, `-`, `@`.
    #[schema(pattern = "^[A-Za-z0-9._@-]{1,64}$")]
    pub name: String,
    /// The tenant's name; the caller's own tenant when absent.
    #[serde(default)]
    #[schema(max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    pub tenant: Option<String>,
    pub role: Role,
    /// Cluster administrators only may create cluster administrators.
    #[serde(default)]
    pub cluster_admin: bool,
}

/// Create a user (tenant admins in their tenant; cluster administrators anywhere).
#[utoipa::path(
    post, path = "/api/v1/users", tag = "users", request_body = CreateUser,
    responses((status = 201, body = UserEnvelope),
              (status = 403, description = "A member or viewer, another tenant for a tenant admin, or a cluster administrator made by anyone but one", body = ErrorBody),
              (status = 404, description = "No such tenant (`tenant`)", body = ErrorBody),
              (status = 409, description = "A user of this name exists", body = ErrorBody),
              (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<CreateUser>,
) -> ApiResult<(StatusCode, Json<UserEnvelope>)> {
    let user = users::create(
        &state,
        &principal,
        users::NewUserRequest {
            name: body.name,
            tenant: body.tenant,
            role: body.role,
            cluster_admin: body.cluster_admin,
        },
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(UserEnvelope { user: user.into() }),
    ))
}

/// List users: one's tenant, or every tenant for cluster administrators.
#[utoipa::path(
    get, path = "/api/v1/users", tag = "users",
    responses((status = 200, body = UserList)),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> ApiResult<Json<UserList>> {
    let users = users::list(&state, &principal).await?;
    Ok(Json(UserList {
        users: users.into_iter().map(UserView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

/// Get a user by id.
#[utoipa::path(
    get, path = "/api/v1/users/{id}", tag = "users",
    params(("id" = String, Path, format = Uuid, description = "The user's id")),
    responses((status = 200, body = UserEnvelope), (status = 404, description = "No such user the caller may see (a malformed id is none)", body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<UserEnvelope>> {
    let user = users::get(&state, &principal, &id).await?;
    Ok(Json(UserEnvelope { user: user.into() }))
}

/// Who the token belongs to, and the tenant's quota.
#[utoipa::path(
    get, path = "/api/v1/me", tag = "users",
    responses((status = 200, body = Me), (status = 401, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn me(principal: Principal) -> Json<Me> {
    Json(Me {
        quota: principal.tenant_quota,
        user: principal.user.into(),
    })
}
