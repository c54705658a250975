//! The Postgres store: production, and several server replicas.

use super::sql::Dialect;
use sqlx::postgres::{PgPool, PgPoolOptions};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    const MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, sqlx::Error> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Jobs carrying every one of these labels: a containment test the GIN index answers.
    fn push_label_filter(
        query: &mut sqlx::QueryBuilder<sqlx::Postgres>,
        labels: &BTreeMap<String, String>,
    ) {
        query
            .push(" AND j.labels @> ")
            .push_bind(Json(labels.clone()));
    }
}

impl Dialect for PgStore {
    const BEGIN_WRITE: &'static str = "BEGIN";
    const LOCK_ROW: &'static str = " FOR SHARE";
    const LOCK_ROW_UPDATE: &'static str = " FOR UPDATE";
    const BEGIN_SNAPSHOT: &'static str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
    // Every transaction this snapshot cannot see has an id at or above its xmin.
    const CHANGE_CURSOR: &'static str =
        "SELECT CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text) AS bigint)";
    const CURSOR_VALUE: (&'static str, &'static str) =
        ("CAST(CAST(CAST(", " AS bigint) AS text) AS xid8)");
    const PREFER_INDEXES: Option<&'static str> = Some("SET LOCAL enable_seqscan = off");
    // Every write the snapshot sees was made below its xmax. A mark above it came with the data
    // from another server (a dump restored here): left out until this server's ids pass it, or
    // it would come back in every read.
    const CHANGED_BELOW: Option<&'static str> = Some("pg_snapshot_xmax(pg_current_snapshot())");
}

super::sql::impl_store!(PgStore, sqlx::Postgres, Backend::Postgres);
super::exec_sql::impl_exec_store!(PgStore, sqlx::Postgres);
super::starts_sql::impl_start_generations!(PgStore, sqlx::Postgres);
super::trust_sql::impl_trust_store!(PgStore);
super::sso_sql::impl_sso_store!(PgStore);
super::replicas_sql::impl_replica_store!(PgStore, sqlx::Postgres);
super::ledger_sql::impl_ledger_store!(PgStore);
super::experiments_sql::impl_experiment_store!(PgStore, sqlx::Postgres);
super::changes_sql::impl_change_store!(PgStore, sqlx::Postgres);
