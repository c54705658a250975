//! The connected executors, in memory: each one's command channel, session and when it was last heard
//! from. Rebuilt at start-up from nothing: executors reconnect and re-register, and a node that still
//! has live tasks in the store but does not come back within the heartbeat timeout is declared lost.

use drover_proto::ServerMessage;
use drover_store::TaskKey;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc};
use tonic::Status;

/// Commands queued to one executor at most; an executor that does not read them is disconnected.
pub const COMMAND_QUEUE: usize = 256;

pub type CommandSender = mpsc::Sender<Result<ServerMessage, Status>>;

/// Which command a task was sent, so a round does not resend it within one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Prepare,
    Start,
    Stop,
}

#[derive(Debug)]
struct Executor {
    session: u64,
    /// `None` once the stream ended; the entry stays so the node is declared lost if it stays away.
    commands: Option<CommandSender>,
    last_seen: Instant,
    gpu_model: String,
    sent: HashSet<(TaskKey, Command)>,
    /// GPU utilisation and memory from the last heartbeat.
    usage: Vec<drover_proto::GpuUsage>,
    /// The host's CPU and memory use from the last heartbeat.
    host: Option<drover_proto::HostUsage>,
    /// Recent use, a point every [`HISTORY_EVERY`] at most, the last [`HISTORY_POINTS`].
    history: std::collections::VecDeque<UsagePoint>,
    /// Each running task's use from the last heartbeat, and its recent history.
    tasks: HashMap<TaskUseKey, TaskUse>,
    /// The executor process of the session (random at each start of it) and where it connects from.
    incarnation: String,
    peer: String,
    /// The tasks its heartbeats named (a digest) when the store last expected them all, and when.
    tasks_checked: Option<(u64, Instant)>,
}

/// A heartbeat naming the same tasks as the last one the store was read for is checked again
/// after this long at the latest (the store's side may change without the executor's: a server
/// that lost a task's record).
pub const TASKS_RECHECKED_EVERY: Duration = Duration::from_secs(30);

/// Another executor process holds the node's live session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupied {
    /// Where that session comes from.
    pub peer: String,
    /// How long ago it was last heard from.
    pub heard: Duration,
}

/// A task as its executor's heartbeat names it: job id, generation, role, index.
type TaskUseKey = (String, u64, String, u32);

fn task_use_key(key: &drover_proto::TaskKey) -> TaskUseKey {
    (
        key.job_id.clone(),
        key.generation,
        key.role.clone(),
        key.index,
    )
}

/// How often a node's recent use gains a point, and how many are kept (15 minutes).
pub const HISTORY_EVERY: Duration = Duration::from_secs(10);
pub const HISTORY_POINTS: usize = 90;

/// A node's use at one moment: what its heartbeat said, GPUs averaged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsagePoint {
    pub at: chrono::DateTime<chrono::Utc>,
    /// Busy share of its CPUs, 0 to 1; `None` when unknown.
    pub cpu: Option<f64>,
    pub memory_used_gb: Option<f64>,
    /// Mean utilisation of its GPUs, 0 to 1; `None` when unknown (no NVML).
    pub gpu: Option<f64>,
    pub gpu_memory_used_gb: Option<f64>,
}

impl UsagePoint {
    fn of(
        at: chrono::DateTime<chrono::Utc>,
        gpus: &[drover_proto::GpuUsage],
        host: Option<&drover_proto::HostUsage>,
    ) -> Self {
        let known: Vec<f64> = gpus
            .iter()
            .map(|g| g.utilization)
            .filter(|u| *u >= 0.0)
            .collect();
        UsagePoint {
            at,
            cpu: host.map(|h| h.cpu_utilization).filter(|c| *c >= 0.0),
            memory_used_gb: host
                .filter(|h| h.memory_total_gb > 0.0)
                .map(|h| h.memory_used_gb),
            gpu: (!known.is_empty()).then(|| known.iter().sum::<f64>() / known.len() as f64),
            gpu_memory_used_gb: (!gpus.is_empty())
                .then(|| gpus.iter().map(|g| g.memory_used_gb).sum()),
        }
    }
}

/// A task's use at one moment, as its executor measured it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskPoint {
    pub at: chrono::DateTime<chrono::Utc>,
    pub usage: drover_proto::TaskUsage,
}

/// A running task's use: the last heartbeat's, and a point every [`HISTORY_EVERY`] (the node's
/// moments), the last [`HISTORY_POINTS`].
#[derive(Debug)]
struct TaskUse {
    latest: drover_proto::TaskUsage,
    history: std::collections::VecDeque<TaskPoint>,
}

