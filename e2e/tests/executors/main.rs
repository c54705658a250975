//! Jobs really running on a `drover server` and two `drover executor` processes (see the harness, `e2e/src/lib.rs`):
//! the example in `examples/command/` (plain Python training on the shipped digits data), `train`
//! jobs of the engine (`train_jobs.rs`), distributed ones (`distributed.rs`), the trust between the
//! processes (`trust.rs`), two server replicas restarted in turn (`replicas.rs`), a leader killed
//! with its queue kept by the next (`failover.rs`) and DroverJobs through the Kubernetes controller
//! (`kubernetes.rs`).

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

mod accounting;
mod compaction;
mod dashboard;
mod distributed;
mod durability;
mod experiments;
mod failover;
mod faults;
mod images;
mod isolation;
mod jax;
mod kubernetes;
mod launchers;
mod object_store;
mod pause;
mod placement;
mod pytorch;
mod replicas;
mod sso;
mod tls;
mod train_jobs;
mod trust;

use drover_e2e as harness;
use drover_proto as pb;
use harness::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_job_survives_the_loss_of_its_executor() {
    let mut cluster = Cluster::start().await;
    let id = cluster.submit_training("digits-kill").await;
    let node = cluster.wait_for_checkpoint(&id, 2 * CHECKPOINT_EVERY).await;

    // It streams logs and metrics while it runs.
    let logs = cluster.logs(&id).await;
    assert!(
        logs.iter()
            .any(|l| l["line"].as_str().unwrap().contains("rank 0 of world 1")),
        "{logs:?}"
    );
    let metrics = cluster
        .get(&format!("/api/v1/jobs/{id}/metrics?name=accuracy"))
        .await;
    let metrics = metrics["metrics"].as_array().unwrap();
    assert!(
        !metrics.is_empty()
            && metrics
                .iter()
                .all(|m| m["name"] == "accuracy" && m["num_workers"] == 1)
    );

    // kill -9 the executor that runs it.
    let position = cluster
        .executors
        .iter()
        .position(|(name, _)| *name == node)
        .unwrap();
    let (_, mut victim) = cluster.executors.remove(position);
    let killed_at = Instant::now();
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
    let before_kill = cluster
        .get(&format!("/api/v1/jobs/{id}/metrics?name=loss"))
        .await;
    let last_step_before = before_kill["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["generation"] == 1)
        .map(|m| m["step"].as_u64().unwrap())
        .max()
        .unwrap();
    let victim_dir = cluster.executor_dir(&node);
    cluster
        .wait_until(
            "the executor's tasks to die with it",
            Duration::from_secs(5),
            async |_| processes_under(&victim_dir).is_empty().then_some(()),
        )
        .await;

    // The server notices the silence, sends the job back to the queue, and another node resumes it.
    cluster
        .wait_until(
            "the job to be requeued",
            Duration::from_secs(20),
            async |c| {
                c.events(&id)
                    .await
                    .iter()
                    .any(|e| e["reason"] == "executor_lost" && e["to"] == "queued")
                    .then_some(())
            },
        )
        .await;
    assert!(
        killed_at.elapsed() < Duration::from_secs(15),
        "detected within the 3s timeout plus a tick"
    );
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(120))
        .await;
    assert_eq!(done["generation"], 2);

    let tasks = cluster.tasks(&id).await;
    let second = tasks.iter().find(|t| t["generation"] == 2).unwrap();
    assert_ne!(
        second["node"].as_str().unwrap(),
        node,
        "resumed on the other executor"
    );
    assert_eq!(second["exit_code"], 0);
    let first = tasks.iter().find(|t| t["generation"] == 1).unwrap();
    assert_eq!(first["state"], "lost");

    // It resumed from the last checkpoint recorded before the kill, losing less than one interval.
    let logs = cluster.logs(&id).await;
    let resumed = resumed_step(&logs, 2).expect("generation 2 resumed from a checkpoint");
    let recorded_before: Vec<u64> = cluster
        .checkpoints(&id)
        .await
        .iter()
        .filter(|k| k["generation"] == 1)
        .map(|k| k["step"].as_u64().unwrap())
        .collect();
    assert_eq!(Some(resumed), recorded_before.iter().copied().max());
    assert!(
        last_step_before.saturating_sub(resumed) <= CHECKPOINT_EVERY,
        "lost {} steps (last reported {last_step_before}, resumed at {resumed})",
        last_step_before - resumed
    );
    assert!(logs.iter().any(|l| {
        l["generation"] == 2
            && l["line"]
                .as_str()
                .unwrap()
                .starts_with("final test accuracy")
    }));
    let events: Vec<(String, String)> = cluster
        .events(&id)
        .await
        .iter()
        .map(|e| {
            (
                e["to"].as_str().unwrap().to_owned(),
                e["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let reasons: Vec<&str> = events.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "submitted",
            "allocated",
            "rendezvous_complete",
            "executor_lost",
            "allocated",
            "rendezvous_complete",
            "completed"
        ]
    );

    // A zombie of generation 1 that reconnects under the lost node's name is told to stop, and what
    // it reports is refused: it cannot write into generation 2.
    stale_generation_is_refused(&cluster, &node, &id).await;
}

/// A certificate signing request for a fresh key, as an executor enrolling sends.
fn signing_request(node: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, node);
    params.serialize_request(&key).unwrap().pem().unwrap()
}

async fn stale_generation_is_refused(cluster: &Cluster, node: &str, job: &str) {
    use pb::executor_gateway_client::ExecutorGatewayClient;
    let mut client: ExecutorGatewayClient<_> = cluster.gateway_client(node).await;
    let (outbound, receiver) = tokio::sync::mpsc::channel(16);
    let stale = pb::TaskKey {
        job_id: job.to_owned(),
        generation: 1,
        role: "worker".into(),
        index: 0,
    };
    let message = |body| pb::ExecutorMessage {
        body: Some(body),
        seq: 0,
    };
    outbound
        .send(message(pb::executor_message::Body::Register(
            pb::Register {
                node_name: node.to_owned(),
                executor_id: "zombie".into(),
                gpus: vec![pb::Gpu {
                    index: 0,
                    model: "cpu".into(),
                    memory_gb: 0.0,
                    compute_capability: String::new(),
                }],
                cpus: 1,
                memory_gb: 1,
                gpu_source: "slots".into(),
                tasks: vec![pb::TaskStatus {
                    task: Some(stale.clone()),
                    phase: pb::TaskPhase::Running as i32,
                    address: String::new(),
                    usage: None,
                }],
                ..pb::Register::default()
            },
        )))
        .await
        .unwrap();
    // Without a node credential the gateway lets nobody in; with another node's, nobody registers as
    // this one; and no enrolment token enrols a name that is enrolled already.
    let (_, unauthenticated) = tokio::sync::mpsc::channel(1);
    let refused = client
        .session(tokio_stream::wrappers::ReceiverStream::new(unauthenticated))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    let twin = client
        .enroll(pb::EnrollRequest {
            enrollment_token: ENROLLMENT_TOKEN.to_owned(),
            node_name: node.to_owned(),
            certificate_request: signing_request(node),
        })
        .await
        .unwrap_err();
    assert_eq!(twin.code(), tonic::Code::AlreadyExists, "{twin:?}");
    let other = if node == "exec-a" { "exec-b" } else { "exec-a" };
    let credential_of = |name: &str| {
        std::fs::read_to_string(cluster.executor_dir(name).join("node-credential"))
            .unwrap()
            .trim()
            .to_owned()
    };
    let (impostor_out, impostor_rx) = tokio::sync::mpsc::channel(1);
    impostor_out
        .send(message(pb::executor_message::Body::Register(
            pb::Register {
                node_name: node.to_owned(),
                ..pb::Register::default()
            },
        )))
        .await
        .unwrap();
    let mut impostor =
        tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(impostor_rx));
    impostor.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", credential_of(other)).parse().unwrap(),
    );
    let denied = client.session(impostor).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    // The lost executor itself, back with its own credential and a task of the old generation.
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(receiver));
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", credential_of(node)).parse().unwrap(),
    );
    let mut inbound = client.session(request).await.unwrap().into_inner();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .body
            .unwrap()
    };
    assert!(matches!(
        next().await,
        pb::server_message::Body::Registered(_)
    ));
    let mut stopped = false;
    let mut refused = false;
    outbound
        .send(message(pb::executor_message::Body::Metrics(pb::Metrics {
            task: Some(stale.clone()),
            step: 99_999,
            values: [("loss".to_owned(), 0.0)].into(),
            time_ms: 0,
        })))
        .await
        .unwrap();
    while !(stopped && refused) {
        match next().await {
            pb::server_message::Body::Stop(stop) if stop.task.as_ref() == Some(&stale) => {
                stopped = true
            }
            pb::server_message::Body::Refused(r) if r.task.as_ref() == Some(&stale) => {
                refused = true
            }
            _ => {}
        }
    }
    let recorded = cluster
        .get(&format!("/api/v1/jobs/{job}/metrics?from_step=99999"))
        .await;
    assert!(
        recorded["metrics"].as_array().unwrap().is_empty(),
        "a stale report was recorded: {recorded}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_a_node_moves_its_job_through_a_checkpoint() {
    let cluster = Cluster::start().await;
    let id = cluster.submit_training("digits-drain").await;
    // Follow the logs from the start: the stream ends by itself when the job ends.
    let follow = cluster
        .http
        .get(format!("{}/api/v1/jobs/{id}/logs?follow=true", cluster.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(follow.headers()["content-type"], "application/x-ndjson");
    let followed = tokio::spawn(async move { follow.text().await.unwrap() });
    let node = cluster.wait_for_checkpoint(&id, CHECKPOINT_EVERY).await;

    // A checkpoint on request, between the periodic ones, and the job goes on.
    let asked = cluster
        .post(&format!("/api/v1/jobs/{id}/checkpoint"), json!({}))
        .await;
    assert_eq!(asked["tasks"], 1);
    cluster
        .wait_until(
            "a requested checkpoint",
            Duration::from_secs(30),
            async |c| {
                let checkpoints = c.checkpoints(&id).await;
                checkpoints
                    .iter()
                    .any(|k| !k["step"].as_u64().unwrap().is_multiple_of(CHECKPOINT_EVERY))
                    .then_some(())
            },
        )
        .await;
    assert_eq!(cluster.job(&id).await["state"], "running");

    let drained = cluster
        .post(&format!("/api/v1/nodes/{node}/drain"), json!({}))
        .await;
    assert_eq!(drained["node"]["draining"], true);
    assert_eq!(drained["node"]["cordoned"], true);

    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(120))
        .await;
    assert_eq!(done["generation"], 2);
    let tasks = cluster.tasks(&id).await;
    let first = tasks.iter().find(|t| t["generation"] == 1).unwrap();
    assert_eq!(first["node"], node.as_str());
    assert_eq!(first["stop_requested"], true);
    assert_eq!(
        first["exit_code"], 0,
        "it checkpointed on SIGTERM and exited cleanly"
    );
    let second = tasks.iter().find(|t| t["generation"] == 2).unwrap();
    assert_ne!(
        second["node"],
        node.as_str(),
        "the drained node took no new task"
    );

    // The job checkpointed when asked to stop and resumed from exactly there.
    let logs = cluster.logs(&id).await;
    let stopped_at: u64 =
        checkpointed_step(&logs, 1).expect("generation 1 checkpointed on SIGTERM");
    assert_eq!(resumed_step(&logs, 2), Some(stopped_at));
    let reasons: Vec<Value> = cluster
        .events(&id)
        .await
        .iter()
        .map(|e| e["reason"].clone())
        .collect();
    assert!(reasons.contains(&json!("migrated")), "{reasons:?}");
    let followed = tokio::time::timeout(Duration::from_secs(30), followed)
        .await
        .unwrap()
        .unwrap();
    let streamed: Vec<Value> = followed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        streamed.len(),
        logs.len(),
        "the stream carried every line, once"
    );
    assert!(
        streamed.last().unwrap()["line"]
            .as_str()
            .unwrap()
            .starts_with("final test accuracy")
    );

    let nodes = cluster.get("/api/v1/nodes").await;
    let drained = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node.as_str())
        .unwrap();
    assert!(drained["tasks"].as_array().unwrap().is_empty());
    let uncordoned = cluster
        .post(&format!("/api/v1/nodes/{node}/uncordon"), json!({}))
        .await;
    assert_eq!(uncordoned["node"]["cordoned"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_adopts_running_tasks_without_duplicates() {
    let mut cluster = Cluster::start().await;
    let id = cluster.submit_training("digits-restart").await;
    let node = cluster.wait_for_checkpoint(&id, CHECKPOINT_EVERY).await;
    let executor_dir = cluster.executor_dir(&node);
    let before = processes_under(&executor_dir);
    assert!(!before.is_empty(), "the task runs under its executor");

    cluster.restart_server();
    // The executors reconnect and report what they run; the server keeps it.
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(120))
        .await;
    assert_eq!(
        done["generation"],
        1,
        "the job was never restarted: {:?}",
        cluster.events(&id).await
    );
    assert_eq!(done["restarts"], 0);
    let tasks = cluster.tasks(&id).await;
    assert_eq!(tasks.len(), 1, "no task was duplicated: {tasks:?}");
    assert_eq!(tasks[0]["exit_code"], 0);
    let logs = cluster.logs(&id).await;
    assert_eq!(
        logs.iter()
            .filter(|l| l["line"]
                .as_str()
                .unwrap()
                .starts_with("digits_softmax: job"))
            .count(),
        1,
        "the command started once"
    );
    assert!(resumed_step(&logs, 1).is_none());
    // Metrics reported while the server was down arrive after it is back: every eval step is there once.
    let steps = cluster.metric_steps(&id, "accuracy").await;
    let expected: Vec<u64> = (1..=30).map(|k| k * 100).collect();
    assert_eq!(steps, expected);

    // The final checkpoint downloads as the bytes the job wrote.
    let checkpoints = cluster.checkpoints(&id).await;
    let last = checkpoints.last().unwrap();
    assert_eq!(last["step"], 3000);
    let response = cluster
        .http
        .get(format!(
            "{}/api/v1/jobs/{id}/checkpoints/{}/download",
            cluster.url,
            last["id"].as_str().unwrap()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    let downloaded = response.bytes().await.unwrap();
    let on_disk = std::fs::read(cluster.checkpoint_path(&last["path"])).unwrap();
    assert_eq!(downloaded.as_ref(), on_disk.as_slice());
    assert_eq!(last["size_bytes"].as_u64().unwrap(), on_disk.len() as u64);
}
