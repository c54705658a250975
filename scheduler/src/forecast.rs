//! When will a queued job start? The live snapshot forked into a fast replay: the policy that runs the
//! cluster plays its own rounds ahead on a virtual clock, running jobs finish when their estimated
//! remaining work is done, queued jobs start when the policy starts them, and nothing new arrives.
//!
//! Remaining work comes from what has been observed (a step budget, cut short by a fitted loss curve
//! when the job stops at a target, times the fitted speed), or, for a job without a budget or not yet
//! measured, from how long finished jobs of its tenant took, given how long it has run ([`Priors`]). Each estimate has a 10th, 50th and 90th percentile; the replay runs once per
//! percentile (every job at its own percentile) and a job's predicted start under the three runs gives
//! its band. Like the policies, this is pure: no IO, no clock; the caller hands in the time.

use crate::perf::{ConvergenceModel, SpeedModel};
use crate::plan::{JobPlan, Placement, Plan, WaitReason};
use crate::policy::{Oracle, PolicyError, build_policy};
use crate::sim::Costs;
use crate::snapshot::{ClusterSnapshot, JobView, Shape};
use drover_core::JobId;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Seconds of work a job has left, at its preferred shape with its GPUs to itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Remaining {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
}

impl Remaining {
    fn at(self, scenario: Scenario) -> f64 {
        match scenario {
            Scenario::Low => self.p10,
            Scenario::Median => self.p50,
            Scenario::High => self.p90,
        }
    }

    fn scaled(self, low: f64, high: f64) -> Remaining {
        Remaining {
            p10: self.p50 * low,
            p50: self.p50,
            p90: self.p50 * high,
        }
    }
}

/// Quantiles of how long finished jobs took (seconds at their preferred shape).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quantiles {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub samples: usize,
}

impl Quantiles {
    /// `None` without usable samples (negative and non-finite ones are dropped).
    pub fn of(mut durations: Vec<f64>) -> Option<Quantiles> {
        durations.retain(|d| d.is_finite() && *d >= 0.0);
        if durations.is_empty() {
            return None;
        }
        durations.sort_by(f64::total_cmp);
        let at = |p: f64| {
            let position = p * (durations.len() - 1) as f64;
            let (lo, hi) = (position.floor() as usize, position.ceil() as usize);
            durations[lo] + (durations[hi] - durations[lo]) * (position - lo as f64)
        };
        Some(Quantiles {
            p10: at(0.1),
            p50: at(0.5),
            p90: at(0.9),
            samples: durations.len(),
        })
    }
}

/// How long jobs took, per tenant (index into the snapshot's tenants) and over all tenants.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Priors {
    pub overall: Option<Quantiles>,
    pub by_tenant: BTreeMap<u32, Quantiles>,
}

/// A tenant's own history is used once it has this many finished jobs.
pub const TENANT_HISTORY_MIN: usize = 5;

/// With no history at all: an hour, between ten minutes and eight hours.
pub const NO_HISTORY: Quantiles = Quantiles {
    p10: 600.0,
    p50: 3_600.0,
    p90: 28_800.0,
    samples: 0,
};

impl Priors {
    /// From finished jobs' (tenant, seconds at their preferred shape).
    pub fn from_history(history: &[(u32, f64)]) -> Priors {
        let all: Vec<f64> = history.iter().map(|&(_, d)| d).collect();
        let mut per: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for &(tenant, duration) in history {
            per.entry(tenant).or_default().push(duration);
        }
        Priors {
            overall: Quantiles::of(all),
            by_tenant: per
                .into_iter()
                .filter_map(|(tenant, d)| Some((tenant, Quantiles::of(d)?)))
                .filter(|(_, q)| q.samples >= TENANT_HISTORY_MIN)
                .collect(),
        }
    }

    fn for_tenant(&self, tenant: u32) -> Quantiles {
        self.by_tenant
            .get(&tenant)
            .copied()
            .or(self.overall)
            .unwrap_or(NO_HISTORY)
    }
}

