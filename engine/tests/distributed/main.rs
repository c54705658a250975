//! Distributed training in-process over real loopback sockets: every worker and PS shard is a thread
//! running the same code a task process runs (`train`), talking TCP.

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

use drover_core::spec::{
    CheckpointPolicy, Collective, Compression, Distributed, DistributedMode, Launcher, SyncMode,
    TrainSpec,
};
use drover_engine::checkpoint;
use drover_engine::dist::ps::{Shard, ShardConfig};
use drover_engine::dist::worker::Exchange;
use drover_engine::dist::{Cluster, Layout, Role, local};
use drover_engine::{Outcome, Reporter, Requests, Run, TrainOptions, train};
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod compression;
mod local_sgd;
mod pipeline;

#[derive(Default)]
struct Collect {
    metrics: Vec<(u64, String, f64)>,
}

impl Collect {
    fn at(&self, step: u64, name: &str) -> f64 {
        self.metrics
            .iter()
            .find(|(s, k, _)| *s == step && k == name)
            .map(|m| m.2)
            .unwrap_or(f64::NAN)
    }

    fn last(&self, name: &str) -> f64 {
        self.metrics
            .iter()
            .rev()
            .find(|(_, k, _)| k == name)
            .map(|m| m.2)
            .unwrap_or(f64::NAN)
    }
}

impl Reporter for Collect {
    fn metrics(&mut self, step: u64, values: &[(&str, f64)]) {
        for (k, v) in values {
            self.metrics.push((step, (*k).to_owned(), *v));
        }
    }
    fn checkpoint(&mut self, _step: u64, _path: &Path) {}
    fn info(&mut self, _line: &str) {}
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The example MLP on the shipped digits (no dropout, so runs of different shapes can be compared).
fn digits_mlp(optimizer: serde_json::Value, steps: u64, eval_every: u64) -> TrainSpec {
    serde_json::from_value(serde_json::json!({
        "model": {"type": "mlp", "hidden": [256, 128]},
        "dataset": {"type": "digits"},
        "optimizer": optimizer,
        "lr_schedule": {"warmup_steps": 100, "decay": "cosine"},
        "batch_size": 256, "max_steps": steps, "eval_every": eval_every, "seed": 1
    }))
    .unwrap()
}

fn options(
    spec: &TrainSpec,
    dir: &Path,
    workers: u32,
    ps: u32,
    distributed: &Distributed,
) -> TrainOptions {
    TrainOptions {
        checkpoint: CheckpointPolicy {
            every_steps: 1_000_000,
            keep_last: 2,
            keep_best: 0,
        },
        workers,
        ps,
        log_every: 100,
        distributed: distributed.clone(),
        ..TrainOptions::local(spec.clone(), dir, &repo())
    }
}

/// Runs a job of `workers` workers and `ps` shards (threads); returns the leader's metrics and
/// outcome.
fn run_job(
    spec: &TrainSpec,
    dir: &Path,
    workers: u32,
    ps: u32,
    distributed: &Distributed,
) -> (Collect, Outcome) {
    run_job_from(spec, dir, workers, ps, distributed, None)
}

/// `run_job`, every task resuming from `resume` when given.
fn run_job_from(
    spec: &TrainSpec,
    dir: &Path,
    workers: u32,
    ps: u32,
    distributed: &Distributed,
    resume: Option<&Path>,
) -> (Collect, Outcome) {
    let mut collect = Collect::default();
    let options = options(spec, dir, workers, ps, distributed);
    let outcome = local::run_job(
        &options,
        workers,
        ps,
        1,
        resume,
        &mut collect,
        &Requests::default(),
    )
    .unwrap();
    (collect, outcome)
}

fn local(spec: &TrainSpec, dir: &Path) -> (Collect, Outcome) {
    let mut collect = Collect::default();
    let outcome = train(
        options(spec, dir, 1, 0, &Distributed::default()),
        &mut collect,
        &Requests::default(),
    )
    .unwrap();
    (collect, outcome)
}

fn assert_close(a: &BTreeMap<String, Vec<f32>>, b: &BTreeMap<String, Vec<f32>>, rel: f32) {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, x) in a {
        let y = &b[name];
        let scale = x.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-3);
        for (i, (p, q)) in x.iter().zip(y).enumerate() {
            assert!(
                (p - q).abs() <= rel * scale,
                "{name}[{i}]: {p} vs {q} (relative to {scale})"
            );
        }
    }
}

