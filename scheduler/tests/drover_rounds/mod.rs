//! Drover's policy round by round on small clusters: resizing a job up to its guarantee only when
//! it pays back, making room on one node for a consolidated job, preempting only for GPUs someone
//! takes, lending spare GPUs max-min fairly, an arrival's extra PS shard, a guaranteed job's shape at
//! its arrival and in the round, and the CPUs beside a free GPU.

use super::*;

/// A job within its tenant's guarantee that runs below the shape it asked for is resized up to it
/// only once the resize pays back: not seconds after it started (a short job would lose a minute to
/// the resize), but after it has run long enough that the remaining time at one worker is worth it.
#[test]
fn drover_resizes_a_job_up_to_its_guarantee_only_when_it_pays_back() {
    use drover_scheduler::Shape;
    let mut snap = a_against_seven_of_b(6);
    // Asking for more than its guarantee, a's job starts at one worker and b's jobs take the rest.
    let mut drover = build_policy("drover", None).unwrap();
    let first = drover.schedule(&snap, &Plan::default());
    assert_eq!(first.placement(id(0)).unwrap().shape().workers, 1);
    apply(&mut snap, &first);
    // It now asks for 4 workers, within the guarantee, having run for `run_s`.
    let round = |run_s: f64| {
        let mut snap = snap.clone();
        snap.jobs[0].preferred = Shape { ps: 1, workers: 4 };
        snap.jobs[0].observed.executed_s = run_s;
        snap.now_s += run_s;
        let mut drover = build_policy("drover", None).unwrap();
        drover.schedule(&snap, &Plan::default());
        let plan = drover.schedule(&snap, &first);
        invariants::check(&snap, &plan).unwrap();
        plan.placement(id(0)).unwrap().shape()
    };
    assert_eq!(round(5.0).workers, 1, "resized 5 s into its run");
    // After an hour it is resized up, within its 4 GPUs, to the fastest shape it could have there:
    // growth a task at a time adds a 4th worker and a 2nd PS, but under the prior 3 workers with 2
    // PS are faster than 4 with 2.
    assert_eq!(
        round(3600.0),
        Shape { ps: 2, workers: 3 },
        "held below its guarantee after an hour"
    );
}

/// An admitted job that must sit on one node (a high-skew model) is not left waiting because the
/// free GPUs are one per node: a borrower grown over both nodes gives a worker back on one of them.
#[test]
fn drover_makes_room_on_one_node_for_a_consolidated_job() {
    use drover_scheduler::plan::{Placement, Role, TaskPlacement};
    use drover_scheduler::{NodeId, Shape};
    // Two 4-GPU nodes. Tenant b's elastic job runs 6 workers, 3 on each node; tenant a's 2-GPU
    // job must be consolidated. Each tenant is guaranteed 4 GPUs.
    let mut grown = elastic(0, 8, 0.0);
    grown.tenant = 1;
    let task = |role, index, node, gpus: Vec<u16>| TaskPlacement {
        role,
        index,
        node: NodeId(node),
        gpus,
        cpus: 1,
        memory_gb: 0,
        packed: false,
    };
    let mut tasks: Vec<TaskPlacement> = (0..6)
        .map(|w| task(Role::Worker, w, w / 3, vec![(w % 3) as u16]))
        .collect();
    tasks.push(task(Role::Ps, 0, 0, vec![]));
    grown.placement = Some(Placement { tasks });
    grown.preferred = Shape { ps: 1, workers: 6 };
    let mut skewed = job(1, 2, 10.0);
    skewed.consolidate = true;
    let mut snap = snapshot(2, 4, vec![grown, skewed]);
    for tenant in &mut snap.tenants {
        tenant.guaranteed_gpus = 4;
    }
    let plan = checked_drover_round(&snap);
    let placed = plan.placement(id(1)).expect("the consolidated job waits");
    assert_eq!(placed.worker_nodes().len(), 1);
    assert_eq!(plan.placement(id(0)).unwrap().shape().workers, 5);
}

/// One round of a fresh `drover` policy on `snap`, checked against the invariants.
fn checked_drover_round(snap: &drover_scheduler::ClusterSnapshot) -> Plan {
    let plan = build_policy("drover", None)
        .expect("drover is a policy")
        .schedule(snap, &Plan::default());
    if let Err(violation) = invariants::check(snap, &plan) {
        panic!("the plan breaks an invariant: {violation:?}");
    }
    plan
}

