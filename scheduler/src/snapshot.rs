//! What a policy sees: the time, the nodes, the tenants and the jobs with their observed history only.

use crate::cluster::Node;
use crate::placement::Placement;
use drover_core::{ExperimentId, JobId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use crate::shape::{Range, Shape};

/// A tenant and its guaranteed share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    pub name: String,
    pub guaranteed_gpus: u32,
    pub max_gpus: Option<u32>,
    /// Its quota per GPU model ([`crate::flavours`]); empty, its quota is of GPUs of any model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flavours: Vec<Flavour>,
}

/// A tenant's quota of one GPU model (a flavour, in Kueue's words).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flavour {
    /// A model's name or a word of it, case aside, as a job's `gpu_types` names one.
    pub gpu_model: String,
    /// GPUs of this model guaranteed to the tenant: part of its `guaranteed_gpus`.
    pub guaranteed_gpus: u32,
    /// Most GPUs of this model it may hold.
    pub max_gpus: Option<u32>,
    /// How many of its unused guarantee of this model others may borrow (`None`: all).
    pub lending_limit: Option<u32>,
}

/// Mean observed step time at one shape (the snapshot keeps aggregates, not every sample).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    pub shape: Shape,
    /// Measured while its GPUs were shared with another job (packing).
    pub shared: bool,
    /// Of `samples`, those measured while its workers ran on more than one node, and their mean
    /// (the rest ran on one node).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spread_samples: u32,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub spread_mean_step_s: f64,
    pub samples: u32,
    pub mean_step_s: f64,
    /// The model of the GPUs it was measured on, where known: the same shape runs at another speed
    /// on another model.
    #[serde(
        default,
        skip_serializing_if = "crate::cluster::GpuModelTag::is_unknown"
    )]
    pub gpu: crate::cluster::GpuModelTag,
}

/// A job's (step, loss) samples ([`Observations::loss_samples`]); changed through
/// [`Arc::make_mut`](std::sync::Arc::make_mut), which copies them only while another holds them.
pub type LossSamples = std::sync::Arc<Vec<(u64, f64)>>;

/// What has been observed of a job (and what it declared that the observations are read with: its
/// step budget, its program); never its true speed or length.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observations {
    /// GPUs × seconds the job has held (Tiresias's 2D attained service).
    pub attained_gpu_s: f64,
    /// Seconds the job has run in total.
    pub executed_s: f64,
    /// Seconds the job has run since it last (re)entered its current priority queue.
    pub executed_since_promotion_s: f64,
    /// When the job last started or stopped running (for starvation checks).
    pub last_state_change_s: f64,
    pub steps_done: u64,
    pub step_stats: Vec<StepStats>,
    /// (step, loss) samples, oldest first, thinned to a bounded count; shared, not copied, by the
    /// snapshots of a server's rounds (a job keeps hundreds, and a round sees every job).
    pub loss_samples: LossSamples,
    /// When the last checkpoint was committed.
    pub last_checkpoint_s: Option<f64>,
    pub restarts: u32,
    /// The step budget the job declared (`max_steps`), when it has one: it stops there at the latest.
    /// Known of live jobs; the simulator's traces have none.
    pub step_budget: Option<u64>,
    /// It stops only at its budget (it declared no target to stop at earlier), whatever its loss
    /// curve says.
    pub runs_to_budget: bool,
    /// Which program it runs, as a key: jobs with the same key (the same model, data and batch, or
    /// the same command, or trials of one experiment) run at about the same speed, so one not yet
    /// measured is taken to run at theirs. Declared, like the budget; `None` where unknown (the
    /// simulator's traces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<u64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

impl StepStats {
    /// Adds one measured step time (over several nodes when `spread`) to the running means.
    pub fn add(&mut self, step_s: f64, spread: bool) {
        self.samples += 1;
        self.mean_step_s += (step_s - self.mean_step_s) / f64::from(self.samples);
        if spread {
            self.spread_samples += 1;
            self.spread_mean_step_s +=
                (step_s - self.spread_mean_step_s) / f64::from(self.spread_samples);
        }
    }

