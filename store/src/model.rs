//! Rows of the store, as the rest of the control plane sees them.

use chrono::{DateTime, Utc};
use drover_core::DroverJob;
use drover_core::spec::JobType;
use drover_core::{JobId, JobState, ReasonCode, Role, TenantId, TokenId, UserId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Quota {
    /// GPUs the tenant can always get, of any model.
    pub guaranteed_gpus: u32,
    /// GPUs the tenant may hold at most, borrowed capacity included; absent means no limit.
    pub max_gpus: Option<u32>,
    /// Per GPU model (a flavour, in Kueue's words): how many of `guaranteed_gpus` are of that
    /// model, how many of it the tenant may hold, and how much of its unused guarantee of it others
    /// may borrow. Empty: the quota is of GPUs of any model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flavours: Vec<FlavourQuota>,
}

/// A tenant's quota of one GPU model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FlavourQuota {
    /// The model, as nodes report it or a word of it, case aside (`v100` matches `Tesla V100-SXM2`).
    pub gpu_model: String,
    /// GPUs of this model the tenant is guaranteed (Kueue's nominal quota): part of the tenant's
    /// `guaranteed_gpus`. Others borrow them while it does not use them, and give them back.
    #[serde(default)]
    pub guaranteed_gpus: u32,
    /// GPUs of this model the tenant may hold at most (nominal quota plus borrowing limit); absent
    /// means no limit but the tenant's own.
    #[serde(default)]
    pub max_gpus: Option<u32>,
    /// Of this model's guarantee, how many GPUs others may borrow while the tenant does not use them
    /// (Kueue's lending limit); the rest stay idle for it. Absent: all of them.
    #[serde(default)]
    pub lending_limit: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTenant {
    pub name: String,
    pub quota: Quota,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
    pub quota: Quota,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUser {
    pub tenant_id: TenantId,
    pub name: String,
    pub role: Role,
    pub cluster_admin: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: UserId,
    pub tenant_id: TenantId,
    pub tenant_name: String,
    pub name: String,
    pub role: Role,
    pub cluster_admin: bool,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    pub user_id: UserId,
    pub name: String,
    pub token_hash: [u8; 32],
    pub prefix: String,
    pub expires_at: Option<DateTime<Utc>>,
    /// The token it is minted with, if any: revoking that one revokes this one too.
    pub parent: Option<TokenId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: TokenId,
    pub user_id: UserId,
    pub name: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A token with the user it belongs to and the user's tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthRecord {
    pub token: TokenInfo,
    pub user: User,
    pub tenant_quota: Quota,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub id: JobId,
    pub tenant_id: TenantId,
    /// The tenant's name, as the caller authenticated it (echoed in the returned job, not stored).
    pub tenant_name: String,
    pub name: String,
    pub job_type: JobType,
    pub priority: i32,
    pub max_gpus: i64,
    pub labels: BTreeMap<String, String>,
    /// The whole `DroverJob`, defaults filled in.
    pub document: serde_json::Value,
    pub submitted_by: UserId,
    pub idempotency_key: Option<String>,
    /// SHA-256 of the request body, to tell a retry from a different request under the same key.
    pub request_hash: Option<[u8; 32]>,
    pub created_at: DateTime<Utc>,
}

impl NewJob {
    /// The job as stored: queued, generation 0, its submission as its last change.
    pub fn queued(&self) -> Job {
        Job {
            id: self.id,
            tenant_id: self.tenant_id,
            tenant_name: self.tenant_name.clone(),
            name: self.name.clone(),
            job_type: self.job_type,
            state: JobState::Queued,
            reason: ReasonCode::Submitted,
            message: "submitted".to_owned(),
            priority: self.priority,
            max_gpus: self.max_gpus,
            labels: self.labels.clone(),
            document: Some(std::sync::Arc::new(self.document.clone())),
            submitted_by: self.submitted_by,
            created_at: self.created_at,
            updated_at: self.created_at,
            generation: 0,
            restarts: 0,
            document_version: 0,
        }
    }
}

/// A waiting job as the queue lists it: the columns its rows show, read without the rest of the
/// job (thousands are read to rank the queue).
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedRow {
    pub id: JobId,
    pub name: String,
    pub tenant_name: String,
    pub priority: i32,
    pub max_gpus: i64,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: JobId,
    pub tenant_id: TenantId,
    pub tenant_name: String,
    pub name: String,
    pub job_type: JobType,
    pub state: JobState,
    pub reason: ReasonCode,
    pub message: String,
    pub priority: i32,
    pub max_gpus: i64,
    pub labels: BTreeMap<String, String>,
    /// Present on single reads; lists leave it out. Shared: the scheduling loop hands the same
    /// document to every round without copying it.
    pub document: Option<std::sync::Arc<serde_json::Value>>,
    pub submitted_by: UserId,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The generation of the job's current (or last) allocation; 0 before its first start.
    pub generation: u64,
    /// Restarts after task failures so far.
    pub restarts: u32,
    /// Moves when the document is written (a resize; a trigger moves it, whichever binary
    /// writes), not with the job's state: what a parsed document is kept by.
    pub document_version: u64,
}

impl Job {
    /// The job's spec, from its stored document: `None` when the document was not read (lists) or
    /// does not parse (written by a build this one cannot read).
    pub fn spec(&self) -> Option<DroverJob> {
        spec_of(self.document.as_deref()?)
    }
}

/// A stored job document read back as its `DroverJob`, without copying the document; `None` when it
/// does not parse. The one place a stored spec is parsed.
pub fn spec_of(document: &serde_json::Value) -> Option<DroverJob> {
    DroverJob::deserialize(document).ok()
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Any of these states; empty means all.
    pub states: Vec<JobState>,
    /// All of these labels.
    pub labels: BTreeMap<String, String>,
    /// Only jobs whose name contains this (lowercase) text.
    pub name_contains: Option<String>,
    /// Only jobs older than this one (the cursor).
    pub before: Option<JobId>,
    /// Only jobs newer than this one (a cursor back towards the newest); still newest first, the
    /// `limit` nearest it.
    pub after: Option<JobId>,
    /// Oldest first (the queue's order before the policy's); newest first otherwise.
    pub oldest_first: bool,
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    pub id: i64,
    pub job_id: JobId,
    pub from_state: Option<JobState>,
    pub to_state: JobState,
    pub reason: ReasonCode,
    pub message: String,
    pub actor: Option<UserId>,
    pub created_at: DateTime<Utc>,
}

/// A node's taint (effect `NoSchedule`): only jobs that tolerate it run there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Taint {
    pub key: String,
    /// May be empty.
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Gpu {
    pub index: u32,
    pub model: String,
    pub memory_gb: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub id: uuid::Uuid,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub gpus: Vec<Gpu>,
    pub cpus: u32,
    pub memory_gb: u32,
    pub health: String,
    pub cordoned: bool,
    /// Cordoned, and its tasks are being moved away.
    pub draining: bool,
    /// Where its GPUs come from: `nvidia`, `slots` (CPU-only) or `demo`.
    pub gpu_source: String,
    /// How its executor isolates tasks: `runc` (a sandbox each), `pod` (a Kubernetes Pod each),
    /// `none` (unconfined), or empty (an executor older than sandboxes).
    pub isolation: String,
    /// Its executor runs tasks in OCI images (`spec.command.image`): sandboxes with skopeo and
    /// umoci, or Kubernetes Pods. Only such nodes receive jobs with an image.
    pub runs_images: bool,
    /// Its taints: only jobs that tolerate every one run there.
    pub taints: Vec<Taint>,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// The result of a create that may find an earlier twin.
#[derive(Debug, Clone)]
pub struct Created<T> {
    pub value: T,
    pub created: bool,
}

/// A state change requested of [`Store::transition_job`].
#[derive(Debug, Clone)]
pub struct StateChange {
    pub to: JobState,
    pub reason: ReasonCode,
    pub message: String,
    pub actor: Option<UserId>,
}
