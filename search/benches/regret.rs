//! Search quality: mean best-found regret after 25, 50 and 100 trials over 20 seeds on Branin and
//! Hartmann-6, Drover's random and TPE searchers side by side with Optuna's RandomSampler and
//! TPESampler (defaults) in the same run.
//!
//! `cargo bench -p drover-search --bench regret`. Optuna runs under `DROVER_BENCH_PYTHON` if set, else
//! `.tools/optuna/bin/python`, which the benchmark creates (a venv with `pip install optuna`) when
//! missing; if that fails the Optuna columns are skipped with a message. `SEEDS`, `TRIALS` and
//! `SEED_OFFSET` in the environment change the protocol (default 20 seeds from seed 0, 100 trials); both
//! sides use the same seeds.

use drover_core::experiment::{DroverExperiment, ExperimentSpec};
use drover_core::spec::Format;
use drover_search::offline;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const BRANIN_MIN: f64 = 0.397_887_357_729_738_2;
const HARTMANN6_MIN: f64 = -3.322_368_011_391_339;

fn branin(x1: f64, x2: f64) -> f64 {
    use std::f64::consts::PI;
    let (b, c, t) = (5.1 / (4.0 * PI * PI), 5.0 / PI, 1.0 / (8.0 * PI));
    (x2 - b * x1 * x1 + c * x1 - 6.0).powi(2) + 10.0 * (1.0 - t) * x1.cos() + 10.0
}

