//! The changes a user asks of a job after submitting it — cancel, pause, resume, and new worker and PS
//! ranges — as the REST routes, the dashboard, the Kubernetes controller and the experiment driver
//! make them. A cluster administrator's change to another tenant's job is audited.

use crate::Service;
use crate::auth::Principal;
use crate::error::{ErrorKind, ServiceError, ServiceResult};
use crate::jobs::{check_quota, parse_job_id};
use drover_core::spec::{Format, TaskRange};
use drover_core::{DroverJob, JobState, ReasonCode};
use drover_store::{Job, StateChange};

/// A state change a user asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserAction {
    Cancel,
    Pause,
    Resume,
}

impl UserAction {
    fn change(self, user: &str) -> (JobState, ReasonCode, String) {
        match self {
            UserAction::Cancel => (
                JobState::Cancelled,
                ReasonCode::CancelledByUser,
                format!("cancelled by {user}"),
            ),
            UserAction::Pause => (
                JobState::Paused,
                ReasonCode::PausedByUser,
                format!("paused by {user}; running tasks checkpoint and stop"),
            ),
            UserAction::Resume => (
                JobState::Queued,
                ReasonCode::ResumedByUser,
                format!("resumed by {user}; it carries on from its last checkpoint"),
            ),
        }
    }

    fn audit(self) -> crate::audit::Action {
        match self {
            UserAction::Cancel => crate::audit::Action::JobCancel,
            UserAction::Pause => crate::audit::Action::JobPause,
            UserAction::Resume => crate::audit::Action::JobResume,
        }
    }
}

/// Cancels, pauses or resumes job `id` for `principal` (the REST routes and the dashboard share it).
pub async fn transition(
    service: &Service,
    principal: &Principal,
    id: &str,
    action: UserAction,
) -> ServiceResult<Job> {
    let job_id = parse_job_id(id)?;
    principal.require_job_writer()?;
    let (to, reason, message) = action.change(&principal.user.name);
    if action == UserAction::Resume {
        // Only a paused job resumes: the state machine would also take a job from elsewhere to `queued`.
        let job = service
            .store
            .get_job(principal.scope(), job_id)
            .await
            .map_err(|err| ServiceError::from_store(err, || format!("no job `{id}`")))?;
        if job.state != JobState::Paused {
            return Err(ServiceError::new(
                ErrorKind::Conflict,
                "illegal_transition",
                format!(
                    "the job is `{}`; only a paused job can be resumed",
                    job.state
                ),
            ));
        }
    }
    let change = StateChange {
        to,
        reason,
        message,
        actor: Some(principal.user.id),
    };
    let job = service
        .store
        .transition_job(principal.scope(), job_id, &change)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no job `{id}`")))?;
    service.metrics.job_transition(to);
    service.wake_scheduler();
    tracing::info!(job.id = %job.id, user.id = %principal.user.id, reason = reason.as_str(), "job changed by its user");
    if job.tenant_id != principal.user.tenant_id {
        crate::audit::record(
            service.store.as_ref(),
            principal,
            action.audit(),
            format!("{}/{} ({})", job.tenant_name, job.name, job.id),
            "",
        )
        .await;
    }
    Ok(job)
}

/// Sets job `id`'s worker and/or PS ranges for `principal` after validating the whole changed spec
/// against the job's tenant's quota (REST and the Kubernetes controller share it). Unchanged ranges:
/// the job as it is, no event.
pub async fn resize(
    service: &Service,
    principal: &Principal,
    id: &str,
    workers: Option<TaskRange>,
    ps: Option<TaskRange>,
) -> ServiceResult<Job> {
    let job_id = parse_job_id(id)?;
    principal.require_job_writer()?;
    let stored = service
        .store
        .get_job(principal.scope(), job_id)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no job `{id}`")))?;
    let mut job = stored.spec().ok_or_else(|| {
        tracing::error!(job.id = %job_id, "a stored job has no document that parses");
        ServiceError::internal()
    })?;
    let before = job.spec.resources.clone();
    if let Some(workers) = workers {
        job.spec.resources.workers = workers;
    }
    if let Some(ps) = ps {
        job.spec.resources.ps = ps;
    }
    // The same validation as a submission, on the whole changed spec.
    let bytes = serde_json::to_vec(&job).map_err(|_| ServiceError::internal())?;
    let job = DroverJob::parse(&bytes, Format::Json)?;
    // The job's tenant's ceiling, which is not the caller's when a cluster administrator resizes it.
    let tenant = service.store.get_tenant(stored.tenant_id).await?;
    check_quota(&tenant.name, &tenant.quota, &job)?;
    let after = &job.spec.resources;
    if *after == before {
        // Nothing changes: no event, no new plan.
        return Ok(stored);
    }
    let event = StateChange {
        to: stored.state,
        reason: ReasonCode::ResizedByUser,
        message: format!(
            "{} set workers {} -> {}, PS {} -> {}",
            principal.user.name,
            range(before.workers),
            range(after.workers),
            range(before.ps),
            range(after.ps)
        ),
        actor: Some(principal.user.id),
    };
    let document = serde_json::to_value(&job).map_err(|_| ServiceError::internal())?;
    let max_gpus = i64::try_from(job.max_gpus()).unwrap_or(i64::MAX);
    let updated = service
        .store
        .update_job_document(principal.scope(), job_id, &document, max_gpus, &event)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no job `{id}`")))?;
    service.wake_scheduler();
    tracing::info!(job.id = %job_id, message = event.message, "job resources changed");
    if stored.tenant_id != principal.user.tenant_id {
        crate::audit::record(
            service.store.as_ref(),
            principal,
            crate::audit::Action::JobResize,
            format!("{}/{} ({})", stored.tenant_name, stored.name, stored.id),
            event.message.clone(),
        )
        .await;
    }
    Ok(updated)
}

fn range(r: TaskRange) -> String {
    if r.min == r.max {
        r.min.to_string()
    } else {
        format!("{}..{}", r.min, r.max)
    }
}
