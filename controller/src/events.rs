//! The job's events as Kubernetes Events on its object (best effort: a failure is logged), and the
//! Event helpers the experiment controller uses too.

use super::context::{Context, Error};
use super::crd::DroverJob;
use super::status::{pascal, truncate};
use drover_core::JobState;
use drover_store::{Job, Scope};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

/// Publishes the job's events after `after` as Kubernetes Events; returns the last one's id.
pub(super) async fn publish_events(
    obj: &DroverJob,
    ctx: &Context,
    job: &Job,
    after: Option<i64>,
) -> Result<Option<i64>, Error> {
    let events = ctx
        .service
        .store
        .list_job_events(Scope::Tenant(job.tenant_id), job.id, after, 50)
        .await?;
    let mut last = after;
    for e in events {
        let kind = if matches!(e.to_state, JobState::Failed) {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!("{}: {}", e.to_state.as_str(), e.message);
        event_as(
            ctx,
            obj,
            kind,
            &pascal(e.reason.as_str()),
            &note,
            &pascal(e.to_state.as_str()),
        )
        .await;
        last = Some(e.id);
    }
    Ok(last)
}

/// Publishes one Event on the object; a failure is logged, never fatal (Events are best effort).
pub(super) async fn event(
    ctx: &Context,
    obj: &impl Resource<DynamicType = ()>,
    kind: EventType,
    reason: &str,
    note: &str,
) {
    event_as(ctx, obj, kind, reason, note, "Reconcile").await;
}

/// The same, under `action`: kube's recorder folds Events of one object with the same type, reason
/// and action into one series (kept with the first note) for a few minutes.
pub(super) async fn event_as(
    ctx: &Context,
    obj: &impl Resource<DynamicType = ()>,
    kind: EventType,
    reason: &str,
    note: &str,
    action: &str,
) {
    let reference: ObjectReference = obj.object_ref(&());
    let event = Event {
        type_: kind,
        reason: reason.chars().take(128).collect(),
        // The API server takes at most 1 kB of note.
        note: Some(truncate(note.to_owned(), 1000)),
        action: action.chars().take(128).collect(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&event, &reference).await {
        tracing::warn!(object = %obj.name_any(), error = %err, "cannot publish a Kubernetes Event");
    }
}

/// Each `Accepted` or `Synced` condition that went False since `old` (or changed its message) is
/// also a Warning Event.
pub(super) async fn warn_on_refusals(
    ctx: &Context,
    obj: &impl Resource<DynamicType = ()>,
    old: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    new: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) {
    use super::status::conditions;
    for condition in new {
        let before = old.iter().find(|c| c.type_ == condition.type_);
        let changed =
            before.is_none_or(|b| b.status != condition.status || b.message != condition.message);
        if condition.status == "False"
            && changed
            && matches!(
                condition.type_.as_str(),
                conditions::ACCEPTED | conditions::SYNCED
            )
        {
            event(
                ctx,
                obj,
                EventType::Warning,
                &condition.reason,
                &condition.message,
            )
            .await;
        }
    }
}
