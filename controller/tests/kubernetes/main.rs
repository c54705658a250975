//! The DroverJob controller against a fake Kubernetes API server over real HTTP (`fake_kube`), on real
//! stores: create → job in the store → status; edits → resize or a refusal; a bad spec, an unknown
//! tenant → conditions and Events; a controller restarted after losing its status write → the same
//! job; watch expiry (410) and an API-server restart → nothing lost or duplicated; delete → job
//! cancelled → finalizer removed; delete and apply again → a new job. Plus one reconcile against a
//! `tower-test` mock, for the exact requests it makes.

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

mod experiments;
mod mirror;

use drover_controller::controller::{self, Context, Settings};
use drover_controller::crd::{DroverJob, FINALIZER};
use drover_service::Service;
use drover_service::bootstrap::ensure_cluster_admin;
use drover_store::testing::TestDb;
use drover_store::{JobFilter, NewTenant, Quota, Scope, Store};
use drover_testkit::fake_kube::FakeKube;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub(crate) const JOB: &str = include_str!("../../../examples/k8s/digits-mlp.yaml");
pub(crate) const NAMESPACE: &str = "team-vision";

pub(crate) struct Harness {
    pub(crate) fake: FakeKube,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) service: Service,
    pub(crate) tenant: drover_store::Tenant,
    stop: Option<watch::Sender<bool>>,
    _db: TestDb,
}

impl Harness {
    pub(crate) async fn new(db: TestDb) -> Harness {
        ensure_cluster_admin(db.store.as_ref(), Some("drv_kube-test-admin-token-0123"))
            .await
            .unwrap();
        let tenant = db
            .store
            .create_tenant(&NewTenant {
                name: "vision".to_owned(),
                quota: Quota {
                    guaranteed_gpus: 4,
                    max_gpus: Some(16),
                    flavours: Vec::new(),
                },
            })
            .await
            .unwrap();
        let fake = FakeKube::start().await;
        fake.seed(
            "namespaces",
            None,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": NAMESPACE, "labels": {"drover.dev/tenant": "vision"}}}),
        );
        fake.seed(
            "namespaces",
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nowhere"}}),
        );
        let service = Service::new(db.store.clone());
        Harness {
            fake,
            store: db.store.clone(),
            service,
            tenant,
            stop: None,
            _db: db,
        }
    }

    /// Starts a controller (as the leader) against the fake API server.
    pub(crate) fn start_controller(&mut self) {
        self.start_controller_mirroring(false);
    }

    /// The same, mirroring REST jobs as objects or not.
    pub(crate) fn start_controller_mirroring(&mut self, mirror: bool) {
        let settings = Settings {
            resync: Duration::from_millis(200),
            retry: Duration::from_millis(300),
            instance: "test".to_owned(),
            mirror,
            ..Settings::default()
        };
        let ctx = Context::new(self.service.clone(), self.fake.client(), settings);
        let (_leader_tx, leader) = watch::channel(true);
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(async move {
            let _keep = _leader_tx;
            controller::run(ctx, leader, stopped).await;
        });
        self.stop = Some(stop);
    }

