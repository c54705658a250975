//! The trial jobs of an experiment: creating a segment's job (from its trial's point, resuming the
//! right checkpoint, under an idempotency key), stopping and cancelling them, and the experiment's
//! events and failure.

use super::blocked::{Blocked, DriveError};
use super::situation::params_of;
use crate::Service;
use crate::auth::Principal;
use chrono::{DateTime, Utc};
use drover_core::experiment::{Assignment, DroverExperiment, TrialRun, build_trial};
use drover_core::{ExperimentId, JobId, JobState, ReasonCode, TokenId};
use drover_store::{
    Experiment, ExperimentState, Scope, SegmentRow, StateChange, StoreError, StoreResult, TrialRow,
};
use sha2::{Digest, Sha256};

pub(super) fn new_segment(
    experiment_id: ExperimentId,
    trial: u32,
    segment: u32,
    max_steps: Option<u64>,
    now: DateTime<Utc>,
) -> SegmentRow {
    SegmentRow {
        experiment_id,
        trial,
        segment,
        job_id: None,
        max_steps,
        stop_reason: None,
        created_at: now,
        job_state: None,
        job_name: None,
    }
}

/// `a=1, b=x`: a point for events and logs.
pub fn show(params: &Assignment) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The job name of a trial segment: unique in the tenant, as experiment names are.
pub fn segment_job_name(experiment: &str, trial: u32, segment: u32) -> String {
    format!("{experiment}-t{trial}-{segment}")
}

/// Creates the job of a segment whose row exists; `Ok(false)` when it cannot be created now (the
/// reason is recorded) and the pass should end.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site shape: a pass's whole context"
)]
pub(super) async fn submit_segment(
    service: &Service,
    experiment: &Experiment,
    document: &DroverExperiment,
    principal: &Principal,
    trials: &[TrialRow],
    segments: &[SegmentRow],
    segment: &SegmentRow,
    blocked: &Blocked,
) -> Result<bool, DriveError> {
    let store = service.store.as_ref();
    let now = Utc::now();
    let Some(trial) = trials.iter().find(|t| t.trial == segment.trial) else {
        fail(
            service,
            experiment,
            &format!("segment of trial {} has no trial row", segment.trial),
        )
        .await?;
        return Ok(false);
    };
    // Where it starts: its own previous segment's checkpoint, or the source trial's.
    let from = if segment.segment > 0 {
        Some((segment.trial, segment.segment - 1))
    } else {
        trial.source
    };
    let init_from = match from {
        None => None,
        Some((from_trial, from_segment)) => {
            let job = segments
                .iter()
                .find(|s| s.trial == from_trial && s.segment == from_segment)
                .and_then(|s| s.job_id);
            let checkpoint = match job {
                Some(job) => store.latest_checkpoint(job).await?,
                None => None,
            };
            match checkpoint {
                Some(checkpoint) => Some(checkpoint.id.to_string()),
                None => {
                    fail(
                        service,
                        experiment,
                        &format!(
                            "trial {} cannot start: trial {from_trial} segment {from_segment} left no checkpoint",
                            segment.trial
                        ),
                    )
                    .await?;
                    return Ok(false);
                }
            }
        }
    };
    let params = params_of(&trial.params);
    let name = segment_job_name(&experiment.name, segment.trial, segment.segment);
    let run = TrialRun {
        name: &name,
        trial: segment.trial,
        params: &params,
        max_steps: segment.max_steps,
        init_from,
    };
    let job = match build_trial(document, &run) {
        Ok(job) => job,
        Err(err) => {
            fail(
                service,
                experiment,
                &format!("trial {} cannot be built: {err}", segment.trial),
            )
            .await?;
            return Ok(false);
        }
    };
    let key = format!(
        "experiment:{}:{}:{}",
        experiment.id, segment.trial, segment.segment
    );
    let hash: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    match crate::jobs::submit(service, principal, job, Some(key), Some(hash)).await {
        Ok(created) => {
            store
                .set_segment_job(
                    experiment.id,
                    segment.trial,
                    segment.segment,
                    created.value.id,
                )
                .await?;
            blocked.clear(experiment.id);
            tracing::info!(
                experiment.id = %experiment.id, job.id = %created.value.id, trial = segment.trial,
                segment = segment.segment, "trial job submitted"
            );
            Ok(true)
        }
        Err(err) if err.is_client_error() => {
            let why = format!(
                "trial {} waits: its job was refused ({}{})",
                segment.trial,
                err.field.map(|f| format!("{f}: ")).unwrap_or_default(),
                err.message
            );
            if blocked.note(experiment.id, &why) {
                event(service, experiment.id, why, now).await;
            }
            Ok(false)
        }
        Err(err) => Err(DriveError::Submit(err.message)),
    }
}

