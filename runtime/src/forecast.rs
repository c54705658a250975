//! The queue forecast, beside the scheduling loop and never in it: after each round the loop offers
//! its snapshot and plan (cloned only when the forecaster is free to take them); the forecaster
//! predicts the head of the queue from every offer it takes and the whole queue at most every
//! [`FULL_EVERY`] (at once when the cluster's nodes change), on a thread of its own, and records the
//! result for any replica to serve. It uses at most a quarter of the machine's cores (between the
//! replay's rounds it rests in proportion to the CPU time it used, so a forecast of minutes keeps
//! to it too), and its thread runs at a lower OS priority than the server's others: requests and
//! rounds preempt it when the cores are busy.

use crate::wording::serde_name;
use chrono::{DateTime, Utc};
use drover_core::{JobId, TenantId};
use drover_scheduler::forecast::{self, Finished, ForecastConfig, Priors, Remaining};
use drover_scheduler::{ClusterSnapshot, Plan};
use drover_store::{QueueEntry, QueueForecast, Store, StoreResult};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The whole queue is predicted at most this often; the head after every round.
pub const FULL_EVERY: Duration = Duration::from_secs(30);
/// Waiting jobs, first in the policy's order, predicted after every round.
pub const HEAD: usize = 10;
/// The share of the machine's cores the forecaster may use.
const CORE_SHARE: f64 = 0.25;
/// The forecaster thread's nice value: under Linux's scheduler a thread at nice 10 gets about a
/// tenth of a core a busy thread at 0 (the server's others) leaves it, and all of an idle one.
const NICE: i32 = 10;

/// The share of its time the forecaster's one thread may compute: `CORE_SHARE · cores` of a core
/// (all of it from four cores on). The cores are read once (on Linux, from the cgroup's files).
fn duty() -> f64 {
    static DUTY: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *DUTY.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        (CORE_SHARE * cores).min(1.0)
    })
}

thread_local! {
    /// When the forecast computing on this thread began, and the thread's CPU time then.
    static PACED_SINCE: std::cell::Cell<Option<(Instant, Duration)>> = const { std::cell::Cell::new(None) };
}

/// Paces the calling thread's work between the replay's rounds ([`pace`]) while it lives: set when
/// a forecast starts computing, cleared when it ends, however it ends.
struct Paced;

impl Paced {
    fn start() -> Self {
        PACED_SINCE.set(Some((Instant::now(), thread_cpu())));
        Paced
    }
}

impl Drop for Paced {
    fn drop(&mut self) {
        PACED_SINCE.set(None);
    }
}

/// Between the replay's rounds: rests the forecaster's thread until the CPU time it used since the
/// forecast began is within [`duty`] of the time that has passed (a whole-queue forecast of 12,000
/// jobs took minutes, and kept a core busy throughout, before it rested after). What it counts is
/// this thread's time: the threads a policy starts for itself (the model cache's fits, split over
/// the cores when a hundred jobs or more want one) are not counted.
fn pace() {
    let Some((wall, cpu)) = PACED_SINCE.get() else {
        return;
    };
    let used = thread_cpu().saturating_sub(cpu);
    let owed = used.div_f64(duty()).saturating_sub(wall.elapsed());
    if !owed.is_zero() {
        std::thread::sleep(owed);
    }
}

/// Finished jobs as history, by job: (tenant, GPUs of the preferred shape, GPU-seconds per such
/// GPU, submission time on the snapshot's clock).
type History = HashMap<JobId, (TenantId, u32, f64, f64)>;

/// How far back the tenants' history of finished jobs goes, and how many jobs at most. It is read
/// whole every [`HISTORY_EVERY`] (dropping what aged out) and, between, only the jobs that ended
/// since the last read, at most every [`HISTORY_FRESH_EVERY`]: a sweep's members that just ended are
/// what estimates its running ones.
const HISTORY_EVERY: Duration = Duration::from_secs(600);
const HISTORY_FRESH_EVERY: Duration = Duration::from_secs(10);
const HISTORY_DAYS: i64 = 30;
const HISTORY_JOBS: u32 = 20_000;

