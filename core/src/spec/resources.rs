//! What a job asks of the cluster: task counts (elastic as ranges), how its workers exchange
//! gradients, its scheduling class and its checkpoint policy.

use super::defaults;
use crate::openapi::{nullable, task_range};
use crate::schema::one_object;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema, Type};

/// Largest counts of tasks a spec may ask for; beyond these a number is a typo, not a job.
pub const MAX_WORKERS: u32 = 1024;
pub const MAX_PS: u32 = 256;

/// An inclusive range of task counts; `min < max` makes the job elastic. A document may give a plain
/// count (`workers: 2`) for `{min: 2, max: 2}`, as `drover resize --workers 2` does. In the OpenAPI
/// document each field that holds one has its own bounds (`crate::openapi::workers`, `ps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TaskRange {
    pub min: u32,
    pub max: u32,
}

impl<'de> Deserialize<'de> for TaskRange {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{self, Unexpected};

        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            min: u32,
            max: u32,
        }

        struct Range;

        impl<'de> de::Visitor<'de> for Range {
            type Value = TaskRange;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a task count (`2`) or a range (`{min: 1, max: 4}`)")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TaskRange, E> {
                let n = u32::try_from(v)
                    .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))?;
                Ok(TaskRange { min: n, max: n })
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TaskRange, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(Unexpected::Signed(v), &self)),
                }
            }

            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<TaskRange, A::Error> {
                let Fields { min, max } =
                    Fields::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(TaskRange { min, max })
            }
        }

        deserializer.deserialize_any(Range)
    }
}

/// In a custom resource's schema: a count or a `{min, max}` range. Kubernetes' structural schemas
/// cannot say "an integer or an object", so the field is left open there and checked by the same
/// validation every other interface runs.
impl JsonSchema for TaskRange {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TaskRange".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A task count (`2`) or an inclusive range (`{min: 1, max: 4}`); min < max makes the job elastic.",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

impl TaskRange {
    pub fn is_elastic(self) -> bool {
        self.min < self.max
    }
}

const WORKERS: &str = "Workers: a count (`2`) or a range (`{min: 1, max: 4}`), 1 to 1024";
const PS: &str = "Parameter-server shards: a count or a range, 0 to 256";

/// `spec.resources.workers`.
pub fn workers_schema() -> Schema {
    task_range(1, MAX_WORKERS, WORKERS)
}

/// `spec.resources.ps`.
pub fn ps_schema() -> Schema {
    task_range(0, MAX_PS, PS)
}

/// A resize's new workers (`null`: unchanged).
pub fn resize_workers_schema() -> RefOr<Schema> {
    nullable(workers_schema())
}

/// A resize's new parameter-server shards (`null`: unchanged).
pub fn resize_ps_schema() -> RefOr<Schema> {
    nullable(ps_schema())
}

/// `spec.resources.gpu_types`.
fn gpu_types_schema() -> Schema {
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(64)),
        )
        .max_items(Some(16))
        .description(Some(
            "GPU models the job's workers may run on, most preferred first (`[v100, p100]`): a name \
             matches a node's model when it equals it or one of its words, case aside (`a100` \
             matches `NVIDIA A100-SXM4-80GB`). A gang never mixes models. Empty: any model.",
        ))
        .into()
}

/// `spec.resources.node_selector`.
fn node_selector_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String)))
        .max_properties(Some(16))
        .description(Some(
            "Node labels the job's tasks' nodes must have (`{pool: spot}`): every key with that \
             value. Empty: any node.",
        ))
        .into()
}

/// A taint a job tolerates, in Kubernetes' words: `{key: dedicated, value: vision}` (operator
/// `Equal`, the default) tolerates the taint `dedicated=vision`; `{key: dedicated, operator:
/// Exists}` any value of `dedicated`; `{operator: Exists}` every taint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Toleration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 253)]
    pub key: Option<String>,
    #[serde(default)]
    pub operator: TolerationOperator,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 63)]
    pub value: Option<String>,
    /// `NoSchedule`, the one effect a node's taint has; absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema,
)]
pub enum TolerationOperator {
    #[default]
    Equal,
    Exists,
}

