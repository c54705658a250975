//! Submissions stored together (group commit): the rows that break a uniqueness rule are left out,
//! the others are stored whole, each with its submission event.

use super::{fixture, new_job};
use drover_core::JobState;
use drover_store::testing::TestDb;
use drover_store::*;

pub async fn batched_submissions_leave_out_conflicts(db: &TestDb) {
    let store = db.store.as_ref();
    assert!(store.create_jobs(&[]).await.unwrap().is_empty());
    let (vision, alice) = fixture(store, "vision").await;
    store
        .create_job(&new_job(&vision, alice.id, "taken", &[]))
        .await
        .unwrap();
    let mut keyed = new_job(&vision, alice.id, "keyed", &[]);
    keyed.idempotency_key = Some("key-1".into());
    store.create_job(&keyed).await.unwrap();
    let mut retry = new_job(&vision, alice.id, "keyed-again", &[]);
    retry.idempotency_key = Some("key-1".into());
    let (nlp, bob) = fixture(store, "nlp").await;
    let batch = [
        new_job(&vision, alice.id, "a", &[]),
        new_job(&vision, alice.id, "taken", &[]),
        new_job(&nlp, bob.id, "taken", &[]),
        new_job(&vision, alice.id, "a", &[]),
        retry,
    ];
    let stored = store.create_jobs(&batch).await.unwrap();
    assert_eq!(
        stored,
        [true, false, true, false, false],
        "a taken name, a name twice in the batch and a used key are left out; names are per tenant"
    );
    for (job, stored) in batch.iter().zip(stored) {
        let found = store.get_job(Scope::Cluster, job.id).await;
        if !stored {
            assert!(matches!(found, Err(StoreError::NotFound)), "{found:?}");
            continue;
        }
        let found = found.unwrap();
        assert_eq!(found.state, JobState::Queued);
        assert_eq!(
            (found.tenant_id, found.name.as_str()),
            (job.tenant_id, job.name.as_str())
        );
        let events = store
            .list_job_events(Scope::Cluster, job.id, None, 10)
            .await
            .unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].to_state, JobState::Queued);
    }
}
