//! The Kubernetes objects of a task run as a Pod: the Pod itself (bound to this node, in its job's
//! tenant namespace, with the allocation as its requests and limits, the restricted Pod Security
//! Standard, no service-account token), the headless Service that gives each task of a job a stable
//! DNS name (the address its peers reach it at), and the NetworkPolicy that admits to the job's
//! Pods only the job's own Pods. Pure functions of what the task is, built on `k8s-openapi`'s types,
//! so every field is one the API knows.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, Pod, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, SecurityContext, Service, ServicePort, ServiceSpec,
    Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use std::collections::BTreeMap;

/// The port every task listens on inside its Pod (each Pod has its own address).
pub const TASK_PORT: u16 = 29400;
/// Who made the objects: the executor's label selector finds its own by it.
pub const MANAGED_BY: &str = "drover-executor";

/// One task, as its Pod is made of it.
#[derive(Debug, Clone)]
pub struct TaskPod {
    pub namespace: String,
    pub node: String,
    pub job_id: String,
    pub generation: u64,
    pub role: String,
    pub index: u32,
    pub image: String,
    /// The container's command and arguments.
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    /// An absolute working directory, or none (the image's).
    pub workdir: Option<String>,
    pub cpus: u32,
    pub memory_limit_bytes: u64,
    pub gpus: u32,
    /// The user (and group) the container runs as: not root.
    pub run_as: i64,
    /// The checkpoint storage's volume source (JSON, as in a Pod's `volumes`) and where it is mounted
    /// (the path the server names).
    pub checkpoints: Option<(serde_json::Value, String)>,
    pub grace_s: i64,
}

/// The job's Service: `drover-<job id>` (headless).
pub fn service_name(job_id: &str) -> String {
    format!("drover-{}", job_id.to_ascii_lowercase())
}

/// A task's Pod: `d-<job id>-g<generation>-<role>-<index>`, at most 63 characters (a DNS label, so
/// the Pod's host name too).
pub fn pod_name(job_id: &str, generation: u64, role: &str, index: u32) -> String {
    let name = format!(
        "d-{}-g{generation}-{}-{index}",
        job_id.to_ascii_lowercase(),
        if role == "ps" { "ps" } else { "w" }
    );
    name.chars().take(63).collect()
}

/// Where a task's peers reach it: its Pod's name under the job's headless Service.
pub fn address(namespace: &str, job_id: &str, generation: u64, role: &str, index: u32) -> String {
    format!(
        "{}.{}.{namespace}.svc:{TASK_PORT}",
        pod_name(job_id, generation, role, index),
        service_name(job_id)
    )
}

fn labels(task: &TaskPod) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_owned(),
            MANAGED_BY.to_owned(),
        ),
        ("drover.dev/job".to_owned(), task.job_id.clone()),
        (
            "drover.dev/generation".to_owned(),
            task.generation.to_string(),
        ),
        ("drover.dev/role".to_owned(), task.role.clone()),
        ("drover.dev/index".to_owned(), task.index.to_string()),
        ("drover.dev/node".to_owned(), node_label(&task.node)),
    ])
}

/// A node name as a label value (at most 63 characters of `[A-Za-z0-9._-]`).
pub fn node_label(node: &str) -> String {
    node.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect()
}

fn quantities(task: &TaskPod) -> BTreeMap<String, Quantity> {
    let mut amounts = BTreeMap::new();
    if task.cpus > 0 {
        amounts.insert("cpu".to_owned(), Quantity(task.cpus.to_string()));
    }
    if task.memory_limit_bytes > 0 {
        amounts.insert(
            "memory".to_owned(),
            Quantity(task.memory_limit_bytes.to_string()),
        );
    }
    if task.gpus > 0 {
        amounts.insert("nvidia.com/gpu".to_owned(), Quantity(task.gpus.to_string()));
    }
    amounts
}

