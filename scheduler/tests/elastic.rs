//! Optimus and Drover's policy: elastic shapes, packing, quotas and priorities.

mod common;
mod drover_rounds;

use common::{FixedOracle, apply, id, job, snapshot};
use drover_scheduler::plan::{JobPlan, RunReason};
use drover_scheduler::snapshot::{Range, Tenant};
use drover_scheduler::{Plan, build_policy, invariants};

fn elastic(n: u128, max_workers: u32, submit: f64) -> drover_scheduler::JobView {
    let mut j = job(n, 1, submit);
    j.workers = Range {
        min: 1,
        max: max_workers,
    };
    j.ps = Range { min: 1, max: 2 };
    j
}

#[test]
fn optimus_grows_a_lone_elastic_job_onto_idle_gpus_and_shares_when_busy() {
    let snap = snapshot(1, 8, vec![elastic(0, 4, 0.0)]);
    for name in ["optimus", "drover"] {
        let plan = build_policy(name, None)
            .unwrap()
            .schedule(&snap, &Plan::default());
        let shape = plan.placement(id(0)).unwrap().shape();
        // Under the prior, 3 workers with 2 PS shards is the fastest shape (a fourth worker costs more
        // in PS traffic than it saves in compute).
        assert_eq!(
            shape,
            drover_scheduler::Shape { ps: 2, workers: 3 },
            "{name}"
        );
        invariants::check(&snap, &plan).unwrap();
    }
    // Four elastic jobs on four GPUs: everyone runs at one worker rather than one job at four.
    let snap = snapshot(1, 4, (0..4).map(|i| elastic(i, 4, i as f64)).collect());
    let plan = build_policy("optimus", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    for i in 0..4 {
        assert_eq!(plan.placement(id(i)).unwrap().shape().workers, 1);
    }
}

#[test]
fn optimus_oracle_needs_and_uses_the_truth() {
    assert!(build_policy("optimus-oracle", None).is_err());
    let snap = snapshot(1, 2, vec![elastic(0, 2, 0.0), elastic(1, 2, 1.0)]);
    let oracle = FixedOracle([(id(0), 10.0), (id(1), 1e6)].into());
    let plan = build_policy("optimus-oracle", Some(Box::new(oracle)))
        .unwrap()
        .schedule(&snap, &Plan::default());
    invariants::check(&snap, &plan).unwrap();
    assert!(plan.placement(id(0)).is_some() && plan.placement(id(1)).is_some());
}

#[test]
fn drover_packs_waiting_jobs_when_memory_fits() {
    // One 32 GB GPU: two 8 GB jobs share it, marked packed.
    let snap = snapshot(1, 1, vec![job(0, 1, 0.0), job(1, 1, 1.0)]);
    let mut drover = build_policy("drover", None).unwrap();
    let plan = drover.schedule(&snap, &Plan::default());
    invariants::check(&snap, &plan).unwrap();
    assert!(matches!(
        plan.jobs[&id(1)],
        JobPlan::Run {
            reason: RunReason::Packed,
            ..
        }
    ));
    assert!(
        plan.placement(id(0))
            .unwrap()
            .tasks
            .iter()
            .any(|t| t.packed)
    );
    // 24 + 16 GB does not fit a 32 GB GPU: the second job waits.
    let mut big = snapshot(1, 1, vec![job(0, 1, 0.0), job(1, 1, 1.0)]);
    big.jobs[0].gpu_memory_gb = Some(24.0);
    big.jobs[1].gpu_memory_gb = Some(16.0);
    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&big, &Plan::default());
    assert!(plan.placement(id(1)).is_none());
    // A packed pair stays packed in the next round.
    let mut snap = snap;
    let first = drover.schedule(&snap, &Plan::default());
    apply(&mut snap, &first);
    let again = drover.schedule(&snap, &Plan::default());
    assert!(
        again.changes(&snap).is_empty(),
        "{:?}",
        again.changes(&snap)
    );
}

