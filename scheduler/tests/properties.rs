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