#[derive(Debug, Default)]
pub struct Hub {
    executors: Mutex<HashMap<String, Executor>>,
    /// Sessions ended by a revocation: what they sent and is still queued is not applied.
    kicked: Mutex<HashSet<u64>>,
    next_session: AtomicU64,
    /// Wakes the scheduling loop.
    pub wake: Notify,
}

impl Hub {
    pub fn new() -> Self {
        Self::default()
    }

    fn executors(&self) -> std::sync::MutexGuard<'_, HashMap<String, Executor>> {
        // A panic while holding this lock leaves plain data behind; keep serving.
        self.executors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a new session for `node`, replacing (and so closing) any earlier one.
    /// Whether another executor process than `incarnation` holds `node`'s session and was heard from
    /// within `live_within`: a node's credential opens one session at a time.
    pub fn occupied(
        &self,
        node: &str,
        incarnation: &str,
        live_within: Duration,
    ) -> Option<Occupied> {
        let executors = self.executors();
        let executor = executors.get(node)?;
        let live = executor.commands.as_ref().is_some_and(|c| !c.is_closed())
            && executor.last_seen.elapsed() < live_within;
        (live && executor.incarnation != incarnation).then(|| Occupied {
            peer: executor.peer.clone(),
            heard: executor.last_seen.elapsed(),
        })
    }

    /// Makes this the node's session, unless another executor process holds a live one (see
    /// [`Hub::occupied`]); the same process reconnecting replaces its own earlier session.
    pub fn connect(
        &self,
        node: &str,
        commands: CommandSender,
        gpu_model: String,
        incarnation: &str,
        peer: String,
        live_within: Duration,
    ) -> Result<u64, Occupied> {
        let mut executors = self.executors();
        if let Some(executor) = executors.get(node) {
            let live = executor.commands.as_ref().is_some_and(|c| !c.is_closed())
                && executor.last_seen.elapsed() < live_within;
            if live && executor.incarnation != incarnation {
                return Err(Occupied {
                    peer: executor.peer.clone(),
                    heard: executor.last_seen.elapsed(),
                });
            }
        }
        let session = self.next_session.fetch_add(1, Ordering::Relaxed) + 1;
        executors.insert(
            node.to_owned(),
            Executor {
                session,
                commands: Some(commands),
                last_seen: Instant::now(),
                gpu_model,
                sent: HashSet::new(),
                usage: Vec::new(),
                host: None,
                history: std::collections::VecDeque::new(),
                tasks: HashMap::new(),
                incarnation: incarnation.to_owned(),
                peer,
                tasks_checked: None,
            },
        );
        Ok(session)
    }

    /// The stream of `session` ended. The node stays known until its heartbeat timeout passes.
    pub fn disconnect(&self, node: &str, session: u64) {
        if let Some(executor) = self.executors().get_mut(node)
            && executor.session == session
        {
            executor.commands = None;
        }
    }

    /// Ends `node`'s session now (its credential was revoked): its command stream closes, and nothing
    /// it sends is read any more. The node is declared lost once its heartbeat timeout passes.
    pub fn kick(&self, node: &str) {
        if let Some(executor) = self.executors().get_mut(node) {
            executor.commands = None;
            self.kicked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(executor.session);
        }
    }

    /// Forgets every executor (this replica starts to lead): what an earlier term knew is stale, and
    /// each node is expected afresh from now on.
    pub fn reset(&self) {
        self.executors().clear();
        self.kicked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }

    /// Ends every session (this replica no longer leads); the nodes stay known, as after a disconnect.
    pub fn disconnect_all(&self) {
        for executor in self.executors().values_mut() {
            executor.commands = None;
        }
    }