/// Tenant b's 1-GPU job `k`, running (unpackable) on `node`'s GPU `gpu` with its PS beside it.
fn running_1_gpu(k: u128, node: u32, gpu: u16) -> drover_scheduler::JobView {
    use drover_scheduler::NodeId;
    use drover_scheduler::plan::{Placement, Role, TaskPlacement};
    let mut j = job(k, 1, k as f64);
    j.tenant = 1;
    j.gpu_memory_gb = Some(24.0); // no packing
    let task = |role, gpus: Vec<u16>| TaskPlacement {
        role,
        index: 0,
        node: NodeId(node),
        gpus,
        cpus: 1,
        memory_gb: 0,
        packed: false,
    };
    j.placement = Some(Placement {
        tasks: vec![task(Role::Worker, vec![gpu]), task(Role::Ps, vec![])],
    });
    j
}

/// A consolidated job ahead in the order is not left waiting because no later job is grown: the
/// later jobs on the node where the fewest must go are preempted for it, as for any job ahead of them.
#[test]
fn drover_preempts_later_jobs_on_one_node_for_a_consolidated_job() {
    // Two 4-GPU nodes. Tenant b (guaranteed 2) runs four 1-GPU jobs: 1 and 2, within its
    // guarantee, on node 0; 3 and 4, borrowing, on node 1. Tenant a's 4-GPU job (guaranteed 4)
    // must sit on one node; each node has 2 free GPUs.
    let mut jobs = vec![
        running_1_gpu(1, 0, 0),
        running_1_gpu(2, 0, 1),
        running_1_gpu(3, 1, 0),
        running_1_gpu(4, 1, 1),
    ];
    let mut skewed = job(0, 4, 10.0);
    skewed.consolidate = true;
    skewed.gpu_memory_gb = Some(24.0);
    jobs.push(skewed);
    let mut snap = snapshot(2, 4, jobs);
    snap.tenants[0].guaranteed_gpus = 4;
    snap.tenants[1].guaranteed_gpus = 2;
    let plan = checked_drover_round(&snap);
    let placed = plan.placement(id(0)).expect("the consolidated job waits");
    assert_eq!(placed.worker_nodes().len(), 1);
    let running: Vec<u128> = (1..=4)
        .filter(|&k| plan.placement(id(k)).is_some())
        .collect();
    assert_eq!(running, vec![1, 2], "b's borrowers on node 1 make room");
}

/// Running jobs the allocation leaves out, because a job ahead of them was counted in but could not
/// be placed, keep running: preempting them frees GPUs that no one takes. (The jobs started 10 s
/// ago, so compaction may not move them either.)
#[test]
fn drover_preempts_no_job_for_gpus_no_one_takes() {
    use drover_scheduler::plan::{JobPlan, WaitReason};
    // Two 4-GPU nodes. Tenant b's six 1-GPU jobs run three on each node (jobs 5 and 6, last in
    // LAS order, on GPU 2 of each); tenants a and b are guaranteed 4 GPUs each. Tenant a's 4-GPU
    // job must sit on one node: counted in, it takes b's two borrowers' GPUs, but with one free GPU
    // on each node it cannot be placed.
    let mut jobs: Vec<_> = (1..=6u128)
        .map(|k| running_1_gpu(k, ((k - 1) % 2) as u32, ((k - 1) / 2) as u16))
        .collect();
    let mut skewed = job(0, 4, 10.0);
    skewed.consolidate = true;
    skewed.gpu_memory_gb = Some(24.0);
    jobs.push(skewed);
    let mut snap = snapshot(2, 4, jobs);
    for tenant in &mut snap.tenants {
        tenant.guaranteed_gpus = 4;
    }
    for job in &mut snap.jobs[..6] {
        job.observed.last_state_change_s = snap.now_s - 10.0;
    }
    let plan = checked_drover_round(&snap);
    assert!(matches!(
        plan.jobs.get(&id(0)),
        Some(JobPlan::Wait {
            reason: WaitReason::Fragmented
        })
    ));
    for k in 1..=6 {
        assert_eq!(
            plan.placement(id(k)),
            snap.jobs[k as usize - 1].placement.as_ref(),
            "job {k} is preempted for nothing"
        );
    }
}

