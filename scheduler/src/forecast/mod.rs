//! When will a queued job start? The live snapshot forked into a fast replay: the policy that runs the
//! cluster plays its own rounds ahead on a virtual clock, running jobs finish when their estimated
//! remaining work is done, queued jobs start when the policy starts them, and nothing new arrives.
//!
//! Remaining work comes from what has been observed (a step budget, cut short by a fitted loss curve
//! when the job stops at a target, times the fitted speed), or, for a job without a budget or not yet
//! measured, from how long finished jobs of its tenant took, given how long it has run ([`Priors`]). Each estimate has a 10th, 50th and 90th percentile; the replay runs once per
//! percentile (every job at its own percentile) and a job's predicted start under the three runs gives
//! its band. Like the policies, this is pure: no IO, no clock; the caller hands in the time.

mod estimate;
mod replay;

pub use estimate::{NO_HISTORY, Priors, Quantiles, Remaining, TENANT_HISTORY_MIN, estimate};

use crate::plan::{JobPlan, Plan, WaitReason};
use crate::policy::{Policy, PolicyError};
use crate::sim::Costs;
use crate::snapshot::{ClusterSnapshot, JobView};
use drover_core::JobId;
use replay::{EstimateOracle, Outcome, Replay};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

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
            costs: Costs::default(),
            packing_slowdown: 0.25,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    Low,
    Median,
    High,
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
    let order = queue_order(snapshot, plan);
    let mut runs = Vec::with_capacity(3);
    let mut rounds = 0;
    for scenario in [Scenario::Median, Scenario::Low, Scenario::High] {
        let run = Replay::new(
            snapshot, plan, policy, remaining, scenario, config, arrivals,
        )?
        .run(targets);
        rounds += run.rounds;
        runs.push(run);
        if targets.is_empty() {
            break;
        }
    }
    let median = &runs[0];
    let start = |run: &Outcome, id: &JobId| run.starts.get(id).copied();
    let waiting = order
        .iter()
        .enumerate()
        .map(|(i, &(id, reason))| {
            let starts: Vec<f64> = runs.iter().filter_map(|r| start(r, &id)).collect();
            let started_everywhere = starts.len() == runs.len();
            Prediction {
                job: id,
                position: i as u32 + 1,
                reason,
                start_s: start(median, &id),
                finish_s: median.finishes.get(&id).copied(),
                start_p10_s: starts.iter().copied().reduce(f64::min),
                start_p90_s: if started_everywhere {
                    starts.iter().copied().reduce(f64::max)
                } else {
                    None
                },
            }
        })
        .collect();
    let finishing = snapshot
        .jobs
        .iter()
        .filter(|j| j.placement.is_some())
        .filter_map(|j| Some((j.id, *median.finishes.get(&j.id)?)))
        .collect();
    Ok(Forecast {
        now_s: snapshot.now_s,
        waiting,
        finishing,
        rounds,
    })
}
