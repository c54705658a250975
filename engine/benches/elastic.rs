//! What resizing a running job costs, and how fast each shape trains:
//!
//! 1. resize latency: a job at (2 PS, 3 workers) is asked to stop (the decision), its leader checkpoints
//!    at the step boundary and every task exits, and the job restarts from that checkpoint at
//!    (1 PS, 2 workers); timed from the decision to the end of the first step at the new shape — for
//!    the example MLP and for a ≥ 100 MB MLP;
//! 2. steps/s of every (PS, workers) shape up to 3 PS and 4 workers for the example MLP, written to
//!    `target/elastic/speed-samples.csv` and fitted with Optimus's speed model (the scheduler's
//!    `SpeedModel`), printed next to what was measured.
//!
//! `cargo bench -p drover-engine --bench elastic`. Every task is a thread of this process talking TCP
//! over loopback (the executor and server's part of a live resize is not included).

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark that cannot set up should stop"
)]

use drover_core::spec::{CheckpointPolicy, TrainSpec};
use drover_engine::dist::local;
use drover_engine::{Reporter, Requests, TrainOptions};
use drover_scheduler::Shape;
use drover_scheduler::perf::{Layout, SpeedModel};
use drover_scheduler::snapshot::StepStats;
use serde_json::json;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Stops the job (sets `stop`) once the leader reports `after` steps; remembers when it did, and when
/// the first step was reported.
struct Watch<'a> {
    stop_after: Option<u64>,
    requests: &'a Requests,
    decided: Option<Instant>,
    first_step: Option<Instant>,
}

impl Reporter for Watch<'_> {
    fn metrics(&mut self, step: u64, values: &[(&str, f64)]) {
        if !values.iter().any(|(k, _)| *k == "loss") {
            return;
        }
        self.first_step.get_or_insert_with(Instant::now);
        if self.stop_after.is_some_and(|after| step >= after) && self.decided.is_none() {
            self.decided = Some(Instant::now());
            self.requests.stop.store(true, Ordering::Relaxed);
        }
    }
    fn checkpoint(&mut self, _step: u64, _path: &Path) {}
    fn info(&mut self, _line: &str) {}
}

fn options(spec: serde_json::Value, dir: &Path) -> TrainOptions {
    let spec: TrainSpec = serde_json::from_value(spec).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    TrainOptions {
        checkpoint: CheckpointPolicy {
            every_steps: 1_000_000,
            keep_last: 2,
            keep_best: 0,
        },
        log_every: 1,
        ..TrainOptions::local(spec, dir, repo)
    }
}

/// Seconds from the decision to the first step at (1 PS, 2 workers), and the checkpoint's size.
fn resize_latency(spec: serde_json::Value, warm_steps: u64) -> (Duration, u64) {
    let dir = tempfile::tempdir().unwrap();
    let options = options(spec, dir.path());
    let requests = Requests::default();
    let mut watch = Watch {
        stop_after: Some(warm_steps),
        requests: &requests,
        decided: None,
        first_step: None,
    };
    let before = local::run_job(&options, 3, 2, 1, None, &mut watch, &requests).unwrap();
    assert!(before.interrupted, "the job ended before the decision");
    let decided = watch.decided.unwrap();
    let checkpoint = before.last_checkpoint.unwrap();
    let bytes = std::fs::read_dir(&checkpoint)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let mut options = options;
    options.stop_at = Some(before.step + 1);
    let requests = Requests::default();
    let mut after = Watch {
        stop_after: None,
        requests: &requests,
        decided: None,
        first_step: None,
    };
    local::run_job(&options, 2, 1, 2, Some(&checkpoint), &mut after, &requests).unwrap();
    (after.first_step.unwrap() - decided, bytes)
}

fn mlp(hidden: serde_json::Value, dataset: serde_json::Value, batch: u32) -> serde_json::Value {
    json!({
        "model": {"type": "mlp", "hidden": hidden}, "dataset": dataset,
        "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01},
        "batch_size": batch, "max_steps": 100_000, "eval_every": 100_000, "seed": 1
    })
}

