//! Conformance cases for the execution side of the store: fenced reports from old generations,
//! executors registering and losing their tasks, jobs whose tasks ended finishing.

use super::{change, fixture, new_job};
use chrono::Utc;
use drover_core::{JobId, JobState, ReasonCode};
use drover_store::testing::TestDb;
use drover_store::*;
use std::collections::BTreeMap;

pub(crate) fn worker(node: &str) -> NewTask {
    NewTask {
        role: TaskRole::Worker,
        index: 0,
        node_name: node.to_owned(),
        gpus: vec![0],
        cpus: 1,
    }
}

pub(crate) fn metrics(key: TaskKey, step: u64, loss: f64) -> NewMetrics {
    NewMetrics {
        key,
        num_ps: 0,
        num_workers: 1,
        worker_nodes: 1,
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
        isolation: String::new(),
        runs_images: true,
        taints: vec![Taint {
            key: "dedicated".into(),
            value: "vision".into(),
        }],
    };
    store
        .register_node(&registration, Utc::now())
        .await
        .unwrap();
    let registered = store.get_node("gpu-a").await.unwrap();
    assert!(registered.runs_images);
    assert_eq!(registered.taints[0].value, "vision");
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
        let mut report = metrics(key, step * 100, 1.0 / step as f64);
        // Steps 400 and 500 with the workers on two nodes.
        report.worker_nodes = if step >= 4 { 2 } else { 1 };
        store.record_metrics(&report).await.unwrap();
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
    assert_eq!(
        losses.iter().map(|m| m.worker_nodes).collect::<Vec<_>>(),
        [1, 1, 2]
    );
    assert!(matches!(
        store
            .list_metrics(Scope::Tenant(other.id), job.id, &filter)
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store
            .list_logs(
                Scope::Tenant(other.id),
                job.id,
                &LogFilter::default(),
                LogWindow::after(0),
                10
            )
            .await,
        Err(StoreError::NotFound)
    ));
    let _ = bob;

    let live = store.live_tasks().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].address.as_deref(), Some("10.0.0.1:9000"));
    assert_eq!(store.live_tasks_on("gpu-a").await.unwrap(), live);
    assert!(store.live_tasks_on("gpu-b").await.unwrap().is_empty());
    let lost = store.lose_node_tasks("gpu-a").await.unwrap();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].state, TaskState::Lost);
    assert!(store.live_tasks().await.unwrap().is_empty());
    assert!(store.live_tasks_on("gpu-a").await.unwrap().is_empty());
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

