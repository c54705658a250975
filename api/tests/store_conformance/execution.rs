//! Conformance cases for the execution side of the store: generations, tasks, fenced reports,
//! executors and their losses.

use super::{change, fixture, new_job};
use chrono::Utc;
use drover_api::store::*;
use drover_api::testing::TestDb;
use drover_core::{JobState, ReasonCode};
use std::collections::BTreeMap;

fn worker(node: &str) -> NewTask {
    NewTask {
        role: TaskRole::Worker,
        index: 0,
        node_name: node.to_owned(),
        gpus: vec![0],
        cpus: 1,
    }
}

fn metrics(key: TaskKey, step: u64, loss: f64) -> NewMetrics {
    NewMetrics {
        key,
        num_ps: 0,
        num_workers: 1,
        gpu_model: "cpu".to_owned(),
        step,
        values: vec![("loss".to_owned(), loss), ("accuracy".to_owned(), 0.5)],
        recorded_at: Utc::now(),
    }
}

pub(crate) async fn reports_from_an_old_generation_are_fenced(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "vision").await;
    let job = store
        .create_job(&new_job(&tenant, alice.id, "fenced", &[]))
        .await
        .unwrap()
        .value;
    let allocated = change(JobState::Starting, ReasonCode::Allocated);
    let first = store
        .start_generation(job.id, &[worker("a")], &allocated)
        .await
        .unwrap();
    assert_eq!(first, Some(1));
    // A job that is not queued cannot start another generation.
    assert_eq!(
        store
            .start_generation(job.id, &[worker("b")], &allocated)
            .await
            .unwrap(),
        None
    );
    let old = TaskKey {
        job_id: job.id,
        generation: 1,
        role: TaskRole::Worker,
        index: 0,
    };
    store.record_metrics(&metrics(old, 10, 1.0)).await.unwrap();
    store
        .record_checkpoint(&old, 10, "/ckpt/g1/step-10", 100)
        .await
        .unwrap();
    let lost = change(JobState::Queued, ReasonCode::ExecutorLost);
    assert!(
        store
            .transition_job_in_generation(job.id, 1, &lost, false)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store
            .start_generation(job.id, &[worker("b")], &allocated)
            .await
            .unwrap(),
        Some(2)
    );

    // The task of generation 1 outlived its executor: none of its reports land in generation 2.
    let fenced = |result: StoreResult<()>| {
        assert!(
            matches!(
                result,
                Err(StoreError::Fenced {
                    current: 2,
                    reported: 1
                })
            ),
            "expected a fenced report, got {result:?}"
        );
    };
    fenced(store.record_metrics(&metrics(old, 20, 0.5)).await);
    fenced(
        store
            .record_checkpoint(&old, 20, "/ckpt/g1/step-20", 100)
            .await
            .map(|_| ()),
    );
    let line = NewLogLine {
        stream: "stdout".into(),
        line: "late".into(),
        logged_at: Utc::now(),
    };
    fenced(store.append_logs(&old, std::slice::from_ref(&line)).await);
    let failed = change(JobState::Queued, ReasonCode::TaskFailed);
    assert!(
        store
            .transition_job_in_generation(job.id, 1, &failed, true)
            .await
            .unwrap()
            .is_none()
    );

    let current = TaskKey {
        generation: 2,
        ..old
    };
    store
        .record_metrics(&metrics(current, 15, 0.8))
        .await
        .unwrap();
    store.append_logs(&current, &[line]).await.unwrap();
    let samples = store
        .list_metrics(
            Scope::Cluster,
            job.id,
            &MetricFilter {
                limit: 100,
                ..MetricFilter::default()
            },
        )
        .await
        .unwrap();
    let steps: Vec<(u64, u64)> = samples.iter().map(|m| (m.generation, m.step)).collect();
    assert_eq!(steps, [(1, 10), (1, 10), (2, 15), (2, 15)]);
    let latest = store.latest_checkpoint(job.id).await.unwrap().unwrap();
    assert_eq!(
        (latest.generation, latest.step),
        (1, 10),
        "only recorded checkpoints count"
    );
    let job = store.get_job(Scope::Cluster, job.id).await.unwrap();
    assert_eq!(
        (job.generation, job.restarts, job.state),
        (2, 0, JobState::Starting)
    );
}

