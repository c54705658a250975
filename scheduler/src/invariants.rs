//! Checks every plan must pass, whatever the policy: each active job decided once; gangs whole and
//! within their ranges (a fixed-size job only at its size), each tensor-parallel group on one node; no CPU over-committed; no GPU shared without
//! an explicit packing decision, by more than two jobs, or beyond its memory; no tenant past its maximum
//! GPUs.

use crate::plan::{JobPlan, Plan, Role};
use crate::snapshot::ClusterSnapshot;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plan invariant violated: {0}")]
pub struct Violation(pub String);

fn violation(message: String) -> Result<(), Violation> {
    Err(Violation(message))
}

/// (job index, packed, GPU memory the job needs).
type GpuUser = (usize, bool, Option<f64>);

/// The whole check: every active job decided, and [`check_placements`].
pub fn check(snapshot: &ClusterSnapshot, plan: &Plan) -> Result<(), Violation> {
    if plan.jobs.len() != snapshot.jobs.len() {
        return violation(format!(
            "{} decisions for {} jobs",
            plan.jobs.len(),
            snapshot.jobs.len()
        ));
    }
    if let Some(job) = snapshot
        .jobs
        .iter()
        .find(|job| !plan.jobs.contains_key(&job.id))
    {
        return violation(format!("job {} has no decision", job.id));
    }
    check_placements(snapshot, plan)
}

/// No tenant holds more GPUs of a model than its quota of that model allows: of a plan as a policy
/// hands it over (held to the tenants' limits, [`crate::policy::limits`]); a policy at work may
/// still keep running jobs a lowered quota puts past it.
pub fn check_flavour_maxima(snapshot: &ClusterSnapshot, plan: &Plan) -> Result<(), Violation> {
    let Some(map) = crate::flavours::FlavourMap::of(snapshot) else {
        return Ok(());
    };
    let mut held: BTreeMap<(u32, u16), u64> = BTreeMap::new();
    for job in &snapshot.jobs {
        if let Some(JobPlan::Run { placement, .. }) = plan.jobs.get(&job.id) {
            for (f, gpus) in map.gpus_by_flavour(placement) {
                *held.entry((job.tenant, f)).or_default() += u64::from(gpus);
            }
        }
    }
    for ((tenant, f), used) in held {
        let max = map.max_of(tenant, f);
        if used > u64::from(max) {
            return violation(format!(
                "tenant {} holds {used} GPUs of model {}, its maximum is {max}",
                snapshot.tenants[tenant as usize].name,
                map.name(f)
            ));
        }
    }
    Ok(())
}