#[test]
fn drover_honours_guaranteed_shares_and_priorities() {
    // Tenant a (guaranteed 2 of 4 GPUs) queued four 1-GPU jobs before tenant b (guaranteed 2) queued two.
    let mut jobs: Vec<_> = (0..4).map(|i| job(i, 1, i as f64)).collect();
    for i in 4..6 {
        let mut j = job(i, 1, 10.0 + i as f64);
        j.tenant = 1;
        jobs.push(j);
    }
    for j in &mut jobs {
        j.gpu_memory_gb = Some(24.0); // no packing
    }
    let mut snap = snapshot(1, 4, jobs);
    snap.tenants = vec![
        Tenant {
            name: "a".into(),
            guaranteed_gpus: 2,
            max_gpus: None,
            flavours: Vec::new(),
        },
        Tenant {
            name: "b".into(),
            guaranteed_gpus: 2,
            max_gpus: None,
            flavours: Vec::new(),
        },
    ];
    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    let running: Vec<u128> = (0..6)
        .filter(|&i| plan.placement(id(i)).is_some())
        .collect();
    assert_eq!(running, vec![0, 1, 4, 5], "each tenant gets its guarantee");
    // Tenant b leaves nothing queued: its idle share is lent to a.
    snap.jobs.truncate(4);
    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    assert_eq!(
        (0..4).filter(|&i| plan.placement(id(i)).is_some()).count(),
        4
    );
    // A higher-priority arrival preempts.
    apply(&mut snap, &plan);
    let mut urgent = job(9, 1, 100.0);
    urgent.priority = 10;
    urgent.gpu_memory_gb = Some(24.0);
    snap.jobs.push(urgent);
    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    assert!(plan.placement(id(9)).is_some());
    invariants::check(&snap, &plan).unwrap();
}

/// One 8-GPU node; tenants a and b are guaranteed 4 GPUs each. Tenant a's elastic job (1 to 8
/// workers) asks for `a_workers`; tenant b queued seven 1-GPU jobs too large to pack.
fn a_against_seven_of_b(a_workers: u32) -> drover_scheduler::ClusterSnapshot {
    let mut a = elastic(0, 8, 0.0);
    a.preferred = drover_scheduler::Shape {
        ps: 1,
        workers: a_workers,
    };
    let mut jobs = vec![a];
    for i in 1..8 {
        let mut j = job(i, 1, i as f64);
        j.tenant = 1;
        j.gpu_memory_gb = Some(24.0); // no packing
        jobs.push(j);
    }
    let mut snap = snapshot(1, 8, jobs);
    for tenant in &mut snap.tenants {
        tenant.guaranteed_gpus = 4;
    }
    snap
}

#[test]
fn drover_runs_a_light_tenants_jobs_at_the_shapes_they_asked_for() {
    // 8 GPUs; tenants a and b are guaranteed 4 each. Tenant a's elastic job asks for 4 workers (it
    // may run at 1 to 8); tenant b queued seven 1-GPU jobs, more than its guarantee.
    let cluster = a_against_seven_of_b;
    let b_running = |plan: &Plan| (1..8).filter(|&i| plan.placement(id(i)).is_some()).count();
    // One round of `policy` with a's job asking for `a_workers`: the plan, and a's workers in it.
    let round = |policy: &str, a_workers: u32| {
        let snap = cluster(a_workers);
        let plan = build_policy(policy, None)
            .unwrap()
            .schedule(&snap, &Plan::default());
        invariants::check(&snap, &plan).unwrap();
        let workers = plan.placement(id(0)).map(|p| p.shape().workers);
        (plan, workers)
    };
    // Tenant a asks for no more than its guarantee: its job runs at the 4 workers it asked for, and
    // b borrows nothing from a's share (growth alone would leave a at 1 worker and b on 7 GPUs).
    let (plan, a) = round("drover", 4);
    assert_eq!(a, Some(4));
    assert_eq!(b_running(&plan), 4);
    // Asking for more than its guarantee, it is a borrower like b's jobs: it starts at its smallest.
    let (plan, a) = round("drover", 6);
    assert_eq!(a, Some(1));
    assert_eq!(b_running(&plan), 7);
    // Without quotas, neither is owed anything.
    assert_eq!(round("drover-no-quotas", 4).1, Some(1));

    // A light tenant's single-GPU job shares its GPU with no one: b's waiting jobs, which would
    // pack next to it, pack next to each other only.
    let mut jobs = vec![job(0, 1, 0.0)];
    for i in 1..10 {
        let mut j = job(i, 1, i as f64);
        j.tenant = 1;
        jobs.push(j);
    }
    let mut snap = snapshot(1, 8, jobs);
    snap.tenants[0].guaranteed_gpus = 1;
    snap.tenants[1].guaranteed_gpus = 7;
    let mut drover = build_policy("drover", None).unwrap();
    let first = drover.schedule(&snap, &Plan::default());
    apply(&mut snap, &first);
    let plan = drover.schedule(&snap, &first);
    let a_gpu = plan.placement(id(0)).unwrap().tasks[0].clone();
    assert!(!a_gpu.packed);
    for i in 1..10 {
        if let Some(p) = plan.placement(id(i)) {
            assert!(
                !p.tasks
                    .iter()
                    .any(|t| t.node == a_gpu.node && t.gpus == a_gpu.gpus),
                "job {i} shares tenant a's GPU"
            );
        }
    }
    assert!(
        (1..10).any(|i| plan
            .placement(id(i))
            .is_some_and(|p| p.tasks.iter().any(|t| t.packed))),
        "b's jobs still pack"
    );
    invariants::check(&snap, &plan).unwrap();
}

