//! How long a PyTorch DDP job takes to its first step under Drover, side by side with the same
//! script under plain `torchrun` on the same machine: `examples/pytorch/digits_ddp.py` (two ranks,
//! gloo on the CPU, reporting every step), timed under Drover from the job's `running` event (its
//! tasks started) to its first metric, and under `torchrun --nproc-per-node 2` from the launch to the
//! first metrics line. Both include each rank's import of PyTorch and the rendezvous; under Drover
//! the ranks run in sandboxes (as root with `runc`) on a real server and two executors. Needs a
//! Python with PyTorch (`.tools/venv-python`, which `scripts/test` installs, or `DROVER_TEST_PYTHON`).
//!
//!     cargo bench -p drover-e2e --bench torch_start

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark that cannot run should panic"
)]

use chrono::{DateTime, Utc};
use drover_e2e::{Cluster, free_port, repo_root, torch_python};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROUNDS: usize = 5;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn time(value: &Value) -> DateTime<Utc> {
    value.as_str().unwrap().parse().unwrap()
}

/// Seconds from `torchrun`'s launch to the first metrics line of rank 0.
fn under_torchrun(python: &Path, scratch: &Path) -> f64 {
    let started = Instant::now();
    let mut child = Command::new(python)
        .args([
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--master-port",
            &free_port().to_string(),
            "examples/pytorch/digits_ddp.py",
            "--steps",
            "20",
            "--eval-every",
            "1",
        ])
        .current_dir(repo_root())
        .env("DROVER_CHECKPOINT_DIR", scratch)
        .env("PYTHONPATH", repo_root().join("python/src"))
        .env("PYTHONUNBUFFERED", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = None;
    for line in stdout.lines() {
        let line = line.unwrap();
        if first.is_none() && line.starts_with("{\"drover\":\"metrics\"") {
            first = Some(started.elapsed().as_secs_f64());
        }
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(child.wait().unwrap().success(), "torchrun failed: {stderr}");
    first.expect("a metrics line")
}

/// Seconds from the Drover job's `running` event (its tasks started) and from its allocation (the
/// `starting` event: dispatch, sandboxes and the launcher included) to its first recorded metric.
async fn under_drover(cluster: &Cluster, python: &Path, round: usize) -> (f64, f64) {
    let spec = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": format!("ddp-start-{round}")},
        "spec": {
            "type": "command",
            "command": {
                "argv": [python, "examples/pytorch/digits_ddp.py", "--steps", "20", "--eval-every", "1"],
                "env": {"PYTHONUNBUFFERED": "1",
                        "PYTHONPATH": repo_root().join("python/src").display().to_string()}
            },
            "resources": {"workers": 2, "ps": 0, "gpus_per_worker": 1, "cpus_per_worker": 1,
                          "memory_gb_per_task": 2},
            "distributed": {"launcher": "torch"},
            "max_restarts": 0
        }
    });
    let created = cluster.post("/api/v1/jobs", spec).await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(120))
        .await;
    let events = cluster.events(&id).await;
    let event = |to: &str| {
        events
            .iter()
            .find(|e| e["to"] == to)
            .unwrap_or_else(|| panic!("no {to} event: {events:#?}"))["created_at"]
            .clone()
    };
    let (allocated, running) = (time(&event("starting")), time(&event("running")));
    let metrics = cluster
        .get(&format!("/api/v1/jobs/{id}/metrics?name=loss"))
        .await;
    let first = &metrics["metrics"][0];
    assert_eq!(first["step"], 1, "{metrics:#}");
    let first = time(&first["time"]);
    let seconds = |from: DateTime<Utc>| (first - from).num_milliseconds() as f64 / 1000.0;
    (seconds(running), seconds(allocated))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let python = match torch_python() {
        Ok(python) => python,
        Err(why) => panic!("no Python with PyTorch ({why}); scripts/test installs one"),
    };
    let scratch = tempfile::tempdir().unwrap();
    let cluster = Cluster::start_with_slots(2).await;
    let (mut drover, mut allocated, mut torchrun) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (from_running, from_allocation) = under_drover(&cluster, &python, round).await;
        drover.push(from_running);
        allocated.push(from_allocation);
        let dir = scratch.path().join(round.to_string());
        let python = python.clone();
        torchrun.push(
            tokio::task::spawn_blocking(move || under_torchrun(&python, &dir))
                .await
                .unwrap(),
        );
        eprintln!(
            "round {}: drover {:.2} s from running, {:.2} s from allocation; torchrun {:.2} s",
            round + 1,
            drover[round],
            allocated[round],
            torchrun[round]
        );
    }
    let (d, a, t) = (median(drover), median(allocated), median(torchrun));
    println!(
        "first step of a 2-rank DDP job, median of {ROUNDS}: torchrun {t:.2} s from launch; drover {d:.2} s from running ({:+.2} s, {:.2}x), {a:.2} s from allocation ({:+.2} s, {:.2}x)",
        d - t,
        d / t,
        a - t,
        a / t
    );
}
