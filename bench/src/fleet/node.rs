//! One emulated executor: enrols its node, keeps one gRPC session with the gateway as a real executor
//! does (Register with its GPUs and the tasks it runs, heartbeats at the interval the server gives,
//! numbered reports), and answers the server's commands for tasks that run no process: a task
//! "runs" for a drawn time, reports a progress metric every few seconds, and on a stop takes the
//! configured checkpoint time, announces the checkpoint and exits. A broken session is counted and
//! opened again, the node re-registering with the tasks it still runs.

use super::tally::Tally;
use drover_proto as pb;
use drover_proto::executor_gateway_client::ExecutorGatewayClient;
use pb::executor_message::Body;
use pb::server_message::Body as Command;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

/// How an emulated node is made and how its tasks behave.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub gateway: String,
    /// The gateway's certificate authority (PEM) for mutual TLS; `None`: plain gRPC.
    pub authority: Option<Arc<String>>,
    pub enrollment_token: String,
    pub gpus: u32,
    /// Tasks run for a draw uniform between half and one and a half times this.
    pub task_duration: Duration,
    /// What a stopped task takes to checkpoint before it exits.
    pub checkpoint_delay: Duration,
    /// A running task reports its step this often.
    pub metrics_every: Duration,
    pub seed: u64,
}

/// A task the node "runs".
#[derive(Debug)]
struct Task {
    key: pb::TaskKey,
    checkpoint_dir: String,
    phase: Phase,
    step: u64,
    next_metrics: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Prepared,
    /// Running until this instant, when it exits by itself.
    Running {
        until: Instant,
    },
    /// Asked to stop: checkpointing until this instant, then it exits.
    Stopping {
        until: Instant,
    },
}

/// The state one emulated executor keeps across its sessions.
pub struct Node {
    pub name: String,
    spec: NodeSpec,
    credential: String,
    /// The node's client certificate and key (PEM), over mutual TLS.
    identity: Option<(String, String)>,
    incarnation: String,
    tasks: HashMap<(String, u64, String, u32), Task>,
    seq: u64,
    rng: rand::rngs::StdRng,
    tally: Arc<Tally>,
}

fn key_of(key: &pb::TaskKey) -> (String, u64, String, u32) {
    (
        key.job_id.clone(),
        key.generation,
        key.role.clone(),
        key.index,
    )
}

/// A channel to the gateway: over mutual TLS when the spec names its authority, presenting
/// `identity` (certificate, key) when given.
async fn connect(
    spec: &NodeSpec,
    identity: Option<&(String, String)>,
) -> anyhow::Result<tonic::transport::Channel> {
    let mut endpoint = tonic::transport::Endpoint::from_shared(spec.gateway.clone())?
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if let Some(authority) = &spec.authority {
        let mut tls = tonic::transport::ClientTlsConfig::new().ca_certificate(
            tonic::transport::Certificate::from_pem(authority.as_bytes()),
        );
        if let Some((certificate, key)) = identity {
            tls = tls.identity(tonic::transport::Identity::from_pem(certificate, key));
        }
        endpoint = endpoint.tls_config(tls)?;
    }
    Ok(endpoint.connect().await?)
}

impl Node {
    /// Enrols node `name` with the enrolment token.
    pub async fn enrol(name: String, spec: NodeSpec, tally: Arc<Tally>) -> anyhow::Result<Node> {
        let mut client = ExecutorGatewayClient::new(connect(&spec, None).await?);
        // Over mutual TLS, a key of the node's own and a request for its certificate, as an
        // executor sends.
        let key = match spec.authority {
            Some(_) => Some(rcgen::KeyPair::generate()?),
            None => None,
        };
        let certificate_request = match &key {
            Some(key) => {
                let mut params = rcgen::CertificateParams::default();
                params.distinguished_name = rcgen::DistinguishedName::new();
                params
                    .distinguished_name
                    .push(rcgen::DnType::CommonName, name.as_str());
                params.serialize_request(key)?.pem()?
            }
            None => String::new(),
        };
        let enrolled = client
            .enroll(pb::EnrollRequest {
                enrollment_token: spec.enrollment_token.clone(),
                node_name: name.clone(),
                certificate_request,
            })
            .await
            .map_err(|status| anyhow::anyhow!("enrolling {name}: {}", status.message()))?
            .into_inner();
        let seed = spec.seed;
        Ok(Node {
            name,
            spec,
            credential: enrolled.credential,
            identity: key.map(|key| (enrolled.certificate, key.serialize_pem())),
            incarnation: uuid::Uuid::new_v4().to_string(),
            tasks: HashMap::new(),
            seq: 0,
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            tally,
        })
    }

    /// Keeps a session open until `stop` turns true, opening it again when it breaks.
    pub async fn run(mut self, mut stop: tokio::sync::watch::Receiver<bool>) {
        while !*stop.borrow() {
            let ended = tokio::select! {
                ended = self.session() => ended,
                _ = stop.changed() => return,
            };
            if let Err(err) = ended {
                self.tally.session_broke(&self.name, &err);
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = stop.changed() => return,
            }
        }
    }

