//! A fragmented cluster compacted, with real processes (issue #55): two executors of two GPUs each,
//! one 1-GPU job on each and one GPU free on each. A job whose one worker needs two GPUs cannot run
//! anywhere until the `drover` policy moves one of the 1-GPU jobs to the GPU free on the other node
//! (a stop and a restart there, not a preemption: it keeps running) and starts the 2-GPU job on the
//! node it left.

use super::harness::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

fn sleeper(name: &str, gpus_per_worker: u32) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "command",
            // SIGTERM (a move's stop) ends the sleep; the next generation sleeps again.
            "command": {"argv": ["sh", "-c", "sleep 600"]},
            "resources": {"workers": 1, "ps": 0, "gpus_per_worker": gpus_per_worker,
                          "cpus_per_worker": 1, "memory_gb_per_task": 1},
            "max_restarts": 0
        }
    })
}

/// The current generation's running tasks of job `id`: (generation, node, GPUs).
async fn running_tasks(cluster: &Cluster, id: &str) -> Vec<(u64, String, Vec<u64>)> {
    let job = cluster.job(id).await;
    let generation = job["generation"].as_u64().unwrap_or(0);
    cluster
        .tasks(id)
        .await
        .iter()
        .filter(|t| t["generation"] == generation && t["state"] == "running")
        .map(|t| {
            (
                generation,
                t["node"].as_str().unwrap().to_owned(),
                t["gpus"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|g| g.as_u64().unwrap())
                    .collect(),
            )
        })
        .collect()
}

async fn node_when_running(cluster: &Cluster, id: &str) -> (u64, String) {
    cluster
        .wait_until(
            &format!("job {id} running"),
            Duration::from_secs(120),
            async |c| {
                let tasks = running_tasks(c, id).await;
                (c.job(id).await["state"] == "running" && tasks.len() == 1)
                    .then(|| (tasks[0].0, tasks[0].1.clone()))
            },
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fragmented_cluster_is_compacted_for_a_job_that_needs_a_whole_node() {
    let cluster = Cluster::start_with_slots(2).await;
    // Three 1-GPU jobs: best fit puts two on one node and one on the other; cancelling one of the
    // two leaves a free GPU on each node.
    let mut ids = Vec::new();
    for name in ["one", "two", "three"] {
        ids.push(
            cluster.post("/api/v1/jobs", sleeper(name, 1)).await["job"]["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for id in &ids {
        let (_, node) = node_when_running(&cluster, id).await;
        by_node.entry(node).or_default().push(id.clone());
    }
    assert_eq!(
        by_node.len(),
        2,
        "two on one node, one on the other: {by_node:?}"
    );
    let crowded = by_node.values().find(|ids| ids.len() == 2).unwrap();
    let cancelled = crowded[0].clone();
    cluster
        .post(&format!("/api/v1/jobs/{cancelled}/cancel"), json!({}))
        .await;
    cluster
        .wait_for_state(&cancelled, "cancelled", Duration::from_secs(60))
        .await;
    let left: Vec<String> = ids.into_iter().filter(|id| *id != cancelled).collect();
    let mut before = BTreeMap::new();
    for id in &left {
        before.insert(id.clone(), node_when_running(&cluster, id).await);
    }

    // The 2-GPU job: no node has two GPUs free. The running jobs are moved only once settled (30 s
    // after they started), so for a while it waits, saying why.
    let whole = cluster.post("/api/v1/jobs", sleeper("whole-node", 2)).await["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, node) = node_when_running(&cluster, &whole).await;
    let tasks = running_tasks(&cluster, &whole).await;
    assert_eq!(tasks[0].2.len(), 2, "both GPUs of one node: {tasks:?}");

    // One of the 1-GPU jobs moved to the other node (a new generation there), the other stayed.
    let mut moved = 0;
    for id in &left {
        let (generation, now) = node_when_running(&cluster, id).await;
        let (was_generation, was) = &before[id];
        assert_ne!(now, node, "job {id} shares no node with the 2-GPU job");
        if generation != *was_generation {
            assert_ne!(&now, was, "job {id} moved to another node");
            let events = cluster.events(id).await;
            let migrated = events
                .iter()
                .find(|e| e["reason"] == "migrated")
                .unwrap_or_else(|| panic!("job {id} has no migration event: {events:?}"));
            let message = migrated["message"].as_str().unwrap();
            assert!(message.contains("compaction"), "{message}");
            moved += 1;
        } else {
            assert_eq!(&now, was, "job {id} stayed");
        }
        let state = cluster.job(id).await["state"].clone();
        assert_eq!(state, "running", "job {id} keeps running");
    }
    assert_eq!(moved, 1, "exactly one job moved");
    let events = cluster.events(&whole).await;
    assert!(
        !events.iter().any(|e| e["kind"] == "failed"),
        "the 2-GPU job started cleanly: {events:?}"
    );
    for id in left.iter().chain([&whole]) {
        cluster
            .post(&format!("/api/v1/jobs/{id}/cancel"), json!({}))
            .await;
    }
}
