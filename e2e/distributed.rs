//! Distributed train jobs on real executors: every worker and PS shard is its own `drover train-task`
//! process under an executor, the tasks find each other through the peer list the server hands out,
//! and gradients and parameters cross real TCP connections.

use super::Cluster;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_two_ps_shards_and_three_workers_trains_the_example_mlp() {
    let cluster = Cluster::start_with_slots(2).await;
    let spec = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "digits-ps"},
        "spec": {
            "type": "train",
            "train": {
                "model": {"type": "mlp", "hidden": [256, 128]},
                "dataset": {"type": "digits"},
                "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01},
                "lr_schedule": {"warmup_steps": 100, "decay": "cosine"},
                "batch_size": 256, "max_steps": 2000, "eval_every": 500, "seed": 1
            },
            "resources": {"workers": {"min": 3, "max": 3}, "ps": {"min": 2, "max": 2},
                          "gpus_per_worker": 1, "cpus_per_worker": 1, "cpus_per_ps": 1},
            "distributed": {"mode": "ps", "sync": "bsp"},
            "checkpoint": {"every_steps": 1000, "keep_last": 2, "keep_best": 1},
            "max_restarts": 0
        }
    });
    let created = cluster.post("/api/v1/jobs", spec).await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(300))
        .await;
    let events = cluster.events(&id).await;
    assert_eq!(
        done["generation"], 1,
        "the job ran without a restart: {events:#?}"
    );

    // Five task processes, spread over both executors.
    let tasks = cluster.tasks(&id).await;
    let roles: Vec<(String, String)> = tasks
        .iter()
        .map(|t| {
            (
                t["role"].as_str().unwrap().to_owned(),
                t["node"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        roles.iter().filter(|(r, _)| r == "worker").count(),
        3,
        "{roles:?}"
    );
    assert_eq!(
        roles.iter().filter(|(r, _)| r == "ps").count(),
        2,
        "{roles:?}"
    );
    let nodes: std::collections::BTreeSet<&str> = roles.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(nodes.len(), 2, "tasks on both executors: {roles:?}");
    assert!(
        tasks.iter().all(|t| t["exit_code"] == 0),
        "every task exited cleanly: {tasks:?}"
    );

    // The accuracy bar of the example, measured by the leader on the test split.
    let accuracy = cluster
        .get(&format!(
            "/api/v1/jobs/{id}/metrics?name=val_accuracy&from_step=2000"
        ))
        .await;
    let accuracy = accuracy["metrics"][0]["value"].as_f64().unwrap();
    assert!(accuracy >= 0.95, "test accuracy {accuracy}");
    let bytes = cluster
        .get(&format!(
            "/api/v1/jobs/{id}/metrics?name=grad_bytes_per_step&from_step=2000"
        ))
        .await;
    let params = (64 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10) as f64;
    assert_eq!(bytes["metrics"][0]["value"].as_f64().unwrap(), 4.0 * params);

    // The final checkpoint was written by both shards and records which slices each held.
    let last = cluster.checkpoints(&id).await.last().unwrap().clone();
    assert_eq!(last["step"], 2000);
    let path = std::path::Path::new(last["path"].as_str().unwrap());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["shards"].as_array().unwrap().len(), 2);
    for shard in ["ps-0", "ps-1"] {
        assert!(path.join(format!("{shard}.model.safetensors")).exists());
        assert!(path.join(format!("{shard}.optimizer.safetensors")).exists());
    }
}
