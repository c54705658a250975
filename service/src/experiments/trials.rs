//! An experiment's trials as users see them — each trial's point, state, metric and jobs, and how
//! promising the searcher finds it — one query the REST routes, the dashboard and the Kubernetes
//! controller's status share.

use super::situation::{segment_state, trial_records};
use crate::Service;
use crate::error::{ServiceError, ServiceResult};
use drover_core::JobId;
use drover_core::experiment::DroverExperiment;
use drover_search::SegmentState;
use drover_store::Experiment;
use serde::Serialize;
use utoipa::ToSchema;

/// One trial: a point of the space and the jobs that ran it.
#[derive(Debug, Serialize, ToSchema)]
pub struct TrialView {
    pub trial: u32,
    /// `active`, `succeeded`, `failed` or `stopped`.
    pub state: String,
    #[schema(value_type = Object)]
    pub params: serde_json::Value,
    /// The last value of the experiment's metric it reported, and at which step.
    pub last_value: Option<f64>,
    pub last_step: Option<u64>,
    /// Its best value by the metric's goal.
    pub best_value: Option<f64>,
    /// Started from this trial's checkpoint (PBT's exploit).
    pub source_trial: Option<u32>,
    pub replaces: Option<u32>,
    pub stop_reason: Option<String>,
    /// While it runs: how promising the searcher finds it, in [0, 1] (1 best), which the scheduler
    /// uses to choose among the experiment's trials when GPUs are short.
    pub promise: Option<f64>,
    /// While it runs: the searcher expects to stop it or not to promote it at its next decision, so
    /// it is the first of the experiment's trials to wait or be preempted.
    pub doomed: Option<bool>,
    pub jobs: Vec<TrialJobView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TrialJobView {
    pub segment: u32,
    pub job_id: Option<String>,
    pub name: Option<String>,
    pub state: Option<String>,
    pub max_steps: Option<u64>,
}

/// Every trial of an experiment with its jobs and metric.
pub async fn trials(service: &Service, experiment: &Experiment) -> ServiceResult<Vec<TrialView>> {
    let store = service.store.as_ref();
    let internal = |err| ServiceError::from_store(err, || "experiment".into());
    let spec = serde_json::from_value::<DroverExperiment>(experiment.document.clone())
        .map(|d| d.spec)
        .ok();
    let goal = spec.as_ref().map(|s| s.metric.clone());
    let (trials, segments) = store
        .experiment_trials(experiment.id)
        .await
        .map_err(internal)?;
    let samples = match &goal {
        Some(metric) => store
            .experiment_samples(experiment.id, &metric.name)
            .await
            .map_err(internal)?,
        None => Vec::new(),
    };
    let records = trial_records(&trials, &segments, &samples);
    let outlook = spec
        .as_ref()
        .map(|spec| drover_search::outlook(spec, &records))
        .unwrap_or_default();
    Ok(trials
        .iter()
        .zip(records)
        .map(|(row, record)| {
            let mine: Vec<_> = segments.iter().filter(|s| s.trial == row.trial).collect();
            let state = match mine.last().map(|s| segment_state(s)) {
                Some(SegmentState::Active) | None => "active",
                Some(SegmentState::Succeeded) => "succeeded",
                Some(SegmentState::Failed) => "failed",
                Some(SegmentState::Stopped) => "stopped",
            };
            let last = record.curve.last().copied();
            let best_value = goal.as_ref().and_then(|metric| {
                record
                    .curve
                    .iter()
                    .map(|&(_, v)| v)
                    .min_by(|a, b| metric.goal.loss(*a).total_cmp(&metric.goal.loss(*b)))
            });
            TrialView {
                trial: row.trial,
                state: state.to_owned(),
                params: row.params.clone(),
                last_value: last.map(|l| l.1),
                last_step: last.map(|l| l.0),
                best_value,
                source_trial: row.source.map(|s| s.0),
                replaces: row.replaces,
                stop_reason: mine.iter().rev().find_map(|s| s.stop_reason.clone()),
                promise: outlook.get(&row.trial).map(|o| o.promise),
                doomed: outlook.get(&row.trial).map(|o| o.doomed),
                jobs: mine
                    .iter()
                    .map(|s| TrialJobView {
                        segment: s.segment,
                        job_id: s.job_id.map(|j: JobId| j.to_string()),
                        name: s.job_name.clone(),
                        state: s.job_state.map(|j| j.to_string()),
                        max_steps: s.max_steps,
                    })
                    .collect(),
            }
        })
        .collect())
}
