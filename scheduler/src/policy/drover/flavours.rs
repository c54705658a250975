//! `drover` and tenants' guarantees per GPU model: which of a tenant's jobs within its guarantee are
//! owed a model it is guaranteed (in the round's order, as many GPUs as that model's guarantee
//! holds), placing those on that model first, and taking the model's GPUs back from jobs that borrow
//! them when an owed job did not get it (Kueue's reclaim within a cohort). What a tenant may hold of
//! a model at most, and what it does not lend, placement keeps for every policy
//! ([`crate::flavours`]); a cluster without quotas per model runs none of this.

use crate::cluster::{GpuModelTag, model_is};
use crate::place::FreeResources;
use crate::plan::{JobPlan, Plan};
use crate::snapshot::{ClusterSnapshot, JobView, Shape};

/// A job's claim on a model its tenant is guaranteed.
#[derive(Debug, Clone)]
pub(super) struct Owed {
    /// The models of the flavour it is owed.
    pub owed: Vec<GpuModelTag>,
    /// The models to try: those, then the rest of the cluster's.
    pub try_in_order: Vec<GpuModelTag>,
}

/// Per job (by index): the model it is owed, `None` for a job owed none.
pub(super) type OwedModels = Vec<Option<Owed>>;

/// The GPU models of the cluster's nodes that a flavour named `name` covers.
fn tags_of(snapshot: &ClusterSnapshot, name: &str) -> Vec<GpuModelTag> {
    let mut tags: Vec<GpuModelTag> = Vec::new();
    for node in &snapshot.nodes {
        if let Some(gpu) = node.gpus.first()
            && model_is(&gpu.model, name.trim())
        {
            let tag = node.gpu_tag();
            if !tags.contains(&tag) {
                tags.push(tag);
            }
        }
    }
    tags
}

/// Whether `job` accepts GPUs of the models `tags` stand for (its `gpu_types`, when it names any).
fn accepts(snapshot: &ClusterSnapshot, job: &JobView, tags: &[GpuModelTag]) -> bool {
    job.gpu_types.is_empty()
        || snapshot.nodes.iter().any(|node| {
            tags.contains(&node.gpu_tag())
                && node
                    .gpus
                    .first()
                    .is_some_and(|g| job.gpu_types.iter().any(|t| model_is(&g.model, t.trim())))
        })
}

/// The models each job within its tenant's guarantee (`within`) is owed: going through `order`, a
/// job takes the first model of its tenant's flavours whose guarantee still holds its GPUs at the
/// shape `targets` gives it (or asked for, without one) and that it accepts. `None` when no tenant
/// is guaranteed GPUs of a model.
pub(super) fn owed_models(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    within: &[bool],
    targets: &[Option<Shape>],
    shape_asked: impl Fn(&JobView) -> Shape,
) -> Option<OwedModels> {
    if snapshot
        .tenants
        .iter()
        .all(|t| t.flavours.iter().all(|f| f.guaranteed_gpus == 0))
    {
        return None;
    }
    let all_tags = crate::cluster::GpuModels::of(&snapshot.nodes).tags;
    // Per (tenant, flavour index): the models it covers and its guarantee left.
    let mut left: Vec<Vec<(Vec<GpuModelTag>, u32)>> = snapshot
        .tenants
        .iter()
        .map(|t| {
            t.flavours
                .iter()
                .map(|f| (tags_of(snapshot, &f.gpu_model), f.guaranteed_gpus))
                .collect()
        })
        .collect();
    let mut owed: OwedModels = vec![None; snapshot.jobs.len()];
    for &i in order {
        if !within[i] {
            continue;
        }
        let job = &snapshot.jobs[i];
        let gpus = job.gpus_at(targets[i].unwrap_or_else(|| shape_asked(job)));
        let Some(flavours) = left.get_mut(job.tenant as usize) else {
            continue;
        };
        if gpus == 0 {
            continue;
        }
        // A running job counts against the guarantee of the model it runs on (and keeps its place
        // there, or elsewhere, as the round decides); one waiting, against the first that holds it.
        let on = job.placement.as_ref().and_then(|p| gpu_tag_of(snapshot, p));
        let Some((tags, guarantee)) = flavours.iter_mut().find(|(tags, guarantee)| {
            !tags.is_empty()
                && gpus <= *guarantee
                && on.is_none_or(|tag| tags.contains(&tag))
                && accepts(snapshot, job, tags)
        }) else {
            continue;
        };
        *guarantee -= gpus;
        let mut try_in_order = tags.clone();
        try_in_order.extend(all_tags.iter().filter(|t| !tags.contains(t)));
        owed[i] = Some(Owed {
            owed: tags.clone(),
            try_in_order,
        });
    }
    Some(owed)
}

