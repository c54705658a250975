//! How an executor is set up (`ExecutorConfig`): the server it dials, its node's name, GPUs and labels,
//! where it keeps its data, the programs it runs tasks with and the sandbox it runs them in. The agent runs by it; enrolment
//! (`crate::credential`) reads its node name, token and data directory.

use crate::gpu::{GpuInfo, GpuSource};
use crate::sandbox::Sandbox;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// The server's executor gateway, e.g. `http://127.0.0.1:7070`.
    pub server: String,
    pub name: String,
    /// Private to this executor: its id, task scratch directories.
    pub data_dir: PathBuf,
    pub source: GpuSource,
    pub gpus: Vec<GpuInfo>,
    pub cpus: u32,
    pub memory_gb: u32,
    pub labels: BTreeMap<String, String>,
    /// Its taints, `(key, value)` (effect `NoSchedule`).
    pub taints: Vec<(String, String)>,
    /// Host name or address peers reach this node's tasks at.
    pub advertise_host: String,
    /// Program and arguments that run the task shim.
    pub shim: Vec<String>,
    /// Program and arguments that run the training engine on a job file (`drover train-task`).
    pub engine: Vec<String>,
    /// Relative working directories of commands are resolved against this directory.
    pub base_dir: PathBuf,
    /// An enrolment token, exchanged for the node's credential when the node is not enrolled yet.
    pub enrollment_token: Option<String>,
    /// How an `https://` gateway is trusted.
    pub gateway_trust: GatewayTrust,
    /// The sandbox every task runs in; `None`: tasks run as the executor's own user (`--no-sandbox`).
    pub sandbox: Option<Arc<Sandbox>>,
    /// On Kubernetes (`--task-pods`): each task is a Pod of its own instead of a child process.
    pub pods: Option<Arc<crate::pods::Pods>>,
}

/// How the executor trusts a gateway that uses TLS (`https://`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum GatewayTrust {
    /// By the authority kept in the data directory from an earlier enrolment (none: refused).
    #[default]
    Kept,
    /// By the authority's certificate (PEM), from `--gateway-ca`.
    Authority(String),
    /// By the authority's pin (`sha256:HEX`), from `--gateway-ca-hash`.
    Pin(String),
}
