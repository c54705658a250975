//! The queue: every waiting job's place in the order the policy would start jobs, its reason, and its
//! predicted start and finish with a band (the leader's forecast, refreshed beside its rounds).

use crate::error::{ApiResult, ErrorBody};
use crate::extract::QueryPairs;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use drover_core::JobState;
use drover_service::auth::Principal;
use drover_service::queue::QueuePosition;
use drover_store::{JobFilter, QueueEntry, QueueForecast};
use serde::Serialize;
use std::collections::HashMap;
use uuid::Uuid;

/// Queued jobs listed at most.
const MAX_QUEUE: u32 = 5_000;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueuedJob {
    pub id: Uuid,
    pub name: String,
    pub tenant: String,
    pub priority: i32,
    pub submitted_at: DateTime<Utc>,
    /// GPUs at its largest shape.
    pub max_gpus: i64,
    #[serde(flatten)]
    pub queue: QueuePosition,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueList {
    /// The policy the forecast replayed; `null` before the first forecast.
    pub policy: Option<String>,
    pub forecast_at: Option<DateTime<Utc>>,
    /// In queue order; jobs the forecast has not seen yet last, oldest first.
    pub jobs: Vec<QueuedJob>,
}

/// The queued jobs the caller may see, in the order the policy would start them.
#[utoipa::path(
    get, path = "/api/v1/queue", tag = "jobs",
    params(
        ("tenant" = Option<String>, Query, max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
         description = "Only this tenant's jobs: cluster administrators any tenant's, others their own only"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 5000, description = "At most this many jobs, 1 to 5000 (default 500)"),
    ),
    responses(
        (status = 200, body = QueueList),
        (status = 403, description = "Another tenant (`tenant`), for anyone but a cluster administrator", body = ErrorBody),
        (status = 404, description = "No such tenant (`tenant`), for a cluster administrator", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
    query: QueryPairs,
) -> ApiResult<Json<QueueList>> {
    query.only(&["tenant", "limit"])?;
    let limit = query.limit(500, MAX_QUEUE)?;
    let scope =
        drover_service::auth::tenant_scope(&state, &principal, query.get("tenant"), "queue")
            .await?;
    let filter = JobFilter {
        states: vec![JobState::Queued],
        limit: MAX_QUEUE,
        ..JobFilter::default()
    };
    let queued = state.store.list_jobs(scope, &filter).await?;
    let forecast: Option<QueueForecast> = state.store.queue_forecast().await?;
    let entries: HashMap<Uuid, &QueueEntry> = forecast
        .iter()
        .flat_map(|f| f.entries.iter())
        .map(|e| (e.job.0, e))
        .collect();
    let forecast_at = forecast.as_ref().map(|f| f.computed_at);
    let mut jobs: Vec<QueuedJob> = queued
        .into_iter()
        .map(|job| QueuedJob {
            queue: QueuePosition::of(entries.get(&job.id.0).copied(), forecast_at),
            id: job.id.0,
            name: job.name,
            tenant: job.tenant_name,
            priority: job.priority,
            submitted_at: job.created_at,
            max_gpus: job.max_gpus,
        })
        .collect();
    jobs.sort_by_key(|j| (j.queue.position.unwrap_or(u32::MAX), j.submitted_at, j.id));
    jobs.truncate(limit as usize);
    Ok(Json(QueueList {
        policy: forecast.map(|f| f.policy),
        forecast_at,
        jobs,
    }))
}
