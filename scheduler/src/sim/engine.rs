//! The event loop: a virtual clock advancing from event to event (arrivals, completions, scheduling
//! rounds), jobs progressing at their hidden true speed, and the policy deciding from observations.

use super::predict::{PredictOptions, Predictor};
use super::truth::JobTruth;
use super::truth::{OracleState, checkpoint_factor};
use super::workload::{Workload, noisy};
use crate::invariants;
use crate::plan::{JobPlan, Placement, Plan, WaitReason};
use crate::policy::Policy;
use crate::snapshot::{ClusterSnapshot, JobView, SearchHint, StepStats};
use drover_core::JobId;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::{Arc, Mutex};

pub use super::config::{Costs, JobOutcome, Outcome, SimConfig, SimError, Stopwatch};

mod policy;

#[derive(Debug, Clone, Default)]
struct Live {
    steps: f64,
    rate: f64,
    productive_from: f64,
    /// Overhead owed at the next start (a checkpoint taken when preempted).
    owed_s: f64,
    /// Where it was suspended in memory, while it waits suspended: a resume elsewhere costs more.
    suspended_from: Option<Placement>,
    /// Steps at the last committed checkpoint (what a kill rolls back to).
    checkpoint_steps: f64,
    checkpoints_in_run: u64,
    first_start: Option<f64>,
    finish: Option<f64>,
    restarts: u32,
    /// Seconds placed, and worker-seconds: its mean workers while it ran.
    placed_s: f64,
    worker_s: f64,
    widest: u32,
}

/// Jobs made while the simulation runs (a searcher's trials, [`super::experiments`]), asked before
/// every full round.
pub trait Spawner {
    /// When it next wants a round with nothing else happening (an experiment's submission);
    /// infinity when never.
    fn next_wake_s(&self) -> f64;
    /// It will make nothing more: the simulation may end.
    fn done(&self) -> bool;
    /// `jobs` are the active jobs as the policy is about to see them, `ended` the spawned jobs that
    /// completed since the last call; new jobs take ids from `next_index` on, in order.
    fn round(&mut self, now_s: f64, next_index: u128, jobs: &[JobView], ended: &[JobId])
    -> Spawned;
}

/// What a [`Spawner`] does at a round.
#[derive(Debug, Default)]
pub struct Spawned {
    pub jobs: Vec<(JobView, JobTruth)>,
    /// Active jobs to stop now (they end without completing).
    pub stop: Vec<JobId>,
    pub hints: Vec<(JobId, SearchHint)>,
}

struct Engine {
    /// The workload's truths, then those of spawned jobs.
    truths: Vec<JobTruth>,
    /// Spawned jobs that completed since the spawner was last asked.
    ended: Vec<JobId>,
    config: SimConfig,
    snapshot: ClusterSnapshot,
    live: Vec<Live>,
    rng: ChaCha8Rng,
    outcome: Outcome,
    /// The jobs using each GPU (`node * 64 + gpu`): up to two job indexes, [`NO_JOB`] for none.
    gpu_users: Vec<[u32; 2]>,
    busy: u32,
    /// Per node, the index of its GPU model in [`Workload::gpu_models`] (empty when those are).
    node_model: Vec<usize>,
    /// Per node, its GPU model's tag, for the step times it reports.
    node_tag: Vec<crate::cluster::GpuModelTag>,
    oracle: Option<Arc<Mutex<OracleState>>>,
    predictor: Option<Predictor>,
}

/// An empty place in [`Engine::gpu_users`].
const NO_JOB: u32 = u32::MAX;

fn index_of(job: &JobView) -> usize {
    job.id.0.as_u128() as usize
}

impl Engine {
    fn ckpt_factor(&self) -> f64 {
        checkpoint_factor(
            self.config.costs.checkpoint_every_s,
            self.config.costs.checkpoint_s,
        )
    }

