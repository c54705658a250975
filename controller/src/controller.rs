//! The DroverJob controller: reconciles each object with its job in the store.
//!
//! - A namespace maps to a tenant: its `drover.dev/tenant` label (the label key is configurable), or
//!   else the tenant named like the namespace. The job is submitted as that tenant's `kubernetes`
//!   user (made on first use, role member), through the same checks as a REST submission.
//! - The job is created idempotently, keyed by the object's uid: a controller that restarts between
//!   creating the job and writing status finds the same job, never a second one.
//! - Status (state, reason, shape, progress, last loss, checkpoints, conditions with
//!   `observedGeneration`) is written back while the job is active, and every job event becomes a
//!   Kubernetes Event on the object.
//! - Editing `spec.resources.workers`/`ps` resizes the job; any other edit is refused with the
//!   `Synced` condition (the job goes on as submitted).
//! - Deleting the object cancels the job and waits for its tasks to stop before the finalizer goes.
//! - With `mirror`, jobs submitted over REST get objects too (`mirror.rs`).
//! - DroverExperiments are reconciled beside DroverJobs, by the same rules (`experiments.rs`).

use super::admission::{document_of, principal_for, submit, tenant_for};
// What the reconcilers share lives in `context.rs`; the server and the tests name it from here.
pub use super::context::{
    CONTROLLER_USER, Context, DEFAULT_TENANT_LABEL, Error, Settings, error_policy,
};
use super::crd::{DroverJob, DroverJobStatus, FINALIZER};
use super::edits::sync_spec;
use super::events::{event, publish_events, warn_on_refusals};
use super::mirror::job_of;
use super::status::{conditions, describe_job, refuse, set_condition, with_nulls};
use chrono::Utc;
use drover_core::JobState;
use drover_service::job_changes::{UserAction, transition as user_transition};
use drover_store::{Job, Scope, TaskState};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizing, finalizer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::watch;

