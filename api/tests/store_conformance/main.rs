//! One conformance suite for every `Store`: each case below runs against SQLite and against a real
//! Postgres (a fresh database per test).

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

use chrono::{Duration, Utc};
use drover_api::store::*;
use drover_api::testing::TestDb;
use drover_core::spec::JobType;
use drover_core::{JobId, JobState, ReasonCode, Role, TenantId, UserId};
use std::collections::BTreeMap;
use std::sync::Arc;

mod batches;
mod execution;
mod experiments;
mod trust;
use batches::*;
use execution::*;
use experiments::*;
use trust::*;

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let db = drover_api::testing::TestDb::sqlite().await;
                    super::$case(&db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let db = drover_api::testing::TestDb::postgres().await;
                    super::$case(&db).await;
                }
            )*
        }
    };
}

conformance!(
    migrations_are_idempotent,
    tenants_have_unique_names_and_quotas,
    users_are_unique_per_tenant_and_scoped,
    tokens_are_found_by_hash_and_revoked,
    jobs_round_trip_and_stay_in_their_tenant,
    job_names_are_unique_per_tenant,
    batched_submissions_leave_out_conflicts,
    idempotency_keys_return_the_first_job,
    concurrent_retries_create_one_job,
    listing_filters_and_paginates,
    transitions_follow_the_state_machine_and_leave_events,
    concurrent_cancels_succeed_once,
    nodes_are_upserted_by_name,
    reports_from_an_old_generation_are_fenced,
    executors_register_and_lose_tasks,
    jobs_with_ended_tasks_are_finishing,
    running_jobs_rescale_under_a_new_generation,
    generations_open_allocations_in_the_ledger,
    enrolment_spends_tokens_and_binds_node_names,
    experiments_keep_trials_and_segments_once,
);

async fn tenant(store: &dyn Store, name: &str) -> Tenant {
    store
        .create_tenant(&NewTenant {
            name: name.to_owned(),
            quota: Quota::default(),
        })
        .await
        .unwrap()
}

async fn user(store: &dyn Store, tenant: TenantId, name: &str, role: Role) -> User {
    store
        .create_user(&NewUser {
            tenant_id: tenant,
            name: name.to_owned(),
            role,
            cluster_admin: false,
        })
        .await
        .unwrap()
}

fn new_job(tenant: &Tenant, user: UserId, name: &str, labels: &[(&str, &str)]) -> NewJob {
    NewJob {
        id: JobId::new(),
        tenant_id: tenant.id,
        tenant_name: tenant.name.clone(),
        name: name.to_owned(),
        job_type: JobType::Train,
        priority: 0,
        max_gpus: 2,
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        document: serde_json::json!({"metadata": {"name": name}, "spec": {"type": "train"}}),
        submitted_by: user,
        idempotency_key: None,
        request_hash: None,
        created_at: Utc::now(),
    }
}

/// A tenant with a member, for job tests.
async fn fixture(store: &dyn Store, name: &str) -> (Tenant, User) {
    let tenant = tenant(store, name).await;
    let user = user(store, tenant.id, "alice", Role::Member).await;
    (tenant, user)
}

fn change(to: JobState, reason: ReasonCode) -> StateChange {
    StateChange {
        to,
        reason,
        message: format!("to {to}"),
        actor: None,
    }
}

async fn migrations_are_idempotent(db: &TestDb) {
    db.store.migrate().await.unwrap();
    db.store.migrate().await.unwrap();
    db.store.ping().await.unwrap();
}

