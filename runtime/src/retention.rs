//! Bounded growth: what the leader deletes as it ages. Log lines older than the log retention (of any
//! job: a week-long job's early lines go too), and the metric samples of jobs that ended longer ago
//! than the metric retention (a job still active keeps every sample: its speed and convergence models
//! are fitted to them). Each statement deletes a bounded batch, in its own short transaction, with a
//! pause between batches, so pruning a large backlog never holds a long lock nor a core. Job rows,
//! their events, checkpoint records, the accounting ledger and the audit log are kept.

use drover_core::JobId;
use drover_store::{Store, StoreResult};
use std::time::Duration;

/// How long what the leader deletes is kept; `None`: forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub logs: Option<Duration>,
    /// After the job ended.
    pub metrics: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Retention {
    /// 30 days of log lines; an ended job's samples for 90 days after it ended (the server's
    /// defaults).
    pub const DEFAULT: Retention = Retention {
        logs: Some(Duration::from_secs(30 * 86_400)),
        metrics: Some(Duration::from_secs(90 * 86_400)),
    };
    pub const FOREVER: Retention = Retention {
        logs: None,
        metrics: None,
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
}

/// Jobs looked up per query for their samples.
const JOBS_AT_ONCE: u32 = 100;

/// One pass: deletes what `retention` no longer keeps at `now`, `batches.rows` rows a statement.
pub async fn prune(
    store: &dyn Store,
    retention: Retention,
    batches: Batches,
    now: chrono::DateTime<chrono::Utc>,
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
    Ok(pruned)
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
        );
        tokio::select! {
            result = pass => match result {
                Ok(pruned) if pruned != Pruned::default() => tracing::info!(
                    log_lines = pruned.log_lines,
                    metric_samples = pruned.metric_samples,
                    jobs = pruned.jobs,
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
