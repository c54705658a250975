//! The planner: the decisions for now from the spec and the situation (budgets, early stopping, then
//! the searcher's proposals for the free slots), and whether the experiment is over.

use crate::decision::{Decision, Plan, apply};
use crate::random::random_point;
use crate::trials::{Situation, TrialRecord};
use crate::{asha, pbt, space, stopping, tpe};
use drover_core::experiment::{Assignment, DEFAULT_MAX_TRIALS, ExperimentSpec, SearcherSpec};

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
