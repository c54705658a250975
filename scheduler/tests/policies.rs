//! Each baseline policy's behaviour on small, hand-made clusters.

mod claims;
mod common;
mod flavours;
mod heterogeneous;
mod saved;

use common::{FixedOracle, apply, id, job, snapshot};
use drover_scheduler::plan::{JobPlan, RunReason, WaitReason};
use drover_scheduler::{Plan, build_policy, invariants};

fn wait_reason(plan: &Plan, n: u128) -> Option<WaitReason> {
    match plan.jobs.get(&id(n)) {
        Some(JobPlan::Wait { reason }) => Some(*reason),
        _ => None,
    }
}

fn runs(plan: &Plan, n: u128) -> bool {
    plan.placement(id(n)).is_some()
}

#[test]
fn strict_fifo_blocks_behind_the_head_and_backfill_does_not() {
    // 1 node x 4 GPUs; job 0 holds 2 GPUs; job 1 wants 4 (waits); job 2 wants 1.
    let mut snap = snapshot(1, 4, vec![job(0, 2, 0.0), job(1, 4, 1.0), job(2, 1, 2.0)]);
    let first = build_policy("fifo", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    apply(&mut snap, &first);
    snap.jobs[1].placement = None;
    snap.jobs[2].placement = None;
    let strict = build_policy("fifo", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    assert!(runs(&strict, 0));
    assert_eq!(wait_reason(&strict, 1), Some(WaitReason::InsufficientGpus));
    assert_eq!(wait_reason(&strict, 2), Some(WaitReason::BehindHeadOfLine));
    let backfill = build_policy("fifo-backfill", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    assert!(matches!(
        backfill.jobs[&id(2)],
        JobPlan::Run {
            reason: RunReason::Backfilled,
            ..
        }
    ));
    invariants::check(&snap, &backfill).unwrap();
}

#[test]
fn srtf_runs_the_shortest_remaining_and_preempts_longer_ones() {
    let mut snap = snapshot(1, 4, vec![job(0, 4, 0.0), job(1, 4, 1.0)]);
    let oracle = FixedOracle([(id(0), 5000.0), (id(1), 100.0)].into());
    let mut srtf = build_policy("srtf", Some(Box::new(oracle))).unwrap();
    let plan = srtf.schedule(&snap, &Plan::default());
    assert!(runs(&plan, 1) && !runs(&plan, 0));
    // Now job 0 runs and job 1 arrives shorter: job 0 is preempted.
    snap.jobs[0].placement = plan.placement(id(1)).cloned();
    let plan = srtf.schedule(&snap, &Plan::default());
    assert_eq!(wait_reason(&plan, 0), Some(WaitReason::Preempted));
    assert!(runs(&plan, 1));
    assert!(
        build_policy("srtf", None).is_err(),
        "SRTF cannot run without the oracle"
    );
}

#[test]
fn tiresias_demotes_after_16_gpu_hours_and_lets_newcomers_first() {
    let mut snap = snapshot(1, 4, vec![job(0, 4, 0.0), job(1, 4, 10.0)]);
    let mut tiresias = build_policy("tiresias", None).unwrap();
    let plan = tiresias.schedule(&snap, &Plan::default());
    assert!(runs(&plan, 0), "FIFO within Q0");
    apply(&mut snap, &plan);
    // Job 0 has attained 4 GPUs x 4 h = 16 GPU-hours: demoted below job 1.
    snap.jobs[0].observed.attained_gpu_s = 16.0 * 3600.0;
    snap.jobs[0].observed.executed_s = 4.0 * 3600.0;
    snap.now_s += 4.0 * 3600.0;
    let plan = tiresias.schedule(&snap, &plan);
    assert!(runs(&plan, 1));
    assert_eq!(wait_reason(&plan, 0), Some(WaitReason::Preempted));
    // Starved for 8x its run time, it is promoted back to Q0 ahead of job 1... which is in Q0 too,
    // but entered earlier; the promoted job queues behind it.
    apply(&mut snap, &plan);
    snap.jobs[0].observed.last_state_change_s = snap.now_s;
    snap.now_s += 8.0 * 4.0 * 3600.0;
    let plan = tiresias.schedule(&snap, &plan);
    assert!(runs(&plan, 1) && !runs(&plan, 0));
}

#[test]
fn tiresias_consolidates_high_skew_models() {
    // Two 4-GPU nodes, each with 3 GPUs taken: 2 GPUs free, one on each node.
    let mut snap = snapshot(2, 4, vec![job(0, 3, 0.0), job(1, 3, 0.0)]);
    let plan = build_policy("fifo", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    apply(&mut snap, &plan);
    let mut skewed = job(2, 2, 5.0);
    skewed.consolidate = true;
    snap.jobs.push(skewed);
    snap.jobs.push(job(3, 2, 6.0));
    let plan = build_policy("tiresias", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    assert_eq!(
        wait_reason(&plan, 2),
        Some(WaitReason::Fragmented),
        "a high-skew job waits for one node"
    );
    assert_eq!(
        plan.placement(id(3)).unwrap().worker_nodes().len(),
        2,
        "a low-skew job spreads"
    );
    invariants::check(&snap, &plan).unwrap();
}

/// A job is kept on one node only when its own measurements say so: at one shape and GPU model,
/// alone on its GPUs, its steps over several nodes at least 1.25 times as slow as on one, from five
/// steps each way.
#[test]
fn a_job_measured_much_slower_over_several_nodes_prefers_one_node() {
    use drover_scheduler::snapshot::{Observations, StepStats};
    // `one` steps on one node and `spread` over several, at these means.
    let stats = |one: u32, one_s: f64, spread: u32, spread_s: f64| StepStats {
        shape: drover_scheduler::Shape { ps: 1, workers: 4 },
        shared: false,
        samples: one + spread,
        mean_step_s: (f64::from(one) * one_s + f64::from(spread) * spread_s)
            / f64::from(one + spread),
        gpu: Default::default(),
        spread_samples: spread,
        spread_mean_step_s: spread_s,
    };
    let prefers = |step_stats: Vec<StepStats>| {
        Observations {
            step_stats,
            ..Observations::default()
        }
        .prefers_one_node()
    };
    assert!(prefers(vec![stats(5, 1.0, 5, 1.3)]));
    assert!(!prefers(vec![stats(5, 1.0, 5, 1.2)]), "1.2 times");
    assert!(
        !prefers(vec![stats(4, 1.0, 5, 2.0)]),
        "four steps on one node"
    );
    assert!(
        !prefers(vec![stats(0, 0.0, 50, 2.0)]),
        "never measured on one node"
    );
    let mut two = stats(5, 1.0, 0, 0.0);
    two.shape.workers = 2;
    assert!(
        !prefers(vec![two, stats(0, 0.0, 5, 2.0)]),
        "at another shape"
    );
    let mut packed = stats(5, 1.0, 5, 2.0);
    packed.shared = true;
    assert!(!prefers(vec![packed]), "measured packed");
}

#[test]
fn drf_serves_the_tenant_with_the_smaller_dominant_share() {
    // Tenant a already runs 2 GPUs; a and b each queue a 2-GPU job; only 2 GPUs are left.
    let mut running = job(0, 2, 0.0);
    running.tenant = 0;
    let mut snap = snapshot(1, 4, vec![running]);
    let plan = build_policy("fifo", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    apply(&mut snap, &plan);
    let mut from_a = job(1, 2, 1.0);
    from_a.tenant = 0;
    let mut from_b = job(2, 2, 2.0);
    from_b.tenant = 1;
    snap.jobs.push(from_a);
    snap.jobs.push(from_b);
    let plan = build_policy("drf", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    assert!(runs(&plan, 2), "tenant b has the smaller share");
    assert!(!runs(&plan, 1));
    assert!(
        matches!(
            plan.jobs[&id(0)],
            JobPlan::Run {
                reason: RunReason::Continuing,
                ..
            }
        ),
        "DRF does not preempt"
    );
}

#[test]
fn jobs_larger_than_the_cluster_never_block_the_queue() {
    let snap = snapshot(1, 4, vec![job(0, 8, 0.0), job(1, 1, 1.0)]);
    for name in ["fifo", "fifo-backfill", "drf", "tiresias"] {
        let plan = build_policy(name, None)
            .unwrap()
            .schedule(&snap, &Plan::default());
        assert_eq!(wait_reason(&plan, 0), Some(WaitReason::NeverFits), "{name}");
        assert!(runs(&plan, 1), "{name}");
    }
}

#[test]
fn an_arrival_is_placed_without_a_full_round() {
    let snap = snapshot(2, 4, vec![job(0, 3, 0.0)]);
    for name in ["fifo", "fifo-backfill", "drf", "tiresias"] {
        let decision = build_policy(name, None)
            .unwrap()
            .place_arrival(&snap, &snap.jobs[0]);
        assert!(decision.placement().is_some(), "{name}");
    }
    let mut waiting = snapshot(1, 4, vec![job(0, 8, 0.0), job(1, 1, 1.0)]);
    waiting.jobs[0].workers.max = 8;
    let decision = build_policy("fifo", None)
        .unwrap()
        .place_arrival(&waiting, &waiting.jobs[1]);
    assert!(matches!(
        decision,
        JobPlan::Wait {
            reason: WaitReason::BehindHeadOfLine
        }
    ));
}

/// `drover`'s LAS queues end at 30 GPU-minutes and at 4 GPU-hours of attained service (Tiresias's one
/// split at 16): a job that has attained a split yields its GPUs to a newcomer; short of it it
/// keeps them. And a job past 30 minutes still goes ahead of one past 4 hours.
#[test]
fn drover_demotes_after_half_an_hour_and_after_4_gpu_hours() {
    for (attained_h, demoted) in [(0.4, false), (0.5, true), (3.0, true), (4.0, true)] {
        let mut snap = snapshot(1, 4, vec![job(0, 4, 0.0), job(1, 4, 10.0)]);
        let mut drover = build_policy("drover", None).unwrap();
        let plan = drover.schedule(&snap, &Plan::default());
        assert!(
            runs(&plan, 0) && !runs(&plan, 1),
            "FIFO within the first queue"
        );
        apply(&mut snap, &plan);
        snap.jobs[0].observed.attained_gpu_s = attained_h * 3600.0;
        snap.jobs[0].observed.executed_s = attained_h / 4.0 * 3600.0;
        snap.now_s += attained_h / 4.0 * 3600.0;
        let plan = drover.schedule(&snap, &plan);
        assert_eq!(runs(&plan, 1), demoted, "{attained_h} GPU-hours");
        assert_eq!(runs(&plan, 0), !demoted, "{attained_h} GPU-hours");
    }
    // Job 1 has attained 1 GPU-hour (second queue), job 0 5 (third): job 1 runs first.
    for (first, second, one_runs) in [(5.0, 1.0, true), (1.0, 3.0, false)] {
        let mut snap = snapshot(1, 4, vec![job(0, 4, 0.0), job(1, 4, 10.0)]);
        let mut drover = build_policy("drover", None).unwrap();
        let plan = drover.schedule(&snap, &Plan::default());
        apply(&mut snap, &plan);
        snap.jobs[0].observed.attained_gpu_s = first * 3600.0;
        snap.jobs[0].observed.executed_s = first / 4.0 * 3600.0;
        snap.jobs[1].observed.attained_gpu_s = second * 3600.0;
        snap.jobs[1].observed.executed_s = second / 4.0 * 3600.0;
        snap.now_s += 60.0;
        let plan = drover.schedule(&snap, &plan);
        assert_eq!(runs(&plan, 1), one_runs, "{first} vs {second} GPU-hours");
        assert_eq!(runs(&plan, 0), !one_runs, "{first} vs {second} GPU-hours");
    }
}

/// A job missing from the snapshots for a while (on a live cluster: between its tasks' exit and its
/// return to the queue after a preemption, or while paused) keeps its LAS queue when it comes
/// back, also under a new leader that restored what was saved meanwhile; one missing for longer
/// than ten minutes comes back afresh, at the end of the first queue.
#[test]
fn a_job_briefly_missing_keeps_its_queue() {
    for (absent_s, kept) in [(5.0, true), (300.0, true), (601.0, false)] {
        let mut snap = snapshot(1, 4, vec![job(0, 4, 0.0), job(1, 4, 10.0)]);
        let mut drover = build_policy("drover", None).unwrap();
        let plan = drover.schedule(&snap, &Plan::default());
        apply(&mut snap, &plan);
        // Job 0 has attained an hour: second queue; job 1 takes the GPUs.
        snap.jobs[0].observed.attained_gpu_s = 3600.0;
        snap.jobs[0].observed.executed_s = 900.0;
        snap.now_s += 900.0;
        let plan = drover.schedule(&snap, &plan);
        assert!(runs(&plan, 1) && !runs(&plan, 0));
        apply(&mut snap, &plan);
        // Job 0 is not shown for `absent_s` (job 1 runs on, in the snapshots between).
        let missing = snap.jobs.remove(0);
        snap.now_s += 1.0;
        let plan = drover.schedule(&snap, &plan);
        snap.now_s += absent_s;
        let plan = drover.schedule(&snap, &plan);
        // What a new leader would restore now, while the job is missing.
        let mut restored = build_policy("drover", None).unwrap();
        restored.restore(&drover.save());
        // It comes back, job 1 has ended, job 2 arrives: one of them gets the node, with this
        // policy and with the restored one.
        snap.jobs = vec![missing, job(2, 4, snap.now_s)];
        snap.jobs[0].placement = None;
        for (policy, who) in [
            (&mut drover, "the same policy"),
            (&mut restored, "a new leader"),
        ] {
            let plan = policy.schedule(&snap, &plan);
            assert_eq!(runs(&plan, 2), kept, "missing {absent_s} s, {who}");
            assert_eq!(runs(&plan, 0), !kept, "missing {absent_s} s, {who}");
        }
    }
}

/// Parameter-server shards take no GPU, but they must not take the CPUs a free GPU's worker will need:
/// on three 4-GPU, 8-CPU nodes, a job whose 12 shards could fill an empty node leaves CPUs beside that
/// node's free GPUs, and a single-GPU job can still start there.
#[test]
fn ps_shards_leave_cpus_for_the_workers_of_free_gpus() {
    use drover_scheduler::cluster::uniform_cluster;
    use drover_scheduler::place::{FreeResources, Strategy};
    use drover_scheduler::snapshot::Shape;

    let mut snap = snapshot(3, 4, vec![job(0, 4, 0.0), job(1, 4, 1.0), job(2, 1, 2.0)]);
    snap.nodes = uniform_cluster(3, 4, 8, 32);
    snap.jobs[1].ps.max = 12;
    let mut free = FreeResources::with_running(&snap, |_, _| true);
    let shape = |workers, ps| Shape { workers, ps };
    let first = free
        .place(&snap.jobs[0], shape(4, 1), Strategy::Relaxed)
        .unwrap();
    let sharded = free
        .place(&snap.jobs[1], shape(4, 12), Strategy::Relaxed)
        .unwrap();
    assert_eq!(sharded.tasks.len(), 16);
    let single = free.place(&snap.jobs[2], shape(1, 1), Strategy::Relaxed);
    assert!(
        single.is_ok(),
        "{single:?}: the shards left no CPU beside the free GPUs ({first:?}, {sharded:?})"
    );
}

/// A job of 4-GPU workers on nodes of 2 waits `NeverFits`, and its tenant's other jobs (within its
/// maximum of 4 GPUs) start on the idle GPUs, under every policy. It used to hold its tenant's quota
/// and keep the tenant's other jobs waiting beside idle GPUs.
#[test]
fn a_job_no_node_can_hold_neither_counts_in_its_tenants_maximum_nor_blocks_its_jobs() {
    let mut big = job(1, 1, 0.0);
    big.gpus_per_worker = 4;
    let mut snapshot = snapshot(2, 2, vec![big, job(2, 1, 1.0), job(3, 1, 2.0)]);
    snapshot.tenants[0].guaranteed_gpus = 2;
    snapshot.tenants[0].max_gpus = Some(4);
    assert!(drover_scheduler::policy::never_fits(
        &snapshot,
        &snapshot.jobs[0]
    ));
    assert!(!drover_scheduler::policy::never_fits(
        &snapshot,
        &snapshot.jobs[1]
    ));
    for name in drover_scheduler::policy::policy_names() {
        let Ok(mut policy) = build_policy(name, None) else {
            continue;
        };
        let plan = policy.schedule(&snapshot, &Plan::default());
        assert_eq!(
            plan.jobs.get(&id(1)),
            Some(&JobPlan::Wait {
                reason: WaitReason::NeverFits
            }),
            "{name}"
        );
        for other in [2, 3] {
            assert!(
                matches!(plan.jobs.get(&id(other)), Some(JobPlan::Run { .. })),
                "{name}: {:?}",
                plan.jobs.get(&id(other))
            );
        }
        let arrival = policy.place_arrival(&snapshot, &snapshot.jobs[0]);
        assert_eq!(
            arrival,
            JobPlan::Wait {
                reason: WaitReason::NeverFits
            },
            "{name}"
        );
    }
}

/// A tensor-parallel job's groups never straddle nodes: 4 workers in groups of 2 on two 4-GPU nodes
/// with 3 GPUs free each go 2 + 2 (not 3 + 1, as they would without groups), ranks in order per node;
/// with only 3 + 1 free they wait; a shape that is not whole groups is refused. Every policy places
/// through the same placer, and the plan invariants reject a group apart.
#[test]
fn a_tensor_parallel_group_stays_on_one_node() {
    use drover_scheduler::NodeId;
    use drover_scheduler::place::{FreeResources, Strategy};
    use drover_scheduler::placement::{Placement, Role, TaskPlacement};
    use drover_scheduler::snapshot::Shape;

    // One GPU taken on each node by a running one-GPU job.
    let on = |node: u32| {
        Some(Placement {
            tasks: vec![TaskPlacement {
                role: Role::Worker,
                index: 0,
                node: NodeId(node),
                gpus: vec![0],
                cpus: 1,
                memory_gb: 0,
                packed: false,
            }],
        })
    };
    let mut snap = snapshot(2, 4, vec![job(0, 1, 0.0), job(1, 1, 0.0), job(2, 4, 1.0)]);
    snap.jobs[0].placement = on(0);
    snap.jobs[1].placement = on(1);
    snap.jobs[2].worker_unit = 2;
    snap.jobs[2].ps.min = 0;
    let four = Shape { workers: 4, ps: 0 };
    let mut free = FreeResources::with_running(&snap, |_, _| true);
    let grouped = free.place(&snap.jobs[2], four, Strategy::Relaxed).unwrap();
    let nodes: Vec<(u32, u32)> = grouped.tasks.iter().map(|t| (t.index, t.node.0)).collect();
    assert_eq!(nodes[0].1, nodes[1].1, "{nodes:?}");
    assert_eq!(nodes[2].1, nodes[3].1, "{nodes:?}");
    assert_ne!(nodes[0].1, nodes[2].1, "{nodes:?}");
    // Without groups the placer takes the fullest fit first: 3 on one node, 1 on the other.
    let mut ungrouped = snap.clone();
    ungrouped.jobs[2].worker_unit = 1;
    let mut free = FreeResources::with_running(&ungrouped, |_, _| true);
    let spread = free
        .place(&ungrouped.jobs[2], four, Strategy::Relaxed)
        .unwrap();
    let on_first = spread
        .tasks
        .iter()
        .filter(|t| t.node == spread.tasks[0].node)
        .count();
    assert_eq!(on_first, 3, "{spread:?}");
    // 1 + 3 free (a 2-worker shape of it took two of one node's three): four GPUs, no two groups.
    let mut free = FreeResources::with_running(&snap, |_, _| true);
    free.place(
        &snap.jobs[2],
        Shape { workers: 2, ps: 0 },
        Strategy::Relaxed,
    )
    .unwrap();
    assert!(
        free.place(&snap.jobs[2], four, Strategy::Relaxed).is_err(),
        "1 GPU free on one node and 3 on the other hold no two groups"
    );
    // Three workers are not whole groups of two.
    let mut free = FreeResources::with_running(&snap, |_, _| true);
    assert!(
        free.place(
            &snap.jobs[2],
            Shape { workers: 3, ps: 0 },
            Strategy::Relaxed
        )
        .is_err()
    );
    // Groups of 8 one-GPU workers on nodes of 4 GPUs can never run, and say why.
    let mut wide = snap.jobs[2].clone();
    wide.worker_unit = 8;
    wide.workers = drover_scheduler::snapshot::Range { min: 8, max: 8 };
    let why = drover_scheduler::policy::why_never_fits(&snap.nodes, &wide).unwrap_or_default();
    assert!(
        why.contains("a tensor-parallel group of 8 workers needs 8 GPUs"),
        "{why}"
    );
    assert_eq!(
        drover_scheduler::policy::why_never_fits(&snap.nodes, &snap.jobs[2]),
        None
    );
    // A plan that splits a group is a violation.
    let mut plan = Plan::default();
    let mut split = grouped.clone();
    split.tasks[1].node = split.tasks[2].node;
    plan.jobs.insert(
        snap.jobs[2].id,
        JobPlan::Run {
            placement: split,
            reason: RunReason::Started,
        },
    );
    let violation = invariants::check_placements(&snap, &plan);
    assert!(
        violation
            .as_ref()
            .is_err_and(|v| v.to_string().contains("tensor-parallel group")),
        "{violation:?}"
    );
}

/// The (stages, tensor, micro-batches) a job's speed model is fitted in; (0, 0, 0) for Optimus's form.
fn layout(view: &drover_scheduler::JobView) -> (u32, u32, u32) {
    match drover_scheduler::perf::Layout::of(view) {
        drover_scheduler::perf::Layout::Replicas {
            stages,
            tensor,
            micro_batches,
        } => (stages, tensor, micro_batches),
        drover_scheduler::perf::Layout::ParameterServers => (0, 0, 0),
    }
}

/// A model-parallel job's document gives the scheduler its replica size, tensor group and
/// micro-batches, hence its speed model's form: the example's 2 pipeline stages make replicas of 2
/// workers, groups of 1, in 4 micro-batches.
#[test]
fn a_model_parallel_documents_replicas_and_groups_reach_the_scheduler() {
    let yaml = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/charlm-pipeline.yaml"),
    )
    .unwrap();
    let mut job = drover_core::DroverJob::parse(&yaml, drover_core::spec::Format::Yaml).unwrap();
    let view = drover_scheduler::JobView::of_document(id(1), &job);
    assert_eq!((view.worker_step, view.worker_unit), (2, 1));
    assert_eq!(view.micro_batches, 4);
    assert_eq!(layout(&view), (2, 1, 4));
    job.spec.distributed.parallelism.tensor = 2;
    job.spec.resources.workers = drover_core::spec::TaskRange { min: 4, max: 8 };
    let view = drover_scheduler::JobView::of_document(id(1), &job);
    assert_eq!((view.worker_step, view.worker_unit), (4, 2));
    assert!(view.runs_at_workers(4) && view.runs_at_workers(8));
    assert!(!view.runs_at_workers(2) && !view.runs_at_workers(6));
    job.spec.distributed.parallelism.pipeline = None;
    job.spec.resources.workers = drover_core::spec::TaskRange { min: 2, max: 8 };
    let view = drover_scheduler::JobView::of_document(id(1), &job);
    assert_eq!(view.micro_batches, 1, "no pipeline");
    assert_eq!(layout(&view), (1, 2, 1), "tensor groups alone");
}

/// A job short of CPUs where GPUs are free says so, and a job its tenant's maximum holds back says
/// that, under every policy: a policy says only that jobs ahead took the room, and the plan's
/// leftovers name what was short (a queue of 1,400 jobs waiting for CPUs used to read "lower
/// priority" throughout).
#[test]
fn a_waiting_job_says_which_resource_it_lacks_under_every_policy() {
    use drover_scheduler::cluster::uniform_cluster;
    use std::collections::BTreeMap;

    // Two nodes of 4 GPUs and 8 CPUs; jobs 1 and 2 take 2 GPUs and 7 CPUs each, job 3 wants one
    // GPU and 5 CPUs: 4 GPUs stay free, 2 CPUs.
    let mut jobs: Vec<_> = (1..=3).map(|n| job(n, 2, n as f64)).collect();
    for job in &mut jobs {
        job.cpus_per_worker = 3;
    }
    jobs[2].workers = drover_scheduler::snapshot::Range { min: 1, max: 1 };
    jobs[2].preferred.workers = 1;
    jobs[2].cpus_per_worker = 4;
    let mut cpus = snapshot(2, 4, jobs);
    cpus.nodes = uniform_cluster(2, 4, 8, 32);
    // One tenant held to 2 GPUs: its second job waits for its maximum, though 6 GPUs are free.
    let mut limited = snapshot(2, 4, vec![job(1, 2, 1.0), job(2, 1, 2.0)]);
    limited.tenants[0].max_gpus = Some(2);
    let oracle = || {
        Box::new(FixedOracle(BTreeMap::from([
            (id(1), 100.0),
            (id(2), 200.0),
            (id(3), 300.0),
        ]))) as Box<dyn drover_scheduler::Oracle>
    };
    for name in drover_scheduler::policy::policy_names() {
        let mut policy = build_policy(name, Some(oracle())).unwrap();
        let plan = policy.schedule(&cpus, &Plan::default());
        let waiting: Vec<_> = (1..=3).filter(|&n| !runs(&plan, n)).collect();
        assert_eq!(waiting.len(), 1, "{name}: {plan:?}");
        // Whichever two a policy starts, the third is short of CPUs alone.
        assert_eq!(
            wait_reason(&plan, waiting[0]),
            Some(WaitReason::InsufficientCpus),
            "{name}: {plan:?}"
        );

        let mut policy = build_policy(name, Some(oracle())).unwrap();
        let plan = policy.schedule(&limited, &Plan::default());
        assert!(runs(&plan, 1), "{name}: {plan:?}");
        assert_eq!(
            wait_reason(&plan, 2),
            Some(WaitReason::TenantLimit),
            "{name}"
        );
    }
}
