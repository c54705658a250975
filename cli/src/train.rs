//! `drover train` (run a train job's spec on this machine) and the hidden `drover train-task` that an
//! executor runs for every task of a `train` job. Both run Drover's training engine; the task speaks
//! the command-job contract on stdout (metrics and checkpoint lines), so executors treat it like any
//! other task.

use crate::output::out;
use anyhow::{Context, bail};
use drover_core::DroverJob;
use drover_core::spec::Format;
use drover_engine::dist::{Cluster, Role};
use drover_engine::{Outcome, Reporter, Requests, TrainOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[derive(Debug, clap::Args)]
pub struct TrainArgs {
    /// A DroverJob of type `train`, YAML or JSON.
    pub file: PathBuf,
    /// Where checkpoints go [default: .drover/train-checkpoints/<the job's name>]. Old checkpoints
    /// in it are pruned, so two jobs never share one.
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Resume from this checkpoint directory (`step-NNNNNNNN`).
    #[arg(long)]
    pub resume_from: Option<PathBuf>,
    /// Stop after this step (a shorter run than the spec's `max_steps`; the learning-rate schedule
    /// still spans `max_steps`, so `--resume-from` the last checkpoint continues the full run).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Where to train: `cpu`, `cuda` (the first GPU) or `cuda:N`. A GPU needs a build with
    /// `--features cuda`.
    #[arg(long, default_value = "cpu", env = "DROVER_DEVICE")]
    pub device: String,
}

#[derive(Debug, clap::Args)]
pub struct TrainTaskArgs {
    /// The job file the executor wrote (JSON).
    #[arg(long, required_unless_present = "job_env", conflicts_with = "job_env")]
    pub job: Option<PathBuf>,
    /// The environment variable holding the job (JSON), for a task run as a Kubernetes Pod (it has
    /// no file from its executor).
    #[arg(long)]
    pub job_env: Option<String>,
}

/// The device a task trains on: the GPUs its executor assigned (`CUDA_VISIBLE_DEVICES`, set only
/// for real GPUs), else the CPU. A task given a GPU it cannot use fails rather than train on the CPU.
fn task_device(role: Role) -> anyhow::Result<candle_core::Device> {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    if visible.trim().is_empty() || matches!(role, Role::Ps { .. }) {
        // Parameter-server shards hold and update parameters on the host.
        return Ok(candle_core::Device::Cpu);
    }
    drover_engine::device::open_cuda(0)
        .with_context(|| format!("this task was assigned GPU {visible}"))
}

fn load_job(path: &Path) -> anyhow::Result<DroverJob> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let format = if path.extension().is_some_and(|e| e == "json") {
        Format::Json
    } else {
        Format::Yaml
    };
    DroverJob::parse(&bytes, format).map_err(|err| anyhow::anyhow!("{}: {err}", path.display()))
}

fn options(
    job: &DroverJob,
    checkpoint_dir: PathBuf,
    resume_from: Option<PathBuf>,
    device: candle_core::Device,
) -> anyhow::Result<TrainOptions> {
    let Some(train) = job.spec.train.clone() else {
        bail!("job {} is not of type train", job.metadata.name);
    };
    let log_every = train.eval_every.clamp(1, 50);
    Ok(TrainOptions {
        spec: train,
        checkpoint: job.spec.checkpoint,
        workers: 1,
        ps: 0,
        rank: 0,
        checkpoint_dir,
        resume_from,
        base_dir: std::env::current_dir().context("cannot read the working directory")?,
        log_every,
        stop_at: None,
        device,
        distributed: job.spec.distributed.clone(),
        cluster: None,
    })
}

/// SIGTERM or Ctrl-C: the engine checkpoints at the next step boundary and returns. SIGUSR1: it
/// checkpoints at the next step boundary and goes on.
fn requests_from_signals() -> Arc<Requests> {
    let requests = Arc::new(Requests::default());
    let stop = requests.clone();
    tokio::spawn(async move {
        crate::serve::server::shutdown_signal().await;
        stop.stop.store(true, Ordering::Relaxed);
        // A second Ctrl-C does not wait for the step boundary (a dataset still loading, a long
        // evaluation): the run ends at once, its last checkpoint kept.
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupted again: stopping without a checkpoint");
            std::process::exit(130);
        }
    });
    let checkpoint = requests.clone();
    tokio::spawn(async move {
        let Ok(mut usr1) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
        else {
            return;
        };
        while usr1.recv().await.is_some() {
            checkpoint.checkpoint.store(true, Ordering::Relaxed);
        }
    });
    requests
}

