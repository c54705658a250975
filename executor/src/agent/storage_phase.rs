//! The agent's side of an object store (`crate::storage`): connecting to the one the server names,
//! pointing a task at local copies; and what a task waits for in the background before it is
//! prepared: its image pulled (`crate::images`) and the checkpoint it resumes from downloaded.

use super::local::{LocalTask, Phase, exit_report, update};
use crate::images::Image;
use crate::storage::{self, Remote};
use crate::task::StartError;
use drover_proto as pb;
use std::path::Path;
use std::sync::Arc;

/// A task's object store, if it has one, and the checkpoint to download before it can start.
pub(super) type Localised = (Option<Arc<Remote>>, Option<String>);

/// A task's background preparation (its image, the checkpoint it resumes from), finished: the
/// image it runs in, when it has one.
pub(super) type Fetched = (pb::TaskKey, Result<Option<Image>, StartError>);

/// The checkpoint storage the server named, when it is an object store; or why it cannot be used.
#[derive(Debug, Default)]
pub(super) struct Storage(Option<Result<Arc<Remote>, String>>);

impl Storage {
    /// Connects to the object store the server keeps checkpoints in (once; again when it changes).
    /// Local copies go under `data_dir`.
    pub(super) fn use_root(&mut self, root: &str, data_dir: &Path) {
        if !storage::is_url(root) {
            self.0 = None;
            return;
        }
        if let Some(Ok(remote)) = &self.0
            && remote.root() == root.trim_end_matches('/')
        {
            return;
        }
        let connected = Remote::connect(root, data_dir.join("checkpoints"));
        if let Err(err) = &connected {
            tracing::error!(error = %err, "cannot use the checkpoint storage; tasks here cannot start");
        }
        self.0 = Some(connected.map(Arc::new).map_err(|err| format!("{err:#}")));
    }

    /// Points a task with an object store at local copies: where it writes checkpoints, and the one it
    /// resumes from. Returns the store, and the location to download first when there is no copy here.
    pub(super) fn localise(&self, spec: &mut pb::TaskSpec) -> Result<Localised, String> {
        if !storage::is_url(&spec.checkpoint_dir) {
            return Ok((None, None));
        }
        let remote = match &self.0 {
            Some(Ok(remote)) => remote.clone(),
            Some(Err(reason)) => {
                return Err(format!(
                    "this node cannot use the checkpoint storage: {reason}"
                ));
            }
            None => {
                return Err(format!(
                    "the checkpoint storage {} is not the one this node registered with",
                    spec.checkpoint_dir
                ));
            }
        };
        spec.checkpoint_dir = remote.local(&spec.checkpoint_dir)?.display().to_string();
        let mut fetch = None;
        if !spec.resume_from.is_empty() {
            let local = remote.local(&spec.resume_from)?;
            if !local.exists() {
                fetch = Some(std::mem::take(&mut spec.resume_from));
            }
            spec.resume_from = local.display().to_string();
        }
        Ok((Some(remote), fetch))
    }
}

/// A background preparation for `task` finished: it is prepared, or it fails (a pull's failure is
/// the job's; a download's, this node's); returns the report to send. Nothing when it was stopped
/// meanwhile.
pub(super) fn fetched(
    task: &mut LocalTask,
    key: &pb::TaskKey,
    result: Result<Option<Image>, StartError>,
) -> Option<pb::ExecutorMessage> {
    if !matches!(task.phase, Phase::Fetching) {
        return None;
    }
    Some(match result {
        Ok(image) => {
            task.image = image;
            task.phase = Phase::Prepared;
            update(
                key,
                pb::task_update::Event::Prepared(pb::Prepared {
                    address: task.address.clone(),
                }),
            )
        }
        Err(StartError::User(message)) => {
            tracing::warn!(job.id = key.job_id, message, "task cannot start");
            exit_report(key, message, true, false)
        }
        Err(StartError::Node(message)) => {
            tracing::warn!(job.id = key.job_id, message, "task cannot start here");
            exit_report(key, message, false, false)
        }
    })
}
