//! Checkpoints on their way to an object store: each one a task announces is uploaded, in order,
//! before its record goes to the server.

use super::report::{message, now_ms};
use crate::storage::Remote;
use drover_proto as pb;
use pb::executor_message::Body;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Where a task's checkpoint records go: to the server, or first to the object store.
pub(crate) enum Records {
    Direct,
    Upload(mpsc::Sender<pb::Checkpoint>),
}

/// Checkpoints announced but not yet uploaded; a task announcing faster than they upload waits.
pub(super) const UPLOAD_QUEUE: usize = 2;

/// Uploads each announced checkpoint, then records it; what the task's own retention deleted
/// locally is deleted from the store too. A checkpoint that cannot be uploaded is not recorded.
pub(super) async fn upload_checkpoints(
    remote: Arc<Remote>,
    mut records: mpsc::Receiver<pb::Checkpoint>,
    events: mpsc::Sender<pb::ExecutorMessage>,
) {
    let mut uploaded = crate::storage::Uploaded::default();
    while let Some(mut record) = records.recv().await {
        let local = PathBuf::from(&record.path);
        let started = std::time::Instant::now();
        let key = record.task.clone().unwrap_or_default();
        match remote.upload(&local).await {
            Ok(location) => {
                tracing::info!(
                    job.id = key.job_id,
                    step = record.step,
                    location,
                    bytes = record.size_bytes,
                    seconds = started.elapsed().as_secs_f64(),
                    "checkpoint uploaded"
                );
                record.path = location;
                let _ = events.send(message(Body::Checkpoint(record))).await;
                uploaded.note(local);
                uploaded.prune(&remote).await;
            }
            Err(err) => {
                tracing::warn!(job.id = key.job_id, step = record.step, error = %err, "cannot upload a checkpoint");
                let line = format!(
                    "drover: the checkpoint of step {} could not be uploaded to {} and is not recorded: {err:#}",
                    record.step,
                    remote.root()
                );
                let _ = events
                    .send(message(Body::Logs(pb::Logs {
                        task: Some(key),
                        lines: vec![pb::LogLine {
                            stream: "stderr".to_owned(),
                            line,
                            time_ms: now_ms(),
                        }],
                    })))
                    .await;
            }
        }
    }
}
