//! Hyper-parameter search on a real server and two executors: an ASHA experiment of engine-trained
//! digits MLPs whose promoted trials resume from their own checkpoints (no step trained twice), with
//! the server killed (-9) and restarted mid-experiment, finishing with exactly the trials and jobs an
//! uninterrupted run has; and a random search of `command` trials that receive their hyper-parameters
//! as environment variables and as a JSON file, and report the metric through contract lines.

use super::harness::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

fn asha(name: &str) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverExperiment",
        "metadata": {"name": name},
        "spec": {
            "trial": {
                "type": "train",
                "train": {
                    "model": {"type": "mlp", "hidden": [32]},
                    "dataset": {"type": "digits"},
                    "optimizer": {"type": "adamw", "lr": 0.001},
                    "batch_size": 32,
                    "eval_every": 30
                },
                "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                              "gpus_per_worker": 1, "cpus_per_worker": 1},
                "checkpoint": {"every_steps": 30}
            },
            "parameters": {
                "train.optimizer.lr": {"type": "log_uniform", "min": 0.0003, "max": 0.03},
                "train.model.hidden": {"type": "categorical", "values": [[16], [32], [64]]}
            },
            "metric": {"name": "val_accuracy", "goal": "maximize"},
            "searcher": {"type": "asha", "min_steps": 30, "max_steps": 270, "eta": 3},
            "budget": {"max_trials": 9, "max_concurrent_trials": 3},
            "seed": 11
        }
    })
}

async fn experiment(cluster: &Cluster, id: &str) -> Value {
    cluster.get(&format!("/api/v1/experiments/{id}")).await["experiment"].clone()
}

async fn wait_finished(cluster: &Cluster, id: &str, timeout: Duration) -> Value {
    cluster
        .wait_until("the experiment to finish", timeout, async |c| {
            let e = experiment(c, id).await;
            assert_ne!(
                e["state"], "failed",
                "the experiment failed: {}",
                e["message"]
            );
            (e["state"] == "succeeded").then_some(e)
        })
        .await
}

