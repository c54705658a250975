//! The executor's session with the server: dial out, register with the inventory and the tasks still
//! running, then heartbeat, carry out commands and forward what tasks report. When the stream breaks it
//! reconnects with backoff and registers again; its tasks keep running meanwhile, and what they report
//! is kept (bounded) until the server is back.

use crate::credential;
use drover_proto as pb;
use local::{Phase, exit_key, key_of, msg};
use pb::executor_message::Body;
use pb::server_message::Body as Command;
use std::time::Duration;
use storage_phase::Fetched;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

pub use crate::config::ExecutorConfig;

/// Reports kept while the server is unreachable; beyond this, log lines and metrics are dropped
/// (task state changes and checkpoint records never are).
const MAX_PENDING: usize = 10_000;
const MAX_BACKOFF: Duration = Duration::from_secs(5);

mod commands;
mod connect;
mod gateways;
mod local;
mod state;
mod storage_phase;

pub use state::Agent;

/// A replica that does not lead named the one that does: go there now, no backoff.
#[derive(Debug)]
struct Redirected(String);

impl std::fmt::Display for Redirected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "redirected to the leader at {}", self.0)
    }
}

impl std::error::Error for Redirected {}

impl Agent {
    /// Runs until `shutdown` resolves. Tasks die with the executor (their shims watch it).
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        tokio::pin!(shutdown);
        let mut backoff = Duration::from_millis(200);
        let mut redirects = 0;
        loop {
            let session = self.session();
            tokio::select! {
                result = session => match result {
                    Ok(()) => {
                        tracing::warn!(server = self.config.server, "the server closed the session; reconnecting");
                        backoff = Duration::from_millis(200);
                    }
                    Err(err) if err.downcast_ref::<credential::Fatal>().is_some() => return Err(err),
                    // Straight there, unless redirects go round in circles (a stale leader record).
                    Err(err) if err.downcast_ref::<Redirected>().is_some() && redirects < 3 => {
                        tracing::info!(server = self.config.server, "{err}");
                        redirects += 1;
                        continue;
                    }
                    // A session the server dropped mid-stream (it stopped or restarted): expected
                    // in a cluster's life, and the executor reconnects.
                    Err(err) if dropped_stream(&err) => tracing::info!(server = self.config.server, error = %err, "the server dropped the session; reconnecting in {:?}", backoff),
                    Err(err) => tracing::warn!(server = self.config.server, error = %err, "no session with the server; retrying in {:?}", backoff),
                },
                () = &mut shutdown => return Ok(()),
            }
            // Keep what tasks report while waiting to reconnect.
            let wait = tokio::time::sleep(backoff);
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    () = &mut wait => break,
                    Some(event) = self.events_rx.recv() => {
                        let _ = self.on_event(event, None).await;
                    }
                    Some(fetched) = self.fetched_rx.recv() => {
                        let _ = self.on_fetched(fetched, None).await;
                    }
                    () = &mut shutdown => return Ok(()),
                }
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            redirects = 0;
        }
    }

    /// Numbers a task's report and keeps it until the server says it is applied (see the contract's
    /// Delivery). Past [`MAX_PENDING`] kept reports, log lines and metrics are dropped; task state
    /// changes and checkpoints never are.
    fn keep(&mut self, mut message: pb::ExecutorMessage) {
        let droppable = matches!(message.body, Some(Body::Logs(_) | Body::Metrics(_)));
        if droppable && self.outbox.len() >= MAX_PENDING {
            self.dropped += 1;
            return;
        }
        message.seq = self.next_seq;
        self.next_seq += 1;
        self.outbox.push_back(message);
    }

    /// Marks a task whose exit is reported as exited (it stays listed until the server has applied the
    /// report, so a re-registration says it exited rather than that it vanished).
    fn note_exit(&mut self, event: &pb::ExecutorMessage) {
        if let Some(key) = exit_key(event)
            && let Some(task) = self.tasks.get_mut(&key_of(key))
        {
            task.phase = Phase::Exited;
        }
    }

    /// The server applied every report up to `through`: forget them, and the tasks whose exit was
    /// among them.
    pub(super) fn applied(&mut self, through: u64) {
        while self.outbox.front().is_some_and(|m| m.seq <= through) {
            if let Some(message) = self.outbox.pop_front() {
                self.sent = self.sent.saturating_sub(1);
                if let Some(key) = exit_key(&message) {
                    self.tasks.remove(&key_of(key));
                }
            }
        }
    }

    /// Keeps a task's report and forwards it in order (waiting while the stream is full).
    async fn on_event(
        &mut self,
        event: pb::ExecutorMessage,
        outbound: Option<&mpsc::Sender<pb::ExecutorMessage>>,
    ) -> anyhow::Result<()> {
        self.note_exit(&event);
        self.keep(event);
        match outbound {
            Some(outbound) => self.flush(outbound).await,
            None => Ok(()),
        }
    }

    /// Sends the kept reports this session has not sent yet, in order. Each stays kept until the
    /// server has applied it: a report lost with a broken stream is sent again in the next session.
    async fn flush(&mut self, outbound: &mpsc::Sender<pb::ExecutorMessage>) -> anyhow::Result<()> {
        while let Some(message) = self.outbox.get(self.sent) {
            let seq = message.seq;
            if outbound.send(message.clone()).await.is_err() {
                anyhow::bail!("the stream to the server closed");
            }
            self.sent += 1;
            if !self.server_answers_applied {
                // A server that never answers Applied: sent is as far as this executor can know.
                self.applied(seq);
            }
        }
        Ok(())
    }

    /// A download finished: the task is prepared, or it fails. Nothing when it was stopped meanwhile.
    async fn on_fetched(
        &mut self,
        (key, result): Fetched,
        outbound: Option<&mpsc::Sender<pb::ExecutorMessage>>,
    ) -> anyhow::Result<()> {
        let Some(report) = self
            .tasks
            .get_mut(&key_of(&key))
            .and_then(|task| storage_phase::fetched(task, &key, result))
        else {
            return Ok(());
        };
        self.on_event(report, outbound).await
    }

    async fn session(&mut self) -> anyhow::Result<()> {
        let target = match self.redirect.take() {
            Some(leader) => leader,
            None => {
                let gateway = self.gateways[self.next_gateway % self.gateways.len()].clone();
                // The next attempt, if this one fails, tries the next replica.
                self.next_gateway += 1;
                gateway
            }
        };
        let (mut client, secret) =
            connect::connect(&self.config, &target, &mut self.credential).await?;
        let _renewing = connect::renew_while_connected(&self.config, &target, &client, &secret);
        let (outbound, outbound_rx) = mpsc::channel::<pb::ExecutorMessage>(1024);
        let register = pb::Register {
            node_name: self.config.name.clone(),
            executor_id: self.executor_id.clone(),
            gpus: self.config.gpus.iter().map(pb::Gpu::from).collect(),
            cpus: self.config.cpus,
            memory_gb: self.config.memory_gb,
            labels: self.config.labels.clone().into_iter().collect(),
            taints: self
                .config
                .taints
                .iter()
                .map(|(key, value)| pb::Taint {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            gpu_source: self.config.source.as_str().to_owned(),
            tasks: self.tasks.values().map(|t| t.status(None)).collect(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            incarnation: self.incarnation.clone(),
            runs_images: self.config.pods.is_some()
                || self
                    .config
                    .sandbox
                    .as_ref()
                    .is_some_and(|s| s.images().is_some()),
            isolation: if self.config.pods.is_some() {
                "pod"
            } else if self.config.sandbox.is_some() {
                "runc"
            } else {
                "none"
            }
            .to_owned(),
        };
        outbound.send(msg(Body::Register(register))).await?;
        let mut request = tonic::Request::new(ReceiverStream::new(outbound_rx));
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {secret}").parse().map_err(|_| {
                credential::Fatal(format!(
                    "the node credential in {} is damaged: remove it and enrol again",
                    self.config.data_dir.display()
                ))
            })?,
        );
        let response = match client.session(request).await {
            Ok(response) => response,
            Err(status) if status.code() == tonic::Code::Unauthenticated => {
                // Revoked, or a server that never knew it: enrol again on the next attempt, which
                // needs an enrolment token.
                credential::forget(&self.config.data_dir)?;
                self.credential = None;
                if self.config.enrollment_token.is_none() {
                    return Err(credential::Fatal(format!(
                        "the server refused this node's credential ({}); start the executor with a new --enrollment-token",
                        status.message()
                    ))
                    .into());
                }
                return Err(status.into());
            }
            Err(status) if status.code() == tonic::Code::PermissionDenied => {
                return Err(credential::Fatal(status.message().to_owned()).into());
            }
            Err(status) if status.code() == tonic::Code::FailedPrecondition => {
                // A client certificate the gateway does not take (none, or not this credential's):
                // the next attempt renews it.
                crate::identity::forget_certificate(&self.config.data_dir)?;
                return Err(status.into());
            }
            Err(status) if status.code() == tonic::Code::Unavailable => {
                let leader = status
                    .metadata()
                    .get(drover_proto::LEADER_METADATA)
                    .and_then(|v| v.to_str().ok())
                    .filter(|leader| *leader != target)
                    .map(str::to_owned);
                return Err(match leader {
                    Some(leader) => {
                        self.redirect = Some(leader.clone());
                        Redirected(leader).into()
                    }
                    None => status.into(),
                });
            }
            Err(status) => return Err(status.into()),
        };
        let mut inbound = response.into_inner();
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| anyhow::anyhow!("the server closed the stream"))?;
        let Some(Command::Registered(registered)) = first.body else {
            anyhow::bail!("the server did not acknowledge the registration");
        };
        tracing::info!(
            node.name = registered.node_name,
            checkpoints = registered.checkpoint_root,
            tasks = self.tasks.len(),
            "registered with the server"
        );
        self.remote
            .use_root(&registered.checkpoint_root, &self.config.data_dir);
        if let Some(pods) = &self.config.pods {
            pods.use_checkpoint_root(&registered.checkpoint_root);
        }
        // Every kept report the server has not applied goes again, in order.
        self.sent = 0;
        self.server_answers_applied = registered.answers_applied;
        self.applied(registered.applied_through);
        if self.dropped > 0 {
            tracing::warn!(
                dropped = self.dropped,
                "log lines and metrics dropped while the server was unreachable"
            );
            self.dropped = 0;
        }
        self.flush(&outbound).await?;
        let interval = Duration::from_millis(u64::from(registered.heartbeat_interval_ms.max(100)));
        let mut heartbeat = tokio::time::interval(interval);
        loop {
            tokio::select! {
                command = inbound.message() => match command? {
                    Some(pb::ServerMessage { body: Some(command) }) => self.on_command(command, &outbound).await,
                    Some(_) => {}
                    None => return Ok(()),
                },
                Some(event) = self.events_rx.recv() => self.on_event(event, Some(&outbound)).await?,
                Some(fetched) = self.fetched_rx.recv() => self.on_fetched(fetched, Some(&outbound)).await?,
                _ = heartbeat.tick() => {
                    let running: Vec<u32> = self
                        .tasks
                        .values()
                        .filter(|t| matches!(t.phase, Phase::Running(_)) && t.pid != 0)
                        .map(|t| t.pid)
                        .collect();
                    let task_use = self.task_use.sample(&running);
                    let gpus = self.usage.sample(&self.config.gpus);
                    let beat = pb::Heartbeat {
                        tasks: self
                            .tasks
                            .values()
                            .map(|t| {
                                t.status(task_use.get(&t.pid).map(|&u| {
                                    crate::task_use::with_gpus(u, &t.spec.gpus, &gpus)
                                }))
                            })
                            .collect(),
                        gpus,
                        host: Some(self.host.sample()),
                    };
                    outbound.send(msg(Body::Heartbeat(beat))).await?;
                }
            }
        }
    }
}

