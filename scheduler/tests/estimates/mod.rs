//! Remaining-work estimates: a job's budget and speed, else its tenant's history of lengths, running
//! jobs as lengths of at least their age, a sweep's ended members for its running ones, and jobs
//! packed on a GPU at the pace they were seen at.

use super::*;

#[test]
fn estimates_use_the_budget_and_speed_else_the_tenants_history() {
    let mut j = job(0, 2, 0.0);
    // Seen at its preferred shape: 0.5 s a step, 1,000 of a 3,000-step budget done.
    j.observed.step_stats.push(StepStats {
        shape: Shape { ps: 1, workers: 2 },
        shared: false,
        spread_samples: 0,
        spread_mean_step_s: 0.0,
        samples: 20,
        mean_step_s: 0.5,
        gpu: Default::default(),
    });
    j.observed.steps_done = 1_000;
    j.observed.step_budget = Some(3_000);
    j.observed.runs_to_budget = true;
    let e = estimate(&j, &Priors::default());
    assert!((e.p50 - 1_000.0).abs() < 50.0, "{e:?}");
    assert!(e.p10 < e.p50 && e.p50 < e.p90);

    // Nothing observed: the history of its tenant's jobs of its size once there are five, else
    // of everyone's jobs of its size (here there are none of another size).
    let mut fresh = job(1, 1, 0.0);
    fresh.tenant = 1;
    let mut history: Vec<Finished> = (0..20).map(|i| done(0, 1, 100.0 * f64::from(i))).collect();
    let priors = Priors::from_history(&history, &[]);
    let everyone = priors.overall.as_ref().unwrap().quantiles().p50;
    assert!((estimate(&fresh, &priors).p50 - everyone).abs() < 1e-6);
    history.extend((0..5).map(|_| done(1, 1, 5_000.0)));
    // Jobs of another size say nothing about it while its own size has history.
    history.extend((0..5).map(|_| done(1, 8, 90_000.0)));
    let priors = Priors::from_history(&history, &[]);
    assert_eq!(estimate(&fresh, &priors).p50, 5_000.0);
    // Having run past every length its tenant's jobs of its size had, it has as long again to go.
    fresh.observed.attained_gpu_s = 6_000.0;
    assert_eq!(estimate(&fresh, &priors).p50, 6_000.0);
    // With no history at all: the built-in guess, conditioned on its age (heavy-tailed, so more
    // is left of an older job).
    let young = estimate(&fresh, &Priors::default()).p50;
    fresh.observed.attained_gpu_s = 60_000.0;
    let old = estimate(&fresh, &Priors::default()).p50;
    assert!(young > 0.0 && old > young, "{young} {old}");
    assert!((estimate(&job(9, 1, 0.0), &Priors::default()).p50 - NO_HISTORY.p50).abs() < 1.0);
}

#[test]
fn jobs_still_running_lengthen_the_history_they_are_missing_from() {
    // Finished jobs ran 100-2,000 s, but half the tenant's jobs have been running for 20,000 s:
    // finished jobs alone say nothing of those (they are the long ones).
    let history: Vec<Finished> = (1..=20).map(|i| done(0, 1, 100.0 * f64::from(i))).collect();
    let running: Vec<_> = (0..20u128)
        .map(|n| {
            let mut j = job(100 + n, 1, -1e6 + 3_600.0 * n as f64);
            j.observed.attained_gpu_s = 20_000.0;
            j
        })
        .collect();
    let fresh = job(1, 1, 0.0);
    let finished_only = estimate(&fresh, &Priors::from_history(&history, &[]));
    let with_running = estimate(&fresh, &Priors::from_history(&history, &running));
    assert!(finished_only.p90 <= 2_000.0, "{finished_only:?}");
    assert!(
        with_running.p90 > 20_000.0,
        "half the jobs run past 20,000 s, so the 90th percentile is beyond it: {with_running:?}"
    );
    assert!(
        (1_990.0..=20_010.0).contains(&with_running.p50),
        "half end by 2,000 s, half run past 20,000 s: {with_running:?}"
    );
}

