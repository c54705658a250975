//! The experiment driver: while this replica leads, it turns each open experiment's searcher decisions
//! into jobs.
//!
//! Intent vs observed, as in the scheduling loop: the searcher ([`drover_search::plan`]) sees the
//! trials as the store has them (points, segments, the jobs' outcomes and metrics) and says what to do;
//! the driver writes each new trial and segment as a row *before* it creates the segment's job (under an
//! idempotency key made of the experiment, trial and segment), so a restart or a new leader finds the
//! row and finishes creating that job instead of proposing another. Nothing about an experiment lives
//! only in memory. [`drive`] is one pass over one experiment, safe to run again at any time.

mod situation;

pub use situation::{params_of, segment_state, trial_records};

use crate::auth::Principal;
use crate::state::AppState;
use crate::store::{
    Experiment, ExperimentState, Scope, SegmentRow, StateChange, StoreError, StoreResult, TrialRow,
};
use chrono::{DateTime, Utc};
use drover_core::experiment::{Assignment, DroverExperiment, TrialRun, build_trial};
use drover_core::{ExperimentId, JobId, JobState, ReasonCode, TokenId};
use drover_search::{Decision, Situation};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// How often the driver looks at open experiments.
pub const EVERY: Duration = Duration::from_secs(1);

/// Runs passes over every open experiment while this replica leads, until `shutdown` resolves.
pub async fn run(
    state: AppState,
    mut leader: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let blocked = Blocked::default();
    loop {
        if *leader.borrow_and_update()
            && let Err(err) = drive_all(&state, &blocked).await
        {
            tracing::error!(error = %err, "experiment pass failed");
        }
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            changed = leader.changed() => if changed.is_err() { return },
            () = &mut shutdown => return,
        }
    }
}

/// What the driver remembers between passes (only to do less; nothing here is needed for
/// correctness): the last reason each experiment's trial could not be submitted, so a lasting refusal
/// (quota, queue cap) is recorded once as an event rather than every pass; and what each experiment
/// looked like at its last full pass, so a pass that would see nothing new is skipped.
#[derive(Debug, Default)]
pub struct Blocked {
    reasons: Mutex<HashMap<ExperimentId, String>>,
    seen: Mutex<HashMap<ExperimentId, (Watermark, std::time::Instant)>>,
}

/// The experiment's state and last update, its trial jobs' count and their last change.
type Watermark = (ExperimentState, DateTime<Utc>, i64, Option<DateTime<Utc>>);

/// A pass is made at least this often (budgets by time and GPU-hours, early stopping on new metrics).
const FULL_PASS_EVERY: Duration = Duration::from_secs(10);

impl Blocked {
    /// `true` when `why` is new for the experiment.
    fn note(&self, id: ExperimentId, why: &str) -> bool {
        let mut map = self
            .reasons
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.insert(id, why.to_owned()).as_deref() != Some(why)
    }

    fn clear(&self, id: ExperimentId) {
        self.reasons
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&id);
    }

    /// `true` when the experiment looks as it did at the last pass, which was recent.
    fn unchanged(&self, id: ExperimentId, mark: &Watermark) -> bool {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        seen.get(&id)
            .is_some_and(|(last, at)| last == mark && at.elapsed() < FULL_PASS_EVERY)
    }

    fn passed(&self, id: ExperimentId, mark: Watermark) {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(id, (mark, std::time::Instant::now()));
    }
}

/// One pass over every open experiment.
pub async fn drive_all(state: &AppState, blocked: &Blocked) -> StoreResult<()> {
    for experiment in state.store.open_experiments().await? {
        if let Err(err) = drive(state, &experiment, blocked).await {
            tracing::warn!(experiment.id = %experiment.id, error = %err, "experiment pass failed");
        }
    }
    Ok(())
}

/// What went wrong with one experiment in a pass.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("submitting a trial job failed: {0}")]
    Submit(String),
}

