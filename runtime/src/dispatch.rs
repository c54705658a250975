//! Reconciling one job: stop the tasks that must not run, prepare the ones just assigned, hand out the
//! peer list once every task of the generation has an address, and mark the job `running` when all of
//! them run. Every step is idempotent: commands already sent in an executor's session are not resent.

use super::Runtime;
use super::hub::Command;
use drover_core::spec::{EnvValue, JobType};
use drover_core::{JobId, JobState, ReasonCode};
use drover_proto as pb;
use drover_store::{
    CheckpointRecord, Job, Scope, StateChange, StoreResult, Task, TaskChange, TaskKey, TaskRole,
    TaskState,
};

pub(super) fn is_active(state: JobState) -> bool {
    matches!(
        state,
        JobState::Starting | JobState::Running | JobState::Rescaling
    )
}

pub(super) fn to_pb_key(key: &TaskKey) -> pb::TaskKey {
    pb::TaskKey {
        job_id: key.job_id.0.to_string(),
        generation: key.generation,
        role: key.role.as_str().to_owned(),
        index: key.index,
    }
}

/// Workers take ranks `0..w`, PS shards follow.
pub(super) fn rank(task: &TaskKey, num_workers: u32) -> u32 {
    match task.role {
        TaskRole::Worker => task.index,
        TaskRole::Ps => num_workers + task.index,
    }
}

fn num_workers(tasks: &[Task]) -> u32 {
    tasks
        .iter()
        .filter(|t| t.key.role == TaskRole::Worker)
        .count() as u32
}

/// Sends each prepared task of a generation its start, with every peer's address in rank order,
/// once all the generation's `tasks` have an address (prepared, running or exited). A start already
/// sent in the executor's session is not sent again.
pub(super) fn send_starts(runtime: &Runtime, tasks: &[Task]) {
    let all_addressed = tasks.iter().all(|t| {
        t.address.is_some()
            && matches!(
                t.state,
                TaskState::Prepared | TaskState::Running | TaskState::Exited
            )
    });
    if tasks.is_empty() || !all_addressed {
        return;
    }
    let num_workers = num_workers(tasks);
    let mut ranked: Vec<&Task> = tasks.iter().collect();
    ranked.sort_by_key(|t| rank(&t.key, num_workers));
    let peers: Vec<String> = ranked
        .iter()
        .map(|t| t.address.clone().unwrap_or_default())
        .collect();
    for task in tasks.iter().filter(|t| t.state == TaskState::Prepared) {
        let message = pb::ServerMessage {
            body: Some(pb::server_message::Body::Start(pb::StartTask {
                task: Some(to_pb_key(&task.key)),
                peers: peers.clone(),
            })),
        };
        if runtime
            .hub
            .send_once(&task.node_name, task.key, Command::Start, message)
        {
            tracing::debug!(task = %task.key, node.name = task.node_name, "peer list sent");
        }
    }
}

/// Brings `job`'s tasks in line with the job. `live` are its tasks not yet exited or lost, of any
/// generation.
pub(super) async fn reconcile_job(runtime: &Runtime, job: &Job, live: &[Task]) -> StoreResult<()> {
    if let Some(change) = reconcile_tasks(runtime, job, live, None, None).await? {
        mark_running(runtime, job, change).await?;
    }
    Ok(())
}

/// [`reconcile_job`] for a job just started, with its new generation's tasks as stored (not read
/// again) and its recent checkpoint records, newest first, as read with other jobs'
/// ([`RESUME_CANDIDATES`] at most; `None` to read them here).
pub(super) async fn reconcile_started(
    runtime: &Runtime,
    job: &Job,
    tasks: &[Task],
    recent: Option<&[CheckpointRecord]>,
) -> StoreResult<()> {
    if let Some(change) = reconcile_tasks(runtime, job, &[], Some(tasks), recent).await? {
        mark_running(runtime, job, change).await?;
    }
    Ok(())
}

