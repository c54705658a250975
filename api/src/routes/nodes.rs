//! `/api/v1/nodes`: the GPU nodes executors report (read-only until the executor issue adds cordon and
//! drain).

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::PathParam;
use crate::state::AppState;
use crate::views::{ListMeta, NodeEnvelope, NodeList, NodeView};
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
    _principal: Principal,
) -> ApiResult<Json<NodeList>> {
    let nodes = state.store.list_nodes().await?;
    Ok(Json(NodeList {
        nodes: nodes.into_iter().map(NodeView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
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
    _principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeEnvelope>> {
    let node = state
        .store
        .get_node(&name)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no node `{name}`")))?;
    Ok(Json(NodeEnvelope { node: node.into() }))
}
