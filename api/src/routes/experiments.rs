//! `/api/v1/experiments`: hyper-parameter searches. Submit, list, read (best trial and every trial
//! with its point and last metric), pause and resume, cancel, and the experiment's events. The
//! experiment driver (`crate::experiments`) runs the trials.

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::experiment_views::{
    ExperimentEnvelope, ExperimentEventList, ExperimentEventView, ExperimentList, TrialList, view,
};
use crate::extract::{Body, PathParam, QueryPairs};
use crate::paging::ListMeta;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_core::ExperimentId;
use drover_core::experiment::DroverExperiment;
use drover_service::auth::Principal;
use drover_service::experiments::steer::{self, ExperimentAction};
use drover_service::experiments::trials as trial_views;

const MAX_PAGE: u32 = 500;

/// Submit an experiment (JSON or YAML `DroverExperiment`). Its trials are jobs of the caller's
/// tenant, named `<experiment>-t<trial>-<segment>`, counted against its quota.
///
/// The schema gives each field's own bounds. These rules span fields, and answer 422 naming the
/// field: `metadata.name` is given and at most 45 characters; a `train` trial's parameters name
/// fields of its spec; a `when` names another parameter of the space, without cycles, and lists
/// values that parameter can take; a range's `min` ≤ `max`, positive on a log scale (`log: true`,
/// `log_uniform`); ASHA's and Hyperband's `max_steps` > `min_steps`, PBT's `max_steps` ≥
/// `ready_steps`; those three searchers need `train` trials and set `train.max_steps` themselves; a
/// grid has at most 10000 points; categorical values are listed once; and the trial template, with
/// each of the space's corners written into it, is a valid job (`POST /api/v1/jobs` lists a job's
/// rules), whose smallest shape fits the tenant's `max_gpus`.
#[utoipa::path(
    post, path = "/api/v1/experiments", tag = "experiments",
    request_body(content = DroverExperiment, description = "A DroverExperiment, as JSON (or YAML with Content-Type: application/yaml)", content_type = "application/json"),
    responses(
        (status = 201, description = "Created", body = ExperimentEnvelope),
        (status = 400, description = "A body that is not JSON or YAML", body = ErrorBody),
        (status = 403, description = "A viewer", body = ErrorBody),
        (status = 409, description = "An experiment with this name exists in the tenant", body = ErrorBody),
        (status = 415, description = "A body that is neither JSON nor YAML (Content-Type)", body = ErrorBody),
        (status = 422, description = "Invalid experiment; `field` names the problem", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn submit(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    principal.require_job_writer()?;
    let format = super::jobs::body_format(&headers, &body)?;
    let experiment = DroverExperiment::parse(&body, format)?;
    let created = steer::create(&state, &principal, experiment).await?;
    let location = HeaderValue::from_str(&format!("/api/v1/experiments/{}", created.id)).ok();
    let mut response = (
        StatusCode::CREATED,
        Json(ExperimentEnvelope {
            experiment: view(created, Some(Vec::new())),
        }),
    )
        .into_response();
    if let Some(location) = location {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// The caller's tenant's experiments (every tenant's for cluster administrators), newest first.
#[utoipa::path(
    get, path = "/api/v1/experiments", tag = "experiments",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1 to 500 (default 100)"),
        ("cursor" = Option<String>, Query, format = Uuid, description = "`meta.next_cursor` of the previous page (an experiment's id)"),
    ),
    responses((status = 200, body = ExperimentList)),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
    query: QueryPairs,
) -> ApiResult<Json<ExperimentList>> {
    query.only(&["limit", "cursor"])?;
    let limit = query.limit(100, MAX_PAGE)?;
    let before = match query.get("cursor") {
        None => None,
        Some(raw) => Some(raw.parse::<ExperimentId>().map_err(|_| {
            ApiError::bad_request(
                "cursor",
                "not a cursor this API returned (meta.next_cursor)",
            )
        })?),
    };
    let mut experiments = state
        .store
        .list_experiments(principal.scope(), before, limit + 1)
        .await
        .map_err(|err| ApiError::from_store(err, || "experiments".into()))?;
    let next_cursor = if experiments.len() > limit as usize {
        experiments.truncate(limit as usize);
        experiments.last().map(|e| e.id.to_string())
    } else {
        None
    };
    Ok(Json(ExperimentList {
        experiments: experiments.into_iter().map(|e| view(e, None)).collect(),
        meta: ListMeta { next_cursor },
    }))
}

/// One experiment, with its best trial and every trial's point, state and last metric.
#[utoipa::path(
    get, path = "/api/v1/experiments/{id}", tag = "experiments",
    params(("id" = String, Path, format = Uuid, description = "Experiment id")),
    responses((status = 200, body = ExperimentEnvelope), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<ExperimentEnvelope>> {
    let experiment = steer::load(&state, &principal, &id).await?;
    let trials = trial_views(&state, &experiment).await?;
    Ok(Json(ExperimentEnvelope {
        experiment: view(experiment, Some(trials)),
    }))
}

/// An experiment's trials: points, states, metrics and jobs.
#[utoipa::path(
    get, path = "/api/v1/experiments/{id}/trials", tag = "experiments",
    params(("id" = String, Path, format = Uuid, description = "Experiment id")),
    responses((status = 200, body = TrialList), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn trials(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<TrialList>> {
    let experiment = steer::load(&state, &principal, &id).await?;
    Ok(Json(TrialList {
        trials: trial_views(&state, &experiment).await?,
    }))
}

/// What the experiment did, oldest first: trials started, promoted, stopped; budgets reached.
#[utoipa::path(
    get, path = "/api/v1/experiments/{id}/events", tag = "experiments",
    params(
        ("id" = String, Path, format = Uuid, description = "Experiment id"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1 to 500 (default 100)"),
        ("cursor" = Option<i64>, Query, description = "`meta.next_cursor` of the previous page (an event's id)"),
    ),
    responses((status = 200, body = ExperimentEventList), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn events(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
    query: QueryPairs,
) -> ApiResult<Json<ExperimentEventList>> {
    query.only(&["limit", "cursor"])?;
    let page = query.limit(100, MAX_PAGE)?;
    let after = query.id_cursor()?;
    let experiment = steer::load(&state, &principal, &id).await?;
    let mut events = state
        .store
        .list_experiment_events(experiment.id, after, page + 1)
        .await
        .map_err(|err| ApiError::from_store(err, || "experiment".into()))?;
    let next_cursor = if events.len() > page as usize {
        events.truncate(page as usize);
        events.last().map(|event| event.id.to_string())
    } else {
        None
    };
    Ok(Json(ExperimentEventList {
        events: events
            .into_iter()
            .map(|e| ExperimentEventView {
                id: e.id,
                message: e.message,
                created_at: e.created_at,
            })
            .collect(),
        meta: ListMeta { next_cursor },
    }))
}

/// Pause an experiment: no new trials start, and its running trials pause (they checkpoint and give
/// their GPUs back).
#[utoipa::path(
    post, path = "/api/v1/experiments/{id}/pause", tag = "experiments",
    params(("id" = String, Path, format = Uuid, description = "Experiment id")),
    responses(
        (status = 200, body = ExperimentEnvelope),
        (status = 403, description = "A viewer", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The experiment is not active", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn pause(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<ExperimentEnvelope>> {
    transition(&state, &principal, &id, ExperimentAction::Pause).await
}

/// Resume a paused experiment: its paused trials queue again and the searcher carries on.
#[utoipa::path(
    post, path = "/api/v1/experiments/{id}/resume", tag = "experiments",
    params(("id" = String, Path, format = Uuid, description = "Experiment id")),
    responses(
        (status = 200, body = ExperimentEnvelope),
        (status = 403, description = "A viewer", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The experiment is not paused", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn resume(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<ExperimentEnvelope>> {
    transition(&state, &principal, &id, ExperimentAction::Resume).await
}

/// Cancel an experiment and its running trials.
#[utoipa::path(
    post, path = "/api/v1/experiments/{id}/cancel", tag = "experiments",
    params(("id" = String, Path, format = Uuid, description = "Experiment id")),
    responses(
        (status = 200, body = ExperimentEnvelope),
        (status = 403, description = "A viewer", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The experiment has ended", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn cancel(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<ExperimentEnvelope>> {
    transition(&state, &principal, &id, ExperimentAction::Cancel).await
}

/// Pauses, resumes or cancels experiment `id`, and shows it as it is after.
async fn transition(
    state: &AppState,
    principal: &Principal,
    id: &str,
    action: ExperimentAction,
) -> ApiResult<Json<ExperimentEnvelope>> {
    let experiment = steer::transition(state, principal, id, action).await?;
    let trials = trial_views(state, &experiment).await?;
    Ok(Json(ExperimentEnvelope {
        experiment: view(experiment, Some(trials)),
    }))
}
