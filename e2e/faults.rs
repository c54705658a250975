//! Faults, with real processes: an executor cut off from the server (a proxy that stops passing
//! bytes, as a network partition does) for longer than the heartbeat timeout and then healed; a
//! checkpoint written to a full disk.

use super::harness::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TCP proxy that can be partitioned: while `cut` is set it passes no byte either way and closes
/// nothing, so neither side is told. What is sent meanwhile waits, as TCP retransmits across a real
/// partition, and flows again once it heals.
async fn partitionable_proxy(target: String, cut: Arc<AtomicBool>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                continue;
            };
            let (client_read, client_write) = inbound.into_split();
            let (server_read, server_write) = outbound.into_split();
            tokio::spawn(pump(client_read, server_write, cut.clone()));
            tokio::spawn(pump(server_read, client_write, cut.clone()));
        }
    });
    format!("http://{address}")
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        while cut.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let Ok(n) = from.read(&mut buffer).await else {
            return;
        };
        if n == 0 {
            return;
        }
        while cut.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

fn metric_generations(metrics: &Value) -> Vec<(u64, u64)> {
    metrics["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["generation"].as_u64().unwrap(),
                m["step"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_executor_is_replaced_and_fenced_when_it_returns() {
    let mut cluster = Cluster::start().await;
    // Only the executor behind the proxy takes the job.
    for node in ["exec-a", "exec-b"] {
        cluster
            .post(&format!("/api/v1/nodes/{node}/cordon"), json!({}))
            .await;
    }
    let cut = Arc::new(AtomicBool::new(false));
    let target = cluster.gateway.trim_start_matches("http://").to_owned();
    let proxy = partitionable_proxy(target, cut.clone()).await;
    cluster.start_executor_via("exec-p", &proxy);
    let id = cluster.submit_training("partitioned").await;
    let node = cluster.wait_for_checkpoint(&id, CHECKPOINT_EVERY).await;
    assert_eq!(node, "exec-p");
    // The task's processes: everything under the executor's directory but the executor itself.
    let executor_pid = cluster.executors.last().unwrap().1.child.id();
    let task_processes: Vec<u32> = processes_under(&cluster.executor_dir("exec-p"))
        .into_iter()
        .filter(|pid| *pid != executor_pid)
        .collect();
    assert!(!task_processes.is_empty());
    cluster
        .post("/api/v1/nodes/exec-b/uncordon", json!({}))
        .await;

    // Partition for longer than the heartbeat timeout (3 s): the node is lost and the job moves to
    // exec-b from its last checkpoint, as generation 2.
    cut.store(true, Ordering::Relaxed);
    cluster
        .wait_until("the job on exec-b", Duration::from_secs(60), async |c| {
            let tasks = c.tasks(&id).await;
            tasks
                .iter()
                .any(|t| t["generation"] == 2 && t["node"] == "exec-b" && t["state"] == "running")
                .then_some(())
        })
        .await;
    let events = cluster.events(&id).await;
    assert!(
        events.iter().any(|e| e["reason"] == "executor_lost"),
        "{events:?}"
    );

    // Heal. The old executor's generation-1 task is still running: it is told to stop, and nothing
    // it reports is recorded.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_heal = metric_generations(
        &cluster
            .get(&format!("/api/v1/jobs/{id}/metrics?limit=5000"))
            .await,
    );
    let last_g1_step = before_heal
        .iter()
        .filter(|(g, _)| *g == 1)
        .map(|(_, s)| *s)
        .max()
        .unwrap_or(0);
    cut.store(false, Ordering::Relaxed);
    cluster
        .wait_until(
            "the stale task to stop",
            Duration::from_secs(60),
            async |c| {
                let still: Vec<u32> = processes_under(&c.executor_dir("exec-p"))
                    .into_iter()
                    .filter(|pid| task_processes.contains(pid))
                    .collect();
                still.is_empty().then_some(())
            },
        )
        .await;
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(120))
        .await;
    assert_eq!(done["generation"], 2);
    let after = metric_generations(
        &cluster
            .get(&format!("/api/v1/jobs/{id}/metrics?limit=5000"))
            .await,
    );
    let late: Vec<&(u64, u64)> = after
        .iter()
        .filter(|(g, s)| *g == 1 && *s > last_g1_step)
        .collect();
    assert!(
        late.is_empty(),
        "generation 1 reported after the partition: {late:?}"
    );
    // The node came back and is healthy again; its credential still works.
    cluster
        .wait_until("exec-p healthy again", Duration::from_secs(30), async |c| {
            let nodes = c.get("/api/v1/nodes").await;
            nodes["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["name"] == "exec-p" && n["health"] == "healthy")
                .then_some(())
        })
        .await;
}
