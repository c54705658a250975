//! `/api/v1/jobs/{id}/cancel`, `pause` and `resume`: the state changes a user asks of a job, shared
//! with the dashboard, experiments and the Kubernetes controller.

use super::jobs::parse_job_id;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::PathParam;
use crate::state::AppState;
use crate::store::{Job, StateChange};
use crate::views::JobEnvelope;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use drover_core::{JobState, ReasonCode};

/// Cancel a job. Final jobs cannot be cancelled (409).
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/cancel", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, body = JobEnvelope),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The job is already final", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn cancel(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<JobEnvelope>> {
    let job = user_transition(&state, &principal, &id, UserAction::Cancel).await?;
    Ok(Json(JobEnvelope { job: job.into() }))
}

/// Pause a job: its tasks checkpoint and stop, its GPUs go back to the cluster, and it waits, holding
/// nothing, until resumed. A queued job simply stops waiting.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/pause", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, body = JobEnvelope),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The job is paused already, or final", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn pause(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<JobEnvelope>> {
    let job = user_transition(&state, &principal, &id, UserAction::Pause).await?;
    Ok(Json(JobEnvelope { job: job.into() }))
}

/// Resume a paused job: it queues again and, once scheduled, carries on from its last checkpoint.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/resume", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, body = JobEnvelope),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The job is not paused", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn resume(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<JobEnvelope>> {
    let job = user_transition(&state, &principal, &id, UserAction::Resume).await?;
    Ok(Json(JobEnvelope { job: job.into() }))
}

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
pub async fn user_transition(
    state: &AppState,
    principal: &Principal,
    id: &str,
    action: UserAction,
) -> ApiResult<Job> {
    let job_id = parse_job_id(id)?;
    principal.require_job_writer()?;
    let (to, reason, message) = action.change(&principal.user.name);
    if action == UserAction::Resume {
        // Only a paused job resumes: the state machine would also take a job from elsewhere to `queued`.
        let job = state
            .store
            .get_job(principal.scope(), job_id)
            .await
            .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
        if job.state != JobState::Paused {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
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
    let job = state
        .store
        .transition_job(principal.scope(), job_id, &change)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
    state.metrics.job_transition(to);
    state.wake_scheduler();
    tracing::info!(job.id = %job.id, user.id = %principal.user.id, reason = reason.as_str(), "job changed by its user");
    if job.tenant_id != principal.user.tenant_id {
        crate::audit::record(
            state.store.as_ref(),
            principal,
            action.audit(),
            format!("{}/{} ({})", job.tenant_name, job.name, job.id),
            "",
        )
        .await;
    }
    Ok(job)
}
