//! The simulator's configuration (costs, round interval, seed), the stopwatch it is handed, and what a
//! run produces.

use crate::invariants;
use serde::{Deserialize, Serialize};

/// What moving a job costs, in seconds of lost progress. Printed in every report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
    /// How much two jobs packed on one GPU slow each other.
    pub interference: Interference,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            round_s: 60.0,
            seed: 1,
            costs: Costs::default(),
            interference: Interference::Drawn,
        }
    }
}

/// How much a job slows down while another job shares its GPU. Hidden from policies: they see only the
/// step times that result.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Interference {
    /// Every pair alike: each job runs this fraction slower (0.25: at 75% of its speed alone).
    Fixed(f64),
    /// Drawn for each ordered pair (how much B slows A), from the spread packing measurements show:
    /// a job's step takes 1 + x times as long, x uniform in [0, 0.3) for 60% of pairs, [0.3, 0.6) for
    /// 25%, [0.6, 1.5) for 15% (about 8% of pairs then do less together than one job alone).
    Drawn,
}

impl Interference {
    /// The factor on A's speed while B shares its GPU, for the run seeded with `seed`.
    pub fn speed_factor(self, seed: u64, a: u64, b: u64) -> f64 {
        match self {
            Interference::Fixed(slowdown) => (1.0 - slowdown).max(0.01),
            Interference::Drawn => {
                let bits =
                    splitmix(splitmix(seed ^ 0x9ac4) ^ splitmix(a) ^ splitmix(b).rotate_left(17));
                let pick = (bits >> 40) as f64 / (1u64 << 24) as f64;
                let within = (bits & 0xff_ffff) as f64 / (1u64 << 24) as f64;
                let x = if pick < 0.60 {
                    0.3 * within
                } else if pick < 0.85 {
                    0.3 + 0.3 * within
                } else {
                    0.6 + 0.9 * within
                };
                1.0 / (1.0 + x)
            }
        }
    }
}

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Times the simulator changed a running job, per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Disruptions {
    /// Stopped with a checkpoint (or killed) to make room; restarted later.
    pub preemptions: u64,
    /// Suspended in memory (time-slicing) and resumed later.
    pub suspensions: u64,
    /// Shape changed while running (a checkpoint and a restart at the new shape).
    pub resizes: u64,
    /// Moved to other GPUs or nodes at the same shape.
    pub migrations: u64,
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
    pub disruptions: Disruptions,
}
