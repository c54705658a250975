//! Turning a trace into simulated jobs: each job gets a measured model (seeded draw), a speed surface
//! stretched so the size its user chose sits at the model's peak, a recorded shape, a step count that
//! reproduces its recorded duration, an elastic range (70% of jobs) and a loss curve.

use super::speed::MeasuredModel;
use super::trace::TraceJob;
use super::truth::JobTruth;
use crate::cluster::Node;
use crate::snapshot::{JobView, Observations, Range, Shape, Tenant};
use drover_core::JobId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Models whose few very large tensors make them sensitive to spreading (Tiresias's "high skew").
pub const HIGH_SKEW_MODELS: [&str; 3] = ["vgg-16", "wlm", "seq2seq"];
/// Share of jobs that are fixed-size.
pub const FIXED_FRACTION: f64 = 0.3;
const GPU_MEMORY_CHOICES_GB: [f64; 4] = [4.0, 8.0, 16.0, 24.0];

/// What the simulator knows of a job beyond what the scheduler sees.
#[derive(Debug, Clone)]
pub struct SimJob {
    /// The job as first shown to the scheduler (waiting, nothing observed).
    pub view: JobView,
    pub recorded_duration_s: f64,
    pub recorded: Shape,
    pub model: String,
    pub tenant: String,
}

#[derive(Debug, Clone)]
pub struct Workload {
    pub nodes: Vec<Node>,
    pub tenants: Vec<Tenant>,
    pub jobs: Vec<SimJob>,
    pub truths: Arc<Vec<JobTruth>>,
    /// Trace jobs dropped because they ask for more GPUs than the cluster has.
    pub skipped: usize,
}

impl Workload {
    /// Σ GPU-time of the jobs / (cluster GPUs × span of submissions).
    pub fn offered_load(&self) -> f64 {
        let gpus: u32 = self.nodes.iter().map(Node::num_gpus).sum();
        let first = self.jobs.first().map_or(0.0, |j| j.view.submit_s);
        let last = self.jobs.last().map_or(0.0, |j| j.view.submit_s);
        let work: f64 = self
            .jobs
            .iter()
            .map(|j| j.recorded_duration_s * f64::from(j.recorded.workers))
            .sum();
        if last > first {
            work / (f64::from(gpus) * (last - first))
        } else {
            0.0
        }
    }
}

fn gaussian(rng: &mut ChaCha8Rng) -> f64 {
    // Box–Muller.
    let u1: f64 = rng.random_range(f64::EPSILON..1.0);
    let u2: f64 = rng.random_range(0.0..1.0);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

pub(crate) fn noisy(rng: &mut ChaCha8Rng, value: f64, sigma: f64) -> f64 {
    value * (1.0 + sigma * gaussian(rng)).max(0.05)
}

pub fn build_workload(
    trace: &[TraceJob],
    models: &[MeasuredModel],
    nodes: Vec<Node>,
    seed: u64,
) -> Workload {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let models: Vec<Arc<MeasuredModel>> = models.iter().cloned().map(Arc::new).collect();
    let total_gpus: u32 = nodes.iter().map(Node::num_gpus).sum();
    let max_node_cpus = nodes.iter().map(|n| n.cpus).max().unwrap_or(0);
    let origin = trace.first().map_or(0.0, |j| j.submit_s);
    // Tenants: the trace's virtual clusters, guaranteed GPUs in proportion to their GPU-time here.
    let mut gpu_time: BTreeMap<&str, f64> = BTreeMap::new();
    for job in trace {
        *gpu_time.entry(job.tenant.as_str()).or_default() += job.duration_s * f64::from(job.gpus);
    }
    let total_time: f64 = gpu_time.values().sum();
    let tenant_index: BTreeMap<&str, u32> = gpu_time
        .keys()
        .enumerate()
        .map(|(i, t)| (*t, i as u32))
        .collect();
    let tenants = gpu_time
        .iter()
        .map(|(name, time)| Tenant {
            name: (*name).to_owned(),
            guaranteed_gpus: (f64::from(total_gpus) * time / total_time.max(1.0)).round() as u32,
            max_gpus: None,
        })
        .collect();
    let mut jobs = Vec::new();
    let mut truths = Vec::new();
    let mut skipped = 0;
    for job in trace {
        // Draw everything for every trace job, kept or not, so one job's draws never shift another's.
        let model = models[rng.random_range(0..models.len())].clone();
        let fixed = rng.random_bool(FIXED_FRACTION);
        let memory = GPU_MEMORY_CHOICES_GB[rng.random_range(0..GPU_MEMORY_CHOICES_GB.len())];
        let alpha: f64 = rng.random_range(0.3..0.8);
        let k0: f64 = rng.random_range(10.0..200.0);
        let c: f64 = rng.random_range(0.05..0.5);
        let start_loss: f64 = rng.random_range(1.5..4.0);
        if job.gpus > total_gpus {
            skipped += 1;
            continue;
        }
        let w_rec = job.gpus;
        let stretch = (f64::from(w_rec) / f64::from(model.peak_workers())).max(1.0);
        let probe = JobTruth {
            model: model.clone(),
            stretch,
            total_steps: 1.0,
            step_noise: 0.0,
            loss: (0.0, 1.0, 1.0, 0.0),
        };
        let speed_at = |ps: u32| probe.steps_per_s(Shape { ps, workers: w_rec });
        let best = (1..=w_rec).map(speed_at).fold(0.0, f64::max);
        let p_rec = (1..=w_rec)
            .find(|&p| speed_at(p) >= 0.95 * best)
            .unwrap_or(1);
        let recorded = Shape {
            ps: p_rec,
            workers: w_rec,
        };
        let total_steps = (job.duration_s * probe.steps_per_s(recorded)).max(1.0);
        let a = (start_loss - c) * k0.powf(alpha);
        let cpus_per_ps = (model.ps_cpu.ceil() as u32).clamp(1, max_node_cpus.max(1));
        let cpus_per_worker = (model.worker_cpu.ceil() as u32).clamp(1, max_node_cpus.max(1));
        let (workers, ps) = if fixed {
            (
                Range {
                    min: w_rec,
                    max: w_rec,
                },
                Range {
                    min: p_rec,
                    max: p_rec,
                },
            )
        } else {
            (
                Range {
                    min: 1,
                    max: 2 * w_rec,
                },
                Range {
                    min: 1,
                    max: 2 * w_rec,
                },
            )
        };
        let index = truths.len() as u128;
        truths.push(JobTruth {
            model: model.clone(),
            stretch,
            total_steps,
            step_noise: model.residual.clamp(0.02, 0.15),
            loss: (a, k0, alpha, c),
        });
        jobs.push(SimJob {
            view: JobView {
                id: JobId(uuid::Uuid::from_u128(index)),
                tenant: tenant_index[job.tenant.as_str()],
                priority: 0,
                submit_s: job.submit_s - origin,
                workers,
                ps,
                preferred: recorded,
                gpus_per_worker: 1,
                gpu_memory_gb: Some(memory),
                cpus_per_worker,
                cpus_per_ps,
                preemptible: true,
                consolidate: HIGH_SKEW_MODELS.contains(&model.name.as_str()),
                placement: None,
                observed: Observations::default(),
                search: None,
            },
            recorded_duration_s: job.duration_s,
            recorded,
            model: model.name.clone(),
            tenant: job.tenant.clone(),
        });
    }
    Workload {
        nodes,
        tenants,
        jobs,
        truths: Arc::new(truths),
        skipped,
    }
}
