//! What the API returns: one item as `{"job": …}`, lists as `{"jobs": […], "meta": {…}}`.

use crate::paging::ListMeta;
use chrono::{DateTime, Utc};
use drover_core::spec::JobType;
use drover_core::{JobState, ReasonCode, Role};
use drover_service::models::JobModels;
use drover_service::queue::QueuePosition;
use drover_store::{Gpu, Job, JobEvent, Node, Quota, Tenant, TokenInfo, User};
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Serialize, ToSchema)]
pub struct JobView {
    pub id: Uuid,
    pub tenant: String,
    pub name: String,
    #[serde(rename = "type")]
    pub job_type: JobType,
    pub state: JobState,
    pub reason: ReasonCode,
    pub message: String,
    pub priority: i32,
    /// GPUs at the job's largest shape.
    pub max_gpus: i64,
    pub labels: BTreeMap<String, String>,
    pub submitted_by: Uuid,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The generation of its current (or last) allocation; every (re)start makes a new one.
    pub generation: u64,
    /// Restarts after task failures so far.
    pub restarts: u32,
    /// The whole `DroverJob` as stored, defaults filled in; only on single reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub spec: Option<serde_json::Value>,
    /// Its speed and convergence models fitted to what it reported, and the remaining time they
    /// predict; only on single reads of a job that has reported a step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<JobModels>,
    /// Its place in the queue and predicted start; only on single reads of a queued job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueuePosition>,
}