/// One worker by default (the defaults of the other fields are in `defaults`).
fn default_workers() -> TaskRange {
    TaskRange { min: 1, max: 1 }
}

/// No parameter servers by default.
fn default_ps() -> TaskRange {
    TaskRange { min: 0, max: 0 }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    #[serde(default = "default_workers")]
    #[schema(schema_with = workers_schema)]
    pub workers: TaskRange,
    #[serde(default = "default_ps")]
    #[schema(schema_with = ps_schema)]
    pub ps: TaskRange,
    #[serde(default = "defaults::gpus_per_worker")]
    #[schema(maximum = 16)]
    pub gpus_per_worker: u32,
    /// What one worker needs of a GPU's memory; lets Gandiva pack two jobs on one GPU. Absent: a whole GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0, maximum = 1024)]
    pub gpu_memory_gb: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(schema_with = gpu_types_schema)]
    pub gpu_types: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(schema_with = node_selector_schema)]
    pub node_selector: BTreeMap<String, String>,
    /// Taints of nodes it may run on anyway (nodes started with `--taint`, e.g. reserved for a
    /// team): a node's every taint must be tolerated. At most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default = "defaults::cpus_per_worker")]
    #[schema(minimum = 1, maximum = 1024)]
    pub cpus_per_worker: u32,
    #[serde(default = "defaults::cpus_per_ps")]
    #[schema(minimum = 1, maximum = 1024)]
    pub cpus_per_ps: u32,
    #[serde(default = "defaults::memory_gb_per_task")]
    #[schema(minimum = 1, maximum = 4096)]
    pub memory_gb_per_task: u32,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            workers: default_workers(),
            ps: default_ps(),
            gpus_per_worker: defaults::gpus_per_worker(),
            gpu_memory_gb: None,
            gpu_types: Vec::new(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            cpus_per_worker: defaults::cpus_per_worker(),
            cpus_per_ps: defaults::cpus_per_ps(),
            memory_gb_per_task: defaults::memory_gb_per_task(),
        }
    }
}

/// How the job's tasks work together. `mode`, `sync`, `staleness`, `compression`, `collective` and
/// `local_sgd` are the engine's (a `train` job); `launcher` is a `command` job's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Distributed {
    #[serde(default)]
    pub mode: DistributedMode,
    #[serde(default)]
    pub sync: SyncMode,
    /// SSP's bound: no worker more than this many steps ahead of the slowest.
    #[serde(default = "defaults::staleness")]
    pub staleness: u32,
    #[serde(default)]
    pub compression: Compression,
    /// An `allreduce` job's all-reduce algorithm: `auto` (the default) chooses for each message size
    /// from the latency and bandwidth its workers measure between them when they start; the others
    /// fix one.
    #[serde(default, skip_serializing_if = "Collective::is_auto")]
    pub collective: Collective,
    /// An `allreduce` job's local SGD: each worker steps on its own gradient and the workers average
    /// their parameters every `every_steps` steps (and at every evaluation, checkpoint and stop),
    /// instead of summing gradients every step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_sgd: Option<LocalSgd>,
    /// An `allreduce` job's model parallelism (the `charlm` transformer): its workers form
    /// `workers / (stages × tensor)` replicas of a pipeline whose stages each run a consecutive part
    /// of the layers, each stage's blocks split among `tensor` workers.
    #[serde(default, skip_serializing_if = "Parallelism::is_data_only")]
    pub parallelism: Parallelism,
    /// A `command` job's launcher: `torch` starts one process per GPU of each worker (one on a
    /// worker without GPUs) with the variables `torchrun` sets (`MASTER_ADDR`, `RANK`, `WORLD_SIZE`,
    /// `LOCAL_RANK`, …), `jax` one process per worker with `jax.distributed`'s (`JAX_COORDINATOR_ADDRESS`,
    /// `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`); `none` one process per task with Drover's variables only.
    #[serde(default, skip_serializing_if = "Launcher::is_none")]
    pub launcher: Launcher,
}

