//! Drover's hyper-parameter searchers: a pure, synchronous, deterministic library, like the scheduler.
//!
//! A search is `plan(&spec, &situation) -> Plan`: the experiment's spec and everything that has
//! happened to its trials so far (their points, their segments, the metric curve each reported) go
//! in; the decisions to carry out come out: start a trial at a point (optionally from another trial's
//! checkpoint, as PBT's exploit does), resume a trial from its own checkpoint for more steps (ASHA's
//! promotion, PBT's next round), stop a trial (early stopping, budgets), or finish the experiment.
//! There is no IO and no clock here: the server rebuilds the situation from the store every time, so a
//! restart or a change of leader loses nothing, and every random choice is drawn from a generator
//! seeded by the experiment's seed and the trial's index, so the same seed and the same results give the
//! same proposals.
//!
//! The searchers: grid ([`space::grid`]) and random (below), [`tpe`], [`asha`] (and asynchronous
//! Hyperband), [`pbt`]; [`stopping`] holds the median rule and learning-curve extrapolation for the
//! searchers that do not stop trials themselves.

pub mod asha;
pub mod math;
pub mod offline;
pub mod outlook;
pub mod pbt;
pub mod space;
pub mod stopping;
pub mod tpe;

pub use outlook::{Outlook, outlook};

use drover_core::experiment::{Assignment, DEFAULT_MAX_TRIALS, ExperimentSpec, SearcherSpec};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// What the store knows of one trial: a point of the space and the segments (jobs) that ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRecord {
    pub index: u32,
    pub params: Assignment,
    /// The checkpoint this trial started from, when it started from another trial's (PBT's exploit).
    pub source: Option<Source>,
    /// The trial this one took the place of in a PBT population.
    pub replaces: Option<u32>,
    pub segments: Vec<Segment>,
    /// The experiment's metric as the trial reported it, `(step, value)` in step order.
    pub curve: Vec<(u64, f64)>,
}

/// A checkpoint of another trial: the one its segment `segment` ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    pub trial: u32,
    pub segment: u32,
}

/// One job of a trial.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// The step the segment trains to (counted from step 0), for multi-fidelity searchers.
    pub max_steps: Option<u64>,
    pub state: SegmentState,
    /// The last value of the metric the segment reported.
    pub last: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentState {
    /// Queued or running.
    Active,
    Succeeded,
    Failed,
    /// Cancelled: by the searcher, a budget or a user.
    Stopped,
}

impl TrialRecord {
    pub fn is_active(&self) -> bool {
        self.segments
            .last()
            .is_some_and(|segment| segment.state == SegmentState::Active)
    }

    /// The last segment succeeded: the trial rests at a rung (or is complete).
    pub fn rests(&self) -> bool {
        self.segments
            .last()
            .is_some_and(|segment| segment.state == SegmentState::Succeeded)
    }

    /// The metric's last value once the trial has succeeded.
    pub fn final_value(&self) -> Option<f64> {
        if self.rests() {
            self.segments.last().and_then(|segment| segment.last)
        } else {
            None
        }
    }

    /// The best value on the trial's curve, by the goal's loss.
    pub fn best_loss(&self, goal: drover_core::experiment::Goal) -> Option<f64> {
        self.curve
            .iter()
            .map(|&(_, value)| goal.loss(value))
            .filter(|loss| loss.is_finite())
            .reduce(f64::min)
    }
}

/// Everything the planner is told about now.
#[derive(Debug, Clone, Default)]
pub struct Situation {
    pub trials: Vec<TrialRecord>,
    /// GPU-hours allocated to the experiment's trials so far.
    pub gpu_hours_used: f64,
    /// The budget's deadline has passed.
    pub past_deadline: bool,
}

