//! A DroverExperiment's status from the experiment in the store (state, trials, the best value, the
//! Accepted and Complete conditions), and the experiment's events as Kubernetes Events on the object.

use super::context::{Context, Error};
use super::events::event_as;
use super::experiment_crd::{DroverExperiment, DroverExperimentStatus};
use super::status::{conditions, pascal, set_condition, truncate};
use chrono::{DateTime, Utc};
use drover_service::experiments::trials as trial_views;
use drover_store::Experiment;
use kube::runtime::events::EventType;
use serde_json::Value;

/// Fills `status` from the experiment as the REST API shows it (`trial_views`, the same query).
pub(super) async fn describe_experiment(
    ctx: &Context,
    experiment: &Experiment,
    status: &mut DroverExperimentStatus,
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let trials = trial_views(&ctx.service, experiment).await?;
    let count = |n: usize| Some(u32::try_from(n).unwrap_or(u32::MAX));
    status.experiment_id = Some(experiment.id.to_string());
    status.tenant = Some(experiment.tenant_name.clone());
    status.state = Some(experiment.state.as_str().to_owned());
    status.reason = None;
    status.message = Some(truncate(experiment.message.clone(), 1024));
    status.metric = experiment
        .document
        .pointer("/spec/metric/name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    status.trials = count(trials.len());
    status.active_trials = count(trials.iter().filter(|t| t.state == "active").count());
    status.best_trial = experiment.best_trial;
    status.best_value = experiment.best_value.map(metric_text);
    set_condition(
        &mut status.conditions,
        conditions::ACCEPTED,
        true,
        "Submitted",
        format!(
            "experiment {} in tenant {}",
            experiment.id, experiment.tenant_name
        ),
        generation,
        now,
    );
    if experiment.state.is_terminal() {
        set_condition(
            &mut status.conditions,
            conditions::COMPLETE,
            true,
            &pascal(experiment.state.as_str()),
            experiment.message.clone(),
            generation,
            now,
        );
    }
    Ok(())
}

/// A metric value as the status shows it: four decimals, or four significant digits in scientific
/// notation when that would hide it.
fn metric_text(value: f64) -> String {
    if value == 0.0 || (1e-3..1e6).contains(&value.abs()) {
        format!("{value:.4}")
    } else {
        format!("{value:.3e}")
    }
}

/// Marks the object as not accepted: Drover does not have (and does not run) its experiment.
pub(super) fn refuse(
    status: &mut DroverExperimentStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: DateTime<Utc>,
) {
    let state = if reason == "InvalidSpec" {
        "Invalid"
    } else {
        "Waiting"
    };
    status.state = Some(state.to_owned());
    status.reason = Some(reason.to_owned());
    status.message = Some(truncate(message.to_owned(), 1024));
    set_condition(
        &mut status.conditions,
        conditions::ACCEPTED,
        false,
        reason,
        message,
        generation,
        now,
    );
}

/// The status as a merge patch: a field that is now absent is sent as null, so it is removed.
pub(super) fn with_nulls(status: &DroverExperimentStatus) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Value::Object(fields) = &mut value {
        for key in [
            "experimentId",
            "tenant",
            "state",
            "reason",
            "message",
            "metric",
            "trials",
            "activeTrials",
            "bestTrial",
            "bestValue",
            "lastEventId",
            "observedGeneration",
            "conditions",
        ] {
            fields.entry(key).or_insert(Value::Null);
        }
    }
    value
}

/// Publishes the experiment's events after `after` as Kubernetes Events; returns the last one's id.
pub(super) async fn publish_experiment_events(
    obj: &DroverExperiment,
    ctx: &Context,
    experiment: &Experiment,
    after: Option<i64>,
) -> Result<Option<i64>, Error> {
    let events = ctx
        .service
        .store
        .list_experiment_events(experiment.id, after, 50)
        .await?;
    let mut last = after;
    for e in events {
        let (kind, reason, action) = event_kind(&e.message);
        event_as(ctx, obj, kind, reason, &e.message, &action).await;
        last = Some(e.id);
    }
    Ok(last)
}

/// An experiment event's Event type, reason and action, from its message. The action of a trial's
/// event names the trial: kube's recorder folds Events with the same type, reason and action into one
/// series (keeping the first note), which must not swallow other trials' events.
fn event_kind(message: &str) -> (EventType, &'static str, String) {
    let mut words = message.split([' ', ':']);
    let first = words.next().unwrap_or_default();
    if first == "trial"
        && let Some(trial) = words.next().and_then(|n| n.parse::<u32>().ok())
    {
        let (kind, reason) = match words.next().unwrap_or_default() {
            "starts" => (EventType::Normal, "TrialStarted"),
            "resumes" => (EventType::Normal, "TrialResumed"),
            "stopped" => (EventType::Normal, "TrialStopped"),
            "waits" => (EventType::Warning, "TrialWaiting"),
            _ => (EventType::Normal, "Trial"),
        };
        return (kind, reason, format!("Trial{trial}"));
    }
    let (kind, reason) = match first {
        "submitted" => (EventType::Normal, "Submitted"),
        "finished" => (EventType::Normal, "Finished"),
        "failed" => (EventType::Warning, "Failed"),
        "paused" => (EventType::Normal, "Paused"),
        "resumed" => (EventType::Normal, "Resumed"),
        "cancelled" => (EventType::Normal, "Cancelled"),
        _ => (EventType::Normal, "Experiment"),
    };
    (kind, reason, reason.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn experiment_events_become_kubernetes_events_per_trial() {
        let (kind, reason, action) = event_kind("trial 3 starts: train.optimizer.lr=0.01");
        assert_eq!(
            (kind, reason, action.as_str()),
            (EventType::Normal, "TrialStarted", "Trial3")
        );
        let (_, reason, action) = event_kind("trial 12 resumes from its checkpoint to step 300");
        assert_eq!((reason, action.as_str()), ("TrialResumed", "Trial12"));
        let (kind, reason, _) = event_kind("trial 0 waits: its job was refused (quota)");
        assert_eq!((kind, reason), (EventType::Warning, "TrialWaiting"));
        let (kind, reason, _) = event_kind("failed: trial 2 cannot be built: bad");
        assert_eq!((kind, reason), (EventType::Warning, "Failed"));
        let (_, reason, action) = event_kind("submitted by kubernetes: asha searcher");
        assert_eq!((reason, action.as_str()), ("Submitted", "Submitted"));
        let (_, reason, _) = event_kind("cancelled by kubernetes (2 running trials cancelled)");
        assert_eq!(reason, "Cancelled");
        let (_, reason, _) = event_kind("something new");
        assert_eq!(reason, "Experiment");
    }

    #[test]
    fn metric_values_keep_their_digits() {
        assert_eq!(metric_text(0.97333), "0.9733");
        assert_eq!(metric_text(0.0), "0.0000");
        assert_eq!(metric_text(0.000012), "1.200e-5");
        assert_eq!(metric_text(-2.5), "-2.5000");
    }
}
