//! `/api/v1/secrets`: the caller's tenant's secrets. Values go in and never come out over the API: a
//! job refers to a secret by name (`env: {HF_TOKEN: {secret: hf-token}}`) and only the task's process
//! receives the value. Members and admins set and delete; every role lists names.

use crate::error::{ApiResult, ErrorBody};
use crate::extract::{ApiJson, PathParam};
use crate::paging::ListMeta;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use drover_service::auth::Principal;
use drover_service::secrets;
use drover_store::SecretInfo;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSecret {
    /// The value: at most 65536 characters. Never returned.
    #[schema(max_length = 65536)]
    pub value: String,
}

/// Never prints the value.
impl std::fmt::Debug for SetSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetSecret").finish_non_exhaustive()
    }
}

/// A secret without its value.
#[derive(Debug, Serialize, ToSchema)]
pub struct SecretView {
    pub name: String,
    pub tenant_id: Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<SecretInfo> for SecretView {
    fn from(info: SecretInfo) -> Self {
        SecretView {
            name: info.name,
            tenant_id: info.tenant_id.0,
            created_by: info.created_by.map(|u| u.0),
            created_at: info.created_at,
            updated_at: info.updated_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SecretEnvelope {
    pub secret: SecretView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SecretList {
    pub secrets: Vec<SecretView>,
    pub meta: ListMeta,
}

/// Create or replace a secret of the caller's tenant.
#[utoipa::path(
    put, path = "/api/v1/secrets/{name}", tag = "secrets", request_body = SetSecret,
    params(("name" = String, Path, max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description = "A DNS-1123 label")),
    responses((status = 200, body = SecretEnvelope),
              (status = 403, description = "A viewer", body = ErrorBody),
              (status = 422, description = "A name that is not a DNS-1123 label, or a value too long; `field` names it", body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn set(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
    ApiJson(body): ApiJson<SetSecret>,
) -> ApiResult<Json<SecretEnvelope>> {
    let info = secrets::set(&state, &principal, name, &body.value).await?;
    Ok(Json(SecretEnvelope {
        secret: info.into(),
    }))
}

/// List the caller's tenant's secrets (names and times, never values).
#[utoipa::path(
    get, path = "/api/v1/secrets", tag = "secrets",
    responses((status = 200, body = SecretList)),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> ApiResult<Json<SecretList>> {
    let secrets = secrets::list(&state, &principal).await?;
    Ok(Json(SecretList {
        secrets: secrets.into_iter().map(SecretView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

/// Delete a secret of the caller's tenant. Jobs that refer to it fail when they next start.
#[utoipa::path(
    delete, path = "/api/v1/secrets/{name}", tag = "secrets",
    params(("name" = String, Path, max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description = "A DNS-1123 label")),
    responses((status = 200, body = SecretEnvelope),
              (status = 403, description = "A viewer", body = ErrorBody),
              (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<SecretEnvelope>> {
    let info = secrets::delete(&state, &principal, &name).await?;
    Ok(Json(SecretEnvelope {
        secret: info.into(),
    }))
}
