//! The agent's state (`Agent`), kept across sessions with the server: its setup, its id, the tasks it
//! holds, the reports not yet applied by the server, its credential, the gateways it tries, the
//! checkpoint storage, and the channels its tasks and downloads report on. The session (the parent
//! module) and the server's commands (`commands`) both work on it.

use super::gateways::gateway_addresses;
use super::local::{Key, LocalTask};
use super::storage_phase::{Fetched, Storage};
use crate::config::ExecutorConfig;
use crate::credential;
use crate::gpu::UsageProbe;
use drover_proto as pb;
use std::collections::{HashMap, VecDeque};
use tokio::sync::mpsc;

/// Reads (or creates) the executor's persistent id in its data directory.
fn executor_id(data_dir: &std::path::Path) -> std::io::Result<String> {
    let path = data_dir.join("executor-id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_owned()),
        _ => {
            let id = uuid::Uuid::new_v4().to_string();
            std::fs::write(&path, &id)?;
            Ok(id)
        }
    }
}

/// An executor's agent: what it keeps across sessions with the server.
#[derive(Debug)]
pub struct Agent {
    pub(super) config: ExecutorConfig,
    pub(super) executor_id: String,
    pub(super) tasks: HashMap<Key, LocalTask>,
    pub(super) events_tx: mpsc::Sender<pb::ExecutorMessage>,
    pub(super) events_rx: mpsc::Receiver<pb::ExecutorMessage>,
    /// Task reports not yet applied by the server, in sequence order ([`Agent::applied`]).
    pub(super) outbox: VecDeque<pb::ExecutorMessage>,
    /// How many of `outbox` the current session has sent.
    pub(super) sent: usize,
    /// The next report's sequence number.
    pub(super) next_seq: u64,
    /// Whether the server of the current session answers `Applied` (see `Agent::flush`).
    pub(super) server_answers_applied: bool,
    /// This run of the executor process: the sequence numbers belong to it.
    pub(super) incarnation: String,
    pub(super) dropped: u64,
    pub(super) usage: UsageProbe,
    /// The host's CPU and memory use, between heartbeats.
    pub(super) host: crate::host::HostProbe,
    /// Each running task's CPU and memory, for the heartbeat.
    pub(super) task_use: crate::task_use::TaskProbe,
    /// The node's credential, once enrolled.
    pub(super) credential: Option<String>,
    /// Where the server's replicas are (`--gateway`, comma-separated); tried in turn.
    pub(super) gateways: Vec<String>,
    pub(super) next_gateway: usize,
    /// Where a replica that does not lead said the leader is: tried first, once.
    pub(super) redirect: Option<String>,
    /// The checkpoint storage the server named, when it is an object store; or why it cannot be used.
    pub(super) remote: Storage,
    pub(super) fetched_tx: mpsc::Sender<Fetched>,
    pub(super) fetched_rx: mpsc::Receiver<Fetched>,
}

impl Agent {
    pub fn new(config: ExecutorConfig) -> anyhow::Result<Self> {
        std::fs::create_dir_all(config.data_dir.join("tasks"))?;
        let executor_id = executor_id(&config.data_dir)?;
        let (events_tx, events_rx) = mpsc::channel(4096);
        let (fetched_tx, fetched_rx) = mpsc::channel(64);
        let usage = UsageProbe::new(config.source);
        let credential = credential::load(&config.data_dir)?;
        let gateways = gateway_addresses(&config.server)?;
        Ok(Self {
            gateways,
            next_gateway: 0,
            redirect: None,
            config,
            executor_id,
            tasks: HashMap::new(),
            events_tx,
            events_rx,
            outbox: VecDeque::new(),
            sent: 0,
            next_seq: 1,
            server_answers_applied: true,
            incarnation: uuid::Uuid::new_v4().to_string(),
            dropped: 0,
            usage,
            host: crate::host::HostProbe::default(),
            task_use: crate::task_use::TaskProbe::default(),
            credential,
            remote: Storage::default(),
            fetched_tx,
            fetched_rx,
        })
    }
}
