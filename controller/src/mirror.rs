//! Mirroring, when asked (`--kubernetes-mirror`): jobs submitted over REST or the CLI appear as
//! DroverJob objects in their tenant's namespace, so `kubectl get droverjobs` shows every job.
//!
//! - The namespace of a tenant is the one labelled with it (`drover.dev/tenant=<tenant>`; the first
//!   by name if several are), else the one named like it. A tenant with neither is not mirrored.
//! - A mirror carries the job's id in the annotation `drover.dev/job-id` and the label
//!   `drover.dev/mirrored=true`; the controller adopts the job instead of submitting another. From
//!   then on it is like any DroverJob: status written back, worker/PS edits resize, deleting it
//!   cancels the job.
//! - Only active jobs are mirrored, each once: a mirror deleted by hand is not made again (its job
//!   was cancelled with it). A name already taken in the namespace by another object is left alone.

use super::admission::{job_key, principal_for};
use super::context::{CONTROLLER_USER, Context, Error};
use super::crd::{DroverJob, DroverJobSpec};
use drover_core::{JobId, JobState, UserId};
use drover_store::{Job, JobFilter, Scope, StoreError, Tenant};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// The annotation naming the job a mirror shows.
pub const JOB_ID_ANNOTATION: &str = "drover.dev/job-id";
/// The label every mirror carries.
pub const MIRRORED_LABEL: &str = "drover.dev/mirrored";

/// Jobs looked at per pass; the rest wait for the next one.
const PASS_LIMIT: u32 = 500;

const ACTIVE: [JobState; 5] = [
    JobState::Queued,
    JobState::Starting,
    JobState::Running,
    JobState::Rescaling,
    JobState::Paused,
];

/// Mirrors new REST jobs every resync period, while this replica leads.
pub(super) async fn run(ctx: Arc<Context>) {
    let mut done: HashSet<JobId> = HashSet::new();
    let mut submitters: HashMap<UserId, bool> = HashMap::new();
    let mut tick = tokio::time::interval(ctx.settings.resync);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(err) = pass(&ctx, &mut done, &mut submitters).await {
            tracing::warn!(error = %err, "mirroring REST jobs as DroverJobs failed; retrying");
        }
    }
}

async fn pass(
    ctx: &Context,
    done: &mut HashSet<JobId>,
    submitters: &mut HashMap<UserId, bool>,
) -> Result<(), Error> {
    let store = ctx.service.store.as_ref();
    let filter = JobFilter {
        states: ACTIVE.to_vec(),
        limit: PASS_LIMIT,
        ..JobFilter::default()
    };
    let jobs = store.list_jobs(Scope::Cluster, &filter).await?;
    // Forget ended jobs: the set stays as small as the active ones.
    let active: HashSet<JobId> = jobs.iter().map(|j| j.id).collect();
    done.retain(|id| active.contains(id));
    let mut pending = Vec::new();
    for job in jobs {
        if done.contains(&job.id) {
            continue;
        }
        let from_kubernetes = match submitters.get(&job.submitted_by) {
            Some(known) => *known,
            None => {
                let user = store.get_user(Scope::Cluster, job.submitted_by).await?;
                let known = user.name == CONTROLLER_USER;
                submitters.insert(job.submitted_by, known);
                known
            }
        };
        if from_kubernetes {
            done.insert(job.id);
        } else {
            pending.push(job);
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    let namespaces = namespaces_of_tenants(ctx).await?;
    for job in pending {
        let Some(namespace) = namespaces.get(&job.tenant_name) else {
            continue;
        };
        if mirror(ctx, &job, namespace).await? {
            done.insert(job.id);
        }
    }
    Ok(())
}

/// Each tenant's namespace: the first (by name) labelled with it, else the one named like it.
async fn namespaces_of_tenants(ctx: &Context) -> Result<BTreeMap<String, String>, Error> {
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let mut namespaces = api.list(&ListParams::default()).await?.items;
    namespaces.sort_by_key(|ns| ns.name_any());
    let mut labelled = BTreeMap::new();
    let mut named = BTreeMap::new();
    for ns in &namespaces {
        let name = ns.name_any();
        if let Some(tenant) = ns.labels().get(&ctx.settings.tenant_label) {
            labelled
                .entry(tenant.clone())
                .or_insert_with(|| name.clone());
        } else {
            named.insert(name.clone(), name);
        }
    }
    for (tenant, namespace) in named {
        labelled.entry(tenant).or_insert(namespace);
    }
    Ok(labelled)
}

/// Makes the job's mirror in `namespace`; whether the job needs no more looking at.
async fn mirror(ctx: &Context, job: &Job, namespace: &str) -> Result<bool, Error> {
    let api: Api<DroverJob> = Api::namespaced(ctx.client.clone(), namespace);
    if let Some(existing) = api.get_opt(&job.name).await? {
        if existing.annotations().get(JOB_ID_ANNOTATION) != Some(&job.id.to_string()) {
            tracing::info!(job.id = %job.id, namespace, "not mirroring a job: its name is taken by another DroverJob");
        }
        return Ok(true);
    }
    let stored = ctx.service.store.get_job(Scope::Cluster, job.id).await?;
    let spec = stored
        .document
        .as_deref()
        .and_then(|d| d.get("spec"))
        .cloned()
        .and_then(|spec| serde_json::from_value(spec).ok());
    let Some(spec) = spec else {
        tracing::warn!(job.id = %job.id, "not mirroring a job whose stored spec does not parse");
        return Ok(true);
    };
    let mut object = DroverJob::new(&job.name, DroverJobSpec { job: spec });
    object.metadata.namespace = Some(namespace.to_owned());
    object.metadata.annotations = Some(BTreeMap::from([(
        JOB_ID_ANNOTATION.to_owned(),
        job.id.to_string(),
    )]));
    object.metadata.labels = Some(BTreeMap::from([(
        MIRRORED_LABEL.to_owned(),
        "true".to_owned(),
    )]));
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {
            tracing::info!(job.id = %job.id, namespace, "mirrored a job as a DroverJob");
            Ok(true)
        }
        // Made meanwhile (another pass, a user): looked at again next time.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 403 => {
            tracing::warn!(job.id = %job.id, namespace, reason = status.message, "cannot mirror a job");
            Ok(true)
        }
        Err(err) => Err(err.into()),
    }
}

