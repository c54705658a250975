//! Conformance cases for generations: a running job rescaled under a new generation, and each
//! generation opening allocations in the GPU ledger.

use super::execution::{metrics, worker};
use super::{change, fixture, new_job};
use chrono::Utc;
use drover_core::{JobId, JobState, ReasonCode};
use drover_store::testing::TestDb;
use drover_store::*;
use std::collections::BTreeMap;

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
    // Its last reports land too, in its own generation.
    store.record_metrics(&metrics(old, 40, 0.25)).await.unwrap();
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
    assert!(matches!(
        store.record_metrics(&metrics(old, 50, 0.2)).await,
        Err(StoreError::Fenced {
            current: 2,
            reported: 1
        })
    ));
    let filter = MetricFilter {
        names: vec!["loss".into()],
        limit: 100,
        ..Default::default()
    };
    let steps: Vec<u64> = store
        .list_metrics(Scope::Cluster, job.id, &filter)
        .await
        .unwrap()
        .iter()
        .map(|m| m.step)
        .collect();
    assert_eq!(steps, [40], "the fenced report stored nothing");
    let nobody = TaskKey {
        job_id: JobId::new(),
        ..old
    };
    assert!(matches!(
        store.record_metrics(&metrics(nobody, 1, 1.0)).await,
        Err(StoreError::NotFound)
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
            guesses: 2,
            made_at: Some(Utc::now() - chrono::Duration::seconds(30)),
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

/// Many jobs' generations are read in one query, and they move to `running` in one transaction, each only in the generation given with it and
/// where the state machine allows: the rest are left as they are.
pub(crate) async fn jobs_are_marked_running_together_in_their_generations(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "batch").await;
    let mut jobs = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let job = store
            .create_job(&new_job(&tenant, alice.id, name, &[]))
            .await
            .unwrap()
            .value;
        jobs.push(job.id);
    }
    let allocated = change(JobState::Starting, ReasonCode::Allocated);
    for &job in &jobs[..3] {
        store
            .start_generation(job, &[worker("gpu-a")], &allocated)
            .await
            .unwrap();
    }
    // Their generations' tasks, read together: only the generations asked for.
    let read = store
        .tasks_of_generations(&[(jobs[0], 1), (jobs[1], 1), (jobs[2], 2), (jobs[3], 1)])
        .await
        .unwrap();
    let keys: Vec<(JobId, u64)> = read
        .iter()
        .map(|t| (t.key.job_id, t.key.generation))
        .collect();
    let mut expected = vec![(jobs[0], 1), (jobs[1], 1)];
    expected.sort();
    assert_eq!(keys, expected);
    let running = change(JobState::Running, ReasonCode::RendezvousComplete);
    let moved = store
        .transition_jobs_in_generation(&[
            (jobs[0], 1, running.clone()),
            (jobs[1], 1, running.clone()),
            // Not its generation.
            (jobs[2], 2, running.clone()),
            // Queued: the state machine has no move from there to running.
            (jobs[3], 1, running.clone()),
        ])
        .await
        .unwrap();
    assert_eq!(moved, jobs[..2]);
    for (&job, state) in jobs.iter().zip([
        JobState::Running,
        JobState::Running,
        JobState::Starting,
        JobState::Queued,
    ]) {
        assert_eq!(
            store.get_job(Scope::Cluster, job).await.unwrap().state,
            state
        );
    }
    let events = store
        .list_job_events(Scope::Cluster, jobs[0], None, 10)
        .await
        .unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        (last.from_state, last.to_state, last.reason),
        (
            Some(JobState::Starting),
            JobState::Running,
            ReasonCode::RendezvousComplete
        )
    );
    // Already running: nothing moves again.
    let again = store
        .transition_jobs_in_generation(&[(jobs[0], 1, running)])
        .await
        .unwrap();
    assert!(again.is_empty());
}