/// One thing to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Start trial `trial` (the next index) at `params`; from `source`'s checkpoint when given.
    Start {
        trial: u32,
        params: Assignment,
        max_steps: Option<u64>,
        source: Option<Source>,
        replaces: Option<u32>,
    },
    /// Run the trial's segment `segment` (the next one) from its own last checkpoint to `max_steps`.
    Resume {
        trial: u32,
        segment: u32,
        max_steps: u64,
    },
    /// Stop a running trial, saying why.
    Stop { trial: u32, reason: String },
}

/// The decisions for now, and whether the experiment is over (and why).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub decisions: Vec<Decision>,
    pub finished: Option<String>,
}

/// Trials to start in all, the grid's size by default for a grid.
pub fn max_trials(spec: &ExperimentSpec) -> u32 {
    let grid = grid_points(spec);
    max_trials_of(spec, grid.as_deref())
}

fn max_trials_of(spec: &ExperimentSpec, grid: Option<&[Assignment]>) -> u32 {
    match (spec.budget.max_trials, &spec.searcher) {
        (Some(max), _) => max,
        (None, SearcherSpec::Grid { .. }) => {
            grid.map_or(0, |g| g.len().min(u32::MAX as usize) as u32)
        }
        (None, SearcherSpec::Pbt { population, .. }) => population.saturating_mul(4),
        (None, _) => DEFAULT_MAX_TRIALS,
    }
}

