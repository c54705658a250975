//! What a policy decides: for every active job, where its tasks run or why it waits.

use crate::cluster::NodeId;
use crate::snapshot::{ClusterSnapshot, Shape};
use drover_core::JobId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Worker,
    Ps,
}

/// One task on one node. Workers hold GPUs (by index on the node); PS shards hold CPUs only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPlacement {
    pub role: Role,
    pub index: u32,
    pub node: NodeId,
    pub gpus: Vec<u16>,
    pub cpus: u32,
    /// The policy decided to share these GPUs with one other job (Gandiva-style packing).
    pub packed: bool,
}

/// Where a job's tasks run: a whole gang, or nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub tasks: Vec<TaskPlacement>,
}

impl Placement {
    pub fn shape(&self) -> Shape {
        let workers = self.tasks.iter().filter(|t| t.role == Role::Worker).count() as u32;
        Shape {
            ps: self.tasks.len() as u32 - workers,
            workers,
        }
    }

    pub fn num_gpus(&self) -> u32 {
        self.tasks.iter().map(|t| t.gpus.len() as u32).sum()
    }

    /// The distinct nodes holding the job's workers.
    pub fn worker_nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self
            .tasks
            .iter()
            .filter(|t| t.role == Role::Worker)
            .map(|t| t.node)
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// Every task on the same node as before (the GPUs there may differ), ignoring order: a job
    /// suspended in a node's memory can resume there without moving its state.
    pub fn same_nodes(&self, other: &Placement) -> bool {
        let key = |p: &Placement| {
            let mut k: Vec<(Role, NodeId)> = p.tasks.iter().map(|t| (t.role, t.node)).collect();
            k.sort_unstable();
            k
        };
        key(self) == key(other)
    }

    /// The same nodes and GPUs for every task, ignoring order.
    pub fn same_resources(&self, other: &Placement) -> bool {
        let key = |p: &Placement| {
            let mut k: Vec<(Role, NodeId, Vec<u16>)> = p
                .tasks
                .iter()
                .map(|t| (t.role, t.node, t.gpus.clone()))
                .collect();
            k.sort();
            k
        };
        key(self) == key(other)
    }
}

/// Why a job waits. Every waiting job carries one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// Strict FIFO: an earlier job at the head of the queue does not fit yet.
    BehindHeadOfLine,
    /// Not enough free GPUs (or CPUs) in the cluster for its shape.
    InsufficientResources,
    /// Enough in total, but not on few enough nodes (consolidation) or not in one piece.
    Fragmented,
    /// Jobs ahead of it in the policy's order took the capacity.
    LowerPriority,
    /// Preempted this round by a job ahead of it in the policy's order.
    Preempted,
    /// It asks for more than the whole cluster has.
    NeverFits,
    /// Its tenant's fair share is used up while others wait (DRF).
    FairShare,
    /// Its time slice ended; it resumes when its turn comes again (Gandiva), at the suspend/resume cost.
    Suspended,
    /// Preempted without waiting for a checkpoint: the work since its last one is lost.
    PreemptedWithoutCheckpoint,
    /// Starting it (or keeping its shape) would take its tenant past its maximum GPUs.
    TenantLimit,
}

/// Why a job runs where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunReason {
    /// It was running and keeps its placement.
    Continuing,
    /// Started now: its turn in the policy's order came and it fits.
    Started,
    /// Started ahead of earlier jobs that do not fit (backfill).
    Backfilled,
    /// Started or kept because its tenant has the lowest dominant share (DRF).
    FairShare,
    /// Its priority queue (Tiresias) or remaining time (SRTF) put it ahead.
    PriorityOrder,
    /// Its shape was chosen for the largest reduction in remaining time (Optimus-style allocation).
    MarginalGain,
    /// Packed onto GPUs another job uses, because both fit in memory and both progress (Gandiva).
    Packed,
    /// Its time slice came (Gandiva).
    TimeSlice,
}

/// The decision for one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobPlan {
    Run {
        placement: Placement,
        reason: RunReason,
    },
    Wait {
        reason: WaitReason,
    },
}

impl JobPlan {
    pub fn placement(&self) -> Option<&Placement> {
        match self {
            JobPlan::Run { placement, .. } => Some(placement),
            JobPlan::Wait { .. } => None,
        }
    }
}

/// A decision for every active job of the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub jobs: BTreeMap<JobId, JobPlan>,
    /// The order the policy served the jobs in, first served first; empty for policies that serve
    /// them in submission order (FIFO) or in no single order (DRF's progressive filling).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<JobId>,
}

/// A change a plan makes to what runs, with the policy's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Start {
        job: JobId,
        shape: Shape,
        reason: RunReason,
    },
    Stop {
        job: JobId,
        reason: WaitReason,
    },
    Resize {
        job: JobId,
        from: Shape,
        to: Shape,
        reason: RunReason,
    },
    Migrate {
        job: JobId,
        reason: RunReason,
    },
}

impl Plan {
    pub fn placement(&self, job: JobId) -> Option<&Placement> {
        self.jobs.get(&job).and_then(JobPlan::placement)
    }

    /// The changes from what runs in `snapshot` to this plan.
    pub fn changes(&self, snapshot: &ClusterSnapshot) -> Vec<Change> {
        let mut changes = Vec::new();
        for job in &snapshot.jobs {
            let Some(decision) = self.jobs.get(&job.id) else {
                continue;
            };
            match (&job.placement, decision) {
                (None, JobPlan::Run { placement, reason }) => changes.push(Change::Start {
                    job: job.id,
                    shape: placement.shape(),
                    reason: *reason,
                }),
                (Some(_), JobPlan::Wait { reason }) => changes.push(Change::Stop {
                    job: job.id,
                    reason: *reason,
                }),
                (Some(old), JobPlan::Run { placement, reason })
                    if old.shape() != placement.shape() =>
                {
                    changes.push(Change::Resize {
                        job: job.id,
                        from: old.shape(),
                        to: placement.shape(),
                        reason: *reason,
                    })
                }
                (Some(old), JobPlan::Run { placement, reason })
                    if !old.same_resources(placement) =>
                {
                    changes.push(Change::Migrate {
                        job: job.id,
                        reason: *reason,
                    })
                }
                _ => {}
            }
        }
        changes
    }
}
