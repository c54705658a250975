use super::*;
use crate::cluster::{NodeId, uniform_cluster};
use crate::place::Strategy;
use crate::plan::{JobPlan, Placement, Role, RunReason, TaskPlacement};
use crate::snapshot::{Observations, Range, Tenant};
use drover_core::JobId;

/// A job with `workers` 1-GPU workers on `node`'s GPUs `gpus` (none: not running) and one PS.
fn running(id: u128, node: u32, gpus: &[u16], max_workers: u32) -> JobView {
    let task = |role, index, gpus: Vec<u16>| TaskPlacement {
        role,
        index,
        node: NodeId(node),
        gpus,
        cpus: 1,
        memory_gb: 0,
        packed: false,
    };
    let mut tasks: Vec<TaskPlacement> = (0..)
        .zip(gpus)
        .map(|(i, &g)| task(Role::Worker, i, vec![g]))
        .collect();
    tasks.push(task(Role::Ps, 0, Vec::new()));
    let workers = gpus.len() as u32;
    JobView {
        id: JobId(uuid::Uuid::from_u128(id)),
        tenant: 0,
        priority: 0,
        submit_s: id as f64,
        workers: Range {
            min: 1,
            max: max_workers,
        },
        ps: Range { min: 1, max: 1 },
        preferred: Shape { ps: 1, workers },
        gpus_per_worker: 1,
        gpu_memory_gb: Some(24.0),
        cpus_per_worker: 1,
        cpus_per_ps: 1,
        memory_gb_per_task: 0,
        preemptible: true,
        consolidate: true,
        worker_unit: 1,
        worker_step: 1,
        micro_batches: 1,
        placement: Some(Placement { tasks }),
        observed: Observations::default(),
        search: None,
        image: false,
        node_selector: Default::default(),
        gpu_types: Vec::new(),
        tolerations: Vec::new(),
    }
}

/// What [`allocate`] gives job 0 of `jobs` on one 8-GPU node, owed `owed_workers` workers, with
/// `remaining` seconds left at each worker count (PS fixed at 1).
fn allocated(jobs: Vec<JobView>, owed_workers: u32, remaining: fn(u32) -> f64) -> Option<Shape> {
    let snapshot = ClusterSnapshot {
        now_s: 100.0,
        nodes: uniform_cluster(1, 8, 64, 32),
        tenants: vec![Tenant {
            name: "a".into(),
            guaranteed_gpus: 8,
            max_gpus: None,
            flavours: Vec::new(),
        }],
        jobs,
    };
    let owed = Owed {
        admit: &|_| Shape {
            ps: 1,
            workers: owed_workers,
        },
        floor: &|_| Shape { ps: 1, workers: 1 },
    };
    let targets = allocate(
        &snapshot,
        &[0],
        &owed,
        &|_, _| true,
        &|_, shape| remaining(shape.workers),
        &|_, _, _| true,
        ElasticParams::default(),
    );
    targets[0]
}

#[test]
fn a_job_given_more_than_its_fastest_shape_takes_the_shape_it_was_measured_fastest_at() {
    // Owed 8 workers, measured at 2 where it runs in a fifth of the time: 2 it is, and 6 GPUs
    // stay free (growth stops at 8, where one more worker would be slower).
    let mut job = running(0, 0, &[], 8);
    job.placement = None;
    job.observed.step_stats = vec![crate::snapshot::StepStats {
        shape: Shape { ps: 1, workers: 2 },
        shared: false,
        spread_samples: 0,
        spread_mean_step_s: 0.0,
        samples: 10,
        mean_step_s: 0.1,
        gpu: Default::default(),
    }];
    let remaining = |workers| match workers {
        2 => 100.0,
        8 => 500.0,
        _ => 1_000.0,
    };
    assert_eq!(
        allocated(vec![job], 8, remaining),
        Some(Shape { ps: 1, workers: 2 })
    );
}

#[test]
fn a_running_job_given_more_takes_the_fastest_shape_on_the_way() {
    // Running at 2 workers, owed 6; 3 workers is the fastest shape between the two.
    let job = running(0, 0, &[0, 1], 8);
    let remaining = |workers| match workers {
        3 => 100.0,
        6 => 400.0,
        _ => 1_000.0,
    };
    assert_eq!(
        allocated(vec![job], 6, remaining),
        Some(Shape { ps: 1, workers: 3 })
    );
}

#[test]
fn a_job_that_cannot_grow_keeps_its_own_gpus_rather_than_moving() {
    // Two 4-GPU nodes. Job 0 runs 2 workers on node 1's GPUs 0-1 and is to grow to 8 on one
    // node; job 1 holds node 0's GPUs 0-1, job 2 node 1's GPU 2. Neither 8 nor 4 fit on one
    // node; 2 fit best on node 0's GPUs 2-3, where the old rule moved it.
    let jobs = vec![
        running(0, 1, &[0, 1], 8),
        running(1, 0, &[0, 1], 2),
        running(2, 1, &[2], 1),
    ];
    let snapshot = ClusterSnapshot {
        now_s: 100.0,
        nodes: uniform_cluster(2, 4, 64, 32),
        tenants: vec![Tenant {
            name: "a".into(),
            guaranteed_gpus: 0,
            max_gpus: None,
            flavours: Vec::new(),
        }],
        jobs,
    };
    let current = |i: usize| snapshot.jobs[i].placement.as_ref().map(Placement::shape);
    let targets = [Some(Shape { ps: 1, workers: 8 }), current(1), current(2)];
    let (plan, _) = place_targets(&snapshot, &[0, 1, 2], &targets, |_| Strategy::Consolidate);
    for job in &snapshot.jobs {
        assert_eq!(
            plan.jobs.get(&job.id),
            Some(&JobPlan::Run {
                placement: job.placement.clone().expect("running"),
                reason: RunReason::Continuing,
            }),
        );
    }
}

#[test]
fn a_model_parallel_job_grows_by_whole_replicas() {
    // Replicas of 3 workers (stages × tensor), faster with every worker, on 8 GPUs: 3, then 6;
    // 9 would not fit and 7 or 8 are not whole replicas (a job of single workers takes all 8).
    let mut job = running(0, 0, &[], 9);
    job.placement = None;
    job.workers = Range { min: 3, max: 9 };
    job.worker_step = 3;
    let faster = |workers: u32| 1_000.0 / f64::from(workers);
    assert_eq!(
        allocated(vec![job.clone()], 3, faster),
        Some(Shape { ps: 1, workers: 6 })
    );
    job.worker_step = 1;
    assert_eq!(
        allocated(vec![job], 3, faster),
        Some(Shape { ps: 1, workers: 8 })
    );
}
