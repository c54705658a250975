//! Population-based training (Jaderberg et al. 2017), asynchronous.
//!
//! `population` trials train `ready_steps` at a time. When one finishes a round, it is ranked among
//! the population's current members by the metric each last reported. In the bottom `quantile` it is
//! replaced (exploit): a new trial starts from the checkpoint a top-`quantile` member ended its last
//! round with, with that member's hyper-parameters perturbed (explore): each number scaled by one of
//! the `perturb` factors (kept within its range), each category redrawn with `resample_probability`.
//! Otherwise it resumes from its own checkpoint for another round. A member stops at `max_steps`.
//! Every choice is drawn from the generator of the trial being decided for, so it is reproducible.

use crate::decision::Decision;
use crate::random::{random_point, trial_rng};
use crate::space::{self, Dim};
use crate::trials::{SegmentState, Source, TrialRecord};
use drover_core::experiment::{Assignment, ExperimentSpec, Param, SearcherSpec};
use rand::Rng;
use serde_json::Value;

#[derive(Debug, Clone)]
struct Settings<'a> {
    population: u32,
    ready_steps: u64,
    max_steps: u64,
    quantile: f64,
    perturb: &'a [f64],
    resample_probability: f64,
}

fn settings(spec: &ExperimentSpec) -> Option<Settings<'_>> {
    match &spec.searcher {
        SearcherSpec::Pbt {
            population,
            ready_steps,
            max_steps,
            quantile,
            perturb,
            resample_probability,
        } => Some(Settings {
            population: *population,
            ready_steps: *ready_steps,
            max_steps: *max_steps,
            quantile: *quantile,
            perturb,
            resample_probability: *resample_probability,
        }),
        _ => None,
    }
}

/// The steps a trial has completed: where its last successful round ended.
pub fn steps_done(trial: &TrialRecord) -> u64 {
    trial
        .segments
        .iter()
        .rev()
        .find(|segment| segment.state == SegmentState::Succeeded)
        .and_then(|segment| segment.max_steps)
        .unwrap_or(0)
}

/// The current trial of every member: trials no later trial replaced.
pub fn members(trials: &[TrialRecord]) -> Vec<&TrialRecord> {
    trials
        .iter()
        .filter(|trial| !trials.iter().any(|t| t.replaces == Some(trial.index)))
        .collect()
}

pub fn next(spec: &ExperimentSpec, trials: &[TrialRecord], may_start: bool) -> Option<Decision> {
    let settings = settings(spec)?;
    let index = trials.len() as u32;
    // Fill the population first.
    if (index as usize) < settings.population as usize && may_start {
        return Some(Decision::Start {
            trial: index,
            params: random_point(spec, index),
            max_steps: Some(settings.ready_steps.min(settings.max_steps)),
            source: None,
            replaces: None,
        });
    }
    let current = members(trials);
    let ranked = ranked(spec, trials, &current);
    let cut = cut_of(ranked.len(), settings.quantile);
    // The lowest-indexed member resting between rounds decides first.
    let resting = current
        .iter()
        .find(|trial| trial.rests() && steps_done(trial) < settings.max_steps)?;
    let done = steps_done(resting);
    let next_steps = (done + settings.ready_steps).min(settings.max_steps);
    let position = ranked.iter().position(|(t, _)| t.index == resting.index);
    let in_bottom =
        ranked.len() >= 2 && position.is_some_and(|p| p >= ranked.len().saturating_sub(cut));
    if in_bottom && may_start {
        let mut rng = trial_rng(spec.seed, index, 2);
        let tops: Vec<&TrialRecord> = ranked[..cut.min(ranked.len())]
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| t.index != resting.index && steps_done(t) > 0)
            .collect();
        if !tops.is_empty() {
            let source = tops[rng.random_range(0..tops.len())];
            let source_steps = steps_done(source);
            let segment = source
                .segments
                .iter()
                .rposition(|s| s.state == SegmentState::Succeeded)
                .unwrap_or(0) as u32;
            return Some(Decision::Start {
                trial: index,
                params: explore(spec, &settings, &source.params, &mut rng),
                max_steps: Some((source_steps + settings.ready_steps).min(settings.max_steps)),
                source: Some(Source {
                    trial: source.index,
                    segment,
                }),
                replaces: Some(resting.index),
            });
        }
    }
    Some(Decision::Resume {
        trial: resting.index,
        segment: resting.segments.len() as u32,
        max_steps: next_steps,
    })
}

