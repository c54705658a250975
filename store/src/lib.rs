//! Drover's data: one [`Store`] trait, two implementations ([`PgStore`] for production and
//! several replicas, [`SqliteStore`] for `drover dev` and single-node installs), one conformance suite
//! (`tests/conformance/`) that runs against both. Also what
//! the data needs to stay safe at rest: tenant secrets sealed with the server's key ([`secrets`]), bearer
//! tokens and node credentials kept as hashes ([`tokens`]), and audit rows ([`audit`]). Test databases
//! (a fresh Postgres database or SQLite file per test) are behind the `testsuite` feature ([`testing`]).
//!
//! What is durable (in the database): tenants and their quotas, users and roles, API tokens (as SHA-256
//! hashes), executor enrolment tokens and node credentials (hashes too), jobs (the whole `DroverJob` document beside indexed columns: tenant, name, state, priority,
//! labels), every job state change as an event, nodes as executors last reported them (with cordon and
//! drain flags), every task of every generation of a job (the scheduling loop's intent, persisted before
//! it is dispatched), metric samples, checkpoint records and task logs.
//! Every job and task row is marked with its writer, so the scheduling loop reads only what changed since its last round (`changes`).
//! Also the leading replica's announcement, pending checkpoint requests and the scheduling policy's
//! saved state (`replicas`), and what it computes for users: the queue forecast and the accounting ledger of allocations (`ledger`).
//! Hyper-parameter searches (`experiments`): each experiment, its trials (points of the space) and
//! segments (the jobs that ran them, each row written before its job), and its events.
//! What is rebuilt in memory at start-up: which executors are connected and when each was last heard
//! from (an executor that does not come back within the heartbeat timeout is lost), the rendezvous
//! state (from task addresses), and what the policy recomputes from the jobs' observations.
//!
//! Tenant-scoped reads and writes take a [`Scope`], so a caller cannot forget to restrict a query to the
//! caller's tenant: the only way to see every tenant is to say [`Scope::Cluster`].

pub mod audit;
mod changes;
mod changes_sql;
mod error;
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
mod scope;
pub mod secrets;
mod sql;
mod sqlite;
mod sso;
mod sso_sql;
mod starts_sql;
mod store;
#[cfg(any(test, feature = "testsuite"))]
pub mod testing;
pub mod tokens;
mod trust;
mod trust_sql;

pub use changes::*;
pub use error::{StoreError, StoreResult};
pub use exec::*;
pub use experiments::*;
pub use ledger::*;
pub use model::*;
pub use pg::PgStore;
pub use replicas::*;
pub use scope::Scope;
pub use sql::{FIND_TOKEN, INSERT_EVENT, INSERT_JOB};
pub use sqlite::SqliteStore;
pub use sso::*;
pub use store::{Backend, Store, tenant_checkpoint};
pub use trust::*;

use std::sync::Arc;

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
