//! What executors report, applied to the store: task state changes, metrics, checkpoints and logs.
//! Reports from a generation that is not the job's current one are refused (the store checks it in the
//! same transaction as the write), and the task that sent them is told to stop.

use super::Runtime;
use super::dispatch::{is_active, to_pb_key};
use super::ingest::{CheckpointAdmission, Deferred, Kind};
pub(super) use super::report_text::clean;
use super::report_text::{MAX_LINES_PER_REPORT, MAX_VALUES_PER_SAMPLE, time_of};
use super::settle::Exit;
use drover_core::{JobId, JobState};
use drover_proto as pb;
use drover_store::{
    NewLogLine, NewMetrics, Scope, StoreError, StoreResult, Task, TaskChange, TaskKey, TaskRole,
    TaskState,
};
use pb::executor_message::Body;
use pb::task_update::Event;

/// Wakes the scheduling loop when dropped.
struct WakeOnDrop<'a>(&'a tokio::sync::Notify);

impl Drop for WakeOnDrop<'_> {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// What a task that must not report or run is told: its report is refused, and it stops at once.
pub(super) fn refusal(key: TaskKey, reason: &str) -> [pb::ServerMessage; 2] {
    [
        pb::ServerMessage {
            body: Some(pb::server_message::Body::Refused(pb::Refused {
                task: Some(to_pb_key(&key)),
                reason: reason.to_owned(),
            })),
        },
        pb::ServerMessage {
            body: Some(pb::server_message::Body::Stop(pb::StopTask {
                task: Some(to_pb_key(&key)),
                grace_ms: 0,
                reason: reason.to_owned(),
            })),
        },
    ]
}

/// Parses a task key off the wire; `None` (logged) when malformed.
pub(super) fn from_pb_key(key: Option<&pb::TaskKey>) -> Option<TaskKey> {
    let key = key?;
    let job_id = key.job_id.parse::<JobId>().ok()?;
    let role = key.role.parse::<TaskRole>().ok()?;
    Some(TaskKey {
        job_id,
        generation: key.generation,
        role,
        index: key.index,
    })
}

/// Seconds from a task's start to the end of its first step; reported once per run.
pub const STARTUP_METRIC: &str = "startup_s";

/// Applies one message of `node`'s session.
pub(super) async fn handle_report(runtime: &Runtime, node: &str, body: Body) -> StoreResult<()> {
    match body {
        Body::Register(_) => {
            tracing::warn!(
                node.name = node,
                "ignoring a second Register in one session"
            );
            Ok(())
        }
        Body::Heartbeat(heartbeat) => on_heartbeat(runtime, node, &heartbeat.tasks).await,
        Body::TaskUpdate(update) => {
            let Some(key) = from_pb_key(update.task.as_ref()) else {
                return Ok(());
            };
            match update.event {
                Some(Event::Prepared(prepared)) => on_prepared(runtime, node, key, prepared).await,
                Some(Event::Started(_)) => on_started(runtime, node, key).await,
                Some(Event::Exited(exited)) => on_exited(runtime, node, key, exited).await,
                None => Ok(()),
            }
        }
        Body::Metrics(metrics) => {
            let Some(key) = from_pb_key(metrics.task.as_ref()) else {
                return Ok(());
            };
            on_metrics(runtime, node, key, metrics).await
        }
        Body::Checkpoint(checkpoint) => {
            let Some(key) = from_pb_key(checkpoint.task.as_ref()) else {
                return Ok(());
            };
            on_checkpoint(runtime, node, key, checkpoint).await
        }
        Body::Logs(logs) => {
            let Some(key) = from_pb_key(logs.task.as_ref()) else {
                return Ok(());
            };
            if owned(runtime, node, key).await?.is_none() {
                return Ok(());
            }
            let wanted = logs.lines.len().min(MAX_LINES_PER_REPORT);
            let granted = runtime
                .ingest
                .admit(runtime.store.as_ref(), key.job_id, Kind::LogLines, wanted)
                .await?;
            let mut lines: Vec<NewLogLine> = logs
                .lines
                .into_iter()
                .take(granted)
                .map(|l| NewLogLine {
                    stream: if l.stream == "stderr" {
                        "stderr"
                    } else {
                        "stdout"
                    }
                    .to_owned(),
                    line: clean(&l.line),
                    logged_at: time_of(l.time_ms),
                })
                .collect();
            if granted < wanted
                && let Some(last) = lines.last_mut()
            {
                last.stream = "stderr".to_owned();
                last.line = super::ingest::dropped_notice(
                    wanted - granted + 1,
                    runtime.ingest.rate(Kind::LogLines),
                );
            }
            if lines.is_empty() {
                return Ok(());
            }
            runtime
                .store
                .append_logs(&key, &lines)
                .await
                .map_err(|e| (key, e))
                .or_else(|(key, err)| refuse(runtime, node, key, err))
        }
    }
}