fn hartmann6(x: &[f64; 6]) -> f64 {
    const ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
    const A: [[f64; 6]; 4] = [
        [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
        [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
        [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
        [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
    ];
    const P: [[f64; 6]; 4] = [
        [1312.0, 1696.0, 5569.0, 124.0, 8283.0, 5886.0],
        [2329.0, 4135.0, 8307.0, 3736.0, 1004.0, 9991.0],
        [2348.0, 1451.0, 3522.0, 2883.0, 3047.0, 6650.0],
        [4047.0, 8828.0, 8732.0, 5743.0, 1091.0, 381.0],
    ];
    -(0..4)
        .map(|i| {
            let inner: f64 = (0..6)
                .map(|j| A[i][j] * (x[j] - P[i][j] * 1e-4).powi(2))
                .sum();
            ALPHA[i] * (-inner).exp()
        })
        .sum::<f64>()
}

fn spec(function: &str, searcher: &str, seed: u64, trials: usize) -> ExperimentSpec {
    let parameters = if function == "branin" {
        "x1: {type: double, min: -5, max: 10}\n    x2: {type: double, min: 0, max: 15}".to_owned()
    } else {
        (0..6)
            .map(|j| format!("x{j}: {{type: double, min: 0, max: 1}}"))
            .collect::<Vec<_>>()
            .join("\n    ")
    };
    let text = format!(
        "apiVersion: drover.dev/v1\nkind: DroverExperiment\nmetadata: {{name: {function}}}\nspec:\n  \
         trial: {{type: command, command: {{argv: [true]}}}}\n  parameters:\n    {parameters}\n  \
         metric: {{name: value, goal: minimize}}\n  searcher: {{type: {searcher}}}\n  \
         budget: {{max_trials: {trials}, max_concurrent_trials: 1}}\n  seed: {seed}\n"
    );
    DroverExperiment::parse(text.as_bytes(), Format::Yaml)
        .expect("benchmark spec is valid")
        .spec
}

fn evaluate(function: &str, params: &BTreeMap<String, Value>) -> f64 {
    let x = |name: &str| params.get(name).and_then(Value::as_f64).unwrap_or(0.0);
    if function == "branin" {
        branin(x("x1"), x("x2"))
    } else {
        let mut v = [0.0; 6];
        for (j, slot) in v.iter_mut().enumerate() {
            *slot = x(&format!("x{j}"));
        }
        hartmann6(&v)
    }
}

/// Best value after each trial, per seed.
fn drover_curves(function: &str, searcher: &str, seeds: usize, trials: usize) -> Vec<Vec<f64>> {
    (0..seeds)
        .map(|seed| {
            let offset = env_usize("SEED_OFFSET", 0) as u64;
            let spec = spec(function, searcher, seed as u64 + offset, trials);
            let run = offline::run(&spec, |params, _| evaluate(function, params));
            let mut best = f64::INFINITY;
            run.iter()
                .map(|trial| {
                    best = best.min(trial.final_value().unwrap_or(f64::INFINITY));
                    best
                })
                .collect()
        })
        .collect()
}

fn mean_regret(curves: &[Vec<f64>], at: usize, optimum: f64) -> f64 {
    let values: Vec<f64> = curves
        .iter()
        .filter_map(|curve| curve.get(at - 1).map(|best| best - optimum))
        .collect();
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

fn python() -> Result<PathBuf, String> {
    if let Ok(python) = std::env::var("DROVER_BENCH_PYTHON") {
        return Ok(PathBuf::from(python));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = root.join(".tools/optuna");
    let python = venv.join("bin/python");
    let has_optuna = |python: &Path| {
        Command::new(python)
            .args(["-c", "import optuna"])
            .output()
            .is_ok_and(|out| out.status.success())
    };
    if has_optuna(&python) {
        return Ok(python);
    }
    eprintln!("installing optuna into {} (once)...", venv.display());
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .map_err(|err| format!("python3 -m venv: {err}"))?;
    if !made.success() {
        return Err("python3 -m venv failed".into());
    }
    let installed = Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "optuna"])
        .status()
        .map_err(|err| format!("pip: {err}"))?;
    if installed.success() && has_optuna(&python) {
        Ok(python)
    } else {
        Err("pip install optuna failed".into())
    }
}

type OptunaCurves = BTreeMap<String, BTreeMap<String, Vec<Vec<f64>>>>;

fn optuna(seeds: usize, trials: usize) -> Result<OptunaCurves, String> {
    let python = python()?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/optuna_regret.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(seeds.to_string())
        .arg(trials.to_string())
        .arg(env_usize("SEED_OFFSET", 0).to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|err| format!("cannot run {}: {err}", python.display()))?;
    if !out.status.success() {
        return Err(format!("optuna_regret.py exited with {}", out.status));
    }
    serde_json::from_slice(&out.stdout).map_err(|err| format!("optuna output: {err}"))
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let seeds = env_usize("SEEDS", 20);
    let trials = env_usize("TRIALS", 100);
    let checkpoints: Vec<usize> = [25, 50, 100].into_iter().filter(|&n| n <= trials).collect();
    let started = Instant::now();
    let mut drover = BTreeMap::new();
    for function in ["branin", "hartmann6"] {
        for searcher in ["random", "tpe"] {
            let t = Instant::now();
            drover.insert(
                (function, searcher),
                drover_curves(function, searcher, seeds, trials),
            );
            eprintln!(
                "drover {function} {searcher}: {seeds} seeds x {trials} trials in {:.1} s",
                t.elapsed().as_secs_f64()
            );
        }
    }
    let peer = optuna(seeds, trials);
    if let Err(why) = &peer {
        println!("optuna skipped: {why}");
    }
    println!(
        "\nmean best-found regret over {seeds} seeds (lower is better; ratio = drover / optuna)\n"
    );
    println!(
        "{:<10} {:<7} {:>7} {:>12} {:>12} {:>7}",
        "function", "sampler", "trials", "drover", "optuna", "ratio"
    );
    for function in ["branin", "hartmann6"] {
        let optimum = if function == "branin" {
            BRANIN_MIN
        } else {
            HARTMANN6_MIN
        };
        for searcher in ["random", "tpe"] {
            for &n in &checkpoints {
                let ours = mean_regret(&drover[&(function, searcher)], n, optimum);
                let theirs = peer
                    .as_ref()
                    .ok()
                    .and_then(|p| p.get(function)?.get(searcher))
                    .map(|curves| mean_regret(curves, n, optimum));
                match theirs {
                    Some(theirs) => println!(
                        "{function:<10} {searcher:<7} {n:>7} {ours:>12.5} {theirs:>12.5} {:>7.2}",
                        ours / theirs
                    ),
                    None => println!(
                        "{function:<10} {searcher:<7} {n:>7} {ours:>12.5} {:>12} {:>7}",
                        "-", "-"
                    ),
                }
            }
        }
    }
    println!("\ntotal {:.1} s", started.elapsed().as_secs_f64());
}