pub(crate) async fn log_reads_filter_and_page_from_either_end(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "vision").await;
    let job = store
        .create_job(&new_job(&tenant, alice.id, "logs", &[]))
        .await
        .unwrap()
        .value;
    let second = NewTask {
        index: 1,
        ..worker("a")
    };
    store
        .start_generation(
            job.id,
            &[worker("a"), second],
            &change(JobState::Starting, ReasonCode::Allocated),
        )
        .await
        .unwrap()
        .unwrap();
    let key = |index| TaskKey {
        job_id: job.id,
        generation: 1,
        role: TaskRole::Worker,
        index,
    };
    let lines = |texts: &[&str]| -> Vec<NewLogLine> {
        texts
            .iter()
            .map(|text| NewLogLine {
                stream: "stdout".into(),
                line: (*text).to_owned(),
                logged_at: Utc::now(),
            })
            .collect()
    };
    store
        .append_logs(
            &key(0),
            &lines(&[
                "epoch 1 LOSS 0.9",
                r#"{"drover": "metrics", "step": 1, "values": {"loss": 0.9}}"#,
                "50%_done",
                "500 done",
            ]),
        )
        .await
        .unwrap();
    store
        .append_logs(&key(1), &lines(&["worker one: loss 0.8"]))
        .await
        .unwrap();
    let read = |filter: LogFilter, window: LogWindow, limit: u32| async move {
        store
            .list_logs(Scope::Cluster, job.id, &filter, window, limit)
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.line)
            .collect::<Vec<String>>()
    };
    let all = store
        .list_logs(
            Scope::Cluster,
            job.id,
            &LogFilter::default(),
            LogWindow::after(0),
            100,
        )
        .await
        .unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(
        all.iter().map(|l| l.contract).collect::<Vec<_>>(),
        [false, true, false, false, false]
    );
    let plain = LogFilter {
        hide_contract: true,
        ..LogFilter::default()
    };
    assert_eq!(
        read(plain.clone(), LogWindow::after(0), 100).await,
        [
            "epoch 1 LOSS 0.9",
            "50%_done",
            "500 done",
            "worker one: loss 0.8"
        ]
    );
    // The last lines, in order; the page before the first of them.
    assert_eq!(
        read(plain.clone(), LogWindow::LAST, 2).await,
        ["500 done", "worker one: loss 0.8"]
    );
    assert_eq!(
        read(plain.clone(), LogWindow::before(all[3].id), 2).await,
        ["epoch 1 LOSS 0.9", "50%_done"]
    );
    assert_eq!(
        read(LogFilter::default(), LogWindow::after(all[2].id), 1).await,
        ["500 done"]
    );
    // Between two lines: the first of the range, or the last.
    let between = LogWindow {
        after: Some(all[0].id),
        before: Some(all[4].id),
        last: false,
    };
    assert_eq!(read(plain.clone(), between, 1).await, ["50%_done"]);
    assert_eq!(
        read(
            plain.clone(),
            LogWindow {
                last: true,
                ..between
            },
            1
        )
        .await,
        ["500 done"]
    );
    // One task; a search ignoring case; LIKE's wildcards are plain text.
    let task_one = LogFilter {
        task: Some((TaskRole::Worker, 1)),
        ..LogFilter::default()
    };
    assert_eq!(
        read(task_one, LogWindow::LAST, 10).await,
        ["worker one: loss 0.8"]
    );
    let search = |text: &str| LogFilter {
        contains: Some(text.to_owned()),
        hide_contract: true,
        ..LogFilter::default()
    };
    assert_eq!(
        read(search("loss"), LogWindow::after(0), 10).await,
        ["epoch 1 LOSS 0.9", "worker one: loss 0.8"]
    );
    assert_eq!(
        read(search("%_"), LogWindow::after(0), 10).await,
        ["50%_done"]
    );
    let other_generation = LogFilter {
        generation: Some(2),
        ..LogFilter::default()
    };
    assert!(
        read(other_generation, LogWindow::after(0), 10)
            .await
            .is_empty()
    );
    // The edge that bounds a search: the span-th line from the window's start, in its direction,
    // counting every line; none when fewer lie there.
    let edge = |window, span| async move {
        store
            .log_edge(Scope::Cluster, job.id, window, span)
            .await
            .unwrap()
    };
    assert_eq!(edge(LogWindow::LAST, 2).await, Some(all[3].id));
    assert_eq!(edge(LogWindow::after(0), 2).await, Some(all[1].id));
    assert_eq!(edge(LogWindow::after(all[0].id), 4).await, Some(all[4].id));
    assert_eq!(edge(LogWindow::after(all[0].id), 5).await, None);
    assert_eq!(edge(LogWindow::before(all[4].id), 1).await, Some(all[3].id));
    assert_eq!(edge(between, 3).await, Some(all[3].id));
    assert_eq!(edge(LogWindow::LAST, 0).await, None);
    // What the store's query passes, the filter's own test passes too (live views filter in memory).
    for filter in [plain, search("LOSS"), search("%_")] {
        let expected = read(filter.clone(), LogWindow::after(0), 100).await;
        let in_memory: Vec<String> = all
            .iter()
            .filter(|l| filter.matches(l))
            .map(|l| l.line.clone())
            .collect();
        assert_eq!(in_memory, expected, "{filter:?}");
    }
}

/// Three jobs of one tenant, each in its first generation with one worker: its task's key.
pub(crate) async fn three_running_jobs(store: &dyn Store) -> Vec<TaskKey> {
    let (tenant, alice) = fixture(store, "vision").await;
    let allocated = change(JobState::Starting, ReasonCode::Allocated);
    let mut keys = Vec::new();
    for name in ["first", "second", "third"] {
        let job = store
            .create_job(&new_job(&tenant, alice.id, name, &[]))
            .await
            .unwrap()
            .value;
        store
            .start_generation(job.id, &[worker("gpu-a")], &allocated)
            .await
            .unwrap();
        keys.push(TaskKey {
            job_id: job.id,
            generation: 1,
            role: TaskRole::Worker,
            index: 0,
        });
    }
    keys
}

