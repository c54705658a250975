//! What a searcher decides: start, resume or stop a trial; a plan's decisions and whether the
//! experiment is over; and a decision recorded in the working copy of the trials.

use crate::trials::{Segment, SegmentState, Source, TrialRecord};
use drover_core::experiment::Assignment;

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