/// One pass over one experiment: finish what an earlier pass started, plan, carry the plan out.
pub async fn drive(
    state: &AppState,
    experiment: &Experiment,
    blocked: &Blocked,
) -> Result<(), DriveError> {
    let store = state.store.as_ref();
    let now = Utc::now();
    let (segments_made, last_change) = store.experiment_watermark(experiment.id).await?;
    let mark = (
        experiment.state,
        experiment.updated_at,
        segments_made,
        last_change,
    );
    if blocked.unchanged(experiment.id, &mark) {
        return Ok(());
    }
    let document: DroverExperiment = match serde_json::from_value(experiment.document.clone()) {
        Ok(document) => document,
        Err(err) => {
            fail(
                state,
                experiment,
                &format!("its stored document does not parse: {err}"),
            )
            .await?;
            return Ok(());
        }
    };
    let principal = principal_of(state, experiment).await?;
    blocked.passed(experiment.id, mark);
    let (trials, segments) = store.experiment_trials(experiment.id).await?;
    // Segments written but whose job an earlier pass did not get to create.
    for segment in segments.iter().filter(|s| s.job_id.is_none()) {
        if !submit_segment(
            state, experiment, &document, &principal, &trials, &segments, segment, blocked,
        )
        .await?
        {
            return Ok(());
        }
    }
    let (trials, segments) = store.experiment_trials(experiment.id).await?;
    let samples = store
        .experiment_samples(experiment.id, &document.spec.metric.name)
        .await?;
    let records = trial_records(&trials, &segments, &samples);
    let best = drover_search::best_trial(&document.spec, &records);
    if best != experiment.best_trial.zip(experiment.best_value) {
        store.set_experiment_best(experiment.id, best, now).await?;
    }
    if experiment.state == ExperimentState::Paused {
        return Ok(());
    }
    let situation = Situation {
        trials: records,
        gpu_hours_used: store.experiment_gpu_seconds(experiment.id, now).await? / 3600.0,
        past_deadline: document
            .spec
            .budget
            .deadline
            .is_some_and(|deadline| now >= deadline),
    };
    let plan = drover_search::plan(&document.spec, &situation);
    let mut trials = trials;
    let mut segments = segments;
    for decision in &plan.decisions {
        match decision {
            Decision::Start {
                trial,
                params,
                max_steps,
                source,
                replaces,
            } => {
                let row = TrialRow {
                    experiment_id: experiment.id,
                    trial: *trial,
                    params: serde_json::to_value(params).unwrap_or_default(),
                    source: source.map(|s| (s.trial, s.segment)),
                    replaces: *replaces,
                    created_at: now,
                };
                store.insert_trial(&row).await?;
                let segment = new_segment(experiment.id, *trial, 0, *max_steps, now);
                store.insert_segment(&segment).await?;
                let how = match source {
                    Some(source) => format!(
                        " from trial {}'s checkpoint (replacing trial {})",
                        source.trial,
                        replaces.map_or_else(|| "-".to_owned(), |r| r.to_string())
                    ),
                    None => String::new(),
                };
                event(
                    state,
                    experiment.id,
                    format!("trial {trial} starts{how}: {}", show(params)),
                    now,
                )
                .await;
                trials.push(row);
                segments.push(segment.clone());
                if !submit_segment(
                    state, experiment, &document, &principal, &trials, &segments, &segment, blocked,
                )
                .await?
                {
                    return Ok(());
                }
            }
            Decision::Resume {
                trial,
                segment,
                max_steps,
            } => {
                let row = new_segment(experiment.id, *trial, *segment, Some(*max_steps), now);
                store.insert_segment(&row).await?;
                event(
                    state,
                    experiment.id,
                    format!("trial {trial} resumes from its checkpoint to step {max_steps}"),
                    now,
                )
                .await;
                segments.push(row.clone());
                if !submit_segment(
                    state, experiment, &document, &principal, &trials, &segments, &row, blocked,
                )
                .await?
                {
                    return Ok(());
                }
            }
            Decision::Stop { trial, reason } => {
                stop_trial(state, experiment.id, &segments, *trial, reason).await?;
                event(
                    state,
                    experiment.id,
                    format!("trial {trial} stopped: {reason}"),
                    now,
                )
                .await;
            }
        }
    }
    if let Some(reason) = plan.finished {
        store
            .set_experiment_state(experiment.id, ExperimentState::Succeeded, &reason, now)
            .await?;
        let best = best.map_or_else(String::new, |(t, v)| {
            format!("; best: trial {t} ({} {v})", document.spec.metric.name)
        });
        event(
            state,
            experiment.id,
            format!("finished: {reason}{best}"),
            now,
        )
        .await;
        blocked.clear(experiment.id);
        tracing::info!(experiment.id = %experiment.id, reason, "experiment finished");
    }
    Ok(())
}