#[test]
fn bsp_with_three_workers_and_two_shards_matches_one_worker() {
    let spec = digits_mlp(
        serde_json::json!({"type": "sgd", "lr": 0.1, "momentum": 0.9}),
        20,
        20,
    );
    let (one, three) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_, single) = local(&spec, one.path());
    let bsp = Distributed {
        mode: DistributedMode::Ps,
        sync: SyncMode::Bsp,
        ..Distributed::default()
    };
    let (_, outcome) = run_job(&spec, three.path(), 3, 2, &bsp);
    assert_eq!((single.step, outcome.step), (20, 20));
    let a = checkpoint::load(single.last_checkpoint.as_ref().unwrap()).unwrap();
    let b = checkpoint::load(outcome.last_checkpoint.as_ref().unwrap()).unwrap();
    // The sharded checkpoint records which slices each shard held and assembles whole.
    assert_eq!(b.manifest.shards.len(), 2);
    assert!(b.manifest.shards.iter().all(|s| !s.slices.is_empty()));
    assert_close(&a.params, &b.params, 1e-5);
    assert_close(&a.optimizer, &b.optimizer, 1e-5);
}

/// Every all-reduce algorithm, and the automatic choice, trains three workers to one worker's
/// parameters (each a job of its own: the workers join, measure their links where they choose, and
/// sum every step's gradient).
#[test]
fn allreduce_with_three_workers_matches_one_worker_by_every_algorithm() {
    let spec = digits_mlp(
        serde_json::json!({"type": "adamw", "lr": 0.001, "weight_decay": 0.01}),
        20,
        20,
    );
    let one = tempfile::tempdir().unwrap();
    let (_, single) = local(&spec, one.path());
    let a = checkpoint::load(single.last_checkpoint.as_ref().unwrap()).unwrap();
    for collective in [
        Collective::Auto,
        Collective::Ring,
        Collective::Tree,
        Collective::RecursiveDoubling,
        Collective::Rabenseifner,
        Collective::Hierarchical,
    ] {
        let three = tempfile::tempdir().unwrap();
        let allreduce = Distributed {
            mode: DistributedMode::Allreduce,
            collective,
            ..Distributed::default()
        };
        let (_, outcome) = run_job(&spec, three.path(), 3, 0, &allreduce);
        let b = checkpoint::load(outcome.last_checkpoint.as_ref().unwrap()).unwrap();
        assert_eq!(outcome.step, 20, "{}", collective.as_str());
        assert_close(&a.params, &b.params, 1e-5);
    }
}