/// Cancels the running job of a trial's last segment, saying why.
pub async fn stop_trial(
    service: &Service,
    experiment: ExperimentId,
    segments: &[SegmentRow],
    trial: u32,
    reason: &str,
) -> StoreResult<()> {
    let Some(last) = segments
        .iter()
        .filter(|s| s.trial == trial)
        .max_by_key(|s| s.segment)
    else {
        return Ok(());
    };
    service
        .store
        .set_segment_stop_reason(experiment, trial, last.segment, reason)
        .await?;
    if let Some(job) = last.job_id {
        cancel_job(
            service,
            job,
            &format!("stopped by its experiment: {reason}"),
        )
        .await?;
    }
    Ok(())
}

/// Moves a job to `cancelled` unless it has ended already.
async fn cancel_job(service: &Service, job: JobId, message: &str) -> StoreResult<()> {
    let change = StateChange {
        to: JobState::Cancelled,
        reason: ReasonCode::StoppedBySearch,
        message: message.to_owned(),
        actor: None,
    };
    match service
        .store
        .transition_job(Scope::Cluster, job, &change)
        .await
    {
        Ok(_) => {
            service.metrics.job_transition(JobState::Cancelled);
            service.wake_scheduler();
            Ok(())
        }
        // Already ended: nothing to stop.
        Err(StoreError::IllegalTransition(_)) => Ok(()),
        Err(err) => Err(err),
    }
}

pub(super) async fn fail(service: &Service, experiment: &Experiment, why: &str) -> StoreResult<()> {
    let now = Utc::now();
    tracing::warn!(experiment.id = %experiment.id, why, "experiment failed");
    service
        .store
        .set_experiment_state(experiment.id, ExperimentState::Failed, why, now)
        .await?;
    event(service, experiment.id, format!("failed: {why}"), now).await;
    Ok(())
}

/// Records an event; a failure to record is logged, not fatal.
pub async fn event(service: &Service, id: ExperimentId, message: String, at: DateTime<Utc>) {
    if let Err(err) = service.store.add_experiment_event(id, &message, at).await {
        tracing::warn!(experiment.id = %id, error = %err, "cannot record an experiment event");
    }
}

/// The experiment's submitter as a principal: trials are their jobs, within their tenant's quota.
pub(super) async fn principal_of(
    service: &Service,
    experiment: &Experiment,
) -> StoreResult<Principal> {
    let user = service
        .store
        .get_user(Scope::Tenant(experiment.tenant_id), experiment.submitted_by)
        .await?;
    let tenant = service.store.get_tenant(experiment.tenant_id).await?;
    Ok(Principal {
        user,
        // It holds no token: the driver acts inside the server for the experiment's submitter.
        token_id: TokenId(uuid::Uuid::nil()),
        tenant_quota: tenant.quota,
        token_expires_at: None,
    })
}

/// Every open segment job of an experiment, cancelled with `message` (the experiment's cancellation).
pub async fn cancel_running(
    service: &Service,
    id: ExperimentId,
    message: &str,
) -> StoreResult<usize> {
    let (_, segments) = service.store.experiment_trials(id).await?;
    let mut cancelled = 0;
    for segment in &segments {
        if let (Some(job), Some(job_state)) = (segment.job_id, segment.job_state)
            && !job_state.is_final()
        {
            cancel_job(service, job, message).await?;
            cancelled += 1;
        }
    }
    Ok(cancelled)
}
