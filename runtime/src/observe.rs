//! What the control plane learns of each job from its leader's metric samples: the mean step time at
//! every (PS, workers) shape it ran at, its (step, loss) curve, the steps it has done and how long it
//! has run. Samples are read incrementally (a read fetches only what arrived since the last one), and
//! the same aggregates feed the scheduling loop's snapshot (Optimus's speed and convergence models in
//! the policies) and `GET /api/v1/jobs/{id}` (the fitted models and the remaining time). The
//! scheduling loop reads again only the jobs whose reports arrived since its last read
//! ([`Observer::observe_jobs`]), so a round over thousands of running jobs reads what changed.

use chrono::{DateTime, Utc};
use drover_core::JobId;
use drover_scheduler::Shape;
use drover_scheduler::cluster::GpuModelTag;
use drover_scheduler::snapshot::{LossSamples, Observations, StepStats};
use drover_store::{MetricFilter, MetricSample, Scope, Store, StoreResult, TaskRole};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The metric names read: the loss feeds the convergence curve, the step time the speed model.
const LOSS: &str = "loss";
const STEP_TIME: &str = "step_time_ms";
/// Samples read per query.
const PAGE: u32 = 2000;
/// Loss samples kept per job; beyond it every other one is dropped (and later ones thinned alike).
const MAX_LOSS_SAMPLES: usize = 256;

/// A job the scheduling loop read is read again this long after, touched or not (a report stored
/// by another replica, or a checkpoint removed), but at most [`REREADS_PER_ROUND`] such jobs a
/// round, the longest unread first.
const REREAD_AFTER: Duration = Duration::from_secs(60);
const REREADS_PER_ROUND: usize = 256;
/// Jobs read from the store at once by the scheduling loop.
const READS_AT_ONCE: usize = 8;
/// Jobs whose new samples one query reads, and the most samples it returns (past that, the jobs
/// of that query are read one by one).
const JOBS_A_QUERY: usize = 500;
const SAMPLES_A_QUERY: u32 = 20_000;

/// Per job aggregates, updated by [`Observer::refresh`].
#[derive(Debug, Default)]
pub struct Observer {
    jobs: Mutex<HashMap<JobId, Tracked>>,
    /// What the scheduling loop read of each job, and which jobs' reports arrived since.
    reads: Mutex<Reads>,
}

#[derive(Debug, Default)]
struct Reads {
    /// Jobs with samples stored since the loop last read them.
    touched: HashSet<JobId>,
    /// When the loop last read each job whole, and its latest checkpoint's time (kept up to date
    /// by [`Observer::checkpointed`] in between).
    read: HashMap<JobId, (Instant, Option<DateTime<Utc>>)>,
}

/// What the scheduling loop knows of a job: its aggregates and when it last checkpointed.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub observed: Observed,
    pub last_checkpoint: Option<DateTime<Utc>>,
}

/// Step times measured at one shape and GPU model.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    samples: u32,
    sum_s: f64,
    spread_samples: u32,
    spread_sum_s: f64,
}

#[derive(Debug, Clone, Default)]
struct Tracked {
    /// The id of the last sample read.
    cursor: Option<i64>,
    /// Per (shape, GPU model): step times seen and their sum, and of them those measured with the
    /// workers on several nodes and their sum.
    shapes: BTreeMap<(Shape, GpuModelTag), Measured>,
    generations: BTreeMap<u64, Span>,
    losses: LossSamples,
    /// Keep one loss sample in this many.
    loss_stride: u64,
    losses_seen: u64,
    /// The step of the latest sample.
    steps_done: u64,
}

/// One generation's run: when its leader reported first and last, and at which shape.
#[derive(Debug, Clone, Copy)]
struct Span {
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    workers: u32,
    /// Step-time samples seen; the first of each run is skipped (it includes the warm-up).
    step_times: u32,
}

/// A copy of a job's aggregates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    pub steps_done: u64,
    pub step_stats: Vec<StepStats>,
    /// Shared with the tracker: a copy per job a round was most of reading thousands of jobs.
    pub loss_samples: LossSamples,
    /// Seconds between the first and last reports of every generation, summed.
    pub executed_s: f64,
    /// The same, each generation's span times its workers.
    pub worker_s: f64,
}