/// The scheduling loop's read of many jobs' new samples: each job after its own cursor, only the
/// names asked for, in id order, at most the limit.
pub(crate) async fn new_samples_of_many_jobs_come_in_one_query(db: &TestDb) {
    let store = db.store.as_ref();
    let keys = three_running_jobs(store).await;
    // Interleaved: job 0, 1, 2 at steps 100..300 (a loss and an accuracy each).
    for step in 1..=3 {
        for key in &keys {
            store
                .record_metrics(&metrics(*key, step * 100, 1.0 / step as f64))
                .await
                .unwrap();
        }
    }
    let all = |_: &TaskKey| MetricFilter {
        names: vec!["loss".into()],
        from_step: None,
        to_step: None,
        after: None,
        limit: 100,
    };
    let mut losses = Vec::new();
    for key in &keys {
        losses.push(
            store
                .list_metrics(Scope::Cluster, key.job_id, &all(key))
                .await
                .unwrap(),
        );
    }
    // Job 0 read through its first loss, job 1 through its second; job 2 not asked for.
    let cursors = [
        (keys[0].job_id, losses[0][0].id),
        (keys[1].job_id, losses[1][1].id),
    ];
    let names = ["loss".to_owned()];
    let fresh = store.metrics_after(&cursors, &names, 100).await.unwrap();
    let got: Vec<(JobId, u64)> = fresh.iter().map(|(job, s)| (*job, s.step)).collect();
    assert_eq!(
        got,
        [
            (keys[0].job_id, 200),
            (keys[0].job_id, 300),
            (keys[1].job_id, 300)
        ]
    );
    assert!(fresh.windows(2).all(|w| w[0].1.id < w[1].1.id));
    assert!(fresh.iter().all(|(_, s)| s.name == "loss"));
    assert_eq!(fresh[0].1, losses[0][1]);
    // All names when none are given (job 0: its first accuracy and steps 200-300, both names; job
    // 1: its second accuracy and step 300); at most the limit.
    assert_eq!(
        store.metrics_after(&cursors, &[], 100).await.unwrap().len(),
        8
    );
    assert_eq!(
        store
            .metrics_after(&cursors, &names, 2)
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(
        store
            .metrics_after(&[], &names, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A job's document version (what the leader keeps a parsed document by) moves with its document
/// (a resize) and not with its state, and `job_documents` reads it with the document.
pub(crate) async fn a_document_change_moves_its_version_and_a_state_change_does_not(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "vision").await;
    let job = store
        .create_job(&new_job(&tenant, alice.id, "versioned", &[]))
        .await
        .unwrap()
        .value;
    assert_eq!(job.document_version, 0);
    let version = |id| async move {
        let read = store.get_job(Scope::Cluster, id).await.unwrap();
        let (_, listed, _) = store.job_documents(&[id]).await.unwrap().remove(0);
        assert_eq!(
            read.document_version, listed,
            "the job row and its document agree"
        );
        listed
    };
    assert_eq!(version(job.id).await, 0);
    store
        .start_generation(
            job.id,
            &[worker("a")],
            &change(JobState::Starting, ReasonCode::Allocated),
        )
        .await
        .unwrap();
    assert_eq!(version(job.id).await, 0, "a state change leaves it");
    let mut document = (*store
        .get_job(Scope::Cluster, job.id)
        .await
        .unwrap()
        .document
        .unwrap())
    .clone();
    document["spec"]["resources"]["workers"] = serde_json::json!({"min": 1, "max": 2});
    let event = StateChange {
        to: JobState::Starting,
        reason: ReasonCode::Resized,
        message: "resources changed".to_owned(),
        actor: None,
    };
    let resized = store
        .update_job_document(Scope::Cluster, job.id, &document, 2, &event)
        .await
        .unwrap();
    assert_eq!(resized.document_version, 1);
    assert_eq!(version(job.id).await, 1, "a document change moves it");
    let (_, _, stored) = store.job_documents(&[job.id]).await.unwrap().remove(0);
    assert_eq!(stored["spec"]["resources"]["workers"]["max"], 2);
}