/// A read since the last one starts this long before it: an allocation is closed (and its job
/// marked succeeded) a little after it ends. Jobs read twice are simply replaced.
const HISTORY_OVERLAP: chrono::Duration = chrono::Duration::minutes(5);

/// The cached history and when it was read.
#[derive(Debug)]
struct HistoryCache {
    jobs: History,
    full_at: Instant,
    read_at: Instant,
    /// The wall-clock time of the last read.
    read_wall: DateTime<Utc>,
}

impl HistoryCache {
    /// Due for a whole read: old, or grown past twice a whole read's size by the reads between.
    fn stale(&self) -> bool {
        self.full_at.elapsed() >= HISTORY_EVERY || self.jobs.len() > 2 * HISTORY_JOBS as usize
    }
}

/// What one round hands the forecaster.
#[derive(Debug)]
pub(super) struct Input {
    pub snapshot: ClusterSnapshot,
    pub plan: Plan,
    /// The loop's policy, forked with its state.
    pub policy: Box<dyn drover_scheduler::Policy>,
    /// Each snapshot tenant's id, by index.
    pub tenants: Vec<TenantId>,
    /// Queued jobs whose tasks are still stopping (a preemption's victims until their tasks exit):
    /// the snapshot holds them where they ran, so the plan does not have them waiting yet.
    pub stopping: Vec<JobId>,
}

/// The loop's side: offers, and whether the forecaster wants one.
#[derive(Debug, Default)]
pub(super) struct Offers {
    slot: Mutex<Option<Input>>,
    busy: AtomicBool,
    ready: Notify,
}

impl Offers {
    /// Whether an offer would be taken now (the forecaster is idle): only then is it worth cloning
    /// the snapshot.
    pub fn wanted(&self) -> bool {
        !self.busy.load(Ordering::Acquire)
    }

    pub fn offer(&self, input: Input) {
        if let Ok(mut slot) = self.slot.lock() {
            *slot = Some(input);
        }
        self.ready.notify_one();
    }

    pub fn take(&self) -> Option<Input> {
        self.slot.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// What the cluster offers the queue: its schedulable nodes, GPUs and CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Capacity {
    nodes: usize,
    gpus: u32,
    cpus: u32,
}

impl Capacity {
    fn of(snapshot: &ClusterSnapshot) -> Self {
        Capacity {
            nodes: snapshot.nodes.iter().filter(|n| n.schedulable).count(),
            gpus: snapshot.total_gpus(),
            cpus: snapshot.total_cpus(),
        }
    }
}

/// Whether the next forecast is of the whole queue: none yet, the last [`FULL_EVERY`] old, or the
/// cluster changed since it.
fn whole_due(last: Option<Instant>, seen: Option<Capacity>, now: Capacity) -> bool {
    last.is_none_or(|at| at.elapsed() >= FULL_EVERY) || seen != Some(now)
}

/// The forecaster's own thread, at [`NICE`]: it runs one computation at a time, handed over by
/// [`Worker::run`]. A thread of its own rather than the runtime's blocking pool, whose threads other
/// work reuses (a thread's priority, once lowered, may not be raised again without privilege).
#[derive(Debug)]
struct Worker {
    work: std::sync::mpsc::SyncSender<Box<dyn FnOnce() + Send>>,
}

impl Worker {
    fn start() -> std::io::Result<Self> {
        let (work, todo) = std::sync::mpsc::sync_channel::<Box<dyn FnOnce() + Send>>(1);
        std::thread::Builder::new()
            .name("drover-forecast".to_owned())
            .spawn(move || {
                // On Linux the nice value is the calling thread's alone.
                let thread = rustix::thread::gettid();
                if let Err(err) = rustix::process::setpriority_process(Some(thread), NICE) {
                    tracing::warn!(error = %err, "the forecaster runs at the server's priority: cannot lower its thread's");
                }
                while let Ok(job) = todo.recv() {
                    job();
                }
            })?;
        Ok(Worker { work })
    }

