//! The scheduling loop: on every wake-up and at least every tick, bring its view of the active
//! jobs, live tasks and nodes up to date from what changed (`view`), declare silent executors lost,
//! write the heartbeats heard (every 15 s a node, for the other replicas to show), start moving
//! jobs off draining nodes, reconcile every job that has tasks, then build a snapshot, ask the
//! configured policy for a plan, and persist its changes (a new generation of tasks, or the tasks
//! that must stop) before dispatching them.

use super::Runtime;
use super::forecast::{Forecaster, Input, Offers};
use super::observe::Seen;
use super::snapshot;
use chrono::Utc;
use drover_core::{JobId, JobState, ReasonCode};
use drover_scheduler::{Plan, Policy, build_policy};
use drover_store::{Job, Scope, StoreResult, Task};
use futures::{StreamExt, TryStreamExt};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

mod apply;
mod report;
mod saved;
mod view;
use apply::apply;
use view::ActiveView;

#[derive(Debug)]
pub struct SchedulingLoop {
    runtime: Arc<Runtime>,
    policy: Box<dyn Policy>,
    previous: Plan,
    /// When GPU use was last sampled for the dashboard.
    sampled_at: Option<tokio::time::Instant>,
    /// Rounds handed to the queue forecaster.
    offers: Arc<Offers>,
    /// What the last round spent building its snapshot and planning: the CPU work that grows with
    /// the queue, which the gap before the next round is scaled by.
    planning: std::time::Duration,
    /// The policy's state as last saved to the store; `None` until restored from it this term.
    saved: Option<saved::Saved>,
    /// The generations with live tasks at the last round, and when the ledger's open allocations
    /// were last checked for ones whose tasks have all ended.
    live_generations: HashSet<(JobId, u64)>,
    ledger_checked: Option<tokio::time::Instant>,
    /// The active jobs, live tasks and nodes as of the last round.
    view: ActiveView,
    /// What the last round recorded for the dashboard showed.
    recorded: Option<report::Recorded>,
}

impl SchedulingLoop {
    /// Fails when the configured policy is unknown or needs an oracle (only the simulator has one).
    pub fn new(runtime: Arc<Runtime>) -> Result<Self, drover_scheduler::policy::PolicyError> {
        let policy = build_policy(&runtime.config.policy, None)?;
        Ok(Self {
            runtime,
            policy,
            previous: Plan::default(),
            sampled_at: None,
            offers: Arc::new(Offers::default()),
            planning: std::time::Duration::ZERO,
            saved: None,
            live_generations: HashSet::new(),
            ledger_checked: None,
            view: ActiveView::default(),
            recorded: None,
        })
    }

