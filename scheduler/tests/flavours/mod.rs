//! Quotas per GPU model (flavours): every policy keeps a tenant within its maximum of a model and off
//! the guarantee another tenant does not lend; `drover` places a job owed a model there first and
//! takes a lent guarantee back from borrowers when the owed job would otherwise wait.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common::{apply, id, job};
use drover_scheduler::cluster::mixed_cluster;
use drover_scheduler::invariants;
use drover_scheduler::snapshot::{ClusterSnapshot, Flavour, JobView, Tenant};
use drover_scheduler::{JobPlan, Plan, WaitReason, build_policy, is_oracle_policy, policy_names};

fn tenant(name: &str, guaranteed_gpus: u32, flavours: Vec<Flavour>) -> Tenant {
    Tenant {
        name: name.into(),
        guaranteed_gpus,
        max_gpus: None,
        flavours,
    }
}

fn flavour(model: &str, guaranteed: u32, max: Option<u32>, lends: Option<u32>) -> Flavour {
    Flavour {
        gpu_model: model.into(),
        guaranteed_gpus: guaranteed,
        max_gpus: max,
        lending_limit: lends,
    }
}

/// One node of 4 V100s (Tesla V100-SXM2) and one of 4 K80s; tenants `a` and `b`.
fn cluster(tenants: Vec<Tenant>, jobs: Vec<JobView>) -> ClusterSnapshot {
    ClusterSnapshot {
        now_s: 1000.0,
        nodes: mixed_cluster(&[(1, 4, "Tesla V100-SXM2"), (1, 4, "Tesla K80")], 64, 32),
        tenants,
        jobs,
    }
}

/// A one-GPU job of `tenant`, accepting only `types` when given.
fn one_gpu(n: u128, tenant: u32, types: &[&str]) -> JobView {
    let mut job = job(n, 1, n as f64);
    job.tenant = tenant;
    job.gpu_types = types.iter().map(|t| (*t).to_owned()).collect();
    job
}

/// GPUs of V100 nodes (node 0) the plan gives `tenant`'s jobs (a GPU two of them share counts once).
fn v100s_of(snapshot: &ClusterSnapshot, plan: &Plan, tenant: u32) -> u32 {
    let mut gpus: Vec<u16> = snapshot
        .jobs
        .iter()
        .filter(|j| j.tenant == tenant)
        .filter_map(|j| plan.placement(j.id))
        .flat_map(|p| p.tasks.iter())
        .filter(|t| t.node.0 == 0)
        .flat_map(|t| t.gpus.iter().copied())
        .collect();
    gpus.sort_unstable();
    gpus.dedup();
    gpus.len() as u32
}

fn running(plan: &Plan) -> usize {
    plan.jobs
        .values()
        .filter(|d| matches!(d, JobPlan::Run { .. }))
        .count()
}

/// Rounds of `policy` until the plan stops changing (at most 4), the snapshot following each.
fn settle(policy: &str, snapshot: &mut ClusterSnapshot) -> Plan {
    let mut scheduler = build_policy(policy, None).unwrap();
    let mut plan = Plan::default();
    for _ in 0..4 {
        plan = scheduler.schedule(snapshot, &plan);
        invariants::check(snapshot, &plan).unwrap_or_else(|v| panic!("{policy}: {v:?}"));
        invariants::check_flavour_maxima(snapshot, &plan)
            .unwrap_or_else(|v| panic!("{policy}: {v:?}"));
        apply(snapshot, &plan);
        snapshot.now_s += 60.0;
    }
    plan
}

