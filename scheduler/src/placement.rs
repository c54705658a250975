//! Where a job's tasks run: each worker and PS task on its node (workers with their GPUs), a whole
//! gang at a time.

use crate::cluster::NodeId;
use crate::shape::Shape;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Worker,
    Ps,
}

/// One task on one node. Workers hold GPUs (by index on the node); PS shards hold CPUs only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPlacement {
    pub role: Role,
    pub index: u32,
    pub node: NodeId,
    pub gpus: Vec<u16>,
    pub cpus: u32,
    /// Host memory the task holds, in GB (0: its job did not say).
    #[serde(default)]
    pub memory_gb: u32,
    /// The policy decided to share these GPUs with one other job (Gandiva-style packing).
    pub packed: bool,
}

/// Where a job's tasks run: a whole gang, or nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub tasks: Vec<TaskPlacement>,
}

impl Placement {
    pub fn shape(&self) -> Shape {
        let workers = self.tasks.iter().filter(|t| t.role == Role::Worker).count() as u32;
        Shape {
            ps: self.tasks.len() as u32 - workers,
            workers,
        }
    }

    pub fn num_gpus(&self) -> u32 {
        self.tasks.iter().map(|t| t.gpus.len() as u32).sum()
    }

    /// The distinct nodes holding the job's workers.
    pub fn worker_nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self
            .tasks
            .iter()
            .filter(|t| t.role == Role::Worker)
            .map(|t| t.node)
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// Every task on the same node as before (the GPUs there may differ), ignoring order: a job
    /// suspended in a node's memory can resume there without moving its state.
    pub fn same_nodes(&self, other: &Placement) -> bool {
        let key = |p: &Placement| {
            let mut k: Vec<(Role, NodeId)> = p.tasks.iter().map(|t| (t.role, t.node)).collect();
            k.sort_unstable();
            k
        };
        key(self) == key(other)
    }

    /// The same nodes and GPUs for every task, ignoring order.
    pub fn same_resources(&self, other: &Placement) -> bool {
        let key = |p: &Placement| {
            let mut k: Vec<(Role, NodeId, Vec<u16>)> = p
                .tasks
                .iter()
                .map(|t| (t.role, t.node, t.gpus.clone()))
                .collect();
            k.sort();
            k
        };
        key(self) == key(other)
    }
}
