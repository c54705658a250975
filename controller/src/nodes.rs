//! Kubernetes nodes and Drover nodes of the same name (the executor DaemonSet registers each executor
//! with its pod's node name): cordoning a node in Kubernetes (`kubectl cordon`, or the first step of
//! `kubectl drain`) cordons the Drover node, so the scheduler places nothing new there; uncordoning
//! it in Kubernetes lifts a cordon the controller set. Both go to the audit log under the actor
//! `kubernetes`, in one transaction with the change, and that log is how a new leader knows which cordons were the controller's. Node
//! labels and scheduling taints reach Drover through the executor ([`node_description`]), which
//! registers with them: a task Pod is bound to its node by name, past kube-scheduler's taint check,
//! so Drover's scheduler must honour the node's taints itself.

use super::context::{CONTROLLER_USER, Context};
use drover_store::audit::Action;
use drover_store::{NewAuditEvent, Store, StoreError};
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
    // The nodes the controller cordoned: only those does an uncordon in Kubernetes release.
    let mut cordoned_here = match cordoned_by_controller(ctx.service.store.as_ref()).await {
        Ok(nodes) => nodes,
        Err(err) => {
            tracing::warn!(error = %err, "cannot read which nodes the controller cordoned; their uncordons in Kubernetes will not lift them");
            HashSet::new()
        }
    };
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
    let store = ctx.service.store.as_ref();
    let drover = match store.get_node(&name).await {
        Ok(node) => node,
        // Not a Drover node (no executor there).
        Err(StoreError::NotFound) => return Ok(()),
        Err(err) => return Err(err),
    };
    if unschedulable && !drover.cordoned {
        let audit = event(
            Action::NodeCordon,
            &name,
            "the Kubernetes node is unschedulable",
        );
        store
            .set_node_cordon(&name, true, drover.draining, &audit)
            .await?;
        cordoned_here.insert(name.clone());
        tracing::info!(node = %name, "cordoned in Kubernetes: cordoned in Drover");
        ctx.service.wake_scheduler();
    } else if !unschedulable && drover.cordoned && cordoned_here.contains(&name) {
        let audit = event(
            Action::NodeUncordon,
            &name,
            "the Kubernetes node is schedulable again",
        );
        store.set_node_cordon(&name, false, false, &audit).await?;
        cordoned_here.remove(&name);
        tracing::info!(node = %name, "uncordoned in Kubernetes: uncordoned in Drover");
        ctx.service.wake_scheduler();
    }
    Ok(())
}

/// Audit log entries read, newest first, to find the controller's standing cordons.
const AUDIT_LOOKBACK: u32 = 20_000;

/// The nodes whose last cordon, uncordon or drain in the audit log was the controller's cordon.
async fn cordoned_by_controller(store: &dyn Store) -> Result<HashSet<String>, StoreError> {
    let mut decided = HashSet::new();
    let mut cordoned = HashSet::new();
    let mut before = None;
    let mut read = 0;
    while read < AUDIT_LOOKBACK {
        let page = store.list_audit(before, 500).await?;
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        read += page.len() as u32;
        for event in &page {
            let about_cordon = [Action::NodeCordon, Action::NodeUncordon, Action::NodeDrain]
                .iter()
                .any(|a| a.as_str() == event.action);
            if about_cordon && decided.insert(event.target.clone()) {
                let ours = event.actor_id.is_none() && event.actor == CONTROLLER_USER;
                if ours && event.action == Action::NodeCordon.as_str() {
                    cordoned.insert(event.target.clone());
                }
            }
        }
    }
    Ok(cordoned)
}

/// The controller's audit event for a cordon it sets or lifts (recorded with the change).
fn event(action: Action, node: &str, detail: &str) -> NewAuditEvent {
    NewAuditEvent {
        actor_id: None,
        actor: CONTROLLER_USER.to_owned(),
        tenant_id: None,
        action: action.as_str(),
        target: node.to_owned(),
        detail: detail.to_owned(),
    }
}

