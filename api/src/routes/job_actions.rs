//! `/api/v1/jobs/{id}/cancel`, `pause` and `resume`: the state changes a user asks of a job
//! (`drover_service::job_changes`, shared with the dashboard, experiments and the Kubernetes
//! controller).

use crate::error::{ApiResult, ErrorBody};
use crate::extract::PathParam;
use crate::state::AppState;
use crate::views::JobEnvelope;
use axum::Json;
use axum::extract::State;
use drover_service::auth::Principal;
use drover_service::job_changes::{UserAction, transition};

/// Cancel a job. Final jobs cannot be cancelled (409).
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/cancel", tag = "jobs",
    params(("id" = String, Path, format = Uuid, description = "Job id")),
    responses(
        (status = 200, body = JobEnvelope),
        (status = 403, description = "A viewer", body = ErrorBody),
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
    let job = transition(&state, &principal, &id, UserAction::Cancel).await?;
    Ok(Json(JobEnvelope { job: job.into() }))
}

/// Pause a job: its tasks checkpoint and stop, its GPUs go back to the cluster, and it waits, holding
/// nothing, until resumed. A queued job simply stops waiting.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/pause", tag = "jobs",
    params(("id" = String, Path, format = Uuid, description = "Job id")),
    responses(
        (status = 200, body = JobEnvelope),
        (status = 403, description = "A viewer", body = ErrorBody),
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
    let job = transition(&state, &principal, &id, UserAction::Pause).await?;
    Ok(Json(JobEnvelope { job: job.into() }))
}

/// Resume a paused job: it queues again and, once scheduled, carries on from its last checkpoint.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/resume", tag = "jobs",
    params(("id" = String, Path, format = Uuid, description = "Job id")),
    responses(
        (status = 200, body = JobEnvelope),
        (status = 403, description = "A viewer", body = ErrorBody),
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
    let job = transition(&state, &principal, &id, UserAction::Resume).await?;
    Ok(Json(JobEnvelope { job: job.into() }))
}