/// The generator for one trial's choices: the same seed and index always draw the same numbers.
pub fn trial_rng(seed: u64, trial: u32, stream: u32) -> ChaCha8Rng {
    // Each word is mixed in after the previous one is scrambled, so (seed, trial) pairs never collide the
    // way `seed ^ trial` would.
    let mut key = splitmix(seed);
    for word in [u64::from(trial), u64::from(stream)] {
        key = splitmix(key.wrapping_add(splitmix(word.wrapping_add(1))));
    }
    ChaCha8Rng::seed_from_u64(key)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A grid searcher's points, in order (built once per plan).
fn grid_points(spec: &ExperimentSpec) -> Option<Vec<Assignment>> {
    match spec.searcher {
        SearcherSpec::Grid { points } => Some(space::grid(&space::dims(&spec.parameters), points)),
        _ => None,
    }
}

/// The next decision a searcher makes for one free slot, or `None` when it has nothing to start now.
/// `trials` includes the decisions already made this round; `grid` is the grid's points for a grid.
fn next(
    spec: &ExperimentSpec,
    trials: &[TrialRecord],
    max_trials: u32,
    grid: Option<&[Assignment]>,
) -> Option<Decision> {
    let may_start = (trials.len() as u64) < u64::from(max_trials);
    let index = trials.len() as u32;
    let start = |params: Assignment, max_steps: Option<u64>| Decision::Start {
        trial: index,
        params,
        max_steps,
        source: None,
        replaces: None,
    };
    match &spec.searcher {
        SearcherSpec::Grid { .. } => {
            let point = grid?.get(index as usize)?.clone();
            may_start.then(|| start(point, None))
        }
        SearcherSpec::Random {} => may_start.then(|| start(random_point(spec, index), None)),
        SearcherSpec::Tpe {
            startup_trials,
            candidates,
        } => may_start.then(|| {
            let settings = tpe::Settings {
                startup_trials: *startup_trials,
                candidates: *candidates,
                ..tpe::Settings::default()
            };
            start(tpe::propose(spec, trials, &settings, index), None)
        }),
        SearcherSpec::Asha { .. } | SearcherSpec::Hyperband { .. } => {
            asha::next(spec, trials, may_start)
        }
        SearcherSpec::Pbt { .. } => pbt::next(spec, trials, may_start),
    }
}

/// A point drawn uniformly for trial `index`.
pub fn random_point(spec: &ExperimentSpec, index: u32) -> Assignment {
    let dims = space::dims(&spec.parameters);
    space::sample(&dims, &mut trial_rng(spec.seed, index, 0))
}

/// The decisions for now. See the crate's documentation.
pub fn plan(spec: &ExperimentSpec, situation: &Situation) -> Plan {
    let mut trials = situation.trials.clone();
    let mut plan = Plan::default();
    let over_budget = match spec.budget.max_gpu_hours {
        Some(max) if situation.gpu_hours_used >= max => Some(format!(
            "the GPU-hour budget ({max}) is spent ({:.2} used)",
            situation.gpu_hours_used
        )),
        _ if situation.past_deadline => Some("the deadline has passed".to_owned()),
        _ => None,
    };
    if let Some(reason) = over_budget {
        for trial in trials.iter().filter(|trial| trial.is_active()) {
            plan.decisions.push(Decision::Stop {
                trial: trial.index,
                reason: reason.clone(),
            });
        }
        plan.finished = Some(reason);
        return plan;
    }
    for decision in stopping::decide(spec, &trials) {
        apply(&mut trials, &decision);
        plan.decisions.push(decision);
    }
    let grid = grid_points(spec);
    let max_trials = max_trials_of(spec, grid.as_deref());
    let active = trials.iter().filter(|trial| trial.is_active()).count();
    let slots = (spec.budget.max_concurrent_trials as usize).saturating_sub(active);
    for _ in 0..slots {
        let Some(decision) = next(spec, &trials, max_trials, grid.as_deref()) else {
            break;
        };
        apply(&mut trials, &decision);
        plan.decisions.push(decision);
    }
    if !trials.iter().any(TrialRecord::is_active) {
        plan.finished = Some(finish_reason(spec, &trials, max_trials));
    }
    plan
}

fn finish_reason(spec: &ExperimentSpec, trials: &[TrialRecord], max_trials: u32) -> String {
    if trials.len() as u64 >= u64::from(max_trials) {
        format!("all {max_trials} trials have run")
    } else if matches!(spec.searcher, SearcherSpec::Grid { .. }) {
        format!("the grid is covered ({} points)", trials.len())
    } else {
        "the searcher has nothing more to try".to_owned()
    }
}

/// Records a decision in the working copy of the trials, as if the store had it.
pub fn apply(trials: &mut Vec<TrialRecord>, decision: &Decision) {
    match decision {
        Decision::Start {
            trial,
            params,
            max_steps,
            source,
            replaces,
        } => trials.push(TrialRecord {
            index: *trial,
            params: params.clone(),
            source: *source,
            replaces: *replaces,
            segments: vec![Segment {
                max_steps: *max_steps,
                state: SegmentState::Active,
                last: None,
            }],
            curve: Vec::new(),
        }),
        Decision::Resume {
            trial, max_steps, ..
        } => {
            if let Some(record) = trials.iter_mut().find(|t| t.index == *trial) {
                record.segments.push(Segment {
                    max_steps: Some(*max_steps),
                    state: SegmentState::Active,
                    last: None,
                });
            }
        }
        Decision::Stop { trial, .. } => {
            if let Some(segment) = trials
                .iter_mut()
                .find(|t| t.index == *trial)
                .and_then(|t| t.segments.last_mut())
            {
                segment.state = SegmentState::Stopped;
            }
        }
    }
}

/// The best trial so far: the lowest loss among trials that reported the metric, by final value when
/// they finished and by the best value of their curve otherwise; ties to the lower index.
pub fn best_trial(spec: &ExperimentSpec, trials: &[TrialRecord]) -> Option<(u32, f64)> {
    let goal = spec.metric.goal;
    trials
        .iter()
        .filter_map(|trial| {
            let value = trial.final_value().or_else(|| {
                trial
                    .curve
                    .iter()
                    .map(|&(_, v)| v)
                    .filter(|v| v.is_finite())
                    .min_by(|a, b| goal.loss(*a).total_cmp(&goal.loss(*b)))
            })?;
            Some((trial.index, value))
        })
        .min_by(|a, b| {
            goal.loss(a.1)
                .total_cmp(&goal.loss(b.1))
                .then(a.0.cmp(&b.0))
        })
}
