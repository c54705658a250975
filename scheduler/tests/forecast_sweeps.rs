//! Queue forecasts for sweeps: a sweep's own ended jobs say how long its running ones have left, and
//! its members, estimated from those, end one by one rather than all at once.

#![expect(clippy::unwrap_used, reason = "tests")]

#[expect(dead_code, reason = "builders shared with the other scheduler tests")]
mod common;

use common::{apply, id, job, snapshot};
use drover_scheduler::forecast::{
    Finished, ForecastConfig, Priors, Remaining, estimate, predict_start,
};
use drover_scheduler::{Plan, build_policy};
use std::collections::HashMap;

fn done(tenant: u32, gpus: u32, seconds: f64, submit_s: f64) -> Finished {
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
        .map(|i| done(0, 1, 100.0 + 500.0 * f64::from(i) / 59.0, -86_400.0))
        .collect();
    history.extend((0..10).map(|i| done(0, 1, 2_900.0 + 20.0 * f64::from(i), 60.0 * f64::from(i))));
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
fn shared_finish(seen_shared: Option<f64>) -> f64 {
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
                packed: true,
            },
            TaskPlacement {
                role: Role::Ps,
                index: 0,
                node: drover_scheduler::NodeId(0),
                gpus: vec![],
                cpus: 1,
                packed: false,
            },
        ],
    };
    let mut jobs = vec![job(0, 1, 0.0), job(1, 1, 1.0)];
    let shape = Shape { ps: 1, workers: 1 };
    jobs[0].observed.step_stats.push(StepStats {
        shape,
        shared: false,
        samples: 10,
        mean_step_s: 1.0,
    });
    if let Some(seen) = seen_shared {
        jobs[0].observed.step_stats.push(StepStats {
            shape,
            shared: true,
            samples: 10,
            mean_step_s: seen,
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
    };
    let remaining = HashMap::from([(id(0), at(1_000.0)), (id(1), at(1e7))]);
    let f = drover_scheduler::forecast::forecast(
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
    let seen = shared_finish(Some(2.0));
    assert!((seen - 2_000.0).abs() < 5.0, "{seen}");
    // Never seen sharing: the configured slowdown (a quarter).
    let unseen = shared_finish(None);
    assert!((unseen - 1_000.0 / 0.75).abs() < 5.0, "{unseen}");
}