/// The members with a value, best first, with their loss. A replacement that has not reported yet
/// ranks with the value of the trial it replaced, so one exploit does not push the next member down.
fn ranked<'t>(
    spec: &ExperimentSpec,
    trials: &'t [TrialRecord],
    current: &[&'t TrialRecord],
) -> Vec<(&'t TrialRecord, f64)> {
    let goal = spec.metric.goal;
    let mut ranked: Vec<(&TrialRecord, f64)> = current
        .iter()
        .filter_map(|trial| {
            let loss = goal.loss(lineage_value(trials, trial)?);
            loss.is_finite().then_some((*trial, loss))
        })
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.index.cmp(&b.0.index)));
    ranked
}

/// How many members make the top (and the bottom) quantile.
fn cut_of(ranked: usize, quantile: f64) -> usize {
    ((ranked as f64 * quantile).ceil() as usize).max(1)
}

/// Each ranked member's rank score in `[0, 1]` (1 best) and whether it sits in the bottom quantile,
/// where the end of its round will replace it.
pub(crate) fn standings(spec: &ExperimentSpec, trials: &[TrialRecord]) -> Vec<(u32, f64, bool)> {
    let Some(settings) = settings(spec) else {
        return Vec::new();
    };
    let current = members(trials);
    let ranked = ranked(spec, trials, &current);
    let n = ranked.len();
    let cut = cut_of(n, settings.quantile);
    ranked
        .iter()
        .enumerate()
        .map(|(position, (trial, _))| {
            let score = 1.0 - position as f64 / n as f64;
            (trial.index, score, n >= 2 && position >= n - cut.min(n))
        })
        .collect()
}

/// The last value a trial reported, or else the one the trial it replaced reported, and so on.
fn lineage_value(trials: &[TrialRecord], trial: &TrialRecord) -> Option<f64> {
    let mut at = trial;
    for _ in 0..=trials.len() {
        if let Some(value) = at.segments.iter().rev().find_map(|segment| segment.last) {
            return Some(value);
        }
        at = trials.iter().find(|t| Some(t.index) == at.replaces)?;
    }
    None
}

/// A perturbed copy of a point.
fn explore(
    spec: &ExperimentSpec,
    settings: &Settings<'_>,
    params: &Assignment,
    rng: &mut impl Rng,
) -> Assignment {
    let dims = space::dims(&spec.parameters);
    let mut out = Assignment::new();
    for dim in &dims {
        if !dim.is_active(&out) {
            continue;
        }
        let value = match params.get(dim.name) {
            None => dim.sample(rng),
            Some(value) => perturb(dim, value, settings, rng),
        };
        out.insert(dim.name.to_owned(), value);
    }
    out
}

fn perturb(dim: &Dim<'_>, value: &Value, settings: &Settings<'_>, rng: &mut impl Rng) -> Value {
    match dim.param {
        Param::Categorical { .. } => {
            if rng.random::<f64>() < settings.resample_probability {
                dim.sample(rng)
            } else {
                value.clone()
            }
        }
        Param::Const { value, .. } => value.clone(),
        Param::Int { min, max, .. } => {
            let factor = settings.perturb[rng.random_range(0..settings.perturb.len())];
            let x = value.as_f64().unwrap_or(*min as f64) * factor;
            let mut scaled = (x.round() as i64).clamp(*min, *max);
            // An integer too small to move by scaling moves by one.
            if Some(scaled) == value.as_i64() && factor != 1.0 {
                let step = if factor > 1.0 { 1 } else { -1 };
                scaled = (scaled + step).clamp(*min, *max);
            }
            Value::from(scaled)
        }
        Param::Double { min, max, .. } | Param::LogUniform { min, max, .. } => {
            let factor = settings.perturb[rng.random_range(0..settings.perturb.len())];
            Value::from((value.as_f64().unwrap_or(*min) * factor).clamp(*min, *max))
        }
    }
}
