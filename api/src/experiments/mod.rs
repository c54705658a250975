//! The experiment driver: while this replica leads, it turns each open experiment's searcher decisions
//! into jobs.
//!
//! Intent vs observed, as in the scheduling loop: the searcher ([`drover_search::plan`]) sees the
//! trials as the store has them (points, segments, the jobs' outcomes and metrics) and says what to do;
//! the driver writes each new trial and segment as a row *before* it creates the segment's job (under an
//! idempotency key made of the experiment, trial and segment), so a restart or a new leader finds the
//! row and finishes creating that job instead of proposing another. Nothing about an experiment lives
//! only in memory. [`drive`] is one pass over one experiment, safe to run again at any time.

mod jobs;
mod situation;

pub use jobs::{cancel_running, event, segment_job_name, show, stop_trial};
pub use situation::{params_of, segment_state, trial_records};

use jobs::{fail, new_segment, principal_of, submit_segment};

use crate::state::AppState;
use crate::store::{Experiment, ExperimentState, StoreError, StoreResult, TrialRow};
use chrono::{DateTime, Utc};
use drover_core::ExperimentId;
use drover_core::experiment::DroverExperiment;
use drover_search::{Decision, Situation};
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
    let open = state.store.open_experiments().await?;
    if let Some(runtime) = &state.runtime {
        runtime
            .search_hints
            .retain(&open.iter().map(|e| e.id).collect());
    }
    for experiment in open {
        if let Err(err) = drive(state, &experiment, blocked).await {
            tracing::warn!(experiment.id = %experiment.id, error = %err, "experiment pass failed");
        }
    }
    Ok(())
}

/// Tells the scheduling loop how promising each trial's current job is.
fn publish_hints(
    state: &AppState,
    experiment: ExperimentId,
    document: &DroverExperiment,
    records: &[drover_search::TrialRecord],
    segments: &[crate::store::SegmentRow],
) {
    let Some(runtime) = &state.runtime else {
        return;
    };
    let outlook = drover_search::outlook(&document.spec, records);
    let hints = outlook.into_iter().filter_map(|(trial, outlook)| {
        let job = segments
            .iter()
            .filter(|s| s.trial == trial)
            .max_by_key(|s| s.segment)?
            .job_id?;
        let hint = drover_scheduler::SearchHint {
            experiment,
            promise: outlook.promise,
            doomed: outlook.doomed,
        };
        Some((job, hint))
    });
    runtime.search_hints.set(experiment, hints);
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
    publish_hints(state, experiment.id, &document, &records, &segments);
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