/// Seconds per step at `shape` from what was observed, when anything was.
fn step_s(job: &JobView, shape: Shape) -> Option<f64> {
    if job.observed.step_stats.is_empty() {
        return None;
    }
    let model = SpeedModel::from_observations(&job.observed.step_stats);
    let s = model.step_s(shape);
    (s.is_finite() && s > 0.0).then_some(s)
}

/// A job's remaining work from what has been observed of it, else from its tenant's history.
pub fn estimate(job: &JobView, priors: &Priors) -> Remaining {
    let done = job.observed.steps_done as f64;
    let budget_left = job.observed.step_budget.map(|b| (b as f64 - done).max(0.0));
    let fitted_left = if job.observed.runs_to_budget {
        None
    } else {
        ConvergenceModel::fit(&job.observed.loss_samples).map(|m| m.remaining_steps(done))
    };
    if let (Some(step_s), Some(left)) = (step_s(job, job.preferred), budget_left) {
        // It stops at its budget, or at its target when it has one and the loss curve says it is
        // near: the speed (and the fit) are the only uncertainty.
        return match fitted_left {
            None => Remaining::scaled(Remaining::point(left * step_s), 0.9, 1.2),
            Some(fit) => Remaining::scaled(Remaining::point(left.min(fit) * step_s), 0.6, 1.3),
        };
    }
    // Without a budget a fitted loss curve says when training could stop, not when the job will:
    // how long its tenant's jobs ran is the better guide.
    // History: what is left of a job like its tenant's, given how long it has run already.
    let prior = priors.for_tenant(job.tenant);
    let ran = job.observed.executed_s;
    let left = |q: f64| {
        if ran < q {
            q - ran
        } else {
            // Past that quantile already: it has about as long again to go, by the usual rule of
            // thumb for heavy-tailed lengths.
            ran.max(60.0) * q / prior.p50.max(1.0)
        }
    };
    let (p10, p50, p90) = (left(prior.p10), left(prior.p50), left(prior.p90));
    Remaining {
        p10: p10.min(p50),
        p50,
        p90: p90.max(p50),
    }
}

impl Remaining {
    fn point(seconds: f64) -> Remaining {
        Remaining {
            p10: seconds,
            p50: seconds,
            p90: seconds,
        }
    }
}

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
enum Scenario {
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
    policy: &str,
    remaining: &HashMap<JobId, Remaining>,
    config: &ForecastConfig,
) -> Result<Forecast, PolicyError> {
    let order = queue_order(snapshot, plan);
    let targets: Vec<JobId> = order
        .iter()
        .take(config.head.unwrap_or(usize::MAX))
        .map(|&(id, _)| id)
        .collect();
    replay_all(snapshot, plan, policy, remaining, config, &order, &targets)
}

/// Predicts when one job starts, from a snapshot taken between rounds (the job has just arrived and
/// waits): the policy's next round runs at the snapshot's time, then the replay goes on. `None` when
/// that round starts the job.
pub fn predict_start(
    snapshot: &ClusterSnapshot,
    policy: &str,
    remaining: &HashMap<JobId, Remaining>,
    config: &ForecastConfig,
    job: JobId,
) -> Result<Option<Prediction>, PolicyError> {
    let oracle = EstimateOracle::shared(snapshot, remaining, Scenario::Median);
    let plan = build_policy(policy, Some(Box::new(oracle)))?.schedule(snapshot, &Plan::default());
    let order = queue_order(snapshot, &plan);
    if !order.iter().any(|&(id, _)| id == job) {
        return Ok(None);
    }
    let forecast = replay_all(snapshot, &plan, policy, remaining, config, &order, &[job])?;
    Ok(forecast.waiting.into_iter().find(|p| p.job == job))
}