/// A fragmented cluster is compacted for a job whose one worker needs a whole node: the job in the
/// way moves to the GPU free on the other node (keeping its shape; no job is preempted), and the
/// waiting job runs on the node it left. Jobs that started moments ago are not moved.
#[test]
fn drover_compacts_a_fragmented_cluster_for_a_job_that_needs_a_whole_node() {
    use drover_scheduler::plan::{JobPlan, WaitReason};
    // Two 2-GPU nodes, each with one of tenant b's 1-GPU jobs; both tenants are guaranteed 2 GPUs
    // and b's jobs are ahead of a's in the order (they came first). a's job: one worker of 2 GPUs.
    let mut whole = job(0, 1, 900.0);
    whole.gpus_per_worker = 2;
    whole.gpu_memory_gb = Some(24.0);
    let mut snap = snapshot(
        2,
        2,
        vec![running_1_gpu(1, 0, 0), running_1_gpu(2, 1, 1), whole],
    );
    for tenant in &mut snap.tenants {
        tenant.guaranteed_gpus = 2;
    }
    let plan = checked_drover_round(&snap);
    let placed = plan.placement(id(0)).expect("the 2-GPU job waits");
    assert_eq!(placed.worker_nodes().len(), 1);
    let node = placed.worker_nodes()[0];
    let (stayed, moved): (Vec<u128>, Vec<u128>) = (1..=2u128)
        .partition(|&k| plan.placement(id(k)) == snap.jobs[k as usize - 1].placement.as_ref());
    assert_eq!((stayed.len(), moved.len()), (1, 1), "one job moves");
    let moved_to = plan.placement(id(moved[0])).expect("the moved job runs");
    assert_eq!(
        moved_to.shape(),
        snap.jobs[moved[0] as usize - 1]
            .placement
            .as_ref()
            .unwrap()
            .shape()
    );
    assert!(
        moved_to.worker_nodes().iter().all(|&n| n != node),
        "moved off the node the 2-GPU job takes"
    );

    // The same, the 1-GPU jobs having started 10 s ago: nothing moves and the job waits.
    for job in &mut snap.jobs[..2] {
        job.observed.last_state_change_s = snap.now_s - 10.0;
    }
    let plan = checked_drover_round(&snap);
    assert!(matches!(
        plan.jobs.get(&id(0)),
        Some(JobPlan::Wait {
            reason: WaitReason::Fragmented
        })
    ));
    for k in 1..=2u128 {
        assert_eq!(
            plan.placement(id(k)),
            snap.jobs[k as usize - 1].placement.as_ref()
        );
    }
}

/// What a tenant's guarantee leaves unused is lent max-min fairly: a tenant that queued a backlog of
/// borrowers first does not take all of it before another tenant's borrower gets any.
#[test]
fn drover_lends_spare_gpus_to_the_tenant_that_borrows_least() {
    // One 8-GPU node; tenants a and b are guaranteed 2 GPUs each, tenant c 4 and idle. Tenant a
    // queued six 1-GPU jobs, then b three: each has two within its guarantee, and c's 4 GPUs are lent.
    let mut jobs = Vec::new();
    for k in 0..9u128 {
        let mut j = job(k, 1, k as f64);
        j.tenant = if k < 6 { 0 } else { 1 };
        j.gpu_memory_gb = Some(24.0); // no packing
        jobs.push(j);
    }
    let mut snap = snapshot(1, 8, jobs);
    snap.tenants.push(Tenant {
        name: "c".into(),
        guaranteed_gpus: 4,
        max_gpus: None,
        flavours: Vec::new(),
    });
    for (tenant, gpus) in snap.tenants.iter_mut().zip([2, 2, 4]) {
        tenant.guaranteed_gpus = gpus;
    }
    let plan = checked_drover_round(&snap);
    let running =
        |jobs: std::ops::Range<u128>| jobs.filter(|&k| plan.placement(id(k)).is_some()).count();
    // In LAS order a's four borrowers would take all four; max-min, a borrows 3 and b 1.
    assert_eq!((running(0..6), running(6..9)), (5, 3));
}