    fn report(&mut self, body: Body) -> pb::ExecutorMessage {
        self.seq += 1;
        pb::ExecutorMessage {
            body: Some(body),
            seq: self.seq,
        }
    }

    fn status(task: &Task) -> pb::TaskStatus {
        pb::TaskStatus {
            task: Some(task.key.clone()),
            phase: match task.phase {
                Phase::Prepared => pb::TaskPhase::Prepared,
                Phase::Running { .. } => pb::TaskPhase::Running,
                Phase::Stopping { .. } => pb::TaskPhase::Stopping,
            } as i32,
            address: String::new(),
            usage: None,
        }
    }

    async fn session(&mut self) -> anyhow::Result<()> {
        let mut client =
            ExecutorGatewayClient::new(connect(&self.spec, self.identity.as_ref()).await?);
        let (outbound, outbound_rx) = mpsc::channel::<pb::ExecutorMessage>(1024);
        let register = pb::Register {
            node_name: self.name.clone(),
            executor_id: format!("fleet-{}", self.name),
            gpus: (0..self.spec.gpus)
                .map(|index| pb::Gpu {
                    index,
                    model: "emulated".to_owned(),
                    memory_gb: 80.0,
                    compute_capability: String::new(),
                })
                .collect(),
            cpus: 4 * self.spec.gpus.max(1),
            memory_gb: 64 * self.spec.gpus.max(1),
            labels: HashMap::new(),
            gpu_source: "emulated".to_owned(),
            tasks: self.tasks.values().map(Self::status).collect(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            incarnation: self.incarnation.clone(),
            isolation: "none".to_owned(),
            runs_images: false,
            taints: Vec::new(),
        };
        outbound
            .send(pb::ExecutorMessage {
                body: Some(Body::Register(register)),
                seq: 0,
            })
            .await?;
        let mut request = tonic::Request::new(ReceiverStream::new(outbound_rx));
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", self.credential).parse()?,
        );
        let mut inbound = client
            .session(request)
            .await
            .map_err(|status| anyhow::anyhow!("session refused: {}", status.message()))?
            .into_inner();
        let heartbeat_every = match inbound.message().await? {
            Some(pb::ServerMessage {
                body: Some(Command::Registered(registered)),
            }) => Duration::from_millis(u64::from(registered.heartbeat_interval_ms.max(100))),
            _ => anyhow::bail!("the server did not acknowledge the registration"),
        };
        self.tally.registered(&self.name);
        let mut heartbeat = tokio::time::interval(heartbeat_every);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = self.next_deadline();
            tokio::select! {
                message = inbound.message() => {
                    let Some(message) = message? else {
                        anyhow::bail!("the server closed the session");
                    };
                    if let Some(command) = message.body {
                        for reply in self.on_command(command) {
                            outbound.send(reply).await?;
                        }
                    }
                }
                _ = heartbeat.tick() => {
                    let beat = pb::Heartbeat {
                        tasks: self.tasks.values().map(Self::status).collect(),
                        gpus: Vec::new(),
                        host: None,
                    };
                    outbound
                        .send(pb::ExecutorMessage { body: Some(Body::Heartbeat(beat)), seq: 0 })
                        .await?;
                }
                () = tokio::time::sleep_until(next) => {
                    for reply in self.on_time(Instant::now()) {
                        outbound.send(reply).await?;
                    }
                }
            }
        }
    }

    /// The earliest instant at which a task has something to do.
    fn next_deadline(&self) -> Instant {
        self.tasks
            .values()
            .flat_map(|task| match task.phase {
                Phase::Prepared => None,
                Phase::Running { until } => Some(until.min(task.next_metrics)),
                Phase::Stopping { until } => Some(until),
            })
            .min()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))
    }

    fn update(&mut self, key: &pb::TaskKey, event: pb::task_update::Event) -> pb::ExecutorMessage {
        self.report(Body::TaskUpdate(pb::TaskUpdate {
            task: Some(key.clone()),
            event: Some(event),
        }))
    }

    fn on_command(&mut self, command: Command) -> Vec<pb::ExecutorMessage> {
        match command {
            Command::Prepare(prepare) => {
                let (Some(key), Some(spec)) = (prepare.task, prepare.spec) else {
                    return Vec::new();
                };
                let reply = self.update(
                    &key,
                    pb::task_update::Event::Prepared(pb::Prepared {
                        address: format!("{}:0", self.name),
                    }),
                );
                self.tasks.entry(key_of(&key)).or_insert(Task {
                    checkpoint_dir: spec.checkpoint_dir,
                    key,
                    phase: Phase::Prepared,
                    step: spec.resume_step,
                    next_metrics: Instant::now(),
                });
                vec![reply]
            }
            Command::Start(start) => {
                let Some(key) = start.task else {
                    return Vec::new();
                };
                let Some(phase) = self.tasks.get(&key_of(&key)).map(|t| t.phase) else {
                    return Vec::new();
                };
                if phase == Phase::Prepared {
                    let half = self.spec.task_duration / 2;
                    let runs = half + self.spec.task_duration.mul_f64(self.rng.random::<f64>());
                    let now = Instant::now();
                    // A task's first report comes at a point of its own in the interval: tasks
                    // started together do not report in step (real ones drift apart by their
                    // step times; in step, 6,000 reports landed within a second every 10 s).
                    let first = self.spec.metrics_every.mul_f64(self.rng.random::<f64>());
                    if let Some(task) = self.tasks.get_mut(&key_of(&key)) {
                        task.phase = Phase::Running { until: now + runs };
                        task.next_metrics = now + first;
                    }
                    self.tally.started(&key);
                }
                vec![self.update(
                    &key,
                    pb::task_update::Event::Started(pb::Started { pid: 1 }),
                )]
            }
            Command::Stop(stop) => {
                let Some(key) = stop.task else {
                    return Vec::new();
                };
                let delay = self.spec.checkpoint_delay;
                match self.tasks.get_mut(&key_of(&key)) {
                    Some(task) if matches!(task.phase, Phase::Running { .. }) => {
                        task.phase = Phase::Stopping {
                            until: Instant::now() + delay,
                        };
                        Vec::new()
                    }
                    Some(task) if task.phase == Phase::Prepared => {
                        self.tasks.remove(&key_of(&key));
                        vec![self.exited(&key, true, "stopped before it started")]
                    }
                    _ => Vec::new(),
                }
            }
            Command::Checkpoint(request) => {
                let Some(key) = request.task else {
                    return Vec::new();
                };
                match self.tasks.get(&key_of(&key)) {
                    Some(task) if matches!(task.phase, Phase::Running { .. }) => {
                        let (dir, step) = (task.checkpoint_dir.clone(), task.step);
                        vec![self.checkpoint(&key, &dir, step)]
                    }
                    _ => Vec::new(),
                }
            }
            Command::Refused(refused) => {
                self.tally.refused(&refused.reason);
                if let Some(key) = refused.task
                    && let Some(task) = self.tasks.remove(&key_of(&key))
                    && task.phase != Phase::Prepared
                {
                    self.tally.ended();
                }
                Vec::new()
            }
            Command::Registered(_) | Command::Applied(_) => Vec::new(),
        }
    }

    fn checkpoint(&mut self, key: &pb::TaskKey, dir: &str, step: u64) -> pb::ExecutorMessage {
        self.report(Body::Checkpoint(pb::Checkpoint {
            task: Some(key.clone()),
            step,
            path: format!("{dir}/step-{step}"),
            size_bytes: 1 << 20,
        }))
    }

    fn exited(&mut self, key: &pb::TaskKey, stopped: bool, message: &str) -> pb::ExecutorMessage {
        self.update(
            key,
            pb::task_update::Event::Exited(pb::Exited {
                exit_code: Some(0),
                signal: None,
                stop_requested: stopped,
                message: message.to_owned(),
                spawn_failed: false,
                last_lines: Vec::new(),
                out_of_memory: false,
            }),
        )
    }

    /// What the tasks do by `now`: report a step, finish, or end a checkpoint and exit.
    fn on_time(&mut self, now: Instant) -> Vec<pb::ExecutorMessage> {
        let mut replies = Vec::new();
        let due: Vec<(String, u64, String, u32)> = self
            .tasks
            .iter()
            .filter(|(_, task)| match task.phase {
                Phase::Prepared => false,
                Phase::Running { until } => until <= now || task.next_metrics <= now,
                Phase::Stopping { until } => until <= now,
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            let Some(task) = self.tasks.get_mut(&k) else {
                continue;
            };
            match task.phase {
                Phase::Running { until } if until <= now => {
                    let key = task.key.clone();
                    self.tasks.remove(&k);
                    self.tally.ended();
                    replies.push(self.exited(&key, false, "finished"));
                }
                Phase::Running { .. } => {
                    task.step += 100;
                    // ±10%: step times vary.
                    let jitter = 0.9 + 0.2 * self.rng.random::<f64>();
                    task.next_metrics = now + self.spec.metrics_every.mul_f64(jitter);
                    let metrics = pb::Metrics {
                        task: Some(task.key.clone()),
                        step: task.step,
                        values: HashMap::from([("loss".to_owned(), 1.0 / task.step as f64)]),
                        time_ms: chrono_ms(),
                    };
                    replies.push(self.report(Body::Metrics(metrics)));
                }
                Phase::Stopping { .. } => {
                    let (key, dir, step) =
                        (task.key.clone(), task.checkpoint_dir.clone(), task.step);
                    self.tasks.remove(&k);
                    replies.push(self.checkpoint(&key, &dir, step));
                    replies.push(self.exited(&key, true, "checkpointed and stopped"));
                    self.tally.ended();
                    self.tally.stopped();
                }
                Phase::Prepared => {}
            }
        }
        replies
    }
}

/// Milliseconds since the Unix epoch.
fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
