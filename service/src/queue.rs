//! A waiting job's place in the queue: its position in the order the policy would start jobs, its
//! reason, and its predicted start and finish with a band (the leader's forecast, refreshed beside its
//! rounds and kept in the store).

use crate::Service;
use crate::error::ServiceResult;
use chrono::{DateTime, Utc};
use drover_core::JobState;
use drover_store::{Job, QueueEntry};
use serde::Serialize;

/// A waiting job's place in the queue and when it should start.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct QueuePosition {
    /// 1 for the job the policy would start first, counting every tenant's jobs; `null` until the
    /// forecast has seen the job (it runs beside every scheduling round).
    pub position: Option<u32>,
    /// The policy's reason it waits (`insufficient_resources`, `fair_share`, `lower_priority`, …).
    pub reason: Option<String>,
    /// When it should start if running jobs take as long as estimated; `null` beyond the forecast's
    /// 30-day horizon or before the first forecast.
    pub predicted_start: Option<DateTime<Utc>>,
    pub predicted_finish: Option<DateTime<Utc>>,
    /// The start if every job takes as little (`p10`) or as long (`p90`) as its estimate's 10th and
    /// 90th percentiles.
    pub p10: Option<DateTime<Utc>>,
    pub p90: Option<DateTime<Utc>>,
    /// When the forecast was made.
    pub forecast_at: Option<DateTime<Utc>>,
}

impl QueuePosition {
    pub fn of(entry: Option<&QueueEntry>, forecast_at: Option<DateTime<Utc>>) -> Self {
        QueuePosition {
            position: entry.map(|e| e.position),
            reason: entry.map(|e| e.reason.clone()),
            predicted_start: entry.and_then(|e| e.start),
            predicted_finish: entry.and_then(|e| e.finish),
            p10: entry.and_then(|e| e.p10),
            p90: entry.and_then(|e| e.p90),
            forecast_at: entry.and(forecast_at),
        }
    }
}

/// A queued job's place and prediction, for `GET /api/v1/jobs/{id}`.
pub async fn position_of(service: &Service, job: &Job) -> ServiceResult<Option<QueuePosition>> {
    if job.state != JobState::Queued {
        return Ok(None);
    }
    let forecast = service.store.queue_forecast().await?;
    let entry = forecast
        .as_ref()
        .and_then(|f| f.entries.iter().find(|e| e.job == job.id));
    Ok(Some(QueuePosition::of(
        entry,
        forecast.as_ref().map(|f| f.computed_at),
    )))
}
