//! One conformance suite for every `Store`: each case below runs against SQLite and against a real
//! Postgres (a fresh database per test).

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

use chrono::{Duration, Utc};
use drover_core::spec::JobType;
use drover_core::{JobId, JobState, ReasonCode, Role, TenantId, UserId};
use drover_store::testing::TestDb;
use drover_store::*;
use std::collections::BTreeMap;
use std::sync::Arc;

mod batches;
mod changes;
mod checkpoints;
mod execution;
mod experiments;
mod generations;
mod sso;
mod tenancy;
mod transitions;
mod trust;
use batches::*;
use changes::*;
use checkpoints::*;
use execution::*;
use experiments::*;
use generations::*;
use sso::*;
use tenancy::*;
use transitions::*;
use trust::*;

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let db = drover_store::testing::TestDb::sqlite().await;
                    super::$case(&db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let db = drover_store::testing::TestDb::postgres().await;
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
    revoking_a_token_revokes_the_tokens_minted_from_it,
    jobs_round_trip_and_stay_in_their_tenant,
    the_queue_reads_waiting_jobs_oldest_first_in_scope,
    job_names_are_unique_per_tenant,
    batched_submissions_leave_out_conflicts,
    idempotency_keys_return_the_first_job,
    concurrent_retries_create_one_job,
    listing_filters_and_paginates,
    transitions_follow_the_state_machine_and_leave_events,
    concurrent_cancels_succeed_once,
    nodes_are_upserted_by_name,
    reports_from_an_old_generation_are_fenced,
    log_reads_filter_and_page_from_either_end,
    rounds_keep_what_waiting_jobs_need_and_what_was_free,
    the_policy_state_keeps_what_changed_per_policy,
    checkpoints_over_the_rate_replace_each_other,
    executors_register_and_lose_tasks,
    new_samples_of_many_jobs_come_in_one_query,
    latest_checkpoints_of_many_jobs_come_in_one_query,
    recent_checkpoints_of_many_jobs_come_in_one_query,
    a_document_change_moves_its_version_and_a_state_change_does_not,
    changes_since_a_cursor_carry_every_write,
    jobs_with_ended_tasks_are_finishing,
    running_jobs_rescale_under_a_new_generation,
    jobs_are_marked_running_together_in_their_generations,
    generations_open_allocations_in_the_ledger,
    many_jobs_start_in_one_transaction,
    enrolment_spends_tokens_and_binds_node_names,
    a_credential_pins_the_capacity_of_its_first_registration,
    the_first_gateway_authority_kept_is_the_one_every_replica_gets,
    experiments_keep_trials_and_segments_once,
    single_sign_on_spends_states_and_links_identities,
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
    // Back towards the newest: the 3 nearest newer than a job, still newest first.
    let newer = store
        .list_jobs(
            Scope::Tenant(vision.id),
            &JobFilter {
                after: Some(ids[1]),
                limit: 3,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        newer.iter().map(|job| job.id).collect::<Vec<_>>(),
        [ids[4], ids[3], ids[2]]
    );
    // Counted whole (the window left aside), and up to a ceiling.
    let counted = |filter: JobFilter, at_most: u32| async move {
        store
            .count_jobs(Scope::Tenant(vision.id), &filter, at_most)
            .await
            .unwrap()
    };
    let odd_only = JobFilter {
        labels: BTreeMap::from([("team".to_owned(), "odd".to_owned())]),
        before: Some(ids[2]),
        limit: 1,
        ..Default::default()
    };
    assert_eq!(counted(JobFilter::default(), 100).await, 7);
    assert_eq!(counted(JobFilter::default(), 5).await, 5);
    assert_eq!(counted(odd_only, 100).await, 3);
    let named = JobFilter {
        name_contains: Some("job-1".into()),
        ..Default::default()
    };
    assert_eq!(counted(named, 100).await, 1);
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
        isolation: "runc".into(),
        runs_images: true,
        taints: Vec::new(),
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
    let read = store.get_node("gpu-01").await.unwrap();
    assert_eq!(read.labels["rack"], "r1");
    assert!(read.runs_images, "runs_images is kept");
    assert!(matches!(
        store.get_node("nope").await,
        Err(StoreError::NotFound)
    ));
    // Heartbeats the leader heard are written together; a name not stored is ignored.
    let heard = Utc::now() + Duration::seconds(40);
    store
        .record_heartbeats(&[("gpu-01".to_owned(), heard), ("nope".to_owned(), heard)])
        .await
        .unwrap();
    store.record_heartbeats(&[]).await.unwrap();
    let read = store.get_node("gpu-01").await.unwrap();
    let at = read.last_heartbeat_at.unwrap();
    assert!(
        (at - heard).num_milliseconds().abs() <= 1,
        "{at} != {heard}"
    );
    assert_eq!(read.health, "healthy");
    assert_eq!(store.list_nodes().await.unwrap().len(), 1);
}

async fn rounds_keep_what_waiting_jobs_need_and_what_was_free(db: &TestDb) {
    let store = db.store.as_ref();
    assert_eq!(store.last_round().await.unwrap(), None);
    let needs = Needs {
        gpus: 4,
        cpus: 9,
        memory_gb: 32,
    };
    let round = RoundRecord {
        policy: "drover".into(),
        finished_at: Utc::now(),
        duration_us: 1500,
        waiting: vec![
            WaitingJob {
                needs: Some(needs),
                ..WaitingJob::new(JobId::new(), "insufficient_gpus")
            },
            WaitingJob::new(JobId::new(), "lower_priority"),
        ],
        free: Some(RoundFree {
            gpus: 2,
            total_gpus: 16,
            cpus: 30,
            total_cpus: 64,
            memory_gb: 200,
        }),
    };
    store.record_round(&round).await.unwrap();
    let read = store.last_round().await.unwrap().unwrap();
    assert_eq!(read.waiting, round.waiting);
    assert_eq!(read.free, round.free);
    // The next round replaces it; one that knows nothing free is read back so.
    let bare = RoundRecord {
        free: None,
        waiting: Vec::new(),
        ..round
    };
    store.record_round(&bare).await.unwrap();
    let read = store.last_round().await.unwrap().unwrap();
    assert_eq!((read.free, read.waiting.len()), (None, 0));
}

/// The leader saves what changed of its policy's state; the next reads it back whole.
async fn the_policy_state_keeps_what_changed_per_policy(db: &TestDb) {
    let store = db.store.as_ref();
    assert_eq!(
        store.policy_state("drover").await.unwrap(),
        PolicyState::default()
    );
    // More jobs than one statement writes.
    let jobs: Vec<JobId> = (0..2500).map(|_| JobId::new()).collect();
    let states: Vec<String> = (0..jobs.len())
        .map(|i| format!("{{\"q\":{}}}", i % 3))
        .collect();
    let changed: Vec<(JobId, &str)> = jobs
        .iter()
        .copied()
        .zip(states.iter().map(String::as_str))
        .collect();
    let at = Utc::now();
    let save = |changes| store.save_policy_state("drover", changes, at);
    save(PolicyStateChanges {
        changed: &changed,
        shared: Some("{\"next_seq\":7}"),
        ..Default::default()
    })
    .await
    .unwrap();
    store
        .save_policy_state(
            "tiresias",
            PolicyStateChanges {
                changed: &changed[..1],
                ..Default::default()
            },
            at,
        )
        .await
        .unwrap();
    let read = store.policy_state("drover").await.unwrap();
    let mut expected: Vec<(JobId, String)> =
        jobs.iter().copied().zip(states.iter().cloned()).collect();
    let sorted = |mut rows: Vec<(JobId, String)>| {
        rows.sort();
        rows
    };
    assert_eq!(sorted(read.jobs), sorted(expected.clone()));
    assert_eq!(read.shared.as_deref(), Some("{\"next_seq\":7}"));
    // Changed, removed (more than one statement's worth), the shared part unchanged.
    let removed: Vec<JobId> = jobs[..1200].to_vec();
    save(PolicyStateChanges {
        changed: &[(jobs[2000], "{\"q\":9}")],
        removed: &removed,
        ..Default::default()
    })
    .await
    .unwrap();
    expected.drain(..1200);
    for row in &mut expected {
        if row.0 == jobs[2000] {
            row.1 = "{\"q\":9}".to_owned();
        }
    }
    let read = store.policy_state("drover").await.unwrap();
    assert_eq!(sorted(read.jobs), sorted(expected));
    assert_eq!(read.shared.as_deref(), Some("{\"next_seq\":7}"));
    assert_eq!(store.policy_state("tiresias").await.unwrap().jobs.len(), 1);
    // The first save of a newly configured policy forgets the others'.
    store
        .save_policy_state(
            "tiresias",
            PolicyStateChanges {
                forget_other_policies: true,
                ..Default::default()
            },
            at,
        )
        .await
        .unwrap();
    assert_eq!(
        store.policy_state("drover").await.unwrap(),
        PolicyState::default()
    );
    assert_eq!(store.policy_state("tiresias").await.unwrap().jobs.len(), 1);
}