    /// Runs rounds until `shutdown` resolves, while this replica leads. A failed round is logged and
    /// retried on the next tick. Losing the lead ends every executor session, so executors go to the
    /// new leader; gaining it starts from the store, as after a restart.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        // The forecaster lives as long as the loop: it stops when `_forecasting` is dropped.
        let (_forecasting, stopped) = tokio::sync::watch::channel(());
        let mut stopped = stopped;
        tokio::spawn(
            Forecaster::new(self.runtime.store.clone(), self.offers.clone()).run(async move {
                let _ = stopped.changed().await;
            }),
        );
        let mut leader = self.runtime.leader.clone();
        loop {
            while !*leader.borrow_and_update() {
                tokio::select! {
                    changed = leader.changed() => if changed.is_err() { return },
                    () = &mut shutdown => return,
                }
            }
            // What an earlier term knew is stale: executors, the last plan, the policy's state
            // (the first round restores what the last leader saved).
            self.runtime.hub.reset();
            self.previous = Plan::default();
            self.saved = None;
            self.view = ActiveView::default();
            self.recorded = None;
            expect_executors(&self.runtime.clone()).await;
            loop {
                let started = tokio::time::Instant::now();
                if let Err(err) = self.round().await {
                    tracing::error!(error = %err, "scheduling round failed");
                    // Spaced like a round that planned all that time: a store that fails (each
                    // retry reads the view whole) is not asked again four times a second.
                    self.planning = started.elapsed();
                }
                // Wake-ups come with every submission: under a burst the rounds still leave a gap
                // (a quarter tick, at most 250 ms, or three times what the round spent building its
                // snapshot and planning, whichever is longer), so the loop batches the burst instead
                // of competing with it, however long the queue grows: rounds come at least every
                // tick while planning takes under a third of it, and a queue long enough to take
                // longer is planned at most a third of the time. The rest of a round (reading what
                // changed, marking started jobs running, storing the starts) is work in proportion
                // to what changed, done once: a round after a burst of thousands of starts took
                // seconds of it, and three times that again held back the next burst's starts.
                let tick = self.runtime.config.tick;
                let gap = (tick / 4)
                    .min(std::time::Duration::from_millis(250))
                    .max(self.planning * 3)
                    .max(std::time::Duration::from_millis(50));
                let mut moved = tokio::select! {
                    () = tokio::time::sleep_until(started + gap) => false,
                    changed = leader.changed() => if changed.is_err() { return } else { true },
                    () = &mut shutdown => {
                        self.runtime.hub.disconnect_all();
                        return;
                    }
                };
                if !moved {
                    moved = tokio::select! {
                        () = tokio::time::sleep_until(started + tick) => false,
                        () = self.runtime.hub.wake.notified() => false,
                        changed = leader.changed() => if changed.is_err() { return } else { true },
                        () = &mut shutdown => {
                            self.runtime.hub.disconnect_all();
                            return;
                        }
                    };
                }
                // Any change of the lead, even lost and regained in between, starts a new term:
                // sessions end here and the outer loop starts afresh if this replica leads again.
                if moved || leader.has_changed().unwrap_or(true) {
                    tracing::warn!("the lead changed: ending the executors' sessions here");
                    self.runtime.hub.disconnect_all();
                    break;
                }
            }
        }
    }

    /// One round; public for tests that drive the loop step by step.
    pub async fn round(&mut self) -> StoreResult<()> {
        let started = tokio::time::Instant::now();
        let runtime = self.runtime.clone();
        self.planning = std::time::Duration::ZERO;
        let mut laps = Laps::new(started);
        if self.saved.is_none() {
            let (policy, saved) = saved::restore(&runtime).await?;
            self.policy = policy;
            self.saved = Some(saved);
        }
        // Taken for the round: a round that fails leaves the next one to read it whole.
        let mut view = std::mem::take(&mut self.view);
        view.refresh(&runtime).await?;
        end_revoked_sessions(&runtime).await?;
        pass_on_checkpoint_requests(&runtime).await?;
        expire_executors(&runtime).await?;
        record_heartbeats(&runtime, view.nodes()).await?;
        drain(&runtime, view.nodes()).await?;
        // What housekeeping wrote (jobs moved off draining nodes, nodes lost): reconciling acts on
        // the jobs as they now are.
        view.refresh(&runtime).await?;
        let housekeeping = laps.lap();
        let reconciled = reconcile_all(&runtime, view.jobs(), view.live()).await?;
        let reconciling = laps.lap();
        // What reconciling wrote, and whatever else changed meanwhile, in one snapshot: a cordon (or drain) stored before a job was submitted is always seen by the
        // round that places that job.
        view.refresh(&runtime).await?;
        let refreshing = laps.0.elapsed().as_millis() as u64;
        let (jobs, live, nodes) = (view.jobs(), view.live(), view.nodes());
        self.close_allocations(live).await?;
        let finishing: HashSet<JobId> = runtime.store.finishing_jobs().await?.into_iter().collect();
        let tenants = runtime.store.list_tenants().await?;
        let connected = runtime.hub.connected();
        let observing_since = tokio::time::Instant::now();
        let seen = observe(&runtime, jobs).await?;
        let observing = observing_since.elapsed().as_millis() as u64;
        let specs = runtime.specs(jobs);
        let reading = laps.lap();
        // Building the snapshot and planning are CPU work that grows with the queue (tens of
        // milliseconds for tens of thousands of jobs): off the async workers, so requests are not
        // held up behind them.
        let policy = &mut self.policy;
        let previous = &self.previous;
        let (built, plan, state, cpu) = cpu_bound(|| {
            let cpu_started = crate::forecast::thread_cpu();
            let mut built = snapshot::build(
                Utc::now(),
                nodes,
                &connected,
                &tenants,
                snapshot::Active {
                    jobs,
                    specs: &specs,
                },
                live,
                &seen,
            );
            runtime.search_hints.apply(&mut built.snapshot.jobs);
            // A job some of whose tasks have ended (workers done before the leader, or one failed)
            // is not resized for the tasks it no longer has: it is left alone until it is settled.
            built.held.extend(finishing);
            let built_at = crate::forecast::thread_cpu();
            let plan = policy.schedule(&built.snapshot, previous);
            let planned_at = crate::forecast::thread_cpu();
            let state = policy.save();
            let cpu = [
                built_at.saturating_sub(cpu_started),
                planned_at.saturating_sub(built_at),
                crate::forecast::thread_cpu().saturating_sub(planned_at),
            ]
            .map(|d| d.as_millis() as u64);
            (built, plan, state, cpu)
        });
        let planning = laps.lap();
        self.planning = std::time::Duration::from_millis(planning);
        // Saved before the plan is carried out: a leader that dies while starting it leaves the
        // next one the queue this plan was made from.
        if let Some(saved) = &mut self.saved {
            saved.save(&runtime, state).await;
        }
        let saving = laps.lap();
        apply(&runtime, self.policy.name(), &built, &plan, live).await?;
        let applying = laps.lap();
        report::record_round(
            &self.runtime,
            self.policy.name(),
            &mut self.sampled_at,
            &mut self.recorded,
            report::Round {
                built: &built,
                plan: &plan,
                jobs,
                live,
                started,
            },
        )
        .await;
        if self.offers.wanted()
            && let Ok(policy) = self.policy.fork(None)
        {
            self.offers.offer(Input {
                snapshot: built.snapshot.clone(),
                plan: plan.clone(),
                policy,
                tenants: tenants.iter().map(|t| t.id).collect(),
                stopping: built
                    .held
                    .iter()
                    .filter(|id| {
                        built
                            .jobs
                            .get(id)
                            .is_some_and(|j| j.state == JobState::Queued)
                    })
                    .copied()
                    .collect(),
            });
        }
        self.previous = plan;
        let recording = laps.lap();
        runtime
            .round_seconds
            .observe(started.elapsed().as_secs_f64());
        tracing::debug!(
            jobs = jobs.len(),
            live = live.len(),
            reconciled,
            took_ms = started.elapsed().as_millis() as u64,
            housekeeping_ms = housekeeping,
            reconciling_ms = reconciling,
            reading_ms = reading,
            refreshing_ms = refreshing,
            observing_ms = observing,
            planning_ms = planning,
            building_cpu_ms = cpu[0],
            policy_cpu_ms = cpu[1],
            policy_saving_cpu_ms = cpu[2],
            saving_ms = saving,
            applying_ms = applying,
            recording_ms = recording,
            "scheduling round"
        );
        self.view = view;
        Ok(())
    }
}

