//! Model parallelism: the transformer split into pipeline stages (micro-batches streaming through
//! them in either schedule), its blocks split among tensor-parallel workers, or both, trains exactly
//! as one process does on the same global batch; and the leader's checkpoint holds the whole model.

use super::*;
use drover_core::spec::{Parallelism, Pipeline, PipelineSchedule};

/// A small transformer on the shipped text, without dropout (so every shape draws the same
/// arithmetic), with clipping on so the global norm must be the whole model's.
fn charlm(steps: u64) -> TrainSpec {
    serde_json::from_value(serde_json::json!({
        "model": {"type": "charlm", "layers": 4, "heads": 4, "d_model": 32, "context": 16},
        "dataset": {"type": "text", "path": "data/text/drover-docs.md"},
        "optimizer": {"type": "adamw", "lr": 0.003, "weight_decay": 0.01},
        "lr_schedule": {"warmup_steps": 10, "decay": "cosine"},
        "grad_clip_norm": 0.5,
        "batch_size": 16, "max_steps": steps, "eval_every": 25, "seed": 1
    }))
    .unwrap()
}

fn pipeline(stages: u32, micro_batches: u32, schedule: PipelineSchedule) -> Distributed {
    parallel(stages, 1, micro_batches, schedule)
}

/// `stages` pipeline stages (none when 1) of `tensor` workers each.
fn parallel(
    stages: u32,
    tensor: u32,
    micro_batches: u32,
    schedule: PipelineSchedule,
) -> Distributed {
    Distributed {
        mode: DistributedMode::Allreduce,
        parallelism: Parallelism {
            pipeline: (stages > 1).then_some(Pipeline {
                stages,
                micro_batches,
                schedule,
            }),
            tensor,
        },
        ..Distributed::default()
    }
}

/// Every step's loss, from a run reporting each step.
fn losses(collect: &Collect) -> Vec<f64> {
    collect
        .metrics
        .iter()
        .filter(|(_, k, _)| k == "loss")
        .map(|m| m.2)
        .collect()
}

fn every_step(
    spec: &TrainSpec,
    dir: &Path,
    workers: u32,
    distributed: &Distributed,
) -> TrainOptions {
    TrainOptions {
        log_every: 1,
        ..options(spec, dir, workers, 0, distributed)
    }
}

#[test]
fn pipelines_and_tensor_splits_train_as_one_process_does() {
    let spec = charlm(50);
    let single_dir = tempfile::tempdir().unwrap();
    let mut single = Collect::default();
    let alone = train(
        every_step(&spec, single_dir.path(), 1, &Distributed::default()),
        &mut single,
        &Requests::default(),
    )
    .unwrap();
    let reference = losses(&single);
    assert_eq!(reference.len(), 50);
    let expected = checkpoint::load(alone.last_checkpoint.as_ref().unwrap()).unwrap();
    // Workers, stages, tensor degree, micro-batches (4 layers of 4 heads); the rest are replicas.
    let shapes = [
        (2, 2, 1, 4),
        (4, 4, 1, 3),
        (4, 2, 1, 2),
        (2, 1, 2, 1),
        (4, 1, 4, 1),
        (4, 1, 2, 1),
        (4, 2, 2, 3),
    ];
    for (workers, stages, tensor, micro) in shapes {
        let schedules = if stages > 1 {
            &[PipelineSchedule::Gpipe, PipelineSchedule::OneFOneB][..]
        } else {
            &[PipelineSchedule::OneFOneB][..]
        };
        for &schedule in schedules {
            let dir = tempfile::tempdir().unwrap();
            let distributed = parallel(stages, tensor, micro, schedule);
            let mut collect = Collect::default();
            let outcome = local::run_job(
                &every_step(&spec, dir.path(), workers, &distributed),
                workers,
                0,
                1,
                None,
                &mut collect,
                &Requests::default(),
            )
            .unwrap();
            assert_eq!(outcome.step, 50);
            let got = losses(&collect);
            assert_eq!(
                got.len(),
                50,
                "{workers} workers, {stages} stages, tensor {tensor}"
            );
            for (step, (a, b)) in reference.iter().zip(&got).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * a.abs().max(1.0),
                    "{workers} workers in {stages} stages × tensor {tensor}, {micro} micro-batches, {schedule:?}: step {} loss {b} against {a} alone",
                    step + 1
                );
            }
            // The leader gathered every stage into its checkpoint, optimizer state too.
            let saved = checkpoint::load(outcome.last_checkpoint.as_ref().unwrap()).unwrap();
            assert_close(&expected.params, &saved.params, 1e-4);
            assert_close(&expected.optimizer, &saved.optimizer, 1e-3);
            for metric in ["val_loss", "pipeline_bubble"] {
                assert!(collect.last(metric).is_finite(), "{metric} reported");
            }
        }
    }
}