/// Runs the controller while this replica leads, until `stopped` turns true. A replica that stops
/// leading stops reconciling; the next leader picks up where it left off (all state is in the
/// objects and the store).
pub async fn run(
    ctx: Arc<Context>,
    mut leader: watch::Receiver<bool>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            led = leader.wait_for(|leads| *leads) => if led.is_err() { return },
            _ = stopped.wait_for(|stop| *stop) => return,
        }
        tracing::info!("leading: reconciling DroverJobs, DroverExperiments and Kubernetes nodes");
        let jobs = Controller::new(
            Api::<DroverJob>::all(ctx.client.clone()),
            watcher::Config::default(),
        )
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|outcome| async move {
            match outcome {
                // Watching failed (no CRD installed, no permission, the API server away): say so.
                Err(kube::runtime::controller::Error::QueueError(err)) => {
                    tracing::warn!(error = %err, "watching DroverJobs failed; retrying");
                }
                // Reconcile failures are logged by `error_policy`.
                Err(err) => tracing::debug!(error = %err, "a DroverJob reconcile did not finish"),
                Ok(_) => {}
            }
        });
        let experiments = super::experiments::run(ctx.clone());
        let nodes = super::nodes::sync(ctx.clone());
        let mirror = async {
            if ctx.settings.mirror {
                super::mirror::run(ctx.clone()).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = jobs => {},
            () = experiments => {},
            () = nodes => {},
            () = mirror => {},
            _ = leader.wait_for(|leads| !*leads) => {
                tracing::info!("no longer leading: the DroverJob and DroverExperiment controllers stop");
            }
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}

/// One reconcile of one object.
pub async fn reconcile(obj: Arc<DroverJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = obj.namespace().unwrap_or_default();
    let api: Api<DroverJob> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, obj, |event| async {
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

async fn apply(obj: &DroverJob, ctx: &Context, api: &Api<DroverJob>) -> Result<Action, Error> {
    let now = Utc::now();
    let generation = obj.metadata.generation;
    let old = obj.status.clone().unwrap_or_default();
    let mut status = old.clone();
    status.observed_generation = generation;
    let tenant = match tenant_for(obj, ctx).await? {
        Ok(tenant) => tenant,
        Err(message) => {
            refuse(&mut status, "UnknownTenant", &message, generation, now);
            return finish(
                obj,
                ctx,
                api,
                &old,
                status,
                Action::requeue(ctx.settings.retry),
            )
            .await;
        }
    };
    status.tenant = Some(tenant.name.clone());
    let principal = principal_for(ctx, &tenant).await?;
    let existing = match job_of(obj, ctx, &tenant).await? {
        Ok(job) => job,
        Err(message) => {
            refuse(&mut status, "MirroredJobGone", &message, generation, now);
            return finish(obj, ctx, api, &old, status, Action::await_change()).await;
        }
    };
    let document = match document_of(obj) {
        Ok(document) => document,
        Err(err) => {
            let message = format!("{}: {}", err.field, err.reason);
            let Some(job) = existing else {
                refuse(&mut status, "InvalidSpec", &message, generation, now);
                return finish(obj, ctx, api, &old, status, Action::await_change()).await;
            };
            // An edit made the spec invalid: the job goes on as it was.
            set_condition(
                &mut status.conditions,
                conditions::SYNCED,
                false,
                "InvalidSpec",
                format!("{message}; the job goes on as it was"),
                generation,
                now,
            );
            return report(obj, ctx, api, &old, status, &job, now).await;
        }
    };
    let job = match existing {
        // Looked at again only when the object was edited since: a resize made over REST is not
        // undone by an object that still shows the old ranges.
        Some(job) if old.observed_generation == generation && old.job_id.is_some() => job,
        Some(job) => {
            sync_spec(
                ctx,
                &principal,
                &job,
                &document,
                &mut status,
                generation,
                now,
            )
            .await?;
            job
        }
        None => match submit(ctx, &principal, obj, document).await? {
            Ok(job) => {
                set_condition(
                    &mut status.conditions,
                    conditions::SYNCED,
                    true,
                    "Submitted",
                    "the job runs the object's spec",
                    generation,
                    now,
                );
                job
            }
            Err((reason, message)) => {
                refuse(&mut status, &reason, &message, generation, now);
                return finish(
                    obj,
                    ctx,
                    api,
                    &old,
                    status,
                    Action::requeue(ctx.settings.retry),
                )
                .await;
            }
        },
    };
    report(obj, ctx, api, &old, status, &job, now).await
}

/// Writes the job's state into the status, publishes its new events, and decides when to look again.
async fn report(
    obj: &DroverJob,
    ctx: &Context,
    api: &Api<DroverJob>,
    old: &DroverJobStatus,
    mut status: DroverJobStatus,
    job: &Job,
    now: chrono::DateTime<Utc>,
) -> Result<Action, Error> {
    let store = ctx.service.store.as_ref();
    let job = store.get_job(Scope::Tenant(job.tenant_id), job.id).await?;
    let max_steps = job
        .document
        .as_deref()
        .and_then(|d| d.pointer("/spec/train/max_steps"))
        .and_then(Value::as_u64);
    let waiting = if job.state == JobState::Queued {
        store.last_round().await?.and_then(|round| {
            round
                .waiting
                .into_iter()
                .find(|w| w.job == job.id)
                .map(|w| w.reason)
        })
    } else {
        None
    };
    set_condition(
        &mut status.conditions,
        conditions::ACCEPTED,
        true,
        "Submitted",
        format!("job {} in tenant {}", job.id, job.tenant_name),
        obj.metadata.generation,
        now,
    );
    describe_job(
        store,
        &job,
        max_steps,
        waiting.as_deref(),
        &mut status,
        obj.metadata.generation,
        now,
    )
    .await?;
    status.last_event_id = publish_events(obj, ctx, &job, old.last_event_id).await?;
    let next = if job.state.is_final() {
        Action::await_change()
    } else {
        Action::requeue(ctx.settings.resync)
    };
    finish(obj, ctx, api, old, status, next).await
}

/// Patches the status when it changed, and returns `next`.
async fn finish(
    obj: &DroverJob,
    ctx: &Context,
    api: &Api<DroverJob>,
    old: &DroverJobStatus,
    status: DroverJobStatus,
    next: Action,
) -> Result<Action, Error> {
    if *old != status || obj.status.is_none() {
        let patch = json!({ "status": with_nulls(&status) });
        api.patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
        // A condition that went False for the first time (or with a new message) is also an Event.
        warn_on_refusals(ctx, obj, &old.conditions, &status.conditions).await;
    }
    Ok(next)
}

/// Deleting the object: cancel its job, and keep the finalizer until the job's tasks have stopped.
async fn cleanup(obj: &DroverJob, ctx: &Context) -> Result<Action, Error> {
    let tenant = match tenant_for(obj, ctx).await? {
        Ok(tenant) => tenant,
        // No tenant: no job was ever made (or its tenant, with its jobs, is gone).
        Err(_) => return Ok(Action::await_change()),
    };
    let store = ctx.service.store.as_ref();
    let Ok(Some(job)) = job_of(obj, ctx, &tenant).await? else {
        return Ok(Action::await_change());
    };
    if !job.state.is_final() {
        let principal = principal_for(ctx, &tenant).await?;
        match user_transition(
            &ctx.service,
            &principal,
            &job.id.to_string(),
            UserAction::Cancel,
        )
        .await
        {
            Ok(_) => {
                event(
                    ctx,
                    obj,
                    EventType::Normal,
                    "Cancelling",
                    "the object was deleted: its job is cancelled",
                )
                .await;
            }
            // Ended meanwhile.
            Err(err) if err.kind == drover_service::ErrorKind::Conflict => {}
            // Refused (the tenant's `kubernetes` user may not cancel): the finalizer stays, and says why.
            Err(err) if err.is_client_error() => {
                let message = format!(
                    "cannot cancel job {}: {}; the object stays until it can be (or its job ends)",
                    job.id, err.message
                );
                event(ctx, obj, EventType::Warning, "CancelRefused", &message).await;
                return Err(Error::Refused(message));
            }
            Err(err) => return Err(err.into()),
        }
    }
    let tasks = store.job_tasks(Scope::Tenant(tenant.id), job.id).await?;
    if tasks
        .iter()
        .any(|t| !matches!(t.state, TaskState::Exited | TaskState::Lost))
    {
        return Err(Error::Settling(job.id));
    }
    Ok(Action::await_change())
}
