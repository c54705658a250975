//! Why a job was preempted: the jobs that took its GPUs in the same round, or those the policy put
//! ahead of it and that it makes room for, each with its tenant and priority.

use super::snapshot::Built;
use drover_scheduler::{JobPlan, Plan};
use std::collections::HashSet;

/// The jobs `plan` starts or moves onto the GPUs `victim` holds now, each with its tenant, priority and
/// the policy's rule for running it: who took a preempted job's GPUs, and why.
pub(super) fn takers(
    built: &Built<'_>,
    plan: &Plan,
    victim: &drover_scheduler::JobView,
) -> Vec<String> {
    let Some(current) = &victim.placement else {
        return Vec::new();
    };
    let gpus =
        |placement: &drover_scheduler::Placement| -> HashSet<(drover_scheduler::NodeId, u16)> {
            placement
                .tasks
                .iter()
                .flat_map(|t| t.gpus.iter().map(move |g| (t.node, *g)))
                .collect()
        };
    let held = gpus(current);
    let mut takers = Vec::new();
    for view in &built.snapshot.jobs {
        if view.id == victim.id {
            continue;
        }
        let Some(JobPlan::Run { placement, reason }) = plan.jobs.get(&view.id) else {
            continue;
        };
        let before = view.placement.as_ref().map(gpus).unwrap_or_default();
        let takes = gpus(placement)
            .iter()
            .any(|gpu| held.contains(gpu) && !before.contains(gpu));
        if takes && let Some(job) = built.jobs.get(&view.id) {
            takers.push(format!(
                "{} (tenant {}, priority {}: {})",
                job.name,
                job.tenant_name,
                job.priority,
                crate::wording::in_words(reason)
            ));
        }
    }
    takers
}

/// The waiting jobs the policy put ahead of `victim` (at most three): whom it makes room for when its
/// GPUs go to them at a later round, once its tasks have stopped.
pub(super) fn ahead(
    built: &Built<'_>,
    plan: &Plan,
    victim: &drover_scheduler::JobView,
) -> Vec<String> {
    let Some(victim_at) = plan.order.iter().position(|id| *id == victim.id) else {
        return Vec::new();
    };
    plan.order[..victim_at]
        .iter()
        .filter(|id| matches!(plan.jobs.get(id), Some(JobPlan::Wait { .. })))
        .filter(|id| {
            built
                .snapshot
                .jobs
                .iter()
                .any(|v| v.id == **id && v.placement.is_none())
        })
        .filter_map(|id| built.jobs.get(id))
        .take(3)
        .map(|job| {
            format!(
                "{} (tenant {}, priority {})",
                job.name, job.tenant_name, job.priority
            )
        })
        .collect()
}
