//! Property tests: on random clusters and job mixes, every policy's plans pass the invariants, over
//! several rounds, and the same snapshots give the same plans.

#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use common::{FixedOracle, apply, job, snapshot};
use drover_scheduler::snapshot::{Range, Shape};
use drover_scheduler::{Plan, Policy, build_policy, invariants, policy_names};
use proptest::prelude::*;

fn policy(name: &str, remaining: &[(u128, f64)]) -> Box<dyn Policy> {
    let oracle = FixedOracle(remaining.iter().map(|&(n, r)| (common::id(n), r)).collect());
    build_policy(name, Some(Box::new(oracle))).unwrap()
}

#[derive(Debug, Clone)]
struct Mix {
    nodes: u32,
    gpus_per_node: u32,
    jobs: Vec<(u32, u32, bool, bool, u32, f64)>,
}

fn mix() -> impl Strategy<Value = Mix> {
    (1u32..6, 1u32..9).prop_flat_map(|(nodes, gpus_per_node)| {
        let job = (
            1u32..12,
            0u32..3,
            any::<bool>(),
            any::<bool>(),
            0u32..2,
            1.0f64..1e5,
        );
        proptest::collection::vec(job, 0..24).prop_map(move |jobs| Mix {
            nodes,
            gpus_per_node,
            jobs,
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn plans_keep_the_invariants_over_rounds(mix in mix()) {
        let jobs: Vec<_> = mix.jobs.iter().enumerate().map(|(i, &(gpus, ps, consolidate, cpu_heavy, tenant, _))| {
            let mut j = job(i as u128, gpus, i as f64);
            j.ps = Range { min: ps, max: ps };
            j.preferred = Shape { ps, workers: gpus };
            j.consolidate = consolidate;
            j.cpus_per_worker = if cpu_heavy { 20 } else { 2 };
            j.cpus_per_ps = if cpu_heavy { 30 } else { 2 };
            j.tenant = tenant;
            j
        }).collect();
        let remaining: Vec<(u128, f64)> = mix.jobs.iter().enumerate().map(|(i, j)| (i as u128, j.5)).collect();
        for name in policy_names() {
            let mut snap = snapshot(mix.nodes, mix.gpus_per_node, jobs.clone());
            let mut first = policy(name, &remaining);
            let mut second = policy(name, &remaining);
            let mut previous = Plan::default();
            for round in 0..4 {
                let plan = first.schedule(&snap, &previous);
                prop_assert_eq!(invariants::check(&snap, &plan), Ok(()), "{} round {}", name, round);
                prop_assert_eq!(&plan, &second.schedule(&snap, &previous), "{} is not deterministic", name);
                // Every waiting job that could never fit says so; nothing else does.
                apply(&mut snap, &plan);
                // Time passes: running jobs attain service, so queue-based policies reorder.
                for j in &mut snap.jobs {
                    if let Some(p) = &j.placement {
                        j.observed.attained_gpu_s += f64::from(p.num_gpus()) * 20_000.0;
                        j.observed.executed_s += 20_000.0;
                    }
                }
                snap.now_s += 20_000.0;
                previous = plan;
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Contest {
    nodes: u32,
    gpus_per_node: u32,
    /// Per tenant: its share of the cluster's GPUs guaranteed (in tenths) and its ceiling, if any.
    tenants: Vec<(u32, Option<u32>)>,
    /// Per job: GPUs, tenant, priority, and whether it can pack.
    jobs: Vec<(u32, usize, i32, bool)>,
}

fn contest() -> impl Strategy<Value = Contest> {
    (
        1u32..4,
        1u32..9,
        proptest::collection::vec((0u32..6, proptest::option::of(1u32..12)), 1..4),
    )
        .prop_flat_map(|(nodes, gpus_per_node, tenants)| {
            let count = tenants.len();
            let job = (1u32..5, 0..count, -1000i32..=1000, any::<bool>());
            proptest::collection::vec(job, 1..16).prop_map(move |jobs| Contest {
                nodes,
                gpus_per_node,
                tenants: tenants.clone(),
                jobs,
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// With no job arriving or finishing, Drover's plans settle: from the 6th round on, every job
    /// keeps the placement the previous round gave it, whatever the tenants' guarantees and the
    /// jobs' priorities (a borrower of priority 1000 once preempted and lost a guaranteed GPU round
    /// after round).
    #[test]
    fn drovers_plans_settle_when_nothing_arrives(contest in contest()) {
        let gpus = contest.nodes * contest.gpus_per_node;
        // Guarantees in tenths of the cluster, scaled down so that together they fit in it.
        let tenths: u32 = contest.tenants.iter().map(|t| t.0).sum::<u32>().max(10);
        let tenants = contest.tenants.iter().enumerate().map(|(i, &(share, max))| {
            drover_scheduler::snapshot::Tenant {
                name: format!("t{i}"),
                guaranteed_gpus: gpus * share / tenths,
                max_gpus: max,
                flavours: Vec::new(),
            }
        }).collect();
        let jobs = contest.jobs.iter().enumerate().map(|(i, &(n, tenant, priority, packs))| {
            let mut j = job(i as u128, n, i as f64);
            j.tenant = tenant as u32;
            j.priority = priority;
            j.gpu_memory_gb = Some(if packs { 8.0 } else { 24.0 });
            j
        }).collect();
        let mut snap = snapshot(contest.nodes, contest.gpus_per_node, jobs);
        snap.tenants = tenants;
        let mut drover = build_policy("drover", None).unwrap();
        let mut previous = Plan::default();
        for round in 0..12 {
            let plan = drover.schedule(&snap, &previous);
            prop_assert_eq!(invariants::check(&snap, &plan), Ok(()), "round {}", round);
            if round >= 6 {
                for j in &snap.jobs {
                    prop_assert_eq!(
                        plan.placement(j.id),
                        previous.placement(j.id),
                        "round {}: job {} moved",
                        round,
                        j.id
                    );
                }
            }
            // Applied at once, as the simulator does; a job whose placement changed was just
            // (re)started. Attained service stays: only the placements may change the order.
            for j in &mut snap.jobs {
                let placed = plan.placement(j.id).cloned();
                if placed != j.placement {
                    j.observed.last_state_change_s = snap.now_s;
                }
                j.placement = placed;
            }
            snap.now_s += 10.0;
            previous = plan;
        }
    }
}
