//! Distributed train jobs on real executors: every worker and PS shard is its own `drover train-task`
//! process under an executor, the tasks find each other through the peer list the server hands out,
//! and gradients and parameters cross real TCP connections.

use super::harness::{Cluster, MLP, ps_job, resumed_step};
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_two_ps_shards_and_three_workers_trains_the_example_mlp() {
    let cluster = Cluster::start_with_slots(2).await;
    let created = cluster
        .post(
            "/api/v1/jobs",
            ps_job("digits-ps", MLP, 256, 2000, 500, 1000, 0),
        )
        .await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(300))
        .await;
    let events = cluster.events(&id).await;
    assert_eq!(
        done["generation"], 1,
        "the job ran without a restart: {events:#?}"
    );

    // Five task processes, spread over both executors, all ending cleanly (the job succeeds once its
    // workers are done; the shards may still be on their way out).
    let tasks = cluster
        .wait_until("every task to exit", Duration::from_secs(30), async |c| {
            let tasks = c.tasks(&id).await;
            tasks
                .iter()
                .all(|t| t["state"] == "exited")
                .then_some(tasks)
        })
        .await;
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
    let path = cluster.checkpoint_path(&last["path"]);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(path.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["shards"].as_array().unwrap().len(), 2);
    for shard in ["ps-0", "ps-1"] {
        assert!(path.join(format!("{shard}.model.safetensors")).exists());
        assert!(path.join(format!("{shard}.optimizer.safetensors")).exists());
    }
}

/// The pid of a running task process of `job` (its environment names the job, generation, role and
/// index), if there is one.
fn task_pid(job: &str, generation: u64, role: &str, index: u32) -> Option<u32> {
    let wanted = [
        format!("DROVER_JOB_ID={job}"),
        format!("DROVER_GENERATION={generation}"),
        format!("DROVER_ROLE={role}"),
        format!("DROVER_TASK_INDEX={index}"),
    ];
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_string_lossy().parse().ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            // The engine itself, not the task shim that leads its group.
            let engine = cmdline.windows(10).any(|w| w == b"train-task");
            (engine && wanted.iter().all(|w| vars.contains(&w.as_bytes()))).then_some(pid)
        })
}

