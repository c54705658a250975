//! Drover's scheduler: a pure, synchronous, deterministic library.
//!
//! A policy is `schedule(&snapshot, &previous_plan) -> Plan` ([`policy::Policy`]): it sees a
//! [`snapshot::ClusterSnapshot`] (nodes, tenants, jobs with their observed history, and the time, which
//! comes in the snapshot: there is no wall clock here) and returns a [`plan::Plan`] that places every job's
//! worker and parameter-server tasks or says, with a typed reason, why it waits. [`invariants`] checks
//! every plan (no GPU memory or CPU over-committed, no GPU shared without a packing decision, gangs
//! all-or-nothing). The [`sim`] module replays real cluster traces through the very same policies, with
//! each job's true speed and loss hidden behind the simulator's own types.

pub mod cluster;
pub mod flavours;
pub mod forecast;
pub mod invariants;
pub mod perf;
pub mod place;
pub mod placement;
pub mod plan;
pub mod policy;
pub mod shape;
pub mod sim;
pub mod snapshot;

pub use cluster::{Node, NodeId};
pub use plan::{JobPlan, Placement, Plan, Role, RunReason, TaskPlacement, WaitReason};
pub use policy::{
    Oracle, Policy, PolicyError, ablation_names, build_policy, is_oracle_policy, policy_names,
};
pub use snapshot::{ClusterSnapshot, JobView, SearchHint, Shape};
