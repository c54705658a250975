//! Turning a trace into simulated jobs: each job gets a measured model (seeded draw), a speed surface
//! stretched so the size its user chose sits at the model's peak, a recorded shape, a step count that
//! reproduces its recorded duration (give or take the seed's noise), an elastic range (70% of jobs) and a
//! loss curve. Tenants' guarantees come from a configuration, never from the replayed jobs.

use super::gavel::{GavelTable, scale_for};
use super::parallel::ModelParallelTruth;
use super::speed::MeasuredModel;
use super::trace::TraceJob;
use super::truth::{JobTruth, Surface};
use crate::cluster::Node;
use crate::snapshot::{JobView, Observations, Range, Shape, Tenant};
use drover_core::JobId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Share of jobs that are fixed-size.
pub const FIXED_FRACTION: f64 = 0.3;
const GPU_MEMORY_CHOICES_GB: [f64; 4] = [4.0, 8.0, 16.0, 24.0];
/// Relative noise (log-normal σ) of a job's true length around its recorded duration.
pub const LENGTH_NOISE: f64 = 0.1;
/// A job arrives up to this many seconds after its recorded submission (uniform).
pub const SUBMIT_JITTER_S: f64 = 60.0;

/// How many parameter servers a job's recorded (fixed) shape has: a rule of the trace's GPU count
/// alone, as a user picks it before any run. The rules that picked the count fastest under the hidden
/// speed surface (`best`, `user`) are gone: they handed every policy the truth through the shape a job
/// prefers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordedPs {
    /// One shard per worker, TensorFlow's advice of the trace's time (and Optimus's baseline).
    #[default]
    Workers,
    /// One shard per two workers, rounded up.
    Half,
    /// A single shard, however many workers.
    One,
}

impl RecordedPs {
    /// The PS count of a recorded shape of `workers` workers.
    pub fn ps_for(self, workers: u32) -> u32 {
        match self {
            RecordedPs::Workers => workers.max(1),
            RecordedPs::Half => workers.div_ceil(2).max(1),
            RecordedPs::One => 1,
        }
    }
}

impl std::str::FromStr for RecordedPs {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "workers" => Ok(RecordedPs::Workers),
            "half" => Ok(RecordedPs::Half),
            "one" => Ok(RecordedPs::One),
            "best" | "user" => Err(format!(
                "`{text}` is no longer a recorded-PS rule: it read the hidden speed surface (expected workers, half or one)"
            )),
            other => Err(format!(
                "`{other}` is not a recorded-PS rule (expected workers, half or one)"
            )),
        }
    }
}

/// Tenants' guaranteed and maximum GPUs.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Quotas {
    /// Every tenant of the trace guaranteed an equal share of the cluster, no maximum.
    #[default]
    EqualShares,
    /// Given per tenant (a virtual clusters' quota file): (tenant, guaranteed GPUs, max GPUs). Tenants
    /// of the trace not listed get no guarantee.
    Configured(Vec<(String, u32, Option<u32>)>),
}

impl Quotas {
    /// Parses a quota file: `tenant,guaranteed_gpus[,max_gpus]` per line, `#` comments, an optional
    /// header line starting with `tenant`.
    pub fn parse(text: &str) -> Result<Quotas, String> {
        let mut rows = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() || (rows.is_empty() && line.starts_with("tenant")) {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let at = |reason: String| format!("quota line {}: {reason}", number + 1);
            if !(2..=3).contains(&fields.len()) || fields[0].is_empty() {
                return Err(at("expected `tenant,guaranteed_gpus[,max_gpus]`".to_owned()));
            }
            let number_of = |field: &str, what: &str| {
                field
                    .parse::<u32>()
                    .map_err(|_| at(format!("{what} `{field}` is not a whole number")))
            };
            let guaranteed = number_of(fields[1], "guaranteed_gpus")?;
            let max = match fields.get(2) {
                Some(field) if !field.is_empty() => Some(number_of(field, "max_gpus")?),
                _ => None,
            };
            if max.is_some_and(|m| m < guaranteed) {
                return Err(at("max_gpus is below guaranteed_gpus".to_owned()));
            }
            if rows
                .iter()
                .any(|(t, _, _): &(String, u32, Option<u32>)| t == fields[0])
            {
                return Err(at(format!("tenant `{}` is listed twice", fields[0])));
            }
            rows.push((fields[0].to_owned(), guaranteed, max));
        }
        if rows.is_empty() {
            return Err("the quota file lists no tenant".to_owned());
        }
        Ok(Quotas::Configured(rows))
    }
}

