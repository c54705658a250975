//! What running jobs on executors adds to the store: tasks of each generation, metric samples,
//! checkpoint records and task logs, and the node-side writes (registration, health, cordon, drain).
//!
//! Fencing lives here, in the database: a metric, checkpoint or log report is written only if its
//! generation is still the job's current one, checked and written in one transaction that holds the
//! job's row, so a new generation cannot start between the check and the write.

use super::{Job, Node, Scope, StateChange, StoreResult};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::JobId;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A worker or a parameter-server shard.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TaskRole {
    Worker,
    Ps,
}

impl TaskRole {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskRole::Worker => "worker",
            TaskRole::Ps => "ps",
        }
    }
}

impl FromStr for TaskRole {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "worker" => Ok(TaskRole::Worker),
            "ps" => Ok(TaskRole::Ps),
            other => Err(format!("task role `{other}`")),
        }
    }
}

/// One task of one generation of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskKey {
    pub job_id: JobId,
    pub generation: u64,
    pub role: TaskRole,
    pub index: u32,
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/g{}/{}-{}",
            self.job_id.0,
            self.generation,
            self.role.as_str(),
            self.index
        )
    }
}

/// Where a task is in its life. `Exited` and `Lost` are final; the others hold the task's resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// Persisted with its generation, not yet acknowledged by the executor.
    Assigned,
    /// Its address is reserved and reported; waiting for the peer list.
    Prepared,
    Running,
    /// Asked to stop: checkpointing within the grace period, or being killed.
    Stopping,
    Exited,
    /// Its executor was lost; whatever it was doing is gone.
    Lost,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Assigned => "assigned",
            TaskState::Prepared => "prepared",
            TaskState::Running => "running",
            TaskState::Stopping => "stopping",
            TaskState::Exited => "exited",
            TaskState::Lost => "lost",
        }
    }

    pub fn is_final(self) -> bool {
        matches!(self, TaskState::Exited | TaskState::Lost)
    }
}

impl FromStr for TaskState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "assigned" => TaskState::Assigned,
            "prepared" => TaskState::Prepared,
            "running" => TaskState::Running,
            "stopping" => TaskState::Stopping,
            "exited" => TaskState::Exited,
            "lost" => TaskState::Lost,
            other => return Err(format!("task state `{other}`")),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub key: TaskKey,
    pub node_name: String,
    pub gpus: Vec<u16>,
    pub cpus: u32,
    pub state: TaskState,
    pub address: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub message: String,
    pub stop_requested: bool,
    pub updated_at: DateTime<Utc>,
}

/// A task of a generation about to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    pub role: TaskRole,
    pub index: u32,
    pub node_name: String,
    pub gpus: Vec<u16>,
    pub cpus: u32,
}

/// A change to a task row. Fields left `None` keep their value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskChange {
    pub state: Option<TaskState>,
    pub address: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub message: Option<String>,
    pub stop_requested: Option<bool>,
}

/// What an executor reports when it registers.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRegistration {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub gpus: Vec<super::Gpu>,
    pub cpus: u32,
    pub memory_gb: u32,
    pub gpu_source: String,
    /// `runc`, `none` or empty (see [`super::Node::isolation`]).
    pub isolation: String,
    /// It runs tasks in OCI images (see [`super::Node::runs_images`]).
    pub runs_images: bool,
    pub taints: Vec<super::Taint>,
}

/// Metric values one task reported at one step, with the tags speed fits need.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMetrics {
    pub key: TaskKey,
    pub num_ps: u32,
    pub num_workers: u32,
    /// On how many nodes the generation's workers run (1: all on one).
    pub worker_nodes: u32,
    pub gpu_model: String,
    pub step: u64,
    pub values: Vec<(String, f64)>,
    pub recorded_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MetricSample {
    pub id: i64,
    pub generation: u64,
    pub role: TaskRole,
    pub index: u32,
    pub num_ps: u32,
    pub num_workers: u32,
    /// On how many nodes the generation's workers ran (1: all on one).
    pub worker_nodes: u32,
    pub gpu_model: String,
    pub step: u64,
    pub name: String,
    pub value: f64,
    pub recorded_at: DateTime<Utc>,
}

