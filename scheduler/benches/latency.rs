//! Decision latency of every policy: one full round with 1,000 queued and 2,000 running jobs on 10,000
//! GPUs (target p99 <= 50 ms), and one arrival placed incrementally (target <= 1 ms); then the same at
//! ten times the size (10,000 queued, 20,000 running, 100,000 GPUs; target <= 1 s). Running jobs carry
//! loss samples and step times at three shapes, and every timed round starts from a fresh policy, so
//! the model-fitting policies (Optimus, drover) fit every job's models inside the timed region.
//!
//! The 10,000-GPU round also runs with the nodes in thirds of V100, P100 and K80 (target p99 <= 20 ms
//! for `drover`, which then keeps gangs on one model and chooses each job's).
//!
//! Then the round a live server makes round after round with one policy (its caches warm), on the
//! cluster `drover bench fleet` drives: 1,000 nodes of 8 GPUs full of one-GPU jobs (8,000 running,
//! 4,000 queued, none declaring its GPU memory), the clock a quarter second on between rounds and
//! every running job's service grown by it (the server's target: round p99 <= 100 ms, of which
//! planning is a part).
//!
//! Run: `cargo bench -p drover-scheduler --bench latency` (`DROVER_BENCH_POLICIES=drover` for one).

mod common;

use common::{SIZES, build_sized, build_with, percentile};
use drover_core::JobId;
use drover_scheduler::snapshot::Shape;
use drover_scheduler::{Oracle, Plan, build_policy, policy_names};
use std::time::Instant;

#[derive(Debug)]
struct RandomOracle;

impl Oracle for RandomOracle {
    fn remaining_s(&self, job: JobId, _shape: Shape) -> f64 {
        (job.0.as_u128() % 9973) as f64 * 37.0
    }
}

/// Whether to run `policy`: `DROVER_BENCH_POLICIES=drover,tiresias` runs only those (for a profile
/// of one).
fn chosen(policy: &str) -> bool {
    match std::env::var("DROVER_BENCH_POLICIES") {
        Ok(list) => list.split(',').any(|p| p.trim() == policy),
        Err(_) => true,
    }
}

fn measure(label: &str, gpus: u32, running: usize, queued: usize, rounds: usize, models: &[&str]) {
    let mut snapshot = build_with(gpus, running, queued, SIZES);
    // Several GPU models: the nodes in equal thirds (or halves...), in blocks.
    let block = snapshot.nodes.len().div_ceil(models.len().max(1)).max(1);
    for (i, node) in snapshot.nodes.iter_mut().enumerate() {
        if let Some(model) = models.get(i / block) {
            for gpu in &mut node.gpus {
                gpu.model = (*model).to_owned();
            }
        }
    }
    println!(
        "\n{label}: {queued} queued + {running} running jobs on {gpus} GPUs, {rounds} rounds each"
    );
    println!(
        "{:<15} {:>14} {:>14} {:>16} {:>16}",
        "policy", "round p50 ms", "round p99 ms", "arrival p50 us", "arrival p99 us"
    );
    for name in policy_names()
        .into_iter()
        .chain((models.len() > 1).then_some("drover-model-blind"))
        .filter(|name| chosen(name))
    {
        if name == "gavel" && gpus > 10_000 {
            // A simulator baseline: its program has jobs x models variables.
            println!("{name:<15} (not run at this size: a simulator baseline)");
            continue;
        }
        // Gavel solves a linear program every round: a few rounds tell its cost.
        let rounds = if name == "gavel" {
            rounds.min(3)
        } else {
            rounds
        };
        let mut times = Vec::with_capacity(rounds);
        let mut previous = Plan::default();
        for _ in 0..rounds {
            // A fresh policy each round: nothing cached, every model fitted in the timed region.
            let mut policy = build_policy(name, Some(Box::new(RandomOracle))).expect("policy");
            let started = Instant::now();
            let plan = policy.schedule(&snapshot, &previous);
            times.push(started.elapsed().as_secs_f64() * 1e3);
            previous = plan;
        }
        let mut policy = build_policy(name, Some(Box::new(RandomOracle))).expect("policy");
        let mut arrivals = Vec::new();
        for job in snapshot.jobs.iter().rev().take(200) {
            let started = Instant::now();
            let decision = policy.place_arrival(&snapshot, job);
            arrivals.push(started.elapsed().as_secs_f64() * 1e6);
            std::hint::black_box(decision);
        }
        println!(
            "{name:<15} {:>14.2} {:>14.2} {:>16.1} {:>16.1}",
            percentile(times.clone(), 0.5),
            percentile(times, 0.99),
            percentile(arrivals.clone(), 0.5),
            percentile(arrivals, 0.99)
        );
    }
}

/// Rounds of one policy kept between them, the clock and the running jobs' service moving on.
fn measure_steady(label: &str, gpus: u32, running: usize, queued: usize, rounds: usize) {
    let mut snapshot = build_sized(gpus, running, queued, &[1], &[1]);
    // As the fleet's jobs: no GPU memory declared, so none is packed.
    for job in &mut snapshot.jobs {
        job.gpu_memory_gb = None;
    }
    println!(
        "\n{label}: {queued} queued + {running} running one-GPU jobs on {gpus} GPUs, {rounds} rounds of one policy each"
    );
    println!(
        "{:<15} {:>14} {:>14} {:>14} {:>14}",
        "policy", "round p50 ms", "round p99 ms", "first ms", "save p50 ms"
    );
    for name in policy_names()
        .into_iter()
        .filter(|name| *name != "gavel" && chosen(name))
    {
        let mut policy = build_policy(name, Some(Box::new(RandomOracle))).expect("policy");
        let mut previous = Plan::default();
        let mut times = Vec::with_capacity(rounds);
        let mut saves = Vec::with_capacity(rounds);
        let start_s = snapshot.now_s;
        for round in 0..=rounds {
            snapshot.now_s = start_s + 0.25 * round as f64;
            for job in snapshot.jobs.iter_mut().filter(|j| j.placement.is_some()) {
                job.observed.executed_s += 0.25;
                job.observed.attained_gpu_s += 0.25;
            }
            let started = Instant::now();
            let plan = policy.schedule(&snapshot, &previous);
            times.push(started.elapsed().as_secs_f64() * 1e3);
            previous = plan;
            // What the server saves for the next leader after every round.
            let started = Instant::now();
            std::hint::black_box(policy.save());
            saves.push(started.elapsed().as_secs_f64() * 1e3);
        }
        let first = times.remove(0);
        println!(
            "{name:<15} {:>14.2} {:>14.2} {:>14.2} {:>14.2}",
            percentile(times.clone(), 0.5),
            percentile(times, 0.99),
            first,
            percentile(saves, 0.5)
        );
    }
}

fn main() {
    if std::env::var("DROVER_BENCH_STEADY_ONLY").is_ok() {
        measure_steady("busy fleet", 8_000, 8_000, 4_000, 40);
        return;
    }
    measure("round", 10_000, 2_000, 1_000, 30, &[]);
    measure(
        "round on three GPU models",
        10_000,
        2_000,
        1_000,
        30,
        &["V100", "P100", "K80"],
    );
    measure("large round", 100_000, 20_000, 10_000, 3, &[]);
    measure_steady("busy fleet", 8_000, 8_000, 4_000, 40);
}