async fn run(
    options: TrainOptions,
    mut reporter: Box<dyn Reporter + Send>,
) -> anyhow::Result<Outcome> {
    std::fs::create_dir_all(&options.checkpoint_dir)
        .with_context(|| format!("cannot create {}", options.checkpoint_dir.display()))?;
    let requests = requests_from_signals();
    tokio::task::spawn_blocking(move || drover_engine::train(options, reporter.as_mut(), &requests))
        .await
        .context("the training thread failed")?
}

/// The command-job contract: JSON lines for metrics and checkpoints, everything else plain text.
struct ContractReporter {
    checkpoint_dir: PathBuf,
}

impl Reporter for ContractReporter {
    fn metrics(&mut self, step: u64, values: &[(&str, f64)]) {
        let values: serde_json::Map<String, serde_json::Value> = values
            .iter()
            .filter(|(_, v)| v.is_finite())
            .map(|(k, v)| ((*k).to_owned(), serde_json::json!(v)))
            .collect();
        out!(
            "{}",
            serde_json::json!({"drover": "metrics", "step": step, "values": values})
        );
    }

    fn checkpoint(&mut self, step: u64, path: &Path) {
        let relative = path.strip_prefix(&self.checkpoint_dir).unwrap_or(path);
        out!(
            "{}",
            serde_json::json!({"drover": "checkpoint", "step": step, "path": relative.display().to_string()})
        );
    }

    fn info(&mut self, line: &str) {
        out!("{line}");
    }
}

