//! What users do to experiments, from any entrance: create one (validated, recorded with who submitted
//! it), and pause, resume or cancel it with its trial jobs. The driver ([`super::run`]) then acts on
//! the state these leave.

use super::jobs::{cancel_running, event};
use crate::Service;
use crate::auth::Principal;
use crate::error::{ErrorKind, ServiceError, ServiceResult};
use crate::job_changes::UserAction;
use chrono::Utc;
use drover_core::ExperimentId;
use drover_core::experiment::DroverExperiment;
use drover_store::{Experiment, ExperimentState, NewExperiment};

fn parse_id(raw: &str) -> ServiceResult<ExperimentId> {
    raw.parse()
        .map_err(|_| ServiceError::not_found(format!("no experiment `{raw}`")))
}

pub async fn load(
    service: &Service,
    principal: &Principal,
    raw: &str,
) -> ServiceResult<Experiment> {
    let id = parse_id(raw)?;
    service
        .store
        .get_experiment(principal.scope(), id)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no experiment `{raw}`")))
}

/// What a user may do to an experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExperimentAction {
    Pause,
    Resume,
    Cancel,
}

/// Creates a parsed (so validated) experiment as `principal`'s, in their tenant, and records who
/// submitted it. A name taken in the tenant is a 409 on `metadata.name`. Shared by the route and the
/// Kubernetes controller (`crate::kubernetes::experiments`).
pub async fn create(
    service: &Service,
    principal: &Principal,
    mut experiment: DroverExperiment,
) -> ServiceResult<Experiment> {
    principal.require_job_writer()?;
    experiment.status = None;
    let document = serde_json::to_value(&experiment).map_err(|err| {
        tracing::error!(error = %err, "serialising a parsed experiment failed");
        ServiceError::internal()
    })?;
    let now = Utc::now();
    let created = service
        .store
        .create_experiment(&NewExperiment {
            id: ExperimentId::new(),
            tenant_id: principal.user.tenant_id,
            name: experiment.metadata.name.clone(),
            document,
            submitted_by: principal.user.id,
            created_at: now,
        })
        .await
        .map_err(|err| ServiceError::from_store(err, || "experiment".into()))?;
    event(
        service,
        created.id,
        format!(
            "submitted by {}: {} searcher, {} {}",
            principal.user.name,
            experiment.spec.searcher.name(),
            match experiment.spec.metric.goal {
                drover_core::experiment::Goal::Minimize => "minimise",
                drover_core::experiment::Goal::Maximize => "maximise",
            },
            experiment.spec.metric.name
        ),
        now,
    )
    .await;
    tracing::info!(experiment.id = %created.id, user.id = %principal.user.id, "experiment submitted");
    Ok(created)
}

/// Pauses, resumes or cancels the experiment `raw` (an id) as `principal`; an action its state does
/// not allow is a 409 `illegal_transition`. Cancelling cancels its running trial jobs. Shared by the
/// routes and the Kubernetes controller (deleting a DroverExperiment cancels it).
pub async fn transition(
    service: &Service,
    principal: &Principal,
    raw: &str,
    action: ExperimentAction,
) -> ServiceResult<Experiment> {
    let experiment = load(service, principal, raw).await?;
    principal.require_job_writer()?;
    let conflict = |why: String| ServiceError::new(ErrorKind::Conflict, "illegal_transition", why);
    let now = Utc::now();
    let store = service.store.as_ref();
    let internal = |err| ServiceError::from_store(err, || "experiment".into());
    let who = &principal.user.name;
    match action {
        ExperimentAction::Pause => {
            if experiment.state != ExperimentState::Active {
                return Err(conflict(format!(
                    "the experiment is `{}`; only an active experiment can be paused",
                    experiment.state
                )));
            }
            store
                .set_experiment_state(
                    experiment.id,
                    ExperimentState::Paused,
                    &format!("paused by {who}"),
                    now,
                )
                .await
                .map_err(internal)?;
            let paused = each_trial_job(service, principal, &experiment, UserAction::Pause).await?;
            event(
                service,
                experiment.id,
                format!("paused by {who} ({paused} running trials paused)"),
                now,
            )
            .await;
        }
        ExperimentAction::Resume => {
            if experiment.state != ExperimentState::Paused {
                return Err(conflict(format!(
                    "the experiment is `{}`; only a paused experiment can be resumed",
                    experiment.state
                )));
            }
            store
                .set_experiment_state(
                    experiment.id,
                    ExperimentState::Active,
                    &format!("resumed by {who}"),
                    now,
                )
                .await
                .map_err(internal)?;
            let resumed =
                each_trial_job(service, principal, &experiment, UserAction::Resume).await?;
            event(
                service,
                experiment.id,
                format!("resumed by {who} ({resumed} trials resumed)"),
                now,
            )
            .await;
        }
        ExperimentAction::Cancel => {
            if experiment.state.is_terminal() {
                return Err(conflict(format!(
                    "the experiment is `{}` already",
                    experiment.state
                )));
            }
            store
                .set_experiment_state(
                    experiment.id,
                    ExperimentState::Cancelled,
                    &format!("cancelled by {who}"),
                    now,
                )
                .await
                .map_err(internal)?;
            let cancelled = cancel_running(
                service,
                experiment.id,
                &format!("its experiment was cancelled by {who}"),
            )
            .await
            .map_err(internal)?;
            event(
                service,
                experiment.id,
                format!("cancelled by {who} ({cancelled} running trials cancelled)"),
                now,
            )
            .await;
        }
    }
    load(service, principal, raw).await
}

/// Pauses (or resumes) every trial job that can be; returns how many changed.
async fn each_trial_job(
    service: &Service,
    principal: &Principal,
    experiment: &Experiment,
    action: UserAction,
) -> ServiceResult<usize> {
    let (_, segments) = service
        .store
        .experiment_trials(experiment.id)
        .await
        .map_err(|err| ServiceError::from_store(err, || "experiment".into()))?;
    let mut changed = 0;
    for segment in &segments {
        let (Some(job), Some(job_state)) = (segment.job_id, segment.job_state) else {
            continue;
        };
        let applies = match action {
            UserAction::Resume => job_state == drover_core::JobState::Paused,
            _ => !job_state.is_final() && job_state != drover_core::JobState::Paused,
        };
        if applies
            && crate::job_changes::transition(service, principal, &job.to_string(), action)
                .await
                .is_ok()
        {
            changed += 1;
        }
    }
    Ok(changed)
}
