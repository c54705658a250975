//! Experiments: unique names per tenant (found by name), trials and segments written once (the driver's intents),
//! segments joined to their jobs' states, metric samples and GPU-seconds of the trial jobs, events,
//! checkpoints found by id.

use super::*;
use drover_core::ExperimentId;

fn worker(node: &str) -> NewTask {
    NewTask {
        role: TaskRole::Worker,
        index: 0,
        node_name: node.to_owned(),
        gpus: vec![0, 1],
        cpus: 1,
    }
}

pub(crate) async fn experiments_keep_trials_and_segments_once(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "vision").await;
    let (other, _) = fixture(store, "speech").await;
    let now = Utc::now();
    let new = NewExperiment {
        id: ExperimentId::new(),
        tenant_id: tenant.id,
        name: "search".to_owned(),
        document: serde_json::json!({"spec": {"seed": 1}}),
        submitted_by: alice.id,
        created_at: now,
    };
    let experiment = store.create_experiment(&new).await.unwrap();
    assert_eq!(experiment.state, ExperimentState::Active);
    assert_eq!(experiment.tenant_name, "vision");
    let twin = NewExperiment {
        id: ExperimentId::new(),
        ..new.clone()
    };
    assert!(matches!(
        store.create_experiment(&twin).await,
        Err(StoreError::Conflict {
            field: "metadata.name",
            ..
        })
    ));
    assert!(matches!(
        store
            .get_experiment(Scope::Tenant(other.id), experiment.id)
            .await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        store
            .list_experiments(Scope::Tenant(tenant.id), None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(store.open_experiments().await.unwrap().len(), 1);
    // By name, within its tenant only.
    let found = store.experiment_by_name(tenant.id, "search").await.unwrap();
    assert_eq!(found.map(|e| e.id), Some(experiment.id));
    assert!(
        store
            .experiment_by_name(other.id, "search")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .experiment_by_name(tenant.id, "elsewhere")
            .await
            .unwrap()
            .is_none()
    );

    let trial = TrialRow {
        experiment_id: experiment.id,
        trial: 0,
        params: serde_json::json!({"lr": 0.1}),
        source: Some((3, 1)),
        replaces: Some(2),
        created_at: now,
    };
    let segment = SegmentRow {
        experiment_id: experiment.id,
        trial: 0,
        segment: 0,
        job_id: None,
        max_steps: Some(10),
        stop_reason: None,
        created_at: now,
        job_state: None,
        job_name: None,
    };
    assert!(store.insert_trial(&trial, &segment).await.unwrap());
    let changed = TrialRow {
        params: serde_json::json!({"lr": 0.5}),
        ..trial.clone()
    };
    let other_first = SegmentRow {
        max_steps: Some(99),
        ..segment.clone()
    };
    assert!(
        !store.insert_trial(&changed, &other_first).await.unwrap(),
        "the first row stays"
    );
    // The trial came with its first segment; recording it again changes nothing.
    assert!(!store.insert_segment(&segment).await.unwrap());
    let (trials, segments) = store.experiment_trials(experiment.id).await.unwrap();
    assert_eq!(trials.len(), 1);
    assert_eq!(trials[0].params["lr"], 0.1);
    assert_eq!(trials[0].source, Some((3, 1)));
    assert_eq!(trials[0].replaces, Some(2));
    assert_eq!(segments.len(), 1);
    assert_eq!(
        segments[0].max_steps,
        Some(10),
        "the first trial's segment stays"
    );
    assert_eq!(segments[0].job_id, None, "an intent, before its job");

    let job = store
        .create_job(&new_job(&tenant, alice.id, "search-t0-0", &[]))
        .await
        .unwrap()
        .value;
    store
        .set_segment_job(experiment.id, 0, 0, job.id)
        .await
        .unwrap();
    store
        .set_segment_stop_reason(experiment.id, 0, 0, "median rule")
        .await
        .unwrap();
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
    for (step, value) in [(5, 0.4), (10, 0.7)] {
        store
            .record_metrics(&NewMetrics {
                key,
                num_ps: 0,
                num_workers: 1,
                worker_nodes: 1,
                gpu_model: "cpu".to_owned(),
                step,
                values: vec![("val_accuracy".to_owned(), value), ("loss".to_owned(), 1.0)],
                recorded_at: Utc::now(),
            })
            .await
            .unwrap();
    }
    let checkpoint = store
        .record_checkpoint(&key, 10, "/ckpt/step-10", 1)
        .await
        .unwrap();
    let found = store
        .checkpoint_by_id(checkpoint.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((found.job_id, found.step), (job.id, 10));
    assert!(
        store
            .checkpoint_by_id(uuid::Uuid::nil())
            .await
            .unwrap()
            .is_none()
    );

    let (_, segments) = store.experiment_trials(experiment.id).await.unwrap();
    assert_eq!(segments[0].job_id, Some(job.id));
    assert_eq!(segments[0].job_state, Some(JobState::Starting));
    assert_eq!(segments[0].job_name.as_deref(), Some("search-t0-0"));
    assert_eq!(segments[0].stop_reason.as_deref(), Some("median rule"));
    let samples = store
        .experiment_samples(experiment.id, "val_accuracy")
        .await
        .unwrap();
    let values: Vec<(u64, f64)> = samples.iter().map(|s| (s.step, s.value)).collect();
    assert_eq!(values, [(5, 0.4), (10, 0.7)]);
    // Two GPUs held for the allocation's whole life so far.
    let later = Utc::now() + Duration::seconds(100);
    let gpu_s = store
        .experiment_gpu_seconds(experiment.id, later)
        .await
        .unwrap();
    assert!((200.0..260.0).contains(&gpu_s), "{gpu_s}");

    store
        .set_experiment_best(experiment.id, Some((0, 0.7)), now)
        .await
        .unwrap();
    store
        .add_experiment_event(experiment.id, "trial 0 starts", now)
        .await
        .unwrap();
    store
        .set_experiment_state(experiment.id, ExperimentState::Succeeded, "done", now)
        .await
        .unwrap();
    let ended = store
        .get_experiment(Scope::Cluster, experiment.id)
        .await
        .unwrap();
    assert_eq!((ended.best_trial, ended.best_value), (Some(0), Some(0.7)));
    assert_eq!(ended.state, ExperimentState::Succeeded);
    assert!(ended.ended_at.is_some());
    assert!(store.open_experiments().await.unwrap().is_empty());
    let events = store
        .list_experiment_events(experiment.id, None, 10)
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    assert!(
        store
            .list_experiment_events(experiment.id, Some(events[0].id), 10)
            .await
            .unwrap()
            .is_empty()
    );
}
