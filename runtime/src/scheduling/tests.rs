//! The scheduling loop across a change of leader (issue #55): a new leader's first round keeps the
//! queue levels and order the last leader had, on both stores; one that restores nothing does not.
//! And the leader's view of active jobs and live tasks, kept up to date from what changed.

use super::SchedulingLoop;
use crate::{Runtime, RuntimeConfig};
use chrono::{Duration, Utc};
use drover_core::spec::JobType;
use drover_core::{JobId, JobState, ReasonCode};
use drover_store::testing::TestDb;
use drover_store::{NewJob, NewMetrics, Scope, StateChange, Store, TaskChange, TaskState};
use std::sync::Arc;

/// Six queued one-GPU command jobs of one tenant, in submission order.
async fn jobs(store: &dyn Store) -> Vec<JobId> {
    jobs_of(store, "t").await
}

/// Six queued one-GPU command jobs of a new tenant, in submission order.
async fn jobs_of(store: &dyn Store, tenant: &str) -> Vec<JobId> {
    let (tenant, user) = crate::ingest::tests::tenant_and_member(store, tenant).await;
    let mut ids = Vec::new();
    for n in 0..6 {
        let name = format!("j{n}");
        let document = serde_json::json!({
            "apiVersion": "drover.dev/v1",
            "kind": "DroverJob",
            "metadata": {"name": name},
            "spec": {
                "type": "command",
                "command": {"argv": ["true"]},
                "resources": {"workers": {"min": 1, "max": 1}, "gpus_per_worker": 1, "cpus_per_worker": 1},
            },
        });
        let job = store
            .create_job(&NewJob {
                id: JobId::new(),
                tenant_id: tenant.id,
                tenant_name: tenant.name.clone(),
                name,
                job_type: JobType::Command,
                priority: 0,
                max_gpus: 1,
                labels: Default::default(),
                document,
                submitted_by: user.id,
                idempotency_key: None,
                request_hash: None,
                created_at: Utc::now(),
            })
            .await
            .unwrap();
        ids.push(job.value.id);
    }
    ids
}

/// The job ran one GPU for an hour (its first and last step reports an hour apart) and was
/// preempted back into the queue.
async fn ran_an_hour(store: &dyn Store, job: JobId) {
    let key = crate::ingest::tests::started(store, job, "gone").await;
    for (step, ago_min) in [(1, 90), (100, 30)] {
        let report = NewMetrics {
            key,
            num_ps: 0,
            num_workers: 1,
            worker_nodes: 1,
            gpu_model: String::new(),
            step,
            values: vec![("loss".to_owned(), 1.0)],
            recorded_at: Utc::now() - Duration::minutes(ago_min),
        };
        store.record_metrics(&report).await.unwrap();
    }
    let exited = TaskChange {
        state: Some(TaskState::Exited),
        ..TaskChange::default()
    };
    store.update_task(&key, &exited).await.unwrap();
    store
        .transition_job(
            Scope::Cluster,
            job,
            &StateChange {
                to: JobState::Queued,
                reason: ReasonCode::Preempted,
                message: String::new(),
                actor: None,
            },
        )
        .await
        .unwrap();
}

fn leader(store: &Arc<dyn Store>, policy: &str, dir: &std::path::Path) -> SchedulingLoop {
    let config = RuntimeConfig::new(policy, dir.to_path_buf());
    SchedulingLoop::new(Runtime::new(store.clone(), config)).unwrap()
}

/// The waiting jobs of the last recorded round, in the policy's order.
async fn queue(store: &dyn Store) -> Vec<JobId> {
    let round = store.last_round().await.unwrap().unwrap();
    round.waiting.iter().map(|w| w.job).collect()
}