pub(crate) async fn executors_register_and_lose_tasks(db: &TestDb) {
    let store = db.store.as_ref();
    let registration = NodeRegistration {
        name: "gpu-a".into(),
        labels: BTreeMap::new(),
        gpus: vec![Gpu {
            index: 0,
            model: "H100".into(),
            memory_gb: 80.0,
        }],
        cpus: 8,
        memory_gb: 64,
        gpu_source: "nvidia".into(),
    };
    store
        .register_node(&registration, Utc::now())
        .await
        .unwrap();
    let audit = |target: &str| NewAuditEvent {
        actor_id: None,
        actor: "kubernetes".to_owned(),
        tenant_id: None,
        action: "node.drain",
        target: target.to_owned(),
        detail: "drained".to_owned(),
    };
    let audited = |target: &str| {
        let target = target.to_owned();
        async move {
            let log = store.list_audit(None, 100).await.unwrap();
            log.iter()
                .filter(|e| e.target == target && e.action == "node.drain")
                .count()
        }
    };
    store
        .set_node_cordon("gpu-a", true, true, &audit("gpu-a"))
        .await
        .unwrap();
    // The cordon's audit event is written with it.
    assert_eq!(audited("gpu-a").await, 1);
    // Re-registering (a restarted executor) keeps the administrator's cordon and drain.
    let again = store
        .register_node(&registration, Utc::now())
        .await
        .unwrap();
    assert!(again.cordoned && again.draining);
    // No such node: no change, and no audit event either.
    assert!(matches!(
        store
            .set_node_cordon("nope", true, false, &audit("nope"))
            .await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(audited("nope").await, 0);

    let (tenant, alice) = fixture(store, "nlp").await;
    let (other, bob) = fixture(store, "other").await;
    let job = store
        .create_job(&new_job(&tenant, alice.id, "runs", &[]))
        .await
        .unwrap()
        .value;
    let allocated = change(JobState::Starting, ReasonCode::Allocated);
    store
        .start_generation(job.id, &[worker("gpu-a")], &allocated)
        .await
        .unwrap();
    let key = TaskKey {
        job_id: job.id,
        generation: 1,
        role: TaskRole::Worker,
        index: 0,
    };
    store
        .update_task(
            &key,
            &TaskChange {
                state: Some(TaskState::Running),
                address: Some("10.0.0.1:9000".into()),
                ..TaskChange::default()
            },
        )
        .await
        .unwrap();
    for step in 1..=5 {
        store
            .record_metrics(&metrics(key, step * 100, 1.0 / step as f64))
            .await
            .unwrap();
    }
    let filter = MetricFilter {
        names: vec!["loss".into()],
        from_step: Some(200),
        to_step: Some(400),
        after: None,
        limit: 100,
    };
    let losses = store
        .list_metrics(Scope::Tenant(tenant.id), job.id, &filter)
        .await
        .unwrap();
    assert_eq!(
        losses.iter().map(|m| m.step).collect::<Vec<_>>(),
        [200, 300, 400]
    );
    assert!(
        losses
            .iter()
            .all(|m| m.name == "loss" && m.num_workers == 1)
    );
    assert!(matches!(
        store
            .list_metrics(Scope::Tenant(other.id), job.id, &filter)
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store
            .list_logs(Scope::Tenant(other.id), job.id, None, 10)
            .await,
        Err(StoreError::NotFound)
    ));
    let _ = bob;

    let live = store.live_tasks().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].address.as_deref(), Some("10.0.0.1:9000"));
    let lost = store.lose_node_tasks("gpu-a").await.unwrap();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].state, TaskState::Lost);
    assert!(store.live_tasks().await.unwrap().is_empty());
    // An ended task never comes back: a late "stopping" write is ignored.
    let late = TaskChange {
        state: Some(TaskState::Stopping),
        stop_requested: Some(true),
        ..TaskChange::default()
    };
    store.update_task(&key, &late).await.unwrap();
    assert!(store.live_tasks().await.unwrap().is_empty());
    assert_eq!(
        store
            .job_tasks(Scope::Tenant(tenant.id), job.id)
            .await
            .unwrap()[0]
            .state,
        TaskState::Lost
    );
}

