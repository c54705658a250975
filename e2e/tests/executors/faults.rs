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
    // The proxy passes TLS through: the executor dials it as it would the gateway.
    format!("https://{address}")
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
    let target = cluster.gateway.trim_start_matches("https://").to_owned();
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

/// A small tmpfs mounted over a directory, unmounted when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    /// `None` where this process may not mount (not root): the caller says it skipped.
    fn mount(dir: &std::path::Path, size: &str) -> Option<SmallDisk> {
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then(|| SmallDisk(dir.to_path_buf()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the file system holding `dir` to the last byte; the filler file is returned.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    while file
        .write_all(&chunk)
        .and_then(|()| file.sync_all())
        .is_ok()
    {}
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_that_meets_a_full_disk_leaves_the_last_good_one_to_resume_from() {
    let cluster = Cluster::start().await;
    let storage = cluster.dir.path().join("server").join("checkpoints");
    let Some(_disk) = SmallDisk::mount(&storage, "2m") else {
        skip(
            "faults::a_checkpoint_that_meets_a_full_disk_leaves_the_last_good_one_to_resume_from",
            "cannot mount a tmpfs over the checkpoint storage (needs root)",
        );
        return;
    };
    let id = cluster.submit_training("disk-full").await;
    cluster.wait_for_checkpoint(&id, CHECKPOINT_EVERY).await;
    let good = cluster.checkpoints(&id).await;
    let good_step = good.last().unwrap()["step"].as_u64().unwrap();
    let filler = fill(&storage);

    // The next checkpoint cannot be written: the task fails and the job restarts. The disk is
    // freed as soon as generation 1 is over, so generation 2 can write its own.
    cluster
        .wait_until("generation 1 to fail", Duration::from_secs(60), async |c| {
            let job = c.job(&id).await;
            let over = job["generation"].as_u64().unwrap() >= 2 || job["state"] == "queued";
            // Freed at once, before generation 2 reaches its first checkpoint.
            if over {
                std::fs::remove_file(&filler).unwrap();
            }
            over.then_some(())
        })
        .await;
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(120))
        .await;
    assert_eq!(done["generation"], 2, "{:?}", cluster.events(&id).await);
    let events = cluster.events(&id).await;
    let failure = events
        .iter()
        .find(|e| e["reason"] == "task_failed")
        .unwrap_or_else(|| panic!("no task_failed event: {events:?}"));
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("No space left on device"),
        "{failure}"
    );
    // No checkpoint of generation 1 past the good one was recorded, and generation 2 resumed
    // from the good one.
    let checkpoints = cluster.checkpoints(&id).await;
    let late: Vec<&Value> = checkpoints
        .iter()
        .filter(|c| c["generation"] == 1 && c["step"].as_u64().unwrap() > good_step)
        .collect();
    assert!(
        late.is_empty(),
        "a checkpoint written to a full disk was recorded: {late:?}"
    );
    let logs = cluster.logs(&id).await;
    assert_eq!(resumed_step(&logs, 2), Some(good_step));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_rides_out_a_postgres_restart_without_losing_or_doubling_a_job() {
    let Some(postgres) = OwnPostgres::start() else {
        skip(
            "faults::the_server_rides_out_a_postgres_restart_without_losing_or_doubling_a_job",
            "no initdb/pg_ctl on this machine",
        );
        return;
    };
    let mut cluster = Cluster::on_own_postgres(&postgres, "15s").await;
    cluster.start_executor("exec-a");
    let id = cluster.submit_training("through-a-db-restart").await;
    cluster.wait_for_checkpoint(&id, CHECKPOINT_EVERY).await;

    assert!(postgres.pg_ctl("restart"), "pg_ctl restart failed");
    // The same server process answers again, from the restarted database.
    cluster.wait_ready().await;
    let another = cluster.submit_training("after-the-restart").await;
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(120))
        .await;
    let events = cluster.events(&id).await;
    assert_eq!(done["generation"], 1, "the job was restarted: {events:?}");
    let tasks = cluster.tasks(&id).await;
    assert_eq!(tasks.len(), 1, "a task was doubled: {tasks:?}");
    let jobs = cluster.get("/api/v1/jobs?limit=100").await;
    let names: Vec<&str> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names
            .iter()
            .filter(|n| **n == "through-a-db-restart")
            .count(),
        1
    );
    cluster
        .wait_for_state(&another, "succeeded", Duration::from_secs(120))
        .await;
}
