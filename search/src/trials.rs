//! What the store knows of an experiment's trials: each trial's point, the segments (jobs) that ran it
//! and the metric curve it reported; the situation the planner is told about; and the best trial so
//! far.

use drover_core::experiment::{Assignment, ExperimentSpec};

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