/// Whether a session ended because the server's side of an established stream went away (HTTP/2
/// reset, broken pipe), as opposed to not reaching the server at all.
fn dropped_stream(err: &anyhow::Error) -> bool {
    let text = format!("{err:#}").to_ascii_lowercase();
    [
        "h2 protocol error",
        "broken pipe",
        "connection reset",
        "stream closed",
    ]
    .iter()
    .any(|sign| text.contains(sign))
}

#[cfg(test)]
mod tests {
    use super::local::{LocalTask, Phase, exit_report, key_of, msg};
    use super::{Agent, Body, ExecutorConfig, dropped_stream};
    use drover_proto as pb;
    use tokio::sync::mpsc;

    fn agent(dir: &std::path::Path) -> Agent {
        Agent::new(ExecutorConfig {
            server: "http://127.0.0.1:1".to_owned(),
            name: "node-a".to_owned(),
            data_dir: dir.to_owned(),
            source: crate::gpu::GpuSource::Slots(1),
            gpus: Vec::new(),
            cpus: 1,
            memory_gb: 1,
            labels: std::collections::BTreeMap::new(),
            taints: Vec::new(),
            advertise_host: "127.0.0.1".to_owned(),
            shim: Vec::new(),
            engine: Vec::new(),
            base_dir: dir.to_owned(),
            enrollment_token: None,
            gateway_trust: Default::default(),
            sandbox: None,
            pods: None,
        })
        .expect("an agent")
    }