#[test]
fn a_sweeps_youngest_job_is_as_old_as_its_oldest_sibling() {
    // Ten jobs of one sweep (one tenant, one shape, a minute apart); the first has run 5,000 s, the
    // last 100 s. History: the tenant's jobs of that size ran 100-6,000 s.
    let history: Vec<Finished> = (1..=60).map(|i| done(0, 1, 100.0 * f64::from(i))).collect();
    let mut sweep: Vec<_> = (0..10u128)
        .map(|n| job(200 + n, 1, 60.0 * n as f64))
        .collect();
    for (n, j) in sweep.iter_mut().enumerate() {
        j.observed.attained_gpu_s = 5_000.0 - 4_900.0 * n as f64 / 9.0;
    }
    // Another tenant's job of the same age, alone.
    let mut alone = job(300, 1, 0.0);
    alone.tenant = 1;
    alone.observed.attained_gpu_s = 100.0;
    let mut active = sweep.clone();
    active.push(alone.clone());
    let mut history_both = history.clone();
    history_both.extend((1..=60).map(|i| done(1, 1, 100.0 * f64::from(i))));
    let priors = Priors::from_history(&history_both, &active);
    let youngest = estimate(&sweep[9], &priors);
    let oldest = estimate(&sweep[0], &priors);
    let lone = estimate(&alone, &priors);
    // The sweep's age is the 80th percentile of its members' (3,911 s here; robust to one
    // long-runner): the youngest has what is left of a job that old, plus the lag behind it.
    assert!(youngest.p50 > 3_811.0, "{youngest:?}");
    assert!(lone.p50 < 3_100.0, "alone, it is as old as it is: {lone:?}");
    // The oldest member is older than the sweep's age: its own age counts.
    assert!(oldest.p50 < youngest.p50, "{oldest:?} {youngest:?}");
    // Four jobs are not a sweep: their ages are their own.
    let late = sweep[9].clone();
    let with = |others: &[drover_scheduler::snapshot::JobView]| {
        let mut active = others.to_vec();
        active.push(late.clone());
        estimate(&late, &Priors::from_history(&history_both, &active)).p50
    };
    let (four_and_it, three_and_it) = (with(&sweep[..4]), with(&sweep[..3]));
    assert!(
        four_and_it > 3_000.0,
        "five jobs are a sweep: {four_and_it}"
    );
    assert!(three_and_it < 3_200.0, "four are not: {three_and_it}");
}

// Sweeps: a sweep's own ended jobs say how long its running ones have left, and its members,
// estimated from those, end one by one rather than all at once. Packed jobs at their seen pace.

fn done_at(tenant: u32, gpus: u32, seconds: f64, submit_s: f64) -> Finished {
    Finished {
        tenant,
        gpus,
        seconds,
        submit_s,
    }
}

#[test]
fn a_sweeps_ended_jobs_say_how_long_its_others_take() {
    // The tenant's earlier one-GPU jobs (a day before) ran 100-600 s; this sweep's jobs, a minute
    // apart, run about 3,000 s, and ten of them have ended.
    let mut history: Vec<Finished> = (0..60)
        .map(|i| done_at(0, 1, 100.0 + 500.0 * f64::from(i) / 59.0, -86_400.0))
        .collect();
    history
        .extend((0..10).map(|i| done_at(0, 1, 2_900.0 + 20.0 * f64::from(i), 60.0 * f64::from(i))));
    let mut running = job(100, 1, 600.0);
    running.observed.attained_gpu_s = 2_950.0;
    let queued = job(101, 1, 660.0);
    let active = vec![running.clone(), queued.clone()];
    let priors = Priors::from_history(&history, &active);
    let fresh = estimate(&queued, &priors);
    assert!(fresh.alone, "{fresh:?}");
    assert!(
        (2_900.0..=3_100.0).contains(&fresh.p50),
        "a job of the sweep not yet started runs as long as its siblings did: {fresh:?}"
    );
    let old = estimate(&running, &priors);
    assert!(old.alone && old.p50 < 1_000.0, "{old:?}");

    // Four ended jobs are not enough: the tenant's history (and the sweep's age) decide, and its
    // members are drawn together.
    let few: Vec<Finished> = history[..64].to_vec();
    let priors = Priors::from_history(&few, &active);
    let fresh = estimate(&queued, &priors);
    assert!(!fresh.alone && fresh.p50 < 2_900.0, "{fresh:?}");

    // Jobs of the tenant that ended without a known submission time belong to no sweep.
    let unknown: Vec<Finished> = history
        .iter()
        .map(|f| Finished {
            submit_s: f64::NAN,
            ..*f
        })
        .collect();
    assert!(!estimate(&queued, &Priors::from_history(&unknown, &active)).alone);
}

