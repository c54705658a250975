//! What the searcher expects of each running trial, for the scheduler: how promising it is and whether
//! the searcher is about to throw its current work away.
//!
//! Trials are compared at the same step: a trial's best value so far against the best value every
//! other trial had reached by that step, so a young trial is not judged against finished ones.
//!
//! - **ASHA and Hyperband**: promise is half the trial's rank among the trials of its rung and half
//!   how high its rung is. A trial training towards a rung below the top is *doomed* when at least η
//!   trials of its rung have reached its step and it is not among the best ⌊n/η⌋ of them: if it ends
//!   the rung where it stands, it will not be promoted.
//! - **PBT**: promise is the member's rank; a member in the bottom quantile is doomed (the end of its
//!   round replaces it with a copy of a better one).
//! - **Grid, random and TPE**: promise is the rank; a trial is doomed when the experiment's early
//!   stopping rule would stop it now, ignoring the rule's warm-up (it will stop it once that passes).

use crate::decision::Decision;
use crate::trials::{SegmentState, TrialRecord};
use crate::{asha, pbt, stopping};
use drover_core::experiment::{EarlyStopping, ExperimentSpec, Goal};
use std::collections::BTreeMap;

/// One running trial as the searcher sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outlook {
    /// In `[0, 1]`, 1 the most promising.
    pub promise: f64,
    /// The searcher will most likely stop, not promote or replace the trial at its next decision:
    /// the steps it trains until then are probably wasted.
    pub doomed: bool,
}

/// The outlook of every active trial.
pub fn outlook(spec: &ExperimentSpec, trials: &[TrialRecord]) -> BTreeMap<u32, Outlook> {
    let goal = spec.metric.goal;
    if let Some((rungs, brackets, eta)) = asha::ladder(spec) {
        let top = rungs.len() - 1;
        return trials
            .iter()
            .filter(|trial| trial.is_active())
            .map(|trial| {
                let rung = asha::rung_of(trial, brackets).min(top);
                let peers: Vec<&TrialRecord> = trials
                    .iter()
                    .filter(|other| {
                        other.index != trial.index
                            && asha::bracket(other.index, brackets)
                                == asha::bracket(trial.index, brackets)
                            && asha::rung_of(other, brackets) >= rung
                    })
                    .collect();
                let (score, compared) = standing(goal, trial, &peers);
                let height = if top == 0 {
                    1.0
                } else {
                    rung as f64 / top as f64
                };
                let promotable = compared / eta.max(2) as usize;
                let doomed = rung < top
                    && compared >= eta.max(2) as usize
                    && score.is_some_and(|(better, _)| better >= promotable);
                let rank = score.map_or(0.5, |(_, rank)| rank);
                let outlook = Outlook {
                    promise: 0.5 * rank + 0.5 * height,
                    doomed,
                };
                (trial.index, outlook)
            })
            .collect();
    }
    if spec.searcher.is_multi_fidelity() {
        // PBT.
        let standings = pbt::standings(spec, trials);
        return trials
            .iter()
            .filter(|trial| trial.is_active())
            .map(|trial| {
                let (promise, doomed) = standings
                    .iter()
                    .find(|(index, _, _)| *index == trial.index)
                    .map_or((0.5, false), |&(_, score, bottom)| (score, bottom));
                (trial.index, Outlook { promise, doomed })
            })
            .collect();
    }
    let without_warmup = match spec.early_stopping {
        EarlyStopping::Median { min_trials, .. } => {
            let mut relaxed = spec.clone();
            relaxed.early_stopping = EarlyStopping::Median {
                warmup_steps: 0,
                min_trials,
            };
            Some(relaxed)
        }
        _ => None,
    };
    let stopping = stopping::decide(without_warmup.as_ref().unwrap_or(spec), trials);
    let others: Vec<&TrialRecord> = trials.iter().collect();
    trials
        .iter()
        .filter(|trial| trial.is_active())
        .map(|trial| {
            let peers: Vec<&TrialRecord> = others
                .iter()
                .copied()
                .filter(|other| other.index != trial.index)
                .collect();
            let rank = standing(goal, trial, &peers)
                .0
                .map_or(0.5, |(_, rank)| rank);
            let doomed = stopping.iter().any(|decision| {
                matches!(decision, Decision::Stop { trial: index, .. } if *index == trial.index)
            });
            (
                trial.index,
                Outlook {
                    promise: rank,
                    doomed,
                },
            )
        })
        .collect()
}

/// The best loss a curve had reached by `step`.
fn loss_by(goal: Goal, curve: &[(u64, f64)], step: u64) -> Option<f64> {
    curve
        .iter()
        .take_while(|&&(s, _)| s <= step)
        .map(|&(_, value)| goal.loss(value))
        .filter(|loss| loss.is_finite())
        .reduce(f64::min)
}

/// How `trial` stands against the peers that have reached its step: `(peers strictly better, rank
/// score in [0, 1] with 1 best)` when the trial has a value, and how many trials were compared
/// (itself included).
fn standing(
    goal: Goal,
    trial: &TrialRecord,
    peers: &[&TrialRecord],
) -> (Option<(usize, f64)>, usize) {
    let Some(&(step, _)) = trial.curve.last() else {
        return (None, 0);
    };
    let Some(own) = loss_by(goal, &trial.curve, step) else {
        return (None, 0);
    };
    let reached: Vec<f64> = peers
        .iter()
        .filter(|peer| {
            peer.curve.last().is_some_and(|&(last, _)| last >= step)
                || peer
                    .segments
                    .last()
                    .is_some_and(|s| s.state == SegmentState::Succeeded)
        })
        .filter_map(|peer| loss_by(goal, &peer.curve, step))
        .collect();
    let better = reached.iter().filter(|&&loss| loss < own).count();
    let compared = reached.len() + 1;
    let rank = 1.0 - better as f64 / compared as f64;
    (Some((better, rank)), compared)
}
