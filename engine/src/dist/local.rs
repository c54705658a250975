//! A whole distributed job in one process: every worker and PS shard a thread running the same
//! [`train`](crate::train) a task process runs, talking TCP over loopback. Tests and benchmarks use it.

use super::cluster::{Cluster, Role};
use crate::trainer::{Outcome, Reporter, Requests, TrainOptions};
use crate::training_loop::train;
use std::net::TcpListener;
use std::path::Path;

/// Reports nothing (the tasks other than the leader).
#[derive(Debug, Default)]
pub struct Quiet;

impl Reporter for Quiet {
    fn metrics(&mut self, _step: u64, _values: &[(&str, f64)]) {}
    fn checkpoint(&mut self, _step: u64, _path: &Path) {}
    fn info(&mut self, _line: &str) {}
}

/// `n` free loopback addresses, all different: each is bound, and all are released together once
/// every one is chosen (a port released at once could be handed out again by the next bind); the
/// tasks bind them again.
pub fn free_addresses(n: usize) -> std::io::Result<Vec<String>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.to_string()))
        .collect()
}

/// Runs `options`' job with `workers` workers and `ps` shards as threads, resuming every task from
/// `resume` when given; the leader reports to `reporter`. Returns the leader's outcome.
pub fn run_job(
    options: &TrainOptions,
    workers: u32,
    ps: u32,
    generation: u64,
    resume: Option<&Path>,
    reporter: &mut (dyn Reporter + Send),
    requests: &Requests,
) -> anyhow::Result<Outcome> {
    run_job_on(
        options, workers, ps, generation, resume, reporter, requests, None,
    )
}

/// [`run_job`], each task computing on a thread pool of its own of `threads` threads when given
/// (as separate processes would; benchmarks use it), on the shared pool otherwise.
#[expect(
    clippy::too_many_arguments,
    reason = "run_job's arguments and the pool size"
)]
pub fn run_job_on(
    options: &TrainOptions,
    workers: u32,
    ps: u32,
    generation: u64,
    resume: Option<&Path>,
    reporter: &mut (dyn Reporter + Send),
    requests: &Requests,
    threads: Option<usize>,
) -> anyhow::Result<Outcome> {
    let pools = match threads {
        Some(n) => (0..workers + ps)
            .map(|_| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .map(Some)
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => (0..workers + ps).map(|_| None).collect(),
    };
    let peers = free_addresses((workers + ps) as usize)?;
    std::thread::scope(|scope| {
        let mut leader = None;
        let mut others = Vec::new();
        let mut reporter = Some(reporter);
        for task in 0..workers + ps {
            let mut options = options.clone();
            options.workers = workers;
            options.ps = ps;
            options.resume_from = resume.map(Path::to_path_buf);
            let role = if task < workers {
                options.rank = task;
                Role::Worker
            } else {
                Role::Ps {
                    index: task - workers,
                }
            };
            options.cluster = Some(Cluster {
                job: "local".to_owned(),
                generation,
                role,
                peers: peers.clone(),
                listen: peers[task as usize].clone(),
            });
            let pool = pools[task as usize].as_ref();
            if task == 0 {
                let reporter = reporter.take();
                leader = Some(scope.spawn(move || {
                    on_pool(pool, move || match reporter {
                        Some(r) => train(options, r, requests),
                        None => train(options, &mut Quiet, requests),
                    })
                }));
            } else {
                others
                    .push(scope.spawn(move || {
                        on_pool(pool, move || train(options, &mut Quiet, requests))
                    }));
            }
        }
        for task in others {
            task.join()
                .map_err(|_| anyhow::anyhow!("a task thread panicked"))??;
        }
        leader
            .ok_or_else(|| anyhow::anyhow!("a job needs a worker"))?
            .join()
            .map_err(|_| anyhow::anyhow!("the leader's thread panicked"))?
    })
}

/// Runs `op` on `pool` when there is one, else here.
fn on_pool<R: Send>(pool: Option<&rayon::ThreadPool>, op: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(pool) => pool.install(op),
        None => op(),
    }
}