    fn slots(placement: &Placement) -> impl Iterator<Item = usize> + '_ {
        placement.tasks.iter().flat_map(|t| {
            t.gpus
                .iter()
                .map(move |&g| t.node.0 as usize * 64 + usize::from(g))
        })
    }

    fn is_shared(&self, placement: &Placement) -> bool {
        Self::slots(placement).any(|slot| {
            self.gpu_users
                .get(slot)
                .is_some_and(|users| users.iter().all(|&u| u != NO_JOB))
        })
    }

    /// True speed at a placement: slowed, by the hidden interference of each pair, where any of its GPUs
    /// is shared with another job (the worst pair sets the gang's pace).
    fn rate_of(&self, index: usize, placement: &Placement) -> f64 {
        let mut factor: f64 = 1.0;
        for slot in Self::slots(placement) {
            let Some(users) = self.gpu_users.get(slot) else {
                continue;
            };
            for &other in users {
                if other != NO_JOB && other as usize != index {
                    factor = factor.min(self.config.interference.speed_factor(
                        self.config.seed,
                        index as u64,
                        u64::from(other),
                    ));
                }
            }
        }
        self.truths[index].steps_per_s(placement.shape())
            * self.model_speed(index, placement)
            * self.ckpt_factor()
            * factor
    }

    /// A job's speed on its placement's GPU models relative to its fastest: a gang is as fast as its
    /// slowest GPUs.
    fn model_speed(&self, index: usize, placement: &Placement) -> f64 {
        if self.node_model.is_empty() {
            return 1.0;
        }
        let truth = &self.truths[index];
        placement
            .tasks
            .iter()
            .filter(|t| !t.gpus.is_empty())
            .filter_map(|t| self.node_model.get(t.node.0 as usize))
            .map(|&model| truth.model_speed(model))
            .fold(1.0, f64::min)
    }

    /// Records job `index` on a placement's GPUs (`add`) or off them.
    fn occupy(&mut self, index: usize, placement: &Placement, add: bool) {
        let id = index as u32;
        for slot in Self::slots(placement) {
            let Some(users) = self.gpu_users.get_mut(slot) else {
                continue;
            };
            let was_idle = users.iter().all(|&u| u == NO_JOB);
            if add {
                // The invariants allow two users at most; a third is never recorded.
                if let Some(free) = users.iter_mut().find(|u| **u == NO_JOB) {
                    *free = id;
                }
                self.busy += u32::from(was_idle);
            } else {
                if let Some(mine) = users.iter_mut().find(|u| **u == id) {
                    *mine = NO_JOB;
                }
                self.busy -= u32::from(!was_idle && users.iter().all(|&u| u == NO_JOB));
            }
        }
    }

    /// Speeds change when jobs start sharing GPUs or stop: recompute every running job's.
    fn refresh_rates(&mut self) {
        for position in 0..self.snapshot.jobs.len() {
            let Some(placement) = &self.snapshot.jobs[position].placement else {
                continue;
            };
            let index = index_of(&self.snapshot.jobs[position]);
            let rate = self.rate_of(index, placement);
            self.live[index].rate = rate;
        }
    }

    fn completion_time(&self, index: usize, now: f64) -> f64 {
        let live = &self.live[index];
        if live.rate <= 0.0 {
            return f64::INFINITY;
        }
        let remaining = (self.truths[index].total_steps - live.steps).max(0.0);
        live.productive_from.max(now) + remaining / live.rate
    }

    /// Progress of every running job from `from` to `to`.
    fn advance(&mut self, from: f64, to: f64) {
        let dt = to - from;
        if dt <= 0.0 {
            return;
        }
        self.outcome.busy_gpu_s += f64::from(self.busy) * dt;
        let every = self.config.costs.checkpoint_every_s + self.config.costs.checkpoint_s;
        for job in &mut self.snapshot.jobs {
            let Some(placement) = &job.placement else {
                continue;
            };
            let index = index_of(job);
            let live = &mut self.live[index];
            let productive = (to - from.max(live.productive_from)).max(0.0);
            live.steps = (live.steps + live.rate * productive).min(self.truths[index].total_steps);
            if every > 0.0 && to > live.productive_from {
                let done = ((to - live.productive_from) / every).floor() as u64;
                if done > live.checkpoints_in_run {
                    live.checkpoints_in_run = done;
                    let since = (to - live.productive_from) - done as f64 * every;
                    live.checkpoint_steps =
                        (live.steps - live.rate * since).max(live.checkpoint_steps);
                }
            }
            let workers = placement.shape().workers;
            live.placed_s += dt;
            live.worker_s += f64::from(workers) * dt;
            live.widest = live.widest.max(workers);
            job.observed.attained_gpu_s += f64::from(placement.num_gpus()) * dt;
            job.observed.executed_s += dt;
            job.observed.executed_since_promotion_s += dt;
        }
    }

    /// Asks the spawner, then stops, adds and hints what it says.
    fn spawn(&mut self, spawner: &mut dyn Spawner, now: f64) {
        let ended = std::mem::take(&mut self.ended);
        let spawned = spawner.round(now, self.truths.len() as u128, &self.snapshot.jobs, &ended);
        for id in &spawned.stop {
            let Some(position) = self.snapshot.jobs.iter().position(|j| j.id == *id) else {
                continue;
            };
            let job = self.snapshot.jobs.remove(position);
            if let Some(placement) = &job.placement {
                self.occupy(index_of(&job), placement, false);
            }
            let live = &mut self.live[index_of(&job)];
            live.rate = 0.0;
            live.finish = Some(now);
        }
        for (mut view, truth) in spawned.jobs {
            debug_assert_eq!(index_of(&view), self.truths.len());
            view.placement = None;
            view.observed.last_state_change_s = now;
            self.truths.push(truth);
            self.live.push(Live::default());
            self.snapshot.jobs.push(view);
        }
        for (id, hint) in spawned.hints {
            if let Some(job) = self.snapshot.jobs.iter_mut().find(|j| j.id == id) {
                job.search = Some(hint);
            }
        }
        self.refresh_rates();
    }

    fn record_busy(&mut self, now: f64) {
        if self
            .outcome
            .busy_timeline
            .last()
            .is_none_or(|&(_, busy)| busy != self.busy)
        {
            self.outcome.busy_timeline.push((now, self.busy));
        }
    }
}