/// Many queued jobs start in one transaction: each still queued gets its generation, its tasks as
/// stored (workers then PS shards), its event and its ledger allocation with the models of its
/// GPUs; a job no longer queued is left out and unchanged.
pub(crate) async fn many_jobs_start_in_one_transaction(db: &TestDb) {
    let store = db.store.as_ref();
    assert!(store.start_generations(&[]).await.unwrap().is_empty());
    let (tenant, alice) = fixture(store, "vision").await;
    let now = Utc::now();
    store
        .upsert_node(&Node {
            id: uuid::Uuid::now_v7(),
            name: "gpu-a".into(),
            labels: BTreeMap::new(),
            gpus: (0..2)
                .map(|index| Gpu {
                    index,
                    model: "H100".into(),
                    memory_gb: 80.0,
                })
                .collect(),
            cpus: 8,
            memory_gb: 64,
            health: "healthy".into(),
            cordoned: false,
            draining: false,
            gpu_source: "nvidia".into(),
            isolation: String::new(),
            runs_images: false,
            taints: Vec::new(),
            last_heartbeat_at: Some(now),
            created_at: now,
        })
        .await
        .unwrap();
    let mut jobs = Vec::new();
    for name in ["one", "two", "gone"] {
        jobs.push(
            store
                .create_job(&new_job(&tenant, alice.id, name, &[]))
                .await
                .unwrap()
                .value
                .id,
        );
    }
    let cancelled = change(JobState::Cancelled, ReasonCode::CancelledByUser);
    store
        .transition_job(Scope::Cluster, jobs[2], &cancelled)
        .await
        .unwrap();
    let ps = NewTask {
        role: TaskRole::Ps,
        index: 0,
        node_name: "gpu-b".into(),
        gpus: Vec::new(),
        cpus: 2,
    };
    let started = |n: &str| StateChange {
        message: format!("started {n}"),
        ..change(JobState::Starting, ReasonCode::Allocated)
    };
    let batch = vec![
        (jobs[0], vec![ps.clone(), worker("gpu-a")], started("one")),
        (
            jobs[1],
            vec![NewTask {
                gpus: vec![1],
                ..worker("gpu-a")
            }],
            started("two"),
        ),
        (jobs[2], vec![worker("gpu-a")], started("gone")),
    ];
    let done = store.start_generations(&batch).await.unwrap();
    assert_eq!(done.len(), 2, "{done:?}");
    assert_eq!((done[0].0, done[0].1), (jobs[0], 1));
    let roles: Vec<TaskRole> = done[0].2.iter().map(|t| t.key.role).collect();
    assert_eq!(roles, [TaskRole::Worker, TaskRole::Ps], "workers first");
    assert_eq!(
        done[0].2,
        store.generation_tasks(jobs[0], 1).await.unwrap(),
        "the tasks as stored"
    );
    assert_eq!(done[1].2[0].gpus, [1]);
    assert_eq!(done[1].2[0].state, TaskState::Assigned);
    for (job, name) in [(jobs[0], "one"), (jobs[1], "two")] {
        let read = store.get_job(Scope::Cluster, job).await.unwrap();
        assert_eq!((read.state, read.generation), (JobState::Starting, 1));
        assert_eq!(read.message, format!("started {name}"));
        let events = store
            .list_job_events(Scope::Cluster, job, None, 10)
            .await
            .unwrap();
        let last = events.last().unwrap();
        assert_eq!(
            (last.from_state, last.to_state, last.message.as_str()),
            (
                Some(JobState::Queued),
                JobState::Starting,
                format!("started {name}").as_str()
            )
        );
    }
    let gone = store.get_job(Scope::Cluster, jobs[2]).await.unwrap();
    assert_eq!((gone.state, gone.generation), (JobState::Cancelled, 0));
    assert!(store.generation_tasks(jobs[2], 1).await.unwrap().is_empty());
    let open = store.open_allocations().await.unwrap();
    let of = |job| open.iter().find(|a| a.job_id == job).unwrap();
    assert_eq!(open.len(), 2);
    assert_eq!((of(jobs[0]).gpus, of(jobs[0]).generation), (1, 1));
    assert_eq!(of(jobs[0]).start_cause, "submitted");
    assert_eq!(
        of(jobs[1]).gpu_models,
        BTreeMap::from([("H100".to_owned(), 1)])
    );
    assert_eq!(
        (of(jobs[1]).tenant_id, of(jobs[1]).user_id),
        (tenant.id, alice.id)
    );
    // Started again: nothing moves.
    assert!(store.start_generations(&batch).await.unwrap().is_empty());
}
