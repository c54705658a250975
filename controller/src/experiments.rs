//! The DroverExperiment controller: reconciles each object with its hyper-parameter search in the
//! store, beside the DroverJob controller and with the same rules.
//!
//! - The namespace maps to a tenant as for DroverJobs (`tenant_for`); the experiment is submitted as
//!   the tenant's `kubernetes` user through the REST route's own function (`create_experiment`), so
//!   its trials are that user's jobs, under the tenant's quota. Those trial jobs get no DroverJob
//!   mirrors (`--kubernetes-mirror` leaves the `kubernetes` user's jobs alone); the object's status
//!   and `drover experiment trials` show them.
//! - The experiment is created once per object, keyed by its uid (`experiment_admission.rs`): a
//!   controller that restarts before writing status finds the same experiment, never a second.
//! - Status (state, trials, active trials, best trial and value, metric, conditions with
//!   `observedGeneration`) is written while the experiment is open and once when it ends; each
//!   experiment event becomes a Kubernetes Event on the object.
//! - A spec the API refuses is condition `Accepted=False` (reason `InvalidSpec`, naming the field) and
//!   a Warning Event, tried again only when the object changes. Any edit of a submitted experiment's
//!   spec is refused with `Synced=False`; the experiment goes on as submitted.
//! - Deleting the object cancels the experiment (and its running trials, as `drover experiment
//!   cancel` does) and waits for those trials' tasks to stop before the finalizer goes.

use super::admission::{principal_for, tenant_for};
use super::context::{Context, Error, error_policy};
use super::events::{event, warn_on_refusals};
use super::experiment_admission::{document_of, edited_field, experiment_of, submit};
use super::experiment_crd::{DroverExperiment, DroverExperimentStatus, EXPERIMENT_FINALIZER};
use super::experiment_status::{
    describe_experiment, publish_experiment_events, refuse, with_nulls,
};
use super::status::{conditions, set_condition};
use chrono::Utc;
use drover_core::JobState;
use drover_service::experiments::steer::{ExperimentAction, transition as experiment_transition};
use drover_store::{Experiment, Scope, TaskState};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizing, finalizer};
use kube::runtime::watcher;
use serde_json::json;
use std::sync::Arc;

/// Reconciles DroverExperiments until the watch ends (it retries on its own).
pub(super) async fn run(ctx: Arc<Context>) {
    Controller::new(
        Api::<DroverExperiment>::all(ctx.client.clone()),
        watcher::Config::default(),
    )
    .run(reconcile, error_policy, ctx)
    .for_each(|outcome| async move {
        match outcome {
            // Watching failed (no CRD installed, no permission, the API server away): say so.
            Err(kube::runtime::controller::Error::QueueError(err)) => {
                tracing::warn!(error = %err, "watching DroverExperiments failed; retrying");
            }
            // Reconcile failures are logged by `error_policy`.
            Err(err) => {
                tracing::debug!(error = %err, "a DroverExperiment reconcile did not finish");
            }
            Ok(_) => {}
        }
    })
    .await;
}

/// One reconcile of one object.
pub async fn reconcile(obj: Arc<DroverExperiment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = obj.namespace().unwrap_or_default();
    let api: Api<DroverExperiment> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, EXPERIMENT_FINALIZER, obj, |event| async {
        match event {
            Finalizing::Apply(obj) => apply(&obj, &ctx, &api).await,
            Finalizing::Cleanup(obj) => cleanup(&obj, &ctx).await,
        }
    })
    .await
    .map_err(|err| match err {
        kube::runtime::finalizer::Error::ApplyFailed(err)
        | kube::runtime::finalizer::Error::CleanupFailed(err) => err,
        other => Error::Finalizer(other.to_string()),
    })
}

async fn apply(
    obj: &DroverExperiment,
    ctx: &Context,
    api: &Api<DroverExperiment>,
) -> Result<Action, Error> {
    let now = Utc::now();
    let generation = obj.metadata.generation;
    let old = obj.status.clone().unwrap_or_default();
    let mut status = old.clone();
    status.observed_generation = generation;
    let tenant = match tenant_for(obj, ctx).await? {
        Ok(tenant) => tenant,
        Err(message) => {
            refuse(&mut status, "UnknownTenant", &message, generation, now);
            let retry = Action::requeue(ctx.settings.retry);
            return finish(obj, ctx, api, &old, status, retry).await;
        }
    };
    status.tenant = Some(tenant.name.clone());
    let controller = principal_for(ctx, &tenant).await?;
    let existing = experiment_of(obj, ctx, &controller).await?;
    let document = match document_of(obj) {
        Ok(document) => document,
        Err(err) => {
            let message = format!("{}: {}", err.field, err.reason);
            let Some(experiment) = existing else {
                refuse(&mut status, "InvalidSpec", &message, generation, now);
                return finish(obj, ctx, api, &old, status, Action::await_change()).await;
            };
            // An edit made the spec invalid: the experiment goes on as it was.
            set_condition(
                &mut status.conditions,
                conditions::SYNCED,
                false,
                "InvalidSpec",
                format!("{message}; the experiment goes on as it was submitted"),
                generation,
                now,
            );
            return report(obj, ctx, api, &old, status, &experiment, now).await;
        }
    };
    let experiment = match existing {
        // Compared again only when the object was edited since its last status.
        Some(experiment)
            if old.observed_generation == generation && old.experiment_id.is_some() =>
        {
            experiment
        }
        Some(experiment) => {
            match edited_field(&experiment, &document) {
                Some(field) => set_condition(
                    &mut status.conditions,
                    conditions::SYNCED,
                    false,
                    "ImmutableField",
                    format!(
                        "{field} cannot change once the experiment is submitted; delete the object and apply it again to run a changed search. The experiment goes on as it was submitted"
                    ),
                    generation,
                    now,
                ),
                None => set_synced(&mut status, generation, now),
            }
            experiment
        }
        None => match submit(ctx, &controller, obj, document).await? {
            Ok(experiment) => {
                set_synced(&mut status, generation, now);
                experiment
            }
            Err((reason, message)) => {
                refuse(&mut status, &reason, &message, generation, now);
                let retry = Action::requeue(ctx.settings.retry);
                return finish(obj, ctx, api, &old, status, retry).await;
            }
        },
    };
    report(obj, ctx, api, &old, status, &experiment, now).await
}

