//! How the forecast runs: the replay's round interval, horizon and round budget, how many draws it
//! takes, the costs it charges (the simulator's), and how much sharing a GPU slows a job.

use crate::sim::Costs;
use serde::Serialize;

/// How much sharing a GPU slows a job, where nothing observed says: its pace shared over its pace
/// alone is taken as 1 − this.
pub const PACKING_SLOWDOWN: f64 = 0.25;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ForecastConfig {
    /// Seconds between the replay's rounds (rounds also follow every completion).
    pub round_s: f64,
    /// How far ahead to look; jobs not started by then get no prediction.
    pub horizon_s: f64,
    /// At most this many rounds per replay (bounds the work on a huge queue).
    pub max_rounds: u32,
    /// Stop once this many of the waiting jobs (in the policy's order) have started; `None` for all.
    pub head: Option<usize>,
    /// Replays with every job's remaining work drawn from its estimate's distribution: a job's
    /// predicted start is the median of its starts over them, its band their 10th to 90th
    /// percentile. (A replay with every job at its own median is not the median outcome: a job
    /// waiting for the 8th of 50 heavy-tailed jobs to end waits for an order statistic.)
    pub samples: u32,
    pub costs: Costs,
    pub packing_slowdown: f64,
    /// Called between the replay's rounds (the server's forecaster rests there, to keep within its
    /// share of the cores through a forecast of minutes); `None` to go straight on.
    #[serde(skip)]
    pub between_rounds: Option<BetweenRounds>,
}

/// A function the replay calls between its rounds. It changes nothing the forecast computes:
/// configurations that differ only in it are equal.
#[derive(Clone, Copy)]
pub struct BetweenRounds(pub fn());

impl std::fmt::Debug for BetweenRounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BetweenRounds")
    }
}

impl PartialEq for BetweenRounds {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Default for ForecastConfig {
    fn default() -> Self {
        ForecastConfig {
            round_s: 300.0,
            horizon_s: 30.0 * 86_400.0,
            max_rounds: 2_000,
            head: None,
            samples: 9,
            costs: Costs::default(),
            packing_slowdown: PACKING_SLOWDOWN,
            between_rounds: None,
        }
    }
}