/// A fenced report: refuse it and stop the task that sent it. Other errors pass through.
fn refuse(runtime: &Runtime, node: &str, key: TaskKey, err: StoreError) -> StoreResult<()> {
    match err {
        StoreError::Fenced { current, reported } => {
            tracing::warn!(task = %key, node.name = node, current, reported, "refused a report from a stale generation");
            refuse_task(
                runtime,
                node,
                key,
                &format!("generation {reported} is not current ({current})"),
            );
            Ok(())
        }
        StoreError::NotFound => {
            refuse_task(runtime, node, key, "no such job");
            Ok(())
        }
        other => Err(other),
    }
}

pub(super) fn refuse_task(runtime: &Runtime, node: &str, key: TaskKey, reason: &str) {
    for message in refusal(key, reason) {
        runtime.hub.send(node, message);
    }
}

/// The task row, if the task runs on this node (any generation); refuses the report otherwise, so
/// no executor can report for another node's tasks.
async fn owned(runtime: &Runtime, node: &str, key: TaskKey) -> StoreResult<Option<Task>> {
    let tasks = runtime
        .store
        .generation_tasks(key.job_id, key.generation)
        .await?;
    match tasks.into_iter().find(|t| t.key == key) {
        Some(task) if task.node_name == node => Ok(Some(task)),
        _ => {
            tracing::warn!(task = %key, node.name = node, "refused a report for a task this node does not run");
            refuse_task(runtime, node, key, "this node does not run this task");
            Ok(None)
        }
    }
}

/// Stops tasks an executor runs that the store does not expect there (a lost stop command, a
/// task from before a server restart). The store is read when the heartbeat names other tasks
/// than the last one checked, and every [`crate::hub::TASKS_RECHECKED_EVERY`] besides: a
/// thousand nodes' heartbeats each reading their node's tasks were a tenth of the server's work.
async fn on_heartbeat(
    runtime: &Runtime,
    node: &str,
    reported: &[pb::TaskStatus],
) -> StoreResult<()> {
    let mut running: Vec<(&str, u64, &str, u32)> = reported
        .iter()
        .filter(|status| status.phase != pb::TaskPhase::Exited as i32)
        .filter_map(|status| {
            let key = status.task.as_ref()?;
            Some((
                key.job_id.as_str(),
                key.generation,
                key.role.as_str(),
                key.index,
            ))
        })
        .collect();
    if running.is_empty() {
        return Ok(());
    }
    running.sort_unstable();
    let digest = {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        running.hash(&mut hasher);
        hasher.finish()
    };
    if runtime.hub.tasks_checked(node, digest) {
        return Ok(());
    }
    let live: std::collections::HashSet<TaskKey> = runtime
        .store
        .live_tasks_on(node)
        .await?
        .into_iter()
        .map(|t| t.key)
        .collect();
    let mut all_expected = true;
    for status in reported {
        if status.phase == pb::TaskPhase::Exited as i32 {
            continue;
        }
        if let Some(key) = from_pb_key(status.task.as_ref())
            && !live.contains(&key)
        {
            tracing::warn!(task = %key, node.name = node, "executor runs a task that is not expected there; stopping it");
            refuse_task(runtime, node, key, "this task is not expected on this node");
            all_expected = false;
        }
    }
    if all_expected {
        runtime.hub.set_tasks_checked(node, digest);
    }
    Ok(())
}