impl Default for Distributed {
    fn default() -> Self {
        Distributed {
            mode: DistributedMode::default(),
            sync: SyncMode::default(),
            staleness: defaults::staleness(),
            compression: Compression::default(),
            collective: Collective::default(),
            local_sgd: None,
            parallelism: Parallelism::default(),
            launcher: Launcher::default(),
        }
    }
}

/// How a `command` job's processes are started and told their place in the job.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    #[default]
    None,
    Torch,
    Jax,
}

impl Launcher {
    pub fn is_none(&self) -> bool {
        *self == Launcher::None
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Launcher::None => "none",
            Launcher::Torch => "torch",
            Launcher::Jax => "jax",
        }
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DistributedMode {
    #[default]
    Ps,
    Allreduce,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    #[default]
    Bsp,
    Ssp,
    Async,
}

impl SyncMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Bsp => "bsp",
            SyncMode::Ssp => "ssp",
            SyncMode::Async => "async",
        }
    }
}

/// Local SGD (periodic model averaging).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalSgd {
    /// Steps between two averagings of the workers' parameters (1 to 100,000; 1 averages every step).
    #[schema(minimum = 1, maximum = 100000)]
    pub every_steps: u32,
}

/// How a job's model is split among its workers besides data parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Parallelism {
    /// Pipeline parallelism: consecutive layers on consecutive workers, micro-batches streaming.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<Pipeline>,
    /// Tensor parallelism's degree: each block's heads and MLP columns split among this many
    /// workers of a stage (1 to 64, dividing the `charlm` model's heads), Megatron-LM's way.
    #[serde(default = "defaults::tensor", skip_serializing_if = "defaults::is_one")]
    #[schema(minimum = 1, maximum = 64)]
    pub tensor: u32,
}

impl Default for Parallelism {
    fn default() -> Self {
        Parallelism {
            pipeline: None,
            tensor: defaults::tensor(),
        }
    }
}

impl Parallelism {
    pub fn is_data_only(&self) -> bool {
        *self == Parallelism::default()
    }

    /// A pipeline's stages (1 without one).
    pub fn stages(&self) -> u32 {
        self.pipeline.map_or(1, |p| p.stages)
    }

    /// Workers in one replica of the model: stages × tensor degree.
    pub fn workers_per_replica(&self) -> u32 {
        self.stages() * self.tensor
    }
}

/// A pipeline: the model's layers split into `stages` (each worker of a replica runs one), the
/// batch of each step into `micro_batches` streaming through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    /// Stages (2 to 64, at most the model's layers); the job's workers are a multiple of it.
    #[schema(minimum = 2, maximum = 64)]
    pub stages: u32,
    /// Micro-batches a replica's share of each step's batch is split into (1 to 1,024, at most its
    /// sequences). More shrink the pipeline's bubble, `(stages − 1)/(micro_batches + stages − 1)`.
    #[schema(minimum = 1, maximum = 1024)]
    pub micro_batches: u32,
    #[serde(default)]
    pub schedule: PipelineSchedule,
}

/// The order a stage runs its micro-batches' forward and backward passes in.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
pub enum PipelineSchedule {
    /// PipeDream-flush's one-forward-one-backward: after `stages − stage − 1` forwards a stage
    /// alternates, so at most `stages` micro-batches' activations are held, not all of them.
    #[default]
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// GPipe: every micro-batch forward, then every one backward.
    #[serde(rename = "gpipe")]
    Gpipe,
}

impl PipelineSchedule {
    pub fn as_str(self) -> &'static str {
        match self {
            PipelineSchedule::OneFOneB => "1f1b",
            PipelineSchedule::Gpipe => "gpipe",
        }
    }
}

