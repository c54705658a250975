//! How the API shows experiments; their trials are `drover_service::experiments::trials`, the one
//! query the REST routes, the dashboard and the Kubernetes controller share.

use crate::paging::ListMeta;
use chrono::{DateTime, Utc};
use drover_core::experiment::{DroverExperiment, MetricGoal};
use drover_service::experiments::TrialView;
use drover_store::{Experiment, ExperimentState};
use serde::Serialize;
use utoipa::ToSchema;

/// An experiment as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExperimentView {
    pub id: String,
    pub name: String,
    pub tenant: String,
    #[schema(value_type = String)]
    pub state: ExperimentState,
    pub message: String,
    pub searcher: String,
    pub metric: MetricGoal,
    pub best_trial: Option<u32>,
    pub best_value: Option<f64>,
    pub num_trials: Option<usize>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// The whole document, defaults filled in.
    #[schema(value_type = Object)]
    pub document: serde_json::Value,
    /// Every trial (on `GET /api/v1/experiments/{id}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trials: Option<Vec<TrialView>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExperimentEnvelope {
    pub experiment: ExperimentView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExperimentList {
    pub experiments: Vec<ExperimentView>,
    pub meta: ListMeta,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TrialList {
    pub trials: Vec<TrialView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExperimentEventView {
    pub id: i64,
    pub message: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExperimentEventList {
    pub events: Vec<ExperimentEventView>,
    pub meta: ListMeta,
}

pub fn view(experiment: Experiment, trials: Option<Vec<TrialView>>) -> ExperimentView {
    let parsed: Option<DroverExperiment> = serde_json::from_value(experiment.document.clone()).ok();
    ExperimentView {
        id: experiment.id.to_string(),
        name: experiment.name,
        tenant: experiment.tenant_name,
        state: experiment.state,
        message: experiment.message,
        searcher: parsed
            .as_ref()
            .map_or_else(String::new, |d| d.spec.searcher.name().to_owned()),
        metric: parsed.as_ref().map_or_else(
            || MetricGoal {
                name: String::new(),
                goal: drover_core::experiment::Goal::Minimize,
            },
            |d| d.spec.metric.clone(),
        ),
        best_trial: experiment.best_trial,
        best_value: experiment.best_value,
        num_trials: trials.as_ref().map(Vec::len),
        created_at: experiment.created_at,
        updated_at: experiment.updated_at,
        ended_at: experiment.ended_at,
        document: experiment.document,
        trials,
    }
}