impl SchedulingLoop {
    /// Closes the ledger's allocations whose tasks have all ended: when the generations with live
    /// tasks changed since the last round (one ended, or a job moved to a new one), and at least
    /// every [`LEDGER_CHECKED_EVERY`] for a generation that began and ended between two rounds.
    /// Finding them reads every open allocation (8,000 in the fleet benchmark: 16 ms of every round
    /// while nothing ended). An allocation's end is its tasks' last change, whenever it is closed.
    async fn close_allocations(&mut self, live: &[Task]) -> StoreResult<()> {
        let generations: HashSet<(JobId, u64)> = live
            .iter()
            .map(|t| (t.key.job_id, t.key.generation))
            .collect();
        let due = generations != self.live_generations
            || self
                .ledger_checked
                .is_none_or(|at| at.elapsed() >= LEDGER_CHECKED_EVERY);
        self.live_generations = generations;
        if due {
            super::ledger::close_allocations(&self.runtime).await?;
            self.ledger_checked = Some(tokio::time::Instant::now());
        }
        Ok(())
    }
}

/// The longest the ledger's open allocations go unchecked.
const LEDGER_CHECKED_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The milliseconds each part of a round took, for its debug line.
struct Laps(tokio::time::Instant);

impl Laps {
    fn new(started: tokio::time::Instant) -> Self {
        Self(started)
    }