/// A resize is a restart from a checkpoint at another shape: the checkpoint written by 2 shards for 3
/// workers is re-cut for 1 and for 3 shards without changing a value (parameters and optimizer
/// state), and 10 BSP steps at (1 PS, 2 workers) from it match one worker from it.
#[test]
fn resizing_reshards_exactly_and_trains_on_at_the_new_shape() {
    let spec = digits_mlp(
        serde_json::json!({"type": "adamw", "lr": 0.001, "weight_decay": 0.01}),
        30,
        30,
    );
    let bsp = Distributed::default();
    let before = tempfile::tempdir().unwrap();
    let mut first = spec.clone();
    first.max_steps = Some(20);
    let (_, outcome) = run_job(&first, before.path(), 3, 2, &bsp);
    let checkpoint = outcome.last_checkpoint.unwrap();
    let loaded = checkpoint::load(&checkpoint).unwrap();
    assert_eq!(
        (
            loaded.manifest.step,
            loaded.manifest.ps,
            loaded.manifest.workers
        ),
        (20, 2, 3)
    );

    // Re-cut for other numbers of shards: every piece holds exactly the checkpoint's values.
    let template = Run::new(options(&spec, before.path(), 1, 0, &bsp)).unwrap();
    let sizes: Vec<usize> = template.params.values.iter().map(Vec::len).collect();
    for shards in [1u32, 3] {
        let layout = Layout::new(&template.params.names, &sizes, shards);
        for index in 0..shards as usize {
            let shard = Shard::new(
                ShardConfig {
                    job: "job-1".to_owned(),
                    generation: 2,
                    index,
                    workers: 2,
                    sync: SyncMode::Bsp,
                    staleness: 4,
                    compression: Compression::None,
                    optimizer: spec.optimizer.clone(),
                    lr_schedule: spec.lr_schedule.clone(),
                    total_steps: 30,
                    schedule_steps: 30,
                    start_step: 20,
                },
                layout.clone(),
                template.params.names.clone(),
                &template.params.values,
                Some(&loaded),
            )
            .unwrap();
            for (slice, values) in shard.slices().iter().zip(shard.values()) {
                let name = &template.params.names[slice.tensor];
                assert_eq!(values, loaded.params[name][slice.range()], "{name}");
            }
            for (key, values) in shard.optimizer_state() {
                let Some((base, _)) = key.rsplit_once('@') else {
                    assert_eq!(values, loaded.optimizer[&key], "{key}");
                    continue;
                };
                let slice = shard
                    .slices()
                    .iter()
                    .find(|s| {
                        key.ends_with(&format!(
                            ".{}@{}",
                            template.params.names[s.tensor], s.offset
                        ))
                    })
                    .unwrap();
                assert_eq!(values, loaded.optimizer[base][slice.range()], "{key}");
            }
        }
    }

    // 10 more steps at (1 PS, 2 workers) against one worker, both from that checkpoint.
    let (one, resized) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut reference = options(&spec, one.path(), 1, 0, &bsp);
    reference.resume_from = Some(checkpoint.clone());
    let single = train(reference, &mut Collect::default(), &Requests::default()).unwrap();
    let (_, after) = run_job_from(&spec, resized.path(), 2, 1, &bsp, Some(&checkpoint));
    assert_eq!((single.step, after.step), (30, 30));
    let a = checkpoint::load(single.last_checkpoint.as_ref().unwrap()).unwrap();
    let b = checkpoint::load(after.last_checkpoint.as_ref().unwrap()).unwrap();
    assert_eq!((b.manifest.ps, b.manifest.workers), (1, 2));
    assert_close(&a.params, &b.params, 1e-5);
    assert_close(&a.optimizer, &b.optimizer, 1e-5);
}

