//! `/api/v1/tenants`: teams sharing the cluster, with their GPU quotas. Cluster administrators create
//! tenants and set quotas; everyone else sees only their own tenant.

use crate::error::{ApiResult, ErrorBody};
use crate::extract::{ApiJson, PathParam};
use crate::paging::ListMeta;
use crate::state::AppState;
use crate::views::{TenantEnvelope, TenantList, TenantView};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use drover_service::auth::Principal;
use drover_service::tenants;
use drover_store::Quota;
use serde::Deserialize;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// A DNS-1123 label.
    pub name: String,
    #[serde(default)]
    pub quota: Quota,
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
    let tenant = tenants::create(&state, &principal, body.name, body.quota).await?;
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
    let tenants = tenants::list(&state, &principal).await?;
    Ok(Json(TenantList {
        tenants: tenants.into_iter().map(TenantView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
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
    let tenant = tenants::get(&state, &principal, &name).await?;
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
    let quota = Quota {
        guaranteed_gpus: quota.guaranteed_gpus,
        max_gpus: quota.max_gpus,
    };
    let tenant = tenants::set_quota(&state, &principal, &name, quota).await?;
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
