//! What a policy decides: for every active job, where its tasks run or why it waits.

use crate::shape::Shape;
use crate::snapshot::ClusterSnapshot;
use drover_core::JobId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use crate::placement::{Placement, Role, TaskPlacement};

/// Why a job waits. Every waiting job carries one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// Strict FIFO: an earlier job at the head of the queue does not fit yet.
    BehindHeadOfLine,
    /// Not enough free resources in the cluster for its shape.
    InsufficientResources,
    /// Not enough free GPUs in the cluster for its smallest shape.
    InsufficientGpus,
    /// Not enough free CPUs (for its workers, or its PS shards) in the cluster.
    InsufficientCpus,
    /// Not enough free host memory (`memory_gb_per_task` for each task) in the cluster.
    InsufficientMemory,
    /// Enough in total, but not on few enough nodes (consolidation) or not in one piece.
    Fragmented,
    /// Jobs ahead of it in the policy's order took the capacity.
    LowerPriority,
    /// Preempted this round by a job ahead of it in the policy's order.
    Preempted,
    /// No node could hold one of its tasks (a worker's GPUs or CPUs, a PS shard's CPUs), or its smallest
    /// shape asks for more GPUs than the whole cluster has.
    NeverFits,
    /// Its tenant's fair share is used up while others wait (DRF).
    FairShare,
    /// Its time slice ended; it resumes when its turn comes again (Gandiva), at the suspend/resume cost.
    Suspended,
    /// Preempted without waiting for a checkpoint: the work since its last one is lost.
    PreemptedWithoutCheckpoint,
    /// Starting it (or keeping its shape) would take its tenant past its maximum GPUs.
    TenantLimit,
    /// It may run only on some nodes (an image, a node selector, GPU types), and those have too
    /// little free for it (other nodes may have room).
    EligibleNodesBusy,
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
    /// Moved, at its shape, to GPUs free on other nodes, so that a job that needs one node's GPUs
    /// runs on the node it left (compaction).
    Compaction,
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
