//! `/api/v1/tenants`: teams sharing the cluster, with their GPU quotas. Cluster administrators create
//! tenants and set quotas; everyone else sees only their own tenant.

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, PathParam};
use crate::state::AppState;
use crate::store::{NewTenant, Quota};
use crate::views::{ListMeta, TenantEnvelope, TenantList, TenantView};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::ToSchema;

/// Largest quota a tenant may be given; beyond this a number is a typo.
const MAX_QUOTA_GPUS: u32 = 1_000_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// A DNS-1123 label.
    pub name: String,
    #[serde(default)]
    pub quota: Quota,
}

fn validate_quota(quota: &Quota) -> ApiResult<()> {
    if quota.guaranteed_gpus > MAX_QUOTA_GPUS {
        return Err(ApiError::invalid(
            "quota.guaranteed_gpus",
            format!("must be at most {MAX_QUOTA_GPUS}"),
        ));
    }
    if let Some(max) = quota.max_gpus {
        if max > MAX_QUOTA_GPUS {
            return Err(ApiError::invalid(
                "quota.max_gpus",
                format!("must be at most {MAX_QUOTA_GPUS}"),
            ));
        }
        if max < quota.guaranteed_gpus {
            return Err(ApiError::invalid(
                "quota.max_gpus",
                format!(
                    "must be at least guaranteed_gpus ({})",
                    quota.guaranteed_gpus
                ),
            ));
        }
    }
    Ok(())
}

/// Create a tenant (cluster administrators).
#[utoipa::path(
    post, path = "/api/v1/tenants", tag = "tenants", request_body = CreateTenant,
    responses((status = 201, body = TenantEnvelope), (status = 403, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<CreateTenant>,
) -> ApiResult<(StatusCode, Json<TenantEnvelope>)> {
    principal.require_cluster_admin()?;
    drover_core::validate::validate_name(&body.name, "name")
        .map_err(|err| ApiError::invalid(&err.field, err.reason))?;
    validate_quota(&body.quota)?;
    let tenant = state
        .store
        .create_tenant(&NewTenant {
            name: body.name,
            quota: body.quota,
        })
        .await?;
    tracing::info!(tenant.id = %tenant.id, tenant.name = %tenant.name, "tenant created");
    crate::audit::record(
        state.store.as_ref(),
        &principal,
        crate::audit::Action::TenantCreate,
        &tenant.name,
        "",
    )
    .await;
    Ok((
        StatusCode::CREATED,
        Json(TenantEnvelope {
            tenant: tenant.into(),
        }),
    ))
}

/// List tenants: all of them for cluster administrators, one's own otherwise.
#[utoipa::path(
    get, path = "/api/v1/tenants", tag = "tenants",
    responses((status = 200, body = TenantList)),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> ApiResult<Json<TenantList>> {
    let tenants = if principal.user.cluster_admin {
        state.store.list_tenants().await?
    } else {
        vec![state.store.get_tenant(principal.user.tenant_id).await?]
    };
    Ok(Json(TenantList {
        tenants: tenants.into_iter().map(TenantView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

async fn visible_tenant(
    state: &AppState,
    principal: &Principal,
    name: &str,
) -> ApiResult<crate::store::Tenant> {
    let tenant = state
        .store
        .get_tenant_by_name(name)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no tenant `{name}`")))?;
    if principal.user.cluster_admin || tenant.id == principal.user.tenant_id {
        Ok(tenant)
    } else {
        Err(ApiError::not_found(format!("no tenant `{name}`")))
    }
}

/// Get a tenant by name.
#[utoipa::path(
    get, path = "/api/v1/tenants/{name}", tag = "tenants",
    params(("name" = String, Path)),
    responses((status = 200, body = TenantEnvelope), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<TenantEnvelope>> {
    let tenant = visible_tenant(&state, &principal, &name).await?;
    Ok(Json(TenantEnvelope {
        tenant: tenant.into(),
    }))
}

/// Set a tenant's quota (cluster administrators).
#[utoipa::path(
    put, path = "/api/v1/tenants/{name}/quota", tag = "tenants", request_body = Quota,
    params(("name" = String, Path)),
    responses((status = 200, body = TenantEnvelope), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn set_quota(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
    ApiJson(quota): ApiJson<QuotaBody>,
) -> ApiResult<Json<TenantEnvelope>> {
    principal.require_cluster_admin()?;
    let quota = Quota {
        guaranteed_gpus: quota.guaranteed_gpus,
        max_gpus: quota.max_gpus,
    };
    validate_quota(&quota).map_err(|mut err| {
        err.field = err.field.map(|f| f.trim_start_matches("quota.").to_owned());
        err
    })?;
    let tenant = visible_tenant(&state, &principal, &name).await?;
    let tenant = state.store.set_tenant_quota(tenant.id, quota).await?;
    state.tokens.forget_all();
    tracing::info!(tenant.id = %tenant.id, "tenant quota set");
    crate::audit::record(
        state.store.as_ref(),
        &principal,
        crate::audit::Action::TenantQuota,
        &tenant.name,
        format!(
            "guaranteed {} GPUs, at most {}",
            tenant.quota.guaranteed_gpus,
            tenant
                .quota
                .max_gpus
                .map_or_else(|| "unlimited".to_owned(), |m| m.to_string())
        ),
    )
    .await;
    Ok(Json(TenantEnvelope {
        tenant: tenant.into(),
    }))
}

/// A quota as a request body, strictly parsed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaBody {
    pub guaranteed_gpus: u32,
    #[serde(default)]
    pub max_gpus: Option<u32>,
}