/// How a trace becomes a workload.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkloadOptions {
    pub seed: u64,
    pub recorded_ps: RecordedPs,
    pub quotas: Quotas,
    /// Host memory each task (worker or PS shard) needs, GB; 0 counts none (the traces say nothing
    /// of memory).
    pub memory_gb_per_task: u32,
    /// Measured throughput per GPU model: on a cluster of several models, each job's true speed on
    /// each ([`super::gavel`]). Without it, or on one model, every GPU runs a job alike.
    pub gpu_speeds: Option<Arc<GavelTable>>,
    /// Share of the trace's jobs of two or more GPUs made model-parallel ([`super::parallel`]); 0:
    /// none.
    pub model_parallel: f64,
    /// Model-parallel jobs run only at their recorded shape (the fixed-shape baseline), elastic or
    /// not as drawn otherwise.
    pub model_parallel_fixed: bool,
}

/// What the simulator knows of a job beyond what the scheduler sees.
#[derive(Debug, Clone)]
pub struct SimJob {
    /// The job as first shown to the scheduler (waiting, nothing observed).
    pub view: JobView,
    /// How long it runs alone at its recorded shape: the trace's duration, with the seed's noise.
    pub recorded_duration_s: f64,
    pub recorded: Shape,
    pub model: String,
    pub tenant: String,
    /// The measured job type that sets its speed per GPU model, on a cluster of several.
    pub job_type: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Workload {
    pub nodes: Vec<Node>,
    pub tenants: Vec<Tenant>,
    pub jobs: Vec<SimJob>,
    pub truths: Arc<Vec<JobTruth>>,
    /// The cluster's GPU models (lower case, in order of first appearance) when it has several and
    /// jobs' speeds differ by model; empty otherwise.
    pub gpu_models: Vec<String>,
    /// Trace jobs dropped because they ask for more GPUs than the cluster has, or than their tenant's
    /// maximum.
    pub skipped: usize,
}

impl Workload {
    /// The hidden truth: job `index`'s steps per second at `shape`, alone on its GPUs. For tests and
    /// reports; policies never see it.
    #[doc(hidden)]
    pub fn true_steps_per_s(&self, index: usize, shape: Shape) -> f64 {
        self.truths
            .get(index)
            .map_or(0.0, |truth| truth.steps_per_s(shape))
    }

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

/// The tenants of `trace` with their guarantees: equal shares, or as configured.
fn tenants_of(trace: &[TraceJob], total_gpus: u32, quotas: &Quotas) -> Vec<Tenant> {
    let names: std::collections::BTreeSet<&str> = trace.iter().map(|j| j.tenant.as_str()).collect();
    let count = names.len().max(1) as u32;
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (guaranteed_gpus, max_gpus) = match quotas {
                // The remainder of an uneven split goes one GPU each to the first tenants.
                Quotas::EqualShares => (
                    total_gpus / count + u32::from((i as u32) < total_gpus % count),
                    None,
                ),
                Quotas::Configured(rows) => rows
                    .iter()
                    .find(|(t, _, _)| t == name)
                    .map_or((0, None), |(_, g, m)| (*g, *m)),
            };
            Tenant {
                name: (*name).to_owned(),
                guaranteed_gpus,
                max_gpus,
                flavours: Vec::new(),
            }
        })
        .collect()
}

/// [`build_workload_with`] with the default recorded shape and equal shares.
pub fn build_workload(
    trace: &[TraceJob],
    models: &[MeasuredModel],
    nodes: Vec<Node>,
    seed: u64,
) -> Workload {
    build_workload_with(
        trace,
        models,
        nodes,
        &WorkloadOptions {
            seed,
            ..WorkloadOptions::default()
        },
    )
}

