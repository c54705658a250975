//! The simulator's ground truth kept fair and its blind spots closed (issues #19, #54): the recorded
//! shape's PS count (the user's rule), seeds that reach every policy, tenants' maxima and fixed shapes
//! held at every arrival and round, disruptions counted, Gandiva's shrink, DRF's preemption, and
//! `drover` on a light cluster of short jobs.

#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use common::{FixedOracle, apply, id, job, snapshot};
use drover_scheduler::cluster::uniform_cluster;
use drover_scheduler::plan::{JobPlan, WaitReason};
use drover_scheduler::sim::{
    self, Interference, Quotas, RecordedPs, SimConfig, Stopwatch, TraceFilter, Workload,
    WorkloadOptions,
};
use drover_scheduler::snapshot::Range;
use drover_scheduler::{Plan, build_policy, invariants, policy_names};

fn models() -> Vec<sim::MeasuredModel> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/models/ps_worker_speed.txt"
    );
    sim::parse_models(&std::fs::read_to_string(path).unwrap()).unwrap()
}

struct Frozen;

impl Stopwatch for Frozen {
    fn now_ns(&self) -> u64 {
        0
    }
}

/// 60 jobs over two hours on three tenants, 1-8 GPUs, 10 minutes to 3 hours.
fn busy_trace() -> String {
    let mut text = String::from("submit_s,duration_s,gpus,tenant\n");
    for i in 0..60u32 {
        let gpus = [1, 1, 2, 4, 1, 8, 2, 1][(i % 8) as usize];
        let duration = 600 + (i * 7919) % 10_000;
        text.push_str(&format!("{},{},{},vc{}\n", i * 120, duration, gpus, i % 3));
    }
    text
}

fn build(text: &str, nodes: u32, options: &WorkloadOptions) -> Workload {
    let trace = sim::parse_trace(text, &TraceFilter::default()).unwrap();
    sim::build_workload_with(
        &trace,
        &models(),
        uniform_cluster(nodes, 8, 64, 32),
        options,
    )
}

fn options(seed: u64) -> WorkloadOptions {
    WorkloadOptions {
        seed,
        ..WorkloadOptions::default()
    }
}

#[test]
fn the_recorded_shape_follows_the_users_rule_not_the_hidden_speed() {
    for (rule, ps_for) in [
        (RecordedPs::Workers, (|w| w) as fn(u32) -> u32),
        (RecordedPs::Half, |w: u32| w.div_ceil(2)),
        (RecordedPs::One, |_| 1),
    ] {
        let built = build(
            &busy_trace(),
            2,
            &WorkloadOptions {
                recorded_ps: rule,
                ..options(5)
            },
        );
        for job in &built.jobs {
            assert_eq!(job.recorded.ps, ps_for(job.recorded.workers), "{rule:?}");
            assert_eq!(job.view.preferred, job.recorded);
            assert!(
                !job.view.consolidate,
                "the trace says nothing of consolidation"
            );
        }
    }
    assert!(
        "best"
            .parse::<RecordedPs>()
            .unwrap_err()
            .contains("hidden speed")
    );
    assert_eq!("half".parse::<RecordedPs>(), Ok(RecordedPs::Half));
}

#[test]
fn a_seed_changes_what_every_policy_sees() {
    let config = |seed| SimConfig {
        seed,
        ..SimConfig::default()
    };
    for name in ["fifo", "srtf", "drf", "tiresias"] {
        let a = sim::run_policy(
            name,
            &build(&busy_trace(), 2, &options(3)),
            config(3),
            &Frozen,
        )
        .unwrap()
        .0;
        let b = sim::run_policy(
            name,
            &build(&busy_trace(), 2, &options(4)),
            config(4),
            &Frozen,
        )
        .unwrap()
        .0;
        assert_ne!(a.avg_jct_s, b.avg_jct_s, "{name}: the seed changed nothing");
    }
}