/// [`reconcile_job`] but for the job's move to `running` when every task runs, which it returns
/// for the caller to make with others' in one transaction. `generation`: the tasks of the job's
/// current generation when the caller read them already (with other jobs'); `recent`: its recent
/// checkpoint records, likewise.
pub(super) async fn reconcile_tasks(
    runtime: &Runtime,
    job: &Job,
    live: &[Task],
    generation: Option<&[Task]>,
    recent: Option<&[CheckpointRecord]>,
) -> StoreResult<Option<StateChange>> {
    let active = is_active(job.state);
    for task in live {
        if !active || task.key.generation != job.generation || task.stop_requested {
            let reason = if task.key.generation != job.generation {
                "its generation is no longer current".to_owned()
            } else {
                format!("the job is {}", job.state.as_str())
            };
            stop_task(runtime, task, &reason).await?;
        }
    }
    // A rescaling job's new tasks wait until the old generation has checkpointed and exited: they
    // start from that checkpoint, often on the same GPUs.
    if !active || live.iter().any(|t| t.key.generation < job.generation) {
        return Ok(None);
    }
    let read;
    let tasks = match generation {
        Some(tasks) => tasks,
        None => {
            read = runtime
                .store
                .generation_tasks(job.id, job.generation)
                .await?;
            &read[..]
        }
    };
    if tasks.is_empty() || tasks.iter().any(|t| t.stop_requested) {
        return Ok(None);
    }
    for task in tasks.iter().filter(|t| t.state == TaskState::Assigned) {
        prepare_task(runtime, job, task, tasks, recent).await?;
    }
    send_starts(runtime, tasks);
    let all_running = tasks
        .iter()
        .all(|t| matches!(t.state, TaskState::Running | TaskState::Exited));
    // A started job runs once every task does; a rescaled `train` job once its leader reports the
    // first step at the new shape (see [`Runtime::first_step_rescaled`]), a command job here.
    let rescaled_command = job.state == JobState::Rescaling && job.job_type != JobType::Train;
    if (job.state == JobState::Starting || rescaled_command) && all_running {
        let (what, since_when) = if rescaled_command {
            ("running at the new shape", "the decision")
        } else {
            ("reported ready", "the allocation")
        };
        let message = format!(
            "all {} tasks {what} {} after {since_when}",
            tasks.len(),
            since(job.updated_at)
        );
        return Ok(Some(running(message)));
    }
    Ok(None)
}

/// The move to `running` once every task runs (or, after a resize, runs at the new shape).
fn running(message: String) -> StateChange {
    StateChange {
        to: JobState::Running,
        reason: ReasonCode::RendezvousComplete,
        message,
        actor: None,
    }
}

/// Moves many jobs to `running`, each in the generation it was reconciled in, in one transaction.
pub(super) async fn mark_many_running(
    runtime: &Runtime,
    changes: &[(JobId, u64, StateChange)],
) -> StoreResult<()> {
    for job in runtime.store.transition_jobs_in_generation(changes).await? {
        tracing::info!(job.id = %job, "job running");
    }
    Ok(())
}

/// A `rescaling` job whose leader reported the first step of its new generation is `running`
/// again; the event says how long the change took, from the decision to that step.
pub(super) async fn first_step_rescaled(
    runtime: &Runtime,
    key: &TaskKey,
    step: u64,
    at: chrono::DateTime<chrono::Utc>,
) -> StoreResult<()> {
    let job = runtime.store.get_job(Scope::Cluster, key.job_id).await?;
    if job.state != JobState::Rescaling || job.generation != key.generation {
        return Ok(());
    }
    let tasks = runtime
        .store
        .generation_tasks(job.id, job.generation)
        .await?;
    let workers = num_workers(&tasks);
    let seconds = (at - job.updated_at).num_milliseconds().max(0) as f64 / 1000.0;
    let message = format!(
        "first step at the new shape ({workers} workers, {} PS) at step {step}, {seconds:.1} s after the decision",
        tasks.len() as u32 - workers,
    );
    mark_running(runtime, &job, running(message)).await
}

/// Moves the job to `running` in its current generation.
async fn mark_running(runtime: &Runtime, job: &Job, change: StateChange) -> StoreResult<()> {
    if runtime
        .store
        .transition_job_in_generation(job.id, job.generation, &change, false)
        .await?
        .is_some()
    {
        tracing::info!(job.id = %job.id, generation = job.generation, message = change.message, "job running");
    }
    Ok(())
}

/// Asks every running task of the job's current generation to checkpoint now (SIGUSR1); returns how
/// many were reached (a task whose executor has no open session is not).
pub async fn request_checkpoint(runtime: &Runtime, job: &Job) -> StoreResult<usize> {
    let tasks = runtime
        .store
        .generation_tasks(job.id, job.generation)
        .await?;
    let mut asked = 0;
    for task in tasks
        .iter()
        .filter(|t| t.state == TaskState::Running && !t.stop_requested)
    {
        let reached = runtime.hub.send(
            &task.node_name,
            pb::ServerMessage {
                body: Some(pb::server_message::Body::Checkpoint(pb::CheckpointTask {
                    task: Some(to_pb_key(&task.key)),
                })),
            },
        );
        asked += usize::from(reached);
    }
    Ok(asked)
}