impl Observed {
    /// The scheduler's view, with what the caller knows besides (GPUs per worker, the step budget,
    /// the last checkpoint and state change).
    pub fn observations(
        &self,
        gpus_per_worker: u32,
        budget: Budget,
        last_state_change_s: f64,
        last_checkpoint_s: Option<f64>,
        restarts: u32,
    ) -> Observations {
        Observations {
            attained_gpu_s: self.worker_s * f64::from(gpus_per_worker),
            executed_s: self.executed_s,
            executed_since_promotion_s: 0.0,
            last_state_change_s,
            steps_done: self.steps_done,
            step_stats: self.step_stats.clone(),
            loss_samples: self.loss_samples.clone(),
            last_checkpoint_s,
            restarts,
            step_budget: budget.steps,
            runs_to_budget: budget.only_stop,
            // Of the document, not of the samples: the snapshot sets it (`program_of`).
            program: None,
        }
    }
}

/// Where a job stops at the latest: its `max_steps` (a `train` job's, or the one a `command` job
/// declares), and whether that is its only way to stop (no target to reach earlier).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    pub steps: Option<u64>,
    pub only_stop: bool,
}

impl Budget {
    pub fn of(spec: &drover_core::spec::DroverJob) -> Budget {
        let target = spec.spec.train.as_ref().is_some_and(|t| t.target.is_some());
        let steps = spec.max_steps();
        Budget {
            steps,
            only_stop: steps.is_some() && !target,
        }
    }

    /// Steps left after `done`: the budget's when it is the only stop, else the fewer of the
    /// budget's and the loss curve's (when there is one).
    pub fn remaining(self, done: u64, by_curve: Option<u64>) -> Option<(u64, bool)> {
        let left = self.steps.map(|s| s.saturating_sub(done));
        match (left, by_curve) {
            (Some(b), Some(c)) if !self.only_stop && c < b => Some((c, false)),
            (Some(b), _) => Some((b, true)),
            (None, Some(c)) => Some((c, false)),
            (None, None) => None,
        }
    }
}

/// A job's spec parsed once, with the program it runs ([`program_of`]), kept with its document
/// between rounds.
#[derive(Debug, Clone)]
pub struct ParsedSpec {
    pub spec: std::sync::Arc<drover_core::spec::DroverJob>,
    pub program: Option<u64>,
}

impl ParsedSpec {
    pub fn of(spec: drover_core::spec::DroverJob, tenant: drover_core::TenantId) -> ParsedSpec {
        ParsedSpec {
            program: program_of(&spec, tenant),
            spec: std::sync::Arc::new(spec),
        }
    }
}

/// Which program a job runs, as a key ([`Observations::program`]): jobs with the same key run at
/// about the same speed. A `train` job's is its model, data, batch, optimizer kind, evaluation
/// cadence and GPUs per worker (not its learning rate, seed, budget or target, which leave a step's
/// time alone); a `command` trial's is its tenant's experiment (its trials differ in their
/// hyper-parameters' values, seldom in speed); another `command` job's is its image, directory,
/// arguments and GPUs per worker. `None` for a document without either.
pub fn program_of(
    spec: &drover_core::spec::DroverJob,
    tenant: drover_core::TenantId,
) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    // Fixed keys: the same program gets the same key on every replica and after a restart.
    let mut hasher = std::hash::DefaultHasher::new();
    spec.spec.resources.gpus_per_worker.hash(&mut hasher);
    if let Some(train) = &spec.spec.train {
        let optimizer = serde_json::to_value(&train.optimizer).ok();
        let kind = optimizer.as_ref().and_then(|o| o.get("type"));
        serde_json::to_string(&(
            "train",
            &train.model,
            &train.dataset,
            kind,
            train.batch_size,
            train.eval_every,
            train.grad_clip_norm.is_some(),
        ))
        .ok()?
        .hash(&mut hasher);
    } else if let Some(command) = &spec.spec.command {
        match spec
            .metadata
            .labels
            .get(drover_core::experiment::EXPERIMENT_LABEL)
        {
            Some(experiment) => ("trial", tenant.0, experiment).hash(&mut hasher),
            None => ("command", &command.image, &command.workdir, &command.argv).hash(&mut hasher),
        }
    } else {
        return None;
    }
    Some(hasher.finish())
}