/// The label prefixes an executor takes from its Kubernetes node: the well-known ones and the GPU's
/// (GPU feature discovery's `nvidia.com/gpu.product`, `.memory`, ...), plus every label without a
/// prefix. Node feature discovery alone adds a hundred more, past the 64 labels a node may have.
const NODE_LABEL_PREFIXES: &[&str] = &[
    "kubernetes.io/",
    "node.kubernetes.io/",
    "topology.kubernetes.io/",
    "node-role.kubernetes.io/",
    "nvidia.com/gpu.",
    "nvidia.com/cuda.",
];

/// What of Kubernetes node `name` an executor registers with (in-cluster config): its labels with a
/// prefix in [`NODE_LABEL_PREFIXES`] or none, at most `room` of them, and its taints that keep Pods
/// off it (`NoSchedule`, `NoExecute`) as `(key, value)`.
pub async fn node_description(
    name: &str,
    room: usize,
) -> kube::Result<(BTreeMap<String, String>, Vec<(String, String)>)> {
    let client = Client::try_default().await?;
    let api: Api<Node> = Api::all(client);
    let node = api.get(name).await?;
    let taints = scheduling_taints(
        node.spec
            .as_ref()
            .and_then(|spec| spec.taints.as_deref())
            .unwrap_or_default(),
    );
    let (kept, skipped) = select_labels(node.labels(), room);
    if skipped > 0 {
        tracing::info!(
            node = name,
            kept = kept.len(),
            skipped,
            "took the node's well-known and GPU labels; skipped the rest"
        );
    }
    Ok((kept, taints))
}

/// The taints that keep Pods off a node (`NoSchedule`, `NoExecute`; not the soft
/// `PreferNoSchedule`), as Drover's `(key, value)` taints.
fn scheduling_taints(taints: &[k8s_openapi::api::core::v1::Taint]) -> Vec<(String, String)> {
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .map(|t| (t.key.clone(), t.value.clone().unwrap_or_default()))
        .collect()
}

fn select_labels(
    labels: &BTreeMap<String, String>,
    room: usize,
) -> (BTreeMap<String, String>, usize) {
    let mut kept = BTreeMap::new();
    for (key, value) in labels {
        let wanted = !key.contains('/') || NODE_LABEL_PREFIXES.iter().any(|p| key.starts_with(p));
        if wanted && kept.len() < room {
            kept.insert(key.clone(), value.clone());
        }
    }
    let skipped = labels.len() - kept.len();
    (kept, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_taints_that_keep_pods_off_are_taken() {
        let taint =
            |key: &str, value: Option<&str>, effect: &str| k8s_openapi::api::core::v1::Taint {
                key: key.to_owned(),
                value: value.map(str::to_owned),
                effect: effect.to_owned(),
                time_added: None,
            };
        let taints = [
            taint("nvidia.com/gpu", None, "NoSchedule"),
            taint("dedicated", Some("vision"), "NoExecute"),
            taint("spot", Some("true"), "PreferNoSchedule"),
        ];
        assert_eq!(
            scheduling_taints(&taints),
            vec![
                ("nvidia.com/gpu".to_owned(), String::new()),
                ("dedicated".to_owned(), "vision".to_owned())
            ]
        );
    }

    #[test]
    fn only_well_known_and_gpu_labels_are_taken_within_the_room_left() {
        let mut labels: BTreeMap<String, String> = (0..120)
            .map(|i| {
                (
                    format!("feature.node.kubernetes.io/cpu-{i}"),
                    "true".to_owned(),
                )
            })
            .collect();
        labels.insert("kubernetes.io/hostname".into(), "gpu-1".into());
        labels.insert(
            "nvidia.com/gpu.product".into(),
            "NVIDIA-H100-80GB-HBM3".into(),
        );
        labels.insert("pool".into(), "a".into());
        let (kept, skipped) = select_labels(&labels, 64);
        assert_eq!(
            kept.keys().map(String::as_str).collect::<Vec<_>>(),
            ["kubernetes.io/hostname", "nvidia.com/gpu.product", "pool"]
        );
        assert_eq!(skipped, 120);
        assert_eq!(select_labels(&labels, 1).0.len(), 1);
    }
}
