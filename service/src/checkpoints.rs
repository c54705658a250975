//! A job's checkpoints as every entrance lists them (REST, the CLI through it, the dashboard, the
//! download): the recorded ones still in the checkpoint storage. A task's retention (`keep_last`,
//! `keep_best`, or a command job's own clean-up) deletes checkpoints by what is on disk, not by what
//! the server recorded; a record whose checkpoint is gone for certain is forgotten here, so no list
//! offers a download that cannot work.

use crate::Service;
use crate::auth::Principal;
use crate::error::{ServiceError, ServiceResult};
use drover_core::JobId;
use drover_store::CheckpointRecord;
use futures::StreamExt;

/// Existence checks in flight at once (files or object-store lookups).
const CHECKS_AT_ONCE: usize = 16;

/// The job's checkpoints still in storage, oldest first. Where this server cannot tell (it runs no
/// jobs; the object store does not answer; it does not see the folder a checkpoint was written
/// in) a record is kept.
pub async fn list(
    service: &Service,
    principal: &Principal,
    job: JobId,
) -> ServiceResult<Vec<CheckpointRecord>> {
    let records = service
        .store
        .list_checkpoints(principal.scope(), job)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no job `{job}`")))?;
    let Some(runtime) = service.runtime.as_ref() else {
        return Ok(records);
    };
    // Owned in each check (a path and an Arc): a stream of futures borrowing `records` would not
    // be `Send` for every lifetime, as a handler's future must be.
    let shared = runtime.clone();
    let checks = records.clone().into_iter().map(move |record| {
        let runtime = shared.clone();
        async move { gone_for_certain(&runtime, &record).await }
    });
    let gone: Vec<bool> = futures::stream::iter(checks)
        .buffered(CHECKS_AT_ONCE)
        .collect()
        .await;
    let forgotten: Vec<uuid::Uuid> = records
        .iter()
        .zip(&gone)
        .filter(|(_, gone)| **gone)
        .map(|(record, _)| record.id)
        .collect();
    if forgotten.is_empty() {
        return Ok(records);
    }
    match service.store.forget_checkpoints(job, &forgotten).await {
        Ok(count) => {
            tracing::info!(job.id = %job, count, "forgot the records of checkpoints no longer in storage");
        }
        // The list is still right; the records go at the next listing.
        Err(err) => {
            tracing::warn!(job.id = %job, error = %err, "cannot forget the records of deleted checkpoints");
        }
    }
    Ok(records
        .into_iter()
        .zip(gone)
        .filter(|(_, gone)| !gone)
        .map(|(record, _)| record)
        .collect())
}

/// Whether `record`'s checkpoint is certainly no longer in storage. On local storage a missing
/// checkpoint counts only where the folder it was written in is seen: a server that does not share
/// the executors' disk sees neither.
async fn gone_for_certain(runtime: &drover_runtime::Runtime, record: &CheckpointRecord) -> bool {
    if runtime.config.checkpoint_store.is_none() {
        let seen = match std::path::Path::new(&record.path).parent() {
            Some(folder) => tokio::fs::try_exists(folder).await.unwrap_or(false),
            None => false,
        };
        if !seen {
            return false;
        }
    }
    runtime.checkpoint_exists(record).await == Some(false)
}
