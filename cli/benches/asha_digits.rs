//! ASHA on a real training job: Drover's ASHA searcher against Optuna's `SuccessiveHalvingPruner`,
//! in the same run, on the same search space (the digits MLP's optimizer, learning rate, width and
//! batch size, as `examples/experiments/digits-asha.yaml`) and the same trainer (`drover train`, each
//! trial resuming its own checkpoint between rungs of 100, 300 and 900 steps). For each seed, Drover's
//! ASHA runs 27 trials one at a time; Optuna then gets the steps Drover spent. Printed per seed and on
//! average: the best validation accuracy each reached, and the steps each needed to reach the lower of
//! the two bests.
//!
//! `cargo bench -p drover --bench asha_digits`. `SEEDS` (default 10) and `SAMPLER` (Optuna's sampler:
//! `random`, the default, like ASHA's; or `tpe`) in the environment. Optuna runs under
//! `DROVER_BENCH_PYTHON` if set, else `.tools/optuna/bin/python` (`cargo bench -p drover-search --bench
//! regret` installs it); without it the Optuna column is skipped with a message.

use drover_core::experiment::{DroverExperiment, TrialRun, build_trial};
use drover_core::spec::Format;
use drover_search::{Decision, SegmentState, Situation, apply, plan};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const DROVER: &str = env!("CARGO_BIN_EXE_drover");

fn experiment(seed: u64) -> DroverExperiment {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/experiments/digits-asha.yaml"),
    )
    .expect("the example experiment");
    let mut experiment =
        DroverExperiment::parse(text.as_bytes(), Format::Yaml).expect("a valid example");
    experiment.spec.seed = seed;
    experiment.spec.budget.max_trials = Some(27);
    experiment.spec.budget.max_concurrent_trials = 1;
    experiment
}

