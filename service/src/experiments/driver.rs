//! The driver's loop and one pass over an experiment: finish what an earlier pass started, ask the
//! searcher for a plan, carry it out, and tell the scheduler how promising each trial is.

use super::blocked::{Blocked, DriveError};
use super::jobs::{event, fail, new_segment, principal_of, show, stop_trial, submit_segment};
use super::situation::trial_records;
use crate::Service;
use chrono::Utc;
use drover_core::ExperimentId;
use drover_core::experiment::DroverExperiment;
use drover_search::{Decision, Situation};
use drover_store::{Experiment, ExperimentState, StoreResult, TrialRow};
use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;

/// How often the driver looks at open experiments.
pub const EVERY: Duration = Duration::from_secs(1);

/// Runs passes over every open experiment while this replica leads, until `shutdown` resolves.
pub async fn run(
    service: Service,
    mut leader: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let blocked = Blocked::default();
    loop {
        if *leader.borrow_and_update()
            && let Err(err) = drive_all(&service, &blocked).await
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

/// One pass over every open experiment.
pub async fn drive_all(service: &Service, blocked: &Blocked) -> StoreResult<()> {
    let open = service.store.open_experiments().await?;
    if let Some(runtime) = &service.runtime {
        runtime
            .search_hints
            .retain(&open.iter().map(|e| e.id).collect());
    }
    for experiment in open {
        if let Err(err) = drive(service, &experiment, blocked).await {
            tracing::warn!(experiment.id = %experiment.id, error = %err, "experiment pass failed");
        }
    }
    Ok(())
}

/// Tells the scheduling loop how promising each trial's current job is.
fn publish_hints(
    service: &Service,
    experiment: ExperimentId,
    document: &DroverExperiment,
    records: &[drover_search::TrialRecord],
    segments: &[drover_store::SegmentRow],
) {
    let Some(runtime) = &service.runtime else {
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

/// One pass over one experiment: finish what an earlier pass started, plan, carry the plan out.
pub async fn drive(
    service: &Service,
    experiment: &Experiment,
    blocked: &Blocked,
) -> Result<(), DriveError> {
    let store = service.store.as_ref();
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
                service,
                experiment,
                &format!("its stored document does not parse: {err}"),
            )
            .await?;
            return Ok(());
        }
    };
    let principal = principal_of(service, experiment).await?;
    blocked.passed(experiment.id, mark);
    let (trials, segments) = store.experiment_trials(experiment.id).await?;
    // Segments written but whose job an earlier pass did not get to create.
    for segment in segments.iter().filter(|s| s.job_id.is_none()) {
        if !submit_segment(
            service, experiment, &document, &principal, &trials, &segments, segment, blocked,
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
    publish_hints(service, experiment.id, &document, &records, &segments);
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
                // The trial and its first segment together: a kill between two writes left a
                // trial without a segment, which no later pass gave a job.
                let segment = new_segment(experiment.id, *trial, 0, *max_steps, now);
                store.insert_trial(&row, &segment).await?;
                let how = match source {
                    Some(source) => format!(
                        " from trial {}'s checkpoint (replacing trial {})",
                        source.trial,
                        replaces.map_or_else(|| "-".to_owned(), |r| r.to_string())
                    ),
                    None => String::new(),
                };
                event(
                    service,
                    experiment.id,
                    format!("trial {trial} starts{how}: {}", show(params)),
                    now,
                )
                .await;
                trials.push(row);
                segments.push(segment.clone());
                if !submit_segment(
                    service, experiment, &document, &principal, &trials, &segments, &segment,
                    blocked,
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
                    service,
                    experiment.id,
                    format!("trial {trial} resumes from its checkpoint to step {max_steps}"),
                    now,
                )
                .await;
                segments.push(row.clone());
                if !submit_segment(
                    service, experiment, &document, &principal, &trials, &segments, &row, blocked,
                )
                .await?
                {
                    return Ok(());
                }
            }
            Decision::Stop { trial, reason } => {
                stop_trial(service, experiment.id, &segments, *trial, reason).await?;
                event(
                    service,
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
            service,
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
