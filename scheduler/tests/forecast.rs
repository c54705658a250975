//! Queue forecasts: hand-made queues whose answer is known, every policy predicting every waiting job,
//! and the simulator scoring predictions against what happened.

#![expect(clippy::unwrap_used, reason = "tests")]

mod common;
mod estimates;

use common::{FixedOracle, apply, id, job, snapshot};
use drover_scheduler::cluster::uniform_cluster;
use drover_scheduler::forecast::{
    Basis, Finished, ForecastConfig, NO_HISTORY, Priors, Remaining, estimate, forecast,
    predict_start, recent_arrivals,
};
use drover_scheduler::sim::predict::{PredictOptions, accuracy};
use drover_scheduler::sim::{self, SimConfig, Stopwatch, TraceFilter};
use drover_scheduler::snapshot::{Shape, StepStats};
use drover_scheduler::{Plan, build_policy, policy_names};
use std::collections::HashMap;

fn fixed(seconds: f64) -> Remaining {
    Remaining {
        p10: seconds * 0.5,
        p50: seconds,
        p90: seconds * 2.0,
        alone: false,
        basis: Basis::History,
    }
}

fn done(tenant: u32, gpus: u32, seconds: f64) -> Finished {
    Finished {
        tenant,
        gpus,
        seconds,
        submit_s: f64::NAN,
    }
}