/// Trains `file` to `steps` (from `from`'s checkpoint when it is not 0); the last validation accuracy.
fn train(file: &Path, dir: &Path, from: u64, steps: u64) -> f64 {
    let mut command = Command::new(DROVER);
    command
        .arg("train")
        .arg(file)
        .arg("--checkpoint-dir")
        .arg(dir)
        .arg("--steps")
        .arg(steps.to_string());
    if from > 0 {
        command
            .arg("--resume-from")
            .arg(dir.join(format!("step-{from:08}")));
    }
    let out = command.output().expect("drover train runs");
    assert!(
        out.status.success(),
        "drover train: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.rsplit("val_accuracy=")
        .next()
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("a validation accuracy")
}

/// Drover's ASHA, one trial at a time: (steps spent, best accuracy) after every rung.
fn drover_asha(seed: u64, work: &Path) -> Vec<(u64, f64)> {
    let experiment = experiment(seed);
    let mut situation = Situation::default();
    let (mut spent, mut best, mut curve) = (0u64, 0f64, Vec::new());
    loop {
        let planned = plan(&experiment.spec, &situation);
        for decision in &planned.decisions {
            apply(&mut situation.trials, decision);
            let (trial, target) = match decision {
                Decision::Start {
                    trial, max_steps, ..
                } => (*trial, max_steps.unwrap_or(900)),
                Decision::Resume {
                    trial, max_steps, ..
                } => (*trial, *max_steps),
                Decision::Stop { .. } => continue,
            };
            let record = situation
                .trials
                .iter_mut()
                .find(|t| t.index == trial)
                .expect("the trial just applied");
            let from = record
                .segments
                .iter()
                .rev()
                .skip(1)
                .find_map(|s| s.max_steps)
                .unwrap_or(0);
            // The whole run's spec (the learning rate is constant, so stopping at a rung and
            // resuming is the same trajectory as one run).
            let name = format!("t{trial}");
            let run = TrialRun {
                name: &name,
                trial,
                params: &record.params,
                max_steps: Some(900),
                init_from: None,
            };
            let job = build_trial(&experiment, &run).expect("a trial job");
            let file = work.join(format!("t{trial}.json"));
            std::fs::write(&file, serde_json::to_vec(&job).expect("json")).expect("write");
            let accuracy = train(&file, &work.join(&name), from, target);
            spent += target - from;
            best = best.max(accuracy);
            curve.push((spent, best));
            let segment = record.segments.last_mut().expect("a segment");
            segment.state = SegmentState::Succeeded;
            segment.last = Some(accuracy);
            record.curve.push((target, accuracy));
        }
        if planned.finished.is_some() {
            return curve;
        }
    }
}

fn python() -> Option<PathBuf> {
    if let Ok(python) = std::env::var("DROVER_BENCH_PYTHON") {
        return Some(PathBuf::from(python));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/optuna/bin/python");
    let ok = Command::new(&venv)
        .args(["-c", "import optuna"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(venv)
}

fn optuna(python: &Path, seed: u64, budget: u64, sampler: &str) -> Result<Vec<(u64, f64)>, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/optuna_asha_digits.py");
    let out = Command::new(python)
        .arg(script)
        .arg(DROVER)
        .arg(seed.to_string())
        .arg(budget.to_string())
        .arg(sampler)
        .output()
        .map_err(|err| format!("cannot run {}: {err}", python.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|err| format!("optuna output: {err}"))
}

/// The steps spent when the curve first reached `accuracy`.
fn steps_to(curve: &[(u64, f64)], accuracy: f64) -> Option<u64> {
    curve
        .iter()
        .find(|&&(_, best)| best >= accuracy)
        .map(|&(s, _)| s)
}

/// The best accuracy within `budget` steps.
fn best_within(curve: &[(u64, f64)], budget: u64) -> f64 {
    curve
        .iter()
        .filter(|&&(s, _)| s <= budget)
        .map(|&(_, b)| b)
        .fold(0.0, f64::max)
}

fn main() {
    let seeds: u64 = std::env::var("SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let sampler = std::env::var("SAMPLER").unwrap_or_else(|_| "random".to_owned());
    let python = python();
    if python.is_none() {
        println!(
            "optuna skipped: no python with optuna (run `cargo bench -p drover-search --bench regret` once)"
        );
    }
    let started = Instant::now();
    println!(
        "{:>4} {:>8} {:>9} {:>9} {:>9} {:>12} {:>12}",
        "seed", "budget", "drover", "optuna", "target", "drover steps", "optuna steps"
    );
    let (mut sum_ours, mut sum_theirs, mut n) = (0.0, 0.0, 0);
    let (mut steps_ours, mut steps_theirs, mut fewer, mut more) = (0u64, 0u64, 0, 0);
    for seed in 1..=seeds {
        let work =
            std::env::temp_dir().join(format!("drover-asha-bench-{seed}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).expect("a work directory");
        let ours = drover_asha(seed, &work);
        let budget = ours.last().map_or(0, |c| c.0);
        let ours_best = best_within(&ours, budget);
        let theirs = python.as_deref().map(|p| optuna(p, seed, budget, &sampler));
        let _ = std::fs::remove_dir_all(&work);
        match theirs {
            Some(Ok(theirs)) => {
                let theirs_best = best_within(&theirs, budget);
                let target = ours_best.min(theirs_best);
                println!(
                    "{seed:>4} {budget:>8} {ours_best:>9.4} {theirs_best:>9.4} {target:>9.4} {:>12} {:>12}",
                    steps_to(&ours, target).map_or("-".into(), |s| s.to_string()),
                    steps_to(&theirs, target).map_or("-".into(), |s| s.to_string()),
                );
                sum_ours += ours_best;
                sum_theirs += theirs_best;
                n += 1;
                let (a, b) = (steps_to(&ours, target), steps_to(&theirs, target));
                if let (Some(a), Some(b)) = (a, b) {
                    steps_ours += a;
                    steps_theirs += b;
                    fewer += usize::from(a < b);
                    more += usize::from(a > b);
                }
            }
            Some(Err(why)) => {
                println!("{seed:>4} {budget:>8} {ours_best:>9.4}  optuna failed: {why}")
            }
            None => println!("{seed:>4} {budget:>8} {ours_best:>9.4}"),
        }
    }
    if n > 0 {
        println!(
            "mean best validation accuracy at Drover's budget: drover {:.4}, optuna ({sampler} + SuccessiveHalvingPruner) {:.4}",
            sum_ours / f64::from(n),
            sum_theirs / f64::from(n)
        );
        println!(
            "steps to the lower of the two bests: drover fewer in {fewer} seeds, more in {more}; mean {:.0} against {:.0}",
            steps_ours as f64 / f64::from(n),
            steps_theirs as f64 / f64::from(n)
        );
    }
    println!("total {:.1} s", started.elapsed().as_secs_f64());
}