    /// The mean step time of the samples measured on one node, and their count.
    pub fn one_node(&self) -> (u32, f64) {
        let samples = self.samples.saturating_sub(self.spread_samples);
        if samples == 0 {
            return (0, 0.0);
        }
        let sum = self.mean_step_s * f64::from(self.samples)
            - self.spread_mean_step_s * f64::from(self.spread_samples);
        (samples, sum / f64::from(samples))
    }
}

/// How much slower a job's steps must be measured over several nodes than on one (the same shape,
/// GPU model, alone on its GPUs) for it to be kept on one node: communication across nodes then
/// costs it a quarter of its speed or more.
pub const SPREAD_SLOWDOWN: f64 = 1.25;
/// Steps measured each way before the comparison is trusted.
pub const SPREAD_MIN_SAMPLES: u32 = 5;

impl Observations {
    /// Whether its own measurements say it runs much slower spread over nodes: at some shape of two
    /// or more workers, on one GPU model and alone on its GPUs, its mean step time measured over
    /// several nodes is at least [`SPREAD_SLOWDOWN`] times the one measured on one node, each from
    /// [`SPREAD_MIN_SAMPLES`] steps or more (both kept in one [`StepStats`], whose overall mean the
    /// speed fits read as before). Never measured both ways: no. The server and the
    /// simulator both set [`JobView::consolidate`] from it.
    pub fn prefers_one_node(&self) -> bool {
        self.step_stats.iter().any(|s| {
            let (one_samples, one_mean) = s.one_node();
            !s.shared
                && s.shape.workers >= 2
                && s.spread_samples >= SPREAD_MIN_SAMPLES
                && one_samples >= SPREAD_MIN_SAMPLES
                && one_mean > 0.0
                && s.spread_mean_step_s >= SPREAD_SLOWDOWN * one_mean
        })
    }

    /// The GPU model it has the most measured steps on (alone on its GPUs): its speed model is
    /// fitted to its step times there ([`Observations::home_step_stats`]). Unknown without any.
    pub fn home_gpu(&self) -> crate::cluster::GpuModelTag {
        let stats = &self.step_stats;
        let Some(first) = stats.first() else {
            return crate::cluster::GpuModelTag::default();
        };
        if stats.iter().all(|s| s.gpu == first.gpu) {
            return first.gpu;
        }
        let mut samples: BTreeMap<crate::cluster::GpuModelTag, u64> = BTreeMap::new();
        for s in stats.iter().filter(|s| !s.shared) {
            *samples.entry(s.gpu).or_default() += u64::from(s.samples);
        }
        samples
            .into_iter()
            .max_by_key(|&(tag, n)| (n, std::cmp::Reverse(tag)))
            .map_or(first.gpu, |(tag, _)| tag)
    }

    /// Its step times on its [`Observations::home_gpu`] model only: the same shape runs at another
    /// speed on another model. All of them when they were measured on one model.
    pub fn home_step_stats(&self) -> std::borrow::Cow<'_, [StepStats]> {
        let home = self.home_gpu();
        if self.step_stats.iter().all(|s| s.gpu == home) {
            std::borrow::Cow::Borrowed(&self.step_stats)
        } else {
            std::borrow::Cow::Owned(
                self.step_stats
                    .iter()
                    .filter(|s| s.gpu == home)
                    .copied()
                    .collect(),
            )
        }
    }
}

/// What the hyper-parameter searcher says of a job that is one of its experiment's trials.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SearchHint {
    pub experiment: ExperimentId,
    /// In `[0, 1]`, 1 the experiment's most promising trial (its rank at a comparable step, raised by
    /// how far a multi-fidelity searcher has promoted it).
    pub promise: f64,
    /// The searcher will most likely stop the trial, not promote it, or replace it at its next
    /// decision: what it trains until then is probably wasted.
    pub doomed: bool,
}

