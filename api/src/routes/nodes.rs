//! `/api/v1/nodes`: the GPU nodes executors report, with their live tasks; cluster administrators
//! cordon (no new tasks), uncordon and drain (move every task away through a checkpoint) them.

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::PathParam;
use crate::run_views::TaskView;
use crate::state::AppState;
use crate::store::{Node, Task};
use crate::views::{GpuUsageView, ListMeta, NodeEnvelope, NodeList, NodeView};
use axum::Json;
use axum::extract::State;

/// List nodes.
#[utoipa::path(
    get, path = "/api/v1/nodes", tag = "nodes",
    responses((status = 200, body = NodeList)),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> ApiResult<Json<NodeList>> {
    let nodes = state.store.list_nodes().await?;
    let tasks = visible_tasks(&state, &principal).await?;
    let views = nodes
        .into_iter()
        .map(|node| node_view(&state, node, &tasks))
        .collect();
    Ok(Json(NodeList {
        nodes: views,
        meta: ListMeta { next_cursor: None },
    }))
}

/// The node with its live tasks; `healthy` is shown only while its executor is connected.
/// Live tasks the caller may see: all of them for cluster administrators, their tenant's otherwise.
async fn visible_tasks(state: &AppState, principal: &Principal) -> ApiResult<Vec<Task>> {
    let tasks = state.store.live_tasks().await?;
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
                let allowed = state.store.get_job(principal.scope(), job).await.is_ok();
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

fn node_view(state: &AppState, node: Node, tasks: &[Task]) -> NodeView {
    let connected = state
        .runtime
        .as_ref()
        .is_some_and(|r| r.hub.connected().contains_key(&node.name));
    let mut view = NodeView::from(node);
    // Only the leader holds sessions; a follower shows the health the leader recorded.
    let leads = state.runtime.as_ref().is_some_and(|r| r.is_leader());
    if leads && !connected && view.health == "healthy" {
        view.health = "disconnected".to_owned();
    }
    if let Some(runtime) = &state.runtime {
        view.gpu_usage = runtime
            .hub
            .usage(&view.name)
            .into_iter()
            .map(|u| GpuUsageView {
                index: u.index,
                utilization: (u.utilization >= 0.0).then_some(u.utilization),
                memory_used_gb: u.memory_used_gb,
            })
            .collect();
    }
    view.tasks = tasks
        .iter()
        .filter(|t| t.node_name == view.name)
        .cloned()
        .map(TaskView::from)
        .collect();
    view
}

async fn set_cordon(
    state: &AppState,
    principal: &Principal,
    name: &str,
    cordoned: bool,
    draining: bool,
) -> ApiResult<Json<NodeEnvelope>> {
    principal.require_cluster_admin()?;
    let action = match (cordoned, draining) {
        (_, true) => crate::audit::Action::NodeDrain,
        (true, false) => crate::audit::Action::NodeCordon,
        (false, false) => crate::audit::Action::NodeUncordon,
    };
    let audit = crate::audit::event(principal, action, name, "");
    let node = state
        .store
        .set_node_cordon(name, cordoned, draining, &audit)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no node `{name}`")))?;
    tracing::info!(node.name = name, cordoned, draining, user.id = %principal.user.id, "node schedulability changed");
    state.wake_scheduler();
    Ok(Json(NodeEnvelope {
        node: node_view(state, node, &visible_tasks(state, principal).await?),
    }))
}

/// Cordon a node: it takes no new tasks; what runs there keeps running.
#[utoipa::path(
    post, path = "/api/v1/nodes/{name}/cordon", tag = "nodes",
    params(("name" = String, Path)),
    responses((status = 200, body = NodeEnvelope), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn cordon(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeEnvelope>> {
    set_cordon(&state, &principal, &name, true, false).await
}

/// Uncordon a node: it takes new tasks again (and stops draining).
#[utoipa::path(
    post, path = "/api/v1/nodes/{name}/uncordon", tag = "nodes",
    params(("name" = String, Path)),
    responses((status = 200, body = NodeEnvelope), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn uncordon(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeEnvelope>> {
    set_cordon(&state, &principal, &name, false, false).await
}

/// Drain a node: cordon it and move every job running there elsewhere, each through a checkpoint
/// (its tasks get SIGTERM and the grace period to write one). Done when the node lists no tasks.
#[utoipa::path(
    post, path = "/api/v1/nodes/{name}/drain", tag = "nodes",
    params(("name" = String, Path)),
    responses((status = 200, body = NodeEnvelope), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn drain(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeEnvelope>> {
    set_cordon(&state, &principal, &name, true, true).await
}

/// Get a node by name.
#[utoipa::path(
    get, path = "/api/v1/nodes/{name}", tag = "nodes",
    params(("name" = String, Path)),
    responses((status = 200, body = NodeEnvelope), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeEnvelope>> {
    let node = state
        .store
        .get_node(&name)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no node `{name}`")))?;
    Ok(Json(NodeEnvelope {
        node: node_view(&state, node, &visible_tasks(&state, &principal).await?),
    }))
}