    /// Whether `session` was ended by a revocation.
    pub fn was_kicked(&self, session: u64) -> bool {
        self.kicked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&session)
    }

    /// Forgets a finished session's revocation mark.
    pub fn forget_session(&self, session: u64) {
        self.kicked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&session);
    }

    /// Expects `node` (which has live tasks) to come back within the timeout, counting from now.
    pub fn expect(&self, node: &str) {
        let mut executors = self.executors();
        executors
            .entry(node.to_owned())
            .or_insert_with(|| Executor {
                session: 0,
                commands: None,
                last_seen: Instant::now(),
                gpu_model: String::new(),
                sent: HashSet::new(),
                usage: Vec::new(),
                host: None,
                history: std::collections::VecDeque::new(),
                tasks: HashMap::new(),
                incarnation: String::new(),
                peer: String::new(),
                tasks_checked: None,
            });
    }

    pub fn touch(&self, node: &str, session: u64) {
        if let Some(executor) = self.executors().get_mut(node)
            && executor.session == session
        {
            executor.last_seen = Instant::now();
        }
    }

    /// How long ago the node's executor was last heard from (a heartbeat or any message of its
    /// session), and whether that session is open; `None` for a node this hub has no session with.
    pub fn last_seen(&self, node: &str) -> Option<(Duration, bool)> {
        self.executors()
            .get(node)
            .map(|e| (e.last_seen.elapsed(), e.commands.is_some()))
    }

    /// The nodes with an open session that `due` picks by name and when their executor was last
    /// heard from (wall time); only those names are copied.
    pub fn heard(
        &self,
        mut due: impl FnMut(&str, chrono::DateTime<chrono::Utc>) -> bool,
    ) -> Vec<(String, chrono::DateTime<chrono::Utc>)> {
        let now = chrono::Utc::now();
        self.executors()
            .iter()
            .filter(|(_, e)| e.commands.is_some())
            .filter_map(|(name, e)| {
                let heard = now - chrono::Duration::from_std(e.last_seen.elapsed()).ok()?;
                due(name, heard).then(|| (name.clone(), heard))
            })
            .collect()
    }

    /// Whether the tasks a heartbeat names (`digest`) are those the store last expected of `node`,
    /// less than [`TASKS_RECHECKED_EVERY`] ago: then there is nothing to read again.
    pub fn tasks_checked(&self, node: &str, digest: u64) -> bool {
        self.executors()
            .get(node)
            .and_then(|e| e.tasks_checked)
            .is_some_and(|(last, at)| last == digest && at.elapsed() < TASKS_RECHECKED_EVERY)
    }

    /// The store expected every task a heartbeat of `node` named (`digest`).
    pub fn set_tasks_checked(&self, node: &str, digest: u64) {
        if let Some(executor) = self.executors().get_mut(node) {
            executor.tasks_checked = Some((digest, Instant::now()));
        }
    }

    /// Records what the executor's last heartbeat said about its GPUs and its host, and adds a
    /// point to its recent history when the last is [`HISTORY_EVERY`] old.
    pub fn set_usage(&self, node: &str, session: u64, heartbeat: &drover_proto::Heartbeat) {
        let (usage, host) = (&heartbeat.gpus, heartbeat.host);
        if let Some(executor) = self.executors().get_mut(node)
            && executor.session == session
        {
            executor.usage.clear();
            executor.usage.extend_from_slice(usage);
            executor.host = host;
            let now = chrono::Utc::now();
            let due = executor.history.back().is_none_or(|last| {
                (now - last.at)
                    .to_std()
                    .is_ok_and(|age| age >= HISTORY_EVERY)
            });
            // A task the heartbeat no longer measures (ended, or not running) is forgotten.
            let measured: HashMap<TaskUseKey, drover_proto::TaskUsage> = heartbeat
                .tasks
                .iter()
                .filter_map(|status| Some((task_use_key(status.task.as_ref()?), status.usage?)))
                .collect();
            executor.tasks.retain(|key, _| measured.contains_key(key));
            for (key, latest) in measured {
                let task = executor.tasks.entry(key).or_insert_with(|| TaskUse {
                    latest,
                    history: std::collections::VecDeque::new(),
                });
                task.latest = latest;
                // A task's first measurement starts its history at once; then at the node's moments.
                if due || task.history.is_empty() {
                    if task.history.len() == HISTORY_POINTS {
                        task.history.pop_front();
                    }
                    task.history.push_back(TaskPoint {
                        at: now,
                        usage: latest,
                    });
                }
            }
            if due {
                if executor.history.len() == HISTORY_POINTS {
                    executor.history.pop_front();
                }
                executor
                    .history
                    .push_back(UsagePoint::of(now, usage, host.as_ref()));
            }
        }
    }

    /// GPU utilisation and memory in use, as last reported; empty when unknown.
    pub fn usage(&self, node: &str) -> Vec<drover_proto::GpuUsage> {
        self.executors()
            .get(node)
            .map(|e| e.usage.clone())
            .unwrap_or_default()
    }

    /// What a task on `node` uses, as its executor last reported (a running task's), and its recent
    /// history (oldest first).
    pub fn task_usage(
        &self,
        node: &str,
        task: &TaskKey,
    ) -> Option<(drover_proto::TaskUsage, Vec<TaskPoint>)> {
        let key = (
            task.job_id.0.to_string(),
            task.generation,
            task.role.as_str().to_owned(),
            task.index,
        );
        self.executors()
            .get(node)
            .and_then(|e| e.tasks.get(&key))
            .map(|t| (t.latest, t.history.iter().copied().collect()))
    }

    /// The node's CPU and memory use as last reported, and its recent history (oldest first).
    pub fn host_usage(&self, node: &str) -> (Option<drover_proto::HostUsage>, Vec<UsagePoint>) {
        self.executors().get(node).map_or((None, Vec::new()), |e| {
            (e.host, e.history.iter().copied().collect())
        })
    }

    pub fn is_current(&self, node: &str, session: u64) -> bool {
        self.executors()
            .get(node)
            .is_some_and(|e| e.session == session && e.commands.is_some())
    }

    /// Nodes with an open session.
    pub fn connected(&self) -> HashMap<String, String> {
        self.executors()
            .iter()
            .filter(|(_, e)| e.commands.is_some())
            .map(|(name, e)| (name.clone(), e.gpu_model.clone()))
            .collect()
    }

    pub fn gpu_model(&self, node: &str) -> String {
        self.executors()
            .get(node)
            .map(|e| e.gpu_model.clone())
            .unwrap_or_default()
    }

    /// Removes and returns the nodes not heard from within `timeout`.
    pub fn expire(&self, timeout: Duration) -> Vec<String> {
        let now = Instant::now();
        let mut executors = self.executors();
        let expired: Vec<String> = executors
            .iter()
            .filter(|(_, e)| now.duration_since(e.last_seen) > timeout)
            .map(|(name, _)| name.clone())
            .collect();
        for name in &expired {
            executors.remove(name);
        }
        expired
    }

    /// Whether `command` for `task` was already sent to `node` in its current session: a caller
    /// that would only [`Hub::send_once`] it again need not build the message.
    pub fn was_sent(&self, node: &str, task: TaskKey, command: Command) -> bool {
        self.executors()
            .get(node)
            .is_some_and(|e| e.commands.is_some() && e.sent.contains(&(task, command)))
    }

    /// Sends `message` to `node` unless `command` for `task` was already sent in the current session.
    /// Returns whether it was sent. A full queue disconnects the executor; it resynchronises when it
    /// reconnects.
    pub fn send_once(
        &self,
        node: &str,
        task: TaskKey,
        command: Command,
        message: ServerMessage,
    ) -> bool {
        let mut executors = self.executors();
        let Some(executor) = executors.get_mut(node) else {
            return false;
        };
        let Some(commands) = &executor.commands else {
            return false;
        };
        if executor.sent.contains(&(task, command)) {
            return false;
        }
        match commands.try_send(Ok(message)) {
            Ok(()) => {
                executor.sent.insert((task, command));
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    node.name = node,
                    "executor is not reading its commands; disconnecting it"
                );
                executor.commands = None;
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                executor.commands = None;
                false
            }
        }
    }

    /// Sends a message outside the per-task bookkeeping (refusals).
    /// Returns whether the message was queued to the node's open session.
    pub fn send(&self, node: &str, message: ServerMessage) -> bool {
        if let Some(Executor {
            commands: Some(commands),
            ..
        }) = self.executors().get(node)
        {
            commands.try_send(Ok(message)).is_ok()
        } else {
            false
        }
    }

    /// Sends `message` to `node` if `session` is still its open session; a full queue skips it.
    pub fn send_in_session(&self, node: &str, session: u64, message: ServerMessage) -> bool {
        match self.executors().get(node) {
            Some(Executor {
                session: current,
                commands: Some(commands),
                ..
            }) if *current == session => commands.try_send(Ok(message)).is_ok(),
            _ => false,
        }
    }

    /// Forgets that commands were sent for tasks that are gone, so the sets stay small.
    pub fn forget(&self, node: &str, task: &TaskKey) {
        if let Some(executor) = self.executors().get_mut(node) {
            executor.sent.retain(|(key, _)| key != task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_proto as pb;

    fn beat(tasks: &[(&str, f64)]) -> pb::Heartbeat {
        pb::Heartbeat {
            gpus: Vec::new(),
            tasks: tasks
                .iter()
                .map(|(job, memory_gb)| pb::TaskStatus {
                    task: Some(pb::TaskKey {
                        job_id: (*job).to_owned(),
                        generation: 1,
                        role: "worker".to_owned(),
                        index: 0,
                    }),
                    phase: pb::TaskPhase::Running as i32,
                    address: String::new(),
                    usage: Some(pb::TaskUsage {
                        cpu_cores: 1.0,
                        memory_gb: *memory_gb,
                        ..pb::TaskUsage::default()
                    }),
                })
                .collect(),
            host: None,
        }
    }

    fn key(job: uuid::Uuid) -> TaskKey {
        TaskKey {
            job_id: drover_core::JobId(job),
            generation: 1,
            role: drover_store::TaskRole::Worker,
            index: 0,
        }
    }

    /// `node` connected to `hub`: its session and the receiving end of its commands.
    fn connect(hub: &Hub, node: &str) -> (u64, mpsc::Receiver<Result<ServerMessage, Status>>) {
        let (tx, rx) = mpsc::channel(4);
        let session = hub
            .connect(
                node,
                tx,
                String::new(),
                "i",
                String::new(),
                Duration::from_secs(30),
            )
            .unwrap();
        (session, rx)
    }

    /// Moves the node's moments back, as if `by` had passed since its last point.
    fn age(hub: &Hub, node: &str, by: chrono::Duration) {
        let mut executors = hub.executors();
        let executor = executors.get_mut(node).unwrap();
        for point in &mut executor.history {
            point.at -= by;
        }
        for task in executor.tasks.values_mut() {
            for point in &mut task.history {
                point.at -= by;
            }
        }
    }

    #[test]
    fn a_tasks_use_gains_a_point_at_the_nodes_moments_and_goes_with_the_task() {
        let hub = Hub::new();
        let (session, _commands) = connect(&hub, "n");
        let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let (a_text, b_text) = (a.to_string(), b.to_string());
        hub.set_usage("n", session, &beat(&[(&a_text, 1.0)]));
        // Heartbeats within the moment update the latest use only.
        hub.set_usage("n", session, &beat(&[(&a_text, 1.5)]));
        let (latest, history) = hub.task_usage("n", &key(a)).unwrap();
        assert_eq!(latest.memory_gb, 1.5);
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].usage.memory_gb, 1.0);
        // A task that starts between moments has its first point at once.
        hub.set_usage("n", session, &beat(&[(&a_text, 1.5), (&b_text, 4.0)]));
        assert_eq!(hub.task_usage("n", &key(b)).unwrap().1.len(), 1);
        age(&hub, "n", chrono::Duration::seconds(11));
        hub.set_usage("n", session, &beat(&[(&a_text, 2.0), (&b_text, 4.0)]));
        let (_, history) = hub.task_usage("n", &key(a)).unwrap();
        let memory: Vec<f64> = history.iter().map(|p| p.usage.memory_gb).collect();
        assert_eq!(memory, [1.0, 2.0]);
        assert_eq!(hub.task_usage("n", &key(b)).unwrap().1.len(), 2);
        // A task the heartbeat no longer lists is forgotten with its history.
        hub.set_usage("n", session, &beat(&[(&b_text, 4.0)]));
        assert!(hub.task_usage("n", &key(a)).is_none());
        // The history keeps its last points only.
        for _ in 0..HISTORY_POINTS + 5 {
            age(&hub, "n", chrono::Duration::seconds(11));
            hub.set_usage("n", session, &beat(&[(&b_text, 4.0)]));
        }
        assert_eq!(
            hub.task_usage("n", &key(b)).unwrap().1.len(),
            HISTORY_POINTS
        );
    }

    /// `was_sent` answers what `send_once` would refuse: this command for this task, sent in this
    /// session; not another command, not another task, not after the session is gone.
    #[test]
    fn a_command_sent_once_is_known_as_sent_in_its_session() {
        let hub = Hub::new();
        let _commands = connect(&hub, "n");
        let (a, b) = (key(uuid::Uuid::new_v4()), key(uuid::Uuid::new_v4()));
        assert!(!hub.was_sent("n", a, Command::Prepare));
        assert!(hub.send_once("n", a, Command::Prepare, ServerMessage { body: None }));
        assert!(hub.was_sent("n", a, Command::Prepare));
        assert!(!hub.was_sent("n", a, Command::Start));
        assert!(!hub.was_sent("n", b, Command::Prepare));
        assert!(!hub.was_sent("m", a, Command::Prepare));
        assert!(!hub.send_once("n", a, Command::Prepare, ServerMessage { body: None }));
        hub.disconnect_all();
        assert!(!hub.was_sent("n", a, Command::Prepare));
    }
}