    fn log(line: &str) -> pb::ExecutorMessage {
        msg(Body::Logs(pb::Logs {
            task: None,
            lines: vec![pb::LogLine {
                stream: "stdout".to_owned(),
                line: line.to_owned(),
                time_ms: 0,
            }],
        }))
    }

    fn received(rx: &mut mpsc::Receiver<pb::ExecutorMessage>) -> Vec<u64> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|m| m.seq)
            .collect()
    }

    #[tokio::test]
    async fn reports_stay_kept_until_applied_and_go_again_after_a_reconnect() {
        let dir = tempfile::tempdir().expect("a directory");
        let mut agent = agent(dir.path());
        let key = pb::TaskKey {
            job_id: "job".to_owned(),
            generation: 1,
            role: "worker".to_owned(),
            index: 0,
        };
        agent.tasks.insert(
            key_of(&key),
            LocalTask {
                key: key.clone(),
                spec: pb::TaskSpec::default(),
                address: String::new(),
                phase: Phase::Prepared,
                pid: 0,
                remote: None,
                image: None,
            },
        );
        let (first, mut first_rx) = mpsc::channel(16);
        for line in ["one", "two"] {
            agent.on_event(log(line), Some(&first)).await.expect("sent");
        }
        let exit = exit_report(&key, "exited with status 0".to_owned(), false, false);
        agent.on_event(exit, Some(&first)).await.expect("sent");
        assert_eq!(received(&mut first_rx), [1, 2, 3]);
        // The server applied the first report, then the stream broke.
        agent.applied(1);
        drop(first_rx);
        assert!(
            agent.on_event(log("three"), Some(&first)).await.is_err(),
            "a closed stream is an error"
        );
        // Disconnected: kept, not sent.
        agent.on_event(log("four"), None).await.expect("kept");
        let exited = &agent.tasks[&key_of(&key)];
        assert!(
            matches!(exited.phase, Phase::Exited),
            "listed as exited until its report is applied"
        );
        // The next session sends again everything not applied, in order.
        let (second, mut second_rx) = mpsc::channel(16);
        agent.sent = 0;
        agent.flush(&second).await.expect("sent");
        assert_eq!(received(&mut second_rx), [2, 3, 4, 5]);
        agent.applied(3);
        assert!(
            !agent.tasks.contains_key(&key_of(&key)),
            "forgotten once its exit is applied"
        );
        agent.applied(5);
        assert!(agent.outbox.is_empty());
        // A reconnect after everything was applied sends nothing again.
        agent.sent = 0;
        agent.flush(&second).await.expect("sent");
        assert_eq!(received(&mut second_rx), Vec::<u64>::new());

        // A server that never answers Applied (an older one): a report is forgotten once sent.
        agent.server_answers_applied = false;
        agent
            .on_event(log("five"), Some(&second))
            .await
            .expect("sent");
        assert_eq!(received(&mut second_rx), [6]);
        assert!(agent.outbox.is_empty());
    }

    #[test]
    fn a_dropped_stream_is_told_from_an_unreachable_server() {
        let dropped = anyhow::anyhow!(
            "status: Unknown, message: \"h2 protocol error: error reading a body from connection: Broken pipe (os error 32)\""
        );
        assert!(dropped_stream(&dropped));
        assert!(!dropped_stream(&anyhow::anyhow!("transport error")));
    }
}