/// One metric gathered into the step ranges `[origin + k·width, origin + (k+1)·width)` (ranges
/// without samples left out).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricSeries {
    pub origin: u64,
    pub width: u64,
    pub buckets: Vec<MetricBucket>,
}

/// Samples of one metric over a range of steps (one sample when the series is short).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricBucket {
    pub first_step: u64,
    pub last_step: u64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub samples: u64,
    /// When the range's latest sample was recorded (what a chart of time places the range at).
    pub last_at: DateTime<Utc>,
}

/// Steps from `from` to `to`, both included; either end open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepRange {
    pub from: Option<u64>,
    pub to: Option<u64>,
}

impl StepRange {
    /// Every step.
    pub const ALL: StepRange = StepRange {
        from: None,
        to: None,
    };
}

/// A sample as a chart folds it in: its step, value and when it was recorded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricPoint {
    pub step: u64,
    pub value: f64,
    pub recorded_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricFilter {
    /// Any of these names; empty means all.
    pub names: Vec<String>,
    pub from_step: Option<u64>,
    pub to_step: Option<u64>,
    /// Only samples with an id above this one (the cursor).
    pub after: Option<i64>,
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRecord {
    pub id: uuid::Uuid,
    pub job_id: JobId,
    pub generation: u64,
    pub step: u64,
    pub path: String,
    pub size_bytes: u64,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLogLine {
    pub stream: String,
    pub line: String,
    pub logged_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub id: i64,
    pub generation: u64,
    pub role: TaskRole,
    pub index: u32,
    pub stream: String,
    pub line: String,
    pub logged_at: DateTime<Utc>,
    /// A contract line ([`is_contract_line`]).
    pub contract: bool,
}

/// Whether a task's output line is a contract line: a JSON object whose `drover` member is
/// `metrics` or `checkpoint` (what the executor turns into metric samples and checkpoint records).
/// Log views leave them out unless asked.
pub fn is_contract_line(line: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Tag<'a> {
        #[serde(borrow)]
        drover: std::borrow::Cow<'a, str>,
    }
    line.trim_start().starts_with('{')
        && serde_json::from_str::<Tag>(line)
            .is_ok_and(|tag| matches!(tag.drover.as_ref(), "metrics" | "checkpoint"))
}

/// Which of a job's log lines a read wants; every line by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// One task's lines: its role and index (of every generation unless `generation` is set).
    pub task: Option<(TaskRole, u32)>,
    pub generation: Option<u64>,
    /// Lines that contain this text, ignoring ASCII case.
    pub contains: Option<String>,
    /// Leave contract lines out.
    pub hide_contract: bool,
}

impl LogFilter {
    /// Whether `line` passes, as the store's query decides it.
    pub fn matches(&self, line: &LogLine) -> bool {
        self.task
            .is_none_or(|(role, index)| line.role == role && line.index == index)
            && self.generation.is_none_or(|g| line.generation == g)
            && !(self.hide_contract && line.contract)
            && self.contains.as_deref().is_none_or(|needle| {
                line.line
                    .to_ascii_lowercase()
                    .contains(&needle.to_ascii_lowercase())
            })
    }
}

/// Where a page of log lines lies: the lines between two ids (either end open), the first of them
/// or the last. Every page comes in id order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogWindow {
    /// Only lines after this id.
    pub after: Option<i64>,
    /// Only lines before this id.
    pub before: Option<i64>,
    /// The last lines of the range, not the first.
    pub last: bool,
}

impl LogWindow {
    /// The first lines.
    pub const START: LogWindow = LogWindow {
        after: None,
        before: None,
        last: false,
    };
    /// The last lines.
    pub const LAST: LogWindow = LogWindow {
        after: None,
        before: None,
        last: true,
    };

    /// The first lines after line `id`.
    pub fn after(id: i64) -> Self {
        LogWindow {
            after: Some(id),
            ..Self::START
        }
    }

    /// The lines just before line `id`.
    pub fn before(id: i64) -> Self {
        LogWindow {
            before: Some(id),
            ..Self::LAST
        }
    }
}

