//! The simulator's configuration (costs, round interval, seed), the stopwatch it is handed, and what a
//! run produces.

use crate::invariants;
use serde::Serialize;

/// What moving a job costs, in seconds of lost progress. Printed in every report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Costs {
    pub checkpoint_every_s: f64,
    pub checkpoint_s: f64,
    pub restart_s: f64,
    pub suspend_resume_s: f64,
    pub migration_s: f64,
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            checkpoint_every_s: 900.0,
            checkpoint_s: 30.0,
            restart_s: 30.0,
            suspend_resume_s: 5.0,
            migration_s: 45.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SimConfig {
    /// Seconds between full scheduling rounds (rounds also follow every completion).
    pub round_s: f64,
    pub seed: u64,
    pub costs: Costs,
    /// Slowdown of each of two jobs packed on one GPU.
    pub packing_slowdown: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            round_s: 60.0,
            seed: 1,
            costs: Costs::default(),
            packing_slowdown: 0.25,
        }
    }
}

/// A wall clock for timing decisions, handed in so the library itself reads no clock.
pub trait Stopwatch {
    fn now_ns(&self) -> u64;
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Invariant(#[from] invariants::Violation),
    #[error("policy {policy} left no decision for job {job}")]
    MissingDecision { policy: &'static str, job: String },
    #[error("the simulation did not finish: {0} jobs never completed")]
    Stuck(usize),
}

/// What happened to one job.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct JobOutcome {
    pub submit_s: f64,
    pub first_start_s: f64,
    pub finish_s: f64,
    pub restarts: u32,
}

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub jobs: Vec<JobOutcome>,
    /// (time, busy GPUs) after every change.
    pub busy_timeline: Vec<(f64, u32)>,
    pub busy_gpu_s: f64,
    pub round_ns: Vec<u64>,
    pub arrival_ns: Vec<u64>,
    pub rounds: u64,
    /// Start predictions made at arrivals, when asked for.
    pub predictions: Vec<super::predict::PredictionRecord>,
}
