//! What a job needs survives faults: a train job that checkpoints far more often than the server
//! makes new checkpoint records (every 5 steps, keeping the last 2) resumes after `kill -9` of its
//! executor from a checkpoint its retention kept, rides out a Postgres restart without its exit report
//! being lost, and ends `succeeded` at the same final step as an undisturbed run. Its checkpoints are
//! listed relative to the checkpoint storage, not as the server's paths.

use super::harness::*;
use serde_json::json;
use std::time::Duration;

const TEST: &str =
    "durability::a_job_that_checkpoints_often_survives_a_killed_executor_and_a_postgres_restart";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_checkpoints_often_survives_a_killed_executor_and_a_postgres_restart() {
    let Some(postgres) = OwnPostgres::start() else {
        skip(TEST, "no initdb/pg_ctl on this machine");
        return;
    };
    let mut cluster = Cluster::on_own_postgres(&postgres, "10s").await;
    cluster.start_executor("exec-a");
    cluster.start_executor("exec-b");
    let max_steps = 3000;
    let spec = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "checkpoints-often"},
        "spec": {
            "type": "train",
            "train": {
                "model": {"type": "mlp", "hidden": [256, 128]},
                "dataset": {"type": "digits"},
                "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01},
                "batch_size": 256, "max_steps": max_steps, "eval_every": 500, "seed": 5
            },
            "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                          "gpus_per_worker": 1, "cpus_per_worker": 1},
            "checkpoint": {"every_steps": 5, "keep_last": 2, "keep_best": 0},
            "max_restarts": 2
        }
    });
    let created = cluster.post("/api/v1/jobs", spec).await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    // Past the 200 checkpoints the server records as rows of their own: the ones after replace each
    // other, and retention has long deleted the 200th.
    let node = cluster.wait_for_checkpoint(&id, 1500).await;
    let killed_after = cluster
        .checkpoints(&id)
        .await
        .iter()
        .filter_map(|c| c["step"].as_u64())
        .max()
        .unwrap();
    let listed = cluster.checkpoints(&id).await;
    assert!(listed.len() <= 202, "one row per checkpoint past the burst");
    // Listed relative to the checkpoint storage: the server's own directories stay its own.
    let first = listed[0]["path"].as_str().unwrap();
    assert!(first.starts_with(&format!("{id}/g1/")), "listed as {first}");
    cluster.kill_executor(&node);

    // Generation 2 resumes from what was recorded when the executor died, or later.
    cluster
        .wait_until(
            "generation 2 to train",
            Duration::from_secs(90),
            async |c| resumed_step(&c.logs(&id).await, 2),
        )
        .await;
    let resumed = resumed_step(&cluster.logs(&id).await, 2).unwrap();
    assert!(
        resumed >= killed_after,
        "resumed from step {resumed}, but step {killed_after} had been recorded"
    );

    // A Postgres restart while it trains, and again as it ends: its exit is reported, not lost.
    restart_postgres(&cluster, &postgres).await;
    cluster
        .wait_until(
            "the job to near its end",
            Duration::from_secs(120),
            async |c| {
                let checkpoints = c.checkpoints(&id).await;
                checkpoints
                    .iter()
                    .any(|k| k["step"].as_u64().unwrap() >= max_steps - 300)
                    .then_some(())
            },
        )
        .await;
    restart_postgres(&cluster, &postgres).await;
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(180))
        .await;
    let events = cluster.events(&id).await;
    assert_eq!(
        done["generation"], 2,
        "restarted beyond the one executor loss: {events:?}"
    );
    let newest = cluster
        .checkpoints(&id)
        .await
        .iter()
        .filter_map(|c| c["step"].as_u64())
        .max();
    assert_eq!(newest, Some(max_steps));
}

async fn restart_postgres(cluster: &Cluster, postgres: &OwnPostgres) {
    assert!(postgres.pg_ctl("restart"), "pg_ctl restart failed");
    cluster.wait_ready().await;
}