/// The store's side of running jobs. Implemented by both stores; part of [`super::Store`].
#[async_trait]
pub trait ExecStore: Send + Sync {
    // Nodes.
    /// Creates or refreshes a node from an executor's registration, keeping its cordon and drain flags.
    async fn register_node(&self, node: &NodeRegistration, at: DateTime<Utc>) -> StoreResult<Node>;
    async fn set_node_health(&self, name: &str, health: &str, at: DateTime<Utc>)
    -> StoreResult<()>;
    /// Records when each of these nodes' executors was last heard from, in one statement (the
    /// leader keeps heartbeats in memory and writes them now and then, so that every replica shows
    /// them); nodes not in the store are ignored.
    async fn record_heartbeats(&self, heard: &[(String, DateTime<Utc>)]) -> StoreResult<()>;
    /// Sets a node's cordon and drain flags and records `audit` in one transaction: the audit log
    /// is how the Kubernetes node controller knows which cordons were its own, so the two never part.
    async fn set_node_cordon(
        &self,
        name: &str,
        cordoned: bool,
        draining: bool,
        audit: &super::NewAuditEvent,
    ) -> StoreResult<Node>;

    // Jobs and tasks, for the scheduling loop.
    /// Jobs in `queued`, `starting`, `running` or `rescaling`, oldest first, with documents.
    async fn active_jobs(&self) -> StoreResult<Vec<Job>>;
    /// The documents of these jobs, with their [`Job::document_version`]s.
    async fn job_documents(
        &self,
        ids: &[JobId],
    ) -> StoreResult<Vec<(JobId, u64, serde_json::Value)>>;
    /// The last step each of these jobs reported a `loss` at (jobs that reported none are left out).
    async fn last_steps(&self, ids: &[JobId]) -> StoreResult<Vec<(JobId, u64)>>;
    /// Every task not yet `exited` or `lost`, of any job and generation.
    async fn live_tasks(&self) -> StoreResult<Vec<Task>>;
    /// The same, of one node only (what an executor's heartbeat and registration are checked
    /// against: a read of that node's rows, not the cluster's).
    async fn live_tasks_on(&self, node: &str) -> StoreResult<Vec<Task>>;
    /// Replaces an active job's document (new resource ranges) and records `event` (its state unchanged)
    /// in one transaction. `NotFound` outside `scope`; `Conflict` once the job is final.
    async fn update_job_document(
        &self,
        scope: Scope,
        id: JobId,
        document: &serde_json::Value,
        max_gpus: i64,
        event: &StateChange,
    ) -> StoreResult<Job>;
    /// Active jobs with a task of their current generation already ended (finishing or failing): the
    /// scheduler leaves their placement alone until they are settled.
    async fn finishing_jobs(&self) -> StoreResult<Vec<JobId>>;
    /// The tasks of a job's generation.
    async fn generation_tasks(&self, job: JobId, generation: u64) -> StoreResult<Vec<Task>>;
    /// The tasks of each of these jobs' generations, in one query: grouped by job, each group in
    /// [`ExecStore::generation_tasks`]'s order.
    async fn tasks_of_generations(&self, generations: &[(JobId, u64)]) -> StoreResult<Vec<Task>>;
    /// Moves a `queued` job to `starting` under a new generation with these tasks, in one transaction.
    /// Returns the new generation, or `None` when the job was no longer `queued`.
    async fn start_generation(
        &self,
        job: JobId,
        tasks: &[NewTask],
        change: &StateChange,
    ) -> StoreResult<Option<u64>>;
    /// [`ExecStore::start_generation`] for many jobs in one transaction: each job still `queued`
    /// moves to `change.to` under a new generation with its tasks; returns, for those, the new
    /// generation and the tasks as stored (in [`ExecStore::generation_tasks`]' order). Jobs no
    /// longer queued are left out. Callers keep a batch to a few hundred jobs.
    async fn start_generations(
        &self,
        starts: &[(JobId, Vec<NewTask>, StateChange)],
    ) -> StoreResult<Vec<(JobId, u64, Vec<Task>)>>;
    /// Moves a `running` job still in `generation` to `change.to` (`rescaling`) under a new
    /// generation with these tasks, in one transaction: the old generation's tasks are then stopped
    /// and the new ones start from its checkpoint. `None` when the job had moved on.
    async fn rescale_generation(
        &self,
        job: JobId,
        generation: u64,
        tasks: &[NewTask],
        change: &StateChange,
    ) -> StoreResult<Option<u64>>;
    /// Transitions a job only while `generation` is still its current one; `None` when it is not (or
    /// when the state machine forbids the move, which a concurrent change can cause).
    /// `count_restart` adds one to the job's restarts in the same transaction.
    async fn transition_job_in_generation(
        &self,
        job: JobId,
        generation: u64,
        change: &StateChange,
        count_restart: bool,
    ) -> StoreResult<Option<Job>>;
    /// Transitions many jobs in one transaction, each only while its generation (given with it) is
    /// still its current one and the state machine allows the move; returns the jobs moved, in id order. What
    /// the scheduling loop uses to mark the jobs whose every task started running.
    async fn transition_jobs_in_generation(
        &self,
        changes: &[(JobId, u64, StateChange)],
    ) -> StoreResult<Vec<JobId>>;
    /// Changes a task that has not ended; a task that exited or was lost is never changed again.
    async fn update_task(&self, key: &TaskKey, change: &TaskChange) -> StoreResult<()>;
    /// Marks every live task on the node `lost`; returns them.
    async fn lose_node_tasks(&self, node: &str) -> StoreResult<Vec<Task>>;

