//! `/api/v1/nodes`: the GPU nodes executors report, with their live tasks; cluster administrators
//! cordon (no new tasks), uncordon and drain (move every task away through a checkpoint) them.

use crate::error::{ApiResult, ErrorBody};
use crate::extract::PathParam;
use crate::paging::ListMeta;
use crate::run_views::TaskView;
use crate::state::AppState;
use crate::views::{GpuUsageView, HostUsageView, NodeEnvelope, NodeList, NodeView, UsagePointView};
use axum::Json;
use axum::extract::State;
use drover_service::auth::Principal;
use drover_service::nodes::{self, LiveNode, Schedulability};

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
    let nodes = nodes::list(&state, &principal).await?;
    Ok(Json(NodeList {
        nodes: nodes.into_iter().map(node_view).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

/// A node as the API shows it.
pub fn node_view(live: LiveNode) -> NodeView {
    let mut view = NodeView::from(live.node);
    if live.disconnected && view.health == "healthy" {
        view.health = "disconnected".to_owned();
    }
    view.gpu_usage = live
        .gpu_usage
        .into_iter()
        .map(|u| GpuUsageView {
            index: u.index,
            utilization: (u.utilization >= 0.0).then_some(u.utilization),
            memory_used_gb: u.memory_used_gb,
        })
        .collect();
    view.host_usage = live.host_usage.map(|h| HostUsageView {
        cpu_utilization: (h.cpu_utilization >= 0.0).then_some(h.cpu_utilization),
        memory_used_gb: h.memory_used_gb,
        memory_total_gb: h.memory_total_gb,
    });
    view.history = live
        .history
        .iter()
        .map(|p| UsagePointView {
            at: p.at,
            cpu_utilization: p.cpu,
            memory_used_gb: p.memory_used_gb,
            gpu_utilization: p.gpu,
            gpu_memory_used_gb: p.gpu_memory_used_gb,
        })
        .collect();
    view.tasks = live.tasks.into_iter().map(TaskView::from).collect();
    view
}

async fn set_cordon(
    state: &AppState,
    principal: &Principal,
    name: &str,
    change: Schedulability,
) -> ApiResult<Json<NodeEnvelope>> {
    let node = nodes::set_schedulability(state, principal, name, change).await?;
    Ok(Json(NodeEnvelope {
        node: node_view(node),
    }))
}

/// Cordon a node: it takes no new tasks; what runs there keeps running.
#[utoipa::path(
    post, path = "/api/v1/nodes/{name}/cordon", tag = "nodes",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._-]{1,253}$", description = "The node's name")),
    responses((status = 200, body = NodeEnvelope), (status = 403, description = "Anyone but a cluster administrator", body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn cordon(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeEnvelope>> {
    set_cordon(&state, &principal, &name, Schedulability::Cordon).await
}

/// Uncordon a node: it takes new tasks again (and stops draining).
#[utoipa::path(
    post, path = "/api/v1/nodes/{name}/uncordon", tag = "nodes",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._-]{1,253}$", description = "The node's name")),
    responses((status = 200, body = NodeEnvelope), (status = 403, description = "Anyone but a cluster administrator", body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn uncordon(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeEnvelope>> {
    set_cordon(&state, &principal, &name, Schedulability::Uncordon).await
}

/// Drain a node: cordon it and move every job running there elsewhere, each through a checkpoint
/// (its tasks get SIGTERM and the grace period to write one). Done when the node lists no tasks.
#[utoipa::path(
    post, path = "/api/v1/nodes/{name}/drain", tag = "nodes",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._-]{1,253}$", description = "The node's name")),
    responses((status = 200, body = NodeEnvelope), (status = 403, description = "Anyone but a cluster administrator", body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn drain(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeEnvelope>> {
    set_cordon(&state, &principal, &name, Schedulability::Drain).await
}

/// Get a node by name.
#[utoipa::path(
    get, path = "/api/v1/nodes/{name}", tag = "nodes",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._-]{1,253}$", description = "The node's name")),
    responses((status = 200, body = NodeEnvelope), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeEnvelope>> {
    let node = nodes::get(&state, &principal, &name).await?;
    Ok(Json(NodeEnvelope {
        node: node_view(node),
    }))
}
