//! Gandiva-style packing, shared by `drover` and `gandiva`: a waiting single-GPU job shares the GPU
//! of a running single-GPU job when both fit in its memory. Both are marked packed (the invariants
//! require every shared GPU to come from such a decision), and a tenant's maximum still holds.

use super::common::min_shape;
use crate::place::FreeResources;
use crate::plan::{JobPlan, Placement, Plan, Role, RunReason, TaskPlacement, WaitReason};
use crate::snapshot::ClusterSnapshot;
use drover_core::JobId;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The worker of a single-GPU job.
fn single_gpu_worker(placement: &Placement) -> Option<&TaskPlacement> {
    let mut workers = placement.tasks.iter().filter(|t| t.role == Role::Worker);
    let worker = workers.next()?;
    (workers.next().is_none() && worker.gpus.len() == 1).then_some(worker)
}

/// How many jobs the plan runs on each GPU, by node and GPU position.
struct GpuUsers(Vec<Vec<u32>>);

impl GpuUsers {
    fn of(snapshot: &ClusterSnapshot, plan: &Plan) -> Self {
        let mut users: Vec<Vec<u32>> = snapshot
            .nodes
            .iter()
            .map(|n| vec![0; n.gpus.len()])
            .collect();
        for decision in plan.jobs.values() {
            let JobPlan::Run { placement, .. } = decision else {
                continue;
            };
            for task in &placement.tasks {
                let node = task.node.0 as usize;
                if users.len() <= node {
                    users.resize_with(node + 1, Vec::new);
                }
                let gpus = &mut users[node];
                for &gpu in &task.gpus {
                    let gpu = usize::from(gpu);
                    if gpus.len() <= gpu {
                        gpus.resize(gpu + 1, 0);
                    }
                    gpus[gpu] += 1;
                }
            }
        }
        GpuUsers(users)
    }

    fn get(&self, node: crate::NodeId, gpu: u16) -> u32 {
        self.0
            .get(node.0 as usize)
            .and_then(|gpus| gpus.get(usize::from(gpu)))
            .copied()
            .unwrap_or(0)
    }
}

