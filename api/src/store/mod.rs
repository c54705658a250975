//! The control plane's store: one [`Store`] trait, two implementations ([`PgStore`] for production and
//! several replicas, [`SqliteStore`] for `drover dev` and single-node installs), one conformance suite
//! (`tests/store_conformance.rs`) that runs against both.
//!
//! What is durable (in the database): tenants and their quotas, users and roles, API tokens (as SHA-256
//! hashes), executor enrolment tokens and node credentials (hashes too), jobs (the whole `DroverJob` document beside indexed columns: tenant, name, state, priority,
//! labels), every job state change as an event, nodes as executors last reported them (with cordon and
//! drain flags), every task of every generation of a job (the scheduling loop's intent, persisted before
//! it is dispatched), metric samples, checkpoint records and task logs.
//! Also the leading replica's announcement and pending checkpoint requests (`replicas`), and what it
//! computes for users: the queue forecast and the accounting ledger of allocations (`ledger`).
//! Hyper-parameter searches (`experiments`): each experiment, its trials (points of the space) and
//! segments (the jobs that ran them, each row written before its job), and its events.
//! What is rebuilt in memory at start-up: which executors are connected and when each was last heard
//! from (an executor that does not come back within the heartbeat timeout is lost), the rendezvous
//! state (from task addresses), and the policy's own state (by replaying snapshots).
//!
//! Tenant-scoped reads and writes take a [`Scope`], so a caller cannot forget to restrict a query to the
//! caller's tenant: the only way to see every tenant is to say [`Scope::Cluster`].

mod exec;
mod exec_sql;
mod experiments;
mod experiments_sql;
mod ledger;
mod ledger_sql;
mod model;
mod pg;
mod replicas;
mod replicas_sql;
mod sql;
mod sqlite;
mod trust;
mod trust_sql;

pub use exec::*;
pub use experiments::*;
pub use ledger::*;
pub use model::*;
pub use pg::PgStore;
pub use replicas::*;
pub use sql::{FIND_TOKEN, INSERT_EVENT, INSERT_JOB};
pub use sqlite::SqliteStore;
pub use trust::*;

use async_trait::async_trait;
use drover_core::{IllegalTransition, JobId, JobState, ReasonCode, TenantId, TokenId, UserId};
use std::sync::Arc;

/// Errors of the store. Conflicts, missing rows and illegal transitions are the caller's to map to HTTP
/// statuses; `Database` is ours (a 5xx), never blamed on the client.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// A uniqueness rule was broken: `field` names the offending input.
    #[error("{message}")]
    Conflict {
        field: &'static str,
        message: String,
    },
    /// An `Idempotency-Key` was reused with a different request body.
    #[error("the idempotency key was already used for a different request")]
    IdempotencyMismatch,
    #[error(transparent)]
    IllegalTransition(#[from] IllegalTransition),
    /// A report from a task of an older (or unknown) generation of its job.
    #[error("generation {reported} is not the job's current generation {current}")]
    Fenced { current: u64, reported: u64 },
    #[error("the database holds a value this build cannot read: {0}")]
    Corrupt(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Which rows a tenant-scoped call may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only this tenant's.
    Tenant(TenantId),
    /// Every tenant's: cluster administrators and the control plane itself.
    Cluster,
}

impl Scope {
    fn tenant(self) -> Option<TenantId> {
        match self {
            Scope::Tenant(id) => Some(id),
            Scope::Cluster => None,
        }
    }
}

/// Which database an implementation talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

#[async_trait]
pub trait Store:
    ExecStore
    + TrustStore
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

/// Opens the store a database URL names: `postgres://…` or `sqlite://path` (created when missing).
pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PgStore::connect(url, max_connections).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteStore::connect(url).await?))
    } else {
        Err(StoreError::Database(sqlx::Error::Configuration(
            format!("unsupported database URL `{url}`: expected postgres://… or sqlite://…").into(),
        )))
    }
}