/// One job as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: JobId,
    /// Index into [`ClusterSnapshot::tenants`].
    pub tenant: u32,
    pub priority: i32,
    pub submit_s: f64,
    pub workers: Range,
    pub ps: Range,
    /// The shape the user asked for; policies that do not resize run the job at it.
    pub preferred: Shape,
    pub gpus_per_worker: u32,
    /// GPU memory one worker needs; `None` takes whole GPUs.
    pub gpu_memory_gb: Option<f64>,
    pub cpus_per_worker: u32,
    pub cpus_per_ps: u32,
    /// Host memory each of its tasks (worker or PS shard) needs, in GB (0: not said, none counted).
    #[serde(default)]
    pub memory_gb_per_task: u32,
    pub preemptible: bool,
    /// Its workers should sit on as few nodes as possible (Tiresias's consolidated placement, for
    /// a model of a few very large tensors): set from what was measured of it
    /// ([`Observations::prefers_one_node`]), never from what it is.
    pub consolidate: bool,
    /// Workers that must share a node (a tensor-parallel group, `spec.distributed.parallelism.
    /// tensor`): every node holds a multiple of it of the job's workers. 1: no constraint.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub worker_unit: u32,
    /// Workers come in whole replicas of the model of this many (a model-parallel job's stages ×
    /// tensor degree): it runs only at multiples of it. 1: any count in its range.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub worker_step: u32,
    /// Micro-batches a replica's share of each step streams through its pipeline in
    /// (`spec.distributed.parallelism.pipeline.micro_batches`): its stages idle for
    /// (stages − 1)/(micro_batches + stages − 1) of a step. 1 where it has no pipeline.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub micro_batches: u32,
    /// Where the job runs now; `None` while it waits.
    pub placement: Option<Placement>,
    pub observed: Observations,
    /// Set when the job is a trial of a hyper-parameter search.
    #[serde(default)]
    pub search: Option<SearchHint>,
    /// It runs in an OCI image (`spec.command.image`): only nodes that run images take it.
    #[serde(default)]
    pub image: bool,
    /// Labels its nodes must have (`spec.resources.node_selector`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// GPU models it may run on, most preferred first (`spec.resources.gpu_types`); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_types: Vec<String>,
    /// Node taints it tolerates (`spec.resources.tolerations`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<crate::cluster::Toleration>,
}

impl JobView {
    /// A job as its document's resources describe it: its ranges, asking for its largest shape,
    /// what each task needs; not placed, nothing observed, tenant 0 at priority 0, preemptible.
    pub fn of_resources(id: JobId, resources: &drover_core::spec::Resources) -> JobView {
        JobView {
            id,
            tenant: 0,
            priority: 0,
            submit_s: 0.0,
            workers: Range {
                min: resources.workers.min,
                max: resources.workers.max,
            },
            ps: Range {
                min: resources.ps.min,
                max: resources.ps.max,
            },
            preferred: Shape {
                ps: resources.ps.max,
                workers: resources.workers.max,
            },
            gpus_per_worker: resources.gpus_per_worker,
            gpu_memory_gb: resources.gpu_memory_gb,
            cpus_per_worker: resources.cpus_per_worker,
            cpus_per_ps: resources.cpus_per_ps,
            memory_gb_per_task: resources.memory_gb_per_task,
            preemptible: true,
            consolidate: false,
            worker_unit: 1,
            worker_step: 1,
            micro_batches: 1,
            placement: None,
            observed: Observations::default(),
            search: None,
            image: false,
            node_selector: resources.node_selector.clone(),
            gpu_types: resources.gpu_types.clone(),
            tolerations: resources
                .tolerations
                .iter()
                .map(crate::cluster::Toleration::of)
                .collect(),
        }
    }

    /// Whether the job may run with `workers` workers: within its range, whole replicas.
    pub fn runs_at_workers(&self, workers: u32) -> bool {
        self.workers.contains(workers) && workers.is_multiple_of(self.worker_step.max(1))
    }

