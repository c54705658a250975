//! `POST /api/v1/jobs/{id}/resize`: change a job's worker and PS ranges while it runs. The scheduler
//! re-plans the job on its next round; a running job whose placement no longer fits is stopped at a
//! checkpoint and restarted at the new shape (a new generation), its events saying what changed.

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, PathParam};
use crate::state::AppState;
use crate::views::JobEnvelope;
use axum::Json;
use axum::extract::State;
use drover_core::spec::TaskRange;
use drover_service::auth::Principal;
use serde::Deserialize;
use utoipa::ToSchema;

/// New ranges; a range left out stays as it is.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeRequest {
    pub workers: Option<TaskRange>,
    pub ps: Option<TaskRange>,
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
    super::jobs::parse_job_id(&id)?;
    principal.require_job_writer()?;
    let request: ResizeRequest = serde_json::from_slice(&body)
        .map_err(|err| ApiError::bad_request("body", format!("not a resize request: {err}")))?;
    if request.workers.is_none() && request.ps.is_none() {
        return Err(ApiError::bad_request(
            "body",
            "give `workers` and/or `ps`, each {min, max}",
        ));
    }
    let job =
        drover_service::job_changes::resize(&state, &principal, &id, request.workers, request.ps)
            .await?;
    Ok(Json(JobEnvelope { job: job.into() }))
}