/// The task row, if it belongs to the job's current generation on this node; refuses it otherwise.
async fn current_task(runtime: &Runtime, node: &str, key: TaskKey) -> StoreResult<Option<Task>> {
    Ok(current_generation(runtime, node, key)
        .await?
        .and_then(|(_, tasks)| tasks.into_iter().find(|t| t.key == key)))
}

/// [`current_task`]'s job and every task of its generation, the reported task among them.
async fn current_generation(
    runtime: &Runtime,
    node: &str,
    key: TaskKey,
) -> StoreResult<Option<(drover_store::Job, Vec<Task>)>> {
    let job = match runtime.store.get_job(Scope::Cluster, key.job_id).await {
        Ok(job) => job,
        Err(err) => return refuse(runtime, node, key, err).map(|()| None),
    };
    if job.generation != key.generation || !is_active(job.state) {
        let reason = if job.generation != key.generation {
            format!(
                "generation {} is not current ({})",
                key.generation, job.generation
            )
        } else {
            format!("the job is {}", job.state.as_str())
        };
        refuse_task(runtime, node, key, &reason);
        return Ok(None);
    }
    let tasks = runtime
        .store
        .generation_tasks(key.job_id, key.generation)
        .await?;
    if tasks.iter().any(|t| t.key == key && t.node_name == node) {
        Ok(Some((job, tasks)))
    } else {
        refuse_task(runtime, node, key, "no such task on this node");
        Ok(None)
    }
}

async fn on_prepared(
    runtime: &Runtime,
    node: &str,
    key: TaskKey,
    prepared: pb::Prepared,
) -> StoreResult<()> {
    let Some((job, mut tasks)) = current_generation(runtime, node, key).await? else {
        return Ok(());
    };
    if let Some(task) = tasks
        .iter_mut()
        .find(|t| t.key == key && t.state == TaskState::Assigned)
    {
        let address = clean(&prepared.address);
        runtime
            .store
            .update_task(
                &key,
                &TaskChange {
                    state: Some(TaskState::Prepared),
                    address: Some(address.clone()),
                    ..TaskChange::default()
                },
            )
            .await?;
        task.state = TaskState::Prepared;
        task.address = Some(address);
    }
    // The last of a starting job's tasks to be prepared: they all start now rather than when the
    // next round reconciles the job (after a burst of starts, that round can be seconds away).
    // A rescaling job's new tasks wait for the old generation's exit, which is the round's to see;
    // a starting job has no older tasks alive (the snapshot holds a queued job whose tasks have not
    // all exited, so it is never started). A stop decided after the reads above (a cancel, a
    // preemption) reaches these tasks with the next round's reconciling, as it would have had
    // they started a moment earlier.
    if job.state == JobState::Starting && !tasks.iter().any(|t| t.stop_requested) {
        crate::dispatch::send_starts(runtime, &tasks);
    }
    runtime.hub.wake.notify_one();
    Ok(())
}

async fn on_started(runtime: &Runtime, node: &str, key: TaskKey) -> StoreResult<()> {
    let Some(task) = current_task(runtime, node, key).await? else {
        return Ok(());
    };
    if matches!(task.state, TaskState::Assigned | TaskState::Prepared) {
        runtime
            .store
            .update_task(
                &key,
                &TaskChange {
                    state: Some(TaskState::Running),
                    ..TaskChange::default()
                },
            )
            .await?;
    }
    runtime.hub.wake.notify_one();
    Ok(())
}

