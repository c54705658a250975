//! Closing the accounting ledger's allocations: once every task of a generation has ended, the loop
//! records when it ended, why (the job event that ended it), when it first stepped, how far its work
//! was kept (its last checkpoint, or all of it when it completed) and how long finished workers sat
//! idle while the rest of the gang ran.

use super::Runtime;
use crate::accounting::cause_of_reason;
use drover_core::JobState;
use drover_store::{Allocation, AllocationEnd, Scope, StoreResult, TaskRole, TaskState};

/// Events read per job to find the one that ended a generation.
const EVENTS_READ: u32 = 1_000;

/// Closes every open allocation whose tasks have all ended.
pub(super) async fn close_allocations(runtime: &Runtime) -> StoreResult<()> {
    for allocation in runtime.store.ended_allocations().await? {
        close(runtime, &allocation).await?;
    }
    Ok(())
}

async fn close(runtime: &Runtime, allocation: &Allocation) -> StoreResult<()> {
    let store = &runtime.store;
    let (job, generation) = (allocation.job_id, allocation.generation);
    let tasks = store.generation_tasks(job, generation).await?;
    if tasks.iter().any(|t| !t.state.is_final()) {
        return Ok(());
    }
    let ended_at = tasks
        .iter()
        .map(|t| t.updated_at)
        .max()
        .unwrap_or(allocation.started_at)
        .max(allocation.started_at);
    // The first event after the allocation that took the job out of this generation.
    let events = store
        .list_job_events(Scope::Cluster, job, None, EVENTS_READ)
        .await?;
    let ending = events.iter().find(|e| {
        e.created_at > allocation.started_at
            && matches!(
                e.to_state,
                JobState::Queued
                    | JobState::Paused
                    | JobState::Rescaling
                    | JobState::Succeeded
                    | JobState::Failed
                    | JobState::Cancelled
            )
    });
    let end_cause = match ending {
        Some(e) if e.to_state == JobState::Succeeded => "completed",
        Some(e) if e.to_state == JobState::Cancelled => "cancelled",
        Some(e) if e.to_state == JobState::Paused => "paused",
        Some(e) if e.to_state == JobState::Failed => "failure",
        Some(e) => match cause_of_reason(e.reason.as_str()) {
            "startup" | "completed" => "other",
            cause => cause,
        },
        None => "other",
    };
    let first_step_at = store.first_step_at(job, generation).await?;
    let kept_until = if end_cause == "completed" {
        Some(ended_at)
    } else {
        store.last_checkpoint_at(job, generation).await?
    };
    let idle_gpu_s = tasks
        .iter()
        .filter(|t| {
            t.key.role == TaskRole::Worker
                && t.state == TaskState::Exited
                && t.exit_code == Some(0)
                && !t.gpus.is_empty()
        })
        .map(|t| {
            (ended_at - t.updated_at).num_milliseconds().max(0) as f64 / 1000.0
                * t.gpus.len() as f64
        })
        .sum();
    let end = AllocationEnd {
        ended_at,
        end_cause: end_cause.to_owned(),
        first_step_at,
        kept_until,
        idle_gpu_s,
    };
    store.close_allocation(job, generation, &end).await?;
    tracing::debug!(job.id = %job, generation, cause = end_cause, "allocation closed");
    Ok(())
}
