//! Pausing a running job and resuming it: the job checkpoints and gives its GPU back while paused,
//! and carries on from that checkpoint when resumed.

use super::harness::*;
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_job_gives_its_gpu_back_and_resumes_from_its_checkpoint() {
    let cluster = Cluster::start().await;
    let id = cluster.submit_training("digits-pause").await;
    cluster.wait_for_checkpoint(&id, CHECKPOINT_EVERY).await;

    let paused = cluster
        .post(&format!("/api/v1/jobs/{id}/pause"), json!({}))
        .await;
    assert_eq!(paused["job"]["state"], "paused");
    // Its task checkpoints on SIGTERM and exits; no GPU stays held for it.
    cluster
        .wait_until(
            "the paused job's task to exit",
            Duration::from_secs(60),
            async |c| {
                let tasks = c.tasks(&id).await;
                tasks
                    .iter()
                    .all(|t| t["state"] == "exited" && t["exit_code"] == 0)
                    .then_some(())
            },
        )
        .await;
    let nodes = cluster.get("/api/v1/nodes").await;
    for node in nodes["nodes"].as_array().unwrap() {
        assert!(node["tasks"].as_array().unwrap().is_empty(), "{node}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        cluster.job(&id).await["state"],
        "paused",
        "nothing restarts a paused job"
    );

    // Pausing twice, and resuming a job that is not paused, are conflicts with a reason.
    for (verb, job) in [("pause", id.as_str()), ("resume", id.as_str())] {
        if verb == "resume" {
            let resumed = cluster
                .post(&format!("/api/v1/jobs/{job}/resume"), json!({}))
                .await;
            assert_eq!(resumed["job"]["state"], "queued");
        }
        let again = cluster
            .http
            .post(format!("{}/api/v1/jobs/{job}/{verb}", cluster.url))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 409, "{verb} twice");
        let body: Value = again.json().await.unwrap();
        assert_eq!(body["error"]["code"], "illegal_transition", "{body}");
    }

    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(120))
        .await;
    assert_eq!(done["generation"], 2);
    let logs = cluster.logs(&id).await;
    let stopped_at: u64 =
        checkpointed_step(&logs, 1).expect("generation 1 checkpointed when paused");
    assert_eq!(resumed_step(&logs, 2), Some(stopped_at));
    let reasons: Vec<Value> = cluster
        .events(&id)
        .await
        .iter()
        .map(|e| e["reason"].clone())
        .collect();
    let paused_at = reasons.iter().position(|r| r == "paused_by_user").unwrap();
    let resumed_at = reasons.iter().position(|r| r == "resumed_by_user").unwrap();
    assert!(paused_at < resumed_at, "{reasons:?}");
}