/// One 4-GPU node: job 0 holds all four GPUs with an hour left; jobs 1 and 2 (4 GPUs each) wait.
fn full_node() -> (
    drover_scheduler::ClusterSnapshot,
    Plan,
    HashMap<drover_core::JobId, Remaining>,
) {
    let mut snap = snapshot(1, 4, vec![job(0, 4, 0.0), job(1, 4, 10.0), job(2, 4, 20.0)]);
    let plan = build_policy("fifo", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    apply(&mut snap, &plan);
    let plan = build_policy("fifo", None).unwrap().schedule(&snap, &plan);
    let remaining = HashMap::from([
        (id(0), fixed(3_600.0)),
        (id(1), fixed(1_800.0)),
        (id(2), fixed(600.0)),
    ]);
    (snap, plan, remaining)
}

#[test]
fn fifo_queue_starts_each_job_when_the_one_before_it_finishes() {
    let (snap, plan, remaining) = full_node();
    let config = ForecastConfig::default();
    let forecast = forecast(
        &snap,
        &plan,
        &*build_policy("fifo", None).unwrap(),
        &remaining,
        &config,
        &[],
    )
    .unwrap();
    assert_eq!(forecast.waiting.len(), 2);
    let (first, second) = (&forecast.waiting[0], &forecast.waiting[1]);
    assert_eq!((first.job, first.position), (id(1), 1));
    assert_eq!((second.job, second.position), (id(2), 2));
    let now = snap.now_s;
    // Job 0 runs an hour; job 1 then 30 minutes; job 2 starts after both.
    let start1 = first.start_s.unwrap() - now;
    let start2 = second.start_s.unwrap() - now;
    assert!((start1 - 3_600.0).abs() < 1.0, "{start1}");
    assert!((start2 - 5_400.0).abs() < 1.0, "{start2}");
    assert!((first.finish_s.unwrap() - now - 5_400.0).abs() < 1.0);
    // The band's edges: every job at half or at twice its estimate.
    assert!((first.start_p10_s.unwrap() - now - 1_800.0).abs() < 1.0);
    assert!((first.start_p90_s.unwrap() - now - 7_200.0).abs() < 1.0);
    assert!((second.start_p90_s.unwrap() - now - 10_800.0).abs() < 1.0);
    assert!((forecast.finishing[&id(0)] - now - 3_600.0).abs() < 1.0);
    assert_eq!((first.guesses, second.guesses), (0, 0));
}

#[test]
fn a_prediction_counts_the_guessed_estimates_it_rests_on() {
    let (snap, plan, mut remaining) = full_node();
    let policy = build_policy("fifo", None).unwrap();
    let config = ForecastConfig::default();
    let guesses = |remaining: &HashMap<drover_core::JobId, Remaining>| {
        let f = forecast(&snap, &plan, &*policy, remaining, &config, &[]).unwrap();
        f.waiting.iter().map(|p| p.guesses).collect::<Vec<_>>()
    };
    // The running job's length guessed: both waiting jobs rest on it.
    remaining.get_mut(&id(0)).unwrap().basis = Basis::Guess;
    assert_eq!(guesses(&remaining), [1, 1]);
    // The first waiting job's too: the second rests on both, the first not on its own.
    remaining.get_mut(&id(1)).unwrap().basis = Basis::Guess;
    assert_eq!(guesses(&remaining), [1, 2]);
    // A job with no estimate at all is a guess.
    remaining.remove(&id(0));
    remaining.get_mut(&id(1)).unwrap().basis = Basis::Measured;
    assert_eq!(guesses(&remaining), [1, 1]);
}

#[test]
fn a_job_larger_than_the_cluster_gets_no_start_and_the_horizon_bounds_the_rest() {
    let mut snap = snapshot(1, 4, vec![job(0, 4, 0.0), job(1, 8, 1.0), job(2, 4, 2.0)]);
    let plan = build_policy("fifo-backfill", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    apply(&mut snap, &plan);
    let plan = build_policy("fifo-backfill", None)
        .unwrap()
        .schedule(&snap, &plan);
    let remaining = HashMap::from([(id(0), fixed(7_200.0)), (id(2), fixed(60.0))]);
    let config = ForecastConfig {
        horizon_s: 3_600.0,
        ..ForecastConfig::default()
    };
    let f = forecast(
        &snap,
        &plan,
        &*build_policy("fifo-backfill", None).unwrap(),
        &remaining,
        &config,
        &[],
    )
    .unwrap();
    let never = f.waiting.iter().find(|p| p.job == id(1)).unwrap();
    assert_eq!(never.start_s, None);
    // Job 0 needs two hours; an hour's horizon sees job 2 start in none of the scenarios but the
    // fastest (half the estimate is still an hour: not within the horizon).
    let later = f.waiting.iter().find(|p| p.job == id(2)).unwrap();
    assert_eq!(later.start_s, None);
    assert_eq!(later.start_p90_s, None);
}

#[test]
fn every_policy_predicts_every_waiting_job_deterministically() {
    // 2 nodes x 4 GPUs; twelve jobs of 1-4 GPUs, two tenants, some running.
    let jobs = (0..12u128)
        .map(|n| {
            let mut j = job(n, [1, 2, 4][n as usize % 3], n as f64 * 10.0);
            j.tenant = (n % 2) as u32;
            j
        })
        .collect();
    let mut snap = snapshot(2, 4, jobs);
    let remaining: HashMap<_, _> = (0..12u128)
        .map(|n| (id(n), fixed(600.0 * (1 + n % 5) as f64)))
        .collect();
    for name in policy_names() {
        let oracle = FixedOracle(remaining.iter().map(|(k, v)| (*k, v.p50)).collect());
        let mut policy = build_policy(name, Some(Box::new(oracle))).unwrap();
        let plan = policy.schedule(&snap, &Plan::default());
        let mut running = snap.clone();
        apply(&mut running, &plan);
        let plan = policy.schedule(&running, &plan);
        let config = ForecastConfig::default();
        let a = forecast(&running, &plan, policy.as_ref(), &remaining, &config, &[]).unwrap();
        let b = forecast(&running, &plan, policy.as_ref(), &remaining, &config, &[]).unwrap();
        assert_eq!(a, b, "{name}: not deterministic");
        let waiting = plan
            .jobs
            .values()
            .filter(|d| matches!(d, drover_scheduler::JobPlan::Wait { .. }))
            .count();
        assert!(waiting > 0, "{name}: nothing waits");
        assert_eq!(a.waiting.len(), waiting, "{name}");
        for (i, p) in a.waiting.iter().enumerate() {
            assert_eq!(p.position as usize, i + 1);
            let start = p.start_s.unwrap_or_else(|| panic!("{name}: {p:?}"));
            assert!(start >= running.now_s, "{name}: {p:?}");
            assert!(p.start_p10_s.unwrap() <= start + 1e-6, "{name}: {p:?}");
            assert!(p.start_p90_s.unwrap() + 1e-6 >= start, "{name}: {p:?}");
        }
        snap.now_s += 1.0;
    }
}

#[test]
fn a_just_arrived_job_is_predicted_after_the_next_round() {
    let (mut snap, _, remaining) = full_node();
    for j in &mut snap.jobs[1..] {
        j.placement = None;
    }
    let p = predict_start(
        &snap,
        &*build_policy("fifo", None).unwrap(),
        &remaining,
        &ForecastConfig::default(),
        &[],
        id(2),
    )
    .unwrap()
    .unwrap();
    assert_eq!(p.position, 2);
    assert!((p.start_s.unwrap() - snap.now_s - 5_400.0).abs() < 1.0);
    // A job that fits now is started by that round: nothing to predict.
    let mut idle = snapshot(1, 4, vec![job(5, 2, 0.0)]);
    idle.now_s = 0.0;
    assert_eq!(
        predict_start(
            &idle,
            &*build_policy("fifo", None).unwrap(),
            &HashMap::new(),
            &ForecastConfig::default(),
            &[],
            id(5)
        )
        .unwrap(),
        None
    );
}

struct Frozen;

impl Stopwatch for Frozen {
    fn now_ns(&self) -> u64 {
        0
    }
}

#[test]
fn the_simulator_scores_predictions_against_actual_starts() {
    let models = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/models/ps_worker_speed.txt"
    ))
    .unwrap();
    // A burst on a small cluster: most jobs wait.
    let mut text = String::from("submit_s,duration_s,gpus,tenant\n");
    for i in 0..40u32 {
        let gpus = [1, 2, 4, 1][(i % 4) as usize];
        text.push_str(&format!(
            "{},{},{},vc{}\n",
            i * 30,
            900 + (i * 7919) % 3_600,
            gpus,
            i % 2
        ));
    }
    let trace = sim::parse_trace(&text, &TraceFilter::default()).unwrap();
    let models = sim::parse_models(&models).unwrap();
    let workload = sim::build_workload(&trace, &models, uniform_cluster(1, 8, 64, 32), 3);
    let options = PredictOptions {
        forecast: ForecastConfig::default(),
        every: 1,
        arrival_window_s: 0.0,
        remaining_from_truth: false,
    };
    for name in ["fifo", "tiresias", "drover"] {
        let (_, outcome) = sim::run_policy_predicting(
            name,
            &workload,
            SimConfig::default(),
            Some(options),
            &Frozen,
        )
        .unwrap();
        assert!(
            outcome.predictions.len() >= 10,
            "{name}: {}",
            outcome.predictions.len()
        );
        let a = accuracy(&outcome.predictions, &outcome, 600.0);
        assert!(a.long_waits > 0, "{name}");
        assert!(a.median_error.is_finite(), "{name}: {a:?}");
        // Without predictions asked for, none are made and the replay is unchanged.
        let (_, plain) = sim::run_policy(name, &workload, SimConfig::default(), &Frozen).unwrap();
        assert!(plain.predictions.is_empty());
        assert_eq!(
            plain.jobs, outcome.jobs,
            "{name}: predicting changed the replay"
        );
    }
}

