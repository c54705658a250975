//! Whether a job could ever run on this cluster, checked at submission: the nodes the server knows
//! (read at most every few seconds, so a burst of submissions does not read them each time), shown
//! to the scheduler's own rule (`drover_scheduler::policy::why_never_fits`). A job that no node could
//! hold (a worker with more GPUs, CPUs or memory than any node has) is refused with the reason,
//! rather than queued to wait for ever. A cluster with no node yet refuses nothing.

use crate::error::{ServiceError, ServiceResult};
use drover_core::DroverJob;
use drover_scheduler::cluster::{Gpu, Node, NodeId};
use drover_scheduler::policy::IMAGE_REASON;
use drover_scheduler::snapshot::JobView;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a reading of the nodes is used.
const FRESH_FOR: Duration = Duration::from_secs(5);

/// The nodes as last read.
#[derive(Debug, Default)]
pub struct Capacity {
    read: Mutex<Option<(Instant, std::sync::Arc<Vec<Node>>)>>,
}

impl Capacity {
    /// The nodes the server knows, as the scheduler models them (read again when older than
    /// [`FRESH_FOR`]).
    async fn nodes(
        &self,
        store: &dyn drover_store::Store,
    ) -> ServiceResult<std::sync::Arc<Vec<Node>>> {
        // An empty reading is not kept: a cluster whose first node just registered is seen at once
        // (and reading no node costs little).
        if let Some((at, nodes)) = self.read.lock().unwrap_or_else(|e| e.into_inner()).as_ref()
            && at.elapsed() < FRESH_FOR
            && !nodes.is_empty()
        {
            return Ok(nodes.clone());
        }
        let nodes: Vec<Node> = store
            .list_nodes()
            .await?
            .into_iter()
            .enumerate()
            .map(|(i, node)| Node {
                id: NodeId(i as u32),
                name: node.name,
                rack: 0,
                gpus: node
                    .gpus
                    .iter()
                    .map(|g| Gpu {
                        model: g.model.clone(),
                        memory_gb: g.memory_gb,
                    })
                    .collect(),
                cpus: node.cpus,
                memory_gb: node.memory_gb,
                schedulable: true,
                runs_images: node.runs_images,
                labels: node.labels,
                taints: node
                    .taints
                    .into_iter()
                    .map(|t| drover_scheduler::cluster::Taint {
                        key: t.key,
                        value: t.value,
                    })
                    .collect(),
            })
            .collect();
        let nodes = std::sync::Arc::new(nodes);
        *self.read.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), nodes.clone()));
        Ok(nodes)
    }

    /// Whether the server knows any node (with none, no job is refused).
    pub async fn knows_nodes(&self, store: &dyn drover_store::Store) -> ServiceResult<bool> {
        Ok(!self.nodes(store).await?.is_empty())
    }

    /// Why no node of the cluster could ever hold `job`; `None` when one could (or none is known).
    pub async fn why_never_fits(
        &self,
        store: &dyn drover_store::Store,
        job: &DroverJob,
    ) -> ServiceResult<Option<String>> {
        let nodes = self.nodes(store).await?;
        Ok(drover_scheduler::policy::why_never_fits(
            &nodes,
            &requirements(job),
        ))
    }

    /// Refuses `job` when no node of the cluster could ever hold it, saying why.
    pub async fn check(
        &self,
        store: &dyn drover_store::Store,
        job: &DroverJob,
    ) -> ServiceResult<()> {
        let nodes = self.nodes(store).await?;
        match drover_scheduler::policy::why_never_fits(&nodes, &requirements(job)) {
            None => Ok(()),
            Some(why) => Err(ServiceError::invalid(
                if why.contains(IMAGE_REASON) {
                    "spec.command.image"
                } else if why.contains("spec.resources.node_selector ") {
                    "spec.resources.node_selector"
                } else if why.contains("spec.resources.gpu_types ") {
                    "spec.resources.gpu_types"
                } else if why.contains("spec.resources.tolerations ") {
                    "spec.resources.tolerations"
                } else {
                    "spec.resources"
                },
                format!("no node of this cluster could ever run it: {why}"),
            )),
        }
    }
}

/// What the scheduler would see of `job` before it ran: its ranges and what each task needs.
fn requirements(job: &DroverJob) -> JobView {
    JobView::of_document(drover_core::JobId(uuid::Uuid::nil()), job)
}
