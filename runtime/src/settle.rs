//! Deciding a job's outcome from its tasks' exits: success, a restart from the last checkpoint, a
//! failure (restarts exhausted, or a user error before the first step), or back to the queue when a
//! task was lost with its executor.

use super::Runtime;
use super::reports::clean;
use chrono::Utc;
use drover_core::{JobId, JobState, ReasonCode};
use drover_store::{
    Job, MetricFilter, Scope, StateChange, StoreResult, Task, TaskKey, TaskRole, TaskState,
};

/// A first run that fails within this many seconds without reporting a step fails the job as a user
/// error instead of restarting it.
const EARLY_CRASH_S: i64 = 30;

/// A task exit as the executor reported it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Exit<'a> {
    pub key: TaskKey,
    pub spawn_failed: bool,
    pub last_lines: &'a [String],
    /// Its sandbox's memory limit killed it.
    pub out_of_memory: bool,
}

fn task_name(key: &TaskKey) -> String {
    format!("{}-{}", key.role.as_str(), key.index)
}

/// Decides what a job's task exits mean for the job: success once every worker exited 0, a
/// restart from the last checkpoint (or failure when restarts are exhausted) when one failed, back
/// to the queue when one was lost. `exit` is the exit just reported, if any; the scheduling loop
/// also calls this for running jobs whose tasks have all ended, so an outcome whose recording
/// failed once is decided again.
pub(super) async fn settle(
    runtime: &Runtime,
    job: &Job,
    tasks: &[Task],
    exit: Option<Exit<'_>>,
) -> StoreResult<()> {
    if tasks.is_empty() || tasks.iter().any(|t| t.stop_requested) {
        return Ok(());
    }
    let failed = |t: &&Task| {
        t.state == TaskState::Lost || (t.state == TaskState::Exited && t.exit_code != Some(0))
    };
    // The task whose exit decides: the one just reported if it failed, else any failed one.
    let culprit = match &exit {
        Some(exit) => tasks
            .iter()
            .find(|t| t.key == exit.key)
            .filter(|t| failed(t)),
        None => None,
    }
    .or_else(|| tasks.iter().find(failed));
    let workers = tasks
        .iter()
        .filter(|t| t.key.role == TaskRole::Worker)
        .count();
    let (change, count_restart) = match culprit {
        None => {
            let workers_done = tasks
                .iter()
                .filter(|t| t.key.role == TaskRole::Worker)
                .all(|t| t.state == TaskState::Exited && t.exit_code == Some(0));
            if !workers_done {
                return Ok(());
            }
            if matches!(job.state, JobState::Starting | JobState::Rescaling) {
                crate::transition::transition(
                    runtime,
                    job,
                    JobState::Running,
                    ReasonCode::RendezvousComplete,
                    "all tasks ran".to_owned(),
                    false,
                )
                .await?;
            }
            let change = StateChange {
                to: JobState::Succeeded,
                reason: ReasonCode::Completed,
                message: format!("all {workers} workers exited with status 0"),
                actor: None,
            };
            (change, false)
        }
        Some(task) if task.state == TaskState::Lost => {
            let change = StateChange {
                to: JobState::Queued,
                reason: ReasonCode::ExecutorLost,
                message: format!(
                    "{} lost with its executor on {}",
                    task_name(&task.key),
                    task.node_name
                ),
                actor: None,
            };
            (change, false)
        }
        Some(task) => {
            let name = task_name(&task.key);
            let this_exit = exit.as_ref().filter(|e| e.key == task.key);
            let tail = match this_exit {
                Some(e) if !e.last_lines.is_empty() => {
                    format!("; last lines:\n{}", clean(&e.last_lines.join("\n")))
                }
                _ => String::new(),
            };
            if this_exit.is_some_and(|e| e.out_of_memory) {
                // Its own doing, and a restart would meet the same limit: the job fails, and only
                // it (the sandbox's limit kept the node and the other tasks there whole).
                let memory = job
                    .spec()
                    .map_or(0, |s| s.spec.resources.memory_gb_per_task);
                let change = StateChange {
                    to: JobState::Failed,
                    reason: ReasonCode::OutOfMemory,
                    message: format!(
                        "task {name} used more than its {memory} GiB of memory (spec.resources.memory_gb_per_task) and was killed on {}{tail}",
                        task.node_name
                    ),
                    actor: None,
                };
                (change, false)
            } else if this_exit.is_some_and(|e| e.spawn_failed) {
                let change = StateChange {
                    to: JobState::Failed,
                    reason: ReasonCode::UserError,
                    message: format!("{name} could not start: {}", task.message),
                    actor: None,
                };
                (change, false)
            } else if job.restarts == 0
                && task.exit_code.is_some()
                && Utc::now() - job.updated_at < chrono::Duration::seconds(EARLY_CRASH_S)
                && !made_progress(runtime, job.id).await?
            {
                // A crash right at the start of a job that never reported a step or a
                // checkpoint is the job's own mistake (a bad dataset path, a model that does not
                // fit its data): restarting it would only fail again.
                let change = StateChange {
                    to: JobState::Failed,
                    reason: ReasonCode::UserError,
                    message: format!(
                        "{name} on {} {} before its first step{tail}",
                        task.node_name, task.message
                    ),
                    actor: None,
                };
                (change, false)
            } else {
                let max_restarts = job.spec().map_or(0, |s| s.spec.max_restarts);
                let node = &task.node_name;
                if let Some(since) = failing_again(runtime, job).await? {
                    let change = StateChange {
                        to: JobState::Failed,
                        reason: ReasonCode::RepeatedFailure,
                        message: format!(
                            "{name} on {node} {} again before a new checkpoint (restarting from {since} would repeat the same steps){tail}",
                            task.message
                        ),
                        actor: None,
                    };
                    (change, false)
                } else if job.restarts < max_restarts {
                    let change = StateChange {
                        to: JobState::Queued,
                        reason: ReasonCode::TaskFailed,
                        message: format!(
                            "{name} on {node} {}; restart {} of {max_restarts} from the last checkpoint{tail}",
                            task.message,
                            job.restarts + 1
                        ),
                        actor: None,
                    };
                    (change, true)
                } else {
                    let change = StateChange {
                        to: JobState::Failed,
                        reason: ReasonCode::RestartsExhausted,
                        message: format!(
                            "{name} on {node} {} after {max_restarts} restarts{tail}",
                            task.message
                        ),
                        actor: None,
                    };
                    (change, false)
                }
            }
        }
    };
    let to = change.to;
    if let Some(job) = runtime
        .store
        .transition_job_in_generation(job.id, job.generation, &change, count_restart)
        .await?
    {
        tracing::info!(job.id = %job.id, state = to.as_str(), reason = change.reason.as_str(), "job changed after its tasks exited");
        let live: Vec<Task> = tasks
            .iter()
            .filter(|t| !t.state.is_final())
            .cloned()
            .collect();
        crate::dispatch::reconcile_job(runtime, &job, &live).await?;
    }
    Ok(())
}

