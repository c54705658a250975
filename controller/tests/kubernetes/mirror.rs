//! Mirroring REST jobs as DroverJob objects (`--kubernetes-mirror`), against the fake API server:
//! off, nothing appears; on, a REST job gets an object in its tenant's namespace, adopted rather than
//! submitted again, whose status follows the job; a resize over REST is not undone by the object;
//! deleting the object cancels the job and it is not made again; an object cannot claim another
//! job by its annotation; a tenant without a namespace is left alone.

use super::{Harness, JOB, NAMESPACE, condition, condition_is, job_object};
use drover_controller::mirror::{JOB_ID_ANNOTATION, MIRRORED_LABEL};
use drover_core::spec::{Format, TaskRange};
use drover_core::{JobState, Role, TokenId};
use drover_service::auth::Principal;
use drover_service::job_changes::resize as resize_job;
use drover_service::jobs::submit as create_job;
use drover_store::testing::TestDb;
use drover_store::{NewTenant, NewUser, Quota, Scope};
use kube::api::{DeleteParams, PostParams};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A member of `tenant` who submits over REST.
async fn member(h: &Harness, tenant: &drover_store::Tenant, name: &str) -> Principal {
    let user = h
        .store
        .create_user(&NewUser {
            tenant_id: tenant.id,
            name: name.to_owned(),
            role: Role::Member,
            cluster_admin: false,
        })
        .await
        .unwrap();
    Principal {
        user,
        token_id: TokenId(uuid::Uuid::nil()),
        tenant_quota: tenant.quota.clone(),
        token_expires_at: None,
    }
}

/// Submits the example job under `name`, as `principal` (a REST submission).
async fn submit(h: &Harness, principal: &Principal, name: &str) -> drover_store::Job {
    let mut document = drover_core::DroverJob::parse(JOB.as_bytes(), Format::Yaml).unwrap();
    document.metadata.name = name.to_owned();
    create_job(&h.service, principal, document, None, None)
        .await
        .unwrap()
        .value
}

async fn mirroring(db: TestDb) {
    let mut h = Harness::new(db).await;
    let alice = member(&h, &h.tenant, "alice").await;
    let job = submit(&h, &alice, "digits-rest").await;

    // Not asked: no object.
    h.start_controller();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(h.object(NAMESPACE, "digits-rest").is_none());
    h.stop_controller();

    // Asked: the job appears in its tenant's namespace, adopted (no second job), its status followed.
    h.start_controller_mirroring(true);
    let object = h
        .until(NAMESPACE, "digits-rest", "the mirror's status", |o| {
            o["status"]["state"] == "queued" && condition_is(o, "Accepted", "True", "Submitted")
        })
        .await;
    assert_eq!(
        object["metadata"]["annotations"][JOB_ID_ANNOTATION],
        job.id.to_string()
    );
    assert_eq!(object["metadata"]["labels"][MIRRORED_LABEL], "true");
    assert_eq!(object["status"]["jobId"], job.id.to_string());
    assert_eq!(object["spec"]["train"]["max_steps"], 2000);
    assert_eq!(h.jobs().await.len(), 1, "adopted, not submitted again");

    // A resize over REST stands: the object, which still shows the old ranges, does not undo it.
    let wider = TaskRange { min: 1, max: 2 };
    resize_job(
        &h.service,
        &alice,
        &job.id.to_string(),
        Some(wider),
        Some(TaskRange { min: 1, max: 1 }),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let stored = h.store.get_job(Scope::Cluster, job.id).await.unwrap();
    assert_eq!(
        stored.document.unwrap()["spec"]["resources"]["workers"],
        serde_json::json!({"min": 1, "max": 2})
    );

    // An object cannot take over a job by naming it: a mirror's job must carry the object's name.
    let mut spoof = job_object("not-digits-rest");
    spoof.metadata.annotations = Some(BTreeMap::from([(
        JOB_ID_ANNOTATION.to_owned(),
        job.id.to_string(),
    )]));
    spoof.metadata.labels = Some(BTreeMap::from([(
        MIRRORED_LABEL.to_owned(),
        "true".to_owned(),
    )]));
    let api = h.api(NAMESPACE);
    api.create(&PostParams::default(), &spoof).await.unwrap();
    let object = h
        .until(NAMESPACE, "not-digits-rest", "the refused claim", |o| {
            condition_is(o, "Accepted", "False", "MirroredJobGone")
        })
        .await;
    let message = condition(&object, "Accepted").unwrap()["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("not a REST job named"), "{message}");
    assert_eq!(h.jobs().await.len(), 1);

    // A tenant no namespace maps to is not mirrored anywhere.
    let lonely = h
        .store
        .create_tenant(&NewTenant {
            name: "lonely".to_owned(),
            quota: Quota {
                guaranteed_gpus: 1,
                max_gpus: Some(4),
                flavours: Vec::new(),
            },
        })
        .await
        .unwrap();
    let bob = member(&h, &lonely, "bob").await;
    submit(&h, &bob, "lonely-job").await;

    // Deleting the mirror cancels its job, and no new mirror is made.
    api.delete("digits-rest", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.object(NAMESPACE, "digits-rest").is_some() {
        assert!(Instant::now() < deadline, "the finalizer was never removed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stored = h.store.get_job(Scope::Cluster, job.id).await.unwrap();
    assert_eq!(stored.state, JobState::Cancelled);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(h.object(NAMESPACE, "digits-rest").is_none());
    let names: Vec<String> = h
        .fake
        .list("droverjobs")
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(names, ["not-digits-rest"], "{names:?}");
    h.stop_controller();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_jobs_are_mirrored_when_asked_on_sqlite() {
    mirroring(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_jobs_are_mirrored_when_asked_on_postgres() {
    mirroring(TestDb::postgres().await).await;
}
