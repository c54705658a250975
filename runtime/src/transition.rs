//! A job's state change made by the runtime, fenced by its generation: it happens only while the job
//! is still in the generation the caller acted on, so a decision taken on an older view of the job
//! (a slow report, a round that raced a resize) changes nothing.

use crate::Runtime;
use drover_core::{JobState, ReasonCode};
use drover_store::{StateChange, StoreResult};

/// Moves `job` to `to` if it is still in `job.generation`; `None` when it was not (nothing changed).
/// `count_restart` counts the change against the job's restarts.
pub(crate) async fn transition(
    runtime: &Runtime,
    job: &drover_store::Job,
    to: JobState,
    reason: ReasonCode,
    message: String,
    count_restart: bool,
) -> StoreResult<Option<drover_store::Job>> {
    let change = StateChange {
        to,
        reason,
        message,
        actor: None,
    };
    runtime
        .store
        .transition_job_in_generation(job.id, job.generation, &change, count_restart)
        .await
}
