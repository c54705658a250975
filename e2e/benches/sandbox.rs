//! What a task's sandbox costs, side by side with the same task unsandboxed, on this host: the
//! start (from the executor preparing the task to its process's exit, for a task that runs `true`:
//! the bundle, the runtime, the namespaces and the cgroup against a plain child process), and the
//! training throughput of the example digits MLP (`drover train examples/digits-mlp.yaml`) inside a
//! sandbox given this host's CPUs against outside it. Needs root and Debian's `runc`.
//!
//!     cargo bench -p drover-e2e --bench sandbox

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark that cannot run should panic"
)]

use drover_executor::sandbox::{Sandbox, SandboxSettings, TaskSandbox};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const STARTS: usize = 20;
const TRAIN_RUNS: usize = 3;
const TRAIN_STEPS: &str = "1500";

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn percentile_90(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[(samples.len() * 9 / 10).min(samples.len() - 1)]
}

/// Runs `args` of the drover program in a fresh sandbox (its stdin held open, as the executor does);
/// the time from preparing the sandbox to the process's exit.
async fn sandboxed(
    sandbox: &std::sync::Arc<Sandbox>,
    scratch: &Path,
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Duration {
    let job = uuid::Uuid::new_v4().to_string();
    let started = Instant::now();
    let task = TaskSandbox {
        name: name.to_owned(),
        job_id: job.clone(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        workdir: drover_e2e::repo_root(),
        task_dir: scratch.join("tasks").join(name),
        checkpoint_dir: scratch.join("checkpoints").join(&job).join("g1"),
        resume_from: None,
        data: Vec::new(),
        memory_limit_bytes: 4 << 30,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        gpus: Vec::new(),
        image: None,
        advertised_host: "127.0.0.1".to_owned(),
    };
    let (mut command, confined) = sandbox.confine(&task).unwrap();
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Held while it runs (waiting would close it): the shim reads its end as the executor gone.
    let stdin = child.stdin.take();
    let status = child.wait().await.unwrap();
    let took = started.elapsed();
    drop(stdin);
    if !status.success() {
        let mut err = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = stderr.read_to_string(&mut err).await;
        }
        panic!("{name} failed in its sandbox ({status}): {err}");
    }
    confined.finish().await;
    took
}

/// Runs `args` of the drover program as a plain child process, its stdin held open.
async fn plain(args: &[&str], env: &[(&str, &str)]) -> Duration {
    let started = Instant::now();
    let mut child = tokio::process::Command::new(drover_e2e::drover())
        .args(args)
        .envs(env.iter().copied())
        .current_dir(drover_e2e::repo_root())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    let status = child.wait().await.unwrap();
    let took = started.elapsed();
    drop(stdin);
    assert!(status.success(), "{args:?}: {status}");
    took
}

#[tokio::main]
async fn main() {
    if !drover_e2e::sandboxes() {
        println!(
            "sandbox benchmark: this host cannot sandbox tasks (run as root with runc installed)"
        );
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let data_dir = scratch.path().join("executor");
    let sandbox = Sandbox::open(
        SandboxSettings::default(),
        &data_dir,
        "bench",
        &drover_e2e::drover(),
        &[],
    )
    .await
    .unwrap();
    println!("sandbox: {}", sandbox.describe());
    let status_file = |dir: &Path, i: usize| -> PathBuf { dir.join(format!("status-{i}.json")) };
    let path = [("PATH", "/usr/local/bin:/usr/bin:/bin")];

    // Start: a task that runs `true` behind the task shim.
    let (mut outside, mut inside) = (Vec::new(), Vec::new());
    for i in 0..STARTS {
        let file = status_file(scratch.path(), i);
        let file = file.to_str().unwrap();
        outside.push(plain(&["task-shim", "--status-file", file, "--", "true"], &path).await);
        let task_file = scratch
            .path()
            .join("tasks")
            .join(format!("start-{i}"))
            .join("status.json");
        let task_file = task_file.to_str().unwrap();
        inside.push(
            sandboxed(
                &sandbox,
                scratch.path(),
                &format!("start-{i}"),
                &[
                    "task-shim",
                    "--sandboxed",
                    "--status-file",
                    task_file,
                    "--",
                    "true",
                ],
                &path,
            )
            .await,
        );
    }
    let (out_median, in_median) = (median(outside.clone()), median(inside.clone()));
    println!(
        "task start ({STARTS} each, a task running `true` behind the shim, until it exits):\n  \
         unsandboxed  median {:>7.1} ms  p90 {:>7.1} ms\n  sandboxed    median {:>7.1} ms  p90 {:>7.1} ms\n  \
         the sandbox adds {:.1} ms at the median (target: at most 150 ms)",
        out_median.as_secs_f64() * 1e3,
        percentile_90(outside).as_secs_f64() * 1e3,
        in_median.as_secs_f64() * 1e3,
        percentile_90(inside).as_secs_f64() * 1e3,
        (in_median.as_secs_f64() - out_median.as_secs_f64()) * 1e3,
    );

    // Throughput: the example MLP for a fixed number of steps, alternating inside and outside.
    let cpus = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .to_string();
    let env = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("RAYON_NUM_THREADS", cpus.as_str()),
        ("HOME", "/tmp"),
    ];
    let (mut outside, mut inside) = (Vec::new(), Vec::new());
    for run in 0..TRAIN_RUNS {
        let dir = scratch.path().join(format!("plain-checkpoints-{run}"));
        outside.push(
            plain(
                &[
                    "train",
                    "examples/digits-mlp.yaml",
                    "--steps",
                    TRAIN_STEPS,
                    "--checkpoint-dir",
                    dir.to_str().unwrap(),
                ],
                &env,
            )
            .await,
        );
        let name = format!("train-{run}");
        let checkpoints = scratch.path().join("tasks").join(&name).join("checkpoints");
        inside.push(
            sandboxed(
                &sandbox,
                scratch.path(),
                &name,
                &[
                    "train",
                    "examples/digits-mlp.yaml",
                    "--steps",
                    TRAIN_STEPS,
                    "--checkpoint-dir",
                    checkpoints.to_str().unwrap(),
                ],
                &env,
            )
            .await,
        );
    }
    let steps: f64 = TRAIN_STEPS.parse().unwrap();
    let (out_median, in_median) = (median(outside.clone()), median(inside.clone()));
    println!(
        "training throughput (digits MLP, {TRAIN_STEPS} steps, {TRAIN_RUNS} runs each, {cpus} CPUs, start included):\n  \
         unsandboxed  {:>7.1} steps/s (median {:.2} s)\n  sandboxed    {:>7.1} steps/s (median {:.2} s)\n  \
         sandboxed / unsandboxed: {:.3} (target: at least 0.98)",
        steps / out_median.as_secs_f64(),
        out_median.as_secs_f64(),
        steps / in_median.as_secs_f64(),
        in_median.as_secs_f64(),
        out_median.as_secs_f64() / in_median.as_secs_f64(),
    );
}