/// A PS shard costs an arriving job CPUs only: the GPUs owed to jobs already waiting do not keep it
/// at one shard.
#[test]
fn drover_gives_an_arrival_its_extra_ps_shard_while_others_wait_for_gpus() {
    use drover_scheduler::plan::JobPlan;
    // One 2-GPU node: a waiting 2-GPU job is owed both GPUs, yet the arrival runs (drover starts an
    // arrival whenever it fits); with 62 CPUs free its extra shard is only a question of CPUs.
    let mut arriving = elastic(1, 1, 10.0);
    arriving.ps = Range { min: 1, max: 2 };
    let snap = snapshot(1, 2, vec![job(0, 2, 0.0), arriving]);
    let mut drover = build_policy("drover", None).unwrap();
    let JobPlan::Run { placement, .. } = drover.place_arrival(&snap, &snap.jobs[1]) else {
        panic!("the arrival waits");
    };
    assert_eq!(placement.shape().ps, 2);
}

/// A borrower's priority does not take GPUs within another tenant's guarantee: tenant a (guaranteed
/// nothing, at most 2 GPUs) submits a 1-GPU job at priority 1000 while tenant b runs four 1-GPU jobs
/// within its guarantee of 4 on the cluster's 4 GPUs. a's job waits, and no job of b's is preempted,
/// round after round (it had preempted one of b's jobs, then lost the GPU back, for ever).
#[test]
fn a_borrowers_priority_does_not_preempt_another_tenants_guarantee() {
    let mut b_jobs: Vec<_> = (0..4)
        .map(|i| {
            let mut j = job(i, 1, i as f64);
            j.tenant = 1;
            j.gpu_memory_gb = Some(24.0);
            j
        })
        .collect();
    for j in &mut b_jobs {
        j.observed.last_state_change_s = 0.0;
    }
    let mut snap = snapshot(1, 4, b_jobs);
    snap.tenants = vec![
        Tenant {
            name: "a".into(),
            guaranteed_gpus: 0,
            max_gpus: Some(2),
            flavours: Vec::new(),
        },
        Tenant {
            name: "b".into(),
            guaranteed_gpus: 4,
            max_gpus: None,
            flavours: Vec::new(),
        },
    ];
    let mut drover = build_policy("drover", None).unwrap();
    let mut previous = drover.schedule(&snap, &Plan::default());
    apply(&mut snap, &previous);
    let mut urgent = job(9, 1, 100.0);
    urgent.priority = 1000;
    urgent.gpu_memory_gb = Some(24.0);
    snap.jobs.push(urgent);
    for round in 0..5 {
        snap.now_s += 10.0;
        let plan = drover.schedule(&snap, &previous);
        invariants::check(&snap, &plan).unwrap();
        assert!(
            plan.placement(id(9)).is_none(),
            "round {round}: the borrower took a guaranteed GPU"
        );
        for i in 0..4 {
            assert_eq!(
                plan.placement(id(i)),
                previous.placement(id(i)),
                "round {round}: b's job {i} moved"
            );
        }
        apply(&mut snap, &plan);
        previous = plan;
    }
}

/// A job of no GPU takes its tenant's guarantee too, by its CPUs: tenant a (no guarantee) runs
/// CPU-only jobs that hold every CPU of the cluster, and tenant b's 1-GPU job, within b's guarantee
/// of 4, starts beside them (one of a's jobs makes room). A job without GPUs used to count as within
/// any tenant's guarantee: a's jobs went first and were never preempted, and b's job waited beside
/// idle GPUs (70 s on a live cluster).
#[test]
fn cpu_only_jobs_borrow_and_give_way_to_another_tenants_guarantee() {
    let cpu_job = |n: u128| {
        let mut j = job(n, 1, n as f64);
        j.gpus_per_worker = 0;
        j.gpu_memory_gb = None;
        j.cpus_per_worker = 16;
        j.ps = Range { min: 0, max: 0 };
        j.preferred.ps = 0;
        j
    };
    // Two nodes of 4 GPUs and 64 CPUs: eight 16-CPU jobs take all 128.
    let mut jobs: Vec<_> = (0..8).map(cpu_job).collect();
    let mut guaranteed = job(8, 1, 100.0);
    guaranteed.tenant = 1;
    guaranteed.ps = Range { min: 0, max: 0 };
    guaranteed.preferred.ps = 0;
    jobs.push(guaranteed);
    let mut snap = snapshot(2, 4, jobs);
    snap.tenants[1].guaranteed_gpus = 4;
    // a's jobs ran first, alone.
    let mut drover = build_policy("drover", None).unwrap();
    let only_a = drover_scheduler::ClusterSnapshot {
        jobs: snap.jobs[..8].to_vec(),
        ..snap.clone()
    };
    let first = drover.schedule(&only_a, &Plan::default());
    for i in 0..8 {
        assert!(first.placement(id(i)).is_some(), "a's job {i} runs");
    }
    apply(&mut snap, &first);
    let plan = drover.schedule(&snap, &first);
    invariants::check(&snap, &plan).unwrap();
    assert!(
        plan.placement(id(8)).is_some(),
        "b's guaranteed job waits: {:?}",
        plan.jobs.get(&id(8))
    );
}

