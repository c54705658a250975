//! The executor gateway: a tonic service every executor dials and keeps one bidirectional stream open
//! on. Executors need no inbound port. On registration the server compares the tasks the executor
//! still runs with the tasks the store says it should run, stops the ones that must not run, and
//! declares lost the ones the executor no longer has.

use super::Runtime;
use super::hub::COMMAND_QUEUE;

/// Reports read from one executor and not yet applied, at most.
const REPORT_QUEUE: usize = 4096;
/// How long a new session may take to send its Register.
const REGISTER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);
use super::reports::from_pb_key;
use chrono::Utc;
use drover_core::{JobState, ReasonCode};
use drover_proto as pb;
use drover_proto::executor_gateway_server::{ExecutorGateway, ExecutorGatewayServer};
use drover_store::{Gpu, NodeRegistration, Scope, StoreResult, Task, TaskChange, TaskState};
use pb::executor_message::Body;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

#[derive(Debug, Clone)]
pub struct GatewayService {
    runtime: Arc<Runtime>,
}

impl GatewayService {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Self { runtime }
    }

    pub fn into_server(self) -> ExecutorGatewayServer<Self> {
        ExecutorGatewayServer::new(self)
    }
}

fn validate_registration(register: &pb::Register) -> Result<(), Status> {
    super::enrol::validate_node_name(&register.node_name)?;
    if register.gpus.len() > 64 {
        return Err(Status::invalid_argument("gpus: at most 64 per node"));
    }
    if register.cpus > 1 << 16 || register.memory_gb > 1 << 20 {
        return Err(Status::invalid_argument(
            "cpus and memory_gb: at most 65536 CPUs and 1048576 GB",
        ));
    }
    if register
        .gpus
        .iter()
        .any(|g| !(0.0..=1e6).contains(&g.memory_gb))
    {
        return Err(Status::invalid_argument(
            "gpus.memory_gb: between 0 and 1e6",
        ));
    }
    let texts = register
        .labels
        .iter()
        .flat_map(|(key, value)| [key, value])
        .chain(register.gpus.iter().map(|g| &g.model))
        .chain(register.taints.iter().flat_map(|t| [&t.key, &t.value]))
        .chain([&register.gpu_source, &register.version]);
    for text in texts {
        if text.len() > 256 || text.contains('\0') {
            return Err(Status::invalid_argument(
                "labels, gpus.model, gpu_source and version: at most 256 bytes, no NUL",
            ));
        }
    }
    if register.labels.len() > 64 {
        return Err(Status::invalid_argument("labels: at most 64"));
    }
    if register.taints.len() > 64 {
        return Err(Status::invalid_argument("taints: at most 64"));
    }
    Ok(())
}

#[tonic::async_trait]
impl ExecutorGateway for GatewayService {
    type SessionStream = ReceiverStream<Result<pb::ServerMessage, Status>>;

    async fn enroll(
        &self,
        request: Request<pb::EnrollRequest>,
    ) -> Result<Response<pb::EnrollResponse>, Status> {
        crate::enrol::enroll(&self.runtime, request.get_ref())
            .await
            .map(Response::new)
    }

    async fn renew_certificate(
        &self,
        request: Request<pb::RenewCertificateRequest>,
    ) -> Result<Response<pb::RenewCertificateResponse>, Status> {
        crate::enrol::renew_certificate(&self.runtime, &request)
            .await
            .map(Response::new)
    }

