//! Kubernetes nodes and Drover nodes of the same name (the executor DaemonSet registers each executor
//! with its pod's node name): cordoning a node in Kubernetes (`kubectl cordon`, or the first step of
//! `kubectl drain`) cordons the Drover node, so the scheduler places nothing new there; uncordoning
//! it in Kubernetes lifts a cordon the controller set. Node labels reach Drover through the executor
//! ([`node_labels`]), which registers with them.

use super::controller::Context;
use crate::store::StoreError;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Follows Kubernetes' nodes until the watch ends (it retries with backoff on its own).
pub async fn sync(ctx: Arc<Context>) {
    let api: Api<Node> = Api::all(ctx.client.clone());
    // The nodes this controller cordoned: only those does an uncordon in Kubernetes release.
    let mut cordoned_here: HashSet<String> = HashSet::new();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let mut stream = std::pin::pin!(stream);
    loop {
        match stream.try_next().await {
            Ok(Some(node)) => {
                if let Err(err) = apply(&ctx, &node, &mut cordoned_here).await {
                    tracing::warn!(node = %node.name_any(), error = %err, "cannot sync a Kubernetes node's cordon");
                }
            }
            Ok(None) => return,
            Err(err) => tracing::warn!(error = %err, "watching Kubernetes nodes"),
        }
    }
}

async fn apply(
    ctx: &Context,
    node: &Node,
    cordoned_here: &mut HashSet<String>,
) -> Result<(), StoreError> {
    let name = node.name_any();
    let unschedulable = node
        .spec
        .as_ref()
        .and_then(|spec| spec.unschedulable)
        .unwrap_or(false);
    let store = ctx.state.store.as_ref();
    let drover = match store.get_node(&name).await {
        Ok(node) => node,
        // Not a Drover node (no executor there).
        Err(StoreError::NotFound) => return Ok(()),
        Err(err) => return Err(err),
    };
    if unschedulable && !drover.cordoned {
        store.set_node_cordon(&name, true, drover.draining).await?;
        cordoned_here.insert(name.clone());
        tracing::info!(node = %name, "cordoned in Kubernetes: cordoned in Drover");
        ctx.state.wake_scheduler();
    } else if !unschedulable && drover.cordoned && cordoned_here.remove(&name) {
        store.set_node_cordon(&name, false, false).await?;
        tracing::info!(node = %name, "uncordoned in Kubernetes: uncordoned in Drover");
        ctx.state.wake_scheduler();
    }
    Ok(())
}

/// The labels of Kubernetes node `name`, for an executor to register with (in-cluster config).
pub async fn node_labels(name: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let client = Client::try_default().await?;
    let api: Api<Node> = Api::all(client);
    let node = api.get(name).await?;
    Ok(node.labels().clone())
}