/// Host memory is scheduled: two 1-GPU jobs of tasks that need 20 GB each on one node of 4 GPUs
/// and 32 GB: one runs, the other waits for memory (beside 3 free GPUs), under every policy.
#[test]
fn host_memory_is_a_resource_every_policy_respects() {
    let hungry = |n: u128| {
        let mut j = job(n, 1, n as f64);
        j.ps = Range { min: 0, max: 0 };
        j.preferred.ps = 0;
        j.memory_gb_per_task = 20;
        j
    };
    let mut snap = snapshot(1, 4, vec![hungry(0), hungry(1)]);
    snap.nodes[0].memory_gb = 32;
    for name in drover_scheduler::policy::policy_names() {
        let Ok(mut policy) = build_policy(name, None) else {
            continue;
        };
        let plan = policy.schedule(&snap, &Plan::default());
        invariants::check(&snap, &plan).unwrap();
        let running = (0..2).filter(|&i| plan.placement(id(i)).is_some()).count();
        assert_eq!(running, 1, "{name}: {:?}", plan.jobs);
        let waiting = (0..2).find(|&i| plan.placement(id(i)).is_none()).unwrap();
        assert!(
            matches!(plan.jobs.get(&id(waiting)), Some(JobPlan::Wait { .. })),
            "{name}"
        );
    }
}

/// Tenant b's seven 1-GPU jobs on the 8-GPU node, three of them borrowing from a's guarantee of 4,
/// and a's elastic job (1-8 workers) arriving with `asked` workers.
fn a_arrives_against_seven_of_b(asked: u32) -> drover_scheduler::ClusterSnapshot {
    let mut jobs: Vec<_> = (1..8u128)
        .map(|k| {
            let mut j = job(k, 1, k as f64);
            j.tenant = 1;
            j.gpu_memory_gb = Some(24.0); // no packing
            j
        })
        .collect();
    let mut snap = snapshot(1, 8, jobs.clone());
    for tenant in &mut snap.tenants {
        tenant.guaranteed_gpus = 4;
    }
    let plan = checked_drover_round(&snap);
    apply(&mut snap, &plan);
    let mut a = elastic(0, 8, 10.0);
    a.preferred = drover_scheduler::Shape {
        ps: 1,
        workers: asked,
    };
    a.gpu_memory_gb = Some(24.0);
    jobs = std::mem::take(&mut snap.jobs);
    jobs.push(a);
    snap.jobs = jobs;
    snap
}

/// A job within its tenant's guarantee that does not fit at its shape when it arrives waits for the
/// round, which takes back what its tenant lent, rather than starting smaller and keeping that shape
/// until a resize pays back (an 8-GPU job ran 446 s at one worker that way). A borrower still starts
/// in what is free.
#[test]
fn drover_keeps_a_guaranteed_arrival_for_the_round_rather_than_starting_it_small() {
    use drover_scheduler::plan::JobPlan;
    let snap = a_arrives_against_seven_of_b(4);
    let arriving = snap.jobs.last().unwrap().clone();
    let mut drover = build_policy("drover", None).unwrap();
    let decision = drover.place_arrival(&snap, &arriving);
    assert!(
        matches!(decision, JobPlan::Wait { .. }),
        "started in the one free GPU: {decision:?}"
    );
    let plan = checked_drover_round(&snap);
    let shape = plan
        .placement(arriving.id)
        .expect("the round runs it")
        .shape();
    assert!(shape.workers >= 4, "the round runs it at {shape:?}");
    // Asking for more than its guarantee, it borrows: it starts in the free GPU.
    let snap = a_arrives_against_seven_of_b(6);
    let arriving = snap.jobs.last().unwrap().clone();
    let decision = build_policy("drover", None)
        .unwrap()
        .place_arrival(&snap, &arriving);
    assert!(
        matches!(decision, JobPlan::Run { .. }),
        "a borrower waits beside a free GPU: {decision:?}"
    );
}

