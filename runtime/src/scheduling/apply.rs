//! A round's plan made real, persisted before anything is dispatched: a queued job the plan runs
//! gets its first generation of tasks; a running job it preempts or suspends queues again, its
//! message naming the jobs that took its GPUs or wait ahead; a running job it moves or resizes goes
//! to `rescaling` with a new generation.

use crate::Runtime;
use crate::snapshot::Built;
use crate::wording::in_words;
use drover_core::{JobId, JobState, ReasonCode};
use drover_scheduler::{JobPlan, Plan, Role, WaitReason};
use drover_store::{CheckpointRecord, NewTask, Scope, StateChange, StoreResult, Task, TaskRole};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;

/// Queued jobs started in one transaction: a round that starts thousands of jobs (a burst of
/// submissions on an idle cluster) commits once every few hundred, in a few statements each
/// (`Store::start_generations`), instead of a transaction of its own for every job.
const STARTS_A_BATCH: usize = 500;

/// Started jobs prepared at once (each reads its checkpoints and sends its tasks): a few at a time
/// leave the rest of the database pool to the API.
const STARTS_AT_ONCE: usize = 8;

pub(super) async fn apply(
    runtime: &Runtime,
    policy: &str,
    built: &Built<'_>,
    plan: &Plan,
    live: &[Task],
) -> StoreResult<()> {
    // Stops, moves and resizes first, in the policy's order, then the starts: a start never waits
    // on another, and the GPUs a stop frees are released before the jobs that take them start.
    let mut starts = Vec::new();
    for view in &built.snapshot.jobs {
        if built.held.contains(&view.id) {
            continue;
        }
        let (Some(job), Some(decision)) = (built.jobs.get(&view.id), plan.jobs.get(&view.id))
        else {
            continue;
        };
        match (job.state, decision, &view.placement) {
            (JobState::Queued, JobPlan::Run { placement, reason }, None) => {
                let shape = placement.shape();
                let change = StateChange {
                    to: JobState::Starting,
                    reason: ReasonCode::Allocated,
                    message: format!(
                        "{policy}: {} ({} workers, {} PS on {})",
                        in_words(reason),
                        shape.workers,
                        shape.ps,
                        node_list(built, placement)
                    ),
                    actor: None,
                };
                starts.push((job.id, new_tasks(built, placement), change));
            }
            (
                JobState::Starting | JobState::Running | JobState::Rescaling,
                JobPlan::Wait { reason },
                Some(_),
            ) => {
                let code = match reason {
                    WaitReason::Suspended => ReasonCode::Suspended,
                    _ => ReasonCode::Preempted,
                };
                let message = match (
                    crate::explain::takers(built, plan, view),
                    crate::explain::ahead(built, plan, view),
                ) {
                    (takers, _) if !takers.is_empty() => format!(
                        "{policy}: {}; its GPUs went to {}",
                        in_words(reason),
                        takers.join(", ")
                    ),
                    (_, ahead) if !ahead.is_empty() => format!(
                        "{policy}: {}, for {} ahead of it in the policy's order",
                        in_words(reason),
                        ahead.join(", ")
                    ),
                    _ => format!("{policy}: {}", in_words(reason)),
                };
                if crate::transition::transition(
                    runtime,
                    job,
                    JobState::Queued,
                    code,
                    message,
                    false,
                )
                .await?
                .is_some()
                {
                    tracing::info!(job.id = %job.id, reason = code.as_str(), "job stopped by the policy");
                }
            }
            (JobState::Running, JobPlan::Run { placement, reason }, Some(current))
                if !current.same_resources(placement) =>
            {
                // Growing, shrinking or moving a running job: the new generation's tasks are
                // persisted now, holding their resources (`rescaling`); the old ones checkpoint and
                // exit, and the new ones start from that checkpoint once they have.
                let code = if current.shape() == placement.shape() {
                    ReasonCode::Migrated
                } else {
                    ReasonCode::Resized
                };
                let (from, to) = (current.shape(), placement.shape());
                let change = StateChange {
                    to: JobState::Rescaling,
                    reason: code,
                    message: format!(
                        "{policy}: {} ({} workers, {} PS -> {} workers, {} PS on {}; from a checkpoint at the next step)",
                        in_words(reason),
                        from.workers,
                        from.ps,
                        to.workers,
                        to.ps,
                        node_list(built, placement)
                    ),
                    actor: None,
                };
                let tasks = new_tasks(built, placement);
                if let Some(generation) = runtime
                    .store
                    .rescale_generation(job.id, job.generation, &tasks, &change)
                    .await?
                {
                    tracing::info!(job.id = %job.id, generation, reason = code.as_str(), "job rescaling");
                    let job = runtime.store.get_job(Scope::Cluster, job.id).await?;
                    let old: Vec<Task> = live
                        .iter()
                        .filter(|t| t.key.job_id == job.id)
                        .cloned()
                        .collect();
                    crate::dispatch::reconcile_job(runtime, &job, &old).await?;
                }
            }
            _ => {}
        }
    }
    for batch in starts.chunks(STARTS_A_BATCH) {
        let stored_since = std::time::Instant::now();
        let started = runtime.store.start_generations(batch).await?;
        // Where each resumes from, read for the whole batch at once (one query per job took most
        // of a burst's round).
        let ids: Vec<JobId> = started.iter().map(|(id, _, _)| *id).collect();
        let mut recent: HashMap<JobId, Vec<CheckpointRecord>> = HashMap::new();
        for record in runtime
            .store
            .recent_checkpoints_of(&ids, crate::dispatch::RESUME_CANDIDATES)
            .await?
        {
            recent.entry(record.job_id).or_default().push(record);
        }
        let stored = stored_since.elapsed();
        let changes: HashMap<JobId, &StateChange> =
            batch.iter().map(|(id, _, change)| (*id, change)).collect();
        futures::stream::iter(started)
            .map(Ok)
            .try_for_each_concurrent(STARTS_AT_ONCE, |(id, generation, tasks)| {
                let change = changes.get(&id).copied();
                let recent = recent.get(&id).map_or(&[][..], Vec::as_slice);
                async move {
                    tracing::info!(job.id = %id, generation, "job allocated");
                    // The job as the start left it, without reading it back.
                    let Some(mut job) = built.jobs.get(&id).map(|job| (*job).clone()) else {
                        return Ok(());
                    };
                    job.generation = generation;
                    if let Some(change) = change {
                        job.state = change.to;
                        job.reason = change.reason;
                        job.message.clone_from(&change.message);
                    }
                    crate::dispatch::reconcile_started(runtime, &job, &tasks, Some(recent)).await
                }
            })
            .await?;
        tracing::debug!(
            jobs = batch.len(),
            stored_ms = stored.as_millis() as u64,
            prepared_ms = (stored_since.elapsed() - stored).as_millis() as u64,
            "a batch of starts applied"
        );
    }
    Ok(())
}

/// The rows of a placement's tasks, with the executors' GPU indices.
fn new_tasks(built: &Built<'_>, placement: &drover_scheduler::Placement) -> Vec<NewTask> {
    placement
        .tasks
        .iter()
        .map(|t| NewTask {
            role: match t.role {
                Role::Worker => TaskRole::Worker,
                Role::Ps => TaskRole::Ps,
            },
            index: t.index,
            node_name: built.node_names[t.node.0 as usize].clone(),
            gpus: t
                .gpus
                .iter()
                .map(|&p| built.gpu_indices[t.node.0 as usize][usize::from(p)] as u16)
                .collect(),
            cpus: t.cpus,
        })
        .collect()
}

/// The nodes a placement uses, in task order without repeats next to each other.
fn node_list(built: &Built<'_>, placement: &drover_scheduler::Placement) -> String {
    let mut nodes: Vec<&str> = placement
        .tasks
        .iter()
        .map(|t| built.node_names[t.node.0 as usize].as_str())
        .collect();
    nodes.dedup();
    nodes.join(", ")
}