fn main() {
    println!(
        "resize (2 PS, 3 workers) -> (1 PS, 2 workers): decision to the first step at the new shape"
    );
    let example = mlp(json!([256, 128]), json!({"type": "digits"}), 256);
    let (latency, bytes) = resize_latency(example.clone(), 50);
    println!(
        "  example MLP (digits, 256-128, 0.2 MB): {:.2} s (checkpoint {:.1} MB; target < 5 s)",
        latency.as_secs_f64(),
        bytes as f64 / 1e6
    );
    let large = mlp(
        json!([5000, 5000]),
        json!({"type": "synthetic", "samples": 2048, "features": 784, "classes": 10}),
        64,
    );
    let (latency, bytes) = resize_latency(large, 2);
    println!(
        "  MLP 784-5000-5000-10 (116 MB of parameters): {:.2} s (checkpoint {:.1} MB with AdamW state; target < 15 s)",
        latency.as_secs_f64(),
        bytes as f64 / 1e6
    );

    println!("steps/s of the example MLP at every shape (BSP, global batch 256; 2 cores):");
    let out = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("target/elastic");
    std::fs::create_dir_all(&out).unwrap();
    let mut csv = String::from("ps,workers,steps,mean_step_s,steps_per_s\n");
    let mut stats = Vec::new();
    const STEPS: u64 = 150;
    const WARMUP: u64 = 20;
    for ps in 1..=3u32 {
        for workers in 1..=4u32 {
            let dir = tempfile::tempdir().unwrap();
            let mut options = options(example.clone(), dir.path());
            options.stop_at = Some(WARMUP + STEPS);
            struct Clock {
                at: Vec<(u64, Instant)>,
            }
            impl Reporter for Clock {
                fn metrics(&mut self, step: u64, values: &[(&str, f64)]) {
                    if values.iter().any(|(k, _)| *k == "loss") {
                        self.at.push((step, Instant::now()));
                    }
                }
                fn checkpoint(&mut self, _: u64, _: &Path) {}
                fn info(&mut self, _: &str) {}
            }
            let mut clock = Clock { at: Vec::new() };
            local::run_job(
                &options,
                workers,
                ps,
                1,
                None,
                &mut clock,
                &Requests::default(),
            )
            .unwrap();
            let (s0, t0) = clock
                .at
                .iter()
                .find(|(s, _)| *s == WARMUP)
                .copied()
                .unwrap();
            let (s1, t1) = *clock.at.last().unwrap();
            let step_s = (t1 - t0).as_secs_f64() / (s1 - s0) as f64;
            println!(
                "  {ps} PS, {workers} workers: {:7.1} steps/s ({:.2} ms a step)",
                1.0 / step_s,
                step_s * 1e3
            );
            csv.push_str(&format!(
                "{ps},{workers},{},{step_s:.6},{:.3}\n",
                s1 - s0,
                1.0 / step_s
            ));
            stats.push(StepStats {
                shape: Shape { ps, workers },
                shared: false,
                spread_samples: 0,
                spread_mean_step_s: 0.0,
                samples: (s1 - s0) as u32,
                mean_step_s: step_s,
                gpu: Default::default(),
            });
        }
    }
    let path = out.join("speed-samples.csv");
    std::fs::write(&path, csv).unwrap();
    println!("  written to {}", path.display());
    let model = SpeedModel::fit(Layout::ParameterServers, &stats);
    println!(
        "Optimus speed model t(p, w) = θ0/w + θ1 + θ2·w/p + θ3·w + θ4·p fitted: θ = [{}] (ms)",
        model
            .theta
            .iter()
            .map(|t| format!("{:.3}", t * 1e3))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut worst: f64 = 0.0;
    for s in &stats {
        let predicted = model.step_s(s.shape);
        worst = worst.max((predicted - s.mean_step_s).abs() / s.mean_step_s);
    }
    println!(
        "  largest relative error of the fit over the 12 shapes: {:.0}%",
        100.0 * worst
    );
}