    async fn session(
        &self,
        request: Request<Streaming<pb::ExecutorMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let authenticated =
            crate::enrol::authenticate_node(&self.runtime, request.metadata()).await?;
        crate::enrol::check_certificate(&self.runtime, &request, &authenticated)?;
        let (node, credential) = (authenticated.name, authenticated.hash);
        if !self.runtime.is_leader() {
            return Err(redirect(&self.runtime).await);
        }
        let peer = request
            .remote_addr()
            .map_or_else(|| "an unknown address".to_owned(), |a| a.ip().to_string());
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(REGISTER_WITHIN, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no Register within 10 s"))??
            .ok_or_else(|| Status::invalid_argument("the stream ended before Register"))?;
        let Some(Body::Register(register)) = first.body else {
            return Err(Status::failed_precondition(
                "the first message must be Register",
            ));
        };
        validate_registration(&register)?;
        if register.node_name != node {
            tracing::warn!(
                node.name = node,
                claimed = register.node_name,
                "refused a registration under another node's name"
            );
            return Err(Status::permission_denied(format!(
                "this credential is node `{node}`'s; it cannot register as `{}`",
                register.node_name
            )));
        }
        // One session per node: a second executor process presenting a live node's credential is
        // refused, not let in to displace the first (a stolen credential would otherwise take the
        // node over, and its tasks' reports with it).
        let live_within = self.runtime.config.executor_timeout;
        if let Some(occupied) = self
            .runtime
            .hub
            .occupied(&node, &register.incarnation, live_within)
        {
            return Err(refuse_second_session(&node, &peer, &occupied));
        }
        check_capacity(&self.runtime, &node, &credential, &register).await?;
        let runtime = self.runtime.clone();
        let name = register.node_name.clone();
        let registration = NodeRegistration {
            name: name.clone(),
            labels: register.labels.clone().into_iter().collect(),
            gpus: register
                .gpus
                .iter()
                .map(|g| Gpu {
                    index: g.index,
                    model: g.model.clone(),
                    memory_gb: g.memory_gb,
                })
                .collect(),
            cpus: register.cpus,
            memory_gb: register.memory_gb,
            gpu_source: register.gpu_source.clone(),
            isolation: register.isolation.clone(),
            runs_images: register.runs_images,
            taints: register
                .taints
                .iter()
                .map(|t| drover_store::Taint {
                    key: t.key.clone(),
                    value: t.value.clone(),
                })
                .collect(),
        };
        runtime
            .store
            .register_node(&registration, Utc::now())
            .await
            .map_err(|err| {
                tracing::error!(node.name = name, error = %err, "cannot record an executor's registration");
                Status::unavailable("the server cannot record the registration; retry")
            })?;
        let (commands, receiver) = mpsc::channel(COMMAND_QUEUE);
        let registered = pb::ServerMessage {
            body: Some(pb::server_message::Body::Registered(pb::Registered {
                node_name: name.clone(),
                checkpoint_root: runtime.config.checkpoint_root.display().to_string(),
                heartbeat_interval_ms: super::dispatch::duration_ms(
                    runtime.config.heartbeat_interval,
                ),
                applied_through: runtime
                    .applied
                    .applied_through(&name, &register.incarnation),
                answers_applied: true,
            })),
        };
        commands
            .send(Ok(registered))
            .await
            .map_err(|_| Status::cancelled("the executor went away"))?;
        let gpu_model = register
            .gpus
            .first()
            .map(|g| g.model.clone())
            .unwrap_or_else(|| "cpu".to_owned());
        // What the executor still runs is settled before the scheduling loop can send it anything.
        let corrections = resync(&runtime, &name, &register.tasks).await.map_err(|err| {
            tracing::error!(node.name = name, error = %err, "cannot resynchronise an executor's tasks");
            Status::unavailable("the server cannot resynchronise this executor; retry")
        })?;
        for correction in corrections {
            commands
                .send(Ok(correction))
                .await
                .map_err(|_| Status::cancelled("the executor went away"))?;
        }
        let session = runtime
            .hub
            .connect(
                &name,
                commands,
                gpu_model,
                &register.incarnation,
                peer.clone(),
                live_within,
            )
            .map_err(|occupied| refuse_second_session(&name, &peer, &occupied))?;
        // A revocation between the credential check and this connection would find no session to
        // end: look again now that the session is there for it to find.
        // Leadership may have moved while this session was being set up.
        if !runtime.is_leader() {
            runtime.hub.disconnect(&name, session);
            return Err(redirect(&runtime).await);
        }
        if !crate::enrol::credential_live(&runtime, &credential).await? {
            runtime.hub.disconnect(&name, session);
            return Err(Status::unauthenticated(format!(
                "the credential of node `{name}` was revoked"
            )));
        }
        tracing::info!(
            node.name = name,
            gpus = register.gpus.len(),
            source = register.gpu_source,
            tasks = register.tasks.len(),
            "executor registered"
        );
        // Reading (and so liveness) does not wait for the store: reports queue for the applier.
        let (reports, pending_reports) = mpsc::channel::<crate::delivery::Report>(REPORT_QUEUE);
        let reader_runtime = runtime.clone();
        let reader_name = name.clone();
        tokio::spawn(async move {
            let (runtime, name) = (reader_runtime, reader_name);
            loop {
                match inbound.message().await {
                    Ok(Some(message)) => {
                        if !runtime.hub.is_current(&name, session) {
                            break;
                        }
                        runtime.hub.touch(&name, session);
                        let Some(body) = message.body else { continue };
                        if let Body::Heartbeat(heartbeat) = &body {
                            runtime.hub.set_usage(&name, session, heartbeat);
                        }
                        if reports.send((message.seq, body)).await.is_err() {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(status) => {
                        tracing::info!(node.name = name, status = %status, "executor stream broke");
                        break;
                    }
                }
            }
            runtime.hub.disconnect(&name, session);
            tracing::info!(node.name = name, "executor disconnected");
            runtime.hub.wake.notify_one();
        });
        tokio::spawn(crate::delivery::apply(
            runtime,
            name,
            session,
            register.incarnation,
            pending_reports,
        ));
        self.runtime.hub.wake.notify_one();
        Ok(Response::new(ReceiverStream::new(receiver)))
    }
}

/// A node advertises no more than its credential's first registration did (GPUs, GPU memory, CPUs,
/// host memory): a stolen credential cannot inflate the node to attract jobs (and their secrets).
/// Less is fine (a GPU fell off the bus); more needs the node enrolled again.
async fn check_capacity(
    runtime: &Runtime,
    node: &str,
    credential: &[u8; 32],
    register: &pb::Register,
) -> Result<(), Status> {
    let claimed = drover_store::NodeCapacity {
        gpus: register.gpus.len() as u32,
        gpu_memory_gb: register
            .gpus
            .iter()
            .map(|g| g.memory_gb)
            .fold(0.0, f64::max),
        cpus: register.cpus,
        memory_gb: register.memory_gb,
    };
    let pinned = runtime
        .store
        .pin_node_capacity(credential, &claimed)
        .await
        .map_err(|err| {
            tracing::error!(node.name = node, error = %err, "cannot check a node's capacity");
            Status::unavailable("the server cannot check this node's capacity now; retry")
        })?;
    match claimed.beyond(&pinned) {
        None => Ok(()),
        Some(beyond) => {
            tracing::warn!(
                node.name = node,
                beyond,
                "refused a registration that advertises more than the node was enrolled with"
            );
            Err(Status::permission_denied(format!(
                "node `{node}` advertises {beyond}: a node advertises no more than at its first registration. If its hardware grew, enrol it again (drover node revoke {node}; drover enrollment-token create NAME --node {node})"
            )))
        }
    }
}

/// Refuses a second session for `node` while another executor process holds a live one, and tells
/// the operator: either the node restarted while its old session is not yet timed out (it gets in
/// once that session goes quiet), or someone else holds the node's credential.
fn refuse_second_session(node: &str, peer: &str, occupied: &crate::hub::Occupied) -> Status {
    tracing::warn!(
        node.name = node,
        peer,
        live.peer = occupied.peer,
        live.heard_ms = occupied.heard.as_millis() as u64,
        "refused a second executor session with a live node's credential: if the node did not just restart, its credential may be stolen (drover node revoke)"
    );
    Status::already_exists(format!(
        "node `{node}` already has a live session (from {}, heard {} ms ago): a node's credential opens one session at a time; a restarted executor gets in once the old session goes quiet",
        occupied.peer,
        occupied.heard.as_millis()
    ))
}

/// What a replica that does not lead answers a session: where the leader is, when it is known.
async fn redirect(runtime: &Runtime) -> Status {
    let mut status = Status::unavailable("this server replica does not lead; go to the leader");
    match runtime.store.leader().await {
        Ok(Some(leader)) => {
            if let Ok(value) = leader.gateway.parse() {
                status
                    .metadata_mut()
                    .insert(drover_proto::LEADER_METADATA, value);
            }
        }
        Ok(None) => {}
        Err(err) => tracing::warn!(error = %err, "cannot read where the leader is"),
    }
    status
}

/// Compares what a (re)registering executor runs with what it should run; returns the commands
/// that stop what must not run.
async fn resync(
    runtime: &Runtime,
    node: &str,
    reported: &[pb::TaskStatus],
) -> StoreResult<Vec<pb::ServerMessage>> {
    let mut corrections = Vec::new();
    let live: Vec<Task> = runtime.store.live_tasks_on(node).await?;
    let mut seen = BTreeSet::new();
    for status in reported {
        let Some(key) = from_pb_key(status.task.as_ref()) else {
            continue;
        };
        seen.insert(key);
        match live.iter().find(|t| t.key == key) {
            Some(task) => {
                let running = status.phase == pb::TaskPhase::Running as i32;
                if running && matches!(task.state, TaskState::Assigned | TaskState::Prepared) {
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
            }
            None => {
                tracing::warn!(task = %key, node.name = node, "executor runs a task that is not current; stopping it");
                corrections.extend(super::reports::refusal(
                    key,
                    "this task is not part of the job's current generation",
                ));
            }
        }
    }
    let gone: Vec<Task> = live
        .into_iter()
        .filter(|t| !seen.contains(&t.key) && t.state != TaskState::Assigned)
        .collect();
    if !gone.is_empty() {
        for task in &gone {
            let state = if task.stop_requested {
                TaskState::Exited
            } else {
                TaskState::Lost
            };
            runtime
                .store
                .update_task(
                    &task.key,
                    &TaskChange {
                        state: Some(state),
                        message: Some("the executor restarted without it".to_owned()),
                        ..TaskChange::default()
                    },
                )
                .await?;
        }
        requeue_after_loss(
            runtime,
            &gone,
            &format!("the executor on {node} restarted and lost its tasks"),
        )
        .await?;
    }
    Ok(corrections)
}

/// Sends every job that lost tasks of its current generation back to `queued`.
pub(super) async fn requeue_after_loss(
    runtime: &Runtime,
    lost: &[Task],
    why: &str,
) -> StoreResult<()> {
    let jobs: BTreeSet<(drover_core::JobId, u64)> = lost
        .iter()
        .map(|t| (t.key.job_id, t.key.generation))
        .collect();
    for (job_id, generation) in jobs {
        let job = match runtime.store.get_job(Scope::Cluster, job_id).await {
            Ok(job) => job,
            Err(drover_store::StoreError::NotFound) => continue,
            Err(err) => return Err(err),
        };
        if job.generation != generation || !super::dispatch::is_active(job.state) {
            continue;
        }
        if let Some(job) = crate::transition::transition(
            runtime,
            &job,
            JobState::Queued,
            ReasonCode::ExecutorLost,
            why.to_owned(),
            false,
        )
        .await?
        {
            tracing::warn!(job.id = %job.id, generation, why, "job back to queued");
            let live: Vec<Task> = runtime
                .store
                .generation_tasks(job_id, generation)
                .await?
                .into_iter()
                .filter(|t| !t.state.is_final())
                .collect();
            crate::dispatch::reconcile_job(runtime, &job, &live).await?;
        }
    }
    runtime.hub.wake.notify_one();
    Ok(())
}
