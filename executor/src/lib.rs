//! Drover's node agent. An executor dials the server's gateway, advertises its GPUs (real ones found
//! through the CUDA driver, or CPU slots and demo GPUs), and runs each task it is given as a child
//! process behind the task shim, so that no task outlives it, each in a sandbox of its own
//! (`sandbox`) unless told to run them unconfined, over an OCI image of the job's (`images`) when it
//! names one.

pub mod agent;
mod config;
pub mod credential;
mod fatal;
pub mod gpu;
mod host;
pub mod identity;
pub mod images;
pub mod launcher;
pub mod pods;
pub mod sandbox;
pub mod shim;
pub mod storage;
pub mod task;
mod task_use;

pub use agent::Agent;
pub use config::{ExecutorConfig, GatewayTrust};
pub use gpu::{GpuError, GpuInfo, GpuSource};
