//! What a task tells the server: its reports wrapped as executor messages, their timestamps, the exit
//! report, and how many of its last output lines that report keeps.

use drover_proto as pb;
use pb::executor_message::Body;

/// Lines kept for the exit report.
pub(crate) const TAIL_LINES: usize = 20;

pub(super) fn message(body: Body) -> pb::ExecutorMessage {
    pb::ExecutorMessage {
        body: Some(body),
        seq: 0,
    }
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub(crate) fn exited(key: &pb::TaskKey, exited: pb::Exited) -> pb::ExecutorMessage {
    message(Body::TaskUpdate(pb::TaskUpdate {
        task: Some(key.clone()),
        event: Some(pb::task_update::Event::Exited(exited)),
    }))
}