    /// Milliseconds since the last lap (or the round's start).
    fn lap(&mut self) -> u64 {
        let now = tokio::time::Instant::now();
        let ms = (now - self.0).as_millis() as u64;
        self.0 = now;
        ms
    }
}

/// Runs `work` where it does not stall the async runtime's other tasks: on a multi-threaded runtime
/// the worker hands its queue to another thread for the duration; on a single-threaded one (tests)
/// there is no other worker to hand it to, so it runs in place.
pub(super) fn cpu_bound<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// Every node with live tasks must come back within the heartbeat timeout, or be declared lost.
async fn expect_executors(runtime: &Runtime) {
    match runtime.store.live_tasks().await {
        Ok(live) => {
            for task in live {
                runtime.hub.expect(&task.node_name);
            }
        }
        Err(err) => tracing::error!(error = %err, "cannot read live tasks on taking the lead"),
    }
}

/// Ends the session of every connected node whose credential was revoked, on whichever replica the
/// revocation was asked of.
async fn end_revoked_sessions(runtime: &Runtime) -> StoreResult<()> {
    let connected = runtime.hub.connected();
    if connected.is_empty() {
        return Ok(());
    }
    let live: HashSet<String> = runtime
        .store
        .live_node_credentials()
        .await?
        .into_iter()
        .map(|c| c.node_name)
        .collect();
    for node in connected.keys().filter(|node| !live.contains(*node)) {
        tracing::warn!(
            node.name = node,
            "ending the session of a node whose credential was revoked"
        );
        runtime.hub.kick(node);
    }
    Ok(())
}

/// Passes users' checkpoint requests (taken by any replica) on to the running tasks.
async fn pass_on_checkpoint_requests(runtime: &Runtime) -> StoreResult<()> {
    for (job_id, at) in runtime.store.checkpoint_requests().await? {
        match runtime.store.get_job(Scope::Cluster, job_id).await {
            Ok(job) if job.state == JobState::Running => {
                let asked = crate::dispatch::request_checkpoint(runtime, &job).await?;
                // No session to its executors yet (just after a change of leader): the next round
                // tries again, for a while.
                let fresh = Utc::now() - at < chrono::Duration::minutes(5);
                if asked == 0 && fresh {
                    continue;
                }
                tracing::info!(job.id = %job_id, tasks = asked, "asked the job's tasks to checkpoint");
            }
            Ok(_) | Err(drover_store::StoreError::NotFound) => {}
            Err(err) => return Err(err),
        }
        runtime.store.clear_checkpoint_request(job_id, at).await?;
    }
    Ok(())
}

/// Reads what arrived from every job that has run since the last round: its speed and loss samples
/// and its last checkpoint.
async fn observe(runtime: &Runtime, jobs: &[Job]) -> StoreResult<HashMap<JobId, Seen>> {
    let ran: Vec<JobId> = jobs
        .iter()
        .filter(|j| j.generation > 0)
        .map(|j| j.id)
        .collect();
    let seen = runtime
        .observer
        .observe_jobs(runtime.store.as_ref(), &ran)
        .await?;
    runtime
        .observer
        .retain(&jobs.iter().map(|j| j.id).collect());
    Ok(seen)
}

