//! A team's own PyTorch code on Drover: `examples/pytorch/digits_ddp.py`, a DistributedDataParallel
//! CNN written with Drover's Python library (`python/`), run as a `launcher: torch` command job on
//! two executors — resized by the scheduler from 2 workers to 3, then preempted by a job of higher
//! priority and resumed once it is done — ends as
//! accurate as the same script run alone, and every restart resumes from the step its predecessor
//! checkpointed when it was stopped.
//!
//! It needs a Python with PyTorch: `DROVER_TEST_PYTHON`, else `.tools/venv-python/bin/python`
//! (which `scripts/test` installs); without one the test skips, saying so.

use super::harness::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

const STEPS: u64 = 600;

/// The final test accuracy a line "final test accuracy 0.9697 after ..." states.
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
        "metadata": {"name": "digits-ddp"},
        "spec": {
            "type": "command",
            "command": {
                // The step budget reaches it as DROVER_MAX_STEPS (ctx.max_steps).
                "max_steps": STEPS,
                "argv": [python, "examples/pytorch/digits_ddp.py",
                         "--eval-every", "30", "--checkpoint-every", "60", "--step-sleep", "0.03"],
                // The checkout's library, not whichever copy the interpreter has installed.
                "env": {"PYTHONUNBUFFERED": "1",
                        "PYTHONPATH": repo_root().join("python/src").display().to_string()}
            },
            "resources": {"workers": {"min": 2, "max": 2}, "ps": 0, "gpus_per_worker": 1,
                          "cpus_per_worker": 1, "memory_gb_per_task": 2},
            "distributed": {"launcher": "torch"},
            "max_restarts": 2
        }
    })
}

/// The job, its events, tasks and last log lines, for a failure's message.
async fn diagnosis(cluster: &Cluster, id: &str) -> String {
    let job = cluster.job(id).await;
    let events = cluster.events(id).await;
    let tasks = cluster.tasks(id).await;
    let logs = cluster.logs(id).await;
    let tail: Vec<String> = logs
        .iter()
        .rev()
        .take(60)
        .rev()
        .map(|l| format!("g{} {}", l["generation"], l["line"].as_str().unwrap_or("")))
        .collect();
    format!(
        "state {} generation {} message {}\nevents {:#?}\ntasks {:#?}\nlogs:\n{}",
        job["state"],
        job["generation"],
        job["message"],
        events
            .iter()
            .map(|e| format!(
                "{} -> {} {} {}",
                e["from"], e["to"], e["reason"], e["message"]
            ))
            .collect::<Vec<_>>(),
        tasks
            .iter()
            .map(|t| format!(
                "g{} {} {} {} {}",
                t["generation"], t["index"], t["node"], t["state"], t["exit_code"]
            ))
            .collect::<Vec<_>>(),
        tail.join("\n")
    )
}

