//! When will a queued job start? The live snapshot forked into a fast replay: the policy that runs the
//! cluster plays its own rounds ahead on a virtual clock, running jobs finish when their estimated
//! remaining work is done, queued jobs start when the policy starts them, and nothing new arrives.
//!
//! Remaining work comes from what has been observed (a step budget, cut short by a fitted loss curve
//! when the job stops at a target, times the fitted speed), or, for a job without a budget or not yet
//! measured, from how long jobs like it ran, given how long it has run ([`Priors`]: by tenant and
//! size, running jobs counted as censored lengths, a sweep as old as its [`Cohorts`], or a sweep's
//! own lengths once a quarter of it has ended). Each estimate
//! is a distribution (10th, 50th and 90th percentile); the replay runs [`ForecastConfig::samples`]
//! times with every job's remaining work drawn from it (a sweep's jobs drawn together unless
//! estimated from the sweep's own lengths), and a job's
//! predicted start is the median of its starts over the draws, its band their 10th to 90th
//! percentile. Like the policies, this is pure: no IO, no clock; the caller hands in the time.

mod cohort;
mod estimate;
mod lengths;
mod replay;

pub use cohort::{COHORT_GAP_S, COHORT_SPAN_S, Cohorts};

pub use estimate::{
    Finished, NO_HISTORY, Priors, Remaining, TENANT_HISTORY_MIN, estimate, size_class, work_done_s,
};
pub use lengths::{Lengths, Quantiles};

use crate::plan::{JobPlan, Plan, WaitReason};
use crate::policy::{Policy, PolicyError};
use crate::sim::Costs;
use crate::snapshot::{ClusterSnapshot, JobView};
use drover_core::JobId;
use replay::{Draw, EstimateOracle, Replay};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

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
        }
    }
}

/// A job expected to be submitted during the replay, with its estimated work.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// `submit_s` is when it arrives; its id must not be a real job's.
    pub job: JobView,
    pub remaining: Remaining,
}

/// The arrivals to expect if the last `window_s` seconds repeat: every job in `recent` submitted within
/// that window, again one, two, … windows later, up to `ahead_s` past `now_s` and `cap` jobs. Each copy
/// gets a fresh id (counting down from the top of the id space) and nothing observed.
pub fn recent_arrivals(
    recent: &[&JobView],
    now_s: f64,
    window_s: f64,
    ahead_s: f64,
    cap: usize,
    priors: &Priors,
) -> Vec<Arrival> {
    let mut window: Vec<&JobView> = recent
        .iter()
        .copied()
        .filter(|j| j.submit_s > now_s - window_s && j.submit_s <= now_s)
        .collect();
    if window_s <= 0.0 || window.is_empty() {
        return Vec::new();
    }
    window.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    let mut out = Vec::new();
    let mut repeat = 1.0;
    'repeats: while repeat * window_s <= ahead_s {
        for job in &window {
            if out.len() >= cap {
                break 'repeats;
            }
            let mut copy = (*job).clone();
            copy.id = JobId(uuid::Uuid::from_u128(u128::MAX - out.len() as u128));
            copy.submit_s = job.submit_s + repeat * window_s;
            copy.placement = None;
            copy.observed = crate::snapshot::Observations::default();
            let remaining = estimate(&copy, priors);
            out.push(Arrival {
                job: copy,
                remaining,
            });
        }
        repeat += 1.0;
    }
    out
}

/// One waiting job's prediction. Times are on the snapshot's clock.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    pub job: JobId,
    /// 1 for the job the policy would start first.
    pub position: u32,
    pub reason: WaitReason,
    /// `None`: not started within the horizon (or the replay's round budget).
    pub start_s: Option<f64>,
    pub finish_s: Option<f64>,
    /// The start if jobs take as long as their 10th / 90th percentile estimates.
    pub start_p10_s: Option<f64>,
    pub start_p90_s: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Forecast {
    pub now_s: f64,
    /// Waiting jobs, in the policy's order.
    pub waiting: Vec<Prediction>,
    /// Running jobs' predicted finish (median estimate).
    pub finishing: BTreeMap<JobId, f64>,
    /// Rounds the three replays took together.
    pub rounds: u32,
}

