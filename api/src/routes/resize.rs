//! `POST /api/v1/jobs/{id}/resize`: change a job's worker and PS ranges while it runs. The scheduler
//! re-plans the job on its next round; a running job whose placement no longer fits is stopped at a
//! checkpoint and restarted at the new shape (a new generation), its events saying what changed.

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, PathParam, parse_json};
use crate::state::AppState;
use crate::views::JobEnvelope;
use axum::Json;
use axum::extract::State;
use drover_core::spec::TaskRange;
use drover_service::auth::Principal;
use serde::Deserialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::schema::{AllOfBuilder, AnyOfBuilder};

/// New ranges; a range left out (or `null`) stays as it is, and at least one is given.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeRequest {
    #[serde(default)]
    pub workers: Option<TaskRange>,
    #[serde(default)]
    pub ps: Option<TaskRange>,
}

impl utoipa::ToSchema for ResizeRequest {}

/// The object with its two optional ranges, and the rule that one of them is given (not `null`).
impl utoipa::PartialSchema for ResizeRequest {
    fn schema() -> RefOr<Schema> {
        let fields = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("workers", drover_core::spec::resize_workers_schema())
            .property("ps", drover_core::spec::resize_ps_schema())
            .additional_properties(Some(AdditionalProperties::FreeForm(false)));
        let given = |field: &str| {
            ObjectBuilder::new()
                .property(
                    field,
                    ObjectBuilder::new()
                        .schema_type(SchemaType::Array(vec![Type::Integer, Type::Object])),
                )
                .required(field)
        };
        AllOfBuilder::new()
            .item(fields)
            .item(AnyOfBuilder::new().item(given("workers")).item(given("ps")))
            .description(Some(
                "New ranges; a range left out (or `null`) stays as it is, and at least one is given.",
            ))
            .into()
    }
}

/// Change a job's worker and PS ranges.
///
/// The whole spec is validated again with the new ranges, as on submit, and the job's tenant quota
/// checked; a 422 names the field. Beyond each range's own bounds, these rules span fields and are
/// checked only then: `min` ≤ `max`; a `ps` job with more than one worker needs at least one
/// parameter-server shard, an `allreduce` job none; a train job's `batch_size` is at least
/// `workers.max`; the job's largest shape fits its tenant's `max_gpus`.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/resize", tag = "jobs",
    params(("id" = String, Path, format = Uuid, description = "Job id")),
    request_body = ResizeRequest,
    responses(
        (status = 200, body = JobEnvelope),
        (status = 400, description = "A body that is not JSON", body = ErrorBody),
        (status = 403, description = "A viewer", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The job is final", body = ErrorBody),
        (status = 422, description = "The new ranges are invalid for this job (or the body has the wrong shape); `field` names the problem", body = ErrorBody),
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
    let request: ResizeRequest = parse_json(&body)?;
    if request.workers.is_none() && request.ps.is_none() {
        return Err(ApiError::invalid(
            "(body)",
            "give `workers` and/or `ps`, each a count or {min, max}",
        ));
    }
    let job =
        drover_service::job_changes::resize(&state, &principal, &id, request.workers, request.ps)
            .await?;
    Ok(Json(JobEnvelope { job: job.into() }))
}
