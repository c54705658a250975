//! `POST /api/v1/jobs/{id}/resize`: change a job's worker and PS ranges while it runs. The scheduler
//! re-plans the job on its next round; a running job whose placement no longer fits is stopped at a
//! checkpoint and restarted at the new shape (a new generation), its events saying what changed.

use super::jobs::{check_quota, parse_job_id};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, PathParam};
use crate::state::AppState;
use crate::store::{Job, StateChange};
use crate::views::JobEnvelope;
use axum::Json;
use axum::extract::State;
use drover_core::spec::{Format, TaskRange};
use drover_core::{DroverJob, ReasonCode};
use serde::Deserialize;
use utoipa::ToSchema;

/// New ranges; a range left out stays as it is.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeRequest {
    pub workers: Option<TaskRange>,
    pub ps: Option<TaskRange>,
}

fn range(r: TaskRange) -> String {
    if r.min == r.max {
        r.min.to_string()
    } else {
        format!("{}..{}", r.min, r.max)
    }
}

/// Change a job's worker and PS ranges (the whole spec is validated again; 422 names the field).
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/resize", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    request_body = ResizeRequest,
    responses(
        (status = 200, body = JobEnvelope),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The job is final", body = ErrorBody),
        (status = 422, description = "The new ranges are invalid for this job", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn resize(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
    Body(body): Body,
) -> ApiResult<Json<JobEnvelope>> {
    parse_job_id(&id)?;
    principal.require_job_writer()?;
    let request: ResizeRequest = serde_json::from_slice(&body)
        .map_err(|err| ApiError::bad_request("body", format!("not a resize request: {err}")))?;
    if request.workers.is_none() && request.ps.is_none() {
        return Err(ApiError::bad_request(
            "body",
            "give `workers` and/or `ps`, each {min, max}",
        ));
    }
    let job = resize_job(&state, &principal, &id, request.workers, request.ps).await?;
    Ok(Json(JobEnvelope { job: job.into() }))
}

/// Sets job `id`'s worker and/or PS ranges for `principal` after validating the whole changed spec
/// against the job's tenant's quota (REST and the Kubernetes controller share it). Unchanged ranges:
/// the job as it is, no event.
pub async fn resize_job(
    state: &AppState,
    principal: &Principal,
    id: &str,
    workers: Option<TaskRange>,
    ps: Option<TaskRange>,
) -> ApiResult<Job> {
    let job_id = parse_job_id(id)?;
    principal.require_job_writer()?;
    let stored = state
        .store
        .get_job(principal.scope(), job_id)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
    let document = stored
        .document
        .clone()
        .map(std::sync::Arc::unwrap_or_clone)
        .ok_or_else(ApiError::internal)?;
    let mut job: DroverJob = serde_json::from_value(document).map_err(|err| {
        tracing::error!(job.id = %job_id, error = %err, "a stored job does not parse");
        ApiError::internal()
    })?;
    let before = job.spec.resources.clone();
    if let Some(workers) = workers {
        job.spec.resources.workers = workers;
    }
    if let Some(ps) = ps {
        job.spec.resources.ps = ps;
    }
    // The same validation as a submission, on the whole changed spec.
    let bytes = serde_json::to_vec(&job).map_err(|_| ApiError::internal())?;
    let job = DroverJob::parse(&bytes, Format::Json)?;
    // The job's tenant's ceiling, which is not the caller's when a cluster administrator resizes it.
    let tenant = state.store.get_tenant(stored.tenant_id).await?;
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
    let document = serde_json::to_value(&job).map_err(|_| ApiError::internal())?;
    let max_gpus = i64::try_from(job.max_gpus()).unwrap_or(i64::MAX);
    let updated = state
        .store
        .update_job_document(principal.scope(), job_id, &document, max_gpus, &event)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
    state.wake_scheduler();
    tracing::info!(job.id = %job_id, message = event.message, "job resources changed");
    if stored.tenant_id != principal.user.tenant_id {
        crate::audit::record(
            state.store.as_ref(),
            principal,
            crate::audit::Action::JobResize,
            format!("{}/{} ({})", stored.tenant_name, stored.name, stored.id),
            event.message.clone(),
        )
        .await;
    }
    Ok(updated)
}