pub(crate) async fn jobs_with_ended_tasks_are_finishing(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "vision").await;
    let job = store
        .create_job(&new_job(&tenant, alice.id, "finishing", &[]))
        .await
        .unwrap()
        .value;
    let allocated = change(JobState::Starting, ReasonCode::Allocated);
    let second = NewTask {
        index: 1,
        ..worker("gpu-b")
    };
    store
        .start_generation(job.id, &[worker("gpu-a"), second], &allocated)
        .await
        .unwrap();
    assert!(store.finishing_jobs().await.unwrap().is_empty());
    let key = TaskKey {
        job_id: job.id,
        generation: 1,
        role: TaskRole::Worker,
        index: 1,
    };
    let exited = TaskChange {
        state: Some(TaskState::Exited),
        exit_code: Some(0),
        ..TaskChange::default()
    };
    store.update_task(&key, &exited).await.unwrap();
    assert_eq!(store.finishing_jobs().await.unwrap(), vec![job.id]);
    // Once the job is over it is no longer the scheduler's concern.
    let failed = change(JobState::Failed, ReasonCode::TaskFailed);
    store
        .transition_job_in_generation(job.id, 1, &failed, false)
        .await
        .unwrap();
    assert!(store.finishing_jobs().await.unwrap().is_empty());
}

pub(crate) async fn running_jobs_rescale_under_a_new_generation(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "vision").await;
    let job = store
        .create_job(&new_job(&tenant, alice.id, "elastic", &[]))
        .await
        .unwrap()
        .value;
    let allocated = change(JobState::Starting, ReasonCode::Allocated);
    let rescaled = change(JobState::Rescaling, ReasonCode::Resized);
    let second = NewTask {
        index: 1,
        ..worker("gpu-b")
    };
    // Only a running job rescales.
    store
        .start_generation(job.id, &[worker("gpu-a")], &allocated)
        .await
        .unwrap();
    assert_eq!(
        store
            .rescale_generation(job.id, 1, &[worker("gpu-a"), second.clone()], &rescaled)
            .await
            .unwrap(),
        None
    );
    let running = change(JobState::Running, ReasonCode::RendezvousComplete);
    store
        .transition_job_in_generation(job.id, 1, &running, false)
        .await
        .unwrap();
    assert_eq!(
        store
            .rescale_generation(job.id, 1, &[worker("gpu-a"), second.clone()], &rescaled)
            .await
            .unwrap(),
        Some(2)
    );
    // A decision made on generation 1 cannot apply twice.
    assert_eq!(
        store
            .rescale_generation(job.id, 1, &[worker("gpu-c")], &rescaled)
            .await
            .unwrap(),
        None
    );
    let job = store.get_job(Scope::Cluster, job.id).await.unwrap();
    assert_eq!(
        (job.state, job.reason, job.generation),
        (JobState::Rescaling, ReasonCode::Resized, 2)
    );
    let tasks = store.generation_tasks(job.id, 2).await.unwrap();
    assert_eq!(tasks.len(), 2);
    assert!(tasks.iter().all(|t| t.state == TaskState::Assigned));
    // Generation 1's task is still live (it has to checkpoint and exit) beside the new ones.
    assert_eq!(store.live_tasks().await.unwrap().len(), 3);
    let events = store
        .list_job_events(Scope::Cluster, job.id, None, 10)
        .await
        .unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        (last.from_state, last.to_state),
        (Some(JobState::Running), JobState::Rescaling)
    );
    // The old generation's last checkpoint, written as it stops, is what the new one starts from.
    let old = TaskKey {
        job_id: job.id,
        generation: 1,
        role: TaskRole::Worker,
        index: 0,
    };
    store
        .record_checkpoint(&old, 40, "/ckpt/g1/step-40", 100)
        .await
        .unwrap();
    assert_eq!(
        store.latest_checkpoint(job.id).await.unwrap().unwrap().step,
        40
    );
    // Once the new generation runs, the old one is fenced off again.
    store
        .transition_job_in_generation(job.id, 2, &running, false)
        .await
        .unwrap();
    assert!(matches!(
        store
            .record_checkpoint(&old, 50, "/ckpt/g1/step-50", 100)
            .await,
        Err(StoreError::Fenced {
            current: 2,
            reported: 1
        })
    ));
}

