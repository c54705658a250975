//! What the leader computes for users to read from any replica: the queue forecast (when each waiting
//! job should start), and the accounting ledger (one row per generation of a job: how many GPUs it
//! held, from when to when, how much of that time trained and kept its work, and why it ended).

use super::StoreResult;
use crate::Scope;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::{JobId, TenantId, UserId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The leader's latest queue forecast.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueForecast {
    pub policy: String,
    pub computed_at: DateTime<Utc>,
    /// Waiting jobs in the order the policy would start them.
    pub entries: Vec<QueueEntry>,
    /// Running jobs' predicted finish.
    pub finishing: BTreeMap<JobId, DateTime<Utc>>,
}

/// One waiting job's place in the queue and predicted start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueEntry {
    pub job: JobId,
    /// 1 for the job the policy would start first.
    pub position: u32,
    /// The policy's wait reason (`insufficient_resources`, `fair_share`, …).
    pub reason: String,
    /// `None`: not within the forecast's horizon.
    pub start: Option<DateTime<Utc>>,
    pub finish: Option<DateTime<Utc>>,
    pub p10: Option<DateTime<Utc>>,
    pub p90: Option<DateTime<Utc>>,
    /// How many of the estimates the start rests on are guesses (nothing like those jobs has
    /// finished or been measured). Absent in forecasts recorded before it existed: none counted.
    #[serde(default)]
    pub guesses: u32,
    /// When its times were computed: a forecast of the queue's head keeps the last full
    /// forecast's times for the jobs behind it, which are that old. Absent in forecasts recorded
    /// before it existed: the forecast's own time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_at: Option<DateTime<Utc>>,
}

/// Why an allocation ended.
pub const END_CAUSES: [&str; 8] = [
    "completed",
    "preemption",
    "failure",
    "resize",
    "migration",
    "paused",
    "cancelled",
    "other",
];

/// One generation of a job: its tasks' GPUs from allocation until the last of them ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub job_id: JobId,
    pub generation: u64,
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub gpus: u32,
    pub started_at: DateTime<Utc>,
    /// Why it was allocated: the job's state reason then (`submitted`, `preempted`, `resized`, …).
    pub start_cause: String,
    pub ended_at: Option<DateTime<Utc>>,
    /// One of [`END_CAUSES`] once ended.
    pub end_cause: Option<String>,
    pub first_step_at: Option<DateTime<Utc>>,
    pub kept_until: Option<DateTime<Utc>>,
    pub idle_gpu_s: f64,
    /// The GPUs of each model it held (empty where its nodes' models were not known).
    pub gpu_models: BTreeMap<String, u32>,
}

/// An allocation with the names it is reported under.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerRow {
    pub allocation: Allocation,
    pub tenant: String,
    pub user: String,
    pub job: String,
}

/// A job that succeeded, as the queue forecast's history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FinishedJob {
    pub job: JobId,
    pub tenant: TenantId,
    /// GPU-seconds it held over all its generations.
    pub gpu_s: f64,
    /// GPUs at its largest shape.
    pub gpus: u32,
    pub submitted_at: DateTime<Utc>,
}

/// What closing an allocation records.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocationEnd {
    pub ended_at: DateTime<Utc>,
    pub end_cause: String,
    pub first_step_at: Option<DateTime<Utc>>,
    pub kept_until: Option<DateTime<Utc>>,
    pub idle_gpu_s: f64,
}

#[async_trait]
pub trait LedgerStore: Send + Sync {
    /// Replaces the stored forecast.
    async fn record_forecast(&self, forecast: &QueueForecast) -> StoreResult<()>;
    async fn queue_forecast(&self) -> StoreResult<Option<QueueForecast>>;
    /// Allocations not closed yet.
    async fn open_allocations(&self) -> StoreResult<Vec<Allocation>>;
    /// Allocations not closed yet whose tasks have all ended (what the loop closes): one query,
    /// however many jobs run.
    async fn ended_allocations(&self) -> StoreResult<Vec<Allocation>>;
    async fn close_allocation(
        &self,
        job: JobId,
        generation: u64,
        end: &AllocationEnd,
    ) -> StoreResult<()>;
    /// When the generation first reported a step, if it did.
    async fn first_step_at(
        &self,
        job: JobId,
        generation: u64,
    ) -> StoreResult<Option<DateTime<Utc>>>;
    /// When the generation's last checkpoint was recorded, if it recorded one.
    async fn last_checkpoint_at(
        &self,
        job: JobId,
        generation: u64,
    ) -> StoreResult<Option<DateTime<Utc>>>;
    /// Allocations in `scope` that overlap [`from`, `to`) (open ones included), at most `limit`.
    async fn allocations_between(
        &self,
        scope: Scope,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<LedgerRow>>;
    /// Jobs that succeeded with an allocation ending at or after `since` (at most the `limit` with
    /// the newest such allocations), each with all its allocations counted: a job read again later
    /// reads the same.
    async fn finished_jobs_since(
        &self,
        since: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<FinishedJob>>;
}
