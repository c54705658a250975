//! The job state machine in the store: legal transitions only, each leaving an event, and concurrent
//! cancels of one job succeeding once.

use super::*;

pub async fn transitions_follow_the_state_machine_and_leave_events(db: &TestDb) {
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

pub async fn concurrent_cancels_succeed_once(db: &TestDb) {
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

/// The queue's read: only `queued` jobs, oldest first, within the scope and the limit, with the
/// columns its rows show.
pub async fn the_queue_reads_waiting_jobs_oldest_first_in_scope(db: &TestDb) {
    let store = db.store.as_ref();
    let (vision, alice) = fixture(store, "vision").await;
    let (nlp, bob) = fixture(store, "nlp").await;
    let mut ids = Vec::new();
    for (tenant, user, name) in [
        (&vision, alice.id, "first"),
        (&nlp, bob.id, "second"),
        (&vision, alice.id, "third"),
        (&vision, alice.id, "cancelled"),
    ] {
        let mut job = new_job(tenant, user, name, &[]);
        job.priority = ids.len() as i32;
        job.max_gpus = 1 + ids.len() as i64;
        store.create_job(&job).await.unwrap();
        ids.push(job.id);
    }
    store
        .transition_job(
            Scope::Cluster,
            ids[3],
            &change(JobState::Cancelled, ReasonCode::CancelledByUser),
        )
        .await
        .unwrap();
    let all = store.queued_jobs(Scope::Cluster, 10).await.unwrap();
    assert_eq!(
        all.iter().map(|r| r.id).collect::<Vec<_>>(),
        ids[..3],
        "queued jobs only, oldest first"
    );
    let second = &all[1];
    assert_eq!(
        (second.name.as_str(), second.tenant_name.as_str()),
        ("second", "nlp")
    );
    assert_eq!((second.priority, second.max_gpus), (1, 2));
    let vision_only = store
        .queued_jobs(Scope::Tenant(vision.id), 10)
        .await
        .unwrap();
    assert_eq!(
        vision_only.iter().map(|r| r.id).collect::<Vec<_>>(),
        [ids[0], ids[2]]
    );
    let limited = store.queued_jobs(Scope::Cluster, 2).await.unwrap();
    assert_eq!(limited.iter().map(|r| r.id).collect::<Vec<_>>(), ids[..2]);
}
