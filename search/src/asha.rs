//! Asynchronous successive halving (Li et al., "A System for Massively Parallel Hyperparameter
//! Tuning", 2020) and asynchronous Hyperband.
//!
//! Rungs train to `min_steps · ηᵏ` steps (the last rung to `max_steps`). Whenever a slot is free, the
//! searcher looks from the highest rung down for a trial resting at rung k that is among the best
//! ⌊n_k/η⌋ of the n_k trials that reached rung k, and promotes it: the trial resumes from its own
//! checkpoint and trains on to rung k+1, so no step is redone. With nothing to promote it starts a new
//! trial at the bottom rung. Hyperband runs one such ladder per bracket, bracket b starting its trials
//! at rung b, and deals new trials to the brackets in turn.

use crate::decision::Decision;
use crate::random::random_point;
use crate::trials::{SegmentState, TrialRecord};
use drover_core::experiment::{ExperimentSpec, SearcherSpec};

/// The steps each rung trains to.
pub fn rungs(min_steps: u64, max_steps: u64, eta: u32) -> Vec<u64> {
    let mut out = Vec::new();
    let mut steps = min_steps.max(1);
    while steps < max_steps {
        out.push(steps);
        steps = steps.saturating_mul(u64::from(eta.max(2)));
    }
    out.push(max_steps);
    out
}

/// The ladder of an ASHA or Hyperband spec: its rungs and its number of brackets.
pub fn ladder(spec: &ExperimentSpec) -> Option<(Vec<u64>, usize, u32)> {
    match spec.searcher {
        SearcherSpec::Asha {
            min_steps,
            max_steps,
            eta,
        } => Some((rungs(min_steps, max_steps, eta), 1, eta)),
        SearcherSpec::Hyperband {
            min_steps,
            max_steps,
            eta,
        } => {
            let rungs = rungs(min_steps, max_steps, eta);
            let brackets = rungs.len();
            Some((rungs, brackets, eta))
        }
        _ => None,
    }
}

/// The bracket a trial belongs to (its starting rung).
pub fn bracket(trial: u32, brackets: usize) -> usize {
    trial as usize % brackets.max(1)
}

/// The rung a trial has reached (or is training towards): its bracket plus its promotions.
pub fn rung_of(trial: &TrialRecord, brackets: usize) -> usize {
    bracket(trial.index, brackets) + trial.segments.len().saturating_sub(1)
}

/// The trials of `bracket` with a result at rung `k`, best first: `(trial, loss)`.
pub fn results_at(
    spec: &ExperimentSpec,
    trials: &[TrialRecord],
    brackets: usize,
    bracket_index: usize,
    k: usize,
) -> Vec<(u32, f64)> {
    let goal = spec.metric.goal;
    let mut results: Vec<(u32, f64)> = trials
        .iter()
        .filter(|trial| bracket(trial.index, brackets) == bracket_index && k >= bracket_index)
        .filter_map(|trial| {
            let segment = trial.segments.get(k - bracket_index)?;
            if segment.state != SegmentState::Succeeded {
                return None;
            }
            let loss = goal.loss(segment.last?);
            loss.is_finite().then_some((trial.index, loss))
        })
        .collect();
    results.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    results
}

/// The next decision for a free slot: a promotion if one is due, else a new trial at its bracket's
/// bottom rung (when `may_start`).
pub fn next(spec: &ExperimentSpec, trials: &[TrialRecord], may_start: bool) -> Option<Decision> {
    let (rungs, brackets, eta) = ladder(spec)?;
    let top = rungs.len() - 1;
    for k in (0..top).rev() {
        for b in 0..brackets.min(k + 1) {
            let results = results_at(spec, trials, brackets, b, k);
            let promotable = results.len() / eta as usize;
            for &(index, _) in &results[..promotable] {
                let Some(trial) = trials.iter().find(|t| t.index == index) else {
                    continue;
                };
                if trial.rests() && rung_of(trial, brackets) == k {
                    return Some(Decision::Resume {
                        trial: index,
                        segment: trial.segments.len() as u32,
                        max_steps: rungs[k + 1],
                    });
                }
            }
        }
    }
    if !may_start {
        return None;
    }
    let index = trials.len() as u32;
    Some(Decision::Start {
        trial: index,
        params: random_point(spec, index),
        max_steps: Some(rungs[bracket(index, brackets)]),
        source: None,
        replaces: None,
    })
}
