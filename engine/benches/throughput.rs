//! Training throughput of the engine next to PyTorch's, for the same architecture, batch, optimizer and
//! thread count, in the same run; and checkpoint save/restore speed against the disk's sequential write
//! speed.
//!
//! `cargo bench -p drover-engine --bench throughput` (2 threads; PyTorch is skipped with a message when
//! `python3 -c "import torch"` fails). Only training steps are timed, after warm-up, on synthetic data of
//! the right shape.

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark that cannot set up should stop"
)]

use candle_core::Device;
use drover_core::spec::{CheckpointPolicy, TrainSpec};
use drover_engine::{Run, TrainOptions};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

const THREADS: usize = 2;
const WARMUP: u64 = 10;
/// Timed rounds per case; the fastest counts (on both sides).
const REPEATS: usize = 3;

struct Case {
    name: &'static str,
    /// The train spec (model, optimizer, batch), and the synthetic data's shape.
    spec: serde_json::Value,
    steps: u64,
}

fn cases(text: &Path) -> Vec<Case> {
    let mlp = json!({"type": "mlp", "hidden": [1024, 1024]});
    let images = json!({"type": "synthetic", "samples": 4096, "features": 784, "classes": 10});
    vec![
        Case {
            name: "mlp-adamw",
            spec: json!({"model": mlp, "dataset": images,
                "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01}, "batch_size": 256}),
            steps: 60,
        },
        Case {
            name: "mlp-sgd",
            spec: json!({"model": mlp, "dataset": images,
                "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}, "batch_size": 256}),
            steps: 60,
        },
        Case {
            name: "lenet5",
            spec: json!({"model": {"type": "cnn", "channels": [6, 16], "hidden": [120, 84]}, "dataset": images,
                "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}, "batch_size": 64}),
            steps: 30,
        },
        Case {
            name: "charlm",
            spec: json!({"model": {"type": "charlm", "layers": 2, "heads": 4, "d_model": 64, "context": 64},
                "dataset": {"type": "text", "path": text.display().to_string()},
                "optimizer": {"type": "adamw", "lr": 0.003, "weight_decay": 0.01}, "batch_size": 16}),
            steps: 10,
        },
    ]
}

fn run(case: &Case, dir: &Path) -> Run {
    let mut spec = case.spec.clone();
    spec["max_steps"] = json!(1_000_000);
    let spec: TrainSpec = serde_json::from_value(spec).unwrap();
    Run::new(TrainOptions {
        spec,
        checkpoint: CheckpointPolicy {
            every_steps: 1_000_000,
            keep_last: 100,
            keep_best: 0,
        },
        workers: 1,
        ps: 0,
        rank: 0,
        checkpoint_dir: dir.to_path_buf(),
        resume_from: None,
        base_dir: dir.to_path_buf(),
        log_every: 1_000_000,
        stop_at: None,
        device: Device::Cpu,
        distributed: Default::default(),
        cluster: None,
    })
    .unwrap()
}

/// Seconds per training step (gradients and the optimizer update) after warm-up, and the part of it
/// spent applying the update.
fn engine_step_s(case: &Case, dir: &Path) -> (f64, f64) {
    let mut run = run(case, dir);
    for _ in 0..WARMUP {
        let (_, _, _, grads) = run.gradients().unwrap();
        run.apply(grads).unwrap();
    }
    // Best of three timed rounds: this machine's other load only ever slows a round down.
    let steps = case.steps as f64;
    let mut best = (f64::INFINITY, 0.0);
    for _ in 0..REPEATS {
        let mut applying = 0.0;
        let started = Instant::now();
        for _ in 0..case.steps {
            let (_, _, _, grads) = run.gradients().unwrap();
            let apply_started = Instant::now();
            run.apply(grads).unwrap();
            applying += apply_started.elapsed().as_secs_f64();
        }
        let step_s = started.elapsed().as_secs_f64() / steps;
        if step_s < best.0 {
            best = (step_s, applying / steps);
        }
    }
    best
}

/// PyTorch's seconds per step for every case, or why it could not run.
fn torch_step_s(text: &Path) -> Result<serde_json::Value, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/torch_throughput.py");
    let output = std::process::Command::new("python3")
        .arg(&script)
        .args([
            "--threads",
            &THREADS.to_string(),
            "--warmup",
            &WARMUP.to_string(),
            "--repeats",
            &REPEATS.to_string(),
            "--text",
        ])
        .arg(text)
        .output()
        .map_err(|err| format!("cannot run python3: {err}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(stderr.lines().last().unwrap_or("failed").to_owned());
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|err| format!("bad output from the PyTorch script: {err}"))
}

/// MB/s of writing `bytes` sequentially to a file in `dir` and fsyncing it.
fn disk_write_mb_s(dir: &Path, bytes: usize) -> f64 {
    let path = dir.join("disk-probe");
    let block = vec![0x5Au8; 1 << 20];
    let started = Instant::now();
    let mut file = std::fs::File::create(&path).unwrap();
    let mut written = 0;
    while written < bytes {
        file.write_all(&block).unwrap();
        written += block.len();
    }
    file.sync_all().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    std::fs::remove_file(&path).unwrap();
    written as f64 / seconds / 1e6
}

fn main() {
    // candle's CPU kernels run on rayon's global pool.
    if std::env::var("RAYON_NUM_THREADS").is_err() {
        rayon_threads();
    }
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.txt");
    let corpus = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/text/drover-docs.md"),
    )
    .unwrap();
    std::fs::write(&text, corpus).unwrap();
    let cases = cases(&text);
    let torch = torch_step_s(&text);
    println!(
        "training throughput, {THREADS} threads, steps timed after {WARMUP} warm-up steps, best of {REPEATS} rounds (samples/s; higher is better)"
    );
    println!(
        "{:<10} {:>12} {:>12} {:>8} {:>16}",
        "case", "drover", "pytorch", "ratio", "drover update"
    );
    for case in &cases {
        let (engine, update) = engine_step_s(case, dir.path());
        let update = format!("{:.1} ms/step", 1000.0 * update);
        let batch = case.spec["batch_size"].as_f64().unwrap();
        let torch_s = torch.as_ref().ok().and_then(|t| t[case.name].as_f64());
        match torch_s {
            Some(torch_s) => println!(
                "{:<10} {:>12.0} {:>12.0} {:>7.2}x {update:>16}",
                case.name,
                batch / engine,
                batch / torch_s,
                torch_s / engine
            ),
            None => println!(
                "{:<10} {:>12.0} {:>12} {:>8} {update:>16}",
                case.name,
                batch / engine,
                "-",
                "-"
            ),
        }
    }
    if let Err(reason) = &torch {
        println!("PyTorch skipped: {reason}");
    }

    // Checkpoints of the big MLP (1.86M parameters, with AdamW state).
    let mut big = run(&cases[0], dir.path());
    let (_, _, _, grads) = big.gradients().unwrap();
    big.apply(grads).unwrap();
    let started = Instant::now();
    let path = big.save(&Default::default()).unwrap();
    let save_s = started.elapsed().as_secs_f64();
    let bytes: u64 = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let mut fresh = run(&cases[0], dir.path());
    let started = Instant::now();
    fresh.restore(&path).unwrap();
    let restore_s = started.elapsed().as_secs_f64();
    // The disk's sustained speed: a probe large enough that caches do not flatter it.
    let disk = disk_write_mb_s(dir.path(), (bytes as usize).max(256 << 20));
    let mb = bytes as f64 / 1e6;
    println!(
        "checkpoint of {mb:.1} MB: save {:.0} MB/s ({:.0}% of the disk's {disk:.0} MB/s sequential write with fsync), restore {:.0} MB/s",
        mb / save_s,
        100.0 * mb / save_s / disk,
        mb / restore_s
    );
}

fn rayon_threads() {
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(THREADS)
        .build_global();
}