fn replay_all(
    snapshot: &ClusterSnapshot,
    plan: &Plan,
    policy: &str,
    remaining: &HashMap<JobId, Remaining>,
    config: &ForecastConfig,
    order: &[(JobId, WaitReason)],
    targets: &[JobId],
) -> Result<Forecast, PolicyError> {
    let mut runs = Vec::with_capacity(3);
    let mut rounds = 0;
    for scenario in [Scenario::Median, Scenario::Low, Scenario::High] {
        let run = Replay::new(snapshot, plan, policy, remaining, scenario, config)?.run(targets);
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

/// What one replay found.
#[derive(Debug, Default)]
struct Outcome {
    starts: HashMap<JobId, f64>,
    finishes: HashMap<JobId, f64>,
    rounds: u32,
}

/// Progress of one job in the replay.
#[derive(Debug, Clone, Copy)]
struct Progress {
    /// Seconds of work at the preferred shape still to do.
    left: f64,
    /// Work per second at the current placement (0 while waiting).
    rate: f64,
    /// Work starts again here after a start, resize or move.
    productive_from: f64,
    /// Owed at the next start (a checkpoint on the way out, a restart).
    owed_s: f64,
}

/// Remaining times as the estimates have them, for oracle policies (SRTF) in the replay.
#[derive(Debug)]
struct EstimateOracle {
    left: Arc<Mutex<HashMap<JobId, (f64, f64)>>>,
}

impl EstimateOracle {
    /// An oracle over the jobs' estimates at `scenario`, not updated (for a single round).
    fn shared(
        snapshot: &ClusterSnapshot,
        remaining: &HashMap<JobId, Remaining>,
        scenario: Scenario,
    ) -> EstimateOracle {
        let left = snapshot
            .jobs
            .iter()
            .map(|job| {
                let seconds = remaining
                    .get(&job.id)
                    .map_or(NO_HISTORY.p50, |r| r.at(scenario));
                (job.id, (seconds, f64::from(job.preferred.workers.max(1))))
            })
            .collect();
        EstimateOracle {
            left: Arc::new(Mutex::new(left)),
        }
    }
}

impl Oracle for EstimateOracle {
    fn remaining_s(&self, job: JobId, shape: Shape) -> f64 {
        let Ok(left) = self.left.lock() else {
            return f64::INFINITY;
        };
        match left.get(&job) {
            Some(&(seconds, preferred_workers)) if shape.workers > 0 => {
                seconds * preferred_workers / f64::from(shape.workers)
            }
            _ => f64::INFINITY,
        }
    }
}

struct Replay<'a> {
    snapshot: ClusterSnapshot,
    previous: Plan,
    first_plan: Option<&'a Plan>,
    policy: Box<dyn crate::Policy>,
    oracle: Arc<Mutex<HashMap<JobId, (f64, f64)>>>,
    progress: HashMap<JobId, Progress>,
    config: &'a ForecastConfig,
    /// Jobs using each GPU, keyed by (node, GPU).
    gpu_users: HashMap<(u32, u16), u8>,
}

impl<'a> Replay<'a> {
    fn new(
        snapshot: &ClusterSnapshot,
        plan: &'a Plan,
        policy: &str,
        remaining: &HashMap<JobId, Remaining>,
        scenario: Scenario,
        config: &'a ForecastConfig,
    ) -> Result<Self, PolicyError> {
        let oracle = Arc::new(Mutex::new(HashMap::new()));
        let policy = build_policy(
            policy,
            Some(Box::new(EstimateOracle {
                left: oracle.clone(),
            })),
        )?;
        let progress = snapshot
            .jobs
            .iter()
            .map(|job| {
                let estimate = remaining.get(&job.id).copied().unwrap_or(Remaining {
                    p10: NO_HISTORY.p10,
                    p50: NO_HISTORY.p50,
                    p90: NO_HISTORY.p90,
                });
                let progress = Progress {
                    left: estimate.at(scenario).max(0.0),
                    rate: 0.0,
                    productive_from: snapshot.now_s,
                    owed_s: if job.observed.executed_s > 0.0 {
                        config.costs.restart_s
                    } else {
                        0.0
                    },
                };
                (job.id, progress)
            })
            .collect();
        let mut replay = Replay {
            snapshot: snapshot.clone(),
            previous: Plan::default(),
            first_plan: Some(plan),
            policy,
            oracle,
            progress,
            config,
            gpu_users: HashMap::new(),
        };
        let placements: Vec<Placement> = replay
            .snapshot
            .jobs
            .iter()
            .filter_map(|j| j.placement.clone())
            .collect();
        for placement in &placements {
            replay.occupy(placement, true);
        }
        replay.refresh_rates();
        Ok(replay)
    }

    fn occupy(&mut self, placement: &Placement, add: bool) {
        for task in &placement.tasks {
            for &gpu in &task.gpus {
                let users = self.gpu_users.entry((task.node.0, gpu)).or_default();
                if add {
                    *users += 1;
                } else {
                    *users = users.saturating_sub(1);
                }
            }
        }
    }

    fn rate_of(&self, job: &JobView, placement: &Placement) -> f64 {
        let shape = placement.shape();
        if shape.workers == 0 {
            return 0.0;
        }
        let relative = match (step_s(job, job.preferred), step_s(job, shape)) {
            (Some(preferred), Some(here)) => preferred / here,
            // Nothing observed: speed in proportion to workers.
            _ => f64::from(shape.workers) / f64::from(job.preferred.workers.max(1)),
        };
        let shared = placement.tasks.iter().any(|t| {
            t.gpus
                .iter()
                .any(|&g| self.gpu_users.get(&(t.node.0, g)).copied().unwrap_or(0) > 1)
        });
        let slowdown = if shared {
            1.0 - self.config.packing_slowdown
        } else {
            1.0
        };
        relative * slowdown
    }

    fn refresh_rates(&mut self) {
        for position in 0..self.snapshot.jobs.len() {
            let job = &self.snapshot.jobs[position];
            let rate = match &job.placement {
                Some(placement) => self.rate_of(job, placement),
                None => 0.0,
            };
            if let Some(progress) = self.progress.get_mut(&job.id) {
                progress.rate = rate;
            }
        }
    }

    fn finish_time(&self, id: JobId, now: f64) -> f64 {
        let Some(progress) = self.progress.get(&id) else {
            return f64::INFINITY;
        };
        if progress.rate <= 0.0 {
            return f64::INFINITY;
        }
        progress.productive_from.max(now) + progress.left / progress.rate
    }

    fn advance(&mut self, from: f64, to: f64) {
        let dt = to - from;
        if dt <= 0.0 {
            return;
        }
        for job in &mut self.snapshot.jobs {
            let Some(placement) = &job.placement else {
                continue;
            };
            if let Some(progress) = self.progress.get_mut(&job.id) {
                let productive = (to - from.max(progress.productive_from)).max(0.0);
                progress.left = (progress.left - progress.rate * productive).max(0.0);
            }
            job.observed.attained_gpu_s += f64::from(placement.num_gpus()) * dt;
            job.observed.executed_s += dt;
            job.observed.executed_since_promotion_s += dt;
        }
    }

    /// Carries out one decision, as the simulator does (same costs).
    fn apply(&mut self, position: usize, decision: &JobPlan, now: f64, outcome: &mut Outcome) {
        let costs = self.config.costs;
        let id = self.snapshot.jobs[position].id;
        let current = self.snapshot.jobs[position].placement.clone();
        match (current, decision) {
            (None, JobPlan::Run { placement, .. }) => {
                self.occupy(placement, true);
                if let Some(progress) = self.progress.get_mut(&id) {
                    progress.productive_from = now + progress.owed_s;
                    progress.owed_s = 0.0;
                }
                outcome.starts.entry(id).or_insert(now);
                let job = &mut self.snapshot.jobs[position];
                job.observed.last_state_change_s = now;
                job.placement = Some(placement.clone());
            }
            (Some(old), JobPlan::Wait { reason }) => {
                self.occupy(&old, false);
                if let Some(progress) = self.progress.get_mut(&id) {
                    progress.rate = 0.0;
                    progress.owed_s = match reason {
                        WaitReason::Suspended => costs.suspend_resume_s,
                        WaitReason::PreemptedWithoutCheckpoint => {
                            // Back to its last checkpoint: on average half an interval's work.
                            progress.left += costs.checkpoint_every_s / 2.0;
                            costs.restart_s
                        }
                        _ => costs.checkpoint_s + costs.restart_s,
                    };
                }
                let job = &mut self.snapshot.jobs[position];
                job.placement = None;
                job.observed.last_state_change_s = now;
            }
            (Some(old), JobPlan::Run { placement, .. }) if !old.same_resources(placement) => {
                let overhead = if old.shape() != placement.shape() {
                    costs.checkpoint_s + costs.restart_s
                } else {
                    costs.migration_s
                };
                self.occupy(&old, false);
                self.occupy(placement, true);
                if let Some(progress) = self.progress.get_mut(&id) {
                    progress.productive_from = now.max(progress.productive_from) + overhead;
                }
                self.snapshot.jobs[position].placement = Some(placement.clone());
            }
            (Some(old), JobPlan::Run { placement, .. }) if old != *placement => {
                self.snapshot.jobs[position].placement = Some(placement.clone());
            }
            _ => {}
        }
    }

    fn apply_plan(&mut self, plan: &Plan, now: f64, outcome: &mut Outcome) {
        for pass in [false, true] {
            for position in 0..self.snapshot.jobs.len() {
                let Some(decision) = plan.jobs.get(&self.snapshot.jobs[position].id) else {
                    continue;
                };
                if matches!(decision, JobPlan::Run { .. }) == pass {
                    let decision = decision.clone();
                    self.apply(position, &decision, now, outcome);
                }
            }
        }
        self.refresh_rates();
    }

    fn share_estimates(&self) {
        if let Ok(mut left) = self.oracle.lock() {
            left.clear();
            for job in &self.snapshot.jobs {
                if let Some(progress) = self.progress.get(&job.id) {
                    left.insert(
                        job.id,
                        (progress.left, f64::from(job.preferred.workers.max(1))),
                    );
                }
            }
        }
    }

    fn run(mut self, targets: &[JobId]) -> Outcome {
        let mut outcome = Outcome::default();
        let mut now = self.snapshot.now_s;
        let end = now + self.config.horizon_s;
        if let Some(plan) = self.first_plan.take() {
            self.apply_plan(plan, now, &mut outcome);
            self.previous = plan.clone();
        }
        let mut pending: std::collections::HashSet<JobId> = targets
            .iter()
            .filter(|id| !outcome.starts.contains_key(id))
            .copied()
            .collect();
        let mut last_round = now;
        while !pending.is_empty() && outcome.rounds < self.config.max_rounds {
            let completion = self
                .snapshot
                .jobs
                .iter()
                .filter(|j| j.placement.is_some())
                .map(|j| self.finish_time(j.id, now))
                .fold(f64::INFINITY, f64::min);
            let next = completion.min(last_round + self.config.round_s).max(now);
            if next > end {
                break;
            }
            self.advance(now, next);
            now = next;
            self.snapshot.now_s = now;
            let mut position = 0;
            while position < self.snapshot.jobs.len() {
                let job = &self.snapshot.jobs[position];
                if job.placement.is_some() && self.finish_time(job.id, now) <= now + 1e-6 {
                    let id = job.id;
                    if let Some(placement) = job.placement.clone() {
                        self.occupy(&placement, false);
                    }
                    outcome.finishes.insert(id, now);
                    self.snapshot.jobs.remove(position);
                    self.previous.jobs.remove(&id);
                } else {
                    position += 1;
                }
            }
            self.refresh_rates();
            self.share_estimates();
            let plan = self.policy.schedule(&self.snapshot, &self.previous);
            outcome.rounds += 1;
            self.apply_plan(&plan, now, &mut outcome);
            self.previous = plan;
            last_round = now;
            pending.retain(|id| !outcome.starts.contains_key(id));
        }
        // Jobs still running when the replay stops finish when their work is done at today's rate.
        for job in &self.snapshot.jobs {
            if job.placement.is_some() {
                let at = self.finish_time(job.id, now);
                if at.is_finite() {
                    outcome.finishes.entry(job.id).or_insert(at);
                }
            }
        }
        outcome
    }
}