async fn a_new_leader_keeps_the_queue_the_last_one_had(db: TestDb) {
    let store = db.store.clone();
    let dir = tempfile::tempdir().unwrap();
    let jobs = jobs(store.as_ref()).await;
    // The first leader sees six jobs, in the first queue in submission order (no node: all wait).
    let mut first = leader(&store, "drover", dir.path());
    first.round().await.unwrap();
    assert_eq!(queue(store.as_ref()).await, jobs);
    // The first three then run an hour each: past 30 GPU-minutes, they move to the second queue.
    for &job in &jobs[..3] {
        ran_an_hour(store.as_ref(), job).await;
        first.runtime.observer.touched(job);
    }
    first.round().await.unwrap();
    let demoted = [&jobs[3..], &jobs[..3]].concat();
    assert_eq!(queue(store.as_ref()).await, demoted);
    // The leader dies (nothing more is saved); a new one's first round keeps the queue.
    drop(first);
    let mut second = leader(&store, "drover", dir.path());
    second.round().await.unwrap();
    assert_eq!(
        queue(store.as_ref()).await,
        demoted,
        "the new leader's queue"
    );
    let saved = store.policy_state("drover").await.unwrap();
    assert_eq!(saved.jobs.len(), 6);
    // The control: a leader with nothing saved (another policy's name, the same ordering here)
    // puts every job back in the first queue, in submission order.
    let mut forgetful = leader(&store, "drover-no-search", dir.path());
    forgetful.round().await.unwrap();
    assert_eq!(queue(store.as_ref()).await, jobs, "without the saved state");
    // Its first save forgot what `drover` saved.
    assert!(store.policy_state("drover").await.unwrap().jobs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_keeps_the_queue_on_sqlite() {
    a_new_leader_keeps_the_queue_the_last_one_had(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_keeps_the_queue_on_postgres() {
    a_new_leader_keeps_the_queue_the_last_one_had(TestDb::postgres().await).await;
}

/// A runtime on `db`'s store (its checkpoint directory with it) and six queued jobs.
async fn with_jobs(db: &TestDb) -> (Arc<dyn Store>, tempfile::TempDir, Arc<Runtime>, Vec<JobId>) {
    let store = db.store.clone();
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig::new("drover", dir.path().to_path_buf());
    let runtime = Runtime::new(store.clone(), config);
    let jobs = jobs(store.as_ref()).await;
    (store, dir, runtime, jobs)
}

/// The user cancelled the job.
async fn cancel(store: &dyn Store, job: JobId) {
    store
        .transition_job(
            Scope::Cluster,
            job,
            &StateChange {
                to: JobState::Cancelled,
                reason: ReasonCode::CancelledByUser,
                message: String::new(),
                actor: None,
            },
        )
        .await
        .unwrap();
}

/// What a view's jobs and a whole read's are compared by.
fn summary(
    jobs: &[drover_store::Job],
) -> Vec<(JobId, JobState, u64, Option<Arc<serde_json::Value>>)> {
    jobs.iter()
        .map(|j| (j.id, j.state, j.generation, j.document.clone()))
        .collect()
}

/// The view brought up to date from what changed is what a whole read would give: starts, exits,
/// requeues, cancels, new jobs (with their documents) and nodes registered and lost all land.
async fn the_view_kept_up_to_date_matches_a_whole_read(db: TestDb) {
    let (store, _dir, runtime, jobs) = with_jobs(&db).await;
    let mut view = super::ActiveView::default();
    assert!(view.refresh(&runtime).await.unwrap());
    assert_eq!(view.jobs().len(), 6);
    crate::ingest::tests::started(store.as_ref(), jobs[0], "a").await;
    ran_an_hour(store.as_ref(), jobs[1]).await;
    crate::ingest::tests::started(store.as_ref(), jobs[2], "b").await;
    cancel(store.as_ref(), jobs[3]).await;
    let more = jobs_of(store.as_ref(), "u").await;
    let now = Utc::now();
    for name in ["n2", "n1"] {
        store
            .upsert_node(&drover_store::Node {
                id: uuid::Uuid::now_v7(),
                name: name.into(),
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
    }
    store.set_node_health("n2", "lost", now).await.unwrap();
    assert!(view.refresh(&runtime).await.unwrap());
    let whole = store.active_jobs().await.unwrap();
    assert_eq!(summary(view.jobs()), summary(&whole));
    assert_eq!(view.jobs().len(), 11);
    assert!(view.jobs().iter().any(|j| j.id == more[0]));
    assert_eq!(view.live(), store.live_tasks().await.unwrap().as_slice());
    assert_eq!(view.live().len(), 2);
    assert_eq!(view.nodes(), store.list_nodes().await.unwrap().as_slice());
    let health: Vec<(&str, &str)> = view
        .nodes()
        .iter()
        .map(|n| (n.name.as_str(), n.health.as_str()))
        .collect();
    assert_eq!(health, [("n1", "healthy"), ("n2", "lost")]);
    // Nothing written: the view soon reads as unchanged (other tests' open transactions on the
    // same Postgres server may bring a few rows again first).
    let mut quiet = false;
    for _ in 0..100 {
        if !view.refresh(&runtime).await.unwrap() {
            quiet = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(quiet, "the view kept reading changes with nothing written");
    assert_eq!(summary(view.jobs()), summary(&whole));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_matches_a_whole_read_on_sqlite() {
    the_view_kept_up_to_date_matches_a_whole_read(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_matches_a_whole_read_on_postgres() {
    the_view_kept_up_to_date_matches_a_whole_read(TestDb::postgres().await).await;
}

/// A whole read made beside the rounds is taken by the first refresh after it ends and brought up
/// to date from where it was read: what was written after it (a start, a cancel, new jobs) is in
/// the view the round gets.
async fn a_whole_read_beside_the_rounds_is_brought_up_to_date(db: TestDb) {
    let (store, _dir, runtime, jobs) = with_jobs(&db).await;
    let mut view = super::ActiveView::rereading_every(std::time::Duration::ZERO);
    assert!(view.refresh(&runtime).await.unwrap());
    assert_eq!(
        view.rereading(),
        None,
        "the first read is whole, in the round"
    );
    crate::ingest::tests::started(store.as_ref(), jobs[0], "a").await;
    view.refresh(&runtime).await.unwrap();
    assert!(
        view.rereading().is_some(),
        "a whole read began beside the round"
    );
    for _ in 0..200 {
        if view.rereading() == Some(true) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(view.rereading(), Some(true), "the whole read did not end");
    // Written after the whole read ended: only a read of the changes since it brings these.
    crate::ingest::tests::started(store.as_ref(), jobs[1], "b").await;
    cancel(store.as_ref(), jobs[2]).await;
    let more = jobs_of(store.as_ref(), "u").await;
    assert!(view.refresh(&runtime).await.unwrap());
    assert_eq!(view.rereading(), None, "the whole read was taken");
    let whole = store.active_jobs().await.unwrap();
    assert_eq!(summary(view.jobs()), summary(&whole));
    assert_eq!(view.jobs().len(), 11);
    assert!(view.jobs().iter().any(|j| j.id == more[5]));
    assert!(!view.jobs().iter().any(|j| j.id == jobs[2]));
    assert_eq!(view.live(), store.live_tasks().await.unwrap().as_slice());
    assert_eq!(view.live().len(), 2);
    assert_eq!(view.nodes(), store.list_nodes().await.unwrap().as_slice());
}

/// A whole read taken while the view went on reading changes is older than the view: rows the
/// view already merged after that read (a start, a cancel) come again from where it was read, and
/// none is lost or goes back to what the whole read saw.
async fn an_older_whole_read_loses_nothing_the_view_had(db: TestDb) {
    let (store, _dir, runtime, jobs) = with_jobs(&db).await;
    let mut view = super::ActiveView::rereading_every(std::time::Duration::from_secs(3600));
    view.refresh(&runtime).await.unwrap();
    let earlier = super::view::read_whole(&runtime).await.unwrap();
    // After the whole read: merged into the view by a read of the changes.
    crate::ingest::tests::started(store.as_ref(), jobs[0], "a").await;
    cancel(store.as_ref(), jobs[1]).await;
    assert!(view.refresh(&runtime).await.unwrap());
    assert_eq!(view.live().len(), 1);
    view.hand_over(earlier);
    while view.rereading() != Some(true) {
        tokio::task::yield_now().await;
    }
    // And one more after the view's own last read.
    cancel(store.as_ref(), jobs[2]).await;
    assert!(view.refresh(&runtime).await.unwrap());
    assert_eq!(view.rereading(), None, "the whole read was taken");
    let whole = store.active_jobs().await.unwrap();
    assert_eq!(summary(view.jobs()), summary(&whole));
    assert_eq!(view.jobs().len(), 4);
    assert_eq!(view.live(), store.live_tasks().await.unwrap().as_slice());
    assert_eq!(view.live().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_whole_read_on_sqlite() {
    an_older_whole_read_loses_nothing_the_view_had(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_whole_read_on_postgres() {
    an_older_whole_read_loses_nothing_the_view_had(TestDb::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_read_beside_the_rounds_on_sqlite() {
    a_whole_read_beside_the_rounds_is_brought_up_to_date(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_read_beside_the_rounds_on_postgres() {
    a_whole_read_beside_the_rounds_is_brought_up_to_date(TestDb::postgres().await).await;
}
