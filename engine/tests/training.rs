//! The engine end to end in-process: real models learn, and a resumed run is bit-identical to an
//! uninterrupted one.

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

use candle_core::Device;
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

#[test]
fn a_run_whose_loss_diverges_fails_and_saves_nothing_after() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(
        ModelSpec::Mlp {
            hidden: vec![32],
            dropout: 0.0,
        },
        DatasetSpec::Digits {},
        OptimizerSpec::Sgd {
            lr: 1e30,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        },
        32,
        200,
    );
    let mut collect = Collect::default();
    let err = train(
        options(spec, dir.path(), 200),
        &mut collect,
        &Requests::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("training diverged: the loss became"), "{err}");
    assert!(collect.checkpoints.is_empty(), "{:?}", collect.checkpoints);
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

/// `drover train --steps k` (a run stopped early) leaves the learning-rate schedule alone: resuming
/// from its last checkpoint continues the full run bit for bit.
#[test]
fn a_run_stopped_early_resumes_into_the_full_run_exactly() {
    let spec = spec(
        ModelSpec::Mlp {
            hidden: vec![32],
            dropout: 0.1,
        },
        DatasetSpec::Digits {},
        OptimizerSpec::Sgd {
            lr: 0.1,
            momentum: 0.9,
            nesterov: false,
            weight_decay: 0.0,
        },
        50,
        40,
    );
    let dir = tempfile::tempdir().unwrap();
    let mut straight = Run::new(options(spec.clone(), dir.path(), 1000)).unwrap();
    steps(&mut straight, 40);
    let early = TrainOptions {
        stop_at: Some(17),
        ..options(spec.clone(), &dir.path().join("early"), 1000)
    };
    let outcome = train(early, &mut Collect::default(), &Requests::default()).unwrap();
    assert_eq!(outcome.step, 17);
    let mut resumed = Run::new(options(spec, dir.path(), 1000)).unwrap();
    resumed
        .restore(&outcome.last_checkpoint.expect("a checkpoint at the stop"))
        .unwrap();
    steps(&mut resumed, 40);
    for (i, name) in straight.params.names.iter().enumerate() {
        assert!(
            straight.params.values[i]
                .iter()
                .zip(&resumed.params.values[i])
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name} differs after resuming a run stopped at step 17"
        );
    }
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

/// The parameters a run computes with (on its device).
fn device_values(run: &Run) -> Vec<Vec<f32>> {
    run.params
        .vars()
        .iter()
        .map(|v| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
        .collect()
}

/// Trains `spec` for `total` steps on the host path and on the device path (the one GPU runs take;
/// on the CPU device unless `device` names a GPU): the same data order, loss, accuracy and, up to
/// float rounding (`tolerance`), weights.
fn assert_device_path_matches_host(spec: TrainSpec, total: u64, device: &Device, tolerance: f32) {
    let dir = tempfile::tempdir().unwrap();
    let mut host = Run::new(options(spec.clone(), dir.path(), 1000)).unwrap();
    let (mut host_loss, mut host_correct, mut samples) = (0.0, 0, 0);
    while host.step < total {
        let (loss, correct, n, grads) = host.gradients().unwrap();
        (host_loss, host_correct, samples) =
            (host_loss + loss, host_correct + correct, samples + n);
        host.apply(grads).unwrap();
    }
    let mut on_device = options(spec, dir.path(), 1000);
    on_device.device = device.clone();
    let mut device = Run::new(on_device).unwrap();
    device.keep_on_device().unwrap();
    assert!(device.is_resident());
    while device.step < total {
        device.step_on_device().unwrap();
    }
    let (device_loss, device_correct) = device.take_totals().unwrap().unwrap();
    assert!(
        (host_loss - device_loss).abs() < 1e-3 * host_loss.abs().max(1.0),
        "loss summed over {total} steps: host {host_loss}, device {device_loss}"
    );
    // Rounding may flip a near tie between two classes, no more.
    assert!(
        host_correct.abs_diff(device_correct) <= samples / 100,
        "correct predictions over {total} steps: host {host_correct}, device {device_correct}"
    );
    assert_eq!(device.take_totals().unwrap(), Some((0.0, 0)), "taken once");
    for ((name, host), device) in host
        .params
        .names
        .iter()
        .zip(&host.params.values)
        .zip(device_values(&device))
    {
        let worst = host
            .iter()
            .zip(&device)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst < tolerance,
            "{name}: host and device differ by {worst}"
        );
    }
}

