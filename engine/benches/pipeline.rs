//! Pipeline parallelism's bubble: the transformer split into S stages, each step's batch into M
//! micro-batches, under GPipe and one-forward-one-backward; the fraction of the stages' time spent
//! waiting (measured by every stage: 1 − computing / wall, summed over the stages), printed next to
//! the formula `(S − 1)/(M + S − 1)`, with how many micro-batches' activations the first stage held
//! at once (GPipe: M; 1F1B: S) and the tokens trained per second; then the same model split among
//! 2 and 4 tensor-parallel workers of one thread each, against one process of two threads.
//!
//! `cargo bench -p drover-engine --bench pipeline [-- --steps N]`. Every stage is a thread of this
//! process with a compute pool of one thread of its own, talking TCP over loopback: the stages
//! compete for the host's cores once there are more of them than cores (the load is printed).

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark that cannot set up should stop"
)]

use drover_core::spec::{
    CheckpointPolicy, Distributed, DistributedMode, Parallelism, Pipeline, PipelineSchedule,
    TrainSpec,
};
use drover_engine::dist::local;
use drover_engine::{Reporter, Requests, TrainOptions};
use serde_json::json;
use std::path::Path;

/// Every metric the leader reported.
#[derive(Default)]
struct Last {
    values: Vec<(String, f64)>,
}

impl Last {
    /// The mean of a metric's reports after the first (the warm-up's).
    fn get(&self, name: &str) -> f64 {
        let reports: Vec<f64> = self
            .values
            .iter()
            .filter(|(k, _)| k == name)
            .skip(1)
            .map(|v| v.1)
            .collect();
        reports.iter().sum::<f64>() / reports.len() as f64
    }
}

impl Reporter for Last {
    fn metrics(&mut self, _step: u64, values: &[(&str, f64)]) {
        self.values
            .extend(values.iter().map(|(k, v)| ((*k).to_owned(), *v)));
    }
    fn checkpoint(&mut self, _step: u64, _path: &Path) {}
    fn info(&mut self, _line: &str) {}
}

/// Trains the bench's model for `steps` (after 2 of warm-up) split by `parallelism` among
/// `workers` workers of `threads` compute threads each; returns the leader's reports.
fn measure(parallelism: Parallelism, workers: u32, threads: usize, steps: u64) -> Last {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let spec: TrainSpec = serde_json::from_value(json!({
        "model": {"type": "charlm", "layers": 4, "heads": 4, "d_model": 128, "context": 64},
        "dataset": {"type": "text", "path": "data/text/drover-docs.md"},
        "optimizer": {"type": "adamw", "lr": 0.001},
        "batch_size": 32, "max_steps": steps + 2, "eval_every": 1_000_000, "seed": 1
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = TrainOptions {
        checkpoint: CheckpointPolicy {
            every_steps: 1_000_000,
            keep_last: 1,
            keep_best: 0,
        },
        // Every two steps; the first report (the warm-up) is left out.
        log_every: 2,
        stop_at: Some(steps + 2),
        distributed: Distributed {
            mode: DistributedMode::Allreduce,
            parallelism,
            ..Distributed::default()
        },
        ..TrainOptions::local(spec, dir.path(), repo)
    };
    let mut last = Last::default();
    local::run_job_on(
        &options,
        workers,
        0,
        1,
        None,
        &mut last,
        &Requests::default(),
        Some(threads),
    )
    .unwrap();
    last
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let steps: u64 = args
        .iter()
        .position(|a| a == "--steps")
        .and_then(|i| args.get(i + 1))
        .map_or(12, |s| s.parse().unwrap());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "pipeline bubble: charlm 4 layers, 4 heads, d_model 128, context 64, batch 32 sequences; {steps} steps after 2 of warm-up; one compute thread per stage; {cores} cores"
    );
    println!(
        "{:>6} {:>4} {:>8} {:>10} {:>9} {:>7} {:>6} {:>10}",
        "stages", "M", "schedule", "measured", "formula", "ratio", "held", "tokens/s"
    );
    for stages in [2u32, 4] {
        for micro in [1u32, 2, 4, 8, 16] {
            for schedule in [PipelineSchedule::Gpipe, PipelineSchedule::OneFOneB] {
                let parallelism = Parallelism {
                    pipeline: Some(Pipeline {
                        stages,
                        micro_batches: micro,
                        schedule,
                    }),
                    ..Parallelism::default()
                };
                let last = measure(parallelism, stages, 1, steps);
                let measured = last.get("pipeline_bubble");
                let formula = f64::from(stages - 1) / f64::from(micro + stages - 1);
                println!(
                    "{:>6} {:>4} {:>8} {:>10.3} {:>9.3} {:>7.2} {:>6} {:>10.0}",
                    stages,
                    micro,
                    schedule.as_str(),
                    measured,
                    formula,
                    measured / formula,
                    last.get("pipeline_micro_batches_held"),
                    last.get("samples_per_s"),
                );
            }
        }
    }
    // Tensor parallelism on the same cores: T workers of one thread each against one process of
    // T threads (the same arithmetic split the other way).
    println!();
    println!("tensor parallelism: the same model and batch, one replica");
    println!(
        "{:>8} {:>10} {:>8} {:>10}",
        "workers", "threads", "tensor", "tokens/s"
    );
    let mut alone = f64::NAN;
    for tensor in [1u32, 2, 4] {
        let (workers, threads) = if tensor == 1 { (1, 2) } else { (tensor, 1) };
        let parallelism = Parallelism {
            pipeline: None,
            tensor,
        };
        let tokens = measure(parallelism, workers, threads, steps).get("samples_per_s");
        if tensor == 1 {
            alone = tokens;
        }
        println!(
            "{workers:>8} {threads:>10} {tensor:>8} {tokens:>10.0}   ({:.2}x one process)",
            tokens / alone
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}