/// Packs waiting single-GPU jobs, in order, next to running single-GPU jobs whose GPU has memory for
/// both; both are marked packed (the invariants require it). Jobs in `exclude` are neither packed nor
/// hosts.
pub(super) fn pack(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    plan: &mut Plan,
    free: &mut FreeResources,
    exclude: &BTreeSet<JobId>,
) {
    let positions: HashMap<JobId, usize> = snapshot
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.id, i))
        .collect();
    // Most rounds exclude no job: no lookup then.
    let excluded = |id: &JobId| !exclude.is_empty() && exclude.contains(id);
    // (node, gpu) -> (job, its GPU memory need), for GPUs used by exactly one single-GPU job.
    let users = GpuUsers::of(snapshot, plan);
    // GPUs each tenant holds in the plan, so packing never takes a tenant past its maximum.
    let mut tenant_gpus: BTreeMap<u32, u32> = BTreeMap::new();
    for (id, decision) in &plan.jobs {
        if let (JobPlan::Run { placement, .. }, Some(&i)) = (decision, positions.get(id)) {
            *tenant_gpus.entry(snapshot.jobs[i].tenant).or_default() += placement.num_gpus();
        }
    }
    let tenant_max = |tenant: u32| {
        snapshot
            .tenants
            .get(tenant as usize)
            .and_then(|t| t.max_gpus)
            .unwrap_or(u32::MAX)
    };
    let mut hosts: Vec<(crate::NodeId, u16, JobId, f64)> = Vec::new();
    for (id, decision) in &plan.jobs {
        if excluded(id) {
            continue;
        }
        let JobPlan::Run { placement, .. } = decision else {
            continue;
        };
        let Some(worker) = single_gpu_worker(placement) else {
            continue;
        };
        if users.get(worker.node, worker.gpus[0]) != 1 {
            continue;
        }
        let Some(memory) = positions
            .get(id)
            .and_then(|&i| snapshot.jobs[i].gpu_memory_gb)
        else {
            continue;
        };
        hosts.push((worker.node, worker.gpus[0], *id, memory));
    }
    // Packed jobs the allocation left out keep their place while their partner still runs there:
    // re-packing them elsewhere every round would only pay restarts.
    for &i in order {
        let job = &snapshot.jobs[i];
        if excluded(&job.id) {
            continue;
        }
        let Some(current) = &job.placement else {
            continue;
        };
        let Some(worker) = current
            .tasks
            .iter()
            .find(|t| t.role == Role::Worker && t.packed)
        else {
            continue;
        };
        if !matches!(plan.jobs.get(&job.id), Some(JobPlan::Wait { .. })) {
            continue;
        }
        let memory = job.gpu_memory_gb.unwrap_or(f64::INFINITY);
        let Some(slot) = hosts.iter().position(|&(node, gpu, _, host_memory)| {
            let capacity = snapshot.nodes[node.0 as usize]
                .gpus
                .get(usize::from(gpu))
                .map_or(0.0, |g| g.memory_gb);
            node == worker.node
                && Some(&gpu) == worker.gpus.first()
                && host_memory + memory <= capacity
        }) else {
            continue;
        };
        let cpus: u32 = current.tasks.iter().map(|t| t.cpus).sum();
        if free.free_cpus_on(worker.node) < cpus
            || current.tasks.iter().any(|t| t.node != worker.node)
        {
            continue;
        }
        let (_, _, host, _) = hosts.swap_remove(slot);
        free.take(job, current);
        plan.jobs.insert(
            job.id,
            JobPlan::Run {
                placement: current.clone(),
                reason: RunReason::Packed,
            },
        );
        mark_packed(plan, host);
    }
    for &i in order {
        if hosts.is_empty() {
            break;
        }
        let job = &snapshot.jobs[i];
        if excluded(&job.id) {
            continue;
        }
        let waiting = matches!(plan.jobs.get(&job.id), Some(JobPlan::Wait { reason }) if *reason != WaitReason::NeverFits);
        let shape = min_shape(job);
        let Some(memory) = job.gpu_memory_gb else {
            continue;
        };
        if !waiting || shape.workers != 1 || job.gpus_per_worker != 1 {
            continue;
        }
        if tenant_gpus.get(&job.tenant).copied().unwrap_or(0) + 1 > tenant_max(job.tenant) {
            continue;
        }
        let cpus = job.cpus_per_worker + shape.ps * job.cpus_per_ps;
        let Some(slot) = hosts.iter().position(|&(node, gpu, _, host_memory)| {
            let capacity = snapshot.nodes[node.0 as usize]
                .gpus
                .get(usize::from(gpu))
                .map_or(0.0, |g| g.memory_gb);
            host_memory + memory <= capacity
                && job.may_run_on(&snapshot.nodes[node.0 as usize])
                && free.within_model_maxima(job, node, 1)
                && free.free_cpus_on(node) >= cpus
                && free.free_memory_on(node) >= (1 + shape.ps) * job.memory_gb_per_task
        }) else {
            continue;
        };
        let (node, gpu, host, _) = hosts.swap_remove(slot);
        let mut tasks = vec![TaskPlacement {
            role: Role::Worker,
            index: 0,
            node,
            gpus: vec![gpu],
            cpus: job.cpus_per_worker,
            memory_gb: job.memory_gb_per_task,
            packed: true,
        }];
        tasks.extend((0..shape.ps).map(|p| TaskPlacement {
            role: Role::Ps,
            index: p,
            node,
            gpus: Vec::new(),
            cpus: job.cpus_per_ps,
            memory_gb: job.memory_gb_per_task,
            packed: false,
        }));
        let placement = Placement { tasks };
        free.take(job, &placement);
        plan.jobs.insert(
            job.id,
            JobPlan::Run {
                placement,
                reason: RunReason::Packed,
            },
        );
        mark_packed(plan, host);
        *tenant_gpus.entry(job.tenant).or_default() += 1;
    }
    // A job whose partner left runs alone again: clear its packing mark.
    let users = GpuUsers::of(snapshot, plan);
    for decision in plan.jobs.values_mut() {
        let JobPlan::Run { placement, .. } = decision else {
            continue;
        };
        for task in &mut placement.tasks {
            if task.packed && task.gpus.iter().all(|&g| users.get(task.node, g) == 1) {
                task.packed = false;
            }
        }
    }
}

fn mark_packed(plan: &mut Plan, host: JobId) {
    if let Some(JobPlan::Run { placement, .. }) = plan.jobs.get_mut(&host) {
        for task in placement
            .tasks
            .iter_mut()
            .filter(|t| t.role == Role::Worker)
        {
            task.packed = true;
        }
    }
}
