//! Bounded growth: what the leader deletes as it ages. Log lines older than the log retention (of any
//! job: a week-long job's early lines go too), and the metric samples of jobs that ended longer ago
//! than the metric retention. Before that, samples older than the thinning age (a day by default) are
//! thinned, of running jobs too: of each metric of each generation, the first and the last sample of
//! every ten minutes ([`THIN_BUCKET`]) are kept, so a long job's charts keep their shape, its
//! generations' first and last reports (its run time) and its step-time means stay, and a new leader
//! reads minutes' samples instead of every report. Each statement deletes a bounded batch, in its own
//! short transaction, with a pause between batches, so pruning a large backlog never holds a long lock
//! nor a core. Job rows, their events, checkpoint records, the accounting ledger and the audit log are
//! kept.

use drover_core::JobId;
use drover_store::{MetricFilter, Scope, Store, StoreResult};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::Duration;

/// How long what the leader deletes is kept; `None`: forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub logs: Option<Duration>,
    /// After the job ended.
    pub metrics: Option<Duration>,
    /// Samples older than this are thinned to the first and last of each metric's [`THIN_BUCKET`];
    /// `None`: every sample is kept while the job's are.
    pub thin_metrics: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Retention {
    /// 30 days of log lines; an ended job's samples for 90 days after it ended, thinned after a day
    /// (the server's defaults).
    pub const DEFAULT: Retention = Retention {
        logs: Some(Duration::from_secs(30 * 86_400)),
        metrics: Some(Duration::from_secs(90 * 86_400)),
        thin_metrics: Some(Duration::from_secs(86_400)),
    };
    pub const FOREVER: Retention = Retention {
        logs: None,
        metrics: None,
        thin_metrics: None,
    };
}

/// Rows a statement deletes at most, and the pause after a full batch.
#[derive(Debug, Clone, Copy)]
pub struct Batches {
    pub rows: u32,
    pub pause: Duration,
}

impl Default for Batches {
    fn default() -> Self {
        Self {
            rows: 5_000,
            pause: Duration::from_millis(50),
        }
    }
}

/// What one pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub log_lines: u64,
    pub metric_samples: u64,
    /// Ended jobs whose samples were deleted.
    pub jobs: u64,
    /// Samples thinned away (of jobs whose samples are otherwise kept).
    pub thinned_samples: u64,
}

/// Samples older than the thinning age keep, per job, generation and metric, the first and the last
/// of each of these spans (aligned to the clock).
pub const THIN_BUCKET: Duration = Duration::from_secs(600);

/// What thinning remembers between passes, so that a pass reads only samples the last one did not:
/// per job, the last sample read and each metric's open span.
#[derive(Debug, Default)]
pub struct Thinning {
    jobs: HashMap<JobId, JobThinning>,
}

#[derive(Debug, Default)]
struct JobThinning {
    cursor: Option<i64>,
    /// Per (generation, metric): the span (its index since the epoch), its first and its last
    /// sample so far.
    open: HashMap<(u64, String), (i64, i64, i64)>,
}

/// Jobs looked up per query for their samples.
const JOBS_AT_ONCE: u32 = 100;

/// One pass: deletes what `retention` no longer keeps at `now`, `batches.rows` rows a statement;
/// `thinning` carries what thinning read from one pass to the next.
pub async fn prune(
    store: &dyn Store,
    retention: Retention,
    batches: Batches,
    now: chrono::DateTime<chrono::Utc>,
    thinning: &mut Thinning,
) -> StoreResult<Pruned> {
    let mut pruned = Pruned::default();
    let before = |keep: Duration| {
        chrono::Duration::from_std(keep)
            .ok()
            .and_then(|keep| now.checked_sub_signed(keep))
    };
    if let Some(before) = retention.logs.and_then(before) {
        pruned.log_lines =
            drain(batches, || store.delete_logs_before(before, batches.rows)).await?;
    }
    if let Some(before) = retention.metrics.and_then(before) {
        loop {
            let jobs: Vec<JobId> = store.ended_jobs_with_samples(before, JOBS_AT_ONCE).await?;
            if jobs.is_empty() {
                break;
            }
            for job in jobs {
                pruned.metric_samples +=
                    drain(batches, || store.delete_job_samples(job, batches.rows)).await?;
                pruned.jobs += 1;
            }
        }
    }
    if let Some(before) = retention.thin_metrics.and_then(before) {
        pruned.thinned_samples = thin(store, before, batches, thinning).await?;
    }
    Ok(pruned)
}