/// The ledger opens an allocation with each generation (why it started, how many GPUs), closes it
/// with what the loop found, and reports it with its names; the queue forecast round-trips.
pub(crate) async fn generations_open_allocations_in_the_ledger(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "vision").await;
    let job = store
        .create_job(&new_job(&tenant, alice.id, "ledger", &[]))
        .await
        .unwrap()
        .value;
    let before = Utc::now() - chrono::Duration::seconds(1);
    let two = NewTask {
        gpus: vec![0, 1],
        ..worker("gpu-a")
    };
    let allocated = change(JobState::Starting, ReasonCode::Allocated);
    store
        .start_generation(
            job.id,
            &[
                two,
                NewTask {
                    index: 1,
                    ..worker("gpu-b")
                },
            ],
            &allocated,
        )
        .await
        .unwrap();
    let open = store.open_allocations().await.unwrap();
    assert_eq!(open.len(), 1);
    let a = &open[0];
    assert_eq!((a.job_id, a.generation, a.gpus), (job.id, 1, 3));
    assert_eq!((a.tenant_id, a.user_id), (tenant.id, alice.id));
    assert_eq!(a.start_cause, "submitted");
    assert!(a.ended_at.is_none() && a.started_at >= before);
    // Its tasks live: nothing for the loop to close yet.
    assert!(store.ended_allocations().await.unwrap().is_empty());

    let key = TaskKey {
        job_id: job.id,
        generation: 1,
        role: TaskRole::Worker,
        index: 0,
    };
    assert_eq!(store.first_step_at(job.id, 1).await.unwrap(), None);
    store.record_metrics(&metrics(key, 10, 1.0)).await.unwrap();
    store.record_metrics(&metrics(key, 5, 1.5)).await.unwrap();
    assert!(store.first_step_at(job.id, 1).await.unwrap().is_some());
    assert_eq!(store.last_checkpoint_at(job.id, 1).await.unwrap(), None);
    let checkpoint = store.record_checkpoint(&key, 10, "/c/10", 1).await.unwrap();
    let at = store.last_checkpoint_at(job.id, 1).await.unwrap().unwrap();
    assert!((at - checkpoint.created_at).num_milliseconds().abs() <= 1);

    // Preempted and started again: the second allocation says why.
    let preempted = change(JobState::Queued, ReasonCode::Preempted);
    store
        .transition_job_in_generation(job.id, 1, &preempted, false)
        .await
        .unwrap();
    for index in [0, 1] {
        let key = TaskKey { index, ..key };
        let exited = TaskChange {
            state: Some(TaskState::Exited),
            ..TaskChange::default()
        };
        store.update_task(&key, &exited).await.unwrap();
    }
    let ended_now = store.ended_allocations().await.unwrap();
    assert_eq!(ended_now.len(), 1);
    assert_eq!(ended_now[0].generation, 1);
    let ended = Utc::now();
    let end = AllocationEnd {
        ended_at: ended,
        end_cause: "preemption".to_owned(),
        first_step_at: Some(checkpoint.created_at),
        kept_until: Some(checkpoint.created_at),
        idle_gpu_s: 1.5,
    };
    store.close_allocation(job.id, 1, &end).await.unwrap();
    store
        .start_generation(job.id, &[worker("gpu-b")], &allocated)
        .await
        .unwrap();
    let open = store.open_allocations().await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(
        (open[0].generation, open[0].start_cause.as_str()),
        (2, "preempted")
    );

    let rows = store
        .allocations_between(
            Scope::Cluster,
            before,
            Utc::now() + chrono::Duration::seconds(1),
            10,
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    let first = &rows[0];
    assert_eq!(
        (
            first.tenant.as_str(),
            first.user.as_str(),
            first.job.as_str()
        ),
        ("vision", "alice", "ledger")
    );
    assert_eq!(first.allocation.end_cause.as_deref(), Some("preemption"));
    assert_eq!(first.allocation.idle_gpu_s, 1.5);
    assert!(first.allocation.ended_at.is_some());
    // Another tenant sees none of it; a window before it all, nothing.
    let (other, _) = fixture(store, "speech").await;
    assert!(
        store
            .allocations_between(Scope::Tenant(other.id), before, Utc::now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .allocations_between(
                Scope::Cluster,
                before - chrono::Duration::hours(1),
                before,
                10
            )
            .await
            .unwrap()
            .is_empty()
    );

    assert_eq!(store.queue_forecast().await.unwrap(), None);
    let forecast = QueueForecast {
        policy: "drover".to_owned(),
        computed_at: Utc::now(),
        entries: vec![QueueEntry {
            job: job.id,
            position: 1,
            reason: "insufficient_resources".to_owned(),
            start: Some(Utc::now()),
            finish: None,
            p10: Some(Utc::now()),
            p90: None,
        }],
        finishing: BTreeMap::from([(job.id, Utc::now())]),
    };
    store.record_forecast(&forecast).await.unwrap();
    store.record_forecast(&forecast).await.unwrap();
    let read = store.queue_forecast().await.unwrap().unwrap();
    assert_eq!(read.entries, forecast.entries);
    assert_eq!(read.finishing.len(), 1);

    // The forecast's history: nothing until the job has succeeded; then the job once, with both
    // generations' GPU-seconds, also for a read since only the second ended.
    let history = |since| store.finished_jobs_since(since, 10);
    assert!(history(before).await.unwrap().is_empty());
    let generation_2 = change(JobState::Running, ReasonCode::RendezvousComplete);
    store
        .transition_job_in_generation(job.id, 2, &generation_2, false)
        .await
        .unwrap();
    let done = change(JobState::Succeeded, ReasonCode::Completed);
    store
        .transition_job_in_generation(job.id, 2, &done, false)
        .await
        .unwrap();
    let second_end = ended + chrono::Duration::seconds(100);
    let open = store.open_allocations().await.unwrap();
    let close = AllocationEnd {
        ended_at: second_end,
        end_cause: "completed".to_owned(),
        ..end
    };
    store.close_allocation(job.id, 2, &close).await.unwrap();
    let expected_gpu_s = 3.0 * (ended - a.started_at).num_milliseconds() as f64 / 1000.0
        + (second_end - open[0].started_at).num_milliseconds() as f64 / 1000.0;
    for since in [before, ended + chrono::Duration::seconds(1)] {
        let read = history(since).await.unwrap();
        assert_eq!(read.len(), 1, "since {since}");
        let finished = read[0];
        assert_eq!((finished.job, finished.tenant), (job.id, tenant.id));
        assert!(
            (finished.gpu_s - expected_gpu_s).abs() < 0.01,
            "{} vs {expected_gpu_s}",
            finished.gpu_s
        );
        assert!(
            (finished.submitted_at - job.created_at)
                .num_milliseconds()
                .abs()
                <= 1
        );
    }
    assert!(
        history(second_end + chrono::Duration::seconds(1))
            .await
            .unwrap()
            .is_empty()
    );
}