fn new_segment(
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
async fn submit_segment(
    state: &AppState,
    experiment: &Experiment,
    document: &DroverExperiment,
    principal: &Principal,
    trials: &[TrialRow],
    segments: &[SegmentRow],
    segment: &SegmentRow,
    blocked: &Blocked,
) -> Result<bool, DriveError> {
    let store = state.store.as_ref();
    let now = Utc::now();
    let Some(trial) = trials.iter().find(|t| t.trial == segment.trial) else {
        fail(
            state,
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
                        state,
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
                state,
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
    match crate::routes::jobs::create_job(state, principal, job, Some(key), Some(hash)).await {
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
        Err(err) if err.status.is_client_error() => {
            let why = format!(
                "trial {} waits: its job was refused ({}{})",
                segment.trial,
                err.field.map(|f| format!("{f}: ")).unwrap_or_default(),
                err.message
            );
            if blocked.note(experiment.id, &why) {
                event(state, experiment.id, why, now).await;
            }
            Ok(false)
        }
        Err(err) => Err(DriveError::Submit(err.message)),
    }
}

/// Cancels the running job of a trial's last segment, saying why.
pub async fn stop_trial(
    state: &AppState,
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
    state
        .store
        .set_segment_stop_reason(experiment, trial, last.segment, reason)
        .await?;
    if let Some(job) = last.job_id {
        cancel_job(state, job, &format!("stopped by its experiment: {reason}")).await?;
    }
    Ok(())
}

/// Moves a job to `cancelled` unless it has ended already.
async fn cancel_job(state: &AppState, job: JobId, message: &str) -> StoreResult<()> {
    let change = StateChange {
        to: JobState::Cancelled,
        reason: ReasonCode::StoppedBySearch,
        message: message.to_owned(),
        actor: None,
    };
    match state
        .store
        .transition_job(Scope::Cluster, job, &change)
        .await
    {
        Ok(_) => {
            state.metrics.job_transition(JobState::Cancelled);
            state.wake_scheduler();
            Ok(())
        }
        // Already ended: nothing to stop.
        Err(StoreError::IllegalTransition(_)) => Ok(()),
        Err(err) => Err(err),
    }
}

async fn fail(state: &AppState, experiment: &Experiment, why: &str) -> StoreResult<()> {
    let now = Utc::now();
    tracing::warn!(experiment.id = %experiment.id, why, "experiment failed");
    state
        .store
        .set_experiment_state(experiment.id, ExperimentState::Failed, why, now)
        .await?;
    event(state, experiment.id, format!("failed: {why}"), now).await;
    Ok(())
}

/// Records an event; a failure to record is logged, not fatal.
pub async fn event(state: &AppState, id: ExperimentId, message: String, at: DateTime<Utc>) {
    if let Err(err) = state.store.add_experiment_event(id, &message, at).await {
        tracing::warn!(experiment.id = %id, error = %err, "cannot record an experiment event");
    }
}

/// The experiment's submitter as a principal: trials are their jobs, within their tenant's quota.
async fn principal_of(state: &AppState, experiment: &Experiment) -> StoreResult<Principal> {
    let user = state
        .store
        .get_user(Scope::Tenant(experiment.tenant_id), experiment.submitted_by)
        .await?;
    let tenant = state.store.get_tenant(experiment.tenant_id).await?;
    Ok(Principal {
        user,
        // It holds no token: the driver acts inside the server for the experiment's submitter.
        token_id: TokenId(uuid::Uuid::nil()),
        tenant_quota: tenant.quota,
    })
}

/// Every open segment job of an experiment, cancelled with `message` (the experiment's cancellation).
pub async fn cancel_running(
    state: &AppState,
    id: ExperimentId,
    message: &str,
) -> StoreResult<usize> {
    let (_, segments) = state.store.experiment_trials(id).await?;
    let mut cancelled = 0;
    for segment in &segments {
        if let (Some(job), Some(job_state)) = (segment.job_id, segment.job_state)
            && !job_state.is_final()
        {
            cancel_job(state, job, message).await?;
            cancelled += 1;
        }
    }
    Ok(cancelled)
}
