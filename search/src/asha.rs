//! Asynchronous successive halving (Li et al., "A System for Massively Parallel Hyperparameter
//! Tuning", 2020) and asynchronous Hyperband.
//!
//! Rungs train to `min_steps · ηᵏ` steps (the last rung to `max_steps`). Whenever a slot is free, the
//! searcher looks from the highest rung down for a trial resting at rung k that is among the best
//! ⌊n_k/η⌋ of the n_k trials that reached rung k, and promotes it: the trial resumes from its own
//! checkpoint and trains on to rung k+1, so no step is redone. The results of a rung are taken in a
//! fixed order ([`promotions`]), so the promotions do not depend on which trial happened to finish
//! first. With nothing to promote it starts a new trial at the bottom rung. Hyperband runs one such ladder per bracket, bracket b starting its trials
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

/// What a rung knows of one of its entrants.
enum Outcome {
    /// Its segment at this rung has not ended (or not begun).
    Pending,
    /// It ended with this loss.
    Result(f64),
    /// It ended without a usable result (failed, stopped, no finite value): it takes no place.
    Nothing,
}

fn outcome(spec: &ExperimentSpec, trial: &TrialRecord, segment: usize) -> Outcome {
    let Some(segment) = trial.segments.get(segment) else {
        return Outcome::Pending;
    };
    match (segment.state, segment.last) {
        (SegmentState::Active, _) => Outcome::Pending,
        (SegmentState::Succeeded, Some(value)) => {
            let loss = spec.metric.goal.loss(value);
            if loss.is_finite() {
                Outcome::Result(loss)
            } else {
                Outcome::Nothing
            }
        }
        _ => Outcome::Nothing,
    }
}

/// The promotions rung `k` of bracket `bracket_index` makes, in the order it makes them: ASHA run as
/// if the rung's results arrived in a fixed order, whatever order they really came in.
///
/// The rung's entrants have a canonical order: at the bracket's first rung the trials by index, at
/// every later rung the order the rung below promoted them in. Walking the entrants in that order, as
/// far as their results are known, each result joins the rung; whenever the best ⌊n/η⌋ of the n
/// results so far include a trial not yet promoted, it is promoted (the best first). The walk stops at
/// the first entrant still training: a result that came in early waits for those before it. So the
/// trials promoted, and in the end the rungs each trial reaches, are a function of the trials' results
/// alone: the same for the same seed whether the server restarted, the machine was loaded or one trial
/// happened to finish before another (plain asynchronous ASHA promotes whoever is best when a slot
/// frees, and an early finisher could be promoted in one run and not in another).
pub fn promotions(
    spec: &ExperimentSpec,
    trials: &[TrialRecord],
    brackets: usize,
    bracket_index: usize,
    k: usize,
    eta: u32,
) -> Vec<u32> {
    if k < bracket_index {
        return Vec::new();
    }
    let entrants: Vec<u32> = if k == bracket_index {
        let mut own: Vec<u32> = trials
            .iter()
            .filter(|trial| bracket(trial.index, brackets) == bracket_index)
            .map(|trial| trial.index)
            .collect();
        own.sort_unstable();
        own
    } else {
        promotions(spec, trials, brackets, bracket_index, k - 1, eta)
    };
    let eta = eta.max(2) as usize;
    let mut results: Vec<(f64, u32)> = Vec::new();
    let mut promoted: Vec<u32> = Vec::new();
    for index in entrants {
        let Some(trial) = trials.iter().find(|t| t.index == index) else {
            break;
        };
        match outcome(spec, trial, k - bracket_index) {
            Outcome::Pending => break,
            Outcome::Nothing => continue,
            Outcome::Result(loss) => results.push((loss, index)),
        }
        results.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for &(_, best) in &results[..results.len() / eta] {
            if !promoted.contains(&best) {
                promoted.push(best);
            }
        }
    }
    promoted
}

/// The next decision for a free slot: a promotion if one is due, else a new trial at its bracket's
/// bottom rung (when `may_start`).
pub fn next(spec: &ExperimentSpec, trials: &[TrialRecord], may_start: bool) -> Option<Decision> {
    let (rungs, brackets, eta) = ladder(spec)?;
    let top = rungs.len() - 1;
    for k in (0..top).rev() {
        for b in 0..brackets.min(k + 1) {
            for index in promotions(spec, trials, brackets, b, k, eta) {
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