/// Marks the task stopping (persisted first) and tells its executor.
pub(super) async fn stop_task(runtime: &Runtime, task: &Task, reason: &str) -> StoreResult<()> {
    if !task.stop_requested {
        runtime
            .store
            .update_task(
                &task.key,
                &TaskChange {
                    state: Some(TaskState::Stopping),
                    stop_requested: Some(true),
                    ..TaskChange::default()
                },
            )
            .await?;
    }
    let message = pb::ServerMessage {
        body: Some(pb::server_message::Body::Stop(pb::StopTask {
            task: Some(to_pb_key(&task.key)),
            grace_ms: duration_ms(runtime.config.stop_grace),
            reason: reason.to_owned(),
        })),
    };
    if runtime
        .hub
        .send_once(&task.node_name, task.key, Command::Stop, message)
    {
        tracing::info!(task = %task.key, node.name = task.node_name, reason, "stopping task");
    }
    Ok(())
}

async fn prepare_task(
    runtime: &Runtime,
    job: &Job,
    task: &Task,
    tasks: &[Task],
    recent: Option<&[CheckpointRecord]>,
) -> StoreResult<()> {
    // Sent in this session already (the job was started by an earlier round, and its task has not
    // answered yet): nothing to read or build again (a resume point read a job, for thousands of
    // jobs after a burst of starts). What the sent message was built from stands until the task
    // answers: a secret deleted meanwhile does not fail the job here (the task reads its
    // environment from the message it was sent).
    if runtime
        .hub
        .was_sent(&task.node_name, task.key, Command::Prepare)
    {
        return Ok(());
    }
    let Some(spec) = job.spec() else {
        return Ok(());
    };
    // A command job runs its argv; a train job runs the executor's training engine on the spec.
    let (argv, env, workdir, train_job) = match (&spec.spec.command, spec.spec.job_type) {
        (_, JobType::Train) => (
            Vec::new(),
            Default::default(),
            ".".to_owned(),
            serde_json::to_string(&spec).unwrap_or_default(),
        ),
        (Some(command), _) => match task_env(runtime, job, command).await? {
            Ok(env) => (
                command.argv.clone(),
                env,
                command.workdir.clone(),
                String::new(),
            ),
            Err(why) => {
                tracing::warn!(job.id = %job.id, why, "job cannot start: a secret it needs cannot be opened");
                return fail_start(runtime, job, why).await;
            }
        },
        (None, _) => return Ok(()),
    };
    let num_workers = num_workers(tasks);
    // Its own last checkpoint; before it has one, the checkpoint `init_from` names.
    let resume = match resume_point(runtime, job, recent).await? {
        Some(own) => Some(own),
        None => match spec.init_from() {
            None => None,
            Some((init, field)) => {
                match init_checkpoint(runtime, job, &init.checkpoint, field).await? {
                    Ok(checkpoint) => Some(checkpoint),
                    Err(why) => {
                        tracing::warn!(job.id = %job.id, why, "job cannot start from its init_from checkpoint");
                        return fail_start(runtime, job, why).await;
                    }
                }
            }
        },
    };
    let message = pb::ServerMessage {
        body: Some(pb::server_message::Body::Prepare(pb::PrepareTask {
            task: Some(to_pb_key(&task.key)),
            spec: Some(pb::TaskSpec {
                job_name: job.name.clone(),
                argv,
                env,
                workdir,
                gpus: task.gpus.iter().map(|&g| u32::from(g)).collect(),
                num_workers,
                num_ps: tasks.len() as u32 - num_workers,
                rank: rank(&task.key, num_workers),
                checkpoint_dir: runtime
                    .checkpoint_dir(job.id, job.generation)
                    .display()
                    .to_string(),
                resume_from: resume.as_ref().map(|c| c.path.clone()).unwrap_or_default(),
                resume_step: resume.as_ref().map_or(0, |c| c.step),
                stop_grace_ms: duration_ms(runtime.config.stop_grace),
                train_job,
                memory_limit_bytes: u64::from(spec.spec.resources.memory_gb_per_task) << 30,
                cpus: match task.key.role {
                    TaskRole::Worker => spec.spec.resources.cpus_per_worker,
                    TaskRole::Ps => spec.spec.resources.cpus_per_ps,
                },
                read_only_paths: declared_data(&spec),
                tenant: job.tenant_name.clone(),
                launcher: match spec.spec.job_type {
                    JobType::Command if !spec.spec.distributed.launcher.is_none() => {
                        spec.spec.distributed.launcher.as_str().to_owned()
                    }
                    _ => String::new(),
                },
                image: spec
                    .spec
                    .command
                    .as_ref()
                    .and_then(|c| c.image_reference())
                    .and_then(Result::ok)
                    .unwrap_or_default(),
            }),
        })),
    };
    if let Err(why) = fits_in_one_message(&message) {
        tracing::warn!(job.id = %job.id, why, "job cannot start: its task does not fit in a message");
        return fail_start(runtime, job, why).await;
    }
    runtime
        .hub
        .send_once(&task.node_name, task.key, Command::Prepare, message);
    Ok(())
}

