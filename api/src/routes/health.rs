//! Liveness, readiness and metrics: no token needed.

use crate::state::AppState;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::json;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "Alive: `{\"status\": \"ok\"}`", body = Object)))]
pub async fn healthz() -> impl IntoResponse {
    axum::Json(json!({"status": "ok"}))
}

/// The process can serve: its database answers.
#[utoipa::path(
    get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Ready: `{\"status\": \"ready\"}`", body = Object),
        (status = 503, description = "The database does not answer: `{\"status\": \"unavailable\", \"reason\": \"database\"}`", body = Object),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, axum::Json(json!({"status": "ready"}))),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({"status": "unavailable", "reason": "database"})),
            )
        }
    }
}

/// Prometheus metrics, text format.
#[utoipa::path(
    get, path = "/metrics", tag = "health",
    responses((status = 200, description = "OpenMetrics text format", content_type = "application/openmetrics-text", body = String))
)]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    if state.metrics.job_count_due() {
        match state.store.count_jobs_by_state().await {
            Ok(counts) => state.metrics.set_job_counts(&counts),
            Err(err) => tracing::warn!(error = %err, "counting jobs for metrics failed"),
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}
