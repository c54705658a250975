//! What a job needs survives faults: a train job that checkpoints far more often than the server
//! makes new checkpoint records (every 5 steps, keeping the last 2) resumes after `kill -9` of its
//! executor from a checkpoint its retention kept, rides out a Postgres restart without its exit report
//! being lost, and ends `succeeded` at the same final step as an undisturbed run. Its checkpoints are
//! listed relative to the checkpoint storage, not as the server's paths. A submission whose COMMIT
//! was applied but never answered is answered `201` and stored once.

use super::harness::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    // The list shows the records still in storage, and `keep_last: 2` deletes a checkpoint every
    // 5 steps: one read can find none for a moment (seen once), so wait for one that finds some.
    let listed = cluster
        .wait_until("a checkpoint listed", Duration::from_secs(30), async |c| {
            Some(c.checkpoints(&id).await).filter(|listed| !listed.is_empty())
        })
        .await;
    let killed_after = listed
        .iter()
        .filter_map(|c| c["step"].as_u64())
        .max()
        .unwrap();
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

/// A TCP proxy in front of Postgres that loses the answer to one COMMIT: that of the first
/// transaction that inserts into `jobs`. The COMMIT reaches Postgres, which applies it; nothing comes
/// back after it, and the connection is then cut, so the server cannot know that it committed.
/// Sets `lost` when it has done so.
async fn commit_answer_losing_proxy(target: String, lost: Arc<AtomicBool>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                continue;
            };
            let (client_read, client_write) = inbound.into_split();
            let (server_read, server_write) = outbound.into_split();
            let swallow = Arc::new(AtomicBool::new(false));
            tokio::spawn(upstream(
                client_read,
                server_write,
                swallow.clone(),
                lost.clone(),
            ));
            tokio::spawn(downstream(server_read, client_write, swallow));
        }
    });
    format!("127.0.0.1:{}", address.port())
}

/// Client to Postgres: passes everything, watching for `INSERT INTO jobs` and then `COMMIT` (the
/// text of the last bytes kept across reads).
async fn upstream(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    swallow: Arc<AtomicBool>,
    lost: Arc<AtomicBool>,
) {
    let mut recent: Vec<u8> = Vec::new();
    let mut inserted = false;
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !lost.load(Ordering::SeqCst) {
            recent.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&recent).into_owned();
            if !inserted && text.contains("INSERT INTO jobs") {
                inserted = true;
                recent.clear();
            } else if inserted && text.contains("COMMIT") {
                // Nothing more comes back on this connection; the COMMIT still goes up.
                swallow.store(true, Ordering::SeqCst);
                lost.store(true, Ordering::SeqCst);
                let _ = to.write_all(&buffer[..n]).await;
                // Postgres applies it; then the connection is cut both ways (dropping the halves).
                tokio::time::sleep(Duration::from_millis(300)).await;
                return;
            }
            if recent.len() > 4096 {
                recent.drain(..recent.len() - 64);
            }
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// Postgres to client: passes everything until the connection's COMMIT went up, then nothing.
async fn downstream(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    swallow: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if swallow.load(Ordering::SeqCst) {
            // Dropping `to` closes the client's side: it sees the connection end, with no answer.
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// A submission whose transaction committed but whose COMMIT was never answered (the connection to
/// Postgres cut just then) is answered `201 Created` and stored once: the server settles the unknown
/// outcome by the job's id. It used to be retried as a new insert, which met the stored job and
/// answered `409` ("a job named ... already exists") for a job that had been stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_whose_commit_answer_is_lost_is_answered_created_and_stored_once() {
    let Some(postgres) = OwnPostgres::start() else {
        skip(
            "durability::a_submission_whose_commit_answer_is_lost_is_answered_created_and_stored_once",
            "no initdb/pg_ctl on this machine",
        );
        return;
    };
    let lost = Arc::new(AtomicBool::new(false));
    let target = postgres
        .url()
        .trim_start_matches("postgres://postgres@")
        .trim_end_matches("/postgres")
        .to_owned();
    let proxy = commit_answer_losing_proxy(target, lost.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, url, _) = Cluster::start_server_with(
        &format!("postgres://postgres@{proxy}/postgres"),
        &dir.path().join("server"),
        "127.0.0.1:0",
        "10s",
    );
    let http = http_client();
    let spec = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "committed-unanswered"},
        "spec": {"type": "command", "command": {"argv": ["true"]}}
    });
    let reply = http
        .post(format!("{url}/api/v1/jobs"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&spec)
        .send()
        .await
        .unwrap();
    let status = reply.status();
    let body: Value = reply.json().await.unwrap();
    assert!(
        lost.load(Ordering::SeqCst),
        "the proxy never lost a COMMIT's answer"
    );
    assert_eq!(status, reqwest::StatusCode::CREATED, "{body}");
    let jobs: Value = http
        .get(format!("{url}/api/v1/jobs?name=committed-unanswered"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = jobs["jobs"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{jobs}");
    assert_eq!(listed[0]["id"], body["job"]["id"]);
}
