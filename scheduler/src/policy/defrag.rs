//! Making room on one node for an admitted job that must sit on one node.
//!
//! The elastic allocation counts GPUs cluster-wide, so it can admit a consolidated job (a high-skew
//! model whose workers should share a node) while every node's free GPUs are too few: the job then
//! waits round after round with [`WaitReason::Fragmented`], though the GPUs it was given exist. Jobs
//! grown beyond their smallest shape, later in the order, hold GPUs on the nodes; shrinking the ones on
//! the node where the fewest must go frees that node for it, as a grow-shrink policy gives GPUs back
//! when others wait.

use super::elastic::min_shape;
use crate::cluster::NodeId;
use crate::place::FreeResources;
use crate::plan::{JobPlan, Plan, WaitReason};
use crate::snapshot::{ClusterSnapshot, Shape};

/// Shrinks the targets of jobs later in `order` so that each admitted, consolidated job `plan` left
/// waiting as fragmented finds one node with its smallest shape's GPUs once placement is re-run.
/// Returns whether any target changed. Only jobs running at their target, above their smallest shape,
/// give workers back, each down to no less than its smallest; one node serves one waiting job.
pub fn make_room(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    targets: &mut [Option<Shape>],
    plan: &Plan,
    free: &FreeResources,
) -> bool {
    let mut rank = vec![usize::MAX; snapshot.jobs.len()];
    for (position, &i) in order.iter().enumerate() {
        rank[i] = position;
    }
    let max_node_gpus = snapshot
        .nodes
        .iter()
        .map(|n| n.num_gpus())
        .max()
        .unwrap_or(0);
    let mut claimed: Vec<u32> = Vec::new();
    let mut changed = false;
    for &s in order {
        let job = &snapshot.jobs[s];
        let stuck = job.consolidate
            && job.placement.is_none()
            && targets[s].is_some()
            && matches!(
                plan.jobs.get(&job.id),
                Some(JobPlan::Wait {
                    reason: WaitReason::Fragmented
                })
            );
        let need = job.gpus_at(min_shape(job));
        if !stuck || need == 0 || need > max_node_gpus {
            continue;
        }
        // Per node: its free GPUs, and the (job, workers there) that could give workers back.
        let mut best: Option<Room> = None;
        for node in snapshot.nodes.iter().filter(|n| n.schedulable) {
            if node.num_gpus() < need || claimed.contains(&node.id.0) {
                continue;
            }
            let free_here = free.free_gpus_on(node.id);
            let mut givers: Vec<(usize, u32)> = Vec::new();
            let mut reclaimable = 0;
            for &j in order.iter().rev() {
                if rank[j] <= rank[s] {
                    break;
                }
                if let Some(workers) = shrinkable_on(snapshot, targets, j, node.id) {
                    reclaimable += workers * snapshot.jobs[j].gpus_per_worker;
                    givers.push((j, workers));
                }
            }
            if free_here >= need || free_here + reclaimable < need {
                continue;
            }
            let short = need - free_here;
            if best.as_ref().is_none_or(|b| short < b.short) {
                best = Some(Room {
                    node: node.id.0,
                    short,
                    givers,
                });
            }
        }
        let Some(Room {
            node,
            mut short,
            givers,
        }) = best
        else {
            continue;
        };
        claimed.push(node);
        // The latest in the order give back first.
        for (j, workers) in givers {
            if short == 0 {
                break;
            }
            let per = snapshot.jobs[j].gpus_per_worker.max(1);
            let give = workers.min(short.div_ceil(per));
            if let Some(target) = targets[j].as_mut() {
                target.workers -= give;
                short = short.saturating_sub(give * per);
                changed = true;
            }
        }
    }
    changed
}

/// A node that can be freed for a waiting job: the GPUs it is short of, and the (job, workers there)
/// that could give workers back, latest in the order first.
struct Room {
    node: u32,
    short: u32,
    givers: Vec<(usize, u32)>,
}

/// Workers job `j` could give back on `node`: it runs there at its target, above its smallest shape.
fn shrinkable_on(
    snapshot: &ClusterSnapshot,
    targets: &[Option<Shape>],
    j: usize,
    node: NodeId,
) -> Option<u32> {
    let job = &snapshot.jobs[j];
    let placement = job.placement.as_ref()?;
    let target = targets[j]?;
    if placement.shape() != target || !job.preemptible || job.gpus_per_worker == 0 {
        return None;
    }
    let here = placement
        .tasks
        .iter()
        .filter(|t| t.node == node && !t.gpus.is_empty() && !t.packed)
        .count() as u32;
    let spare = target.workers.saturating_sub(job.workers.min);
    Some(here.min(spare)).filter(|&w| w > 0)
}
