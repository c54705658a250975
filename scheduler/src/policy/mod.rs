//! The policy interface, the oracle interface (for SRTF alone), and the registry that the simulator and
//! the server's scheduling loop both choose from by name. Each policy is described in `README.md` here.

mod common;
mod defrag;
mod drf;
mod drover;
mod elastic;
mod fifo;
mod gandiva;
mod limits;
mod optimus;
mod packing;
mod srtf;
mod tiresias;
mod trials;

pub use common::{arrival_if_free, non_preemptible_first, ordered_round};
pub use drf::Drf;
pub use drover::DroverPolicy;
pub use elastic::{ElasticParams, ResizeRule, allocate, min_shape, place_targets};
pub use fifo::Fifo;
pub use gandiva::Gandiva;
pub use limits::TenantLimited;
pub use optimus::Optimus;
pub use srtf::Srtf;
pub use tiresias::Tiresias;

use crate::plan::{JobPlan, Plan};
use crate::snapshot::{ClusterSnapshot, JobView, Shape};
use drover_core::JobId;

/// A scheduling policy. State kept between rounds must be a deterministic function of the snapshots
/// shown so far, so a restarted server rebuilds it by replaying them.
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
}

/// The truth about a job's remaining work. Only SRTF takes one: it is an oracle baseline. In the
/// simulator the implementation reads the hidden ground truth; nothing else can reach it.
pub trait Oracle: std::fmt::Debug + Send {
    /// Seconds the job still needs at `shape`, running alone.
    fn remaining_s(&self, job: JobId, shape: Shape) -> f64;
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

/// Every policy's registered name.
pub fn policy_names() -> Vec<&'static str> {
    vec![
        "fifo",
        "fifo-backfill",
        "srtf",
        "drf",
        "tiresias",
        "optimus",
        "optimus-oracle",
        "gandiva",
        "drover",
    ]
}

/// Variants of `drover` with one ingredient removed, for measuring what each contributes (not in
/// `policy_names`, so `--compare all` leaves them out; `--compare` accepts them by name).
pub fn ablation_names() -> Vec<&'static str> {
    vec![
        "drover-no-quotas",
        "drover-no-packing",
        "drover-no-elastic",
        "drover-no-search",
    ]
}

/// Whether the named policy is an oracle baseline (it needs the true remaining times).
pub fn is_oracle_policy(name: &str) -> bool {
    matches!(name, "srtf" | "optimus-oracle")
}

/// Builds a policy by name, held to the tenants' maximum GPUs ([`TenantLimited`]). `oracle` is handed
/// to oracle baselines and dropped by every other policy.
pub fn build_policy(
    name: &str,
    oracle: Option<Box<dyn Oracle>>,
) -> Result<Box<dyn Policy>, PolicyError> {
    Ok(Box::new(TenantLimited(build_unlimited(name, oracle)?)))
}

fn build_unlimited(
    name: &str,
    oracle: Option<Box<dyn Oracle>>,
) -> Result<Box<dyn Policy>, PolicyError> {
    Ok(match name {
        "fifo" => Box::new(Fifo::strict()),
        "fifo-backfill" => Box::new(Fifo::backfill()),
        "srtf" => Box::new(Srtf::new(oracle.ok_or(PolicyError::NeedsOracle("srtf"))?)),
        "drf" => Box::new(Drf),
        "tiresias" => Box::new(Tiresias::default()),
        "optimus" => Box::new(Optimus::new()),
        "optimus-oracle" => Box::new(Optimus::with_oracle(
            oracle.ok_or(PolicyError::NeedsOracle("optimus-oracle"))?,
        )),
        "gandiva" => Box::new(Gandiva::default()),
        "drover" => Box::new(DroverPolicy::default()),
        "drover-no-quotas" => Box::new(DroverPolicy {
            quotas: false,
            ..DroverPolicy::default()
        }),
        "drover-no-packing" => Box::new(DroverPolicy {
            packing: false,
            ..DroverPolicy::default()
        }),
        "drover-no-search" => Box::new(DroverPolicy {
            search: false,
            ..DroverPolicy::default()
        }),
        "drover-no-elastic" => Box::new(DroverPolicy {
            params: ElasticParams {
                grow: false,
                ..DroverPolicy::default().params
            },
            ..DroverPolicy::default()
        }),
        other => return Err(PolicyError::Unknown(other.to_owned())),
    })
}