#[test]
fn guarantees_come_from_the_configuration_not_the_replayed_jobs() {
    let equal = build(&busy_trace(), 2, &options(1));
    let guaranteed: Vec<u32> = equal.tenants.iter().map(|t| t.guaranteed_gpus).collect();
    assert_eq!(guaranteed, vec![6, 5, 5], "16 GPUs in three equal shares");
    let quotas = Quotas::parse("tenant,guaranteed_gpus,max_gpus\nvc0,8,10\nvc2,4\n").unwrap();
    let configured = build(
        &busy_trace(),
        2,
        &WorkloadOptions {
            quotas,
            ..options(1)
        },
    );
    let got: Vec<(u32, Option<u32>)> = configured
        .tenants
        .iter()
        .map(|t| (t.guaranteed_gpus, t.max_gpus))
        .collect();
    assert_eq!(got, vec![(8, Some(10)), (0, None), (4, None)]);
    for bad in ["", "vc0", "vc0,x", "vc0,4,2", "vc0,1\nvc0,2"] {
        assert!(Quotas::parse(bad).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn every_policy_keeps_tenant_maxima_at_every_arrival_and_round() {
    // vc0 may hold at most 3 GPUs, vc1 at most 4: the invariants, checked at every arrival and round,
    // fail the run if any policy's plan breaks either. Jobs larger than their tenant's maximum are
    // left out of the workload, as jobs larger than the cluster are.
    let quotas = Quotas::parse("vc0,2,3\nvc1,2,4\nvc2,2\n").unwrap();
    let workload = build(
        &busy_trace(),
        2,
        &WorkloadOptions {
            quotas,
            ..options(2)
        },
    );
    for name in policy_names() {
        let (report, outcome) = sim::run_policy(name, &workload, SimConfig::default(), &Frozen)
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        let unfinished = outcome.jobs.iter().filter(|j| j.finish_s.is_nan()).count();
        assert!(report.jobs > 0 && unfinished == 0, "{name}");
    }
    assert!(
        workload.skipped > 0,
        "vc0's and vc1's larger jobs are left out"
    );
}

#[test]
fn fixed_shapes_and_capacity_are_checked_at_arrivals_too() {
    // A plan that runs a fixed-size job at another size fails the invariants, as an arrival placed
    // that way now does in the simulator.
    let mut snap = snapshot(1, 8, vec![job(0, 2, 0.0)]);
    let plan = build_policy("fifo", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    invariants::check(&snap, &plan).unwrap();
    snap.jobs[0].workers = Range { min: 4, max: 4 };
    assert!(invariants::check(&snap, &plan).is_err());
}

#[test]
fn disruptions_are_counted_per_kind() {
    let workload = build(&busy_trace(), 1, &options(6));
    let run = |name| {
        sim::run_policy(name, &workload, SimConfig::default(), &Frozen)
            .unwrap()
            .0
            .disruptions
    };
    let fifo = run("fifo");
    assert_eq!(
        (
            fifo.preemptions,
            fifo.suspensions,
            fifo.resizes,
            fifo.migrations
        ),
        (0, 0, 0, 0),
        "strict FIFO never touches a running job"
    );
    assert!(run("gandiva").suspensions > 0, "Gandiva time-slices");
    assert!(run("tiresias").preemptions > 0, "Tiresias preempts");
    assert!(run("optimus").resizes > 0, "Optimus resizes");
}

#[test]
fn gandiva_gives_grown_gpus_back_when_others_wait() {
    // Job 0 asked for 2 workers and was grown to 4 while the node was idle; job 1 now waits for 4.
    let mut grown = job(0, 2, 0.0);
    grown.workers = Range { min: 1, max: 4 };
    let mut snap = snapshot(1, 8, vec![grown, job(1, 6, 10.0)]);
    snap.jobs[1].submit_s = 10.0;
    let mut gandiva = build_policy("gandiva", None).unwrap();
    let alone = snapshot(1, 8, vec![snap.jobs[0].clone()]);
    let mut alone_snap = alone.clone();
    let plan = gandiva.schedule(&alone_snap, &Plan::default());
    apply(&mut alone_snap, &plan);
    let plan = gandiva.schedule(&alone_snap, &plan);
    assert_eq!(
        plan.placement(id(0)).unwrap().shape().workers,
        4,
        "grown while nobody waits"
    );
    snap.jobs[0].placement = plan.placement(id(0)).cloned();
    let plan = gandiva.schedule(&snap, &plan);
    invariants::check(&snap, &plan).unwrap();
    assert_eq!(
        plan.placement(id(0)).unwrap().shape().workers,
        2,
        "shrunk back to what it asked for"
    );
    assert!(
        plan.placement(id(1)).is_some(),
        "the GPUs it gave back run the waiting job"
    );
}

#[test]
fn drf_preempts_a_tenant_past_its_share_for_one_below_it() {
    // Tenant a holds all 8 GPUs with four 2-GPU jobs; tenant b's job waits.
    let mut jobs: Vec<_> = (0..4).map(|n| job(n, 2, n as f64)).collect();
    let mut waiting = job(9, 2, 100.0);
    waiting.tenant = 1;
    jobs.push(waiting);
    let mut snap = snapshot(1, 8, jobs);
    let mut drf = build_policy("drf", None).unwrap();
    let first = drf.schedule(&snapshot(1, 8, snap.jobs[..4].to_vec()), &Plan::default());
    for job in snap.jobs.iter_mut().take(4) {
        job.placement = first.placement(job.id).cloned();
    }
    let plan = drf.schedule(&snap, &first);
    invariants::check(&snap, &plan).unwrap();
    assert!(plan.placement(id(9)).is_some(), "b's job starts");
    assert_eq!(
        plan.jobs[&id(3)],
        JobPlan::Wait {
            reason: WaitReason::Preempted
        },
        "a's latest job gives its GPUs back"
    );
}

#[test]
fn some_packed_pairs_interfere_badly_and_the_spread_is_hidden_in_step_times() {
    let factors: Vec<f64> = (0..10_000u64)
        .map(|pair| Interference::Drawn.speed_factor(1, pair, pair + 1))
        .collect();
    let share = |lo: f64, hi: f64| {
        factors.iter().filter(|f| **f >= lo && **f < hi).count() as f64 / factors.len() as f64
    };
    assert!((0.55..0.65).contains(&share(1.0 / 1.3, 1.01)), "mild pairs");
    assert!(
        (0.05..0.11).contains(&share(0.0, 0.5)),
        "pairs that do less than one job alone"
    );
    assert_ne!(
        Interference::Drawn.speed_factor(1, 7, 8),
        Interference::Drawn.speed_factor(1, 8, 7),
        "each side of a pair is drawn"
    );
    assert_ne!(
        Interference::Drawn.speed_factor(1, 7, 8),
        Interference::Drawn.speed_factor(2, 7, 8),
        "the seed changes the draws"
    );
    assert_eq!(Interference::Fixed(0.25).speed_factor(1, 7, 8), 0.75);
}

/// 60 short jobs (100-200 s) of 1-4 GPUs on 16 GPUs, one a minute: light load.
fn short_jobs_trace() -> String {
    let mut text = String::from("submit_s,duration_s,gpus,tenant\n");
    for i in 0..60u32 {
        let gpus = [1, 2, 1, 4, 1, 2][(i % 6) as usize];
        let duration = 100 + (i * 37) % 101;
        text.push_str(&format!("{},{},{},vc{}\n", i * 60, duration, gpus, i % 2));
    }
    text
}

#[test]
fn drover_is_within_five_percent_of_fifo_on_short_jobs_on_a_light_cluster() {
    for seed in 1..=3 {
        let workload = build(&short_jobs_trace(), 2, &options(seed));
        let config = SimConfig {
            seed,
            ..SimConfig::default()
        };
        let jct = |name| {
            sim::run_policy(name, &workload, config, &Frozen)
                .unwrap()
                .0
                .avg_jct_s
        };
        let (fifo, drover) = (jct("fifo"), jct("drover"));
        assert!(
            drover <= 1.05 * fifo,
            "seed {seed}: drover {drover:.0} s vs FIFO {fifo:.0} s"
        );
    }
}

#[test]
fn a_preemptive_round_keeps_a_tenant_within_its_maximum() {
    // Tenant a may hold 4 GPUs; its two 4-GPU jobs are both shorter than b's, but only one may run.
    let mut jobs = vec![job(0, 4, 0.0), job(1, 4, 1.0), job(2, 4, 2.0)];
    jobs[2].tenant = 1;
    let mut snap = snapshot(1, 16, jobs);
    snap.tenants[0].max_gpus = Some(4);
    let oracle = FixedOracle([(id(0), 100.0), (id(1), 200.0), (id(2), 5000.0)].into());
    let plan = build_policy("srtf", Some(Box::new(oracle)))
        .unwrap()
        .schedule(&snap, &Plan::default());
    invariants::check(&snap, &plan).unwrap();
    assert!(plan.placement(id(0)).is_some() && plan.placement(id(2)).is_some());
    assert_eq!(
        plan.jobs[&id(1)],
        JobPlan::Wait {
            reason: WaitReason::TenantLimit
        }
    );
}
