//! The tasks this executor holds (`LocalTask`): their keys, their phases, their status as registrations
//! and heartbeats report it, and the task updates the agent sends about them.

use crate::storage::Remote;
use crate::task::StopHandle;
use drover_proto as pb;
use pb::executor_message::Body;
use std::sync::Arc;

/// A task's key as a map key: job id, generation, role, index.
pub(super) type Key = (String, u64, String, u32);

pub(super) fn key_of(key: &pb::TaskKey) -> Key {
    (
        key.job_id.clone(),
        key.generation,
        key.role.clone(),
        key.index,
    )
}

#[derive(Debug)]
pub(super) enum Phase {
    /// Address reserved; its image is being pulled, or the checkpoint it resumes from downloaded.
    Fetching,
    Prepared,
    Running(StopHandle),
    Stopping,
    /// Exited; the report is on its way.
    Exited,
}

pub(super) fn exit_key(event: &pb::ExecutorMessage) -> Option<&pb::TaskKey> {
    match &event.body {
        Some(Body::TaskUpdate(pb::TaskUpdate {
            task: Some(key),
            event: Some(pb::task_update::Event::Exited(_)),
        })) => Some(key),
        _ => None,
    }
}

#[derive(Debug)]
pub(super) struct LocalTask {
    pub(super) key: pb::TaskKey,
    pub(super) spec: pb::TaskSpec,
    pub(super) address: String,
    pub(super) phase: Phase,
    pub(super) pid: u32,
    /// The object store its checkpoints go to (its spec names local copies).
    pub(super) remote: Option<Arc<Remote>>,
    /// The image it runs in, once pulled.
    pub(super) image: Option<crate::images::Image>,
}

impl LocalTask {
    /// Its status, with what its processes use when measured (`usage`).
    pub(super) fn status(&self, usage: Option<pb::TaskUsage>) -> pb::TaskStatus {
        let phase = match self.phase {
            Phase::Fetching | Phase::Prepared => pb::TaskPhase::Prepared,
            Phase::Running(_) => pb::TaskPhase::Running,
            Phase::Stopping => pb::TaskPhase::Stopping,
            Phase::Exited => pb::TaskPhase::Exited,
        };
        pb::TaskStatus {
            task: Some(self.key.clone()),
            phase: phase as i32,
            address: self.address.clone(),
            usage: usage.filter(|_| matches!(self.phase, Phase::Running(_))),
        }
    }
}

pub(super) fn msg(body: Body) -> pb::ExecutorMessage {
    pb::ExecutorMessage {
        body: Some(body),
        seq: 0,
    }
}

/// A task's exit, as reported when the executor ends it itself (or finds it gone).
pub(super) fn exit_report(
    key: &pb::TaskKey,
    message: String,
    spawn_failed: bool,
    stop_requested: bool,
) -> pb::ExecutorMessage {
    update(
        key,
        pb::task_update::Event::Exited(pb::Exited {
            message,
            spawn_failed,
            stop_requested,
            ..pb::Exited::default()
        }),
    )
}

/// One line of the executor's own about a task (its image's pull), in the task's log (stderr).
pub(super) fn log_line(key: &pb::TaskKey, line: String) -> pb::ExecutorMessage {
    msg(Body::Logs(pb::Logs {
        task: Some(key.clone()),
        lines: vec![pb::LogLine {
            stream: "stderr".to_owned(),
            line: format!("drover: {line}"),
            time_ms: now_ms(),
        }],
    }))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(super) fn update(key: &pb::TaskKey, event: pb::task_update::Event) -> pb::ExecutorMessage {
    msg(Body::TaskUpdate(pb::TaskUpdate {
        task: Some(key.clone()),
        event: Some(event),
    }))
}