#[test]
fn gandiva_time_slices_packs_with_introspection_and_grows_onto_idle_gpus() {
    use drover_scheduler::plan::WaitReason;
    use drover_scheduler::snapshot::StepStats;
    // One GPU, two jobs too big to pack: the one past its slice is suspended for the waiting one.
    let mut snap = snapshot(1, 1, vec![job(0, 1, 0.0), job(1, 1, 1.0)]);
    for j in &mut snap.jobs {
        j.gpu_memory_gb = Some(24.0);
    }
    let mut gandiva = build_policy("gandiva", None).unwrap();
    let first = gandiva.schedule(&snap, &Plan::default());
    apply(&mut snap, &first);
    assert!(snap.jobs[0].placement.is_some() && snap.jobs[1].placement.is_none());
    snap.jobs[0].observed.last_state_change_s = snap.now_s;
    snap.jobs[1].observed.last_state_change_s = snap.now_s;
    snap.now_s += 100.0;
    let within_slice = gandiva.schedule(&snap, &first);
    assert!(
        within_slice.placement(id(0)).is_some(),
        "within its slice it keeps running"
    );
    snap.now_s += 1000.0;
    let rotated = gandiva.schedule(&snap, &within_slice);
    assert!(rotated.placement(id(1)).is_some());
    assert_eq!(
        rotated.jobs[&id(0)],
        JobPlan::Wait {
            reason: WaitReason::Suspended
        }
    );
    invariants::check(&snap, &rotated).unwrap();

    // Two small jobs share the GPU; once observed to crawl when shared, they are separated.
    let mut small = snapshot(1, 1, vec![job(0, 1, 0.0), job(1, 1, 1.0)]);
    let mut gandiva = build_policy("gandiva", None).unwrap();
    let packed = gandiva.schedule(&small, &Plan::default());
    assert!(
        packed
            .placement(id(1))
            .is_some_and(|p| p.tasks.iter().any(|t| t.packed))
    );
    apply(&mut small, &packed);
    let shape = drover_scheduler::Shape { ps: 1, workers: 1 };
    small.jobs[1].observed.step_stats = vec![
        StepStats {
            shape,
            shared: false,
            spread_samples: 0,
            spread_mean_step_s: 0.0,
            samples: 5,
            mean_step_s: 1.0,
            gpu: Default::default(),
        },
        StepStats {
            shape,
            shared: true,
            spread_samples: 0,
            spread_mean_step_s: 0.0,
            samples: 5,
            mean_step_s: 3.0,
            gpu: Default::default(),
        },
    ];
    let undone = gandiva.schedule(&small, &packed);
    assert!(
        undone.placement(id(1)).is_none(),
        "a packing that does not pay is undone"
    );
    invariants::check(&small, &undone).unwrap();

    // Nobody waits: an elastic job grows onto idle GPUs.
    let mut idle = snapshot(1, 8, vec![elastic(0, 4, 0.0)]);
    let mut gandiva = build_policy("gandiva", None).unwrap();
    let started = gandiva.schedule(&idle, &Plan::default());
    apply(&mut idle, &started);
    let grown = gandiva.schedule(&idle, &started);
    assert_eq!(grown.placement(id(0)).unwrap().shape().workers, 2);
    invariants::check(&idle, &grown).unwrap();
}

