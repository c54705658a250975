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
use drover_store::{FlavourQuota, Quota};
use serde::Deserialize;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// A DNS-1123 label.
    #[schema(max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    pub name: String,
    /// No guarantee and no ceiling when absent.
    #[serde(default)]
    pub quota: QuotaBody,
}

/// Create a tenant (cluster administrators).
///
/// A rule across fields answers 422: the quota's `max_gpus`, when given, is at least its
/// `guaranteed_gpus`, and its flavours keep the rules of [`set_quota`].
#[utoipa::path(
    post, path = "/api/v1/tenants", tag = "tenants", request_body = CreateTenant,
    responses((status = 201, body = TenantEnvelope),
              (status = 403, description = "Anyone but a cluster administrator", body = ErrorBody),
              (status = 409, description = "A tenant of this name exists", body = ErrorBody),
              (status = 422, description = "`quota.max_gpus` below `quota.guaranteed_gpus`, a flavour's rule broken, or a body of the wrong shape; `field` names the problem", body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<CreateTenant>,
) -> ApiResult<(StatusCode, Json<TenantEnvelope>)> {
    let tenant = tenants::create(&state, &principal, body.name, body.quota.into()).await?;
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
    params(("name" = String, Path, max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description = "The tenant's name")),
    responses((status = 200, body = TenantEnvelope), (status = 404, description = "No such tenant, or another tenant for anyone but a cluster administrator", body = ErrorBody)),
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
///
/// A rule across fields answers 422: `max_gpus`, when given, is at least `guaranteed_gpus`; each
/// flavour's `max_gpus` is at least its `guaranteed_gpus`, its `lending_limit` at most it, and the
/// flavours' guarantees add up to at most `guaranteed_gpus`.
#[utoipa::path(
    put, path = "/api/v1/tenants/{name}/quota", tag = "tenants", request_body = QuotaBody,
    params(("name" = String, Path, max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description = "The tenant's name")),
    responses((status = 200, body = TenantEnvelope),
              (status = 403, description = "Anyone but a cluster administrator", body = ErrorBody),
              (status = 404, body = ErrorBody),
              (status = 422, description = "`max_gpus` below `guaranteed_gpus`, a flavour's rule broken (see above), or a body of the wrong shape; `field` names the problem", body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn set_quota(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
    ApiJson(quota): ApiJson<QuotaBody>,
) -> ApiResult<Json<TenantEnvelope>> {
    let tenant = tenants::set_quota(&state, &principal, &name, quota.into()).await?;
    Ok(Json(TenantEnvelope {
        tenant: tenant.into(),
    }))
}

/// A quota as a request body, strictly parsed.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaBody {
    /// GPUs the tenant can always get, at most 1000000.
    #[schema(maximum = 1000000)]
    pub guaranteed_gpus: u32,
    /// GPUs the tenant may hold at most, borrowed capacity included, at most 1000000 and at least
    /// `guaranteed_gpus`; absent or `null` means no limit.
    #[serde(default)]
    #[schema(maximum = 1000000)]
    pub max_gpus: Option<u32>,
    /// The quota per GPU model (Kueue's resource flavours), at most 32: each model named once; its
    /// guarantees are part of `guaranteed_gpus` (they add up to at most it).
    #[serde(default)]
    #[schema(max_items = 32)]
    pub flavours: Vec<FlavourBody>,
}

/// A tenant's quota of one GPU model, strictly parsed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FlavourBody {
    /// The model as nodes report it, or a word of it, case aside (`v100` matches `Tesla V100-SXM2`).
    #[schema(min_length = 1, max_length = 64)]
    pub gpu_model: String,
    /// GPUs of this model the tenant is guaranteed (Kueue's nominal quota); others borrow them
    /// while it does not use them and give them back when it needs them.
    #[serde(default)]
    #[schema(maximum = 1000000)]
    pub guaranteed_gpus: u32,
    /// GPUs of this model the tenant may hold at most, at least `guaranteed_gpus`; absent or `null`:
    /// no limit but the tenant's own.
    #[serde(default)]
    #[schema(maximum = 1000000)]
    pub max_gpus: Option<u32>,
    /// How many of this model's guaranteed GPUs others may borrow while the tenant does not use
    /// them, at most `guaranteed_gpus` (Kueue's lending limit); the rest stay idle for the tenant.
    /// Absent or `null`: all of them.
    #[serde(default)]
    #[schema(maximum = 1000000)]
    pub lending_limit: Option<u32>,
}

impl From<QuotaBody> for Quota {
    fn from(body: QuotaBody) -> Self {
        Quota {
            guaranteed_gpus: body.guaranteed_gpus,
            max_gpus: body.max_gpus,
            flavours: body
                .flavours
                .into_iter()
                .map(|f| FlavourQuota {
                    gpu_model: f.gpu_model.trim().to_owned(),
                    guaranteed_gpus: f.guaranteed_gpus,
                    max_gpus: f.max_gpus,
                    lending_limit: f.lending_limit,
                })
                .collect(),
        }
    }
}
