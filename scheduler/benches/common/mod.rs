//! The synthetic cluster both benchmarks time: `running` jobs with history placed by a FIFO round,
//! then `queued` jobs waiting, on `gpus` GPUs in nodes of eight, ten tenants.

use drover_core::JobId;
use drover_scheduler::cluster::uniform_cluster;
use drover_scheduler::snapshot::{
    ClusterSnapshot, JobView, Observations, Range, Shape, StepStats, Tenant,
};
use drover_scheduler::{Plan, build_policy};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn job(i: usize, gpus: u32, tenant: u32, rng: &mut ChaCha8Rng) -> JobView {
    JobView {
        id: JobId(uuid::Uuid::from_u128(i as u128)),
        tenant,
        priority: 0,
        submit_s: i as f64,
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
        gpu_memory_gb: Some(16.0),
        cpus_per_worker: 2,
        cpus_per_ps: 2,
        memory_gb_per_task: 0,
        preemptible: true,
        consolidate: rng.random_bool(0.3),
        worker_unit: 1,
        worker_step: 1,
        micro_batches: 1,
        placement: None,
        observed: Observations {
            attained_gpu_s: rng.random_range(0.0..200_000.0),
            executed_s: rng.random_range(0.0..50_000.0),
            ..Observations::default()
        },
        search: None,
        image: false,
        node_selector: Default::default(),
        gpu_types: Vec::new(),
        tolerations: Vec::new(),
    }
}

/// Jobs' GPU counts, drawn uniformly: mostly small, a few of 4 and 8.
pub const SIZES: &[u32] = &[1, 1, 1, 1, 2, 2, 4, 8];

/// The running jobs' GPU counts are drawn from `running_sizes` (larger ones fill the cluster), the
/// queued ones' from [`SIZES`].
pub fn build_with(
    gpus: u32,
    running: usize,
    queued: usize,
    running_sizes: &[u32],
) -> ClusterSnapshot {
    build_sized(gpus, running, queued, running_sizes, SIZES)
}

/// [`build_with`], the queued jobs' GPU counts drawn from `queued_sizes`.
pub fn build_sized(
    gpus: u32,
    running: usize,
    queued: usize,
    running_sizes: &[u32],
    queued_sizes: &[u32],
) -> ClusterSnapshot {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let sizes = queued_sizes;
    let mut snapshot = ClusterSnapshot {
        now_s: 1e6,
        nodes: uniform_cluster(gpus / 8, 8, 96, 32),
        tenants: (0..10)
            .map(|t| Tenant {
                name: format!("t{t}"),
                guaranteed_gpus: gpus / 10,
                max_gpus: None,
                flavours: Vec::new(),
            })
            .collect(),
        jobs: (0..running)
            .map(|i| {
                job(
                    i,
                    running_sizes[rng.random_range(0..running_sizes.len())],
                    (i % 10) as u32,
                    &mut rng,
                )
            })
            .collect(),
    };
    // Running jobs have history: a decaying loss and step times at three shapes.
    for job in &mut snapshot.jobs {
        let scale = rng.random_range(0.05..0.5);
        job.observed.loss_samples = std::sync::Arc::new(
            (0..64u64)
                .map(|k| (k * 50, 2.0 / (1.0 + 0.01 * (k * 50) as f64) + 0.3))
                .collect(),
        );
        job.observed.steps_done = 3200;
        job.observed.step_stats = [(1, 1), (1, 2), (2, 2)]
            .into_iter()
            .map(|(ps, workers)| {
                let shape = Shape { ps, workers };
                StepStats {
                    shape,
                    shared: false,
                    spread_samples: 0,
                    spread_mean_step_s: 0.0,
                    samples: 20,
                    mean_step_s: scale
                        * (0.7 / f64::from(workers)
                            + 0.1
                            + 0.2 * f64::from(workers) / f64::from(ps)),
                    gpu: Default::default(),
                }
            })
            .collect();
    }
    // Place the running jobs with a FIFO round.
    let plan = build_policy("fifo-backfill", None)
        .expect("fifo")
        .schedule(&snapshot, &Plan::default());
    for job in &mut snapshot.jobs {
        job.placement = plan.placement(job.id).cloned();
    }
    let placed = snapshot
        .jobs
        .iter()
        .filter(|j| j.placement.is_some())
        .count();
    assert_eq!(placed, running, "the running jobs must fit");
    for i in running..running + queued {
        let j = job(
            i,
            sizes[rng.random_range(0..sizes.len())],
            (i % 10) as u32,
            &mut rng,
        );
        snapshot.jobs.push(j);
    }
    snapshot
}

pub fn percentile(mut values: Vec<f64>, p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * p).round() as usize]
}
