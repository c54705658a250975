//! Tenants — the teams sharing the cluster — and their GPU quotas: cluster administrators create them
//! and set quotas; everyone else sees only their own tenant.

use crate::Service;
use crate::audit::{self, Action};
use crate::auth::Principal;
use crate::error::{ServiceError, ServiceResult};
use drover_store::{NewTenant, Quota, Tenant};

/// Largest quota a tenant may be given; beyond this a number is a typo.
const MAX_QUOTA_GPUS: u32 = 1_000_000;

/// A quota's own consistency; `field_prefix` is how the caller names the quota (`quota.` in a new
/// tenant, nothing in a quota of its own).
pub fn validate_quota(quota: &Quota, field_prefix: &str) -> ServiceResult<()> {
    let field = |name: &str| format!("{field_prefix}{name}");
    if quota.guaranteed_gpus > MAX_QUOTA_GPUS {
        return Err(ServiceError::invalid(
            &field("guaranteed_gpus"),
            format!("must be at most {MAX_QUOTA_GPUS}"),
        ));
    }
    if let Some(max) = quota.max_gpus {
        if max > MAX_QUOTA_GPUS {
            return Err(ServiceError::invalid(
                &field("max_gpus"),
                format!("must be at most {MAX_QUOTA_GPUS}"),
            ));
        }
        if max < quota.guaranteed_gpus {
            return Err(ServiceError::invalid(
                &field("max_gpus"),
                format!(
                    "must be at least guaranteed_gpus ({})",
                    quota.guaranteed_gpus
                ),
            ));
        }
    }
    Ok(())
}

/// Creates tenant `name` with `quota` (cluster administrators only).
pub async fn create(
    service: &Service,
    principal: &Principal,
    name: String,
    quota: Quota,
) -> ServiceResult<Tenant> {
    principal.require_cluster_admin()?;
    drover_core::validate::validate_name(&name, "name")
        .map_err(|err| ServiceError::invalid(&err.field, err.reason))?;
    validate_quota(&quota, "quota.")?;
    let tenant = service
        .store
        .create_tenant(&NewTenant { name, quota })
        .await?;
    tracing::info!(tenant.id = %tenant.id, tenant.name = %tenant.name, "tenant created");
    audit::record(
        service.store.as_ref(),
        principal,
        Action::TenantCreate,
        &tenant.name,
        "",
    )
    .await;
    Ok(tenant)
}

/// Every tenant for cluster administrators; the caller's own for everyone else.
pub async fn list(service: &Service, principal: &Principal) -> ServiceResult<Vec<Tenant>> {
    Ok(if principal.user.cluster_admin {
        service.store.list_tenants().await?
    } else {
        vec![service.store.get_tenant(principal.user.tenant_id).await?]
    })
}

/// Tenant `name`, if the caller may see it (anyone else's is simply not found).
pub async fn get(service: &Service, principal: &Principal, name: &str) -> ServiceResult<Tenant> {
    let tenant = service
        .store
        .get_tenant_by_name(name)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no tenant `{name}`")))?;
    if principal.user.cluster_admin || tenant.id == principal.user.tenant_id {
        Ok(tenant)
    } else {
        Err(ServiceError::not_found(format!("no tenant `{name}`")))
    }
}

/// Sets tenant `name`'s quota (cluster administrators only); takes effect on the next round and for
/// every cached token at once.
pub async fn set_quota(
    service: &Service,
    principal: &Principal,
    name: &str,
    quota: Quota,
) -> ServiceResult<Tenant> {
    principal.require_cluster_admin()?;
    validate_quota(&quota, "")?;
    let tenant = get(service, principal, name).await?;
    let tenant = service.store.set_tenant_quota(tenant.id, quota).await?;
    service.tokens.forget_all();
    tracing::info!(tenant.id = %tenant.id, "tenant quota set");
    audit::record(
        service.store.as_ref(),
        principal,
        Action::TenantQuota,
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
    Ok(tenant)
}