/// How an `allreduce` job's workers sum their gradients.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// The algorithm predicted fastest for each message size, from the workers' measured links.
    #[default]
    Auto,
    /// Reduce-scatter then all-gather around a ring: bandwidth-optimal, `2(P−1)` steps.
    Ring,
    /// Reduce to one worker up a binomial tree, then broadcast down it.
    Tree,
    /// Recursive doubling (butterfly): `log₂P` steps exchanging the whole vector; small messages.
    RecursiveDoubling,
    /// Rabenseifner's reduce-scatter by recursive halving then all-gather by recursive doubling.
    Rabenseifner,
    /// Reduce inside each node, all-reduce among the nodes, broadcast inside each node.
    Hierarchical,
}

impl Collective {
    pub fn is_auto(&self) -> bool {
        *self == Collective::Auto
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Collective::Auto => "auto",
            Collective::Ring => "ring",
            Collective::Tree => "tree",
            Collective::RecursiveDoubling => "recursive_doubling",
            Collective::Rabenseifner => "rabenseifner",
            Collective::Hierarchical => "hierarchical",
        }
    }
}

/// Gradient compression, each with error feedback.
#[derive(Debug, Clone, PartialEq, Default, Serialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Compression {
    #[default]
    None,
    /// Keep the largest `ratio` of gradient entries.
    Topk {
        #[schema(exclusive_minimum = 0, maximum = 1)]
        ratio: f64,
    },
    /// 1-bit sign with a per-tensor scale.
    Onebit,
    /// QSGD-style stochastic quantisation to `bits` bits.
    Qsgd {
        #[schema(minimum = 2, maximum = 8)]
        bits: u32,
    },
    /// Deep Gradient Compression: top-k of an accumulated velocity (the `sgd` optimizer's momentum
    /// applied on each worker, masked where sent), the kept fraction warming up from 25% to `ratio`
    /// over `warmup_steps`; local clipping by `grad_clip_norm`.
    Dgc {
        #[schema(exclusive_minimum = 0, maximum = 1)]
        ratio: f64,
        #[serde(default)]
        #[schema(minimum = 0, maximum = 1000000)]
        warmup_steps: u32,
    },
}

/// Read through a copy whose variants without parameters are empty structs: serde skips other keys
/// beside the tag of a unit variant even under `deny_unknown_fields`, so `{type: onebit, ratio:
/// 0.01}` would pass as if `ratio` meant something.
impl<'de> Deserialize<'de> for Compression {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
        enum Document {
            None {},
            Topk {
                ratio: f64,
            },
            Onebit {},
            Qsgd {
                bits: u32,
            },
            Dgc {
                ratio: f64,
                #[serde(default)]
                warmup_steps: u32,
            },
        }
        Ok(match Document::deserialize(deserializer)? {
            Document::None {} => Compression::None,
            Document::Topk { ratio } => Compression::Topk { ratio },
            Document::Onebit {} => Compression::Onebit,
            Document::Qsgd { bits } => Compression::Qsgd { bits },
            Document::Dgc {
                ratio,
                warmup_steps,
            } => Compression::Dgc {
                ratio,
                warmup_steps,
            },
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scheduling {
    /// Higher runs first and may preempt lower; -1000 to 1000.
    #[serde(default)]
    #[schema(minimum = -1000, maximum = 1000)]
    pub priority: i32,
    #[serde(default = "defaults::yes")]
    pub preemptible: bool,
}

impl Default for Scheduling {
    fn default() -> Self {
        Scheduling {
            priority: 0,
            preemptible: true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointPolicy {
    #[serde(default = "defaults::checkpoint_every_steps")]
    #[schema(minimum = 1)]
    pub every_steps: u64,
    #[serde(default = "defaults::keep_last")]
    #[schema(minimum = 1, maximum = 1000)]
    pub keep_last: u32,
    #[serde(default = "defaults::keep_best")]
    #[schema(maximum = 1000)]
    pub keep_best: u32,
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        CheckpointPolicy {
            every_steps: defaults::checkpoint_every_steps(),
            keep_last: defaults::keep_last(),
            keep_best: defaults::keep_best(),
        }
    }
}
