//! A tenant's secrets: values go in sealed with the server's key and never come out through an
//! entrance — a job refers to a secret by name (`env: {HF_TOKEN: {secret: hf-token}}`) and only the
//! task's process receives the value. Members and admins set and delete; every role lists names.
//! Every `secret:` a job's environment names must exist in its tenant before the job is stored.

use crate::Service;
use crate::audit::{self, Action};
use crate::auth::Principal;
use crate::error::{ErrorKind, ServiceError, ServiceResult};
use drover_store::secrets::{MAX_VALUE_CHARS, SecretBox};
use drover_store::{NewSecret, SecretInfo};
use std::sync::Arc;

fn secret_box(service: &Service) -> ServiceResult<&Arc<SecretBox>> {
    service.secrets.as_ref().ok_or_else(|| {
        ServiceError::new(
            ErrorKind::Unavailable,
            "no_secret_key",
            "this server keeps no secrets (it was started without a secret key)",
        )
    })
}

/// Sets the caller's tenant's secret `name` to `value`, sealed.
pub async fn set(
    service: &Service,
    principal: &Principal,
    name: String,
    value: &str,
) -> ServiceResult<SecretInfo> {
    principal.require_job_writer()?;
    drover_core::validate::validate_name(&name, "name")
        .map_err(|err| ServiceError::invalid("name", err.reason))?;
    if value.chars().count() > MAX_VALUE_CHARS {
        return Err(ServiceError::invalid(
            "value",
            format!("at most {MAX_VALUE_CHARS} characters"),
        ));
    }
    let tenant = principal.user.tenant_id;
    let sealed = secret_box(service)?.seal(tenant, &name, value.as_bytes());
    let info = service
        .store
        .put_secret(&NewSecret {
            tenant_id: tenant,
            name,
            sealed,
            created_by: principal.user.id,
        })
        .await?;
    tracing::info!(tenant.id = %tenant, secret.name = info.name, user.id = %principal.user.id, "secret set");
    audit::record(
        service.store.as_ref(),
        principal,
        Action::SecretSet,
        format!("{}/{}", principal.user.tenant_name, info.name),
        "",
    )
    .await;
    Ok(info)
}

/// The names (never the values) of the caller's tenant's secrets.
pub async fn list(service: &Service, principal: &Principal) -> ServiceResult<Vec<SecretInfo>> {
    Ok(service.store.list_secrets(principal.user.tenant_id).await?)
}

/// Deletes the caller's tenant's secret `name`.
pub async fn delete(
    service: &Service,
    principal: &Principal,
    name: &str,
) -> ServiceResult<SecretInfo> {
    principal.require_job_writer()?;
    let info = service
        .store
        .delete_secret(principal.user.tenant_id, name)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no secret `{name}`")))?;
    tracing::info!(tenant.id = %info.tenant_id, secret.name = info.name, user.id = %principal.user.id, "secret deleted");
    audit::record(
        service.store.as_ref(),
        principal,
        Action::SecretDelete,
        format!("{}/{}", principal.user.tenant_name, info.name),
        "",
    )
    .await;
    Ok(info)
}

/// A job may refer only to secrets its tenant has: checked at submission, so a typo is a 422 now
/// rather than a failed job later.
pub async fn check_references(
    service: &Service,
    tenant: drover_core::TenantId,
    tenant_name: &str,
    job: &drover_core::DroverJob,
) -> ServiceResult<()> {
    let Some(command) = &job.spec.command else {
        return Ok(());
    };
    let mut known: Option<Vec<String>> = None;
    for (key, value) in &command.env {
        let Some(name) = value.secret() else { continue };
        let field = format!("spec.command.env.{key}.secret");
        if service.secrets.is_none() {
            return Err(ServiceError::invalid(
                &field,
                "this server keeps no secrets (it was started without a secret key)",
            ));
        }
        if known.is_none() {
            let listed = service.store.list_secrets(tenant).await?;
            known = Some(listed.into_iter().map(|s| s.name).collect());
        }
        if !known
            .as_ref()
            .is_some_and(|names| names.iter().any(|n| n == name))
        {
            return Err(ServiceError::invalid(
                &field,
                format!("no secret `{name}` in tenant `{tenant_name}` (drover secret set {name})"),
            ));
        }
    }
    Ok(())
}
