//! The searcher's view of an experiment, rebuilt from the store: each trial's point, its segments
//! with their jobs' outcomes, and the metric curve its jobs reported.

use drover_core::JobState;
use drover_core::experiment::Assignment;
use drover_search::{Segment, SegmentState, Source, TrialRecord};
use drover_store::{SegmentRow, TrialRow, TrialSample};

/// What a segment's job says of it; a segment whose job is not made yet is still in flight.
pub fn segment_state(row: &SegmentRow) -> SegmentState {
    match row.job_state {
        None => SegmentState::Active,
        Some(JobState::Succeeded) => SegmentState::Succeeded,
        Some(JobState::Failed) => SegmentState::Failed,
        Some(JobState::Cancelled) => SegmentState::Stopped,
        Some(_) => SegmentState::Active,
    }
}

/// A trial's stored point (a JSON object) as an assignment.
pub fn params_of(value: &serde_json::Value) -> Assignment {
    match value {
        serde_json::Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        _ => Assignment::new(),
    }
}

/// The trials as the searcher sees them.
pub fn trial_records(
    trials: &[TrialRow],
    segments: &[SegmentRow],
    samples: &[TrialSample],
) -> Vec<TrialRecord> {
    trials
        .iter()
        .map(|trial| {
            let params = params_of(&trial.params);
            let mine = || samples.iter().filter(|s| s.trial == trial.trial);
            let segments: Vec<Segment> = segments
                .iter()
                .filter(|s| s.trial == trial.trial)
                .map(|row| Segment {
                    max_steps: row.max_steps,
                    state: segment_state(row),
                    last: mine()
                        .filter(|s| s.segment == row.segment)
                        .max_by_key(|s| s.step)
                        .map(|s| s.value),
                })
                .collect();
            let mut curve: Vec<(u64, f64)> = mine()
                .filter(|s| s.value.is_finite())
                .map(|s| (s.step, s.value))
                .collect();
            curve.sort_by_key(|&(step, _)| step);
            // A step reported twice (a restarted generation) keeps its latest value.
            curve.dedup_by(|later, earlier| {
                if later.0 == earlier.0 {
                    earlier.1 = later.1;
                    true
                } else {
                    false
                }
            });
            TrialRecord {
                index: trial.trial,
                params,
                source: trial
                    .source
                    .map(|(trial, segment)| Source { trial, segment }),
                replaces: trial.replaces,
                segments,
                curve,
            }
        })
        .collect()
}
