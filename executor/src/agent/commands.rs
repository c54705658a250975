//! The server's commands to the executor: prepare a task (reserve its address, start fetching the
//! checkpoint it resumes from), start it, stop it, ask it to checkpoint.

use super::local::{LocalTask, Phase, exit_report, key_of, update};
use super::state::Agent;
use crate::task::{self, Launch};
use drover_proto as pb;
use pb::server_message::Body as Command;
use std::time::Duration;
use tokio::sync::mpsc;

impl Agent {
    pub(super) async fn on_command(
        &mut self,
        command: Command,
        outbound: &mpsc::Sender<pb::ExecutorMessage>,
    ) {
        match command {
            Command::Registered(_) => {}
            Command::Applied(applied) => self.applied(applied.through),
            Command::Prepare(prepare) => {
                let (Some(key), Some(spec)) = (prepare.task, prepare.spec) else {
                    return;
                };
                if let Some(reply) = self.prepare(key, spec).await {
                    let _ = self.on_event(reply, Some(outbound)).await;
                }
            }
            Command::Start(start) => {
                let Some(key) = start.task else { return };
                let reply = self.start(key, start.peers).await;
                let _ = self.on_event(reply, Some(outbound)).await;
            }
            Command::Stop(stop) => {
                let Some(key) = stop.task else { return };
                if let Some(reply) = self.stop(
                    &key,
                    Duration::from_millis(u64::from(stop.grace_ms)),
                    &stop.reason,
                ) {
                    let _ = self.on_event(reply, Some(outbound)).await;
                }
            }
            Command::Checkpoint(request) => {
                let Some(key) = request.task else { return };
                if let Some(LocalTask {
                    phase: Phase::Running(_),
                    pid,
                    ..
                }) = self.tasks.get(&key_of(&key))
                {
                    if self.config.pods.is_some() || *pid == 0 {
                        // A Pod's process is not this executor's to signal (that needs the API's
                        // exec, which task Pods are not given yet): it checkpoints on its schedule
                        // and when it is stopped.
                        tracing::warn!(
                            job.id = key.job_id,
                            "a task Pod cannot be asked to checkpoint now"
                        );
                        return;
                    }
                    // SIGUSR1 to the task's group: the contract's "checkpoint now".
                    let group = nix::unistd::Pid::from_raw(*pid as i32);
                    if let Err(err) =
                        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGUSR1)
                    {
                        tracing::warn!(job.id = key.job_id, error = %err, "cannot ask a task to checkpoint");
                    }
                }
            }
            Command::Refused(refused) => {
                tracing::warn!(task = ?refused.task, reason = refused.reason, "the server refused a report");
            }
        }
    }

    /// Reserves an address for the task. A repeated prepare answers with what the task already has.
    async fn prepare(
        &mut self,
        key: pb::TaskKey,
        mut spec: pb::TaskSpec,
    ) -> Option<pb::ExecutorMessage> {
        if let Some(task) = self.tasks.get(&key_of(&key)) {
            return Some(match task.phase {
                // Answered when the download ends.
                Phase::Fetching => return None,
                Phase::Prepared => update(
                    &key,
                    pb::task_update::Event::Prepared(pb::Prepared {
                        address: task.address.clone(),
                    }),
                ),
                _ => update(
                    &key,
                    pb::task_update::Event::Started(pb::Started { pid: task.pid }),
                ),
            });
        }
        let (remote, fetch) = match self.remote.localise(&mut spec) {
            Ok(localised) => localised,
            Err(message) => {
                tracing::warn!(
                    job.id = key.job_id,
                    message,
                    "task cannot use the checkpoint storage"
                );
                return Some(exit_report(&key, message, false, false));
            }
        };
        // An image is pulled here (the tasks of Pods get theirs from Kubernetes).
        let images = match (&self.config.pods, spec.image.is_empty()) {
            (None, false) => match self.config.sandbox.as_ref().and_then(|s| s.images()) {
                Some(images) => Some(images),
                None => {
                    return Some(exit_report(
                        &key,
                        "this node runs no images (it needs sandboxes, skopeo and umoci)"
                            .to_owned(),
                        false,
                        false,
                    ));
                }
            },
            _ => None,
        };
        let address = match &self.config.pods {
            // A Pod's address is its name under its job's Service.
            Some(pods) => match pods.address(&key, &spec.tenant).await {
                Ok(address) => address,
                Err(task::StartError::User(message)) => {
                    return Some(exit_report(&key, message, true, false));
                }
                Err(task::StartError::Node(message)) => {
                    return Some(exit_report(&key, message, false, false));
                }
            },
            None => {
                let bind = format!(
                    "{}:0",
                    if self.config.advertise_host == "localhost" {
                        "127.0.0.1"
                    } else {
                        "0.0.0.0"
                    }
                );
                let port = match tokio::net::TcpListener::bind(&bind)
                    .await
                    .and_then(|l| l.local_addr())
                {
                    Ok(addr) => addr.port(),
                    Err(err) => {
                        return Some(exit_report(
                            &key,
                            format!("cannot reserve a port: {err}"),
                            false,
                            false,
                        ));
                    }
                };
                format!("{}:{port}", self.config.advertise_host)
            }
        };
        tracing::info!(
            job.id = key.job_id,
            generation = key.generation,
            role = key.role,
            index = key.index,
            address,
            "task prepared"
        );
        let fetching = fetch.is_some() || images.is_some();
        let image = (!spec.image.is_empty()).then(|| spec.image.clone());
        self.tasks.insert(
            key_of(&key),
            LocalTask {
                key: key.clone(),
                spec,
                address: address.clone(),
                phase: if fetching {
                    Phase::Fetching
                } else {
                    Phase::Prepared
                },
                pid: 0,
                remote: remote.clone(),
                image: None,
            },
        );
        if fetching {
            // In the background: the session goes on heartbeating while an image or a large
            // checkpoint comes.
            let done = self.fetched_tx.clone();
            let events = self.events_tx.clone();
            tokio::spawn(async move {
                let pulled = match (images, image) {
                    (Some(images), Some(reference)) => {
                        let log_key = key.clone();
                        images
                            .prepare(&reference, |line| {
                                tracing::info!(job.id = log_key.job_id, "{line}");
                                let _ = events.try_send(super::local::log_line(&log_key, line));
                            })
                            .await
                            .map(Some)
                            .map_err(task::StartError::from)
                    }
                    _ => Ok(None),
                };
                let result = match (pulled, remote, fetch) {
                    (Ok(image), Some(remote), Some(location)) => {
                        tracing::info!(
                            job.id = key.job_id,
                            location,
                            "downloading the checkpoint to resume from"
                        );
                        match remote.fetch(&location).await {
                            Ok(_) => Ok(image),
                            Err(err) => Err(task::StartError::Node(format!(
                                "cannot download the checkpoint {location}: {err:#}"
                            ))),
                        }
                    }
                    (pulled, _, _) => pulled,
                };
                let _ = done.send((key, result)).await;
            });
            return None;
        }
        Some(update(
            &key,
            pb::task_update::Event::Prepared(pb::Prepared { address }),
        ))
    }

    async fn start(&mut self, key: pb::TaskKey, peers: Vec<String>) -> pb::ExecutorMessage {
        let Some(task) = self.tasks.get_mut(&key_of(&key)) else {
            return exit_report(
                &key,
                "this executor does not know the task (it restarted)".to_owned(),
                false,
                false,
            );
        };
        if !matches!(task.phase, Phase::Prepared) {
            return update(
                &key,
                pb::task_update::Event::Started(pb::Started { pid: task.pid }),
            );
        }
        let dir_name = format!(
            "{}-g{}-{}-{}",
            key.job_id, key.generation, key.role, key.index
        );
        let task_dir = self.config.data_dir.join("tasks").join(&dir_name);
        let mut spec = task.spec.clone();
        if !spec.train_job.is_empty() {
            // A train job: the training engine runs the job file, under the same contract.
            let job_file = task_dir.join("job.json");
            let written = std::fs::create_dir_all(&task_dir)
                .and_then(|()| std::fs::write(&job_file, spec.train_job.as_bytes()));
            if let Err(err) = written {
                self.tasks.remove(&key_of(&key));
                return exit_report(
                    &key,
                    format!("cannot write the job file: {err}"),
                    false,
                    false,
                );
            }
            spec.argv = self.config.engine.clone();
            spec.argv
                .extend(["--job".to_owned(), job_file.display().to_string()]);
            spec.workdir = ".".to_owned();
        }
        let gpu_uuids = gpu_uuids(&self.config, &task.spec.gpus);
        let launch = Launch {
            key: key.clone(),
            spec,
            peers,
            address: task.address.clone(),
            task_dir,
            base_dir: self.config.base_dir.clone(),
            shim: self.config.shim.clone(),
            hide_gpus: !self.config.source.is_real(),
            remote: task.remote.clone(),
            gpu_uuids,
            sandbox: self.config.sandbox.clone(),
            image: task.image.clone(),
        };
        let started = match &self.config.pods {
            Some(pods) => pods.start(launch, self.events_tx.clone()).await,
            None => task::start(launch, self.events_tx.clone()).await,
        };
        match started {
            Ok((pid, handle)) => {
                task.pid = pid;
                task.phase = Phase::Running(handle);
                tracing::info!(
                    job.id = key.job_id,
                    generation = key.generation,
                    role = key.role,
                    index = key.index,
                    pid,
                    "task started"
                );
                update(&key, pb::task_update::Event::Started(pb::Started { pid }))
            }
            Err(error) => {
                self.tasks.remove(&key_of(&key));
                // The job's own mistake fails it; this node's trouble counts as a task failure.
                let (spawn_failed, message) = match error {
                    task::StartError::User(message) => (true, message),
                    task::StartError::Node(message) => (false, message),
                };
                tracing::warn!(job.id = key.job_id, message, "task could not start");
                exit_report(&key, message, spawn_failed, false)
            }
        }
    }

    /// Stops a task; answers at once when there is no process to wait for.
    fn stop(
        &mut self,
        key: &pb::TaskKey,
        grace: Duration,
        reason: &str,
    ) -> Option<pb::ExecutorMessage> {
        let k = key_of(key);
        let Some(task) = self.tasks.get_mut(&k) else {
            return Some(exit_report(
                key,
                "was not running here".to_owned(),
                false,
                true,
            ));
        };
        tracing::info!(
            job.id = key.job_id,
            generation = key.generation,
            role = key.role,
            index = key.index,
            reason,
            "stopping task"
        );
        match std::mem::replace(&mut task.phase, Phase::Stopping) {
            Phase::Running(mut handle) => {
                handle.stop(grace);
                None
            }
            Phase::Fetching | Phase::Prepared => {
                self.tasks.remove(&k);
                Some(exit_report(
                    key,
                    "stopped before it started".to_owned(),
                    false,
                    true,
                ))
            }
            Phase::Stopping => None,
            Phase::Exited => {
                task.phase = Phase::Exited;
                None
            }
        }
    }
}

/// A sandboxed task's GPUs by their `GPU-…` ids (empty unless every one of them has one).
fn gpu_uuids(config: &crate::config::ExecutorConfig, gpus: &[u32]) -> Vec<String> {
    if config.sandbox.is_none() || gpus.is_empty() {
        return Vec::new();
    }
    let uuids: Option<Vec<String>> = gpus
        .iter()
        .map(|index| {
            config
                .gpus
                .iter()
                .find(|gpu| gpu.index == *index)
                .and_then(|gpu| gpu.uuid.clone())
        })
        .collect();
    uuids.unwrap_or_default()
}
