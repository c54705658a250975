//! `/api/v1/experiments`: hyper-parameter searches. Submit, list, read (best trial and every trial
//! with its point and last metric), pause and resume, cancel, and the experiment's events. The
//! experiment driver (`crate::experiments`) runs the trials.

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::experiment_views::{
    ExperimentEnvelope, ExperimentEventList, ExperimentEventView, ExperimentList, TrialList,
    trial_views, view,
};
use crate::experiments::{cancel_running, event};
use crate::extract::{Body, PathParam, QueryPairs};
use crate::state::AppState;
use crate::store::{Experiment, ExperimentState, NewExperiment};
use crate::views::ListMeta;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use drover_core::ExperimentId;
use drover_core::experiment::DroverExperiment;

const MAX_PAGE: u32 = 500;

fn parse_id(raw: &str) -> ApiResult<ExperimentId> {
    raw.parse()
        .map_err(|_| ApiError::not_found(format!("no experiment `{raw}`")))
}

async fn load(state: &AppState, principal: &Principal, raw: &str) -> ApiResult<Experiment> {
    let id = parse_id(raw)?;
    state
        .store
        .get_experiment(principal.scope(), id)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no experiment `{raw}`")))
}

/// Submit an experiment (JSON or YAML `DroverExperiment`). Its trials are jobs of the caller's
/// tenant, named `<experiment>-t<trial>-<segment>`, counted against its quota.
#[utoipa::path(
    post, path = "/api/v1/experiments", tag = "experiments",
    request_body(content = DroverExperiment, description = "A DroverExperiment, as JSON (or YAML with Content-Type: application/yaml)", content_type = "application/json"),
    responses(
        (status = 201, description = "Created", body = ExperimentEnvelope),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 409, description = "An experiment with this name exists in the tenant", body = ErrorBody),
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
    let created = create_experiment(&state, &principal, experiment).await?;
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

/// Creates a parsed (so validated) experiment as `principal`'s, in their tenant, and records who
/// submitted it. A name taken in the tenant is a 409 on `metadata.name`. Shared by the route and the
/// Kubernetes controller (`crate::kubernetes::experiments`).
pub async fn create_experiment(
    state: &AppState,
    principal: &Principal,
    mut experiment: DroverExperiment,
) -> ApiResult<Experiment> {
    principal.require_job_writer()?;
    experiment.status = None;
    let document = serde_json::to_value(&experiment).map_err(|err| {
        tracing::error!(error = %err, "serialising a parsed experiment failed");
        ApiError::internal()
    })?;
    let now = Utc::now();
    let created = state
        .store
        .create_experiment(&NewExperiment {
            id: ExperimentId::new(),
            tenant_id: principal.user.tenant_id,
            name: experiment.metadata.name.clone(),
            document,
            submitted_by: principal.user.id,
            created_at: now,
        })
        .await
        .map_err(|err| ApiError::from_store(err, || "experiment".into()))?;
    event(
        state,
        created.id,
        format!(
            "submitted by {}: {} searcher, {} {}",
            principal.user.name,
            experiment.spec.searcher.name(),
            match experiment.spec.metric.goal {
                drover_core::experiment::Goal::Minimize => "minimise",
                drover_core::experiment::Goal::Maximize => "maximise",
            },
            experiment.spec.metric.name
        ),
        now,
    )
    .await;
    tracing::info!(experiment.id = %created.id, user.id = %principal.user.id, "experiment submitted");
    Ok(created)
}