    pub(crate) fn stop_controller(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.send_replace(true);
        }
    }

    pub(crate) fn api(&self, namespace: &str) -> Api<DroverJob> {
        Api::namespaced(self.fake.client(), namespace)
    }

    pub(crate) fn object(&self, namespace: &str, name: &str) -> Option<Value> {
        self.fake.get("droverjobs", Some(namespace), name)
    }

    /// Waits until `check` holds for the object (or panics with what it was).
    pub(crate) async fn until(
        &self,
        namespace: &str,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let object = self.object(namespace, name).unwrap_or(Value::Null);
            if check(&object) {
                return object;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the object is {object:#}\nrequests: {:#?}",
                self.fake.requests()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn jobs(&self) -> Vec<drover_store::Job> {
        let filter = JobFilter {
            limit: 100,
            ..JobFilter::default()
        };
        self.store
            .list_jobs(Scope::Tenant(self.tenant.id), &filter)
            .await
            .unwrap()
    }

    /// The Events recorded for an object, as `reason: note`.
    pub(crate) fn events(&self, name: &str) -> Vec<String> {
        self.fake
            .list("events")
            .into_iter()
            .filter(|e| e["regarding"]["name"] == name)
            .map(|e| {
                format!(
                    "{}: {}",
                    e["reason"].as_str().unwrap_or(""),
                    e["note"].as_str().unwrap_or("")
                )
            })
            .collect()
    }
}

pub(crate) fn job_object(name: &str) -> DroverJob {
    let mut job: DroverJob = serde_yaml::from_str(JOB).unwrap();
    job.metadata.name = Some(name.to_owned());
    job.metadata.namespace = None;
    job
}

pub(crate) fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

pub(crate) fn condition_is(object: &Value, kind: &str, status: &str, reason: &str) -> bool {
    condition(object, kind).is_some_and(|c| c["status"] == status && c["reason"] == reason)
}

async fn controller_lifecycle(db: TestDb) {
    let mut h = Harness::new(db).await;
    h.start_controller();
    let api = h.api(NAMESPACE);

    // Create → the job in the store, queued → status with its id, conditions and Events.
    api.create(&PostParams::default(), &job_object("digits-mlp"))
        .await
        .unwrap();
    let object = h
        .until(NAMESPACE, "digits-mlp", "the job's status", |o| {
            o["status"]["state"] == "queued" && condition_is(o, "Accepted", "True", "Submitted")
        })
        .await;
    assert_eq!(object["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(object["status"]["tenant"], "vision");
    assert_eq!(object["status"]["observedGeneration"], 1);
    assert_eq!(object["status"]["workers"], "0");
    assert_eq!(object["status"]["progress"], "0/2000 (0%)");
    let jobs = h.jobs().await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].name, "digits-mlp");
    assert_eq!(object["status"]["jobId"], jobs[0].id.to_string());
    let submitter = h
        .store
        .get_user(Scope::Cluster, jobs[0].submitted_by)
        .await
        .unwrap();
    assert_eq!(submitter.name, "kubernetes");
    assert!(
        h.events("digits-mlp")
            .iter()
            .any(|e| e.starts_with("Submitted: queued")),
        "{:?}",
        h.events("digits-mlp")
    );

    // A worker/PS range edit resizes the job.
    let resize = json!({"spec": {"resources": {"workers": {"min": 1, "max": 3}, "ps": {"min": 1, "max": 1}}}});
    api.patch(
        "digits-mlp",
        &PatchParams::default(),
        &Patch::Merge(&resize),
    )
    .await
    .unwrap();
    h.until(NAMESPACE, "digits-mlp", "the resize", |o| {
        condition_is(o, "Synced", "True", "Resized") && o["status"]["observedGeneration"] == 2
    })
    .await;
    let stored = h.store.get_job(Scope::Cluster, jobs[0].id).await.unwrap();
    let document = stored.document.unwrap();
    assert_eq!(
        document["spec"]["resources"]["workers"],
        json!({"min": 1, "max": 3})
    );

    // Any other edit is refused, and the job goes on as it was.
    let edit = json!({"spec": {"train": {"max_steps": 999}}});
    api.patch("digits-mlp", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    let object = h
        .until(NAMESPACE, "digits-mlp", "the refused edit", |o| {
            condition_is(o, "Synced", "False", "ImmutableField")
        })
        .await;
    let message = condition(&object, "Synced").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with("spec.train.max_steps cannot change"),
        "{message}"
    );
    assert_eq!(
        condition(&object, "Synced").unwrap()["observedGeneration"],
        3
    );
    let stored = h.store.get_job(Scope::Cluster, jobs[0].id).await.unwrap();
    assert_eq!(stored.document.unwrap()["spec"]["train"]["max_steps"], 2000);
    assert!(
        h.events("digits-mlp")
            .iter()
            .any(|e| e.starts_with("ImmutableField: "))
    );

    // A spec the API refuses: a condition naming the field, a Warning Event, no job.
    let mut bad = job_object("bad-batch");
    bad.spec.job.train.as_mut().unwrap().batch_size = 0;
    api.create(&PostParams::default(), &bad).await.unwrap();
    let object = h
        .until(
            NAMESPACE,
            "bad-batch",
            "the invalid spec's condition",
            |o| condition_is(o, "Accepted", "False", "InvalidSpec"),
        )
        .await;
    assert_eq!(object["status"]["state"], "Invalid");
    let message = condition(&object, "Accepted").unwrap()["message"]
        .as_str()
        .unwrap();
    assert!(message.starts_with("spec.train.batch_size: "), "{message}");
    assert!(
        h.events("bad-batch")
            .iter()
            .any(|e| e.starts_with("InvalidSpec: spec.train.batch_size"))
    );

    // A namespace that maps to no tenant.
    h.api("nowhere")
        .create(&PostParams::default(), &job_object("lost"))
        .await
        .unwrap();
    let object = h
        .until("nowhere", "lost", "the unknown tenant's condition", |o| {
            condition_is(o, "Accepted", "False", "UnknownTenant")
        })
        .await;
    let message = condition(&object, "Accepted").unwrap()["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("no Drover tenant `nowhere`"), "{message}");
    assert_eq!(h.jobs().await.len(), 1);

    // Relabelling the namespace later moves nothing: the job stays in its tenant, and no second
    // job appears in the other (nor does the object claim that tenant is unknown).
    let relabel = |tenant: &str| {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": NAMESPACE, "labels": {"drover.dev/tenant": tenant}}})
    };
    h.fake.seed("namespaces", None, relabel("elsewhere"));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let object = h.object(NAMESPACE, "digits-mlp").unwrap();
    assert_eq!(object["status"]["tenant"], "vision");
    assert!(
        condition_is(&object, "Accepted", "True", "Submitted"),
        "{object:#}"
    );
    assert_eq!(h.jobs().await.len(), 1);
    h.fake.seed("namespaces", None, relabel("vision"));

    // The controller stops after creating a job but before its status was written (simulated by
    // wiping the status), and a new one starts: it finds the same job, never a second.
    h.stop_controller();
    api.patch_status(
        "digits-mlp",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": null})),
    )
    .await
    .unwrap();
    assert!(
        h.object(NAMESPACE, "digits-mlp")
            .unwrap()
            .get("status")
            .is_none_or(Value::is_null)
    );
    // Watch history expires (410 Gone) and the API server restarts while no controller runs.
    h.fake.compact();
    h.fake.restart(Duration::from_millis(200)).await;
    h.start_controller();
    let object = h
        .until(NAMESPACE, "digits-mlp", "the status rewritten", |o| {
            o["status"]["jobId"].is_string()
        })
        .await;
    assert_eq!(object["status"]["jobId"], jobs[0].id.to_string());
    assert_eq!(h.jobs().await.len(), 1);

    // The running controller survives another expiry and restart: a new object still becomes a job.
    h.fake.compact();
    h.fake.restart(Duration::from_millis(300)).await;
    api.create(&PostParams::default(), &job_object("after-restart"))
        .await
        .unwrap();
    h.until(
        NAMESPACE,
        "after-restart",
        "the job made after a restart",
        |o| o["status"]["state"] == "queued",
    )
    .await;
    assert_eq!(h.jobs().await.len(), 2);
    assert!(
        h.fake.expired_watches() >= 1,
        "no watch restarted from an expired version: {:?}",
        h.fake.requests()
    );

    // Delete → the job is cancelled → the finalizer goes → the object is gone.
    api.delete("digits-mlp", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.object(NAMESPACE, "digits-mlp").is_some() {
        assert!(Instant::now() < deadline, "the finalizer was never removed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stored = h.store.get_job(Scope::Cluster, jobs[0].id).await.unwrap();
    assert_eq!(stored.state, drover_core::JobState::Cancelled);

    // Applied again under the same name: a new job (the ended one keeps its name).
    api.create(&PostParams::default(), &job_object("digits-mlp"))
        .await
        .unwrap();
    let object = h
        .until(NAMESPACE, "digits-mlp", "the second job", |o| {
            o["status"]["state"] == "queued"
        })
        .await;
    assert_ne!(object["status"]["jobId"], jobs[0].id.to_string());
    let jobs = h.jobs().await;
    assert_eq!(jobs.len(), 3);
    assert!(
        jobs.iter()
            .any(|j| j.name.starts_with("digits-mlp-") && j.state == drover_core::JobState::Queued)
    );

    // An object that never became a job deletes at once.
    api.delete("bad-batch", &DeleteParams::default())
        .await
        .unwrap();
    h.until(
        NAMESPACE,
        "bad-batch",
        "the invalid object gone",
        Value::is_null,
    )
    .await;
    h.stop_controller();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_lifecycle_on_sqlite() {
    controller_lifecycle(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_lifecycle_on_postgres() {
    controller_lifecycle(TestDb::postgres().await).await;
}

/// One reconcile of a new object that already carries the finalizer, against a mock API: exactly
/// GET its namespace, POST the `Submitted` Event, PATCH its status — in that order.
#[tokio::test]
async fn reconcile_requests_in_order() {
    use http_body_util::BodyExt;
    let db = TestDb::sqlite().await;
    let h = Harness::new(db).await;
    let (service, mut handle) = tower_test::mock::pair::<
        axum::http::Request<kube::client::Body>,
        axum::http::Response<kube::client::Body>,
    >();
    let client = kube::Client::new(service, "default");
    let ctx = Context::new(h.service.clone(), client, Settings::default());
    let mut object = job_object("digits-mlp");
    object.metadata.namespace = Some(NAMESPACE.to_owned());
    object.metadata.uid = Some("0f5c3a1e-5a8e-4b7e-9b8e-0d2c7b7f0001".to_owned());
    object.metadata.generation = Some(1);
    object.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
    let reconcile = tokio::spawn(controller::reconcile(Arc::new(object), ctx));

    let respond = |body: Value| {
        axum::http::Response::builder()
            .status(200)
            .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap()
    };
    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(request.method(), "GET");
    assert_eq!(request.uri().path(), "/api/v1/namespaces/team-vision");
    send.send_response(respond(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"drover.dev/tenant": "vision"}}})));

    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(request.method(), "POST");
    assert_eq!(
        request.uri().path(),
        "/apis/events.k8s.io/v1/namespaces/team-vision/events"
    );
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let event: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(event["reason"], "Submitted");
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["regarding"]["name"], "digits-mlp");
    send.send_response(respond(event));

    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(request.method(), "PATCH");
    assert_eq!(
        request.uri().path(),
        "/apis/drover.dev/v1/namespaces/team-vision/droverjobs/digits-mlp/status"
    );
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let patch: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(patch["status"]["state"], "queued");
    assert_eq!(patch["status"]["tenant"], "vision");
    send.send_response(respond(
        json!({"apiVersion": "drover.dev/v1", "kind": "DroverJob",
        "metadata": {"name": "digits-mlp", "namespace": NAMESPACE}, "spec": {"type": "train"}}),
    ));

    let action = reconcile.await.unwrap().unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(5))
    );
    assert_eq!(h.jobs().await.len(), 1);
}
