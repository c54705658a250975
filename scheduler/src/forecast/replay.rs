//! One replay: the snapshot on a virtual clock, jobs progressing at their estimated rate, the policy
//! deciding every round and at every completion, the simulator's costs for starts, resizes and
//! preemptions, and no new arrivals.

use super::arrivals::Arrival;
use super::cohort::Cohorts;
use super::config::ForecastConfig;
use super::estimate::{self, NO_HISTORY};
use super::remaining::{Basis, Remaining};
use super::scenario::Scenario;
use crate::plan::{JobPlan, Placement, Plan, WaitReason};
use crate::policy::{Oracle, PolicyError};
use crate::snapshot::{ClusterSnapshot, JobView, Shape};
use drover_core::JobId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What one replay found.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub starts: HashMap<JobId, f64>,
    pub finishes: HashMap<JobId, f64>,
    pub rounds: u32,
}

/// Progress of one job in the replay.
#[derive(Debug, Clone)]
struct Progress {
    /// Seconds of work at the preferred shape still to do.
    left: f64,
    /// Work per second at the current placement (0 while waiting).
    rate: f64,
    /// Work starts again here after a start, resize or move.
    productive_from: f64,
    /// Owed at the next start (a checkpoint on the way out, a restart).
    owed_s: f64,
    /// Where it was suspended in memory during the replay: resuming elsewhere costs more.
    suspended_from: Option<Placement>,
}

/// Remaining times as the estimates have them, for oracle policies (SRTF) in the replay.
#[derive(Debug)]
pub(super) struct EstimateOracle {
    left: Arc<Mutex<HashMap<JobId, (f64, f64)>>>,
}

impl EstimateOracle {
    /// An oracle over the jobs' estimates at `scenario`, not updated (for a single round).
    pub(super) fn shared(
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
                    .map_or(NO_HISTORY.p50, |r| r.at(scenario, 0));
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

/// Which draw of every job's remaining work a replay runs: the scenario, and the cohorts whose
/// members are drawn together.
#[derive(Debug, Clone, Copy)]
pub(super) struct Draw<'a> {
    pub(super) scenario: Scenario,
    pub(super) cohorts: &'a Cohorts,
}

pub(super) struct Replay<'a> {
    snapshot: ClusterSnapshot,
    previous: Plan,
    first_plan: Option<&'a Plan>,
    policy: Box<dyn crate::Policy>,
    oracle: Arc<Mutex<HashMap<JobId, (f64, f64)>>>,
    progress: HashMap<JobId, Progress>,
    config: &'a ForecastConfig,
    /// Jobs using each GPU, keyed by (node, GPU).
    gpu_users: HashMap<(u32, u16), u8>,
    /// Each job's speed model, fitted once (observations do not change during a replay).
    speed: HashMap<JobId, Option<crate::perf::SpeedModel>>,
    /// Expected arrivals, by submission time, and the next to come.
    arrivals: &'a [Arrival],
    next_arrival: usize,
    scenario: Scenario,
    cohorts: &'a Cohorts,
}