/// The workers' shares of a batch of sequences weigh their gradients by sequences (a share once
/// counted tokens against a batch of sequences, and the transformer's all-reduce trained `context`
/// times too fast).
#[test]
fn a_data_parallel_transformer_trains_as_one_process_does() {
    // Plain SGD without clipping: AdamW's update and a clipped gradient would not show a scale.
    let mut spec = charlm(20);
    spec.optimizer = serde_json::from_value(serde_json::json!({"type": "sgd", "lr": 0.5})).unwrap();
    spec.grad_clip_norm = None;
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_, single) = local(&spec, one.path());
    let allreduce = Distributed {
        mode: DistributedMode::Allreduce,
        collective: Collective::Ring,
        ..Distributed::default()
    };
    let (_, outcome) = run_job(&spec, two.path(), 2, 0, &allreduce);
    let a = checkpoint::load(single.last_checkpoint.as_ref().unwrap()).unwrap();
    let b = checkpoint::load(outcome.last_checkpoint.as_ref().unwrap()).unwrap();
    assert_close(&a.params, &b.params, 1e-4);
}

/// Asks the job to stop once the leader reports step `at`.
struct StopAt<'a> {
    at: u64,
    requests: &'a Requests,
}

impl Reporter for StopAt<'_> {
    fn metrics(&mut self, step: u64, _values: &[(&str, f64)]) {
        if step >= self.at {
            self.requests
                .stop
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    fn checkpoint(&mut self, _step: u64, _path: &Path) {}
    fn info(&mut self, _line: &str) {}
}

#[test]
fn a_pipeline_stopped_between_gathers_checkpoints_the_whole_model_at_the_stop() {
    let spec = charlm(50);
    let dir = tempfile::tempdir().unwrap();
    let requests = Requests::default();
    let mut stopper = StopAt {
        at: 7,
        requests: &requests,
    };
    let distributed = pipeline(2, 2, PipelineSchedule::OneFOneB);
    let outcome = local::run_job(
        &every_step(&spec, dir.path(), 4, &distributed),
        4,
        0,
        1,
        None,
        &mut stopper,
        &requests,
    )
    .unwrap();
    assert!(outcome.interrupted, "{outcome:?}");
    let stopped = outcome.step;
    assert!((8..25).contains(&stopped), "stopped at {stopped}");
    // One process stopped at the same step (the same schedule: `stop_at` keeps `max_steps`).
    let alone_dir = tempfile::tempdir().unwrap();
    let alone = train(
        TrainOptions {
            stop_at: Some(stopped),
            ..every_step(&spec, alone_dir.path(), 1, &Distributed::default())
        },
        &mut Collect::default(),
        &Requests::default(),
    )
    .unwrap();
    let a = checkpoint::load(alone.last_checkpoint.as_ref().unwrap()).unwrap();
    let b = checkpoint::load(outcome.last_checkpoint.as_ref().unwrap()).unwrap();
    assert_eq!((a.manifest.step, b.manifest.step), (stopped, stopped));
    assert_close(&a.params, &b.params, 1e-4);
    assert_close(&a.optimizer, &b.optimizer, 1e-3);
}

/// A model-parallel job resized between shapes (as `drover resize` or a restart at another size
/// does): stopped as one replica of a 2-stage pipeline, resumed from the leader's checkpoint as two
/// replicas of 2 stages of 2-worker tensor groups, it ends where one process training throughout
/// ends.
#[test]
fn a_model_parallel_job_resumes_at_another_shape_exactly() {
    let spec = charlm(30);
    let alone_dir = tempfile::tempdir().unwrap();
    let alone = train(
        every_step(&spec, alone_dir.path(), 1, &Distributed::default()),
        &mut Collect::default(),
        &Requests::default(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let requests = Requests::default();
    let mut stopper = StopAt {
        at: 9,
        requests: &requests,
    };
    let first = local::run_job(
        &every_step(
            &spec,
            dir.path(),
            2,
            &pipeline(2, 2, PipelineSchedule::Gpipe),
        ),
        2,
        0,
        1,
        None,
        &mut stopper,
        &requests,
    )
    .unwrap();
    assert!(first.interrupted && first.step < 30, "{first:?}");
    let resumed_from = first.last_checkpoint.unwrap();
    let bigger = parallel(2, 2, 3, PipelineSchedule::OneFOneB);
    let (_, second) = run_job_from(&spec, dir.path(), 8, 0, &bigger, Some(&resumed_from));
    assert_eq!(second.step, 30);
    let a = checkpoint::load(alone.last_checkpoint.as_ref().unwrap()).unwrap();
    let b = checkpoint::load(second.last_checkpoint.as_ref().unwrap()).unwrap();
    assert_close(&a.params, &b.params, 1e-4);
    assert_close(&a.optimizer, &b.optimizer, 1e-3);
}
