//! Jobs as every entrance submits and reads them: the checks a submission gets (quota, the tenant's
//! ceiling of waiting jobs, secret references, `init_from`), storing it through group commit with a
//! generated name when asked (`metadata.generateName`), and one job as a user sees it (with what its
//! models predict and its place in the queue). State changes and resizes are [`crate::job_changes`].

use crate::Service;
use crate::auth::Principal;
use crate::error::{ErrorKind, ServiceError, ServiceResult};
use crate::models::JobModels;
use crate::queue::QueuePosition;
use chrono::Utc;
use drover_core::{DroverJob, JobId};
use drover_runtime::Observer;
use drover_scheduler::Shape;
use drover_store::{Created, Job, JobFilter, NewJob, Quota, Scope, StoreError, TaskRole};

/// A job as `GET /api/v1/jobs/{id}` and the dashboard's job page show it.
#[derive(Debug)]
pub struct JobDetail {
    pub job: Job,
    /// What its fitted models say, once it has reported a step.
    pub model: Option<JobModels>,
    /// Its place in the queue, while it is queued.
    pub queue: Option<QueuePosition>,
}

/// Job `id` (as a path gives it) as `principal` may see it, with its models and queue place.
pub async fn get(service: &Service, principal: &Principal, id: &str) -> ServiceResult<JobDetail> {
    let job_id = parse_job_id(id)?;
    let job = service
        .store
        .get_job(principal.scope(), job_id)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no job `{id}`")))?;
    let model = models(service, &job).await?;
    let queue = crate::queue::position_of(service, &job).await?;
    Ok(JobDetail { job, model, queue })
}

/// Jobs a list counts at most (past it, "10,000 or more").
pub const MAX_COUNTED: u32 = 10_000;

/// One page of a list of jobs, newest first.
#[derive(Debug, Clone)]
pub struct JobPage {
    pub jobs: Vec<Job>,
    /// Older jobs match too (the next page).
    pub older: bool,
    /// Newer jobs match too (the page before).
    pub newer: bool,
    /// How many jobs match in all, counted up to [`MAX_COUNTED`].
    pub total: u64,
}

/// One page of the jobs `scope` holds that match `filter`, newest first: at most `filter.limit`,
/// older than `filter.before` or the nearest newer than `filter.after`, whether more lie either
/// way, and how many match in all.
pub async fn list(service: &Service, scope: Scope, filter: &JobFilter) -> ServiceResult<JobPage> {
    let page = filter.limit as usize;
    // One row more than asked tells whether another page exists that way.
    let mut wider = filter.clone();
    wider.limit += 1;
    let mut jobs = service.store.list_jobs(scope, &wider).await?;
    let beyond = jobs.len() > page;
    let (older, newer) = if filter.after.is_some() {
        // Newer than a job: the extra row is the newest; the job itself is older.
        if beyond {
            jobs.drain(..jobs.len() - page);
        }
        (true, beyond)
    } else {
        jobs.truncate(page);
        (beyond, filter.before.is_some())
    };
    let total = service.store.count_jobs(scope, filter, MAX_COUNTED).await?;
    Ok(JobPage {
        jobs,
        older,
        newer,
        total,
    })
}