#[test]
fn expected_arrivals_repeat_the_recent_window_and_delay_a_job_they_overtake() {
    // One 4-GPU node, job 0 runs another 10 minutes; job 1 (1 GPU) waits, priority 0. Every 5
    // minutes lately a priority-5 job of 4 GPUs arrived: under DRF-free priority order (drover) they
    // go first, so job 1 starts later than it would with no arrivals.
    let mut running = job(0, 4, 0.0);
    running.priority = 10;
    let mut snap = snapshot(1, 4, vec![running, job(1, 1, 900.0)]);
    let recent: Vec<_> = (0..3u128)
        .map(|n| {
            let mut j = job(100 + n, 4, 700.0 + 100.0 * n as f64);
            j.priority = 5;
            j
        })
        .collect();
    let recent_refs: Vec<_> = recent.iter().collect();
    let history: Vec<Finished> = (0..10).map(|_| done(0, 4, 1_200.0)).collect();
    let priors = Priors::from_history(&history, &[]);
    let arrivals = recent_arrivals(&recent_refs, snap.now_s, 300.0, 3_600.0, 100, &priors);
    // The window holds the two submitted in the last 300 s, repeated every 300 s for an hour.
    assert_eq!(arrivals.len(), 24);
    assert!(
        arrivals
            .windows(2)
            .all(|w| w[0].job.submit_s <= w[1].job.submit_s)
    );
    assert!(arrivals.iter().all(|a| a.job.submit_s > snap.now_s));
    assert_eq!(arrivals[0].remaining.p50, 1_200.0);
    let ids: std::collections::HashSet<_> = arrivals.iter().map(|a| a.job.id).collect();
    assert_eq!(ids.len(), arrivals.len());
    assert!(recent_arrivals(&recent_refs, snap.now_s, 300.0, 3_600.0, 5, &priors).len() == 5);
    assert!(recent_arrivals(&recent_refs, snap.now_s, 0.0, 3_600.0, 100, &priors).is_empty());

    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    apply(&mut snap, &plan);
    let plan = build_policy("drover", None).unwrap().schedule(&snap, &plan);
    let remaining = HashMap::from([(id(0), fixed(600.0)), (id(1), fixed(600.0))]);
    let config = ForecastConfig::default();
    let alone = forecast(
        &snap,
        &plan,
        &*build_policy("drover", None).unwrap(),
        &remaining,
        &config,
        &[],
    )
    .unwrap();
    let crowded = forecast(
        &snap,
        &plan,
        &*build_policy("drover", None).unwrap(),
        &remaining,
        &config,
        &arrivals,
    )
    .unwrap();
    let start = |f: &drover_scheduler::forecast::Forecast| {
        f.waiting.iter().find(|p| p.job == id(1)).unwrap().start_s
    };
    let (alone, crowded) = (start(&alone).unwrap(), start(&crowded));
    assert!((alone - snap.now_s - 600.0).abs() < 61.0, "{alone}");
    assert!(
        crowded.is_none_or(|c| c > alone + 300.0),
        "{crowded:?} vs {alone}"
    );
}