/// The caller's tenant's experiments (every tenant's for cluster administrators), newest first.
#[utoipa::path(
    get, path = "/api/v1/experiments", tag = "experiments",
    params(
        ("limit" = Option<u32>, Query, description = "Page size, 1 to 500 (default 100)"),
        ("cursor" = Option<String>, Query, description = "`meta.next_cursor` of the previous page"),
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
    params(("id" = String, Path, description = "Experiment id")),
    responses((status = 200, body = ExperimentEnvelope), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<ExperimentEnvelope>> {
    let experiment = load(&state, &principal, &id).await?;
    let trials = trial_views(&state, &experiment).await?;
    Ok(Json(ExperimentEnvelope {
        experiment: view(experiment, Some(trials)),
    }))
}

/// An experiment's trials: points, states, metrics and jobs.
#[utoipa::path(
    get, path = "/api/v1/experiments/{id}/trials", tag = "experiments",
    params(("id" = String, Path, description = "Experiment id")),
    responses((status = 200, body = TrialList), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn trials(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<TrialList>> {
    let experiment = load(&state, &principal, &id).await?;
    Ok(Json(TrialList {
        trials: trial_views(&state, &experiment).await?,
    }))
}

/// What the experiment did, oldest first: trials started, promoted, stopped; budgets reached.
#[utoipa::path(
    get, path = "/api/v1/experiments/{id}/events", tag = "experiments",
    params(
        ("id" = String, Path, description = "Experiment id"),
        ("limit" = Option<u32>, Query, description = "Page size, 1 to 500 (default 100)"),
        ("cursor" = Option<String>, Query, description = "`meta.next_cursor` of the previous page"),
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
    let experiment = load(&state, &principal, &id).await?;
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

/// What a user may do to an experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExperimentAction {
    Pause,
    Resume,
    Cancel,
}

/// Pause an experiment: no new trials start, and its running trials pause (they checkpoint and give
/// their GPUs back).
#[utoipa::path(
    post, path = "/api/v1/experiments/{id}/pause", tag = "experiments",
    params(("id" = String, Path, description = "Experiment id")),
    responses(
        (status = 200, body = ExperimentEnvelope),
        (status = 403, body = ErrorBody),
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
    experiment_transition(&state, &principal, &id, ExperimentAction::Pause).await
}

/// Resume a paused experiment: its paused trials queue again and the searcher carries on.
#[utoipa::path(
    post, path = "/api/v1/experiments/{id}/resume", tag = "experiments",
    params(("id" = String, Path, description = "Experiment id")),
    responses(
        (status = 200, body = ExperimentEnvelope),
        (status = 403, body = ErrorBody),
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
    experiment_transition(&state, &principal, &id, ExperimentAction::Resume).await
}

/// Cancel an experiment and its running trials.
#[utoipa::path(
    post, path = "/api/v1/experiments/{id}/cancel", tag = "experiments",
    params(("id" = String, Path, description = "Experiment id")),
    responses(
        (status = 200, body = ExperimentEnvelope),
        (status = 403, body = ErrorBody),
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
    experiment_transition(&state, &principal, &id, ExperimentAction::Cancel).await
}

/// Pauses, resumes or cancels the experiment `raw` (an id) as `principal`; an action its state does
/// not allow is a 409 `illegal_transition`. Cancelling cancels its running trial jobs. Shared by the
/// routes and the Kubernetes controller (deleting a DroverExperiment cancels it).
pub async fn experiment_transition(
    state: &AppState,
    principal: &Principal,
    raw: &str,
    action: ExperimentAction,
) -> ApiResult<Json<ExperimentEnvelope>> {
    let experiment = load(state, principal, raw).await?;
    principal.require_job_writer()?;
    let conflict = |why: String| ApiError::new(StatusCode::CONFLICT, "illegal_transition", why);
    let now = Utc::now();
    let store = state.store.as_ref();
    let internal = |err| ApiError::from_store(err, || "experiment".into());
    let who = &principal.user.name;
    match action {
        ExperimentAction::Pause => {
            if experiment.state != ExperimentState::Active {
                return Err(conflict(format!(
                    "the experiment is `{}`; only an active experiment can be paused",
                    experiment.state
                )));
            }
            store
                .set_experiment_state(
                    experiment.id,
                    ExperimentState::Paused,
                    &format!("paused by {who}"),
                    now,
                )
                .await
                .map_err(internal)?;
            let paused = each_trial_job(
                state,
                principal,
                &experiment,
                super::job_actions::UserAction::Pause,
            )
            .await?;
            event(
                state,
                experiment.id,
                format!("paused by {who} ({paused} running trials paused)"),
                now,
            )
            .await;
        }
        ExperimentAction::Resume => {
            if experiment.state != ExperimentState::Paused {
                return Err(conflict(format!(
                    "the experiment is `{}`; only a paused experiment can be resumed",
                    experiment.state
                )));
            }
            store
                .set_experiment_state(
                    experiment.id,
                    ExperimentState::Active,
                    &format!("resumed by {who}"),
                    now,
                )
                .await
                .map_err(internal)?;
            let resumed = each_trial_job(
                state,
                principal,
                &experiment,
                super::job_actions::UserAction::Resume,
            )
            .await?;
            event(
                state,
                experiment.id,
                format!("resumed by {who} ({resumed} trials resumed)"),
                now,
            )
            .await;
        }
        ExperimentAction::Cancel => {
            if experiment.state.is_terminal() {
                return Err(conflict(format!(
                    "the experiment is `{}` already",
                    experiment.state
                )));
            }
            store
                .set_experiment_state(
                    experiment.id,
                    ExperimentState::Cancelled,
                    &format!("cancelled by {who}"),
                    now,
                )
                .await
                .map_err(internal)?;
            let cancelled = cancel_running(
                state,
                experiment.id,
                &format!("its experiment was cancelled by {who}"),
            )
            .await
            .map_err(internal)?;
            event(
                state,
                experiment.id,
                format!("cancelled by {who} ({cancelled} running trials cancelled)"),
                now,
            )
            .await;
        }
    }
    let experiment = load(state, principal, raw).await?;
    let trials = trial_views(state, &experiment).await?;
    Ok(Json(ExperimentEnvelope {
        experiment: view(experiment, Some(trials)),
    }))
}

/// Pauses (or resumes) every trial job that can be; returns how many changed.
async fn each_trial_job(
    state: &AppState,
    principal: &Principal,
    experiment: &Experiment,
    action: super::job_actions::UserAction,
) -> ApiResult<usize> {
    let (_, segments) = state
        .store
        .experiment_trials(experiment.id)
        .await
        .map_err(|err| ApiError::from_store(err, || "experiment".into()))?;
    let mut changed = 0;
    for segment in &segments {
        let (Some(job), Some(job_state)) = (segment.job_id, segment.job_state) else {
            continue;
        };
        let applies = match action {
            super::job_actions::UserAction::Resume => job_state == drover_core::JobState::Paused,
            _ => !job_state.is_final() && job_state != drover_core::JobState::Paused,
        };
        if applies
            && super::job_actions::user_transition(state, principal, &job.to_string(), action)
                .await
                .is_ok()
        {
            changed += 1;
        }
    }
    Ok(changed)
}