/// What must hold of a plan at every phase of a policy, finished or not: gangs within their ranges, no
/// CPU or host memory over-committed, no GPU shared without a packing decision or beyond its memory.
pub fn check_placements(snapshot: &ClusterSnapshot, plan: &Plan) -> Result<(), Violation> {
    let mut cpus_used = vec![0u64; snapshot.nodes.len()];
    let mut memory_used = vec![0u64; snapshot.nodes.len()];
    let mut tenant_gpus: BTreeMap<u32, u64> = BTreeMap::new();
    // (node, gpu) -> [(job index, packed, memory)]
    let mut gpu_users: BTreeMap<(u32, u16), Vec<GpuUser>> = BTreeMap::new();
    for (i, job) in snapshot.jobs.iter().enumerate() {
        let Some(decision) = plan.jobs.get(&job.id) else {
            continue;
        };
        let JobPlan::Run { placement, .. } = decision else {
            continue;
        };
        let shape = placement.shape();
        if !job.runs_at_workers(shape.workers) || !job.ps.contains(shape.ps) {
            return violation(format!(
                "job {} placed at {shape:?}, outside its ranges (or not whole replicas of {})",
                job.id, job.worker_step
            ));
        }
        *tenant_gpus.entry(job.tenant).or_default() += u64::from(placement.num_gpus());
        if job.worker_unit > 1 {
            // Each tensor-parallel group (workers `k·unit … (k+1)·unit − 1`) on one node.
            let mut group_node: BTreeMap<u32, u32> = BTreeMap::new();
            for task in placement.tasks.iter().filter(|t| t.role == Role::Worker) {
                let node = *group_node
                    .entry(task.index / job.worker_unit)
                    .or_insert(task.node.0);
                if node != task.node.0 {
                    return violation(format!(
                        "job {}'s worker {} is on node {}, apart from its tensor-parallel group on node {node}",
                        job.id, task.index, task.node.0
                    ));
                }
            }
        }
        let mut seen_indices = std::collections::BTreeSet::new();
        for task in &placement.tasks {
            if !seen_indices.insert((task.role, task.index)) {
                return violation(format!(
                    "job {} has two {:?} tasks with index {}",
                    job.id, task.role, task.index
                ));
            }
            let Some(node) = snapshot.nodes.get(task.node.0 as usize) else {
                return violation(format!("job {} uses unknown node {}", job.id, task.node.0));
            };
            let expected_gpus = if task.role == Role::Worker {
                job.gpus_per_worker
            } else {
                0
            };
            if task.gpus.len() as u32 != expected_gpus {
                return violation(format!(
                    "job {} task holds {} GPUs, expected {expected_gpus}",
                    job.id,
                    task.gpus.len()
                ));
            }
            cpus_used[task.node.0 as usize] += u64::from(task.cpus);
            memory_used[task.node.0 as usize] += u64::from(task.memory_gb);
            for &gpu in &task.gpus {
                if usize::from(gpu) >= node.gpus.len() {
                    return violation(format!(
                        "job {} uses GPU {gpu} of node {} which has {}",
                        job.id,
                        node.name,
                        node.gpus.len()
                    ));
                }
                let users = gpu_users.entry((task.node.0, gpu)).or_default();
                if users.iter().any(|(j, _, _)| *j == i) {
                    return violation(format!(
                        "job {} uses GPU {gpu} of node {} twice",
                        job.id, node.name
                    ));
                }
                users.push((i, task.packed, job.gpu_memory_gb));
            }
        }
    }
    for (tenant, used) in tenant_gpus {
        if let Some(max) = snapshot
            .tenants
            .get(tenant as usize)
            .and_then(|t| t.max_gpus)
            && used > u64::from(max)
        {
            return violation(format!(
                "tenant {} holds {used} GPUs, its maximum is {max}",
                snapshot.tenants[tenant as usize].name
            ));
        }
    }
    for (node, used) in snapshot.nodes.iter().zip(&cpus_used) {
        if *used > u64::from(node.cpus) {
            return violation(format!(
                "node {} has {used} CPUs committed of {}",
                node.name, node.cpus
            ));
        }
    }
    for (node, used) in snapshot.nodes.iter().zip(&memory_used) {
        if *used > u64::from(node.memory_gb) {
            return violation(format!(
                "node {} has {used} GB of memory committed of {}",
                node.name, node.memory_gb
            ));
        }
    }
    for ((node, gpu), users) in gpu_users {
        if users.len() < 2 {
            continue;
        }
        let node = &snapshot.nodes[node as usize];
        if users.len() > 2 || users.iter().any(|(_, packed, _)| !packed) {
            return violation(format!(
                "GPU {gpu} of node {} shared by {} jobs without a packing decision",
                node.name,
                users.len()
            ));
        }
        let capacity = node.gpus[usize::from(gpu)].memory_gb;
        let demand: f64 = users
            .iter()
            .map(|(_, _, memory)| memory.unwrap_or(capacity))
            .sum();
        if demand > capacity + 1e-9 {
            return violation(format!(
                "GPU {gpu} of node {} holds {demand} GB of {capacity}",
                node.name
            ));
        }
    }
    Ok(())
}