/// Stores a parsed, validated job for `principal` after the quota, queue-length and secret checks a
/// submission gets (REST, the dashboard and the Kubernetes controller share it). With an idempotency
/// key used before in the tenant, returns the first job (`created: false`).
pub async fn submit(
    service: &Service,
    principal: &Principal,
    job: DroverJob,
    idempotency_key: Option<String>,
    request_hash: Option<[u8; 32]>,
) -> ServiceResult<Created<Job>> {
    principal.require_job_writer()?;
    check_quota(&principal.user.tenant_name, &principal.tenant_quota, &job)?;
    service.capacity.check(service.store.as_ref(), &job).await?;
    check_waiting_jobs(service, principal).await?;
    crate::secrets::check_references(
        service,
        principal.user.tenant_id,
        &principal.user.tenant_name,
        &job,
    )
    .await?;
    check_init_from(service, principal, &job).await?;
    // `metadata.generateName`: the name is the prefix and five random characters, drawn again
    // while the tenant has a job of that name.
    let prefix = job
        .metadata
        .name
        .is_empty()
        .then(|| job.metadata.generate_name.clone())
        .flatten();
    let mut job = job;
    let mut attempt = 0;
    let outcome = loop {
        if let Some(prefix) = &prefix {
            job.metadata.name = format!("{prefix}{}", name_suffix());
        }
        let new_job = NewJob {
            id: JobId::new(),
            tenant_id: principal.user.tenant_id,
            tenant_name: principal.user.tenant_name.clone(),
            name: job.metadata.name.clone(),
            job_type: job.spec.job_type,
            priority: job.spec.scheduling.priority,
            max_gpus: i64::try_from(job.max_gpus()).unwrap_or(i64::MAX),
            labels: job.metadata.labels.clone(),
            document: serde_json::to_value(&job).map_err(|err| {
                tracing::error!(error = %err, "serialising a parsed job failed");
                ServiceError::internal()
            })?,
            submitted_by: principal.user.id,
            request_hash,
            idempotency_key: idempotency_key.clone(),
            created_at: Utc::now(),
        };
        let job_id = new_job.id;
        match service.submissions.create(&service.store, new_job).await {
            Err(StoreError::Conflict { field, .. })
                if prefix.is_some() && field == "metadata.name" && attempt < 8 =>
            {
                attempt += 1;
            }
            Err(err @ StoreError::Database(_)) => {
                tracing::error!(job.id = %job_id, error = %err, "the database did not settle a submission");
                return Err(ServiceError::new(
                    ErrorKind::Unavailable,
                    "outcome_unknown",
                    format!(
                        "the database did not answer in time, so whether job {job_id} was stored is unknown: \
                         look it up (GET /api/v1/jobs/{job_id}), or submit again with the same Idempotency-Key"
                    ),
                ));
            }
            other => break other?,
        }
    };
    if outcome.created {
        let job = &outcome.value;
        service.metrics.job_submitted();
        service.wake_scheduler();
        tracing::info!(job.id = %job.id, tenant.id = %job.tenant_id, job.name = %job.name, "job submitted");
    }
    Ok(outcome)
}

/// Five characters for a generated name, from Kubernetes' alphabet (no vowels, no look-alikes).
fn name_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// A job whose smallest shape exceeds the tenant's GPU ceiling could never run: refuse it now.
pub(crate) fn check_quota(tenant_name: &str, quota: &Quota, job: &DroverJob) -> ServiceResult<()> {
    let resources = &job.spec.resources;
    let min_gpus = u64::from(resources.workers.min) * u64::from(resources.gpus_per_worker);
    check_flavour_quota(tenant_name, quota, job, min_gpus)?;
    let Some(max_gpus) = quota.max_gpus else {
        return Ok(());
    };
    if min_gpus > u64::from(max_gpus) {
        return Err(ServiceError::invalid(
            "spec.resources.workers.min",
            format!(
                "the job needs at least {min_gpus} GPUs but tenant `{tenant_name}` may hold at most {max_gpus}"
            ),
        ));
    }
    Ok(())
}

