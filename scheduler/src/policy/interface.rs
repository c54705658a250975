//! The policy interface ([`Policy`]), the oracle interface (for the oracle baselines alone) and the
//! error either gives.

use super::names::policy_names;
use super::state::{Restored, SavedState};
use crate::plan::{JobPlan, Plan};
use crate::snapshot::{ClusterSnapshot, JobView, Shape};
use drover_core::JobId;

/// A scheduling policy. State kept between rounds is either recomputed from the snapshot's
/// observations or saved ([`Policy::save`]): a new leader, or a restarted server, restores what the
/// last leader saved ([`Policy::restore`]) before its first round, so a failover does not reorder
/// the queue.
pub trait Policy: std::fmt::Debug + Send {
    fn name(&self) -> &'static str;
    /// A full round: a decision for every job in the snapshot.
    fn schedule(&mut self, snapshot: &ClusterSnapshot, previous: &Plan) -> Plan;
    /// The incremental entry point: place one new arrival (already in `snapshot.jobs`, waiting) without
    /// a full round, in what the running jobs leave free.
    fn place_arrival(&mut self, snapshot: &ClusterSnapshot, job: &JobView) -> JobPlan;
    /// A copy with this policy's state, to replay ahead from (the queue forecast). An oracle baseline
    /// takes `oracle` in place of its own (an error without one); other policies ignore it.
    fn fork(&self, oracle: Option<Box<dyn Oracle>>) -> Result<Box<dyn Policy>, PolicyError>;
    /// The state kept between rounds that the snapshots do not give back; empty for a policy that
    /// keeps none.
    fn save(&self) -> SavedState {
        SavedState::default()
    }
    /// Takes back what an earlier instance saved, before the first round; a job's entry that cannot
    /// be read leaves that job to start afresh.
    fn restore(&mut self, _saved: &SavedState) -> Restored {
        Restored::default()
    }
}

/// The truth about a job's remaining work. Only SRTF takes one: it is an oracle baseline. In the
/// simulator the implementation reads the hidden ground truth; nothing else can reach it.
pub trait Oracle: std::fmt::Debug + Send {
    /// Seconds the job still needs at `shape`, running alone.
    fn remaining_s(&self, job: JobId, shape: Shape) -> f64;

    /// The job's throughput on GPUs of `model` relative to its fastest model (1 where every model
    /// runs it alike).
    fn model_speed(&self, _job: JobId, _model: crate::cluster::GpuModelTag) -> f64 {
        1.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown policy `{0}` (expected one of: {names})", names = policy_names().join(", "))]
    Unknown(String),
    #[error(
        "policy `{0}` is an oracle baseline and needs the true remaining times (the simulator has them)"
    )]
    NeedsOracle(&'static str),
}
