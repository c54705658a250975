//! The engine end to end in-process: real models learn, and a resumed run is bit-identical to an
//! uninterrupted one.

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

use drover_core::spec::{CheckpointPolicy, DatasetSpec, ModelSpec, OptimizerSpec, TrainSpec};
use drover_engine::{Reporter, Requests, Run, TrainOptions, train};
use std::path::Path;

#[derive(Default)]
struct Collect {
    metrics: Vec<(u64, String, f64)>,
    checkpoints: Vec<(u64, std::path::PathBuf)>,
}

impl Reporter for Collect {
    fn metrics(&mut self, step: u64, values: &[(&str, f64)]) {
        for (k, v) in values {
            self.metrics.push((step, (*k).to_owned(), *v));
        }
    }
    fn checkpoint(&mut self, step: u64, path: &Path) {
        self.checkpoints.push((step, path.to_path_buf()));
    }
    fn info(&mut self, _line: &str) {}
}

fn spec(
    model: ModelSpec,
    dataset: DatasetSpec,
    optimizer: OptimizerSpec,
    batch: u32,
    steps: u64,
) -> TrainSpec {
    serde_json::from_value(serde_json::json!({
        "model": model, "dataset": dataset, "optimizer": optimizer,
        "lr_schedule": {"warmup_steps": 10, "decay": "cosine"},
        "batch_size": batch, "max_steps": steps, "eval_every": steps, "seed": 7
    }))
    .unwrap()
}

fn options(spec: TrainSpec, dir: &Path, every: u64) -> TrainOptions {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    TrainOptions {
        checkpoint: CheckpointPolicy {
            every_steps: every,
            keep_last: 2,
            keep_best: 1,
        },
        ..TrainOptions::local(spec, dir, repo)
    }
}

#[test]
fn the_mlp_learns_the_shipped_digits() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(
        ModelSpec::Mlp {
            hidden: vec![128],
            dropout: 0.0,
        },
        DatasetSpec::Digits {},
        OptimizerSpec::Adamw {
            lr: 0.003,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        },
        64,
        600,
    );
    let started = std::time::Instant::now();
    let mut collect = Collect::default();
    let outcome = train(
        options(spec, dir.path(), 200),
        &mut collect,
        &Requests::default(),
    )
    .unwrap();
    let accuracy = outcome.metrics["val_accuracy"];
    eprintln!("digits MLP: {accuracy:.4} in {:?}", started.elapsed());
    assert!(accuracy >= 0.95, "test accuracy {accuracy}");
    // Retention: the last two checkpoints (400, 600) and the best by val_accuracy (600) stay.
    let mut kept: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(kept, ["step-00000400", "step-00000600"]);
}

fn steps(run: &mut Run, until: u64) {
    while run.step < until {
        let (_, _, _, grads) = run.gradients().unwrap();
        run.apply(grads).unwrap();
    }
}

/// Runs `total` steps straight, and again interrupted at `k` (checkpoint, a fresh run restored from it);
/// the weights must be bit-identical.
fn assert_exact_resume(spec: TrainSpec, k: u64, total: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut straight = Run::new(options(spec.clone(), dir.path(), 1000)).unwrap();
    steps(&mut straight, total);

    let mut first = Run::new(options(spec.clone(), dir.path(), 1000)).unwrap();
    steps(&mut first, k);
    let path = first.save(&Default::default()).unwrap();
    drop(first);
    let mut resumed = Run::new(options(spec, dir.path(), 1000)).unwrap();
    resumed.restore(&path).unwrap();
    assert_eq!(resumed.step, k);
    steps(&mut resumed, total);
    assert_eq!(resumed.params.names, straight.params.names);
    for (i, name) in straight.params.names.iter().enumerate() {
        assert!(
            straight.params.values[i]
                .iter()
                .zip(&resumed.params.values[i])
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name} differs after resuming at step {k}"
        );
    }
    assert_eq!(resumed.optimizer, straight.optimizer);
}

#[test]
fn resuming_an_mlp_with_dropout_and_adamw_is_exact() {
    let spec = spec(
        ModelSpec::Mlp {
            hidden: vec![64, 32],
            dropout: 0.2,
        },
        DatasetSpec::Digits {},
        OptimizerSpec::Adamw {
            lr: 0.003,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        },
        100,
        60,
    );
    // 1500 samples, 100 a batch: the interruption at 17 is mid-epoch and the run crosses epochs.
    assert_exact_resume(spec, 17, 40);
}

#[test]
fn resuming_a_cnn_with_nesterov_sgd_is_exact() {
    let spec = spec(
        ModelSpec::Cnn {
            channels: vec![6, 16],
            hidden: vec![32],
            dropout: 0.1,
        },
        DatasetSpec::Digits {},
        OptimizerSpec::Sgd {
            lr: 0.05,
            momentum: 0.9,
            nesterov: true,
            weight_decay: 1e-4,
        },
        32,
        30,
    );
    assert_exact_resume(spec, 11, 25);
}

#[test]
fn resuming_the_char_lm_is_exact_and_it_learns() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..400)
        .map(|i| ["the cat sat on the mat. ", "a dog ran far. "][i % 2])
        .collect();
    std::fs::write(dir.path().join("tiny.txt"), text).unwrap();
    let mut lm = spec(
        ModelSpec::Charlm {
            layers: 2,
            heads: 2,
            d_model: 32,
            context: 32,
            dropout: 0.1,
        },
        DatasetSpec::Text {
            path: dir.path().join("tiny.txt").display().to_string(),
        },
        OptimizerSpec::Adamw {
            lr: 0.003,
            weight_decay: 0.0,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
        },
        16,
        150,
    );
    lm.grad_clip_norm = Some(1.0);
    assert_exact_resume(lm.clone(), 9, 20);
    let mut collect = Collect::default();
    let outcome = train(
        options(lm, dir.path(), 1000),
        &mut collect,
        &Requests::default(),
    )
    .unwrap();
    let first_loss = collect.metrics.iter().find(|m| m.1 == "loss").unwrap().2;
    let val_accuracy = outcome.metrics["val_accuracy"];
    assert!(
        first_loss > 2.0 && outcome.metrics["loss"] < 1.0,
        "loss {first_loss} → {}",
        outcome.metrics["loss"]
    );
    assert!(val_accuracy > 0.6, "next-character accuracy {val_accuracy}");
}
