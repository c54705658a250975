//! Running an experiment against a function instead of a cluster: every segment finishes at once with
//! the value the function gives. Benchmarks (regret on Branin and Hartmann-6) and tests use it; the
//! server drives [`crate::plan`] from the store instead.

use crate::decision::{Decision, apply};
use crate::planner::plan;
use crate::trials::{Segment, SegmentState, Situation, TrialRecord};
use drover_core::experiment::{Assignment, ExperimentSpec};

/// Runs `spec` to its end: `objective(params, steps)` is the metric a trial at `params` reports
/// after `steps` steps (`None` when the searcher does not set steps). Segments of one round finish in
/// index order before the next round is planned. Returns every trial.
pub fn run(
    spec: &ExperimentSpec,
    mut objective: impl FnMut(&Assignment, Option<u64>) -> f64,
) -> Vec<TrialRecord> {
    let mut situation = Situation::default();
    // A generous bound on rounds: every round finishes at least one segment.
    for _ in 0..1_000_000 {
        let planned = plan(spec, &situation);
        for decision in &planned.decisions {
            apply(&mut situation.trials, decision);
            if let Decision::Stop { .. } = decision {
                continue;
            }
        }
        if planned.finished.is_some() {
            break;
        }
        for trial in &mut situation.trials {
            let params = trial.params.clone();
            if let Some(segment) = trial.segments.last_mut()
                && segment.state == SegmentState::Active
            {
                let value = objective(&params, segment.max_steps);
                finish(segment, value);
                trial.curve.push((segment.max_steps.unwrap_or(1), value));
            }
        }
    }
    situation.trials
}

fn finish(segment: &mut Segment, value: f64) {
    segment.state = SegmentState::Succeeded;
    segment.last = Some(value);
}

/// The best value of the first `n` trials' final values, by the spec's goal.
pub fn best_of_first(spec: &ExperimentSpec, trials: &[TrialRecord], n: usize) -> Option<f64> {
    let goal = spec.metric.goal;
    trials
        .iter()
        .filter(|trial| (trial.index as usize) < n)
        .filter_map(TrialRecord::final_value)
        .min_by(|a, b| goal.loss(*a).total_cmp(&goal.loss(*b)))
}
