//! A DroverJob's status from the job in the store: state and reason, the shape it runs at, progress,
//! the last loss, checkpoints, and conditions in Kubernetes' convention.

use super::crd::{DroverJobStatus, LastMetric};
use chrono::{DateTime, Utc};
use drover_core::JobState;
use drover_store::{Job, Scope, Store, StoreResult, TaskRole, TaskState};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

/// The condition types the controller writes.
pub mod conditions {
    /// Drover has the job (`False`: invalid spec, unknown tenant, name taken, over quota).
    pub const ACCEPTED: &str = "Accepted";
    /// The object's latest spec is what the job runs (`False`: an edit that cannot be applied).
    pub const SYNCED: &str = "Synced";
    /// The job holds GPUs (`False` while it waits, with the scheduler's reason).
    pub const SCHEDULED: &str = "Scheduled";
    /// The job ended (`True` with reason Succeeded, Failed or Cancelled).
    pub const COMPLETE: &str = "Complete";
}

/// Sets condition `kind` in `list`, keeping its transition time when its status did not change.
pub fn set_condition(
    list: &mut Vec<Condition>,
    kind: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: DateTime<Utc>,
) {
    let status = if status { "True" } else { "False" }.to_owned();
    let previous = list.iter().position(|c| c.type_ == kind);
    let last_transition_time = match previous.map(|i| &list[i]) {
        Some(old) if old.status == status => old.last_transition_time.clone(),
        _ => Time(timestamp(now)),
    };
    let condition = Condition {
        type_: kind.to_owned(),
        status,
        reason: reason.to_owned(),
        message: truncate(message.into(), 1024),
        observed_generation: generation,
        last_transition_time,
    };
    match previous {
        Some(i) => list[i] = condition,
        None => list.push(condition),
    }
}

/// The time in k8s-openapi's type (kube's time library), at second precision as the API server keeps it.
pub fn timestamp(at: DateTime<Utc>) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_second(at.timestamp()).unwrap_or_default()
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// "PascalCase" for a reason code (`insufficient_resources` → `InsufficientResources`), as
/// Kubernetes wants condition and Event reasons.
pub fn pascal(code: &str) -> String {
    code.split(['_', '-', ' '])
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect()
}

/// Fills `status` from the job: state, reason, shape, progress, last loss, checkpoints, and the
/// Scheduled and Complete conditions. `waiting_reason`: the scheduler's reason if it left the job waiting.
pub async fn describe_job(
    store: &dyn Store,
    job: &Job,
    max_steps: Option<u64>,
    waiting_reason: Option<&str>,
    status: &mut DroverJobStatus,
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let scope = Scope::Tenant(job.tenant_id);
    let tasks = store.generation_tasks(job.id, job.generation).await?;
    let live = tasks
        .iter()
        .filter(|t| !matches!(t.state, TaskState::Exited | TaskState::Lost));
    let (mut workers, mut ps, mut gpus) = (0u32, 0u32, 0u32);
    for task in live {
        match task.key.role {
            TaskRole::Worker => workers += 1,
            TaskRole::Ps => ps += 1,
        }
        gpus += u32::try_from(task.gpus.len()).unwrap_or(u32::MAX);
    }
    let step = store
        .last_steps(&[job.id])
        .await?
        .first()
        .map(|(_, step)| *step);
    let last_metric = match step {
        Some(step) => store
            .metric_points_after(scope, job.id, "loss", step.checked_sub(1), 1)
            .await?
            .first()
            .map(|point| LastMetric {
                name: "loss".to_owned(),
                step: point.step,
                value: format!("{:.4}", point.value),
            }),
        None => None,
    };
    let checkpoints = store.list_checkpoints(scope, job.id).await?.len();
    let reason = match (job.state, waiting_reason) {
        (JobState::Queued, Some(reason)) => reason.to_owned(),
        _ => job.reason.as_str().to_owned(),
    };
    status.job_id = Some(job.id.to_string());
    status.tenant = Some(job.tenant_name.clone());
    status.state = Some(job.state.as_str().to_owned());
    status.message = Some(truncate(job.message.clone(), 1024));
    status.workers = Some(workers.to_string());
    status.ps = Some(ps.to_string());
    status.gpus = Some(gpus);
    status.step = step;
    status.progress = Some(progress(step.unwrap_or(0), max_steps, job.state));
    status.last_metric = last_metric;
    status.checkpoints = Some(u32::try_from(checkpoints).unwrap_or(u32::MAX));
    let running = matches!(
        job.state,
        JobState::Starting | JobState::Running | JobState::Rescaling
    );
    let scheduled_message = if running {
        format!("{workers} workers, {ps} PS shards on {gpus} GPUs")
    } else if job.state == JobState::Queued {
        match waiting_reason {
            Some(reason) => format!("waiting: {}", reason.replace('_', " ")),
            None => "waiting for the scheduler's next round".to_owned(),
        }
    } else {
        job.message.clone()
    };
    set_condition(
        &mut status.conditions,
        conditions::SCHEDULED,
        running,
        &pascal(&reason),
        scheduled_message,
        generation,
        now,
    );
    if job.state.is_final() {
        set_condition(
            &mut status.conditions,
            conditions::COMPLETE,
            true,
            &pascal(job.state.as_str()),
            job.message.clone(),
            generation,
            now,
        );
    }
    status.reason = Some(reason);
    let entry = if job.state == JobState::Queued {
        store
            .queue_forecast()
            .await?
            .and_then(|f| f.entries.into_iter().find(|e| e.job == job.id))
    } else {
        None
    };
    let rfc3339 = |at: DateTime<Utc>| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    status.queue_position = entry.as_ref().map(|e| e.position);
    status.predicted_start = entry.as_ref().and_then(|e| e.start).map(rfc3339);
    status.predicted_start_p90 = entry.as_ref().and_then(|e| e.p90).map(rfc3339);
    Ok(())
}

