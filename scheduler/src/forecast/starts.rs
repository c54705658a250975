//! Predicted starts: the queue in the order the policy would start it, the replays over every draw
//! (and the band's edges), and each waiting job's median start with its band.

use super::arrivals::Arrival;
use super::cohort::Cohorts;
use super::config::ForecastConfig;
use super::remaining::{Basis, Remaining};
use super::replay::{self, Draw, EstimateOracle, Replay};
use super::scenario::Scenario;
use crate::plan::{JobPlan, Plan, WaitReason};
use crate::policy::{Policy, PolicyError};
use crate::snapshot::ClusterSnapshot;
use drover_core::JobId;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

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
    /// How many of the estimates its start rests on (the running jobs' and those of the jobs ahead
    /// of it) are [`Basis::Guess`]es: no job like them has finished or been measured.
    pub guesses: u32,
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
/// with `plan` applied. A job without an entry in `remaining` is estimated with
/// [`NO_HISTORY`](super::NO_HISTORY).
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
    // A start rests on the running jobs' estimates and those of the jobs ahead.
    let guessed = |id: &JobId| remaining.get(id).is_none_or(|r| r.basis == Basis::Guess);
    let mut guesses = snapshot
        .jobs
        .iter()
        .filter(|j| j.placement.is_some() && guessed(&j.id))
        .count() as u32;
    let waiting = order
        .iter()
        .enumerate()
        .map(|(i, &(id, reason))| {
            let ahead_guessed = guesses;
            guesses += u32::from(guessed(&id));
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
                guesses: ahead_guessed,
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
