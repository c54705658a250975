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
    validate_bounds(quota.guaranteed_gpus, quota.max_gpus, |name| {
        format!("{field_prefix}{name}")
    })?;
    validate_flavours(quota, field_prefix)
}

/// A guarantee and a maximum: each at most [`MAX_QUOTA_GPUS`], the maximum at least the guarantee;
/// `field` names each.
fn validate_bounds(
    guaranteed: u32,
    max: Option<u32>,
    field: impl Fn(&str) -> String,
) -> ServiceResult<()> {
    if guaranteed > MAX_QUOTA_GPUS {
        return Err(ServiceError::invalid(
            &field("guaranteed_gpus"),
            format!("must be at most {MAX_QUOTA_GPUS}"),
        ));
    }
    if let Some(max) = max {
        if max > MAX_QUOTA_GPUS {
            return Err(ServiceError::invalid(
                &field("max_gpus"),
                format!("must be at most {MAX_QUOTA_GPUS}"),
            ));
        }
        if max < guaranteed {
            return Err(ServiceError::invalid(
                &field("max_gpus"),
                format!("must be at least guaranteed_gpus ({guaranteed})"),
            ));
        }
    }
    Ok(())
}

/// Most GPU models a quota may name.
const MAX_FLAVOURS: usize = 32;

/// A quota's flavours: each names a model once, its maximum is at least its guarantee, it lends at
/// most its guarantee, and the flavours' guarantees are part of the tenant's (they add up to at most
/// `guaranteed_gpus`).
fn validate_flavours(quota: &Quota, field_prefix: &str) -> ServiceResult<()> {
    if quota.flavours.len() > MAX_FLAVOURS {
        return Err(ServiceError::invalid(
            &format!("{field_prefix}flavours"),
            format!("at most {MAX_FLAVOURS} GPU models"),
        ));
    }
    let mut guaranteed: u64 = 0;
    for (i, flavour) in quota.flavours.iter().enumerate() {
        let field = |name: &str| format!("{field_prefix}flavours[{i}].{name}");
        let model = flavour.gpu_model.trim();
        if model.is_empty() || model.chars().count() > 64 || model.chars().any(char::is_control) {
            return Err(ServiceError::invalid(
                &field("gpu_model"),
                "must be a GPU model's name or a word of it, 1 to 64 characters",
            ));
        }
        if quota.flavours[..i]
            .iter()
            .any(|other| other.gpu_model.trim().eq_ignore_ascii_case(model))
        {
            return Err(ServiceError::invalid(
                &field("gpu_model"),
                format!("`{model}` is named twice"),
            ));
        }
        validate_bounds(flavour.guaranteed_gpus, flavour.max_gpus, field)?;
        if let Some(lending) = flavour.lending_limit
            && lending > flavour.guaranteed_gpus
        {
            return Err(ServiceError::invalid(
                &field("lending_limit"),
                format!(
                    "must be at most its guaranteed_gpus ({}): only a guarantee is lent",
                    flavour.guaranteed_gpus
                ),
            ));
        }
        guaranteed += u64::from(flavour.guaranteed_gpus);
    }
    if guaranteed > u64::from(quota.guaranteed_gpus) {
        return Err(ServiceError::invalid(
            &format!("{field_prefix}flavours"),
            format!(
                "the GPU models' guarantees add up to {guaranteed}, more than guaranteed_gpus ({}): they are part of it",
                quota.guaranteed_gpus
            ),
        ));
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
        describe_quota(&tenant.quota),
    )
    .await;
    Ok(tenant)
}

/// A quota in a line, for the audit log.
fn describe_quota(quota: &Quota) -> String {
    let max = |max: Option<u32>| max.map_or_else(|| "unlimited".to_owned(), |m| m.to_string());
    let mut line = format!(
        "guaranteed {} GPUs, at most {}",
        quota.guaranteed_gpus,
        max(quota.max_gpus)
    );
    for flavour in &quota.flavours {
        line.push_str(&format!(
            "; {}: guaranteed {}, at most {}, lends {}",
            flavour.gpu_model,
            flavour.guaranteed_gpus,
            max(flavour.max_gpus),
            flavour
                .lending_limit
                .map_or_else(|| "all".to_owned(), |l| l.to_string())
        ));
    }
    line
}