fn progress(step: u64, max_steps: Option<u64>, state: JobState) -> String {
    match max_steps {
        Some(max) if max > 0 => {
            let done = if state == JobState::Succeeded {
                max
            } else {
                step.min(max)
            };
            format!("{done}/{max} ({}%)", done * 100 / max)
        }
        _ => step.to_string(),
    }
}

/// The status as a merge patch: a field that is now absent is sent as null, so it is removed.
pub(super) fn with_nulls(status: &DroverJobStatus) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Value::Object(fields) = &mut value {
        for key in [
            "jobId",
            "tenant",
            "state",
            "reason",
            "message",
            "workers",
            "ps",
            "gpus",
            "progress",
            "step",
            "lastMetric",
            "checkpoints",
            "lastEventId",
            "observedGeneration",
            "conditions",
        ] {
            fields.entry(key).or_insert(Value::Null);
        }
    }
    value
}

/// Marks the object as not accepted: Drover does not have (and does not run) its job.
pub(super) fn refuse(
    status: &mut DroverJobStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: DateTime<Utc>,
) {
    status.state = Some("Waiting".to_owned());
    if reason == "InvalidSpec" {
        status.state = Some("Invalid".to_owned());
    }
    status.reason = Some(reason.to_owned());
    status.message = Some(message.to_owned());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_codes_become_pascal_case() {
        assert_eq!(pascal("insufficient_resources"), "InsufficientResources");
        assert_eq!(pascal("succeeded"), "Succeeded");
        assert_eq!(pascal(""), "");
    }

    #[test]
    fn progress_reads_step_of_budget() {
        assert_eq!(
            progress(250, Some(1000), JobState::Running),
            "250/1000 (25%)"
        );
        assert_eq!(
            progress(990, Some(1000), JobState::Succeeded),
            "1000/1000 (100%)"
        );
        assert_eq!(progress(7, None, JobState::Running), "7");
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let t0 = DateTime::from_timestamp(1_000, 0).unwrap_or_default();
        let t1 = DateTime::from_timestamp(2_000, 0).unwrap_or_default();
        let mut list = Vec::new();
        set_condition(&mut list, "Scheduled", false, "Waiting", "a", Some(1), t0);
        set_condition(&mut list, "Scheduled", false, "Waiting", "b", Some(2), t1);
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].last_transition_time.0.as_second(), 1_000);
        assert_eq!(list[0].observed_generation, Some(2));
        set_condition(&mut list, "Scheduled", true, "Running", "c", Some(2), t1);
        assert_eq!(list[0].last_transition_time.0.as_second(), 2_000);
    }
}