/// SSP with one worker slowed down: the fast ones wait rather than run more than `s` steps ahead
/// (checked on every grant the shards recorded), and training still converges.
#[test]
fn ssp_bounds_staleness_with_a_slow_worker_and_converges() {
    let staleness = 3u32;
    let steps = 300u64;
    let spec = digits_mlp(
        serde_json::json!({"type": "adamw", "lr": 0.002, "weight_decay": 0.01}),
        steps,
        steps,
    );
    let ssp = Distributed {
        mode: DistributedMode::Ps,
        sync: SyncMode::Ssp,
        staleness,
        compression: Compression::None,
        collective: Default::default(),
        local_sgd: None,
        parallelism: Default::default(),
        launcher: Launcher::None,
    };
    let dir = tempfile::tempdir().unwrap();
    let (workers, shards) = (3u32, 2u32);
    let peers = local::free_addresses((workers + shards) as usize).unwrap();
    let ps_addresses = peers[workers as usize..].to_vec();
    let template = Run::new(options(&spec, dir.path(), workers, shards, &ssp)).unwrap();
    let sizes: Vec<usize> = template.params.values.iter().map(Vec::len).collect();
    let layout = Layout::new(&template.params.names, &sizes, shards);
    let (summaries, accuracy) = std::thread::scope(|scope| {
        let servers: Vec<_> = (0..shards as usize)
            .map(|index| {
                let shard = Shard::new(
                    ShardConfig {
                        job: "job-1".to_owned(),
                        generation: 1,
                        index,
                        workers,
                        sync: SyncMode::Ssp,
                        staleness,
                        compression: Compression::None,
                        optimizer: spec.optimizer.clone(),
                        lr_schedule: spec.lr_schedule.clone(),
                        total_steps: steps,
                        schedule_steps: steps,
                        start_step: 0,
                    },
                    layout.clone(),
                    template.params.names.clone(),
                    &template.params.values,
                    None,
                )
                .unwrap();
                let listener = TcpListener::bind(&ps_addresses[index]).unwrap();
                scope.spawn(move || shard.serve(&listener, None).unwrap())
            })
            .collect();
        let workers: Vec<_> = (0..workers)
            .map(|rank| {
                let mut options = options(&spec, dir.path(), workers, shards, &ssp);
                options.rank = rank;
                options.cluster = Some(Cluster {
                    job: "job-1".to_owned(),
                    generation: 1,
                    role: Role::Worker,
                    peers: peers.clone(),
                    listen: peers[rank as usize].clone(),
                });
                scope.spawn(move || {
                    let mut run = Run::new(options).unwrap();
                    let mut exchange = Exchange::join(&run).unwrap();
                    exchange.start(&mut run).unwrap();
                    while run.step < steps {
                        if rank == 2 {
                            std::thread::sleep(Duration::from_millis(3));
                        }
                        let (_, _, samples, grads) = run.gradients().unwrap();
                        let exchanged = exchange
                            .step(&mut run, grads, samples, [false, false])
                            .unwrap();
                        assert!(!exchanged.stop);
                    }
                    // SSP pushes overlap the next step: wait for the last one.
                    assert!(!exchange.land(&mut run).unwrap());
                    let accuracy = if rank == 0 {
                        // The latest parameters, once every worker is done.
                        std::thread::sleep(Duration::from_millis(200));
                        exchange.start(&mut run).unwrap();
                        Some(run.evaluate().unwrap().1)
                    } else {
                        None
                    };
                    (exchange, accuracy)
                })
            })
            .collect();
        let mut finished: Vec<_> = workers.into_iter().map(|h| h.join().unwrap()).collect();
        let accuracy = finished[0].1.unwrap();
        finished[0].0.finish(steps).unwrap();
        drop(finished);
        let summaries: Vec<_> = servers.into_iter().map(|h| h.join().unwrap()).collect();
        (summaries, accuracy)
    });
    for summary in &summaries {
        assert_eq!(summary.updates, u64::from(workers) * steps);
        assert!(summary.grants.len() >= (workers as usize) * steps as usize);
        let worst = summary
            .grants
            .iter()
            .map(|g| g.clock - g.slowest)
            .max()
            .unwrap();
        assert!(
            worst <= u64::from(staleness),
            "a worker ran {worst} steps ahead"
        );
        // The slow worker really held the others back: they reached the bound.
        assert_eq!(worst, u64::from(staleness));
    }
    assert!(accuracy >= 0.9, "SSP training reached only {accuracy:.3}");
}

/// Asynchronous workers (pushes overlapping the next step's computation) still train the model,
/// through the same loop a task runs.
#[test]
fn async_training_with_overlapped_pushes_converges() {
    let spec = digits_mlp(
        serde_json::json!({"type": "adamw", "lr": 0.001, "weight_decay": 0.01}),
        400,
        400,
    );
    let dir = tempfile::tempdir().unwrap();
    let asynchronous = Distributed {
        mode: DistributedMode::Ps,
        sync: SyncMode::Async,
        staleness: 4,
        compression: Compression::None,
        collective: Default::default(),
        local_sgd: None,
        parallelism: Default::default(),
        launcher: Launcher::None,
    };
    let (collect, outcome) = run_job(&spec, dir.path(), 3, 2, &asynchronous);
    assert_eq!(outcome.step, 400);
    let accuracy = collect.last("val_accuracy");
    assert!(accuracy >= 0.9, "async training reached only {accuracy:.3}");
    // Its final checkpoint resumes on one worker.
    let loaded = checkpoint::load(outcome.last_checkpoint.as_ref().unwrap()).unwrap();
    assert_eq!(loaded.manifest.step, 400);
}