/// The task's Pod: bound to this node (the scheduler placed it), the restricted Pod Security
/// Standard (not root, no privilege escalation, no capability, the runtime's default seccomp
/// profile, a read-only root with a private `/tmp`), no service-account token, requests equal to
/// limits (the allocation).
pub fn pod(task: &TaskPod) -> Pod {
    let name = pod_name(&task.job_id, task.generation, &task.role, task.index);
    let mut mounts = vec![VolumeMount {
        name: "tmp".to_owned(),
        mount_path: "/tmp".to_owned(),
        ..VolumeMount::default()
    }];
    let scratch =
        (task.memory_limit_bytes > 0).then(|| Quantity(task.memory_limit_bytes.to_string()));
    let mut volumes = vec![Volume {
        name: "tmp".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: scratch,
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }];
    if let Some((source, path)) = &task.checkpoints
        && let Some(volume) = checkpoint_volume(source)
    {
        mounts.push(VolumeMount {
            name: "checkpoints".to_owned(),
            mount_path: path.clone(),
            ..VolumeMount::default()
        });
        volumes.push(volume);
    }
    let container = Container {
        name: "task".to_owned(),
        image: Some(task.image.clone()),
        command: Some(task.command.clone()),
        working_dir: task.workdir.clone(),
        env: Some(
            task.env
                .iter()
                .map(|(name, value)| EnvVar {
                    name: name.clone(),
                    value: Some(value.clone()),
                    ..EnvVar::default()
                })
                .collect(),
        ),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(task)),
            limits: Some(quantities(task)),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                ..Capabilities::default()
            }),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(task.run_as),
            run_as_group: Some(task.run_as),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                ..SeccompProfile::default()
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(task.namespace.clone()),
            labels: Some(labels(task)),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(task.node.clone()),
            hostname: Some(name),
            subdomain: Some(service_name(&task.job_id)),
            restart_policy: Some("Never".to_owned()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(task.grace_s),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(task.run_as),
                run_as_group: Some(task.run_as),
                fs_group: Some(task.run_as),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_owned(),
                    ..SeccompProfile::default()
                }),
                ..PodSecurityContext::default()
            }),
            containers: vec![container],
            volumes: Some(volumes),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// The checkpoint volume of a Pod from a volume source (`{"persistentVolumeClaim": {"claimName":
/// …}}`, `{"csi": …}`); `None` when it is not one.
pub fn checkpoint_volume(source: &serde_json::Value) -> Option<Volume> {
    let mut volume = source.as_object()?.clone();
    volume.insert("name".to_owned(), serde_json::json!("checkpoints"));
    let volume: Volume = serde_json::from_value(serde_json::Value::Object(volume)).ok()?;
    // A volume source names exactly one kind of volume.
    let kinds = serde_json::to_value(&volume)
        .ok()?
        .as_object()?
        .keys()
        .filter(|k| *k != "name")
        .count();
    (kinds == 1).then_some(volume)
}

fn job_selector(job_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("drover.dev/job".to_owned(), job_id.to_owned())])
}

/// An owner reference to a task's Pod: the job's Service and NetworkPolicy are owned by every Pod of
/// the job, and go (Kubernetes' garbage collector) with the last of them.
pub fn owned_by(pod: &Pod) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        name: pod.metadata.name.clone()?,
        uid: pod.metadata.uid.clone()?,
        ..OwnerReference::default()
    })
}

/// The name, labels and owner of an object the job's Pods share (its Service, its NetworkPolicy).
fn job_object_meta(namespace: &str, job_id: &str, owner: Option<OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(service_name(job_id)),
        namespace: Some(namespace.to_owned()),
        labels: Some(BTreeMap::from([
            (
                "app.kubernetes.io/managed-by".to_owned(),
                MANAGED_BY.to_owned(),
            ),
            ("drover.dev/job".to_owned(), job_id.to_owned()),
        ])),
        owner_references: owner.map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// The job's headless Service: each of its Pods gets a DNS name (`<pod>.<service>.<namespace>.svc`),
/// published before the Pod is ready (tasks find each other while they start).
pub fn service(namespace: &str, job_id: &str, owner: Option<OwnerReference>) -> Service {
    Service {
        metadata: job_object_meta(namespace, job_id, owner),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            selector: Some(job_selector(job_id)),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("task".to_owned()),
                port: i32::from(TASK_PORT),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The job's NetworkPolicy: its Pods admit connections from the job's own Pods only. (The server
/// never connects to a task: what a task reports goes through its Pod's log, read by the executor.)
pub fn network_policy(
    namespace: &str,
    job_id: &str,
    owner: Option<OwnerReference>,
) -> NetworkPolicy {
    let job = LabelSelector {
        match_labels: Some(job_selector(job_id)),
        ..LabelSelector::default()
    };
    NetworkPolicy {
        metadata: job_object_meta(namespace, job_id, owner),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(job.clone()),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(job),
                    ..NetworkPolicyPeer::default()
                }]),
                ..NetworkPolicyIngressRule::default()
            }]),
            ..NetworkPolicySpec::default()
        }),
    }
}

#[cfg(test)]
mod tests;