/// The device path on `device` for AdamW with clipping (MLP), Nesterov SGD with weight decay and plain
/// SGD (CNN).
fn assert_device_paths(device: &Device, tolerance: f32) {
    let adamw = OptimizerSpec::Adamw {
        lr: 0.003,
        weight_decay: 0.01,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
    };
    let mut clipped = spec(
        ModelSpec::Mlp {
            hidden: vec![64],
            dropout: 0.0,
        },
        DatasetSpec::Digits {},
        adamw,
        64,
        30,
    );
    clipped.grad_clip_norm = Some(0.5);
    assert_device_path_matches_host(clipped, 30, device, tolerance);
    for optimizer in [
        OptimizerSpec::Sgd {
            lr: 0.05,
            momentum: 0.9,
            nesterov: true,
            weight_decay: 1e-4,
        },
        OptimizerSpec::Sgd {
            lr: 0.05,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 1e-3,
        },
    ] {
        // LeNet's geometry on 28×28 images.
        let cnn = spec(
            ModelSpec::Cnn {
                channels: vec![4, 8],
                hidden: vec![16],
                dropout: 0.0,
            },
            DatasetSpec::Synthetic {
                samples: 512,
                features: 784,
                classes: 10,
            },
            optimizer,
            32,
            20,
        );
        assert_device_path_matches_host(cnn, 20, device, tolerance);
    }
}

#[test]
fn the_device_path_trains_like_the_host_path() {
    assert_device_paths(&Device::Cpu, 2e-3);
}

/// The CUDA kernels (one launch per parameter's update) against the host path; skipped where no GPU
/// can be opened.
#[cfg(feature = "cuda")]
#[test]
fn on_a_gpu_the_fused_kernels_train_like_the_host_path() {
    match drover_engine::device::open("cuda") {
        // The weights drift apart faster than on the CPU device: convolutions and bias gradients
        // sum thousands of terms in another order on the GPU, and momentum carries the difference
        // on. The kernels themselves are checked exactly in fused.rs.
        Ok(gpu) => assert_device_paths(&gpu, 3e-2),
        Err(err) => eprintln!("skipped: {err:#}"),
    }
}

#[test]
fn a_run_on_its_device_checkpoints_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tiny.txt"),
        "the cat sat on the mat. a dog ran far. ".repeat(100),
    )
    .unwrap();
    let lm = spec(
        ModelSpec::Charlm {
            layers: 1,
            heads: 2,
            d_model: 16,
            context: 16,
            dropout: 0.1,
        },
        DatasetSpec::Text {
            path: dir.path().join("tiny.txt").display().to_string(),
        },
        OptimizerSpec::Adamw {
            lr: 0.003,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
        },
        8,
        30,
    );
    let on_device = |spec: &TrainSpec| {
        let mut run = Run::new(options(spec.clone(), dir.path(), 1000)).unwrap();
        run.keep_on_device().unwrap();
        run
    };
    let mut straight = on_device(&lm);
    while straight.step < 20 {
        straight.step_on_device().unwrap();
    }
    let mut first = on_device(&lm);
    while first.step < 9 {
        first.step_on_device().unwrap();
    }
    let path = first.save(&Default::default()).unwrap();
    drop(first);
    let mut resumed = on_device(&lm);
    resumed.restore(&path).unwrap();
    assert_eq!(resumed.step, 9);
    while resumed.step < 20 {
        resumed.step_on_device().unwrap();
    }
    for ((name, a), b) in straight
        .params
        .names
        .iter()
        .zip(device_values(&straight))
        .zip(device_values(&resumed))
    {
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{name} differs after resuming on the device"
        );
    }
}
