//! `/api/v1/secrets`: the caller's tenant's secrets. Values go in and never come out over the API: a
//! job refers to a secret by name (`env: {HF_TOKEN: {secret: hf-token}}`) and only the task's process
//! receives the value. Members and admins set and delete; every role lists names.

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, PathParam};
use crate::secrets::{MAX_VALUE_BYTES, SecretBox};
use crate::state::AppState;
use crate::store::{NewSecret, SecretInfo};
use crate::views::ListMeta;
use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSecret {
    /// The value (UTF-8, at most 64 KiB). Never returned.
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

fn secret_box(state: &AppState) -> ApiResult<&Arc<SecretBox>> {
    state.secrets.as_ref().ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "no_secret_key",
            "this server keeps no secrets (it was started without a secret key)",
        )
    })
}

fn validate_secret_name(name: &str) -> ApiResult<()> {
    drover_core::validate::validate_name(name, "name")
        .map_err(|err| ApiError::invalid("name", err.reason))
}

/// Create or replace a secret of the caller's tenant.
#[utoipa::path(
    put, path = "/api/v1/secrets/{name}", tag = "secrets", request_body = SetSecret,
    params(("name" = String, Path, description = "A DNS-1123 label")),
    responses((status = 200, body = SecretEnvelope), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn set(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
    ApiJson(body): ApiJson<SetSecret>,
) -> ApiResult<Json<SecretEnvelope>> {
    principal.require_job_writer()?;
    validate_secret_name(&name)?;
    if body.value.len() > MAX_VALUE_BYTES {
        return Err(ApiError::invalid(
            "value",
            format!("at most {MAX_VALUE_BYTES} bytes"),
        ));
    }
    let tenant = principal.user.tenant_id;
    let sealed = secret_box(&state)?.seal(tenant, &name, body.value.as_bytes());
    let info = state
        .store
        .put_secret(&NewSecret {
            tenant_id: tenant,
            name,
            sealed,
            created_by: principal.user.id,
        })
        .await?;
    tracing::info!(tenant.id = %tenant, secret.name = info.name, user.id = %principal.user.id, "secret set");
    crate::audit::record(
        state.store.as_ref(),
        &principal,
        crate::audit::Action::SecretSet,
        format!("{}/{}", principal.user.tenant_name, info.name),
        "",
    )
    .await;
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
    let secrets = state.store.list_secrets(principal.user.tenant_id).await?;
    Ok(Json(SecretList {
        secrets: secrets.into_iter().map(SecretView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

/// Delete a secret of the caller's tenant. Jobs that refer to it fail when they next start.
#[utoipa::path(
    delete, path = "/api/v1/secrets/{name}", tag = "secrets",
    params(("name" = String, Path)),
    responses((status = 200, body = SecretEnvelope), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<SecretEnvelope>> {
    principal.require_job_writer()?;
    let info = state
        .store
        .delete_secret(principal.user.tenant_id, &name)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no secret `{name}`")))?;
    tracing::info!(tenant.id = %info.tenant_id, secret.name = info.name, user.id = %principal.user.id, "secret deleted");
    crate::audit::record(
        state.store.as_ref(),
        &principal,
        crate::audit::Action::SecretDelete,
        format!("{}/{}", principal.user.tenant_name, info.name),
        "",
    )
    .await;
    Ok(Json(SecretEnvelope {
        secret: info.into(),
    }))
}

/// A job may refer only to secrets its tenant has: checked at submission, so a typo is a 422 now
/// rather than a failed job later.
pub async fn check_references(
    state: &AppState,
    tenant: drover_core::TenantId,
    tenant_name: &str,
    job: &drover_core::DroverJob,
) -> ApiResult<()> {
    let Some(command) = &job.spec.command else {
        return Ok(());
    };
    let mut known: Option<Vec<String>> = None;
    for (key, value) in &command.env {
        let Some(name) = value.secret() else { continue };
        let field = format!("spec.command.env.{key}.secret");
        if state.secrets.is_none() {
            return Err(ApiError::invalid(
                &field,
                "this server keeps no secrets (it was started without a secret key)",
            ));
        }
        if known.is_none() {
            let listed = state.store.list_secrets(tenant).await?;
            known = Some(listed.into_iter().map(|s| s.name).collect());
        }
        if !known
            .as_ref()
            .is_some_and(|names| names.iter().any(|n| n == name))
        {
            return Err(ApiError::invalid(
                &field,
                format!("no secret `{name}` in tenant `{tenant_name}` (drover secret set {name})"),
            ));
        }
    }
    Ok(())
}
