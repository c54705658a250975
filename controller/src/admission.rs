//! Admitting an object: the tenant its namespace maps to, the tenant's `kubernetes` user, the
//! object as the API's document, and the job submitted for it (idempotently, keyed by its uid:
//! [`job_key`], which mirroring looks jobs up by too).

use super::context::{CONTROLLER_USER, Context, Error};
use super::crd::DroverJob;
use super::status::pascal;
use drover_core::spec::{API_VERSION, Format, KIND};
use drover_core::{Role, TokenId};
use drover_service::auth::Principal;
use drover_service::jobs::submit as create_job;
use drover_store::{Job, JobFilter, NewUser, Scope, StoreError, Tenant};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;
use sha2::{Digest, Sha256};

/// An object the controller admits into a tenant: a DroverJob or a DroverExperiment.
pub(super) trait Admitted: ResourceExt {
    /// The tenant its status records once Drover has its job (or experiment).
    fn recorded_tenant(&self) -> Option<String>;
}

impl Admitted for DroverJob {
    fn recorded_tenant(&self) -> Option<String> {
        self.status
            .as_ref()
            .filter(|status| status.job_id.is_some())
            .and_then(|status| status.tenant.clone())
    }
}

/// The tenant of the object's job (or experiment): the one recorded in its status once Drover has it
/// (a namespace relabelled later does not move it, or make a second one), else the namespace's.
pub(super) async fn tenant_for(
    obj: &impl Admitted,
    ctx: &Context,
) -> Result<Result<Tenant, String>, Error> {
    let Some(name) = obj.recorded_tenant() else {
        return tenant_of(obj, ctx).await;
    };
    match ctx.service.store.get_tenant_by_name(&name).await {
        Ok(tenant) => Ok(Ok(tenant)),
        Err(StoreError::NotFound) => Ok(Err(format!(
            "the tenant `{name}` this object was submitted to no longer exists"
        ))),
        Err(err) => Err(err.into()),
    }
}

/// The tenant the object's namespace maps to, or a message saying why there is none.
pub(super) async fn tenant_of(
    obj: &impl ResourceExt,
    ctx: &Context,
) -> Result<Result<Tenant, String>, Error> {
    let namespace = obj.namespace().unwrap_or_default();
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let label = &ctx.settings.tenant_label;
    let labelled = namespaces
        .get_opt(&namespace)
        .await?
        .and_then(|ns| ns.labels().get(label).cloned());
    let (name, how) = match labelled {
        Some(name) => (name, format!("the namespace's label `{label}`")),
        None => (
            namespace.clone(),
            format!("the namespace's name (it has no `{label}` label)"),
        ),
    };
    match ctx.service.store.get_tenant_by_name(&name).await {
        Ok(tenant) => Ok(Ok(tenant)),
        Err(StoreError::NotFound) => Ok(Err(format!(
            "no Drover tenant `{name}` (from {how}); create it (`drover tenant create {name}`) or label the namespace `{label}=<tenant>`"
        ))),
        Err(err) => Err(err.into()),
    }
}

/// The tenant's `kubernetes` user as a principal, made on first use.
pub(super) async fn principal_for(ctx: &Context, tenant: &Tenant) -> Result<Principal, Error> {
    let store = ctx.service.store.as_ref();
    let find = || async {
        store
            .list_users(Scope::Tenant(tenant.id))
            .await
            .map(|users| users.into_iter().find(|u| u.name == CONTROLLER_USER))
    };
    let user = match find().await? {
        Some(user) => user,
        None => {
            let new = NewUser {
                tenant_id: tenant.id,
                name: CONTROLLER_USER.to_owned(),
                role: Role::Member,
                cluster_admin: false,
            };
            match store.create_user(&new).await {
                Ok(user) => user,
                // Made by a concurrent reconcile in the same tenant.
                Err(StoreError::Conflict { .. }) => find()
                    .await?
                    .ok_or_else(|| Error::Api("the kubernetes user vanished".to_owned()))?,
                Err(err) => return Err(err.into()),
            }
        }
    };
    Ok(Principal {
        user,
        // It holds no token: it acts inside the server.
        token_id: TokenId(uuid::Uuid::nil()),
        tenant_quota: tenant.quota.clone(),
        token_expires_at: None,
    })
}

/// The object as the API's document, validated by the API's own parser (the field paths in its
/// errors are the object's). Kubernetes' own metadata (annotations, managed fields) stays out.
pub(super) fn document_of(
    obj: &DroverJob,
) -> Result<drover_core::DroverJob, drover_core::spec::SpecError> {
    let document = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": obj.name_any(),
            "labels": obj.labels(),
            "namespace": obj.namespace(),
        },
        "spec": obj.spec,
    });
    let bytes = serde_json::to_vec(&document).unwrap_or_default();
    drover_core::DroverJob::parse(&bytes, Format::Json)
}

/// The object's uid as the idempotency key of its job.
pub(super) fn job_key(obj: &DroverJob) -> String {
    format!("kubernetes/{}", obj.uid().unwrap_or_default())
}

/// Submits the object's job; a user's problem (quota, name taken) comes back as (reason, message).
pub(super) async fn submit(
    ctx: &Context,
    principal: &Principal,
    obj: &DroverJob,
    mut document: drover_core::DroverJob,
) -> Result<Result<Job, (String, String)>, Error> {
    let key = job_key(obj);
    let hash: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    let name = document.metadata.name.clone();
    for attempt in 0..2 {
        match create_job(
            &ctx.service,
            principal,
            document.clone(),
            Some(key.clone()),
            Some(hash),
        )
        .await
        {
            Ok(created) => return Ok(Ok(created.value)),
            Err(err) if err.is_client_error() => {
                let taken = err.field.as_deref() == Some("metadata.name")
                    && err.kind == drover_service::ErrorKind::Conflict;
                if taken && attempt == 0 && name_free_later(ctx, principal, &name).await? {
                    // An ended job has the name (the object was deleted and applied again):
                    // the new job takes the name with the object's uid.
                    let uid: String = obj.uid().unwrap_or_default().chars().take(8).collect();
                    let stem: String = name.chars().take(63 - 1 - uid.len()).collect();
                    document.metadata.name = format!("{}-{uid}", stem.trim_end_matches('-'));
                    continue;
                }
                let reason = if taken {
                    "NameTaken".to_owned()
                } else {
                    pascal(err.code)
                };
                let field = err.field.map(|f| format!("{f}: ")).unwrap_or_default();
                return Ok(Err((reason, format!("{field}{}", err.message))));
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(Err((
        "NameTaken".to_owned(),
        format!("jobs named `{name}` exist in the tenant"),
    )))
}

/// Whether the job holding `name` in the tenant has ended (so a suffixed name may be used).
pub(super) async fn name_free_later(
    ctx: &Context,
    principal: &Principal,
    name: &str,
) -> Result<bool, Error> {
    let filter = JobFilter {
        name_contains: Some(name.to_owned()),
        limit: 100,
        ..JobFilter::default()
    };
    let jobs = ctx
        .service
        .store
        .list_jobs(principal.scope(), &filter)
        .await?;
    Ok(jobs
        .iter()
        .find(|job| job.name == name)
        .is_some_and(|job| job.state.is_final()))
}
