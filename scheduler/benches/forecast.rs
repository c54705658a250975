//! The queue forecast beside the scheduling round: on a cluster of 1,000 queued and 2,000 running jobs
//! on 10,000 GPUs, how long one forecast takes (the head of the queue, as after every round, and the
//! whole queue, as every 30 s), and what a round costs on its own and while a forecast runs on another
//! thread, as the server runs them (the round must not slow down).
//!
//! Run: `cargo bench -p drover-scheduler --bench forecast` (`POLICIES=drover,tiresias` to choose).

mod common;

use common::{build_with, percentile};
use drover_scheduler::forecast::{Finished, ForecastConfig, Priors, estimate, forecast};
use drover_scheduler::{Plan, build_policy};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Running jobs' sizes: 2,000 of them hold about 9,500 of the 10,000 GPUs, so the queue waits.
const FILLING: &[u32] = &[4, 4, 4, 4, 8, 8, 2, 4];

fn rounds(policy: &str, snapshot: &drover_scheduler::ClusterSnapshot, n: usize) -> Vec<f64> {
    let mut policy = build_policy(policy, None).expect("policy");
    let mut previous = Plan::default();
    (0..n)
        .map(|_| {
            let started = Instant::now();
            previous = policy.schedule(snapshot, &previous);
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

fn main() {
    let policies = std::env::var("POLICIES").unwrap_or_else(|_| "drover,tiresias,fifo".to_owned());
    let (gpus, running, queued) = (10_000, 2_000, 1_000);
    let mut snapshot = build_with(gpus, running, queued, FILLING);
    // Finished jobs' history for the priors: lengths between ten minutes and a day, submitted over
    // the last 30 days.
    let history: Vec<Finished> = (0..5_000u32)
        .map(|i| Finished {
            tenant: i % 10,
            gpus: 1 << (i % 4),
            seconds: 600.0 * f64::from(1 + (i * 7919) % 144),
            submit_s: snapshot.now_s - 30.0 * 86_400.0 * f64::from(5_000 - i) / 5_000.0,
        })
        .collect();
    let priors = Priors::from_history(&history, &snapshot.jobs);
    println!(
        "{queued} queued + {running} running jobs on {gpus} GPUs; {} cores available",
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    println!(
        "{:<10} {:>10} {:>10} {:>12} {:>12} {:>10} {:>14} {:>14} {:>10}",
        "policy",
        "round p50",
        "round p99",
        "head fc ms",
        "full fc ms",
        "fc rounds",
        "round p50 bsd",
        "round p99 bsd",
        "clone ms"
    );
    for name in policies.split(',') {
        let plan = build_policy(name, None)
            .expect("policy")
            .schedule(&snapshot, &Plan::default());
        for job in &mut snapshot.jobs {
            job.placement = plan.placement(job.id).cloned();
        }
        let plan = build_policy(name, None)
            .expect("policy")
            .schedule(&snapshot, &plan);
        let live = build_policy(name, None).expect("policy");
        let remaining = snapshot
            .jobs
            .iter()
            .map(|j| (j.id, estimate(j, &priors)))
            .collect();
        let alone = rounds(name, &snapshot, 20);

        let started = Instant::now();
        let cloned = snapshot.clone();
        let clone_ms = started.elapsed().as_secs_f64() * 1e3;
        std::hint::black_box(cloned);

        let head = ForecastConfig {
            head: Some(10),
            round_s: 60.0,
            ..ForecastConfig::default()
        };
        let started = Instant::now();
        let f =
            forecast(&snapshot, &plan, live.as_ref(), &remaining, &head, &[]).expect("forecast");
        let head_ms = started.elapsed().as_secs_f64() * 1e3;
        std::hint::black_box(f);
        let full = ForecastConfig {
            round_s: 60.0,
            ..ForecastConfig::default()
        };
        let started = Instant::now();
        let whole =
            forecast(&snapshot, &plan, live.as_ref(), &remaining, &full, &[]).expect("forecast");
        let full_ms = started.elapsed().as_secs_f64() * 1e3;
        let predicted = whole.waiting.iter().filter(|p| p.start_s.is_some()).count();

        // Rounds while forecasts run back to back on another thread.
        let stop = Arc::new(AtomicBool::new(false));
        let background = {
            let (stop, snapshot, plan, remaining) = (
                stop.clone(),
                snapshot.clone(),
                plan.clone(),
                remaining.clone(),
            );
            let policy = live.fork(None).expect("fork");
            std::thread::spawn(move || {
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::hint::black_box(forecast(
                        &snapshot,
                        &plan,
                        policy.as_ref(),
                        &remaining,
                        &full,
                        &[],
                    ));
                    done += 1;
                }
                done
            })
        };
        let beside = rounds(name, &snapshot, 20);
        stop.store(true, Ordering::Relaxed);
        let forecasts = background.join().unwrap_or(0);
        println!(
            "{name:<10} {:>10.2} {:>10.2} {:>12.1} {:>12.1} {:>10} {:>14.2} {:>14.2} {:>10.2}",
            percentile(alone.clone(), 0.5),
            percentile(alone, 0.99),
            head_ms,
            full_ms,
            whole.rounds,
            percentile(beside.clone(), 0.5),
            percentile(beside, 0.99),
            clone_ms
        );
        println!(
            "           ({predicted} of {} waiting jobs predicted within the horizon; {forecasts} forecasts ran beside the timed rounds)",
            whole.waiting.len()
        );
        snapshot = build_with(gpus, running, queued, FILLING);
    }
}