async fn on_exited(
    runtime: &Runtime,
    node: &str,
    key: TaskKey,
    exited: pb::Exited,
) -> StoreResult<()> {
    let Some(task) = owned(runtime, node, key).await? else {
        return Ok(());
    };
    if task.state.is_final() {
        // Recorded already (the report was sent again after a reconnect), or the task was lost.
        return Ok(());
    }
    // Its last checkpoint, if it waited behind the rate, is recorded before the exit is settled.
    if let Some(waiting) = runtime.ingest.take_deferred(&key) {
        let recorded = runtime
            .store
            .record_checkpoint_over_rate(&key, waiting.step, &waiting.path, waiting.size_bytes)
            .await;
        match recorded {
            Ok(record) => {
                runtime.observer.checkpointed(key.job_id, record.created_at);
                tracing::info!(task = %key, step = record.step, path = record.path, "checkpoint recorded");
            }
            Err(StoreError::Fenced { .. } | StoreError::NotFound) => {}
            Err(err) => {
                // Sent again with the exit, which is not applied either.
                runtime.ingest.defer_checkpoint(key, waiting);
                return Err(err);
            }
        }
    }
    // Exits are recorded for any generation: they release the task's resources.
    runtime
        .store
        .update_task(
            &key,
            &TaskChange {
                state: Some(TaskState::Exited),
                exit_code: exited.exit_code,
                exit_signal: exited.signal,
                message: Some(clean(&exited.message)),
                ..TaskChange::default()
            },
        )
        .await?;
    runtime.hub.forget(node, &key);
    // Wake the loop once the exit is settled (below), not before: it would settle it without the
    // exit's last lines.
    let _wake = WakeOnDrop(&runtime.hub.wake);
    let job = match runtime.store.get_job(Scope::Cluster, key.job_id).await {
        Ok(job) => job,
        Err(StoreError::NotFound) => return Ok(()),
        Err(err) => return Err(err),
    };
    if job.generation != key.generation || !is_active(job.state) || exited.stop_requested {
        tracing::info!(task = %key, node.name = node, message = exited.message, "task exited");
        return Ok(());
    }
    let tasks = runtime
        .store
        .generation_tasks(key.job_id, key.generation)
        .await?;
    let exit = Exit {
        key,
        spawn_failed: exited.spawn_failed,
        last_lines: &exited.last_lines,
        out_of_memory: exited.out_of_memory,
    };
    crate::settle::settle(runtime, &job, &tasks, Some(exit)).await
}

async fn on_metrics(
    runtime: &Runtime,
    node: &str,
    key: TaskKey,
    metrics: pb::Metrics,
) -> StoreResult<()> {
    let tasks = runtime
        .store
        .generation_tasks(key.job_id, key.generation)
        .await?;
    if !tasks.iter().any(|t| t.key == key && t.node_name == node) {
        refuse_task(runtime, node, key, "this node does not run this task");
        return Ok(());
    }
    let num_workers = tasks
        .iter()
        .filter(|t| t.key.role == TaskRole::Worker)
        .count() as u32;
    let mut values: Vec<(String, f64)> = metrics
        .values
        .into_iter()
        .filter(|(name, value)| {
            !name.is_empty() && name.len() <= 64 && !name.contains('\0') && value.is_finite()
        })
        .collect();
    values.sort_by(|a, b| a.0.cmp(&b.0));
    values.truncate(MAX_VALUES_PER_SAMPLE);
    if i64::try_from(metrics.step).is_err() {
        return Ok(());
    }
    let granted = runtime
        .ingest
        .admit(
            runtime.store.as_ref(),
            key.job_id,
            Kind::MetricSamples,
            values.len(),
        )
        .await?;
    // The first step's `startup_s` times a resize: it is never the one dropped.
    if granted < values.len() {
        values.sort_by_key(|(name, _)| name != STARTUP_METRIC);
        values.truncate(granted);
        values.sort_by(|a, b| a.0.cmp(&b.0));
    }
    if values.is_empty() {
        return Ok(());
    }
    let report = NewMetrics {
        key,
        num_ps: tasks.len() as u32 - num_workers,
        num_workers,
        worker_nodes: worker_nodes(&tasks),
        gpu_model: runtime.hub.gpu_model(node),
        step: metrics.step,
        values,
        recorded_at: time_of(metrics.time_ms),
    };
    if let Err(err) = runtime.store.record_metrics(&report).await {
        return refuse(runtime, node, key, err);
    }
    runtime.observer.touched(key.job_id);
    // The engine reports `startup_s` with the first step of every run.
    if report.values.iter().any(|(name, _)| name == STARTUP_METRIC) {
        crate::dispatch::first_step_rescaled(runtime, &key, report.step, report.recorded_at)
            .await?;
    }
    Ok(())
}