/// Whether the job's previous generation also ended in a task failure and neither it nor the
/// current one recorded a checkpoint: then both started from the same point and failed, and a
/// restart would replay the same steps. Returns what they started from.
async fn failing_again(runtime: &Runtime, job: &Job) -> StoreResult<Option<String>> {
    if job.restarts == 0 || job.generation < 2 {
        return Ok(None);
    }
    let latest = runtime.store.latest_checkpoint(job.id).await?;
    if latest
        .as_ref()
        .is_some_and(|c| c.generation + 1 >= job.generation)
    {
        return Ok(None);
    }
    // The event that ended the previous generation: the last move back to the queue.
    let mut last_requeue = None;
    let mut after = None;
    loop {
        let page = runtime
            .store
            .list_job_events(Scope::Cluster, job.id, after, 500)
            .await?;
        if let Some(e) = page.iter().rev().find(|e| {
            e.to_state == JobState::Queued && e.from_state.is_some_and(|f| f != JobState::Queued)
        }) {
            last_requeue = Some(e.reason);
        }
        match page.last() {
            Some(last) if page.len() == 500 => after = Some(last.id),
            _ => break,
        }
    }
    if last_requeue != Some(ReasonCode::TaskFailed) {
        return Ok(None);
    }
    Ok(Some(latest.map_or_else(
        || "the start".to_owned(),
        |c| format!("the checkpoint at step {}", c.step),
    )))
}

/// Whether the job ever reported a metric or recorded a checkpoint.
async fn made_progress(runtime: &Runtime, job: JobId) -> StoreResult<bool> {
    if runtime.store.latest_checkpoint(job).await?.is_some() {
        return Ok(true);
    }
    let filter = MetricFilter {
        limit: 1,
        ..Default::default()
    };
    Ok(!runtime
        .store
        .list_metrics(Scope::Cluster, job, &filter)
        .await?
        .is_empty())
}