fn set_synced(
    status: &mut DroverExperimentStatus,
    generation: Option<i64>,
    now: chrono::DateTime<Utc>,
) {
    set_condition(
        &mut status.conditions,
        conditions::SYNCED,
        true,
        "Submitted",
        "the experiment runs the object's spec",
        generation,
        now,
    );
}

/// Writes the experiment's state into the status, publishes its new events, and decides when to
/// look again: while it is open, every resync period; once it has ended, only when the object changes.
async fn report(
    obj: &DroverExperiment,
    ctx: &Context,
    api: &Api<DroverExperiment>,
    old: &DroverExperimentStatus,
    mut status: DroverExperimentStatus,
    experiment: &Experiment,
    now: chrono::DateTime<Utc>,
) -> Result<Action, Error> {
    let store = ctx.service.store.as_ref();
    let experiment = store
        .get_experiment(Scope::Tenant(experiment.tenant_id), experiment.id)
        .await?;
    describe_experiment(ctx, &experiment, &mut status, obj.metadata.generation, now).await?;
    status.last_event_id =
        publish_experiment_events(obj, ctx, &experiment, old.last_event_id).await?;
    let next = if experiment.state.is_terminal() {
        Action::await_change()
    } else {
        Action::requeue(ctx.settings.resync)
    };
    finish(obj, ctx, api, old, status, next).await
}

/// Patches the status when it changed, and returns `next`. A condition that went False (or changed
/// its message while False) is also a Warning Event.
async fn finish(
    obj: &DroverExperiment,
    ctx: &Context,
    api: &Api<DroverExperiment>,
    old: &DroverExperimentStatus,
    status: DroverExperimentStatus,
    next: Action,
) -> Result<Action, Error> {
    if *old == status && obj.status.is_some() {
        return Ok(next);
    }
    let patch = json!({ "status": with_nulls(&status) });
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    warn_on_refusals(ctx, obj, &old.conditions, &status.conditions).await;
    Ok(next)
}

/// Deleting the object: cancel its experiment (and so its running trials), and keep the finalizer
/// until those trials' tasks have stopped.
async fn cleanup(obj: &DroverExperiment, ctx: &Context) -> Result<Action, Error> {
    let tenant = match tenant_for(obj, ctx).await? {
        Ok(tenant) => tenant,
        // No tenant: no experiment was ever made (or its tenant, with its experiments, is gone).
        Err(_) => return Ok(Action::await_change()),
    };
    let controller = principal_for(ctx, &tenant).await?;
    let Some(experiment) = experiment_of(obj, ctx, &controller).await? else {
        return Ok(Action::await_change());
    };
    if !experiment.state.is_terminal() {
        let id = experiment.id.to_string();
        match experiment_transition(&ctx.service, &controller, &id, ExperimentAction::Cancel).await
        {
            Ok(_) => {
                let note =
                    "the object was deleted: its experiment and its running trials are cancelled";
                event(ctx, obj, EventType::Normal, "Cancelling", note).await;
            }
            // Ended meanwhile.
            Err(err) if err.kind == drover_service::ErrorKind::Conflict => {}
            // Refused: the finalizer stays, and says why.
            Err(err) if err.is_client_error() => {
                let message = format!(
                    "cannot cancel experiment {id}: {}; the object stays until it can be (or the experiment ends)",
                    err.message
                );
                event(ctx, obj, EventType::Warning, "CancelRefused", &message).await;
                return Err(Error::Refused(message));
            }
            Err(err) => return Err(err.into()),
        }
    }
    // Trials that ended on their own (succeeded, failed) have no tasks left; cancelled ones may still.
    let store = ctx.service.store.as_ref();
    let (_, segments) = store.experiment_trials(experiment.id).await?;
    for segment in &segments {
        let (Some(job), Some(state)) = (segment.job_id, segment.job_state) else {
            continue;
        };
        if matches!(state, JobState::Succeeded | JobState::Failed) {
            continue;
        }
        let tasks = store.job_tasks(Scope::Tenant(tenant.id), job).await?;
        if tasks
            .iter()
            .any(|t| !matches!(t.state, TaskState::Exited | TaskState::Lost))
        {
            return Err(Error::Settling(job));
        }
    }
    Ok(Action::await_change())
}