/// One replay's draw of every job's remaining work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// Every job at its median estimate.
    Median,
    /// Every job at its 10th / 90th percentile: the band's outer edges.
    Low,
    High,
    /// Draw `index` of `of`: every job at a level of its own distribution. Over the `of` draws a
    /// cohort ([`Cohorts`]: a sweep's jobs) takes each `of`-th of its distribution once (a Latin
    /// hypercube), in an order of its own, so a few draws cover the tails. A sweep's jobs run
    /// about as long as each other, so they are drawn together: drawn apart, some of a sweep's
    /// hundreds of jobs always end early, and its GPUs look free long before they are.
    Sample {
        index: u32,
        of: u32,
    },
}

impl Scenario {
    /// The quantile level a job of `cohort` takes in this scenario.
    pub(crate) fn level(self, cohort: u64) -> f64 {
        match self {
            Scenario::Median => 0.5,
            Scenario::Low => 0.1,
            Scenario::High => 0.9,
            Scenario::Sample { index, of } => {
                let of = of.max(1);
                // The cohort's own shuffle of the strata (Fisher-Yates on a stream seeded by it).
                let mut strata: Vec<u32> = (0..of).collect();
                let mut state = cohort;
                for i in (1..strata.len()).rev() {
                    state = splitmix(state);
                    strata.swap(i, (state % (i as u64 + 1)) as usize);
                }
                (f64::from(strata[(index % of) as usize]) + 0.5) / f64::from(of)
            }
        }
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The waiting jobs in the order `plan` would start them: the policy's order, then submission order.
pub fn queue_order(snapshot: &ClusterSnapshot, plan: &Plan) -> Vec<(JobId, WaitReason)> {
    let waiting = |id: &JobId| match plan.jobs.get(id) {
        Some(JobPlan::Wait { reason }) => Some(*reason),
        _ => None,
    };
    let mut seen = std::collections::HashSet::new();
    plan.order
        .iter()
        .copied()
        .chain(snapshot.jobs.iter().map(|j| j.id))
        .filter(|id| seen.insert(*id))
        .filter_map(|id| Some((id, waiting(&id)?)))
        .collect()
}

/// Predicts when every job `plan` leaves waiting starts, replaying `policy` ahead from `snapshot`
/// with `plan` applied. A job without an entry in `remaining` is estimated with [`NO_HISTORY`].
pub fn forecast(
    snapshot: &ClusterSnapshot,
    plan: &Plan,
    policy: &dyn Policy,
    remaining: &HashMap<JobId, Remaining>,
    config: &ForecastConfig,
    arrivals: &[Arrival],
) -> Result<Forecast, PolicyError> {
    let order = queue_order(snapshot, plan);
    let targets: Vec<JobId> = order
        .iter()
        .take(config.head.unwrap_or(usize::MAX))
        .map(|&(id, _)| id)
        .collect();
    replay_all(
        snapshot, plan, policy, remaining, config, arrivals, &targets,
    )
}

/// Predicts when one job starts, from a snapshot taken between rounds (the job has just arrived and
/// waits): the policy's next round runs at the snapshot's time, then the replay goes on. `None` when
/// that round starts the job.
pub fn predict_start(
    snapshot: &ClusterSnapshot,
    policy: &dyn Policy,
    remaining: &HashMap<JobId, Remaining>,
    config: &ForecastConfig,
    arrivals: &[Arrival],
    job: JobId,
) -> Result<Option<Prediction>, PolicyError> {
    let oracle = EstimateOracle::shared(snapshot, remaining, Scenario::Median);
    let plan = policy
        .fork(Some(Box::new(oracle)))?
        .schedule(snapshot, &Plan::default());
    let order = queue_order(snapshot, &plan);
    if !order.iter().any(|&(id, _)| id == job) {
        return Ok(None);
    }
    let forecast = replay_all(snapshot, &plan, policy, remaining, config, arrivals, &[job])?;
    Ok(forecast.waiting.into_iter().find(|p| p.job == job))
}

fn replay_all(
    snapshot: &ClusterSnapshot,
    plan: &Plan,
    policy: &dyn Policy,
    remaining: &HashMap<JobId, Remaining>,
    config: &ForecastConfig,
    arrivals: &[Arrival],
    targets: &[JobId],
) -> Result<Forecast, PolicyError> {
    // Sharing a GPU slows a job never seen sharing as much as it slowed the snapshot's jobs that
    // were, where enough were: found once for all the replays.
    let config = &ForecastConfig {
        packing_slowdown: replay::observed_packing_slowdown(snapshot)
            .unwrap_or(config.packing_slowdown),
        ..*config
    };
    let order = queue_order(snapshot, plan);
    // Nothing waits: one replay at the medians says when running jobs end.
    let scenarios: Vec<Scenario> = if targets.is_empty() || config.samples <= 1 {
        vec![Scenario::Median]
    } else {
        (0..config.samples)
            .map(|index| Scenario::Sample {
                index,
                of: config.samples,
            })
            .collect()
    };
    let cohorts = Cohorts::of(&snapshot.jobs);
    let mut runs = Vec::with_capacity(scenarios.len());
    let mut rounds = 0;
    for scenario in scenarios {
        let draw = Draw {
            scenario,
            cohorts: &cohorts,
        };
        let run =
            Replay::new(snapshot, plan, policy, remaining, draw, config, arrivals)?.run(targets);
        rounds += run.rounds;
        runs.push(run);
    }
    // The band's edges: every job as short, or as long, as its estimate's 10th / 90th percentile.
    // Draws of many independent jobs average out, so the draws' own spread is too narrow when many
    // jobs are ahead (on week 40 at 32×8, 6% of actual starts fell inside it; with these edges 83%
    // did before the draws existed).
    let mut edges = Vec::with_capacity(2);
    if runs.len() > 1 {
        for scenario in [Scenario::Low, Scenario::High] {
            let draw = Draw {
                scenario,
                cohorts: &cohorts,
            };
            let run = Replay::new(snapshot, plan, policy, remaining, draw, config, arrivals)?
                .run(targets);
            rounds += run.rounds;
            edges.push(run);
        }
    }
    let waiting = order
        .iter()
        .enumerate()
        .map(|(i, &(id, reason))| {
            let starts = Spread::of(runs.iter().map(|r| r.starts.get(&id).copied()));
            let finishes = Spread::of(runs.iter().map(|r| r.finishes.get(&id).copied()));
            let edge = |k: usize| {
                edges
                    .get(k)
                    .map(|r: &replay::Outcome| r.starts.get(&id).copied())
            };
            let (low, high) = (starts.at(0.1), starts.at(0.9));
            Prediction {
                job: id,
                position: i as u32 + 1,
                reason,
                start_s: starts.at(0.5),
                finish_s: finishes.at(0.5),
                start_p10_s: match edge(0) {
                    Some(Some(edge)) => Some(low.map_or(edge, |low| low.min(edge))),
                    _ => low,
                },
                start_p90_s: match edge(1) {
                    Some(None) => None,
                    Some(Some(edge)) => high.map(|high| high.max(edge)),
                    None => high,
                },
            }
        })
        .collect();
    let finishing = snapshot
        .jobs
        .iter()
        .filter(|j| j.placement.is_some())
        .filter_map(|j| {
            let finishes = Spread::of(runs.iter().map(|r| r.finishes.get(&j.id).copied()));
            Some((j.id, finishes.at(0.5)?))
        })
        .collect();
    Ok(Forecast {
        now_s: snapshot.now_s,
        waiting,
        finishing,
        rounds,
    })
}

/// One job's times over the replays, sorted; a replay where it never happened counts as never.
struct Spread(Vec<f64>);

impl Spread {
    fn of(times: impl Iterator<Item = Option<f64>>) -> Spread {
        let mut times: Vec<f64> = times.map(|t| t.unwrap_or(f64::INFINITY)).collect();
        times.sort_by(f64::total_cmp);
        Spread(times)
    }

    /// The `q` quantile (nearest rank), `None` when that is never.
    fn at(&self, q: f64) -> Option<f64> {
        let last = self.0.len().checked_sub(1)?;
        let rank = (q * last as f64).round() as usize;
        self.0
            .get(rank.min(last))
            .copied()
            .filter(|t| t.is_finite())
    }
}