async fn tenants_have_unique_names_and_quotas(db: &TestDb) {
    let store = db.store.as_ref();
    let vision = store
        .create_tenant(&NewTenant {
            name: "vision".into(),
            quota: Quota {
                guaranteed_gpus: 8,
                max_gpus: Some(16),
            },
        })
        .await
        .unwrap();
    assert_eq!(
        vision.quota,
        Quota {
            guaranteed_gpus: 8,
            max_gpus: Some(16)
        }
    );
    let duplicate = store
        .create_tenant(&NewTenant {
            name: "vision".into(),
            quota: Quota::default(),
        })
        .await;
    assert!(
        matches!(duplicate, Err(StoreError::Conflict { field: "name", .. })),
        "{duplicate:?}"
    );
    tenant(store, "nlp").await;
    let names: Vec<String> = store
        .list_tenants()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["nlp", "vision"]);
    let updated = store
        .set_tenant_quota(
            vision.id,
            Quota {
                guaranteed_gpus: 4,
                max_gpus: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(updated.quota.max_gpus, None);
    assert_eq!(
        store
            .get_tenant_by_name("vision")
            .await
            .unwrap()
            .quota
            .guaranteed_gpus,
        4
    );
    assert!(matches!(
        store.get_tenant(TenantId::new()).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store
            .set_tenant_quota(TenantId::new(), Quota::default())
            .await,
        Err(StoreError::NotFound)
    ));
}

async fn users_are_unique_per_tenant_and_scoped(db: &TestDb) {
    let store = db.store.as_ref();
    let a = tenant(store, "a").await;
    let b = tenant(store, "b").await;
    let alice = user(store, a.id, "alice", Role::Admin).await;
    assert_eq!(alice.tenant_name, "a");
    assert_eq!(alice.role, Role::Admin);
    // The same name in another tenant is a different user; in the same tenant a conflict.
    user(store, b.id, "alice", Role::Viewer).await;
    let twin = store
        .create_user(&NewUser {
            tenant_id: a.id,
            name: "alice".into(),
            role: Role::Member,
            cluster_admin: false,
        })
        .await;
    assert!(matches!(twin, Err(StoreError::Conflict { .. })), "{twin:?}");
    let orphan = store
        .create_user(&NewUser {
            tenant_id: TenantId::new(),
            name: "x".into(),
            role: Role::Member,
            cluster_admin: false,
        })
        .await;
    assert!(matches!(orphan, Err(StoreError::NotFound)), "{orphan:?}");
    assert!(matches!(
        store.get_user(Scope::Tenant(b.id), alice.id).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        store.get_user(Scope::Tenant(a.id), alice.id).await.unwrap(),
        alice
    );
    assert_eq!(
        store.list_users(Scope::Tenant(a.id)).await.unwrap().len(),
        1
    );
    assert_eq!(store.list_users(Scope::Cluster).await.unwrap().len(), 2);
    assert_eq!(store.first_cluster_admin().await.unwrap(), None);
    let root = store
        .create_user(&NewUser {
            tenant_id: a.id,
            name: "root".into(),
            role: Role::Admin,
            cluster_admin: true,
        })
        .await
        .unwrap();
    assert_eq!(store.first_cluster_admin().await.unwrap(), Some(root));
}

async fn tokens_are_found_by_hash_and_revoked(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "t").await;
    let expiry = Utc::now() + Duration::days(1);
    let token = store
        .create_token(&NewToken {
            user_id: alice.id,
            name: "ci".into(),
            token_hash: [7; 32],
            prefix: "drv_abc".into(),
            expires_at: Some(expiry),
        })
        .await
        .unwrap();
    let found = store
        .find_token(&[7; 32])
        .await
        .unwrap()
        .expect("token found by hash");
    assert_eq!(found.token.id, token.id);
    assert_eq!(found.user.id, alice.id);
    assert_eq!(found.user.tenant_name, tenant.name);
    assert_eq!(
        found.token.expires_at.map(|e| e.timestamp_millis()),
        Some(expiry.timestamp_millis())
    );
    assert!(store.find_token(&[8; 32]).await.unwrap().is_none());
    let revoked = store.revoke_token(token.id).await.unwrap();
    assert!(revoked.revoked_at.is_some());
    let again = store.revoke_token(token.id).await.unwrap();
    assert_eq!(
        again.revoked_at, revoked.revoked_at,
        "revoking twice keeps the first time"
    );
    assert!(
        store
            .find_token(&[7; 32])
            .await
            .unwrap()
            .unwrap()
            .token
            .revoked_at
            .is_some()
    );
    assert_eq!(store.list_tokens(alice.id).await.unwrap().len(), 1);
    let twin = store
        .create_token(&NewToken {
            user_id: alice.id,
            name: "x".into(),
            token_hash: [7; 32],
            prefix: "p".into(),
            expires_at: None,
        })
        .await;
    assert!(matches!(twin, Err(StoreError::Conflict { .. })));
}

async fn jobs_round_trip_and_stay_in_their_tenant(db: &TestDb) {
    let store = db.store.as_ref();
    let (vision, alice) = fixture(store, "vision").await;
    let (nlp, _) = fixture(store, "nlp").await;
    let job = new_job(&vision, alice.id, "mlp", &[("team", "vision")]);
    let created = store.create_job(&job).await.unwrap();
    assert!(created.created);
    assert_eq!(created.value.state, JobState::Queued);
    let read = store
        .get_job(Scope::Tenant(vision.id), job.id)
        .await
        .unwrap();
    assert_eq!(read.name, "mlp");
    assert_eq!(read.tenant_name, "vision");
    assert_eq!(read.reason, ReasonCode::Submitted);
    assert_eq!(read.labels["team"], "vision");
    assert_eq!(read.document.as_deref(), Some(&job.document));
    assert_eq!(
        read.created_at.timestamp_micros(),
        job.created_at.timestamp_micros()
    );
    assert_eq!(
        store.get_job(Scope::Cluster, job.id).await.unwrap().id,
        job.id
    );
    assert!(matches!(
        store.get_job(Scope::Tenant(nlp.id), job.id).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store
            .list_job_events(Scope::Tenant(nlp.id), job.id, None, 10)
            .await,
        Err(StoreError::NotFound)
    ));
    let cancel = change(JobState::Cancelled, ReasonCode::CancelledByUser);
    assert!(matches!(
        store
            .transition_job(Scope::Tenant(nlp.id), job.id, &cancel)
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(
        store
            .list_jobs(
                Scope::Tenant(nlp.id),
                &JobFilter {
                    limit: 10,
                    ..Default::default()
                }
            )
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.count_jobs_by_state().await.unwrap(),
        vec![(JobState::Queued, 1)]
    );
}

async fn job_names_are_unique_per_tenant(db: &TestDb) {
    let store = db.store.as_ref();
    let (vision, alice) = fixture(store, "vision").await;
    let (nlp, bob) = fixture(store, "nlp").await;
    store
        .create_job(&new_job(&vision, alice.id, "same", &[]))
        .await
        .unwrap();
    store
        .create_job(&new_job(&nlp, bob.id, "same", &[]))
        .await
        .unwrap();
    let twin = store
        .create_job(&new_job(&vision, alice.id, "same", &[]))
        .await;
    assert!(
        matches!(
            twin,
            Err(StoreError::Conflict {
                field: "metadata.name",
                ..
            })
        ),
        "{twin:?}"
    );
    assert_eq!(
        store
            .list_jobs(
                Scope::Cluster,
                &JobFilter {
                    limit: 10,
                    ..Default::default()
                }
            )
            .await
            .unwrap()
            .len(),
        2
    );
}

async fn idempotency_keys_return_the_first_job(db: &TestDb) {
    let store = db.store.as_ref();
    let (vision, alice) = fixture(store, "vision").await;
    let mut first = new_job(&vision, alice.id, "one", &[]);
    first.idempotency_key = Some("key-1".into());
    first.request_hash = Some([1; 32]);
    let created = store.create_job(&first).await.unwrap();
    assert!(created.created);
    let mut retry = new_job(&vision, alice.id, "one", &[]);
    retry.idempotency_key = Some("key-1".into());
    retry.request_hash = Some([1; 32]);
    let replay = store.create_job(&retry).await.unwrap();
    assert!(!replay.created);
    assert_eq!(replay.value.id, first.id);
    let mut different = new_job(&vision, alice.id, "two", &[]);
    different.idempotency_key = Some("key-1".into());
    different.request_hash = Some([2; 32]);
    assert!(matches!(
        store.create_job(&different).await,
        Err(StoreError::IdempotencyMismatch)
    ));
    // Keys are per tenant.
    let (nlp, bob) = fixture(store, "nlp").await;
    let mut other_tenant = new_job(&nlp, bob.id, "one", &[]);
    other_tenant.idempotency_key = Some("key-1".into());
    other_tenant.request_hash = Some([1; 32]);
    assert!(store.create_job(&other_tenant).await.unwrap().created);
    assert_eq!(
        store
            .list_jobs(
                Scope::Cluster,
                &JobFilter {
                    limit: 10,
                    ..Default::default()
                }
            )
            .await
            .unwrap()
            .len(),
        2
    );
}

async fn concurrent_retries_create_one_job(db: &TestDb) {
    let store: Arc<dyn Store> = db.store.clone();
    let (vision, alice) = fixture(store.as_ref(), "vision").await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        let mut job = new_job(&vision, alice.id, "racer", &[]);
        job.idempotency_key = Some("same-key".into());
        job.request_hash = Some([9; 32]);
        tasks.push(tokio::spawn(async move { store.create_job(&job).await }));
    }
    let mut ids = Vec::new();
    let mut created = 0;
    for task in tasks {
        let outcome = task.await.unwrap().expect("every retry gets the job");
        created += usize::from(outcome.created);
        ids.push(outcome.value.id);
    }
    assert_eq!(created, 1);
    ids.dedup();
    assert_eq!(ids.len(), 1, "every retry saw the same job");
    assert_eq!(
        store
            .list_jobs(
                Scope::Cluster,
                &JobFilter {
                    limit: 10,
                    ..Default::default()
                }
            )
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn listing_filters_and_paginates(db: &TestDb) {
    let store = db.store.as_ref();
    let (vision, alice) = fixture(store, "vision").await;
    let mut ids = Vec::new();
    for i in 0..7 {
        let team = if i % 2 == 0 { "even" } else { "odd" };
        let job = new_job(
            &vision,
            alice.id,
            &format!("job-{i}"),
            &[("team", team), ("dots.and/slash", "x")],
        );
        store.create_job(&job).await.unwrap();
        ids.push(job.id);
    }
    store
        .transition_job(
            Scope::Cluster,
            ids[0],
            &change(JobState::Cancelled, ReasonCode::CancelledByUser),
        )
        .await
        .unwrap();
    // Pages of 3, newest first, cover everything once.
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .list_jobs(
                Scope::Tenant(vision.id),
                &JobFilter {
                    before,
                    limit: 3,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(page.len() <= 3);
        assert!(
            page.iter().all(|job| job.document.is_none()),
            "lists carry no documents"
        );
        if page.is_empty() {
            break;
        }
        before = page.last().map(|job| job.id);
        seen.extend(page.into_iter().map(|job| job.id));
    }
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);
    let odd = BTreeMap::from([("team".to_owned(), "odd".to_owned())]);
    let jobs = store
        .list_jobs(
            Scope::Cluster,
            &JobFilter {
                labels: odd.clone(),
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(jobs.len(), 3);
    assert!(jobs.iter().all(|job| job.labels["team"] == "odd"));
    let both = BTreeMap::from([
        ("team".to_owned(), "even".to_owned()),
        ("dots.and/slash".to_owned(), "x".to_owned()),
    ]);
    assert_eq!(
        store
            .list_jobs(
                Scope::Cluster,
                &JobFilter {
                    labels: both,
                    limit: 10,
                    ..Default::default()
                }
            )
            .await
            .unwrap()
            .len(),
        4
    );
    let cancelled = store
        .list_jobs(
            Scope::Cluster,
            &JobFilter {
                states: vec![JobState::Cancelled],
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        cancelled.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![ids[0]]
    );
    let queued_or_cancelled = store
        .list_jobs(
            Scope::Cluster,
            &JobFilter {
                states: vec![JobState::Queued, JobState::Cancelled],
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(queued_or_cancelled.len(), 7);
    let none = BTreeMap::from([("team".to_owned(), "none".to_owned())]);
    assert!(
        store
            .list_jobs(
                Scope::Cluster,
                &JobFilter {
                    labels: none,
                    limit: 10,
                    ..Default::default()
                }
            )
            .await
            .unwrap()
            .is_empty()
    );
}

async fn transitions_follow_the_state_machine_and_leave_events(db: &TestDb) {
    let store = db.store.as_ref();
    let (vision, alice) = fixture(store, "vision").await;
    let job = new_job(&vision, alice.id, "life", &[]);
    store.create_job(&job).await.unwrap();
    let scope = Scope::Tenant(vision.id);
    let illegal = store
        .transition_job(
            scope,
            job.id,
            &change(JobState::Succeeded, ReasonCode::Completed),
        )
        .await;
    assert!(
        matches!(illegal, Err(StoreError::IllegalTransition(_))),
        "{illegal:?}"
    );
    for (to, reason) in [
        (JobState::Starting, ReasonCode::Allocated),
        (JobState::Running, ReasonCode::RendezvousComplete),
        (JobState::Rescaling, ReasonCode::Resized),
        (JobState::Running, ReasonCode::Resized),
        (JobState::Succeeded, ReasonCode::Completed),
    ] {
        let moved = store
            .transition_job(scope, job.id, &change(to, reason))
            .await
            .unwrap();
        assert_eq!((moved.state, moved.reason), (to, reason));
    }
    let after_final = store
        .transition_job(
            scope,
            job.id,
            &change(JobState::Cancelled, ReasonCode::CancelledByUser),
        )
        .await;
    assert!(matches!(after_final, Err(StoreError::IllegalTransition(_))));
    let events = store
        .list_job_events(scope, job.id, None, 100)
        .await
        .unwrap();
    let path: Vec<(Option<JobState>, JobState)> =
        events.iter().map(|e| (e.from_state, e.to_state)).collect();
    assert_eq!(
        path,
        vec![
            (None, JobState::Queued),
            (Some(JobState::Queued), JobState::Starting),
            (Some(JobState::Starting), JobState::Running),
            (Some(JobState::Running), JobState::Rescaling),
            (Some(JobState::Rescaling), JobState::Running),
            (Some(JobState::Running), JobState::Succeeded),
        ]
    );
    assert_eq!(events[0].reason, ReasonCode::Submitted);
    assert_eq!(events[0].actor, Some(alice.id));
    let page = store
        .list_job_events(scope, job.id, Some(events[2].id), 2)
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![events[3].id, events[4].id]
    );
    assert!(matches!(
        store
            .transition_job(
                scope,
                JobId::new(),
                &change(JobState::Cancelled, ReasonCode::CancelledByUser)
            )
            .await,
        Err(StoreError::NotFound)
    ));
}

async fn concurrent_cancels_succeed_once(db: &TestDb) {
    let store: Arc<dyn Store> = db.store.clone();
    let (vision, alice) = fixture(store.as_ref(), "vision").await;
    let job = new_job(&vision, alice.id, "contested", &[]);
    store.create_job(&job).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        let id = job.id;
        tasks.push(tokio::spawn(async move {
            store
                .transition_job(
                    Scope::Cluster,
                    id,
                    &change(JobState::Cancelled, ReasonCode::CancelledByUser),
                )
                .await
        }));
    }
    let mut ok = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => ok += 1,
            Err(StoreError::IllegalTransition(_)) => {}
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
    assert_eq!(ok, 1);
    let events = store
        .list_job_events(Scope::Cluster, job.id, None, 100)
        .await
        .unwrap();
    assert_eq!(
        events.len(),
        2,
        "one submission and exactly one cancellation"
    );
}

async fn nodes_are_upserted_by_name(db: &TestDb) {
    let store = db.store.as_ref();
    let mut node = Node {
        id: uuid::Uuid::now_v7(),
        name: "gpu-01".into(),
        labels: BTreeMap::from([("rack".to_owned(), "r1".to_owned())]),
        gpus: vec![Gpu {
            index: 0,
            model: "H100".into(),
            memory_gb: 80.0,
        }],
        cpus: 64,
        memory_gb: 512,
        health: "healthy".into(),
        cordoned: false,
        draining: false,
        gpu_source: "nvidia".into(),
        last_heartbeat_at: Some(Utc::now()),
        created_at: Utc::now(),
    };
    store.upsert_node(&node).await.unwrap();
    node.cordoned = true;
    node.gpus.push(Gpu {
        index: 1,
        model: "H100".into(),
        memory_gb: 80.0,
    });
    let updated = store.upsert_node(&node).await.unwrap();
    assert!(updated.cordoned);
    assert_eq!(updated.gpus.len(), 2);
    assert_eq!(store.list_nodes().await.unwrap().len(), 1);
    assert_eq!(store.get_node("gpu-01").await.unwrap().labels["rack"], "r1");
    assert!(matches!(
        store.get_node("nope").await,
        Err(StoreError::NotFound)
    ));
}