/// The lines of generation `generation` that start with `prefix`.
fn lines_of(logs: &[Value], generation: u64, prefix: &str) -> Vec<String> {
    logs.iter()
        .filter(|l| l["generation"] == generation)
        .filter_map(|l| l["line"].as_str())
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ddp_script_is_resized_preempted_and_resumed_and_ends_as_accurate_as_alone() {
    let python = match torch_python() {
        Ok(python) => python,
        Err(why) => {
            return skip(
                "a_ddp_script_is_resized_preempted_and_resumed_and_ends_as_accurate_as_alone",
                &format!("no Python with PyTorch ({why}); scripts/test installs one"),
            );
        }
    };
    // The same script alone, outside Drover: one process, the reference accuracy.
    let scratch = tempfile::tempdir().unwrap();
    let alone = Command::new(&python)
        .args([
            "examples/pytorch/digits_ddp.py",
            "--steps",
            &STEPS.to_string(),
        ])
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

    let cluster = Cluster::start_with_slots(2).await;
    let created = cluster
        .post("/api/v1/jobs", job(python.to_str().unwrap()))
        .await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    cluster
        .wait_until(
            "a checkpoint at step 120",
            Duration::from_secs(120),
            async |c| {
                let job = c.job(&id).await;
                if job["state"] == "failed" {
                    let logs = c.logs(&id).await;
                    panic!("{job:#}\n{:#?}\n{logs:#?}", c.events(&id).await);
                }
                let recorded = c.checkpoints(&id).await;
                recorded
                    .iter()
                    .any(|r| r["step"].as_u64() >= Some(120))
                    .then_some(())
            },
        )
        .await;

    // Grow it to three workers: the scheduler stops both ranks at one step, they checkpoint, and
    // three ranks resume from it with the same global batches.
    cluster
        .post(
            &format!("/api/v1/jobs/{id}/resize"),
            json!({"workers": {"min": 3, "max": 3}}),
        )
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    cluster
        .wait_until(
            "generation 2 past a checkpoint",
            Duration::from_secs(130),
            async |c| {
                if std::time::Instant::now() > deadline {
                    panic!(
                        "generation 2 recorded no checkpoint:\n{}",
                        diagnosis(c, &id).await
                    );
                }
                let recorded = c.checkpoints(&id).await;
                recorded.iter().any(|r| r["generation"] == 2).then_some(())
            },
        )
        .await;

    // A job of higher priority needs two of the four GPUs: the DDP job (three, and no fewer) is
    // preempted, checkpoints on the signal, waits, and resumes once they are free again.
    let urgent = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "urgent"},
        "spec": {
            "type": "command",
            "scheduling": {"priority": 10},
            "command": {"argv": ["sh", "-c", "sleep 6"]},
            "resources": {"workers": 2, "ps": 0, "gpus_per_worker": 1, "cpus_per_worker": 1,
                          "memory_gb_per_task": 1},
            "max_restarts": 0
        }
    });
    let urgent = cluster.post("/api/v1/jobs", urgent).await["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    cluster
        .wait_until(
            "the DDP job preempted",
            Duration::from_secs(60),
            async |c| {
                let events = c.events(&id).await;
                events
                    .iter()
                    .any(|e| e["reason"] == "preempted")
                    .then_some(())
            },
        )
        .await;
    cluster
        .wait_for_state(&urgent, "succeeded", Duration::from_secs(90))
        .await;
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(240))
        .await;
    assert_eq!(done["generation"], 3, "{done:#}");
    assert_eq!(done["restarts"], 0, "no failure along the way: {done:#}");

    let logs = cluster.logs(&id).await;
    let everything = || {
        logs.iter()
            .filter_map(|l| l["line"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (generation, world) in [(1, 2), (2, 3), (3, 3)] {
        let started = lines_of(&logs, generation, "digits_ddp: job ");
        assert_eq!(
            started.len(),
            world,
            "generation {generation} ran {world} ranks:\n{}",
            everything()
        );
        for rank in 0..world {
            let place = format!(" rank {rank} of world {world} ");
            assert!(
                started.iter().any(|l| l.contains(&place)),
                "generation {generation} has{place}:\n{}",
                everything()
            );
        }
    }
    // Each stop checkpointed at one step, agreed by every rank, and the next generation resumed
    // from exactly that step (every rank of it).
    for generation in [1, 2] {
        let stopped = lines_of(&logs, generation, "checkpointed at step ");
        assert!(
            !stopped.is_empty(),
            "generation {generation} was stopped:\n{}",
            everything()
        );
        assert!(
            stopped.windows(2).all(|w| w[0] == w[1]),
            "its ranks stopped at one step: {stopped:?}"
        );
        let at = checkpointed_step(&logs, generation).unwrap();
        let resumed = lines_of(&logs, generation + 1, "resumed from step ");
        assert!(
            !resumed.is_empty()
                && resumed
                    .iter()
                    .all(|l| l.starts_with(&format!("resumed from step {at} "))),
            "generation {} resumed from step {at}: {resumed:?}",
            generation + 1
        );
        // The model it resumed is the model it stopped with: the same test loss, to the last bit.
        let loss = stopped[0].rsplit_once("test loss ").unwrap().1;
        for line in &resumed {
            assert_eq!(
                line.rsplit_once("test loss ").map(|(_, l)| l),
                Some(loss),
                "stopped with test loss {loss}: {line}"
            );
        }
    }
    // The chief's metrics reached the server: every evaluation once, in order.
    let steps = cluster.metric_steps(&id, "accuracy").await;
    let expected: Vec<u64> = (1..=STEPS / 30).map(|k| k * 30).collect();
    assert_eq!(steps, expected);
    let finished = lines_of(&logs, 3, "final test accuracy ");
    assert!(!finished.is_empty(), "{}", everything());
    for line in &finished {
        let accuracy = final_accuracy(line).unwrap();
        assert!(
            (accuracy - reference).abs() <= 0.01,
            "resized, preempted and resumed: {accuracy}; alone: {reference}"
        );
    }
    // The library's reports (step_time_ms, loss) taught the server the job's speed at both shapes.
    let model = &cluster.job(&id).await["model"];
    let shapes = model["speed"]["shapes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(shapes.len(), 2, "step times at 2 and 3 workers: {model:#}");
    eprintln!(
        "digits_ddp: {} alone, {:?} after 2 -> 3 workers and a preemption",
        reference, finished
    );
}

/// ASHA over the DDP script's learning rate and width, its trials `command` jobs: each segment gets
/// its step budget (`command.max_steps`, the library's `ctx.max_steps`) and the hyper-parameters;
/// the rung's best resumes from its own checkpoint (`command.init_from`) for three times the steps,
/// and the others rest at the bottom rung, their jobs ended by the library at their budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asha_promotes_pytorch_trials_through_the_library() {
    const TEST: &str = "asha_promotes_pytorch_trials_through_the_library";
    let python = match torch_python() {
        Ok(python) => python,
        Err(why) => {
            return skip(
                TEST,
                &format!("no Python with PyTorch ({why}); scripts/test installs one"),
            );
        }
    };
    let cluster = Cluster::start_with_slots(2).await;
    let spec = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverExperiment",
        "metadata": {"name": "ddp-asha"},
        "spec": {
            "trial": {
                "type": "command",
                "command": {
                    "argv": [python, "examples/pytorch/digits_ddp.py", "--eval-every", "15",
                             "--checkpoint-every", "15"],
                    "env": {"PYTHONUNBUFFERED": "1",
                            "PYTHONPATH": repo_root().join("python/src").display().to_string()}
                },
                "resources": {"workers": 1, "ps": 0, "gpus_per_worker": 1, "cpus_per_worker": 1,
                              "memory_gb_per_task": 2},
                "distributed": {"launcher": "torch"}
            },
            "parameters": {
                "lr": {"type": "log_uniform", "min": 0.0003, "max": 0.03},
                "width": {"type": "categorical", "values": [4, 8, 16]}
            },
            "metric": {"name": "accuracy", "goal": "maximize"},
            "searcher": {"type": "asha", "min_steps": 30, "max_steps": 90, "eta": 3},
            "budget": {"max_trials": 3, "max_concurrent_trials": 3},
            "seed": 5
        }
    });
    let created = cluster.post("/api/v1/experiments", spec).await;
    let id = created["experiment"]["id"].as_str().unwrap().to_owned();
    let done = cluster
        .wait_until(
            "the experiment to finish",
            Duration::from_secs(240),
            async |c| {
                let e = c.get(&format!("/api/v1/experiments/{id}")).await["experiment"].clone();
                assert_ne!(e["state"], "failed", "{e:#}");
                (e["state"] == "succeeded").then_some(e)
            },
        )
        .await;
    let trials = done["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 3, "{done:#}");
    let mut promoted = Vec::new();
    for trial in trials {
        let segments = trial["jobs"].as_array().unwrap();
        let first = segments[0]["job_id"].as_str().unwrap();
        // Every segment's job ran to its budget and stopped there by itself.
        for segment in segments {
            let job = segment["job_id"].as_str().unwrap();
            let budget = segment["max_steps"].as_u64().unwrap();
            let logs = cluster.logs(job).await;
            assert!(
                logs.iter().any(|l| l["line"]
                    .as_str()
                    .is_some_and(|l| l.starts_with("final test accuracy ")
                        && l.contains(&format!(" after {budget} steps")))),
                "trial {} ran to {budget}: {logs:#?}",
                trial["trial"]
            );
            assert_eq!(cluster.job(job).await["state"], "succeeded");
        }
        if segments.len() > 1 {
            // The promoted segment resumed where the rung below ended, with the trial's own
            // hyper-parameters.
            let job = segments[1]["job_id"].as_str().unwrap();
            let logs = cluster.logs(job).await;
            assert!(
                logs.iter().any(|l| l["line"]
                    .as_str()
                    .is_some_and(|l| l.starts_with("resumed from step 30 "))),
                "{logs:#?}"
            );
            assert_eq!(segments[1]["max_steps"], 90);
            promoted.push((trial["trial"].clone(), first.to_owned()));
        }
    }
    assert_eq!(
        promoted.len(),
        1,
        "one of three promoted at eta 3: {done:#}"
    );
    // Trained three times as long from the bottom rung's best point, it is the search's best.
    assert_eq!(done["best_trial"], promoted[0].0, "{done:#}");
}
