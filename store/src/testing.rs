//! Support for tests that need a real database: a fresh Postgres database per test (dropped afterwards)
//! and a fresh SQLite file. Postgres is found through `DROVER_TEST_DATABASE_URL` (a URL whose user may
//! create databases), defaulting to the trust-auth server at 127.0.0.1:5432; `scripts/test` starts a
//! throwaway server and sets the variable where none runs.

use crate::{self as store, Store};
use std::sync::Arc;

pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The administrative Postgres URL tests create their databases through.
pub fn postgres_admin_url() -> String {
    std::env::var("DROVER_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned())
}

/// A database that exists for one test.
#[derive(Debug)]
pub struct TestDb {
    pub url: String,
    pub store: Arc<dyn Store>,
    /// Dropped with the test: the Postgres database or SQLite directory goes away.
    _cleanup: Cleanup,
}

#[derive(Debug)]
enum Cleanup {
    Postgres(#[expect(dead_code, reason = "held for its Drop")] TempPostgres),
    Sqlite(#[expect(dead_code, reason = "held for its Drop")] tempfile::TempDir),
}

/// Replaces the database name at the end of a Postgres URL.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{name}?{query}"),
        None => format!("{base}/{name}"),
    }
}

/// A Postgres database that exists until this value is dropped.
#[derive(Debug)]
pub struct TempPostgres {
    pub url: String,
    admin_url: String,
    name: String,
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        // Best effort, on a thread of its own (Drop may run inside a runtime).
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                use sqlx::Connection;
                if let Ok(mut admin) = sqlx::PgConnection::connect(&admin_url).await {
                    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                        .execute(&mut admin)
                        .await;
                }
            });
        })
        .join();
    }
}

/// Creates an empty Postgres database, unique to the caller.
pub async fn create_postgres_database() -> TempPostgres {
    use sqlx::Connection;
    let admin_url = postgres_admin_url();
    let name = format!("drover_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&admin_url)
        .await
        .unwrap_or_else(|err| {
            panic!(
                "cannot reach Postgres at {admin_url} ({err}); run scripts/test, which starts one"
            )
        });
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create test database");
    TempPostgres {
        url: with_database(&admin_url, &name),
        admin_url,
        name,
    }
}

impl TestDb {
    /// A migrated Postgres store in a new database.
    pub async fn postgres() -> TestDb {
        let database = create_postgres_database().await;
        let store = store::connect(&database.url, 8)
            .await
            .expect("connect to the test database");
        store.migrate().await.expect("migrate");
        TestDb {
            url: database.url.clone(),
            store,
            _cleanup: Cleanup::Postgres(database),
        }
    }

    /// A migrated SQLite store in a new temporary directory.
    pub async fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("drover.db").display());
        let store = store::connect(&url, 8).await.expect("open SQLite");
        store.migrate().await.expect("migrate");
        TestDb {
            url,
            store,
            _cleanup: Cleanup::Sqlite(dir),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_names_are_replaced() {
        assert_eq!(
            with_database("postgres://u@h:5/postgres", "x"),
            "postgres://u@h:5/x"
        );
        assert_eq!(with_database("postgres://u@h:5", "x"), "postgres://u@h:5/x");
        assert_eq!(
            with_database("postgres://u@h/db?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
    }
}