    /// `workers` rounded down to whole replicas, no fewer than the job's smallest count.
    pub fn whole_replicas(&self, workers: u32) -> u32 {
        let step = self.worker_step.max(1);
        (workers - workers % step).max(self.workers.min)
    }

    /// [`JobView::of_resources`] of the job's document, and whether it runs in an image.
    pub fn of_document(id: JobId, job: &drover_core::DroverJob) -> JobView {
        JobView {
            image: job.spec.command.as_ref().is_some_and(|c| c.image.is_some()),
            worker_unit: job.spec.distributed.parallelism.tensor.max(1),
            worker_step: job
                .spec
                .distributed
                .parallelism
                .workers_per_replica()
                .max(1),
            micro_batches: job
                .spec
                .distributed
                .parallelism
                .pipeline
                .map_or(1, |p| p.micro_batches.max(1)),
            ..JobView::of_resources(id, &job.spec.resources)
        }
    }

    /// Whether `node` may run this job's tasks at all (whatever it has free): a job in an image
    /// needs a node that runs images, a node selector its labels, GPU types its GPUs' model.
    pub fn may_run_on(&self, node: &Node) -> bool {
        (!self.image || node.runs_images)
            && self
                .node_selector
                .iter()
                .all(|(key, value)| node.labels.get(key) == Some(value))
            && (self.gpu_types.is_empty() || self.gpu_types.iter().any(|t| node.all_gpus_are(t)))
            && self.tolerates_all(&node.taints)
    }

    /// Whether it tolerates every one of `taints`.
    pub fn tolerates_all(&self, taints: &[crate::cluster::Taint]) -> bool {
        taints
            .iter()
            .all(|taint| self.tolerations.iter().any(|t| t.tolerates(taint)))
    }

    /// Whether it may run only on some nodes (an image, a node selector, GPU types); tainted nodes
    /// narrow every job's, whatever it says.
    pub fn is_constrained(&self) -> bool {
        self.image || !self.node_selector.is_empty() || !self.gpu_types.is_empty()
    }

    pub fn is_running(&self) -> bool {
        self.placement.is_some()
    }

    pub fn is_elastic(&self) -> bool {
        self.workers.min < self.workers.max || self.ps.min < self.ps.max
    }

    /// GPUs the job needs at `shape`.
    pub fn gpus_at(&self, shape: Shape) -> u32 {
        shape.workers * self.gpus_per_worker
    }

    /// CPUs the job's tasks take at `shape`.
    pub fn cpus_at(&self, shape: Shape) -> u32 {
        shape.workers * self.cpus_per_worker + shape.ps * self.cpus_per_ps
    }

    /// Host memory the job's tasks take at `shape`, in GB.
    pub fn memory_gb_at(&self, shape: Shape) -> u64 {
        u64::from(shape.workers + shape.ps) * u64::from(self.memory_gb_per_task)
    }
}

/// Everything a policy decides from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterSnapshot {
    /// Seconds on the scheduler's clock (virtual in the simulator).
    pub now_s: f64,
    pub nodes: Vec<Node>,
    pub tenants: Vec<Tenant>,
    /// Active jobs (waiting or running), in submission order.
    pub jobs: Vec<JobView>,
}

impl ClusterSnapshot {
    pub fn total_gpus(&self) -> u32 {
        self.nodes
            .iter()
            .filter(|n| n.schedulable)
            .map(Node::num_gpus)
            .sum()
    }

    pub fn total_cpus(&self) -> u32 {
        self.nodes
            .iter()
            .filter(|n| n.schedulable)
            .map(|n| n.cpus)
            .sum()
    }

    /// Host memory of the schedulable nodes, GB.
    pub fn total_memory_gb(&self) -> u64 {
        self.nodes
            .iter()
            .filter(|n| n.schedulable)
            .map(|n| u64::from(n.memory_gb))
            .sum()
    }
}

fn one() -> u32 {
    1
}

/// serde's `skip_serializing_if` passes a reference.
fn is_one(n: &u32) -> bool {
    *n == 1
}