async fn expire_executors(runtime: &Runtime) -> StoreResult<()> {
    let timeout = runtime.config.executor_timeout;
    for node in runtime.hub.expire(timeout) {
        tracing::warn!(
            node.name = node,
            timeout_s = timeout.as_secs_f64(),
            "executor lost"
        );
        runtime
            .store
            .set_node_health(&node, "lost", Utc::now())
            .await?;
        let lost = runtime.store.lose_node_tasks(&node).await?;
        let why = format!(
            "executor lost: {node} sent no heartbeat for {}",
            humantime::format_duration(timeout)
        );
        crate::gateway::requeue_after_loss(runtime, &lost, &why).await?;
    }
    Ok(())
}

/// How stale a node's stored heartbeat may grow before the leader writes the one it heard: what
/// another replica (which holds no sessions) shows as the node's last heartbeat lags by at most
/// this and a round.
const HEARTBEAT_WRITE_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(15);

/// Writes, in one statement, the heartbeats heard since the stored ones grew stale.
async fn record_heartbeats(runtime: &Runtime, nodes: &[drover_store::Node]) -> StoreResult<()> {
    let stored: HashMap<&str, Option<chrono::DateTime<Utc>>> = nodes
        .iter()
        .map(|n| (n.name.as_str(), n.last_heartbeat_at))
        .collect();
    let due = runtime.hub.heard(|name, heard| match stored.get(name) {
        None => false,
        Some(None) => true,
        Some(Some(at)) => heard - *at >= HEARTBEAT_WRITE_EVERY,
    });
    if due.is_empty() {
        return Ok(());
    }
    runtime.store.record_heartbeats(&due).await
}

/// Jobs with tasks on a draining node go back to `queued` through a checkpoint; the cordon keeps
/// them from coming back to it.
async fn drain(runtime: &Runtime, nodes: &[drover_store::Node]) -> StoreResult<()> {
    let draining: Vec<&str> = nodes
        .iter()
        .filter(|n| n.draining)
        .map(|n| n.name.as_str())
        .collect();
    if draining.is_empty() {
        return Ok(());
    }
    let live = runtime.store.live_tasks().await?;
    let mut moved = BTreeMap::new();
    for task in live
        .iter()
        .filter(|t| draining.contains(&t.node_name.as_str()))
    {
        moved
            .entry(task.key.job_id)
            .or_insert((task.key.generation, task.node_name.clone()));
    }
    for (job_id, (generation, node)) in moved {
        let job = runtime.store.get_job(Scope::Cluster, job_id).await?;
        if job.generation != generation || !super::dispatch::is_active(job.state) {
            continue;
        }
        let message =
            format!("node {node} is draining: the job moves elsewhere from its checkpoint");
        if let Some(job) = crate::transition::transition(
            runtime,
            &job,
            JobState::Queued,
            ReasonCode::Migrated,
            message,
            false,
        )
        .await?
        {
            tracing::info!(job.id = %job.id, node.name = node, "moving a job off a draining node");
        }
    }
    Ok(())
}

/// Whether reconciling this job would change nothing: it runs, and every live task is of its
/// current generation, running and not asked to stop. Most of a busy cluster's jobs are, and
/// reconciling each would read its tasks from the store every round (8,000 reads a round for 8,000
/// running jobs in the fleet benchmark).
fn settled_running(job: &Job, live: &[Task]) -> bool {
    job.state == JobState::Running
        && live.iter().all(|t| {
            t.key.generation == job.generation
                && t.state == drover_store::TaskState::Running
                && !t.stop_requested
        })
}

/// Jobs reconciled at once, leaving the rest of the database pool to the API.
const RECONCILED_AT_ONCE: usize = 8;
/// Jobs whose generations are read in one query, and marked running in one transaction.
const RUNNING_AT_ONCE: usize = 500;

