//! What trust adds to the store: enrolment tokens (minted by cluster administrators, spent by
//! executors) and the per-node credentials executors authenticate with afterwards, both kept as SHA-256
//! hashes (the secrets are shown once, to whoever asked for them); and tenant secrets, kept sealed
//! with the server's key (`crate::secrets`), never in the clear.

use super::StoreResult;
use crate::secrets::Sealed;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::{TenantId, UserId};
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEnrollmentToken {
    pub name: String,
    pub token_hash: [u8; 32],
    pub prefix: String,
    /// How many executors may enrol with it.
    pub uses: u32,
    pub created_by: UserId,
    pub expires_at: Option<DateTime<Utc>>,
    /// The one node it may enrol; any node when `None`.
    pub node_name: Option<String>,
}

/// An enrolment token as listings show it: never the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentToken {
    pub id: Uuid,
    pub name: String,
    pub prefix: String,
    pub uses_left: u32,
    pub node_name: Option<String>,
    pub created_by: Option<UserId>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl EnrollmentToken {
    /// Whether an executor could enrol with it at `now`.
    pub fn usable(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.uses_left > 0 && self.expires_at.is_none_or(|e| e > now)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNodeCredential {
    pub node_name: String,
    pub credential_hash: [u8; 32],
    pub prefix: String,
}

/// The credential a node's executor authenticates its sessions with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCredential {
    pub id: Uuid,
    pub node_name: String,
    pub prefix: String,
    /// The enrolment token's name, or `server` for the server's configured one.
    pub enrolled_with: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// What a node advertises, as its credential pins it: how many GPUs, the most memory of any one of
/// them, CPUs and host memory.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeCapacity {
    pub gpus: u32,
    pub gpu_memory_gb: f64,
    pub cpus: u32,
    pub memory_gb: u32,
}

impl NodeCapacity {
    /// What of `self` exceeds `pinned`, in words; `None` when nothing does.
    pub fn beyond(&self, pinned: &NodeCapacity) -> Option<String> {
        let mut over = Vec::new();
        if self.gpus > pinned.gpus {
            over.push(format!(
                "{} GPUs (enrolled with {})",
                self.gpus, pinned.gpus
            ));
        }
        if self.gpu_memory_gb > pinned.gpu_memory_gb + 0.5 {
            over.push(format!(
                "GPUs of {:.0} GB (enrolled with {:.0} GB)",
                self.gpu_memory_gb, pinned.gpu_memory_gb
            ));
        }
        if self.cpus > pinned.cpus {
            over.push(format!(
                "{} CPUs (enrolled with {})",
                self.cpus, pinned.cpus
            ));
        }
        if self.memory_gb > pinned.memory_gb {
            over.push(format!(
                "{} GB of memory (enrolled with {} GB)",
                self.memory_gb, pinned.memory_gb
            ));
        }
        (!over.is_empty()).then(|| over.join(", "))
    }
}

/// How an enrolment went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enrolment {
    Enrolled(NodeCredential),
    /// The enrolment token is unknown, revoked, expired or used up.
    TokenRefused,
    /// The node already has a live credential: it must be revoked before anyone enrols as that node.
    NameTaken,
    /// The node's credential was revoked: only a token minted for this node enrols it again.
    NameRevoked,
}

/// Which enrolment token an executor presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnrolWith<'a> {
    /// One minted through the API, by its hash: one of its uses is spent.
    Token(&'a [u8; 32]),
    /// The server's configured token (`--enrollment-token`), already checked by the caller.
    Server,
}

/// A secret value to keep, sealed by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSecret {
    pub tenant_id: TenantId,
    pub name: String,
    pub sealed: Sealed,
    pub created_by: UserId,
}

/// A secret as listings show it: never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretInfo {
    pub tenant_id: TenantId,
    pub name: String,
    pub created_by: Option<UserId>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A privileged action, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuditEvent {
    pub actor_id: Option<UserId>,
    pub actor: String,
    pub tenant_id: Option<TenantId>,
    pub action: &'static str,
    pub target: String,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor_id: Option<UserId>,
    pub actor: String,
    pub tenant_id: Option<TenantId>,
    pub action: String,
    pub target: String,
    pub detail: String,
}

/// The store's side of trust. Implemented by both stores; part of [`super::Store`].
#[async_trait]
pub trait TrustStore: Send + Sync {
    async fn create_enrollment_token(
        &self,
        token: &NewEnrollmentToken,
    ) -> StoreResult<EnrollmentToken>;
    /// Newest first.
    async fn list_enrollment_tokens(&self) -> StoreResult<Vec<EnrollmentToken>>;
    async fn revoke_enrollment_token(&self, id: Uuid) -> StoreResult<EnrollmentToken>;
    /// Spends one use of the enrolment token and records the node's credential, in one transaction: a
    /// refused enrolment (the name is taken, or was revoked and the token is not minted for it)
    /// spends nothing. A token minted for a node enrols that node only.
    async fn enroll_node(
        &self,
        with: EnrolWith<'_>,
        credential: &NewNodeCredential,
    ) -> StoreResult<Enrolment>;
    /// The credential with this hash, revoked or not.
    async fn find_node_credential(&self, hash: &[u8; 32]) -> StoreResult<Option<NodeCredential>>;
    /// Revokes every live credential of the node; how many there were.
    async fn revoke_node_credentials(&self, node_name: &str) -> StoreResult<u64>;
    /// The capacity the credential with this hash pins: `claimed`, if it pins none yet (its node's
    /// first registration), else what it pinned then. `NotFound` for an unknown credential.
    async fn pin_node_capacity(
        &self,
        hash: &[u8; 32],
        claimed: &NodeCapacity,
    ) -> StoreResult<NodeCapacity>;
    /// The live credential of each enrolled node.
    async fn live_node_credentials(&self) -> StoreResult<Vec<NodeCredential>>;

    /// Creates or replaces a tenant's secret.
    async fn put_secret(&self, secret: &NewSecret) -> StoreResult<SecretInfo>;
    /// The tenant's secrets by name, without values.
    async fn list_secrets(&self, tenant: TenantId) -> StoreResult<Vec<SecretInfo>>;
    async fn delete_secret(&self, tenant: TenantId, name: &str) -> StoreResult<SecretInfo>;
    /// A secret's sealed value.
    async fn sealed_secret(&self, tenant: TenantId, name: &str) -> StoreResult<Option<Sealed>>;

    async fn record_audit(&self, event: &NewAuditEvent) -> StoreResult<()>;
    /// Newest first, before the event id `before`.
    async fn list_audit(&self, before: Option<i64>, limit: u32) -> StoreResult<Vec<AuditEvent>>;

    /// The executor gateway's certificate authority: its certificate (PEM) and sealed private key.
    async fn gateway_authority(&self) -> StoreResult<Option<(String, Sealed)>>;
    /// Keeps this authority unless one is kept already; either way, the one kept (replicas starting
    /// together agree on the first).
    async fn keep_gateway_authority(
        &self,
        certificate: &str,
        key: &Sealed,
    ) -> StoreResult<(String, Sealed)>;

    /// How many of the tenant's jobs wait (`queued` or `paused`): the submission ceiling counts these.
    async fn count_waiting_jobs(&self, tenant: TenantId) -> StoreResult<u64>;
}
