//! The cluster model: nodes with GPUs, CPUs, memory and a rack.

use serde::{Deserialize, Serialize};

/// Index of a node in [`crate::ClusterSnapshot::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u32);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub model: String,
    pub memory_gb: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: NodeId,
    pub name: String,
    pub rack: u32,
    pub gpus: Vec<Gpu>,
    pub cpus: u32,
    pub memory_gb: u32,
    /// Unhealthy or cordoned nodes take no new tasks.
    pub schedulable: bool,
    /// It runs tasks in OCI images: only such nodes take a job with an image
    /// ([`crate::JobView::image`]).
    #[serde(default)]
    pub runs_images: bool,
    /// Its labels (`pool=spot`), which a job's `node_selector` must match.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Its taints (effect `NoSchedule`): only jobs that tolerate every one run there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// A node's taint: `key=value` (the value may be empty), effect `NoSchedule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: String,
}

/// A taint a job tolerates: `key` `None` tolerates every key, `value` `None` every value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toleration {
    pub key: Option<String>,
    pub value: Option<String>,
}

impl Toleration {
    pub fn tolerates(&self, taint: &Taint) -> bool {
        self.key.as_ref().is_none_or(|k| *k == taint.key)
            && self.value.as_ref().is_none_or(|v| *v == taint.value)
    }

    /// A job document's toleration.
    pub fn of(toleration: &drover_core::spec::Toleration) -> Toleration {
        Toleration {
            key: toleration.key.clone(),
            value: match toleration.operator {
                drover_core::spec::TolerationOperator::Exists => None,
                drover_core::spec::TolerationOperator::Equal => {
                    Some(toleration.value.clone().unwrap_or_default())
                }
            },
        }
    }
}

impl Node {
    pub fn num_gpus(&self) -> u32 {
        self.gpus.len() as u32
    }

    /// Whether every GPU of the node is of model `name` (see [`model_is`]); false without GPUs.
    pub fn all_gpus_are(&self, name: &str) -> bool {
        !self.gpus.is_empty() && self.gpus.iter().all(|g| model_is(&g.model, name))
    }
}

/// Whether a GPU's `model` (as NVML names it: `NVIDIA A100-SXM4-80GB`) is the model a job names
/// (`a100`): the same, or one of its words (split at anything but letters and digits), case aside.
pub fn model_is(model: &str, name: &str) -> bool {
    model.eq_ignore_ascii_case(name)
        || model
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| word.eq_ignore_ascii_case(name))
}

/// A GPU model as the scheduler tells models apart: a hash of its name, case aside, so a step time
/// or a node can carry it at no cost (`Copy`, compared as a number). `0`: not known.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct GpuModelTag(pub u64);

impl GpuModelTag {
    /// The tag of the model named `name` (FNV-1a over its lower-cased bytes; never 0).
    pub fn of(name: &str) -> GpuModelTag {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in name.bytes() {
            hash ^= u64::from(byte.to_ascii_lowercase());
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        GpuModelTag(hash.max(1))
    }

    pub fn is_unknown(&self) -> bool {
        self.0 == 0
    }
}

/// The GPU models of a cluster's schedulable nodes, in order of first appearance, and each node's.
#[derive(Debug, Clone, Default)]
pub struct GpuModels {
    pub tags: Vec<GpuModelTag>,
    /// Each model's name, as the first node of it names it.
    pub names: Vec<String>,
    /// GPUs of each model.
    pub gpus: Vec<u32>,
    /// Per node, the index of its model (`usize::MAX`: no GPUs, or not schedulable).
    pub node_model: Vec<usize>,
}

impl GpuModels {
    pub fn of(nodes: &[Node]) -> GpuModels {
        let mut models = GpuModels {
            node_model: Vec::with_capacity(nodes.len()),
            ..GpuModels::default()
        };
        for node in nodes {
            let tag = node.gpu_tag();
            if tag.is_unknown() || !node.schedulable {
                models.node_model.push(usize::MAX);
                continue;
            }
            let index = match models.tags.iter().position(|&t| t == tag) {
                Some(index) => index,
                None => {
                    models.tags.push(tag);
                    models.names.push(node.gpus[0].model.clone());
                    models.gpus.push(0);
                    models.tags.len() - 1
                }
            };
            models.gpus[index] += node.num_gpus();
            models.node_model.push(index);
        }
        models
    }

    /// The index of the model of node `node`'s GPUs, if it has any and is schedulable.
    pub fn of_node(&self, node: u32) -> Option<usize> {
        self.node_model
            .get(node as usize)
            .copied()
            .filter(|&m| m != usize::MAX)
    }
}

impl Node {
    /// The model of its GPUs, as a tag (its first GPU's: a node's GPUs are one model in practice);
    /// unknown without GPUs.
    pub fn gpu_tag(&self) -> GpuModelTag {
        self.gpus
            .first()
            .map_or(GpuModelTag::default(), |g| GpuModelTag::of(&g.model))
    }
}

/// `count` identical nodes of `gpus_per_node` V100s each, `cpus_per_node` CPUs and
/// `memory_gb_per_gpu` GB of host memory per GPU, eight nodes to a rack.
pub fn uniform_cluster(
    count: u32,
    gpus_per_node: u32,
    cpus_per_node: u32,
    memory_gb_per_gpu: u32,
) -> Vec<Node> {
    mixed_cluster(
        &[(count, gpus_per_node, "V100")],
        cpus_per_node,
        memory_gb_per_gpu,
    )
}

/// Groups of identical nodes, `(count, GPUs per node, GPU model)` each, numbered in order, with
/// `cpus_per_node` CPUs and `memory_gb_per_gpu` GB of host memory per GPU, eight nodes to a rack.
/// A GPU's memory is its model's (K80 12 GB a die, P100 16 GB, others 32 GB).
pub fn mixed_cluster(
    groups: &[(u32, u32, &str)],
    cpus_per_node: u32,
    memory_gb_per_gpu: u32,
) -> Vec<Node> {
    let mut nodes = Vec::new();
    for &(count, gpus_per_node, model) in groups {
        let memory_gb = if model_is(model, "k80") {
            12.0
        } else if model_is(model, "p100") {
            16.0
        } else {
            32.0
        };
        for _ in 0..count {
            let i = nodes.len() as u32;
            nodes.push(Node {
                id: NodeId(i),
                name: format!("node-{i:04}"),
                rack: i / 8,
                gpus: (0..gpus_per_node)
                    .map(|_| Gpu {
                        model: model.to_owned(),
                        memory_gb,
                    })
                    .collect(),
                cpus: cpus_per_node,
                memory_gb: memory_gb_per_gpu * gpus_per_node.max(1),
                schedulable: true,
                runs_images: false,
                labels: std::collections::BTreeMap::new(),
                taints: Vec::new(),
            });
        }
    }
    nodes
}