/// The workload `trace` makes on `nodes`.
pub fn build_workload_with(
    trace: &[TraceJob],
    models: &[MeasuredModel],
    nodes: Vec<Node>,
    options: &WorkloadOptions,
) -> Workload {
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let models: Vec<Arc<MeasuredModel>> = models.iter().cloned().map(Arc::new).collect();
    let total_gpus: u32 = nodes.iter().map(Node::num_gpus).sum();
    let max_node_cpus = nodes.iter().map(|n| n.cpus).max().unwrap_or(0);
    let origin = trace.first().map_or(0.0, |j| j.submit_s);
    let tenants = tenants_of(trace, total_gpus, &options.quotas);
    let tenant_index: BTreeMap<&str, u32> = tenants
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i as u32))
        .collect();
    let mut made: Vec<(SimJob, JobTruth)> = Vec::new();
    let mut skipped = 0;
    // Speeds per GPU model come from their own stream, so a one-model cluster's draws are unchanged.
    let gpu_models = distinct_models(&nodes);
    let by_model = options.gpu_speeds.as_ref().filter(|_| gpu_models.len() > 1);
    let gpu_models = if by_model.is_some() {
        gpu_models
    } else {
        Vec::new()
    };
    let mut model_rng = ChaCha8Rng::seed_from_u64(options.seed ^ 0x6a7e_1c0d);
    // Model-parallel layouts too, drawn for every trace job: the share changes which jobs are
    // model-parallel, never anything else's draws.
    let mut parallel_rng = ChaCha8Rng::seed_from_u64(options.seed ^ 0x91e1_5a9c);
    let node_gpus = nodes
        .iter()
        .map(Node::num_gpus)
        .filter(|&g| g > 0)
        .min()
        .unwrap_or(0);
    for job in trace {
        let (job_type, model_speeds) = match by_model {
            Some(table) => {
                let scale = scale_for(job.gpus);
                let types = table.job_types_for(&gpu_models, scale);
                if types.is_empty() {
                    (None, Vec::new())
                } else {
                    let job_type = types[model_rng.random_range(0..types.len())].clone();
                    let speeds = table.relative_speeds(&gpu_models, &job_type, scale);
                    (Some(job_type), speeds)
                }
            }
            None => (None, Vec::new()),
        };
        // Draw everything for every trace job, kept or not, so one job's draws never shift another's.
        let model = models[rng.random_range(0..models.len())].clone();
        let fixed = rng.random_bool(FIXED_FRACTION);
        let memory = GPU_MEMORY_CHOICES_GB[rng.random_range(0..GPU_MEMORY_CHOICES_GB.len())];
        let alpha: f64 = rng.random_range(0.3..0.8);
        let k0: f64 = rng.random_range(10.0..200.0);
        let c: f64 = rng.random_range(0.05..0.5);
        let start_loss: f64 = rng.random_range(1.5..4.0);
        let length = (LENGTH_NOISE * gaussian(&mut rng)).exp();
        let jitter = rng.random_range(0.0..SUBMIT_JITTER_S);
        let parallel = parallel_rng
            .random_bool(options.model_parallel.clamp(0.0, 1.0))
            .then(|| ModelParallelTruth::draw(&mut parallel_rng, job.gpus, node_gpus))
            .flatten();
        let tenant_max = tenants[tenant_index[job.tenant.as_str()] as usize]
            .max_gpus
            .unwrap_or(u32::MAX);
        if job.gpus > total_gpus || job.gpus > tenant_max {
            skipped += 1;
            continue;
        }
        let a = (start_loss - c) * k0.powf(alpha);
        // The spec's default requests: the trace says nothing of CPUs, and the model's measured use is
        // hidden.
        let (cpus_per_worker, cpus_per_ps) = default_cpus(max_node_cpus);
        let shape = match parallel {
            Some(truth) => model_parallel_shape(truth, job.gpus, fixed, options),
            None => measured_shape(&model, job.gpus, fixed, options.recorded_ps),
        };
        let recorded = shape.recorded;
        let total_steps = (job.duration_s * length * shape.surface.steps_per_s(recorded)).max(1.0);
        let truth = JobTruth {
            surface: shape.surface,
            total_steps,
            step_noise: parallel.map_or(model.residual.clamp(0.02, 0.15), |_| {
                super::parallel::STEP_NOISE
            }),
            loss: (a, k0, alpha, c),
            model_speeds,
        };
        let sim_job = SimJob {
            view: JobView {
                // Numbered once the arrivals are in order.
                id: JobId(uuid::Uuid::nil()),
                tenant: tenant_index[job.tenant.as_str()],
                priority: 0,
                submit_s: job.submit_s - origin + jitter,
                workers: shape.workers,
                ps: shape.ps,
                preferred: recorded,
                gpus_per_worker: 1,
                // A model split over GPUs takes them whole.
                gpu_memory_gb: parallel.is_none().then_some(memory),
                cpus_per_worker,
                cpus_per_ps,
                memory_gb_per_task: options.memory_gb_per_task,
                preemptible: true,
                // The trace says nothing of it, and the model (hence its skew) is hidden.
                consolidate: false,
                worker_unit: parallel.map_or(1, |p| p.tensor),
                worker_step: parallel.map_or(1, |p| p.per_replica()),
                micro_batches: parallel.map_or(1, |p| p.micro_batches),
                placement: None,
                observed: Observations::default(),
                search: None,
                image: false,
                node_selector: Default::default(),
                gpu_types: Vec::new(),
                tolerations: Vec::new(),
            },
            recorded_duration_s: job.duration_s * length,
            recorded,
            model: parallel.map_or_else(|| model.name.clone(), |p| p.name()),
            tenant: job.tenant.clone(),
            job_type,
        };
        made.push((sim_job, truth));
    }
    // The jitter may reorder close arrivals; a job's id is its index among the truths.
    made.sort_by(|a, b| a.0.view.submit_s.total_cmp(&b.0.view.submit_s));
    let mut jobs = Vec::with_capacity(made.len());
    let mut truths = Vec::with_capacity(made.len());
    for (index, (mut job, truth)) in made.into_iter().enumerate() {
        job.view.id = JobId(uuid::Uuid::from_u128(index as u128));
        jobs.push(job);
        truths.push(truth);
    }
    Workload {
        nodes,
        tenants,
        jobs,
        truths: Arc::new(truths),
        gpu_models,
        skipped,
    }
}