    /// `f` on the worker's thread; `Err` when it panicked (or the thread is gone).
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Box<dyn FnOnce() + Send> = Box::new(move || {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            // The caller waits for it; a caller gone (shutting down) needs no answer.
            let _ = done.send(out.map_err(|panic| {
                panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned())
            }));
        });
        // One at a time: the forecaster awaits each before handing over the next.
        self.work
            .try_send(job)
            .map_err(|err| format!("the forecast thread took no work: {err}"))?;
        result
            .await
            .map_err(|_| "the forecast thread ended".to_owned())?
    }
}

/// The forecaster's state between offers.
#[derive(Debug)]
pub(super) struct Forecaster {
    store: Arc<dyn Store>,
    offers: Arc<Offers>,
    last_full: Option<Instant>,
    /// The cluster the last whole forecast saw: a change (a node joined, left, was cordoned or
    /// lost) makes the next forecast whole, however recent the last.
    full_capacity: Option<Capacity>,
    /// The latest prediction per job (from a full or a head forecast).
    known: HashMap<JobId, QueueEntry>,
    history: Option<HistoryCache>,
    /// `None` where no thread could be started: forecasts then run on the blocking pool.
    worker: Option<Worker>,
    /// The CPU time the last forecast's computing took.
    used: Duration,
}

/// The CPU time the calling thread has used (the forecaster's budget is kept by it; the
/// scheduling loop's debug line times its planning with it).
pub(crate) fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn time_of(seconds: Option<f64>) -> Option<DateTime<Utc>> {
    let ms = seconds.filter(|s| s.is_finite())? * 1000.0;
    DateTime::from_timestamp_millis(ms as i64)
}

impl Forecaster {
    pub fn new(store: Arc<dyn Store>, offers: Arc<Offers>) -> Self {
        Self {
            store,
            offers,
            last_full: None,
            full_capacity: None,
            known: HashMap::new(),
            history: None,
            worker: Worker::start()
                .inspect_err(|err| {
                    tracing::warn!(error = %err, "no thread of its own for the forecaster: it shares the blocking pool");
                })
                .ok(),
            used: Duration::ZERO,
        }
    }