impl Tracked {
    fn add(&mut self, sample: &MetricSample) {
        self.cursor = Some(sample.id);
        if sample.role != TaskRole::Worker || sample.index != 0 {
            return;
        }
        self.steps_done = sample.step;
        let span = self.generations.entry(sample.generation).or_insert(Span {
            first: sample.recorded_at,
            last: sample.recorded_at,
            workers: sample.num_workers,
            step_times: 0,
        });
        span.first = span.first.min(sample.recorded_at);
        span.last = span.last.max(sample.recorded_at);
        match sample.name.as_str() {
            STEP_TIME if sample.value > 0.0 => {
                span.step_times += 1;
                if span.step_times > 1 {
                    let shape = Shape {
                        ps: sample.num_ps,
                        workers: sample.num_workers,
                    };
                    let gpu = if sample.gpu_model.is_empty() {
                        GpuModelTag::default()
                    } else {
                        GpuModelTag::of(&sample.gpu_model)
                    };
                    let entry = self.shapes.entry((shape, gpu)).or_default();
                    entry.samples += 1;
                    entry.sum_s += sample.value / 1000.0;
                    if sample.worker_nodes > 1 {
                        entry.spread_samples += 1;
                        entry.spread_sum_s += sample.value / 1000.0;
                    }
                }
            }
            LOSS if sample.value.is_finite() => {
                let stride = self.loss_stride.max(1);
                if self.losses_seen.is_multiple_of(stride) {
                    // Copied only when a snapshot still holds the samples as they were.
                    let losses = std::sync::Arc::make_mut(&mut self.losses);
                    losses.push((sample.step, sample.value));
                    if losses.len() > MAX_LOSS_SAMPLES {
                        let mut i = 0;
                        losses.retain(|_| {
                            i += 1;
                            i % 2 == 1
                        });
                        self.loss_stride = stride * 2;
                    }
                }
                self.losses_seen += 1;
            }
            _ => {}
        }
    }

    fn observed(&self) -> Observed {
        let seconds = |s: &Span| (s.last - s.first).num_milliseconds().max(0) as f64 / 1000.0;
        Observed {
            steps_done: self.steps_done,
            step_stats: self
                .shapes
                .iter()
                .map(|(&(shape, gpu), m)| StepStats {
                    shape,
                    shared: false,
                    samples: m.samples,
                    mean_step_s: m.sum_s / f64::from(m.samples.max(1)),
                    gpu,
                    spread_samples: m.spread_samples,
                    spread_mean_step_s: m.spread_sum_s / f64::from(m.spread_samples.max(1)),
                })
                .collect(),
            loss_samples: self.losses.clone(),
            executed_s: self.generations.values().map(seconds).sum(),
            worker_s: self
                .generations
                .values()
                .map(|s| seconds(s) * f64::from(s.workers))
                .sum(),
        }
    }
}

impl Observer {
    /// Reads the job's samples that arrived since the last call and returns its aggregates.
    pub async fn refresh(&self, store: &dyn Store, job: JobId) -> StoreResult<Observed> {
        let mut after = self.lock().get(&job).and_then(|t| t.cursor);
        let mut fresh = Vec::new();
        loop {
            let filter = MetricFilter {
                names: vec![LOSS.to_owned(), STEP_TIME.to_owned()],
                after,
                limit: PAGE,
                ..MetricFilter::default()
            };
            let page = store.list_metrics(Scope::Cluster, job, &filter).await?;
            let full = page.len() == PAGE as usize;
            after = page.last().map(|s| s.id).or(after);
            fresh.extend(page);
            if !full {
                break;
            }
        }
        let mut jobs = self.lock();
        let tracked = jobs.entry(job).or_default();
        // Another refresh may have read some of these meanwhile.
        let seen = tracked.cursor.unwrap_or(i64::MIN);
        for sample in fresh.iter().filter(|s| s.id > seen) {
            tracked.add(sample);
        }
        Ok(tracked.observed())
    }

    /// Reads the new samples of these jobs (each after its cursor) in one query and adds them;
    /// `false`, adding nothing, when more came back than one query takes.
    async fn read_new_samples(
        &self,
        store: &dyn Store,
        cursors: &[(JobId, i64)],
    ) -> StoreResult<bool> {
        let names = [LOSS.to_owned(), STEP_TIME.to_owned()];
        let fresh = store
            .metrics_after(cursors, &names, SAMPLES_A_QUERY)
            .await?;
        if fresh.len() >= SAMPLES_A_QUERY as usize {
            return Ok(false);
        }
        let mut jobs = self.lock();
        for (job, sample) in &fresh {
            let tracked = jobs.entry(*job).or_default();
            // Another read may have taken some of these meanwhile.
            if sample.id > tracked.cursor.unwrap_or(i64::MIN) {
                tracked.add(sample);
            }
        }
        Ok(true)
    }

    /// Drops what is kept of jobs not in `active`.
    pub fn retain(&self, active: &HashSet<JobId>) {
        self.lock().retain(|id, _| active.contains(id));
        let mut reads = self.reads();
        reads.touched.retain(|id| active.contains(id));
        reads.read.retain(|id, _| active.contains(id));
    }

    /// Samples of `job` were stored (by this replica, which takes the executors' reports): the
    /// scheduling loop reads them at its next round.
    pub fn touched(&self, job: JobId) {
        self.reads().touched.insert(job);
    }