#[test]
fn every_policy_keeps_a_tenant_within_its_maximum_of_a_model() {
    for policy in policy_names().into_iter().filter(|p| !is_oracle_policy(p)) {
        // Tenant a may hold 2 V100s; five one-GPU jobs of any model: 2 on V100s, 3 on K80s.
        let tenants = vec![tenant("a", 0, vec![flavour("v100", 0, Some(2), None)])];
        let jobs = (1..=5).map(|n| one_gpu(n, 0, &[])).collect();
        let mut snapshot = cluster(tenants, jobs);
        let plan = settle(policy, &mut snapshot);
        assert!(v100s_of(&snapshot, &plan, 0) <= 2, "{policy}: {plan:?}");
        assert_eq!(running(&plan), 5, "{policy}: every job runs somewhere");
    }
}

#[test]
fn a_job_only_a_model_at_its_maximum_can_take_waits_for_the_tenant_limit() {
    for policy in ["drover", "fifo", "tiresias"] {
        let tenants = vec![tenant("a", 0, vec![flavour("V100", 0, Some(2), None)])];
        let jobs = (1..=3).map(|n| one_gpu(n, 0, &["v100"])).collect();
        let mut snapshot = cluster(tenants, jobs);
        let plan = settle(policy, &mut snapshot);
        assert_eq!(running(&plan), 2, "{policy}: {plan:?}");
        assert_eq!(
            plan.jobs[&id(3)],
            JobPlan::Wait {
                reason: WaitReason::TenantLimit
            },
            "{policy}"
        );
        // Nor is it packed onto a V100 another of its jobs holds.
        let packed = plan.jobs.values().any(|d| match d {
            JobPlan::Run { placement, .. } => placement.tasks.iter().any(|t| t.packed),
            JobPlan::Wait { .. } => false,
        });
        assert!(!packed, "{policy}: {plan:?}");
    }
}

#[test]
fn a_gang_of_a_tenant_without_quotas_per_model_may_span_models() {
    for policy in ["fifo", "tiresias", "drf"] {
        // Tenant a's quota names K80s; tenant b has none, and its 8-GPU gang needs both nodes.
        let tenants = vec![
            tenant("a", 0, vec![flavour("k80", 0, Some(16), None)]),
            tenant("b", 0, Vec::new()),
        ];
        let mut gang = job(1, 8, 0.0);
        gang.tenant = 1;
        let mut snapshot = cluster(tenants, vec![gang]);
        let plan = settle(policy, &mut snapshot);
        assert_eq!(running(&plan), 1, "{policy}: {plan:?}");
    }
}

#[test]
fn a_guarantee_not_lent_stays_free_for_its_tenant() {
    for policy in policy_names().into_iter().filter(|p| !is_oracle_policy(p)) {
        // Tenant b is guaranteed 2 V100s and lends none: tenant a's four V100-only jobs get 2.
        let tenants = vec![
            tenant("a", 0, Vec::new()),
            tenant("b", 2, vec![flavour("v100", 2, None, Some(0))]),
        ];
        let jobs = (1..=4).map(|n| one_gpu(n, 0, &["v100"])).collect();
        let mut snapshot = cluster(tenants, jobs);
        let plan = settle(policy, &mut snapshot);
        assert_eq!(v100s_of(&snapshot, &plan, 0), 2, "{policy}: {plan:?}");
        if policy == "fifo" {
            // Strict FIFO keeps b's job behind a's waiting ones.
            continue;
        }
        // b's V100 job starts at once, nothing preempted.
        snapshot.jobs.push(one_gpu(9, 1, &["v100"]));
        let plan = settle(policy, &mut snapshot);
        assert_eq!(v100s_of(&snapshot, &plan, 1), 1, "{policy}: {plan:?}");
        assert_eq!(v100s_of(&snapshot, &plan, 0), 2, "{policy}: {plan:?}");
    }
    // Lending 1 of the 2: a gets 3.
    let tenants = vec![
        tenant("a", 0, Vec::new()),
        tenant("b", 2, vec![flavour("v100", 2, None, Some(1))]),
    ];
    let jobs = (1..=4).map(|n| one_gpu(n, 0, &["v100"])).collect();
    let mut snapshot = cluster(tenants, jobs);
    let plan = settle("drover", &mut snapshot);
    assert_eq!(v100s_of(&snapshot, &plan, 0), 3, "{plan:?}");
}

