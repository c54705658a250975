//! A policy's state survives a change of leader (issue #55): what one instance saves after any
//! round, restored into a fresh instance, gives the very plans (and order) the first goes on to
//! give; without it a fresh instance puts every demoted job back in the first queue.

use crate::common::{apply, job, snapshot};
use drover_scheduler::snapshot::{ClusterSnapshot, StepStats};
use drover_scheduler::{
    Plan, Policy, Shape, ablation_names, build_policy, is_oracle_policy, policy_names,
};

/// Eight GPUs on two nodes; twelve jobs of 1, 2 and 4 GPUs arriving over two hours (run for ten), each with
/// step times measured at its shapes, so policies that learn from them do.
fn start() -> ClusterSnapshot {
    let jobs = (0..12u32)
        .map(|n| {
            let gpus = [1, 2, 4][n as usize % 3];
            let mut view = job(u128::from(n), gpus, f64::from(n) * 600.0);
            view.tenant = n % 2;
            view.workers.min = 1;
            view.observed.step_stats = vec![StepStats {
                shape: Shape {
                    ps: 1,
                    workers: gpus,
                },
                shared: false,
                spread_samples: 0,
                spread_mean_step_s: 0.0,
                samples: 10,
                mean_step_s: 0.1 + f64::from(n) * 0.01,
                gpu: Default::default(),
            }];
            view
        })
        .collect();
    snapshot(2, 4, jobs)
}

/// Ten minutes later: running jobs attain service at their shapes; jobs started or stopped note it.
fn advance(snap: &mut ClusterSnapshot, plan: &Plan) {
    let before: Vec<bool> = snap.jobs.iter().map(|j| j.placement.is_some()).collect();
    apply(snap, plan);
    let dt = 600.0;
    for (job, was) in snap.jobs.iter_mut().zip(before) {
        if let Some(placement) = &job.placement {
            let gpus = placement.num_gpus();
            job.observed.attained_gpu_s += f64::from(gpus) * dt;
            job.observed.executed_s += dt;
        }
        if was != job.placement.is_some() {
            job.observed.last_state_change_s = snap.now_s;
        }
    }
    snap.now_s += dt;
}

/// The snapshot the policy sees: the jobs submitted by now.
fn shown(snap: &ClusterSnapshot) -> ClusterSnapshot {
    let mut shown = snap.clone();
    shown.jobs.retain(|j| j.submit_s <= snap.now_s);
    shown
}

fn live_policies() -> Vec<&'static str> {
    policy_names()
        .into_iter()
        .filter(|name| !is_oracle_policy(name))
        .chain(ablation_names())
        .collect()
}

#[test]
fn a_restored_policy_plans_as_the_one_that_saved() {
    for name in live_policies() {
        for handover in [3, 9, 15, 30, 45] {
            let mut snap = start();
            snap.now_s = 0.0;
            let mut first = build_policy(name, None).unwrap();
            let mut second: Option<Box<dyn Policy>> = None;
            let mut plan = Plan::default();
            for round in 0..60 {
                let view = shown(&snap);
                let next = first.schedule(&view, &plan);
                if let Some(second) = &mut second {
                    let theirs = second.schedule(&view, &plan);
                    assert_eq!(
                        theirs, next,
                        "{name}: handed over after round {handover}, round {round}"
                    );
                }
                if round == handover {
                    let saved = first.save();
                    let mut fresh = build_policy(name, None).unwrap();
                    let restored = fresh.restore(&saved);
                    assert_eq!(restored.unreadable, 0, "{name}");
                    assert_eq!(restored.jobs, saved.jobs.len(), "{name}");
                    assert_eq!(
                        fresh.save(),
                        saved,
                        "{name}: what is restored saves the same"
                    );
                    second = Some(fresh);
                }
                plan = next;
                advance(&mut snap, &plan);
            }
        }
    }
}

/// The control: the scenario above does exercise the saved state. A policy built afresh mid-way
/// (a leader that restores nothing) orders the queue otherwise, for the least-attained-service
/// policies, at some round.
#[test]
fn without_its_saved_state_a_new_leader_reorders_the_queue() {
    for name in ["tiresias", "drover"] {
        let mut snap = start();
        snap.now_s = 0.0;
        let mut first = build_policy(name, None).unwrap();
        let mut plan = Plan::default();
        let mut reordered = 0;
        for _ in 0..60 {
            let view = shown(&snap);
            let next = first.schedule(&view, &plan);
            let forgetful = build_policy(name, None).unwrap().schedule(&view, &plan);
            if forgetful.order != next.order {
                reordered += 1;
            }
            plan = next;
            advance(&mut snap, &plan);
        }
        assert!(
            reordered > 0,
            "{name}: the scenario never needs the saved state"
        );
    }
}
