//! GPU nodes as users see them — what their executors last reported, whether the leader holds their
//! session, their GPUs', CPUs' and memory's use now and over the last minutes, and the live tasks the
//! caller may see — and what cluster administrators do
//! to them: cordon (no new tasks), uncordon, and drain (move every task away through a checkpoint).

use crate::Service;
use crate::audit::{self, Action};
use crate::auth::Principal;
use crate::error::{ServiceError, ServiceResult};
use drover_store::{Node, Task};

/// A node with what the runtime knows of it now.
#[derive(Debug, Clone)]
pub struct LiveNode {
    pub node: Node,
    /// This replica leads and holds no session with the node's executor.
    pub disconnected: bool,
    /// Its GPUs' last reported use.
    pub gpu_usage: Vec<drover_proto::GpuUsage>,
    /// Its CPU and memory use as last reported (the OS's), and its recent use, oldest first: what
    /// the leader's memory holds (a follower, or a leader just elected, has none).
    pub host_usage: Option<drover_proto::HostUsage>,
    pub history: Vec<drover_runtime::UsagePoint>,
    /// The live tasks on it that the caller may see.
    pub tasks: Vec<Task>,
}

/// Every node, with the live tasks the caller may see.
pub async fn list(service: &Service, principal: &Principal) -> ServiceResult<Vec<LiveNode>> {
    let nodes = service.store.list_nodes().await?;
    let tasks = visible_tasks(service, principal).await?;
    Ok(nodes
        .into_iter()
        .map(|node| live(service, node, &tasks))
        .collect())
}

/// Node `name`.
pub async fn get(service: &Service, principal: &Principal, name: &str) -> ServiceResult<LiveNode> {
    let node = service
        .store
        .get_node(name)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no node `{name}`")))?;
    Ok(live(
        service,
        node,
        &visible_tasks(service, principal).await?,
    ))
}

/// What an administrator does to a node's schedulability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedulability {
    /// No new tasks.
    Cordon,
    /// New tasks again.
    Uncordon,
    /// No new tasks, and every task moves away through a checkpoint.
    Drain,
}

/// Cordons, uncordons or drains node `name` (cluster administrators only), audited.
pub async fn set_schedulability(
    service: &Service,
    principal: &Principal,
    name: &str,
    change: Schedulability,
) -> ServiceResult<LiveNode> {
    principal.require_cluster_admin()?;
    let (cordoned, draining, action) = match change {
        Schedulability::Drain => (true, true, Action::NodeDrain),
        Schedulability::Cordon => (true, false, Action::NodeCordon),
        Schedulability::Uncordon => (false, false, Action::NodeUncordon),
    };
    let audit = audit::event(principal, action, name, "");
    let node = service
        .store
        .set_node_cordon(name, cordoned, draining, &audit)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no node `{name}`")))?;
    tracing::info!(node.name = name, cordoned, draining, user.id = %principal.user.id, "node schedulability changed");
    service.wake_scheduler();
    Ok(live(
        service,
        node,
        &visible_tasks(service, principal).await?,
    ))
}

/// Live tasks of jobs the caller may see.
async fn visible_tasks(service: &Service, principal: &Principal) -> ServiceResult<Vec<Task>> {
    let tasks = service.store.live_tasks().await?;
    if principal.user.cluster_admin {
        return Ok(tasks);
    }
    let mut visible = std::collections::HashMap::new();
    let mut shown = Vec::new();
    for task in tasks {
        let job = task.key.job_id;
        let allowed = match visible.get(&job) {
            Some(allowed) => *allowed,
            None => {
                let allowed = service.store.get_job(principal.scope(), job).await.is_ok();
                visible.insert(job, allowed);
                allowed
            }
        };
        if allowed {
            shown.push(task);
        }
    }
    Ok(shown)
}

fn live(service: &Service, mut node: Node, tasks: &[Task]) -> LiveNode {
    // Only the leader holds sessions; a follower shows the health and the heartbeat the leader
    // recorded. Heartbeats are kept in the leader's memory and written every 15 s a node (not each
    // time), so the leader's own view of the last one is the live one.
    let leading = service
        .runtime
        .as_ref()
        .filter(|runtime| runtime.is_leader());
    let seen = leading.and_then(|runtime| runtime.hub.last_seen(&node.name));
    let disconnected = leading.is_some() && !seen.is_some_and(|(_, open)| open);
    if let Some((ago, _)) = seen
        && let Ok(ago) = chrono::Duration::from_std(ago)
    {
        let heard = chrono::Utc::now() - ago;
        if node.last_heartbeat_at.is_none_or(|stored| stored < heard) {
            node.last_heartbeat_at = Some(heard);
        }
    }
    let gpu_usage = service
        .runtime
        .as_ref()
        .map(|runtime| runtime.hub.usage(&node.name))
        .unwrap_or_default();
    let (host_usage, history) = service
        .runtime
        .as_ref()
        .map(|runtime| runtime.hub.host_usage(&node.name))
        .unwrap_or_default();
    let tasks = tasks
        .iter()
        .filter(|t| t.node_name == node.name)
        .cloned()
        .collect();
    LiveNode {
        node,
        disconnected,
        gpu_usage,
        host_usage,
        history,
        tasks,
    }
}