/// Sixteen running jobs of one sweep on two 8-GPU nodes, and one more of it waiting; each running
/// one has 100 s / 1,000 s / 10,000 s left at its 10th / 50th / 90th percentile.
fn sweep_on_a_full_cluster(alone: bool) -> f64 {
    let mut jobs: Vec<_> = (0..17u128).map(|n| job(n, 1, 10.0 * n as f64)).collect();
    for j in &mut jobs[..16] {
        j.observed.attained_gpu_s = 1.0;
    }
    let mut snap = snapshot(2, 8, jobs);
    let mut fifo = build_policy("fifo", None).unwrap();
    let plan = fifo.schedule(&snap, &Plan::default());
    apply(&mut snap, &plan);
    assert!(snap.jobs[16].placement.is_none());
    let remaining: HashMap<_, _> = (0..16u128)
        .map(|n| {
            let r = Remaining {
                p10: 100.0,
                p50: 1_000.0,
                p90: 10_000.0,
                alone,
                basis: Basis::History,
            };
            (id(n), r)
        })
        .chain([(
            id(16),
            Remaining {
                p10: 60.0,
                p50: 60.0,
                p90: 60.0,
                alone,
                basis: Basis::History,
            },
        )])
        .collect();
    let config = ForecastConfig {
        round_s: 10.0,
        ..ForecastConfig::default()
    };
    let p = predict_start(&snap, &*fifo, &remaining, &config, &[], id(16))
        .unwrap()
        .unwrap();
    p.start_s.unwrap() - snap.now_s
}

#[test]
fn a_sweeps_members_drawn_alone_end_one_by_one() {
    // Drawn together, all sixteen end at the same level of their estimate: the waiting job starts
    // when the median draw's jobs end, about 1,000 s on.
    let together = sweep_on_a_full_cluster(false);
    assert!(together > 700.0, "{together}");
    // Drawn alone, the first of sixteen ends far sooner: the median over the draws of the
    // earliest of sixteen.
    let alone = sweep_on_a_full_cluster(true);
    assert!(alone < 400.0, "{alone}");
}

/// Job 0 (1,000 s of work left) shares its GPU with job 1 (far longer); `seen_shared` is the step
/// time job 0 was seen at while sharing (1 s alone). Its predicted finish, from now.
fn shared_finish(seen_alone: Option<f64>, seen_shared: Option<f64>) -> f64 {
    use drover_scheduler::plan::{Placement, Role, TaskPlacement};
    use drover_scheduler::snapshot::{Shape, StepStats};
    let on_gpu_0 = || Placement {
        tasks: vec![
            TaskPlacement {
                role: Role::Worker,
                index: 0,
                node: drover_scheduler::NodeId(0),
                gpus: vec![0],
                cpus: 1,
                memory_gb: 0,
                packed: true,
            },
            TaskPlacement {
                role: Role::Ps,
                index: 0,
                node: drover_scheduler::NodeId(0),
                gpus: vec![],
                cpus: 1,
                memory_gb: 0,
                packed: false,
            },
        ],
    };
    let mut jobs = vec![job(0, 1, 0.0), job(1, 1, 1.0)];
    let shape = Shape { ps: 1, workers: 1 };
    if let Some(seen) = seen_alone {
        jobs[0].observed.step_stats.push(StepStats {
            shape,
            shared: false,
            spread_samples: 0,
            spread_mean_step_s: 0.0,
            samples: 10,
            mean_step_s: seen,
            gpu: Default::default(),
        });
    }
    if let Some(seen) = seen_shared {
        jobs[0].observed.step_stats.push(StepStats {
            shape,
            shared: true,
            spread_samples: 0,
            spread_mean_step_s: 0.0,
            samples: 10,
            mean_step_s: seen,
            gpu: Default::default(),
        });
    }
    for j in &mut jobs {
        j.placement = Some(on_gpu_0());
        j.observed.attained_gpu_s = 1.0;
    }
    let snap = snapshot(1, 1, jobs);
    let mut fifo = build_policy("fifo", None).unwrap();
    let plan = fifo.schedule(&snap, &Plan::default());
    let at = |seconds: f64| Remaining {
        p10: seconds,
        p50: seconds,
        p90: seconds,
        alone: false,
        basis: Basis::Measured,
    };
    let remaining = HashMap::from([(id(0), at(1_000.0)), (id(1), at(1e7))]);
    let f = forecast(
        &snap,
        &plan,
        &*fifo,
        &remaining,
        &ForecastConfig::default(),
        &[],
    )
    .unwrap();
    f.finishing[&id(0)] - snap.now_s
}

