//! Leadership among server replicas. Any replica serves the API; the one holding a Postgres advisory
//! lock leads: it runs the scheduling loop and holds the executors' sessions, and records where its
//! gateway is, so the others can redirect executors there. The lock lives on a connection of its
//! own: when the leader stops (SIGTERM) it lets go at once; when it dies or loses the database, the
//! lock goes with its session and another replica takes it within about a second of the database
//! noticing (the session asks for TCP keepalives every few seconds).
//!
//! SQLite has one server: it always leads.

use drover_store::{LeaderRecord, Store};
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The advisory lock's key: "DROVER" in ASCII.
pub const LOCK_KEY: i64 = 0x4452_4f56_4552;
/// How often a follower asks for the lock and the leader checks it still has its session.
const POLL: Duration = Duration::from_secs(1);

/// A replica that leads from the start and never stops (SQLite, tests).
pub fn always() -> watch::Receiver<bool> {
    let (sender, receiver) = watch::channel(true);
    // Kept alive for the process: the receiver would otherwise report a closed channel.
    std::mem::forget(sender);
    receiver
}

/// Campaigns for the lock until `shutdown` turns true; the receiver says whether this replica leads.
pub fn campaign(
    database_url: String,
    store: Arc<dyn Store>,
    holder: String,
    gateway: String,
    mut shutdown: watch::Receiver<bool>,
) -> watch::Receiver<bool> {
    let (leads, receiver) = watch::channel(false);
    tokio::spawn(async move {
        while !*shutdown.borrow() {
            let mut connection = match lock_connection(&database_url).await {
                Ok(connection) => connection,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot reach the database to campaign for leadership; retrying");
                    if wait(&mut shutdown, POLL).await {
                        break;
                    }
                    continue;
                }
            };
            // Follow until the lock is ours.
            let acquired = loop {
                match try_lock(&mut connection).await {
                    Ok(true) => break true,
                    Ok(false) => {}
                    Err(err) => {
                        tracing::warn!(error = %err, "lost the database connection while following");
                        break false;
                    }
                }
                if wait(&mut shutdown, POLL).await {
                    let _ = connection.close().await;
                    return;
                }
            };
            if !acquired {
                continue;
            }
            let record = LeaderRecord {
                holder: holder.clone(),
                gateway: gateway.clone(),
                since: chrono::Utc::now(),
            };
            // Announced before acting as leader, so followers send executors here, not to the last one.
            let mut announced = store.record_leader(&record).await;
            for _ in 0..3 {
                if announced.is_ok() {
                    break;
                }
                tokio::time::sleep(POLL).await;
                announced = store.record_leader(&record).await;
            }
            if let Err(err) = announced {
                tracing::error!(error = %err, "cannot record this replica as the leader; letting the lead go");
                let _ = connection.close().await;
                continue;
            }
            tracing::info!(
                holder,
                gateway,
                "this replica leads: it runs the scheduling loop and the executor sessions"
            );
            let _ = leads.send(true);
            // Lead until the session breaks or the server stops.
            loop {
                if wait(&mut shutdown, POLL).await {
                    // Followers must not send executors here once this process is gone.
                    let _ = leads.send(false);
                    let _ = store.clear_leader(&holder).await;
                    let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                        .bind(LOCK_KEY)
                        .execute(&mut connection)
                        .await;
                    let _ = connection.close().await;
                    tracing::info!("stepped down: the server is stopping");
                    return;
                }
                // A check that does not answer in time counts as a broken session: a leader that
                // cannot show it still holds the lock stops acting as one.
                let check = tokio::time::timeout(
                    POLL * 2,
                    sqlx::query("SELECT 1").execute(&mut connection),
                )
                .await;
                if !matches!(check, Ok(Ok(_))) {
                    let _ = leads.send(false);
                    tracing::warn!(
                        "stepped down: the connection holding the leader lock broke or hangs"
                    );
                    break;
                }
            }
        }
        let _ = leads.send(false);
    });
    receiver
}

/// A connection for the lock, asking the server to notice within seconds if this process vanishes.
async fn lock_connection(url: &str) -> Result<PgConnection, sqlx::Error> {
    let mut connection = PgConnection::connect(url).await?;
    sqlx::raw_sql(
        "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; SET tcp_keepalives_count = 3",
    )
    .execute(&mut connection)
    .await?;
    Ok(connection)
}

async fn try_lock(connection: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(LOCK_KEY)
        .fetch_one(connection)
        .await
}

/// Sleeps `period`; true when the server is stopping.
async fn wait(shutdown: &mut watch::Receiver<bool>, period: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(period) => *shutdown.borrow(),
        changed = shutdown.changed() => changed.is_err() || *shutdown.borrow(),
    }
}
