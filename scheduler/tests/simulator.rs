//! The simulator end to end on a small trace with the real speed measurements.

#![expect(clippy::unwrap_used, reason = "tests")]

use drover_scheduler::cluster::uniform_cluster;
use drover_scheduler::sim::{self, SimConfig, Stopwatch, TraceFilter, Workload};
use drover_scheduler::{Plan, build_policy, policy_names};

/// The measured speeds, from `data/models/` in the repository.
fn models_text() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/models/ps_worker_speed.txt"
    );
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {path}: {err}"))
}

/// A stopwatch that never moves: reports are then fully deterministic.
struct Frozen;

impl Stopwatch for Frozen {
    fn now_ns(&self) -> u64 {
        0
    }
}

fn small_trace() -> String {
    let mut text = String::from("submit_s,duration_s,gpus,tenant\n");
    // 60 jobs over two hours, 1-8 GPUs, 10 minutes to 3 hours, three tenants.
    for i in 0..60u32 {
        let gpus = [1, 1, 2, 4, 1, 8, 2, 1][(i % 8) as usize];
        let duration = 600 + (i * 7919) % 10_000;
        text.push_str(&format!("{},{},{},vc{}\n", i * 120, duration, gpus, i % 3));
    }
    text
}

fn workload(seed: u64) -> Workload {
    let trace = sim::parse_trace(&small_trace(), &TraceFilter::default()).unwrap();
    let models = sim::parse_models(&models_text()).unwrap();
    sim::build_workload(&trace, &models, uniform_cluster(2, 8, 64, 32), seed)
}

#[test]
fn the_speed_measurements_fit_the_optimus_model() {
    let models = sim::parse_models(&models_text()).unwrap();
    assert_eq!(models.len(), 8);
    assert_eq!(
        models.iter().map(|m| m.points.len()).sum::<usize>(),
        795,
        "804 lines less 9 failed runs"
    );
    for model in &models {
        assert!(
            model.median_error < 0.17,
            "{}: median error {:.3}",
            model.name,
            model.median_error
        );
        assert!(model.theta.iter().all(|&t| t >= 0.0));
        // Inside the grid the surface goes through the measurements.
        for (&(p, w), &speed) in &model.points {
            assert!((model.speed(f64::from(p), f64::from(w)) - speed).abs() < 1e-9);
        }
    }
}

