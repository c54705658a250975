//! The SQLite store: the embedded default for `drover dev` and single-node installs.

use super::sql::Dialect;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    const MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

    /// Opens (creating when missing) the database at `sqlite://path`, in WAL mode with full fsync.
    pub async fn connect(url: &str) -> Result<Self, sqlx::Error> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        Ok(Self { pool })
    }

    /// Jobs carrying every one of these labels. Keys go in as bound JSON paths, quoted, so a key with
    /// dots or slashes matches literally.
    fn push_label_filter(
        query: &mut sqlx::QueryBuilder<sqlx::Sqlite>,
        labels: &BTreeMap<String, String>,
    ) {
        for (key, value) in labels {
            query
                .push(" AND json_extract(j.labels, ")
                .push_bind(format!("$.\"{}\"", key.replace('"', "")))
                .push(") = ")
                .push_bind(value.clone());
        }
    }
}

impl Dialect for SqliteStore {
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const LOCK_ROW: &'static str = "";
    const LOCK_ROW_UPDATE: &'static str = "";
    // WAL mode: a deferred transaction reads one snapshot from its first statement to its end.
    const BEGIN_SNAPSHOT: &'static str = "BEGIN";
    // Writers take counter values one at a time: any write this snapshot cannot see takes one
    // above every value it can.
    const CHANGE_CURSOR: &'static str = "SELECT seq + 1 FROM change_counter WHERE id = 1";
    const CURSOR_VALUE: (&'static str, &'static str) = ("", "");
    // SQLite's planner takes an index for a range on an indexed column without statistics.
    const PREFER_INDEXES: Option<&'static str> = None;
    // The counter travels with the data.
    const CHANGED_BELOW: Option<&'static str> = None;
}

super::sql::impl_store!(SqliteStore, sqlx::Sqlite, Backend::Sqlite);
super::exec_sql::impl_exec_store!(SqliteStore, sqlx::Sqlite);
super::starts_sql::impl_start_generations!(SqliteStore, sqlx::Sqlite);
super::trust_sql::impl_trust_store!(SqliteStore);
super::sso_sql::impl_sso_store!(SqliteStore);
super::replicas_sql::impl_replica_store!(SqliteStore, sqlx::Sqlite);
super::ledger_sql::impl_ledger_store!(SqliteStore);
super::experiments_sql::impl_experiment_store!(SqliteStore, sqlx::Sqlite);
super::changes_sql::impl_change_store!(SqliteStore, sqlx::Sqlite);
