//! Builders shared by the scheduler's tests.

use drover_core::JobId;
use drover_scheduler::cluster::uniform_cluster;
use drover_scheduler::snapshot::{ClusterSnapshot, JobView, Observations, Range, Shape, Tenant};
use drover_scheduler::{Oracle, Plan};
use std::collections::BTreeMap;

pub fn job(id: u128, gpus: u32, submit_s: f64) -> JobView {
    JobView {
        id: JobId(uuid::Uuid::from_u128(id)),
        tenant: 0,
        priority: 0,
        submit_s,
        workers: Range {
            min: gpus,
            max: gpus,
        },
        ps: Range { min: 1, max: 1 },
        preferred: Shape {
            ps: 1,
            workers: gpus,
        },
        gpus_per_worker: 1,
        gpu_memory_gb: Some(8.0),
        cpus_per_worker: 1,
        cpus_per_ps: 1,
        memory_gb_per_task: 0,
        preemptible: true,
        consolidate: false,
        worker_unit: 1,
        worker_step: 1,
        micro_batches: 1,
        placement: None,
        observed: Observations::default(),
        search: None,
        image: false,
        node_selector: Default::default(),
        gpu_types: Vec::new(),
        tolerations: Vec::new(),
    }
}

pub fn snapshot(nodes: u32, gpus_per_node: u32, jobs: Vec<JobView>) -> ClusterSnapshot {
    ClusterSnapshot {
        now_s: 1000.0,
        nodes: uniform_cluster(nodes, gpus_per_node, 64, 32),
        tenants: vec![
            Tenant {
                name: "a".into(),
                guaranteed_gpus: 0,
                max_gpus: None,
                flavours: Vec::new(),
            },
            Tenant {
                name: "b".into(),
                guaranteed_gpus: 0,
                max_gpus: None,
                flavours: Vec::new(),
            },
        ],
        jobs,
    }
}

/// Applies a plan's placements to the snapshot, as the server or simulator would.
pub fn apply(snapshot: &mut ClusterSnapshot, plan: &Plan) {
    for job in &mut snapshot.jobs {
        job.placement = plan.placement(job.id).cloned();
    }
}

/// An oracle with fixed remaining times per job (seconds), for SRTF.
#[derive(Debug, Clone, Default)]
pub struct FixedOracle(pub BTreeMap<JobId, f64>);

impl Oracle for FixedOracle {
    fn remaining_s(&self, job: JobId, _shape: Shape) -> f64 {
        self.0.get(&job).copied().unwrap_or(1e9)
    }
}

pub fn id(n: u128) -> JobId {
    JobId(uuid::Uuid::from_u128(n))
}