/// A tenant that asks for more than its guarantee (so not light) still has the jobs its guarantee
/// covers admitted at the shapes they asked for while they are short (not yet in the last LAS
/// queue), not at their smallest with growth to share with every borrower: tenant a's first job asks
/// for 4 workers, its second for 4 more; tenant b queued seven 1-GPU jobs.
#[test]
fn drover_admits_a_guaranteed_job_at_its_shape_when_its_tenant_asks_for_more() {
    let mut first = elastic(0, 8, 0.0);
    first.preferred = drover_scheduler::Shape { ps: 1, workers: 4 };
    first.gpu_memory_gb = Some(24.0);
    let mut second = elastic(8, 8, 1.0);
    second.preferred = drover_scheduler::Shape { ps: 1, workers: 4 };
    second.gpu_memory_gb = Some(24.0);
    let mut jobs = vec![first, second];
    for k in 1..8u128 {
        let mut j = job(k, 1, 1.0 + k as f64);
        j.tenant = 1;
        j.gpu_memory_gb = Some(24.0);
        jobs.push(j);
    }
    let mut snap = snapshot(1, 8, jobs);
    for tenant in &mut snap.tenants {
        tenant.guaranteed_gpus = 4;
    }
    let plan = checked_drover_round(&snap);
    let shape = plan.placement(id(0)).expect("a's first job runs").shape();
    assert_eq!(shape.workers, 4, "a's guaranteed job runs at {shape:?}");
    let b = (1..8).filter(|&k| plan.placement(id(k)).is_some()).count();
    assert_eq!(b, 4, "b runs its guaranteed four");
}

/// GPUs free up where jobs end, but the CPUs beside them may be held by a later job's PS shards: the
/// job first in the order then gets them back (the shards' job gives shards back and is placed
/// again), rather than waiting beside a free GPU with `Fragmented` (664 s on week 40, 32x8).
#[test]
fn drover_takes_back_ps_shards_holding_the_cpus_beside_a_free_gpu() {
    use drover_scheduler::NodeId;
    use drover_scheduler::plan::{Placement, Role, TaskPlacement};
    let task = |role, index, node, gpus: Vec<u16>| TaskPlacement {
        role,
        index,
        node: NodeId(node),
        gpus,
        cpus: 1,
        memory_gb: 0,
        packed: false,
    };
    // Two nodes of 2 GPUs and 8 CPUs. Tenant b's elastic job runs one worker on node 0 with seven PS
    // shards there (all 8 CPUs); b's two 1-GPU jobs fill node 1's GPUs (4 CPUs). Node 0 has a GPU
    // free and no CPU; node 1 four CPUs and no GPU.
    let mut grown = elastic(0, 1, 0.0);
    grown.tenant = 1;
    grown.ps = Range { min: 1, max: 7 };
    grown.gpu_memory_gb = Some(24.0);
    let mut tasks = vec![task(Role::Worker, 0, 0, vec![0])];
    tasks.extend((0..7).map(|k| task(Role::Ps, k, 0, vec![])));
    grown.placement = Some(Placement { tasks });
    let mut jobs = vec![grown];
    for (k, gpu) in [(1u128, 0u16), (2, 1)] {
        let mut j = running_1_gpu(k, 1, gpu);
        j.submit_s = 0.0;
        jobs.push(j);
    }
    // Tenant a's 1-GPU job (a worker and a PS: 2 CPUs), at a higher priority.
    let mut waiting = job(3, 1, 5.0);
    waiting.priority = 1;
    waiting.gpu_memory_gb = Some(24.0);
    jobs.push(waiting);
    let mut snap = snapshot(1, 2, jobs);
    snap.nodes = drover_scheduler::cluster::uniform_cluster(2, 2, 8, 32);
    snap.tenants[0].guaranteed_gpus = 1;
    snap.tenants[1].guaranteed_gpus = 3;
    let plan = checked_drover_round(&snap);
    let placed = plan
        .placement(id(3))
        .expect("a's job waits beside the free GPU");
    assert_eq!(placed.worker_nodes(), vec![NodeId(0)]);
    let shards = plan.placement(id(0)).expect("b's job runs on").shape().ps;
    assert!(shards < 7, "b's job keeps its {shards} shards");
}
