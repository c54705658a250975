//! The DroverExperiment controller against the fake API server (`fake_kube`), on real stores: apply →
//! one experiment in the namespace's tenant, submitted as `kubernetes` → status with its id, state and
//! trials once the driver starts them, each trial an Event → no DroverJob mirrors of its trial jobs
//! (mirroring on) → an edit refused → a restart that lost the status finds the same experiment → an
//! invalid space (min > max) → a condition naming the field, no experiment → delete → the experiment
//! and its trial jobs cancelled, the finalizer kept until a trial's task stops → applied again → a new
//! experiment.

use super::{Harness, NAMESPACE, condition, condition_is};
use drover_controller::experiment_admission::UID_ANNOTATION;
use drover_controller::experiment_crd::{DroverExperiment, EXPERIMENT_FINALIZER};
use drover_core::experiment::Param;
use drover_core::{JobState, ReasonCode};
use drover_service::experiments::{Blocked, drive_all};
use drover_store::{
    Experiment, ExperimentState, NewTask, Scope, StateChange, TaskChange, TaskKey, TaskRole,
    TaskState,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const EXPERIMENT: &str = include_str!("../../../examples/k8s/digits-asha.yaml");
const RESOURCE: &str = "droverexperiments";

fn experiment_object(name: &str) -> DroverExperiment {
    let mut object: DroverExperiment = serde_yaml::from_str(EXPERIMENT).unwrap();
    object.metadata.name = Some(name.to_owned());
    object.metadata.namespace = None;
    object
}

fn api(h: &Harness) -> Api<DroverExperiment> {
    Api::namespaced(h.fake.client(), NAMESPACE)
}

/// Waits until `check` holds for the DroverExperiment (or panics with what it was).
async fn until(h: &Harness, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let object = h
            .fake
            .get(RESOURCE, Some(NAMESPACE), name)
            .unwrap_or(Value::Null);
        if check(&object) {
            return object;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; the object is {object:#}\nevents: {:#?}",
            h.events(name)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn experiments(h: &Harness) -> Vec<Experiment> {
    h.store
        .list_experiments(Scope::Tenant(h.tenant.id), None, 100)
        .await
        .unwrap()
}

async fn experiment_lifecycle(db: drover_store::testing::TestDb) {
    let mut h = Harness::new(db).await;
    // Mirroring on: the trial jobs must still get no DroverJob objects of their own.
    h.start_controller_mirroring(true);
    let api = api(&h);

    // Apply → one experiment in the namespace's tenant, as the `kubernetes` user → status.
    api.create(&PostParams::default(), &experiment_object("digits-asha"))
        .await
        .unwrap();
    let object = until(&h, "digits-asha", "the experiment's status", |o| {
        o["status"]["state"] == "active" && condition_is(o, "Accepted", "True", "Submitted")
    })
    .await;
    assert_eq!(
        object["metadata"]["finalizers"],
        json!([EXPERIMENT_FINALIZER])
    );
    assert_eq!(object["status"]["tenant"], "vision");
    assert_eq!(object["status"]["metric"], "val_accuracy");
    assert_eq!(object["status"]["trials"], 0);
    assert_eq!(object["status"]["observedGeneration"], 1);
    assert!(condition_is(&object, "Synced", "True", "Submitted"));
    let stored = experiments(&h).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let first = stored[0].clone();
    assert_eq!(first.name, "digits-asha");
    assert_eq!(object["status"]["experimentId"], first.id.to_string());
    assert_eq!(
        first.document["metadata"]["annotations"][UID_ANNOTATION],
        object["metadata"]["uid"]
    );
    let submitter = h
        .store
        .get_user(Scope::Cluster, first.submitted_by)
        .await
        .unwrap();
    assert_eq!(submitter.name, "kubernetes");

    // The driver starts trials (4 at a time): the status counts them, each start is an Event.
    drive_all(&h.service, &Blocked::default()).await.unwrap();
    let object = until(&h, "digits-asha", "the trials in the status", |o| {
        o["status"]["trials"] == 4 && o["status"]["activeTrials"] == 4
    })
    .await;
    assert_eq!(object["status"]["state"], "active");
    let events = h.events("digits-asha");
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("Submitted: submitted by kubernetes")),
        "{events:?}"
    );
    for trial in 0..4 {
        let started = format!("TrialStarted: trial {trial} starts");
        until(&h, "digits-asha", &started, |_| {
            h.events("digits-asha")
                .iter()
                .any(|e| e.starts_with(&started))
        })
        .await;
    }
    let trial_jobs = h.jobs().await;
    assert_eq!(trial_jobs.len(), 4, "{trial_jobs:?}");
    assert!(
        trial_jobs
            .iter()
            .all(|j| j.submitted_by == first.submitted_by)
    );

    // An edit of the spec is refused; the experiment goes on as submitted.
    let edit = json!({"spec": {"budget": {"max_trials": 20}}});
    api.patch("digits-asha", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    let object = until(&h, "digits-asha", "the refused edit", |o| {
        condition_is(o, "Synced", "False", "ImmutableField")
    })
    .await;
    let synced = condition(&object, "Synced").unwrap();
    let message = synced["message"].as_str().unwrap();
    assert!(
        message.starts_with("spec.budget.max_trials cannot change"),
        "{message}"
    );
    assert_eq!(synced["observedGeneration"], 2);
    let again = h
        .store
        .get_experiment(Scope::Cluster, first.id)
        .await
        .unwrap();
    assert_eq!(again.document["spec"]["budget"]["max_trials"], 12);
    assert!(
        h.events("digits-asha")
            .iter()
            .any(|e| e.starts_with("ImmutableField: spec.budget.max_trials"))
    );

    // An invalid space: a condition naming the field, a Warning Event, no experiment.
    let mut bad = experiment_object("bad-range");
    bad.spec.experiment.parameters.insert(
        "train.batch_size".to_owned(),
        Param::Int {
            min: 256,
            max: 16,
            log: false,
            when: None,
        },
    );
    api.create(&PostParams::default(), &bad).await.unwrap();
    let object = until(&h, "bad-range", "the invalid spec's condition", |o| {
        condition_is(o, "Accepted", "False", "InvalidSpec")
    })
    .await;
    assert_eq!(object["status"]["state"], "Invalid");
    let message = condition(&object, "Accepted").unwrap()["message"]
        .as_str()
        .unwrap();
    assert!(
        message.starts_with("spec.parameters.train.batch_size.max: must be at least min"),
        "{message}"
    );
    assert!(
        h.events("bad-range")
            .iter()
            .any(|e| e.starts_with("InvalidSpec: spec.parameters.train.batch_size.max")),
        "{:?}",
        h.events("bad-range")
    );
    assert_eq!(experiments(&h).await.len(), 1);

    // The controller stops after creating the experiment but before its status was written
    // (simulated by wiping the status), and a new one starts after an API-server restart and a
    // watch expiry: it finds the same experiment, never a second.
    h.stop_controller();
    api.patch_status(
        "digits-asha",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": null})),
    )
    .await
    .unwrap();
    h.fake.compact();
    h.fake.restart(Duration::from_millis(200)).await;
    h.start_controller_mirroring(true);
    let object = until(&h, "digits-asha", "the status rewritten", |o| {
        o["status"]["experimentId"].is_string() && o["status"]["trials"] == 4
    })
    .await;
    assert_eq!(object["status"]["experimentId"], first.id.to_string());
    assert_eq!(experiments(&h).await.len(), 1);

    // Mirroring never made objects of the trial jobs (submitted by `kubernetes`, as the
    // DroverJobs' own jobs are).
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        h.fake.list("droverjobs").is_empty(),
        "{:#?}",
        h.fake.list("droverjobs")
    );

    // One trial has a task running on a node.
    let running = trial_jobs[0].id;
    let allocated = StateChange {
        to: JobState::Starting,
        reason: ReasonCode::Allocated,
        message: String::new(),
        actor: None,
    };
    let task = NewTask {
        role: TaskRole::Worker,
        index: 0,
        node_name: "gpu-a".to_owned(),
        gpus: vec![0],
        cpus: 1,
    };
    let generation = h
        .store
        .start_generation(running, &[task], &allocated)
        .await
        .unwrap()
        .unwrap();

    // Delete → the experiment and its trials are cancelled → the finalizer stays while the task
    // runs, and goes once it has stopped.
    api.delete("digits-asha", &DeleteParams::default())
        .await
        .unwrap();
    until(&h, "digits-asha", "the experiment cancelled", |_| {
        h.events("digits-asha")
            .iter()
            .any(|e| e.starts_with("Cancelling: the object was deleted"))
    })
    .await;
    let cancelled = h
        .store
        .get_experiment(Scope::Cluster, first.id)
        .await
        .unwrap();
    assert_eq!(cancelled.state, ExperimentState::Cancelled);
    let jobs = h.jobs().await;
    assert!(
        jobs.iter().all(|j| j.state == JobState::Cancelled),
        "{jobs:?}"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let object = h.fake.get(RESOURCE, Some(NAMESPACE), "digits-asha");
    assert!(
        object.is_some_and(|o| o["metadata"]["finalizers"] == json!([EXPERIMENT_FINALIZER])),
        "the finalizer went while a trial's task still ran"
    );
    let key = TaskKey {
        job_id: running,
        generation,
        role: TaskRole::Worker,
        index: 0,
    };
    let exited = TaskChange {
        state: Some(TaskState::Exited),
        ..TaskChange::default()
    };
    h.store.update_task(&key, &exited).await.unwrap();
    until(&h, "digits-asha", "the object gone", Value::is_null).await;

    // Applied again under the same name: a new experiment (the ended one keeps its name).
    api.create(&PostParams::default(), &experiment_object("digits-asha"))
        .await
        .unwrap();
    let object = until(&h, "digits-asha", "the second experiment", |o| {
        o["status"]["state"] == "active"
    })
    .await;
    assert_ne!(object["status"]["experimentId"], first.id.to_string());
    let stored = experiments(&h).await;
    assert_eq!(stored.len(), 2);
    assert!(
        stored
            .iter()
            .any(|e| e.name.starts_with("digits-asha-") && e.state == ExperimentState::Active),
        "{stored:?}"
    );

    // An object that never became an experiment deletes at once.
    api.delete("bad-range", &DeleteParams::default())
        .await
        .unwrap();
    until(&h, "bad-range", "the invalid object gone", Value::is_null).await;
    h.stop_controller();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experiment_controller_lifecycle_on_sqlite() {
    experiment_lifecycle(drover_store::testing::TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experiment_controller_lifecycle_on_postgres() {
    experiment_lifecycle(drover_store::testing::TestDb::postgres().await).await;
}