pub async fn train_task(args: TrainTaskArgs) -> anyhow::Result<()> {
    crate::output::QUIT_ON_BROKEN_PIPE.store(false, Ordering::Relaxed);
    let job = match (&args.job, &args.job_env) {
        (Some(path), _) => load_job(path)?,
        (None, Some(variable)) => {
            let text = std::env::var(variable).with_context(|| format!("{variable} is not set"))?;
            DroverJob::parse(text.as_bytes(), Format::Json)
                .map_err(|err| anyhow::anyhow!("{variable}: {err}"))?
        }
        (None, None) => anyhow::bail!("give --job FILE or --job-env VARIABLE"),
    };
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let checkpoint_dir =
        PathBuf::from(env("DROVER_CHECKPOINT_DIR").context("DROVER_CHECKPOINT_DIR is not set")?);
    let parse =
        |name: &str, default: u32| env(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    let role = match env("DROVER_ROLE").as_deref() {
        Some("ps") => Role::Ps {
            index: parse("DROVER_TASK_INDEX", 0),
        },
        _ => Role::Worker,
    };
    let mut options = options(
        &job,
        checkpoint_dir.clone(),
        env("DROVER_RESUME_FROM").map(PathBuf::from),
        task_device(role)?,
    )?;
    options.workers = parse("DROVER_NUM_WORKERS", 1);
    options.ps = parse("DROVER_NUM_PS", 0);
    options.rank = parse("DROVER_RANK", 0);
    let generation = env("DROVER_GENERATION")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if options.workers > 1 || options.ps > 0 {
        options.cluster = Some(Cluster {
            job: env("DROVER_JOB_ID").context("DROVER_JOB_ID is not set")?,
            generation,
            role,
            peers: env("DROVER_PEERS")
                .map(|p| p.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
            listen: format!(
                "0.0.0.0:{}",
                env("DROVER_PORT").context("DROVER_PORT is not set")?
            ),
        });
    }
    let what = match role {
        Role::Ps { index } => format!("PS shard {index} of {}", options.ps),
        Role::Worker => format!("rank {} of {}", options.rank, options.workers),
    };
    out!(
        "drover engine: job {} generation {generation} {what}",
        job.metadata.name
    );
    let leader = role == Role::Worker && options.rank == 0;
    let outcome = run(options, Box::new(ContractReporter { checkpoint_dir })).await?;
    if outcome.interrupted && !leader {
        out!("stopped at step {} with the job", outcome.step);
    } else if outcome.interrupted {
        out!("checkpointed at step {} on SIGTERM", outcome.step);
    } else {
        let accuracy = outcome
            .metrics
            .get("val_accuracy")
            .copied()
            .unwrap_or(f64::NAN);
        out!(
            "finished at step {}: val_accuracy {accuracy:.4}",
            outcome.step
        );
    }
    Ok(())
}

/// Plain progress lines for a person at a terminal.
struct HumanReporter;

impl Reporter for HumanReporter {
    fn metrics(&mut self, step: u64, values: &[(&str, f64)]) {
        let shown: Vec<String> = values.iter().map(|(k, v)| format!("{k}={v:.4}")).collect();
        out!("step {step:>6}  {}", shown.join("  "));
    }

    fn checkpoint(&mut self, step: u64, path: &Path) {
        out!("step {step:>6}  checkpoint {}", path.display());
    }

    fn info(&mut self, line: &str) {
        out!("{line}");
    }
}

pub async fn train(args: TrainArgs) -> anyhow::Result<()> {
    let job = load_job(&args.file)?;
    if let Some(init) = job.spec.train.as_ref().and_then(|t| t.init_from.as_ref())
        && args.resume_from.is_none()
    {
        bail!(
            "{}: spec.train.init_from names checkpoint `{}` of a Drover server, which `drover train` \
             cannot reach: download it (`drover download`) and pass --resume-from DIR, or remove \
             init_from",
            args.file.display(),
            init.checkpoint
        );
    }
    if let (Some(steps), Some(max)) = (
        args.steps,
        job.spec.train.as_ref().and_then(|t| t.max_steps),
    ) && steps > max
    {
        bail!("--steps {steps} is past the spec's max_steps ({max}): the run ends at {max}");
    }
    let device = drover_engine::device::open(&args.device)?;
    let checkpoint_dir = args.checkpoint_dir.unwrap_or_else(|| {
        // Validation made the name (or the generateName prefix) a DNS-1123 label: a safe folder.
        let meta = &job.metadata;
        let name = Some(meta.name.as_str())
            .filter(|n| !n.is_empty())
            .or(meta
                .generate_name
                .as_deref()
                .map(|p| p.trim_end_matches('-')))
            .filter(|n| !n.is_empty())
            .unwrap_or("job");
        Path::new(".drover").join("train-checkpoints").join(name)
    });
    let mut options = options(&job, checkpoint_dir, args.resume_from, device)?;
    options.stop_at = args.steps;
    let resources = &job.spec.resources;
    if resources.workers.max > 1
        || resources.ps.max > 0
        || !job.spec.distributed.parallelism.is_data_only()
    {
        // Said, not silently ignored: what one process does with a job for several.
        out!(
            "{}: trains here as one process on the whole global batch (on a cluster its {} share \
             that batch: `drover submit` runs them)",
            args.file.display(),
            shape_words(&job)
        );
    }
    let started = std::time::Instant::now();
    let outcome = run(options, Box::new(HumanReporter)).await?;
    let how = if outcome.interrupted {
        "stopped"
    } else {
        "finished"
    };
    out!(
        "{how} at step {} in {:.1}s; last checkpoint: {}",
        outcome.step,
        started.elapsed().as_secs_f64(),
        outcome
            .last_checkpoint
            .as_ref()
            .map_or_else(|| "none".to_owned(), |p| p.display().to_string())
    );
    if outcome.interrupted {
        // Like any interrupted command: `drover train … && next` does not go on.
        return Err(crate::global::Interrupted.into());
    }
    Ok(())
}

/// A multi-task job's shape in words: its workers and PS shards, and how its model is split.
fn shape_words(job: &DroverJob) -> String {
    let resources = &job.spec.resources;
    let range = |r: drover_core::spec::TaskRange| {
        if r.min == r.max {
            r.max.to_string()
        } else {
            format!("{}–{}", r.min, r.max)
        }
    };
    let mut words = format!("{} workers", range(resources.workers));
    if resources.ps.max > 0 {
        words.push_str(&format!(" and {} PS shards", range(resources.ps)));
    }
    let parallelism = job.spec.distributed.parallelism;
    if let Some(pipeline) = parallelism.pipeline {
        words.push_str(&format!(
            " in pipelines of {} stages ({})",
            pipeline.stages,
            pipeline.schedule.as_str()
        ));
    }
    if parallelism.tensor > 1 {
        words.push_str(&format!(
            ", tensor-parallel groups of {}",
            parallelism.tensor
        ));
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `drover train` says of a job for several tasks, which it trains as one process.
    #[test]
    fn a_multi_task_jobs_shape_is_said_in_words() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let words = |file: &str| shape_words(&load_job(&root.join(file)).expect("example"));
        assert_eq!(
            words("examples/digits-ps.yaml"),
            "3 workers and 2 PS shards"
        );
        assert_eq!(
            words("examples/charlm-pipeline.yaml"),
            "2 workers in pipelines of 2 stages (1f1b)"
        );
        let mut job = load_job(&root.join("examples/charlm-pipeline.yaml")).expect("example");
        job.spec.distributed.parallelism.tensor = 2;
        job.spec.resources.workers = drover_core::spec::TaskRange { min: 4, max: 8 };
        assert_eq!(
            shape_words(&job),
            "4–8 workers in pipelines of 2 stages (1f1b), tensor-parallel groups of 2"
        );
    }
}