#[test]
fn a_job_sharing_its_gpu_runs_at_the_pace_it_was_seen_at() {
    // Seen at half its pace while sharing: 1,000 s of work take 2,000 s.
    let seen = shared_finish(Some(1.0), Some(2.0));
    assert!((seen - 2_000.0).abs() < 5.0, "{seen}");
    // Never seen sharing: the configured slowdown (a quarter).
    let unseen = shared_finish(Some(1.0), None);
    assert!((unseen - 1_000.0 / 0.75).abs() < 5.0, "{unseen}");
    // Never seen alone: its pace alone is not known, so sharing slows it by that quarter too
    // (not by its pace shared over a prior in no unit).
    let never_alone = shared_finish(None, Some(0.2));
    assert!((never_alone - 1_000.0 / 0.75).abs() < 5.0, "{never_alone}");
}

#[test]
fn a_job_only_seen_sharing_counts_its_work_in_seconds() {
    use drover_scheduler::forecast::{PACKING_SLOWDOWN, work_done_s};
    // 1,000 steps, seen only while sharing its GPUs, at 2 s a step: about 1,500 s of work alone
    // (a quarter faster), not 1,000 steps in the speed prior's unit.
    let mut j = job(0, 2, 0.0);
    j.observed.step_stats.push(StepStats {
        shape: j.preferred,
        shared: true,
        spread_samples: 0,
        spread_mean_step_s: 0.0,
        samples: 20,
        mean_step_s: 2.0,
        gpu: Default::default(),
    });
    j.observed.steps_done = 1_000;
    j.observed.attained_gpu_s = 2.0 * 2_000.0;
    let want = 1_000.0 * 2.0 * (1.0 - PACKING_SLOWDOWN);
    assert!((work_done_s(&j) - want).abs() < 1e-6, "{}", work_done_s(&j));
    // Seen alone too: that pace decides.
    j.observed.step_stats.push(StepStats {
        shape: j.preferred,
        shared: false,
        spread_samples: 0,
        spread_mean_step_s: 0.0,
        samples: 5,
        mean_step_s: 1.2,
        gpu: Default::default(),
    });
    assert!((work_done_s(&j) - 1_200.0).abs() < 1e-6);
}

#[test]
fn a_job_not_yet_measured_takes_its_speed_from_its_programs_jobs_and_says_what_it_rests_on() {
    let budgeted = |n: u128, program: Option<u64>| {
        let mut j = job(n, 1, 0.0);
        j.observed.step_budget = Some(2_000);
        j.observed.runs_to_budget = true;
        j.observed.program = program;
        j
    };
    // A running job of program 7, measured at 0.25 s a step alone on its GPU.
    let mut running = budgeted(0, Some(7));
    running.observed.step_stats.push(StepStats {
        shape: Shape { ps: 1, workers: 1 },
        shared: false,
        spread_samples: 0,
        spread_mean_step_s: 0.0,
        samples: 30,
        mean_step_s: 0.25,
        gpu: Default::default(),
    });
    running.observed.steps_done = 500;
    running.observed.attained_gpu_s = 125.0;
    let own = estimate(&running, &Priors::default());
    assert_eq!(own.basis, Basis::Measured);
    assert!((own.p50 - 1_500.0 * 0.25).abs() < 20.0, "{own:?}");
    // A queued copy: its 2,000 steps at the running job's speed, with a wider band.
    let copy = budgeted(1, Some(7));
    let priors = Priors::from_history(&[], &[running.clone(), copy.clone()]);
    let borrowed = estimate(&copy, &priors);
    assert_eq!(borrowed.basis, Basis::Borrowed);
    assert!((borrowed.p50 - 2_000.0 * 0.25).abs() < 25.0, "{borrowed:?}");
    assert!(borrowed.p10 < borrowed.p50 && borrowed.p90 > borrowed.p50);
    assert!(borrowed.p90 / borrowed.p50 > own.p90 / own.p50);
    // Another program, or none, borrows nothing: with no history it is a guess, with some it
    // rests on the history.
    for other in [budgeted(2, Some(8)), budgeted(3, None)] {
        let guess = estimate(&other, &priors);
        assert_eq!(guess.basis, Basis::Guess, "{guess:?}");
        assert!((guess.p50 - NO_HISTORY.p50).abs() < 1.0);
        let history: Vec<Finished> = (0..10).map(|i| done(0, 1, 100.0 + f64::from(i))).collect();
        let known = estimate(&other, &Priors::from_history(&history, &[running.clone()]));
        assert_eq!(known.basis, Basis::History);
    }
}