    /// Forecasts every offer until `stop` resolves.
    pub async fn run(mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = self.offers.ready.notified() => {}
                () = &mut stop => return,
            }
            let Some(input) = self.offers.take() else {
                continue;
            };
            self.offers.busy.store(true, Ordering::Release);
            let capacity = Capacity::of(&input.snapshot);
            let full = whole_due(self.last_full, self.full_capacity, capacity);
            let started = Instant::now();
            match self.forecast(input, full).await {
                Ok(()) if full => self.full_capacity = Some(capacity),
                Ok(()) => {}
                Err(err) => tracing::warn!(error = %err, "the queue forecast failed"),
            }
            // A budget: the forecast is a convenience, so it takes at most a quarter of the
            // machine's cores however long the queue (it runs on one: on two cores half its time,
            // from four on all of it). The replay rested as it went; what is still owed (the work
            // before and after it) is rested here. A cheap one still follows every round.
            let rest = self.used.div_f64(duty()).saturating_sub(started.elapsed());
            tokio::select! {
                () = tokio::time::sleep(rest) => {}
                () = &mut stop => return,
            }
            self.offers.busy.store(false, Ordering::Release);
        }
    }

    /// Finished jobs' lengths: read whole every [`HISTORY_EVERY`], and the jobs ended since the last
    /// read every [`HISTORY_FRESH_EVERY`].
    async fn history(&mut self) -> StoreResult<Vec<(TenantId, u32, f64, f64)>> {
        let now = Utc::now();
        let since = match &self.history {
            Some(cache) if !cache.stale() => {
                if cache.read_at.elapsed() < HISTORY_FRESH_EVERY {
                    return Ok(cache.jobs.values().copied().collect());
                }
                Some(cache.read_wall - HISTORY_OVERLAP)
            }
            _ => None,
        };
        let read = self
            .store
            .finished_jobs_since(
                since.unwrap_or(now - chrono::Duration::days(HISTORY_DAYS)),
                HISTORY_JOBS,
            )
            .await?;
        let entry = |job: &drover_store::FinishedJob| {
            let gpus = job.gpus.max(1);
            let submit_s = job.submitted_at.timestamp_millis() as f64 / 1000.0;
            (job.tenant, gpus, job.gpu_s / f64::from(gpus), submit_s)
        };
        let cache = match (since, self.history.take()) {
            (Some(_), Some(mut cache)) => {
                for job in &read {
                    cache.jobs.insert(job.job, entry(job));
                }
                HistoryCache {
                    read_at: Instant::now(),
                    read_wall: now,
                    ..cache
                }
            }
            _ => HistoryCache {
                jobs: read.iter().map(|job| (job.job, entry(job))).collect(),
                full_at: Instant::now(),
                read_at: Instant::now(),
                read_wall: now,
            },
        };
        let jobs = cache.jobs.values().copied().collect();
        self.history = Some(cache);
        Ok(jobs)
    }

    /// One forecast of the whole queue (`full`) or of its head, recorded in the store.
    pub async fn forecast(&mut self, mut input: Input, full: bool) -> StoreResult<()> {
        // Nothing computed yet: a forecast that fails before it computes owes no rest.
        self.used = Duration::ZERO;
        let stopping = std::mem::take(&mut input.stopping);
        let history = self.history().await?;
        let started = Instant::now();
        let compute = move || {
            let cpu_started = thread_cpu();
            let paced = Paced::start();
            let index: HashMap<TenantId, u32> = input
                .tenants
                .iter()
                .enumerate()
                .map(|(i, id)| (*id, i as u32))
                .collect();
            let history: Vec<Finished> = history
                .iter()
                .filter_map(|&(tenant, gpus, seconds, submit_s)| {
                    Some(Finished {
                        tenant: *index.get(&tenant)?,
                        gpus,
                        seconds,
                        submit_s,
                    })
                })
                .collect();
            let priors = Priors::from_history(&history, &input.snapshot.jobs);
            let remaining: HashMap<JobId, Remaining> = input
                .snapshot
                .jobs
                .iter()
                .map(|job| (job.id, forecast::estimate(job, &priors)))
                .collect();
            let config = ForecastConfig {
                head: (!full).then_some(HEAD),
                round_s: 60.0,
                between_rounds: Some(forecast::BetweenRounds(pace)),
                ..ForecastConfig::default()
            };
            let result = forecast::forecast(
                &input.snapshot,
                &input.plan,
                input.policy.as_ref(),
                &remaining,
                &config,
                &[],
            );
            drop(paced);
            let name = input.policy.name().to_owned();
            drop(input);
            (name, result, thread_cpu().saturating_sub(cpu_started))
        };
        let computed = match &self.worker {
            Some(worker) => worker.run(compute).await,
            None => tokio::task::spawn_blocking(compute)
                .await
                .map_err(|err| err.to_string()),
        };
        let (policy, result, cpu) = match computed {
            Ok(done) => done,
            Err(err) => {
                tracing::error!(error = %err, "the queue forecast panicked");
                // How long it computed is not known: rest as if all of it were.
                self.used = started.elapsed();
                return Ok(());
            }
        };
        self.used = cpu;
        let forecast = match result {
            Ok(forecast) => forecast,
            Err(err) => {
                tracing::warn!(error = %err, "cannot forecast with this policy");
                return Ok(());
            }
        };
        if full {
            self.last_full = Some(Instant::now());
        }
        tracing::debug!(
            full,
            waiting = forecast.waiting.len(),
            rounds = forecast.rounds,
            took_ms = started.elapsed().as_millis() as u64,
            cpu_ms = cpu.as_millis() as u64,
            "queue forecast"
        );
        let head = if full { usize::MAX } else { HEAD };
        let made_at = Utc::now();
        let mut entries = Vec::with_capacity(forecast.waiting.len());
        for (i, p) in forecast.waiting.iter().enumerate() {
            let fresh = QueueEntry {
                job: p.job,
                position: p.position,
                reason: serde_name(&p.reason),
                start: time_of(p.start_s),
                finish: time_of(p.finish_s),
                p10: time_of(p.start_p10_s),
                p90: time_of(p.start_p90_s),
                guesses: p.guesses,
                made_at: Some(made_at),
            };
            // Beyond the head, a head forecast keeps the last full forecast's times.
            let entry = match self.known.get(&p.job) {
                Some(old) if i >= head => QueueEntry {
                    position: p.position,
                    reason: fresh.reason,
                    ..old.clone()
                },
                _ => fresh,
            };
            entries.push(entry);
        }
        // A job preempted a round ago is queued, but waiting in no plan until its tasks have
        // exited: it keeps its last prediction, after the waiting jobs, rather than drop out of
        // the queue's answers for those seconds ("not yet considered").
        let waiting: std::collections::HashSet<JobId> = entries.iter().map(|e| e.job).collect();
        for job in stopping {
            if let Some(old) = self.known.get(&job).filter(|_| !waiting.contains(&job)) {
                entries.push(QueueEntry {
                    position: entries.len() as u32 + 1,
                    ..old.clone()
                });
            }
        }
        self.known = entries.iter().map(|e| (e.job, e.clone())).collect();
        let finishing: BTreeMap<JobId, DateTime<Utc>> = forecast
            .finishing
            .iter()
            .filter_map(|(job, s)| Some((*job, time_of(Some(*s))?)))
            .collect();
        self.store
            .record_forecast(&QueueForecast {
                policy,
                computed_at: made_at,
                entries,
                finishing,
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node joining, leaving or cordoned makes the next forecast whole at once; otherwise the
    /// head alone until [`FULL_EVERY`] has passed.
    #[test]
    fn a_changed_cluster_is_forecast_whole_at_once() {
        use drover_scheduler::cluster::uniform_cluster;
        let mut snapshot = ClusterSnapshot {
            now_s: 0.0,
            nodes: uniform_cluster(2, 4, 16, 64),
            tenants: Vec::new(),
            jobs: Vec::new(),
        };
        let before = Capacity::of(&snapshot);
        let just = Some(Instant::now());
        assert!(whole_due(None, None, before));
        assert!(!whole_due(just, Some(before), before));
        snapshot.nodes.extend(uniform_cluster(3, 4, 16, 64).pop());
        let joined = Capacity::of(&snapshot);
        assert!(whole_due(just, Some(before), joined));
        snapshot.nodes[0].schedulable = false;
        assert!(whole_due(just, Some(joined), Capacity::of(&snapshot)));
        let long_ago = Instant::now().checked_sub(FULL_EVERY);
        assert!(long_ago.is_none() || whole_due(long_ago, Some(before), before));
    }

    /// Work paced between the replay's rounds keeps to the forecaster's share of a core: its CPU
    /// time over the time that passed is at most [`duty`] (all of a core from four cores on).
    #[test]
    fn paced_work_keeps_to_its_share_of_a_core() {
        let began = (Instant::now(), thread_cpu());
        let paced = Paced::start();
        let mut spun = 0u64;
        while thread_cpu().saturating_sub(began.1) < Duration::from_millis(300) {
            for i in 0..100_000u64 {
                spun = std::hint::black_box(spun.wrapping_add(i));
            }
            pace();
        }
        drop(paced);
        let used = thread_cpu().saturating_sub(began.1);
        let took = began.0.elapsed();
        assert!(
            took.as_secs_f64() >= used.as_secs_f64() / duty() * 0.95,
            "{used:?} of CPU in {took:?}, more than {} of a core",
            duty()
        );
        // Not paced outside a forecast.
        let before = Instant::now();
        pace();
        assert!(before.elapsed() < Duration::from_millis(50));
    }
}