/// On how many nodes a generation's workers run (at least 1), without allocating: a gang is a
/// handful of tasks, and this runs for every metrics report.
fn worker_nodes(tasks: &[Task]) -> u32 {
    let is_worker = |t: &&Task| t.key.role == TaskRole::Worker;
    let distinct = tasks
        .iter()
        .enumerate()
        .filter(|(i, t)| {
            is_worker(t)
                && !tasks[..*i]
                    .iter()
                    .filter(is_worker)
                    .any(|u| u.node_name == t.node_name)
        })
        .count();
    distinct.max(1) as u32
}

async fn on_checkpoint(
    runtime: &Runtime,
    node: &str,
    key: TaskKey,
    checkpoint: pb::Checkpoint,
) -> StoreResult<()> {
    if owned(runtime, node, key).await?.is_none() {
        return Ok(());
    }
    let expected = runtime.checkpoint_dir(key.job_id, key.generation);
    let path = std::path::Path::new(&checkpoint.path);
    if checkpoint.path.contains('\0')
        || checkpoint.path.len() > 4096
        || i64::try_from(checkpoint.step).is_err()
        || i64::try_from(checkpoint.size_bytes).is_err()
        || !path.starts_with(&expected)
        || path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
    {
        tracing::warn!(task = %key, path = clean(&checkpoint.path), "ignoring a checkpoint outside the generation's directory, or malformed");
        return Ok(());
    }
    let recorded = match runtime.ingest.admit_checkpoint(key.job_id) {
        CheckpointAdmission::New => {
            runtime
                .store
                .record_checkpoint(
                    &key,
                    checkpoint.step,
                    &checkpoint.path,
                    checkpoint.size_bytes,
                )
                .await
        }
        CheckpointAdmission::Replacing => {
            runtime
                .store
                .record_checkpoint_over_rate(
                    &key,
                    checkpoint.step,
                    &checkpoint.path,
                    checkpoint.size_bytes,
                )
                .await
        }
        CheckpointAdmission::Deferred => {
            tracing::debug!(task = %key, step = checkpoint.step, "a checkpoint waits to be recorded: the job announces them faster than they are recorded");
            runtime.ingest.defer_checkpoint(
                key,
                Deferred {
                    step: checkpoint.step,
                    path: checkpoint.path,
                    size_bytes: checkpoint.size_bytes,
                },
            );
            return Ok(());
        }
    };
    // Newer than any announcement that waits.
    runtime.ingest.take_deferred(&key);
    match recorded {
        Ok(record) => {
            runtime.observer.checkpointed(key.job_id, record.created_at);
            tracing::info!(task = %key, step = record.step, path = record.path, "checkpoint recorded");
            Ok(())
        }
        Err(err) => refuse(runtime, node, key, err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gangs_workers_are_counted_by_node() {
        let task = |role, index, node: &str| Task {
            key: TaskKey {
                job_id: JobId(uuid::Uuid::nil()),
                generation: 1,
                role,
                index,
            },
            node_name: node.to_owned(),
            gpus: Vec::new(),
            cpus: 1,
            state: TaskState::Running,
            address: None,
            exit_code: None,
            exit_signal: None,
            message: String::new(),
            stop_requested: false,
            updated_at: chrono::Utc::now(),
        };
        let (w, ps) = (TaskRole::Worker, TaskRole::Ps);
        assert_eq!(worker_nodes(&[task(w, 0, "a"), task(w, 1, "a")]), 1);
        // A PS shard on another node does not spread the workers.
        assert_eq!(worker_nodes(&[task(w, 0, "a"), task(ps, 0, "b")]), 1);
        let spread = [
            task(w, 0, "a"),
            task(ps, 0, "a"),
            task(w, 1, "b"),
            task(w, 2, "a"),
        ];
        assert_eq!(worker_nodes(&spread), 2);
        assert_eq!(worker_nodes(&[]), 1);
    }
}