/// Runs [`Runtime::reconcile_job`] for every job with live tasks and every job that is starting;
/// returns how many jobs with live tasks were reconciled.
async fn reconcile_all(runtime: &Runtime, jobs: &[Job], live: &[Task]) -> StoreResult<usize> {
    // In job order (the store's): each job's tasks are one run of the list.
    let by_id: HashMap<JobId, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
    let mut with_tasks: HashSet<JobId> = HashSet::new();
    let mut unsettled: Vec<(Job, &[Task])> = Vec::new();
    for tasks in live.chunk_by(|a, b| a.key.job_id == b.key.job_id) {
        let job_id = tasks[0].key.job_id;
        with_tasks.insert(job_id);
        let job = match by_id.get(&job_id) {
            Some(&job) => {
                if settled_running(job, tasks) {
                    continue;
                }
                job.clone()
            }
            None => runtime.store.get_job(Scope::Cluster, job_id).await?,
        };
        unsettled.push((job, tasks));
    }
    // Each job's reconciliation is its own reads and writes (thousands of jobs marked running
    // after a burst of starts): a few at a time rather than one after another.
    // The jobs whose every task now runs are marked running together, a few hundred to a
    // transaction (a transaction each held up the rounds after a burst of starts for seconds).
    let count = unsettled.len();
    // Their current generations' tasks, read together (a query each held up the round after a
    // burst of starts for seconds).
    let timed = tokio::time::Instant::now();
    let mut generations: HashMap<JobId, Vec<Task>> = HashMap::new();
    let wanted: Vec<(JobId, u64)> = unsettled
        .iter()
        .filter(|(job, _)| crate::dispatch::is_active(job.state))
        .map(|(job, _)| (job.id, job.generation))
        .collect();
    for chunk in wanted.chunks(RUNNING_AT_ONCE) {
        for &(job, _) in chunk {
            generations.entry(job).or_default();
        }
        for task in runtime.store.tasks_of_generations(chunk).await? {
            generations.entry(task.key.job_id).or_default().push(task);
        }
    }
    let read_ms = timed.elapsed().as_millis() as u64;
    let running = std::sync::Mutex::new(Vec::new());
    futures::stream::iter(unsettled)
        .map(Ok)
        .try_for_each_concurrent(RECONCILED_AT_ONCE, |(job, tasks)| {
            let running = &running;
            let generation = generations.get(&job.id).map(Vec::as_slice);
            async move {
                if let Some(change) =
                    crate::dispatch::reconcile_tasks(runtime, &job, tasks, generation, None).await?
                {
                    running
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((job.id, job.generation, change));
                }
                StoreResult::Ok(())
            }
        })
        .await?;
    let running = running
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let reconciled_ms = timed.elapsed().as_millis() as u64 - read_ms;
    for batch in running.chunks(RUNNING_AT_ONCE) {
        crate::dispatch::mark_many_running(runtime, batch).await?;
    }
    if count > 0 {
        tracing::debug!(
            jobs = count,
            running = running.len(),
            read_ms,
            reconciled_ms,
            marked_ms = timed.elapsed().as_millis() as u64 - read_ms - reconciled_ms,
            "jobs with live tasks reconciled"
        );
    }
    // Active jobs with no live task left: their outcome was not recorded (a failed write, a crash
    // between a task's exit and the job's transition). Decide it now.
    for job in jobs
        .iter()
        .filter(|j| super::dispatch::is_active(j.state) && !with_tasks.contains(&j.id))
    {
        let tasks = runtime
            .store
            .generation_tasks(job.id, job.generation)
            .await?;
        // Exits younger than a few seconds are still being settled by their report's handler.
        let settled_late = Utc::now() - chrono::Duration::seconds(5);
        if tasks
            .iter()
            .all(|t| t.state.is_final() && t.updated_at < settled_late)
        {
            crate::settle::settle(runtime, job, &tasks, None).await?;
        } else if job.state == JobState::Starting {
            crate::dispatch::reconcile_job(runtime, job, &[]).await?;
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests;
