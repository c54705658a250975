//! `/api/v1/users` and `/api/v1/me`. A user belongs to one tenant with one role there.

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, PathParam};
use crate::state::AppState;
use crate::store::NewUser;
use crate::views::{ListMeta, Me, UserEnvelope, UserList, UserView};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use drover_core::{Role, UserId};
use serde::Deserialize;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    /// 1–64 characters: letters, digits, `.`, `_`, `-`, `@`.
    pub name: String,
    /// The tenant's name; the caller's own tenant when absent.
    #[serde(default)]
    pub tenant: Option<String>,
    pub role: Role,
    /// Cluster administrators only may create cluster administrators.
    #[serde(default)]
    pub cluster_admin: bool,
}

fn validate_user_name(name: &str) -> ApiResult<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@');
    if name.is_empty() || name.len() > 64 || !name.chars().all(ok_char) {
        return Err(ApiError::invalid(
            "name",
            "must be 1-64 characters of letters, digits, '.', '_', '-' and '@'",
        ));
    }
    Ok(())
}

/// Create a user (tenant admins in their tenant; cluster administrators anywhere).
#[utoipa::path(
    post, path = "/api/v1/users", tag = "users", request_body = CreateUser,
    responses((status = 201, body = UserEnvelope), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<CreateUser>,
) -> ApiResult<(StatusCode, Json<UserEnvelope>)> {
    validate_user_name(&body.name)?;
    let tenant = match &body.tenant {
        None => state.store.get_tenant(principal.user.tenant_id).await?,
        // Anyone else's tenant gets the same answer whether it exists or not.
        Some(name) if !principal.user.cluster_admin && *name != principal.user.tenant_name => {
            return Err(ApiError::forbidden(format!(
                "you may not create users in tenant `{name}`"
            ))
            .with_field("tenant"));
        }
        Some(name) => state.store.get_tenant_by_name(name).await.map_err(|err| {
            ApiError::from_store(err, || format!("no tenant `{name}`")).with_field("tenant")
        })?,
    };
    if !principal.can_manage_users_of(tenant.id) {
        return Err(ApiError::forbidden(format!(
            "you may not create users in tenant `{}`",
            tenant.name
        )));
    }
    if body.cluster_admin {
        principal.require_cluster_admin()?;
    }
    let user = state
        .store
        .create_user(&NewUser {
            tenant_id: tenant.id,
            name: body.name,
            role: body.role,
            cluster_admin: body.cluster_admin,
        })
        .await?;
    tracing::info!(user.id = %user.id, tenant.id = %user.tenant_id, "user created");
    crate::audit::record(
        state.store.as_ref(),
        &principal,
        crate::audit::Action::UserCreate,
        format!("{}/{}", user.tenant_name, user.name),
        format!(
            "role {}{}",
            user.role,
            if user.cluster_admin {
                ", cluster administrator"
            } else {
                ""
            }
        ),
    )
    .await;
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
    let users = state.store.list_users(principal.scope()).await?;
    Ok(Json(UserList {
        users: users.into_iter().map(UserView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

/// Get a user by id.
#[utoipa::path(
    get, path = "/api/v1/users/{id}", tag = "users",
    params(("id" = String, Path)),
    responses((status = 200, body = UserEnvelope), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<UserEnvelope>> {
    let user_id: UserId = id
        .parse()
        .map_err(|_| ApiError::not_found(format!("no user `{id}`")))?;
    let user = state
        .store
        .get_user(principal.scope(), user_id)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no user `{id}`")))?;
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