/// Recorded checkpoints a start looks through, newest first, for one that still exists.
pub(super) const RESUME_CANDIDATES: u32 = 16;

/// The job's newest recorded checkpoint that still exists in the checkpoint storage: a task's
/// retention (`keep_last`) deletes checkpoints by what is on disk, not by what the server recorded,
/// so the newest record can name one that is gone; then the next older one is tried. Where this
/// server cannot look (a checkpoint directory it does not see, a store that does not answer), the
/// record is trusted. `known`: the job's recent records, when the caller read them already.
async fn resume_point(
    runtime: &Runtime,
    job: &Job,
    known: Option<&[CheckpointRecord]>,
) -> StoreResult<Option<CheckpointRecord>> {
    let recent = match known {
        Some(records) => records.to_vec(),
        None => {
            runtime
                .store
                .recent_checkpoints(job.id, RESUME_CANDIDATES)
                .await?
        }
    };
    for record in &recent {
        match runtime.checkpoint_exists(record).await {
            Some(false) => {
                tracing::warn!(job.id = %job.id, step = record.step, path = record.path, "a recorded checkpoint is gone; trying the one before it");
            }
            Some(true) | None => return Ok(Some(record.clone())),
        }
    }
    // None of them is there: the job's retention (`keep_last`, by what is on disk) deleted every
    // recorded one while the records of newer ones were lost (with a killed executor, say). The newest
    // checkpoint the job committed to disk is what it would have resumed from.
    if !recent.is_empty()
        && runtime.config.checkpoint_store.is_none()
        && let Some(found) = newest_on_disk(runtime, job).await
    {
        tracing::warn!(job.id = %job.id, step = found.step, path = found.path, "resuming from the newest checkpoint on disk: every recorded one is gone");
        return Ok(Some(found));
    }
    // Else the newest, so that the task says what is missing.
    Ok(recent.into_iter().next())
}

/// The newest committed checkpoint of `job` in the checkpoint directory (a `step-N` folder: the
/// engine and the Python library write one whole under another name, then rename it), newest
/// generation first.
async fn newest_on_disk(runtime: &Runtime, job: &Job) -> Option<CheckpointRecord> {
    let dirs: Vec<(u64, std::path::PathBuf)> = (1..=job.generation)
        .rev()
        .map(|generation| (generation, runtime.checkpoint_dir(job.id, generation)))
        .collect();
    let job_id = job.id;
    tokio::task::spawn_blocking(move || {
        dirs.into_iter().find_map(|(generation, dir)| {
            let newest = std::fs::read_dir(&dir)
                .ok()?
                .flatten()
                .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|entry| {
                    let name = entry.file_name();
                    let step = name.to_str()?.strip_prefix("step-")?.parse::<u64>().ok()?;
                    Some((step, entry.path()))
                })
                .max_by_key(|(step, _)| *step)?;
            Some(CheckpointRecord {
                id: uuid::Uuid::nil(),
                job_id,
                generation,
                step: newest.0,
                path: newest.1.display().to_string(),
                size_bytes: 0,
                created_at: chrono::Utc::now(),
            })
        })
    })
    .await
    .ok()
    .flatten()
}

/// Room left in a message for gRPC's framing and the rest of the stream.
const MESSAGE_HEADROOM_BYTES: usize = 64 * 1024;

/// A task's definition must reach its executor in one message: one that does not fit would end the
/// executor's session at every try, wedging the node for every tenant, so the job fails instead.
fn fits_in_one_message(message: &pb::ServerMessage) -> Result<(), String> {
    let size = prost::Message::encoded_len(message);
    let most = drover_proto::MAX_MESSAGE_BYTES - MESSAGE_HEADROOM_BYTES;
    if size > most {
        return Err(format!(
            "its task's definition (command, environment with its secrets, spec) is {size} bytes; an executor accepts at most {most}"
        ));
    }
    Ok(())
}

