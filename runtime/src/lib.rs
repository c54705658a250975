//! Drover's runtime: the executor gateway (a tonic service every executor dials), the scheduling loop
//! that turns the policy's plans into tasks, and the reconciliation between the two; with what they
//! need beside them — executor enrolment, ingesting what tasks report (metrics, logs, checkpoints),
//! observing each job's speed and convergence, the queue forecast, the accounting ledger, checkpoint
//! storage, the per-tenant rate buckets and the retention of what tasks report.
//!
//! Intent vs observed: the loop persists what it wants (a generation of tasks per job, and which tasks
//! must stop) before it sends anything; executors report what is; reconciling a job (`dispatch.rs`,
//! `settle.rs`) closes
//! the gap and is safe to run again at any time, so a restarted server or a reconnecting executor
//! converges by the same path.

pub mod accounting;
mod applied;
pub mod checkpoint_files;
pub mod checkpoint_store;
mod delivery;
mod dispatch;
mod enrol;
mod explain;
mod forecast;
mod gateway;
mod hints;
mod hub;
mod ingest;
pub mod leader;
mod ledger;
pub mod limits;
mod observe;
mod report_text;
mod reports;
pub mod retention;
mod runtime;
mod scheduling;
mod settle;
mod snapshot;
pub mod tls;
mod transition;
mod wording;

pub use enrol::validate_node_name;
pub use forecast::{FULL_EVERY as FORECAST_FULL_EVERY, HEAD as FORECAST_HEAD};
pub use gateway::GatewayService;
pub use hints::SearchHints;
pub use hub::{Hub, UsagePoint};
pub use observe::{Budget, Observed, Observer};
pub use runtime::{Runtime, RuntimeConfig};
pub use scheduling::SchedulingLoop;
