//! The [`Store`] trait: everything Drover keeps, as one trait object both backends implement, made of
//! the narrower traits each area defines (`ExecStore`, `TrustStore`, `ReplicaStore`, `LedgerStore`,
//! `ExperimentStore`, `SsoStore`).

use crate::changes::ChangeStore;
use crate::error::{StoreError, StoreResult};
use crate::exec::{CheckpointRecord, ExecStore};
use crate::experiments::ExperimentStore;
use crate::ledger::LedgerStore;
use crate::model::{
    AuthRecord, Created, Job, JobEvent, JobFilter, NewJob, NewTenant, NewToken, NewUser, Node,
    QueuedRow, Quota, StateChange, Tenant, TokenInfo, User,
};
use crate::replicas::ReplicaStore;
use crate::scope::Scope;
use crate::sso::SsoStore;
use crate::trust::TrustStore;
use async_trait::async_trait;
use drover_core::{JobId, JobState, TenantId, TokenId, UserId};

/// Which database an implementation talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

#[async_trait]
pub trait Store:
    ExecStore
    + ChangeStore
    + TrustStore
    + SsoStore
    + ReplicaStore
    + LedgerStore
    + ExperimentStore
    + Send
    + Sync
    + std::fmt::Debug
    + 'static
{
    fn backend(&self) -> Backend;
    /// Applies pending migrations.
    async fn migrate(&self) -> StoreResult<()>;
    /// A cheap round trip, for readiness.
    async fn ping(&self) -> StoreResult<()>;

    // Tenants.
    async fn create_tenant(&self, tenant: &NewTenant) -> StoreResult<Tenant>;
    async fn get_tenant(&self, id: TenantId) -> StoreResult<Tenant>;
    async fn get_tenant_by_name(&self, name: &str) -> StoreResult<Tenant>;
    async fn list_tenants(&self) -> StoreResult<Vec<Tenant>>;
    async fn set_tenant_quota(&self, id: TenantId, quota: Quota) -> StoreResult<Tenant>;

    // Users.
    async fn create_user(&self, user: &NewUser) -> StoreResult<User>;
    async fn get_user(&self, scope: Scope, id: UserId) -> StoreResult<User>;
    async fn list_users(&self, scope: Scope) -> StoreResult<Vec<User>>;
    /// The oldest cluster administrator, if any.
    async fn first_cluster_admin(&self) -> StoreResult<Option<User>>;

    // Tokens.
    async fn create_token(&self, token: &NewToken) -> StoreResult<TokenInfo>;
    /// The token with this hash, its user and the user's tenant, whether or not it is still valid:
    /// the caller tells "expired" and "revoked" apart from "unknown".
    async fn find_token(&self, token_hash: &[u8; 32]) -> StoreResult<Option<AuthRecord>>;
    async fn list_tokens(&self, user: UserId) -> StoreResult<Vec<TokenInfo>>;
    async fn get_token(&self, id: TokenId) -> StoreResult<TokenInfo>;
    /// Revokes the token and every token minted from it (`NewToken::parent`), however deep.
    async fn revoke_token(&self, id: TokenId) -> StoreResult<TokenInfo>;

    // Jobs.
    /// Stores a new job `queued` with its submission event. With an idempotency key that was already
    /// used in the tenant, returns the first job instead (`created` is false), or
    /// [`StoreError::IdempotencyMismatch`] when the request differs.
    async fn create_job(&self, job: &NewJob) -> StoreResult<Created<Job>>;
    /// Stores several new jobs `queued`, with their submission events, in one transaction (group
    /// commit). A job that breaks a uniqueness rule (its name taken, its idempotency key used) is
    /// left out, not an error: the answer says, per job, whether it was stored.
    async fn create_jobs(&self, jobs: &[NewJob]) -> StoreResult<Vec<bool>>;
    /// The tenant's job created with this idempotency key, whatever the request was.
    async fn job_by_key(&self, tenant: TenantId, key: &str) -> StoreResult<Option<Job>>;
    async fn get_job(&self, scope: Scope, id: JobId) -> StoreResult<Job>;
    /// Newest first, without documents; `filter.limit` rows at most.
    async fn list_jobs(&self, scope: Scope, filter: &JobFilter) -> StoreResult<Vec<Job>>;
    /// The `queued` jobs in `scope`, oldest first, `limit` at most: only what the queue's rows show.
    async fn queued_jobs(&self, scope: Scope, limit: u32) -> StoreResult<Vec<QueuedRow>>;
    /// How many jobs match `filter` (its window left aside: `before`, `after`, `limit`), counted up
    /// to `at_most`.
    async fn count_jobs(&self, scope: Scope, filter: &JobFilter, at_most: u32) -> StoreResult<u64>;
    /// Moves a job to `to` if the state machine allows it, recording the event in the same transaction.
    async fn transition_job(
        &self,
        scope: Scope,
        id: JobId,
        change: &StateChange,
    ) -> StoreResult<Job>;
    /// Events in order, after the event id `after`.
    async fn list_job_events(
        &self,
        scope: Scope,
        id: JobId,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<JobEvent>>;
    /// How many jobs are in each state, across tenants.
    async fn count_jobs_by_state(&self) -> StoreResult<Vec<(JobState, i64)>>;

    // Nodes.
    async fn upsert_node(&self, node: &Node) -> StoreResult<Node>;
    async fn get_node(&self, name: &str) -> StoreResult<Node>;
    async fn list_nodes(&self) -> StoreResult<Vec<Node>>;
}

/// The checkpoint `id` names, if it belongs to one of `tenant`'s jobs: what a job's
/// `train.init_from.checkpoint` may name. A malformed id is simply no checkpoint.
pub async fn tenant_checkpoint(
    store: &dyn Store,
    tenant: TenantId,
    id: &str,
) -> StoreResult<Option<CheckpointRecord>> {
    let Ok(uuid) = uuid::Uuid::parse_str(id) else {
        return Ok(None);
    };
    let Some(checkpoint) = store.checkpoint_by_id(uuid).await? else {
        return Ok(None);
    };
    match store
        .get_job(Scope::Tenant(tenant), checkpoint.job_id)
        .await
    {
        Ok(_) => Ok(Some(checkpoint)),
        Err(StoreError::NotFound) => Ok(None),
        Err(err) => Err(err),
    }
}