/// A simulated job's true speed surface, the shape its user asked for and the ranges it may run at.
struct JobShape {
    surface: Surface,
    recorded: Shape,
    workers: Range,
    ps: Range,
}

/// A trace job of `gpus` GPUs on a measured model: its surface stretched so the size its user chose
/// sits at the model's peak; elastic over 1 to twice that, workers and PS alike, unless `fixed`.
fn measured_shape(
    model: &Arc<MeasuredModel>,
    gpus: u32,
    fixed: bool,
    recorded_ps: RecordedPs,
) -> JobShape {
    let stretch = (f64::from(gpus) / f64::from(model.peak_workers())).max(1.0);
    // What the user asks for is the trace's and the rule's alone: no hidden quantity reaches it.
    let p_rec = recorded_ps.ps_for(gpus);
    let exactly = |n: u32| Range { min: n, max: n };
    let upto = Range {
        min: 1,
        max: 2 * gpus,
    };
    JobShape {
        surface: Surface::Measured {
            model: model.clone(),
            stretch,
        },
        recorded: Shape {
            ps: p_rec,
            workers: gpus,
        },
        workers: if fixed { exactly(gpus) } else { upto },
        ps: if fixed { exactly(p_rec) } else { upto },
    }
}

/// A model-parallel trace job of `gpus` GPUs: as many whole replicas as fit in them, no PS;
/// elastic from one replica to twice its recorded count unless drawn `fixed` or the workload holds
/// every model-parallel job at its recorded shape.
fn model_parallel_shape(
    truth: ModelParallelTruth,
    gpus: u32,
    fixed: bool,
    options: &WorkloadOptions,
) -> JobShape {
    let per_replica = truth.per_replica();
    let recorded = (gpus / per_replica).max(1) * per_replica;
    let workers = if fixed || options.model_parallel_fixed {
        Range {
            min: recorded,
            max: recorded,
        }
    } else {
        Range {
            min: per_replica,
            max: 2 * recorded,
        }
    };
    JobShape {
        surface: Surface::ModelParallel(truth),
        recorded: Shape {
            ps: 0,
            workers: recorded,
        },
        workers,
        ps: Range { min: 0, max: 0 },
    }
}

/// The CPUs a worker and a PS shard request when the job does not say (the spec's defaults), at most a
/// node's.
pub(crate) fn default_cpus(max_node_cpus: u32) -> (u32, u32) {
    let cap = |cpus: u32| cpus.clamp(1, max_node_cpus.max(1));
    let asked = drover_core::spec::Resources::default();
    (cap(asked.cpus_per_worker), cap(asked.cpus_per_ps))
}

/// The distinct models of the nodes' GPUs (each node's first GPU's), lower case, in order.
pub(crate) fn distinct_models(nodes: &[Node]) -> Vec<String> {
    let mut models: Vec<String> = Vec::new();
    for node in nodes {
        if let Some(gpu) = node.gpus.first() {
            let model = gpu.model.to_ascii_lowercase();
            if !models.contains(&model) {
                models.push(model);
            }
        }
    }
    models
}