/// A job that accepts only GPU models of which its tenant may hold fewer GPUs than its smallest gang
/// could never run: refuse it, naming the models' maxima.
fn check_flavour_quota(
    tenant_name: &str,
    quota: &Quota,
    job: &DroverJob,
    min_gpus: u64,
) -> ServiceResult<()> {
    let types = &job.spec.resources.gpu_types;
    if types.is_empty() || quota.flavours.is_empty() || min_gpus == 0 {
        return Ok(());
    }
    let mut caps = Vec::with_capacity(types.len());
    for gpu_type in types {
        let cap = quota
            .flavours
            .iter()
            .find(|f| {
                // One names the other or a word of it (`v100`, `Tesla V100-SXM2`), as nodes match.
                let (flavour, wanted) = (f.gpu_model.trim(), gpu_type.trim());
                drover_scheduler::cluster::model_is(wanted, flavour)
                    || drover_scheduler::cluster::model_is(flavour, wanted)
            })
            .and_then(|f| f.max_gpus);
        match cap {
            Some(cap) if u64::from(cap) < min_gpus => caps.push(format!("{gpu_type}: {cap}")),
            _ => return Ok(()),
        }
    }
    Err(ServiceError::invalid(
        "spec.resources.gpu_types",
        format!(
            "the job needs at least {min_gpus} GPUs on one model but tenant `{tenant_name}` may hold at most {}",
            caps.join(", ")
        ),
    ))
}

/// `train.init_from` (or `command.init_from`) must name a checkpoint of one of the tenant's jobs.
async fn check_init_from(
    service: &Service,
    principal: &Principal,
    job: &DroverJob,
) -> ServiceResult<()> {
    let Some((init, field)) = job.init_from() else {
        return Ok(());
    };
    let missing = || {
        ServiceError::invalid(
            field,
            format!(
                "no checkpoint `{}` in the tenant (`drover checkpoints JOB` lists a job's)",
                init.checkpoint
            ),
        )
    };
    drover_store::tenant_checkpoint(
        service.store.as_ref(),
        principal.user.tenant_id,
        &init.checkpoint,
    )
    .await
    .map_err(|err| ServiceError::from_store(err, || "checkpoint".into()))?
    .map(|_| ())
    .ok_or_else(missing)
}

/// A tenant may keep only so many jobs waiting, so that no tenant can fill the database. Concurrent
/// submissions may overshoot the ceiling by their number.
async fn check_waiting_jobs(service: &Service, principal: &Principal) -> ServiceResult<()> {
    let ceiling = service.limits.max_queued_jobs_per_tenant;
    if ceiling == 0 {
        return Ok(());
    }
    let waiting = service
        .store
        .count_waiting_jobs(principal.user.tenant_id)
        .await?;
    if waiting < u64::from(ceiling) {
        return Ok(());
    }
    Err(ServiceError::new(
        ErrorKind::TooMany,
        "too_many_waiting_jobs",
        format!(
            "tenant `{}` has {waiting} jobs waiting, its ceiling: submit again once some have started or been cancelled",
            principal.user.tenant_name
        ),
    ))
}

/// Parses a job id from a path; a malformed id is simply an unknown job.
pub fn parse_job_id(raw: &str) -> ServiceResult<JobId> {
    raw.parse()
        .map_err(|_| ServiceError::not_found(format!("no job `{raw}`")))
}

/// The job's fitted models, when it has reported a step.
async fn models(service: &Service, job: &Job) -> ServiceResult<Option<JobModels>> {
    if job.generation == 0 {
        return Ok(None);
    }
    let local;
    let observer = match &service.runtime {
        Some(runtime) => &runtime.observer,
        None => {
            local = Observer::default();
            &local
        }
    };
    let observed = observer.refresh(service.store.as_ref(), job.id).await?;
    if observed.steps_done == 0 {
        return Ok(None);
    }
    let tasks = service
        .store
        .generation_tasks(job.id, job.generation)
        .await?;
    let workers = tasks
        .iter()
        .filter(|t| t.key.role == TaskRole::Worker)
        .count() as u32;
    let shape = match job.spec() {
        Some(spec) if !job.state.holds_resources() || workers == 0 => Shape {
            ps: spec.spec.resources.ps.max,
            workers: spec.spec.resources.workers.max,
        },
        _ => Shape {
            ps: tasks.len() as u32 - workers,
            workers,
        },
    };
    Ok(Some(JobModels::of(job, &observed, shape)))
}
