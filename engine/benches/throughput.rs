//! Training throughput of the engine next to PyTorch's, for the same architecture, batch, optimizer,
//! thread count and data, in the same run; and checkpoint save/restore speed against the disk's
//! sequential write speed.
//!
//! `cargo bench -p drover-engine --bench throughput [-- [--device cuda] CASE…]` (2 threads; PyTorch
//! is skipped with a message when the script cannot import it; `DROVER_BENCH_PYTHON` names the
//! interpreter, `python3` by default). Only training steps are timed, after warm-up; the PyTorch side
//! (`torch_throughput.py`, a child process) trains on the engine's own synthetic set, drawing batches
//! the same way, in three configurations (default optimizers, fused optimizers, `torch.compile`),
//! and the sides take turns round by round, the fastest round of each counting. The ratio is against
//! PyTorch's fastest configuration that ran.
//!
//! With `--device cuda` (a build with `--features cuda`), both sides train on the GPU: the engine's
//! run keeps everything there ([`Run::step_on_device`]) and a round ends when the GPU has finished.

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark that cannot set up should stop"
)]

use candle_core::Device;
use drover_core::spec::{CheckpointPolicy, TrainSpec};
use drover_engine::data::Data;
use drover_engine::{Run, TrainOptions};
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const THREADS: usize = 2;
const WARMUP: u64 = 10;
/// Timed rounds per case; the fastest counts (on both sides).
const REPEATS: usize = 10;

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
            steps: 40,
        },
        Case {
            name: "mlp-sgd",
            spec: json!({"model": mlp, "dataset": images,
                "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9}, "batch_size": 256}),
            steps: 40,
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

fn run(case: &Case, dir: &Path, device: &Device) -> Run {
    let mut spec = case.spec.clone();
    spec["max_steps"] = json!(1_000_000);
    let spec: TrainSpec = serde_json::from_value(spec).unwrap();
    Run::new(TrainOptions {
        checkpoint: CheckpointPolicy {
            every_steps: 1_000_000,
            keep_last: 100,
            keep_best: 0,
        },
        log_every: 1_000_000,
        device: device.clone(),
        ..TrainOptions::local(spec, dir, dir)
    })
    .unwrap()
}

/// PyTorch's configurations, in the order of the table's columns.
const CONFIGS: [&str; 3] = ["default", "fused", "compiled"];

/// One timed round of `steps` training steps (gradients and the optimizer update): seconds per step,
/// and the part of it spent applying the update.
fn engine_round(run: &mut Run, steps: u64) -> (f64, f64) {
    if run.is_resident() {
        let started = Instant::now();
        for _ in 0..steps {
            run.step_on_device().unwrap();
        }
        // Reading the loss waits for the device to finish the round.
        run.take_totals().unwrap();
        return (started.elapsed().as_secs_f64() / steps as f64, f64::NAN);
    }
    let mut applying = 0.0;
    let started = Instant::now();
    for _ in 0..steps {
        let (_, _, _, grads) = run.gradients().unwrap();
        let apply_started = Instant::now();
        run.apply(grads).unwrap();
        applying += apply_started.elapsed().as_secs_f64();
    }
    let steps = steps as f64;
    (started.elapsed().as_secs_f64() / steps, applying / steps)
}

/// The PyTorch side, a child process that times one round of a case per request.
struct Torch {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Torch {
    /// Starts the script on the engine's own data; why not, when PyTorch cannot run here.
    fn start(dir: &Path, text: &Path, device: &str) -> Result<Self, String> {
        // The engine's synthetic training set, exactly as a run of the MLP cases loads it.
        let spec: TrainSpec = serde_json::from_value(cases(text)[0].spec.clone()).unwrap();
        let Data::Classification(data) = drover_engine::data::synthetic(4096, 784, 10, spec.seed)
        else {
            unreachable!("synthetic data is a classification set")
        };
        let images = dir.join("images.f32");
        let labels = dir.join("labels.u32");
        let bytes: Vec<u8> = data.train.x.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&images, bytes).unwrap();
        let bytes: Vec<u8> = data.train.y.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&labels, bytes).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/torch_throughput.py");
        let python = std::env::var("DROVER_BENCH_PYTHON").unwrap_or_else(|_| "python3".to_owned());
        let mut child = Command::new(&python)
            .arg(&script)
            .args(["--device", device])
            .args(["--threads", &THREADS.to_string()])
            .args(["--warmup", &WARMUP.to_string()])
            .args(["--features", &data.train.dim.to_string()])
            .arg("--images")
            .arg(&images)
            .arg("--labels")
            .arg(&labels)
            .arg("--text")
            .arg(text)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| format!("cannot run {python}: {err}"))?;
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap_or_default();
        if line.trim() != "ready" {
            let mut stderr = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = err.read_to_string(&mut stderr);
            }
            let _ = child.wait();
            return Err(stderr
                .lines()
                .last()
                .unwrap_or("failed to start")
                .to_owned());
        }
        Ok(Self {
            child,
            stdin,
            stdout,
        })
    }

    /// Seconds per step of one timed round in configuration `config` (the first round of a case
    /// builds and warms it up), or why that configuration cannot run here.
    fn round(&mut self, case: &str, steps: u64, config: &str) -> Result<f64, String> {
        writeln!(self.stdin, "{case} {steps} {config}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let line = line.trim();
        if let Some(reason) = line.strip_prefix("error: ") {
            return Err(reason.to_owned());
        }
        Ok(line
            .parse()
            .unwrap_or_else(|_| panic!("the PyTorch script answered {line:?} for {case}")))
    }
}

impl Drop for Torch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    // `cargo bench --bench throughput -- --device cuda mlp-sgd lenet5` runs only the named cases.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device_name = args
        .iter()
        .position(|a| a == "--device")
        .and_then(|i| args.get(i + 1))
        .map_or("cpu", String::as_str)
        .to_owned();
    let device = drover_engine::device::open(&device_name).unwrap();
    let only: Vec<&String> = args
        .iter()
        .filter(|a| !a.starts_with("--") && **a != device_name)
        .collect();
    let mut cases = cases(&text);
    if !only.is_empty() {
        cases.retain(|c| only.iter().any(|o| *o == c.name));
    }
    let mut torch = Torch::start(dir.path(), &text, &device_name);
    println!(
        "training throughput on {device_name} ({THREADS} CPU threads), steps timed after {WARMUP} warm-up steps, best of {REPEATS} rounds taken in turn with PyTorch's (samples/s; higher is better); the ratio is against PyTorch's fastest configuration"
    );
    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>14}",
        "case", "drover", "pt-default", "pt-fused", "pt-compile", "ratio", "drover update"
    );
    let mut torch_errors = Vec::new();
    for case in &cases {
        let mut run = run(case, dir.path(), &device);
        for _ in 0..WARMUP {
            engine_round(&mut run, 1);
        }
        // This machine's other load only ever slows a round down: the fastest round counts, and the
        // two sides take turns so that both meet the same load.
        let (mut engine, mut update) = (f64::INFINITY, 0.0);
        let mut torch_s: [Result<f64, String>; 3] = std::array::from_fn(|_| Ok(f64::INFINITY));
        for _ in 0..REPEATS {
            if let Ok(torch) = &mut torch {
                for (config, best) in CONFIGS.iter().zip(torch_s.iter_mut()) {
                    if let Ok(seconds) = best {
                        match torch.round(case.name, case.steps, config) {
                            Ok(round) => *seconds = seconds.min(round),
                            Err(reason) => *best = Err(reason),
                        }
                    }
                }
            }
            let (step_s, apply_s) = engine_round(&mut run, case.steps);
            if step_s < engine {
                (engine, update) = (step_s, apply_s);
            }
        }
        let update = if update.is_nan() {
            "on device".to_owned()
        } else {
            format!("{:.1} ms/step", 1000.0 * update)
        };
        let batch = case.spec["batch_size"].as_f64().unwrap();
        let column = |r: &Result<f64, String>| match r {
            Ok(s) if torch.is_ok() => format!("{:.0}", batch / s),
            _ => "-".to_owned(),
        };
        let fastest = torch_s
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .fold(f64::INFINITY, f64::min);
        let ratio = if torch.is_ok() && fastest.is_finite() {
            format!("{:.2}x", fastest / engine)
        } else {
            "-".to_owned()
        };
        println!(
            "{:<10} {:>10.0} {:>10} {:>10} {:>10} {ratio:>7} {update:>14}",
            case.name,
            batch / engine,
            column(&torch_s[0]),
            column(&torch_s[1]),
            column(&torch_s[2]),
        );
        for (config, result) in CONFIGS.iter().zip(&torch_s) {
            if let Err(reason) = result {
                torch_errors.push(format!("{} {config}: {reason}", case.name));
            }
        }
    }
    if let Err(reason) = &torch {
        println!("PyTorch skipped: {reason}");
    }
    for error in torch_errors {
        println!("PyTorch could not run {error}");
    }
    drop(torch);

    // Checkpoints of the big MLP (1.86M parameters, with AdamW state).
    if !only.is_empty() {
        return;
    }
    let mut big = run(&cases[0], dir.path(), &device);
    engine_round(&mut big, 1);
    let started = Instant::now();
    let path = big.save(&Default::default()).unwrap();
    let save_s = started.elapsed().as_secs_f64();
    let bytes: u64 = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let mut fresh = run(&cases[0], dir.path(), &device);
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