/// The GPU model of a placement's first GPU task's node.
fn gpu_tag_of(
    snapshot: &ClusterSnapshot,
    placement: &crate::placement::Placement,
) -> Option<GpuModelTag> {
    placement
        .tasks
        .iter()
        .find(|t| !t.gpus.is_empty())
        .and_then(|t| snapshot.nodes.get(t.node.0 as usize))
        .map(|n| n.gpu_tag())
}

/// Jobs owed a model (`owed`) that the plan left waiting while jobs borrowing beyond their tenant's
/// guarantee hold GPUs of that model they could run on: those borrowers, the last in `order` first,
/// lose their targets, as many as the owed job's GPUs need beyond what is free there already, and
/// only when they hold that many (else preempting them would free nothing it can use). Jobs within
/// their own tenants' guarantee keep their GPUs, whatever the model. Returns whether any did (placement then
/// runs again, the owed jobs first to the freed GPUs). An owed job that found room on another model
/// keeps it, as Kueue's default flavour fungibility tries the next flavour before preempting.
pub(super) fn reclaim(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    within: &[bool],
    owed: &OwedModels,
    (plan, free): (&Plan, &FreeResources),
    targets: &mut [Option<Shape>],
) -> bool {
    let mut freed = false;
    let mut evicted = vec![false; snapshot.jobs.len()];
    for &i in order {
        let (
            Some(Owed {
                owed: owed_tags, ..
            }),
            Some(target),
        ) = (&owed[i], targets[i])
        else {
            continue;
        };
        let job = &snapshot.jobs[i];
        if matches!(plan.jobs.get(&job.id), Some(JobPlan::Run { .. })) {
            continue;
        }
        // Nodes of the owed model it may run on.
        let usable = |node: usize| {
            snapshot.nodes.get(node).is_some_and(|n| {
                n.schedulable && owed_tags.contains(&n.gpu_tag()) && job.may_run_on(n)
            })
        };
        // What is free there already counts; borrowers give back only the rest.
        let free_there: u32 = (0..snapshot.nodes.len())
            .filter(|&n| usable(n))
            .map(|n| free.free_gpus_on(crate::NodeId(n as u32)))
            .sum();
        let mut need = job.gpus_at(target).saturating_sub(free_there);
        if need == 0 {
            continue;
        }
        let mut victims = Vec::new();
        for &j in order.iter().rev() {
            if need == 0 {
                break;
            }
            let other = &snapshot.jobs[j];
            if within[j] || evicted[j] || !other.preemptible || targets[j].is_none() {
                continue;
            }
            let Some(placement) = &other.placement else {
                continue;
            };
            // Its own GPUs (not shared by packing) of the owed model, where the owed job may run.
            let gives: u32 = placement
                .tasks
                .iter()
                .filter(|t| !t.packed && usable(t.node.0 as usize))
                .map(|t| t.gpus.len() as u32)
                .sum();
            if gives == 0 {
                continue;
            }
            victims.push(j);
            need = need.saturating_sub(gives);
        }
        // Only when the borrowers hold enough of it: else preempting them frees nothing it can use.
        if need > 0 {
            continue;
        }
        for j in victims {
            evicted[j] = true;
            targets[j] = None;
            freed = true;
        }
    }
    freed
}