impl From<Job> for JobView {
    fn from(job: Job) -> Self {
        JobView {
            id: job.id.0,
            tenant: job.tenant_name,
            name: job.name,
            job_type: job.job_type,
            state: job.state,
            reason: job.reason,
            message: job.message,
            priority: job.priority,
            max_gpus: job.max_gpus,
            labels: job.labels,
            submitted_by: job.submitted_by.0,
            created_at: job.created_at,
            updated_at: job.updated_at,
            generation: job.generation,
            restarts: job.restarts,
            spec: job.document.map(std::sync::Arc::unwrap_or_clone),
            model: None,
            queue: None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JobEnvelope {
    pub job: JobView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JobList {
    pub jobs: Vec<JobView>,
    pub meta: JobListMeta,
}

/// Where a page of jobs lies in the list, and how long the list is.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobListMeta {
    /// Pass as `cursor` for the next page (older jobs); absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Pass as `cursor` for the page before (newer jobs); absent on the first page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prev_cursor: Option<String>,
    /// Jobs that match the filters in all, counted up to 10,000.
    pub total: u64,
    /// `false` when `total` is the counting's ceiling: at least that many match.
    pub total_exact: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    pub id: i64,
    pub job_id: Uuid,
    /// Absent for the submission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<JobState>,
    pub to: JobState,
    pub reason: ReasonCode,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl From<JobEvent> for EventView {
    fn from(event: JobEvent) -> Self {
        EventView {
            id: event.id,
            job_id: event.job_id.0,
            from: event.from_state,
            to: event.to_state,
            reason: event.reason,
            message: event.message,
            actor: event.actor.map(|a| a.0),
            created_at: event.created_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventList {
    pub events: Vec<EventView>,
    pub meta: ListMeta,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantView {
    pub id: Uuid,
    pub name: String,
    pub quota: Quota,
    pub created_at: DateTime<Utc>,
}

impl From<Tenant> for TenantView {
    fn from(tenant: Tenant) -> Self {
        TenantView {
            id: tenant.id.0,
            name: tenant.name,
            quota: tenant.quota,
            created_at: tenant.created_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantEnvelope {
    pub tenant: TenantView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantList {
    pub tenants: Vec<TenantView>,
    pub meta: ListMeta,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserView {
    pub id: Uuid,
    pub name: String,
    pub tenant: String,
    pub role: Role,
    pub cluster_admin: bool,
    pub created_at: DateTime<Utc>,
}

impl From<User> for UserView {
    fn from(user: User) -> Self {
        UserView {
            id: user.id.0,
            name: user.name,
            tenant: user.tenant_name,
            role: user.role,
            cluster_admin: user.cluster_admin,
            created_at: user.created_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserEnvelope {
    pub user: UserView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserList {
    pub users: Vec<UserView>,
    pub meta: ListMeta,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    pub user: UserView,
    pub quota: Quota,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TokenView {
    pub id: Uuid,
    pub user_id: Uuid,
    pub name: String,
    /// The first characters of the token, to tell tokens apart.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<TokenInfo> for TokenView {
    fn from(token: TokenInfo) -> Self {
        TokenView {
            id: token.id.0,
            user_id: token.user_id.0,
            name: token.name,
            prefix: token.prefix,
            created_at: token.created_at,
            expires_at: token.expires_at,
            revoked_at: token.revoked_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TokenEnvelope {
    pub token: TokenView,
}

/// A new token: `secret` is shown this once and never again.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenCreated {
    pub token: TokenView,
    pub secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenView>,
    pub meta: ListMeta,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NodeView {
    pub id: Uuid,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub gpus: Vec<Gpu>,
    pub cpus: u32,
    pub memory_gb: u32,
    /// `healthy`, `disconnected` (its executor's stream is down) or `lost` (no heartbeat within the
    /// timeout: its jobs were sent back to the queue).
    pub health: String,
    /// Takes no new tasks.
    pub cordoned: bool,
    /// Cordoned, and its tasks are being moved away through checkpoints.
    pub draining: bool,
    /// Where its GPUs come from: `nvidia`, `slots` (CPU-only) or `demo`.
    pub gpu_source: String,
    /// How its executor isolates tasks: `runc` (each in a sandbox of its own), `pod` (each a
    /// Kubernetes Pod of its own), `none` (unconfined: started with `--no-sandbox`), or empty (an
    /// executor older than sandboxes).
    pub isolation: String,
    /// Its executor runs tasks in OCI images (`spec.command.image`); jobs with an image go only to
    /// such nodes.
    pub runs_images: bool,
    /// Its taints (effect `NoSchedule`): only jobs whose `tolerations` tolerate every one run there.
    pub taints: Vec<drover_store::Taint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// Tasks on the node that have not exited.
    pub tasks: Vec<crate::run_views::TaskView>,
    /// Per GPU, from the executor's last heartbeat (NVML); empty when unknown (CPU slots, demo GPUs).
    pub gpu_usage: Vec<GpuUsageView>,
    /// The host's CPU and memory use from the executor's last heartbeat (the OS's); absent when
    /// unknown (an older executor, or a replica that does not lead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_usage: Option<HostUsageView>,
    /// Recent use, oldest first: a point every 10 s at most, the last 15 minutes, from the leader's
    /// memory (empty on a follower and after a restart).
    pub history: Vec<UsagePointView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HostUsageView {
    /// Busy share of all CPUs since the previous heartbeat, 0 to 1; absent when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_utilization: Option<f64>,
    pub memory_used_gb: f64,
    pub memory_total_gb: f64,
}

/// A node's use at one moment; each value absent when unknown.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsagePointView {
    pub at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_utilization: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_used_gb: Option<f64>,
    /// Mean of its GPUs' utilisation, 0 to 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_utilization: Option<f64>,
    /// Summed over its GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_memory_used_gb: Option<f64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GpuUsageView {
    pub index: u32,
    /// 0 to 1; absent when NVML could not tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization: Option<f64>,
    pub memory_used_gb: f64,
}

impl From<Node> for NodeView {
    fn from(node: Node) -> Self {
        NodeView {
            id: node.id,
            name: node.name,
            labels: node.labels,
            gpus: node.gpus,
            cpus: node.cpus,
            memory_gb: node.memory_gb,
            health: node.health,
            cordoned: node.cordoned,
            draining: node.draining,
            gpu_source: node.gpu_source,
            isolation: node.isolation,
            runs_images: node.runs_images,
            taints: node.taints,
            last_heartbeat_at: node.last_heartbeat_at,
            created_at: node.created_at,
            tasks: Vec::new(),
            gpu_usage: Vec::new(),
            host_usage: None,
            history: Vec::new(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NodeEnvelope {
    pub node: NodeView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NodeList {
    pub nodes: Vec<NodeView>,
    pub meta: ListMeta,
}

/// An enrolment token as listings show it (never the secret).
#[derive(Debug, Serialize, ToSchema)]
pub struct EnrollmentTokenView {
    pub id: Uuid,
    pub name: String,
    /// The first characters of the token, to tell tokens apart.
    pub prefix: String,
    /// Executors that may still enrol with it.
    pub uses_left: u32,
    /// The one node it may enrol, when minted for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<drover_store::EnrollmentToken> for EnrollmentTokenView {
    fn from(token: drover_store::EnrollmentToken) -> Self {
        EnrollmentTokenView {
            id: token.id,
            name: token.name,
            prefix: token.prefix,
            uses_left: token.uses_left,
            node: token.node_name,
            created_by: token.created_by.map(|u| u.0),
            created_at: token.created_at,
            expires_at: token.expires_at,
            revoked_at: token.revoked_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EnrollmentTokenEnvelope {
    pub enrollment_token: EnrollmentTokenView,
}

/// A new enrolment token: `secret` is shown this once and never again.
#[derive(Debug, Serialize, ToSchema)]
pub struct EnrollmentTokenCreated {
    pub enrollment_token: EnrollmentTokenView,
    pub secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EnrollmentTokenList {
    pub enrollment_tokens: Vec<EnrollmentTokenView>,
    pub meta: ListMeta,
}

/// The certificate authority executors trust the gateway by.
#[derive(Debug, Serialize, ToSchema)]
pub struct GatewayAuthority {
    /// The authority's certificate, PEM: an executor's `--gateway-ca` file.
    pub certificate: String,
    /// `sha256:` and the hex digest of its DER: an executor's `--gateway-ca-hash`.
    pub pin: String,
}

/// What revoking a node's credential did.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeRevoked {
    pub node: String,
    /// Live credentials revoked (0 when the node had none).
    pub revoked_credentials: u64,
    /// Whether its executor was connected (its session was ended).
    pub disconnected: bool,
}