/// Fails a job that cannot start for a reason of its own (`user_error`: retrying cannot help).
async fn fail_start(runtime: &Runtime, job: &Job, why: String) -> StoreResult<()> {
    crate::transition::transition(
        runtime,
        job,
        JobState::Failed,
        ReasonCode::UserError,
        why,
        false,
    )
    .await?;
    runtime.hub.wake.notify_one();
    Ok(())
}

/// The checkpoint a job's `init_from` (the `field`) names, if it is one of the job's tenant's; `Err`
/// says why not (the job then fails: retrying cannot help).
async fn init_checkpoint(
    runtime: &Runtime,
    job: &Job,
    id: &str,
    field: &str,
) -> StoreResult<Result<CheckpointRecord, String>> {
    match drover_store::tenant_checkpoint(runtime.store.as_ref(), job.tenant_id, id).await? {
        Some(checkpoint) => Ok(Ok(checkpoint)),
        None => Ok(Err(format!("{field}: no checkpoint `{id}` in the tenant"))),
    }
}

/// A command task's environment, its secrets opened; `Err` says which secret is missing or does
/// not open (the job then fails: retrying cannot help). Values are never logged.
async fn task_env(
    runtime: &Runtime,
    job: &Job,
    command: &drover_core::spec::CommandSpec,
) -> StoreResult<Result<std::collections::HashMap<String, String>, String>> {
    let mut env = std::collections::HashMap::with_capacity(command.env.len());
    for (key, value) in &command.env {
        let name = match value {
            EnvValue::Plain(text) => {
                env.insert(key.clone(), text.clone());
                continue;
            }
            EnvValue::Secret(reference) => &reference.secret,
        };
        let Some(secrets) = &runtime.config.secrets else {
            return Ok(Err(format!(
                "env {key}: secret `{name}` cannot be opened: this server has no secret key"
            )));
        };
        let Some(sealed) = runtime.store.sealed_secret(job.tenant_id, name).await? else {
            return Ok(Err(format!(
                "env {key}: no secret `{name}` in tenant `{}`",
                job.tenant_name
            )));
        };
        match secrets.open(job.tenant_id, name, &sealed) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => {
                    env.insert(key.clone(), text);
                }
                Err(_) => return Ok(Err(format!("env {key}: secret `{name}` is not UTF-8"))),
            },
            Err(err) => return Ok(Err(format!("env {key}: secret `{name}`: {err}"))),
        }
    }
    // The step budget, where the program reads it (after the job's own variables: this one wins).
    if let Some(steps) = command.max_steps {
        env.insert("DROVER_MAX_STEPS".to_owned(), steps.to_string());
    }
    Ok(Ok(env))
}

/// Seconds since `at`, as "2.4 s".
fn since(at: chrono::DateTime<chrono::Utc>) -> String {
    let ms = (chrono::Utc::now() - at).num_milliseconds().max(0);
    format!("{:.1} s", ms as f64 / 1000.0)
}

pub(super) fn duration_ms(duration: std::time::Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

/// What the job declared it reads: a train job's dataset file or folder (shown read-only in its
/// tasks' sandboxes).
fn declared_data(job: &drover_core::DroverJob) -> Vec<String> {
    use drover_core::spec::DatasetSpec;
    match job.spec.train.as_ref().map(|train| &train.dataset) {
        Some(
            DatasetSpec::Idx { path } | DatasetSpec::Csv { path, .. } | DatasetSpec::Text { path },
        ) => {
            vec![path.clone()]
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepare(argv: Vec<String>) -> pb::ServerMessage {
        pb::ServerMessage {
            body: Some(pb::server_message::Body::Prepare(pb::PrepareTask {
                task: None,
                spec: Some(pb::TaskSpec {
                    argv,
                    ..Default::default()
                }),
            })),
        }
    }

    #[test]
    fn a_task_that_would_not_fit_in_one_message_is_refused_before_it_is_sent() {
        assert!(fits_in_one_message(&prepare(vec!["python3".into(), "train.py".into()])).is_ok());
        let huge = vec!["x".repeat(1 << 20); 4];
        let why = fits_in_one_message(&prepare(huge)).unwrap_err();
        assert!(why.contains("an executor accepts at most"), "{why}");
    }
}