    /// A checkpoint of `job` made at `at` was recorded (by this replica): the loop's latest.
    pub fn checkpointed(&self, job: JobId, at: DateTime<Utc>) {
        if let Some((_, latest)) = self.reads().read.get_mut(&job) {
            *latest = (*latest).max(Some(at));
        }
    }

    /// For the scheduling loop: each job's aggregates and latest checkpoint time. A job's samples
    /// are read from the store when it was never read, when a report touched it since the last
    /// read, or, a few a round, when its last read is [`REREAD_AFTER`] old; its latest checkpoint
    /// in the first and last of those cases (recorded checkpoints keep it up to date between); the
    /// others are answered from what was read before.
    pub async fn observe_jobs(
        &self,
        store: &dyn Store,
        jobs: &[JobId],
    ) -> StoreResult<HashMap<JobId, Seen>> {
        let now = Instant::now();
        // (job, whether to read it whole: its latest checkpoint too)
        let due: Vec<(JobId, bool)> = {
            let mut reads = self.reads();
            let mut due = Vec::new();
            let mut stale = Vec::new();
            for &job in jobs {
                match reads.read.get(&job) {
                    None => due.push((job, true)),
                    Some(&(at, _)) if now.duration_since(at) >= REREAD_AFTER => {
                        stale.push((at, job));
                    }
                    Some(_) if reads.touched.contains(&job) => due.push((job, false)),
                    Some(_) => {}
                }
            }
            stale.sort_unstable();
            let (reread, rest) = stale.split_at(stale.len().min(REREADS_PER_ROUND));
            due.extend(reread.iter().map(|&(_, job)| (job, true)));
            due.extend(
                rest.iter()
                    .filter(|(_, job)| reads.touched.contains(job))
                    .map(|&(_, job)| (job, false)),
            );
            // Cleared before the reads: a report stored meanwhile touches the job again.
            for (job, _) in &due {
                reads.touched.remove(job);
            }
            due
        };
        // Every due job's new samples, many jobs a query: each after its cursor, or from its first
        // sample when it was never read (thousands of jobs started by one round, or every active
        // job for a new leader, read one by one took seconds of a round).
        let cursors: Vec<(JobId, i64)> = {
            let tracked = self.lock();
            due.iter()
                .map(|&(job, _)| (job, tracked.get(&job).and_then(|t| t.cursor).unwrap_or(0)))
                .collect()
        };
        let unread = |jobs: &mut dyn Iterator<Item = JobId>| {
            self.reads().touched.extend(jobs);
        };
        let mut one_by_one = Vec::new();
        for chunk in cursors.chunks(JOBS_A_QUERY) {
            match self.read_new_samples(store, chunk).await {
                Ok(true) => {}
                // Too many to read at once: one by one.
                Ok(false) => one_by_one.extend(chunk.iter().map(|&(job, _)| job)),
                Err(err) => {
                    unread(&mut due.iter().map(|&(job, _)| job));
                    return Err(err);
                }
            }
        }
        let failures: Vec<(JobId, drover_store::StoreError)> = futures::stream::iter(one_by_one)
            .map(|job| async move { (job, self.refresh(store, job).await) })
            .buffer_unordered(READS_AT_ONCE)
            .filter_map(|(job, read)| async move { read.err().map(|err| (job, err)) })
            .collect()
            .await;
        // The latest checkpoints of the jobs read whole, many jobs a query.
        let whole: Vec<JobId> = due
            .iter()
            .filter(|&&(_, whole)| whole)
            .map(|&(job, _)| job)
            .collect();
        let checkpoints: HashMap<JobId, DateTime<Utc>> =
            match store.latest_checkpoint_times(&whole).await {
                Ok(times) => times.into_iter().collect(),
                Err(err) => {
                    unread(&mut due.iter().map(|&(job, _)| job));
                    return Err(err);
                }
            };
        let mut reads = self.reads();
        let mut failed = None;
        for job in whole {
            reads
                .read
                .insert(job, (now, checkpoints.get(&job).copied()));
        }
        for (job, err) in failures {
            // Read again at the next round.
            reads.touched.insert(job);
            failed = Some(err);
        }
        if let Some(err) = failed {
            return Err(err);
        }
        let tracked = self.lock();
        Ok(jobs
            .iter()
            .map(|job| {
                let seen = Seen {
                    observed: tracked.get(job).map(Tracked::observed).unwrap_or_default(),
                    last_checkpoint: reads.read.get(job).and_then(|&(_, at)| at),
                };
                (*job, seen)
            })
            .collect())
    }

    fn reads(&self) -> std::sync::MutexGuard<'_, Reads> {
        self.reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Tracked>> {
        // The map holds plain aggregates; one left half-updated by a panic is still usable.
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
