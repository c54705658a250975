//! The simulator's configuration (costs, round interval, seed), the stopwatch it is handed, and what a
//! run produces.

use crate::invariants;
use crate::plan::Placement;
use serde::{Deserialize, Serialize};

/// What moving a job costs, in seconds of lost progress. Printed in every report. The simulator and
/// the queue forecast both charge through [`Costs::resume_s`] and [`Costs::move_s`], so they agree.
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

/// What a job costs to change while it runs, and what it is charged for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Same shape on other GPUs or nodes.
    Migration,
    /// Another shape: a checkpoint, then a restart at the new shape.
    Resize,
}

impl Costs {
    /// Seconds a running job loses moving from `old` to `new` (which use different resources).
    pub fn move_s(&self, old: &Placement, new: &Placement) -> (f64, Change) {
        if old.shape() == new.shape() {
            (self.migration_s, Change::Migration)
        } else {
            (self.checkpoint_s + self.restart_s, Change::Resize)
        }
    }

    /// Seconds a job suspended in memory at `from` loses resuming at `to`. Its state sits in the
    /// memory of `from`'s nodes: there it resumes cheaply (on any of their GPUs); on other nodes its
    /// state moves first (a migration); at another shape it checkpoints and restarts (a resize).
    pub fn resume_s(&self, from: &Placement, to: &Placement) -> (f64, Option<Change>) {
        if from.shape() != to.shape() {
            (self.checkpoint_s + self.restart_s, Some(Change::Resize))
        } else if from.same_nodes(to) {
            (self.suspend_resume_s, None)
        } else {
            (self.migration_s, Some(Change::Migration))
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

impl Disruptions {
    /// Counts a change a job paid for (nothing for `None`).
    pub fn count(&mut self, change: Option<Change>) {
        match change {
            Some(Change::Migration) => self.migrations += 1,
            Some(Change::Resize) => self.resizes += 1,
            None => {}
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
    /// Its workers over the time it was placed, on average, and at most.
    pub mean_workers: f64,
    pub max_workers: u32,
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
    pub predictions: Vec<PredictionRecord>,
    pub disruptions: Disruptions,
}

/// One prediction made at a job's arrival.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PredictionRecord {
    /// Index of the job in the workload.
    pub job: usize,
    pub made_at_s: f64,
    pub start_s: Option<f64>,
    pub start_p10_s: Option<f64>,
    pub start_p90_s: Option<f64>,
}
