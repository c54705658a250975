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

impl Node {}

/// `count` identical nodes of `gpus_per_node` GPUs each, `cpus_per_node` CPUs and `memory_gb_per_gpu`
/// GB of host memory per GPU, eight nodes to a rack.
pub fn uniform_cluster(
    count: u32,
    gpus_per_node: u32,
    cpus_per_node: u32,
    memory_gb_per_gpu: u32,
) -> Vec<Node> {
    (0..count)
        .map(|i| Node {
            id: NodeId(i),
            name: format!("node-{i:04}"),
            rack: i / 8,
            gpus: (0..gpus_per_node)
                .map(|_| Gpu {
                    model: "V100".to_owned(),
                    memory_gb: 32.0,
                })
                .collect(),
            cpus: cpus_per_node,
            memory_gb: memory_gb_per_gpu * gpus_per_node.max(1),
            schedulable: true,
            runs_images: false,
            labels: std::collections::BTreeMap::new(),
            taints: Vec::new(),
        })
        .collect()
}
