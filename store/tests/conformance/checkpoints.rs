//! Conformance cases for checkpoint records: a task's checkpoints over the report rate replacing
//! each other, and the scheduling loop's reads of many jobs' latest and recent records at once.

use super::execution::{three_running_jobs, worker};
use super::{change, fixture, new_job};
use chrono::Utc;
use drover_core::{JobId, JobState, ReasonCode};
use drover_store::testing::TestDb;
use drover_store::*;
use std::collections::BTreeMap;

/// Checkpoints recorded past the rate replace each other within a generation (one such row at a
/// time), never a checkpoint recorded as a row of its own or one of another generation; the newest
/// records come newest first.
pub(crate) async fn checkpoints_over_the_rate_replace_each_other(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "vision").await;
    let job = store
        .create_job(&new_job(&tenant, alice.id, "often", &[]))
        .await
        .unwrap()
        .value;
    let allocated = change(JobState::Starting, ReasonCode::Allocated);
    store
        .start_generation(job.id, &[worker("a")], &allocated)
        .await
        .unwrap();
    let key = TaskKey {
        job_id: job.id,
        generation: 1,
        role: TaskRole::Worker,
        index: 0,
    };
    store
        .record_checkpoint(&key, 10, "/ckpt/g1/step-10", 100)
        .await
        .unwrap();
    for step in [15, 20, 25] {
        let record = store
            .record_checkpoint_over_rate(&key, step, &format!("/ckpt/g1/step-{step}"), 100)
            .await
            .unwrap();
        assert_eq!(record.step, step);
    }
    let steps =
        |records: Vec<CheckpointRecord>| -> Vec<u64> { records.iter().map(|c| c.step).collect() };
    assert_eq!(
        steps(
            store
                .list_checkpoints(Scope::Cluster, job.id)
                .await
                .unwrap()
        ),
        [10, 25]
    );
    store
        .record_checkpoint(&key, 30, "/ckpt/g1/step-30", 100)
        .await
        .unwrap();
    store
        .record_checkpoint_over_rate(&key, 35, "/ckpt/g1/step-35", 100)
        .await
        .unwrap();
    assert_eq!(
        steps(store.recent_checkpoints(job.id, 10).await.unwrap()),
        [35, 30, 10],
        "the earlier over-rate record is replaced, rows of their own stay"
    );
    assert_eq!(
        steps(store.recent_checkpoints(job.id, 2).await.unwrap()),
        [35, 30]
    );
    assert_eq!(
        store.latest_checkpoint(job.id).await.unwrap().unwrap().step,
        35
    );

    // Fenced like every report: generation 2's over-rate record leaves generation 1's alone.
    let lost = change(JobState::Queued, ReasonCode::ExecutorLost);
    store
        .transition_job_in_generation(job.id, 1, &lost, false)
        .await
        .unwrap();
    store
        .start_generation(job.id, &[worker("b")], &allocated)
        .await
        .unwrap();
    assert!(matches!(
        store
            .record_checkpoint_over_rate(&key, 40, "/ckpt/g1/step-40", 100)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    let next = TaskKey {
        generation: 2,
        ..key
    };
    store
        .record_checkpoint_over_rate(&next, 40, "/ckpt/g2/step-40", 100)
        .await
        .unwrap();
    assert_eq!(
        steps(store.recent_checkpoints(job.id, 10).await.unwrap()),
        [40, 35, 30, 10]
    );
}

/// Each job's newest records as `recent_checkpoints` gives them (highest step first, the later of
/// equal steps first), at most `limit` a job, in one call; none for a job without any.
pub(crate) async fn recent_checkpoints_of_many_jobs_come_in_one_query(db: &TestDb) {
    let store = db.store.as_ref();
    let keys = three_running_jobs(store).await;
    // The first job: four records, two of one step; the second none; the third one.
    for (key, step) in [
        (keys[0], 30),
        (keys[0], 10),
        (keys[0], 20),
        (keys[0], 30),
        (keys[2], 5),
    ] {
        store
            .record_checkpoint(
                &key,
                step,
                &format!("/ckpt/{}/step-{step}", key.job_id),
                100,
            )
            .await
            .unwrap();
        // Records of one step apart in time, so that their order is the store's to keep.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let ids: Vec<JobId> = keys.iter().map(|k| k.job_id).collect();
    for limit in [1, 3, 10] {
        let got = store.recent_checkpoints_of(&ids, limit).await.unwrap();
        let mut expected = Vec::new();
        for id in &ids {
            expected.extend(store.recent_checkpoints(*id, limit).await.unwrap());
        }
        // Grouped by job, each job's in `recent_checkpoints`' order.
        let mut by_job: BTreeMap<JobId, Vec<uuid::Uuid>> = BTreeMap::new();
        for record in &got {
            by_job.entry(record.job_id).or_default().push(record.id);
        }
        let mut wanted: BTreeMap<JobId, Vec<uuid::Uuid>> = BTreeMap::new();
        for record in &expected {
            wanted.entry(record.job_id).or_default().push(record.id);
        }
        assert_eq!(by_job, wanted, "limit {limit}");
        assert_eq!(got.len(), expected.len(), "limit {limit}");
        // One job's records together: the job changes once between each two jobs.
        let changes = got
            .windows(2)
            .filter(|w| w[0].job_id != w[1].job_id)
            .count();
        assert_eq!(changes + 1, by_job.len(), "limit {limit}");
    }
    let first = store.recent_checkpoints_of(&ids[..1], 2).await.unwrap();
    assert_eq!(
        first.iter().map(|r| r.step).collect::<Vec<_>>(),
        [30, 30],
        "the highest step first"
    );
    assert!(
        first[0].created_at >= first[1].created_at,
        "the later of one step first"
    );
    assert!(
        store
            .recent_checkpoints_of(&[], 3)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The scheduling loop's read of many jobs' latest checkpoints: per job the record
/// `latest_checkpoint` picks (the highest step, not the last recorded), none for a job without
/// one, in one call.
pub(crate) async fn latest_checkpoints_of_many_jobs_come_in_one_query(db: &TestDb) {
    let store = db.store.as_ref();
    let keys = three_running_jobs(store).await;
    // The first job: step 30, then a later record of step 20; the second none; the third one.
    for (key, step) in [(keys[0], 30), (keys[0], 20), (keys[2], 5)] {
        store
            .record_checkpoint(&key, step, &format!("/ckpt/step-{step}"), 100)
            .await
            .unwrap();
    }
    let ids: Vec<JobId> = keys.iter().map(|k| k.job_id).collect();
    let times: BTreeMap<JobId, chrono::DateTime<Utc>> = store
        .latest_checkpoint_times(&ids)
        .await
        .unwrap()
        .into_iter()
        .collect();
    let mut expected = BTreeMap::new();
    for key in [keys[0], keys[2]] {
        let latest = store.latest_checkpoint(key.job_id).await.unwrap().unwrap();
        expected.insert(key.job_id, latest.created_at);
    }
    assert_eq!(
        store
            .latest_checkpoint(keys[0].job_id)
            .await
            .unwrap()
            .unwrap()
            .step,
        30
    );
    assert_eq!(times, expected);
    assert!(store.latest_checkpoint_times(&[]).await.unwrap().is_empty());
}
