//! `train` jobs of the engine on executors: one resumes bit-exactly after its executor is killed
//! mid-run, and a job that fails before its first step, or again before a new checkpoint, ends as
//! failed instead of restarting forever.

use super::harness::*;
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Files of a checkpoint directory, by name.
fn checkpoint_files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_train_job_resumes_exactly_after_its_executor_is_killed() {
    let mut cluster = Cluster::start().await;
    let spec = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "digits-train-kill"},
        "spec": {
            "type": "train",
            "train": {
                "model": {"type": "mlp", "hidden": [256, 128], "dropout": 0.1},
                "dataset": {"type": "digits"},
                "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01},
                "lr_schedule": {"warmup_steps": 100, "decay": "cosine"},
                "batch_size": 256, "max_steps": 4000, "eval_every": 500, "seed": 3
            },
            "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                          "gpus_per_worker": 1, "cpus_per_worker": 1},
            "checkpoint": {"every_steps": 200, "keep_last": 2, "keep_best": 1},
            "max_restarts": 2
        }
    });
    let created = cluster.post("/api/v1/jobs", spec.clone()).await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    let node = cluster.wait_for_checkpoint(&id, 400).await;
    // The engine serves a checkpoint request at the next step boundary.
    cluster
        .post(&format!("/api/v1/jobs/{id}/checkpoint"), json!({}))
        .await;
    cluster
        .wait_until(
            "a requested checkpoint",
            Duration::from_secs(30),
            async |c| {
                let checkpoints = c.checkpoints(&id).await;
                checkpoints
                    .iter()
                    .any(|k| !k["step"].as_u64().unwrap().is_multiple_of(200))
                    .then_some(())
            },
        )
        .await;

    cluster.kill_executor(&node);
    let victim_dir = cluster.executor_dir(&node);
    cluster
        .wait_until(
            "the engine to die with its executor",
            Duration::from_secs(5),
            async |_| processes_under(&victim_dir).is_empty().then_some(()),
        )
        .await;
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(180))
        .await;
    assert_eq!(done["generation"], 2);
    let logs = cluster.logs(&id).await;
    let resumed = resumed_step(&logs, 2).expect("the engine resumed from a checkpoint");
    assert!(resumed >= 400, "resumed at {resumed}");
    let accuracy = cluster
        .get(&format!(
            "/api/v1/jobs/{id}/metrics?name=val_accuracy&from_step=4000"
        ))
        .await;
    let accuracy = accuracy["metrics"][0]["value"].as_f64().unwrap();
    assert!(accuracy >= 0.95, "test accuracy {accuracy}");

    // Bit-identical to a run that was never interrupted: the same spec trained here, in one go.
    let reference_dir = cluster.dir.path().join("reference");
    let spec_file = cluster.dir.path().join("spec.json");
    std::fs::write(&spec_file, serde_json::to_vec(&spec).unwrap()).unwrap();
    let output = Command::new(drover())
        .args([
            "train",
            spec_file.to_str().unwrap(),
            "--checkpoint-dir",
            reference_dir.to_str().unwrap(),
        ])
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = cluster.checkpoints(&id).await.last().unwrap().clone();
    assert_eq!(last["step"], 4000);
    let resumed_files = checkpoint_files(&cluster.checkpoint_path(&last["path"]));
    let reference_files = checkpoint_files(&reference_dir.join("step-00004000"));
    for file in ["model.safetensors", "optimizer.safetensors"] {
        assert!(
            resumed_files[file] == reference_files[file],
            "{file} differs from the uninterrupted run"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_fails_before_its_first_step_is_a_user_error_not_a_restart() {
    let cluster = Cluster::start().await;
    // A dataset that is not there: the engine fails at once, before its first step.
    let spec = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "mismatched"},
        "spec": {
            "type": "train",
            "train": {"model": {"type": "mlp"}, "dataset": {"type": "csv", "path": "/nonexistent/drover-e2e.csv"}, "batch_size": 8, "max_steps": 10},
            "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0}, "gpus_per_worker": 1, "cpus_per_worker": 1},
            "max_restarts": 5
        }
    });
    let created = cluster.post("/api/v1/jobs", spec).await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    let failed = cluster
        .wait_for_state(&id, "failed", Duration::from_secs(60))
        .await;
    assert_eq!(failed["reason"], "user_error");
    assert_eq!(failed["restarts"], 0);
    assert_eq!(failed["generation"], 1);
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.contains("cannot read /nonexistent/drover-e2e.csv"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_fails_again_before_a_new_checkpoint_is_failed_not_restarted_forever() {
    let cluster = Cluster::start().await;
    // It reports a step (so its first failure is not a user error at start-up) and then fails the
    // same way every time, never reaching a checkpoint.
    let spec = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "diverges"},
        "spec": {
            "type": "command",
            "command": {"argv": ["sh", "-c",
                "echo '{\"drover\":\"metrics\",\"step\":5,\"values\":{\"loss\":1.0}}'; sleep 1; echo 'loss is NaN at step 6' >&2; exit 3"]},
            "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                          "gpus_per_worker": 1, "cpus_per_worker": 1},
            "max_restarts": 5
        }
    });
    let created = cluster.post("/api/v1/jobs", spec).await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    let failed = cluster
        .wait_for_state(&id, "failed", Duration::from_secs(90))
        .await;
    assert_eq!(failed["reason"], "repeated_failure", "{failed}");
    assert_eq!(failed["generation"], 2, "one restart, not five");
    let events = cluster.events(&id).await;
    let last = events.last().unwrap();
    let message = last["message"].as_str().unwrap();
    assert!(message.contains("loss is NaN at step 6"), "{message}");
    assert!(
        message.contains("again before a new checkpoint"),
        "{message}"
    );
    assert!(
        events.iter().any(|e| e["reason"] == "task_failed"),
        "the first failure restarted it"
    );
}
