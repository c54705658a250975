//! Priority and guarantees under every policy (issue #54): a waiting job of higher priority starts
//! before lower ones and, under a preemptive policy, stops one for its GPUs; a tenant below its
//! guarantee takes back what it lent. FIFO orders by claim but never stops a running job.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common::{FixedOracle, apply, id, job, snapshot};
use drover_scheduler::snapshot::ClusterSnapshot;
use drover_scheduler::{Plan, build_policy, invariants, is_oracle_policy, policy_names};

/// Policies that never stop a running job to start another.
const NON_PREEMPTIVE: [&str; 2] = ["fifo", "fifo-backfill"];

fn plan_of(name: &str, snapshot: &ClusterSnapshot) -> Plan {
    // The oracle says the running jobs end soonest (SRTF would keep them) and the claimant last.
    let oracle = FixedOracle(
        [(id(0), 10.0), (id(1), 10.0), (id(2), 1e6), (id(3), 1e6)]
            .into_iter()
            .collect(),
    );
    let oracle =
        is_oracle_policy(name).then(|| Box::new(oracle) as Box<dyn drover_scheduler::Oracle>);
    let plan = build_policy(name, oracle)
        .unwrap()
        .schedule(snapshot, &Plan::default());
    invariants::check(snapshot, &plan).unwrap();
    plan
}

/// Two 1-GPU jobs of tenant `a` fill a 2-GPU node (24 GB each: no packing on 32-GB GPUs), started
/// just now (within Gandiva's time slice), and `claimant` waits.
fn full_node_and(
    claimant: drover_scheduler::snapshot::JobView,
    guarantee_b: u32,
) -> ClusterSnapshot {
    let mut running = vec![job(0, 1, 0.0), job(1, 1, 1.0)];
    for j in &mut running {
        j.gpu_memory_gb = Some(24.0);
    }
    let mut snap = snapshot(1, 2, running);
    snap.tenants[1].guaranteed_gpus = guarantee_b;
    let first = build_policy("fifo", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    apply(&mut snap, &first);
    for j in &mut snap.jobs {
        j.observed.last_state_change_s = snap.now_s;
    }
    snap.jobs.push(claimant);
    snap
}

fn claimant(priority: i32, tenant: u32) -> drover_scheduler::snapshot::JobView {
    let mut urgent = job(2, 1, 50.0);
    urgent.priority = priority;
    urgent.tenant = tenant;
    urgent.gpu_memory_gb = Some(24.0);
    urgent
}

#[test]
fn a_higher_priority_job_takes_a_lower_ones_gpu_under_every_preemptive_policy() {
    for name in policy_names() {
        let snap = full_node_and(claimant(10, 0), 0);
        let plan = plan_of(name, &snap);
        let runs = |n| plan.placement(id(n)).is_some();
        if NON_PREEMPTIVE.contains(&name) {
            assert!(runs(0) && runs(1) && !runs(2), "{name} never preempts");
        } else {
            assert!(
                runs(2),
                "{name}: the priority-10 job waits behind priority 0"
            );
            assert!(!(runs(0) && runs(1)), "{name}: no lower job yielded");
        }
    }
}

#[test]
fn a_tenant_below_its_guarantee_takes_back_what_it_lent_under_every_preemptive_policy() {
    for name in policy_names() {
        // Tenant b is guaranteed 1 GPU; tenant a borrowed both.
        let snap = full_node_and(claimant(0, 1), 1);
        let plan = plan_of(name, &snap);
        let runs = |n| plan.placement(id(n)).is_some();
        if NON_PREEMPTIVE.contains(&name) {
            assert!(!runs(2), "{name} never preempts");
        } else {
            assert!(
                runs(2),
                "{name}: tenant b's guaranteed job waits behind a's borrowing"
            );
        }
    }
}

#[test]
fn when_a_gpu_frees_the_higher_claim_starts_first_under_every_policy() {
    for name in policy_names() {
        // One GPU free: job 0 runs; job 1 (priority 0, submitted first) and job 3 (priority 5) wait.
        let mut snap = full_node_and(claimant(0, 0), 0);
        snap.jobs.truncate(1);
        snap.jobs.push(job(1, 1, 2.0));
        let mut high = job(3, 1, 60.0);
        high.priority = 5;
        snap.jobs.push(high);
        for j in &mut snap.jobs[1..] {
            j.gpu_memory_gb = Some(24.0);
            j.placement = None;
        }
        let plan = plan_of(name, &snap);
        let runs = |n| plan.placement(id(n)).is_some();
        assert!(
            runs(3),
            "{name}: the priority-5 job should take the free GPU"
        );
        assert!(!runs(1), "{name}: the priority-0 job should wait");
    }
}