    // Reports from tasks, fenced by generation ([`super::StoreError::Fenced`]).
    async fn record_metrics(&self, metrics: &NewMetrics) -> StoreResult<()>;
    async fn record_checkpoint(
        &self,
        key: &TaskKey,
        step: u64,
        path: &str,
        size_bytes: u64,
    ) -> StoreResult<CheckpointRecord>;
    /// Records a checkpoint announced past the per-job rate of new records: it replaces the
    /// generation's earlier records made this way, so at most one of them exists per generation and
    /// the newest checkpoint is always recorded. Such a record (and its id) lasts only until the next.
    async fn record_checkpoint_over_rate(
        &self,
        key: &TaskKey,
        step: u64,
        path: &str,
        size_bytes: u64,
    ) -> StoreResult<CheckpointRecord>;
    async fn append_logs(&self, key: &TaskKey, lines: &[NewLogLine]) -> StoreResult<()>;

    // Reads for the API, tenant-scoped.
    async fn job_tasks(&self, scope: Scope, job: JobId) -> StoreResult<Vec<Task>>;
    async fn list_metrics(
        &self,
        scope: Scope,
        job: JobId,
        filter: &MetricFilter,
    ) -> StoreResult<Vec<MetricSample>>;
    /// The samples named `names` of each job after its cursor (a sample id), in one query: the
    /// scheduling loop's read of the jobs that reported since its last round. In id order, at most
    /// `limit` in all (the caller reads the jobs one by one when that many come back). Each job's
    /// samples are found through the `(job_id, id)` index from its cursor, however large the
    /// table.
    async fn metrics_after(
        &self,
        cursors: &[(JobId, i64)],
        names: &[String],
        limit: u32,
    ) -> StoreResult<Vec<(JobId, MetricSample)>>;
    /// Oldest first.
    async fn list_checkpoints(
        &self,
        scope: Scope,
        job: JobId,
    ) -> StoreResult<Vec<CheckpointRecord>>;
    /// One metric of a job in step order over `steps`, as a chart draws it: every sample when
    /// there are at most `2 × buckets`, else the samples gathered into about `buckets` equal step
    /// ranges (the database does the work: a long series never crosses the wire whole).
    async fn metric_series(
        &self,
        scope: Scope,
        job: JobId,
        name: &str,
        steps: StepRange,
        buckets: u32,
    ) -> StoreResult<MetricSeries>;
    /// One metric's samples after step `after` (all when `None`), in step order, `limit` at most.
    async fn metric_points_after(
        &self,
        scope: Scope,
        job: JobId,
        name: &str,
        after: Option<u64>,
        limit: u32,
    ) -> StoreResult<Vec<MetricPoint>>;
    /// The names of the metrics a job reported, sorted.
    async fn metric_names(&self, scope: Scope, job: JobId) -> StoreResult<Vec<String>>;
    // Retention: what the leader deletes as it ages, a bounded batch a statement.
    /// Deletes at most `limit` log lines logged before `before`; returns how many.
    async fn delete_logs_before(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64>;
    /// At most `limit` jobs that ended (succeeded, failed, cancelled) before `ended_before` and
    /// still have metric samples.
    async fn ended_jobs_with_samples(
        &self,
        ended_before: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<JobId>>;
    /// Deletes at most `limit` of the job's metric samples; returns how many.
    async fn delete_job_samples(&self, job: JobId, limit: u32) -> StoreResult<u64>;
    /// At most `limit` jobs created before `created_before` that have metric samples, in id order
    /// after `after` (the page before's last).
    async fn jobs_with_samples(
        &self,
        created_before: DateTime<Utc>,
        after: Option<JobId>,
        limit: u32,
    ) -> StoreResult<Vec<JobId>>;
    /// Deletes those of `job`'s metric samples whose ids are `ids`; returns how many there were.
    async fn delete_samples(&self, job: JobId, ids: &[i64]) -> StoreResult<u64>;
    /// Forgets the records `ids` of `job`'s checkpoints (ones no longer in storage); returns how
    /// many there were.
    async fn forget_checkpoints(&self, job: JobId, ids: &[uuid::Uuid]) -> StoreResult<u64>;
    async fn latest_checkpoint(&self, job: JobId) -> StoreResult<Option<CheckpointRecord>>;
    /// When each of `jobs`' latest checkpoints (as [`Self::latest_checkpoint`] picks it) was made,
    /// for the jobs that have one, in one query: the scheduling loop's read of many jobs at once.
    async fn latest_checkpoint_times(
        &self,
        jobs: &[JobId],
    ) -> StoreResult<Vec<(JobId, DateTime<Utc>)>>;
    /// The job's newest `limit` checkpoint records, newest (highest step) first.
    async fn recent_checkpoints(
        &self,
        job: JobId,
        limit: u32,
    ) -> StoreResult<Vec<CheckpointRecord>>;
    /// [`Self::recent_checkpoints`] of each of `jobs` that has any, in one query (a few hundred
    /// jobs a query): the records of one job together, in that order. A round that starts
    /// thousands of jobs reads where each resumes from at once, not one job at a time.
    async fn recent_checkpoints_of(
        &self,
        jobs: &[JobId],
        limit: u32,
    ) -> StoreResult<Vec<CheckpointRecord>>;
    /// At most `limit` of the job's log lines that pass `filter`, from `window`, in id order.
    async fn list_logs(
        &self,
        scope: Scope,
        job: JobId,
        filter: &LogFilter,
        window: LogWindow,
        limit: u32,
    ) -> StoreResult<Vec<LogLine>>;
    /// The id of the `span`-th of the job's lines (any line, no filter) counted from `window`'s
    /// start in its direction (from its end when it reads the last lines); `None` when it holds
    /// fewer. What bounds a search's scan.
    async fn log_edge(
        &self,
        scope: Scope,
        job: JobId,
        window: LogWindow,
        span: u32,
    ) -> StoreResult<Option<i64>>;
}

#[cfg(test)]
mod tests {
    use super::is_contract_line;

    #[test]
    fn contract_lines_are_the_metrics_and_checkpoint_objects() {
        assert!(is_contract_line(
            r#"{"drover": "metrics", "step": 3, "values": {"loss": 1.5}}"#
        ));
        assert!(is_contract_line(
            r#"  {"step":3,"drover":"checkpoint","path":"step-3"}"#
        ));
        assert!(!is_contract_line(r#"{"drover": "hello"}"#));
        assert!(!is_contract_line(r#"{"loss": 1.5}"#));
        assert!(!is_contract_line(r#"{"drover": "metrics", "step": "#));
        assert!(!is_contract_line("epoch 1 drover metrics"));
    }
}