/// The e2e of elastic jobs: a 2-PS, 3-worker job is resized mid-run to 1 PS and 2 workers (its ranges
/// changed over the API; the live scheduler stops it at a checkpoint and restarts it at the new
/// shape), then loses a worker to `kill -9`, restarts from its last checkpoint, and still succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resized_job_survives_losing_a_worker() {
    let cluster = Cluster::start_with_slots(2).await;
    let created = cluster
        .post(
            "/api/v1/jobs",
            ps_job("digits-elastic", MLP, 256, 8000, 1000, 250, 2),
        )
        .await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    cluster.wait_for_checkpoint(&id, 250).await;

    // Shrink it: the scheduler carries the change out through a checkpoint and a new generation.
    cluster
        .post(
            &format!("/api/v1/jobs/{id}/resize"),
            json!({"workers": {"min": 2, "max": 2}, "ps": {"min": 1, "max": 1}}),
        )
        .await;
    cluster
        .wait_until("generation 2 running", Duration::from_secs(60), async |c| {
            let job = c.job(&id).await;
            (job["generation"] == 2 && job["state"] == "running").then_some(())
        })
        .await;
    // The job's speed model has samples at both shapes, and it says what remains.
    let model = cluster
        .wait_until(
            "step times at the new shape",
            Duration::from_secs(60),
            async |c| {
                let job = c.job(&id).await;
                let shapes = job["model"]["speed"]["shapes"].as_array()?.len();
                (shapes == 2).then(|| job["model"].clone())
            },
        )
        .await;
    let remaining = &model["remaining"];
    assert_eq!(remaining["basis"], "step_budget", "{model:#}");
    assert_eq!(
        (remaining["ps"].as_u64(), remaining["workers"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(
        remaining["steps"].as_u64().unwrap() + model["steps_done"].as_u64().unwrap(),
        8000,
        "{model:#}"
    );
    assert!(remaining["seconds"].as_f64().unwrap() > 0.0, "{model:#}");
    // `drover job` shows the same.
    let output = std::process::Command::new(super::harness::drover())
        .args([
            "job",
            &id,
            "--server",
            &cluster.url,
            "--token",
            super::harness::ADMIN_TOKEN,
        ])
        .env("DROVER_CA_CERT", &super::harness::test_authority().file)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{shown}");
    assert!(
        shown.contains("left to max_steps, about ") && shown.contains("at 1 PS × 2 workers"),
        "{shown}"
    );
    assert!(
        shown.contains("Speed:") && shown.contains("2 PS × 3 workers"),
        "{shown}"
    );
    // Let generation 2 record a checkpoint of its own, then kill one of its workers.
    cluster
        .wait_until(
            "a checkpoint of generation 2",
            Duration::from_secs(60),
            async |c| {
                c.checkpoints(&id)
                    .await
                    .iter()
                    .any(|k| k["generation"] == 2)
                    .then_some(())
            },
        )
        .await;
    let pid = task_pid(&id, 2, "worker", 1).expect("worker 1 of generation 2 runs");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());

    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(300))
        .await;
    let events = cluster.events(&id).await;
    assert_eq!(done["generation"], 3, "{events:#?}");
    let messages: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap().to_owned(),
                e["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let has = |reason: &str, text: &str| {
        messages
            .iter()
            .any(|(r, m)| r == reason && m.contains(text))
    };
    assert!(
        has("resized_by_user", "workers 3 -> 2, PS 2 -> 1"),
        "{messages:#?}"
    );
    // The resize held its resources throughout: running -> rescaling -> running, never queued.
    let transitions: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap_or("").to_owned(),
                e["to"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let rescaled = events
        .iter()
        .position(|e| e["to"] == "rescaling")
        .unwrap_or_else(|| panic!("no rescaling event: {messages:#?}"));
    assert_eq!(events[rescaled]["reason"], "resized", "{messages:#?}");
    assert!(
        events[rescaled]["message"]
            .as_str()
            .unwrap()
            .contains("3 workers, 2 PS -> 2 workers, 1 PS"),
        "{messages:#?}"
    );
    assert_eq!(
        transitions[rescaled + 1],
        ("rescaling".to_owned(), "running".to_owned()),
        "{messages:#?}"
    );
    let first_step = events[rescaled + 1]["message"].as_str().unwrap();
    assert!(
        first_step.contains("first step at the new shape (2 workers, 1 PS)"),
        "{first_step}"
    );
    eprintln!("resize of the example MLP (2 PS, 3 workers -> 1 PS, 2 workers): {first_step}");
    // Killing worker 1 fails the gang: its own exit, worker 0's or the PS shard's (whose peer
    // vanished mid-step) is the one the executor reports first.
    assert!(
        ["worker-1", "worker-0", "ps-0"]
            .iter()
            .any(|task| has("task_failed", task)),
        "{messages:#?}"
    );

    // Generations 2 and 3 ran at the new shape and resumed from checkpoints.
    let tasks = cluster.tasks(&id).await;
    for generation in [2, 3] {
        let shape: Vec<&str> = tasks
            .iter()
            .filter(|t| t["generation"] == generation)
            .map(|t| t["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            shape.iter().filter(|r| **r == "worker").count(),
            2,
            "{tasks:?}"
        );
        assert_eq!(shape.iter().filter(|r| **r == "ps").count(), 1, "{tasks:?}");
    }
    let logs = cluster.logs(&id).await;
    let resumed_2 = resumed_step(&logs, 2).expect("generation 2 resumed");
    let resumed_3 = resumed_step(&logs, 3).expect("generation 3 resumed");
    assert!(
        resumed_2 >= 250 && resumed_3 > resumed_2,
        "{resumed_2} {resumed_3}"
    );
    // Generation 2 started from the checkpoint generation 1 wrote as it stopped: no step was lost.
    let checkpoints = cluster.checkpoints(&id).await;
    let last_of_1 = checkpoints
        .iter()
        .filter(|k| k["generation"] == 1)
        .filter_map(|k| k["step"].as_u64())
        .max();
    assert_eq!(last_of_1, Some(resumed_2), "{checkpoints:#?}");
    let accuracy = cluster
        .get(&format!(
            "/api/v1/jobs/{id}/metrics?name=val_accuracy&from_step=8000"
        ))
        .await;
    let accuracy = accuracy["metrics"][0]["value"].as_f64().unwrap();
    assert!(accuracy >= 0.95, "test accuracy {accuracy}");
    let last = cluster.checkpoints(&id).await.last().unwrap().clone();
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(cluster.checkpoint_path(&last["path"]).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (manifest["ps"].as_u64(), manifest["workers"].as_u64()),
        (Some(1), Some(2))
    );
    // Retention (`keep_last: 2, keep_best: 1`, per generation's folder) deleted most of the 32
    // checkpoints it wrote: those are no longer listed, and every listed one downloads (all 32 were
    // listed, most with dead links).
    let listed = cluster.checkpoints(&id).await;
    assert!(
        (1..=9).contains(&listed.len()),
        "{} listed: {listed:#?}",
        listed.len()
    );
    for checkpoint in &listed {
        let download = cluster
            .http
            .get(format!(
                "{}/api/v1/jobs/{id}/checkpoints/{}/download",
                cluster.url,
                checkpoint["id"].as_str().unwrap()
            ))
            .bearer_auth(super::harness::ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(download.status(), 200, "{checkpoint}");
    }
}

/// A model-parallel job on real executors: the transformer in two pipeline stages of two
/// tensor-parallel workers each, four `drover train-task` processes over both executors passing
/// activations, their gradients and the groups' sums over real TCP; the leader validates and
/// checkpoints the whole model it gathers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transformer_split_into_pipeline_stages_and_tensor_groups_trains_on_four_processes() {
    let cluster = Cluster::start_with_slots(2).await;
    let job = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "charlm-split"},
        "spec": {
            "type": "train",
            "train": {
                "model": {"type": "charlm", "layers": 4, "heads": 4, "d_model": 32, "context": 32},
                "dataset": {"type": "text", "path": "data/text/drover-docs.md"},
                "optimizer": {"type": "adamw", "lr": 0.003},
                "batch_size": 16, "max_steps": 60, "eval_every": 30, "seed": 1
            },
            "resources": {"workers": 4, "ps": 0, "gpus_per_worker": 1, "cpus_per_worker": 1},
            "distributed": {"mode": "allreduce", "parallelism": {
                "pipeline": {"stages": 2, "micro_batches": 4, "schedule": "1f1b"}, "tensor": 2}},
            "checkpoint": {"every_steps": 30, "keep_last": 2}
        }
    });
    let created = cluster.post("/api/v1/jobs", job).await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(300))
        .await;
    let events = cluster.events(&id).await;
    assert_eq!(done["generation"], 1, "no restart: {events:#?}");
    let tasks = cluster
        .wait_until("every task to exit", Duration::from_secs(30), async |c| {
            let tasks = c.tasks(&id).await;
            tasks
                .iter()
                .all(|t| t["state"] == "exited")
                .then_some(tasks)
        })
        .await;
    assert_eq!(tasks.len(), 4, "{tasks:?}");
    assert!(tasks.iter().all(|t| t["exit_code"] == 0), "{tasks:?}");
    let metric = |name: &'static str| {
        let cluster = &cluster;
        let id = id.clone();
        async move {
            cluster
                .get(&format!("/api/v1/jobs/{id}/metrics?name={name}"))
                .await["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["value"].as_f64().unwrap())
                .collect::<Vec<f64>>()
        }
    };
    // It learned: the held-out loss at step 60 is below the one at step 30, both below a uniform
    // guess over the text's characters.
    let val = metric("val_loss").await;
    assert_eq!(val.len(), 2, "{val:?}");
    assert!(val[1] < val[0] && val[0] < 4.5, "{val:?}");
    let bubble = metric("pipeline_bubble").await;
    assert!(
        !bubble.is_empty() && bubble.iter().all(|b| (0.0..1.0).contains(b)),
        "{bubble:?}"
    );
    // The leader's checkpoint is the whole model, as one process's is.
    let last = cluster.checkpoints(&id).await.last().unwrap().clone();
    assert_eq!(last["step"], 60);
    let path = cluster.checkpoint_path(&last["path"]);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(path.join("manifest.json")).unwrap()).unwrap();
    let shards = manifest["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 1, "{manifest}");
    assert_eq!(shards[0]["name"], "local", "{manifest}");
    assert!(path.join("model.safetensors").exists());
    let tensors = manifest["tensors"].as_array().map_or(0, Vec::len);
    assert_eq!(tensors, 2 + 4 * 12 + 4, "every parameter: {manifest}");
}
