//! The executor's session with the server: dial out, register with the inventory and the tasks still
//! running, then heartbeat, carry out commands and forward what tasks report. When the stream breaks it
//! reconnects with backoff and registers again; its tasks keep running meanwhile, and what they report
//! is kept (bounded) until the server is back.

use crate::credential;
use drover_proto as pb;
use drover_proto::executor_gateway_client::ExecutorGatewayClient;
use local::{LocalTask, Phase, exit_key, key_of, msg};
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

    fn keep(&mut self, message: pb::ExecutorMessage) {
        let droppable = matches!(message.body, Some(Body::Logs(_) | Body::Metrics(_)));
        if droppable && self.pending.len() >= MAX_PENDING {
            self.dropped += 1;
            return;
        }
        self.pending.push_back(message);
    }

    /// Marks a task whose exit is reported as exited (it stays listed until the report is delivered, so
    /// a re-registration says it exited rather than that it vanished).
    fn note_exit(&mut self, event: &pb::ExecutorMessage) {
        if let Some(key) = exit_key(event)
            && let Some(task) = self.tasks.get_mut(&key_of(key))
        {
            task.phase = Phase::Exited;
        }
    }

    /// Forwards a task's report in order (waiting while the stream is full), or keeps it (bounded) while
    /// disconnected. Reports queued earlier always go first.
    async fn on_event(
        &mut self,
        event: pb::ExecutorMessage,
        outbound: Option<&mpsc::Sender<pb::ExecutorMessage>>,
    ) -> anyhow::Result<()> {
        self.note_exit(&event);
        let Some(outbound) = outbound else {
            self.keep(event);
            return Ok(());
        };
        self.flush(outbound).await?;
        let exited = exit_key(&event).map(key_of);
        let sent = outbound.send(event).await;
        match sent {
            Ok(()) => {
                // Handed to the stream: an exited task is forgotten.
                if let Some(key) = exited {
                    self.tasks.remove(&key);
                }
                Ok(())
            }
            Err(mpsc::error::SendError(event)) => {
                self.keep(event);
                anyhow::bail!("the stream to the server closed")
            }
        }
    }

    /// Sends what was kept while disconnected; on failure the unsent report stays first in line.
    async fn flush(&mut self, outbound: &mpsc::Sender<pb::ExecutorMessage>) -> anyhow::Result<()> {
        while let Some(message) = self.pending.pop_front() {
            let exited = exit_key(&message).map(key_of);
            match outbound.send(message).await {
                Ok(()) => {
                    if let Some(key) = exited {
                        self.tasks.remove(&key);
                    }
                }
                Err(mpsc::error::SendError(message)) => {
                    self.pending.push_front(message);
                    anyhow::bail!("the stream to the server closed");
                }
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
        // Keepalives notice a server that went silent (a partition, a dead host) within seconds; the
        // executor then reconnects, to it or to another replica.
        let channel = tonic::transport::Endpoint::from_shared(target.clone())?
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true)
            .connect()
            .await?;
        let mut client = ExecutorGatewayClient::new(channel)
            .max_decoding_message_size(drover_proto::MAX_MESSAGE_BYTES);
        let (outbound, outbound_rx) = mpsc::channel::<pb::ExecutorMessage>(1024);
        let register = pb::Register {
            node_name: self.config.name.clone(),
            executor_id: self.executor_id.clone(),
            gpus: self.config.gpus.iter().map(pb::Gpu::from).collect(),
            cpus: self.config.cpus,
            memory_gb: self.config.memory_gb,
            labels: self.config.labels.clone().into_iter().collect(),
            gpu_source: self.config.source.as_str().to_owned(),
            tasks: self.tasks.values().map(LocalTask::status).collect(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        outbound.send(msg(Body::Register(register))).await?;
        let mut request = tonic::Request::new(ReceiverStream::new(outbound_rx));
        let secret = match &self.credential {
            Some(secret) => secret.clone(),
            None => {
                let secret = credential::enroll(&mut client, &self.config).await?;
                self.credential = Some(secret.clone());
                secret
            }
        };
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
                    let beat = pb::Heartbeat {
                        gpus: self.usage.sample(&self.config.gpus),
                        tasks: self.tasks.values().map(LocalTask::status).collect(),
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
    use super::dropped_stream;

    #[test]
    fn a_dropped_stream_is_told_from_an_unreachable_server() {
        let dropped = anyhow::anyhow!(
            "status: Unknown, message: \"h2 protocol error: error reading a body from connection: Broken pipe (os error 32)\""
        );
        assert!(dropped_stream(&dropped));
        assert!(!dropped_stream(&anyhow::anyhow!("transport error")));
    }
}