/// What a mirror stands for.
pub(super) enum Mirrored {
    /// Not a mirror: an object of its own.
    No,
    /// The REST job it shows.
    Job(Job),
    /// A mirror whose job is not there (or not one it may show).
    Gone(String),
}

/// The job a mirror shows: named in its annotation, in the object's tenant, with the object's name,
/// and not submitted from Kubernetes (an annotation cannot take over another object's job).
pub(super) async fn mirrored_job(
    obj: &DroverJob,
    ctx: &Context,
    tenant: &Tenant,
) -> Result<Mirrored, Error> {
    let (Some(id), Some("true")) = (
        obj.annotations().get(JOB_ID_ANNOTATION),
        obj.labels().get(MIRRORED_LABEL).map(String::as_str),
    ) else {
        return Ok(Mirrored::No);
    };
    let Ok(id) = id.parse::<JobId>() else {
        return Ok(Mirrored::Gone(format!(
            "{JOB_ID_ANNOTATION} `{id}` is not a job id"
        )));
    };
    let job = match ctx
        .service
        .store
        .get_job(Scope::Tenant(tenant.id), id)
        .await
    {
        Ok(job) => job,
        Err(StoreError::NotFound) => {
            return Ok(Mirrored::Gone(format!(
                "job {id} is not in tenant {}",
                tenant.name
            )));
        }
        Err(err) => return Err(err.into()),
    };
    let controller = principal_for(ctx, tenant).await?;
    if job.name != obj.name_any() || job.submitted_by == controller.user.id {
        return Ok(Mirrored::Gone(format!(
            "job {id} is not a REST job named `{}`",
            obj.name_any()
        )));
    }
    Ok(Mirrored::Job(job))
}

/// The object's job: the one submitted for it (keyed by its uid), or the REST job it mirrors; an
/// error message for a mirror whose job is not there.
pub(super) async fn job_of(
    obj: &DroverJob,
    ctx: &Context,
    tenant: &Tenant,
) -> Result<Result<Option<Job>, String>, Error> {
    if let Some(job) = ctx
        .service
        .store
        .job_by_key(tenant.id, &job_key(obj))
        .await?
    {
        return Ok(Ok(Some(job)));
    }
    Ok(match mirrored_job(obj, ctx, tenant).await? {
        Mirrored::No => Ok(None),
        Mirrored::Job(job) => Ok(Some(job)),
        Mirrored::Gone(message) => Err(message),
    })
}