#[test]
fn every_policy_completes_every_job_and_keeps_the_invariants() {
    let workload = workload(7);
    for name in policy_names() {
        let (report, outcome) =
            sim::run_policy(name, &workload, SimConfig::default(), &Frozen).unwrap();
        assert_eq!(report.jobs, 60, "{name}");
        assert!(
            outcome
                .jobs
                .iter()
                .all(|j| j.finish_s.is_finite() && j.finish_s >= j.first_start_s),
            "{name}"
        );
        assert!(
            report.avg_jct_s > 0.0 && report.gpu_utilisation > 0.0 && report.gpu_utilisation <= 1.0,
            "{name}"
        );
        // Policies that run jobs at their recorded shape cannot beat the recorded duration (checkpoints
        // only lengthen it); elastic ones can, by giving a job more than it had.
        let rows = sim::job_rows(&workload, &outcome);
        let elastic = matches!(name, "optimus" | "optimus-oracle" | "gandiva" | "drover");
        assert!(
            rows.iter()
                .all(|r| r.rho > 0.0 && (elastic || r.rho >= 0.99)),
            "{name}: a job beat its own recorded duration"
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_result() {
    for name in ["fifo", "tiresias", "srtf"] {
        let a = sim::run_policy(name, &workload(3), SimConfig::default(), &Frozen)
            .unwrap()
            .0;
        let b = sim::run_policy(name, &workload(3), SimConfig::default(), &Frozen)
            .unwrap()
            .0;
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap(),
            "{name}"
        );
    }
    let other = sim::run_policy("fifo", &workload(4), SimConfig::default(), &Frozen)
        .unwrap()
        .0;
    let first = sim::run_policy("fifo", &workload(3), SimConfig::default(), &Frozen)
        .unwrap()
        .0;
    assert_ne!(
        first.avg_jct_s, other.avg_jct_s,
        "another seed draws other models"
    );
}

#[test]
fn preemptive_policies_beat_strict_fifo_here() {
    let workload = workload(11);
    let jct = |name: &str| {
        sim::run_policy(name, &workload, SimConfig::default(), &Frozen)
            .unwrap()
            .0
            .avg_jct_s
    };
    let fifo = jct("fifo");
    assert!(jct("srtf") < fifo);
    assert!(jct("fifo-backfill") <= fifo);
}

#[test]
fn changing_the_hidden_truth_changes_no_observing_policy_plan() {
    // A snapshot with some observations, as the engine builds them.
    let workload = workload(5);
    let mut snapshot = drover_scheduler::ClusterSnapshot {
        now_s: 3600.0,
        nodes: workload.nodes.clone(),
        tenants: workload.tenants.clone(),
        jobs: workload
            .jobs
            .iter()
            .take(20)
            .map(|j| j.view.clone())
            .collect(),
    };
    for (i, job) in snapshot.jobs.iter_mut().enumerate() {
        job.observed.attained_gpu_s = 1000.0 * i as f64;
        job.observed.executed_s = 100.0 * i as f64;
    }
    let mut changed = workload.clone();
    let mut truths = (*changed.truths).clone();
    for truth in &mut truths {
        truth.scale_for_test(3.0, 0.25);
    }
    changed.truths = std::sync::Arc::new(truths.into_iter().rev().collect());
    let config = SimConfig::default();
    for name in policy_names() {
        let (oracle_a, _) = sim::oracle_for(&workload, &config);
        let (oracle_b, _) = sim::oracle_for(&changed, &config);
        let plan_a = build_policy(name, Some(Box::new(oracle_a)))
            .unwrap()
            .schedule(&snapshot, &Plan::default());
        let plan_b = build_policy(name, Some(Box::new(oracle_b)))
            .unwrap()
            .schedule(&snapshot, &Plan::default());
        if name == "gavel" {
            // It sees each job's speed per GPU model, alike on this one-model cluster (see
            // tests/heterogeneous.rs), not lengths.
            assert_eq!(plan_a, plan_b);
        } else if drover_scheduler::is_oracle_policy(name) {
            assert_ne!(plan_a, plan_b, "the oracle baseline does see the truth");
        } else {
            assert_eq!(plan_a, plan_b, "{name} must decide from observations only");
        }
    }
}

/// [`workload`] on `nodes` nodes of 8 GPUs with `share` of its jobs of two or more GPUs
/// model-parallel, held at their recorded shapes when `held`.
fn model_parallel_workload(seed: u64, nodes: u32, share: f64, held: bool) -> Workload {
    let trace = sim::parse_trace(&small_trace(), &TraceFilter::default()).unwrap();
    let models = sim::parse_models(&models_text()).unwrap();
    sim::build_workload_with(
        &trace,
        &models,
        uniform_cluster(nodes, 8, 64, 32),
        &sim::WorkloadOptions {
            seed,
            model_parallel: share,
            model_parallel_fixed: held,
            ..sim::WorkloadOptions::default()
        },
    )
}

#[test]
fn model_parallel_jobs_run_in_whole_replicas_under_every_policy() {
    let workload = model_parallel_workload(7, 2, 1.0, false);
    let parallel: Vec<usize> = (0..workload.jobs.len())
        .filter(|&i| workload.jobs[i].view.worker_step > 1)
        .collect();
    // Every job of two or more GPUs: 30 of the 60.
    assert_eq!(parallel.len(), 30);
    // The share changes which jobs are model-parallel, nothing else's draws.
    let plain = model_parallel_workload(7, 2, 0.0, false);
    for (i, (a, b)) in workload.jobs.iter().zip(&plain.jobs).enumerate() {
        if a.view.worker_step == 1 {
            assert_eq!(a.view, b.view, "job {i}");
        }
    }
    for name in policy_names() {
        let (report, outcome) =
            sim::run_policy(name, &workload, SimConfig::default(), &Frozen).unwrap();
        let m = report.model_parallel.as_ref().unwrap();
        assert_eq!(m.jobs, 30, "{name}");
        assert_eq!(m.grown + m.held + m.shrunk, 30, "{name}");
        for &i in &parallel {
            let (job, out) = (&workload.jobs[i].view, &outcome.jobs[i]);
            assert!(out.finish_s.is_finite(), "{name}: job {i}");
            assert!(
                out.max_workers.is_multiple_of(job.worker_step),
                "{name}: job {i} ran {} workers, replicas of {}",
                out.max_workers,
                job.worker_step
            );
            assert!(
                out.mean_workers >= f64::from(job.worker_step) - 1e-9,
                "{name}: job {i}"
            );
        }
    }
}

/// On a cluster with room, the elastic policies grow model-parallel jobs by whole replicas where
/// their replica speed model says it pays, and those jobs finish sooner than held at their shapes.
#[test]
fn elastic_policies_size_model_parallel_jobs_by_their_speed_model() {
    for seed in [7, 8] {
        let (sized, held) = (
            model_parallel_workload(seed, 8, 1.0, false),
            model_parallel_workload(seed, 8, 1.0, true),
        );
        for name in ["drover", "optimus"] {
            let run = |workload: &Workload| {
                sim::run_policy(name, workload, SimConfig::default(), &Frozen)
                    .unwrap()
                    .0
                    .model_parallel
                    .unwrap()
            };
            let (s, h) = (run(&sized), run(&held));
            assert_eq!(
                h.grown + h.shrunk,
                0,
                "{name}, seed {seed}: held jobs moved"
            );
            assert!(s.grown > 0, "{name}, seed {seed}: none grew: {s:?}");
            assert!(
                s.avg_jct_s < h.avg_jct_s,
                "{name}, seed {seed}: sized {:.0} s, held {:.0} s",
                s.avg_jct_s,
                h.avg_jct_s
            );
        }
    }
}
