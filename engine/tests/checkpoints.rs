//! Checkpoints do not trust their input: a checkpoint from another optimizer, a damaged step count,
//! buffers of the wrong length and a model that cannot read the data are clear errors, never a panic
//! or a silently wrong resume.

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

use drover_core::spec::{Compression, SyncMode, TrainSpec};
use drover_engine::checkpoint::{self, OPTIMIZER_FILE};
use drover_engine::dist::Layout;
use drover_engine::dist::ps::{Shard, ShardConfig};
use drover_engine::{Run, TrainOptions};
use serde_json::json;
use std::path::{Path, PathBuf};

fn spec(optimizer: serde_json::Value) -> TrainSpec {
    serde_json::from_value(json!({
        "model": {"type": "mlp", "hidden": [16]},
        "dataset": {"type": "digits"},
        "optimizer": optimizer,
        "batch_size": 32, "max_steps": 100, "seed": 3
    }))
    .unwrap()
}

fn adamw() -> serde_json::Value {
    json!({"type": "adamw", "lr": 0.001})
}

fn sgd() -> serde_json::Value {
    json!({"type": "sgd", "lr": 0.01, "momentum": 0.9})
}

fn run(optimizer: serde_json::Value, dir: &Path) -> Run {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    Run::new(TrainOptions::local(spec(optimizer), dir, repo)).unwrap()
}

/// A checkpoint after three steps of `optimizer`.
fn checkpoint(optimizer: serde_json::Value, dir: &Path) -> PathBuf {
    let mut run = run(optimizer, dir);
    for _ in 0..3 {
        let (_, _, _, grads) = run.gradients().unwrap();
        run.apply(grads).unwrap();
    }
    run.save(&Default::default()).unwrap()
}

/// Rewrites the checkpoint's optimizer state with `change` applied to its buffers.
fn tamper(path: &Path, change: impl FnOnce(&mut Vec<(String, Vec<f32>)>)) {
    let loaded = checkpoint::load(path).unwrap();
    let mut buffers: Vec<(String, Vec<f32>)> = loaded.optimizer.into_iter().collect();
    change(&mut buffers);
    checkpoint::write_flat(&path.join(OPTIMIZER_FILE), &buffers).unwrap();
}

/// Why restoring `path` into a fresh run of `optimizer` fails; the refusal must leave the run's
/// weights as they were.
fn restore_error(optimizer: serde_json::Value, path: &Path, dir: &Path) -> String {
    let mut fresh = run(optimizer, dir);
    let before = fresh.params.values.clone();
    let err = format!("{:#}", fresh.restore(path).unwrap_err());
    assert!(
        fresh.params.values == before,
        "refused ({err}), yet the weights changed"
    );
    err
}

#[test]
fn a_checkpoint_of_another_optimizer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = checkpoint(adamw(), dir.path());
    let err = restore_error(sgd(), &path, dir.path());
    assert!(
        err.contains("written by the adamw optimizer; this job uses sgd"),
        "{err}"
    );
    let path = checkpoint(sgd(), dir.path());
    let err = restore_error(adamw(), &path, dir.path());
    assert!(err.contains("written by the sgd optimizer"), "{err}");
}

#[test]
fn a_damaged_step_count_is_an_error_not_a_panic() {
    for step in [
        vec![],
        vec![3.0],
        vec![0.0, -1.0],
        vec![0.0, f32::NAN],
        vec![0.5, 3.0],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = checkpoint(adamw(), dir.path());
        tamper(&path, |buffers| {
            for (name, values) in buffers.iter_mut() {
                if name == "step" {
                    values.clone_from(&step);
                }
            }
        });
        let err = restore_error(adamw(), &path, dir.path());
        assert!(err.contains("step is not a step count"), "{step:?}: {err}");
    }
}

#[test]
fn optimizer_buffers_of_the_wrong_length_are_refused() {
    for (optimizer, prefix) in [(adamw(), "exp_avg_sq."), (sgd(), "momentum.")] {
        let dir = tempfile::tempdir().unwrap();
        let path = checkpoint(optimizer.clone(), dir.path());
        tamper(&path, |buffers| {
            let (_, values) = buffers
                .iter_mut()
                .find(|(name, _)| name.starts_with(prefix))
                .unwrap();
            values.truncate(values.len() / 2);
        });
        let err = restore_error(optimizer, &path, dir.path());
        assert!(
            err.contains(prefix) && err.contains("values, its parameter"),
            "{prefix}: {err}"
        );
    }
    // Some momentum buffers but not all: a damaged checkpoint, not one taken before the first step.
    let dir = tempfile::tempdir().unwrap();
    let path = checkpoint(sgd(), dir.path());
    tamper(&path, |buffers| buffers.truncate(1));
    let err = restore_error(sgd(), &path, dir.path());
    assert!(err.contains("momentum buffers for 1 of"), "{err}");
}

#[test]
fn a_ps_shard_refuses_optimizer_buffers_of_the_wrong_length() {
    // Longer than its parameter: the piece a shard takes of it would have the right length.
    let dir = tempfile::tempdir().unwrap();
    let path = checkpoint(adamw(), dir.path());
    tamper(&path, |buffers| {
        let (_, values) = buffers
            .iter_mut()
            .find(|(name, _)| name.starts_with("exp_avg_sq."))
            .unwrap();
        values.extend_from_slice(&[0.0; 3]);
    });
    let loaded = checkpoint::load(&path).unwrap();
    let template = run(adamw(), dir.path());
    let sizes: Vec<usize> = template.params.values.iter().map(Vec::len).collect();
    let layout = Layout::new(&template.params.names, &sizes, 2);
    let train = spec(adamw());
    for index in 0..2 {
        let config = ShardConfig {
            job: "job-1".to_owned(),
            generation: 1,
            index,
            workers: 1,
            sync: SyncMode::Bsp,
            staleness: 0,
            compression: Compression::None,
            optimizer: train.optimizer.clone(),
            lr_schedule: train.lr_schedule.clone(),
            total_steps: 100,
            schedule_steps: 100,
            start_step: 3,
        };
        let err = Shard::new(
            config,
            layout.clone(),
            template.params.names.clone(),
            &template.params.values,
            Some(&loaded),
        )
        .unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.contains("exp_avg_sq.") && err.contains("values, its parameter"),
            "shard {index}: {err}"
        );
    }
}

#[test]
fn a_cnn_on_flat_samples_that_are_not_square_fails_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("label");
    for i in 0..50 {
        csv.push_str(&format!(",f{i}"));
    }
    csv.push('\n');
    for row in 0..40 {
        csv.push_str(&(row % 2).to_string());
        for i in 0..50 {
            csv.push_str(&format!(",{}", (row * i) % 7));
        }
        csv.push('\n');
    }
    std::fs::write(dir.path().join("flat.csv"), csv).unwrap();
    let spec: TrainSpec = serde_json::from_value(json!({
        "model": {"type": "cnn", "channels": [4], "hidden": [8]},
        "dataset": {"type": "csv", "path": "flat.csv"},
        "optimizer": sgd(), "batch_size": 8, "max_steps": 5
    }))
    .unwrap();
    let err = Run::new(TrainOptions::local(spec, dir.path(), dir.path()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("50 features, not a square number"), "{err}");
}
