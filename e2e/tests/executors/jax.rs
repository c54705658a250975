//! A team's own JAX code on Drover: `examples/jax/digits_jax.py`, a data-parallel MLP written with
//! Drover's Python library (`python/`, `drover.jax`), run as a `launcher: jax` command job of two
//! workers on two executors — one process each, joined by `jax.distributed` — then shrunk to one
//! worker while it runs (a checkpoint at one step agreed by both, the new world resumed from it), ends
//! exactly as accurate as the same script run alone: its global batches do not depend on the world.
//!
//! It needs a Python with JAX: `DROVER_TEST_PYTHON`, else `.tools/venv-python/bin/python` (which
//! `scripts/test` installs); without one the test skips, saying so.

use super::harness::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

const STEPS: u64 = 400;
const TEST: &str = "jax::a_jax_script_spans_two_workers_is_shrunk_and_ends_as_accurate_as_alone";

/// The final test accuracy a line "final test accuracy 0.9495 after ..." states.
fn final_accuracy(line: &str) -> Option<f64> {
    line.strip_prefix("final test accuracy ")?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

fn job(python: &str) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "digits-jax"},
        "spec": {
            "type": "command",
            "command": {
                "max_steps": STEPS,
                "argv": [python, "examples/jax/digits_jax.py",
                         "--eval-every", "20", "--checkpoint-every", "50"],
                // The checkout's library, not whichever copy the interpreter has installed.
                "env": {"PYTHONUNBUFFERED": "1",
                        "PYTHONPATH": repo_root().join("python/src").display().to_string()}
            },
            "resources": {"workers": {"min": 1, "max": 2}, "ps": 0, "gpus_per_worker": 1,
                          "cpus_per_worker": 1, "memory_gb_per_task": 2},
            "distributed": {"launcher": "jax"},
            "max_restarts": 2
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jax_script_spans_two_workers_is_shrunk_and_ends_as_accurate_as_alone() {
    let python = match python_importing("jax") {
        Ok(python) => python,
        Err(why) => {
            return skip(
                TEST,
                &format!("no Python with JAX ({why}); scripts/test installs one"),
            );
        }
    };
    // The same script alone, outside Drover: one process, the reference accuracy.
    let scratch = tempfile::tempdir().unwrap();
    let alone = Command::new(&python)
        .args(["examples/jax/digits_jax.py", "--steps", &STEPS.to_string()])
        .current_dir(repo_root())
        .env("DROVER_CHECKPOINT_DIR", scratch.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&alone.stdout);
    assert!(
        alone.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&alone.stderr)
    );
    let reference = stdout
        .lines()
        .find_map(final_accuracy)
        .unwrap_or_else(|| panic!("no final accuracy in {stdout}"));

    let cluster = Cluster::start().await;
    let id = cluster
        .post("/api/v1/jobs", job(python.to_str().unwrap()))
        .await["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Both workers (one slot on each executor), then a checkpoint of theirs.
    cluster
        .wait_until(
            "a checkpoint at step 100",
            Duration::from_secs(120),
            async |c| {
                let job = c.job(&id).await;
                assert_ne!(job["state"], "failed", "{job:#}\n{:#?}", c.logs(&id).await);
                let recorded = c.checkpoints(&id).await;
                recorded
                    .iter()
                    .any(|r| r["step"].as_u64() >= Some(100))
                    .then_some(())
            },
        )
        .await;
    let first: Vec<String> = cluster
        .tasks(&id)
        .await
        .iter()
        .filter(|t| t["generation"] == 1)
        .filter_map(|t| t["node"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(first.len(), 2, "two workers: {first:?}");
    assert_ne!(first[0], first[1], "on two executors");

    // One worker from now on: both processes stop at one step, and one resumes from it.
    cluster
        .post(
            &format!("/api/v1/jobs/{id}/resize"),
            json!({"workers": {"min": 1, "max": 1}}),
        )
        .await;
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(180))
        .await;
    assert_eq!(done["generation"], 2, "{done:#}");
    assert_eq!(done["restarts"], 0, "no failure along the way: {done:#}");
    let logs = cluster.logs(&id).await;
    let lines: Vec<&str> = logs.iter().filter_map(|l| l["line"].as_str()).collect();
    let of = |generation: u64, prefix: &str| -> Vec<&str> {
        logs.iter()
            .filter(|l| l["generation"] == generation)
            .filter_map(|l| l["line"].as_str())
            .filter(|l| l.starts_with(prefix))
            .collect()
    };
    assert_eq!(of(1, "digits_jax: job ").len(), 2, "{lines:#?}");
    assert!(
        of(1, "digits_jax: job ")
            .iter()
            .any(|l| l.contains(" process 1 of 2 ")),
        "{lines:#?}"
    );
    let stopped = of(1, "checkpointed at step ");
    assert_eq!(
        stopped.len(),
        2,
        "both processes stopped at a step: {lines:#?}"
    );
    assert_eq!(stopped[0], stopped[1], "the same step: {lines:#?}");
    let step = stopped[0]
        .trim_start_matches("checkpointed at step ")
        .split(' ')
        .next()
        .unwrap();
    let resumed = of(2, "resumed from step ");
    assert_eq!(resumed.len(), 1, "{lines:#?}");
    assert!(
        resumed[0].starts_with(&format!("resumed from step {step} "))
            && resumed[0].contains("with a world of 1"),
        "{resumed:?} after {stopped:?}"
    );
    let accuracy = lines
        .iter()
        .find_map(|l| final_accuracy(l))
        .unwrap_or_else(|| panic!("no final accuracy: {lines:#?}"));
    assert!(
        (accuracy - reference).abs() <= 0.01,
        "{accuracy} under Drover, {reference} alone"
    );
}
