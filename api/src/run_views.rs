//! What the API returns about running jobs: tasks, metric samples, checkpoints and log lines.

use chrono::{DateTime, Utc};
use drover_store::{CheckpointRecord, LogLine, MetricSample, Task, TaskRole, TaskState};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::paging::ListMeta;

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskView {
    pub job_id: Uuid,
    pub generation: u64,
    pub role: TaskRole,
    pub index: u32,
    pub node: String,
    /// GPU indices on the node.
    pub gpus: Vec<u16>,
    pub cpus: u32,
    pub state: TaskState,
    /// host:port the task listens on, once reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub stop_requested: bool,
    pub updated_at: DateTime<Utc>,
    /// What a running task's processes use, as its executor last measured them (every few
    /// seconds); absent for other tasks, and on a server that does not hold the node's session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<TaskUsageView>,
}

/// A task's use of its node: its whole process tree's CPU and memory (from the OS), and its GPUs'
/// (from the driver), as its executor measured them.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct TaskUsageView {
    /// CPU time per second (1.0: one core busy); `null` until a second measurement.
    pub cpu_cores: Option<f64>,
    /// Resident memory, in GB.
    pub memory_gb: f64,
    /// Its GPUs' mean utilisation, 0 to 1; absent where the driver does not report it (demo GPUs,
    /// CPU slots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_utilization: Option<f64>,
    /// Memory in use on its GPUs, in GB; absent where not reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_memory_gb: Option<f64>,
    /// The same measurements over the last minutes (up to 15), oldest first: one every 10 s or so.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<TaskUsagePoint>,
}

impl TaskUsageView {
    /// From an executor's measurement (`cpu_cores` negative: not yet known).
    pub fn of(usage: &drover_proto::TaskUsage) -> Self {
        TaskUsageView {
            cpu_cores: (usage.cpu_cores >= 0.0).then_some(usage.cpu_cores),
            memory_gb: usage.memory_gb,
            gpu_utilization: usage.gpu_utilization,
            gpu_memory_gb: usage.gpu_memory_gb,
            history: Vec::new(),
        }
    }
}

/// A task's use at one moment.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct TaskUsagePoint {
    pub at: DateTime<Utc>,
    /// CPU time per second; `null` where not yet known.
    pub cpu_cores: Option<f64>,
    /// Resident memory, in GB.
    pub memory_gb: f64,
    /// Its GPUs' mean utilisation, 0 to 1; `null` where not reported.
    pub gpu_utilization: Option<f64>,
    /// Memory in use on its GPUs, in GB; `null` where not reported.
    pub gpu_memory_gb: Option<f64>,
}

impl TaskUsagePoint {
    pub fn of(at: DateTime<Utc>, usage: &drover_proto::TaskUsage) -> Self {
        TaskUsagePoint {
            at,
            cpu_cores: (usage.cpu_cores >= 0.0).then_some(usage.cpu_cores),
            memory_gb: usage.memory_gb,
            gpu_utilization: usage.gpu_utilization,
            gpu_memory_gb: usage.gpu_memory_gb,
        }
    }
}

impl From<Task> for TaskView {
    fn from(task: Task) -> Self {
        TaskView {
            job_id: task.key.job_id.0,
            generation: task.key.generation,
            role: task.key.role,
            index: task.key.index,
            node: task.node_name,
            gpus: task.gpus,
            cpus: task.cpus,
            state: task.state,
            address: task.address,
            exit_code: task.exit_code,
            exit_signal: task.exit_signal,
            message: task.message,
            stop_requested: task.stop_requested,
            updated_at: task.updated_at,
            usage: None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskList {
    pub tasks: Vec<TaskView>,
    pub meta: ListMeta,
}

/// One metric value, tagged with the shape it was measured at.
#[derive(Debug, Serialize, ToSchema)]
pub struct MetricView {
    pub id: i64,
    pub name: String,
    pub step: u64,
    pub value: f64,
    pub generation: u64,
    pub role: TaskRole,
    pub index: u32,
    pub num_ps: u32,
    pub num_workers: u32,
    pub gpu_model: String,
    pub time: DateTime<Utc>,
}

impl From<MetricSample> for MetricView {
    fn from(m: MetricSample) -> Self {
        MetricView {
            id: m.id,
            name: m.name,
            step: m.step,
            value: m.value,
            generation: m.generation,
            role: m.role,
            index: m.index,
            num_ps: m.num_ps,
            num_workers: m.num_workers,
            gpu_model: m.gpu_model,
            time: m.recorded_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MetricList {
    pub metrics: Vec<MetricView>,
    pub meta: ListMeta,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CheckpointView {
    pub id: Uuid,
    pub job_id: Uuid,
    pub generation: u64,
    pub step: u64,
    /// Where it lies in the checkpoint storage, relative to the storage's root
    /// (`JOB_ID/gGENERATION/NAME`); never the server's own paths.
    pub path: String,
    pub size_bytes: u64,
    pub created_at: DateTime<Utc>,
}

impl CheckpointView {
    /// The record, its path made relative to the checkpoint storage's `root` (the whole path only
    /// when it does not lie under it, or the root is unknown: it is then not this server's).
    pub fn new(c: CheckpointRecord, root: Option<&std::path::Path>) -> Self {
        let path = root
            .and_then(|root| std::path::Path::new(&c.path).strip_prefix(root).ok())
            .map_or_else(|| c.path.clone(), |p| p.display().to_string());
        CheckpointView {
            id: c.id,
            job_id: c.job_id.0,
            generation: c.generation,
            step: c.step,
            path,
            size_bytes: c.size_bytes,
            created_at: c.created_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CheckpointList {
    pub checkpoints: Vec<CheckpointView>,
    pub meta: ListMeta,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LogLineView {
    pub id: i64,
    pub generation: u64,
    /// `worker-0`, `ps-1`, …
    pub task: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    pub line: String,
    pub time: DateTime<Utc>,
}

impl From<LogLine> for LogLineView {
    fn from(l: LogLine) -> Self {
        LogLineView {
            id: l.id,
            generation: l.generation,
            task: format!("{}-{}", l.role.as_str(), l.index),
            stream: l.stream,
            line: l.line,
            time: l.logged_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LogList {
    pub logs: Vec<LogLineView>,
    pub meta: LogMeta,
}

/// Where a page of log lines lies in the whole.
#[derive(Debug, Serialize, ToSchema)]
pub struct LogMeta {
    /// Pass as `cursor` for the lines after this page (a running job's new lines too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Pass as `before` for the page before this one; absent when no line lies before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prev_cursor: Option<String>,
    /// Lines passing the filter lie after this page now.
    pub more: bool,
}

/// How many running tasks were asked to checkpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckpointRequested {
    pub tasks: u32,
}
