//! Group commit for job submissions.
//!
//! Concurrent submissions are stored together: each one waits on a bounded queue, and a few flusher
//! tasks take whatever has gathered (up to [`MAX_BATCH`]) and store it in one transaction. Nothing
//! waits for a batch to fill: under light load a batch is the one submission that came, so latency is
//! that of a lone insert; under heavy load the transactions, round trips and commit flushes per job
//! shrink with the batch. Every submission is answered only after its own transaction commits.
//!
//! A job the batch leaves out because it breaks a uniqueness rule (its name taken, its idempotency
//! key used before, possibly by a job in the same batch) is submitted again alone, through
//! [`Store::create_job`], which tells a retry (the first job) from a conflict (a 409). A batch that
//! fails as a whole (the database away) is also retried job by job, so each caller gets its own
//! answer.
//!
//! A database error does not say whether the transaction committed: the COMMIT may have been applied
//! and only its answer lost. Every job carries the id it was given before it was sent, so its
//! outcome is settled by that id ([`store_alone`]): once the database answers again, a job that is
//! there was stored (created, not a conflict with itself), and one that is not there was not, and is
//! inserted again under the same id. Only a database away for longer than [`SETTLE_FOR`] leaves the
//! outcome unknown, and the caller is told so with the job's id.

use drover_store::{Created, Job, NewJob, Scope, Store, StoreError, StoreResult};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{Mutex, mpsc, oneshot};

/// Jobs stored in one transaction at most.
pub const MAX_BATCH: usize = 64;
/// Transactions in flight at once: one commits while the next gathers.
const FLUSHERS: usize = 2;
/// Submissions waiting for a flusher at most; beyond that, submitting waits (backpressure).
const QUEUE: usize = 1024;
/// How long a submission whose outcome the database left unknown keeps asking it.
pub const SETTLE_FOR: Duration = Duration::from_secs(15);

struct Pending {
    job: NewJob,
    reply: oneshot::Sender<StoreResult<Created<Job>>>,
}

/// The submission queue of one server. Its flushers start with the first submission (inside the
/// server's runtime) and stop when the state holding this is dropped.
#[derive(Default)]
pub struct Submissions {
    queue: OnceLock<mpsc::Sender<Pending>>,
}

impl std::fmt::Debug for Submissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submissions")
            .field("started", &self.queue.get().is_some())
            .finish()
    }
}

impl Submissions {
    /// Stores `job` queued, with the others submitted at the same time.
    pub async fn create(&self, store: &Arc<dyn Store>, job: NewJob) -> StoreResult<Created<Job>> {
        let queue = self.queue.get_or_init(|| start(store.clone()));
        let (reply, answer) = oneshot::channel();
        if let Err(mpsc::error::SendError(pending)) = queue.send(Pending { job, reply }).await {
            return store_alone(store.as_ref(), &pending.job).await;
        }
        // A flusher always answers; a missing answer means it died mid-batch, and whether the job
        // was stored is unknown (a retry with an idempotency key is safe).
        answer
            .await
            .unwrap_or(Err(StoreError::Database(sqlx::Error::WorkerCrashed)))
    }
}

fn start(store: Arc<dyn Store>) -> mpsc::Sender<Pending> {
    let (queue, receiver) = mpsc::channel(QUEUE);
    let receiver = Arc::new(Mutex::new(receiver));
    for _ in 0..FLUSHERS {
        tokio::spawn(flush_loop(store.clone(), receiver.clone()));
    }
    queue
}

async fn flush_loop(store: Arc<dyn Store>, receiver: Arc<Mutex<mpsc::Receiver<Pending>>>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        // Whoever holds the receiver waits for the next submission, then takes all that are there.
        let taken = receiver.lock().await.recv_many(&mut batch, MAX_BATCH).await;
        if taken == 0 {
            return;
        }
        flush(store.as_ref(), &mut batch).await;
    }
}

async fn flush(store: &dyn Store, batch: &mut Vec<Pending>) {
    // Two batches inserting the same names in opposite orders could deadlock in the database (then
    // one fails and is retried job by job); inserting in name order, they cannot.
    batch.sort_unstable_by(|a, b| {
        (a.job.tenant_id, &a.job.name).cmp(&(b.job.tenant_id, &b.job.name))
    });
    let (jobs, replies): (Vec<NewJob>, Vec<_>) = batch.drain(..).map(|p| (p.job, p.reply)).unzip();
    let stored = match store.create_jobs(&jobs).await {
        Ok(stored) => stored,
        Err(err) => {
            tracing::warn!(error = %err, jobs = jobs.len(), "storing a batch of submissions failed; storing them one by one");
            vec![false; jobs.len()]
        }
    };
    for ((job, reply), stored) in jobs.iter().zip(replies).zip(stored) {
        let answer = if stored {
            Ok(Created {
                value: job.queued(),
                created: true,
            })
        } else {
            store_alone(store, job).await
        };
        // The caller may have gone (a closed connection): the job stays stored all the same.
        let _ = reply.send(answer);
    }
}

/// Stores `job` alone, settling an unknown outcome by the job's id: a database error (the
/// connection lost, possibly after the COMMIT was applied) or a uniqueness conflict (possibly with
/// this very job, stored by a batch whose answer was lost) is followed by a look-up of the id. A job
/// found there was stored by this submission; one not found is inserted again, as long as the
/// database keeps failing, for at most [`SETTLE_FOR`]. A conflict with another job stays a conflict.
pub async fn store_alone(store: &dyn Store, job: &NewJob) -> StoreResult<Created<Job>> {
    let deadline = tokio::time::Instant::now() + SETTLE_FOR;
    let mut pause = Duration::from_millis(50);
    loop {
        let error = match store.create_job(job).await {
            // Its own idempotency key found this very job: stored by an attempt whose answer was lost.
            Ok(replayed) if !replayed.created && replayed.value.id == job.id => {
                return Ok(Created {
                    value: replayed.value,
                    created: true,
                });
            }
            Ok(created) => return Ok(created),
            Err(err @ (StoreError::Database(_) | StoreError::Conflict { .. })) => err,
            Err(other) => return Err(other),
        };
        match store.get_job(Scope::Cluster, job.id).await {
            Ok(stored) => {
                tracing::info!(job.id = %job.id, error = %error, "a submission whose outcome was unknown had been stored");
                return Ok(Created {
                    value: stored,
                    created: true,
                });
            }
            // Not there: a conflict is with another job; a database error left nothing behind.
            Err(StoreError::NotFound) if matches!(error, StoreError::Conflict { .. }) => {
                return Err(error);
            }
            Err(StoreError::NotFound | StoreError::Database(_)) => {}
            Err(other) => return Err(other),
        }
        if tokio::time::Instant::now() + pause > deadline {
            return Err(error);
        }
        tracing::warn!(job.id = %job.id, error = %error, "storing a submission failed; asking the database again");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}
