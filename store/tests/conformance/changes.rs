//! Conformance cases for the scheduling loop's reads of what changed: every job, task and node
//! written since a cursor comes back, including one whose transaction was open across the read
//! before.

use super::execution::worker;
use super::{change, fixture, new_job};
use drover_core::{JobId, JobState, ReasonCode};
use drover_store::testing::TestDb;
use drover_store::*;
use sqlx::Connection;

/// Reads from `cursor` until nothing comes back (other tests' transactions on the same Postgres
/// server may hold a snapshot's cursor back for a moment; rows written before it then come again).
async fn quiet_from(store: &dyn Store, mut cursor: ChangeCursor) -> ChangeCursor {
    for _ in 0..100 {
        let changes = store.active_changes(Some(cursor)).await.unwrap();
        assert!(!changes.whole);
        if changes.jobs.is_empty() && changes.tasks.is_empty() {
            return changes.cursor;
        }
        cursor = changes.cursor;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("reads from a cursor never came back empty with nothing written");
}

fn ids(jobs: &[Job]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

pub(crate) async fn changes_since_a_cursor_carry_every_write(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "vision").await;
    let first = store
        .create_job(&new_job(&tenant, alice.id, "first", &[]))
        .await
        .unwrap()
        .value;
    let second = store
        .create_job(&new_job(&tenant, alice.id, "second", &[]))
        .await
        .unwrap()
        .value;
    let done = store
        .create_job(&new_job(&tenant, alice.id, "done", &[]))
        .await
        .unwrap()
        .value;
    store
        .transition_job(
            Scope::Cluster,
            done.id,
            &change(JobState::Cancelled, ReasonCode::CancelledByUser),
        )
        .await
        .unwrap();

    // Without a cursor: the active jobs (by id, without documents) and live tasks, whole.
    let whole = store.active_changes(None).await.unwrap();
    assert!(whole.whole);
    let mut expected = vec![first.id, second.id];
    expected.sort();
    assert_eq!(ids(&whole.jobs), expected);
    assert!(whole.jobs.iter().all(|j| j.document.is_none()));
    assert!(whole.tasks.is_empty());
    assert!(whole.nodes.is_empty());
    let cursor = quiet_from(store, whole.cursor).await;

    // A node registered, then marked lost: each time it comes back.
    let now = chrono::Utc::now();
    store
        .upsert_node(&Node {
            id: uuid::Uuid::now_v7(),
            name: "gpu-a".into(),
            labels: Default::default(),
            gpus: Vec::new(),
            cpus: 8,
            memory_gb: 64,
            health: "healthy".into(),
            cordoned: false,
            draining: false,
            gpu_source: "slots".into(),
            isolation: String::new(),
            runs_images: false,
            taints: Vec::new(),
            last_heartbeat_at: Some(now),
            created_at: now,
        })
        .await
        .unwrap();
    let changes = store.active_changes(Some(cursor)).await.unwrap();
    assert_eq!(changes.nodes.len(), 1);
    assert!(changes.jobs.is_empty() && changes.tasks.is_empty());
    let cursor = quiet_from(store, changes.cursor).await;
    store.set_node_health("gpu-a", "lost", now).await.unwrap();
    let changes = store.active_changes(Some(cursor)).await.unwrap();
    assert_eq!(changes.nodes.len(), 1);
    assert_eq!(changes.nodes[0].health, "lost");
    let cursor = quiet_from(store, changes.cursor).await;

    // A start: the job's new state and its tasks.
    let allocated = change(JobState::Starting, ReasonCode::Allocated);
    let second_task = NewTask {
        index: 1,
        ..worker("gpu-b")
    };
    store
        .start_generation(first.id, &[worker("gpu-a"), second_task], &allocated)
        .await
        .unwrap()
        .unwrap();
    let changes = store.active_changes(Some(cursor)).await.unwrap();
    assert_eq!(ids(&changes.jobs), vec![first.id]);
    assert_eq!(changes.jobs[0].state, JobState::Starting);
    assert_eq!(changes.jobs[0].generation, 1);
    assert_eq!(changes.tasks.len(), 2);
    assert!(changes.tasks.iter().all(|t| t.key.job_id == first.id));
    let cursor = quiet_from(store, changes.cursor).await;

    // A task's exit comes back in its final state (the reader drops it from what is live).
    let key = TaskKey {
        job_id: first.id,
        generation: 1,
        role: TaskRole::Worker,
        index: 0,
    };
    let exited = TaskChange {
        state: Some(TaskState::Exited),
        exit_code: Some(0),
        ..TaskChange::default()
    };
    store.update_task(&key, &exited).await.unwrap();
    let changes = store.active_changes(Some(cursor)).await.unwrap();
    assert!(changes.jobs.is_empty());
    assert_eq!(changes.tasks.len(), 1);
    assert_eq!(changes.tasks[0].key, key);
    assert_eq!(changes.tasks[0].state, TaskState::Exited);
    let cursor = quiet_from(store, changes.cursor).await;

    // A job leaving the active states comes back in its final state.
    store
        .transition_job(
            Scope::Cluster,
            second.id,
            &change(JobState::Cancelled, ReasonCode::CancelledByUser),
        )
        .await
        .unwrap();
    let changes = store.active_changes(Some(cursor)).await.unwrap();
    assert_eq!(ids(&changes.jobs), vec![second.id]);
    assert_eq!(changes.jobs[0].state, JobState::Cancelled);
    let cursor = quiet_from(store, changes.cursor).await;

    // A writer whose transaction is open across a read (it began first, it commits after) is in
    // the read after: the cursor never passes a write it could not see.
    let mut writer = Writer::connect(db).await;
    writer.begin().await;
    writer.bump_priority(first.id).await;
    // On Postgres, another transaction begins after the writer and commits before the read:
    // the read's cursor must still not pass the writer (SQLite has one writer at a time, which
    // the open transaction is).
    if db.store.backend() == Backend::Postgres {
        store
            .create_job(&new_job(&tenant, alice.id, "later", &[]))
            .await
            .unwrap();
    }
    let during = store.active_changes(Some(cursor)).await.unwrap();
    assert!(during.jobs.iter().all(|j| j.priority == 0));
    writer.commit().await;
    let after = store.active_changes(Some(during.cursor)).await.unwrap();
    let bumped = after.jobs.iter().find(|j| j.id == first.id);
    assert_eq!(
        bumped.map(|j| j.priority),
        Some(7),
        "the late commit was skipped"
    );
    // On Postgres, a mark from another server's future (a dump restored here, taken when that
    // server's transaction ids ran ahead of this one's) does not come back in every read.
    if db.store.backend() == Backend::Postgres {
        writer
            .execute(&format!(
                "ALTER TABLE jobs DISABLE TRIGGER jobs_changed; \
                 UPDATE jobs SET changed = '4000000000000' WHERE id = '{}'; \
                 ALTER TABLE jobs ENABLE TRIGGER jobs_changed",
                second.id.0
            ))
            .await;
        quiet_from(store, after.cursor).await;
    }
    // Without a cursor again: the whole view as it now is.
    let whole = store.active_changes(None).await.unwrap();
    assert_eq!(whole.jobs.iter().filter(|j| j.id == first.id).count(), 1);
    assert!(
        whole
            .jobs
            .iter()
            .all(|j| j.id != second.id && j.id != done.id)
    );
    assert_eq!(whole.tasks.len(), 1);
    assert_eq!(whole.tasks[0].key.index, 1);
    assert_eq!(whole.nodes.len(), 1);
}

/// A second connection that writes outside the store, to hold a transaction open across a read.
enum Writer {
    Postgres(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl Writer {
    async fn connect(db: &TestDb) -> Self {
        match db.store.backend() {
            Backend::Postgres => {
                Self::Postgres(sqlx::PgConnection::connect(&db.url).await.unwrap())
            }
            Backend::Sqlite => {
                Self::Sqlite(sqlx::SqliteConnection::connect(&db.url).await.unwrap())
            }
        }
    }

    async fn execute(&mut self, sql: &str) {
        match self {
            // The statements are this test's own.
            Self::Postgres(c) => drop(
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
                    .execute(c)
                    .await
                    .unwrap(),
            ),
            Self::Sqlite(c) => drop(
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
                    .execute(c)
                    .await
                    .unwrap(),
            ),
        }
    }

    async fn begin(&mut self) {
        let begin = match self {
            Self::Postgres(_) => "BEGIN",
            Self::Sqlite(_) => "BEGIN IMMEDIATE",
        };
        self.execute(begin).await;
    }

    async fn bump_priority(&mut self, job: JobId) {
        // Postgres reads a uuid from its text; SQLite stores it as a blob.
        let id = match self {
            Self::Postgres(_) => format!("'{}'", job.0),
            Self::Sqlite(_) => format!("X'{}'", job.0.simple()),
        };
        self.execute(&format!("UPDATE jobs SET priority = 7 WHERE id = {id}"))
            .await;
    }

    async fn commit(&mut self) {
        self.execute("COMMIT").await;
    }
}