/// Thins the samples of every job recorded before `before` (in whole [`THIN_BUCKET`]s): of each
/// generation's metric, the first and the last sample of each span are kept. Returns how many were
/// deleted. A sample that arrives late, in a span already passed, is kept.
async fn thin(
    store: &dyn Store,
    before: chrono::DateTime<chrono::Utc>,
    batches: Batches,
    thinning: &mut Thinning,
) -> StoreResult<u64> {
    let width = THIN_BUCKET.as_secs() as i64;
    let closed_below = before.timestamp().div_euclid(width);
    let mut seen: Vec<JobId> = Vec::new();
    let mut deleted = 0;
    let mut after = None;
    loop {
        let jobs = store.jobs_with_samples(before, after, JOBS_AT_ONCE).await?;
        let Some(&last) = jobs.last() else {
            break;
        };
        after = Some(last);
        for job in jobs {
            seen.push(job);
            let state = thinning.jobs.entry(job).or_default();
            loop {
                let filter = MetricFilter {
                    after: state.cursor,
                    limit: batches.rows,
                    ..MetricFilter::default()
                };
                let samples = store.list_metrics(Scope::Cluster, job, &filter).await?;
                let full = samples.len() == batches.rows as usize;
                let mut doomed = Vec::new();
                let mut reached_now = false;
                for sample in samples {
                    let span = sample.recorded_at.timestamp().div_euclid(width);
                    if span >= closed_below {
                        reached_now = true;
                        break;
                    }
                    state.cursor = Some(sample.id);
                    // A late sample, in a span already passed, is kept and changes nothing.
                    match state.open.entry((sample.generation, sample.name)) {
                        Entry::Occupied(mut entry) => {
                            let (open, first, last) = entry.get_mut();
                            if *open == span {
                                if *last != *first {
                                    doomed.push(*last);
                                }
                                *last = sample.id;
                            } else if *open < span {
                                *entry.get_mut() = (span, sample.id, sample.id);
                            }
                        }
                        Entry::Vacant(entry) => {
                            entry.insert((span, sample.id, sample.id));
                        }
                    }
                }
                deleted += store.delete_samples(job, &doomed).await?;
                if reached_now || !full {
                    break;
                }
                tokio::time::sleep(batches.pause).await;
            }
        }
    }
    // Jobs whose samples are all gone are forgotten.
    seen.sort_unstable();
    thinning
        .jobs
        .retain(|job, _| seen.binary_search(job).is_ok());
    Ok(deleted)
}

/// Runs `delete` (one batch) until a batch deletes fewer rows than a full one, pausing after each
/// full batch; returns the rows deleted.
async fn drain<F>(batches: Batches, mut delete: impl FnMut() -> F) -> StoreResult<u64>
where
    F: Future<Output = StoreResult<u64>>,
{
    let mut total = 0;
    loop {
        let deleted = delete().await?;
        total += deleted;
        if deleted < u64::from(batches.rows) {
            return Ok(total);
        }
        tokio::time::sleep(batches.pause).await;
    }
}

/// How often the leader prunes, and how long after it starts leading it first does.
const EVERY: Duration = Duration::from_secs(3600);
const FIRST_AFTER: Duration = Duration::from_secs(60);

/// Prunes every hour while this replica leads, until `shutdown` resolves. A failed pass is logged and
/// tried again at the next.
pub async fn run(
    store: std::sync::Arc<dyn Store>,
    retention: Retention,
    mut leader: tokio::sync::watch::Receiver<bool>,
    shutdown: impl Future<Output = ()>,
) {
    if retention == Retention::FOREVER {
        return;
    }
    tokio::pin!(shutdown);
    let mut thinning = Thinning::default();
    let mut next = tokio::time::Instant::now() + FIRST_AFTER;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = &mut shutdown => return,
        }
        next += EVERY;
        if !*leader.borrow_and_update() {
            continue;
        }
        let started = std::time::Instant::now();
        let pass = prune(
            store.as_ref(),
            retention,
            Batches::default(),
            chrono::Utc::now(),
            &mut thinning,
        );
        tokio::select! {
            result = pass => match result {
                Ok(pruned) if pruned != Pruned::default() => tracing::info!(
                    log_lines = pruned.log_lines,
                    metric_samples = pruned.metric_samples,
                    jobs = pruned.jobs,
                    thinned_samples = pruned.thinned_samples,
                    took_s = started.elapsed().as_secs_f64(),
                    "retention: deleted what is kept no longer"
                ),
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "retention: a pass failed; the next tries again"),
            },
            () = &mut shutdown => return,
        }
    }
}

#[cfg(test)]
mod tests;