/// The rungs (1 to `rungs`) each trial reaches under ASHA with ratio `eta` when every trial's result
/// at each rung is `values[trial][rung]` (higher is better) and results are taken in trial order at
/// the first rung and in promotion order above it: the searcher's rule (`drover_search::asha`),
/// written again here from its description.
fn asha_depths(values: &[Vec<f64>], rungs: usize, eta: usize) -> Vec<usize> {
    let mut depth = vec![1; values.len()];
    let mut entrants: Vec<usize> = (0..values.len()).collect();
    for rung in 0..rungs - 1 {
        let mut seen: Vec<(f64, usize)> = Vec::new();
        let mut promoted: Vec<usize> = Vec::new();
        for &trial in &entrants {
            let Some(&value) = values[trial].get(rung) else {
                break;
            };
            seen.push((value, trial));
            seen.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for &(_, best) in &seen[..seen.len() / eta] {
                if !promoted.contains(&best) {
                    promoted.push(best);
                }
            }
        }
        for &trial in &promoted {
            depth[trial] = rung + 2;
        }
        entrants = promoted;
    }
    depth
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asha_resumes_promoted_trials_from_their_checkpoints_across_a_server_kill() {
    let mut cluster = Cluster::start_with_slots(2).await;
    let created = cluster
        .post("/api/v1/experiments", asha("digits-asha"))
        .await;
    let id = created["experiment"]["id"].as_str().unwrap().to_owned();

    // Once some trials have finished their first rung, the server dies and comes back.
    cluster
        .wait_until("four trials", Duration::from_secs(180), async |c| {
            let e = experiment(c, &id).await;
            (e["trials"].as_array().unwrap().len() >= 4).then_some(())
        })
        .await;
    cluster.restart_server();

    let done = wait_finished(&cluster, &id, Duration::from_secs(420)).await;
    let trials = done["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 9, "max_trials, not one more: {done}");
    // Rungs of 30, 90 and 270 steps, promotions by ASHA's rule with the results taken in trial
    // order: the rungs each trial reached follow from the values its jobs reported, whatever order
    // they finished in, and whether or not the server restarted.
    let depth: Vec<usize> = trials
        .iter()
        .map(|t| t["jobs"].as_array().unwrap().len())
        .collect();
    let mut story = String::new();
    // Each trial's value at the end of each rung it ran.
    let mut values: Vec<Vec<f64>> = Vec::new();
    for trial in trials {
        let mut rungs = Vec::new();
        for segment in trial["jobs"].as_array().unwrap() {
            let job_id = segment["job_id"].as_str().unwrap();
            let job = cluster.job(job_id).await;
            let metrics = cluster
                .get(&format!("/api/v1/jobs/{job_id}/metrics?name=val_accuracy"))
                .await;
            let last = metrics["metrics"].as_array().unwrap().last().cloned();
            story.push_str(&format!(
                "\ntrial {} segment {} to {}: {} {} ({}), generation {}, last val_accuracy {:?}",
                trial["trial"],
                segment["segment"],
                segment["max_steps"],
                job["state"],
                job["reason"],
                job["message"],
                job["generation"],
                last,
            ));
            let last = last.unwrap_or_else(|| panic!("no val_accuracy:{story}"));
            assert_eq!(last["step"], segment["max_steps"], "{story}");
            rungs.push(last["value"].as_f64().unwrap());
        }
        values.push(rungs);
    }
    let events = drover_cli(&cluster, &["experiment", "events", "digits-asha"]);
    let expected = asha_depths(&values, 3, 3);
    assert_eq!(depth, expected, "{story}\n{events}");
    assert_eq!(
        depth.iter().filter(|&&d| d == 3).count(),
        1,
        "one trial at the top rung: {depth:?}{story}\n{events}"
    );
    // No job twice: the tenant holds exactly the segments' jobs, each succeeded.
    let jobs = cluster
        .get("/api/v1/jobs?label=drover.dev/experiment%3Ddigits-asha&limit=500")
        .await;
    let jobs = jobs["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), depth.iter().sum::<usize>(), "{jobs:?}");
    assert!(jobs.iter().all(|j| j["state"] == "succeeded"), "{jobs:?}");

    // Every promotion resumed from the checkpoint its previous rung ended with: the promoted job
    // starts at that step and trains only the steps up to its rung.
    for trial in trials {
        let segments = trial["jobs"].as_array().unwrap();
        for pair in segments.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            let resumed_at = before["max_steps"].as_u64().unwrap();
            let job = after["job_id"].as_str().unwrap();
            let logs = cluster.logs(job).await;
            let text: Vec<&str> = logs.iter().filter_map(|l| l["line"].as_str()).collect();
            assert!(
                text.iter()
                    .any(|l| l.contains(&format!("resumed from step {resumed_at} "))),
                "trial {} segment {}: {text:?}",
                trial["trial"],
                after["segment"]
            );
            let metrics = cluster
                .get(&format!("/api/v1/jobs/{job}/metrics?name=loss"))
                .await;
            let first = metrics["metrics"][0]["step"]
                .as_u64()
                .unwrap_or_else(|| panic!("the promoted job reported its loss: {metrics}"));
            assert!(
                first > resumed_at,
                "no step up to {resumed_at} redone: {first}"
            );
        }
    }
    let best = done["best_trial"].as_u64().expect("a best trial");
    assert_eq!(
        trials[best as usize]["jobs"].as_array().unwrap().len(),
        3,
        "the best value comes from the trial that trained longest: {done}"
    );
    let accuracy = done["best_value"].as_f64().unwrap();
    assert!(accuracy > 0.8, "digits at 270 steps: {accuracy}");

    let shown = drover_cli(&cluster, &["experiment", "best", "digits-asha"]);
    assert!(shown.contains(&format!("best trial: {best}")), "{shown}");
    assert!(shown.contains("drover download "), "{shown}");
    let listed = drover_cli(&cluster, &["experiment", "list"]);
    assert!(
        listed.contains("digits-asha") && listed.contains("succeeded"),
        "{listed}"
    );
    let events = drover_cli(&cluster, &["experiment", "events", "digits-asha"]);
    assert!(
        events.contains("resumes from its checkpoint to step 90"),
        "{events}"
    );
    assert!(
        events.contains("finished: all 9 trials have run"),
        "{events}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pbt_starts_an_exploiting_trial_from_the_source_trials_checkpoint() {
    let cluster = Cluster::start_with_slots(2).await;
    let mut spec = asha("digits-pbt");
    spec["spec"]["searcher"] = json!({
        "type": "pbt", "population": 4, "ready_steps": 30, "max_steps": 90, "quantile": 0.25
    });
    spec["spec"]["budget"] = json!({"max_trials": 12, "max_concurrent_trials": 4});
    let created = cluster.post("/api/v1/experiments", spec).await;
    let id = created["experiment"]["id"].as_str().unwrap().to_owned();
    let done = wait_finished(&cluster, &id, Duration::from_secs(300)).await;
    let trials = done["trials"].as_array().unwrap();
    let exploits: Vec<&Value> = trials
        .iter()
        .filter(|t| !t["source_trial"].is_null())
        .collect();
    assert!(!exploits.is_empty(), "some member was replaced: {done}");
    for trial in exploits {
        let source = &trials[trial["source_trial"].as_u64().unwrap() as usize];
        // The source's checkpoint at the end of the round it was chosen for: the last one of one of
        // its jobs; the exploiting trial's first job restored exactly that file.
        let first = trial["jobs"][0]["job_id"].as_str().unwrap();
        let logs = cluster.logs(first).await;
        let resumed = logs
            .iter()
            .filter_map(|l| l["line"].as_str())
            .find(|l| l.contains("resumed from step"))
            .unwrap_or_else(|| panic!("trial {} did not resume: {logs:?}", trial["trial"]))
            .to_owned();
        let mut found = false;
        for job in source["jobs"].as_array().unwrap() {
            let checkpoints = cluster.checkpoints(job["job_id"].as_str().unwrap()).await;
            if let Some(last) = checkpoints
                .iter()
                .max_by_key(|c| c["step"].as_u64().unwrap())
            {
                let path = cluster.checkpoint_path(&last["path"]);
                found |= resumed.contains(&format!(
                    "resumed from step {} ({})",
                    last["step"],
                    path.display()
                ));
            }
        }
        assert!(
            found,
            "trial {} resumed from its source's checkpoint: {resumed}",
            trial["trial"]
        );
        assert!(
            trial["params"] != source["params"],
            "explored: the hyper-parameters were perturbed"
        );
    }
    // Every member trained to max_steps.
    let finished_at_90 = trials
        .iter()
        .filter(|t| t["jobs"].as_array().unwrap().last().unwrap()["max_steps"] == 90)
        .count();
    assert!(finished_at_90 >= 4, "{done}");
}

/// Branin in Python: the trial reads its point from `DROVER_HPARAMS_FILE`, checks the per-parameter
/// variables agree, and reports the value as a metrics contract line.
const BRANIN: &str = r#"
import json, math, os
p = json.load(open(os.environ["DROVER_HPARAMS_FILE"]))
assert float(os.environ["DROVER_HP_X1"]) == p["x1"], (os.environ["DROVER_HP_X1"], p)
assert json.loads(os.environ["DROVER_HPARAMS"]) == p
x1, x2 = p["x1"], p["x2"]
b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
v = (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10
print(json.dumps({"drover": "metrics", "step": 1, "values": {"branin": v}}), flush=True)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_trials_get_their_hyper_parameters_and_report_the_metric() {
    let cluster = Cluster::start().await;
    let spec = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverExperiment",
        "metadata": {"name": "branin"},
        "spec": {
            "trial": {
                "type": "command",
                "command": {"argv": ["python3", "-c", BRANIN]},
                "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                              "gpus_per_worker": 0, "cpus_per_worker": 1}
            },
            "parameters": {
                "x1": {"type": "double", "min": -5, "max": 10},
                "x2": {"type": "double", "min": 0, "max": 15}
            },
            "metric": {"name": "branin", "goal": "minimize"},
            "searcher": {"type": "random"},
            "budget": {"max_trials": 4, "max_concurrent_trials": 2}
        }
    });
    let created = cluster.post("/api/v1/experiments", spec).await;
    let id = created["experiment"]["id"].as_str().unwrap().to_owned();
    let done = wait_finished(&cluster, &id, Duration::from_secs(180)).await;
    let trials = done["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 4);
    let mut values = BTreeMap::new();
    for trial in trials {
        assert_eq!(trial["state"], "succeeded", "{trial}");
        let (x1, x2) = (
            trial["params"]["x1"].as_f64().unwrap(),
            trial["params"]["x2"].as_f64().unwrap(),
        );
        let expected = branin(x1, x2);
        let reported = trial["last_value"].as_f64().unwrap();
        assert!((reported - expected).abs() < 1e-9, "{trial}");
        values.insert(trial["trial"].as_u64().unwrap(), reported);
    }
    let best = values
        .iter()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .map(|(t, _)| *t)
        .unwrap();
    assert_eq!(done["best_trial"].as_u64(), Some(best));
}

fn branin(x1: f64, x2: f64) -> f64 {
    use std::f64::consts::PI;
    let (b, c, t) = (5.1 / (4.0 * PI * PI), 5.0 / PI, 1.0 / (8.0 * PI));
    (x2 - b * x1 * x1 + c * x1 - 6.0).powi(2) + 10.0 * (1.0 - t) * x1.cos() + 10.0
}
