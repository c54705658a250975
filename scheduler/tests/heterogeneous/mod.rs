//! Clusters of several GPU models: the simulator's per-model speeds (Gavel's measured table), Drover's
//! policy keeping gangs on one model and giving the fast models to the jobs that gain most, the
//! Gavel baseline, and one-model clusters left exactly as they were.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common::{apply, id, job};
use drover_core::JobId;
use drover_scheduler::cluster::{GpuModelTag, mixed_cluster, uniform_cluster};
use drover_scheduler::sim::gavel::GavelTable;
use drover_scheduler::sim::{self, SimConfig, Stopwatch, TraceFilter, WorkloadOptions};
use drover_scheduler::snapshot::{ClusterSnapshot, Shape, StepStats, Tenant};
use drover_scheduler::{JobPlan, Oracle, Plan, build_policy};
use std::collections::BTreeMap;
use std::sync::Arc;

fn data(name: &str) -> String {
    let path = format!("{}/../data/models/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("cannot read {path}: {err}"))
}

struct Frozen;

impl Stopwatch for Frozen {
    fn now_ns(&self) -> u64 {
        0
    }
}

fn trace(jobs: u32) -> Vec<sim::TraceJob> {
    let mut text = String::from("submit_s,duration_s,gpus,tenant\n");
    for i in 0..jobs {
        let gpus = [1, 1, 2, 4, 1, 8, 2, 1][(i % 8) as usize];
        let duration = 600 + (i * 7919) % 10_000;
        text.push_str(&format!("{},{},{},vc{}\n", i * 120, duration, gpus, i % 3));
    }
    sim::parse_trace(&text, &TraceFilter::default()).unwrap()
}

fn options(seed: u64, table: Option<Arc<GavelTable>>) -> WorkloadOptions {
    WorkloadOptions {
        seed,
        gpu_speeds: table,
        ..WorkloadOptions::default()
    }
}

fn table() -> Arc<GavelTable> {
    Arc::new(GavelTable::parse(&data("gavel_throughputs.json")).unwrap())
}

#[test]
fn a_job_runs_at_its_measured_speed_on_each_model() {
    let models = sim::parse_models(&data("ps_worker_speed.txt")).unwrap();
    let one = trace(1);
    let run_on = |model: &str| {
        // Two one-node groups; the other group is disabled so the job lands on `model`.
        let mut nodes = mixed_cluster(&[(1, 8, "v100"), (1, 8, "k80")], 64, 32);
        for node in &mut nodes {
            node.schedulable = node.gpus[0].model == model;
        }
        let workload = sim::build_workload_with(&one, &models, nodes, &options(3, Some(table())));
        assert_eq!(workload.gpu_models, ["v100", "k80"]);
        let job_type = workload.jobs[0].job_type.clone().unwrap();
        let (report, outcome) =
            sim::run_policy("fifo", &workload, SimConfig::default(), &Frozen).unwrap();
        assert_eq!(report.jobs, 1);
        let run = outcome.jobs[0].finish_s - outcome.jobs[0].first_start_s;
        (run, job_type)
    };
    let (on_v100, job_type) = run_on("v100");
    let (on_k80, _) = run_on("k80");
    let t = table();
    let expected =
        t.steps_per_s("v100", &job_type, 1).unwrap() / t.steps_per_s("k80", &job_type, 1).unwrap();
    // Restart and checkpoint overheads aside, the run times are in the table's ratio.
    let ratio = on_k80 / on_v100;
    assert!(
        (ratio / expected - 1.0).abs() < 0.1,
        "{job_type}: K80 {on_k80:.0}s, V100 {on_v100:.0}s, ratio {ratio:.2}, table {expected:.2}"
    );
}

#[test]
fn one_model_clusters_replay_exactly_as_before() {
    let models = sim::parse_models(&data("ps_worker_speed.txt")).unwrap();
    let jobs = trace(60);
    let nodes = || uniform_cluster(2, 8, 64, 32);
    let with_table = sim::build_workload_with(&jobs, &models, nodes(), &options(1, Some(table())));
    let without = sim::build_workload_with(&jobs, &models, nodes(), &options(1, None));
    assert!(with_table.gpu_models.is_empty());
    for policy in ["drover", "tiresias", "gavel"] {
        let a = sim::run_policy(policy, &with_table, SimConfig::default(), &Frozen).unwrap();
        let b = sim::run_policy(policy, &without, SimConfig::default(), &Frozen).unwrap();
        assert_eq!(
            serde_json::to_string(&a.0).unwrap(),
            serde_json::to_string(&b.0).unwrap(),
            "{policy}"
        );
    }
}

#[test]
fn every_policy_finishes_a_mixed_cluster_replay() {
    let models = sim::parse_models(&data("ps_worker_speed.txt")).unwrap();
    let nodes = mixed_cluster(&[(1, 8, "v100"), (1, 8, "p100"), (1, 8, "k80")], 64, 32);
    let workload = sim::build_workload_with(&trace(60), &models, nodes, &options(2, Some(table())));
    assert_eq!(workload.gpu_models.len(), 3);
    assert!(workload.jobs.iter().all(|j| j.job_type.is_some()));
    for policy in ["fifo", "tiresias", "drover", "drover-model-blind", "gavel"] {
        let (report, _) = sim::run_policy(policy, &workload, SimConfig::default(), &Frozen)
            .unwrap_or_else(|e| panic!("{policy}: {e}"));
        assert_eq!(report.jobs, workload.jobs.len(), "{policy}");
    }
}

/// Two nodes of 4 GPUs, one V100 and one K80.
fn mixed(jobs: Vec<drover_scheduler::snapshot::JobView>) -> ClusterSnapshot {
    ClusterSnapshot {
        now_s: 1000.0,
        nodes: mixed_cluster(&[(1, 4, "V100"), (1, 4, "K80")], 64, 32),
        tenants: vec![Tenant {
            name: "a".into(),
            guaranteed_gpus: 0,
            max_gpus: None,
            flavours: Vec::new(),
        }],
        jobs,
    }
}

fn models_of(snapshot: &ClusterSnapshot, plan: &Plan, job: JobId) -> Vec<String> {
    let mut models: Vec<String> = plan
        .placement(job)
        .map(|p| {
            p.tasks
                .iter()
                .filter(|t| !t.gpus.is_empty())
                .map(|t| snapshot.nodes[t.node.0 as usize].gpus[0].model.clone())
                .collect()
        })
        .unwrap_or_default();
    models.dedup();
    models
}

/// Two V100 nodes and one K80 node of 4 GPUs each.
fn two_to_one(jobs: Vec<drover_scheduler::snapshot::JobView>) -> ClusterSnapshot {
    ClusterSnapshot {
        nodes: mixed_cluster(&[(2, 4, "V100"), (1, 4, "K80")], 64, 32),
        ..mixed(jobs)
    }
}

#[test]
fn drover_never_spreads_a_gang_over_two_models() {
    // A running 4-GPU job holds one V100 node; six GPUs are then free only across the other V100
    // node and the K80 node, while the V100s could hold the gang later: it waits.
    let mut running = job(1, 4, 0.0);
    running.preemptible = false;
    let mut snapshot = two_to_one(vec![running, job(2, 6, 1.0)]);
    let mut drover = build_policy("drover", None).unwrap();
    let plan = drover.schedule(&snapshot, &Plan::default());
    apply(&mut snapshot, &plan);
    assert_eq!(models_of(&snapshot, &plan, id(1)).len(), 1);
    assert!(
        matches!(plan.jobs[&id(2)], JobPlan::Wait { .. }),
        "{:?}",
        plan.jobs[&id(2)]
    );
    let mut blind = build_policy("drover-model-blind", None).unwrap();
    let mut fresh = two_to_one(vec![job(1, 4, 0.0), job(2, 6, 1.0)]);
    fresh.jobs[0].preemptible = false;
    let plan = blind.schedule(&fresh, &Plan::default());
    apply(&mut fresh, &plan);
    let plan = blind.schedule(&fresh, &plan);
    assert_eq!(models_of(&fresh, &plan, id(2)).len(), 2, "blind spreads it");
    // A gang larger than every model (10 GPUs; 8 V100s at most) may span models.
    let snapshot = two_to_one(vec![job(3, 10, 0.0)]);
    let mut drover = build_policy("drover", None).unwrap();
    let plan = drover.schedule(&snapshot, &Plan::default());
    assert_eq!(models_of(&snapshot, &plan, id(3)).len(), 2);
    // Four GPUs fit on either model: on one.
    let snapshot = mixed(vec![job(4, 4, 0.0)]);
    let mut drover = build_policy("drover", None).unwrap();
    let plan = drover.schedule(&snapshot, &Plan::default());
    assert_eq!(models_of(&snapshot, &plan, id(4)).len(), 1);
}

/// Step times of a job measured on one model at one shape.
fn measured(model: &str, workers: u32, step_s: f64) -> StepStats {
    StepStats {
        shape: Shape { ps: 1, workers },
        shared: false,
        spread_samples: 0,
        spread_mean_step_s: 0.0,
        samples: 5,
        mean_step_s: step_s,
        gpu: GpuModelTag::of(model),
    }
}

#[test]
fn drover_gives_the_fast_model_to_the_job_that_gains_most() {
    // Two running 4-GPU jobs, each measured on both models: job 1 runs 8x slower on K80s, job 2
    // 1.2x. Job 1 is on the K80 node, job 2 on the V100 node. After the move delay, they swap.
    let (snapshot, plan) = swap_rounds(true);
    assert_eq!(models_of(&snapshot, &plan, id(1)), ["V100"]);
    assert_eq!(models_of(&snapshot, &plan, id(2)), ["K80"]);
    // A job that may not be preempted is never moved, however much it would gain.
    let (snapshot, plan) = swap_rounds(false);
    assert_eq!(models_of(&snapshot, &plan, id(1)), ["K80"]);
    assert_eq!(models_of(&snapshot, &plan, id(2)), ["V100"]);
}

/// Three rounds of `drover` on the two jobs above, the sensitive one `preemptible` or not.
fn swap_rounds(preemptible: bool) -> (ClusterSnapshot, Plan) {
    let mut sensitive = job(1, 4, 0.0);
    sensitive.preemptible = preemptible;
    sensitive.observed.step_stats = vec![measured("V100", 4, 1.0), measured("K80", 4, 8.0)];
    sensitive.observed.step_stats[1].samples = 9;
    let mut insensitive = job(2, 4, 0.0);
    insensitive.observed.step_stats = vec![measured("V100", 4, 1.0), measured("K80", 4, 1.2)];
    insensitive.observed.step_stats[0].samples = 9;
    let mut snapshot = mixed(vec![sensitive, insensitive]);
    // Place them the wrong way round first.
    let place =
        |snapshot: &ClusterSnapshot, job: usize, node: u32| drover_scheduler::plan::Placement {
            tasks: (0..4)
                .map(|g| drover_scheduler::plan::TaskPlacement {
                    role: drover_scheduler::plan::Role::Worker,
                    index: g,
                    node: drover_scheduler::cluster::NodeId(node),
                    gpus: vec![g as u16],
                    cpus: snapshot.jobs[job].cpus_per_worker,
                    memory_gb: 0,
                    packed: false,
                })
                .chain(std::iter::once(drover_scheduler::plan::TaskPlacement {
                    role: drover_scheduler::plan::Role::Ps,
                    index: 0,
                    node: drover_scheduler::cluster::NodeId(node),
                    gpus: Vec::new(),
                    cpus: 1,
                    memory_gb: 0,
                    packed: false,
                }))
                .collect(),
        };
    snapshot.jobs[0].placement = Some(place(&snapshot, 0, 1));
    snapshot.jobs[1].placement = Some(place(&snapshot, 1, 0));
    for j in &mut snapshot.jobs {
        j.observed.executed_s = 5000.0;
        j.observed.last_state_change_s = 0.0;
    }
    snapshot.now_s = 5000.0;
    let mut drover = build_policy("drover", None).unwrap();
    let mut plan = Plan::default();
    for _ in 0..3 {
        plan = drover.schedule(&snapshot, &plan);
        apply(&mut snapshot, &plan);
        snapshot.now_s += 60.0;
    }
    (snapshot, plan)
}

/// True relative speeds per (job, model).
#[derive(Debug)]
struct Speeds(BTreeMap<(JobId, GpuModelTag), f64>);

impl Oracle for Speeds {
    fn remaining_s(&self, _job: JobId, _shape: Shape) -> f64 {
        1e6
    }

    fn model_speed(&self, job: JobId, model: GpuModelTag) -> f64 {
        self.0.get(&(job, model)).copied().unwrap_or(1.0)
    }
}

#[test]
fn gavel_gives_each_model_to_the_jobs_its_program_chooses() {
    // Two 4-GPU jobs: job 1 runs 10x faster on V100s, job 2 equally fast on both. Max-min fairness
    // over normalised throughput gives job 1 the V100s and job 2 the K80s.
    let v100 = GpuModelTag::of("V100");
    let k80 = GpuModelTag::of("K80");
    let speeds = Speeds(BTreeMap::from([
        ((id(1), v100), 1.0),
        ((id(1), k80), 0.1),
        ((id(2), v100), 1.0),
        ((id(2), k80), 1.0),
    ]));
    let mut gavel = build_policy("gavel", Some(Box::new(speeds))).unwrap();
    let snapshot = mixed(vec![job(1, 4, 0.0), job(2, 4, 0.0)]);
    let plan = gavel.schedule(&snapshot, &Plan::default());
    assert_eq!(models_of(&snapshot, &plan, id(1)), ["V100"]);
    assert_eq!(models_of(&snapshot, &plan, id(2)), ["K80"]);
    assert!(
        build_policy("gavel", None).is_err(),
        "gavel needs the speeds"
    );
}