#[test]
fn preemption_picks_the_cheapest_victim_and_spares_non_preemptible_jobs() {
    use drover_scheduler::plan::WaitReason;
    // Two GPUs, two low-priority jobs running; a high-priority job arrives needing one GPU.
    let mut snap = snapshot(1, 2, vec![job(0, 1, 0.0), job(1, 1, 1.0)]);
    for j in &mut snap.jobs {
        j.gpu_memory_gb = Some(24.0);
    }
    let first = build_policy("fifo", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    apply(&mut snap, &first);
    // Job 0 checkpointed 10 s ago (killing it loses 10 s); job 1 an hour ago (it must checkpoint first).
    snap.jobs[0].observed.last_checkpoint_s = Some(snap.now_s - 10.0);
    snap.jobs[1].observed.last_checkpoint_s = Some(snap.now_s - 3600.0);
    let mut urgent = job(2, 1, 50.0);
    urgent.priority = 5;
    urgent.gpu_memory_gb = Some(24.0);
    snap.jobs.push(urgent);
    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    assert!(plan.placement(id(2)).is_some());
    assert!(
        plan.placement(id(1)).is_some(),
        "the costlier victim keeps running"
    );
    assert_eq!(
        plan.jobs[&id(0)],
        JobPlan::Wait {
            reason: WaitReason::PreemptedWithoutCheckpoint
        }
    );
    // Make job 0 non-preemptible: job 1 yields instead, after a checkpoint.
    snap.jobs[0].preemptible = false;
    for name in ["drover", "tiresias"] {
        let plan = build_policy(name, None)
            .unwrap()
            .schedule(&snap, &Plan::default());
        assert!(
            plan.placement(id(0)).is_some(),
            "{name} must not preempt a non-preemptible job"
        );
        invariants::check(&snap, &plan).unwrap();
    }
}

#[test]
fn a_tenant_never_holds_more_than_its_maximum() {
    let mut snap = snapshot(1, 8, (0..4).map(|i| elastic(i, 4, i as f64)).collect());
    snap.tenants[0].max_gpus = Some(3);
    for name in ["optimus", "drover"] {
        let plan = build_policy(name, None)
            .unwrap()
            .schedule(&snap, &Plan::default());
        let gpus: u32 = (0..4)
            .filter_map(|i| plan.placement(id(i)))
            .map(|p| p.num_gpus())
            .sum();
        assert!(
            gpus <= 3,
            "{name}: tenant holds {gpus} GPUs over its maximum of 3"
        );
        assert!(gpus > 0);
        invariants::check(&snap, &plan).unwrap();
    }
}

#[test]
fn drover_takes_a_job_back_to_a_shape_it_measured_faster() {
    use drover_scheduler::Shape;
    use drover_scheduler::snapshot::StepStats;
    let mut snap = snapshot(1, 8, vec![elastic(0, 2, 0.0)]);
    let mut policy = build_policy("drover", None).unwrap();
    // The prior says two workers are faster than one: the job grows onto the idle GPUs.
    let plan = policy.schedule(&snap, &Plan::default());
    apply(&mut snap, &plan);
    let grown = plan.placement(id(0)).unwrap().shape();
    assert_eq!(grown.workers, 2, "{grown:?}");
    // Measured, it is the other way round (VGG-16 on the measured surfaces): one worker 1.0 s a step,
    // two 1.5 s. The measurement wins over the model and the job goes back.
    let one = Shape {
        workers: 1,
        ..grown
    };
    let stats = |shape, mean_step_s| StepStats {
        shape,
        shared: false,
        spread_samples: 0,
        spread_mean_step_s: 0.0,
        samples: 10,
        mean_step_s,
        gpu: Default::default(),
    };
    snap.jobs[0].observed.step_stats = vec![stats(one, 1.0), stats(grown, 1.5)];
    snap.jobs[0].observed.executed_s = 3600.0;
    snap.now_s += 3600.0;
    let plan = policy.schedule(&snap, &plan);
    assert_eq!(plan.placement(id(0)).unwrap().shape(), one);
    invariants::check(&snap, &plan).unwrap();
    // Measured faster at two workers instead, it keeps them.
    snap.jobs[0].observed.step_stats = vec![stats(one, 1.5), stats(grown, 1.0)];
    let plan = policy.schedule(&snap, &plan);
    assert_eq!(plan.placement(id(0)).unwrap().shape(), grown);
}