impl<'a> Replay<'a> {
    pub(super) fn new(
        snapshot: &ClusterSnapshot,
        plan: &'a Plan,
        policy: &dyn crate::Policy,
        remaining: &HashMap<JobId, Remaining>,
        draw: Draw<'a>,
        config: &'a ForecastConfig,
        arrivals: &'a [Arrival],
    ) -> Result<Self, PolicyError> {
        let Draw { scenario, cohorts } = draw;
        let oracle = Arc::new(Mutex::new(HashMap::new()));
        let policy = policy.fork(Some(Box::new(EstimateOracle {
            left: oracle.clone(),
        })))?;
        let progress = snapshot
            .jobs
            .iter()
            .map(|job| {
                let estimate = remaining.get(&job.id).copied().unwrap_or(Remaining {
                    p10: NO_HISTORY.p10,
                    p50: NO_HISTORY.p50,
                    p90: NO_HISTORY.p90,
                    alone: false,
                    basis: Basis::Guess,
                });
                let progress = Progress {
                    left: estimate
                        .at(scenario, cohorts.draw_key(job.id, estimate))
                        .max(0.0),
                    rate: 0.0,
                    productive_from: snapshot.now_s,
                    owed_s: if job.observed.executed_s > 0.0 {
                        config.costs.restart_s
                    } else {
                        0.0
                    },
                    suspended_from: None,
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
            speed: snapshot
                .jobs
                .iter()
                .map(|j| (j.id, estimate::speed_model(j)))
                .collect(),
            arrivals,
            next_arrival: 0,
            scenario,
            cohorts,
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
        let step = |shape: Shape| {
            let model = self.speed.get(&job.id)?.as_ref()?;
            let s = model.step_s(shape);
            (s.is_finite() && s > 0.0).then_some(s)
        };
        let relative = match (step(job.preferred), step(shape)) {
            (Some(preferred), Some(here)) => preferred / here,
            // Nothing observed: speed in proportion to workers.
            _ => f64::from(shape.workers) / f64::from(job.preferred.workers.max(1)),
        };
        let shared = placement.tasks.iter().any(|t| {
            t.gpus
                .iter()
                .any(|&g| self.gpu_users.get(&(t.node.0, g)).copied().unwrap_or(0) > 1)
        });
        if !shared {
            return relative;
        }
        // Sharing its GPUs at a shape where it has been seen sharing them: slowed as much as it
        // was there (its fitted pace alone over the pace it was seen at, both at this shape).
        let seen_shared = job
            .observed
            .step_stats
            .iter()
            .find(|s| s.shared && s.shape == shape && s.samples > 0 && s.mean_step_s > 0.0);
        if let (Some(seen), Some(alone)) = (seen_shared, step(shape)) {
            return relative * (alone / seen.mean_step_s).clamp(0.1, 1.0);
        }
        relative * (1.0 - self.config.packing_slowdown)
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
                    let owed_s = match progress.suspended_from.take() {
                        Some(from) => costs.resume_s(&from, placement).0,
                        None => progress.owed_s,
                    };
                    progress.productive_from = now + owed_s;
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
                    if *reason == WaitReason::Suspended {
                        progress.suspended_from = Some(old);
                    }
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
                let overhead = costs.move_s(&old, placement).0;
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

    pub(super) fn run(mut self, targets: &[JobId]) -> Outcome {
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
            if let Some(between) = self.config.between_rounds {
                (between.0)();
            }
            let completion = self
                .snapshot
                .jobs
                .iter()
                .filter(|j| j.placement.is_some())
                .map(|j| self.finish_time(j.id, now))
                .fold(f64::INFINITY, f64::min);
            let arrival = self
                .arrivals
                .get(self.next_arrival)
                .map_or(f64::INFINITY, |a| a.job.submit_s);
            let next = completion
                .min(last_round + self.config.round_s)
                .min(arrival)
                .max(now);
            if next > end {
                break;
            }
            self.advance(now, next);
            now = next;
            self.snapshot.now_s = now;
            while let Some(arrival) = self.arrivals.get(self.next_arrival)
                && arrival.job.submit_s <= now
            {
                self.next_arrival += 1;
                let mut job = arrival.job.clone();
                job.placement = None;
                job.observed.last_state_change_s = now;
                self.progress.insert(
                    job.id,
                    Progress {
                        left: arrival
                            .remaining
                            .at(
                                self.scenario,
                                self.cohorts.draw_key(arrival.job.id, arrival.remaining),
                            )
                            .max(0.0),
                        rate: 0.0,
                        productive_from: now,
                        owed_s: 0.0,
                        suspended_from: None,
                    },
                );
                self.snapshot.jobs.push(job);
            }
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

/// The median slowdown from sharing GPUs among the snapshot's jobs seen both sharing and not at one
/// shape (1 − alone / shared step time), when at least [`PACKING_SEEN_MIN`] were.
pub(super) fn observed_packing_slowdown(snapshot: &ClusterSnapshot) -> Option<f64> {
    let mut seen: Vec<f64> = snapshot
        .jobs
        .iter()
        .flat_map(|job| {
            let stats = &job.observed.step_stats;
            stats.iter().filter(|s| s.shared).filter_map(|shared| {
                let alone = stats
                    .iter()
                    .find(|s| !s.shared && s.shape == shared.shape)?;
                let usable = |s: &crate::snapshot::StepStats| s.samples > 0 && s.mean_step_s > 0.0;
                (usable(shared) && usable(alone))
                    .then(|| 1.0 - alone.mean_step_s / shared.mean_step_s)
            })
        })
        .filter(|slowdown| slowdown.is_finite())
        .collect();
    if seen.len() < PACKING_SEEN_MIN {
        return None;
    }
    seen.sort_by(f64::total_cmp);
    Some(seen[seen.len() / 2].clamp(0.0, 0.9))
}

/// Jobs seen sharing and not before the snapshot's packing slowdown replaces the configured one.
const PACKING_SEEN_MIN: usize = 5;
