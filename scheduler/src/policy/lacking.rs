//! What a waiting job lacks, said from what the plan leaves. A policy that does not start a job
//! says only that jobs ahead of it in its order took the room (`LowerPriority`, or DRF's
//! `FairShare`); once the plan is made, that is sharpened for every policy alike into the resource
//! the job is short of in what the plan leaves free: its tenant's maximum GPUs (`TenantLimit`),
//! CPUs (`InsufficientCpus`) or host memory (`InsufficientMemory`) where the GPUs of its smallest
//! shape are free. A job short of GPUs keeps its reason: the jobs ahead took them. Only the reason
//! changes, never a decision.

use super::common::min_shape;
use crate::place::FreeResources;
use crate::plan::{JobPlan, Plan, WaitReason};
use crate::snapshot::ClusterSnapshot;

/// Replaces each waiting, not running job's `LowerPriority` or `FairShare` with what it lacks in
/// what `plan` leaves, where that is not GPUs.
pub fn sharpen(snapshot: &ClusterSnapshot, plan: &mut Plan) {
    let vague = |plan: &Plan, id| {
        matches!(
            plan.jobs.get(id),
            Some(JobPlan::Wait {
                reason: WaitReason::LowerPriority | WaitReason::FairShare
            })
        )
    };
    if !snapshot
        .jobs
        .iter()
        .any(|j| j.placement.is_none() && vague(plan, &j.id))
    {
        return;
    }
    let runs: Vec<_> = snapshot
        .jobs
        .iter()
        .filter_map(|job| match plan.jobs.get(&job.id) {
            Some(JobPlan::Run { placement, .. }) => Some((job, placement)),
            _ => None,
        })
        .collect();
    let mut held = vec![0u64; snapshot.tenants.len()];
    for (job, placement) in &runs {
        if let Some(held) = held.get_mut(job.tenant as usize) {
            *held += u64::from(placement.num_gpus());
        }
    }
    let free = FreeResources::with_placements(snapshot, runs);
    for job in &snapshot.jobs {
        if job.placement.is_some() || !vague(plan, &job.id) {
            continue;
        }
        let shape = min_shape(job);
        let gpus = job.gpus_at(shape);
        let max = snapshot
            .tenants
            .get(job.tenant as usize)
            .and_then(|t| t.max_gpus)
            .map_or(u64::MAX, u64::from);
        let tenant_holds = held.get(job.tenant as usize).copied().unwrap_or(0);
        let reason = if tenant_holds + u64::from(gpus) > max {
            WaitReason::TenantLimit
        } else if gpus > free.free_gpus() {
            continue;
        } else if job.cpus_at(shape) > free.free_cpus() {
            WaitReason::InsufficientCpus
        } else if job.memory_gb_at(shape) > free.free_memory_gb() {
            WaitReason::InsufficientMemory
        } else {
            continue;
        };
        plan.jobs.insert(job.id, JobPlan::Wait { reason });
    }
}