/// An arrival's placement must pass the same invariants as a round's plan, with every running job where
/// it is.
fn check_arrival(
    snapshot: &ClusterSnapshot,
    position: usize,
    decision: &JobPlan,
) -> Result<(), invariants::Violation> {
    if matches!(decision, JobPlan::Wait { .. }) {
        return Ok(());
    }
    let mut plan = Plan::default();
    for job in &snapshot.jobs {
        if let Some(placement) = &job.placement {
            plan.jobs.insert(
                job.id,
                JobPlan::Run {
                    placement: placement.clone(),
                    reason: crate::plan::RunReason::Continuing,
                },
            );
        }
    }
    plan.jobs
        .insert(snapshot.jobs[position].id, decision.clone());
    invariants::check_placements(snapshot, &plan)
}

/// Replays `workload` through `policy`. `oracle` is the state an oracle policy reads (SRTF).
pub(crate) fn simulate(
    workload: &Workload,
    policy: &mut dyn Policy,
    config: SimConfig,
    oracle: Option<Arc<Mutex<OracleState>>>,
    predict: Option<PredictOptions>,
    mut spawner: Option<&mut dyn Spawner>,
    stopwatch: &dyn Stopwatch,
) -> Result<Outcome, SimError> {
    let n = workload.jobs.len();
    if let Some(oracle) = &oracle
        && let Ok(mut state) = oracle.lock()
    {
        state.steps_done = vec![0.0; n];
    }
    let mut engine = Engine {
        truths: workload.truths.to_vec(),
        ended: Vec::new(),
        config,
        snapshot: ClusterSnapshot {
            now_s: 0.0,
            nodes: workload.nodes.clone(),
            tenants: workload.tenants.clone(),
            jobs: Vec::new(),
        },
        live: vec![Live::default(); n],
        rng: ChaCha8Rng::seed_from_u64(config.seed ^ 0x5eed),
        outcome: Outcome::default(),
        gpu_users: vec![[NO_JOB; 2]; workload.nodes.len() * 64],
        busy: 0,
        node_model: if workload.gpu_models.is_empty() {
            Vec::new()
        } else {
            workload
                .nodes
                .iter()
                .map(|n| {
                    n.gpus
                        .first()
                        .and_then(|g| {
                            let model = g.model.to_ascii_lowercase();
                            workload.gpu_models.iter().position(|m| *m == model)
                        })
                        .unwrap_or(usize::MAX)
                })
                .collect()
        },
        node_tag: workload.nodes.iter().map(|n| n.gpu_tag()).collect(),
        oracle,
        predictor: predict.map(Predictor::new),
    };
    let mut previous = Plan::default();
    let mut next_arrival = 0;
    let mut now = workload.jobs.first().map_or(0.0, |j| j.view.submit_s);
    let mut last_round = f64::NEG_INFINITY;
    let give_up_at = workload.jobs.last().map_or(0.0, |j| j.view.submit_s) + 400.0 * 86_400.0;
    loop {
        let spawning = spawner.as_ref().is_some_and(|s| !s.done());
        if next_arrival >= n && engine.snapshot.jobs.is_empty() && !spawning {
            break;
        }
        let wake = spawner.as_ref().map_or(f64::INFINITY, |s| s.next_wake_s());
        let arrival = workload
            .jobs
            .get(next_arrival)
            .map_or(f64::INFINITY, |j| j.view.submit_s)
            .min(wake);
        let completion = engine
            .snapshot
            .jobs
            .iter()
            .filter(|j| j.placement.is_some())
            .map(|j| engine.completion_time(index_of(j), now))
            .fold(f64::INFINITY, f64::min);
        let round = if engine.snapshot.jobs.is_empty() {
            f64::INFINITY
        } else {
            last_round + config.round_s
        };
        let next = arrival.min(completion).min(round).max(now);
        if !next.is_finite() || next > give_up_at {
            return Err(SimError::Stuck(engine.snapshot.jobs.len()));
        }
        engine.advance(now, next);
        now = next;
        engine.snapshot.now_s = now;
        // Completions.
        let mut completed = false;
        let mut position = 0;
        while position < engine.snapshot.jobs.len() {
            let job = &engine.snapshot.jobs[position];
            let index = index_of(job);
            if job.placement.is_some() && engine.completion_time(index, now) <= now + 1e-6 {
                if let Some(placement) = job.placement.clone() {
                    engine.occupy(index, &placement, false);
                }
                engine.live[index].finish = Some(now);
                let job = engine.snapshot.jobs.remove(position);
                if index >= n {
                    engine.ended.push(job.id);
                }
                if let Some(predictor) = &mut engine.predictor {
                    predictor.finished(crate::forecast::Finished {
                        tenant: job.tenant,
                        gpus: job.gpus_at(job.preferred),
                        seconds: crate::forecast::work_done_s(&job),
                        submit_s: job.submit_s,
                    });
                }
                completed = true;
            } else {
                position += 1;
            }
        }
        if completed {
            engine.refresh_rates();
        }
        // Arrivals, placed incrementally.
        let mut waiting_arrival = false;
        while let Some(job) = workload.jobs.get(next_arrival)
            && job.view.submit_s <= now
        {
            next_arrival += 1;
            if let Some(predictor) = &mut engine.predictor {
                predictor.arrived(&job.view);
            }
            engine.snapshot.jobs.push(job.view.clone());
            let position = engine.snapshot.jobs.len() - 1;
            engine.snapshot.jobs[position].observed.last_state_change_s = now;
            let started = stopwatch.now_ns();
            let decision = policy.place_arrival(&engine.snapshot, &engine.snapshot.jobs[position]);
            engine
                .outcome
                .arrival_ns
                .push(stopwatch.now_ns().saturating_sub(started));
            check_arrival(&engine.snapshot, position, &decision)?;
            waiting_arrival |= matches!(decision, JobPlan::Wait { .. });
            engine.apply(position, &decision, now);
            engine.refresh_rates();
            if matches!(decision, JobPlan::Wait { .. })
                && let Some(predictor) = &mut engine.predictor
            {
                // Seconds of work left at the preferred shape, from the hidden truth (for the
                // diagnostic that takes estimates out of the error).
                let factor = checkpoint_factor(
                    engine.config.costs.checkpoint_every_s,
                    engine.config.costs.checkpoint_s,
                );
                let (truths, live) = (&engine.truths, &engine.live);
                let true_left = |view: &JobView| {
                    let index = index_of(view);
                    let (Some(truth), Some(live)) = (truths.get(index), live.get(index)) else {
                        return f64::INFINITY;
                    };
                    let rate = truth.steps_per_s(view.preferred) * factor;
                    (truth.total_steps - live.steps).max(0.0) / rate.max(1e-12)
                };
                predictor.arrived_waiting(
                    &engine.snapshot,
                    &*policy,
                    job.view.id,
                    next_arrival - 1,
                    Some(&true_left),
                );
            }
        }
        // A full round after completions, after an arrival that could not start, and on the tick. The
        // server's loop runs a round within about a second of a submission, so a job that the
        // arrival's placement leaves waiting (it never preempts) is not left for up to a tick: that
        // wait, up to 60 s for every policy alike, was most of the worst ρ of a tenant of short jobs.
        if completed || waiting_arrival || wake <= now || now >= last_round + config.round_s - 1e-9
        {
            engine.observe(now);
            if let Some(spawner) = spawner.as_deref_mut() {
                engine.spawn(spawner, now);
            }
            let started = stopwatch.now_ns();
            let plan = policy.schedule(&engine.snapshot, &previous);
            engine
                .outcome
                .round_ns
                .push(stopwatch.now_ns().saturating_sub(started));
            engine.outcome.rounds += 1;
            invariants::check(&engine.snapshot, &plan)?;
            invariants::check_flavour_maxima(&engine.snapshot, &plan)?;
            // Stops first, so starts find their resources free.
            for pass in [false, true] {
                for position in 0..engine.snapshot.jobs.len() {
                    let id = engine.snapshot.jobs[position].id;
                    let decision = plan
                        .jobs
                        .get(&id)
                        .ok_or_else(|| SimError::MissingDecision {
                            policy: policy.name(),
                            job: id.to_string(),
                        })?
                        .clone();
                    let is_start = matches!(decision, JobPlan::Run { .. });
                    if is_start == pass {
                        engine.apply(position, &decision, now);
                    }
                }
            }
            engine.refresh_rates();
            previous = plan;
            last_round = now;
        }
        engine.record_busy(now);
    }
    if let Some(predictor) = engine.predictor.take() {
        engine.outcome.predictions = predictor.records;
    }
    engine.outcome.jobs = workload
        .jobs
        .iter()
        .enumerate()
        .map(|(i, job)| {
            let live = &engine.live[i];
            JobOutcome {
                submit_s: job.view.submit_s,
                first_start_s: live.first_start.unwrap_or(job.view.submit_s),
                finish_s: live.finish.unwrap_or(f64::NAN),
                restarts: live.restarts,
                mean_workers: if live.placed_s > 0.0 {
                    live.worker_s / live.placed_s
                } else {
                    0.0
                },
                max_workers: live.widest,
            }
        })
        .collect();
    Ok(engine.outcome)
}

#[cfg(test)]
mod tests;
