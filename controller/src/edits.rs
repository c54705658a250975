//! Edits of an object whose job exists: new worker/PS ranges resize the job; anything else is refused
//! with the `Synced` condition, and the job goes on as submitted.

use super::context::{Context, Error};
use super::crd::DroverJobStatus;
use super::status::{conditions, set_condition};
use chrono::Utc;
use drover_service::auth::Principal;
use drover_service::job_changes::resize as resize_job;
use drover_store::{Job, Scope};
use serde_json::Value;

/// Applies an edit of the object to its job: new worker/PS ranges resize it; anything else is
/// refused with the Synced condition.
pub(super) async fn sync_spec(
    ctx: &Context,
    principal: &Principal,
    job: &Job,
    document: &drover_core::DroverJob,
    status: &mut DroverJobStatus,
    generation: Option<i64>,
    now: chrono::DateTime<Utc>,
) -> Result<(), Error> {
    let stored = ctx
        .service
        .store
        .get_job(Scope::Tenant(job.tenant_id), job.id)
        .await?;
    let Some(stored_spec) = stored
        .document
        .as_deref()
        .and_then(|d| d.get("spec"))
        .cloned()
    else {
        return Err(Error::Api(format!("job {} has no stored document", job.id)));
    };
    let wanted = serde_json::to_value(&document.spec).unwrap_or_default();
    let mut changed = Vec::new();
    changed_fields(&stored_spec, &wanted, "spec", &mut changed);
    let (resizes, others): (Vec<_>, Vec<_>) = changed.into_iter().partition(|path| {
        path.starts_with("spec.resources.workers") || path.starts_with("spec.resources.ps")
    });
    if let Some(first) = others.first() {
        let message = format!(
            "{first} cannot change once the job is submitted (only spec.resources.workers and spec.resources.ps can: they resize it); delete the object and apply it again to run a changed job. The job goes on as it was submitted"
        );
        set_condition(
            &mut status.conditions,
            conditions::SYNCED,
            false,
            "ImmutableField",
            message,
            generation,
            now,
        );
        return Ok(());
    }
    if !resizes.is_empty() {
        let resources = &document.spec.resources;
        let id = job.id.to_string();
        match resize_job(
            &ctx.service,
            principal,
            &id,
            Some(resources.workers),
            Some(resources.ps),
        )
        .await
        {
            Ok(_) => {}
            Err(err) if err.is_client_error() => {
                let field = err.field.map(|f| format!("{f}: ")).unwrap_or_default();
                set_condition(
                    &mut status.conditions,
                    conditions::SYNCED,
                    false,
                    "ResizeRefused",
                    format!("{field}{}", err.message),
                    generation,
                    now,
                );
                return Ok(());
            }
            Err(err) => return Err(err.into()),
        }
    }
    // Nothing new: the reason of the last change (a resize) stays.
    let kept = status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::SYNCED && c.status == "True")
        .map(|c| c.reason.clone());
    let reason = match (resizes.is_empty(), kept) {
        (false, _) => "Resized".to_owned(),
        (true, Some(kept)) => kept,
        (true, None) => "Submitted".to_owned(),
    };
    set_condition(
        &mut status.conditions,
        conditions::SYNCED,
        true,
        &reason,
        "the job runs the object's spec",
        generation,
        now,
    );
    Ok(())
}

/// The dotted paths where `new` differs from `old` (objects field by field, anything else whole).
pub(super) fn changed_fields(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let null = Value::Null;
                changed_fields(
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    &format!("{path}.{key}"),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(path.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changed_fields_names_each_difference() {
        let old = json!({"resources": {"workers": {"min": 1, "max": 2}, "ps": 1}, "train": {"max_steps": 10}});
        let new = json!({"resources": {"workers": {"min": 1, "max": 4}, "ps": 1}, "train": {"max_steps": 20}});
        let mut out = Vec::new();
        changed_fields(&old, &new, "spec", &mut out);
        assert_eq!(out, ["spec.resources.workers.max", "spec.train.max_steps"]);
    }
}
