//! What the store keeps of hyper-parameter searches: experiments, their trials (points of the space)
//! and segments (the jobs that ran them), and their events. The searcher's state is rebuilt from these
//! rows and the trial jobs' own states and metrics every time the driver plans.

use super::{Scope, StoreResult};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::{ExperimentId, JobId, JobState, TenantId, UserId};
use std::fmt;
use std::str::FromStr;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ExperimentState {
    /// Trials are being proposed and run.
    Active,
    /// No new trials start; running ones go on.
    Paused,
    /// The searcher or a budget ended it.
    Succeeded,
    /// A user cancelled it (its running trials were cancelled).
    Cancelled,
    /// It cannot go on (its trials cannot be built or submitted).
    Failed,
}

impl ExperimentState {
    pub fn as_str(self) -> &'static str {
        match self {
            ExperimentState::Active => "active",
            ExperimentState::Paused => "paused",
            ExperimentState::Succeeded => "succeeded",
            ExperimentState::Cancelled => "cancelled",
            ExperimentState::Failed => "failed",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ExperimentState::Succeeded | ExperimentState::Cancelled | ExperimentState::Failed
        )
    }
}

impl fmt::Display for ExperimentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ExperimentState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "active" => ExperimentState::Active,
            "paused" => ExperimentState::Paused,
            "succeeded" => ExperimentState::Succeeded,
            "cancelled" => ExperimentState::Cancelled,
            "failed" => ExperimentState::Failed,
            other => return Err(format!("unknown experiment state `{other}`")),
        })
    }
}

#[derive(Debug, Clone)]
pub struct NewExperiment {
    pub id: ExperimentId,
    pub tenant_id: TenantId,
    pub name: String,
    /// The whole `DroverExperiment`, defaults filled in.
    pub document: serde_json::Value,
    pub submitted_by: UserId,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    pub id: ExperimentId,
    pub tenant_id: TenantId,
    pub tenant_name: String,
    pub name: String,
    pub state: ExperimentState,
    pub message: String,
    pub document: serde_json::Value,
    pub submitted_by: UserId,
    pub best_trial: Option<u32>,
    pub best_value: Option<f64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// One point of the space the searcher chose.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRow {
    pub experiment_id: ExperimentId,
    pub trial: u32,
    pub params: serde_json::Value,
    pub source: Option<(u32, u32)>,
    pub replaces: Option<u32>,
    pub created_at: DateTime<Utc>,
}

/// One job of a trial, with what the store knows of the job.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentRow {
    pub experiment_id: ExperimentId,
    pub trial: u32,
    pub segment: u32,
    /// `None` until the job is created (the row is the intent).
    pub job_id: Option<JobId>,
    pub max_steps: Option<u64>,
    pub stop_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The job's state and name, when it exists.
    pub job_state: Option<JobState>,
    pub job_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentEvent {
    pub id: i64,
    pub message: String,
    pub created_at: DateTime<Utc>,
}

/// A metric sample of one of an experiment's trials.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrialSample {
    pub trial: u32,
    pub segment: u32,
    pub step: u64,
    pub value: f64,
}

#[async_trait]
pub trait ExperimentStore {
    /// A checkpoint by its id, whichever job wrote it (for `train.init_from`).
    async fn checkpoint_by_id(
        &self,
        id: uuid::Uuid,
    ) -> StoreResult<Option<super::CheckpointRecord>>;
    /// A name already used in the tenant is a conflict on `metadata.name`.
    async fn create_experiment(&self, experiment: &NewExperiment) -> StoreResult<Experiment>;
    async fn get_experiment(&self, scope: Scope, id: ExperimentId) -> StoreResult<Experiment>;
    /// Newest first, `limit` at most, older than the experiment `before` when given (the cursor).
    async fn list_experiments(
        &self,
        scope: Scope,
        before: Option<ExperimentId>,
        limit: u32,
    ) -> StoreResult<Vec<Experiment>>;
    /// The tenant's experiment of that name (names are unique within a tenant).
    async fn experiment_by_name(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> StoreResult<Option<Experiment>>;
    /// Experiments not yet ended (active or paused), across tenants: the driver's work list.
    async fn open_experiments(&self) -> StoreResult<Vec<Experiment>>;
    async fn set_experiment_state(
        &self,
        id: ExperimentId,
        state: ExperimentState,
        message: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<()>;
    async fn set_experiment_best(
        &self,
        id: ExperimentId,
        best: Option<(u32, f64)>,
        at: DateTime<Utc>,
    ) -> StoreResult<()>;
    /// Records a trial with its first segment's intent, in one transaction (a trial is never stored
    /// without a segment); `false` when the experiment already has that trial (it and its segments
    /// are kept).
    async fn insert_trial(&self, trial: &TrialRow, first: &SegmentRow) -> StoreResult<bool>;
    /// Records a segment's intent; `false` when it already exists (it is kept).
    async fn insert_segment(&self, segment: &SegmentRow) -> StoreResult<bool>;
    async fn set_segment_job(
        &self,
        id: ExperimentId,
        trial: u32,
        segment: u32,
        job: JobId,
    ) -> StoreResult<()>;
    async fn set_segment_stop_reason(
        &self,
        id: ExperimentId,
        trial: u32,
        segment: u32,
        reason: &str,
    ) -> StoreResult<()>;
    /// Trials in index order, and segments in (trial, segment) order with their jobs' states.
    async fn experiment_trials(
        &self,
        id: ExperimentId,
    ) -> StoreResult<(Vec<TrialRow>, Vec<SegmentRow>)>;
    /// Every sample of metric `name` the experiment's trial jobs reported by worker 0, in (trial, step)
    /// order.
    async fn experiment_samples(
        &self,
        id: ExperimentId,
        name: &str,
    ) -> StoreResult<Vec<TrialSample>>;
    /// What changes when a trial job is made or changes state: the number of segments and the latest
    /// time one of their jobs changed. The driver skips a pass that would see nothing new.
    async fn experiment_watermark(
        &self,
        id: ExperimentId,
    ) -> StoreResult<(i64, Option<DateTime<Utc>>)>;
    /// GPU-seconds allocated to the experiment's trial jobs, open allocations counted up to `now`.
    async fn experiment_gpu_seconds(
        &self,
        id: ExperimentId,
        now: DateTime<Utc>,
    ) -> StoreResult<f64>;
    async fn add_experiment_event(
        &self,
        id: ExperimentId,
        message: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<()>;
    async fn list_experiment_events(
        &self,
        id: ExperimentId,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<ExperimentEvent>>;
}