/// Tenant a borrows every GPU (four V100-only and four K80-only jobs); tenant b, guaranteed 2 GPUs,
/// `b_flavours` of them per model, then submits one V100-only job.
fn b_arrives(b_flavours: Vec<Flavour>) -> (ClusterSnapshot, Plan) {
    let tenants = vec![tenant("a", 0, Vec::new()), tenant("b", 2, b_flavours)];
    let mut jobs: Vec<JobView> = (1..=4).map(|n| one_gpu(n, 0, &["v100"])).collect();
    jobs.extend((5..=8).map(|n| one_gpu(n, 0, &["k80"])));
    let mut snapshot = cluster(tenants, jobs);
    let plan = settle("drover", &mut snapshot);
    assert_eq!(running(&plan), 8);
    snapshot.jobs.push(one_gpu(9, 1, &["v100"]));
    let plan = settle("drover", &mut snapshot);
    (snapshot, plan)
}

#[test]
fn drover_takes_a_lent_guarantee_of_a_model_back() {
    let (_, plan) = b_arrives(vec![flavour("v100", 2, None, None)]);
    // b's job has a V100 of its own (the borrower that gave it up may share another's, packed).
    let b_job = plan.placement(id(9)).expect("b's job runs");
    assert!(
        b_job
            .tasks
            .iter()
            .any(|t| t.node.0 == 0 && !t.gpus.is_empty() && !t.packed),
        "{plan:?}"
    );
    let k80s_running = (5..=8).filter(|&n| plan.placement(id(n)).is_some()).count();
    assert_eq!(k80s_running, 4, "the K80 borrowers run on: {plan:?}");
    // Guaranteed GPUs of no model in particular: the preempted borrower's GPU is a K80, and the V100
    // job waits beside it.
    let (snapshot, plan) = b_arrives(Vec::new());
    assert_eq!(v100s_of(&snapshot, &plan, 1), 0, "{plan:?}");
}

#[test]
fn drover_places_a_job_owed_a_model_on_it_first() {
    // b is guaranteed 2 K80s; with both models idle, its job goes on a K80.
    let tenants = vec![
        tenant("a", 0, Vec::new()),
        tenant("b", 2, vec![flavour("k80", 2, None, None)]),
    ];
    let mut snapshot = cluster(tenants, vec![one_gpu(1, 1, &[])]);
    let plan = settle("drover", &mut snapshot);
    assert_eq!(v100s_of(&snapshot, &plan, 1), 0, "{plan:?}");
    assert_eq!(running(&plan), 1);
    // Without it, the V100 (as far as is known, the faster).
    let tenants = vec![tenant("a", 0, Vec::new()), tenant("b", 2, Vec::new())];
    let mut snapshot = cluster(tenants, vec![one_gpu(1, 1, &[])]);
    let plan = settle("drover", &mut snapshot);
    assert_eq!(v100s_of(&snapshot, &plan, 1), 1, "{plan:?}");
}

#[test]
fn a_lowered_maximum_of_a_model_stops_the_jobs_past_it() {
    for policy in policy_names().into_iter().filter(|p| !is_oracle_policy(p)) {
        let tenants = vec![tenant("a", 0, Vec::new())];
        let jobs = (1..=3).map(|n| one_gpu(n, 0, &["v100"])).collect();
        let mut snapshot = cluster(tenants, jobs);
        let plan = settle(policy, &mut snapshot);
        assert_eq!(v100s_of(&snapshot, &plan, 0), 3, "{policy}");
        snapshot.tenants[0].flavours = vec![flavour("v100", 0, Some(1), None)];
        let plan = settle(policy, &mut snapshot);
        assert_eq!(v100s_of(&snapshot, &plan, 0), 1, "{policy}: {plan:?}");
        assert_eq!(running(&plan), 1, "{policy}");
    }
}
